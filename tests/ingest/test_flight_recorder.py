"""PyTorch's Flight Recorder dumps (real ones, recorded here from a hung 2-rank gloo job:
tests/data/flight_recorder/PROVENANCE.md): the JSON read, the pickle recognised and never loaded."""
from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

from aftertrace.ingest.formats.flight_recorder import FlightRecorderJsonParser, rank_of
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parsed import parse_tables  # noqa: E402

FR = Path(__file__).resolve().parents[1] / "data" / "flight_recorder"


def parse(tmp_path, path: Path, rel: str | None = None):
    return parse_tables(tmp_path, path, rel or f"vm/fr/{path.name}", ("collectives", "events", "parse_issues"))


def test_the_rank_that_waited(tmp_path):
    r, t = parse(tmp_path, FR / "stall" / "fr_trace_rank_0.json")
    assert (r.kind, r.format, r.status, r.rank, r.clock_domain, r.issues) == \
        ("flight_recorder", "flight_recorder_json", "parsed", 0, "wall", 0)
    co = t["collectives"]
    assert len(co) == 14 and [c["seq"] for c in co] == list(range(1, 15))
    last = co[-1]
    assert (last["rank"], last["role"], last["backend"], last["collective"], last["op"], last["pg"], last["pg_desc"],
            last["ts_raw_ns"], last["dur_ns"], last["in_nelems"], last["dtype"], last["bytes"], last["group_size"]) == \
        (0, "call", "gloo", "allreduce", "gloo:all_reduce", "0", "default_pg", 1796672812661451866, None, 1024, "Float",
         4096, 2)
    assert [c["collective"] for c in co].count("broadcast") == 2          # steps 4 and 8
    (pending,) = [e for e in t["events"] if e["name"] == "fr_pending"]
    a = json.loads(pending["attrs"])
    assert (pending["ts_raw_ns"], a["seq"], a["state"], a["timeout_ms"], a["op"]) == \
        (1796672812661451866, 14, "scheduled", 20000, "gloo:all_reduce")
    (status,) = [e for e in t["events"] if e["name"] == "fr_pg_status"]
    assert json.loads(status["attrs"]) == {"pg_id": "0", "last_enqueued": 14, "last_started": -1, "last_completed": 13}
    assert status["text"] == "process group 0: last enqueued collective 14, started -1, completed 13"


def test_the_rank_that_never_entered_the_collective(tmp_path):
    r, t = parse(tmp_path, FR / "stall" / "fr_trace_rank_1.json")
    assert r.rank == 1 and len(t["collectives"]) == 13
    assert not [e for e in t["events"] if e["name"] == "fr_pending"]         # its last collective retired
    (status,) = [e for e in t["events"] if e["name"] == "fr_pg_status"]
    assert json.loads(status["attrs"])["last_enqueued"] == 13


def test_a_pickled_dump_is_named_and_never_loaded(tmp_path, monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("a pickle from a bundle was loaded")
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    r, t = parse(tmp_path, FR / "stall" / "nccl_trace_rank_0")
    assert (r.kind, r.format, r.rank, r.records) == ("flight_recorder", "flight_recorder_pickle", 0, 0)
    (issue,) = t["parse_issues"]
    assert issue["kind"] == "not_read" and "_dump_fr_trace_json()" in issue["message"]


def test_rank_from_the_file_name():
    assert [rank_of(p) for p in ("vm/fr/fr_trace_rank_0.json", "nccl_trace_rank_13", "dumps/_dump_5.json",
                                 "trace.json")] == [0, 13, 5, None]


def test_detection():
    def head(data: bytes, rel="x.json") -> Head:
        return Head.from_bytes(rel, data)
    assert FlightRecorderJsonParser.detect(head((FR / "stall" / "fr_trace_rank_1.json").read_bytes()))
    assert FlightRecorderJsonParser.detect(head(b'{"version": "2.5", "pg_config": {}, "pg_status": {}, "entries": []}'))
    assert not FlightRecorderJsonParser.detect(head(b'{"traceEvents": [], "entries": 3}'))
    assert default_registry().detect(head((FR / "stall" / "nccl_trace_rank_1").read_bytes(), "nccl_trace_rank_1")) \
        .parser.name == "flight_recorder_pickle"
    # another binary file is still binary data, not a dump
    assert default_registry().detect(head(b"\x80\x04\x95" + bytes(range(256)) * 8)).parser is None


def test_a_cut_dump_says_where(tmp_path):
    f = tmp_path / "fr_trace_rank_1.json"
    f.write_bytes((FR / "stall" / "fr_trace_rank_1.json").read_bytes()[:3000])
    r, t = parse(tmp_path, f)
    assert r.format == "flight_recorder_json" and not t["collectives"]
    (issue,) = t["parse_issues"]
    assert issue["kind"] == "bad_json"
