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
from .kernel import (DECODE_LEVELS, MAX_SECONDS, NS, KernelLogParser, _scatter, days_from_civil, extract_distinct,
                     frame, null_strings, sec_usec_ns, wall_ns)

_DECODE = rf"(?:(\w+)\s*:\s*({DECODE_LEVELS})\s*: )?"
RAW = rf"^[+ -]?(?:<(\d{{1,3}})>)?{_DECODE}\[\s*(\d+)\.(\d{{6,9}})\] ?(.*)$"
CTIME = rf"^{_DECODE}\[{WEEKDAY_RE} ({MONTH_RE} +\d{{1,2}} \d\d:\d\d:\d\d \d{{4}})\] ?(.*)$"
ISO = rf"^{_DECODE}(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{{6}})([+-]\d\d:?\d\d) ?(.*)$"
# the same grammars without the message capture: what the vectorised validity test needs (faster)
RAW_HEAD = RAW[:RAW.index(r" ?(.*)$")]
# a record with nothing before its "[" and a 6-digit fraction (what dmesg prints): RAW_HEAD matches
# it with "[" at 0, the first "]" closing the stamp and the "." 7 characters before it
RAW_PLAIN = r"^\[\s*[0-9]+\.[0-9]{6}\]"
ISO_HEAD = ISO[:ISO.index(r" ?(.*)$")]
KMSG = r"^(\d{1,3}),(\d+),(\d+),([^;,]*)(?:,[^;]*)?;(.*)$"

CONVERTED = ("times were converted to wall time by dmesg when it ran (boot time estimated then; "
             "suspend not accounted for{res})")


def _num(text: pl.Expr, at, n: int) -> pl.Expr:
    """The integer in ``n`` characters of ``text`` from ``at`` (null when they are not one)."""
    return text.str.slice(at, n).cast(pl.Int64, strict=False)


def _offset(text: str) -> tuple[int | None, int | None]:
    """Seconds and length of a UTC offset as the grammar accepts it ("+00:00", "+0100"); the same
    arithmetic as the per-row path (None where a field is not a number)."""
    colon = text[3:4] == ":"
    try:
        h, m = int(text[1:3]), int(text[4:6] if colon else text[3:5])
    except ValueError:
        return None, None
    return (-1 if text[:1] == "-" else 1) * (h * 3600 + m * 60), 6 if colon else 5


def _prio_sev(prio: pl.Expr) -> pl.Expr:
    return (prio.cast(pl.Int64, strict=False) % 8).cast(pl.String)


class DmesgRawParser(KernelLogParser):
    name = "dmesg_raw"
    clock_domain = CLOCK_BOOT
    description = "raw dmesg: [seconds.micros] on the kernel boot clock (also <N> and --decode prefixes)"
    grammar = RAW
    min_ratio = 0.5   # a pasted diff of two dmesg snapshots still reads
    _try_plain = True  # records: try the plain-chunk path (false once a chunk of the file had prefixes)

    def records(self, df, ctx):
        # Fast path (no capture groups): the grammar is checked with one anchored regex, then the
        # fields are cut with literal finds and slices; capture-group extraction is 10x slower.
        # Commonest of all, a chunk whose records are all "[   s.micros]" with nothing before the
        # "[" (dmesg's own output) needs neither the "[" nor the "." of each line (_records_plain);
        # once a chunk of the file has prefixes, the next chunks go straight to the general path
        # (the try costs a regex pass).
        line = pl.col("line")
        df = df.with_columns(_rb=line.str.find("]", literal=True), _sp=line.str.find("] ", literal=True))
        if self._try_plain:
            df = df.with_columns(_plain=line.str.contains(RAW_PLAIN))
            rest = df["line"].filter(~df["_plain"])
            if not any(_prefixed(r) for r in (rest.head(1000), rest.slice(1000))):
                return self._records_plain(df)
            self._try_plain = False
        df = df.with_columns(_ok=line.str.contains(RAW_HEAD), _lb=line.str.find("[", literal=True),
                             _dot=line.str.find(".", literal=True))
        lb, rb, dot, ok = pl.col("_lb"), pl.col("_rb"), pl.col("_dot"), pl.col("_ok")
        # seconds.micros as one float: exact (x * 1e6 < 2^52 for 142 years of uptime) and about half
        # the work of two integer casts; the rows whose fraction is not 6 digits (ns printk) are
        # computed from the integer fields instead
        df = df.with_columns(_ts=_raw_ts(lb, rb, ok), _msg=_raw_msg(rb, ok))
        other = df["_ok"] & (df["_rb"] - df["_dot"] != 7)
        if other.any():
            sec = line.str.slice(lb + 1, dot - lb - 1).str.strip_chars_start()
            frac = line.str.slice(dot + 1, rb - dot - 1)
            df = df.with_columns(_scatter(other, df["_ts"], lambda sub: sub.select(sec_usec_ns(sec, frac)).to_series(),
                                          df))
        msg = pl.col("_msg")
        pre = df["_lb"] > 0
        if pre.any():   # "<6>" priorities and "--decode" levels, once per distinct prefix
            p = df.select(pl.when(pre).then(line.str.slice(0, lb)))["line"]
            df = df.with_columns(_prio=extract_distinct(p, r"<(\d{1,3})>"),
                                 _lvl=extract_distinct(p, rf"({DECODE_LEVELS})\s*: $"))
            prio, lvl = pl.col("_prio"), pl.col("_lvl")
            sev, kern = pl.coalesce(_prio_sev(prio), lvl), prio.is_null() | (prio.cast(pl.Int64, strict=False) < 8)
        else:
            sev = kern = None
        return frame(df, ok=ok, ts=pl.col("_ts"), msg=msg, sev=sev, kern=kern)

    def _records_plain(self, df):
        """``records`` of a chunk whose records all match ``RAW_PLAIN`` and whose other lines have no
        "[" after their first character: the same frame, with "[" at 0 and a 6-digit fraction (so no
        ns path and no prefix to read); where every line is a record, without the per-row choice."""
        ok = None if df["_plain"].all() else pl.col("_plain")
        return frame(df, ok=pl.col("_plain"), ts=_raw_ts(pl.lit(0), pl.col("_rb"), ok),
                     msg=_raw_msg(pl.col("_rb"), ok))


def _prefixed(lines: pl.Series) -> bool:
    """Whether any of these lines (not ``RAW_PLAIN``) is a record or has a "[" after its start (a
    prefix the general path would read)."""
    return len(lines) > 0 and bool(lines.str.contains(RAW_HEAD).any()
                                   or (lines.str.find("[", literal=True) > 0).any())


def _raw_ts(lb: pl.Expr, rb: pl.Expr, ok: pl.Expr | None) -> pl.Expr:
    """ns of a raw stamp read as one float (see ``DmesgRawParser.records``); ``ok`` None: every row."""
    x = pl.col("line").str.slice(lb + 1, rb - lb - 1).str.strip_chars_start().cast(pl.Float64, strict=False)
    return pl.when(x < MAX_SECONDS if ok is None else ok & (x < MAX_SECONDS)).then(
        (x * 1e6).round().cast(pl.Int64) * 1000)


def _raw_msg(rb: pl.Expr, ok: pl.Expr | None) -> pl.Expr:
    """The message: one slice after "]" and the one optional space (found with ``find("] ")``);
    the line itself where it is not a record (``ok`` None: every row is one)."""
    space = (pl.col("_sp") == rb).fill_null(False).cast(pl.Int64)
    msg = pl.col("line").str.slice(rb + 1 + space)
    return msg if ok is None else pl.when(ok).then(msg).otherwise(pl.col("line"))


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
        # --decode level is extracted once per distinct prefix. Where every record starts at the same
        # column (no --decode prefix, or dmesg's padded one) and has the same UTC offset (one zone),
        # the fields are cut at constant columns, which is cheaper than per-row offsets.
        line = pl.col("line")
        decode = line.str.contains(rf"^\w+\s*:\s*({DECODE_LEVELS})\s*: \d")
        df = df.with_columns(_ok=line.str.contains(ISO_HEAD), _dec=decode,
                             _start=pl.when(decode).then(line.str.find(": ", literal=True) + 2).otherwise(0))
        used = df["_ok"] | df["_dec"]     # the other rows' fields are not read
        starts = df["_start"].filter(used).unique()
        if len(starts) > 1:
            return self._records_any(df)
        c = int(starts[0]) if len(starts) else 0
        offs = df.select(line.str.slice(c + 26, 6).alias("_off")).to_series().filter(df["_ok"]).unique()
        if len(offs) > 1:
            return self._records_any(df)
        off_s, off_len = _offset(offs[0] if len(offs) else "+00:00")
        df = df.with_columns(_wall=line.str.slice(c, 19).str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False,
                                                                         time_unit="ns").cast(pl.Int64),
                             _us=_num(line, c + 20, 6))
        miss = df["_ok"] & df["_wall"].is_null()
        if miss.any():   # out-of-range fields (Feb 30, 24:00): the integer arithmetic reads them as before
            num = lambda a, n: _num(line, c + a, n)  # noqa: E731
            civil = (days_from_civil(num(0, 4), num(5, 2), num(8, 2)) * 86400 + num(11, 2) * 3600
                     + num(14, 2) * 60 + num(17, 2)) * NS
            df = df.with_columns(_scatter(miss, df["_wall"], lambda sub: sub.select(civil).to_series(), df))
        if bool(df["_dec"].any()):
            lvl = extract_distinct(df.select(pl.when(pl.col("_dec")).then(line.str.slice(0, c)))["line"],
                                   rf"({DECODE_LEVELS})\s*: $")
        else:
            lvl = null_strings(len(df))
        df = df.with_columns(_lvl=lvl)
        ok, lvl = pl.col("_ok"), pl.col("_lvl")
        ts = pl.col("_wall") - (off_s or 0) * NS + pl.col("_us") * 1000
        msg = line.str.slice(c + 26 + (off_len or 0)).str.strip_prefix(" ")
        if off_s is None:   # an offset the grammar accepts but the arithmetic cannot read
            ts, msg = pl.lit(None, pl.Int64), pl.lit(None, pl.String)
        return frame(df, ok=ok, ts=pl.when(ok).then(ts), msg=pl.when(ok).then(msg), sev=lvl)

    def _records_any(self, df):
        """Records with per-row columns (mixed prefixes or UTC offsets in one chunk)."""
        line = pl.col("line")
        decode, start = pl.col("_dec"), pl.col("_start")
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
        seq_i = seq.cast(pl.Int64, strict=False)
        us = usec.cast(pl.Int64, strict=False)
        # a sequence number that goes backwards is a new boot (the ring buffer restarted)
        return frame(df, ok=usec.is_not_null(), ts=pl.when(us < MAX_SECONDS * 1_000_000).then(us * 1000), msg=msg,
                     sev=_prio_sev(prio), kern=prio.cast(pl.Int64, strict=False) < 8,
                     cont=pl.col("line").str.contains(r"^ \S"),
                     boot_mark=pl.lit(False)).with_columns(seq=seq_i).pipe(_kmsg_boots)


def _kmsg_boots(df: pl.DataFrame) -> pl.DataFrame:
    seq = df["seq"]
    prev = seq.forward_fill().shift(1)
    mark = (seq < prev).fill_null(False)
    return df.with_columns(boot_mark=df["boot_mark"] | mark).drop("seq")


PARSERS = (DmesgRawParser, DmesgCtimeParser, DmesgIsoParser, DmesgKmsgParser)
