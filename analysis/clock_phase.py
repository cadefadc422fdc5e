"""The boot clock narrowed by the phase of the wall clock's second on CLOCK_MONOTONIC.

c10's log stamps carry the wall clock's second and CLOCK_MONOTONIC's fraction; their order
pins ``g = frac(wall - monotonic)`` to a few milliseconds (:mod:`ingest.formats.logs.c10phase`,
fact ``wall_monotonic_phase`` of each log that has them). That is the offset of the boot clock
modulo one second. Any window for the offset narrower than about a second then holds at most
one offset with that phase, and the offset is known as well as the phase is.

The window is the placement's own (``offset ± uncertainty``, widened by the allowance for
printk's clock where the method read printk stamps, which CLOCK_MONOTONIC is not), cut by the
bounds of the processes seen on both clocks (:mod:`.clock_match`). The result is the offset of
CLOCK_MONOTONIC: perf's with ``-k CLOCK_MONOTONIC``, and /proc/uptime's (CLOCK_BOOTTIME, the same
clock unless the host was suspended); printk stamps keep their drift allowance.

Worked example (``tests/analysis/test_clock_phase.py``; the development bundle hungio-r1 with
no anchor): its torchrun log gives the phase 0.8099-0.8187 s; perf's exits against the
processes' lines bound the offset to [1796161653.322583, 1796161653.964808] s (torchrun wrote
its last line at 22:13:53.543 and exited at 1580.220417 s on perf's clock; the worker that
failed exited at 1535.898192 s, before torchrun's first closing signal). The only offsets in that
window with that phase lie in [1796161653.8099, 1796161653.8187] s: the estimate
1796161653.8143 s ± 4.4 ms (the recorder's truth: 1796161653.812761 s). Had the window been
1796161652.5-1796161653.964808 s, two offsets would qualify, a second apart, and the window
would only shrink to their span.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

SEC = 1_000_000_000
METHOD = "the wall clock's second on CLOCK_MONOTONIC (c10 log stamps)"


def phases(store, incident_id: str, hosts: set[str]) -> dict[str, dict]:
    """Per host: the phase arcs (ns, within [0, 1 s) or starting below 0 where one crosses 0)
    that every log of the host allows, with the logs read and the wall times their lines cover."""
    rows = store.query(
        """SELECT f.source_id, COALESCE(s.host, '') AS host, s.path, f.value
           FROM facts f JOIN sources s USING (incident_id, source_id)
           WHERE f.incident_id = ? AND f.key = 'wall_monotonic_phase' ORDER BY s.path""", [incident_id])
    if not rows:
        return {}
    # the wall times each of those logs' events cover, read for those sources only (the query with
    # the facts computed them for every source of the incident: a trace's million events)
    ids = sorted({r["source_id"] for r in rows})
    span = {r["source_id"]: (r["first_ns"], r["last_ns"]) for r in store.query(
        f"""SELECT source_id, min(ts_raw_ns) AS first_ns, max(ts_raw_ns) AS last_ns FROM events
            WHERE incident_id = ? AND source_id IN ({", ".join("?" * len(ids))}) GROUP BY source_id""",
        [incident_id, *ids])}
    named = hosts - {""}
    by: dict[str, list] = {}
    for r in rows:
        host = r["host"] or (next(iter(named)) if len(named) == 1 else "")
        try:
            v = json.loads(r["value"])
        except ValueError:
            continue
        v["span_ns"] = span.get(r["source_id"], (None, None))
        by.setdefault(host, []).append((r["path"], v))
    out = {}
    for host, logs in by.items():
        if any(v.get("refused") for _, v in logs):
            # one log's lines fit no single phase: the wall clock stepped while the incident was
            # written (or writes were reordered), so no log's phase holds for all of it
            continue
        arcs = [tuple(a) for a in logs[0][1]["arcs_ns"]]
        for _, v in logs[1:]:
            arcs = intersect(arcs, [tuple(a) for a in v["arcs_ns"]])
        if arcs:
            spans = [v["span_ns"] for _, v in logs if None not in v["span_ns"]]
            out[host] = {"arcs_ns": arcs, "logs": [p for p, _ in logs],
                         "pairs": sum(v["pairs"] for _, v in logs),
                         # the wall times the logs' timed lines cover (their local clock, on UTC)
                         "span_ns": (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None}
    return out


@dataclass(frozen=True)
class LogStep:
    """A step of the wall clock that one log's c10 stamps show (two neighbouring stretches of the
    fact ``wall_monotonic_phase`` of a log no single phase fits): it came after line ``after_line`` was
    written, at ``after_wall_ns`` or later on the clock of before the step, and before line
    ``before_line``, at ``before_wall_ns`` or earlier on the clock of after it (None: no line
    says)."""
    host: str
    source: str
    after_line: int | None
    after_wall_ns: int | None
    before_line: int | None
    before_wall_ns: int | None
    arcs_before: tuple
    arcs_after: tuple
    pairs: int


_TEE = re.compile(r"^\[[A-Za-z_]*\d+\]:")


def log_steps(store, incident_id: str, hosts: set[str]) -> dict[str, list[LogStep]]:
    """Per host: the steps its logs' stamps show, each log's in order (:class:`LogStep`).

    The fact gives the two lines' times in the phase reader's own reckoning (month, day and time
    of one fixed year); the log's timed events of the same form nearest each line (the parser
    gave them the year and the zone) shift them to UTC."""
    from aftertrace.ingest.formats.logs.c10phase import reading
    rows = store.query(
        """SELECT COALESCE(s.host, '') AS host, s.path, s.source_id, f.value
           FROM facts f JOIN sources s USING (incident_id, source_id)
           WHERE f.incident_id = ? AND f.key = 'wall_monotonic_phase' ORDER BY s.path""", [incident_id])
    named = hosts - {""}
    out: dict[str, list[LogStep]] = {}
    for r in rows:
        try:
            v = json.loads(r["value"])
        except ValueError:
            continue
        st = v.get("stretches") or []
        marks = [(k, s["step"]) for k, s in enumerate(st) if s.get("step")]
        if not marks:
            continue

        def utc(line, local_ns):
            if line is None or local_ns is None:
                return None
            for e in store.query(
                    """SELECT ts_raw_ns, text FROM events WHERE incident_id = ? AND source_id = ?
                       AND ts_raw_ns IS NOT NULL AND NOT COALESCE(ts_interpolated, false)
                       ORDER BY abs(line - ?), line LIMIT 64""", [incident_id, r["source_id"], line]):
                it = reading(_TEE.sub("", (e["text"] or "").split("\n", 1)[0], count=1))
                if it is not None:
                    return local_ns + e["ts_raw_ns"] - it[1]
            return None

        host = r["host"] or (next(iter(named)) if len(named) == 1 else "")
        for k, m in marks:
            a, b = m.get("after_line"), m.get("before_line")
            out.setdefault(host, []).append(LogStep(
                host, r["path"], a, utc(a, m.get("after_local_ns")), b, utc(b, m.get("before_local_ns")),
                tuple(tuple(x) for x in (st[k - 1]["arcs_ns"] or ())),
                tuple(tuple(x) for x in (st[k]["arcs_ns"] or ())), st[k - 1]["pairs"] + st[k]["pairs"]))
    return out


def _unwrap(arcs) -> list[tuple[int, int]]:
    """Arcs as ranges of [0, 2 s) covering each phase once or twice (an arc across 0 split)."""
    out = []
    for a, b in arcs:
        if a < 0:
            out += [(a + SEC, SEC), (0, b)]
        else:
            out.append((a, b))
    return out


def intersect(xs, ys) -> list[tuple[int, int]]:
    out = []
    for a, b in _unwrap(xs):
        for c, d in _unwrap(ys):
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                out.append((lo, hi))
    return sorted(out)


def narrow(lo: int, hi: int, arcs) -> tuple[int, int] | None:
    """The part of ``[lo, hi]`` whose offsets have a phase in ``arcs``: its span (min, max), or
    None when no offset of the window has that phase."""
    got = allowed(lo, hi, arcs)
    if not got:
        return None
    return min(x for x, _ in got), max(y for _, y in got)


def allowed(lo: int, hi: int, arcs) -> list[tuple[int, int]]:
    """The ranges of ``[lo, hi]`` whose offsets have a phase in ``arcs``, in order."""
    got = []
    for a, b in _unwrap(arcs):
        k = (lo - b) // SEC
        while k * SEC + a <= hi:
            x, y = max(lo, k * SEC + a), min(hi, k * SEC + b)
            if y > x:
                got.append((x, y))
            k += 1
    return sorted(got)
