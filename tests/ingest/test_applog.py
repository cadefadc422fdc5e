"""Training / launcher logs: real torchrun captures (tests/data/app_log, sample_traces) -> exact events."""
from __future__ import annotations

import json
from datetime import datetime, timezone
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import pytest

from aftertrace.ingest.parse import SourceResult
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heads import each_piece_replaced, holds_on_edited_heads  # noqa: E402
from test_nccl_log import events, parse  # noqa: E402  (the same parse/events helpers)

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "data" / "app_log"
NCCL = ROOT / "tests" / "data" / "nccl_log"
OOM_LOG = ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "logs" / "torchrun.log"


def ns(y, mo, d, h, mi, s, frac_ns=0, tz=timezone.utc) -> int:
    return int(datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp()) * 10**9 + frac_ns


def typed(res: SourceResult) -> list[tuple]:
    return [(e["line"], e["kind"], e["rank"], e["pid"]) for e in events(res) if e["kind"]]


def by_line(res: SourceResult) -> dict[int, dict]:
    return {e["line"]: e for e in events(res)}


def metrics(res: SourceResult) -> list[dict]:
    import pyarrow.parquet as pq
    out = []
    for f in res.parts.get("metrics", []):
        out += pq.read_table(f).to_pylist()
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in APP.iterdir() if p.suffix == ".log"))
def test_recorded_logs_are_app_logs(name):
    det = default_registry().detect(Head.read(APP / name, name))
    assert det.recognized and det.parser.name == "app_log"


def test_oom_sample_torchrun_log(tmp_path):
    res = parse(OOM_LOG, tmp_path)
    assert (res.kind, res.status, res.issues) == ("app_log", "parsed", 0)
    ev = by_line(res)
    # elastic prefix W1129 13:28:08.902000 (ms), torchrun's pid; the year comes from the dated lines
    e1 = ev[1]
    assert (e1["category"], e1["pid"], e1["severity"], e1["ts_raw_ns"]) == (
        "elastic", 17983, "warning", ns(2026, 11, 29, 13, 28, 8, 902_000_000))
    # [default0]: worker lines (Python logging, Kineto USDT) that say nothing specific: one event per
    # rank, its last line, counting the others; rank from "[rank0]", pid from the "pid=" line (5)
    logs = {e["rank"]: e for e in ev.values() if e["attrs"].get("collapsed") == "log"}
    assert sorted(logs) == [0, 1] and 5 not in ev and 6 not in ev
    l0, l1 = logs[0], logs[1]
    assert (l0["line"], l0["category"], l0["pid"], l0["attrs"]["lines"], l0["attrs"]["first_line"]) == (
        250, "usdt", 17988, 25, 5)
    assert l0["attrs"]["first_ts_ns"] == ns(2026, 11, 29, 13, 28, 11, 298_000_000)
    assert (l1["line"], l1["pid"], l1["attrs"]["first_line"]) == (248, 17989, 6)
    # every step line is a metrics row (step, loss, step_time) of its rank; the last one an event
    m = metrics(res)
    steps = [r for r in m if r["metric"] == "step"]
    assert len(steps) == 98 + 99 and len(m) == 3 * len(steps)
    assert [(r["entity"], r["value"], r["ts_raw_ns"]) for r in m[:1]] == [
        ("rank 0", 0.0, ns(2026, 11, 29, 13, 28, 13, 648_000_000))]
    first0 = {r["metric"]: r["value"] for r in m if r["entity"] == "rank 0"
              and r["ts_raw_ns"] == ns(2026, 11, 29, 13, 28, 13, 648_000_000)}
    assert first0 == {"step": 0.0, "loss": 2.3112, "step_time": 0.150}
    step = ev[254]
    assert (step["name"], step["rank"], step["pid"], step["attrs"]["step"], step["attrs"]["loss"],
            step["attrs"]["step_time_s"], step["attrs"]["lines"], step["attrs"]["first_line"]) == (
        "step", 0, 17988, 97, 2.3077, 2.883, 98, 7)
    assert [e["line"] for e in ev.values() if e["name"] == "step"] == [254, 255]
    # the closing signal and the worker failure line of the launcher
    close = next(e for e in ev.values() if e["name"] == "closing_signal")
    assert (close["pid"], close["attrs"]["worker_pid"], close["attrs"]["signal"]) == (17983, 17989, "SIGTERM")
    assert close["ts_raw_ns"] == ns(2026, 11, 29, 13, 28, 56, 147_000_000)
    failed = next(e for e in ev.values() if e["name"] == "worker_failed")
    assert (failed["attrs"]["exitcode"], failed["attrs"]["local_rank"], failed["attrs"]["worker_pid"]) == (
        -9, 0, 17988)
    # ChildFailedError: the job failure, then one event per failure; root cause rank 0 SIGKILL
    assert typed(res) == [(258, "job_failure", None, None), (279, "signal_kill", 1, 17989),
                          (288, "signal_kill", 0, 17988)]
    job, f1, f0 = ev[258], ev[279], ev[288]
    assert job["attrs"]["root_cause_rank"] == 0 and job["attrs"]["root_cause_pid"] == 17988
    assert job["ts_raw_ns"] == ns(2026, 11, 29, 13, 28, 56)
    assert "root cause rank 0 (local_rank 0, pid 17988) exitcode -9 (SIGKILL)" in job["attrs"]["summary"]
    assert (f0["attrs"]["root_cause"], f0["attrs"]["exitcode"], f0["attrs"]["signal"], f0["attrs"]["local_rank"],
            f0["attrs"]["host"], f0["host"]) == (True, -9, "SIGKILL", 0, "localhost", None)
    assert (f1["attrs"]["root_cause"], f1["attrs"]["signal"]) == (False, "SIGTERM")
    assert f0["attrs"]["traceback"] == "Signal 9 (SIGKILL) received by PID 17988"
    # a rank's last reported step
    assert res.attrs["last_step"] == {"0": 97, "1": 98}


def test_per_rank_log_dir_file_belongs_to_its_rank_and_pid(tmp_path):
    p = next((OOM_LOG.parent / "torchrun_log_dir").glob("*/attempt_0/0/stderr.log"))
    res = parse(p, tmp_path)
    assert (res.kind, res.rank, res.pid) == ("app_log", 0, 17988)
    usdt = [e for e in events(res) if e["category"] == "usdt"]
    assert usdt and all(e["pid"] == 17988 and e["tid"] == 17988 for e in usdt)


def test_gloo_timeout_after_a_hung_peer(tmp_path):
    res = parse(APP / "torchrun_hang.log", tmp_path)
    ev = by_line(res)
    assert typed(res) == [(93, "collective_timeout", 0, 32412), (114, "job_failure", None, None),
                          (135, "signal_kill", 1, 32413), (144, "process_exit", 0, 32412)]
    t = ev[93]
    assert (t["name"], t["category"], t["attrs"]["wait_ms"], t["attrs"]["gloo_op"], t["attrs"]["exc_type"]) == (
        "gloo_timeout", "traceback", 8000, "recv", "RuntimeError")
    # the traceback has no time of its own: it lies between rank 1's "injecting fault" line
    # (13:40:48,707) and the launcher's next line (13:40:56.xxx)
    a = t["attrs"]
    assert t["ts_interpolated"] is True and a["ts_bound"] == "between"
    assert a["ts_lo_ns"] == ns(2026, 11, 29, 13, 40, 48, 707_000_000)
    assert t["ts_raw_ns"] == (a["ts_lo_ns"] + a["ts_hi_ns"]) // 2
    assert a["ts_uncertainty_ns"] == (a["ts_hi_ns"] - a["ts_lo_ns"]) // 2
    root = ev[144]["attrs"]
    assert (root["root_cause"], root["exitcode"], root["exc"]) == (True, 1, "RuntimeError")
    assert "Timed out waiting 8000ms for recv operation" in root["exc_msg"]
    assert root["error_file"].endswith("attempt_0/0/error.json")
    assert ev[135]["attrs"]["signal"] == "SIGTERM" and ev[135]["ts_raw_ns"] == ns(2026, 11, 29, 13, 40, 58)
    # rank 1 (the hung one) stopped at step 4 and said why
    assert res.attrs["last_step"] == {"0": 4, "1": 4}
    warn = next(e for e in ev.values() if "injecting fault" in e["text"])
    assert (warn["rank"], warn["severity"]) == (1, "warning")


def test_python_exception_on_one_rank_and_peer_closed(tmp_path):
    res = parse(APP / "torchrun_exception.log", tmp_path)
    ev = by_line(res)
    assert typed(res) == [(93, "python_exception", 1, 32259), (103, "python_exception", 0, 32258),
                          (123, "job_failure", None, None), (144, "signal_kill", 0, 32258),
                          (167, "process_exit", 1, 32259)]
    e = ev[93]["attrs"]
    assert (e["exc_type"], e["exc_msg"]) == ("RuntimeError", "injected failure on rank 1 at step 5")
    assert e["last_frame"] == "at record_logs_job.py:61 in main"
    peer = ev[103]["attrs"]
    assert peer["gloo_error"] == "Connection closed by peer" and peer["peer"] == "127.0.0.1"
    assert ev[123]["attrs"]["root_cause_rank"] == 1


def test_collective_mismatch_reported_by_both_ranks(tmp_path):
    res = parse(APP / "torchrun_mismatch.log", tmp_path)
    kinds = [(ln, k, r) for ln, k, r, _ in typed(res)]
    assert kinds[:2] == [(140, "collective_mismatch", 0), (157, "collective_mismatch", 1)]
    ev = by_line(res)
    a = ev[157]["attrs"]
    assert (a["rank_a"], a["op_type"], a["seq"]) == (1, "ALLGATHER", 20)
    # c10 lines: [rank1]:[I1129 ...] -> rank 1, seconds resolution (the 9 digits are not wall time)
    c10 = [e for e in ev.values() if e["category"] == "c10" and e["rank"] is not None]
    assert c10 and all(e["ts_raw_ns"] % 10**9 == 0 for e in c10)


def test_sigkill_of_one_rank(tmp_path):
    res = parse(APP / "torchrun_sigkill.log", tmp_path)
    ev = by_line(res)
    root = [e for e in ev.values() if e["kind"] == "signal_kill" and e["attrs"].get("root_cause")]
    assert [(e["rank"], e["pid"], e["attrs"]["exitcode"], e["attrs"]["signal"]) for e in root] == [
        (1, 32575, -9, "SIGKILL")]


def test_faulthandler_segfault_blocks(tmp_path):
    res = parse(APP / "torchrun_ddp-detail-segv.log", tmp_path)
    segv = [e for e in events(res) if e["kind"] == "segfault"]
    assert sorted(e["rank"] for e in segv) == [0, 1]
    assert all(e["attrs"]["error"] == "Segmentation fault" for e in segv)
    assert all("_ddp_init_helper" in e["attrs"]["last_frame"] for e in segv)


def test_watchdog_timeouts_new_and_old_formats(tmp_path):
    import os
    p = tmp_path / "basicsr.log"
    p.write_bytes((NCCL / "issue_basicsr-737_watchdog_pg_guid_format.log").read_bytes())
    os.utime(p, (ns(2024, 7, 1, 0, 0, 0) / 1e9,) * 2)     # no year in the file: the mtime's is used
    res = parse(p, tmp_path)
    ev = by_line(res)
    assert typed(res) == [(1, "collective_timeout", 1, None), (3, "collective_timeout", 0, None),
                          (5, "collective_timeout", 2, None)]
    a = ev[1]["attrs"]
    assert (a["seq"], a["op_type"], a["numel_in"], a["timeout_ms"], a["ran_ms"]) == (
        808, "ALLREDUCE", 9801523, 600000, 600020)
    assert ev[1]["ts_raw_ns"] == ns(2024, 6, 26, 6, 24, 44)              # [E626 06:24:44.903881913]
    assert res.attrs["year_from"].startswith("file modification time")
    w = ev[2]["attrs"]
    assert (ev[2]["name"], w["seq"], w["last_enqueued"], w["last_completed"], ev[2]["rank"]) == (
        "watchdog_exception", 808, 811, 807, 1)
    res = parse(NCCL / "issue_ofa-271_watchdog_old_format_8xV100.log", tmp_path / "b")
    assert [(ln, r) for ln, _, r, _ in typed(res)] == [(1, 1), (2, 3), (3, 2), (4, 6), (5, 7)]
    assert all(e["ts_raw_ns"] is None for e in events(res))              # the old format has no time


def test_local_times_use_the_bundle_zone(tmp_path):
    res = parse(APP / "hang_rank0_stderr.log", tmp_path, zone="America/New_York")
    # rank 0's plain lines are one event; the first of them (line 5) is the first dated line
    first = next(e for e in events(res) if e["attrs"].get("collapsed") == "log" and e["rank"] == 0)
    assert first["attrs"]["first_line"] == 5
    assert first["attrs"]["first_ts_ns"] == ns(2026, 11, 29, 18, 40, 44, 822_000_000)  # 13:40:44,822 EST
    assert res.attrs["time_zone"] == "America/New_York"


def test_srun_labels_and_iso_timestamps(tmp_path):
    # Built from the recorded hang log: every line prefixed the way `srun --label` does ("N: "),
    # with ISO-8601 stamps with an offset on the Python logging lines.
    src = (APP / "hang_rank1_stderr.log").read_text().splitlines()
    lines = []
    for ln in src:
        if ln.startswith("2026-11-29 "):
            ln = "2026-11-29T" + ln[11:23].replace(",", ".") + "+01:00" + ln[23:]
        lines.append("1: " + ln)
    p = tmp_path / "slurm-42.out"
    p.write_text("\n".join(lines) + "\n")
    res = parse(p, tmp_path)
    evs = events(res)
    assert res.rank == 1 and all(e["rank"] == 1 for e in evs)
    step = next(e for e in evs if e["name"] == "step")
    assert step["attrs"]["first_ts_ns"] == ns(2026, 11, 29, 12, 40, 47, 673_000_000)    # 13:40:47.673+01:00
    assert metrics(res)[0]["ts_raw_ns"] == step["attrs"]["first_ts_ns"]
    assert {r["entity"] for r in metrics(res)} == {"rank 1"}


def test_log_split_over_chunks_gives_the_same_events(tmp_path, monkeypatch):
    # Times, interpolation, blocks and kinds do not depend on where chunks end. (A stream's rank
    # and pid are learnt from its own lines as they come, so with tiny chunks the first lines of
    # a stream can miss them; with the real 32 MiB chunks this only happens in huge files.)
    import aftertrace.ingest.lines as lines_mod
    res_whole = parse(APP / "torchrun_exception.log", tmp_path / "a")
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 2048)
    res_parts = parse(APP / "torchrun_exception.log", tmp_path / "b")
    whole, parts = events(res_whole), events(res_parts)
    # lines that travel into the next chunk are counted once (were counted again in each chunk
    # they were read in: 105 with these chunks)
    assert res_parts.attrs["other_lines"] == res_whole.attrs["other_lines"] == 46
    key = lambda e: (e["line"], e["name"], e["kind"], e["ts_raw_ns"], e["ts_interpolated"],
                     e["attrs"].get("ts_lo_ns"), e["attrs"].get("ts_hi_ns"))
    assert [key(e) for e in parts] == [key(e) for e in whole]
    # Collapsed groups span the whole file (their event is the group's last line in the file).
    # Step groups match exactly; plain lines are grouped by rank, so the early lines of a stream
    # whose rank the tiny chunks did not know yet count for the rank-less group: same total.
    group = lambda e: (e["line"], e["attrs"]["lines"], e["attrs"]["first_line"], e["attrs"].get("first_ts_ns"))
    assert [group(e) for e in parts if e["name"] == "step"] == [group(e) for e in whole if e["name"] == "step"]
    assert sum(1 for e in whole if e["attrs"].get("collapsed")) == 5
    n = lambda evs: sum(e["attrs"]["lines"] for e in evs if e["attrs"].get("collapsed"))
    assert n(parts) == n(whole)


def _cut_after(path: Path, k: int) -> int:
    """The chunk size whose first chunk ends with line ``k``."""
    return sum(len(x) + 1 for x in path.read_bytes().split(b"\n")[:k])


def test_a_traceback_right_after_a_chunk_end_keeps_its_lower_time_bound(tmp_path, monkeypatch):
    # torchrun_hang.log: line 92 is rank 1's last timed line (13:40:48.707), 93 starts rank 0's
    # gloo traceback (no time of its own), the next timed line is at 13:40:58.000. With a chunk
    # ending at line 92 the traceback lost its lower bound: "before" 13:40:58.000, 4.6 s late.
    import aftertrace.ingest.lines as lines_mod
    path = APP / "torchrun_hang.log"
    whole = by_line(parse(path, tmp_path / "a"))[93]
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", _cut_after(path, 92))
    cut = by_line(parse(path, tmp_path / "b"))[93]
    want = (ns(2026, 11, 29, 13, 40, 53, 353_500_000), "between", ns(2026, 11, 29, 13, 40, 48, 707_000_000),
            ns(2026, 11, 29, 13, 40, 58))
    for e in (whole, cut):
        assert e["kind"] == "collective_timeout"
        assert (e["ts_raw_ns"], e["attrs"]["ts_bound"], e["attrs"]["ts_lo_ns"], e["attrs"]["ts_hi_ns"]) == want


def test_a_chunk_end_after_any_line_gives_the_same_events(tmp_path, monkeypatch):
    # rank 0's stderr of the hang job: a chunk end after line 40 left the gloo timeout (41) with no
    # time at all. Every cut gives the whole file's events, times, bounds and counts.
    import aftertrace.ingest.lines as lines_mod
    path = APP / "hang_rank0_stderr.log"
    key = lambda r: [(e["line"], e["name"], e["kind"], e["rank"], e["ts_raw_ns"], e["attrs"].get("ts_bound"),
                      e["attrs"].get("ts_lo_ns"), e["attrs"].get("ts_hi_ns")) for e in events(r)]
    whole = parse(path, tmp_path / "whole")
    assert by_line(whole)[41]["kind"] == "collective_timeout" and by_line(whole)[41]["ts_raw_ns"] is not None
    n = len(path.read_bytes().split(b"\n"))
    for k in range(1, n):
        monkeypatch.setattr(lines_mod, "CHUNK_BYTES", _cut_after(path, k))
        res = parse(path, tmp_path / f"k{k}")
        assert key(res) == key(whole), k
        assert res.attrs["other_lines"] == whole.attrs["other_lines"], k


def test_step_and_plain_lines_are_collapsed_per_rank(tmp_path):
    res = parse(APP / "torchrun_hang.log", tmp_path)
    raw = (APP / "torchrun_hang.log").read_text().splitlines()
    ev = by_line(res)
    # the last step line of each rank is an event; every step line is a metrics row
    step_lines = {r: [i for i, t in enumerate(raw, 1) if f"[rank{r}] train: step=" in t] for r in (0, 1)}
    last = {e["rank"]: e for e in ev.values() if e["name"] == "step"}
    assert {r: e["line"] for r, e in last.items()} == {r: ls[-1] for r, ls in step_lines.items()} == {0: 90, 1: 91}
    assert [last[r]["attrs"]["lines"] for r in (0, 1)] == [len(step_lines[0]), len(step_lines[1])] == [5, 5]
    m = [r for r in metrics(res) if r["metric"] == "step"]
    assert sorted((r["entity"], r["value"]) for r in m) == sorted(
        (f"rank {r}", float(i)) for r in (0, 1) for i in range(5))
    # plain lines: per rank (and the launcher, rank None) the count and the last line
    logs = {e["rank"]: e for e in ev.values() if e["attrs"].get("collapsed") == "log"}
    assert {r: (e["line"], e["attrs"]["lines"]) for r, e in logs.items()} == {0: (81, 10), 1: (84, 10),
                                                                              None: (185, 31)}
    assert logs[None]["text"] == raw[184]
    # a warning is not collapsed, and no step / log line is an event of its own
    assert ev[92]["severity"] == "warning" and "injecting fault" in ev[92]["text"]
    assert not [e for e in ev.values() if e["name"] == "step" and e["line"] not in (90, 91)]


def test_wrapper_split_equals_the_wrap_grammar():
    # The wrappers are read by the compiled reader (the lines it leaves by the regexes, which cut
    # torchrun's "[defaultN]:" alone without the WRAP regex): every line gives what WRAP gives.
    import polars as pl
    from aftertrace.ingest.formats.logs.engine import _wrap, extract_prefix
    from aftertrace.ingest.formats.logs.grammar import WRAP
    lines = ["[default0]:hello", "[default12]:3: x", "[default1]:[rank1]: Traceback", "[default1]:[rank1]:[I1129 x",
             "> > [default0]:a", "(Worker pid=12, ip=1.2.3.4) [default0]:x [repeated 3x across cluster]",
             "[1,3]<stdout>:[default2]:y", "12: foo", "[rank3]: bar", "[default]:x", "[default0]x",
             "[default\u0663]:zz", "plain", "", "[default0]:", "[default0]:1234567: x", "[default0]:123456: x",
             "\u00fcn [default0]:", "[default0]:[default1]:x", "[default0]:> x", "[default0]:\u00fc x"]
    df = pl.DataFrame({"lineno": list(range(1, len(lines) + 1)), "line": lines})
    want = extract_prefix(df, "line", WRAP, "body")
    for sub in (df, df.filter(pl.col("line").str.starts_with("[default0]:h")), df.slice(12, 2)):
        got = _wrap(sub)
        ref = want.join(sub.select("lineno"), on="lineno").sort("lineno")
        for c in ("ray_actor", "ray_pid", "mpi_job", "mpi_rank", "tee", "srun", "wrank"):
            assert got[c].to_list() == ref[c].to_list(), c
        # (the Ray repeat count is cut off the body afterwards)
        assert got["body"].to_list() == ref["body"].str.replace(r" \[repeated (\d+)x across cluster\]$", "").to_list()
        stream = pl.concat_str([pl.col(c).fill_null("") for c in ("tee", "srun", "ray_pid", "mpi_rank")], separator="|")
        assert got["stream"].to_list() == ref.select(stream).to_series().to_list()


def test_loss_word_boundary_on_ascii_and_unicode_text(tmp_path):
    # On ASCII text the loss is read with an ASCII word boundary (the regex DFA can run it); text with
    # other characters keeps the Unicode one: "\u00e9loss=" is inside a word there, so no loss.
    ascii_log = tmp_path / "a.log"
    ascii_log.write_text("2026-11-29 13:28:13,648 INFO train: step=1 loss=2.5\n"
                         "2026-11-29 13:28:14,648 INFO train: step=2 xloss=3.5\n")
    uni_log = tmp_path / "u.log"
    uni_log.write_text("2026-11-29 13:28:13,648 INFO train: step=1 loss=2.5\n"
                       "2026-11-29 13:28:14,648 INFO train: step=2 \u00e9loss=3.5\n")
    for p in (ascii_log, uni_log):
        res = parse(p, tmp_path / p.stem, parser="app_log")
        assert sorted((r["line"], r["value"]) for r in metrics(res) if r["metric"] == "loss") == [(1, 2.5)]


# Heads of every line family, each a list of pieces: a generated head is one of them with some
# pieces dropped, doubled or replaced by another family's pieces or odd ones.
_HEADS = [
    ["[rank3]:", "[", "E", "1129", " ", "13:28:08", ".", "426415540", " ", "ProcessGroupNCCL.cpp", ":", "629", "]", " ", "msg"],
    ["[", "W", "129", " ", "03:08:08", ".", "426415", " ", "socket", ":", "12", "]", "x"],
    ["[", "I", " ", "ProcessGroupNCCL.cpp", ":", "414", "]", " ", "old form"],
    ["[rank12]:", "W", "1129", " ", "13:28:08", ".", "902000", " ", "17983", " ", "torch/run.py", ":", "874", "]", " ", "m"],
    ["E", "0101", " ", "23:59:59", ".", "000001", " ", "1", " ", "C:/a.py", ":", "2x:3", ":", "4", "]", "m"],
    ["USDT:", "2026", "-", "11-29", " ", "13:28:48", " ", "17988", ":", "17989", " ", "File.cpp", ":", "52", "]", " ", "x"],
    ["[", "2026-11-29", " ", "13:28:11", ",", "298", "]", " ", "INFO", " ", "train: step=1"],
    ["2026-11-29", "T", "13:28:11", ".", "123456789", "+05:30", " ", "[", "WARNING", "]", " :| - ", "m"],
    ["2026-11-29", "_", "13:28:11", "Z", " ", "ERROR", "msg"],
    ["2026-11-29", " ", "13:28:11", ",", "1234567891", "-0800", "]", "FATAL", ":", "m"],
    ["Nov", " ", " 5", " ", "13:28:11", " ", "host-1", " ", "kernel", "[", "12", "]", ":", " ", "msg"],
    ["Dec", " ", "31", " ", "23:59:59", " ", "h", " ", "prog", ":", "msg"],
    ["WARNING", ":", "torch.distributed.run", ":", "msg"],
    ["CRITICAL", ":", "", ":", "m"],
]
_HEAD_PIECES = sorted({p for h in _HEADS for p in h}) + [
    "", " ", "\t", "[", "]", ":", ".", ",", "-", "+", "Z", "T", "_", "|", '"', "\\", "\x01", "\x7f", "0", "12345",
    "99999999999999999999", "WARN", "NOTICE", "DEBUG", "Jan", "Jn", "USDT", "[rank", "[rank]:", "[rank1]", "é",
    "\u0663", "\u00a0", "a.b.c", ".cpp", "x.", "1:2]"]


def test_compiled_family_reader_equals_the_family_regexes():
    # Every line family's head, whole and with pieces dropped, doubled or replaced (hypothesis, a
    # fixed number of examples), and the lines of the corpus's logs: the family frames of the
    # compiled reader (with the regexes for what it leaves) equal those of the regexes alone, in
    # each family's rows, columns and order, and so do the lines no family took.
    import polars as pl
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs import engine as E

    real = native.log_heads

    def regexes_only(bodies):
        h = real(bodies)
        return h._replace(code=pa.array([native.UNSURE] * len(h.code), pa.uint8()), unsure=len(h.code))

    def families(bodies, compiled):
        df = pl.DataFrame({"lineno": range(1, len(bodies) + 1), "body": bodies}, schema={"lineno": pl.Int64, "body": pl.String})
        df = df.with_columns(pl.col("body").alias("line"), pl.lit("|||").alias("stream"))
        if not compiled:
            E.native.log_heads = regexes_only
        try:
            out, other = E._line_families(df)
        finally:
            E.native.log_heads = real
        cols = ["lineno", "category", *E._COMMON]
        return {f: o.select(cols) for f, o in out.items()}, other.to_list()

    def same(bodies):
        got, want = families(bodies, True), families(bodies, False)
        assert list(got[0]) == list(want[0]), bodies
        for f in want[0]:
            assert got[0][f].equals(want[0][f]), (f, got[0][f], want[0][f])
        assert got[1] == want[1]

    holds_on_edited_heads(_HEADS, _HEAD_PIECES, same)
    # each head with each one of its pieces replaced by each odd piece, in turn
    odd = ['a"b.cpp', "a\\b.cpp", "x.", ".cpp", "a.b.c", "a\x01b", "\u00e9.cpp", "a b", "a]b", "a:b", "a[b", "1x", "",
           "99999999999999999999", "123", "12345", "1234567890", "+05:3", "-08:00", "+0530x", "[INFO", "INFOrmation"]
    same(each_piece_replaced(_HEADS, odd))
    lines = []
    for p in sorted(APP.glob("*.log")) + sorted((ROOT / "sample_traces").glob("*/*/logs/*.log")):
        lines += p.read_text(errors="replace").splitlines()
    assert len(lines) > 4000
    wrapped = E._wrap(pl.DataFrame({"lineno": range(1, len(lines) + 1), "line": lines}, schema={"lineno": pl.Int64, "line": pl.String}))
    same(wrapped["body"].to_list())


_WRAPS = [
    ["[default0]:", "2026-11-29 13:28:11,298 INFO [rank0] train: step=0"],
    ["> ", "> ", "(", "RayTrainWorker", " pid=", "4242", ", ip=", "10.0.0.1", ") ", "[rank", "3", "]: ", "hello",
     " [repeated ", "5", "x across cluster]"],
    ["(", "a.b_c", " pid=", "7", ") ", "[", "0", ",", "12", "]<std", "err", ">:", "[default", "1", "]:", "123456", ": ",
     "[rank", "2", "]: ", "msg"],
    ["[", "1", ",", "2", "]<stdout>:", "[default", "3", "]:", "12", ": ", "[rank4]: ", "yo"],
    ["12", ": ", "[rank", "0", "]: ", "Traceback (most recent call last):"],
    ["[default", "00", "]:", "> ", "x [repeated 2x across cluster]"],
]
_WRAP_PIECES = sorted({p for h in _WRAPS for p in h}) + [
    "", " ", ">", "(", ")", "[", "]", ",", ".", ":", ": ", "1234567", "99999999999999999999", "\u00e9", "\u0663",
    "\u00a0", "<stdin>:", " [repeated ", "x across cluster]", "across cluster]", "\t", "\x01"]


def test_compiled_wrapper_reader_equals_the_wrapper_regexes():
    # The launchers' wrappers (torchrun's [defaultN]:, Ray's actor prefix and repeat suffix,
    # mpirun's [job,rank]<stdout>:, srun's task number, the [rankN]: prefix), whole and with pieces
    # dropped, doubled or replaced (hypothesis, a fixed number of examples), and the lines of the
    # corpus's logs: the compiled reader's frame (the regexes for the lines it leaves) equals the
    # regexes' frame, column for column.
    import polars as pl
    from aftertrace.ingest.formats.logs import engine as E

    def same(lines):
        df = pl.DataFrame({"lineno": range(1, len(lines) + 1), "line": lines}, schema={"lineno": pl.Int64, "line": pl.String})
        got, want = E._wrap(df), E._wrap_regex(df)
        assert got.columns == want.columns and got.dtypes == want.dtypes, lines
        assert got.equals(want, null_equal=True), (lines, got, want)

    holds_on_edited_heads(_WRAPS, _WRAP_PIECES, same)
    odd = ["", "1x", "\u0663", "\u00e9", "1234567", "99999999999999999999", ":", "]", "(", " ", "stdin"]
    same(each_piece_replaced(_WRAPS, odd) + [None])
    lines = []
    for p in sorted(APP.glob("*.log")) + sorted((ROOT / "sample_traces").glob("*/*/logs/*.log")):
        lines += p.read_text(errors="replace").splitlines()
    assert len(lines) > 4000
    same(lines)
    got = E._wrap(pl.DataFrame({"lineno": [1, 2], "line": ["[default3]:12: hi", "(W pid=9) x [repeated 4x across cluster]"]}))
    assert got.select("tee", "srun", "ray_actor", "ray_pid", "body", "repeated", "stream").rows() == [
        ("3", "12", None, None, "hi", None, "3|12||"), (None, None, "W", "9", "x", 4, "||9|")]


_BLOCKS = [
    ["Traceback (most recent call last):", '  File "/a/b.py", line 12, in main', "    x = f()",
     '  File "/a/c.py", line 3 in f', "ValueError: boom", "",
     "During handling of the above exception, another exception occurred:", "",
     "Traceback (most recent call last):", '  File "/a/b.py", line 14, in main', "RuntimeError: again"],
    ["Traceback (most recent call last):", '  File "/x/run.py", line 8, in <module>', "    sys.exit(main())",
     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED", "-" * 60,
     "Failures:", "[1]:", "  time      : 2026-11-29_13:40:38", "  host      : localhost",
     "  rank      : 1 (local_rank: 1)", "  exitcode  : -15 (pid: 32258)  (SIGTERM)", "  error_file: /tmp/error.json",
     "  traceback : Traceback (most recent call last):", '    File "/x/t.py", line 79, in main',
     "      loss.backward()", "  RuntimeError: Connection closed by peer", "  ", "-" * 60,
     "Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-29_13:40:37", "  host      : localhost",
     "  rank      : 0 (local_rank: 0)", "  exitcode  : -9 (pid: 32257)", "  error_file: <N/A>",
     "  traceback : Signal 9 (SIGKILL) received by PID 32257", "=" * 60],
    ["ChildFailedError:", "=" * 20, "job FAILED", "Failures:", "  <NO_OTHER_FAILURES>", "Root Cause:", "[0]:",
     "  exitcode  : 1 (pid: 7)", "  traceback : To enable traceback see: https://pytorch.org/docs", "=" * 20],
    ["Fatal Python error: Aborted", "", "Current thread 0x00007ff971c95b80 (most recent call first):",
     '  File "/w/incident_job.py", line 193 in main', '  File "/w/x.py", line 251 in <module>', "",
     "Extension modules: numpy._core (total: 1)"],
    ["Fatal Python error: Segmentation fault", "Thread 0x1 (most recent call first):", "  <no Python frame>"],
    ["I1202 03:49:07.565000 13929 api.py:1028] step=3", "worker: hit an exception: Traceback (most recent call last):",
     '  File "/w/y.py", line 2, in g', "KeyError: 'k'", "plain text"],
]
_BLOCK_ODD = ["", " ", "\t", "\u00a0", "\u3000", "\x1c", "\x1f", "\u0663", "\u00e9", '"', "=", "===", "---", "[2]:", "[\u0663]:",
              '  File "', ", line ", " in ", ", in ", "Root Cause", " FAILED", ":", "  traceback : ", "  host : ",
              "  \u00a0File ", "Traceback (most recent call last):", "Extension modules:",
              "The above exception was the direct cause of the following exception:", "x" * 30]


class _PythonWalk:
    """A stand-in for the compiled block walk that leaves every block to Python's walkers."""

    def __init__(self, bodies, starts, kinds, cfe_exc, most):
        self.starts = starts

    def walk(self, start_from=0):
        from array import array
        from aftertrace.ingest import native
        at = next((s for s in self.starts if s >= start_from), None)
        rec = [-1] * len(native.BLOCK_FIELDS)
        if at is not None:
            rec[0], rec[2] = at, native.BT_UNSURE
        empty = memoryview(array("i"))
        return native.BlockWalk(memoryview(array("i", rec)), empty, empty, empty, int(at is not None))


def test_compiled_block_walk_equals_the_python_walkers(monkeypatch):
    # Tracebacks (chained ones), ChildFailedError summaries (with and without the launcher's
    # traceback) and faulthandler dumps, whole and with lines dropped, doubled, replaced or given an
    # odd piece (Unicode's spaces and digits among them: hypothesis, a fixed number of examples), and
    # every corpus log: the compiled walk (Python's walkers for the blocks it leaves) groups the
    # same blocks as Python's walkers alone, at a chunk's end and in the middle of a file.
    import polars as pl
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs import blocks as B
    from aftertrace.ingest.formats.logs import engine as E

    def walk(lines, final=True):
        base = E._wrap(pl.DataFrame({"lineno": range(1, len(lines) + 1), "line": lines},
                                    schema={"lineno": pl.Int64, "line": pl.String}))
        return B.group_blocks(base, final)

    def same(lines):
        base = E._wrap(pl.DataFrame({"lineno": range(1, len(lines) + 1), "line": lines},
                                    schema={"lineno": pl.Int64, "line": pl.String}))
        for final in (True, False):
            got = B.group_blocks(base, final)
            with monkeypatch.context() as m:
                m.setattr(native, "BlockWalker", _PythonWalk)
                want = B.group_blocks(base, final)
            # (streams are walked in no set order; the engine orders the rows by line)
            assert sorted(got[0], key=lambda b: b["lineno"]) == sorted(want[0], key=lambda b: b["lineno"]), (lines, final)
            assert got[1:] == want[1:], (lines, final)
        return got

    edit = st.tuples(st.integers(0, 10 ** 6), st.sampled_from(["drop", "double", "line", "put"]),
                     st.sampled_from(_BLOCK_ODD), st.integers(0, 200))

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(range(len(_BLOCKS))), min_size=1, max_size=4), st.lists(edit, max_size=6))
    def check(picks, edits):
        lines = [ln for k in picks for ln in _BLOCKS[k]]
        for k, how, odd, pos in edits:
            k %= len(lines)
            if how == "drop" and len(lines) > 1:
                del lines[k]
            elif how == "double":
                lines.insert(k, lines[k])
            elif how == "line":
                lines[k] = odd
            else:
                pos %= len(lines[k]) + 1
                lines[k] = lines[k][:pos] + odd + lines[k][pos:]
        same(lines)

    check()
    # each line of each block with a character that is not ASCII (or \x1f) put at, or in place of
    # the one at, each of its first 4 places and each edge between letters or digits and the rest;
    # a summary's closing border near the end of the lines looked at
    variants = []
    for b in _BLOCKS:
        for k, ln in enumerate(b):
            edges = {p for p in range(1, len(ln)) if ln[p - 1].isalnum() != ln[p].isalnum()}
            for pos in sorted({*range(min(4, len(ln) + 1)), *edges, len(ln)}):
                for odd in ("\u00a0", "\u0663", "\x1f", "\u00e9"):
                    variants += b[:k] + [ln[:pos] + odd + ln[pos:]] + b[k + 1:]
                    variants += b[:k] + [ln[:pos] + odd + ln[pos + 1:]] + b[k + 1:]
    same(variants)
    for k in range(B.MAX_BLOCK_LINES - 3, B.MAX_BLOCK_LINES + 1):
        same(["ChildFailedError:", "=" * 5] + ["  x"] * k + ["=" * 5, "after"])
    whole = same([ln for b in _BLOCKS for ln in b])
    assert [(b["type"], b["nlines"], b["nframes"]) for b in whole[0]] == [
        ("traceback", 11, 3), ("traceback", 29, 1), ("traceback", 10, 0), ("fatal", 7, 2), ("fatal", 3, 0),
        ("traceback", 3, 1)]
    assert [f["rank"] for f in whole[0][1]["cfe"]["failures"]] == [1, 0]
    # (these ASCII blocks are the compiled walk's own: Python's walkers never run)
    with monkeypatch.context() as m:
        m.setattr(B, "_WALKERS", {})
        assert walk([ln for b in _BLOCKS for ln in b]) == whole   # (one stream)
    logs = sorted(APP.glob("*.log")) + sorted((ROOT / "sample_traces").glob("*/*/logs/*.log")) \
        + sorted((ROOT / "tests" / "data" / "nccl_log").glob("*.log"))
    walked = 0
    for p in logs:
        walked += len(same(p.read_text(errors="replace").splitlines())[0])
    assert walked >= 40


STEP_TEXTS = [
    "step=0 step_time=0.150s loss=2.3112", "global_step: 12 loss: -1.5e-3 step_time = 1.25 s",
    "step 3/10 loss 0.5 rank=3", "step 4 / 100 lm loss: 7.123456e+00 rank:4x",
    " iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): 1234.5 |"
    " learning rate: 1.500e-04 | lm loss: 7.123456e+00 | loss scale: 65536.0 |",
    "\u00e9 step=\u0663 loss=1.0 [rank: 2]", "mystep=6 steps=7 step=8 loss=1.. step_time=1.2.3s",
    "iteration 9/ 10 step 10/11 step=11", "step=99999999999999999999999 loss=1e999 step_time=.5s",
    "losses=3 loss=4 lossy loss 5 step=12", "[rank:9] step: 13 loss=0.25 elapsed time per iteration (ms): 99.5",
    "step=20 loss=3 step_time=4ss step_time: 5 s", "loss=+2 step=5", "no step here", "steps=1", "step=",
    "\uff53tep=19 loss=1", "step=1 loss=-.5", "step=2 loss=\u0663.5 step_time=\u0663s", "iteration 7/8",
]


def test_step_values_equal_the_step_grammar():
    # the step-line numbers are read without capture regexes (grammar.NOCAP): on every text they
    # equal the groups of the STEP, LOSS and STEP_TIME regexes
    import polars as pl
    from aftertrace.ingest.formats.logs.engine import _step_match, _step_values
    from aftertrace.ingest.formats.logs.grammar import LOSS, LOWER, STEP, STEP_TIME
    low = pl.col("t")
    for texts in (STEP_TEXTS, [t for t in STEP_TEXTS if t.isascii()]):
        df = pl.DataFrame({"t": texts})
        s = low.str.extract_groups(LOWER[STEP])
        st = low.str.extract_groups(LOWER[STEP_TIME])
        want = df.select(
            pl.coalesce(s.struct.field("step"), s.struct.field("iter"), s.struct.field("step2"))
            .cast(pl.Int64, strict=False).alias("_step"),
            pl.coalesce(s.struct.field("total"), s.struct.field("total2")).cast(pl.Int64, strict=False).alias("_total"),
            low.str.extract(LOWER[LOSS], 1).cast(pl.Float64, strict=False).alias("_loss"),
            pl.coalesce(st.struct.field("step_time_s").cast(pl.Float64, strict=False),
                        st.struct.field("iter_ms").cast(pl.Float64, strict=False) / 1000).alias("_stime"),
            s.struct.field("step").is_not_null() | s.struct.field("iter").is_not_null()
            | s.struct.field("step2").is_not_null())
        got = _step_values(df.with_columns(_step_match(low).alias("m")), "t", "m").select(
            "_step", "_total", "_loss", "_stime", pl.col("m").is_not_null())
        assert got.rows() == want.rows()
        assert got["_step"].drop_nulls().len() >= 10 and got["_loss"].drop_nulls().len() >= 10



def test_compiled_step_reader_equals_the_step_grammar():
    # ingest.native.step_values reads the step lines' numbers in one pass; on every ASCII message
    # it gives what the STEP, LOSS and STEP_TIME regexes give (a step line: the STEP regex matches
    # a message holding "step" or "iteration" in any case); other messages are left to the regexes
    import polars as pl
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs.grammar import LOSS, LOWER, STEP, STEP_TIME
    more = ["STEP=5 LOSS=1E5", "Iteration 3 / 4", "xstep=1 step=2", "global_step=3", "global_stepx=1 step=4",
            "lm losses=1 lm loss=2", "loss :  -7e-3x step=1", "step_time=1.5 S step=1", "step=5loss=3",
            "Elapsed Time Per Iteration (ms): 12 iteration 1/2", "step\t=\t7", "step 5/ x step=6", "step=1 loss=1e+",
            "step=1 loss=1.e5 step_time=5.s", "step=0009 loss=00.50", "step 1 / 2", "steps 1/2 iteration 3 /4",
            "step=1 loss=" + "9" * 200, "step=1 step_time=" + "1" * 300 + "s", "iteration 5/6 elapsed time per "
            "iteration (ms): . step_time=2s", "step: 9223372036854775807 / 9223372036854775808", "stepstep=1",
            "step = 3 loss = - 2", "step=4 loss=+.5", "_step=5 step=6", "a-step=7", "step=8 lm  loss=1", ""]
    # the words in capitals at every offset, so that each letter falls in each byte of the eight
    # the reader lowercases at once (and in the bytes after the last eight)
    caps = "GLOBAL_STEP=3 LOSS=2.5 STEP_TIME=1.5S ITERATION 4/9 ELAPSED TIME PER ITERATION (MS): 7"
    more += [" " * k + caps[:n] for k in range(9) for n in (len(caps), 20, 13)]
    texts = STEP_TEXTS + more
    for p in sorted(APP.glob("*.log")):
        texts += [ln for ln in p.read_text(errors="replace").splitlines() if "step" in ln.lower()][:200]
    got = native.step_values(pa.array(texts, pa.large_string()))
    low = pl.col("t").str.to_lowercase()
    df = pl.DataFrame({"t": texts})
    s = low.str.extract_groups(LOWER[STEP])
    st = low.str.extract_groups(LOWER[STEP_TIME])
    flag = pl.col("t").str.contains("(?i)step|iteration") & (
        s.struct.field("step").is_not_null() | s.struct.field("iter").is_not_null() | s.struct.field("step2").is_not_null())
    want = df.select(
        flag.alias("f"),
        pl.coalesce(s.struct.field("step"), s.struct.field("iter"), s.struct.field("step2"))
        .cast(pl.Int64, strict=False).alias("_step"),
        pl.coalesce(s.struct.field("total"), s.struct.field("total2")).cast(pl.Int64, strict=False).alias("_total"),
        low.str.extract(LOWER[LOSS], 1).cast(pl.Float64, strict=False).alias("_loss"),
        pl.coalesce(st.struct.field("step_time_s").cast(pl.Float64, strict=False),
                    st.struct.field("iter_ms").cast(pl.Float64, strict=False) / 1000).alias("_stime")).rows()
    codes = got.code.to_pylist()
    vals = list(zip(got.step.to_pylist(), got.total.to_pylist(), got.loss.to_pylist(), got.stime.to_pylist()))
    for t, c, v, w in zip(texts, codes, vals, want):
        if not t.isascii():
            assert c == native.UNSURE, t
            continue
        assert c == (1 if w[0] else 0), t
        assert v == (w[1:] if w[0] else (None,) * 4), t
    assert codes.count(1) >= 40 and got.unsure == sum(not t.isascii() for t in texts) >= 3


def test_compiled_rank_reader_equals_the_rank_grammar():
    # ingest.native.rank_said reads the rank a message states: on every ASCII message what
    # RANK_IN_TEXT's two groups and the PG_RANK prefix give; other messages are left to the regexes
    import polars as pl
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs.grammar import PG_RANK, RANK_IN_TEXT
    texts = ["[rank3] x", "Rank=4 y", "[PG 0 (default_pg) Rank 5] z", "xrank=1 rank:2", "[RANK: 7]", "[rank :7] rank=8",
             "[rank  9] rank:10x rank:11", "[rank99999999999999999999] rank=3", "rank=99999999999999999999",
             "[PG 0 ] x] Rank 1]", "[PG 1 Rank 2] Rank 3]", "[Rank 6] y", "[PGx Rank 12]", "[PG Rank 13]", "[PG  Rank 14]",
             "[rank12]:[rank13]", "_rank=1", "frank=2 [rank=3]", "[rank:4]", "rank_=1", "rank=5_", "rank=6.", "[rank5",
             "\u00e9 [rank1]", "[Ran\u212a 2]", "RANK:3", "[rank2]rank=4", ""]
    for p in sorted(APP.glob("*.log")):
        texts += [ln for ln in p.read_text(errors="replace").splitlines() if "rank" in ln.lower()][:300]
    got = native.rank_said(pa.array(texts, pa.large_string()))
    rk = pl.col("t").str.extract_groups(RANK_IN_TEXT)
    want = pl.DataFrame({"t": texts}).select(rk.struct.field("1").cast(pl.Int64, strict=False),
                                            rk.struct.field("2").cast(pl.Int64, strict=False),
                                            pl.col("t").str.extract(PG_RANK, 1).cast(pl.Int64, strict=False)).rows()
    rows = list(zip(got.g1.to_pylist(), got.g2.to_pylist(), got.pg.to_pylist()))
    for t, c, g, w in zip(texts, got.code.to_pylist(), rows, want):
        assert c == (native.UNSURE if not t.isascii() else 0), t
        if t.isascii():
            assert g == w, t
    assert sum(1 for g in rows if any(v is not None for v in g)) >= 40 and got.unsure == sum(not t.isascii() for t in texts) >= 2


# the words and signs the step and rank grammars turn on, to build messages from
_GRAMMAR_PIECES = ["step", "STEP", "Step", "global_step", "iteration", "ITERATION", "step_time", "loss", "LOSS", "lm ",
                   "lm", "elapsed time per iteration (ms):", "rank", "RANK", "Rank ", "[rank", "[PG", "PG", "[", "]",
                   "=", ":", " ", "  ", "\t", "/", ".", "..", "e", "E", "-", "+", "s", "S", "0", "7", "12", "0.5",
                   "99999999999999999999", "x", "_", "é", "\u0663", "\u212a", "ſ"]


def test_compiled_readers_equal_the_regexes_on_generated_messages():
    # messages built from the grammars' own words and signs (hypothesis, a fixed number of
    # examples): on every ASCII one the compiled step and rank readers give what the regexes give,
    # and every other one is left to the regexes
    import polars as pl
    from hypothesis import HealthCheck, given, settings, strategies as st
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs.grammar import LOSS, LOWER, PG_RANK, RANK_IN_TEXT, STEP, STEP_TIME

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.lists(st.sampled_from(_GRAMMAR_PIECES), max_size=14).map("".join), min_size=1, max_size=8))
    def check(texts):
        df = pl.DataFrame({"t": texts})
        low = pl.col("t").str.to_lowercase()
        s, stt = low.str.extract_groups(LOWER[STEP]), low.str.extract_groups(LOWER[STEP_TIME])
        flag = pl.col("t").str.contains("(?i)step|iteration") & (
            s.struct.field("step").is_not_null() | s.struct.field("iter").is_not_null()
            | s.struct.field("step2").is_not_null())
        rk = pl.col("t").str.extract_groups(RANK_IN_TEXT)
        cols = [flag, pl.coalesce(s.struct.field("step"), s.struct.field("iter"), s.struct.field("step2"))
                .cast(pl.Int64, strict=False),
                pl.coalesce(s.struct.field("total"), s.struct.field("total2")).cast(pl.Int64, strict=False),
                low.str.extract(LOWER[LOSS], 1).cast(pl.Float64, strict=False),
                pl.coalesce(stt.struct.field("step_time_s").cast(pl.Float64, strict=False),
                            stt.struct.field("iter_ms").cast(pl.Float64, strict=False) / 1000),
                rk.struct.field("1").cast(pl.Int64, strict=False), rk.struct.field("2").cast(pl.Int64, strict=False),
                pl.col("t").str.extract(PG_RANK, 1).cast(pl.Int64, strict=False)]
        want = df.select(c.alias(f"c{i}") for i, c in enumerate(cols)).rows()
        arr = pa.array(texts + [None], pa.large_string()).slice(0, len(texts))   # (a slice, with a null)
        sv, rs = native.step_values(arr), native.rank_said(arr)
        if len(texts) > 1:      # (an array that starts at an offset reads the same)
            assert native.step_values(arr.slice(1)).loss.to_pylist() == sv.loss.to_pylist()[1:]
            assert native.rank_said(arr.slice(1)).g2.to_pylist() == rs.g2.to_pylist()[1:]
        got = zip(sv.code.to_pylist(), sv.step.to_pylist(), sv.total.to_pylist(), sv.loss.to_pylist(),
                  sv.stime.to_pylist(), rs.code.to_pylist(), rs.g1.to_pylist(), rs.g2.to_pylist(), rs.pg.to_pylist())
        for t, g, w in zip(texts, got, want):
            if not t.isascii():
                assert g[0] == g[5] == native.UNSURE, t
                continue
            assert (g[0] == 1, g[6:]) == (w[0], w[5:]), t
            if w[0]:
                assert g[1:5] == w[1:5], t
            else:
                assert g[1:5] == (None,) * 4, t

    check()


def test_compiled_readers_read_both_arrow_layouts_alike():
    # The readers take text as Polars holds it (string_view: a view of 16 bytes per row, the text
    # inline up to 12 bytes, else in one of several data buffers) or as large_string (offsets):
    # the same rows give the same values, sliced or not, with nulls, from many buffers.
    import polars as pl
    from aftertrace.ingest import native
    from hypothesis import HealthCheck, given, settings, strategies as st

    def read(arr):
        sv, rs, ni = native.step_values(arr), native.rank_said(arr), native.nccl_info(arr)
        lh, dr, ss = native.log_heads(arr), native.dmesg_raw(arr), native.subsys(arr)
        wr = native.wraps(arr)
        return ([c.to_pylist() for c in sv[:5]] + [c.to_pylist() for c in rs[:4]]
                + [wr.code.to_pylist(), {k: (a.to_pylist(), b.to_pylist()) for k, (a, b) in wr.groups.items()}]
                + [c.to_pylist() for c in wr[2:5]] + [wr.unsure]
                + [c.to_pylist() for c in ni[:5]] + [sv.unsure, rs.unsure, ni.unsure]
                + [c.to_pylist() for c in lh[:-1]] + [c.to_pylist() for c in dr[:-1]] + [c.to_pylist() for c in ss[:2]]
                + [lh.unsure, dr.unsure, ss[2]])

    nccl = "host-1:1234:1240 [3] NCCL INFO Channel 01/0 : 3[3] -> 0[0] via P2P/CUMEM"
    heads = ["[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] NCCL: x",
             "2026-11-29 13:28:11,298 INFO [rank0] train: step=0", "<6>kern  :info  : [ 12.000001] sched: RT",
             "Nov 29 13:28:11 host prog[12]: msg"]

    @settings(max_examples=100, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.one_of(st.none(), st.just(nccl), st.sampled_from(heads),
                              st.lists(st.sampled_from(_GRAMMAR_PIECES), max_size=14).map("".join)), min_size=1,
                    max_size=12), st.integers(0, 3))
    def check(texts, cut):
        want = read(pa.array(texts, pa.large_string()))
        assert read(native.texts(pl.Series(texts, dtype=pl.String))) == want
        views = pa.array(texts, pa.string_view())
        assert read(views) == want
        if cut < len(texts):
            assert read(views.slice(cut)) == read(pa.array(texts[cut:], pa.large_string()))

    check()
    # many rows, long texts: several data buffers
    rows = [f"[rank{i % 8}] step {i} loss {i / 7:.5f} step_time: {i % 13}.25 " + "x" * (i % 40) for i in range(200_000)]
    series = pl.Series(rows)
    assert native.texts(series).type == pa.string_view() and len(native.texts(series).buffers()) > 3
    assert read(native.texts(series)) == read(pa.array(rows, pa.large_string()))


def test_store_timeout_before_the_rank_is_known(tmp_path):
    """Rank 0 gives up waiting in TCPStore for a peer that never joined, on torchrun's
    ``[default0]:`` stream before any ``[rank0]:`` line: the exception keeps its local rank (the
    launcher's failure table resolves it) and the wait it states."""
    res = parse(APP / "torchrun_store-timeout.log", tmp_path, rel="vm/logs/torchrun.log")
    assert typed(res) == [(19, "python_exception", None, None), (44, "job_failure", None, None),
                          (65, "signal_kill", 1, 27496), (74, "process_exit", 0, 27495)]
    exc = by_line(res)[19]["attrs"]
    assert (exc["exc_type"], exc["wait_ms"], exc["store_keys"], exc["local_rank"]) == (
        "torch.distributed.DistStoreError", 30000, "/default_pg/0//cpu//0/1", 0)
    assert by_line(res)[74]["attrs"]["local_rank"] == 0


def test_a_rendezvous_timeout_is_typed_by_its_class(tmp_path):
    res = parse(APP / "torchrun_rendezvous-timeout.log", tmp_path, rel="nodeA/logs/torchrun.log")
    (ev,) = [e for e in events(res) if e["kind"]]
    assert (ev["kind"], ev["name"], ev["line"]) == ("rendezvous_failure", "rendezvous_timeout", 7)
    assert ev["attrs"]["exc_type"] == "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
    assert "gave up waiting for the other nodes" in ev["attrs"]["summary"]
    # an untimed traceback: placed between the timed lines around it
    assert ev["attrs"]["ts_bound"] == "between"


def test_faulthandler_names_the_fatal_signal(tmp_path):
    # faulthandler's "Aborted" is SIGABRT the process raised itself: a fatal signal, not an exception
    res = parse(APP / "torchrun_abort.log", tmp_path)
    fatal = [e for e in events(res) if e["name"] == "fatal_error"]
    assert [(e["kind"], e["rank"], e["attrs"]["signal"], e["attrs"]["self_signal"]) for e in fatal] == \
        [("signal_kill", 1, "SIGABRT", True)]
    assert "incident_job.py:193 in main" in fatal[0]["attrs"]["last_frame"]
    assert not [e for e in events(res) if e["kind"] == "python_exception" and e["rank"] == 1]
    segv = [e for e in events(parse(APP / "torchrun_ddp-detail-segv.log", tmp_path / "s"))
            if e["name"] == "fatal_error"]
    assert {(e["kind"], e["attrs"]["signal"]) for e in segv} == {("segfault", "SIGSEGV")}


REAL = Path(__file__).resolve().parents[1] / "data" / "realworld"


@pytest.mark.parametrize("name,line,kind", [
    # Slurm: the step's cgroup counted an OOM kill, srun names the task it took, the step was cancelled
    ("dev/K-Net-30_slurmstepd-oom-kill.log", 1, "oom_kill"),
    ("dev/K-Net-30_slurmstepd-oom-kill.log", 2, "signal_kill"),
    ("dev/K-Net-30_slurmstepd-oom-kill.log", 4, "job_failure"),
    ("dev/everyvoice-178_wrapped-oom-progress-srun-task-exit.log", 11, "process_exit"),
    # an uncaught C++ exception aborts the process; a child that died of a signal, as subprocess says it
    ("dev/sglang-1693_watchdog-terminate-frames.log", 6, "signal_kill"),
    ("dev/pytorch-61839_launch-died-sigsegv.log", 9, "segfault"),
    # a container runtime's account of the end: exit code 128 + 9
    ("dev/sd-webui-docker-457_docker-inspect-exit137.txt", 20, "signal_kill"),
    ("dev/kubeflow-trainer-2008_training-operator-pytorchjob-crashloop.log", 6, "process_exit"),
    # the fault under the error: the error line is both (CUDA's ECC error, NCCL's IB async events)
    ("dev/jade-hpc-194_cuda-uncorrectable-ecc-runtimeerror.log", 1, "hardware_error"),
    ("dev/jade-hpc-194_cuda-uncorrectable-ecc-runtimeerror.log", 1, "python_exception"),
    ("dev/nccl-230_mpirun-timestamp-tag-output-ib-catastrophic.log", 1, "hardware_error"),
    ("dev/nccl-230_mpirun-timestamp-tag-output-ib-catastrophic.log", 1, "nccl_warn"),
    ("dev/lit-llama-380_slurm-training-nccl-warn-ib-port-error.log", 4, "link_down"),
    # Ray names a remote error with its cause: RayTaskError(RuntimeError)
    ("dev/ray-40850_raytaskerror-raytrainworker-traceback.log", 4, "python_exception"),
    # PBS's job e-mail: the server aborted the job, which ended with a non-zero Exit_status
    ("dev/cbio-cluster-256_pbs-job-mail-walltime-exit-status.txt", 4, "job_failure"),
    ("dev/cbio-cluster-256_pbs-job-mail-walltime-exit-status.txt", 7, "job_failure"),
    # TensorFlow 1.x's name for the error out of a session: "AbortedError (see above for traceback): ..."
    ("dev/horovod-243_tf-traceback-aborted-hard-wrapped-84col.log", 11, "python_exception"),
    # NCCL's error unwinding through transport.cc: the ranks could not be connected
    ("dev/skypilot-4448_head-rank-pid-nccl-warn.log", 9, "nccl_init_failure"),
    # NCCL lines whose host name a log collector left empty (":pid:tid [dev]")
    ("dev/nccl-1808_timestamped-worker-prefix-socketfinalizeaccept-wrong-magic.log", 9, "nccl_warn"),
])
def test_how_a_job_ended_in_the_words_of_its_runner(tmp_path, name, line, kind):
    from aftertrace.ingest.parse import ParseJob, parse_file
    res = parse_file(ParseJob(str(REAL / name), Path(name).name, str(tmp_path / "out")))
    assert res.status in ("parsed", "partial", "text")
    got = {(e["line"], e["kind"]) for f in (tmp_path / "out").glob("events*.parquet")
           for e in pq.read_table(f).to_pylist() if e["kind"]}
    assert (line, kind) in got, sorted(got)


def test_a_traceback_header_after_a_message(tmp_path):
    """A logger's message may lead into a traceback on its header's line ("... hit an exception:
    Traceback (most recent call last):"); a DataLoader's "Original Traceback (most recent call
    last):" is not one: it is the message of the exception above it, whose last line says why."""
    from aftertrace.ingest.parse import ParseJob, parse_file
    res = parse_file(ParseJob(str(APP / "shm_dataloader_traceback.log"), "t.log", str(tmp_path / "a")))
    got = sorted((e["line"], e["kind"]) for f in (tmp_path / "a").glob("events*.parquet")
                 for e in pq.read_table(f).to_pylist() if e["kind"])
    assert (50, "shm_exhausted") in got and not [g for g in got if g[0] == 23]
    real = REAL / "dev" / "sglang-3820_socketpollconnect-no-route-to-host-scheduler-traceback.log"
    res = parse_file(ParseJob(str(real), real.name, str(tmp_path / "b")))
    tb = [e for f in (tmp_path / "b").glob("events*.parquet") for e in pq.read_table(f).to_pylist()
          if e["kind"] == "python_exception"]
    assert [e["line"] for e in tb] == [8]


def test_the_verdicts_of_job_runners(tmp_path):
    """Real lines of Kubernetes, Slurm's sacct, LSF, DeepSpeed's launcher, Ray Jobs and Open MPI (one per
    source, see tests/data/app_log/PROVENANCE.md): each says how a job or its process ended."""
    from aftertrace.ingest.parse import ParseJob, parse_file
    res = parse_file(ParseJob(str(APP / "runner_verdicts.txt"), "runner_verdicts.txt", str(tmp_path / "out")))
    got = sorted((e["line"], e["name"], e["kind"]) for f in (tmp_path / "out").glob("events*.parquet")
                 for e in pq.read_table(f).to_pylist() if e["kind"])
    assert got == [
        (1, "k8s_backoff", "process_exit"), (2, "k8s_pod_status", "process_exit"),
        (3, "k8s_pod_status", "process_exit"), (4, "k8s_pod_failed", "job_failure"),
        (5, "k8s_pod_evicted", "job_failure"), (6, "k8s_node_pressure", "memory_pressure"),
        (7, "sacct_state", "job_failure"), (8, "sacct_state", "job_failure"), (9, "sacct_state", "job_failure"),
        (10, "sacct_state", "oom_kill"),                  # (11: a step that COMPLETED is nothing)
        (12, "lsf_term", "oom_kill"), (13, "lsf_exit", "signal_kill"), (14, "deepspeed_exit", "process_exit"),
        (15, "ray_job_failed", "job_failure"), (16, "ray_entrypoint_exit", "process_exit"),
        (18, "mpi_job_aborted", "job_failure"), (21, "mpi_rank_signal", "segfault")]
    said = {e["line"]: json.loads(e["attrs"])["summary"] for f in (tmp_path / "out").glob("events*.parquet")
            for e in pq.read_table(f).to_pylist() if e["kind"]}
    assert said[8] == "Slurm accounting: job 26.batch ended CANCELLED (ExitCode 0:15)"
    assert said[2] == "Kubernetes: pod srl-probes-76b8468567-8pztg is CrashLoopBackOff (141 restart(s))"


def test_a_line_takes_the_first_message_whose_literal_and_pattern_both_match(tmp_path):
    # Lines composed from the grammar's own entries (not a recorded file): several entries share
    # a literal ("srun: error:", "Exit Code:"), and line 5 holds the literal of the srun entries,
    # none of whose patterns match, and that of a later entry, which does.
    from aftertrace.ingest.parse import ParseJob, parse_file
    f = tmp_path / "m.log"
    f.write_text("srun: error: node-3: task 5: Segmentation fault\n"
                 "srun: error: node-3: tasks 0-7: Exited with exit code 1\n"
                 "Exit Code: 137\n"
                 "Exit Code: 2\n"
                 "srun: error: node-4: cannot reach the controller; Exit Code: 3\n"
                 "srun: error: node-5: task 1: Killed\n")
    parse_file(ParseJob(str(f), "m.log", str(tmp_path / "out"), parser="app_log"))
    got = sorted((e["line"], e["name"]) for g in (tmp_path / "out").glob("events*.parquet")
                 for e in pq.read_table(g).to_pylist() if e["kind"])
    assert got == [(1, "srun_task_segfault"), (2, "srun_task_exit"), (3, "container_exit_signal"),
                   (4, "container_exit"), (5, "container_exit"), (6, "srun_task_killed")]


def test_a_childfailederror_summary_pasted_without_its_traceback(tmp_path):
    """The launcher's failure summary alone (what people paste): its exception line, then the block."""
    from aftertrace.ingest.parse import ParseJob, parse_file
    log = next((Path(__file__).resolve().parents[2] / "sample_traces" / "logs-exception").rglob("torchrun.log"))
    lines = log.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.endswith("ChildFailedError: "))
    end = max(i for i, ln in enumerate(lines) if set(ln) == {"="}) + 1
    f = tmp_path / "pasted.log"
    f.write_text("\n".join(lines[at:end]) + "\n")
    res = parse_file(ParseJob(str(f), "pasted.log", str(tmp_path / "out")))
    got = sorted((e["line"], e["kind"], e["pid"], e["rank"]) for g in (tmp_path / "out").glob("events*.parquet")
                 for e in pq.read_table(g).to_pylist() if e["kind"])
    assert got == [(1, "job_failure", None, None), (6, "signal_kill", 32258, 0), (29, "process_exit", 32259, 1)]


def _tables(res: SourceResult) -> dict[str, list[dict]]:
    out = {}
    for t, files in sorted(res.parts.items()):
        rows = [r for f in files for r in pq.read_table(f).to_pylist()]
        out[t] = rows + (res.inline[t].to_pylist() if t in res.inline else [])
    return out


@pytest.mark.parametrize("path", sorted(p for d in (APP, NCCL) for p in d.iterdir() if p.name != "PROVENANCE.md")
                         + [OOM_LOG], ids=lambda p: p.name)
def test_row_wise_steps_on_two_threads_give_the_same_tables(path, tmp_path, monkeypatch):
    # The row-wise steps (wrappers, line families, messages, times) run on two halves of a large
    # chunk at once. Cutting every frame of two or more rows in two must change no row of any table.
    from aftertrace.ingest.formats.logs import frames
    parser = default_registry().detect(Head.read(path, path.name)).parser
    if parser is None:
        pytest.skip("not a log")
    parser = parser.name
    whole = parse(path, tmp_path / "whole", parser=parser)
    monkeypatch.setattr(frames, "HALF_ROWS", 1)
    halves = parse(path, tmp_path / "halves", parser=parser)
    assert whole.status == halves.status and whole.attrs == halves.attrs
    assert _tables(halves) == _tables(whole)


def test_a_large_log_with_bad_lines_counts_every_one(tmp_path):
    # Past a row group of rows the engine's sink calls run on the sink thread, the reader's
    # issues (undecodable lines) included: every bad line is counted once, the first ones stored.
    from aftertrace.ingest.sink import ROW_GROUP
    good = (APP / "torchrun_hang.log").read_bytes().splitlines(keepends=True)
    path = tmp_path / "big.log"
    bad, rows = 0, 0
    with open(path, "wb") as f:
        while rows < 3 * ROW_GROUP:
            for ln in good:
                f.write(ln)
                rows += 1
            f.write(b"step \xff\xfe not utf-8\n")
            f.write(b"binary \x00 data\n")
            bad += 1
    res = parse(path, tmp_path)
    kinds = [r["kind"] for f in res.parts["parse_issues"] for r in pq.read_table(f).to_pylist()]
    # (NUL lines: the first 20 of a chunk are shown, all of them counted in the attrs)
    assert kinds.count("undecodable") == bad and kinds.count("garbage") == 20
    assert res.issues == bad + 20 and res.attrs["garbage_lines"] == bad
    assert res.counts["events"] > 0 and res.status == "partial"


@pytest.mark.parametrize("dtype", ["String", "Int64", "Int32", "UInt32", "UInt8", "Float64", "Boolean", "Date"])
@pytest.mark.parametrize("n", [0, 1, 7, 70_000])
def test_the_frame_helpers_make_what_polars_own_constructions_make(dtype, n):
    """The engine's null-filled, scattered and repeated series (made from Arrow arrays, not as
    queries) equal Polars' own constructions: values, dtype and name, for every dtype the engine
    scatters and one it does not map (Date: Polars' own path)."""
    import datetime as dt

    import polars as pl

    from aftertrace.ingest.formats.logs.frames import nulls, repeat, scatter

    t = getattr(pl, dtype)
    want = pl.Series("v", [], dtype=t).extend_constant(None, n)
    got = nulls("v", n, t)
    assert got.dtype == want.dtype and got.name == "v" and got.to_list() == want.to_list()
    sample = {"String": "x", "Int64": -5, "Int32": 3, "UInt32": 4, "UInt8": 9, "Float64": 1.5, "Boolean": True,
              "Date": dt.date(2026, 12, 1)}[dtype]
    idx = pl.Series([i for i in (0, n // 2, n - 1) if 0 <= i < n], dtype=pl.UInt32).unique(maintain_order=True)
    values = pl.Series("v", [sample] * len(idx), dtype=t)
    want = pl.Series("v", [], dtype=t).extend_constant(None, n).scatter(idx, values) if len(idx) else \
        pl.Series("v", [], dtype=t).extend_constant(None, n)
    got = scatter(n, idx, values)
    assert got.dtype == want.dtype and got.name == "v" and got.to_list() == want.to_list()
    got = repeat("r", sample, n, t)
    want = pl.repeat(sample, n, eager=True, dtype=t).alias("r")
    assert got.dtype == want.dtype and got.name == "r" and got.to_list() == want.to_list()
