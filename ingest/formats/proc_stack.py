"""Copies of ``/proc/<pid>/stack`` and ``/proc/<pid>/wchan``: where in the kernel a process waited.

``cat /proc/PID/stack`` (root only) prints the kernel stack of the process's main thread,
innermost first, one frame per line::

    [<0>] futex_do_wait+0x4a/0x80
    [<0>] __futex_wait+0xc0/0x130
    [<0>] do_futex+0xfd/0x250
    [<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e

(the address is ``<0>`` without ``kptr_restrict`` rights, the real one with them). ``wchan`` is
one symbol, the function the process sleeps in (``futex_do_wait``, ``do_epoll_wait``, ``0`` when
it runs), without a newline. A ``wchan`` file says nothing by its content alone: it is read only
when its path names it (``.../<pid>/wchan``), and a ``stack`` file's pid is read from its path
the same way (``proc/12677/stack``).

Rows: one ``events`` row (category ``stack``), name ``kernel_stack`` (attrs ``frames``: the
symbols, innermost first; ``top``: the innermost) or ``wchan`` (attrs ``wchan``: the symbol, null
for ``0``). Clock: none (a copy does not say when it was taken).

Real samples: tests/data/stacks/ (PROVENANCE.md).
"""
from __future__ import annotations

import re

from ..model import CLOCK_NONE
from ..reader import Head
from ..registry import ParseContext, Parser

FRAME = re.compile(r"^\[<([0-9a-f]+)>\] ([A-Za-z_.$][\w.$]*)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[(\w+)\])?$")
WCHAN = re.compile(r"^(?:0|[A-Za-z_][\w.$]*)$")
PID_DIR = re.compile(r"(?:^|/)(\d+)/(stack|wchan)$")
MAX_FRAMES = 128


def _pid(path: str, name: str) -> int | None:
    m = PID_DIR.search(path)
    return int(m.group(1)) if m and m.group(2) == name else None


class ProcStackParser(Parser):
    name = "proc_stack"
    kind = "stack_dump"
    priority = 30
    clock_domain = CLOCK_NONE
    description = "/proc/<pid>/stack copies (a process's kernel stack)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln for ln in head.lines if ln.strip()]
        return bool(lines) and head.complete and all(FRAME.match(ln) for ln in lines[:MAX_FRAMES])

    def parse(self, ctx: ParseContext) -> None:
        frames, first, text = [], None, []
        for lineno, line in ctx.lines():
            if not line.strip():
                continue
            m = FRAME.match(line)
            if not m:
                ctx.sink.issue("bad_line", "not a kernel stack frame ([<addr>] symbol+0xoff/0xsize)", lineno, line)
                continue
            first = first or lineno
            if len(frames) < MAX_FRAMES:
                frames.append(m.group(2) + (f" [{m.group(3)}]" if m.group(3) else ""))
                text.append(line)
        pid = _pid(ctx.rel, "stack")
        ctx.pid = pid
        if frames:
            ctx.sink.event(pid=pid, tid=pid, ts_raw_ns=None, category="stack", name="kernel_stack", line=first,
                           text="\n".join(text), attrs={"frames": frames, "top": frames[0]})


class ProcWchanParser(Parser):
    name = "proc_wchan"
    kind = "stack_dump"
    priority = 30
    clock_domain = CLOCK_NONE
    description = "/proc/<pid>/wchan copies (the kernel function a process sleeps in)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln for ln in head.lines if ln.strip()]
        return (head.complete and len(lines) == 1 and bool(WCHAN.match(lines[0].strip()))
                and _pid(head.path, "wchan") is not None)

    def parse(self, ctx: ParseContext) -> None:
        pid = _pid(ctx.rel, "wchan")
        ctx.pid = pid
        for lineno, line in ctx.lines():
            sym = line.strip()
            if not sym:
                continue
            if not WCHAN.match(sym):
                ctx.sink.issue("bad_line", "not a kernel symbol", lineno, line)
                continue
            ctx.sink.event(pid=pid, tid=pid, ts_raw_ns=None, category="stack", name="wchan", line=lineno,
                           text=sym, attrs={"wchan": None if sym == "0" else sym})


PARSERS = (ProcStackParser, ProcWchanParser)
