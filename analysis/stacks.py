"""Where a stopped rank waited, and for whom: its threads' stacks (py-spy) and the system calls
its processes were blocked in (strace), read together with who started whom.

A hang leaves no error line. What an engineer takes while it hangs says where every process
was: ``py-spy dump`` of each rank and of its DataLoader workers (``ingest.formats.pyspy``),
the dump Python's own watchdog prints into the log (``faulthandler.dump_traceback_later``, read
by the log engine), or gdb's native backtraces (``ingest.formats.gdb_backtrace``),
``strace -p`` of the stuck ones (``ingest.formats.strace``), ``/proc/<pid>/status`` copies (whose
``PPid`` says which worker is whose, :func:`.attribution.children_of`). This module reads each
process's main thread as one :class:`Position` (what it waits for, in words) and, for a rank that
stopped making progress (``rank_stalled``, :mod:`.progress`), follows the wait: a rank waiting for
its DataLoader is waiting for its workers, and a worker that is not idle in its loop is where
the rank is stuck.

Worked example (``sample_traces/hang-dataloader-lock``, recorded here): rank 1 (pid 12580) logged
its last step at 16:41:04.998; rank 0 timed out in the gradients' all_reduce 40 s later. The
dumps say::

    pid 12580  MainThread  _PollLikeSelector.select (selectors.py:415) ... Queue.get ...
                           _MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1291)
    pid 12677  MainThread  Shards.__getitem__ (hang_job.py:37) ... _worker_loop (torch/utils/data/_utils/worker.py:374)
    pid 12678  MainThread  Shards.__getitem__ (hang_job.py:37) ... _worker_loop (...)
    strace -p 12677: futex(0x556698963510, FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME, 0, NULL ... <detached ...>

and the status copies give both workers ``PPid: 12580``. Rank 1 waits for its DataLoader
(``waits_for = "dataloader"``); of its workers none is idle in ``Queue.get``, both are inside
``Shards.__getitem__ (hang_job.py:37)``, blocked in ``futex()``: the stall is explained as "its main
thread waited for its DataLoader workers (pids 12677, 12678), which were inside
Shards.__getitem__ (hang_job.py:37), waiting in futex()", with the dumps' and the trace's lines as
evidence. A stack is a reading at one moment (a dump carries no time): it explains a stall, it is
not a cause placed before it.

Native stacks (gdb, no Python frames: ``sample_traces/hang-gdb-dataloader-lock``) are read by
what the runtime's own names say: a collective by the process group's frames
(``c10d::Reducer::finalize_backward()``), a DataLoader worker by the name torch gives its process
(``pt_data_worker``, idle when only the runtime is on its stack and it polls its index queue),
what the interpreter was doing by CPython's C function (``lock_PyThread_acquire_lock``: a Python
lock's acquire), the call a thread blocks in by the C library's (``__libc_open64`` with its file:
``open() of /tmp/aftertrace-shard.fifo``). A rank whose main thread polls inside the interpreter
while its children are DataLoader workers waits for them, as a Python stack's ``Queue.get`` says.
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass

from aftertrace.ingest.sink import attrs_of
from aftertrace.ingest.timeparse import fmt_utc

from .attribution import Children
from .links import Evidence, Link, LinkKind
from .present import has_rows
from .progress import stall_link

# the finding kinds it makes (the catalogue: analysis/kinds.py): a stall only the dumps show
EMITS = frozenset({LinkKind.RANK_STALLED})

# what a main thread waits for, by (function name's end, file's end) of a frame: py-spy names a
# function with its class (``Queue.get``) since 0.3 and by itself before; a file by the path
# Python has for it (short, or absolute in older versions)
DATALOADER_WAIT = (("_try_get_data", "torch/utils/data/dataloader.py"), ("_get_data", "torch/utils/data/dataloader.py"),
                   ("_next_data", "torch/utils/data/dataloader.py"))
WORKER_LOOP = ("_worker_loop", "torch/utils/data/_utils/worker.py")
WORKER_IDLE = ("get", "multiprocessing/queues.py")
COLLECTIVE = (("", "torch/distributed/distributed_c10d.py"), ("_engine_run_backward", "torch/autograd/graph.py"),
              ("", "torch/distributed/c10d_logger.py"))
# the runtime around user code: the first frame outside it is where user code was
LIBRARY_DIRS = ("multiprocessing/", "torch/", "concurrent/", "asyncio/", "site-packages/", "dist-packages/",
                "importlib/", "json/", "logging/")
LIBRARY_FILES = ("threading.py", "selectors.py", "queue.py", "socket.py", "runpy.py", "ssl.py", "subprocess.py")
MAX_WORKERS_NAMED = 8
_SHARED_OBJECT = re.compile(r"\.so(?:\.[\d.]+)?$")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
# native frames (gdb): a collective waits in the process group's code, the runtime is the C
# library, the C++ library and the interpreter; the first frame past them is where the thread was
NATIVE_COLLECTIVE = ("c10d::", "gloo::", "ProcessGroup", "nccl", "Nccl", "NCCL", "Reducer::")
NATIVE_RUNTIME_FILES = ("./nptl/", "../sysdeps/", "./Modules/", "Modules/", "Objects/", "Python/", "./Include/",
                        "Include/", "../csu/", "./Objects/", "./Python/", "./Parser/")
NATIVE_RUNTIME_LIBS = ("libc.so", "libpthread", "ld-linux", "libstdc++", "libpython", "libgcc_s")
NATIVE_RUNTIME_FUNCS = ("_Py", "Py", "_io_", "cfunction_", "method_vectorcall", "type_call", "do_call_core",
                        "slot_tp_", "vectorcall", "run_", "pymain_", "pyrun_", "__libc_start", "_start", "start_thread",
                        "clone", "??", "<signal handler called>", "std::")


@dataclass(frozen=True)
class Position:
    """A process's main thread as a dump saw it."""
    host: str
    pid: int
    frames: tuple[str, ...]             # innermost first
    idle: bool
    waits_for: str | None               # "dataloader" | "collective" | "work" (an idle worker) | None
    where: str | None                   # the innermost frame of user code (else the innermost frame)
    worker: bool                        # a DataLoader worker (its loop is on the stack)
    evidence: Evidence
    syscall: str | None = None          # the call strace saw it blocked in, when a trace has it
    syscall_ev: Evidence | None = None
    tool: str = "py-spy"                # what dumped it: py-spy, or faulthandler's watchdog in the log
    taken_ns: int | None = None         # when it was dumped (UTC ns), where the collector's manifest says
    syscall_tool: str | None = None     # what saw that call: strace, or /proc's wchan

    def words(self) -> str:
        if self.waits_for == "dataloader" and self.tool == "gdb":
            return f"waited for its DataLoader workers (in {self.syscall or self.where}, its workers alive)"
        if self.waits_for == "dataloader":
            return "waited for its DataLoader workers (Queue.get in _MultiProcessingDataLoaderIter)"
        if self.waits_for == "collective":
            return f"waited in {_collective_frame(self.frames)}"
        if self.waits_for == "work":
            return "was idle, waiting for work"
        return f"was {'blocked' if self.idle else 'running'} in {self.where}"


def _split(frame: str) -> tuple[str, str]:
    """(function, file) of a frame as the dump parsers write it: ``function (file:line)``."""
    at = frame.rfind(" (")
    if at < 0:
        return frame, ""
    return frame[:at], frame[at + 2:-1].rsplit(":", 1)[0]


def _is(frame: str, pattern: tuple[str, str]) -> bool:
    func, file = _split(frame)
    return func.endswith(pattern[0]) and (file == pattern[1] or file.endswith("/" + pattern[1]))


def _library(frame: str) -> bool:
    func, file = _split(frame)
    return (file.startswith("<") or any(file.startswith(d) or f"/{d}" in file for d in LIBRARY_DIRS)
            or any(file == f or file.endswith("/" + f) for f in LIBRARY_FILES)
            # a native frame (py-spy --native): a shared library's, or an address without a symbol
            or _SHARED_OBJECT.search(file) is not None or _ADDRESS.fullmatch(func) is not None)


def _classify(frames: list[str]) -> tuple[str | None, str | None, bool]:
    """(waits_for, where, worker) of a main thread's frames (innermost first)."""
    loop = next((i for i, f in enumerate(frames) if _is(f, WORKER_LOOP)), None)
    if loop is not None:
        if any(_is(f, WORKER_IDLE) for f in frames[:loop]) and all(_library(f) for f in frames[:loop]):
            return "work", None, True
    elif any(_is(f, w) for f in frames[:16] for w in DATALOADER_WAIT):
        return "dataloader", None, False
    elif any(_is(f, c) for f in frames[:8] for c in COLLECTIVE):
        return "collective", None, False
    user = next((f for f in frames if not _library(f)), None)
    return None, user or (frames[0] if frames else None), loop is not None


# a CPython built from source names its files under the build's folder (``/tmp/python-build.X/
# Python-3.11.7/Modules/selectmodule.c``)
CPYTHON_TREE = ("/Modules/", "/Objects/", "/Python/", "/Include/", "/Parser/")
# what torch names a DataLoader worker process (its main thread, as gdb shows it)
NATIVE_WORKER_NAME = "pt_data_worker"
# the calls a process waits in when it waits for another process's data (a pipe, a socket, a queue)
WAITS_FOR_DATA = ("poll()", "select()", "epoll_wait()", "read()", "recv()")


def _native_runtime(frame: str) -> bool:
    func, file = _split(frame)
    return (any(file.startswith(d) for d in NATIVE_RUNTIME_FILES) or any(lib in file for lib in NATIVE_RUNTIME_LIBS)
            or (file.endswith((".c", ".h")) and any(d in file for d in CPYTHON_TREE))
            or func.startswith(NATIVE_RUNTIME_FUNCS) or func.lstrip("_").startswith(("GI_", "libc_", "pthread_",
                                                                                       "futex", "lll_")))


# what the interpreter was doing, by the C function of CPython that does it (a Python process's
# native stack without Python's own frames, as gdb shows it without python-gdb)
PY_CALLS = (("lock_PyThread_acquire_lock", "a Python lock's acquire() (threading.Lock)"),
            ("rlock_acquire", "a Python lock's acquire() (threading.RLock)"),
            ("select_poll_poll", "select.poll()"), ("select_select", "select.select()"),
            ("select_epoll_poll", "select.epoll.poll()"), ("_io_FileIO___init__", "open() of a file (io.FileIO)"),
            ("_io_FileIO_read", "a file's read()"), ("sock_recv", "a socket's recv()"),
            ("sock_accept", "a socket's accept()"), ("sock_connect", "a socket's connect()"),
            ("time_sleep", "time.sleep()"), ("os_waitpid", "os.waitpid()"), ("os_read", "os.read()"))


def _python_call(frames: list[str]) -> str | None:
    """What a native stack shows the interpreter doing (the first of :data:`PY_CALLS` on it)."""
    for f in frames[:40]:
        func = _split(f)[0]
        for name, words in PY_CALLS:
            if func.startswith(name):
                return f"{words} ({func})"
    return None


def _classify_native(frames: list[str], thread: str | None, call: str | None) -> tuple[str | None, str | None, bool]:
    """(waits_for, where, worker) of a main thread's native frames (gdb), innermost first: in a
    collective when the process group's code is on the stack; a DataLoader worker by the name
    torch gives it, idle when nothing but the runtime is on its stack and it waits for data (its
    index queue); else where the first frame past the C library, the C++ library and the
    interpreter is (the innermost frame when there is none: a Python process blocked in a call)."""
    if any(any(c in _split(f)[0] for c in NATIVE_COLLECTIVE) for f in frames[:24]):
        return "collective", None, False
    user = next((f for f in frames if not _native_runtime(f)), None)
    worker = thread == NATIVE_WORKER_NAME
    if worker and user is None and call in WAITS_FOR_DATA:
        return "work", None, True
    return None, user or _python_call(frames) or (frames[0] if frames else None), worker


def _collective_frame(frames: tuple[str, ...]) -> str:
    """The frame a collective wait is told by: the process group's (native) or the autograd or
    torch.distributed call (Python)."""
    return next((f for f in frames if _is(f, ("", "torch/autograd/graph.py")) or "distributed" in f
                 or any(c in _split(f)[0] for c in NATIVE_COLLECTIVE)), frames[0] if frames else "?")


def _call_words(call: str, args: str | None, path: str | None) -> str:
    """A blocked system call in words: ``futex() (a lock or condition wait)``, ``openat() of /x``."""
    if call == "futex" and (args is None or "FUTEX_WAIT" in args):
        return "futex() (a lock or condition wait)"
    return f"{call}()" + (f" of {path}" if path else "")


def positions(store, incident_id: str) -> dict[tuple[str, int], Position]:
    """(host, pid) -> its main thread's position, from the py-spy dumps of the incident (the text
    dump's thread where a process was dumped twice) with the call strace saw that thread blocked in."""
    if not has_rows(store, incident_id, "events"):
        return {}
    rows = store.query(
        """SELECT COALESCE(e.host, s.host, '') AS host, e.pid, e.tid, e.line, e.text, e.attrs, s.path, s.format,
                  -- (a dump file carries no time: its records' time is the collector's capture, see clocks)
                  CASE WHEN s.kind = 'stack_dump' THEN e.ts_utc_ns END AS taken_ns
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.category = 'stack' AND e.name = 'thread_stack' AND e.pid IS NOT NULL
           ORDER BY CASE s.format WHEN 'py_spy_dump' THEN 0 WHEN 'py_spy_json' THEN 1 ELSE 2 END, s.path,
                    e.line""", [incident_id])
    if not rows:
        return {}
    out: dict[tuple[str, int], Position] = {}
    native_calls: dict[tuple[str, int], str] = {}      # the call a native stack shows its thread blocked in
    for r in rows:
        a = attrs_of(r["attrs"])
        main = r["tid"] == r["pid"] or a.get("thread") == "MainThread"
        key = (r["host"], int(r["pid"]))
        if not main or key in out:
            continue
        frames = [f for f in a.get("frames") or [] if isinstance(f, str)]
        tool = a.get("from") if a.get("from") in ("faulthandler", "gdb") else "py-spy"
        call = _call_words(str(a["blocked_call"]), None, a.get("call_path")) if a.get("blocked_call") else None
        if tool == "gdb":
            waits, where, worker = _classify_native(frames, a.get("thread"), call)
        else:
            waits, where, worker = _classify(frames)
        text = "\n".join((r["text"] or "").split("\n")[:2])
        out[key] = Position(host=r["host"], pid=int(r["pid"]), frames=tuple(frames), idle=bool(a.get("idle")),
                            waits_for=waits, where=where, worker=worker,
                            evidence=Evidence(r["path"], r["line"], text), tool=tool, taken_ns=r["taken_ns"])
        if tool == "gdb" and call:
            native_calls[key] = call
    for r in store.query(
            """SELECT COALESCE(e.host, s.host, '') AS host, e.tid, e.line, e.text, s.path,
                      json_extract_string(e.attrs, '$.syscall') AS syscall,
                      json_extract_string(e.attrs, '$.args') AS args,
                      json_extract_string(e.attrs, '$.path') AS call_path
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.category = 'syscall' AND e.name = 'syscall_blocked'
               ORDER BY s.path, e.line""", [incident_id]):
        key = (r["host"], int(r["tid"])) if r["tid"] is not None else None
        p = out.get(key)
        if p is not None and p.syscall is None:
            call = _call_words(r["syscall"], r["args"] or "", r["call_path"])
            out[key] = dataclasses.replace(p, syscall=call, syscall_ev=Evidence(r["path"], r["line"], r["text"] or ""),
                                           syscall_tool="strace")
    # then the call a native stack shows (it names an open's file), then the kernel's wait channel
    for key, call in native_calls.items():
        p = out[key]
        if p.syscall is None:
            out[key] = dataclasses.replace(p, syscall=call, syscall_ev=p.evidence, syscall_tool="gdb")
    for r in store.query(
            """SELECT COALESCE(e.host, s.host, '') AS host, e.pid, e.line, e.text, s.path,
                      json_extract_string(e.attrs, '$.wchan') AS wchan
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.category = 'stack' AND e.name = 'wchan' AND e.pid IS NOT NULL
               ORDER BY s.path""", [incident_id]):
        key = (r["host"], int(r["pid"]))
        p = out.get(key)
        if p is not None and p.syscall is None and r["wchan"]:
            out[key] = dataclasses.replace(p, syscall=f"the kernel's {r['wchan']}",
                                           syscall_ev=Evidence(r["path"], r["line"], r["text"] or ""),
                                           syscall_tool="/proc wchan")
    return out


def lookup(pos: dict[tuple[str, int], Position], host: str | None, pid: int | None) -> Position | None:
    """The position of ``pid`` on ``host``: a dump of that host, else one whose host is unknown;
    for a rank of unknown host, the one dump of that pid."""
    if pid is None:
        return None
    p = pos.get((host or "", pid)) or pos.get(("", pid))
    if p is None and not host:
        found = [v for (h, q), v in pos.items() if q == pid]
        p = found[0] if len(found) == 1 else None
    return p


def stalls(pos: dict[tuple[str, int], Position], ranks: dict, links: list[Link]) -> list[Link]:
    """A rank stalled, read from the dumps alone, where nothing else said so (a bundle taken while
    the job hung, before any timeout): ranks whose main thread waits in a collective are held up
    by a rank whose main thread is elsewhere (in its DataLoader, in its own code)."""
    if any(l.kind == LinkKind.RANK_STALLED for l in links):
        return []
    at = {r: lookup(pos, p.host, p.pid) for r, p in ranks.items()}
    waiting = sorted(r for r, q in at.items() if q is not None and q.waits_for == "collective")
    elsewhere = sorted(r for r, q in at.items() if q is not None and q.waits_for != "collective")
    if not waiting or not elsewhere:
        return []
    out = []
    for r in elsewhere:
        why = (f"when the stacks were dumped, rank{'s' if len(waiting) > 1 else ''} "
               f"{', '.join(map(str, waiting))} waited in a collective ({_collective_frame(at[waiting[0]].frames)}) while "
               f"rank {r} was not in one")
        l = stall_link(ranks[r], why, 0.7 if len(elsewhere) == 1 else 0.5, [])
        out.append(dataclasses.replace(l, evidence=l.evidence + (at[waiting[0]].evidence,)))
    return out


SHM_FULL = 0.9      # /dev/shm this full (of its size) is worth saying next to blocked workers


def shm_usage(store, incident_id: str) -> dict[str, tuple[int, int, Evidence]]:
    """host -> (used bytes, size bytes, evidence) of ``/dev/shm`` as the bundle's ``df`` output says."""
    out = {}
    for r in store.query(
            """SELECT COALESCE(e.host, s.host, '') AS host, e.line, e.text, s.path,
                      TRY_CAST(json_extract_string(e.attrs, '$.used_bytes') AS BIGINT) AS used,
                      TRY_CAST(json_extract_string(e.attrs, '$.size_bytes') AS BIGINT) AS size
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.category = 'filesystem' AND e.name = 'df'
                 AND json_extract_string(e.attrs, '$.mount') = '/dev/shm'
               ORDER BY s.path, e.line""", [incident_id]):
        if r["used"] is not None and r["size"]:
            out[r["host"]] = (r["used"], r["size"], Evidence(r["path"], r["line"], r["text"] or ""))
    return out


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def blocking_point(pos: dict[tuple[str, int], Position], host: str | None, pid: int,
                   children: Children, shm: dict | None = None) -> tuple[str, tuple[Evidence, ...], dict] | None:
    """Where the process ``pid`` (a rank) was stuck, in words, with the evidence and attrs; None
    where no dump of it is in the bundle."""
    p = lookup(pos, host, pid)
    if p is None:
        return None
    p = _native_dataloader_wait(p, pos, children)
    ev = [p.evidence] + ([p.syscall_ev] if p.syscall_ev and p.syscall_ev != p.evidence else [])
    attrs = {"stack_top": p.frames[0] if p.frames else None, "waits_for": p.waits_for}
    text = f"its main thread {p.words()}"
    if p.waits_for == "dataloader":
        kids = sorted(children.on(p.host or None).get(pid, set()))
        workers = [pos[(p.host, k)] for k in kids if (p.host, k) in pos and pos[(p.host, k)].worker]
        busy = [w for w in workers if w.waits_for != "work"]
        if busy:
            at = sorted({w.where or "?" for w in busy})
            calls = sorted({w.syscall for w in busy if w.syscall})
            pids = ", ".join(str(w.pid) for w in busy[:MAX_WORKERS_NAMED])
            text += (f"; its worker{'s' if len(busy) > 1 else ''} (pid{'s' if len(busy) > 1 else ''} {pids}) "
                     f"{'were' if len(busy) > 1 else 'was'} inside {' and '.join(at)}")
            if calls:
                text += f", waiting in {' and '.join(calls)}"
            if len(busy) < len(workers):
                text += f" ({len(workers) - len(busy)} other worker(s) idle, waiting for work)"
            for w in busy[:MAX_WORKERS_NAMED]:
                ev.append(w.evidence)
                if w.syscall_ev and w.syscall_ev != w.evidence:
                    ev.append(w.syscall_ev)
            attrs.update(blocked_in=" and ".join(at), blocked_workers=",".join(str(w.pid) for w in busy))
            full = (shm or {}).get(p.host) or (shm or {}).get("")
            if full and full[0] >= SHM_FULL * full[1]:
                text += f"; /dev/shm was full ({_mib(full[0])} of {_mib(full[1])}, df)"
                ev.append(full[2])
                attrs["shm_used_bytes"], attrs["shm_size_bytes"] = full[0], full[1]
        elif workers:
            text += f"; its {len(workers)} worker(s) were idle, waiting for work"
    elif p.waits_for is None and p.where:
        attrs["blocked_in"] = p.where
        attrs["waiting_in"] = p.syscall
    if p.syscall and p.waits_for != "dataloader":
        text += f", waiting in {p.syscall}"
    seen = [q for q in pos.values() if q.evidence in ev]
    tools = list(dict.fromkeys(sorted({q.tool for q in seen}) + sorted(
        {q.syscall_tool for q in seen if q.syscall_ev is not None and q.syscall_ev in ev})))
    return text + f" ({' and '.join(tools)})", tuple(ev), attrs


def _native_dataloader_wait(p: Position, pos: dict, children: Children) -> Position:
    """A main thread gdb saw waiting for data (poll, select, read...) with nothing but the runtime
    on its stack, whose children are DataLoader workers, waits for them (natively, the queue it
    reads is not visible: its children are)."""
    if p.tool != "gdb" or p.waits_for is not None or p.syscall not in WAITS_FOR_DATA or \
            not all(_native_runtime(f) for f in p.frames):
        return p
    kids = children.on(p.host or None).get(p.pid, set())
    if any((p.host, k) in pos and pos[(p.host, k)].worker for k in kids):
        return dataclasses.replace(p, waits_for="dataloader", where=None)
    return p


SHOWN_FRAMES = 12


def _shown(p: Position) -> dict:
    return {"pid": p.pid, "doing": p.words(), "waits_for": p.waits_for, "frames": list(p.frames[:SHOWN_FRAMES]),
            "depth": len(p.frames), "syscall": p.syscall, "source": p.evidence.source, "line": p.evidence.line,
            "taken_time": fmt_utc(p.taken_ns)}


def attach(pos: dict[tuple[str, int], Position], ranks: dict, children: Children) -> None:
    """Each rank's ``stack`` (the report's "what each rank was doing"): its main thread as dumped,
    and its DataLoader workers'."""
    for p in ranks.values():
        q = lookup(pos, p.host, p.pid)
        if q is None:
            continue
        q = _native_dataloader_wait(q, pos, children)
        d = _shown(q)
        kids = sorted(children.on(q.host or None).get(q.pid, set()))
        d["workers"] = [_shown(pos[(q.host, k)]) for k in kids if (q.host, k) in pos and pos[(q.host, k)].worker]
        p.stack = d
    # which rank is somewhere else: out of the collective its peers wait in, else off the place
    # most of them are (by their innermost frame)
    dumped = [p.stack for p in ranks.values() if p.stack is not None]
    if len(dumped) >= 2:
        if any(d["waits_for"] == "collective" for d in dumped):
            for d in dumped:
                d["elsewhere"] = d["waits_for"] != "collective"
        else:
            tops = Counter(d["frames"][0] if d["frames"] else None for d in dumped)
            top, n = tops.most_common(1)[0]
            for d in dumped:
                d["elsewhere"] = n > len(dumped) / 2 and (d["frames"][0] if d["frames"] else None) != top


def explain_stalls(store, incident_id: str, ranks: dict, links: list[Link], children: Children) -> list[Link]:
    """``links`` with each ``rank_stalled`` finding told where its rank was stuck, where a dump of
    the rank is in the bundle (:func:`blocking_point`); with the stalls only the dumps show
    (:func:`stalls`) added."""
    pos = positions(store, incident_id)
    if not pos:
        return links
    attach(pos, ranks, children)
    links = links + stalls(pos, ranks, links)
    shm = shm_usage(store, incident_id)
    out = []
    for l in links:
        got = blocking_point(pos, l.host, l.pid, children, shm) if l.kind == LinkKind.RANK_STALLED and l.pid else None
        if got is None:
            out.append(l)
            continue
        text, ev, attrs = got
        merged = dict(l.attrs)
        merged.update(attrs)
        out.append(dataclasses.replace(l, summary=f"{l.summary}; {text}", evidence=l.evidence + ev,
                                       attrs=tuple(merged.items())))
    return out
