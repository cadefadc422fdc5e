"""The real-world corpus (tests/data/realworld): every file read, none dropped; goldens reviewed.

Each case is parsed alone as the pipeline does (``Registry.sniff``, then ``parse_file``); the
golden (``golden.json``, reviewed) pins how it is read: status, format, records, clock, the
wrapper layers peeled, where the format begins, the time range of its events (on the source's
own clock) and the failure signatures read from it (each typed event's kind and line). The findings per case are measured by
``bench/eval_files.py`` (both halves, ``bench/results/files.md``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.parse import ParseJob, parse_file

ROOT = Path(__file__).resolve().parents[1] / "data" / "realworld"
CASES = json.loads((ROOT / "cases.json").read_text())
GOLDEN = json.loads((ROOT / "golden.json").read_text())


def summary(case: dict, tmp: Path) -> list[dict]:
    src = ROOT / case["half"] / case["path"]
    files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
    out = []
    for i, f in enumerate(files):
        rel = f.relative_to(ROOT / case["half"]).as_posix()
        r = parse_file(ParseJob(str(f), rel, str(tmp / str(i))))
        events = [e for part in r.parts.get("events", ()) for e in pq.read_table(part, columns=[
            "ts_raw_ns", "kind", "line"]).to_pylist()]
        times = [e["ts_raw_ns"] for e in events if e["ts_raw_ns"] is not None]
        out.append({"file": rel, "status": r.status, "kind": r.kind, "format": r.format, "records": r.records,
                    "clock": r.clock_domain, "unwrapped": r.attrs.get("unwrapped"),
                    "from_line": r.attrs.get("format_from_line"),
                    "time_range_ns": [min(times), max(times)] if times else None,
                    # the failure signatures read from the file: kind and line of each typed event
                    "findings": sorted(f"{e['kind']}@{e['line']}" for e in events if e["kind"])})
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_is_read_as_reviewed(case, tmp_path):
    got = summary(case, tmp_path)
    assert all(s["status"] != "unrecognized" for s in got), got      # no text file is dropped
    assert got == GOLDEN[case["id"]]


if __name__ == "__main__":      # regenerate the goldens (then review the diff)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        g = {c["id"]: summary(c, Path(d) / str(n)) for n, c in enumerate(CASES)}
    (ROOT / "golden.json").write_text(json.dumps(g, indent=1) + "\n")
