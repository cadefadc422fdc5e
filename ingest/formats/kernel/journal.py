"""journald and syslog kernel logs: ``journalctl -k`` in every text output, its JSON, kern.log.

================== ===================================================================== ======
parser             line                                                                  clock
================== ===================================================================== ======
``syslog``         ``Nov 29 13:39:15 vm kernel: text`` — ``journalctl -o short`` and     wall
                   ``-o short-precise`` (``13:39:15.981986``), rsyslog's traditional
                   ``/var/log/kern.log`` / ``/var/log/messages`` format
``syslog_iso``     ``2026-11-29T13:39:06+0000 vm kernel: text`` — ``-o short-iso``,        wall
                   ``-o short-iso-precise``, rsyslog's RFC 3339 file format
``journal_monotonic`` ``[ 1725.604844] vm kernel: text`` — ``-o short-monotonic``          boot
``journal_json``   ``{"__REALTIME_TIMESTAMP":...,"MESSAGE":...}`` — ``-o json``             boot
================== ===================================================================== ======

Every line names a host and an identifier (``kernel`` for kernel messages,
``systemd[1]`` etc. for other programs, whose lines are kept as ``syslog``
events with their pid). journalctl's own ``-- Boot <id> --`` lines mark a new
boot; other ``-- … --`` lines (``-- No entries --``, ``-- Logs begin at …``)
are skipped.

Times. The text outputs print journald's *receive* time (``__REALTIME_TIMESTAMP``),
which for messages read from the kernel ring buffer when journald started can
be seconds later than the printk time (real example: this machine's journal,
tests/data/kernel/). ``short``/``short-precise`` and syslog lines carry no
year and no zone: the zone is the bundle's, the year comes from the file's
modification time (a month later than that month means the year before; a
month that goes backwards inside the file means the next year), and the
source says so. ``short-monotonic`` prints ``_SOURCE_MONOTONIC_TIMESTAMP`` for
kernel messages, i.e. the printk clock: clock ``boot``.

JSON: each record carries ``_SOURCE_MONOTONIC_TIMESTAMP`` (printk µs, used as
the event time, clock ``boot``), ``__REALTIME_TIMESTAMP`` (receive time, µs
epoch) and ``_BOOT_ID``. Each pair is an instant read on both clocks, late by
journald's receive latency (>= 0). Anchors (``anchors`` table, name
``journal``): per boot and per ``ANCHOR_WINDOW_NS`` of printk time, the record
with the *smallest* realtime - monotonic difference (the least delayed one);
its uncertainty is the spread between that minimum and the window's median
(at least ``MIN_ANCHOR_UNC_NS``). Backlog records read at journald start-up
therefore never make an anchor unless nothing better exists in their window.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone

import polars as pl

from ...model import CLOCK_BOOT, CLOCK_WALL
from ...registry import ParseContext
from ...timeparse import LOCALE_MONTH_RE, LOCALE_MONTHS
from .engine import KernelEngine, KernelLogParser
from .frames import NS, frame, sec_usec_ns, wall_ns

# busybox syslogd (without -S) writes the facility.priority between the host and the tag
# (``format_message``: "%s %.64s %s %s", timestamp, hostname, "kern.err", msg), or "<N>" when
# the number has no name
_FACILITY = (r"(?:(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])"
             r"\.(?:emerg|alert|crit|err|error|warn|warning|notice|info|debug) |<\d{1,3}> )?")
_TAIL = r" (\S+) " + _FACILITY + r"([^\s:\[]+)(?:\[(\d+)\])?: ?(.*)$"
SHORT = rf"^({LOCALE_MONTH_RE}) +(\d{{1,2}}) (\d\d:\d\d:\d\d)(?:\.(\d{{1,9}}))?{_TAIL}"
ISO = rf"^(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](\d{{1,9}}))?(Z|[+-]\d\d:?\d\d){_TAIL}"
MONO = rf"^\[\s*(\d+)\.(\d{{6}})\]{_TAIL}"
META = r"^-- .* --$"
BOOT_LINE = r"^-- Boot ([0-9a-f]{32}) --$"
PRINTK_IN_MSG = r"^\[\s*\d+\.\d{6}\] "     # rsyslog forwarding the printk time inside the message
ANCHOR_WINDOW_NS = 600 * NS
MIN_ANCHOR_UNC_NS = 1_000_000

# The grammars without their message group, the prefix captured whole (group 1, the others one up):
# the message is the rest of the line after it (``(.*)$`` matches any rest: the same lines, the same
# prefix), cut with a slice, which is cheaper than capturing it (a capture runs the slower engine over
# the whole message: 0.53 -> 0.21 CPU-s per 32 MB syslog chunk)
def _head(pattern: str) -> str:
    assert pattern.startswith("^") and pattern.endswith("(.*)$")
    return "^(" + pattern[1:-len("(.*)$")] + ")"


SHORT_HEAD, ISO_HEAD, MONO_HEAD = _head(SHORT), _head(ISO), _head(MONO)


def _rest(g: pl.Expr) -> pl.Expr:
    """The message: the line after the prefix captured as group 1 of a ``_head`` pattern."""
    return pl.col("line").str.slice(g.struct.field("1").str.len_chars())


def _tail(g: pl.Expr, first: int, msg: pl.Expr | None = None) -> tuple[pl.Expr, pl.Expr, pl.Expr, pl.Expr]:
    host, ident, ipid = (g.struct.field(f"{i}") for i in range(first, first + 3))
    msg = g.struct.field(f"{first + 3}") if msg is None else msg
    kern = ident == "kernel"
    msg = pl.when(kern).then(msg.str.replace(PRINTK_IN_MSG, "")).otherwise(msg)
    return host, ident, ipid, msg, kern


def _boot_marks(df: pl.DataFrame) -> pl.DataFrame:
    """`-- Boot id --` lines make the next record start a new boot."""
    is_boot = df["line"].str.contains(BOOT_LINE)
    if not is_boot.any():
        return df
    pending = is_boot.cast(pl.Int64).cum_sum()
    rec_idx = pl.Series(range(len(df)))
    first_after = df.with_columns(pending=pending, idx=rec_idx).filter(pl.col("ok")).group_by(
        "pending", maintain_order=True).agg(pl.col("idx").first())
    starts = set(first_after.filter(pl.col("pending") > 0)["idx"].to_list())
    return df.with_columns(boot_mark=df["boot_mark"] | pl.Series([i in starts for i in range(len(df))]))


class SyslogParser(KernelLogParser):
    name = "syslog"
    priority = 38
    clock_domain = CLOCK_WALL
    per_line_host = True
    description = "journalctl -k -o short/short-precise, /var/log/kern.log, /var/log/messages (local time, no year)"
    grammar = SHORT
    ident_group = 6

    def prepare(self, ctx: ParseContext) -> None:
        try:
            mtime = os.stat(ctx.path).st_mtime
        except OSError:
            mtime = None
        if mtime is None:
            self.year, self.ref_month = datetime.now(timezone.utc).year, 12
            ctx.attrs["year_from"] = "unknown (no file time): the current year was assumed"
        else:
            t = datetime.fromtimestamp(mtime, timezone.utc)
            self.year, self.ref_month = t.year, t.month
            ctx.attrs["year_from"] = (f"syslog lines carry no year: taken from the file's modification time "
                                      f"({t.date().isoformat()})")
        ctx.attrs["time_zone"] = ctx.time_zone or "UTC"
        self.prev_month = None

    def _years(self, month: pl.Series) -> pl.Series:
        """Year per line: month wrap-arounds (Dec -> Jan) move to the next year (null where the month
        is). Vectorised: the year is the running count of wraps (a month more than 6 below the
        previous line's, carried across chunks in ``prev_month``) plus the year so far; a file whose
        first month is later than the file time's month starts a year earlier."""
        idx = month.is_not_null().arg_true()
        if len(idx) == 0:
            return pl.repeat(None, len(month), eager=True, dtype=pl.Int64)
        m = month.gather(idx).cast(pl.Int64)
        if self.prev_month is None and int(m[0]) > self.ref_month:
            self.year -= 1
        prev = m.shift(1)
        if self.prev_month is not None:
            prev = prev.fill_null(self.prev_month)
        wraps = (m < prev - 6).fill_null(False).cast(pl.Int64).cum_sum()
        years = wraps + self.year
        self.year, self.prev_month = int(years[-1]), int(m[-1])
        return pl.repeat(None, len(month), eager=True, dtype=pl.Int64).scatter(idx, years)

    def records(self, df, ctx):
        # the capture groups once, as a column (an expression that named them in several places would
        # run the regex once per field: the eager API does not share subexpressions)
        df = df.with_columns(_g=pl.col("line").str.extract_groups(SHORT_HEAD))
        g = pl.col("_g")
        parts = df.select(g.struct.field("2").alias("mon"), g.struct.field("3").alias("day"),
                          g.struct.field("4").alias("hms"), g.struct.field("5").alias("frac"))
        month = parts["mon"].str.to_lowercase().str.strip_chars_end(".").replace_strict(
            LOCALE_MONTHS, default=None, return_dtype=pl.Int64)
        years = self._years(month) if month.null_count() < len(month) else pl.Series([None] * len(df), dtype=pl.Int64)
        df = df.with_columns(_year=years, _mon=month, _day=parts["day"], _hms=parts["hms"],
                             _frac=parts["frac"])
        text = pl.concat_str([pl.col("_year").cast(pl.String), pl.col("_mon").cast(pl.String), pl.col("_day"),
                              pl.col("_hms")], separator=" ")
        ts = wall_ns(text, "%Y %m %d %H:%M:%S", ctx.time_zone) + pl.col("_frac").str.pad_end(9, "0").cast(
            pl.Int64).fill_null(0)
        host, ident, ipid, msg, kern = _tail(g, 6, _rest(g))
        out = frame(df, ok=pl.col("_hms").is_not_null(), ts=ts, msg=msg, host=host, ident=ident, ipid=ipid,
                    kern=kern, meta=pl.col("line").str.contains(META))
        return _boot_marks(out)


class SyslogIsoParser(KernelLogParser):
    name = "syslog_iso"
    priority = 38
    clock_domain = CLOCK_WALL
    per_line_host = True
    description = "journalctl -k -o short-iso/short-iso-precise, rsyslog RFC 3339 files"
    grammar = ISO
    ident_group = 5

    def records(self, df, ctx):
        df = df.with_columns(_g=pl.col("line").str.extract_groups(ISO_HEAD))    # (see SyslogParser)
        g = pl.col("_g")
        when, frac, off = (g.struct.field(f"{i}") for i in (2, 3, 4))
        off = pl.when(off == "Z").then(pl.lit("+00:00")).otherwise(
            off.str.replace(r"^([+-]\d\d)(\d\d)$", "$1:$2"))
        dt = pl.concat_str([when, off]).str.to_datetime("%Y-%m-%dT%H:%M:%S%:z", strict=False, time_unit="ns",
                                                        time_zone="UTC")
        ts = dt.dt.epoch("ns") + frac.str.pad_end(9, "0").cast(pl.Int64).fill_null(0)
        host, ident, ipid, msg, kern = _tail(g, 5, _rest(g))
        out = frame(df, ok=when.is_not_null(), ts=ts, msg=msg, host=host, ident=ident, ipid=ipid, kern=kern,
                    meta=pl.col("line").str.contains(META))
        return _boot_marks(out)


class JournalMonotonicParser(KernelLogParser):
    name = "journal_monotonic"
    priority = 42
    clock_domain = CLOCK_BOOT
    per_line_host = True
    description = "journalctl -k -o short-monotonic: [seconds.micros] host kernel: (printk clock)"
    grammar = MONO
    ident_group = 4

    def records(self, df, ctx):
        df = df.with_columns(_g=pl.col("line").str.extract_groups(MONO_HEAD))   # (see SyslogParser)
        g = pl.col("_g")
        sec, frac = g.struct.field("2"), g.struct.field("3")
        host, ident, ipid, msg, kern = _tail(g, 4, _rest(g))
        out = frame(df, ok=sec.is_not_null(), ts=sec_usec_ns(sec, frac), msg=msg, host=host, ident=ident,
                    ipid=ipid, kern=kern, meta=pl.col("line").str.contains(META))
        return _boot_marks(out)


_J = {k: f"$.{k}" for k in ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_SOURCE_MONOTONIC_TIMESTAMP",
                             "_BOOT_ID", "MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "_TRANSPORT", "_HOSTNAME",
                             "_PID", "SYSLOG_PID")}


_STRUCT = pl.Struct({k: pl.String for k in _J})
# A line is decoded in one pass (``str.json_decode`` to a struct of the fields, instead of one
# ``json_path_match`` pass per field: 2.08 -> 0.33 CPU-s for this parser's records per 32 MB chunk) only
# where both give the same values: an object line with string values only (a number, null, array or
# object after any key -- byte-array MESSAGE, nested fields -- renders differently), no ``\u`` escape
# (a lone surrogate makes json_path_match give up on the whole line; an escaped key name) and each field
# key at most once (json_path_match takes the last of duplicate keys, the decode the first): checked as
# the field keys spelled in the line (an over-count: a value can spell one too) == the fields the decode
# found. Every other line goes through the per-field ``json_path_match`` path. Invalid JSON (a raw
# control character in a string, a broken line that still looks like an object) makes the decode fail
# for the chunk (it never accepts what json_path_match rejects): then lines with control characters are
# left out and the decode retried on halves of the rest until the bad lines are alone (``_decode_around``),
# and what does not decode takes the per-field path.
_NON_STRING = r'"\s*:\s*[^\s"]'
_CONTROL = r"[\x00-\x1f]"
_KEY_RE = '"(?:' + "|".join(_J) + ')"'


def _fields_slow(src: pl.DataFrame) -> pl.DataFrame:
    return src.select(pl.col("_i"), **{k: pl.col("line").str.json_path_match(p) for k, p in _J.items()})


def _decode(fast: pl.DataFrame) -> pl.DataFrame | None:
    line = pl.col("line")
    try:
        dec = fast.select(pl.col("_i"), line.str.json_decode(_STRUCT).alias("_d"))
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):   # (a panic is no Exception)
        return None
    # (the key count after the decode: an attempt that fails costs no regex pass)
    return dec.select(pl.col("_i"), fast["line"].str.count_matches(_KEY_RE).alias("_n"),
                      *[pl.col("_d").struct.field(k) for k in _J])


_FAILED_ROWS = 2     # rows in failed decode attempts of a chunk, at most this many times its lines


def _decode_around(fast: pl.DataFrame, failed_whole: bool = False) -> pl.DataFrame | None:
    """The decode of ``fast`` without the lines that make it fail: failing pieces are halved until
    each bad line is alone (a journal cut mid-record has one, its last: about twice the lines in
    failed attempts). Once the failed attempts have read ``_FAILED_ROWS`` times the lines (many bad
    lines), what is left undecoded is left out: the caller takes the per-field path for it. None
    when nothing decodes."""
    done, todo, failed = [], [fast], 0
    if failed_whole and fast.height > 1:        # (its decode was tried as it is: start with the halves)
        failed, todo = fast.height, [fast.slice(fast.height // 2), fast.slice(0, fast.height // 2)]
    while todo:
        part = todo.pop()
        dec = _decode(part) if failed < _FAILED_ROWS * fast.height else None
        if dec is not None:
            done.append(dec)
            continue
        failed += part.height
        if part.height > 1 and failed < _FAILED_ROWS * fast.height:
            half = part.height // 2
            todo += [part.slice(half), part.slice(0, half)]
    return pl.concat(done).sort("_i") if done else None


def _json_fields(lines: pl.Series) -> pl.DataFrame:
    """The ``_J`` fields of each line as ``json_path_match`` renders them (String, null where absent)."""
    src = pl.DataFrame({"line": lines}).with_row_index("_i")
    line = pl.col("line")
    ok = src.select((line.str.starts_with("{") & line.str.ends_with("}")
                     & ~line.str.contains("\\u", literal=True) & ~line.str.contains(_NON_STRING))
                    .fill_null(False)).to_series()
    dec = _decode(src.filter(ok)) if ok.any() else None
    if dec is None and ok.any():
        n = int(ok.sum())
        ok = ok & ~src["line"].str.contains(_CONTROL).fill_null(True)
        kept = int(ok.sum())
        dec = _decode_around(src.filter(ok), failed_whole=kept == n) if kept else None
        if dec is not None and len(dec) < kept:      # (the lines left out take the per-field path)
            ok = src["_i"].is_in(dec["_i"].implode())
    if dec is None:
        return _fields_slow(src).drop("_i")
    good = (dec["_n"] == dec.select(pl.sum_horizontal(pl.col(k).is_not_null() for k in _J)).to_series()
            ).fill_null(False)
    if len(dec) == len(src) and good.all():
        return dec.drop("_i", "_n")
    slow_idx = pl.concat([src.filter(~ok)["_i"], dec.filter(~good)["_i"]])
    slow = _fields_slow(src[slow_idx])
    return pl.concat([dec.filter(good).drop("_n"), slow]).sort("_i").drop("_i")


_KEYS = ["boot_id", "win"]
_BEST = ["off", "local", "lineno", "msg"]


def _least_delayed(cand: pl.DataFrame) -> pl.DataFrame:
    """Per (boot, window) the record with the smallest offset, the earliest line of equal ones."""
    return cand.group_by(_KEYS).agg(pl.col(c).sort_by(["off", "lineno"]).first() for c in _BEST)


class JournalJsonParser(KernelLogParser):
    name = "journal_json"
    priority = 45
    clock_domain = CLOCK_BOOT
    per_line_host = True
    description = "journalctl -o json: printk time + receive time pairs (clock anchors on every line)"

    grammar = r'^\{.*"__REALTIME_TIMESTAMP"\s*:\s*"\d+"'
    min_ratio = 0.8

    def prepare(self, ctx):
        self.boot_ids: list[str] = []
        # anchor candidates per chunk: every (boot, window, offset), and each window's least delayed record
        self.offs: list[pl.DataFrame] = []
        self.bests: list[pl.DataFrame] = []

    def records(self, df, ctx):
        parsed = _json_fields(df["line"]).with_columns(lineno=df["lineno"])
        real = parsed["__REALTIME_TIMESTAMP"].cast(pl.Int64, strict=False)
        src = parsed["_SOURCE_MONOTONIC_TIMESTAMP"].cast(pl.Int64, strict=False)
        mono = parsed["__MONOTONIC_TIMESTAMP"].cast(pl.Int64, strict=False)
        local_us = src.fill_null(mono)
        boot_id = parsed["_BOOT_ID"]
        prev = boot_id.shift(1)
        if self.boot_ids:
            prev = prev.fill_null(self.boot_ids[-1])
        mark = (boot_id != prev).fill_null(False)
        for b in boot_id.drop_nulls().unique(maintain_order=True).to_list():
            if b not in self.boot_ids:
                self.boot_ids.append(b)
        # anchor candidates: the least delayed record per (boot, window) (the first of equal ones)
        cand = pl.DataFrame({"lineno": parsed["lineno"], "boot_id": boot_id, "local": local_us * 1000,
                             "wall": real * 1000, "msg": parsed["MESSAGE"]}).drop_nulls(["boot_id", "local", "wall"])
        if len(cand):
            cand = cand.with_columns(off=pl.col("wall") - pl.col("local"),
                                     win=pl.col("local") // ANCHOR_WINDOW_NS)
            self.offs.append(cand.select(*_KEYS, "off"))
            self.bests.append(_least_delayed(cand))
        df = df.with_columns(_msg=parsed["MESSAGE"], _ts=local_us * 1000, _prio=parsed["PRIORITY"],
                             _ident=pl.coalesce(parsed["SYSLOG_IDENTIFIER"], pl.lit("journal")),
                             _kern=(parsed["_TRANSPORT"] == "kernel").fill_null(False),
                             _host=parsed["_HOSTNAME"],
                             _pid=pl.coalesce(parsed["SYSLOG_PID"], parsed["_PID"]).cast(pl.Int64, strict=False),
                             _mark=mark, _ok=real.is_not_null() & local_us.is_not_null())
        return frame(df, ok=pl.col("_ok"), ts=pl.col("_ts"), msg=pl.col("_msg").fill_null(""),
                     sev=pl.col("_prio"), kern=pl.col("_kern"), host=pl.col("_host"), ident=pl.col("_ident"),
                     ipid=pl.col("_pid"), boot_mark=pl.col("_mark"), cont=pl.lit(False))

    def done(self, ctx: ParseContext, engine: KernelEngine) -> None:
        sink = ctx.sink
        for i, b in enumerate(self.boot_ids):
            sink.fact("boot_id", b)
        n = 0
        if self.offs:
            offs = pl.concat(self.offs)
            best = _least_delayed(pl.concat(self.bests))
            # statistics.median of each window's offsets: the middle one, or the mean of the middle two
            mid = offs.group_by(_KEYS).agg(_n=pl.len(), _lo=pl.col("off").sort().get((pl.len() - 1) // 2),
                                           _hi=pl.col("off").sort().get(pl.len() // 2))
            rows = best.join(mid, on=_KEYS, how="left").rows(named=True)
            for r in sorted(rows, key=lambda r: (r["boot_id"], r["win"])):
                med = r["_lo"] if r["_n"] % 2 else (r["_lo"] + r["_hi"]) / 2
                unc = max(MIN_ANCHOR_UNC_NS, int(med - r["off"]))
                sink.add("anchors", name="journal", domain=CLOCK_BOOT, local_ns=r["local"],
                         wall_ns=r["local"] + r["off"], wall_is_utc=True, uncertainty_ns=unc,
                         boot_id=r["boot_id"], line=r["lineno"], text=(r["msg"] or "")[:200])
                n += 1
        ctx.attrs["anchors"] = n
        ctx.attrs["time_note"] = ("event times are the printk clock (_SOURCE_MONOTONIC_TIMESTAMP); "
                                  "__REALTIME_TIMESTAMP pairs are written as 'journal' anchors")


PARSERS = (SyslogParser, SyslogIsoParser, JournalMonotonicParser, JournalJsonParser)
