"""The kernel-log engine shared by every kernel-log format (dmesg, kmsg, journald, syslog, ...).

A format module only says how to split *its* line prefix (timestamp, priority,
host, identifier) from the message: :meth:`KernelLogParser.records` turns a
Polars frame of raw lines into the *record frame* below with vectorised regex
extraction. Everything after that is common and lives here.

Record frame columns (one row per input line)
---------------------------------------------
``lineno``, ``line`` (raw), ``ok`` (the line is a record of this format),
``cont`` (an untimed continuation of the previous record: an indented stack
line, a ``/dev/kmsg`` `` KEY=value`` line), ``meta`` (a line the format knows
and skips: journalctl's ``-- Boot … --``, section headers), ``ts`` (Int64 ns on
the source clock, null when the record carries none), ``sev`` (syslog level
0-7 as text, or a dmesg ``--decode`` level name), ``msg`` (the message
without its prefix), ``kern`` (a kernel message, as opposed to another
program's syslog line), ``host``, ``ident``, ``ipid`` (syslog identifier and
its pid), ``boot_mark`` (this record starts a new boot, known from the format:
kmsg sequence numbers, journald ``_BOOT_ID``, ``-- Boot`` lines).

Algorithm (per chunk of lines, memory bounded by a few chunks)
--------------------------------------------------------------
0. Pipelining: the next chunk is read and turned into records on a worker
   thread (``records_ahead``) while the engine works on this one, and each
   chunk's plain events frame (its subsystem names, step 5, computed by the
   engine's thread) is built and written to Parquet on another while the next
   is parsed; sink calls stay in their sequential order (see ``_write_events``).
1. Bad lines (neither record, continuation, meta nor blank) are counted as
   ``bad_line`` issues with their line numbers; parsing goes on.
2. Boots: a record starts a new boot when the format says so (``boot_mark``),
   when a boot-clock timestamp drops by more than ``BOOT_DROP_NS`` below the
   previous one (printk time restarts at 0 after a reboot), or, for wall-clock
   formats, at a ``Linux version`` banner that is not the first record. The
   boot index is a running sum carried across chunks; it is stored in
   ``attrs.boot`` of every event of boot >= 1 (and of every typed event), the
   first record of a new boot gets ``boot_restart: true``, and the facts
   ``boots`` and ``boot.<n>.first_line`` say where each boot starts.
3. Candidates: one pass of a literal alternation (``NEEDLES_RE``) over the
   messages with every signature's needle (stack needles are then tested on
   those hits only), one regex for the parts of OOM reports
   (task table rows, ``memory: usage``, ``Memory cgroup stats for``, the
   ``CPU: … PID: … Comm:`` line; only from the first message that can open a
   report, unless one is open, see ``candidates``), and the *report bodies*: a body is the run
   of consecutive stack-like lines (indented, ``Call Trace:``, registers,
   ``task:… state:``) that directly follows a line containing the needle of a
   ``report="stack"`` signature. Runs are found with a cumulative sum over
   "not a body line" (each non-body line opens a run); only runs opened by a
   stack head are kept. An open run is carried into the next chunk.
4. Only candidate rows reach Python, in line order, through a small state
   machine: signature classification (``signatures.classify``), OOM
   report assembly from ``invoked oom-killer`` to ``Killed process`` (victim,
   RSS, memcg path and usage, constraint, oom_score_adj, the task table, the
   triggering task, the report's span as ``dur_ns``), stack capture for
   hung tasks / lockups / Oops / panics (frames kept in ``attrs.stack``), and
   flood folding (a repeat of a signature with the same ``dedup`` values
   within ``FLOOD_WINDOW_NS`` stays an event but not a new finding; the first
   one counts the repeats).
5. Every record is one event (category ``kernel``, or ``syslog`` for other
   programs' lines in syslog files), written with one bulk ``add_frame`` per
   chunk (the subsystem ``name`` is cut with literal finds where a test shows
   that this equals ``SUBSYS``'s capture, once per distinct message head, see
   ``subsystem``; columns null on every row of the chunk are left to the sink,
   and a chunk of kernel messages only needs no per-row kernel/syslog choice); the typed
   events (``kind`` set, ``attrs.summary`` the human sentence,
   ``attrs.signature`` and ``attrs.signatures_version``) replace
   their plain rows and are written at the end, when their reports are
   complete. Event order in the store is therefore not file order; ``line``
   is.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field

import polars as pl

from ... import native
from ...lines import CHUNK_BYTES, ahead
from ...lines import line_frames as _line_frames
from ...model import CLOCK_BOOT
from ...reader import Head, size_hint
from ...registry import ParseContext, Parser
from ...sink import attrs_json
from . import signatures as ks
from .frames import NS, frame, scatter

BOOT_DROP_NS = 10 * NS          # printk time restarting by more than this = a reboot
MAX_STACK = 64                   # frames kept per report
MAX_TASKS = 200                  # task-table rows kept per OOM report
MAX_OOM_LINES = 5000             # an OOM report longer than this is closed without its kill line

SEVERITY = {"0": "emerg", "1": "alert", "2": "crit", "3": "error", "4": "warning", "5": "notice",
            "6": "info", "7": "debug", "emerg": "emerg", "alert": "alert", "crit": "crit", "err": "error",
            "warn": "warning", "notice": "notice", "info": "info", "debug": "debug"}
DECODE_LEVELS = "emerg|alert|crit|err|warn|notice|info|debug"

# The subsystem a message names first ("pcieport 0000:00:1c.1: ...", "NVRM: ...", "sched: ...").
SUBSYS = r"^([A-Za-z][\w.\-/ ]{0,38}?)(?: \([^)]{1,40}\))?(?:\[\d+\])?: "
# Lines that continue a report: indented frames, registers, trace markers.
BODY = (r"^(?:\s|Call Trace:|Call trace:|<TASK>|</TASK>|<IRQ>|</IRQ>|RIP:|RSP:|RAX:|RDX:|RBP:|R\d\d:|FS:|CS:|CR2:|"
        r"Code:|Stack:|Modules linked in:|Hardware name:|CPU: \d|task:|Workqueue:|Tainted:|"
        r"\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"|---\[ end|\? |\[<[0-9a-f]+>\]|"
        r"\S+ +[DRSTtXZI] [0-9a-f]{8,16} |rcu: |\(detected by|Sending NMI|NMI backtrace|Kernel Offset:|PGD |IP: )")
_BODY = (pl.col("msg").str.contains(BODY) | pl.col("cont")).alias("body")
# Below this many rows a chunk's report bodies are found by testing every row: one round of the
# walk (``KernelLogParser._in_body``) costs about as much as the body test on ~13k rows, and a
# stack takes a few dozen rounds.
WALK_MIN_ROWS = 100_000
STACK_NEEDLES = tuple(dict.fromkeys(s.needle for s in ks.SIGNATURES if s.report == "stack"))
# the needles of the messages that open an OOM report (see candidates)
OOM_START_NEEDLES = tuple(dict.fromkeys(s.needle for s in ks.SIGNATURES if s.id in ("oom.invoked", "oom.select")))
# every signature needle in one regex: a literal alternation (SIMD prefilter), faster than contains_any
NEEDLES_RE = "|".join(re.escape(n) for n in ks.NEEDLES)
_META = re.compile(r"^-- .* --$")      # journalctl's own lines (-- Boot … --, -- No entries --)
OOM_PART = (r"^(?:CPU: \d+ .*PID: \d+ .*Comm: |memory: usage |memory\+swap: usage |Memory cgroup stats for |"
            r"Tasks state|\[\s*pid\s*\]|\[\s*\d+\]\s+-?\d+\s+\d+\s+\d+)")
_CPU_LINE = re.compile(r"^CPU: (?P<cpu>\d+) (?:UID: \d+ )?PID: (?P<pid>\d+) Comm: (?P<comm>\S+)")
_MEM_USAGE = re.compile(r"^(?P<what>memory|memory\+swap): usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB, "
                        r"failcnt (?P<failcnt>\d+)")
_MEMCG = re.compile(r"^Memory cgroup stats for (?P<path>.*?):?$")
_TASK_HDR = re.compile(r"^\[\s*pid\s*\]\s+(?P<cols>.*)$")
_TASK_ROW = re.compile(r"^\[\s*(?P<pid>\d+)\]\s+(?P<rest>.*)$")
_INT = re.compile(r"-?\d+")
# the record columns the state machine reads (a row dict per candidate line); lineno, line and msg
# come first: _python_pass reads them by position
_ROW_COLS = ("lineno", "line", "msg", "ts", "sev", "kern", "host", "ipid", "boot", "new_boot", "body", "hit",
             "oom_part", "stack_head")
_FRAME = re.compile(r"^\s*(?:\[<[0-9a-f]+>\]\s*)?(?P<q>\? )?(?P<fn>[A-Za-z_.][\w.]*\+0x[0-9a-f]+/0x[0-9a-f]+)")


def detect_ratio(head: Head, pattern: re.Pattern, min_ratio: float = 0.6, limit: int = 300,
                 skip: re.Pattern | None = None) -> tuple[int, int]:
    """(matching lines, considered lines) of the head, indented continuation lines not considered."""
    hits = n = 0
    for ln in head.nonblank(limit):
        if skip and skip.match(ln):
            continue
        if pattern.match(ln):
            hits += 1
            n += 1
        elif not ln[:1].isspace():
            n += 1
    return hits, n


def grammar_detect(head: Head, pattern: re.Pattern, min_ratio: float = 0.6, min_hits: int = 1,
                   skip: re.Pattern | None = None) -> bool:
    hits, n = detect_ratio(head, pattern, skip=skip)
    return n > 0 and hits >= min_hits and hits / n >= min_ratio


def _keep(df: pl.DataFrame, mask: pl.Series) -> pl.DataFrame:
    """``df.filter(mask)``, without copying when every row stays (the common case)."""
    return df if mask.all() else df.filter(mask)


def subsystem(msg: pl.Series) -> pl.Series:
    """``msg.str.extract(SUBSYS, 1)``, the same values: read by the compiled reader
    (:func:`ingest.native.subsys`), the regex on the messages it leaves (not ASCII)."""
    code, end, left = native.subsys(native.texts(msg))
    named = pl.Series("_c", code) == 1
    out = pl.DataFrame([msg.alias("m"), pl.Series("e", end)]).select(
        pl.when(named).then(pl.col("m").str.slice(0, pl.col("e"))).alias("subsys"))["subsys"]
    if left:
        out = scatter(pl.Series("_c", code) == native.UNSURE, out, lambda m: m.str.extract(SUBSYS, 1), msg)
    return out.alias("subsys")


def candidates(rec: pl.DataFrame, oom_open: bool = True) -> pl.DataFrame:
    """The record frame with the per-row candidate columns: ``hit`` (a signature needle),
    ``oom_part`` and ``stack_head``.

    A report part is only read while an OOM report is open (``KernelEngine._oom_part``), and only an
    ``oom.invoked`` or ``oom.select`` message opens one: unless one is open at the chunk's start
    (``oom_open``), the test runs from the first hit holding such a needle (none: not at all)."""
    ok, kern, msg = pl.col("ok"), pl.col("kern"), pl.col("msg")
    rec = rec.with_columns((kern & ok & msg.str.contains(NEEDLES_RE)).alias("hit"))
    hit = rec["hit"]
    hits = hit.arg_true()
    part = kern & ok & msg.str.contains(OOM_PART)
    if oom_open:
        rec = rec.with_columns(part.alias("oom_part"))
    else:
        starts = rec["msg"].gather(hits).str.contains_any(list(OOM_START_NEEDLES)) if len(hits) else hits
        at = int(hits[int(starts.arg_true()[0])]) if len(hits) and starts.any() else len(rec)
        tail = rec.slice(at).select(part.alias("oom_part"))["oom_part"]
        rec = rec.with_columns(pl.repeat(False, at, eager=True, dtype=pl.Boolean).append(tail).alias("oom_part"))
    # stack heads are hits with a stack signature's needle: tested on the hit rows only
    return rec.with_columns(scatter(hit, hit, lambda m: m.str.contains_any(list(STACK_NEEDLES)), rec["msg"])
                            .alias("stack_head"))


@dataclass
class _Report:
    row: dict                      # the typed event being built
    last_line: int
    kind: str                      # 'stack'
    stack: list = field(default_factory=list)


class KernelEngine:
    """Turns record frames into events, typed findings, boots and issues (see module doc)."""

    def __init__(self, ctx: ParseContext, parser: "KernelLogParser"):
        self.ctx = ctx
        self.sink = ctx.sink
        self.parser = parser
        self.boot_clock = parser.clock_domain == CLOCK_BOOT and not parser.untimed
        self.boot = 0
        self.last_ts: int | None = None
        self.seen_record = False
        self.typed: list[dict] = []
        self.open_stack: _Report | None = None
        self.carry_stack_run = False
        self.oom: dict | None = None
        self.floods: dict[tuple, dict] = {}
        self.records = 0
        self.hosts: set[str] = set()
        self.kernel_version: str | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    # -- the chunk's plain events are written while the next chunk is parsed -----------------
    def _write_events(self, job) -> None:
        """Run ``job`` (build one chunk's events frame and hand it to the sink) on a worker thread:
        Polars and Parquet writing release the GIL. Every other sink call waits for it first
        (``_join_write``) or is queued behind it (``_after_writes``), so the sink sees the same calls
        in the same order as without the thread."""
        self._join_write()
        self._after_writes(job)

    def _after_writes(self, job) -> None:
        """Run ``job`` (sink calls) on the writer thread after the jobs handed to it before, without
        waiting for them (one worker: in order); not at all if the one before failed (its error is
        raised by the next ``_join_write``, as if the job had waited for it)."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="kernel-events")
        prev = self._pending[-1] if self._pending else None

        def run() -> None:
            err = prev.exception() if prev is not None else None
            if err is not None:
                raise err
            job()
        self._pending.append(self._writer.submit(run))

    def _join_write(self) -> None:
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()            # re-raises what the write raised (the first failure)

    def close_writer(self) -> None:
        try:
            self._join_write()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None

    # -- per chunk -----------------------------------------------------------------------
    def feed(self, df: pl.DataFrame) -> None:
        sink = self.sink
        # the blank-line test only where a line is neither record, continuation nor meta (rare)
        is_bad = ~df["ok"] & ~df["cont"] & ~df["meta"]
        if is_bad.any():
            is_bad = scatter(is_bad, is_bad, lambda lines: ~lines.str.contains(r"^\s*$"), df["line"])
        flagged = is_bad | df["bad_utf8"]
        if flagged.any():
            issues = df.filter(flagged).with_columns(_bad=is_bad.filter(flagged))
            self._join_write()
            room = sink.issue_room()
            for row in issues.head(room).iter_rows(named=True):
                if row["bad_utf8"]:
                    sink.issue("undecodable", "line is not valid UTF-8; bad bytes replaced", row["lineno"],
                               row["line"][:200])
                if row["_bad"]:
                    sink.issue("bad_line", f"not a {self.parser.name} record", row["lineno"], row["line"])
            rest = issues.slice(room)
            sink.issues_total += int(rest["_bad"].sum()) + int(rest["bad_utf8"].sum())
        rec = _keep(df, df["ok"] | df["cont"])
        if len(rec) == 0:
            return
        rec = candidates(rec, self.oom is not None)
        rec = self._boots(rec)
        self._python_pass(rec)

    def _boots(self, rec: pl.DataFrame) -> pl.DataFrame:
        ok = pl.col("ok")
        starts = pl.col("boot_mark")
        if self.boot_clock:
            prev = pl.col("ts").forward_fill().shift(1)
            if self.last_ts is not None:
                prev = prev.fill_null(self.last_ts)
            starts = starts | (pl.col("ts") < prev - BOOT_DROP_NS).fill_null(False)
            # the printk banner at boot (first second) after later records: a reboot even if time went up
            # (the text test on the rows of a first second only)
            early = (rec["ts"] < NS).fill_null(False)
            if early.any():
                banner = scatter(early, early, lambda m: m.str.starts_with("Linux version "), rec["msg"])
                starts = starts | (banner & (pl.col("ts") < NS) & (prev >= pl.col("ts")).fill_null(False))
        else:
            starts = starts | pl.col("msg").str.starts_with("Linux version ")
        starts = starts & ok
        if not self.seen_record:   # the first record of the file never starts a second boot
            first_ok = pl.col("ok").cast(pl.Int64).cum_sum() == 1
            starts = starts & ~(first_ok & ok)
        rec = rec.with_columns(starts.fill_null(False).alias("new_boot"))
        rec = rec.with_columns((pl.col("new_boot").cast(pl.Int64).cum_sum() + self.boot).alias("boot"))
        firsts = rec.filter(pl.col("new_boot")).select("lineno", "boot").rows()
        if firsts:   # (queued behind the previous chunk's events: a log with many boots keeps its overlap)
            fact = self.sink.fact
            self._after_writes(lambda: [fact(f"boot.{b}.first_line", n, n) for n, b in firsts])
        self.boot = int(rec["boot"][-1])
        ts, nulls = rec["ts"], rec["ts"].null_count()
        if nulls < len(ts):   # the chunk's last time (copying the column only when it holds nulls)
            self.last_ts = int(ts[-1] if nulls == 0 else ts.drop_nulls()[-1])
        if bool(rec["ok"].any()):
            self.seen_record = True
        return rec

    def _python_pass(self, rec: pl.DataFrame) -> None:
        """Classify candidates, assemble reports, emit the chunk's plain events.

        Report bodies: every non-body line (or stack head) opens a run; a run is a report body
        when its opening line is a stack head -- a forward fill, no joins.
        """
        heads = rec["stack_head"].arg_true()
        if len(heads) or self.carry_stack_run:
            found = self._in_body(rec, heads)
            if found is not None:
                rec = rec.with_columns(found.alias("_in_body"))
                in_body = pl.col("_in_body")
            else:                    # (long runs: the body test on every row)
                rec = rec.with_columns(_BODY)
                opener = ~pl.col("body") | pl.col("stack_head")
                rec = rec.with_columns(pl.when(opener).then(pl.col("stack_head")).otherwise(None).forward_fill()
                                       .fill_null(self.carry_stack_run).alias("in_report"))
                self.carry_stack_run = bool(rec["in_report"][-1])
                in_body = pl.col("body") & ~pl.col("stack_head") & pl.col("in_report")
        else:
            in_body = pl.lit(False)
        sel = rec.filter(pl.col("hit") | pl.col("oom_part") | pl.col("stack_head") | in_body)
        if "body" not in sel.columns:    # no report body in this chunk: the test on the candidates only
            sel = sel.with_columns(_BODY)
        sel = sel.select(*_ROW_COLS, in_body.alias("_body"))
        # most candidates of a crash-dense log are report bodies, which only need their line number
        # and text: they come to Python as two lists (not as rows of every column) and are merged
        # in line order with the other candidates
        plain_body = sel["_body"] & ~(sel["hit"] | sel["oom_part"] | sel["stack_head"])
        b_lines: list[int] = []
        b_text: list[str | None] = []
        if plain_body.any():
            msg = pl.col("msg")
            bodies = sel.filter(plain_body).select(
                "lineno", pl.when(msg.is_null() | (msg == "")).then(pl.col("line")).otherwise(msg).alias("t"))
            b_lines, b_text = bodies["lineno"].to_list(), bodies["t"].to_list()
            sel = sel.filter(~plain_body)
        typed_lines: set[int] = set()
        cols = sel.columns
        j, nb = 0, len(b_lines)
        for v in [*sel.rows(), None]:
            end = nb if v is None else bisect_left(b_lines, v[0], j)
            if j < end:
                self._bodies(b_lines, b_text, j, end)
                j = end
            if v is None:
                break
            t = self._row(dict(zip(cols, v)))
            if t is not None:
                typed_lines.add(t)
        self._emit_plain(_keep(rec, rec["ok"]), typed_lines)

    def _in_body(self, rec: pl.DataFrame, heads: pl.Series, most: int = 64) -> pl.Series | None:
        """The report body rows of the chunk (what the forward fill in ``_python_pass`` gives),
        found by walking forward from each stack head (and from row 0 when a run is carried in)
        one row per round, the body test on the rows reached only (a stack is a few dozen lines;
        the test on every row was most of this step). Sets ``carry_stack_run``. None when a run is
        longer than ``most`` rows, or the chunk has fewer than :data:`WALK_MIN_ROWS` rows (the
        caller then tests every row)."""
        n = len(rec)
        if n < WALK_MIN_ROWS:
            return None
        msg, cont, head = rec["msg"], rec["cont"], rec["stack_head"]
        idx = heads + 1
        if self.carry_stack_run:
            idx = pl.Series([0], dtype=idx.dtype).append(idx)
        idx = idx.filter(idx < n)
        # The compiled walk (native.body_walk) reads BODY on ASCII lines; a chunk where a walk
        # reaches another line takes the rounds below (one row of every walk per round).
        got = native.body_walk(native.texts(msg), cont.fill_null(False).cast(pl.UInt8).rechunk().to_arrow(),
                               head.fill_null(True).cast(pl.UInt8).rechunk().to_arrow(), idx.to_list(), most)
        if not isinstance(got, int):
            out = pl.Series(got)
            self.carry_stack_run = bool(head[-1]) or bool(out[-1])
            return out
        if got == native.BODY_LONG:
            return None
        found = []
        for _ in range(most):
            if len(idx) == 0:
                break
            ok = (msg.gather(idx).str.contains(BODY) | cont.gather(idx)) & ~head.gather(idx)
            idx = idx.filter(ok)
            found.append(idx)
            idx = (idx + 1).filter(idx + 1 < n)
        else:
            if len(idx):
                return None
        rows = pl.concat(found) if found else heads.clear()
        self.carry_stack_run = bool(head[-1]) or (len(rows) > 0 and int(rows.max()) == n - 1)
        out = pl.repeat(False, n, eager=True, dtype=pl.Boolean)
        return out.scatter(rows, True) if len(rows) else out

    # -- state machine ---------------------------------------------------------------------
    def _body(self, lineno: int, msg: str | None, line: str) -> None:
        rep = self.open_stack
        if rep is None or lineno != rep.last_line + 1:
            return
        rep.last_line = lineno
        if len(rep.stack) < MAX_STACK:
            rep.stack.append(msg.strip() if msg else line.strip())

    def _bodies(self, lines: list[int], texts: list[str], j: int, end: int) -> None:
        """``_body`` of the report body lines ``lines[j:end]`` (consecutive candidates, in line
        order, with no other candidate between them), given their texts (the message, or the line
        where it has none)."""
        rep = self.open_stack
        if rep is None:
            return
        last, stack = rep.last_line, rep.stack
        for k in range(j, end):
            if lines[k] != last + 1:
                break
            last = lines[k]
            if len(stack) < MAX_STACK:
                stack.append(texts[k].strip())
        rep.last_line = last

    def _close_stack(self) -> None:
        rep = self.open_stack
        if rep is None:
            return
        found = [m for m in (_FRAME.match(s) for s in rep.stack) if m]
        reliable = [m.group("fn") for m in found if not m.group("q")]
        # old kernels print every frame as "? fn" (unreliable): keep them then, rather than nothing
        frames = reliable or [m.group("fn") for m in found]
        rep.row["attrs"]["stack"] = rep.stack
        if frames:
            rep.row["attrs"]["frames"] = frames
        self.open_stack = None

    def _row(self, r: dict) -> int | None:
        """Handle one candidate record; returns its line when it became a typed event."""
        if self.open_stack is not None and r["lineno"] != self.open_stack.last_line + 1:
            self._close_stack()
        msg = r["msg"] or ""
        if self.oom is not None and r.get("boot") != self.oom.get("boot"):
            self._cut_oom()            # the machine rebooted inside the report
        if r["oom_part"]:
            self._oom_part(r, msg)
        if not r["hit"]:
            if self.open_stack is not None and r["lineno"] == self.open_stack.last_line + 1 and r.get("body"):
                self._body(r["lineno"], r["msg"], r["line"])
            return None
        found = ks.classify(msg)
        if found is None:
            return None
        sig, attrs = found
        if self.open_stack is not None:
            self._close_stack()
        row = self._typed_row(r, sig, attrs)
        if sig.id == "oom.invoked":
            self._cut_oom()
            self.oom = {"start_line": r["lineno"], "start_ts": r["ts"], "boot": r["boot"], "invoked_row": row,
                        "invoked": {k: attrs[k] for k in ("comm", "gfp_mask", "order", "oom_score_adj") if k in attrs}}
        elif sig.id == "oom.summary":
            fields = {}
            for part in attrs.get("fields", "").split(","):
                k, _, v = part.partition("=")
                if k and v:
                    fields[k.strip()] = v
            row["attrs"].pop("fields", None)
            row["attrs"].update(fields)
            if self.oom is not None:
                self.oom["summary"] = fields
        elif sig.id == "oom.select":
            if self.oom is None:
                self.oom = {"start_line": r["lineno"], "start_ts": r["ts"], "boot": r["boot"]}
            self.oom["select"] = attrs
        elif sig.id == "oom.kill":
            self._finish_oom(row, r)
        if sig.report == "stack":
            self.open_stack = _Report(row=row, last_line=r["lineno"], kind="stack")
        self._flood(sig, row)
        self.typed.append(row)
        return r["lineno"]

    def _typed_row(self, r: dict, sig: ks.Signature, attrs: dict) -> dict:
        a = dict(attrs)
        a.pop("scope_text", None) if sig.id != "oom.kill" else None
        if sig.id == "nvidia.xid":
            mn, meaning, action = ks.xid_info(a["xid"])
            a.update(xid_name=mn, xid_meaning=meaning, xid_action=action)
        a["signature"] = sig.id
        a["signatures_version"] = ks.VERSION
        if r.get("boot"):
            a["boot"] = r["boot"]
        if r.get("new_boot"):
            a["boot_restart"] = True
        if sig.proposed:
            a["proposed_kind"] = sig.proposed
        pid = a.get("pid") if isinstance(a.get("pid"), int) else a.get("victim_pid")
        row = {"ts_raw_ns": r["ts"], "category": "kernel", "name": sig.name, "kind": sig.proposed or sig.kind,
               "severity": SEVERITY.get(r["sev"]) if r.get("sev") else None, "line": r["lineno"],
               "text": r["line"], "pid": pid, "host": r.get("host") if self.parser.per_line_host else None,
               "attrs": a}
        if r.get("ipid") is not None and not r.get("kern"):
            row["pid"] = r["ipid"]
        return row

    def _oom_part(self, r: dict, msg: str) -> None:
        st = self.oom
        if st is None:
            return
        if r["lineno"] - st["start_line"] > MAX_OOM_LINES:
            self.oom = None            # (its kill line may still come: not cut here)
            return
        m = _CPU_LINE.match(msg)
        if m:
            st.setdefault("trigger", {"pid": int(m["pid"]), "comm": m["comm"], "cpu": int(m["cpu"])})
            return
        m = _MEM_USAGE.match(msg)
        if m:
            key = "memcg_usage" if m["what"] == "memory" else "memcg_swap_usage"
            st[key] = {"usage_kb": int(m["usage"]), "limit_kb": int(m["limit"]), "failcnt": int(m["failcnt"])}
            return
        m = _MEMCG.match(msg)
        if m:
            st.setdefault("memcg", m["path"])
            return
        m = _TASK_HDR.match(msg)
        if m:
            st["task_cols"] = m["cols"].split()
            st["tasks"] = []
            return
        m = _TASK_ROW.match(msg)
        if m and "task_cols" in st and len(st["tasks"]) < MAX_TASKS:
            cols = st["task_cols"]
            vals = m["rest"].split(None, len(cols) - 1)
            if len(vals) == len(cols):
                t = {"pid": int(m["pid"])}
                for c, v in zip(cols, vals):
                    t[c] = int(v) if _INT.fullmatch(v) else v
                st["tasks"].append(t)

    def _cut_oom(self) -> None:
        """An OOM report that ends before its kill line (a pasted excerpt, a reboot, a lost tail): the
        killer still ran. Its ``invoked oom-killer`` line becomes the ``oom_kill`` finding, with
        what the report said so far and no victim."""
        st, self.oom = self.oom, None
        row = (st or {}).get("invoked_row")
        if row is None or row["kind"]:
            return
        a = row["attrs"]
        for k in ("memcg", "memcg_usage", "memcg_swap_usage", "trigger", "tasks"):
            if k in st:
                a[k] = st[k]
        summ = st.get("summary") or {}
        for k in ("constraint", "oom_memcg", "task_memcg"):
            if k in summ:
                a[k] = summ[k]
        a["scope"] = "memcg" if a.get("constraint") == "CONSTRAINT_MEMCG" or "memcg_usage" in a else "unknown"
        a["scope_name"] = "memory-cgroup OOM killer" if a["scope"] == "memcg" else "OOM killer"
        a["victim_unknown"] = "the report ends before the line that names the process it killed"
        row["kind"] = "oom_kill"
        row["pid"] = None
        a["summary"] = (f"The {a['scope_name']} was invoked by {a.get('comm', '?')}; the report ends before it "
                        f"names the process it killed")

    def _finish_oom(self, row: dict, r: dict) -> None:
        a = row["attrs"]
        st = self.oom
        scope_text = a.pop("scope_text", None)
        uid = a.pop("uid_old", None) or a.pop("uid2", None)
        if uid is not None and "uid" not in a:
            a["uid"] = uid
        a.pop("uid2", None)
        if st is not None and (st.get("boot") != r.get("boot")):
            st = None
        sel = (st or {}).get("select")
        if st is not None and sel and sel.get("victim_pid") != a["victim_pid"] and not st.get("invoked"):
            st = None              # a selection of another process: not this kill's report
        if st is not None:
            if sel and not scope_text and sel.get("victim_pid") == a["victim_pid"]:
                scope_text = sel.get("scope_text")
            summ = st.get("summary") or {}
            for k in ("constraint", "oom_memcg", "task_memcg", "cpuset", "mems_allowed"):
                if k in summ:
                    a[k] = summ[k]
            if "global_oom" in summ or any(k == "global_oom" for k in summ):
                a["global_oom"] = True
            for k in ("memcg", "memcg_usage", "memcg_swap_usage", "trigger", "tasks"):
                if k in st:
                    a[k] = st[k]
            if st.get("invoked"):
                a["invoked"] = st["invoked"]
                frames = st["invoked_row"]["attrs"].get("frames")
                if frames:
                    a["frames"] = frames
            a["report_first_line"] = st["start_line"]
            if st.get("start_ts") is not None and r["ts"] is not None:
                row["dur_ns"] = max(0, r["ts"] - st["start_ts"])
            self.oom = None
        if scope_text:
            a["scope"] = "memcg" if scope_text.startswith("Memory cgroup") else "global"
        elif a.get("constraint") == "CONSTRAINT_MEMCG":
            a["scope"] = "memcg"
        elif a.get("constraint") in ("CONSTRAINT_NONE", "CONSTRAINT_CPUSET", "CONSTRAINT_MEMORY_POLICY"):
            a["scope"] = "global"
        else:
            a["scope"] = "unknown"
        a["scope_name"] = {"memcg": "memory-cgroup OOM killer", "global": "kernel OOM killer"}.get(
            a["scope"], "OOM killer")
        row["pid"] = a["victim_pid"]

    def _flood(self, sig: ks.Signature, row: dict) -> None:
        a = row["attrs"]
        if sig.kind is not None:
            a["summary"] = ks.summarize(sig, a)
            if sig.id == "oom.kill":
                a["summary"] = _oom_summary(a)
        else:
            a["summary"] = ks.summarize(sig, a)
        if sig.kind is None or not sig.dedup:
            return
        key = (sig.id, a.get("boot", 0)) + tuple(str(a.get(k)) for k in sig.dedup)
        head = self.floods.get(key)
        ts = row["ts_raw_ns"]
        if head is not None and ts is not None and head["last_ts"] is not None \
                and 0 <= ts - head["last_ts"] <= ks.FLOOD_WINDOW_NS:
            head["row"]["attrs"]["repeats"] = head["row"]["attrs"].get("repeats", 0) + 1
            head["last_ts"] = ts
            a["repeat_of_line"] = head["row"]["line"]
            row["kind"] = None
            return
        self.floods[key] = {"row": row, "last_ts": ts}

    # -- output ------------------------------------------------------------------------------
    def _emit_plain(self, recs: pl.DataFrame, typed_lines: set[int]) -> None:
        self.records += len(recs)
        if len(recs) == 0 or len(typed_lines) >= len(recs):   # typed lines are some of these rows
            return
        # columns that are null on every row are left out (the sink writes them as nulls), and a chunk of
        # kernel messages only (dmesg) needs no per-row choice between kernel and syslog values
        all_kern = bool(recs["kern"].all())
        boots = bool(recs["new_boot"].any()) or bool((recs["boot"] > 0).any())
        # attrs only where the engine learnt something: none in the first boot (built by the job)
        boot_attr = pl.col("_boot_attrs") if boots else None
        plain = getattr(self.parser, "plain_category", None)
        if plain:      # a reader whose lines are not all the kernel's (plain text): one name for them
            category, name = pl.lit(plain), pl.lit("line")
        elif all_kern:
            category, name = pl.lit("kernel"), pl.col("subsys").fill_null("kernel")
        else:
            category = pl.when(pl.col("kern")).then(pl.lit("kernel")).otherwise(pl.lit("syslog"))
            name = pl.when(pl.col("kern")).then(pl.col("subsys").fill_null("kernel")).otherwise(
                pl.col("ident").fill_null("syslog"))
        cols = [pl.col("ts").alias("ts_raw_ns"), category.alias("category"), name.alias("name")]
        if recs["sev"].null_count() < len(recs):
            cols.append(pl.col("sev").replace_strict(SEVERITY, default=None, return_dtype=pl.String).alias("severity"))
        cols += [pl.col("lineno").alias("line"), pl.col("line").alias("text")]
        if not all_kern and recs["ipid"].null_count() < len(recs):
            cols.append(pl.when(pl.col("kern")).then(pl.lit(None, pl.Int64)).otherwise(pl.col("ipid")).alias("pid"))
        if "local_time" in recs.columns:   # untimed lines that still say when (nvidia-bug-report grep section)
            ctx_attr = pl.when(pl.col("local_time").is_not_null()).then(
                pl.struct("section", "local_time").struct.json_encode())
            boot_attr = ctx_attr if boot_attr is None else pl.coalesce(ctx_attr, boot_attr)
        if boot_attr is not None:
            cols.append(boot_attr.alias("attrs"))
        if self.parser.per_line_host:
            cols.append(pl.col("host"))
        keep = ~recs["lineno"].is_in(list(typed_lines)) if typed_lines else None
        # the subsystem names here, on the engine's thread, while the writer still writes the previous
        # chunk: the Parquet write makes the writer the busiest of the three threads
        r = recs if "subsys" in recs.columns else recs.with_columns(subsystem(recs["msg"]))

        def job() -> None:
            # on the writer thread: the events frame, then the typed rows are left out (filtering
            # the narrow frame copies less than filtering the record frame)
            w = r.with_columns(_boot_attrs(r["boot"], r["new_boot"])) if boots else r
            out = w.select(cols)
            self.sink.add_frame("events", out if keep is None else out.filter(keep))

        self._write_events(job)
        if self.parser.per_line_host:
            hosts = recs["host"] if keep is None else recs["host"].filter(keep)
            self.hosts.update(h for h in hosts.unique().to_list() if h)
        if self.kernel_version is None:
            banner = recs["kern"] & recs["msg"].str.starts_with("Linux version ")
            first = (banner if keep is None else banner & keep).arg_true()
            if len(first):
                self.kernel_version = recs["msg"][first[0]].split()[2]
                self._join_write()
                self.sink.fact("kernel", self.kernel_version, int(recs["lineno"][first[0]]))

    def finish(self) -> None:
        try:
            self._close_stack()
            self._cut_oom()
            for row in self.typed:
                n = row["attrs"].get("repeats")
                if n and row["kind"]:
                    row["attrs"]["summary"] += f" (repeated {n} more time{'s' if n > 1 else ''}, each within " \
                                               f"{ks.FLOOD_WINDOW_NS // NS} s of the previous)"
            # (the typed rows are final now: their attrs are encoded while the writer thread still
            # writes the last chunk's events, and go to the sink after them)
            typed = sorted(({**row, "attrs": attrs_json(row["attrs"])} for row in self.typed),
                           key=lambda r: r["line"])
        finally:
            self.close_writer()
        self.sink.add_rows("events", typed)
        self.sink.fact("boots", self.boot + 1 if self.seen_record else 0)
        self.sink.fact("kernel_signatures_version", ks.VERSION)
        self.ctx.attrs["boots"] = self.boot + 1 if self.seen_record else 0
        self.ctx.attrs["signatures_version"] = ks.VERSION
        typed = [r for r in self.typed if r["kind"]]
        if typed:
            counts: dict[str, int] = {}
            for r in typed:
                counts[r["kind"]] = counts.get(r["kind"], 0) + 1
            self.ctx.attrs["findings"] = counts
        if len(self.hosts) == 1 and not self.ctx.host:
            self.ctx.host = next(iter(self.hosts))


def _boot_attrs(boot: pl.Series, new_boot: pl.Series, most: int = 100_000) -> pl.Series:
    """The plain events' attrs of a chunk: ``{"boot":N}`` from the second boot on, with
    ``"boot_restart":true`` on each boot's first record, null in the first boot. A chunk's boots are
    a short run of numbers, so the text is made once per number and gathered (formatting every row's
    number was most of the events frame of a log with many boots); more than ``most`` of them, per row."""
    lo, hi = int(boot.min()), int(boot.max())
    if hi - lo >= most:
        return boot.to_frame("boot").with_columns(new_boot=new_boot).select(
            pl.when(pl.col("new_boot")).then(pl.format('{{"boot":{},"boot_restart":true}}', pl.col("boot")))
            .when(pl.col("boot") > 0).then(pl.format('{{"boot":{}}}', pl.col("boot")))
            .otherwise(pl.lit(None, pl.String)).alias("_boot_attrs"))["_boot_attrs"]
    text = pl.Series("_boot_attrs", [f'{{"boot":{k}}}' if k > 0 else None for k in range(lo, hi + 1)],
                     dtype=pl.String)
    out = text.gather(boot - lo)
    idx = new_boot.arg_true()
    if len(idx):
        out = out.scatter(idx, pl.Series([f'{{"boot":{k},"boot_restart":true}}' for k in boot.gather(idx).to_list()],
                                         dtype=pl.String))
    return out.alias("_boot_attrs")


def _kib(n) -> str:
    if not isinstance(n, int):
        return "?"
    return f"{n / 1024 / 1024:.2f} GiB" if n >= 1024 * 1024 else (f"{n / 1024:.1f} MiB" if n >= 1024 else f"{n} KiB")


def _oom_summary(a: dict) -> str:
    s = f"The {a['scope_name']} killed pid {a['victim_pid']} ({a.get('victim_comm')})"
    if "anon_rss_kb" in a:
        s += f", anon-rss {_kib(a['anon_rss_kb'])}"
    where = a.get("memcg") or a.get("oom_memcg")
    if where:
        s += f" in memory cgroup {where}"
    usage = a.get("memcg_usage")
    if usage:
        s += f" (usage {_kib(usage['usage_kb'])} of limit {_kib(usage['limit_kb'])})"
    return s


class KernelLogParser(Parser):
    """Base of every kernel-log format: subclasses define ``records`` (and ``detect``)."""
    kind = "dmesg"
    priority = 40
    emits = frozenset({s.proposed or s.kind for s in ks.SIGNATURES if s.proposed or s.kind} | {"oom_kill"})
    untimed = False          # the format carries no timestamps at all
    per_line_host = False    # the format names a host on every line (syslog, journald)
    grammar: str | None = None   # the line grammar ``detect`` dry-runs on the head (a regex)
    min_ratio = 0.6              # share of the head's lines that must match it
    ident_group: int | None = None   # syslog-style: the group holding the identifier ('kernel')

    @classmethod
    def detect(cls, head: Head) -> bool:
        pat = re.compile(cls.grammar)
        if cls.ident_group is None:
            return grammar_detect(head, pat, min_ratio=cls.min_ratio)
        # syslog-style: most lines match and at least one is the kernel's
        lines = [ln for ln in head.nonblank(300) if not _META.match(ln)]
        hits = [m for m in map(pat.match, lines) if m]
        return (bool(lines) and len(hits) / len(lines) >= cls.min_ratio
                and any(m.group(cls.ident_group) == "kernel" for m in hits))

    def records(self, df: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:  # pragma: no cover
        raise NotImplementedError

    def prepare(self, ctx: ParseContext) -> None:
        """Called once before the first chunk (attrs, year inference, ...)."""

    def parse(self, ctx: ParseContext) -> None:
        self.prepare(ctx)
        engine = KernelEngine(ctx, self)
        try:
            for rec in records_ahead(ctx, self.records):
                engine.feed(rec)
        finally:   # a truncated or limited stream still writes the findings read before the cut
            engine.finish()
            self.done(ctx, engine)

    def done(self, ctx: ParseContext, engine: KernelEngine) -> None:
        """Called after the last chunk."""


def line_frames_to_the_cut(ctx: ParseContext, chunk_bytes: int = CHUNK_BYTES, track_lineno: bool = True):
    """Like ``ctx.line_frames()`` (every complete line before a truncation, damage or the size limit is
    handed out before the error is re-raised: ``ingest.lines`` reads with ``read1``), but undecodable
    lines are left to the engine, which reports them with the format's other bad lines."""
    stream = ctx.open()
    try:
        for df in _line_frames(stream, chunk_bytes, size_hint=size_hint(ctx.path)):
            df = ctx.without_joined(df)
            if track_lineno:
                ctx.lineno = int(df["lineno"][-1]) if len(df) else ctx.lineno
            yield df
    finally:
        ctx.bytes_read = stream.raw.count
        stream.close()


def records_ahead(ctx: ParseContext, records, chunk_bytes: int = CHUNK_BYTES):
    """``records(df, ctx)`` of each chunk of ``line_frames_to_the_cut``, the next chunk read, split and
    turned into records on a worker thread while the engine works on this one (:func:`ingest.lines.ahead`).
    Chunks come out in order, each error where it happened (a read error after every chunk before it,
    as without the thread); ``ctx.lineno`` is set as each chunk is handed out."""
    def work(df):
        last = int(df["lineno"][-1]) if len(df) else None
        try:
            return last, records(df, ctx), None
        except Exception as e:  # noqa: BLE001 - raised in order by the consumer
            return last, None, e

    with closing(ahead(line_frames_to_the_cut(ctx, chunk_bytes, track_lineno=False), work, "kernel-records")) as got:
        for last, rec, err in got:
            if last is not None:
                ctx.lineno = last
            if err is not None:
                raise err
            yield rec


# -- a kernel log with no timestamps at all (printk.time=0, console captures, pasted reports) --------

_NOTIME_KERNELISH = re.compile(
    r"^\s*(?:\S+ [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d: |INFO: task |Call Trace:|\[<[0-9a-f]+>\]|"
    r"[0-9a-f]{16}(?: [0-9a-f]{16})+$|\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"|"
    r"\S+ +[DRS] [0-9a-f]{16} |NVRM: |oom-kill:|Killed process \d+|\S+ invoked oom-killer:)")


class KernelNoTimeParser(KernelLogParser):
    name = "kernel_notime"
    priority = 10
    clock_domain = "none"
    untimed = True
    description = "kernel messages without timestamps (printk.time=0, console captures)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = head.nonblank(300)
        if len(lines) < 3:
            return False
        kernelish = sum(1 for ln in lines if _NOTIME_KERNELISH.match(ln))
        signed = any(ks.classify(ln.strip()) for ln in lines[:100])
        return signed and kernelish / len(lines) >= 0.6

    def records(self, df, ctx):
        line = pl.col("line")
        indented = line.str.contains(r"^\s")
        # an indented line that itself names a device ("pcieport 0000:...: AER: ...") is a record
        own = line.str.contains(r"^\s\S+ [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d: ")
        ok = (line.str.strip_chars() != "") & (~indented | own)
        return frame(df, ok=ok, ts=pl.lit(None, pl.Int64), msg=pl.when(own).then(line.str.strip_chars_start())
                     .otherwise(line), cont=indented & ~own)

    def prepare(self, ctx):
        ctx.attrs["untimed"] = "the log carries no timestamps; its events cannot be placed in time"


PARSERS = (KernelNoTimeParser,)
