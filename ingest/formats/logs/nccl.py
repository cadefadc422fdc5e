"""NCCL debug logs (``nccl_log``): which files the log engine reads as NCCL logs.

The grammar of the lines is :mod:`.nccl_grammar`; they are read by :mod:`.engine`, the same
code that reads training and launcher logs, so a job's stdout that interleaves NCCL lines with
everything else is read whichever of the two parsers claimed it.
"""
from __future__ import annotations

from ...model import CLOCK_WALL
from ...reader import Head
from ...registry import ParseContext, Parser
from .engine import KINDS_WRITTEN, parse_log
from .nccl_grammar import nccl_line_count


class NcclLogParser(Parser):
    name = "nccl_log"
    kind = "nccl_log"
    priority = 35
    emits = KINDS_WRITTEN
    clock_domain = CLOCK_WALL
    description = "NCCL debug log (NCCL_DEBUG / NCCL_DEBUG_FILE), alone or inside a job's stdout"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = head.nonblank(2000)
        if not lines:
            return False
        n = nccl_line_count(lines)
        # NCCL lines are unmistakable; a few of them inside a training log still make it an NCCL
        # log when they are a real part of it (else the app_log parser takes the file; both read
        # every line family).
        return n >= 3 and n / len(lines) >= 0.2 or (n >= 1 and n == len(lines))

    def parse(self, ctx: ParseContext) -> None:
        parse_log(ctx)
