"""Per-rank steps, collectives and GPU idle gaps from real traces, merged across files."""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from aftertrace.analysis import kineto_derived as kd
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.model import PARSER_TABLES
from aftertrace.server.store import Store

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "torch_trace"
PROFILER = ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "profiler"
TRUTH = json.loads((ROOT / "sample_traces" / "oom-after-throttle.truth.json").read_text())
IID = "inc1"


def build(tmp_path: Path, files: list[tuple[Path, str]]) -> Store:
    """Parse files and load them as one incident, the way the pipeline does (rank/host from contents)."""
    store = Store(tmp_path / "s.duckdb")
    hosts = set()
    for sid, (path, rel) in enumerate(files, 1):
        r = parse_file(ParseJob(str(path), rel, str(tmp_path / f"w{sid}")))
        assert r.status in ("parsed", "partial"), r.error
        store.insert_rows("sources", [{"incident_id": IID, "source_id": sid, "path": rel, "kind": r.kind,
                                       "host": r.host, "rank": r.rank, "clock_domain": r.clock_domain,
                                       "status": r.status}])
        hosts.add(r.host or "")
        for t in PARSER_TABLES:
            store.load_parts(t, r.parts.get(t, []), IID, sid)
    store.insert_rows("clock_map", [{"incident_id": IID, "host": h, "domain": "wall", "offset_ns": 0,
                                     "method": "test"} for h in hosts])
    return store


def raw(path: Path) -> dict:
    b = path.read_bytes()
    return json.loads(gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b)


def test_sample_bundle_steps_and_collectives_merge_duplicates(tmp_path):
    files = [(p, f"vm/profiler/{p.name}") for p in sorted(PROFILER.glob("*.pt.trace.json.gz"))]
    # the same cycle twice (a copy in another folder) must not duplicate anything
    dup = files[3][0]
    files.append((dup, f"copy/{dup.name}"))
    store = build(tmp_path, files)

    want_steps: dict[int, set] = {0: set(), 1: set()}
    want_coll: dict[int, int] = {0: 0, 1: 0}
    for p, _ in files[:-1]:
        d = raw(p)
        r = d["distributedInfo"]["rank"]
        want_steps[r] |= {int(e["name"].split("#")[1]) for e in d["traceEvents"]
                          if str(e.get("name", "")).startswith("ProfilerStep#")}
        want_coll[r] += sum(1 for e in d["traceEvents"] if e.get("name") == "gloo:all_reduce")

    sd = kd.step_durations(store, IID)
    for r in (0, 1):
        assert sd.filter(pl.col("rank") == r)["step"].to_list() == sorted(want_steps[r])
    s94 = sd.filter((pl.col("rank") == 0) & (pl.col("step") == 94)).row(0, named=True)
    assert round(s94["dur_s"], 3) == 2.813 and s94["ts_utc_ns"] == s94["ts_raw_ns"]
    assert TRUTH["leak"]["first_leak_epoch_ns"] < s94["ts_utc_ns"] < TRUTH["oom_kill"]["epoch_s_est"] * 1e9
    # throttled steps are ~7x the baseline on both ranks (README: 0.131 s -> 0.906 s)
    base = sd.filter(pl.col("step") < 70)["dur_s"].median()
    thr = sd.filter(pl.col("step").is_between(78, 90))["dur_s"].median()
    assert 0.11 < base < 0.15 and thr / base > 5

    col = kd.collectives(store, IID)
    for r in (0, 1):
        ex = col.filter((pl.col("rank") == r) & (pl.col("role") == "exec"))
        assert ex.height == want_coll[r]
        assert ex.sort("ts_raw_ns")["ordinal"].to_list() == list(range(want_coll[r]))
        assert col.filter((pl.col("rank") == r) & (pl.col("role") == "call")).height == want_coll[r]
    # the same ordinal on both ranks is the same allreduce: both ranks are inside it together
    a = col.filter(pl.col("role") == "exec").select("rank", "ordinal", "ts_raw_ns", "end_raw_ns")
    j = a.filter(pl.col("rank") == 0).join(a.filter(pl.col("rank") == 1), on="ordinal", suffix="_1")
    overlap = j.filter((pl.col("ts_raw_ns") < pl.col("end_raw_ns_1")) & (pl.col("ts_raw_ns_1") < pl.col("end_raw_ns")))
    assert overlap.height >= 0.9 * j.height

    ev0 = kd.merged_events(store, IID, 0)
    n0 = sum(sum(1 for e in raw(p)["traceEvents"] if e["ph"] in ("X", "i"))
             for p, _ in files[:-1] if raw(p)["distributedInfo"]["rank"] == 0)
    assert ev0.height == n0


def independent_gaps(doc: dict) -> list[tuple]:
    lanes: dict[tuple, list] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts, dur = Decimal(repr(e["ts"])) * 1000, Decimal(repr(e["dur"])) * 1000   # exact ns
            lanes.setdefault((e["args"]["device"], e["args"]["stream"]), []).append((int(ts), int(ts + dur)))
    out = []
    for (dev, stream), spans in lanes.items():
        spans.sort()
        busy = spans[0][1]
        for s, t in spans[1:]:
            if s > busy:
                out.append((dev, stream, busy, s))
            busy = max(busy, t)
    return sorted(out)


def test_gpu_idle_gaps_per_device_and_stream(tmp_path):
    p = DATA / "hta__sampled_rank-0.excerpt.json.gz"
    store = build(tmp_path, [(p, p.name)])
    gaps = kd.gpu_idle_gaps(store, IID)
    want = independent_gaps(raw(p))
    assert len(want) > 100
    got = sorted(zip(gaps["device"], gaps["stream"], gaps["gap_start_raw_ns"], gaps["gap_end_raw_ns"]))
    assert got == want
    assert (gaps["rank"] == 0).all() and (gaps["gap_ns"] > 0).all()
    big = kd.gpu_idle_gaps(store, IID, min_gap_ns=1_000_000)
    assert big.height == sum(1 for w in want if w[3] - w[2] > 1_000_000)


def test_nccl_collectives_match_across_two_ranks(tmp_path):
    files = [(DATA / f"hta__sampled_rank-{r}.excerpt.json.gz", f"rank{r}.json.gz") for r in (0, 1)]
    store = build(tmp_path, files)
    col = kd.collectives(store, IID).filter(pl.col("role") == "exec")
    assert sorted(col["rank"].unique().to_list()) == [0, 1]
    for r, (p, _) in enumerate(files):
        n = sum(1 for e in raw(p)["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
        assert col.filter(pl.col("rank") == r).height == n
    assert set(col["collective"]) == {"sendrecv"}


def test_optimizer_annotations_give_steps_when_there_is_no_profilerstep(tmp_path):
    doc = raw(DATA / "vm_32018.1795959631282104512.pt.trace.json.gz")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    p = tmp_path / "vm_32018.1.pt.trace.json"
    p.write_text(json.dumps(doc))
    store = build(tmp_path, [(p, p.name)])
    st = kd.steps(store, IID).filter(pl.col("side") == "cpu")
    opt = sorted((e for e in doc["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"), key=lambda e: e["ts"])
    assert st["marker"].to_list() == ["optimizer"] * len(opt) == ["optimizer"] * 3
    starts = [doc["baseTimeNanoseconds"] + round(e["ts"] * 1000) for e in opt]
    assert st["ts_raw_ns"].to_list() == starts
    assert st["dur_ns"].to_list() == [starts[1] - starts[0], starts[2] - starts[1], None]
