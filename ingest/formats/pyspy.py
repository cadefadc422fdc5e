"""``py-spy dump`` output -> one event per Python thread: where each thread was when it was dumped.

What an engineer takes of a hung training process (``py-spy dump --pid PID``), as text::

    Process 12677: /usr/bin/python3 -u train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 12677 (idle): "MainThread"
        Shards.__getitem__ (train.py:37)
        _MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:54)
        _worker_loop (torch/utils/data/_utils/worker.py:374)

Each thread's header names its id (the OS thread id in recent versions, the ``pthread_t`` in hex
in older ones: ``Thread 0x7F768F77C740``), its state as py-spy saw it (``idle``, ``active``,
``active+gil``, ``gil``) and its Python name; its frames follow, innermost first, one per line as
``function (file:line)``. ``--locals`` adds ``Arguments:`` / ``Locals:`` blocks under a frame
(kept as the frame's text, not read), ``--native`` adds native frames (``function (library)``, no
line). ``--subprocesses`` dumps several processes into one file, each after its ``Process`` line.
A dump pasted without its ``Process`` header (the threads alone) is read too.

``py-spy dump --json`` writes the same as a JSON list of threads (``pid``, ``thread_id``,
``thread_name``, ``os_thread_id``, ``active``, ``owns_gil``, ``frames``: ``name``, ``filename``,
``short_filename``, ``line``, ``locals``); a list of such lists (several processes) is read too.

Rows: ``events`` (category ``stack``, name ``thread_stack``): pid, tid (the OS thread id when the
dump gives it), text = the thread's header and frames, attrs: ``thread`` (its name), ``state``,
``idle`` (bool), ``gil`` (bool), ``frames`` (``function (file:line)``, innermost first, at most
:data:`MAX_FRAMES`), ``depth`` (frames in all), ``process`` (the command line), ``python``.

Clock: none. A dump does not say when it was taken; its threads are where they were at that
moment, and :mod:`aftertrace.analysis.stacks` reads them as the state of a process that had
stopped making progress.

Real samples: tests/data/stacks/ (PROVENANCE.md).
"""
from __future__ import annotations

import re

from ..model import CLOCK_NONE
from ..reader import Head
from ..registry import ParseContext, Parser

PROCESS = re.compile(r"^Process (\d+): (.*)$")
PYTHON = re.compile(r"^Python v(\S+)(?: \((.*)\))?$")
THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?$')
FRAME = re.compile(r"^ {4}(\S.*?) \((.+?)(?::(\d+))?\)$")
DETAIL = re.compile(r"^ {8}")       # --locals: "Arguments:", "Locals:" and the values under them
MAX_FRAMES = 64
MAX_TEXT_LINES = 80
MAX_JSON_BYTES = 64 << 20


def _frame_text(func: str, file: str, line) -> str:
    return f"{func} ({file}:{line})" if line is not None else f"{func} ({file})"


class _Thread:
    __slots__ = ("pid", "tid", "ident", "state", "name", "frames", "depth", "lines", "first", "process", "python")

    def __init__(self, m: re.Match, lineno: int, text: str, pid, process, python):
        ident, self.state, self.name = m.group(1), m.group(2), m.group(3)
        self.ident = ident
        self.tid = int(ident) if ident.isdigit() else None
        self.pid, self.process, self.python = pid, process, python
        self.frames, self.depth, self.lines, self.first = [], 0, [text], lineno


def _event(sink, t: _Thread) -> None:
    attrs = {"thread": t.name, "thread_id": t.ident, "state": t.state, "idle": t.state == "idle",
             "gil": "gil" in t.state, "frames": t.frames, "depth": t.depth, "process": t.process, "python": t.python}
    sink.event(pid=t.pid, tid=t.tid, ts_raw_ns=None, category="stack", name="thread_stack", line=t.first,
               text="\n".join(t.lines), attrs=attrs)

class PySpyDumpParser(Parser):
    name = "py_spy_dump"
    kind = "stack_dump"
    priority = 30
    clock_domain = CLOCK_NONE
    description = "py-spy dump output (text, --locals, --native, --subprocesses)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln.rstrip("\r") for ln in head.lines if ln.strip()][:8]
        if not lines:
            return False
        i = 0
        if PROCESS.match(lines[0]):
            if len(lines) < 2 or not PYTHON.match(lines[1]):
                return False
            i = 2
        if i >= len(lines) or not THREAD.match(lines[i]):
            return False
        return i + 1 < len(lines) and bool(FRAME.match(lines[i + 1]) or THREAD.match(lines[i + 1]))

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        pid = process = python = None
        cur: _Thread | None = None
        threads = 0
        seen_pids = set()
        for lineno, raw in ctx.lines():
            line = raw.rstrip("\r")
            if not line.strip():
                continue
            m = PROCESS.match(line)
            if m:
                if cur is not None:
                    _event(sink, cur)
                    cur = None
                pid, process, python = int(m.group(1)), m.group(2), None
                seen_pids.add(pid)
                continue
            m = PYTHON.match(line)
            if m and cur is None:
                python = m.group(1)
                continue
            m = THREAD.match(line)
            if m:
                if cur is not None:
                    _event(sink, cur)
                cur = _Thread(m, lineno, line, pid, process, python)
                threads += 1
                continue
            if cur is not None:
                m = FRAME.match(line)
                if m:
                    cur.depth += 1
                    if len(cur.frames) < MAX_FRAMES:
                        cur.frames.append(_frame_text(m.group(1), m.group(2), m.group(3)))
                    if len(cur.lines) < MAX_TEXT_LINES:
                        cur.lines.append(line)
                    continue
                if DETAIL.match(line):
                    if len(cur.lines) < MAX_TEXT_LINES:
                        cur.lines.append(line)
                    continue
            sink.issue("bad_line", "not a py-spy dump line (Process, Python, Thread or an indented frame)",
                       lineno, line)
        if cur is not None:
            _event(sink, cur)
        if len(seen_pids) == 1:
            ctx.pid = next(iter(seen_pids))
        ctx.attrs.update(threads=threads, processes=len(seen_pids))


class PySpyJsonParser(Parser):
    name = "py_spy_json"
    kind = "stack_dump"
    priority = 30
    clock_domain = CLOCK_NONE
    description = "py-spy dump --json output"
    reads_lines = False

    @classmethod
    def detect(cls, head: Head) -> bool:
        t = head.text.lstrip()
        return t.startswith("[") and '"thread_name"' in t[:4000] and '"frames"' in t[:4000] \
            and '"owns_gil"' in t[:4000]

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        doc = ctx.json_document(MAX_JSON_BYTES, "py-spy JSON")
        if doc is None:
            return
        if not isinstance(doc, list):
            sink.issue("bad_json", "not a list of threads", 1, None)
            return
        threads = [t for part in doc for t in (part if isinstance(part, list) else [part])]
        pids = set()
        for n, t in enumerate(threads):
            if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
                sink.issue("bad_event", f"thread {n}: not an object with frames", None, None)
                continue
            pid = t.get("pid") if isinstance(t.get("pid"), int) else None
            tid = t.get("os_thread_id") if isinstance(t.get("os_thread_id"), int) else None
            frames = []
            for fr in t["frames"]:
                if isinstance(fr, dict) and isinstance(fr.get("name"), str):
                    file = fr.get("short_filename") or fr.get("filename") or "?"
                    frames.append(_frame_text(fr["name"], file, fr.get("line") if fr.get("line") else None))
            active, gil = bool(t.get("active")), bool(t.get("owns_gil"))
            state = ("active" if active else "idle") + ("+gil" if gil else "")
            name = t.get("thread_name") if isinstance(t.get("thread_name"), str) else None
            ident = t.get("thread_id")
            head = f'Thread {tid if tid is not None else ident} ({state}): "{name}"'
            text = "\n".join([head] + [f"    {fr}" for fr in frames[:MAX_TEXT_LINES - 1]])
            sink.event(pid=pid, tid=tid, ts_raw_ns=None, category="stack", name="thread_stack", line=None,
                       text=text, attrs={"thread": name, "thread_id": str(ident), "state": state,
                                         "idle": not active, "gil": gil, "frames": frames[:MAX_FRAMES],
                                         "depth": len(frames), "process": None, "python": None})
            if pid is not None:
                pids.add(pid)
        if len(pids) == 1:
            ctx.pid = next(iter(pids))
        ctx.attrs.update(threads=len(threads), processes=len(pids))


PARSERS = (PySpyDumpParser, PySpyJsonParser)
