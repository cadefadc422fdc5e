"""torchelastic's error file (``error.json``) -> the exception that ended a worker.

``torch.distributed.elastic``'s ``@record`` (worn by torchrun's entry point and by a training
script's ``main``) catches the exception that ends the process and writes it, with its traceback
and the time, to ``$TORCHELASTIC_ERROR_FILE`` (``ErrorHandler.record_exception``). torchrun points
each worker at ``<log_dir>/<run id>/attempt_<n>/<local rank>/error.json``, beside that worker's
``stdout.log`` and ``stderr.log``, and its failure summary names the file (``error_file:``)::

    {"message": {"message": "RuntimeError: injected failure on rank 1 at step 5",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File ...",
                               "timestamp": "1795959638"}}}

The launcher copies the root-cause worker's file to its own error file with the worker's exit code
added (``"errorCode": 1``); a file whose ``message`` is a string (the newer form the launcher also
accepts) has no traceback and no time. A file cut off while it was written (a full disk, a kill)
is said as ``bad_json``, and the message it opens with is still the event (``cut_off`` in the
attrs; what came after it, the traceback and the time, is lost).

Rows: one ``events`` row, the exception, read as the log engine reads a traceback in a log
(:func:`.logs.blocks.block_rows`: the same exception types and messages give the same kinds:
``python_exception``, ``disk_full``, ``collective_timeout`` from a gloo timeout, ...), at
``timestamp`` (whole seconds: ``ts_resolution_ns`` says the exception came within that second),
with its last frame; its message is the exception's first line, as a log's traceback gives it (a
longer message is kept whole in ``message``). The rank is not in the file: the folder it sits in is the worker's local
rank (``local_rank`` in the attrs), and :mod:`ingest.attribution` gives the file the rank its
sibling logs state.

Clock: the host's wall clock (``int(time.time())`` when the exception reached ``@record``).

Real samples: ``sample_traces/logs-*/vm/logs/torchrun_log_dir/*/attempt_0/*/error.json``
(torch 2.13, recorded here).
"""
from __future__ import annotations

import json
import re

from ..attribution import WORKER_DIR
from ..model import CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import NS
from .logs.blocks import EXC_KINDS, block_rows
from .logs.grammar import EXC, FRAME, MESSAGES

MAX_JSON_BYTES = 16 << 20


def _message(doc) -> dict | None:
    """The error file's ``message`` as an object: {message, extraInfo?, errorCode?}."""
    if not isinstance(doc, dict) or "message" not in doc:
        return None
    m = doc["message"]
    if isinstance(m, str):
        return {"message": m}
    if isinstance(m, dict) and isinstance(m.get("message"), str):
        return m
    return None


# what an error file opens with: the message, as a string or as the object form (group 1)
OPENING = re.compile(r'\s*\{\s*"message"\s*:\s*(\{\s*"message"\s*:\s*)?"')


def _cut_off(ctx: ParseContext) -> dict | None:
    """The message of a file cut off after it (the writer stopped mid-file: a full disk, a kill):
    the JSON string the file opens with, as the object form's message, and the rest left."""
    with ctx.open() as f:
        t = f.read(1 << 20).decode("utf-8", "replace")
    start = OPENING.match(t)
    if start is None:
        return None
    try:
        said, _ = json.JSONDecoder().raw_decode(t, start.end() - 1)
    except json.JSONDecodeError:
        return None
    return {"message": {"message": said, "cut_off": True}}


def _frames(callstack: str) -> list[tuple[str, int, str]]:
    out = []
    for ln in callstack.splitlines():
        if ln.lstrip().startswith('File "'):
            f = FRAME.match(ln)
            if f:
                out.append((f["file"], int(f["line"]), f["func"]))
    return out


class TorchelasticErrorParser(Parser):
    name = "torchelastic_error"
    kind = "torchelastic_error"
    priority = 32
    clock_domain = CLOCK_WALL
    description = "torchelastic error files (error.json: a worker's exception, traceback and time, from @record)"
    reads_lines = False
    emits = frozenset({"python_exception"} | {k for _, k, _ in EXC_KINDS.values()} | {m.kind for m in MESSAGES if m.kind})

    @classmethod
    def detect(cls, head: Head) -> bool:
        t = head.text
        start = OPENING.match(t)
        if start is None:
            return False
        if head.complete:
            try:
                doc = json.loads(t)
            except json.JSONDecodeError:
                # (a file cut off while it was written: its opening is the object form's)
                return start.group(1) is not None
            # (the form with a string message has nothing else: only where torchrun puts it)
            return _message(doc) is not None and (
                '"extraInfo"' in t or '"errorCode"' in t
                or (head.path.endswith(".json") and WORKER_DIR.search(head.path) is not None))
        return start.group(1) is not None or ('"py_callstack"' in t and '"extraInfo"' in t)

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        doc = ctx.json_document(MAX_JSON_BYTES, "a torchelastic error file")
        if doc is None:         # (said as bad_json: what the file opens with may still be read)
            doc = _cut_off(ctx)
            if doc is None:
                return
        m = _message(doc)
        if m is None:
            sink.issue("bad_json", "not a torchelastic error file (no message)", 1, None)
            return
        extra = m.get("extraInfo") if isinstance(m.get("extraInfo"), dict) else {}
        callstack = extra.get("py_callstack") if isinstance(extra.get("py_callstack"), str) else ""
        stamp = extra.get("timestamp")
        ts = None
        if isinstance(stamp, (str, int)) and not isinstance(stamp, bool) and re.fullmatch(r"\d{1,12}", str(stamp)):
            ts = int(stamp) * NS
        elif stamp is not None:
            sink.issue("bad_field", f"timestamp {str(stamp)[:40]!r} is not seconds since the epoch", 1, None)
        said = m["message"].strip()
        # (a log's traceback gives the exception's first line: the same words here, so that the
        # two copies of one exception are one finding; the whole message is kept beside them)
        first = said.splitlines()[0] if said else ""
        e = EXC.match(first)
        exc, exc_msg = (e["exc"], first[len(e["exc"]) + 1:].strip()) if e else (None, first)
        frames = _frames(callstack)
        worker = WORKER_DIR.search(ctx.rel)
        block = {"type": "traceback", "exc": exc, "exc_msg": exc_msg, "nframes": len(frames),
                 "frame": frames[-1] if frames else None, "lineno": 1, "text": callstack or said, "stream": "",
                 "wrank": ctx.rank}
        row = block_rows([block], set(), None)[0]
        row.pop("stream", None)
        attrs = row["attrs"]
        attrs["source_form"] = "error_file"
        if m.get("cut_off"):
            attrs["cut_off"] = True
        if said != first:
            attrs["message"] = said[:4000]
        if worker:
            attrs.update(attempt=int(worker.group(1)), local_rank=int(worker.group(2)))
        code = m.get("errorCode")
        if isinstance(code, int) and not isinstance(code, bool):
            attrs["exitcode"] = code
        if ts is not None:
            attrs["ts_resolution_ns"] = NS
        sink.event(ts_raw_ns=ts, **row)
        if worker:
            ctx.attrs["local_rank"] = int(worker.group(2))


PARSERS = (TorchelasticErrorParser,)
