"""Cross-host clock offsets from collectives that end together on every rank.

A collective (all-reduce, all-gather, broadcast, ...) cannot complete on any
rank before every rank has entered it, and for the data-moving collectives the
ranks finish within a pipeline step of each other. So the *end* times of the
same collective on two ranks, each read on its own host's wall clock, differ by
the hosts' clock offset plus a small completion jitter. Start times do not:
they differ by each rank's arrival time (stragglers).

Matching: each rank's communication spans (``collectives`` rows with role
``exec``: NCCL kernels, gloo work) are placed in the rank's profiler step
(``ProfilerStep#N``) and numbered within it, so the key (step, collective,
number within the step) names the same collective on every rank even when the
ranks' trace files cover different windows. Without step markers the running
ordinal over the whole trace is used.

Estimate, for host H against the reference host R (the host of the lowest
rank): ``d_k = end_H(k) - end_R(k)`` over matched collectives k;
offset(H) = median(d_k) (robust to the odd mismatched or slow pair); the
uncertainty is 1.4826 x MAD of the d_k (at least 10 us), and it is clipped to
the causality bounds: rank H cannot finish before rank R starts and vice versa,
so the true offset lies in [max_k(start_H - end_R), min_k(end_H - start_R)].

Worked example (tests/analysis/test_clock_collectives.py): the sample
bundle's two ranks ran on one host; the test moves rank 1 to host ``node-2``
and adds 1.7 s to its traces' base time. The 48 gloo all-reduces matched by
step give d_k with a median of 1.700 s +- well under 1 ms, so node-2's wall
clock is placed at offset -1.700 s and its events fall back onto node-1's
timeline.
"""
from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass

import polars as pl

MIN_PAIRS = 3
MIN_UNCERTAINTY_NS = 10_000


@dataclass(frozen=True)
class HostOffset:
    host: str
    reference: str
    offset_ns: int              # add to the host's wall times to put them on the reference's clock
    uncertainty_ns: int
    pairs: int
    bounds: tuple[int, int]     # causality bounds on the offset (of the reference relative to host)


def _exec_collectives(store, incident_id: str) -> pl.DataFrame:
    from .kineto_derived import collectives, steps
    return _numbered(collectives(store, incident_id), steps(store, incident_id))


def _numbered(c: pl.DataFrame, st: pl.DataFrame) -> pl.DataFrame:
    """Each exec collective with its rank's CPU step (``ProfilerStep#N`` it started in) and its
    number ``k`` within (rank, step, collective); see the module docstring.

    A collective's step is the first step (by number) of its rank whose span [start, end) holds
    its start; a rank with steps drops collectives outside all of them, a rank without keeps
    them with no step. Copies of one collective start (rank, start, op, thread) are kept once.
    Found with an as-of join on the start (steps of a rank that do not overlap: the only
    candidate is the last step starting before), else by a sweep over the rank's steps in time
    order: memory grows with the rows, never with collectives x steps."""
    if c.is_empty():
        return c
    c = c.filter((pl.col("role") == "exec") & pl.col("host").is_not_null() & pl.col("rank").is_not_null())
    if not st.is_empty():
        st = st.filter(pl.col("side") == "cpu").select(
            "rank", "step", s0=pl.col("ts_raw_ns"), s1=pl.col("ts_raw_ns") + pl.col("dur_ns"))
        c = _in_steps(c, st)
        c = c.unique(subset=["rank", "ts_raw_ns", "op", "tid"], keep="first", maintain_order=True)
    else:
        c = c.with_columns(step=pl.lit(None, pl.Int64))
    c = c.sort("rank", "ts_raw_ns").with_columns(
        k=pl.int_range(pl.len()).over("rank", "step", "collective"))
    return c.select("host", "rank", "step", "collective", "k", start="ts_raw_ns", end="end_raw_ns")


def _in_steps(c: pl.DataFrame, st: pl.DataFrame) -> pl.DataFrame:
    """``c`` (its order kept) with ``step``: see :func:`_numbered`."""
    c = c.with_row_index("_row")
    stepped = st.filter(pl.col("rank").is_not_null())["rank"].unique()
    free = c.filter(~pl.col("rank").is_in(stepped.implode())).with_columns(step=pl.lit(None, st["step"].dtype))
    # A step row without a number holds everything of its rank (it sorts before the numbered ones).
    unnumbered = st.filter(pl.col("step").is_null() & pl.col("rank").is_not_null())["rank"].unique()
    whole = c.filter(pl.col("rank").is_in(unnumbered.implode())).with_columns(step=pl.lit(None, st["step"].dtype))
    spans = (st.filter(pl.col("step").is_not_null() & pl.col("rank").is_in(stepped.implode())
                       & ~pl.col("rank").is_in(unnumbered.implode()) & (pl.col("s1") > pl.col("s0")))
             .sort("rank", "s0", "step")
             .with_columns(_overlap=pl.col("s0") < pl.col("s1").cum_max().shift(1).over("rank")))
    overlapping = spans.filter(pl.col("_overlap"))["rank"].unique()
    rest = c.filter(pl.col("rank").is_in(stepped.implode()) & ~pl.col("rank").is_in(unnumbered.implode())
                    & pl.col("ts_raw_ns").is_not_null())
    simple = rest.filter(~pl.col("rank").is_in(overlapping.implode()))
    parts = [free, whole]
    if not simple.is_empty():
        s = spans.filter(~pl.col("rank").is_in(overlapping.implode())).select("rank", "s0", "s1", "step").sort("s0")
        j = simple.sort("ts_raw_ns").join_asof(s, left_on="ts_raw_ns", right_on="s0", by="rank",
                                                strategy="backward", check_sortedness=False)
        parts.append(j.filter(pl.col("ts_raw_ns") < pl.col("s1")).drop("s0", "s1"))
    if not overlapping.is_empty():
        parts.append(_sweep(rest.filter(pl.col("rank").is_in(overlapping.implode())),
                            spans.filter(pl.col("rank").is_in(overlapping.implode()))))
    return pl.concat([p.cast({"step": st["step"].dtype}) for p in parts], how="vertical").sort("_row").drop("_row")


def _sweep(c: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Ranks whose steps overlap: per rank, starts in time order against the steps begun so
    far, the lowest-numbered one still open (a heap of them by number)."""
    by_rank: dict = {}
    for r, s0, s1, n in spans.select("rank", "s0", "s1", "step").iter_rows():
        by_rank.setdefault(r, []).append((s0, s1, n))
    rows, got = [], []
    cur, open_, j, todo = None, [], 0, []
    for i, r, ts in c.sort("rank", "ts_raw_ns").select("_row", "rank", "ts_raw_ns").iter_rows():
        if r != cur:
            cur, open_, j, todo = r, [], 0, by_rank.get(r, [])
        while j < len(todo) and todo[j][0] <= ts:
            heapq.heappush(open_, (todo[j][2], todo[j][1]))
            j += 1
        while open_ and open_[0][1] <= ts:
            heapq.heappop(open_)
        if open_:
            rows.append(i)
            got.append(open_[0][0])
    found = pl.DataFrame({"_row": rows, "step": got}, schema={"_row": c["_row"].dtype, "step": spans["step"].dtype})
    return c.join(found, on="_row", how="inner")


def host_offsets(store, incident_id: str) -> list[HostOffset]:
    c = _exec_collectives(store, incident_id)
    if c.is_empty():
        return []
    ranks = c.group_by("host").agg(pl.col("rank").min().alias("r")).sort("r")
    hosts = ranks["host"].to_list()
    if len(hosts) < 2:
        return []
    ref = hosts[0]
    ref_rank = int(ranks["r"][0])
    r = c.filter(pl.col("rank") == ref_rank)
    out = []
    for h in hosts[1:]:
        other_rank = int(c.filter(pl.col("host") == h)["rank"].min())
        o = c.filter(pl.col("rank") == other_rank)
        m = o.join(r, on=["step", "collective", "k"], how="inner", nulls_equal=True, suffix="_ref")
        if len(m) < MIN_PAIRS:
            continue
        d = (m["end"] - m["end_ref"]).to_list()
        med = int(statistics.median(d))
        mad = statistics.median(abs(x - med) for x in d)
        unc = max(MIN_UNCERTAINTY_NS, int(1.4826 * mad))
        # causality: o_true = clock_H - clock_R lies in [max(start_H - end_R), min(end_H - start_R)]
        lo = int((m["start"] - m["end_ref"]).max())
        hi = int((m["end"] - m["start_ref"]).min())
        if lo <= hi:   # the true offset is inside the bounds: so is the estimate, and so is its error
            med = min(max(med, lo), hi)
            unc = min(unc, max(MIN_UNCERTAINTY_NS, hi - med, med - lo))
        out.append(HostOffset(h, ref, -med, unc, len(m), (lo, hi)))
    return out
