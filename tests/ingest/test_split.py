"""Byte-range splitting: a perf script text parsed in ranges cut at record headers,
one job each, and merged (ingest/parse.py, ingest/formats/perf_script.py) gives the rows, the
stack tree, the counts and the source fields of the unsplit parse. Stack ids are numbered in
no fixed order (by the unsplit parse too), so stacks are compared as the frame paths they name.
"""
import gzip
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.formats.perf_script import PerfScriptParser
from aftertrace.ingest.parse import ParseJob, merge_ranges, parse_file, split_job

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "perf_script"
FILES = sorted(p.name for p in DATA.iterdir() if p.name != "PROVENANCE.md")
SAMPLE_PERF = ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "perf" / "perf.script.txt.gz"


def _plain(src: Path, tmp: Path) -> Path:
    """The file as plain text (gzip files cannot be cut by byte range)."""
    if src.suffix != ".gz":
        return src
    out = tmp / src.name[:-3]
    with gzip.open(src, "rb") as f, open(out, "wb") as g:
        shutil.copyfileobj(f, g)
    return out


def _rows(parts: dict[str, list[str]]) -> dict[str, list]:
    """Each table's rows with stack ids replaced by the root-first frames they name."""
    tables = {t: [r for f in fs for r in pq.read_table(f).to_pylist()] for t, fs in parts.items()}
    nodes = {r["stack_id"]: r for r in tables.get("stacks", [])}

    def path(sid):
        out = []
        while sid is not None:
            n = nodes[sid]
            out.append((n["frame"], n["dso"], n["depth"]))
            sid = n["parent_id"]
        return out[::-1]

    for r in tables.get("samples", []):
        r["stack_id"] = path(r["stack_id"]) if r["stack_id"] is not None else None
    for r in tables.get("events", []):
        a = json.loads(r["attrs"]) if r["attrs"] else None
        if isinstance(a, dict) and a.get("stack_id") is not None:
            a["stack_id"] = path(a["stack_id"])
            r["attrs"] = a
    if "stacks" in tables:
        tables["stacks"] = [path(r["stack_id"]) for r in tables["stacks"]]
    return {t: sorted(json.dumps(r, sort_keys=True, default=str) for r in rows) for t, rows in tables.items()}


def _fields(r) -> dict:
    d = dict(vars(r))
    for k in ("parts", "parse_s", "rel"):
        d.pop(k)
    return d


def _whole_and_split(path: Path, tmp: Path, pieces: int):
    job = ParseJob(str(path), path.name, str(tmp / "whole"), None, "UTC", PerfScriptParser.name)
    whole = parse_file(job)
    sjob = ParseJob(str(path), path.name, str(tmp / "split"), None, "UTC", PerfScriptParser.name)
    ranges = split_job(sjob, max(1, path.stat().st_size // pieces))
    assert ranges and len(ranges) > 1
    results = [parse_file(r) for r in ranges]
    return whole, ranges, merge_ranges(sjob, ranges, results)


@pytest.mark.parametrize("name", FILES)
def test_a_split_parse_is_the_unsplit_parse(tmp_path, name):
    path = _plain(DATA / name, tmp_path)
    whole, ranges, merged = _whole_and_split(path, tmp_path, 7)
    assert whole.status != "failed", whole.error
    # the ranges cover the file, each starts at a header line, with its line number
    text = path.read_bytes()
    assert ranges[0].byte_range[0] == 0 and ranges[-1].byte_range[1] == len(text)
    for a, b in zip(ranges, ranges[1:]):
        assert a.byte_range[1] == b.byte_range[0]
        assert text[:b.byte_range[0]].count(b"\n") + 1 == b.byte_range[2]
        assert text[b.byte_range[0] - 1:b.byte_range[0]] == b"\n"
    assert _fields(merged) == _fields(whole)
    assert _rows(merged.parts) == _rows(whole.parts)
    assert merged.counts["stacks"] == whole.counts["stacks"]


def test_many_small_ranges_of_the_sample(tmp_path):
    """The real sample's perf file (sched switches with on-CPU intervals, call chains) in 25 ranges."""
    path = _plain(SAMPLE_PERF, tmp_path)
    whole, ranges, merged = _whole_and_split(path, tmp_path, 25)
    assert len(ranges) >= 20
    assert whole.counts["samples"] > 1000 and whole.counts["stacks"] > 100
    assert _fields(merged) == _fields(whole)
    assert _rows(merged.parts) == _rows(whole.parts)


def test_no_split_for_small_compressed_or_unsplittable_files(tmp_path):
    job = ParseJob(str(DATA / "copyforward__perf.script"), "p", str(tmp_path / "o"), None, "UTC", "perf_script")
    assert split_job(job, 10 << 20) is None                       # under the threshold
    gz = ParseJob(str(SAMPLE_PERF), "p", str(tmp_path / "g"), None, "UTC", "perf_script")
    assert split_job(gz, 1024) is None                            # gzip: no byte ranges
    dm = ParseJob(str(ROOT / "tests" / "data" / "perf_script" / "copyforward__perf.script"), "d",
                  str(tmp_path / "d"), None, "UTC", "dmesg_raw")
    assert split_job(dm, 1024) is None                            # a format that cannot be split
    limited = ParseJob(job.path, "p", str(tmp_path / "l"), 1000, "UTC", "perf_script")
    assert split_job(limited, 1024) is None                       # over the size limit: parsed whole


def test_a_failed_range_fails_the_source_and_removes_its_parts(tmp_path):
    path = _plain(SAMPLE_PERF, tmp_path)
    sjob = ParseJob(str(path), "perf.txt", str(tmp_path / "s"), None, "UTC", "perf_script")
    ranges = split_job(sjob, path.stat().st_size // 4)
    results = [parse_file(r) for r in ranges]
    results[2] = RuntimeError("worker died")     # (its parts: in the work folder, removed with it)
    parts = [f for r in results if not isinstance(r, Exception) for fs in r.parts.values() for f in fs]
    assert parts
    merged = merge_ranges(sjob, ranges, results)
    assert merged.status == "failed" and "worker died" in merged.error
    assert not any(Path(f).exists() for f in parts)


@pytest.mark.parametrize("name", FILES + ["sample"])
def test_a_parse_in_small_chunks_is_the_parse_in_one(tmp_path, monkeypatch, name):
    # a file of more than one chunk is read ahead and its last record waits for the end of the
    # lines (no look at the next chunk): the same rows as the file read in one chunk
    import aftertrace.ingest.lines as lines_mod
    path = _plain(SAMPLE_PERF if name == "sample" else DATA / name, tmp_path)
    got = {}
    small, whole = max(64, path.stat().st_size // 9), lines_mod.CHUNK_BYTES     # (about nine chunks; one)
    for chunk in (whole, small):
        monkeypatch.setattr(lines_mod, "CHUNK_BYTES", chunk)
        r = parse_file(ParseJob(str(path), path.name, str(tmp_path / f"c{chunk}"), None, "UTC", PerfScriptParser.name))
        assert r.status != "failed", r.error
        got[chunk] = (_fields(r), _rows(r.parts))
    assert got[small] == got[whole]
