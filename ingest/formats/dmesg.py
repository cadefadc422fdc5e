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
from .kernel import DECODE_LEVELS, NS, KernelLogParser, days_from_civil, frame, sec_usec_ns, wall_ns

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
        prio = pl.col("_prefix").str.extract(r"<(\d{1,3})>", 1)
        lvl = pl.col("_prefix").str.extract(rf"({DECODE_LEVELS})\s*: $", 1)
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
        # Staged and capture-free (see DmesgRawParser.records); the date is computed with integer
        # arithmetic (days from the civil date), not parsed row by row.
        line = pl.col("line")
        decode = line.str.contains(rf"^\w+\s*:\s*({DECODE_LEVELS})\s*: \d")
        df = df.with_columns(_ok=line.str.contains(ISO_HEAD), _dec=decode,
                             _start=pl.when(decode).then(line.str.find(": ", literal=True) + 2).otherwise(0))
        df = df.with_columns(_rest=line.str.slice(pl.col("_start")))
        rest = pl.col("_rest")
        num = lambda a, n: rest.str.slice(a, n).cast(pl.Int64, strict=False)  # noqa: E731
        df = df.with_columns(_y=num(0, 4), _mo=num(5, 2), _d=num(8, 2), _h=num(11, 2), _mi=num(14, 2),
                             _s=num(17, 2), _us=num(20, 6), _colon=rest.str.slice(29, 1) == ":")
        off_len = pl.when(pl.col("_colon")).then(6).otherwise(5)
        sign = pl.when(rest.str.slice(26, 1) == "-").then(-1).otherwise(1)
        off_s = sign * (num(27, 2) * 3600 + pl.when(pl.col("_colon")).then(num(30, 2)).otherwise(num(29, 2)) * 60)
        secs = days_from_civil(pl.col("_y"), pl.col("_mo"), pl.col("_d")) * 86400 + pl.col("_h") * 3600 \
            + pl.col("_mi") * 60 + pl.col("_s")
        ts = (secs - off_s) * NS + pl.col("_us") * 1000
        msg = rest.str.slice(26 + off_len).str.strip_prefix(" ")
        lvl = pl.when(pl.col("_dec")).then(line.str.slice(0, pl.col("_start")).str.extract(
            rf"({DECODE_LEVELS})\s*: $", 1))
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
