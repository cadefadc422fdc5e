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

import pyarrow as pa
import pyarrow.compute as pc

from aftertrace.analysis.links import Evidence, Link, LinkKind, Provenance

from ._series import hms, in_order, median, repeats, sorted_by, spans, step_lines, step_numbers

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.STRAGGLER})

RATIO, MIN_STEPS = 1.3, 5


def _steps(store, incident_id: str):
    """Every rank's steps as columns in (rank, step) order: rank, step, dt, ts, line, host and
    path (codes into the step lines' ``hosts`` and ``paths``), med (the peers' median; null where
    no other rank has the step); and the step lines.

    Each (rank, step) once: of the rows of a rank with one step number (a line captured twice, in
    a worker's stderr.log and the launcher's --tee copy), the first by time, path and line."""
    lines = step_lines(store, incident_id)
    t = lines.cols
    if t.column("dt").null_count:
        t = t.filter(pc.is_valid(t.column("dt")))
    t = t.append_column("step", step_numbers(store, t.column("step_value")))
    if not in_order(t, ("rank", "step"), strict=True):      # (the usual log: in that order, no step twice)
        t = sorted_by(t, ("rank", "step", "ts", "path", "line", "host"))
        t = t.filter(pc.invert(repeats(t, ("rank", "step"))))
    return t.append_column("med", _peer_medians(t)), lines


def _peer_medians(t: pa.Table) -> pa.Array:
    """Per row, the median of the other ranks' times of its step (null where it has no peers).
    A step with a NaN time has no sorted order: its peers are taken as they come
    (``statistics.median`` over them, in rank order)."""
    if t.num_rows == 0:
        return pa.array([], pa.float64())
    step, dt = (t.column(k).combine_chunks() for k in ("step", "dt"))
    med, odd = _sorted_peers(step, dt)
    if pc.any(odd).as_py():
        med = pc.replace_with_mask(med, odd, pa.array(_nan_medians(t.filter(odd)), pa.float64()))
    return med


def _sorted_peers(step: pa.Array, dt: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(medians, steps with a NaN), by sorting: a step's times are sorted once, and a rank's
    peers are that list less one copy of its own time, so their median is read at the middle
    index, one further along where the middle is at or past the rank's own place
    (O(rows log rows), where gathering the peers for every rank and step costs steps x ranks^2)."""
    n = len(step)
    order = pc.sort_indices(pa.table({"step": step, "dt": dt}),
                            sort_keys=[("step", "ascending"), ("dt", "ascending")])      # (NaN last)
    step, dt = pc.take(step, order), pc.take(dt, order)
    first = pa.concat_arrays([pa.array([True]), pc.not_equal(step.slice(1), step.slice(0, n - 1))])
    starts = pc.cast(pc.indices_nonzero(first), pa.int64())
    sizes = pc.subtract(pa.concat_arrays([starts.slice(1), pa.array([n], pa.int64())]), starts)
    group = pc.subtract(pc.cumulative_sum(pc.cast(first, pa.int64())), 1)
    g0, m = pc.take(starts, group), pc.subtract(pc.take(sizes, group), 1)      # m: the number of peers
    own = pc.subtract(pc.cast(pc.indices_nonzero(pc.is_valid(step)), pa.int64()), g0)
    half = pc.shift_right(m, 1)

    def peer(j):
        """The j-th (0-based) of the sorted peers: the step's j-th time, or the next one from the
        rank's own place on."""
        idx = pc.add(pc.add(g0, j), pc.cast(pc.greater_equal(j, own), pa.int64()))
        return pc.take(dt, pc.min_element_wise(pc.max_element_wise(idx, 0), n - 1))

    upper = peer(half)
    med = pc.if_else(pc.equal(pc.bit_wise_and(m, 1), 1), upper,
                     pc.divide(pc.add(peer(pc.subtract(half, 1)), upper), 2))
    nan_step = pc.is_nan(pc.take(dt, pc.add(g0, m)))                          # NaN sorts last
    med = pc.if_else(pc.or_(pc.equal(m, 0), nan_step), pa.scalar(None, pa.float64()), med)
    back = pc.sort_indices(order)
    return pc.take(med, back), pc.take(nan_step, back)


def _nan_medians(t: pa.Table) -> list:
    """The peers' medians on the rows of the steps that have a NaN time: ``statistics.median``
    over the other ranks' times in rank order."""
    rows = list(zip(t.column("rank").to_pylist(), t.column("step").to_pylist(), t.column("dt").to_pylist()))
    at: dict[int, list[tuple[int, float]]] = {}
    for rank, step, dt in rows:
        at.setdefault(step, []).append((rank, dt))
    out = []
    for rank, step, _ in rows:
        peers = [dt for q, dt in at[step] if q != rank]
        out.append(statistics.median(peers) if peers else None)
    return out


def detect(store, incident_id: str, zone: str | None = None) -> list[Link]:
    t, lines = _steps(store, incident_id)
    if t.num_rows == 0 or t.column("rank")[0] == t.column("rank")[-1]:       # fewer than two ranks
        return []
    # the rows of the steps that have a ratio (``rows``: their places in t), and the ratios
    has = pc.fill_null(pc.greater(t.column("med"), 0.0), False)
    rows = pc.cast(pc.indices_nonzero(has), pa.int64())
    dt, med, rank = (pc.take(t.column(k).combine_chunks(), rows) for k in ("dt", "med", "rank"))
    ratio = pc.divide(dt, med)
    # runs of steps at or above RATIO, joined over one step below (and not across ranks); per
    # rank the longest (the first of the longest) with MIN_STEPS of them
    at, starts, ends = spans(pc.greater(ratio, RATIO - 1e-12), gap=1,
                             breaks=pc.invert(repeats(pa.table({"rank": rank}), ("rank",))))
    ge = pc.take(pc.greater_equal(ratio, RATIO), at)            # per high step: whether it is in the run
    seen = pc.cumulative_sum(pc.cast(ge, pa.int64()))
    count = pc.add(pc.subtract(pc.take(seen, ends), pc.take(seen, starts)), pc.cast(pc.take(ge, starts), pa.int64()))
    long = pc.cast(pc.indices_nonzero(pc.greater_equal(count, MIN_STEPS)), pa.int64())
    best: dict[int, tuple[int, int]] = {}                        # rank: (episode, its run's length)
    for e, r, k in zip(long.to_pylist(), pc.take(rank, pc.take(at, pc.take(starts, long))).to_pylist(),
                       pc.take(count, long).to_pylist()):
        if r not in best or k > best[r][1]:
            best[r] = (e, k)

    def row(i: int) -> dict:
        return {k: t.column(k)[rows[i].as_py()].as_py() for k in ("step", "dt", "ts", "path", "line", "host")}

    found = []
    for r in sorted(best):
        e = best[r][0]
        s0, s1 = starts[e].as_py(), ends[e].as_py()
        run = pc.filter(at.slice(s0, s1 - s0 + 1), ge.slice(s0, s1 - s0 + 1))
        slow = median(pc.take(ratio, run))
        f = row(run[0].as_py())
        start = f["ts"] - int(f["dt"] * 1e9)
        text = (f"rank {r} straggled: its steps took {slow:.1f}x the median of its peers' same steps "
                f"for {len(run)} steps from step {f['step']} (began ~{hms(start)})")
        ev = tuple(Evidence(lines.paths[x["path"]], x["line"], f"step={x['step']} step_time={x['dt']:.3f}s "
                            f"({ratio[i].as_py():.1f}x the peers' median)")
                   for i, x in ((i, row(i)) for i in run.slice(0, 2).to_pylist()))
        found.append(Link(kind=LinkKind.STRAGGLER, ts_ns=start, summary=text, source=lines.paths[f["path"]],
                          host=lines.hosts[f["host"]], rank=r, evidence=ev, provenance=Provenance.INFERRED,
                          confidence=0.8, attrs=(("ratio", slow), ("steps", len(run)),
                                                  ("until_ns", row(run[-1].as_py())["ts"]))))
    return found
