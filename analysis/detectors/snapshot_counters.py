"""What one untimed copy of a cgroup or PSI file says on its own.

A ``cpu.stat`` or ``memory.events`` pasted into a ticket is a single snapshot with no time, so
no rate and no onset can be read from it. Its counters still count from the cgroup's creation
and its PSI averages still cover the last 10, 60 and 300 s before it was copied, so some of
its values are findings by themselves (time unknown, provenance ``read``):

* ``cpu_throttle`` — ``nr_throttled`` > 0: the cgroup ran out of its CPU quota in that many
  CFS periods (of ``nr_periods``), ``throttled_usec``/``throttled_time`` in all;
* ``oom_kill`` — ``memory.events`` (or v1 ``memory.oom_control``) ``oom_kill`` > 0: the
  memory-cgroup OOM killer killed that many processes in it (which ones: not in the file);
* ``cpu_pressure`` / ``memory_pressure`` — a PSI ``some`` average of at least
  ``PSI_SOME_PERCENT`` (or ``full`` of at least ``PSI_FULL_PERCENT``): tasks stalled for that
  share of the averaging window.

Worked example (``tests/data/realworld/dev/miha-site-blog005/cpu.stat``, a container limited to one
CPU running two busy threads): ``nr_periods 218``, ``nr_throttled 100``, ``throttled_usec
9911798`` give one ``cpu_throttle`` finding, "throttled in 100 of 218 CPU periods (45.9 %),
9.9 s in all, since it was created". Values in snapshots with a time are the
time-series detectors' (``cpu_throttle``, ``pressure``, ``oom_events``), not this module's.
"""
from __future__ import annotations

from aftertrace.analysis.links import Evidence, Link, LinkKind, Provenance
from aftertrace.analysis.present import has_rows

from ._series import entity_name

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.CPU_THROTTLE, LinkKind.OOM_KILL, LinkKind.CPU_PRESSURE, LinkKind.MEMORY_PRESSURE})

PSI_SOME_PERCENT = 10.0
PSI_FULL_PERCENT = 5.0
_METRICS = ("cpu.nr_periods", "cpu.nr_throttled", "cpu.throttled_ns", "memory.oom_kill",
            "psi.cpu.some.avg10", "psi.cpu.some.avg60", "psi.cpu.some.avg300",
            "psi.memory.some.avg10", "psi.memory.some.avg60", "psi.memory.some.avg300",
            "psi.memory.full.avg10", "psi.memory.full.avg60", "psi.memory.full.avg300")


def detect(store, incident_id: str, zone: str | None = None) -> list[Link]:
    if not has_rows(store, incident_id, "metrics"):
        return []
    rows = store.query(
        f"""SELECT s.path, COALESCE(m.host, s.host) AS host, m.entity, m.metric, max(m.value) AS value
            FROM metrics m JOIN sources s USING (incident_id, source_id)
            WHERE m.incident_id = ? AND m.ts_raw_ns IS NULL AND s.kind = 'cgroup'
              AND m.metric IN ({", ".join("?" * len(_METRICS))})
            GROUP BY ALL ORDER BY s.path, m.entity""", [incident_id, *_METRICS])
    by: dict[tuple, dict[str, float]] = {}
    for r in rows:
        by.setdefault((r["path"], r["host"], r["entity"]), {})[r["metric"]] = r["value"]
    out: list[Link] = []
    for (path, host, entity), v in by.items():
        name = entity_name(entity or "")
        thr = v.get("cpu.nr_throttled") or 0
        if thr > 0:
            per = v.get("cpu.nr_periods")
            share = f" of {per:.0f} CPU periods ({100 * thr / per:.1f} %)" if per else " CPU periods"
            took = v.get("cpu.throttled_ns")
            text = (f"The CPU quota of {name} ran out: throttled in {thr:.0f}{share}"
                    + (f", {took / 1e9:.1f} s in all" if took else "") + ", since it was created (one copy of "
                    "its cpu.stat, with no time)")
            ev = f"nr_throttled {thr:.0f}" + (f", nr_periods {per:.0f}" if per else "") + (
                f", throttled {took / 1e9:.3f} s" if took else "")
            out.append(_link(LinkKind.CPU_THROTTLE, text, path, host, entity, ev,
                             (("nr_throttled", int(thr)), ("nr_periods", int(per) if per else None))))
        kills = v.get("memory.oom_kill") or 0
        if kills > 0:
            text = (f"The memory-cgroup OOM killer killed {kills:.0f} process{'es' if kills > 1 else ''} in "
                    f"{name} (counted in one copy of its memory.events, with no time; which: not in the file)")
            out.append(_link(LinkKind.OOM_KILL, text, path, host, entity, f"oom_kill {kills:.0f}",
                             (("oom_kills", int(kills)), ("scope", "memcg"), ("victim_unknown", "counted only"))))
        for res, kind in (("cpu", LinkKind.CPU_PRESSURE), ("memory", LinkKind.MEMORY_PRESSURE)):
            worst = None
            for which, floor in (("some", PSI_SOME_PERCENT), ("full", PSI_FULL_PERCENT)):
                for win in ("avg10", "avg60", "avg300"):
                    x = v.get(f"psi.{res}.{which}.{win}")
                    if x is not None and x >= floor and (worst is None or x > worst[0]):
                        worst = (x, which, win)
            if worst:
                x, which, win = worst
                text = (f"{res.upper() if res == 'cpu' else res.capitalize()} pressure on {name}: {which} tasks "
                        f"stalled {x:.1f} % of the last {win[3:]} s before the copy was taken (PSI, no time)")
                out.append(_link(kind, text, path, host, entity, f"{which} {win}={x:.2f}",
                                 (("psi", f"{which} {win}"), ("percent", x))))
    return out


def _link(kind: LinkKind, text: str, path: str, host, entity, ev: str, attrs) -> Link:
    return Link(kind=kind, ts_ns=None, summary=text, source=path, host=host,
                evidence=(Evidence(path, None, ev),), provenance=Provenance.READ, confidence=0.9,
                entity=entity, attrs=tuple((k, x) for k, x in attrs if x is not None))
