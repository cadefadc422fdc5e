"""torchelastic error files (real ones written by torch's ``@record``: tests/data/torchelastic_error/
PROVENANCE.md): the exception read as the log engine reads a traceback, its time to the second, the
worker folder's local rank, and the rank the folder's sibling logs state."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aftertrace.ingest.attribution import Attributable, resolve
from aftertrace.ingest.formats.torchelastic_error import TorchelasticErrorParser
from aftertrace.ingest.reader import Head

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parsed import parse_tables  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
TE = DATA / "torchelastic_error"
WORKER = "vm/logs/torchrun_log_dir/2b9c4a11_m5wnj9zt/attempt_0/{}/error.json"


def parse(tmp_path, path: Path, rel: str):
    return parse_tables(tmp_path, path, rel, ("events", "parse_issues"))


def test_the_root_cause_workers_exception(tmp_path):
    r, t = parse(tmp_path, TE / "exception_local1.error.json", WORKER.format(1))
    assert (r.kind, r.format, r.status, r.clock_domain, r.issues) == \
        ("torchelastic_error", "torchelastic_error", "parsed", "wall", 0)
    (ev,) = t["events"]
    a = json.loads(ev["attrs"])
    assert (ev["ts_raw_ns"], ev["kind"], ev["category"], ev["line"], ev["rank"]) == \
        (1795959638 * 10**9, "python_exception", "traceback", 1, None)
    assert (a["exc_type"], a["exc_msg"], a["frames"], a["last_frame"], a["local_rank"], a["attempt"],
            a["ts_resolution_ns"]) == \
        ("RuntimeError", "injected failure on rank 1 at step 5", 2, "at record_logs_job.py:61 in main", 1, 0, 10**9)
    assert a["summary"] == "RuntimeError: injected failure on rank 1 at step 5 at record_logs_job.py:61 in main"
    assert ev["text"].startswith("Traceback (most recent call last):\n") and ev["text"].endswith("at step 5\n")


@pytest.mark.parametrize("name, kind, said", [
    ("hang_local0", "collective_timeout", "gloo recv timed out after 8000 ms (RuntimeError at graph.py:979 in "
                                          "_engine_run_backward)"),
    ("mismatch_local1", "collective_mismatch", "collective mismatch: Detected mismatch between collectives on ranks. "
                                               "Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=20"),
    ("sigkill_local0", "python_exception", "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
                                           "pair.cc:537] Read error [127.0.0.1]:45219: Connection reset by peer."),
])
def test_the_same_exception_gives_the_kind_a_log_of_it_gives(tmp_path, name, kind, said):
    # (a gloo timeout raised is a collective timeout, a mismatch a collective mismatch, as in a log)
    r, t = parse(tmp_path, TE / f"{name}.error.json", WORKER.format(name[-1]))
    (ev,) = t["events"]
    assert (r.status, ev["kind"]) == ("parsed", kind)
    assert json.loads(ev["attrs"])["summary"].startswith(said)


def test_the_launchers_copy_and_the_message_only_form(tmp_path):
    doc = json.loads((TE / "exception_local1.error.json").read_text())
    # the launcher's copy of the root-cause file: the worker's exit code added (dump_error_file)
    doc["message"]["errorCode"] = 1
    p = tmp_path / "agent_error.json"
    p.write_text(json.dumps(doc))
    r, t = parse(tmp_path, p, "vm/agent_error.json")
    (ev,) = t["events"]
    a = json.loads(ev["attrs"])
    assert (r.format, ev["kind"], a["exitcode"], a.get("local_rank")) == ("torchelastic_error", "python_exception",
                                                                          1, None)
    # the form whose message is a string: no traceback, no time
    q = tmp_path / "w" / "attempt_2" / "3" / "error.json"
    q.parent.mkdir(parents=True)
    said = ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n")
    q.write_text(json.dumps({"message": said}))
    r, t = parse(tmp_path / "q", q, "vm/w/attempt_2/3/error.json")
    (ev,) = t["events"]
    a = json.loads(ev["attrs"])
    # (the exception's first line, as a log's traceback gives it; the whole message beside it)
    assert (r.format, ev["ts_raw_ns"], a["exc_type"], a["exc_msg"], a["local_rank"], a["attempt"], a["frames"]) == \
        ("torchelastic_error", None, "RuntimeError", "CUDA error: an illegal memory access was encountered", 3, 2, 0)
    assert a["message"] == said.strip()


def test_a_bad_timestamp_is_said_and_the_exception_kept(tmp_path):
    doc = json.loads((TE / "exception_local1.error.json").read_text())
    doc["message"]["extraInfo"]["timestamp"] = "yesterday"
    p = tmp_path / "error.json"
    p.write_text(json.dumps(doc))
    r, t = parse(tmp_path, p, WORKER.format(1))
    (ev,) = t["events"]
    (iss,) = t["parse_issues"]
    assert (ev["ts_raw_ns"], ev["kind"], iss["kind"]) == (None, "python_exception", "bad_field")
    assert "'yesterday' is not seconds since the epoch" in iss["message"]


def test_a_file_cut_off_keeps_the_message_it_opens_with(tmp_path):
    whole = (TE / "exception_local1.error.json").read_bytes()
    p = tmp_path / "error.json"
    p.write_bytes(whole[:300])          # (cut in the traceback)
    r, t = parse(tmp_path, p, WORKER.format(1))
    (ev,) = t["events"]
    (iss,) = t["parse_issues"]
    a = json.loads(ev["attrs"])
    assert (r.format, r.status, ev["kind"], ev["ts_raw_ns"], a["exc_msg"], a["cut_off"], iss["kind"]) == \
        ("torchelastic_error", "partial", "python_exception", None, "injected failure on rank 1 at step 5", True,
         "bad_json")
    # cut inside the message itself: nothing to read, said as such
    q = tmp_path / "q" / "error.json"
    q.parent.mkdir()
    q.write_bytes(whole[:40])
    r, t = parse(tmp_path / "q", q, WORKER.format(1))
    assert (r.format, t["events"], [i["kind"] for i in t["parse_issues"]]) == ("torchelastic_error", [], ["bad_json"])


@pytest.mark.parametrize("path", [
    DATA / "flight_recorder" / "stall" / "fr_trace_rank_0.json",
    *sorted((DATA / "stacks").glob("*.json"))[:3],
])
def test_other_json_is_not_claimed(path):
    assert not TorchelasticErrorParser.detect(Head.read(path, "vm/attempt_0/0/" + path.name))


def test_every_real_file_is_claimed_by_its_contents():
    for p in sorted(TE.glob("*.json")):
        assert TorchelasticErrorParser.detect(Head.read(p, "bundle/" + p.name)), p.name


def test_a_file_in_a_worker_folder_takes_the_rank_its_sibling_logs_state():
    folder = "vm/logs/torchrun_log_dir/r_x/attempt_0/{}/"
    srcs = [Attributable(folder.format(0) + "error.json", "torchelastic_error"),
            Attributable(folder.format(0) + "stderr.log", "app_log", content_rank=4),
            Attributable(folder.format(1) + "error.json", "torchelastic_error"),     # (no sibling says a rank)
            Attributable(folder.format(2) + "error.json", "torchelastic_error"),
            Attributable(folder.format(2) + "stderr.log", "app_log", content_rank=6),
            Attributable(folder.format(2) + "stdout.log", "app_log", content_rank=7)]  # (they disagree)
    resolve(srcs)
    assert [(s.rank, s.rank_from) for s in srcs] == [(4, "worker folder"), (4, "contents"), (None, None),
                                                      (None, None), (6, "contents"), (7, "contents")]



def test_a_json_log_line_in_a_worker_folder_is_not_claimed(tmp_path):
    p = tmp_path / "stderr.log"
    p.write_text('{"message": "loss 0.25", "level": "info"}\n')
    assert not TorchelasticErrorParser.detect(Head.read(p, "vm/run/attempt_0/0/stderr.log"))
    assert TorchelasticErrorParser.detect(Head.read(p, "vm/run/attempt_0/0/error.json"))
