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

from ingest import native
from ingest.parse import ParseJob, parse_file
from ingest.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS = sorted(p for d in ("app_log", "nccl_log", "kernel", "dmesg", "perf_script", "realworld", "c10phase")
                for p in (DATA / d).iterdir() if p.is_file() and not p.name.endswith(".md")) + \
    sorted((ROOT / "sample_traces").glob("*/*/logs/*.log")) + sorted((ROOT / "sample_traces").glob("*/*/dmesg*"))
READERS = ("log_heads", "dmesg_raw", "subsys", "step_values", "rank_said", "nccl_info", "perf_headers", "wraps")


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
