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
    c = collectives(store, incident_id)
    if c.is_empty():
        return c
    c = c.filter((pl.col("role") == "exec") & pl.col("host").is_not_null() & pl.col("rank").is_not_null())
    st = steps(store, incident_id)
    if not st.is_empty():
        st = st.filter(pl.col("side") == "cpu").select(
            "rank", "step", s0=pl.col("ts_raw_ns"), s1=pl.col("ts_raw_ns") + pl.col("dur_ns"))
        c = c.join(st, on="rank", how="left").filter(
            pl.col("step").is_null() | ((pl.col("ts_raw_ns") >= pl.col("s0")) & (pl.col("ts_raw_ns") < pl.col("s1"))))
        c = c.unique(subset=["rank", "ts_raw_ns", "op", "tid"], keep="first", maintain_order=True)
    else:
        c = c.with_columns(step=pl.lit(None, pl.Int64))
    c = c.sort("rank", "ts_raw_ns").with_columns(
        k=pl.int_range(pl.len()).over("rank", "step", "collective"))
    return c.select("host", "rank", "step", "collective", "k", start="ts_raw_ns", end="end_raw_ns")


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
