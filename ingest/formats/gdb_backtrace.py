"""``gdb -p PID -batch -ex "thread apply all bt"`` output -> one event per thread: its native stack.

What an engineer takes of a hung process when py-spy is not there, or to see below Python (a
collective waiting in libtorch, a read that never returns)::

    [New LWP 14711]
    [Thread debugging using libthread_db enabled]
    Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
    0x00007fa6a2f16090 in __libc_open64 (file=file@entry=0x7fa680fb00d0 "/tmp/shard.fifo", ...) at ...
    41	../sysdeps/unix/sysv/linux/open64.c: No such file or directory.

    Thread 2 (Thread 0x7fa683e296c0 (LWP 14711) "gloo_tcp_loop"):
    #0  0x00007fa6a2f26f36 in epoll_wait (epfd=6, ...) at ../sysdeps/unix/sysv/linux/epoll_wait.c:30
    #1  0x00007fa694b7d62d in gloo::transport::tcp::Loop::run() () from .../torch/lib/libtorch_cpu.so

    Thread 1 (Thread 0x7fa6a35f9b80 (LWP 14705) "python3"):
    #0  0x00007fa6a2f16090 in __libc_open64 (file=file@entry=0x7fa680fb00d0 "/tmp/shard.fifo", ...) at ...
    #1  0x00007fa6a32e5eb3 in _io_FileIO___init___impl (...) at ./Modules/_io/fileio.c:384
    ...
    [Inferior 1 (process 14705) detached]

A thread's header gives gdb's number, the OS thread id (``LWP``) and its name; its frames follow,
innermost first: ``#N  [ADDR in ]FUNCTION (ARGS)[ at FILE:LINE| from LIBRARY]`` (a C++ function
keeps its signature: ``c10d::Reducer::finalize_backward() ()``; an inlined frame has no address;
``<signal handler called>`` and ``?? ()`` are frames too). A plain ``bt`` (one thread, no
headers) is read as the process's main thread. gdb's own chatter (``[New LWP]``, libthread_db,
the stop location and its source line, auto-load warnings, ``Reading symbols``, ``Backtrace
stopped``) is skipped without a word; any other line is a ``bad_line``.

The process: ``[Inferior 1 (process N) detached]`` or ``Attaching to process N``, else the
thread gdb numbers 1 (the main thread: its LWP is the pid).

Rows: ``events`` (category ``stack``, name ``thread_stack``, as py-spy's threads): pid, tid (the
LWP), text = the header and the first frames, attrs: ``thread`` (its name), ``thread_id`` (gdb's
number), ``frames`` (``function (file:line)`` or ``function (library)``, innermost first, at most
:data:`MAX_FRAMES`), ``depth``, ``from`` = ``gdb``, and where the innermost frames are a C
library call that blocks, ``blocked_call`` (``open``, ``read``, ``futex``, ``epoll_wait``...),
``call_path`` (the file an ``open`` was given) and ``idle`` (the thread waited rather than ran).

Clock: none (a backtrace does not say when it was taken).

Real samples: tests/data/stacks/ (PROVENANCE.md).
"""
from __future__ import annotations

import re

from ..model import CLOCK_NONE
from ..reader import Head
from ..registry import ParseContext, Parser

THREAD = re.compile(r"^Thread (\d+) \((.*)\):$")
LWP = re.compile(r"\((?:LWP|process) (\d+)\)|^(?:LWP|process) (\d+)")
NAME = re.compile(r'"((?:[^"\\]|\\.)*)"\s*$')
FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+) in )?(?!\s|0x)(.+)$")     # (an address alone: a cut line)
WHERE = re.compile(r"^(.*?)(?: at (\S+):(\d+)| from (\S+))?$")
PROCESS = re.compile(r"^\[Inferior \d+ \(process (\d+)\) detached\]$|^Attaching to (?:program: .*, )?process (\d+)")
# gdb's own lines around the backtrace: skipped without an issue
CHATTER = re.compile(
    r"^(?:\(gdb\) |\[New (?:LWP|Thread) .*\]|\[Thread debugging using libthread_db enabled\]|Using host libthread_db "
    r"library |0x[0-9a-fA-F]+ in |\d+\t|warning: |To enable execution of this file add|\tadd-auto-load-safe-path "
    r"|line to your configuration file |To completely disable this security protection add|\tset auto-load "
    r"|For more information about this security protection |\"Auto-loading safe path\" section |\tinfo \"\(gdb\)"
    r"|Reading symbols from |\(No debugging symbols found in |Attaching to |\[Inferior \d+ \(process \d+\) "
    r"|Backtrace stopped: |Download failed: |Downloading |Missing separate debuginfo|Try: |--Type <RET> "
    r"|Python Exception |Traceback \(most recent call last\)|\[Switching to thread |Quit anyway\? "
    r"|[A-Za-z_][\w:<>~.]* \(.*\) (?:at \S+:\d+|from \S+)$)")     # (the stop location, at a line's start)
PATH_ARG = re.compile(r'\b(?:file|filename|pathname|path|name)=(?:\w+@entry=)?0x[0-9a-fA-F]+ "((?:[^"\\]|\\.)*)"')
MAX_FRAMES = 64
MAX_TEXT_LINES = 40
MAX_THREADS = 4096
MAX_FRAME_CHARS = 400

# the C library's blocking calls, by the name a frame has once its glibc prefixes are removed
# (``__GI___libc_read`` -> ``read``): the call a waiting thread sits in
BLOCKING = (("futex", "futex"), ("pthread_cond_wait", "futex"), ("pthread_cond_timedwait", "futex"),
            ("pthread_cond_clockwait", "futex"), ("sem_wait", "futex"), ("sem_clockwait", "futex"),
            ("sem_timedwait", "futex"), ("do_futex_wait", "futex"), ("lll_lock_wait", "futex"),
            ("pthread_mutex_lock", "futex"), ("pthread_join", "futex"),
            ("open64", "open"), ("openat64", "open"), ("open", "open"), ("openat", "open"),
            ("read", "read"), ("pread64", "read"), ("readv", "read"), ("recv", "recv"), ("recvfrom", "recv"),
            ("recvmsg", "recv"), ("poll", "poll"), ("ppoll", "poll"), ("epoll_wait", "epoll_wait"),
            ("epoll_pwait", "epoll_wait"), ("select", "select"), ("pselect", "select"),
            ("clock_nanosleep", "nanosleep"), ("nanosleep", "nanosleep"), ("accept", "accept"),
            ("accept4", "accept"), ("connect", "connect"), ("write", "write"), ("send", "send"),
            ("sendmsg", "send"), ("wait4", "wait4"), ("waitpid", "wait4"), ("waitid", "waitid"),
            ("pause", "pause"), ("sigsuspend", "sigsuspend"), ("sigtimedwait", "sigtimedwait"),
            ("msgrcv", "msgrcv"), ("semop", "semop"), ("flock", "flock"), ("fcntl", "fcntl"),
            ("fsync", "fsync"), ("fdatasync", "fsync"))
_BLOCKING = dict(BLOCKING)
GLIBC_PREFIX = re.compile(r"^(?:_*(?:GI_+|libc_|pthread_|internal_)?)+")


def _bare(func: str) -> str:
    """A libc function's name without glibc's internal prefixes and suffixes (``__GI___poll`` ->
    ``poll``, ``__futex_abstimed_wait_common64`` -> ``futex_abstimed_wait_common64``)."""
    name = func.split("(", 1)[0].strip()
    if name.startswith("__pthread_") or name.startswith("___pthread_"):
        return name.lstrip("_")
    return GLIBC_PREFIX.sub("", name) or name


def blocking_call(func: str) -> str | None:
    """The blocking call a frame's function is, or None (``__libc_open64`` -> ``open``)."""
    name = _bare(func)
    if name in _BLOCKING:
        return _BLOCKING[name]
    if "futex" in name:
        return "futex"
    return None


def _split_args(rest: str) -> tuple[str, str]:
    """(function, its argument list) of ``FUNCTION (ARGS)`` where ARGS is the last balanced
    parenthesised group (C++ names keep their own parentheses: ``f(int) ()``)."""
    if not rest.endswith(")"):
        return rest, ""
    depth, quoted = 0, False
    for i in range(len(rest) - 1, -1, -1):
        c = rest[i]
        if c == '"' and (i == 0 or rest[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted:
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    if i > 0 and rest[i - 1] == " ":
                        return rest[:i - 1], rest[i + 1:-1]
                    return rest, ""
    return rest, ""


def parse_frame(text: str) -> tuple[str, str | None, int | None, str | None, str] | None:
    """(function, file, line, library, arguments) of a frame line's text after ``#N``."""
    m = FRAME.match(text)
    if not m:
        return None
    where = WHERE.match(m.group(3))
    call, file, line, lib = where.group(1), where.group(2), where.group(3), where.group(4)
    func, args = _split_args(call)
    return func, file, int(line) if line else None, lib, args


def frame_text(func: str, file: str | None, line: int | None, lib: str | None) -> str:
    """A frame as the stack parsers write it: ``function (file:line)``, ``function (library)``."""
    func = func[:MAX_FRAME_CHARS]
    if file is not None:
        return f"{func} ({file}:{line})"
    if lib is not None:
        return f"{func} ({lib})"
    return func


class _Thread:
    __slots__ = ("num", "tid", "name", "frames", "depth", "lines", "first", "call", "path")

    def __init__(self, num: int | None, tid: int | None, name: str | None, lineno: int, text: str | None):
        self.num, self.tid, self.name = num, tid, name
        self.frames: list[str] = []
        self.depth, self.first = 0, lineno
        self.lines = [text] if text is not None else []
        self.call = self.path = None


def _header(m: re.Match) -> tuple[int, int | None, str | None]:
    inner = m.group(2)
    lwp = LWP.search(inner)
    name = NAME.search(inner)
    return (int(m.group(1)), int(lwp.group(1) or lwp.group(2)) if lwp else None,
            name.group(1) if name else None)


class GdbBacktraceParser(Parser):
    name = "gdb_backtrace"
    kind = "stack_dump"
    priority = 30
    clock_domain = CLOCK_NONE
    description = "gdb backtraces (thread apply all bt, bt)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln.rstrip("\r") for ln in head.lines if ln.strip()][:400]
        for i, ln in enumerate(lines):
            if THREAD.match(ln) or ln.startswith("#0 "):
                frames = lines[i:i + 4] if ln.startswith("#0") else lines[i + 1:i + 4]
                return bool(frames) and frames[0].startswith("#0 ") and all(
                    parse_frame(f) is not None for f in frames if f.startswith("#"))
            if not CHATTER.match(ln):
                return False
        return False

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        threads: list[_Thread] = []
        cur: _Thread | None = None
        pid = None
        dropped = 0
        for lineno, raw in ctx.lines():
            line = raw.rstrip("\r")
            if not line.strip():
                continue
            m = THREAD.match(line)
            if m:
                num, tid, name = _header(m)
                cur = _Thread(num, tid, name, lineno, line)
                if len(threads) < MAX_THREADS:
                    threads.append(cur)
                else:
                    dropped += 1
                continue
            if line.startswith("#"):
                got = parse_frame(line)
                if got is not None:
                    if cur is None:         # a plain ``bt``: the frames of one thread, no header
                        cur = _Thread(None, None, None, lineno, None)
                        threads.append(cur)
                    func, file, ln, lib, args = got
                    if cur.depth == len(cur.frames) and cur.call is None:
                        # the innermost frames (inlined ones share a call) say what the thread waits in
                        call = blocking_call(func) if lib is None or "libc" in lib or "libpthread" in lib else None
                        if call is not None:
                            cur.call = call
                            p = PATH_ARG.search(args)
                            cur.path = p.group(1) if p and call == "open" else None
                    cur.depth += 1
                    if len(cur.frames) < MAX_FRAMES:
                        cur.frames.append(frame_text(func, file, ln, lib))
                    if len(cur.lines) < MAX_TEXT_LINES:
                        cur.lines.append(line[:MAX_FRAME_CHARS])
                    continue
            p = PROCESS.match(line)
            if p:
                pid = int(p.group(1) or p.group(2))
                continue
            if CHATTER.match(line):
                continue
            sink.issue("bad_line", "not a gdb backtrace line (a Thread header or a #N frame)", lineno, line)
        if pid is None:
            first = next((t for t in threads if t.num == 1), None)
            pid = first.tid if first is not None else None
        for t in threads:
            tid = t.tid if t.tid is not None else (pid if t.num is None else None)
            attrs = {"thread": t.name, "thread_id": None if t.num is None else str(t.num), "frames": t.frames,
                     "depth": t.depth, "from": "gdb", "blocked_call": t.call, "call_path": t.path,
                     "idle": t.call is not None}
            text = "\n".join(t.lines) if t.lines else f"(bt of process {pid})"
            sink.event(pid=pid, tid=tid, ts_raw_ns=None, category="stack", name="thread_stack", line=t.first,
                       text=text, attrs=attrs)
        if dropped:
            sink.issue("limit", f"{dropped} threads past the first {MAX_THREADS} not kept", None, None)
        if pid is not None:
            ctx.pid = pid
        ctx.attrs.update(threads=len(threads) + dropped)


PARSERS = (GdbBacktraceParser,)
