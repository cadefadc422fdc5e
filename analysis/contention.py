"""cpu_contention: a rank slowed or stopped because a process outside the job took its CPU.

When a rank's steps slow down (``step_slowdown``, ``straggler``) or it stops (``rank_stalled``),
the perf samples of the CPUs it ran on say who had them. The rank's *CPUs* are those that hold
at least a third of its main thread's samples in the ``BEFORE_NS`` before the change. Over the
``AFTER_NS`` after it, a task that is not the job's (not a rank, not the launcher, not a process
or thread they started: :func:`analysis.attribution.job_pids`; the idle task aside) holding at
least ``SHARE`` of those CPUs' samples — and less than half of that before: a newcomer — while the
rank's own share of them fell to less than half of what it was, took the CPU from it. The
finding names that task (pid, command), the CPU and the shares, and is stamped at the task's
first sample on that CPU from ``LEAD_NS`` before the change on (the sampling period before that
sample is its window: it may have started running just before). The shares it states are those of
the ``AFTER_NS`` from that first sample on (or from the change, when the task came before it): a
stall is only bounded below by the rank's last sign of progress, which may come well before the
task did. It is ``starved`` when the task held at least ``STARVED`` of the CPU there and the rank
kept at most ``STARVED_LEFT`` of its former share — a tenfold slowdown, which a peer waiting in a
collective cannot tell from a stop: only then can it explain a rank that stopped, not just slowed.
(A real-time task leaves the others 5 % of its CPU — the kernel's RT throttling —, so an absolute
"almost nothing" would not be met by the commonest thief of all. A rank that stopped on its own
leaves its CPU idle or shared among whatever else runs: no one task holds nearly all of it.)

Worked example (``tests/analysis/test_contention.py``): rank 1 (pid 101) ran on CPU 1 with 58 of
the 60 samples there in the 20 s before its steps slowed at 10:00:20; a ``python3`` (pid 555,
not the job's) runs there from 10:00:19.98 on, and in the 20 s from 10:00:20 (the change: it came
just before) it takes 95 of the 100 samples of CPU 1, rank 1 only 5: cpu_contention for rank 1,
pid 555 ``python3`` on CPU 1, 95 %, starved (5 % left of 97 %), stamped at 10:00:19.98 with the
window [10:00:19.946, 10:00:19.98] (one 29 Hz period before).
"""
from __future__ import annotations

import statistics

from aftertrace.ingest.timeparse import fmt_hms

from .attribution import job_on
from .links import Evidence, Link, LinkKind, Provenance

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.CPU_CONTENTION})
BEFORE_NS = 20 * 10**9
AFTER_NS = 20 * 10**9
LEAD_NS = 2 * 10**9        # how long before the change the newcomer's first sample may be
SHARE = 0.5
STARVED = 0.9             # starved: the newcomer holds at least this much of the CPU,
STARVED_LEFT = 0.1        # and the rank kept at most this part of its former share (a tenfold slowdown)
SLOWED = (LinkKind.STEP_SLOWDOWN, LinkKind.STRAGGLER, LinkKind.RANK_STALLED)


def _before(store, incident_id: str, cands: list[tuple[int, int, int, str | None]]) -> dict[int, list[dict]]:
    """Per candidate (index, pid, change time, host): its main thread's samples per CPU in the
    ``BEFORE_NS`` before the change, on its host (or on no stated host: pids are per host). One
    query for every candidate (a job of hundreds of slowed ranks asked one query each)."""
    out: dict[int, list[dict]] = {c[0]: [] for c in cands}
    for r in store.query(
            """SELECT q.i, s.cpu, count(*) AS n
               FROM (SELECT unnest(?) AS i, unnest(?) AS pid, unnest(?) AS lo, unnest(?) AS hi,
                            unnest(?::VARCHAR[]) AS host) q
               JOIN samples s ON s.incident_id = ? AND s.tid = q.pid AND s.ts_utc_ns BETWEEN q.lo AND q.hi
               JOIN sources src ON src.incident_id = s.incident_id AND src.source_id = s.source_id
               WHERE q.host IS NULL OR COALESCE(s.host, src.host) = q.host OR COALESCE(s.host, src.host) IS NULL
               GROUP BY ALL ORDER BY q.i, s.cpu NULLS LAST""",
            [[c[0] for c in cands], [c[1] for c in cands], [c[2] - BEFORE_NS for c in cands],
             [c[2] for c in cands], [c[3] for c in cands], incident_id]):
        out[r["i"]].append(r)
    return out


def _windows(store, incident_id: str, asks: list[tuple[int, str, int, int, int, str | None]]
             ) -> dict[tuple[int, str], list[dict]]:
    """Per (candidate, window): the samples of each task on each of the candidate's CPUs in the
    window, on its host (or on no stated host): cpu, tid, comm, n, first, path. ``asks``: (index,
    window name, cpu, lo, hi, host) rows, one per CPU."""
    out: dict[tuple[int, str], list[dict]] = {}
    if not asks:
        return out
    cols = list(zip(*asks))
    for r in store.query(
            """SELECT q.i, q.w, s.cpu, COALESCE(s.pid, s.tid) AS tid, min(s.comm) AS comm, count(*) AS n,
                      min(s.ts_utc_ns) AS first, min(src.path) AS path
               FROM (SELECT unnest(?) AS i, unnest(?) AS w, unnest(?) AS cpu, unnest(?) AS lo, unnest(?) AS hi,
                            unnest(?::VARCHAR[]) AS host) q
               JOIN samples s ON s.incident_id = ? AND s.cpu = q.cpu AND s.ts_utc_ns BETWEEN q.lo AND q.hi
               JOIN sources src ON src.incident_id = s.incident_id AND src.source_id = s.source_id
               WHERE q.host IS NULL OR COALESCE(s.host, src.host) = q.host OR COALESCE(s.host, src.host) IS NULL
               GROUP BY ALL ORDER BY q.i, q.w, s.cpu, tid NULLS LAST""",
            [list(c) for c in cols] + [incident_id]):
        out.setdefault((r.pop("i"), r.pop("w")), []).append(r)
    return out


def detect(store, incident_id: str, links: list[Link], pids: dict[int, int], job: set[int]) -> list[Link]:
    cands = [(i, l) for i, l in enumerate(sorted(
        (l for l in links if l.kind in SLOWED and l.rank is not None and l.ts_ns is not None), key=lambda l: l.ts_ns))
        if pids.get(l.rank) is not None]
    if not cands:
        return []
    starts = {i: l.timing_ns()[0] for i, l in cands}
    before = _before(store, incident_id, [(i, pids[l.rank], starts[i], l.host) for i, l in cands])
    cpus_of: dict[int, list[int]] = {}
    for i, _ in cands:
        total_before = sum(r["n"] for r in before[i])
        cpus_of[i] = [r["cpu"] for r in before[i] if r["cpu"] is not None and r["n"] * 3 >= total_before]
    asks = [(i, w, cpu, lo, hi, l.host) for i, l in cands for cpu in cpus_of[i]
            for w, lo, hi in (("pre", starts[i] - BEFORE_NS, starts[i]), ("post", starts[i], starts[i] + AFTER_NS))]
    windows = _windows(store, incident_id, asks)
    out: list[Link] = []
    done: set[int] = set()
    for i, l in cands:
        pid = pids[l.rank]
        cpus = cpus_of[i]
        if l.rank in done or not cpus:
            continue
        t = starts[i]
        pre, post = windows.get((i, "pre"), []), windows.get((i, "post"), [])
        busy = [r for r in post if r["tid"] not in (0, None)]
        n_post = sum(r["n"] for r in busy)
        n_pre = sum(r["n"] for r in pre if r["tid"] not in (0, None))
        if not n_post or not n_pre:
            continue
        mine_pre = sum(r["n"] for r in pre if r["tid"] == pid) / n_pre
        mine_post = sum(r["n"] for r in busy if r["tid"] == pid) / n_post
        others = [r for r in busy if r["tid"] not in job_on(job, l.host) and r["tid"] != pid]
        if not others:
            continue
        top = max(others, key=lambda r: r["n"])
        share = top["n"] / n_post
        pre_share = sum(r["n"] for r in pre if r["tid"] == top["tid"]) / n_pre
        if share < SHARE or mine_post >= 0.5 * mine_pre or pre_share >= 0.5 * share:
            continue            # no newcomer took the CPU: the rank gave it up, or shared it as before
        # (the newcomer's sample times on that CPU: their spacing is its sampling period)
        ts = store.query(
            """SELECT list(s.ts_utc_ns ORDER BY s.ts_utc_ns) AS ts
               FROM samples s JOIN sources src USING (incident_id, source_id)
               WHERE s.incident_id = ? AND s.cpu = ? AND COALESCE(s.pid, s.tid) = ? AND s.ts_utc_ns BETWEEN ? AND ?
                 AND (?::VARCHAR IS NULL OR COALESCE(s.host, src.host) = ? OR COALESCE(s.host, src.host) IS NULL)""",
            [incident_id, top["cpu"], top["tid"], t, t + AFTER_NS, l.host, l.host])[0]["ts"] or []
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
        period = int(statistics.median(gaps)) if gaps else 10**9 // 29
        # it may have begun a little before the change showed in the rank's steps
        near = store.query("""SELECT min(ts_utc_ns) AS t FROM samples WHERE incident_id = ? AND tid = ?
                                AND cpu IN (SELECT unnest(?)) AND ts_utc_ns BETWEEN ? AND ?""",
                           [incident_id, top["tid"], cpus, t - LEAD_NS, t + AFTER_NS])
        first = near[0]["t"] if near and near[0]["t"] is not None else top["first"]
        # The shares while the newcomer ran: the window from the rank's change on may begin well
        # before it came (a stall is only bounded below by the rank's last sign of progress), and
        # the rank's own samples from before the newcomer would hide how little it got after.
        since = max(t, first)
        held = [r for r in _windows(store, incident_id, [(0, "on", c, since, since + AFTER_NS, l.host) for c in cpus])
                .get((0, "on"), []) if r["tid"] not in (0, None)]
        n_on = sum(r["n"] for r in held)
        if n_on:
            share = sum(r["n"] for r in held if r["tid"] == top["tid"]) / n_on
            mine_post = sum(r["n"] for r in held if r["tid"] == pid) / n_on
        starved = share >= STARVED and mine_post <= STARVED_LEFT * mine_pre
        summary = (f"{top['comm']} (pid {top['tid']}), not a process of the job, took {share:.0%} of the samples of "
                   f"CPU{'s' if len(cpus) > 1 else ''} {', '.join(map(str, cpus))} from {fmt_hms(first)}, where rank "
                   f"{l.rank} (pid {pid}) had run ({mine_pre:.0%} of its samples before, {mine_post:.0%} after)")
        ev = (Evidence(top["path"], None, f"perf: {top['n']} samples of {top['comm']}/{top['tid']} on CPU "
                                          f"{','.join(map(str, cpus))} between {fmt_hms(t - 2 * 10**9)} and "
                                          f"{fmt_hms(since + AFTER_NS)}; rank {l.rank}: {mine_post:.0%} from "
                                          f"{fmt_hms(since)}"),)
        out.append(Link(kind=LinkKind.CPU_CONTENTION, ts_ns=first, summary=summary, source=top["path"], host=l.host,
                        rank=l.rank, pid=pid, evidence=ev, provenance=Provenance.INFERRED, confidence=0.9,
                        entity=f"pid {top['tid']}",
                        attrs=(("ts_lo_ns", first - period), ("ts_hi_ns", first), ("ts_bound", "between"),
                               ("hog", f"{top['comm']} (pid {top['tid']})"), ("hog_pid", top["tid"]),
                               ("cpus", tuple(cpus)), ("share", round(share, 3)), ("starved", starved),
                               ("until_ns", since + AFTER_NS), ("outside", True))))
        done.add(l.rank)
    return out
