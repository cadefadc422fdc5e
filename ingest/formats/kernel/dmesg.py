"""dmesg and /dev/kmsg: the kernel ring buffer as collectors save it.

Grammars (util-linux ``sys-utils/dmesg.c``, Documentation/ABI/testing/dev-kmsg;
reference/FORMATS.md 4.1). Every variant may carry the ``--decode`` prefix
``kern  :info  : `` (facility and level, padded) and raw ``dmesg`` also the
``-r`` / pstore priority prefix ``<6>`` (``<prio + 8*facility>``):

=================  ===============================================  ======  =====================================
parser             line                                             clock   time
=================  ===============================================  ======  =====================================
``dmesg_raw``      ``[ 1234.567890] text``                          boot    printk ``local_clock()``, µs
``dmesg_ctime``    ``[Sun Nov 29 13:38:49 2026] text`` (``-T``)      kwall   local time, 1 s, bundle zone
``dmesg_iso``      ``2026-11-29T13:38:49,486513+00:00 text``         kwall   with its UTC offset, µs
``dmesg_kmsg``     ``6,998,1725604821,-;text`` + `` KEY=value``       boot    printk µs; seq numbers
=================  ===============================================  ======  =====================================

``-T`` and ``--time-format iso`` are *converted by dmesg when it ran*: boot time
estimated at that moment, suspend not accounted for, and (``-T``) 1 s
truncation; the source's attrs say so. Their clock is ``kernel_wall`` (kwall), not
the wall clock: util-linux 2.38 prints ``floor(boot instant) + floor(stamp)``, up to
2 s before the record, and the printk clock parts from the wall clock since boot
(``analysis/clocks.py`` places them). sosreport's ``sos_commands/kernel/dmesg``
and ``dmesg_-T`` and ``/var/log/dmesg`` are these same formats; pstore
``dmesg-erst-*`` files are raw with ``<N>`` priorities.

Untimed indented lines after a record are its continuation (stack frames
printed without a timestamp, kmsg ``SUBSYSTEM=`` / ``DEVICE=`` lines). A diff
marker (``+``/``-``/space) directly before ``[`` is accepted in raw dmesg, so a
pasted ``diff`` of two dmesg snapshots still reads; its ``---``/``+++``/``@@``
lines count as bad lines. The shared engine (:mod:`.engine`) does the rest:
boots, signatures, reports.
"""
from __future__ import annotations

import re

import polars as pl
import pyarrow.compute as pc

from ... import native
from ...model import CLOCK_BOOT, CLOCK_KERNEL_WALL
from ...registry import ParseContext
from ...timeparse import MAX_SECONDS, MONTH_RE, WEEKDAY_RE
from .engine import DECODE_LEVELS, KernelLogParser
from .frames import NS, days_from_civil, extract_distinct, frame, null_strings, scatter, sec_usec_ns, wall_ns

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

    def records(self, df, ctx):
        # One compiled pass reads the records (``ingest.native.dmesg_raw``: the grammar above on
        # ASCII text); the lines it leaves take the regexes (``_records_regex``).
        lines = native.texts(df["line"])
        r = native.dmesg_raw(lines)
        ok = pl.col("_ok")
        code = pl.Series("_code", r.code)
        src, df = df, df.with_columns((code == 1).alias("_ok"), pl.Series("_ts", r.ts))
        sev = kern = None
        if r.prio.null_count < len(r.prio) or pc.max(r.lvl).as_py():     # ("<6>" priorities, "--decode" levels)
            prio = pl.Series("_prio", r.prio)
            lvl = pl.Series("_lvl", r.lvl).replace_strict(_LEVEL_CODE, default=None, return_dtype=pl.String)
            sev, kern = pl.coalesce((prio % 8).cast(pl.String), lvl), prio.is_null() | (prio < 8)
        # (a line that is no record is its own message: its msg_at is 0)
        out = frame(df, ok=ok, ts=pl.col("_ts"), msg=pl.lit(pl.Series(native.slices(lines, r.msg_at))), sev=sev, kern=kern)
        if r.unsure:
            left = code == native.UNSURE
            out = pl.concat([out.filter(~left), self._records_regex(src.filter(left))]).sort(
                "lineno", maintain_order=True)
        return out

    def _records_regex(self, df):
        """``records`` by the regexes alone. Literal finds and slices cut the fields (capture-group
        extraction is several times slower)."""
        line = pl.col("line")
        df = df.with_columns(_rb=line.str.find("]", literal=True), _sp=line.str.find("] ", literal=True),
                             _ok=line.str.contains(RAW_HEAD), _lb=line.str.find("[", literal=True),
                             _dot=line.str.find(".", literal=True))
        lb, rb, dot, ok = pl.col("_lb"), pl.col("_rb"), pl.col("_dot"), pl.col("_ok")
        # seconds.micros as one float: exact (x * 1e6 < 2^52 for 142 years of uptime) and about half
        # the work of two integer casts; the rows whose fraction is not 6 digits (ns printk) are
        # computed from the integer fields instead
        df = df.with_columns(_x=_raw_x(lb, rb)).with_columns(_ts=_raw_ts(ok), _msg=_raw_msg(rb, ok))
        other = df["_ok"] & (df["_rb"] - df["_dot"] != 7)
        if other.any():
            sec = line.str.slice(lb + 1, dot - lb - 1).str.strip_chars_start()
            frac = line.str.slice(dot + 1, rb - dot - 1)
            df = df.with_columns(scatter(other, df["_ts"], lambda sub: sub.select(sec_usec_ns(sec, frac)).to_series(),
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


_LEVEL_CODE = {i: v for i, v in enumerate(DECODE_LEVELS.split("|"), 1)}


def _per_row(df: pl.DataFrame, known: pl.Series | None, exprs: dict[str, pl.Expr], values: dict | None) -> pl.DataFrame:
    """``df.with_columns(**exprs)``, the expressions evaluated on the rows that are not ``known``
    only; the ``known`` rows get ``values[name]`` (what the expression gives on them: a value, or a
    Series of the chunk's rows)."""
    if known is None:
        return df.with_columns(**exprs)
    idx = (~known).arg_true()
    sub = df[idx].select(**exprs)
    cols = []
    for name, e in exprs.items():
        col, v = sub[name], values[name]
        base = (v.cast(col.dtype) if isinstance(v, pl.Series) else
                pl.repeat(v, len(df), eager=True, dtype=col.dtype)).alias(name)
        cols.append(base.scatter(idx, col) if len(idx) else base)
    return df.with_columns(cols)


_ISO_LAYOUT = re.compile(rf"(?:([A-Za-z0-9_]+ *):((?:{DECODE_LEVELS}) *): )?"
                         r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{6}([+-][0-9]{2}:?[0-9]{2})")


def _iso_layout(lines: pl.Series, n: int = 64) -> tuple[str, int, str] | None:
    """(regex, stamp column, UTC offset) of the layout of the first ``ISO`` record among the first ``n``
    lines, None without one. The regex matches the lines with the same --decode prefix widths (or
    none) and offset, and a space after it: "kern  :info  : 2026-11-29T13:38:49,486513+00:00 ",
    padded ASCII names, a level name, ASCII digits; on them ``ISO_HEAD`` and the --decode test hold,
    the first ": " ends the prefix and the message starts after the space. Only 6-character offsets
    ("+00:00"): ``records`` compares 6 characters, a 5-character offset and the one after it."""
    for ln in lines.head(n).to_list():
        m = _ISO_LAYOUT.match(ln) if ln else None
        if m:
            break
    else:
        return None
    if len(m[3]) != 6:
        return None
    prefix = ""
    if m[1]:
        w1, w2 = len(m[1]), len(m[2])
        prefix = ("(?:" + "|".join(f"[A-Za-z0-9_]{{{k}}}" + " " * (w1 - k) for k in range(1, w1 + 1)) + "):(?:"
                  + "|".join(v + " " * (w2 - len(v)) for v in DECODE_LEVELS.split("|") if len(v) <= w2) + "): ")
    stamp = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{6}" + re.escape(m[3])
    return "^" + prefix + stamp + " ", m.start(3) - 26, m[3]


def _raw_x(lb: pl.Expr, rb: pl.Expr) -> pl.Expr:
    """The seconds between "[" and "]" as one float (see ``DmesgRawParser._records_regex``), null
    where they are not a number. Its own column (``_x``): an expression that used it twice would run
    the cast twice (the eager API does not eliminate common subexpressions; the cast is most of the
    cost)."""
    return pl.col("line").str.slice(lb + 1, rb - lb - 1).str.strip_chars_start().cast(pl.Float64, strict=False)


def _raw_ts(ok: pl.Expr) -> pl.Expr:
    """ns of a raw stamp from its float seconds ``_x`` (``_raw_x``) on the records (``ok``)."""
    x = pl.col("_x")
    return pl.when(ok & (x < MAX_SECONDS)).then((x * 1e6).round().cast(pl.Int64) * 1000)


def _raw_msg(rb: pl.Expr, ok: pl.Expr) -> pl.Expr:
    """The message: one slice after "]" and the one optional space (found with ``find("] ")``);
    the line itself where it is not a record (``ok``)."""
    space = (pl.col("_sp") == rb).fill_null(False).cast(pl.Int64)
    return pl.when(ok).then(pl.col("line").str.slice(rb + 1 + space)).otherwise(pl.col("line"))


class DmesgCtimeParser(KernelLogParser):
    name = "dmesg_ctime"
    clock_domain = CLOCK_KERNEL_WALL
    description = "dmesg -T: local wall time computed by dmesg when it ran (1 s)"
    grammar = CTIME

    def records(self, df, ctx):
        # the capture groups once, as a column (the eager API would run the regex once per field)
        df = df.with_columns(_g=pl.col("line").str.extract_groups(CTIME))
        g = pl.col("_g")
        lvl, when, msg = (g.struct.field(f"{i}") for i in (2, 3, 4))
        ts = wall_ns(when.str.replace(r" +", " "), "%b %d %H:%M:%S %Y", ctx.time_zone)
        return frame(df, ok=when.is_not_null(), ts=ts, msg=msg, sev=lvl)

    def prepare(self, ctx: ParseContext) -> None:
        ctx.attrs["converted_by_dmesg"] = CONVERTED.format(res="; 1 s resolution")
        ctx.attrs["time_zone"] = ctx.time_zone or "UTC"


class DmesgIsoParser(KernelLogParser):
    name = "dmesg_iso"
    clock_domain = CLOCK_KERNEL_WALL
    description = "dmesg --time-format iso (also with --decode): wall time with its UTC offset, µs"
    grammar = ISO

    def records(self, df, ctx):
        # Staged and capture-free (see DmesgRawParser.records); the date and time are one vectorised
        # to_datetime of 19 characters (integer arithmetic on the fields for what it rejects), the
        # --decode level is extracted once per distinct prefix. Where every record starts at the same
        # column (no --decode prefix, or dmesg's padded one) and has the same UTC offset (one zone),
        # the fields are cut at constant columns, which is cheaper than per-row offsets.
        # First of all, one regex tests each line for the layout of the chunk's first record (its
        # --decode prefix's widths and its UTC offset, ``_iso_layout``): where every line has it (or
        # is blank), the grammar, --decode and prefix-length tests are not run at all; otherwise they
        # run on the other lines only (``_per_row``), and the stamp columns and offsets are collected
        # from those lines (plus the layout's).
        line = pl.col("line")
        known, lay = None, _iso_layout(df["line"])
        if lay is not None:
            pattern, c0, off0 = lay
            df = df.with_columns(_pc=line.str.contains(pattern))
            pc = df["_pc"]
            if pc.any():
                known = pc | (df["line"].str.len_bytes() == 0)   # blank: no record, no --decode line
                df = df.with_columns(_ok=pc, _dec=pc if c0 > 0 else pl.repeat(False, len(df), eager=True))
                if known.all():
                    return self._records_at(df, c0, *_offset(off0), spaced=True)
        decode = line.str.contains(rf"^\w+\s*:\s*({DECODE_LEVELS})\s*: \d")
        # (_start reads the _dec column: the eager API would run the decode test twice in one expression)
        start = pl.when(pl.col("_dec")).then(line.str.find(": ", literal=True) + 2).otherwise(0)
        values = None if known is None else {
            "_ok": df["_ok"], "_dec": df["_dec"],
            "_start": df.select(pl.when(pl.col("_pc")).then(c0).otherwise(0).alias("_start"))["_start"]}
        df = _per_row(df, known, {"_ok": line.str.contains(ISO_HEAD), "_dec": decode}, values)
        df = _per_row(df, known, {"_start": start}, values)
        used, ok_rows = df["_ok"] | df["_dec"], df["_ok"]     # (the other rows' fields are not read)
        starts, offs = set(), set()
        if known is not None:        # the layout's rows: its column and offset
            used, ok_rows = used & ~known, ok_rows & ~known
            starts, offs = {c0}, {off0}
        starts |= set(df["_start"].filter(used).unique().to_list())
        if len(starts) > 1:
            return self._records_any(df)
        c = int(starts.pop()) if starts else 0
        offs |= set(df.select(line.str.slice(c + 26, 6).alias("_off")).to_series().filter(ok_rows).unique().to_list())
        if len(offs) > 1:
            return self._records_any(df)
        return self._records_at(df, c, *_offset(offs.pop() if offs else "+00:00"))

    def _records_at(self, df, c: int, off_s: int | None, off_len: int | None, spaced: bool = False):
        """Records of a chunk whose records (and --decode lines) all start their stamp at column ``c``
        and have the same UTC offset (``off_s`` seconds, ``off_len`` characters); ``_ok`` and ``_dec``
        given. ``spaced``: every record has a space after its offset (the message is one slice)."""
        line = pl.col("line")
        df = df.with_columns(_wall=line.str.slice(c, 19).str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False,
                                                                         time_unit="ns").cast(pl.Int64),
                             _us=_num(line, c + 20, 6))
        miss = df["_ok"] & df["_wall"].is_null()
        if miss.any():   # out-of-range fields (Feb 30, 24:00): the integer arithmetic reads them as before
            num = lambda a, n: _num(line, c + a, n)  # noqa: E731
            civil = (days_from_civil(num(0, 4), num(5, 2), num(8, 2)) * 86400 + num(11, 2) * 3600
                     + num(14, 2) * 60 + num(17, 2)) * NS
            df = df.with_columns(scatter(miss, df["_wall"], lambda sub: sub.select(civil).to_series(), df))
        if bool(df["_dec"].any()):
            lvl = extract_distinct(df.select(pl.when(pl.col("_dec")).then(line.str.slice(0, c)))["line"],
                                   rf"({DECODE_LEVELS})\s*: $")
        else:
            lvl = null_strings(len(df))
        df = df.with_columns(_lvl=lvl)
        ok, lvl = pl.col("_ok"), pl.col("_lvl")
        ts = pl.col("_wall") - (off_s or 0) * NS + pl.col("_us") * 1000
        msg = line.str.slice(c + 26 + (off_len or 0) + 1) if spaced else \
            line.str.slice(c + 26 + (off_len or 0)).str.strip_prefix(" ")
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
        df = df.with_columns(scatter(miss, df["_wall"], lambda sub: sub.select(civil).to_series(), df),
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
        df = df.with_columns(_g=pl.col("line").str.extract_groups(KMSG))   # (once: see DmesgCtimeParser)
        g = pl.col("_g")
        prio, seq, usec, msg = (g.struct.field(f"{i}") for i in (1, 2, 3, 5))
        seq_i = df.select(seq.cast(pl.Int64, strict=False))[:, 0]
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
