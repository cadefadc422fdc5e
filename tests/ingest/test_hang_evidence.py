"""The captures an engineer takes of a hung job: py-spy dumps, strace output, /proc stack and wchan
copies, each on real files (tests/data/stacks, tests/data/strace: PROVENANCE.md)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry
from aftertrace.ingest.unwrap import terminal_width

DATA = Path(__file__).resolve().parents[1] / "data"
STACKS, STRACE = DATA / "stacks", DATA / "strace"


def parse(tmp_path, path: Path, rel: str | None = None, zone: str = "UTC"):
    out = tmp_path / "out"
    r = parse_file(ParseJob(str(path), rel or path.name, str(out), time_zone=zone), default_registry())
    rows = []
    for f in sorted(out.rglob("events*.parquet")):
        rows += pq.read_table(f).to_pylist()
    for r_ in rows:
        r_["attrs"] = json.loads(r_["attrs"]) if r_["attrs"] else {}
    return r, sorted(rows, key=lambda e: (e["line"] is None, e["line"] or 0, e["tid"] or 0))


# -- py-spy dump ------------------------------------------------------------------------------
def test_py_spy_dump_of_a_blocked_dataloader_worker(tmp_path):
    r, ev = parse(tmp_path, STACKS / "py-spy-12677.txt")
    assert (r.kind, r.format, r.status, r.pid, r.clock_domain) == ("stack_dump", "py_spy_dump", "parsed", 12677, "none")
    (t,) = ev
    assert (t["name"], t["category"], t["pid"], t["tid"], t["line"], t["ts_raw_ns"]) == \
        ("thread_stack", "stack", 12677, 12677, 4, None)
    a = t["attrs"]
    assert (a["thread"], a["state"], a["idle"], a["gil"], a["depth"]) == ("MainThread", "idle", True, False, 17)
    assert a["frames"][0] == "Shards.__getitem__ (hang_job.py:37)"
    assert a["frames"][3] == "_worker_loop (torch/utils/data/_utils/worker.py:374)"
    assert a["process"].endswith("hang_job.py") and a["python"] == "3.11.7"
    assert t["text"].startswith('Thread 12677 (idle): "MainThread"\n    Shards.__getitem__ (hang_job.py:37)')


def test_py_spy_json_gives_the_text_dumps_threads(tmp_path):
    _, text = parse(tmp_path / "t", STACKS / "py-spy-12677.txt")
    r, js = parse(tmp_path / "j", STACKS / "py-spy-12677.json")
    assert (r.format, r.status, r.pid) == ("py_spy_json", "parsed", 12677)
    assert [(e["pid"], e["tid"], e["attrs"]["frames"], e["attrs"]["idle"]) for e in js] == \
        [(e["pid"], e["tid"], e["attrs"]["frames"], e["attrs"]["idle"]) for e in text]


def test_py_spy_dump_of_a_rank_waiting_for_its_dataloader(tmp_path):
    r, ev = parse(tmp_path, STACKS / "py-spy-12580.txt")
    assert [e["attrs"]["thread"] for e in ev] == ["MainThread", "cache-refresh", "QueueFeederThread", "QueueFeederThread"]
    main = ev[0]["attrs"]["frames"]
    assert main[4] == "Queue.get (multiprocessing/queues.py:113)"
    assert main[5] == "_MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1291)"
    assert r.attrs == {"threads": 4, "processes": 1}


def test_older_py_spy_without_process_header_and_hex_thread_ids(tmp_path):
    r, ev = parse(tmp_path, STACKS / "gprofiler-612-py-spy-dump.txt")
    assert (r.format, r.status, r.issues, r.pid) == ("py_spy_dump", "parsed", 0, None)
    assert [e["attrs"]["thread"] for e in ev] == ["MainThread", "Thread-6", "Process Events Listener",
                                                   "ThreadPoolExecutor-0_0"]
    assert all(e["tid"] is None and e["pid"] is None for e in ev)       # a pthread_t is not an OS thread id
    assert ev[0]["attrs"]["thread_id"] == "0x7F768F77C740"
    assert ev[0]["attrs"]["frames"][:2] == ["wait (threading.py:295)", "result (_base.py:427)"]


def test_py_spy_dump_of_a_thread_without_a_name(tmp_path):
    r, (t,) = parse(tmp_path, STACKS / "py-spy-python-c.txt")
    assert (r.format, r.status, t["pid"], t["tid"], t["attrs"]["thread"]) == ("py_spy_dump", "parsed", 29596, 29596, None)
    assert t["attrs"]["frames"] == ["<module> (<string>:1)"]


def test_py_spy_dump_of_another_program(tmp_path):
    r, (t,) = parse(tmp_path, STACKS / "home-assistant-38120-py-spy-dump.txt")
    assert (r.format, r.pid, t["pid"], t["tid"]) == ("py_spy_dump", 208, 208, 208)
    assert t["attrs"]["python"] == "3.8.3" and t["attrs"]["depth"] == 10


def test_a_cut_py_spy_dump_keeps_its_threads_and_names_the_bad_line(tmp_path):
    text = (STACKS / "py-spy-12580.txt").read_text().split("\n")
    f = tmp_path / "cut.txt"
    f.write_text("\n".join(text[:8] + ["garbage <<<"] + text[8:20]))
    r, ev = parse(tmp_path, f)
    assert r.status == "partial" and r.issues == 1
    # (a stray line inside a thread's frames is skipped: the frames after it are still that thread's)
    assert len(ev) == 2 and ev[0]["attrs"]["depth"] == 12


# -- strace -----------------------------------------------------------------------------------
def test_strace_of_a_blocked_worker(tmp_path):
    f = tmp_path / "strace-12677.txt"
    shutil.copyfile(STRACE / "strace-12677.txt", f)
    # its -tt times have no date: the file's modification day gives it (here 2026-12-07, 16:41:30 UTC)
    os.utime(f, (1796661690, 1796661690))
    r, (e,) = parse(tmp_path, f)
    assert (r.kind, r.format, r.status, r.clock_domain) == ("syscall_trace", "strace_tod", "parsed", "wall")
    assert r.attrs["date_from"] == "file modification time" and r.attrs["calls"] == {"futex": 1}
    assert (e["name"], e["tid"], e["pid"], e["line"]) == ("syscall_blocked", 12677, 12677, 1)
    assert e["ts_raw_ns"] == 1796661683385655000            # 2026-12-07 16:41:23.385655 UTC
    assert e["attrs"]["syscall"] == "futex" and e["attrs"]["wait"] is True
    assert e["attrs"]["args"].startswith("0x556698963510, FUTEX_WAIT_BITSET_PRIVATE")


def test_strace_dates_a_time_of_day_after_the_files_time_on_the_day_before(tmp_path):
    f = tmp_path / "strace-12677.txt"
    shutil.copyfile(STRACE / "strace-12677.txt", f)
    os.utime(f, (1796601600 + 3600, 1796601600 + 3600))      # 2026-12-07 01:00 UTC, before 16:41
    _, (e,) = parse(tmp_path, f)
    assert e["ts_raw_ns"] == 1796661683385655000 - 86400 * 10 ** 9


def test_strace_times_of_day_without_a_file_time_stay_untimed(tmp_path):
    f = tmp_path / "strace-12677.txt"
    shutil.copyfile(STRACE / "strace-12677.txt", f)
    os.utime(f, (0, 0))         # an archive member written without a time
    r, (e,) = parse(tmp_path, f)
    assert (r.clock_domain, r.attrs["date_from"], e["ts_raw_ns"]) == ("none", None, None)


def test_strace_of_a_rank_many_threads(tmp_path):
    r, ev = parse(tmp_path, STRACE / "strace-12580.txt")
    assert r.status == "parsed" and r.issues == 0
    blocked = [e for e in ev if e["name"] == "syscall_blocked"]
    # every thread strace saw waiting when it let go: one row each
    assert len({e["tid"] for e in blocked}) == len(blocked) >= 5
    assert {e["attrs"]["syscall"] for e in blocked} <= {"futex", "epoll_wait", "clock_nanosleep", "restart_syscall",
                                                         "poll", "read", "accept4"}
    assert r.attrs["calls"]["epoll_wait"] > 100


def test_terminal_strace_with_pid_prefixes_and_no_times(tmp_path):
    r, ev = parse(tmp_path, STRACE / "halfempty-17-strace-f.txt")
    assert (r.format, r.status, r.issues, r.clock_domain) == ("strace", "parsed", 0, "none")
    (b,) = [e for e in ev if e["name"] == "syscall_blocked"]         # 20131 and 20126 resumed theirs
    assert (b["tid"], b["line"], b["attrs"]["syscall"], b["ts_raw_ns"]) == (20125, 20, "futex", None)
    assert r.attrs["calls"]["futex"] == 10 and r.attrs["calls"]["waitid"] == 1


def test_strace_o_file_with_bare_thread_ids(tmp_path):
    r, ev = parse(tmp_path, STRACE / "restic-2949-strace-f.txt")
    assert (r.status, r.issues) == ("parsed", 0)
    assert sorted((e["tid"], e["attrs"]["syscall"]) for e in ev) == [(67, "write"), (68, "nanosleep"),
                                                                     (183, "futex")]


def test_one_interrupted_wait(tmp_path):
    r, ev = parse(tmp_path, STRACE / "siege-4-strace-p.txt")
    assert (r.format, r.status, r.records, ev) == ("strace", "parsed", 0, [])
    assert r.attrs["calls"] == {"futex": 1}


def test_resource_errors_and_deaths_are_rows(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text(
        '101 1796661683.100000 openat(AT_FDCWD, "/dev/shm/torch_1_2", O_RDWR|O_CREAT|O_EXCL, 0600) = 7 <0.000020>\n'
        '101 1796661683.100100 ftruncate(7, 67108864) = 0 <0.000010>\n'
        '101 1796661683.100200 fallocate(7, 0, 0, 67108864) = -1 ENOSPC (No space left on device) <0.000300>\n'
        '101 1796661683.200000 --- SIGBUS {si_signo=SIGBUS, si_code=BUS_ADRERR, si_addr=0x7f0000000000} ---\n'
        '101 1796661683.300000 +++ killed by SIGBUS (core dumped) +++\n')
    r, ev = parse(tmp_path, f)
    assert (r.format, r.status, r.attrs["times"]) == ("strace", "parsed", "epoch")
    assert [e["name"] for e in ev] == ["syscall_error", "signal", "thread_exit"]
    err = ev[0]
    assert err["ts_raw_ns"] == 1796661683100200000 and err["attrs"]["errno"] == "ENOSPC"
    # (fd 7 is the file that thread opened under /dev/shm just before)
    assert err["attrs"]["summary"] == "fallocate() failed: ENOSPC (No space left on device) in /dev/shm"
    assert err["kind"] == "shm_exhausted" and err["attrs"]["path"] == "/dev/shm/torch_1_2"
    assert ev[2]["attrs"] == {"signal": "SIGBUS", "code": None, "core_dumped": True}


@pytest.mark.parametrize("name", ["strace-12580.txt", "halfempty-17-strace-f.txt", "restic-2949-strace-f.txt"])
def test_strace_lines_are_not_taken_for_a_terminals_cut(name):
    # (threads' lines of one call shape are often of one length: they start records all the same)
    assert terminal_width((STRACE / name).read_text().split("\n")[:300]) is None


# -- /proc/<pid>/stack and wchan ------------------------------------------------------------------
def test_proc_stack_and_wchan_copies(tmp_path):
    r, (e,) = parse(tmp_path / "s", STACKS / "12677" / "stack", "vm/proc/12677/stack")
    assert (r.format, r.pid, e["name"], e["pid"]) == ("proc_stack", 12677, "kernel_stack", 12677)
    assert e["attrs"]["top"] == "futex_do_wait" and e["attrs"]["frames"][-1] == "entry_SYSCALL_64_after_hwframe"
    r, (w,) = parse(tmp_path / "w", STACKS / "12677" / "wchan", "vm/proc/12677/wchan")
    assert (r.format, w["name"], w["pid"], w["attrs"]) == ("proc_wchan", "wchan", 12677, {"wchan": "futex_do_wait"})


def test_a_word_is_a_wchan_only_where_its_path_says_so():
    reg = default_registry()
    word = (STACKS / "12677" / "wchan").read_bytes()
    assert reg.detect(Head.from_bytes("proc/12677/wchan", word)).parser.name == "proc_wchan"
    assert not reg.detect(Head.from_bytes("notes.txt", word)).recognized


# -- df -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, block", [("df-B1.txt", "1B"), ("df-h.txt", "-h"), ("df-T.txt", "1K, -T")])
def test_df_of_a_full_dev_shm(tmp_path, name, block):
    r, (e,) = parse(tmp_path, DATA / "df" / name)
    assert (r.format, r.status, r.issues, r.clock_domain) == ("df", "parsed", 0, "none")
    a = e["attrs"]
    assert (a["mount"], a["filesystem"], a["used_bytes"], a["size_bytes"], a["avail_bytes"], a["use_pct"]) == \
        ("/dev/shm", "tmpfs", 64 << 20, 64 << 20, 0, 100)


# -- the DataLoader out of shared memory, traced ---------------------------------------------------
def test_strace_of_dataloader_workers_out_of_shared_memory(tmp_path):
    f = tmp_path / "strace-shm-job-tail.txt.gz"
    shutil.copyfile(STRACE / "strace-shm-job-tail.txt.gz", f)
    os.utime(f, (1796662830, 1796662830))       # 2026-12-07 17:00:30 UTC
    r, ev = parse(tmp_path, f)
    assert (r.format, r.status, r.issues) == ("strace_tod", "parsed", 0)
    errs = [e for e in ev if e["name"] == "syscall_error"]
    # each worker's fallocate() of its 24 MiB batch in a file it opened under /dev/shm
    assert len(errs) == 6 and {e["tid"] for e in errs} == {23522, 23523, 23524}
    first = errs[0]
    assert (first["kind"], first["line"], first["ts_raw_ns"]) == ("shm_exhausted", 2163, 1796662819218982000)
    assert first["attrs"]["path"] == "/dev/shm/torch_23523_3549452442_0"
    assert first["attrs"]["summary"] == "fallocate() failed: ENOSPC (No space left on device) in /dev/shm"
    assert r.attrs["calls"]["fallocate"] == 8


# -- faulthandler's watchdog in a log ---------------------------------------------------------------
def test_faulthandler_timeout_dumps_in_a_torchrun_log(tmp_path):
    r, ev = parse(tmp_path, DATA / "app_log" / "faulthandler_watchdog.log")
    assert (r.format, r.status) == ("app_log", "parsed")
    dumps = [e for e in ev if e["name"] == "faulthandler_timeout"]
    assert [(e["line"], e["kind"], e["attrs"]["after_s"], e["attrs"]["threads"]) for e in dumps] == \
        [(39, "hang_dump", 10, 4), (73, "hang_dump", 10, 3)]
    stacks = [e for e in ev if e["name"] == "thread_stack"]
    assert [e["line"] for e in stacks] == [40, 47, 54, 60, 74, 81, 88]
    main1 = next(e for e in stacks if e["line"] == 60)
    assert main1["attrs"]["thread"] == "MainThread" and main1["attrs"]["from"] == "faulthandler"
    assert main1["attrs"]["frames"][5] == ("_try_get_data (/opt/torchenv/lib/python3.11/site-packages/torch/utils/"
                                           "data/dataloader.py:1291)")
    assert main1["attrs"]["frames"][-1] == "<module> (/work/main/sample_traces/scripts/hang_job.py:115)"
    assert dumps[1]["attrs"]["main_frame"] == ("_engine_run_backward (/opt/torchenv/lib/python3.11/site-packages/"
                                               "torch/autograd/graph.py:979)")


def test_py_spy_native_and_locals_dumps(tmp_path):
    """py-spy 0.4.3's ``--native`` (C frames between the Python ones: a symbol or an address, and
    its library) and ``--locals`` (each frame's arguments, kept as the thread's text) of a thread
    blocked on a lock another thread holds, recorded here."""
    r, ev = parse(tmp_path / "n", STACKS / "py-spy-native.txt")
    assert (r.status, r.issues, r.pid) == ("parsed", 0, 8184)
    main, other = ev
    assert main["attrs"]["frames"] == [
        "0x7f11dfea3f16 (libc.so.6)", "0x7f11dfeaed90 (libc.so.6)", "PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        "lock_PyThread_acquire_lock (libpython3.11.so.1.0)", "load_shard (sleeper.py:7)", "<module> (sleeper.py:11)",
        "0x7f11dfe4524a (libc.so.6)"]
    assert other["attrs"]["thread"] == "cache-refresh" and other["attrs"]["frames"][0] == "clock_nanosleep (libc.so.6)"
    r, ev = parse(tmp_path / "l", STACKS / "py-spy-locals.txt")
    assert (r.status, r.issues) == ("parsed", 0)
    assert ev[0]["attrs"]["frames"] == ["load_shard (sleeper.py:7)", "<module> (sleeper.py:11)"]
    assert '            path: "/data/shard-0007.bin"' in ev[0]["text"].split("\n")
