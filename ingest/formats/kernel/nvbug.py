"""nvidia-bug-report.log(.gz): its kernel-log sections.

``nvidia-bug-report.sh`` writes one text file of sections, each opened by a
line of 44 underscores, appending every section as its own gzip member
(multi-member gzip is transparent to every parser, see ``ingest.reader``).
Two sections are kernel logs (reference/FORMATS.md 7.1; the script's
``search_string_in_logs`` and ``append dmesg output`` blocks):

* ``dmesg:`` — the raw ``dmesg`` of the current boot: read with the raw
  dmesg grammar, on the boot clock (this source's clock).
* ``Scanning kernel log files for NVIDIA kernel messages:`` — lines grepped
  (``NVRM``, ``nvidia-``) from ``/var/log/messages``, ``kern.log``,
  ``kernel.log``, ``/var/log/dmesg`` and ``journalctl -b -0/-1/-2``, each
  sub-block opened by an indented ``  <file or command>:`` line. These are
  syslog lines in *local wall time without a year* and mostly from earlier
  boots, so they cannot be put on this source's boot clock: their events keep
  ``ts_raw_ns`` null and carry ``attrs.local_time`` (as printed),
  ``attrs.section`` and, for ``journalctl -b -N``, ``attrs.journal_boot``.
  Typed findings from them (an Xid of the previous boot) are still findings,
  just without a time.

Everything else (lspci, nvidia-smi -q, base64 blobs, ...) is not kernel log
and is skipped without issues. ``Date:`` and ``uname:`` of the prologue
become facts (``report_date``, ``hostname``, ``kernel``).
"""
from __future__ import annotations

import re

import polars as pl

from ...model import CLOCK_BOOT
from ...reader import Head
from ...registry import ParseContext
from .dmesg import RAW
from .journal import SHORT, ISO as SYSLOG_ISO
from .engine import KernelEngine, KernelLogParser, line_frames_to_the_cut
from .frames import frame, sec_usec_ns
from .dmesg import _prio_sev

SEPARATOR = "_" * 44
DMESG_HEADER = "dmesg:"
SCAN_HEADER = "Scanning kernel log files for NVIDIA kernel messages:"
SUB_HEADER = r"^  (\S.*):$"
_START = re.compile(r"^Start of NVIDIA bug report log file")


class NvidiaBugReportParser(KernelLogParser):
    name = "nvidia_bug_report"
    priority = 45
    clock_domain = CLOCK_BOOT
    description = "nvidia-bug-report.log(.gz): the dmesg and kernel-log sections"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = head.nonblank(40)
        return any(_START.match(ln) for ln in lines) and any(ln.strip() == SEPARATOR for ln in lines)

    def prepare(self, ctx: ParseContext) -> None:
        self.section = None          # 'dmesg' | 'scan' | None
        self.sub = None
        self.after_sep = False
        self.prologue = True
        self.separators = 0

    def records(self, df: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
        # Section state per line (headers are few: a Python pass over the header rows only).
        line = pl.col("line")
        is_sep = df["line"] == SEPARATOR
        nonblank = df["line"].str.strip_chars() != ""
        marks = df.filter(is_sep | nonblank).select("lineno", "line")
        sect, subs = {}, {}
        for lineno, text in marks.iter_rows():
            if text == SEPARATOR:
                self.after_sep, self.section, self.sub = True, None, None
                self.separators += 1
                self.prologue = self.separators < 2     # the prologue is the first section
                continue
            if self.prologue:
                self._prologue(ctx, lineno, text)
            if self.after_sep:
                self.after_sep = False
                if text == DMESG_HEADER:
                    self.section = "dmesg"
                elif text == SCAN_HEADER:
                    self.section = "scan"
                sect[lineno] = "header"
                continue
            if self.section == "scan":
                m = re.match(SUB_HEADER, text)
                if m:
                    self.sub = m.group(1)
                    sect[lineno] = "header"
                    continue
            if self.section:
                sect[lineno] = self.section
                subs[lineno] = self.sub
        keys = pl.DataFrame({"lineno": list(sect), "_sect": list(sect.values()),
                             "_sub": [subs.get(k) for k in sect]},
                            schema={"lineno": pl.Int64, "_sect": pl.String, "_sub": pl.String})
        df = df.join(keys, on="lineno", how="left")
        raw = line.str.extract_groups(RAW)
        prio, lvl, sec, frac, rmsg = (raw.struct.field(f"{i}") for i in (1, 3, 4, 5, 6))
        sy = line.str.extract_groups(SHORT)
        sy_time = pl.concat_str([sy.struct.field("1"), sy.struct.field("2"), sy.struct.field("3")], separator=" ")
        sy_iso = line.str.extract_groups(SYSLOG_ISO)
        in_dmesg = pl.col("_sect") == "dmesg"
        in_scan = pl.col("_sect") == "scan"
        scan_msg = pl.coalesce(sy.struct.field("8"), sy_iso.struct.field("7"))
        scan_ident = pl.coalesce(sy.struct.field("6"), sy_iso.struct.field("5"))
        scan_ok = in_scan & scan_msg.is_not_null()
        dm_ok = in_dmesg & sec.is_not_null()
        out = frame(df,
                    ok=dm_ok | scan_ok,
                    ts=pl.when(dm_ok).then(sec_usec_ns(sec, frac)).otherwise(pl.lit(None, pl.Int64)),
                    msg=pl.when(dm_ok).then(rmsg).otherwise(scan_msg),
                    sev=pl.when(dm_ok).then(pl.coalesce(_prio_sev(prio), lvl)),
                    kern=pl.when(scan_ok).then(scan_ident == "kernel").otherwise(True),
                    ident=pl.when(scan_ok).then(scan_ident),
                    ipid=pl.when(scan_ok).then(pl.coalesce(sy.struct.field("7"), sy_iso.struct.field("6"))),
                    # everything outside the two sections is skipped, not bad
                    meta=pl.col("_sect").is_null() | (pl.col("_sect") == "header")
                    | (in_scan & scan_msg.is_null()),
                    cont=in_dmesg & sec.is_null() & line.str.contains(r"^\s+\S"))
        self._scan_attrs = df.filter(in_scan).select(
            "lineno", pl.col("_sub").alias("section"),
            pl.coalesce(sy_time, sy_iso.struct.field("1")).alias("local_time"))
        return out

    def _prologue(self, ctx: ParseContext, lineno: int, text: str) -> None:
        if text.startswith("Date: "):
            ctx.sink.fact("report_date", text[6:].strip(), lineno)
        elif text.startswith("uname: "):
            parts = text[7:].split()
            if len(parts) >= 3:
                ctx.sink.fact("hostname", parts[1], lineno)
                ctx.sink.fact("kernel", parts[2], lineno)
                ctx.host = ctx.host or parts[1]
        elif text.startswith("nvidia-bug-report.sh Version:"):
            ctx.sink.fact("nvidia_bug_report_version", text.split(":", 1)[1].strip(), lineno)

    def parse(self, ctx: ParseContext) -> None:
        self.prepare(ctx)
        engine = _ScanAwareEngine(ctx, self)
        try:
            for df in line_frames_to_the_cut(ctx):
                engine.close_writer()       # records() writes the prologue's facts
                rec = self.records(df, ctx)
                engine.scan = {r[0]: (r[1], r[2]) for r in self._scan_attrs.iter_rows()}
                engine.feed(rec)
        except BaseException:
            engine.close_writer()
            raise
        engine.finish()
        ctx.attrs["sections"] = ("dmesg: events on the boot clock; 'Scanning kernel log files' lines: "
                                 "local wall time without a year, kept untimed with attrs.local_time")


class _ScanAwareEngine(KernelEngine):
    """Adds the grep-section context (file/command, printed local time) to events from that section."""
    scan: dict = {}

    def _typed_row(self, r, sig, attrs):
        row = super()._typed_row(r, sig, attrs)
        info = self.scan.get(r["lineno"])
        if info:
            row["attrs"]["section"], row["attrs"]["local_time"] = info
            m = re.match(r"journalctl -b (-\d+)", info[0] or "")
            if m:
                row["attrs"]["journal_boot"] = int(m.group(1))
        return row

    def _emit_plain(self, recs, typed_lines):
        if self.scan:
            info = pl.DataFrame({"lineno": list(self.scan), "section": [v[0] for v in self.scan.values()],
                                 "local_time": [v[1] for v in self.scan.values()]},
                                schema={"lineno": pl.Int64, "section": pl.String, "local_time": pl.String})
            recs = recs.join(info, on="lineno", how="left")
            recs = recs.with_columns(boot=pl.col("boot"), new_boot=pl.col("new_boot") & pl.col("section").is_null())
        super()._emit_plain(recs, typed_lines)


PARSERS = (NvidiaBugReportParser,)
