"""Placing collectives in their steps without the rank-wide join: the same frame as the join.

The straightforward way (kept here as the reference) joins every collective of a rank with
every step of that rank and keeps the pairs where the step holds the collective's start:
memory grows with collectives x steps per rank (6 GB on 119 MB of Kineto files). The package
finds the step with an as-of join (or a sweep where a rank's steps overlap). Compared on the
real traces of the sample bundles, on many files per rank built from them, and on
hypothesis-generated collectives and steps: overlapping, nested, empty and unnumbered steps,
ranks without steps, copies of one collective, starts on a step's edges.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from aftertrace.analysis import clock_collectives as cc
from aftertrace.analysis.kineto_derived import collectives, steps
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def ref_numbered(c: pl.DataFrame, st: pl.DataFrame) -> pl.DataFrame:
    if c.is_empty():
        return c
    c = c.filter((pl.col("role") == "exec") & pl.col("host").is_not_null() & pl.col("rank").is_not_null())
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


def _same(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns
    assert got.height == want.height
    assert got.equals(want), (got, want)


# -- real traces ----------------------------------------------------------------------------------
def _bench():
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "bench" / "bench_analysis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shifted(dest: Path) -> Path:
    """The sample's two ranks on two hosts, the second's clock 1.7 s ahead (as in test_clock_collectives)."""
    for f in sorted((ROOT / "sample_traces/oom-after-throttle/vm/profiler").iterdir()):
        rank0 = f.name.startswith("vm_17988.")
        d = dest / ("node-1" if rank0 else "node-2")
        d.mkdir(parents=True, exist_ok=True)
        data = json.loads(gzip.decompress(f.read_bytes()))
        data["baseTimeNanoseconds"] = int(data["baseTimeNanoseconds"]) + (0 if rank0 else 1_700_000_000)
        (d / f.name).write_bytes(gzip.compress(json.dumps(data).encode()))
    return dest


@pytest.fixture(scope="module")
def incidents(tmp_path_factory):
    root = tmp_path_factory.mktemp("ccs")
    svc = Service(Settings.from_env(home=root / "home"))
    bundles = {n: ROOT / "sample_traces" / n for n in ("oom-after-throttle", "collected-oom-after-throttle",
                                                         "collected-hang", "oom-leak-only")}
    bundles["two-hosts"] = _shifted(root / "two-hosts")
    bundles["8 ranks x3 cycles"] = _bench().kineto_bundle(3, dest=root / "kineto-x3")
    out = {}
    for name, path in bundles.items():
        iid = svc.submit_path(path).incident_id
        svc.analyze(iid)
        out[name] = iid
    return svc.store, out


@pytest.mark.parametrize("name", ["oom-after-throttle", "collected-oom-after-throttle", "collected-hang",
                                  "oom-leak-only", "two-hosts", "8 ranks x3 cycles"])
def test_same_frame_and_offsets_on_real_traces(incidents, name, monkeypatch):
    store, iids = incidents
    iid = iids[name]
    c, s = collectives(store, iid), steps(store, iid)
    got = cc._numbered(c, s)
    _same(got, ref_numbered(c, s))
    if name not in ("oom-leak-only", "collected-hang"):      # (these two hold no Kineto traces)
        assert got.height > 0 and got["step"].null_count() < got.height
    offsets = cc.host_offsets(store, iid)
    monkeypatch.setattr(cc, "_numbered", ref_numbered)
    assert offsets == cc.host_offsets(store, iid)
    if name in ("two-hosts", "8 ranks x3 cycles"):
        (o,) = offsets
        assert abs(o.offset_ns + 1_700_000_000) < 1_000_000 and o.pairs == (48 if name == "two-hosts" else 144)


# -- generated collectives and steps --------------------------------------------------------------
@st.composite
def frames(draw):
    n_ranks = draw(st.integers(1, 4))
    rows = []
    for _ in range(draw(st.integers(0, 30))):
        ts = draw(st.none() | st.integers(0, 60))
        rows.append({"rank": draw(st.sampled_from([None] + list(range(n_ranks)))),
                     "host": draw(st.sampled_from([None, "h0", "h1"])),
                     "role": draw(st.sampled_from(["exec", "exec", "call"])),
                     "op": draw(st.sampled_from(["allreduce", "broadcast"])),
                     "collective": draw(st.sampled_from(["allreduce", "broadcast"])),
                     "tid": draw(st.sampled_from([1, 2])),
                     "ts_raw_ns": ts, "end_raw_ns": None if ts is None else ts + draw(st.integers(0, 5))})
    c = pl.DataFrame(rows, schema={"rank": pl.Int32, "host": pl.String, "role": pl.String, "op": pl.String,
                                   "collective": pl.String, "tid": pl.Int64, "ts_raw_ns": pl.Int64,
                                   "end_raw_ns": pl.Int64})
    srows = []
    for r in range(n_ranks):
        if draw(st.booleans()):
            continue                        # a rank without steps
        start = 0
        for n in range(draw(st.integers(0, 6))):
            start = draw(st.sampled_from([start, start + draw(st.integers(0, 15)),
                                          max(0, start - draw(st.integers(0, 10)))]))      # gaps, overlaps
            srows.append({"rank": r, "side": draw(st.sampled_from(["cpu", "cpu", "gpu"])),
                          "step": draw(st.sampled_from([n, n, None])) if draw(st.booleans()) else n,
                          "ts_raw_ns": start, "dur_ns": draw(st.none() | st.integers(-1, 20))})
    s = pl.DataFrame(srows, schema={"rank": pl.Int32, "side": pl.String, "step": pl.Int64, "ts_raw_ns": pl.Int64,
                                    "dur_ns": pl.Int64})
    if draw(st.booleans()):
        s = s.filter(pl.col("step").is_not_null())
    # as kineto_derived.steps gives them: one row per (rank, side, step), sorted by it
    s = s.unique(subset=["rank", "side", "step"], keep="first", maintain_order=True).sort("rank", "side", "step")
    c = c.sort("rank", "ts_raw_ns")
    return c, s


@settings(max_examples=500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_same_frame_on_generated(cs):
    c, s = cs
    _same(cc._numbered(c, s), ref_numbered(c, s))


def test_overlapping_steps_take_the_lowest_numbered():
    c = pl.DataFrame({"rank": [0, 0, 0, 0, 1], "host": ["h"] * 5, "role": ["exec"] * 5, "op": ["ar"] * 5,
                      "collective": ["ar"] * 5, "tid": [1] * 5, "ts_raw_ns": [5, 12, 15, 30, 5],
                      "end_raw_ns": [6, 13, 16, 31, 6]}, schema_overrides={"rank": pl.Int32})
    s = pl.DataFrame({"rank": [0, 0, 0], "side": ["cpu"] * 3, "step": [1, 2, 3], "ts_raw_ns": [10, 0, 25],
                      "dur_ns": [5, 20, 3]}, schema_overrides={"rank": pl.Int32})
    got = cc._numbered(c, s)
    # 12 is in steps 1 and 2; step 1 ends at 15 (its end is not in it); 30 is in no step
    assert got.select("rank", "step", "start").rows() == [(0, 2, 5), (0, 1, 12), (0, 2, 15), (1, None, 5)]
    _same(got, ref_numbered(c, s))
