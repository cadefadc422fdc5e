"""The compiled Chrome-trace event reader (``at_kineto_events``, :func:`ingest.native.kineto_events`)
against msgspec's decode into ``Ev``: what it reads, it reads as msgspec does; what it is not sure of,
it leaves to msgspec (None)."""
from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest import native
from aftertrace.ingest.formats import _kineto_stream as KS
from aftertrace.ingest.parse import ParseJob, parse_file

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted(glob.glob(str(ROOT / "tests/data/torch_trace/*.json*"))) + \
    sorted(glob.glob(str(ROOT / "sample_traces/*/vm/profiler/*.json.gz")))[:4]


def _body(path: str) -> bytes:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    i = data.find(b'"traceEvents"')
    i = data.index(b"[", i if i >= 0 else 0) + 1
    body = data[i:data.rindex(b"]")]
    return body[:body.rfind(b"}") + 1]


def _same(body: bytes) -> bool:
    """Whether the compiled reader read ``body`` (False: it left it), asserting that what it read
    equals msgspec's Ev fields, event by event."""
    got = native.kineto_events(body)
    if got is None:
        return False
    evs = KS._TYPED.decode(b"[" + body + b"]")      # (what it reads is JSON msgspec reads typed)
    assert got.n == len(evs)
    assert [native.KINETO_PHASES[c] for c in got.ph.to_pylist()] == [e.ph for e in evs]
    assert got.cat.to_pylist() == [e.cat for e in evs]
    assert got.name.to_pylist() == [e.name for e in evs]
    assert list(map(repr, got.ts.to_pylist())) == [repr(e.ts) for e in evs]     # (-0.0 is not 0.0 here)
    assert list(map(repr, got.dur.to_pylist())) == [repr(e.dur) for e in evs]
    assert got.args.to_pylist() == [bytes(e.args).decode() or None for e in evs]
    for j, field in enumerate(("pid", "tid", "id")):
        ints, strs = (a.to_pylist() for a in got.ids[j])
        assert [i if i is not None else s for i, s in zip(ints, strs)] == [getattr(e, field) for e in evs]
    for k in range(0, got.n, max(1, got.n // 50)):     # each event's own bytes: the same Ev
        a, b = got.start[k].as_py(), got.end[k].as_py()
        assert KS._ONE.decode(body[a:b]) == evs[k]
    return True


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_real_traces_read_as_msgspec_reads_them(path):
    assert _same(_body(path))


NORMAL = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 17, "tid": 18, "ts": 1.5, "dur": 2, "args": {"a": 1}}'
# (odd event, whether the compiled reader must read it: True, leave it: False, either: None)
ODD = [
    (b'{}', True), (b'{"ph": ""}', True), (b'{"ph": "Z"}', False), (b'{"ph": null}', False),
    (b'{"ts": "12"}', False), (b'{"ts": 1e400}', False), (b'{"ts": -0}', True), (b'{"ts": -0.0}', True),
    (b'{"ts": 12345678901234567890123}', True), (b'{"ts": 1.7976931348623157e308}', True),
    (b'{"ts": 5e-324}', True), (b'{"ts": 0.1e1, "dur": -2E-2}', True), (b'{"ts": 01}', False),
    (b'{"ts": 1.}', False), (b'{"ts": .5}', False), (b'{"ts": +1}', False), (b'{"ts": true}', False),
    (b'{"pid": 1.0}', False), (b'{"pid": 99999999999999999999}', False),
    (b'{"pid": -9223372036854775808, "tid": 9223372036854775807}', True), (b'{"pid": "Spans"}', True),
    (b'{"tid": "stream 7", "id": "0x1f"}', True), (b'{"id": 7}', True), (b'{"name": 3}', False),
    (b'{"name": "a\\"b"}', False), (b'{"cat": "\\u00e9"}', False), ('{"cat": "é"}'.encode(), False),
    (b'{"args": {"a": [1, {"b": "\\u12ab"}]}}', False), (b'{"args": {"a": "x\\ny\\t\\\\"}}', True),
    (b'{"args": "text"}', True), (b'{"args": [1, 2.5e3, null, true, false]}', True),
    (b'{"args": {"a": "\x01"}}', False), (b'{"bp": 3}', False), (b'{"bp": "e", "s": null}', True),
    (b'{"x": [true, false, null, -1.5e-3, {"y": []}], "ph": "i"}', True), (b'{"ts": 1, "ts": 2}', False),
    (b'{"ph": "X",}', False), (b'{"ph": "X" "ts": 1}', False), (b'{"p\\u0068": "Q"}', False),
    (b'{\r\n\t"ph" :\t"M" ,\n "args":\r\n{ }\n}', True), (b'{"args": ' + b'[' * 70 + b']' * 70 + b'}', False),
    (b'{"args": ' + b'[' * 10 + b']' * 10 + b'}', True), (b'{"args": {"a": tru}}', False),
    (b'[1]', False), (b'"ev"', False), (b'{"name": "x"}}', False),
]


@pytest.mark.parametrize("odd,read", ODD, ids=lambda v: v.decode("utf-8", "replace")[:40] if isinstance(v, bytes) else str(v))
def test_odd_events_are_read_as_msgspec_reads_them_or_left_to_it(odd, read):
    body = NORMAL + b",\n" + odd + b", " + NORMAL
    if read is False:
        assert native.kineto_events(body) is None
    else:
        assert _same(body) is True


def test_odd_events_in_any_mix():
    """Every odd event between every other one: read as msgspec reads them, or left."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from([o for o, _ in ODD] + [NORMAL]), min_size=1, max_size=6),
           st.sampled_from([b",", b" ,\n", b"\n,\t"]))
    def run(parts, sep):
        body = sep.join(parts)
        if native.kineto_events(body) is not None:
            assert _same(body)
    run()


def test_bodies_that_are_not_json_are_left():
    for body in (NORMAL + b",", NORMAL + b" " + NORMAL, b"," + NORMAL, NORMAL[:-1], NORMAL + b"]"):
        assert native.kineto_events(body) is None


def _tables(path: str, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    r = parse_file(ParseJob(path, Path(path).name, str(out)))
    assert r.status in ("parsed", "partial"), r.error
    got = {}
    for f in sorted(out.glob("*.parquet")):
        got.setdefault(f.name.split(".")[0], []).extend(pq.read_table(f).to_pylist())
    # (flows come from a full join that promises no row order, with either reader)
    got["flows"] = sorted(got.get("flows", []), key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return {"counts": r.counts, "attrs": r.attrs, **got}


def test_a_trace_read_in_columns_equals_its_msgspec_read(tmp_path, monkeypatch):
    """The whole parse of real traces (each event array long enough to be read in columns) gives
    the same tables with the compiled reader as with msgspec alone; the compiled reader did read."""
    big = tmp_path / "big.json"
    doc = json.loads(gzip.decompress(Path(ROOT / "tests/data/torch_trace/hta__triton_example.json.gz").read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * (1 + (2 * KS.COLUMNS_MIN) // max(1, len(json.dumps(doc["traceEvents"]))))
    big.write_text(json.dumps(doc, indent=1))
    read = []
    real = KS._read_columns
    monkeypatch.setattr(KS, "_read_columns", lambda *a: read.append(real(*a)) or read[-1])
    for path in [str(big)] + [p for p in TRACES if os.path.getsize(p) > 100_000]:
        read.clear()
        with_columns = _tables(path, tmp_path / "a")
        if path == str(big):
            assert any(r is not None for r in read)
        monkeypatch.setattr(KS, "_read_columns", lambda *a: None)
        alone = _tables(path, tmp_path / "b")
        monkeypatch.setattr(KS, "_read_columns", lambda *a: read.append(real(*a)) or read[-1])
        assert with_columns == alone, path
