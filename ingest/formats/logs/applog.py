"""Training and launcher logs (``app_log``): which files the log engine reads as one.

The lines themselves are read by :mod:`.engine`, the same code that reads NCCL logs
(:mod:`.nccl`); this module is the format's dry run: a file is an app log when the engine's
line families make up a fair part of its head, or when the launcher's unmistakable strings
(tracebacks, ChildFailedError) sit next to at least one of its lines.
"""
from __future__ import annotations

import re

from ...model import CLOCK_WALL
from ...reader import Head
from ...registry import ParseContext, Parser
from .engine import FAMILIES, KINDS_WRITTEN, WRAP, parse_log
from .nccl_grammar import nccl_line_count

_DET = {f: re.compile(FAMILIES[f].test) for f in ("c10", "elastic", "usdt", "pylog")}
_DET_DATED = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]?"
                        r"[ :|-]*\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_DET_WRAP = re.compile(WRAP)
_DET_STRONG = ("Traceback (most recent call last):", "ChildFailedError", "Root Cause (first observed failure)",
               "torch.distributed", "Watchdog caught collective operation timeout", "ProcessGroupNCCL",
               "ProcessGroupGloo", "NCCL error", "CUDA out of memory")


def _scores(lines: list[str]):
    """Per line of a head, the app_log dry run's counts so far: (grammar lines, strong signals)."""
    hits = strong = 0
    for ln in lines:
        m = _DET_WRAP.match(ln)
        body = ln[m.end():] if m else ln
        if any(r.match(body) for r in _DET.values()) or _DET_DATED.match(body):
            hits += 1
        if any(s in ln for s in _DET_STRONG):
            strong += 1
        yield hits, strong


def _claimed(hits: int, strong: int, n: int) -> bool:
    """A training log: its own grammar on a fair share of the ``n`` lines, or at least one line of
    it next to the launcher's unmistakable strings (a short excerpt, a crash tail). Source code that
    merely mentions those strings has no log line of any family."""
    return hits >= 1 and ((hits >= 3 and hits / n >= 0.1) or hits / n >= 0.5 or strong >= 2 or (
        strong >= 1 and n <= 20))


class AppLogParser(Parser):
    name = "app_log"
    kind = "app_log"
    priority = 30
    emits = KINDS_WRITTEN
    clock_domain = CLOCK_WALL
    description = ("training / launcher log: torchrun/elastic, PyTorch c10d, Python logging and tracebacks "
                   "(NCCL lines inside are read too)")

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = head.nonblank(2000)
        if not lines:
            return False
        if lines[0].lstrip().startswith(("{", "[{", '["')):
            return False          # JSON (torchrun's error.json, traces): not a line log
        n, hits, strong = len(lines), 0, 0
        for hits, strong in _scores(lines):
            # (the counts only grow: once the head is claimed, the lines left cannot change that)
            if _claimed(hits, strong, n):
                return True
        return _claimed(hits + (nccl_line_count(lines) > 0), strong, n)

    def parse(self, ctx: ParseContext) -> None:
        parse_log(ctx)

