"""Broken files of every format, one real sample per registered parser, through ``parse_file``.

Each case takes the parser's real file from tests/data and breaks it (see
``hostile_corpus.MUTATIONS``): the parse must return (never raise), within a time bound, with a
clear status for the file and a message saying why it is not clean; a damaged file keeps the
rows before (and around) the damage instead of failing as a whole.
"""
from __future__ import annotations

import gzip
import random
import re
import time

import pyarrow.parquet as pq
import pytest

import hostile_corpus as hc
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.registry import default_registry

REGISTRY = default_registry()
LIMIT = 64 * 1024**2
PARSERS = sorted(hc.SAMPLES)
# mutations after which the file is still recognisably its format, so rows must survive
KEEPS_ROWS = {"truncated_mid_line", "truncated_in_string", "truncated_last_byte", "garbage_line", "invalid_utf8",
              "latin1", "huge_numbers", "impossible_times", "crlf", "long_line_10mb"}


def _parse(tmp_path, name: str, data: bytes, tag: str, limit_s: float = 10.0, parser: str | None = None):
    f = tmp_path / tag / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    t0 = time.perf_counter()
    res = parse_file(ParseJob(str(f), name, str(tmp_path / "out" / tag), LIMIT, parser=parser), REGISTRY)
    took = time.perf_counter() - t0
    assert took < limit_s, f"{name}: parse took {took:.1f} s"
    assert res.rel == name
    assert res.status in hc.STATUSES
    if res.status != "parsed":
        assert res.error, f"{name}: status {res.status} without a message"
    if res.status == "failed":
        assert res.error.startswith(f"{name}: "), res.error
    return res


def _issues(res) -> list[dict]:
    rows = []
    for part in res.parts.get("parse_issues", []):
        rows += pq.read_table(part).to_pylist()
    return rows


_CLEAN: dict = {}


def _clean(parser: str, tmp_path):
    """The parse of the unbroken sample (once per parser)."""
    if parser not in _CLEAN:
        name, data = hc.real(parser)
        _CLEAN[parser] = _parse(tmp_path, name, data, "clean")
    return _CLEAN[parser]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("mutation", sorted(hc.MUTATIONS))
def test_broken_file(tmp_path, parser, mutation):
    name, data = hc.real(parser)
    bad = hc.MUTATIONS[mutation](data, random.Random(f"{parser}/{mutation}"))
    res = _parse(tmp_path, name, bad, mutation, limit_s=30.0 if mutation == "long_line_10mb" else 10.0)
    # a broken file never fails as a whole: its status is parsed, partial, text or unrecognized
    assert res.status != "failed", res.error
    if mutation == "empty":
        assert (res.status, res.error) == ("unrecognized", "empty file")
    elif mutation == "utf16":
        assert res.status == "unrecognized" and "UTF-16" in res.error
    elif mutation == "binary_noise":
        assert res.status == "unrecognized" and "binary" in res.error
    if res.status == "partial":
        clean = _clean(parser, tmp_path)
        # the damage is named: the line (or the byte offset) where the file stops being usable
        assert re.search(r"\bline \d+|\bbyte \d+|truncated|ends early|damaged", res.error), res.error
        issues = _issues(res)
        if issues and clean.status == "parsed":
            assert any(i["line"] or i["byte_offset"] is not None for i in issues), issues[:3]
    if mutation in KEEPS_ROWS and res.kind != "unrecognized":
        assert res.records > 0, f"{name}: every row was lost ({res.error})"


@pytest.mark.parametrize("parser", PARSERS)
def test_gzip_stream_cut_inside_deflate_data(tmp_path, parser):
    name, data = hc.real(parser)
    res = _parse(tmp_path, name + ".gz", hc.gzip_cut(data, 0.6), "gzcut")
    assert res.status in ("partial", "text", "unrecognized"), (res.status, res.error)
    if res.status in ("partial", "text"):
        assert "truncated" in res.error or "ends early" in res.error or "cut" in res.error, res.error
        assert res.records > 0


@pytest.mark.parametrize("parser", PARSERS)
def test_gzip_stream_with_damaged_bytes(tmp_path, parser):
    name, data = hc.real(parser)
    res = _parse(tmp_path, name + ".gz", hc.gzip_damaged(data, random.Random(parser)), "gzbad")
    assert res.status in ("partial", "text", "unrecognized"), (res.status, res.error)
    if res.status in ("partial", "text"):
        assert re.search(r"damaged|truncated|ends early|cut at byte", res.error), res.error


@pytest.mark.parametrize("parser", PARSERS)
def test_two_formats_spliced_into_one_file(tmp_path, parser):
    other = PARSERS[(PARSERS.index(parser) + 7) % len(PARSERS)]
    name, data = hc.real(parser)
    res = _parse(tmp_path, name, hc.splice(data, hc.real(other)[1]), "splice")
    assert res.status != "failed", res.error


@pytest.mark.parametrize("parser", PARSERS)
def test_a_name_claiming_another_format_does_not_decide(tmp_path, parser):
    """The content of one format under the file name of another: detected by content."""
    name, data = hc.real(parser)
    liar = hc.real(PARSERS[(PARSERS.index(parser) + 1) % len(PARSERS)])[0]
    clean = _clean(parser, tmp_path)
    res = _parse(tmp_path, liar, data, "liar")
    assert res.status != "failed", res.error
    assert res.kind == clean.kind, (liar, res.kind, clean.kind)


def test_headers_claiming_kineto_over_a_kernel_log(tmp_path):
    """A file that starts like a Kineto trace (its real first bytes) and goes on as dmesg."""
    _, trace = hc.real("kineto")
    head = trace[: trace.index(b'"traceEvents"') + len(b'"traceEvents": [')]
    _, dmesg = hc.real("dmesg_raw")
    res = _parse(tmp_path, "rank0.pt.trace.json", head + b"\n" + dmesg, "claims")
    assert res.status in ("partial", "text", "unrecognized"), (res.status, res.error)


def test_perf_header_over_an_application_log(tmp_path):
    """perf script's real `# ========` header block, then a torchrun log."""
    perf = gzip.decompress((hc.DATA / "perf_script/flamegraph__example-perf-stacks.txt.gz").read_bytes())
    header = perf[: perf.index(b"# ========\n#\n") + 13] if b"# ========\n#\n" in perf else perf[:600]
    _, log = hc.real("app_log")
    res = _parse(tmp_path, "perf.script.txt", header + log, "claims")
    assert res.status != "failed", res.error


@pytest.mark.parametrize("parser", PARSERS)
def test_detect_is_a_dry_run_that_never_raises_on_broken_heads(parser):
    """Every registered detector, directly, on every broken head of every sample."""
    from aftertrace.ingest.reader import Head
    name, data = hc.real(parser)
    for mutation, fn in hc.MUTATIONS.items():
        if mutation == "long_line_10mb":
            continue
        head = Head.from_bytes(name, fn(data, random.Random(mutation))[:64 * 1024], complete=False)
        for p in REGISTRY.parsers:
            assert p.detect(head) in (True, False), (p.name, mutation)


def test_decompressed_size_limit_stops_a_gzip_bomb_with_a_clear_message(tmp_path):
    """A 4 KB .gz of 1 GB of real dmesg lines: parsing stops at the per-file limit."""
    _, dmesg = hc.real("dmesg_raw")
    line = dmesg.splitlines(keepends=True)[10]
    bomb = hc.gzip_bomb(line, 1024**3)
    assert len(bomb) < 4 * 1024**2
    f = tmp_path / "dmesg.txt.gz"
    f.write_bytes(bomb)
    t0 = time.perf_counter()
    res = parse_file(ParseJob(str(f), "dmesg.txt.gz", str(tmp_path / "out"), 8 * 1024**2), REGISTRY)
    assert time.perf_counter() - t0 < 20
    assert res.status == "partial"
    assert "exceeds the per-file limit of 8388608 bytes" in res.error
    assert res.records > 1000 and res.bytes_read <= 8 * 1024**2 + 2 * 1024**2


# -- regressions found by this corpus ----------------------------------------------------------

def test_log_cut_inside_a_traceback_keeps_its_rows_and_the_traceback(tmp_path):
    """Regression: an application log that ends inside a Python traceback (the process died
    while printing it) failed as a whole with KeyError 'type'."""
    name, data = hc.real("app_log")
    lines = data.split(b"\n")
    tb = next(i for i, ln in enumerate(lines) if ln.endswith(b"Traceback (most recent call last):"))
    cut = b"\n".join(lines[:tb + 2])[:-5]            # the first frame line, cut short
    res = _parse(tmp_path, name, cut, "tb")
    assert res.status in ("parsed", "partial") and res.records > 10
    events = [r for part in res.parts["events"] for r in pq.read_table(part).to_pylist()]
    tbs = [e for e in events if e["category"] == "traceback"]
    assert tbs and tbs[-1]["kind"] == "python_exception" and "cut off" in tbs[-1]["attrs"]


def test_detectors_stay_fast_on_long_runs_without_spaces(tmp_path):
    """Regression: the NCCL detector's search backtracked over every start of a long run of host
    characters (JSON lines, long numbers): 2 s for one journal JSON head, 17 s with long numbers."""
    from aftertrace.ingest.reader import Head
    name, data = hc.real("journal_json")
    heavy = re.sub(rb"\d+", lambda m: b"9" * 30 if len(m.group(0)) > 3 else m.group(0), data)[:64 * 1024]
    for blob in (data[:64 * 1024], heavy, b"a1.-" * 16000, b"h:1:2" * 13000):
        head = Head.from_bytes(name, blob, complete=False)
        for p in REGISTRY.parsers:
            t0 = time.perf_counter()
            p.detect(head)
            assert time.perf_counter() - t0 < 1.0, p.name


def test_deeply_nested_json_is_a_bad_line_not_a_crash(tmp_path):
    """Regression: json/msgspec raised RecursionError on a deeply nested value (cgroup JSON lines'
    detector and parser, the Kineto event reader)."""
    from aftertrace.ingest.reader import Head
    nested = b'{"raw":' * 30000 + b'"x"' + b"}" * 30000
    name, series = hc.real("cgroup_jsonl")
    lines = series.split(b"\n")
    bad = b"\n".join(lines[:40] + [nested] + lines[40:])
    for p in REGISTRY.parsers:
        assert p.detect(Head.from_bytes(name, bad[:64 * 1024], complete=False)) in (True, False)
    res = _parse(tmp_path, name, bad, "nested")
    assert res.status == "partial" and "line 41" in res.error
    tname, trace = hc.real("kineto")
    at = trace.index(b"{", trace.index(b"{", trace.index(b'"traceEvents"')) + len(trace) // 3)
    deep = trace[:at] + b'{"ph":"X","name":"deep","ts":1,"args":' + b'{"a":' * 5000 + b"1" + b"}" * 5001 + b"," + trace[at:]
    res = _parse(tmp_path, tname, deep, "nested_kineto")
    assert res.status == "partial" and res.records > 100 and "byte" in res.error
