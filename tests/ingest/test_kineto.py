"""Kineto / torch.profiler traces: real files in, exact counts, ranks and wall times out.

Every expected number is computed here independently of the parser, with the standard
library's json (whole-file load, or raw_decode event by event for cut files).
"""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.formats.kineto_fields import NCCL_KERNEL, canonical_collective
from aftertrace.ingest.formats.kineto import KinetoParser
from aftertrace.ingest.parse import ParseJob, SourceResult, parse_file
from aftertrace.ingest.reader import Head

DATA = Path(__file__).resolve().parent.parent / "data" / "torch_trace"
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
TRUTH = ROOT / "sample_traces" / "oom-after-throttle.truth.json"
REC0 = DATA / "vm_32018.1795959631282104512.pt.trace.json.gz"
REC1 = DATA / "vm_32019.1795959631265919889.pt.trace.json.gz"
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}


def load(path: Path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw, json.loads(raw)


def rows(res: SourceResult, table: str) -> list[dict]:
    out = []
    for f in res.parts.get(table, []):
        out += pq.read_table(f).to_pylist()
    return out


def parse(path: Path, tmp_path: Path, rel: str | None = None) -> SourceResult:
    return parse_file(ParseJob(str(path), rel or path.name, str(tmp_path / "out")))


def wall_ns(doc: dict, ts) -> int:
    """Independent reading of Kineto time: base + ts µs (exact decimal arithmetic)."""
    base = doc.get("baseTimeNanoseconds", 0) if isinstance(doc, dict) else 0
    return base + int((Decimal(repr(ts)) * 1000).to_integral_value())


def expected(doc) -> dict:
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    x = [e for e in evs if e["ph"] in ("X", "i", "I")]
    mem = [e for e in evs if e["ph"] == "i" and e.get("name") == "[memory]"]
    ts = [wall_ns(doc, e["ts"]) for e in x]
    return {"events": len(x), "first": min(ts), "last": max(ts),
            "flows": len({(e["cat"], e["id"]) for e in evs if e["ph"] in ("s", "f", "t")}),
            "metrics": sum(1 for e in mem for k in ("Total Allocated", "Total Reserved") if k in e["args"]),
            "M": sum(1 for e in evs if e["ph"] == "M"),
            "steps": sum(1 for e in x if str(e.get("name", "")).startswith("ProfilerStep#"))}


REAL = [
    # file, rank, layout
    ("vm_32018.1795959631282104512.pt.trace.json.gz", 0),
    ("vm_32019.1795959631265919889.pt.trace.json.gz", 1),
    ("hta__nccl_data.excerpt.json.gz", 0),
    ("hta__sampled_rank-0.excerpt.json.gz", 0),
    ("hta__sampled_rank-1.excerpt.json.gz", 1),
    ("hta__cpu_only_rank-34.pt.trace.json.gz", 34),
    ("hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz", None),
    ("hta__triton_example.json.gz", None),
]


@pytest.mark.parametrize("name,rank", REAL)
def test_real_traces_counts_ranks_and_times(name, rank, tmp_path):
    path = DATA / name
    raw, doc = load(path)
    assert KinetoParser.detect(Head.read(path, name))
    res = parse(path, tmp_path)
    exp = expected(doc)
    assert res.status == "parsed", res.error
    assert (res.kind, res.format, res.clock_domain) == ("torch_trace", "kineto", "wall")
    assert res.rank == rank
    assert res.bytes_read == len(raw)
    assert res.counts["events"] == exp["events"]
    assert res.counts["flows"] == exp["flows"]
    assert res.counts["metrics"] == exp["metrics"]
    assert res.counts["steps"] >= exp["steps"]
    ev = rows(res, "events")
    assert min(r["ts_raw_ns"] for r in ev) == exp["first"]
    assert max(r["ts_raw_ns"] for r in ev) == exp["last"]
    assert res.attrs["first_ts_ns"] == exp["first"] and res.attrs["last_ts_ns"] == exp["last"]
    facts = [f for f in rows(res, "facts") if f["key"].startswith("kineto.")]
    assert len(facts) == exp["M"]
    # GPU-side rows never carry Kineto's device index / stream as pid / tid
    assert all(r["pid"] is None and r["tid"] is None for r in ev if r["category"] in GPU)


def test_every_event_keeps_its_raw_args(tmp_path):
    raw, doc = load(REC0)
    res = parse(REC0, tmp_path)
    ev = rows(res, "events")
    want = sorted((wall_ns(doc, e["ts"]), e["name"], json.dumps(e.get("args"), sort_keys=True))
                  for e in doc["traceEvents"] if e["ph"] in ("X", "i"))
    got = sorted((r["ts_raw_ns"], r["name"], json.dumps(json.loads(r["attrs"]) if r["attrs"] else None,
                                                        sort_keys=True)) for r in ev)
    assert got == want
    spans = {(r["name"], r["ts_raw_ns"]): r["dur_ns"] for r in ev}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert spans[(e["name"], wall_ns(doc, e["ts"]))] == int((Decimal(repr(e["dur"])) * 1000)
                                                                    .to_integral_value())


def test_events_parts_are_whole_row_groups_in_file_order(tmp_path, monkeypatch):
    """Many small chunks are gathered into parts of whole DuckDB row groups (the store loads
    those in parallel); rows stay in file order and every event keeps its args (non-ASCII
    text, an empty object and no args at all included)."""
    import aftertrace.ingest.formats._kineto_stream as stream
    import aftertrace.ingest.sink as sink
    monkeypatch.setattr(sink, "ROW_GROUP", 64)
    monkeypatch.setattr(stream.EventReader.__init__, "__defaults__", (4096,))
    evs = []
    for i in range(1000):
        e = {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": 1000.5 + i, "dur": 1}
        if i % 11 == 0:
            e["args"] = {}
        elif i % 5:
            e["args"] = {"External id": i, "note": "größe {x}" if i % 7 == 0 else "x"}
        evs.append(e)
        if i % 100 == 0:   # a flow end between the events: chunks that are not all spans
            evs.append({"ph": "s", "cat": "ac2g", "id": i, "pid": 1, "tid": 2, "ts": 1000.5 + i})
    p = tmp_path / "t.pt.trace.json"
    p.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                             "traceEvents": evs}, ensure_ascii=False, indent=1), encoding="utf-8")
    res = parse(p, tmp_path)
    assert res.status == "parsed", res.error
    sizes = [pq.ParquetFile(f).metadata.num_rows for f in res.parts["events"]]
    assert len(sizes) > 1 and sum(sizes) == 1000 and all(n % 64 == 0 for n in sizes[:-1])
    ev = rows(res, "events")
    spans = [e for e in evs if e["ph"] == "X"]
    assert [r["name"] for r in ev] == [e["name"] for e in spans]
    assert [json.loads(r["attrs"]) if r["attrs"] is not None else None for r in ev] == [e.get("args") for e in spans]
    assert res.counts["flows"] == 10


def test_a_small_trace_in_a_worker_writes_no_part(tmp_path):
    """Parsed as a worker parses it (``inline_rows``), a small real trace sends every table back
    with its result, its events too: the same rows as the parts of an in-process parse, and no
    Parquet file written."""
    path = DATA / "vm_32018.1795959631282104512.pt.trace.json.gz"
    a = parse(path, tmp_path / "a")
    b = parse_file(ParseJob(str(path), path.name, str(tmp_path / "b" / "out"), inline_rows=100_000))
    assert a.status == b.status == "parsed" and a.counts == b.counts
    assert "events" in b.inline and not b.parts.get("events")
    assert not any(t != "parse_issues" for t, fs in b.parts.items() if fs)
    for table, got in b.inline.items():
        assert got.to_pylist() == rows(a, table), table


@pytest.mark.parametrize("path,truth", [(REC0, "gloo2_truth_rank0.json"), (REC1, "gloo2_truth_rank1.json")])
def test_recorded_gloo_job_identity_and_wall_clock(path, truth, tmp_path):
    t = json.loads((DATA / truth).read_text())
    res = parse(path, tmp_path)
    assert (res.rank, res.host, res.pid) == (t["rank"], t["host"], t["pid"])
    ev = {r["name"]: r for r in rows(res, "events")}
    marks = [m for m in t["marks"] if m["name"] in ev]
    assert len(marks) == 3          # the profiler's active steps 2..4
    for m in marks:
        r = ev[m["name"]]
        # the span lies inside the window the process read with time.time_ns() around it
        assert m["before_ns"] <= r["ts_raw_ns"] <= r["ts_raw_ns"] + r["dur_ns"] <= m["after_ns"]
    steps = rows(res, "steps")
    assert sorted(s["step"] for s in steps if s["name"].startswith("ProfilerStep#")) == [2, 3, 4]
    assert [s["step"] for s in steps if s["name"] == "Optimizer.step#SGD.step"] == [0, 1, 2]
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert facts["world_size"] == "2" and facts["backend"] == "gloo"


def test_recorded_gloo_collectives(tmp_path):
    raw, doc = load(REC0)
    res = parse(REC0, tmp_path)
    col = rows(res, "collectives")
    gloo = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("gloo:")]
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("c10d::")]
    assert len([c for c in col if c["role"] == "exec"]) == len(gloo) == 18
    assert len([c for c in col if c["role"] == "call"]) == len(calls) == 18
    # the step's all_reduce of torch.ones(1000) float32: 4000 bytes on the gloo thread
    big = [c for c in col if c["role"] == "exec" and c["in_nelems"] == 1000]
    assert len(big) == 3 and all(c["bytes"] == 4000 and c["collective"] == "allreduce" for c in big)
    assert {c["collective"] for c in col} == {"allreduce", "barrier"}
    ex = sorted((c for c in col if c["role"] == "exec"), key=lambda c: c["ts_raw_ns"])
    assert [c["ordinal"] for c in ex] == list(range(18))


def test_nccl_kernels_and_c10d_calls(tmp_path):
    raw, doc = load(DATA / "hta__nccl_data.excerpt.json.gz")
    res = parse(DATA / "hta__nccl_data.excerpt.json.gz", tmp_path)
    col = rows(res, "collectives")
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_")]
    ex = [c for c in col if c["role"] == "exec"]
    assert len(ex) == len(kernels) == 21
    by_ts = {wall_ns(doc, k["ts"]): k for k in kernels}
    for c in ex:
        k = by_ts[c["ts_raw_ns"]]
        a = k["args"]
        assert c["collective"] == canonical_collective(a["Collective name"])
        assert (c["pg"], c["in_nelems"], c["group_size"], c["device"], c["stream"]) == (
            a["Process Group Name"], a["In msg nelems"], a["Group size"], a["device"], a["stream"])
        assert c["bytes"] == a["In msg nelems"] * {"Float": 4, "Byte": 1, "Char": 1, "Long": 8, "Int": 4}.get(
            a["dtype"], c["bytes"] // max(a["In msg nelems"], 1))
        assert c["pid"] is None and c["backend"] == "nccl"
    assert sorted({c["collective"] for c in ex}) == ["allreduce", "broadcast"]
    calls = [c for c in col if c["role"] == "call"]
    assert len(calls) == 21 and all(c["pg"] == "0" for c in calls)   # from the record_param_comms inside


@pytest.mark.parametrize("name,op", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "AllReduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "SendRecv"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "Generic"),
    ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "AllReduce"),
])
def test_nccl_kernel_names_of_every_generation(name, op):
    # names as they appear in real traces and profiler tables (NCCL 2.4 .. 2.2x)
    m = NCCL_KERNEL.match(name)
    assert m and (m.group(1) or m.group(2)) == op
    assert canonical_collective(op) == (None if op == "Generic" else op.lower())
    assert not NCCL_KERNEL.match("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>")


def test_base_time_after_the_event_array(tmp_path):
    # nccl_data writes baseTimeNanoseconds as the last key: rows are rebased at the end
    raw, doc = load(DATA / "hta__nccl_data.excerpt.json.gz")
    assert raw.index(b'"baseTimeNanoseconds"') > raw.index(b'"traceEvents"')
    res = parse(DATA / "hta__nccl_data.excerpt.json.gz", tmp_path)
    assert res.attrs["time_base"] == "baseTimeNanoseconds"
    first = min(wall_ns(doc, e["ts"]) for e in doc["traceEvents"] if e["ph"] in ("X", "i"))
    assert res.attrs["first_ts_ns"] == first == 1716423322388068751   # 2024-05-23, FORMATS.md 2.2
    assert min(r["ts_raw_ns"] for r in rows(res, "collectives") + rows(res, "steps")) > 1.7e18


def test_bare_array_and_minified_variants(tmp_path):
    raw, doc = load(REC0)
    exp = expected(doc)
    arr = tmp_path / "bare.json"
    # a bare array has no baseTimeNanoseconds: shift ts to absolute µs so the file keeps its times
    evs = [dict(e, ts=e["ts"] + doc["baseTimeNanoseconds"] / 1000) if "ts" in e else e for e in doc["traceEvents"]]
    arr.write_text(json.dumps(evs))
    mini = tmp_path / "mini.pt.trace.json"
    mini.write_text(json.dumps(doc, separators=(",", ":")))
    for p, layout in ((arr, "array"), (mini, "object")):
        assert KinetoParser.detect(Head.read(p, p.name))
        res = parse(p, tmp_path / p.stem, p.name)
        assert res.status == "parsed", res.error
        assert res.attrs["layout"] == layout
        assert res.counts["events"] == exp["events"]
        assert res.counts["flows"] == exp["flows"]
    assert res.attrs["first_ts_ns"] == exp["first"]


def complete_prefix(text: bytes) -> tuple[int, int]:
    """Independent count of the complete events in a cut trace, and where the first unusable one starts."""
    s = text.decode("utf-8", "replace")
    dec = json.JSONDecoder()
    i = s.index("[", s.index('"traceEvents"')) + 1
    n = 0
    while True:
        while i < len(s) and s[i] in " \t\r\n,":
            i += 1
        try:
            _, end = dec.raw_decode(s, i)
        except json.JSONDecodeError:
            return n, len(s[:i].encode("utf-8"))
        n += 1
        i = end


@pytest.mark.parametrize("frac", [0.35, 0.5, 0.77, 0.999])
def test_truncated_tmp_file_recovers_every_complete_event(frac, tmp_path):
    raw, doc = load(REC0)
    cut = raw[: int(len(raw) * frac)]
    p = tmp_path / "vm_32018.1795959631282104512.pt.trace.json.tmp"
    p.write_bytes(cut)
    n_complete, at = complete_prefix(cut)
    assert KinetoParser.detect(Head.read(p, p.name))
    res = parse(p, tmp_path)
    assert res.status == "partial"
    assert f"cut at byte {at}" in res.error
    evs = doc["traceEvents"][:n_complete]
    assert res.counts["events"] == sum(1 for e in evs if e["ph"] in ("X", "i"))
    assert sum(res.attrs["events_by_phase"].values()) == n_complete
    issues = rows(res, "parse_issues")
    assert [(i["kind"], i["byte_offset"]) for i in issues if i["kind"] == "truncated"] == [("truncated", at)]
    assert res.rank == 0 and res.attrs["time_base"] == "baseTimeNanoseconds"


def test_truncated_gzip_keeps_events(tmp_path):
    data = (DATA / "hta__sampled_rank-0.excerpt.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    res = parse(p, tmp_path)
    assert res.status == "partial" and "compressed stream is truncated" in res.error
    raw = gzip.GzipFile(fileobj=__import__("io").BytesIO(data[: len(data) // 2]))
    text = b""
    try:
        while chunk := raw.read1(4096):
            text += chunk
    except EOFError:
        pass
    n, at = complete_prefix(text)
    assert res.counts["events"] == n > 300
    assert res.attrs["time_base"] == "absolute_epoch_us"


def test_plain_pt_trace_json(tmp_path):
    raw, doc = load(REC0)
    p = tmp_path / REC0.name[:-3]
    p.write_bytes(raw)
    res = parse(p, tmp_path)
    assert (res.status, res.format, res.host, res.pid, res.rank) == ("parsed", "kineto", "vm", 32018, 0)
    assert res.counts["events"] == expected(doc)["events"] and not res.compressed


def test_relative_times_without_base_are_a_named_unknown(tmp_path):
    raw, doc = load(REC0)
    doc.pop("baseTimeNanoseconds")
    p = tmp_path / "nobase.pt.trace.json"
    p.write_text(json.dumps(doc))
    res = parse(p, tmp_path)
    assert res.clock_domain == "process" and res.attrs["time_base"] == "unknown"
    assert "no_time_base" in {i["kind"] for i in rows(res, "parse_issues")}
    assert res.status == "partial"


def test_bad_events_are_counted_and_parsing_goes_on(tmp_path):
    raw, doc = load(REC0)
    doc["traceEvents"].insert(5, {"ph": "X", "name": "broken", "ts": "soon"})
    doc["traceEvents"].insert(9, 42)
    p = tmp_path / "bad.pt.trace.json"
    p.write_text(json.dumps(doc))
    res = parse(p, tmp_path)
    assert res.status == "partial"
    kinds = [i["kind"] for i in rows(res, "parse_issues")]
    assert kinds.count("bad_event") == 2
    assert res.counts["events"] == expected(load(REC0)[1])["events"]


def test_an_unknown_phase_is_reported_and_the_rest_of_its_chunk_is_read(tmp_path):
    """``ph`` is decoded as one of the format's phases; an event with another phase sends its
    chunk down the untyped path, which still reads every other event of the chunk."""
    raw, doc = load(REC0)
    doc["traceEvents"].insert(7, {"ph": "Z", "name": "future phase", "ts": 1.0, "pid": 1, "tid": 1})
    doc["traceEvents"].insert(8, {"ph": 5, "name": "not a phase", "ts": 1.0})
    p = tmp_path / "phase.pt.trace.json"
    p.write_text(json.dumps(doc))
    res = parse(p, tmp_path)
    issues = rows(res, "parse_issues")
    assert [i for i in issues if i["kind"] == "unsupported_phase"][0]["message"].startswith("1 event(s) of phase 'Z'")
    assert [i["kind"] for i in issues].count("bad_event") == 1          # ph 5 is no trace event
    assert res.counts["events"] == expected(load(REC0)[1])["events"]
    assert res.attrs["events_by_phase"]["Z"] == 1


@pytest.mark.parametrize("text", [
    b'{"job": "x", "hosts": {"node-3": {"paths": ["node-3/"]}}}',        # an aftertrace manifest
    b'{"__REALTIME_TIMESTAMP": "1", "MESSAGE": "x"}\n',                     # journald JSON
    b'[1, 2, 3]',
    b'{"traceEvents": "no"}',
])
def test_other_json_is_not_claimed(text):
    assert not KinetoParser.detect(Head.from_bytes("x.json", text))


def test_sample_bundle_ranks_pids_and_step_times(tmp_path):
    truth = json.loads(TRUTH.read_text())
    files = sorted((SAMPLE / "vm" / "profiler").glob("*.pt.trace.json.gz"))
    assert len(files) == 24
    by_rank: dict[int, list] = {}
    for i, f in enumerate(files):
        res = parse(f, tmp_path / str(i), f"vm/profiler/{f.name}")
        assert res.status == "parsed" and res.host == "vm"
        assert res.pid == truth["pids"]["ranks"][str(res.rank)]["pid"]
        by_rank.setdefault(res.rank, []).extend(s for s in rows(res, "steps") if s["name"].startswith("Prof"))
    assert sorted(by_rank) == [0, 1]
    s94 = [s for s in by_rank[0] if s["step"] == 94][0]
    # README: rank 0's ProfilerStep#94 -> 13:28:42.250 UTC, 2813 ms; #78/#79 984/810 ms
    assert abs(s94["ts_raw_ns"] - 1795958922_250_000_000) < 1_000_000
    assert round(s94["dur_ns"] / 1e6) == 2813
    assert [round(s["dur_ns"] / 1e6) for s in sorted(by_rank[0], key=lambda s: s["step"])
            if s["step"] in (78, 79)] == [984, 810]
    # all of rank 0's steps happen before the OOM kill, the leaking ones after the leak flag
    kill = truth["oom_kill"]["epoch_s_est"] * 1e9
    assert max(s["ts_raw_ns"] + s["dur_ns"] for s in by_rank[0]) < kill
    assert s94["ts_raw_ns"] > truth["leak"]["first_leak_epoch_ns"]


def test_streamed_parts_of_a_late_time_base_are_announced_rebased(tmp_path, monkeypatch):
    # Parts are loaded while the file is parsed; when baseTimeNanoseconds comes after the
    # events, the parts written before it are rewritten, so none may be announced before.
    from aftertrace.ingest import sink as sink_mod
    from aftertrace.ingest.formats._kineto_stream import EventReader
    monkeypatch.setattr(sink_mod, "ROW_GROUP", 64)                  # parts written mid-parse
    monkeypatch.setattr(EventReader.__init__, "__defaults__", (4096,))   # many small chunks
    path = DATA / "hta__nccl_data.excerpt.json.gz"
    raw, doc = load(path)
    announced = []

    def on_part(table, part):      # read at announcement: what a loader would insert
        if table == "events":
            announced.extend(pq.read_table(part, columns=["ts_raw_ns"])["ts_raw_ns"].to_pylist())

    res = parse_file(ParseJob(str(path), path.name, str(tmp_path / "out")), on_part=on_part)
    assert res.status == "parsed" and len(res.parts["events"]) >= 2
    exp = expected(doc)
    assert len(announced) == exp["events"] and min(announced) == exp["first"] == 1716423322388068751
    # a file with the base first streams its parts before the parse ends
    first_seen = []
    monkeypatch.setattr(sink_mod.RowSink, "close", _spy_close(sink_mod.RowSink.close, first_seen))
    parse_file(ParseJob(str(REC0), REC0.name, str(tmp_path / "out2")),
               on_part=lambda t, p: first_seen.append("part"))
    assert first_seen.index("close") > 0, "no part was announced while the file was parsed"


def _spy_close(close, log):
    def spy(self, *a, **kw):
        log.append("close")
        return close(self, *a, **kw)
    return spy


_AWKWARD = {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": [
    {"ph": "M", "name": "process_labels", "pid": 7, "tid": 0, "ts": 0, "args": {"labels": "CPU"}},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 7, "tid": 8, "ts": 10.0005, "dur": 2.0005},
    {"ph": "X", "cat": "Kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7,
     "ts": 11.0015, "dur": 1e30, "args": {"device": 0, "stream": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": "7", "tid": "Spans", "ts": 10.5, "dur": 1,
     "args": {"Input Dims": [[4, 4]], "Input type": ["float"]}},
    {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": "7", "tid": "Spans", "ts": 10.6, "dur": 0.5,
     "args": {"Collective name": "allreduce", "In msg nelems": 16, "dtype": "Float", "Group size": 2}},
    {"ph": "X", "name": 12.5, "pid": 9, "tid": 9, "ts": 12.5, "dur": -0.0005},
    {"ph": "X", "cat": "cpu_op", "name": None, "pid": 18446744073709551615, "tid": 1, "ts": 13},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 8, "ts": 14, "s": "t",
     "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 1024, "Total Reserved": 2048}},
    {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 7, "tid": 8, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "ts too large", "pid": 7, "tid": 8, "ts": 1e17, "dur": 1},
    {"ph": "C", "name": "mem", "pid": 7, "tid": 0, "ts": 15.25, "args": {"a": 1, "b": "x"}},
    {"ph": "s", "cat": "ac2g", "id": 1, "pid": 7, "tid": 8, "ts": 10.5},
    {"ph": "f", "cat": "ac2g", "id": "1", "pid": 0, "tid": 7, "ts": 11.0015, "bp": "e"},
    {"ph": "s", "cat": "ac2g", "id": 2, "pid": 7, "tid": 8, "ts": 10.7},
    {"ph": "t", "cat": "fwdbwd", "id": "x", "pid": 7, "tid": 8, "ts": 10.8},
    {"ph": "B", "name": "unsupported", "pid": 7, "tid": 8, "ts": 16},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7, "ts": 10.9, "dur": 3},
]}


@pytest.mark.parametrize("name", ["awkward", "hta__nccl_data.excerpt.json.gz", "hta__sampled_rank-0.excerpt.json.gz",
                                  "hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz", REC0.name])
def test_small_chunks_read_event_by_event_give_the_vectorised_rows(name, tmp_path, monkeypatch):
    # a chunk of few events skips the Polars queries (the fixed cost of a small file); both
    # ways must write the same rows, number for number (flows: no row order is promised)
    import aftertrace.ingest.formats.kineto as kineto
    if name == "awkward":
        path = tmp_path / "awkward.pt.trace.json"
        path.write_text(json.dumps(_AWKWARD))
    else:
        path = DATA / name
    got = {}
    for small in (0, 1 << 30):
        monkeypatch.setattr(kineto, "SMALL_CHUNK", small)
        res = parse_file(ParseJob(str(path), path.name, str(tmp_path / f"out{small}")))
        assert res.status in ("parsed", "partial"), res.error
        tables = {t: rows(res, t) for t in res.parts}
        tables["flows"] = sorted(tables.get("flows", []), key=lambda r: json.dumps(r, sort_keys=True))
        got[small] = (res.status, res.error, res.pid, res.attrs, tables)
    assert got[0] == got[1 << 30]
    if name == "awkward":
        tables = got[0][4]
        assert {t for t in tables if tables[t]} >= {"events", "metrics", "flows", "steps", "collectives", "facts",
                                                   "parse_issues"}


def _chunked_variants() -> dict[str, object]:
    """Traces whose per-chunk results differ with the chunking: bad events (at most 100 stored per
    chunk, at the chunk's offset), counters and memory instants (metrics in chunk order), and a
    time base decided by the first chunk with a usable ts."""
    bad = dict(_AWKWARD, traceEvents=[{"ph": "X", "cat": "cpu_op", "name": f"no ts {i}", "pid": 7, "tid": 8}
                                      for i in range(150)] + _AWKWARD["traceEvents"] + [{"ph": "X", "name": "last"}])
    straddle = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 7, "tid": 8},
        dict(_AWKWARD["traceEvents"][1], ts=1.7e15 + 10),
        dict(_AWKWARD["traceEvents"][7], ts=1.7e15 + 11)] + _AWKWARD["traceEvents"][2:]}
    return {"awkward": _AWKWARD, "many_bad": bad, "straddle": straddle, "bare": _AWKWARD["traceEvents"]}


@pytest.mark.parametrize("name", sorted(_chunked_variants()))
@pytest.mark.parametrize("block", [64, 700])
def test_small_chunks_read_together_give_each_chunks_rows(name, block, tmp_path, monkeypatch):
    # consecutive chunks of few events are read together (a file's last event is a chunk of its
    # own); the rows must be those of reading each chunk on its own, in order (the vectorised
    # path with SMALL_CHUNK 0 reads every chunk alone)
    import aftertrace.ingest.formats.kineto as kineto
    from aftertrace.ingest.formats._kineto_stream import EventReader
    monkeypatch.setattr(EventReader.__init__, "__defaults__", (block,))
    path = tmp_path / f"{name}.pt.trace.json"
    path.write_text(json.dumps(_chunked_variants()[name], indent=1))
    got = {}
    for small in (0, 3000):
        monkeypatch.setattr(kineto, "SMALL_CHUNK", small)
        res = parse_file(ParseJob(str(path), path.name, str(tmp_path / f"out{small}")))
        tables = {t: rows(res, t) for t in res.parts}
        tables["flows"] = sorted(tables.get("flows", []), key=lambda r: json.dumps(r, sort_keys=True))
        got[small] = (res.status, res.error, res.pid, res.clock_domain, res.attrs, tables)
    assert got[0] == got[3000]
    if name == "many_bad":
        assert got[0][4]["time_base"] == "baseTimeNanoseconds" and res.issues > 150


@pytest.mark.parametrize("size", [1, 200, 4096])
def test_detect_reads_a_prefix_of_the_head_to_the_same_answer(size, monkeypatch):
    import aftertrace.ingest.formats.kineto as kineto
    heads = [Head.read(DATA / name, name) for name, _ in REAL]
    heads += [Head.from_bytes(f"{k}.json", json.dumps(v).encode()) for k, v in _chunked_variants().items()]
    big = [{"ph": "X", "name": "x" * 500, "ts": i, "pid": 1, "tid": 1} for i in range(60)]
    heads += [Head.from_bytes("big.json", json.dumps(big).encode()),
              Head.from_bytes("mixed.json", json.dumps(big[:46] + [1, 2, 3, 4, 5] + big).encode()),
              Head.from_bytes("cut.json", json.dumps({"traceEvents": big}).encode()[:9000]),
              Head.from_bytes("x.json", b'{"job": "x", "hosts": {"node-3": {"paths": ["node-3/"]}}}')]
    want = [KinetoParser.detect(h) for h in heads]
    monkeypatch.setattr(kineto, "DETECT_BYTES", size)
    assert [KinetoParser.detect(h) for h in heads] == want
    assert want.count(True) >= len(REAL) + 4


@pytest.mark.parametrize("name", ["many_bad", "straddle", REC0.name, "cut.json.gz"])
def test_blocks_read_ahead_on_a_worker_give_the_rows_of_blocks_read_in_turn(name, tmp_path, monkeypatch):
    # a file of more than one block is read and decoded a block ahead on a worker thread; the
    # rows, issues and outcome (a cut stream's error after every complete event) are the same
    import aftertrace.ingest.formats.kineto as kineto
    from aftertrace.ingest.formats._kineto_stream import EventReader
    monkeypatch.setattr(EventReader.__init__, "__defaults__", (4096,))
    path = tmp_path / name
    if name == REC0.name:
        path = REC0
    elif name == "cut.json.gz":
        raw = gzip.compress(load(REC0)[0], mtime=0)
        path.write_bytes(raw[: len(raw) * 2 // 3])
    else:
        path.write_text(json.dumps(_chunked_variants()[name], indent=1))
    got, threads = {}, {}
    real_ahead = kineto.ahead
    for block in (0, 1 << 40):          # (more than one block: read ahead; else not)
        monkeypatch.setattr(kineto, "BLOCK", block)
        used = []
        monkeypatch.setattr(kineto, "ahead", lambda *a, **k: used.append(1) or real_ahead(*a, **k))
        res = parse_file(ParseJob(str(path), path.name, str(tmp_path / f"out{block}")))
        tables = {t: rows(res, t) for t in res.parts}
        tables["flows"] = sorted(tables.get("flows", []), key=lambda r: json.dumps(r, sort_keys=True))
        got[block] = (res.status, res.error, res.pid, res.clock_domain, res.attrs, res.issues, tables)
        threads[block] = len(used)
    assert threads == {0: 1, 1 << 40: 0}
    assert got[0] == got[1 << 40]
    if name == "cut.json.gz":
        assert got[0][0] == "partial" and len(got[0][6]["events"]) > 100
