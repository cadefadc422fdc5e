"""``strace`` output -> the system calls that say why a process was stuck, or what it ran out of.

A trace of a hung process (``strace -f -tt -T -p PID``, to a file with ``-o`` or pasted from
the terminal) has one line per call::

    12677 16:41:23.385655 futex(0x5566..., FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME, 0, NULL, ...) = 0 <0.000012>
    [pid 12605] 16:41:17.323209 epoll_wait(6, [], 64, 10) = 0 <0.010133>
    12673 16:41:17.373045 accept4(21,  <unfinished ...>
    12673 16:41:19.101230 <... accept4 resumed>{sa_family=AF_UNIX}, [110->2], SOCK_CLOEXEC) = 22 <1.728185>
    12677 16:41:23.385655 futex(0x5566..., FUTEX_WAIT_BITSET_PRIVATE, 0, NULL <detached ...>
    12668 16:41:20.117471 openat(AT_FDCWD, "/dev/shm/torch_1", O_RDWR|O_CREAT) = -1 ENOSPC (No space left on device) <0.000021>
    12668 16:41:20.200000 --- SIGBUS {si_signo=SIGBUS, si_code=BUS_ADRERR, si_addr=0x7f...} ---
    12668 16:41:20.200100 +++ killed by SIGBUS (core dumped) +++

The leading id is the thread's (``-f``: ``PID`` with ``-o FILE``, ``[pid PID]`` on the terminal,
none for the first process); the time is ``-t`` (``HH:MM:SS``), ``-tt`` (with microseconds),
``-ttt`` (seconds since the epoch) or absent; ``-T`` puts the call's duration in ``<...>`` at the
end. A call another thread's line interrupts is ``<unfinished ...>`` and comes back as
``<... name resumed>``; a call still running when strace let go is ``<detached ...>`` (or never
resumed before the file ends).

Rows (``events``, category ``syscall``), bounded: not every call, only those that tell something:

* ``syscall_blocked``: a call still running when the trace ended (unfinished, detached), one per
  thread, at its start; attrs ``syscall``, ``args``, ``path`` (as for ``syscall_error`` below),
  ``blocked_s`` (at least: the trace's last time less the call's start), ``wait`` (the call is one
  that waits by design: futex, poll...).
* ``syscall_slow``: a finished call of at least :data:`SLOW_S` seconds (``-T``); attrs
  ``syscall``, ``args``, ``dur_s``; at most :data:`MAX_SLOW` per file (the longest), the rest
  counted.
* ``syscall_error``: a call that failed for want of a resource (:data:`RESOURCE_ERRNOS`:
  ENOSPC, ENOMEM, EMFILE...); attrs ``syscall``, ``args``, ``errno``, ``error`` (strace's words),
  ``path`` (the first quoted path among the arguments; for a call on a file descriptor, the path
  its thread opened it with earlier in the trace). ENOSPC on a file under ``/dev/shm/`` is kind
  ``shm_exhausted`` (a DataLoader worker's ``fallocate`` of its batch), on another file
  ``disk_full``.
* ``signal`` (a ``--- SIG... ---`` delivery) and ``thread_exit`` (``+++ exited with N +++`` or
  ``+++ killed by SIG... +++``); attrs ``signal``, ``code``.

``pid`` and ``tid`` of a row are the id strace printed (a thread's; the process's own for its
main thread). Counts per call name go to the source's attrs.

Clock: the host's wall clock as strace read it. ``-ttt`` is UTC; ``-t``/``-tt`` are local times
of day without a date: the date is the file's modification day (the day before when the times of
day run past the modification time), and the source's attrs say so (``date_from``); a file
without a modification time (1970, as an archive member written without one has) gives no date,
and its rows are untimed like those of a trace without times (``-r``, none).

Real samples: tests/data/strace/ (PROVENANCE.md).
"""
from __future__ import annotations

import heapq
import os
import re
from datetime import datetime, timezone

from ..model import CLOCK_NONE, CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import NS, local_ns

LINE = re.compile(
    r"^(?:\[pid +(?P<pidb>\d+)\] |(?P<pid>\d+) +)?"
    r"(?:(?P<epoch>\d{9,11}\.\d{6}) |(?P<tod>\d\d:\d\d:\d\d)(?:\.(?P<us>\d{6}))? |(?P<rel> *\d+\.\d{6}) )?"
    r"(?P<body>.*)$")
CALL = re.compile(r"^(?P<name>[a-z_][a-z0-9_]*)\((?P<rest>.*)$")
RESUMED = re.compile(r"^<\.\.\. (?P<name>[a-z_][a-z0-9_]*) resumed>(?P<rest>.*)$")
RESULT = re.compile(r"\) += (?P<ret>-?\d+|\?|0x[0-9a-f]+)(?: (?P<errno>E[A-Z0-9]+) \((?P<error>[^)]*)\))?"
                    r"(?: \([^)]*\))?(?: <(?P<dur>\d+\.\d+)>| <unavailable>)?$")
DUR = re.compile(r" <(\d+\.\d+)>$")
SIGNAL = re.compile(r"^--- (?P<sig>SIG[A-Z0-9]+) ")
EXIT = re.compile(r"^\+\+\+ (?:exited with (?P<code>-?\d+)|killed by (?P<sig>SIG[A-Z0-9]+)(?P<core> \(core dumped\))?) \+\+\+$")
UNFINISHED = " <unfinished ...>"
DETACHED = " <detached ...>"
PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')

OPENS = {"open", "openat", "openat2", "creat"}
FD_CALLS = {"fallocate", "ftruncate", "write", "pwrite64", "writev", "pwritev", "pwritev2", "fsync", "fdatasync",
            "copy_file_range", "sendfile", "read", "pread64"}
SHM = "/dev/shm/"
MAX_FDS = 100_000
SLOW_S = 1.0
MIN_MTIME = 946684800          # 2000-01-01: a modification time before it is not a date
MAX_SLOW = 200
MAX_ARGS = 300
RESOURCE_ERRNOS = {"ENOSPC": "no space left on the device", "ENOMEM": "out of memory",
                   "EMFILE": "too many open files (process)", "ENFILE": "too many open files (system)",
                   "EDQUOT": "disk quota exceeded", "EFBIG": "file too large", "ENOBUFS": "no buffer space",
                   "EIO": "input/output error"}
# calls that wait by design: a long one is a process waiting for something, not a slow call
WAITS = {"futex", "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
         "nanosleep", "clock_nanosleep", "wait4", "waitid", "accept", "accept4", "recvfrom", "recvmsg",
         "read", "pause", "sigtimedwait", "rt_sigtimedwait", "rt_sigsuspend", "restart_syscall", "msgrcv",
         "semop", "semtimedop", "io_getevents", "io_uring_enter", "flock", "connect"}


def _detect_line(line: str) -> bool:
    m = LINE.match(line)
    if not m:
        return False
    body = m["body"]
    c = CALL.match(body)
    if c:
        return bool(RESULT.search(body) or body.endswith((UNFINISHED, DETACHED)))
    return bool(RESUMED.match(body) or SIGNAL.match(body) or EXIT.match(body))


class _Day:
    """The date of ``HH:MM:SS`` times: the file's modification day, stepping back a day where
    the times of day run past the modification time (a trace that crossed midnight moves on)."""

    def __init__(self, path: str, zone: str | None):
        try:
            st = os.stat(path)
            # (an archive member written without a time has 1970: that is no date)
            mt = datetime.fromtimestamp(st.st_mtime, timezone.utc) if st.st_mtime >= MIN_MTIME else None
        except OSError:
            mt = None
        self.zone = zone
        self.mtime = mt
        self.day = None
        self.prev = None

    def ns(self, tod: str, us: str | None) -> int | None:
        if self.mtime is None:
            return None
        h, m, s = map(int, tod.split(":"))
        secs = h * 3600 + m * 60 + s
        if self.day is None:
            ref = local_ns(self.mtime.year, self.mtime.month, self.mtime.day, 0, 0, 0, 0, self.zone)
            end = local_ns(self.mtime.year, self.mtime.month, self.mtime.day, self.mtime.hour, self.mtime.minute,
                           self.mtime.second, 0, self.zone)
            first = ref + secs * NS
            if first > end + 60 * NS:
                ref -= 86400 * NS
            self.day = ref
        elif self.prev is not None and secs < self.prev - 3600:     # past midnight
            self.day += 86400 * NS
        self.prev = secs
        return self.day + secs * NS + (int(us) * 1000 if us else 0)


class StraceParser(Parser):
    name = "strace"
    kind = "syscall_trace"
    emits = frozenset({"shm_exhausted", "disk_full"})
    priority = 35
    clock_domain = CLOCK_WALL
    description = "strace output (-f, -t/-tt/-ttt, -T; unfinished and resumed calls)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln.rstrip("\r") for ln in head.lines if ln.strip() and not ln.startswith("strace: ")][:20]
        if not head.complete:
            lines = lines[:-1]
        if not lines:
            return False
        ok = sum(1 for ln in lines if _detect_line(ln))
        return ok >= min(2, len(lines)) and ok >= 0.8 * len(lines)

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        day = _Day(ctx.path, ctx.time_zone)
        open_calls: dict[int | None, tuple] = {}    # tid -> (ts, lineno, name, args, text)
        fds: dict[tuple, str] = {}                  # (tid, fd) -> the path it was opened with
        slow: list[tuple] = []                      # a heap of the longest finished calls
        n_slow = 0
        counts: dict[str, int] = {}
        last_ts = None
        timed = None
        for lineno, raw in ctx.lines():
            line = raw.rstrip("\r")
            if not line.strip() or line.startswith("strace: "):
                continue
            m = LINE.match(line)
            body = m["body"]
            tid = m["pidb"] or m["pid"]
            tid = int(tid) if tid else None
            if m["epoch"]:
                ts = int(m["epoch"].replace(".", "")) * 1000
                timed = "epoch"
            elif m["tod"]:
                ts = day.ns(m["tod"], m["us"])
                timed = "time of day"
            else:
                ts = None
            if ts is not None:
                last_ts = ts if last_ts is None else max(last_ts, ts)
            c = CALL.match(body)
            r = RESUMED.match(body) if c is None else None
            if c or r:
                name = (c or r)["name"]
                if c:
                    if body.endswith(UNFINISHED) or body.endswith(DETACHED):
                        cut = UNFINISHED if body.endswith(UNFINISHED) else DETACHED
                        open_calls[tid] = (ts, lineno, name, c["rest"][:-len(cut)][:MAX_ARGS], line)
                        counts[name] = counts.get(name, 0) + 1
                        continue
                    args = c["rest"]
                    start = ts
                else:
                    was = open_calls.pop(tid, None)
                    if was is not None and was[2] != name:
                        was = None
                    args = (was[3] if was else "") + r["rest"]
                    start = was[0] if was else ts
                    if was is not None and body.endswith(DETACHED):
                        open_calls[tid] = was
                        continue
                res = RESULT.search(body)
                if c and not res:
                    sink.issue("bad_line", "a call without its result (no ' = ...')", lineno, line)
                    continue
                if c:
                    counts[name] = counts.get(name, 0) + 1
                if res is None:
                    continue
                dur = float(res["dur"]) if res["dur"] else None
                errno = res["errno"]
                path = _path(name, args, tid, fds)
                if name in OPENS and path is not None and res["ret"].isdigit() and len(fds) < MAX_FDS:
                    fds[(tid, int(res["ret"]))] = path
                elif name == "close":
                    fds.pop((tid, _first_int(args)), None)
                if errno in RESOURCE_ERRNOS:
                    kind = None
                    if errno == "ENOSPC" and path is not None:
                        kind = "shm_exhausted" if path.startswith(SHM) else "disk_full"
                    sink.event(pid=tid, tid=tid, ts_raw_ns=start, dur_ns=int(dur * 1e9) if dur is not None else None,
                               category="syscall", name="syscall_error", kind=kind, severity="error", line=lineno,
                               text=line, attrs={"syscall": name, "args": _args(args), "errno": errno,
                                                 "error": res["error"], "path": path,
                                                 "summary": f"{name}() failed: {errno} ({res['error']})"
                                                            + _on(path)})
                if dur is not None and dur >= SLOW_S:
                    n_slow += 1
                    item = (dur, -lineno, tid, start, name, _args(args), line)
                    if len(slow) < MAX_SLOW:
                        heapq.heappush(slow, item)
                    else:
                        heapq.heappushpop(slow, item)
                continue
            s = SIGNAL.match(body)
            if s:
                sink.event(pid=tid, tid=tid, ts_raw_ns=ts, category="syscall", name="signal", severity="warning",
                           line=lineno, text=line, attrs={"signal": s["sig"]})
                continue
            e = EXIT.match(body)
            if e:
                open_calls.pop(tid, None)
                sink.event(pid=tid, tid=tid, ts_raw_ns=ts, category="syscall", name="thread_exit",
                           severity="error" if e["sig"] else None, line=lineno, text=line,
                           attrs={"signal": e["sig"], "code": int(e["code"]) if e["code"] else None,
                                  "core_dumped": bool(e["core"])})
                continue
            sink.issue("bad_line", "not a strace line (a call, a resumed call, a signal or an exit)", lineno, line)
        for tid, (ts, lineno, name, args, text) in sorted(open_calls.items(), key=lambda kv: kv[1][1]):
            blocked = (last_ts - ts) / 1e9 if ts is not None and last_ts is not None else None
            sink.event(pid=tid, tid=tid, ts_raw_ns=ts, category="syscall", name="syscall_blocked", line=lineno,
                       text=text, attrs={"syscall": name, "args": _args(args), "wait": name in WAITS,
                                         "path": _path(name, args, tid, fds),
                                         "blocked_s": round(blocked, 6) if blocked is not None else None,
                                         "summary": f"{name}() still running when the trace ended"
                                                    + (f" ({blocked:.1f} s or more)" if blocked else "")})
        for dur, neg, tid, start, name, args, text in sorted(slow, key=lambda x: -x[1]):
            sink.event(pid=tid, tid=tid, ts_raw_ns=start, dur_ns=int(dur * 1e9), category="syscall",
                       name="syscall_slow", line=-neg, text=text,
                       attrs={"syscall": name, "args": args, "dur_s": dur, "wait": name in WAITS})
        ctx.attrs.update(calls=counts, slow_calls=n_slow, slow_kept=len(slow), times=timed)
        if timed == "time of day":
            ctx.format = "strace_tod"
            if day.mtime is None:       # times of day without a date: kept untimed, said so
                ctx.attrs["date_from"] = None
                ctx.clock_domain = CLOCK_NONE
            else:
                ctx.attrs["date_from"] = "file modification time"
        if timed is None:
            ctx.clock_domain = CLOCK_NONE


def _on(path: str | None) -> str:
    """Where, in a summary: the file, or for shared memory its folder (its files are named per
    allocation, and a summary names what copies of one failure share)."""
    if not path:
        return ""
    return " in /dev/shm" if path.startswith(SHM) else f" on {path}"


def _first_int(args: str) -> int | None:
    head = args.split(",", 1)[0].strip()
    return int(head) if head.isdigit() else None


def _path(name: str, args: str, tid, fds: dict) -> str | None:
    """The file a call is about: the first quoted path among its arguments, else (a call on a
    file descriptor) the path that thread opened it with earlier in the trace."""
    m = PATH.search(args)
    if m:
        return m.group(1)
    if name in FD_CALLS:
        fd = _first_int(args)
        return fds.get((tid, fd)) if fd is not None else None
    return None


def _args(text: str) -> str:
    """A call's arguments as strace printed them, cut to :data:`MAX_ARGS` characters, without the
    result part when it is there."""
    i = text.rfind(") = ")
    if i >= 0:
        text = text[:i]
    return text[:MAX_ARGS]


PARSERS = (StraceParser,)
