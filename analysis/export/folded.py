"""The perf samples of a window as collapsed stacks, one line per distinct stack: ``frame;frame;frame
count``, root first — what flamegraph.pl, speedscope and inferno read (the flame graph's tree,
:func:`analysis.flamegraph.build`, written out)."""
from __future__ import annotations

from typing import BinaryIO

# The export format this module writes (see server/exports.py: every module that declares one is a format)
EXPORT = {"name": "folded", "suffix": ".folded", "media_type": "text/plain; charset=utf-8", "windowed": True,
          "aliases": ("collapsed",),
          "what": "collapsed stacks of the perf samples in a window (frame;frame;frame count: flamegraph.pl, "
                  "speedscope)"}


def export(src, out: BinaryIO, start: str | None, end: str | None, progress=None) -> dict:
    """The format's writer as server/exports.py calls it: the stacks of the window."""
    fg = src.flamegraph(start, end)
    out.write("".join(line + "\n" for line in fg["folded"]).encode("utf-8"))
    return {"format": "folded", "samples": fg["tree"]["value"], "stacks": len(fg["folded"]),
            "samples_total": fg["samples_total"], "window": fg["filter"]}
