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

from analysis.links import Evidence, Link, LinkKind, Provenance

from ._series import STEP_LINES, episodes, hms

RATIO, MIN_STEPS = 1.3, 5


# Each (rank, step) once: of the rows of a rank with one step number (a line captured twice, in a
# worker's stderr.log and the launcher's --tee copy), the first by time, path and line. Its peers'
# median comes from the step's times sorted once: the peers are that list less one copy of the
# rank's own time, and their median is read by index (O(steps x ranks log ranks), where gathering
# the peers for every rank and step costs steps x ranks^2). A step with a NaN time (no sorted
# order) has no peers' median here: ``_nan_medians`` takes its peers as they come.
_STEPS = f"""
WITH lines AS ({STEP_LINES}),
one AS (
    SELECT rank, host, path, ts, line, CAST(trunc(step_value) AS BIGINT) AS step, dt FROM lines
    WHERE rank IS NOT NULL AND step_value IS NOT NULL AND dt IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY rank, trunc(step_value) ORDER BY ts, path, line) = 1),
at_step AS (
    SELECT step, list_sort(list(dt)) AS v, bool_or(isnan(dt)) AS odd FROM one GROUP BY step),
placed AS (
    SELECT o.*, a.odd, a.v, len(a.v) - 1 AS m, list_position(a.v, o.dt) - 1 AS own
    FROM one o JOIN at_step a USING (step))
SELECT rank, host, path, ts, line, step, dt, odd,
       CASE WHEN odd OR m = 0 THEN NULL
            WHEN m % 2 = 1 THEN (CASE WHEN m // 2 < own THEN v[m // 2 + 1] ELSE v[m // 2 + 2] END)
            ELSE ((CASE WHEN m // 2 - 1 < own THEN v[m // 2] ELSE v[m // 2 + 1] END)
                  + (CASE WHEN m // 2 < own THEN v[m // 2 + 1] ELSE v[m // 2 + 2] END)) / 2 END AS med
FROM placed ORDER BY rank, step
"""


def _steps(store, incident_id: str) -> dict[int, dict[str, list]]:
    """Per rank, its steps in step order as columns: step, dt, med (the peers' median; None
    where no other rank has the step), ts, path, line, host."""
    tab = store.cursor().sql(_STEPS, params=[incident_id]).to_arrow_table()
    cols = {name: tab.column(name).to_pylist() for name in tab.column_names}
    ranks = cols["rank"]
    if any(cols["odd"]):
        cols["med"] = _nan_medians(cols)
    cuts = [0, *(i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1]), len(ranks)]
    fields = ("step", "dt", "med", "ts", "path", "line", "host")
    return {ranks[i]: {f: cols[f][i:j] for f in fields} for i, j in zip(cuts, cuts[1:]) if i < j}


def _nan_medians(cols: dict[str, list]) -> list:
    """The peers' medians with ``statistics.median`` over the peers in row order, on the steps
    that have a NaN time (the others keep the value computed in SQL)."""
    at: dict[int, list[tuple[int, float]]] = {}
    for rank, step, dt, odd in zip(cols["rank"], cols["step"], cols["dt"], cols["odd"]):
        if odd:
            at.setdefault(step, []).append((rank, dt))
    out = list(cols["med"])
    for i, (rank, step, odd) in enumerate(zip(cols["rank"], cols["step"], cols["odd"])):
        if odd:
            peers = [dt for q, dt in at[step] if q != rank]
            out[i] = statistics.median(peers) if peers else None
    return out


def detect(store, incident_id: str, zone: str | None = None) -> list[Link]:
    by_rank = _steps(store, incident_id)
    if len(by_rank) < 2:
        return []
    found = []
    for rank, c in sorted(by_rank.items()):
        # (the rows of the steps that have a ratio, and the ratios)
        at = [i for i, med in enumerate(c["med"]) if med is not None and med > 0]
        vals = [c["dt"][i] / c["med"][i] for i in at]
        # runs of steps at or above RATIO, joined over one step below; the longest with MIN_STEPS of them
        runs = [[i for i in range(x, y + 1) if vals[i] >= RATIO]
                for x, y in episodes(vals, RATIO - 1e-12, gap=1, min_points=1)]
        best = max(runs, key=len, default=[])
        if len(best) < MIN_STEPS:
            continue
        f = at[best[0]]
        slow = statistics.median(vals[i] for i in best)
        start = c["ts"][f] - int(c["dt"][f] * 1e9)
        text = (f"rank {rank} straggled: its steps took {slow:.1f}x the median of its peers' same steps "
                f"for {len(best)} steps from step {c['step'][f]} (began ~{hms(start)})")
        ev = tuple(Evidence(c["path"][at[i]], c["line"][at[i]],
                            f"step={c['step'][at[i]]} step_time={c['dt'][at[i]]:.3f}s "
                            f"({vals[i]:.1f}x the peers' median)") for i in best[:2])
        found.append(Link(kind=LinkKind.STRAGGLER, ts_ns=start, summary=text, source=c["path"][f],
                          host=c["host"][f], rank=rank, evidence=ev, provenance=Provenance.INFERRED,
                          confidence=0.8, attrs=(("ratio", slow), ("steps", len(best)),
                                                  ("until_ns", c["ts"][at[best[-1]]]))))
    return found
