"""straggler: a rank whose steps take clearly longer than its peers' same steps.

Series: the step times each rank reported (``step_time`` metrics of the text logs, entity
``rank N``, with the ``step`` number read from the same line). For every step number reported
by at least two ranks, a rank's *ratio* is its step time over the median of the other ranks'
times for that step. A rank straggles when its ratio is at least ``RATIO`` for ``MIN_STEPS``
steps in a row (joined over at most one step below); the finding is stamped when the first
of those steps began and cites the rank's step lines there. In synchronous data parallel
training every rank waits for the slowest at each all-reduce, so ranks that print the time of
the whole step all look alike; the detector speaks when ranks time their own compute (or run
asynchronously) and one of them falls behind.
"""
from __future__ import annotations

import statistics
from bisect import bisect_left

from analysis.links import Evidence, Link, LinkKind, Provenance

from ._series import episodes, hms

RATIO, MIN_STEPS = 1.3, 5


def _steps(store, incident_id: str) -> dict[int, dict[int, dict]]:
    rows = store.query(
        """SELECT TRY_CAST(regexp_extract(m.entity, '^rank (\\d+)$', 1) AS INTEGER) AS rank,
                  COALESCE(m.host, s.host) AS host, s.path, m.ts_utc_ns AS ts, max(m.line) AS line,
                  max(CASE WHEN m.metric = 'step' THEN m.value END) AS step,
                  max(CASE WHEN m.metric = 'step_time' THEN m.value END) AS dt
           FROM metrics m JOIN sources s USING (incident_id, source_id)
           WHERE m.incident_id = ? AND m.metric IN ('step', 'step_time') AND m.entity LIKE 'rank %'
             AND m.ts_utc_ns IS NOT NULL
           GROUP BY ALL""", [incident_id])
    out: dict[int, dict[int, dict]] = {}
    for r in rows:
        if r["rank"] is None or r["step"] is None or r["dt"] is None:
            continue
        out.setdefault(r["rank"], {}).setdefault(int(r["step"]), r)   # a line seen twice counts once
    return out


def _peer_medians(by_rank: dict[int, dict[int, dict]]):
    """``f(rank, step)``: the median of the other ranks' times of that step (None: no other rank
    has it). Each step's times are sorted once; a rank's peers are that list without one copy
    of its own time, read by index: O(ranks x steps x log ranks) where collecting and sorting
    the peers for every rank and step cost ranks^2 x steps. The value is the one
    ``statistics.median`` gives on the peers (the same sorted values, the same arithmetic);
    steps with a NaN time (which has no sorted order) take the peers as they come."""
    at_step: dict[int, list[float]] = {}
    for steps in by_rank.values():
        for n, r in steps.items():
            at_step.setdefault(n, []).append(r["dt"])
    odd = set()
    for n, v in at_step.items():
        if any(x != x for x in v):
            odd.add(n)
        else:
            v.sort()

    def median(rank: int, n: int) -> float | None:
        if n in odd:
            peers = [by_rank[q][n]["dt"] for q in by_rank if q != rank and n in by_rank[q]]
            return statistics.median(peers) if peers else None
        v = at_step[n]
        m = len(v) - 1                     # the peers: v without one copy of the rank's own time
        if m == 0:
            return None
        own = bisect_left(v, by_rank[rank][n]["dt"])

        def peer(i: int) -> float:
            return v[i] if i < own else v[i + 1]
        return peer(m // 2) if m % 2 else (peer(m // 2 - 1) + peer(m // 2)) / 2
    return median


def detect(store, incident_id: str, zone: str | None = None) -> list[Link]:
    by_rank = _steps(store, incident_id)
    if len(by_rank) < 2:
        return []
    found = []
    peer_median = _peer_medians(by_rank)
    for rank, steps in sorted(by_rank.items()):
        ratios: list[tuple[int, float]] = []
        for n in sorted(steps):
            med = peer_median(rank, n)
            if med is None:
                continue
            if med > 0:
                ratios.append((n, steps[n]["dt"] / med))
        # runs of steps at or above RATIO, joined over one step below; the longest with MIN_STEPS of them
        vals = [r for _, r in ratios]
        runs = [[i for i in range(x, y + 1) if vals[i] >= RATIO]
                for x, y in episodes(vals, RATIO - 1e-12, gap=1, min_points=1)]
        best = max(runs, key=len, default=[])
        if len(best) < MIN_STEPS:
            continue
        first = steps[ratios[best[0]][0]]
        slow = statistics.median(ratios[i][1] for i in best)
        start = first["ts"] - int(first["dt"] * 1e9)
        text = (f"rank {rank} straggled: its steps took {slow:.1f}x the median of its peers' same steps "
                f"for {len(best)} steps from step {ratios[best[0]][0]} (began ~{hms(start)})")
        ev = tuple(Evidence(steps[ratios[i][0]]["path"], steps[ratios[i][0]]["line"],
                            f"step={ratios[i][0]} step_time={steps[ratios[i][0]]['dt']:.3f}s "
                            f"({ratios[i][1]:.1f}x the peers' median)") for i in best[:2])
        found.append(Link(kind=LinkKind.STRAGGLER, ts_ns=start, summary=text, source=first["path"],
                          host=first["host"], rank=rank, evidence=ev, provenance=Provenance.INFERRED,
                          confidence=0.8, attrs=(("ratio", slow), ("steps", len(best)),
                                                  ("until_ns", steps[ratios[best[-1]][0]]["ts"]))))
    return found
