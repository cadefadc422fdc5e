"""dmesg and /dev/kmsg: the kernel ring buffer as collectors save it.

Grammars (util-linux ``sys-utils/dmesg.c``, Documentation/ABI/testing/dev-kmsg;
reference/FORMATS.md 4.1). Every variant may carry the ``--decode`` prefix
``kern  :info  : `` (facility and level, padded) and raw ``dmesg`` also the
``-r`` / pstore priority prefix ``<6>`` (``<prio + 8*facility>``):

=================  ===============================================  ======  =====================================
parser             line                                             clock   time
=================  ===============================================  ======  =====================================
``dmesg_raw``      ``[ 1234.567890] text``                          boot    printk ``local_clock()``, µs
``dmesg_ctime``    ``[Sun Nov 29 13:38:49 2026] text`` (``-T``)      wall    local time, 1 s, bundle zone
``dmesg_iso``      ``2026-11-29T13:38:49,486513+00:00 text``         wall    with its UTC offset, µs
``dmesg_kmsg``     ``6,998,1725604821,-;text`` + `` KEY=value``       boot    printk µs; seq numbers
=================  ===============================================  ======  =====================================

``-T`` and ``--time-format iso`` are *converted by dmesg when it ran*: boot time
estimated at that moment, suspend not accounted for, and (``-T``) 1 s
truncation; the source's attrs say so. sosreport's ``sos_commands/kernel/dmesg``
and ``dmesg_-T`` and ``/var/log/dmesg`` are these same formats; pstore
``dmesg-erst-*`` files are raw with ``<N>`` priorities.

Untimed indented lines after a record are its continuation (stack frames
printed without a timestamp, kmsg ``SUBSYSTEM=`` / ``DEVICE=`` lines). A diff
marker (``+``/``-``/space) directly before ``[`` is accepted in raw dmesg, so a
pasted ``diff`` of two dmesg snapshots still reads; its ``---``/``+++``/``@@``
lines count as bad lines. The shared engine (``kernel.py``) does the rest:
boots, signatures, reports.
"""
from __future__ import annotations

import polars as pl

from ..model import CLOCK_BOOT, CLOCK_WALL
from ..registry import ParseContext
from ..timeparse import MONTH_RE, WEEKDAY_RE
from .kernel import (DECODE_LEVELS, NS, KernelLogParser, _scatter, days_from_civil, extract_distinct, frame,
                     sec_usec_ns, wall_ns)

_DECODE = rf"(?:(\w+)\s*:\s*({DECODE_LEVELS})\s*: )?"
RAW = rf"^[+ -]?(?:<(\d{{1,3}})>)?{_DECODE}\[\s*(\d+)\.(\d{{6,9}})\] ?(.*)$"
CTIME = rf"^{_DECODE}\[{WEEKDAY_RE} ({MONTH_RE} +\d{{1,2}} \d\d:\d\d:\d\d \d{{4}})\] ?(.*)$"
ISO = rf"^{_DECODE}(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{{6}})([+-]\d\d:?\d\d) ?(.*)$"
# the same grammars without the message capture: what the vectorised validity test needs (faster)
RAW_HEAD = RAW[:RAW.index(r" ?(.*)$")]
ISO_HEAD = ISO[:ISO.index(r" ?(.*)$")]
KMSG = r"^(\d{1,3}),(\d+),(\d+),([^;,]*)(?:,[^;]*)?;(.*)$"

CONVERTED = ("times were converted to wall time by dmesg when it ran (boot time estimated then; "
             "suspend not accounted for{res})")


def _num(text: pl.Expr, at, n: int) -> pl.Expr:
    """The integer in ``n`` characters of ``text`` from ``at`` (null when they are not one)."""
    return text.str.slice(at, n).cast(pl.Int64, strict=False)


def _prio_sev(prio: pl.Expr) -> pl.Expr:
    return (prio.cast(pl.Int64) % 8).cast(pl.String)


class DmesgRawParser(KernelLogParser):
    name = "dmesg_raw"
    clock_domain = CLOCK_BOOT
    description = "raw dmesg: [seconds.micros] on the kernel boot clock (also <N> and --decode prefixes)"
    grammar = RAW
    min_ratio = 0.5   # a pasted diff of two dmesg snapshots still reads

    def records(self, df, ctx):
        # Fast path (no capture groups): the grammar is checked with one anchored regex, then the
        # fields are cut with literal finds and slices; capture-group extraction is 10x slower.
        line = pl.col("line")
        df = df.with_columns(_ok=line.str.contains(RAW_HEAD), _lb=line.str.find("[", literal=True),
                             _rb=line.str.find("]", literal=True))
        lb, rb, ok = pl.col("_lb"), pl.col("_rb"), pl.col("_ok")
        df = df.with_columns(_stamp=line.str.slice(lb + 1, rb - lb - 1).str.strip_chars_start(),
                             _prefix=pl.when(lb > 0).then(line.str.slice(0, lb)))
        dot = pl.col("_stamp").str.find(".", literal=True)
        sec = pl.col("_stamp").str.slice(0, dot)
        frac = pl.col("_stamp").str.slice(dot + 1)
        df = df.with_columns(_prio=extract_distinct(df["_prefix"], r"<(\d{1,3})>"),
                             _lvl=extract_distinct(df["_prefix"], rf"({DECODE_LEVELS})\s*: $"))
        prio, lvl = pl.col("_prio"), pl.col("_lvl")
        msg = line.str.slice(rb + 1).str.strip_prefix(" ")
        return frame(df, ok=ok, ts=pl.when(ok).then(sec_usec_ns(sec, frac)),
                     msg=pl.when(ok).then(msg), sev=pl.coalesce(_prio_sev(prio), lvl),
                     kern=prio.is_null() | (prio.cast(pl.Int64, strict=False) < 8))


class DmesgCtimeParser(KernelLogParser):
    name = "dmesg_ctime"
    clock_domain = CLOCK_WALL
    description = "dmesg -T: local wall time computed by dmesg when it ran (1 s)"
    grammar = CTIME

    def records(self, df, ctx):
        g = pl.col("line").str.extract_groups(CTIME)
        lvl, when, msg = (g.struct.field(f"{i}") for i in (2, 3, 4))
        ts = wall_ns(when.str.replace(r" +", " "), "%b %d %H:%M:%S %Y", ctx.time_zone)
        return frame(df, ok=when.is_not_null(), ts=ts, msg=msg, sev=lvl)

    def prepare(self, ctx: ParseContext) -> None:
        ctx.attrs["converted_by_dmesg"] = CONVERTED.format(res="; 1 s resolution")
        ctx.attrs["time_zone"] = ctx.time_zone or "UTC"


class DmesgIsoParser(KernelLogParser):
    name = "dmesg_iso"
    clock_domain = CLOCK_WALL
    description = "dmesg --time-format iso (also with --decode): wall time with its UTC offset, µs"
    grammar = ISO

    def records(self, df, ctx):
        # Staged and capture-free (see DmesgRawParser.records); the date and time are one vectorised
        # to_datetime of 19 characters (integer arithmetic on the fields for what it rejects), the
        # --decode level is extracted once per distinct prefix.
        line = pl.col("line")
        decode = line.str.contains(rf"^\w+\s*:\s*({DECODE_LEVELS})\s*: \d")
        df = df.with_columns(_ok=line.str.contains(ISO_HEAD), _dec=decode,
                             _start=pl.when(decode).then(line.str.find(": ", literal=True) + 2).otherwise(0))
        start = pl.col("_start")
        # fields are sliced from the line at the record's start (no copy of the rest of the line)
        cut = lambda a, n=None: line.str.slice(start + a, n)  # noqa: E731
        num = lambda a, n: _num(line, start + a, n)  # noqa: E731
        # date and time: one vectorised parse of the 19 characters (ns since the epoch, as if UTC)
        df = df.with_columns(_wall=cut(0, 19).str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False, time_unit="ns")
                             .cast(pl.Int64), _us=num(20, 6), _off=cut(26, 6),
                             _pre=pl.when(decode).then(line.str.slice(0, start)))
        # what it rejects (out-of-range fields: Feb 30, 24:00) the integer arithmetic still reads as before
        miss = df["_ok"] & df["_wall"].is_null()
        civil = (days_from_civil(num(0, 4), num(5, 2), num(8, 2)) * 86400 + num(11, 2) * 3600 + num(14, 2) * 60
                 + num(17, 2)) * NS
        # the UTC offset ("+00:00", "+0100"): its seconds and length, computed once per distinct text
        offs = df.select(pl.col("_off").unique())
        offs = offs.with_columns(_colon=pl.col("_off").str.slice(3, 1) == ":").with_columns(
            _off_len=pl.when(pl.col("_colon")).then(6).otherwise(5),
            _off_s=pl.when(pl.col("_off").str.slice(0, 1) == "-").then(-1).otherwise(1)
            * (_num(pl.col("_off"), 1, 2) * 3600 + pl.when(pl.col("_colon")).then(_num(pl.col("_off"), 4, 2))
               .otherwise(_num(pl.col("_off"), 3, 2)) * 60)).drop("_colon")
        df = df.with_columns(_scatter(miss, df["_wall"], lambda sub: sub.select(civil).to_series(), df),
                             _lvl=extract_distinct(df["_pre"], rf"({DECODE_LEVELS})\s*: $"))
        df = df.join(offs, on="_off", how="left", maintain_order="left", nulls_equal=True)
        ts = pl.col("_wall") - pl.col("_off_s") * NS + pl.col("_us") * 1000
        msg = cut(26 + pl.col("_off_len")).str.strip_prefix(" ")
        lvl = pl.col("_lvl")
        ok = pl.col("_ok")
        return frame(df, ok=ok, ts=pl.when(ok).then(ts), msg=pl.when(ok).then(msg), sev=lvl)

    def prepare(self, ctx: ParseContext) -> None:
        ctx.attrs["converted_by_dmesg"] = CONVERTED.format(res="")


class DmesgKmsgParser(KernelLogParser):
    name = "dmesg_kmsg"
    clock_domain = CLOCK_BOOT
    description = "/dev/kmsg records: prio,seq,usec,flags;text with KEY=value continuation lines"
    grammar = KMSG

    def records(self, df, ctx):
        g = pl.col("line").str.extract_groups(KMSG)
        prio, seq, usec, msg = (g.struct.field(f"{i}") for i in (1, 2, 3, 5))
        seq_i = seq.cast(pl.Int64)
        # a sequence number that goes backwards is a new boot (the ring buffer restarted)
        return frame(df, ok=usec.is_not_null(), ts=usec.cast(pl.Int64) * 1000, msg=msg,
                     sev=_prio_sev(prio), kern=prio.cast(pl.Int64) < 8,
                     cont=pl.col("line").str.contains(r"^ \S"),
                     boot_mark=pl.lit(False)).with_columns(seq=seq_i).pipe(_kmsg_boots)


def _kmsg_boots(df: pl.DataFrame) -> pl.DataFrame:
    seq = df["seq"]
    prev = seq.forward_fill().shift(1)
    mark = (seq < prev).fill_null(False)
    return df.with_columns(boot_mark=df["boot_mark"] | mark).drop("seq")


PARSERS = (DmesgRawParser, DmesgCtimeParser, DmesgIsoParser, DmesgKmsgParser)
