"""The compiled line engine (``ingest.native``) against the regexes it stands in for, on every real
file of the test corpus: each file parsed as it is, then with every compiled reader leaving every
line to the regexes (their code 255 on each row), must give the same tables, row for row.

The readers' own tests (test_applog, test_kernel, test_nccl_log, test_perf_script) hold each one
to its grammar on generated lines; this one holds the whole parse to the regexes on real ones.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aftertrace.ingest import native
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS = sorted(p for d in ("app_log", "nccl_log", "kernel", "dmesg", "perf_script", "realworld", "c10phase")
                for p in (DATA / d).iterdir() if p.is_file() and not p.name.endswith(".md")) + \
    sorted((ROOT / "sample_traces").glob("*/*/logs/*.log")) + sorted((ROOT / "sample_traces").glob("*/*/dmesg*"))
READERS = ("log_heads", "dmesg_raw", "subsys", "step_values", "rank_said", "nccl_info", "perf_headers", "wraps",
           "phase_readings")


def _left_to_the_regexes(name, real):
    def read(*a):
        r = real(*a)
        every = pa.array([native.UNSURE] * len(r[0]), pa.uint8())
        if name == "subsys":
            return every, r[1], len(every)
        if name == "nccl_info":     # (no header seen: the regexes number them all)
            return r._replace(code=every, first=pa.array([], pa.int64()), unsure=len(every))
        return r._replace(code=every, unsure=len(every))
    return read


def _tables(path: Path, out: Path) -> tuple:
    r = parse_file(ParseJob(str(path), path.name, str(out), time_zone="UTC"), default_registry())
    got = {}
    for t, files in sorted(r.parts.items()):
        tabs = [pq.read_table(f) for f in files] + ([r.inline[t]] if t in r.inline else [])
        if tabs:
            rows = pa.concat_tables([x.cast(tabs[0].schema) for x in tabs]).to_pylist()
            got[t] = (len(rows), hashlib.sha256(json.dumps(rows, default=str, sort_keys=True).encode()).hexdigest())
    return r.format, r.status, r.counts, got, json.dumps(r.attrs, default=str, sort_keys=True)


def test_the_corpus_is_there():
    assert len(CORPUS) > 80
    assert {p.parent.name for p in CORPUS} >= {"app_log", "nccl_log", "kernel", "dmesg", "perf_script"}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_compiled_readers_equal_the_regexes_on_real_files(path, tmp_path, monkeypatch):
    compiled = _tables(path, tmp_path / "a")
    for name in READERS:
        monkeypatch.setattr(native, name, _left_to_the_regexes(name, getattr(native, name)))
    assert _tables(path, tmp_path / "b") == compiled


def test_slices_cut_as_polars_cuts_in_both_layouts():
    # native.slices cuts each row at its own start and length, sharing the column's bytes: on ASCII
    # text it gives what Polars' str.slice gives (a negative or null start: null; a null or negative
    # length, or none: to the end; past the end: clipped), from either Arrow layout, sliced or not,
    # short rows (held in their views) and long ones (pointing into several data buffers) alike.
    import random

    import polars as pl

    rng = random.Random(5)
    texts = [None if rng.random() < .05 else "".join(rng.choice("ab yz019") for _ in range(rng.randint(0, 40)))
             for _ in range(3000)] + ["x" * 70 + str(i) for i in range(200_000)]
    start = [None if rng.random() < .05 else rng.randint(-2, 45) for _ in texts]
    length = [None if rng.random() < .1 else rng.randint(-1, 30) for _ in texts]
    df = pl.DataFrame({"t": pl.Series(texts, dtype=pl.String), "a": pl.Series(start, dtype=pl.Int32),
                       "k": pl.Series(length, dtype=pl.Int32)})
    a, k = pl.col("a"), pl.col("k")
    for off in (0, 7):
        d = df.slice(off)
        want = d.select(pl.when(a >= 0).then(pl.col("t").str.slice(a, pl.when(k >= 0).then(k)))).to_series()
        to_end = d.select(pl.when(a >= 0).then(pl.col("t").str.slice(a))).to_series()
        views = native.texts(d["t"])
        assert views.type == pa.string_view() and len(views.buffers()) > 3
        for src in (views, pa.array(texts[off:], pa.large_string())):
            got = pl.Series(native.slices(src, d["a"].to_arrow(), d["k"].to_arrow()))
            assert got.to_list() == want.to_list(), (src.type, off)
            assert pl.Series(native.slices(src, d["a"].to_arrow())).to_list() == to_end.to_list()
    # a cut inside a character moves to its edge: the output stays text, a piece of the row
    wide = ["\u00e9t\u00e9 \u4e2d\u6587 \U0001F600 ok", "x\u00e9", "\u00e9" * 20]
    for a0 in range(0, 14):
        for k0 in (-1, 1, 2, 3, 5, 30):
            got = pl.Series(native.slices(pa.array(wide, pa.large_string()), pa.array([a0] * 3, pa.int32()),
                                          pa.array([k0] * 3, pa.int32()))).to_list()
            assert all(g is not None and g in w for g, w in zip(got, wide)), (a0, k0, got)
    with pytest.raises(ValueError):
        native.slices(pa.array(["a", "b"], pa.large_string()), pa.array([0], pa.int32()))


def test_kineto_times_in_nanoseconds_are_the_python_formula():
    """``native.us_to_ns`` gives what kineto.py's formulas give (floor, round half to even, the
    time's range, the duration's int64 range; None for null, NaN, infinities), on random doubles
    of every magnitude, exact halves and the range edges; a time whose offset sum leaves int64 is
    refused (None), and kineto's ``_us_to_ns`` then takes Python's integers."""
    import math
    import random
    import struct

    from aftertrace.ingest.formats.kineto import MAX_TS_US, _py_dur_to_ns, _py_us_to_ns, _us_to_ns
    rng = random.Random(11)
    edges = [None, math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 0.0005, 0.0015, 0.0025,
             -0.0025, 1.0005, MAX_TS_US, -MAX_TS_US, math.nextafter(MAX_TS_US, 0), math.nextafter(-MAX_TS_US, 0),
             2.0 ** 63 / 1000, -(2.0 ** 63) / 1000, math.nextafter(2.0 ** 63 / 1000, 0), 2.0 ** 52, 2.0 ** 52 + 0.5]

    def value():
        k = rng.random()
        if k < 0.2:
            return rng.choice(edges)
        if k < 0.4:
            return struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if k < 0.7:
            return rng.randint(-10 ** 16, 10 ** 16) / rng.choice([1, 2, 4, 8, 1000, 1024])
        return rng.uniform(1.7e15, 1.8e15) + rng.choice([0, 0.5, 0.0005, 0.25, 0.0015])
    assert native.us_to_ns([], 0, 0, MAX_TS_US) == [] == native.us_to_ns([], 1)
    for _ in range(300):
        vals = [value() for _ in range(rng.randint(1, 400))]
        off = rng.choice([0, 123, -10 ** 18, 1_790_857_026_000_000_000])
        assert native.us_to_ns(vals, 0, off, MAX_TS_US) == _py_us_to_ns(vals, off)
        assert native.us_to_ns(vals, 1) == _py_dur_to_ns(vals)
    near = [math.nextafter(MAX_TS_US, 0)]                   # (x 1000: 4e18; plus 6e18 leaves int64)
    assert native.us_to_ns(near, 0, 6 * 10 ** 18, MAX_TS_US) is None
    big = _us_to_ns(near, 6 * 10 ** 18)
    assert big == _py_us_to_ns(near, 6 * 10 ** 18) and big[0] > 2 ** 63
