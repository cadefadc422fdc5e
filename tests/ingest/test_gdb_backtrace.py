"""gdb's backtraces of a hung process (``thread apply all bt``, ``bt``): real outputs recorded here
and public pastes (tests/data/stacks/PROVENANCE.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from aftertrace.ingest.formats.gdb_backtrace import GdbBacktraceParser, blocking_call, parse_frame
from aftertrace.ingest.reader import Head

from .test_hang_evidence import parse

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"


def test_a_rank_blocked_opening_a_fifo(tmp_path):
    r, ev = parse(tmp_path, STACKS / "gdb-15873.txt")
    assert (r.kind, r.format, r.status, r.pid, r.clock_domain) == ("stack_dump", "gdb_backtrace", "parsed", 15873,
                                                                    "none")
    assert [(e["tid"], e["attrs"]["thread"], e["attrs"]["blocked_call"]) for e in ev] == [
        (15881, "pt_gloo_runloop", "futex"), (15880, "pt_gloo_runloop", "futex"), (15878, "gloo_tcp_loop", "epoll_wait"),
        (15873, "python3", "open")]
    main = ev[-1]
    assert (main["pid"], main["line"], main["ts_raw_ns"], main["category"], main["name"]) == \
        (15873, 50, None, "stack", "thread_stack")
    a = main["attrs"]
    assert (a["from"], a["thread_id"], a["depth"], a["idle"], a["call_path"]) == \
        ("gdb", "1", 33, True, "/tmp/aftertrace-shard.fifo")
    assert a["frames"][:2] == ["__libc_open64 (../sysdeps/unix/sysv/linux/open64.c:41)",
                               "_io_FileIO___init___impl (./Modules/_io/fileio.c:384)"]
    assert main["text"].startswith('Thread 1 (Thread 0x7f00d03f4b80 (LWP 15873) "python3"):\n#0  0x')
    assert r.issues == 0          # (gdb's own lines: new LWPs, libthread_db, the stop location, auto-load warnings)


def test_a_rank_in_its_gradients_all_reduce_keeps_the_cxx_names(tmp_path):
    _, ev = parse(tmp_path, STACKS / "gdb-15872.txt")
    (main,) = [e for e in ev if e["tid"] == 15872]
    frames = main["attrs"]["frames"]
    assert "c10d::Reducer::finalize_backward() (/opt/torchenv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so)" \
        in frames
    assert main["attrs"]["blocked_call"] == "futex" and main["attrs"]["depth"] == 42
    assert len(ev) == 6


@pytest.mark.parametrize("name,threads", [
    ("pytorch-4679-thread-apply-all-bt.txt", [(3514, None, "accept"), (3515, None, "poll")]),
    ("pytorch-52916-ddp-nccl-bootstrap.txt", [(20292, None, "accept")]),
    ("tensorrt-llm-2560-nccl-hung.txt", [(3913167, "cuda00006000019", "poll")]),
])
def test_public_pastes(tmp_path, name, threads):
    r, ev = parse(tmp_path, STACKS / name)
    assert (r.format, r.status, r.issues, r.pid) == ("gdb_backtrace", "parsed", 0, None)   # no thread 1: no pid
    assert [(e["tid"], e["attrs"]["thread"], e["attrs"]["blocked_call"]) for e in ev] == threads


def test_the_nccl_bootstrap_frames_keep_their_files():
    assert parse_frame("#1  0x00007f00ad990a6e in bootstrapNetAccept (listenComm=0x7f0018006620, "
                       "recvComm=recvComm@entry=0x7f003cfe43c0) at bootstrap.cc:106") == \
        ("bootstrapNetAccept", "bootstrap.cc", 106, None,
         "listenComm=0x7f0018006620, recvComm=recvComm@entry=0x7f003cfe43c0")
    # a C++ name keeps its own parentheses; gdb's argument list is the last group
    assert parse_frame("#6  0x00007fa692712501 in c10d::ProcessGroupGloo::runLoop(int) () from /x/libtorch_cpu.so") == \
        ("c10d::ProcessGroupGloo::runLoop(int)", None, None, "/x/libtorch_cpu.so", "")
    # an inlined frame has no address; a string argument may hold parentheses
    assert parse_frame('#0  __libc_open64 (file=file@entry=0x7f "/tmp/a (1).fifo", oflag=524288) at open64.c:41') == \
        ("__libc_open64", "open64.c", 41, None, 'file=file@entry=0x7f "/tmp/a (1).fifo", oflag=524288')
    assert parse_frame("#3  <signal handler called>")[0] == "<signal handler called>"
    assert parse_frame("Thread 1 (LWP 5):") is None


@pytest.mark.parametrize("func,call", [("__GI___poll", "poll"), ("__libc_open64", "open"), ("epoll_wait", "epoll_wait"),
                                       ("__futex_abstimed_wait_common64", "futex"), ("___pthread_cond_wait", "futex"),
                                       ("__lll_lock_wait", "futex"), ("__GI___clock_nanosleep", "nanosleep"),
                                       ("accept4", "accept"), ("__libc_recv", "recv"), ("bootstrapNetAccept", None),
                                       ("c10d::Reducer::finalize_backward()", None)])
def test_the_blocking_calls(func, call):
    assert blocking_call(func) == call


def test_a_plain_bt_is_the_attached_process_main_thread(tmp_path):
    f = tmp_path / "bt.txt"
    f.write_text("Attaching to process 4242\n"
                 "[Thread debugging using libthread_db enabled]\n"
                 "#0  0x00007f1 in __GI___clock_nanosleep (clock_id=0, flags=0, req=0x7ff) at nanosleep.c:48\n"
                 "#1  0x00007f2 in main () at sleeper.c:7\n")
    r, (ev,) = parse(tmp_path, f)
    assert (r.format, r.pid, ev["pid"], ev["tid"], ev["attrs"]["blocked_call"], ev["attrs"]["frames"]) == \
        ("gdb_backtrace", 4242, 4242, 4242, "nanosleep",
         ["__GI___clock_nanosleep (nanosleep.c:48)", "main (sleeper.c:7)"])


def test_a_cut_paste_keeps_its_threads_and_names_the_bad_lines(tmp_path):
    text = (STACKS / "gdb-15873.txt").read_text()
    f = tmp_path / "cut.txt"
    f.write_text(text[:text.index("#3 ", text.index("Thread 1 "))] + "#3  0x00007f00d0\x00garbage\nnot gdb at all\n")
    r, ev = parse(tmp_path, f)
    assert r.status == "partial" and len(ev) == 4 and ev[-1]["attrs"]["depth"] == 3
    assert r.issues == 2          # the frame cut after its address, and "not gdb at all"


def test_detection_is_a_dry_run_of_the_grammar():
    def head(text: str) -> Head:
        return Head.from_bytes("x.txt", text.encode())
    assert GdbBacktraceParser.detect(head((STACKS / "gdb-15873.txt").read_text()))
    assert GdbBacktraceParser.detect(head("(gdb) bt\n#0  0x1 in poll () from /lib64/libc.so.6\n#1  0x2 in main ()\n"))
    assert not GdbBacktraceParser.detect(head("Thread 1 (LWP 5):\nnothing here\n"))
    assert not GdbBacktraceParser.detect(head("hello\n#0  0x1 in poll () from /lib64/libc.so.6\n"))
    assert not GdbBacktraceParser.detect(head((STACKS / "py-spy-12580.txt").read_text()))
