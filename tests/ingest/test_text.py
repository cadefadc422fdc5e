"""The plain-text reader: no text file is dropped, and its failure signatures are still read."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.registry import default_registry

TICKET = (
    "We saw this on node 3 last night:\n"
    "[12345.678901] Out of memory: Killed process 4242 (python) total-vm:1000kB, anon-rss:900kB, "
    "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n"
    "2024-05-01 10:00:02,120 job step 3 finished\n"
    "any ideas?\n")


def _events(out) -> list[dict]:
    rows = []
    for f in sorted(out.glob("events*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return sorted(rows, key=lambda r: r["line"])


def test_the_module_worked_example(tmp_path):
    f = tmp_path / "ticket.txt"
    f.write_text(TICKET)
    r = parse_file(ParseJob(str(f), "ticket.txt", str(tmp_path / "out")))
    assert (r.status, r.kind, r.format, r.clock_domain) == ("text", "text", "text", "wall")
    assert r.error == "kept as plain text: no parser recognised the contents"
    ev = _events(tmp_path / "out")
    assert [e["line"] for e in ev] == [1, 2, 3, 4]           # every line is kept
    assert ev[0]["category"] == ev[3]["category"] == "text"
    assert ev[1]["kind"] == "oom_kill" and ev[1]["ts_raw_ns"] is None
    assert json.loads(ev[1]["attrs"])["victim_pid"] == 4242
    assert ev[2]["ts_raw_ns"] == 1714557602120000000         # 2024-05-01 10:00:02.120 UTC


def test_a_stamped_line_gets_its_time_with_its_zone(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("first we looked\n2024-05-01T10:00:02.5+02:00 something odd happened\nthen nothing\n")
    r = parse_file(ParseJob(str(f), "notes.txt", str(tmp_path / "out")))
    assert r.status == "text" and r.clock_domain == "wall"
    ev = {e["line"]: e for e in _events(tmp_path / "out")}
    assert ev[2]["ts_raw_ns"] == 1714550402500000000          # 08:00:02.5 UTC
    assert ev[1]["ts_raw_ns"] is None and ev[3]["ts_raw_ns"] is None


def test_text_with_no_time_has_no_clock(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("nothing here has a time\nnor here\n")
    r = parse_file(ParseJob(str(f), "notes.txt", str(tmp_path / "out")))
    assert (r.status, r.clock_domain, r.records) == ("text", "none", 2)


def test_binary_junk_stays_unrecognized(tmp_path):
    f = tmp_path / "core"
    f.write_bytes(bytes(range(256)) * 40)
    det = default_registry().sniff(f, "core")
    assert det.reader is None and "binary" in det.reason
    r = parse_file(ParseJob(str(f), "core", str(tmp_path / "out")))
    assert r.status == "unrecognized" and r.kind == "unrecognized"


def test_empty_file_stays_unrecognized(tmp_path):
    f = tmp_path / "stdout.log"
    f.write_text("")
    r = parse_file(ParseJob(str(f), "stdout.log", str(tmp_path / "out")))
    assert r.status == "unrecognized" and r.error == "empty file"
