"""Plain text that no parser claims: kept, searchable, and read for failure signatures.

A bundle is what people could gather, and some of it is in no shape a format parser knows: a
log pasted into a ticket with prose around it, a tool's own output, a console capture with
mangled lines. No text file is dropped. When no parser claims a text file (and no wrapper or
preamble hides one, see :meth:`ingest.registry.Registry.sniff`), this reader keeps it; its
source status is ``text`` with the reason. Binary data stays ``unrecognized``.

Two passes over the lines:

1. The training-log engine (:func:`.applog.parse_log`) reads it as a log: Python tracebacks,
   NCCL watchdog timeouts and desync reports, ``ChildFailedError`` summaries, NCCL WARN lines
   and every line family it knows become typed events, timed where the line says when and
   otherwise untimed (between their timed neighbours, as in any log).
2. The kernel-log engine (:class:`.kernel.KernelEngine`) reads every other line as a message
   with the kernel signatures (OOM kills with their report, segfaults, hung tasks, lockups,
   Oops, panics, Xids, ...), and stores each line as an event (category ``text``, name
   ``line``), so the whole file is searchable and shows as the source's lane. A line that
   starts with a wall-clock stamp (ISO 8601, ``2024/01/31 12:00:00``, with a zone or in the
   bundle's) gets that time; kernel ``[uptime]`` stamps are not used (the source's clock is
   the wall clock).

Worked example: a ticket's text with a pasted kernel line and a job's log line::

    We saw this on node 3 last night:
    [12345.678901] Out of memory: Killed process 4242 (python) total-vm:1000kB, anon-rss:900kB, ...
    2024-05-01 10:00:02,120 job step 3 finished
    any ideas?

No parser claims it (one line of each kind in prose). Pass 1 reads line 3 as a dated log line
(10:00:02.120 in the bundle's zone); pass 2 types line 2 (``oom_kill``, victim pid 4242, no
time: its ``[uptime]`` is on another clock) and keeps lines 1 and 4 as plain lines. The
source's status is ``text``, its clock ``wall`` (a line was timed).
"""
from __future__ import annotations

import polars as pl

from ..model import CLOCK_NONE, CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext
from .logs.engine import parse_log
from .kernel.engine import KernelLogParser
from .kernel.frames import frame, wall_ns

# a wall-clock stamp at the start of a line (after at most a bracket or two of punctuation)
_STAMP = (r"^\W{0,3}(\d{4}[-/]\d\d[-/]\d\d)[ T_](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?"
          r"\s?(Z|[+-]\d\d:?\d\d)?\b")


class PlainTextParser(KernelLogParser):
    name = "text"
    kind = "text"
    priority = 0
    clock_domain = CLOCK_WALL
    fallback = True          # never claims a file by its head: the registry's reader of last resort
    plain_category = "text"  # the kernel engine stores untyped lines as ('text', 'line') events
    description = "plain text no parser claims: lines kept and searchable, failure signatures read"

    def __init__(self):
        self._logged: set[int] = set()
        self.stamped = 0

    @classmethod
    def detect(cls, head: Head) -> bool:
        return False

    def parse(self, ctx: ParseContext) -> None:
        self._logged = _log_pass(ctx)
        log_untimed = ctx.clock_domain == CLOCK_NONE
        ctx.lineno = 0
        super().parse(ctx)
        ctx.clock_domain = CLOCK_NONE if log_untimed and not self.stamped else CLOCK_WALL
        ctx.attrs["stamped_lines"] = self.stamped

    def records(self, df: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
        line = pl.col("line")
        logged = pl.col("lineno").is_in(list(self._logged)) if self._logged else pl.lit(False)
        parts = df.select(line.str.extract_groups(_STAMP).alias("m")).unnest("m")
        day, hms, frac, zone = (parts[c] for c in parts.columns)
        text = (day.str.replace_all("/", "-") + " " + hms + "." + frac.fill_null("0"))
        df = df.with_columns(_t=text, _z=zone)
        local = wall_ns(pl.col("_t"), "%Y-%m-%d %H:%M:%S%.f", ctx.time_zone)
        utc = wall_ns(pl.col("_t"), "%Y-%m-%d %H:%M:%S%.f", "UTC")
        off = pl.col("_z").str.replace(":", "", literal=True)
        off_s = (off.str.slice(1, 2).cast(pl.Int64, strict=False) * 3600
                 + off.str.slice(3, 2).cast(pl.Int64, strict=False) * 60)
        sign = pl.when(off.str.starts_with("-")).then(-1).otherwise(1)
        ts = (pl.when(pl.col("_z").is_null()).then(local)
              .when(pl.col("_z") == "Z").then(utc)
              .otherwise(utc - sign * off_s * 1_000_000_000))
        out = frame(df, ok=(line.str.strip_chars() != "") & ~logged, ts=ts, msg=line, meta=logged,
                    cont=pl.lit(False))
        self.stamped += int(out.filter(pl.col("ok"))["ts"].is_not_null().sum())
        return out


def _log_pass(ctx: ParseContext) -> set[int]:
    """Run the training-log engine over the file; the lines it turned into events."""
    sink = ctx.sink
    lines: set[int] = set()
    event, add_frame = sink.event, sink.add_frame

    def tap_event(**row) -> None:
        if row.get("line") is not None:
            lines.add(int(row["line"]))
        event(**row)

    def tap_frame(table: str, f) -> None:
        if table == "events" and hasattr(f, "get_column") and "line" in f.columns:
            lines.update(int(x) for x in f.get_column("line").drop_nulls().to_list())
        add_frame(table, f)

    sink.event, sink.add_frame = tap_event, tap_frame
    try:
        parse_log(ctx)
    finally:
        del sink.event, sink.add_frame
    return lines


PARSERS = (PlainTextParser,)
