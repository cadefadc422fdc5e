"""foreign_memory: the host's memory in use grows while the snapshotted cgroups do not.

Series: host memory in use, ``MemTotal - MemAvailable`` of ``/proc/meminfo`` copies, and the
usage of every cgroup the snapshots cover (``memory.usage_bytes``). Growth episodes of the
host's use are found like :mod:`.memory_growth`'s (d used / dt above ``max(16 MiB/s, median +
4 sigma)``, rising snapshots at most 2 apart). An episode is a finding when the host gained at
least ``MIN_GAIN`` (and ``MIN_SHARE`` of the host's memory) and the cgroups the bundle watched gained less than half of that over the
same interval: the memory went to processes the snapshots do not cover — another tenant, a
daemon, a page cache that is not reclaimable. Who they were is often in a later OOM report's
task table; :func:`analysis.attribution.foreign_tasks` names them.

Stamped at the first rising snapshot (the growth began within the interval that ends there).
"""
from __future__ import annotations

from aftertrace.analysis.kinds import FindingKind, Rule, Scope, declare
from aftertrace.analysis.links import Link, Provenance

from ._series import by_entity, episodes, evidence, fmt_bytes, hms, load, onset_window, threshold

# The kind it makes, declared here with all the analysis knows of it: only this module makes it.
FOREIGN_MEMORY = declare(FindingKind(
    "foreign_memory", "host memory was taken by processes outside the job",
    lambda l, r: f"memory on {l.host or 'the host'} taken by processes outside the job's cgroups", condition=True,
    rules=(
        Rule("foreign_memory", "oom_kill", Scope.HOST, 0.9, 900,
             "processes outside the job took the memory, and the OOM killer then chose a process of the job"),
        Rule("foreign_memory", "memory_pressure", Scope.HOST, 0.6, 900, "the host ran short of memory"),
        Rule("foreign_memory", "memory_growth", Scope.HOST, 0.6, 900,
             "the memory a parent cgroup gained went to processes outside the job's snapshots"),
    )))
EMITS = frozenset({FOREIGN_MEMORY})

K, ABS_MIN = 4.0, 16 * 1024 * 1024
MIN_GAIN = 1024 * 1024 * 1024
MIN_SHARE = 0.04          # of the host's memory: a job starting up loads a few hundred MiB of libraries
SHARE = 0.5


def _used(m: dict) -> tuple[list[int], list[int | None], list[float]] | None:
    tot, av = m.get("meminfo.MemTotal_bytes"), m.get("meminfo.MemAvailable_bytes")
    if tot is None or av is None:
        return None
    total = dict(zip(tot.ts_raw, tot.values))
    ts, utc, vals = [], [], []
    for t, u, v in zip(av.ts_raw, av.ts_utc, av.values):
        if t in total:
            ts.append(t)
            utc.append(u)
            vals.append(total[t] - v)
    return ts, utc, vals


def _gain(series, t0: int, t1: int) -> float:
    """The most the series rose above its value at ``t0`` within [t0, t1]: a cgroup whose memory
    was freed again by the end (an OOM kill) still took it meanwhile."""
    pts = [(t, v) for t, v in zip(series.ts_raw, series.values) if t0 <= t <= t1]
    return max(v for _, v in pts) - pts[0][1] if len(pts) >= 2 else 0.0


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    groups = by_entity(load(store, incident_id, ["meminfo.MemTotal_bytes", "meminfo.MemAvailable_bytes",
                                                 "memory.usage_bytes"]))
    out = []
    for (sid, host, entity), m in groups.items():
        if entity != "host":
            continue
        u = _used(m)
        if u is None or len(u[0]) < 4:
            continue
        ts, utc, used = u
        rates = [(used[i] - used[i - 1]) / max((ts[i] - ts[i - 1]) / 1e9, 1e-3) for i in range(1, len(ts))]
        thr, med, sigma = threshold(rates, K, ABS_MIN)
        cgroups = [s["memory.usage_bytes"] for (sid2, h2, e2), s in groups.items()
                   if sid2 == sid and h2 == host and e2.startswith("/") and "memory.usage_bytes" in s]
        # the top-level groups only: a parent already counts its children
        tops = [s for s in cgroups if not any(o is not s and (s.entity + "/").startswith(o.entity + "/")
                                              for o in cgroups)]
        for a, b in episodes(rates, thr, gap=2, min_points=2):
            i0, i1 = a, b + 1               # rates[k] is the change into snapshot k + 1
            host_gain = used[i1] - used[i0]
            total = m["meminfo.MemTotal_bytes"].values[0]
            if host_gain < max(MIN_GAIN, MIN_SHARE * total):
                continue
            watched = sum(max(0.0, _gain(s, ts[i0], ts[i1])) for s in tops)
            if watched >= SHARE * host_gain:
                continue
            av = m["meminfo.MemAvailable_bytes"]
            text = (f"Memory in use on the host grew by {fmt_bytes(host_gain)} in {(ts[i1] - ts[i0]) / 1e9:.1f} s "
                    f"from {hms(utc[i0 + 1])} while the snapshotted cgroups grew by {fmt_bytes(watched)}: "
                    f"processes outside them took it")
            wanted = [(ts[i0], "host", "meminfo.MemAvailable_bytes"), (ts[i1], "host", "meminfo.MemAvailable_bytes")]
            out.append(Link(kind=FOREIGN_MEMORY, ts_ns=utc[i0 + 1], summary=text, source=av.source,
                            host=host, evidence=evidence(av, wanted, zone), provenance=Provenance.INFERRED,
                            confidence=0.8, uncertainty_ns=av.uncertainty_ns, entity="host",
                            attrs=onset_window(av, i0 + 1) + (("until_ns", utc[i1]), ("gain_bytes", host_gain),
                                                                ("watched_gain_bytes", watched),
                                                                ("outside", True))))
    return out
