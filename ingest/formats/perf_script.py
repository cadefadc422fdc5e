"""perf_script: Linux ``perf script`` text output -> samples, a stack prefix tree, sched events.

Grammar (FORMATS.md section 1; the field set varies by recording, so every part
but the event is optional):

    [ws]comm  pid[/tid]  [[cpu]]  secs.frac:  [period]  event:  [payload] [ip sym+off (dso)]
    <TAB or spaces>addr sym[+0xoff] (dso)          one line per frame, leaf first
    <blank line>                                   end of the record

``comm`` may contain spaces and is right-aligned to 16 columns when no call
chain follows. Tracepoints (``sched:sched_switch: prev_comm=...``) carry a
key=value payload; without a call chain perf prints the ip/sym/dso of the
event on the same line. ``# ...`` lines of ``perf script --header`` become facts
(``hostname``, ``perf version``, ``cmdline``, ``time of first/last sample``) and
clock anchors (``reference time`` when recorded with ``-k``; ``captured on`` as a
weak one otherwise).

How it is fast (the hot path has no Python loop per line)
--------------------------------------------------------
1. ``ctx.line_frames()`` splits the decompressed text into Polars frames of
   lines (32 MiB at a time). Lines are classified by vectorised predicates:
   comment, blank, frame (tab-indented, or space-indented ``hex sym``), header.
   The rows of the last record of a chunk are carried into the next chunk so a
   record is never split.
2. Headers are cut at their time token (``HDR_NOTIME`` where there is none);
   frames by splitting off the address. What the pieces say is parsed once per
   *distinct* piece and joined back to the lines: ``comm pid/tid [cpu]``, the
   ``period event: payload`` after the time, a tracepoint's payload fields (per
   distinct payload and stack), a frame's symbol and module (offsets such as
   ``+0x1b`` dropped). A recording repeats these a lot (a few threads, the same
   switches between them, one line per return address), so the regex work is
   proportional to the distinct values, not to the lines.
3. Each record's frame ids form a list; the *distinct* stacks are inserted
   into the prefix tree (``stacks``: id, parent, frame, dso, depth) in Python,
   and every sample gets its leaf id by a join. A flame graph is then a
   group-by over samples plus a walk up the tree (``analysis.flamegraph``).

Tracepoints become ``events`` (category ``sched`` for the scheduler ones, with
their payload fields in ``attrs`` through the ``TRACEPOINTS`` table); every
other event is a ``samples`` row. Where ``sched_switch`` records carry a CPU,
on-CPU intervals per thread are derived (events named ``oncpu`` with a
duration). Output of ``perf script --reltime/--deltatime`` cannot be placed in
time: the source gets clock domain ``none`` and says so.

Byte ranges: every record header line starts a record, so a large file can be cut
before header lines (:meth:`PerfScriptParser.split_points`) and its ranges parsed as separate
tasks (``ingest.parse.split_job``). Each range builds its own stack tree and leaves what
crosses its end in ``attrs["_range"]`` (the last context switch per CPU, the first times);
:meth:`PerfScriptParser.merge_ranges` then makes one source of them: one stack tree (the
ranges' trees merged, their samples' and events' stack ids renumbered into it), the on-CPU
intervals that span a cut, the clock decisions on the whole file's times, the sums.
"""
from __future__ import annotations

import os
import re

import polars as pl

from .. import native
from ..lines import cut_found
from ..model import CLOCK_BOOT, CLOCK_NONE, CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import MAX_SECONDS, NS, frac_to_ns

# -- grammar --------------------------------------------------------------------------
_PID = r"(?P<pid>-?\d+)(?:/(?P<tid>-?\d+))?"
_CPU = r"(?:\[(?P<cpu>\d+)\]\s+)?"
HDR_TIME = (r"^\s*(?:(?P<comm>.*?)\s+)?" + _PID + r"\s+" + _CPU +
            r"(?P<sec>\d+)\.(?P<frac>\d{6,9}):\s*(?P<rest>.*)$")
# (the comm is optional and tried last: "36695  1 cycles:" is pid 36695, period 1)
HDR_NOTIME = (r"^\s*(?:(?P<comm>.*?)\s+)??" + _PID + r"\s+" + _CPU +
              r"(?P<rest>(?:\d+\s+)?[^\s:]\S*?:(?:\s.*)?)$")
REST = r"^(?:(?P<period>\d+)\s+)?(?P<event>[^\s:]\S*?):(?:\s+(?P<payload>.*))?$"
PRE = r"^\s*(?:(?P<comm>.*?)\s+)?" + _PID + r"(?:\s+\[(?P<cpu>\d+)\])?\s*$"
EVENT = r"^(?:(?P<period>\d+)\s+)?(?P<event>\S+)$"
TIME_TOKEN = r"\s\d+\.\d{6,9}:(?:\s|$)"
FRAME_LINE = r"^\s+[0-9a-fA-F]+ \S"
INLINE_FRAME = r"(?:^|\s)(?P<ip>[0-9a-f]{4,16}) (?P<fsym>\S.*?)(?: \((?P<fdso>[^()]*)\))?\s*$"
FRAME_TEXT = r"^(?P<sym>.*?)(?:\+0x[0-9a-fA-F]+)?(?: \((?P<dso>[^()]*)\))?$"
TRACEPOINT = r"^[a-z_][\w-]*:[a-z_]\w*$"
HW_MODIFIERS = re.compile(r"^[ukhHGpPSDIWe]{1,8}$")

# Tracepoint payloads: one declarative table of field regexes per tracepoint.
_COMM = r"(.+?)"
TRACEPOINTS: dict[str, tuple[str, list[tuple[str, type]]]] = {
    "sched:sched_switch": (
        rf"prev_comm={_COMM} prev_pid=(-?\d+) prev_prio=(-?\d+) prev_state=(\S+) ==> "
        rf"next_comm={_COMM} next_pid=(-?\d+) next_prio=(-?\d+)",
        [("prev_comm", str), ("prev_pid", int), ("prev_prio", int), ("prev_state", str),
         ("next_comm", str), ("next_pid", int), ("next_prio", int)]),
    "sched:sched_process_exit": (
        rf"comm={_COMM} pid=(-?\d+) prio=(-?\d+)(?: group_dead=(\w+))?",
        [("comm", str), ("pid", int), ("prio", int), ("group_dead", str)]),
    "sched:sched_process_fork": (
        rf"comm={_COMM} pid=(-?\d+) child_comm={_COMM} child_pid=(-?\d+)",
        [("comm", str), ("pid", int), ("child_comm", str), ("child_pid", int)]),
    "sched:sched_process_exec": (
        r"filename=(.+?) pid=(-?\d+) old_pid=(-?\d+)",
        [("filename", str), ("pid", int), ("old_pid", int)]),
    "sched:sched_wakeup": (
        rf"comm={_COMM} pid=(-?\d+) prio=(-?\d+)(?: success=\d+)? target_cpu=(\d+)",
        [("comm", str), ("pid", int), ("prio", int), ("target_cpu", int)]),
    "sched:sched_wakeup_new": (
        rf"comm={_COMM} pid=(-?\d+) prio=(-?\d+)(?: success=\d+)? target_cpu=(\d+)",
        [("comm", str), ("pid", int), ("prio", int), ("target_cpu", int)]),
    "sched:sched_process_free": (
        rf"comm={_COMM} pid=(-?\d+) prio=(-?\d+)", [("comm", str), ("pid", int), ("prio", int)]),
}
BULK_TRACEPOINTS = {"sched:sched_switch", "sched:sched_wakeup", "sched:sched_wakeup_new",
                    "sched:sched_stat_runtime", "sched:sched_waking"}
# The payload field that names the process an event is about (its `pid` column).
SUBJECT_PID = {"sched:sched_process_exit": "pid", "sched:sched_process_fork": "pid",
               "sched:sched_process_exec": "pid", "sched:sched_wakeup": "pid",
               "sched:sched_wakeup_new": "pid", "sched:sched_process_free": "pid"}

# `perf script --header` lines that become facts: header label -> fact key.
HEADER_FACTS = {
    "hostname": "hostname", "os release": "kernel", "perf version": "perf_version",
    "arch": "arch", "nrcpus online": "nrcpus_online", "cmdline": "perf_cmdline",
    "captured on": "perf_captured_on", "time of first sample": "perf_first_sample_s",
    "time of last sample": "perf_last_sample_s", "clockid": "perf_clockid",
    "cpudesc": "cpu", "total memory": "total_memory",
}
REFERENCE_TIME = re.compile(
    r"^(?P<tod>\S+ \S+) = (?P<epoch>\d+)\.(?P<efrac>\d+) \(TOD\) = (?P<sec>\d+)\.(?P<frac>\d+) \((?P<clk>[\w-]+)\)")
CAPTURED_ON = re.compile(r"^\w{3} (\w{3}) +(\d+) (\d\d):(\d\d):(\d\d) (\d{4})$")
# perf's names for the clock of `-k`: which of our clock domains its times are in.
CLOCKIDS = {"monotonic": CLOCK_BOOT, "monotonic_raw": CLOCK_BOOT, "boottime": CLOCK_BOOT,
            "realtime": CLOCK_WALL, "tai": CLOCK_WALL}


_SWITCH_SEPS = ["prev_comm=", " prev_pid=", " prev_prio=", " prev_state=", " ==> next_comm=",
                " next_pid=", " next_prio="]


def _cut(text: pl.Expr, start, length=None) -> pl.Expr:
    """The text between offsets as ``str.find`` gives them (a comm or a payload may hold non-ASCII
    text; the compiled reader's offsets are of ASCII lines, where bytes and characters agree)."""
    return cut_found(text, start, length)


def _switch_fields(payload: pl.Expr) -> list[pl.Expr]:
    """sched_switch payload fields by literal separators (capture-free, fast).

    ``prev_comm=perf prev_pid=17973 prev_prio=120 prev_state=D ==> next_comm=x next_pid=18 next_prio=0``
    """
    names = [n for n, _ in TRACEPOINTS["sched:sched_switch"][1]]
    starts = [payload.str.find(s, literal=True) for s in _SWITCH_SEPS]
    out = []
    for i, (name, sep) in enumerate(zip(names, _SWITCH_SEPS)):
        begin = starts[i] + len(sep)
        if i + 1 < len(starts):
            value = _cut(payload, begin, starts[i + 1] - begin)
        else:   # the last field runs to the next blank (the inline frame may follow)
            value = _cut(payload, begin).str.split(" ").list.first()
        out.append(value.alias(f"f_{name}"))
    return out


def _last_record(rec: pl.DataFrame) -> pl.DataFrame:
    """The file's last record (classified rows from its header line on), classified as a record:
    a line starting with "#" is no comment there, and its first line is its header."""
    return rec.with_columns(comment=pl.lit(False), header=(~pl.col("blank") & ~pl.col("frame"))
                            | (pl.int_range(pl.len()) == 0))


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Add boolean columns comment, blank, frame, header.

    Frame lines start with a tab; some tools print them indented with spaces, which a
    right-aligned record header also is, so space-indented lines (few) get the regex test.
    """
    line = pl.col("line")
    df = df.with_columns(
        comment=line.str.starts_with("#").fill_null(False),
        blank=line.is_null() | (line.str.len_bytes() == 0),
        frame=line.str.starts_with("\t").fill_null(False),
        spaced=line.str.starts_with(" ").fill_null(False),
    )
    spaced = df.select(pl.arg_where(pl.col("spaced"))).to_series()
    df = df.drop("spaced")
    if len(spaced):
        # Most of these are right-aligned headers: one anchored test finds the few that may be
        # blank or a frame, and only those get the exact tests.
        sub = df["line"].gather(spaced)
        maybe = sub.str.contains(r"^\s*$|" + FRAME_LINE).arg_true()
        if len(maybe):
            lines = sub.gather(maybe)
            at = spaced.gather(maybe)
            df = df.with_columns(
                blank=df["blank"].scatter(at, lines.str.strip_chars() == ""),
                frame=df["frame"].scatter(at, lines.str.contains(FRAME_LINE) & ~lines.str.contains(TIME_TOKEN)))
    return df.with_columns(header=~pl.col("comment") & ~pl.col("blank") & ~pl.col("frame"))


# a header's comm, pid, tid and cpu from their text
_WHO = [pl.col("comm").str.strip_chars(), pl.col("pid").cast(pl.Int64, strict=False),
        pl.col("tid").cast(pl.Int64, strict=False), pl.col("cpu").cast(pl.Int32, strict=False)]


def _rests(rest: pl.Series) -> pl.DataFrame:
    """Distinct header rests (what follows the time, or the cpu where there is no time) -> their
    period, event, payload, whether the event is a tracepoint, the frame printed on the line
    (ip, fsym, fdso), and a number (rid) that stands for the rest in later joins."""
    # rest = "[period] event: payload"; the event ends at the first ':' before a blank
    r = pl.col("rest").str.strip_chars_start()
    t = rest.to_frame("rest").with_columns(q=r.str.find(r":(?:\s|$)")).with_columns(
        ev=_cut(r, 0, pl.col("q")).str.strip_chars(),
        payload=_cut(r, pl.col("q") + 1).str.strip_chars_start(),
    ).with_columns(e=pl.col("ev").str.extract_groups(EVENT)).unnest("e").drop("q", "ev")
    # the frame printed on the header line itself (no call chain recorded); the bulk
    # scheduler tracepoints always print __schedule there, which tells nothing
    payload = pl.col("payload")
    maybe = payload.str.ends_with(")") | payload.str.contains(r"(?:^|\s)[0-9a-f]{4,16} \S+$")
    maybe = maybe & ~pl.col("event").is_in(list(BULK_TRACEPOINTS))
    return t.with_columns(
        rid=pl.int_range(pl.len(), dtype=pl.Int64),
        period=pl.col("period").cast(pl.Int64, strict=False),
        tracepoint=pl.col("event").str.contains(TRACEPOINT)
        & ~pl.col("event").str.split(":").list.last().str.contains(HW_MODIFIERS.pattern),
        f=pl.when(maybe.fill_null(False)).then(payload).str.extract_groups(INLINE_FRAME),
    ).unnest("f")


class _Stacks:
    """The prefix tree, built incrementally from distinct stacks (root-first frame ids)."""

    def __init__(self):
        self.frame_ids: dict[tuple[str, str | None], int] = {}
        self.frames: list[tuple[str, str | None]] = []
        self.children: dict[tuple[int, int], int] = {}
        self.nodes: list[tuple[int | None, int, int]] = []    # (parent, frame id, depth)

    def frame_id(self, sym: str, dso: str | None) -> int:
        key = (sym, dso)
        fid = self.frame_ids.get(key)
        if fid is None:
            fid = self.frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return fid

    def leaf(self, root_first: list[int]) -> int:
        parent = -1
        for depth, fid in enumerate(root_first):
            node = self.children.get((parent, fid))
            if node is None:
                node = self.children[(parent, fid)] = len(self.nodes)
                self.nodes.append((None if parent < 0 else parent, fid, depth))
            parent = node
        return parent

    def frame(self) -> pl.DataFrame:
        if not self.nodes:
            return pl.DataFrame()
        parent, fid, depth = zip(*self.nodes)
        syms = [self.frames[f][0] for f in fid]
        dsos = [self.frames[f][1] for f in fid]
        return pl.DataFrame({"stack_id": pl.Series(range(len(self.nodes)), dtype=pl.Int64),
                             "parent_id": pl.Series(parent, dtype=pl.Int64),
                             "frame": syms, "dso": dsos, "depth": pl.Series(depth, dtype=pl.Int32)})


class PerfScriptParser(Parser):
    name = "perf_script"
    kind = "perf_script"
    priority = 60
    clock_domain = CLOCK_BOOT
    description = "perf script text: samples with call chains, tracepoints, --header facts"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln for ln in head.lines if ln.strip()]
        if not lines:
            return False
        comments = [ln for ln in lines if ln.startswith("#")]
        if any(re.match(r"^# (perf version|cmdline) *: .*", c) for c in comments) and \
                any("perf" in c for c in comments):
            return True
        body = [ln for ln in lines if not ln.startswith("#")][:400]
        if not body:
            return False
        htime = re.compile(HDR_TIME)
        hnotime = re.compile(HDR_NOTIME)
        rest = re.compile(REST)
        frame = re.compile(r"^(\t\s*[0-9a-fA-F]+ .|\s+[0-9a-fA-F]+ \S.*)")
        inline = re.compile(INLINE_FRAME)
        timed = untimed = frames = 0
        # (a line adds at most 2 to the count below: once the lines left could not lift it to
        # 80 % of the body, the answer is no, and the rest need not be read)
        need = 0.8 * len(body)
        for k, ln in enumerate(body):
            if timed + untimed + frames + 2 * (len(body) - k) < need:
                return False
            if ln.startswith("\t") or (frame.match(ln) and not re.search(TIME_TOKEN, ln)):
                frames += 1
                continue
            m = htime.match(ln)
            if m and rest.match(m.group("rest") or ""):
                timed += 1
            elif (m := hnotime.match(ln)):
                untimed += 1
                if inline.search(m.group("rest")):   # -F ...,ip,sym: the frame on the same line
                    frames += 1
        ok = (timed + untimed + frames) / len(body)
        if timed >= 1 and ok >= 0.8:
            return True
        # no times at all: only with call chains, whose shape is unmistakable
        return untimed >= 1 and frames >= untimed and ok >= 0.9

    # -- byte ranges ----------------------------------------------------------------
    @classmethod
    def split_points(cls, path: str, target: int) -> list[tuple[int, int, int]] | None:
        """(start, end, number of the first line) of ranges of about ``target`` bytes, each
        starting at a record header line (None: no header line to cut at)."""
        return _split_points(path, target)

    @classmethod
    def merge_ranges(cls, results: list, sink) -> "object":
        """One ``SourceResult`` from the results of the file's ranges (in order); ``sink``
        takes the rows the merge adds (stack tree, on-CPU intervals across cuts, issues)."""
        return _merge_ranges(results, sink)

    # -- parsing -----------------------------------------------------------------
    def parse(self, ctx: ParseContext) -> None:
        st = _State(ctx)
        carry = None
        frames = ctx.line_frames(blank_as_null=True)
        # (only a file of one chunk looks at what follows it: in a larger one the next chunk is
        # read meanwhile on the reader's thread, and the last record, carried, is read at the end)
        peek = ctx.one_chunk()
        df = next(frames, None)
        while df is not None:
            nxt = next(frames, None) if peek else df
            if carry is not None:
                df = pl.concat([carry, df], rechunk=False)
            df = _classify(df)
            if not st.header_done:
                st.header_block(df.filter(pl.col("comment")))
            hdr_idx = df.select(pl.arg_where(pl.col("header"))).to_series()
            carry = None
            if len(hdr_idx):
                # the last record may go on in the next frame: it waits for it (the carry); in the
                # last frame it is whole and is read with the others, in the same chunk (a chunk
                # costs a few dozen queries whatever its size)
                last = int(hdr_idx[-1])
                if nxt is None:
                    df = pl.concat([df.slice(0, last), _last_record(df.slice(last))])
                else:
                    carry = df.slice(last).select("lineno", "line", "bad_utf8", "nul")
                    df = df.slice(0, last)
            st.chunk(df)
            df = nxt if peek else next(frames, None)
        if carry is not None:       # the file's last record, which waited for lines that never came
            df = _classify(carry)
            if not st.header_done:
                st.header_block(df.filter(pl.col("comment")))
            st.chunk(_last_record(df))
        st.finish()


class _State:
    """Everything that outlives one chunk."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.sink = ctx.sink
        self.stacks = _Stacks()
        self.next_rec = 0
        self.header_done = False
        self.switch_carry: pl.DataFrame | None = None
        self.first_switch: dict[int, int] = {}   # cpu -> its first switch time (byte ranges)
        self.first_ts: int | None = None
        self.min_ts: int | None = None
        self.samples = 0
        self.events: dict[str, int] = {}
        self.untimed = 0
        self.has_header = False
        self.header_first_ns: int | None = None
        self.clockid: str | None = None

    # -- the `perf script --header` block ------------------------------------------
    def header_block(self, comments: pl.DataFrame) -> None:
        self.header_done = True
        ctx, sink = self.ctx, self.sink
        for lineno, line in comments.select("lineno", "line").iter_rows():
            if ":" not in line:
                continue
            label, _, value = line[1:].partition(":")
            label, value = label.strip(), value.strip()
            if label == "reference time":
                self._reference_time(value, lineno, line)
                continue
            key = HEADER_FACTS.get(label)
            if key is None:
                continue
            self.has_header = True
            sink.fact(key, value, lineno)
            if key == "hostname":
                ctx.host = value
            elif key == "perf_first_sample_s":
                try:
                    s, _, f = value.partition(".")
                    self.header_first_ns = int(s) * NS + frac_to_ns(f)
                except ValueError:
                    pass
            elif key == "perf_clockid":
                self.clockid = value.split(" ")[0].lower()
                dom = CLOCKIDS.get(self.clockid)
                if dom:
                    ctx.clock_domain = dom
                ctx.attrs["clockid"] = value
        if self.has_header:
            ctx.attrs["perf_header"] = True

    def _reference_time(self, value: str, lineno: int, line: str) -> None:
        m = REFERENCE_TIME.match(value)
        if not m:
            self.sink.issue("bad_header", "unreadable reference time", lineno, line)
            return
        wall = int(m.group("epoch")) * NS + frac_to_ns(m.group("efrac"))
        local = int(m.group("sec")) * NS + frac_to_ns(m.group("frac"))
        clk = m.group("clk").lower()
        if CLOCKIDS.get(clk) == CLOCK_BOOT:
            self.sink.add("anchors", name="perf_reference", domain=CLOCK_BOOT, local_ns=local, wall_ns=wall,
                          wall_is_utc=True, uncertainty_ns=1_000, line=lineno, text=line)
        self.sink.fact("perf_reference_clock", clk, lineno)

    # -- one chunk of complete records -------------------------------------------------
    def chunk(self, df: pl.DataFrame) -> None:
        if df.is_empty():
            return
        df = df.with_columns(rec=pl.col("header").cast(pl.Int64).cum_sum() + (self.next_rec - 1))
        n_headers = int(df["header"].sum())
        orphan = df.filter(pl.col("frame") & (pl.col("rec") < self.next_rec))
        if len(orphan):
            for lineno, line in orphan.head(20).select("lineno", "line").iter_rows():
                self.sink.issue("bad_line", "stack frame outside a record", lineno, line)
            if len(orphan) > 20:
                self.sink.issues_total += len(orphan) - 20
        self.next_rec += n_headers
        heads = self._headers(df.filter(pl.col("header")))
        leaves = self._frames(df.filter(pl.col("frame") & (pl.col("rec") >= self.next_rec - n_headers)), heads)
        heads = heads.join(leaves, on="rec", how="left", maintain_order="left")
        self._emit(heads)

    def _headers(self, h: pl.DataFrame) -> pl.DataFrame:
        # The compiled reader cuts the headers it can read (ASCII, the common shapes) in one pass:
        # comm, pid/tid, cpu, time and where the rest starts. The others, and those without a time,
        # take the regexes below, and the two are put back in the order the regexes give alone.
        r = native.perf_headers(native.texts(h["line"]), MAX_SECONDS)
        code = pl.Series("_code", r.code)
        fast = h.select("lineno", "line", "rec").with_columns(
            code, *(pl.Series(c, getattr(r, c)) for c in ("comm_at", "comm_end", "pid", "tid", "cpu", "ts", "rest_at")))
        fast = fast.filter(pl.col("_code") == 1)
        line = pl.col("line")
        comm = pl.when(pl.col("comm_at") >= 0).then(
            _cut(line, pl.col("comm_at"), pl.col("comm_end") - pl.col("comm_at")))
        fast = fast.select("lineno", "line", "rec", comm.alias("comm"), "pid", "tid", "cpu",
                           _cut(line, pl.col("rest_at")).alias("rest"), pl.col("ts").alias("ts_raw_ns"),
                           pl.lit(True).alias("_fits"))
        if len(fast) < len(h):
            slow = self._headers_by_regex(h.filter(code != 1))
            timed = slow.filter(pl.col("_timed")).drop("_timed")
            t = pl.concat([fast, timed], how="vertical").sort("lineno") if len(timed) else fast
            t = pl.concat([t, slow.filter(~pl.col("_timed")).drop("_timed")], how="vertical")
        else:
            t = fast
        # (a header without a rest gets no event from the join: it is a bad line)
        t = t.join(_rests(t["rest"].unique()), on="rest", how="left", maintain_order="left")
        ok = t.select(pl.col("event").is_not_null() & pl.col("_fits")).to_series()
        if not ok.all():
            unparsed = t.filter(~ok)
            for lineno, line in unparsed.head(200).select("lineno", "line").iter_rows():
                self.sink.issue("bad_line", "not a perf script record header or stack frame", lineno, line)
            if len(unparsed) > 200:
                self.sink.issues_total += len(unparsed) - 200
            t = t.filter(ok)
        # `pid/tid` -> both; a single number is the thread id (perf's default field)
        pid = pl.lit(None, pl.Int64)
        if t["tid"].null_count() < len(t):
            pid = pl.when(pl.col("tid").is_not_null() & pl.col("line").str.contains(r"\d/\d")).then(pl.col("pid"))
        return t.with_columns(tid=pl.coalesce("tid", "pid"), pid=pid).drop("_fits")

    def _headers_by_regex(self, h: pl.DataFrame) -> pl.DataFrame:
        """The headers the compiled reader left: cut at the time token with a capture-free
        search, then the short pieces parsed: "<comm pid/tid [cpu]>" before it, "<period event:
        payload>" after it. Both pieces repeat a lot (a few threads, a few events, the same
        switches over and over), so each is parsed once per distinct value and joined back to
        its lines. Columns as ``_headers`` makes them, ``_fits`` (the numbers fit: a corrupted
        30-digit pid or time is a bad line) and ``_timed``."""
        line = pl.col("line")
        h = h.select("lineno", "line", "rec", p=line.str.find(TIME_TOKEN))
        timed = h.filter(pl.col("p").is_not_null()).with_columns(
            pre=_cut(line, 0, pl.col("p")),
            tp=_cut(line, pl.col("p")).str.slice(1).str.splitn(":", 2).struct.rename_fields(["ts", "rest"]),
        ).unnest("tp").with_columns(
            tsp=pl.col("ts").str.split_exact(".", 1).struct.rename_fields(["sec", "frac"])).unnest("tsp")
        who = timed.select(pl.col("pre").unique()).with_columns(
            m=pl.col("pre").str.extract_groups(PRE)).unnest("m").with_columns(_WHO)
        cols = ["lineno", "line", "rec", "comm", "pid", "tid", "cpu", "sec", "frac", "rest"]
        t = timed.join(who, on="pre", how="left", maintain_order="left").select(cols)
        if h["p"].null_count():
            untimed = h.filter(pl.col("p").is_null()).with_columns(
                m=line.str.extract_groups(HDR_NOTIME)).unnest("m").with_columns(
                _WHO, sec=pl.lit(None, pl.String), frac=pl.lit(None, pl.String)).select(cols)
            t = pl.concat([t.with_columns(_timed=pl.lit(True)), untimed.with_columns(_timed=pl.lit(False))],
                          how="vertical")
        else:
            t = t.with_columns(_timed=pl.lit(True))
        sec = pl.col("sec").cast(pl.Int64, strict=False)
        fits = pl.col("pid").is_not_null() & (pl.col("sec").is_null() | (sec < MAX_SECONDS).fill_null(False))
        return t.select("lineno", "line", "rec", "comm", "pid", "tid", "cpu", "rest",
                        (sec * NS + pl.col("frac").str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64)).alias("ts_raw_ns"),
                        fits.alias("_fits"), "_timed")

    def _frames(self, f: pl.DataFrame, heads: pl.DataFrame) -> pl.DataFrame:
        """rec -> leaf stack id, for records with frame lines or an inline frame."""
        parts = self._frame_lines(f) if len(f) else pl.DataFrame(
            schema={"rec": pl.Int64, "lineno": pl.Int64, "fid": pl.Int64})
        # single-line stacks: the frame printed on the header line itself
        inline = heads.filter(pl.col("fsym").is_not_null()).select(
            "rec", "lineno",
            text=pl.col("fsym") + pl.when(pl.col("fdso").is_not_null()).then(" (" + pl.col("fdso") + ")")
            .otherwise(pl.lit("")))
        if len(inline):
            inline = inline.join(parts.select("rec").unique(), on="rec", how="anti")
        if len(inline):
            inline = inline.select("rec", "lineno", fid=self._fids(inline["text"]).cast(pl.Int64))
            allf = pl.concat([parts, inline]).sort("lineno")   # (rec grows with lineno)
        else:
            allf = parts
        if allf.is_empty():
            return pl.DataFrame({"rec": [], "stack_id": []}, schema={"rec": pl.Int64, "stack_id": pl.Int64})
        per = allf.group_by("rec", maintain_order=True).agg(pl.col("fid"))
        distinct = per.select("fid").unique(maintain_order=True)   # stack ids in first-seen order (the same every run)
        leaf_of = [self.stacks.leaf(list(reversed(fids))) for fids in distinct["fid"].to_list()]
        distinct = distinct.with_columns(stack_id=pl.Series(leaf_of, dtype=pl.Int64))
        return per.join(distinct, on="fid", how="left").select("rec", "stack_id")

    def _frame_lines(self, f: pl.DataFrame) -> pl.DataFrame:
        """Frame lines -> (rec, lineno, frame id).

        Frame lines repeat a lot (one distinct line per return address): they are keyed by a
        64-bit hash of the whole line, only one line per hash is split and parsed, and the
        frame id comes back to every line by an integer join.
        """
        f = f.select("rec", "lineno", "line", h=pl.col("line").hash())
        reps = f.unique(subset="h", keep="any").select("h", "line")
        reps = reps.with_columns(s=pl.col("line").str.strip_chars_start()).with_columns(
            addr=pl.col("s").str.split_exact(" ", 1).struct.field("field_0"),
            text=pl.col("s").str.splitn(" ", 2).struct.field("field_1"))
        ok = reps["text"].is_not_null() & reps["addr"].str.contains(r"^[0-9a-fA-F]+$")
        bad = reps.filter(~ok)
        if len(bad):
            hits = f.filter(pl.col("h").is_in(bad["h"].implode()))
            for lineno, line in hits.head(50).select("lineno", "line").iter_rows():
                self.sink.issue("bad_line", "unreadable stack frame", lineno, line)
            self.sink.issues_total += max(0, len(hits) - 50)
        reps = reps.filter(ok).select("h", fid=self._fids(reps.filter(ok)["text"]))
        return f.select("rec", "lineno", "h").join(reps, on="h", how="inner", maintain_order="left").select(
            "rec", "lineno", pl.col("fid").cast(pl.Int64))

    def _fids(self, texts: pl.Series) -> pl.Series:
        """Frame texts ('sym+0x1b (dso)') -> frame ids (distinct texts parsed once)."""
        uniq = texts.unique(maintain_order=True).to_frame("text").with_columns(
            p=pl.col("text").str.extract_groups(FRAME_TEXT)).unnest("p")
        ids = [self._frame_id(sym, dso) for sym, dso in uniq.select("sym", "dso").iter_rows()]
        if not ids:
            return pl.Series(texts.name, [], dtype=pl.Int64)
        return texts.replace_strict(uniq["text"], pl.Series(ids, dtype=pl.Int64), return_dtype=pl.Int64)

    def _frame_id(self, sym: str | None, dso: str | None) -> int:
        sym = sym or "[unknown]"
        if dso == "inlined":
            return self.stacks.frame_id(sym + " (inlined)", None)
        return self.stacks.frame_id(sym, dso)

    def _emit(self, t: pl.DataFrame) -> None:
        if t.is_empty():
            return
        mn = t["ts_raw_ns"].min()
        if mn is not None:
            self.min_ts = mn if self.min_ts is None else min(self.min_ts, mn)
            if self.first_ts is None:
                self.first_ts = t["ts_raw_ns"].drop_nulls()[0]
        self.untimed += t["ts_raw_ns"].null_count()
        samples = t.filter(~pl.col("tracepoint"))
        if len(samples):
            self.samples += len(samples)
            self.sink.add_frame("samples", samples.select(
                "pid", "tid", "cpu", "comm", "ts_raw_ns", "event",
                pl.col("period").fill_null(1), "stack_id"))
        # (header rest, stack id) as one number: rests are numbered per chunk and stack ids per
        # file, both far below 2**31
        key = pl.col("rid") * (1 << 32) + pl.col("stack_id").fill_null(-1) + 1
        tps = t.select("event", "payload", "stack_id", "pid", "tid", "cpu", "ts_raw_ns", "lineno", "line",
                       "tracepoint", key=key).filter(pl.col("tracepoint"))
        if len(tps):
            self._tracepoints(tps)

    def _tracepoints(self, tps: pl.DataFrame) -> None:
        for (event,), g in tps.group_by("event", maintain_order=True):
            self.events[event] = self.events.get(event, 0) + len(g)
            spec = TRACEPOINTS.get(event)
            # A payload's fields are parsed once per distinct (header rest, stack id): the same
            # switches between the same threads recur all through a recording.
            d = g.select("key", "stack_id", pl.col("payload").fill_null("")).unique("key")
            payload = pl.col("payload")
            cols = []
            keep = []
            if event == "sched:sched_switch":
                d = d.with_columns(_switch_fields(payload))
                fields = TRACEPOINTS[event][1]
                for n, typ in fields:
                    c = pl.col(f"f_{n}")
                    cols.append((c.cast(pl.Int64, strict=False) if typ is int else c).alias(n))
                attrs = pl.struct(cols + [pl.col("stack_id")]).struct.json_encode()
                spid = pl.lit(None, pl.Int64)
                keep = [pl.col("f_next_pid").cast(pl.Int64, strict=False), "f_next_comm"]   # (for _oncpu)
            elif spec:
                pattern, fields = spec
                d = d.with_columns(f=payload.str.extract_groups("^" + pattern)).unnest("f")
                names = [str(i) for i in range(1, len(fields) + 1)]
                d = d.rename(dict(zip(names, [f"f_{n}" for n, _ in fields])))
                for n, typ in fields:
                    c = pl.col(f"f_{n}")
                    cols.append((c.cast(pl.Int64, strict=False) if typ is int else c).alias(n))
                attrs = pl.struct(cols + [pl.col("stack_id")]).struct.json_encode()
                subject = SUBJECT_PID.get(event)
                spid = pl.col(f"f_{subject}").cast(pl.Int64, strict=False) if subject else pl.lit(None, pl.Int64)
            else:
                attrs = pl.struct(payload.alias("payload"), pl.col("stack_id")).struct.json_encode()
                spid = pl.lit(None, pl.Int64)
            d = d.select("key", *keep, attrs=attrs, spid=spid)
            g = g.join(d, on="key", how="left", maintain_order="left")
            cat = "sched" if event.startswith("sched:") else "tracepoint"
            # Frequent tracepoints keep only their line number: the evidence text is read back
            # from the file when it is shown. Rare ones (exits, forks, execs) keep their text.
            text = pl.lit(None, pl.String) if event in BULK_TRACEPOINTS else pl.col("line")
            out = g.select(pid=pl.coalesce("spid", "pid"), tid="tid", ts_raw_ns="ts_raw_ns",
                           category=pl.lit(cat), name=pl.lit(event), line="lineno", text=text,
                           attrs="attrs")
            self.sink.add_frame("events", out)
            if event == "sched:sched_switch" and spec:
                self._oncpu(g)

    def _oncpu(self, g: pl.DataFrame) -> None:
        """On-CPU intervals: on each CPU, next_pid runs from its switch-in to the next switch."""
        sw = g.filter(pl.col("cpu").is_not_null() & pl.col("ts_raw_ns").is_not_null()).select(
            "cpu", "ts_raw_ns", pl.col("f_next_pid").alias("tid"),
            pl.col("f_next_comm").alias("comm"), pl.col("lineno"))
        if sw.is_empty():
            return
        if getattr(self.ctx, "byte_range", None) is not None:
            for cpu, ts in sw.group_by("cpu", maintain_order=True).agg(pl.col("ts_raw_ns").min()).iter_rows():
                self.first_switch.setdefault(cpu, ts)
        if self.switch_carry is not None:
            sw = pl.concat([self.switch_carry, sw])
        # (switches of one CPU at one time follow each other in the file's order)
        sw = sw.sort("cpu", "ts_raw_ns", "lineno").with_columns(
            end=pl.col("ts_raw_ns").shift(-1).over("cpu"))
        self.switch_carry = sw.filter(pl.col("end").is_null()).drop("end")
        done = sw.filter(pl.col("end").is_not_null() & (pl.col("tid") != 0))
        if done.is_empty():
            return
        self.sink.add_frame("events", done.select(
            tid="tid", ts_raw_ns="ts_raw_ns", dur_ns=pl.col("end") - pl.col("ts_raw_ns"),
            category=pl.lit("sched"), name=pl.lit("oncpu"), line="lineno",
            attrs=pl.struct(pl.col("cpu"), pl.col("comm")).struct.json_encode()))

    def finish(self) -> None:
        ctx, sink = self.ctx, self.sink
        stacks = self.stacks.frame()
        if not stacks.is_empty():
            sink.add_frame("stacks", stacks)
        ctx.attrs.update(samples=self.samples, tracepoints=self.events, stack_nodes=len(self.stacks.nodes),
                         distinct_frames=len(self.stacks.frames))
        if getattr(ctx, "byte_range", None) is not None:    # decided on the whole file by merge_ranges
            carry = [] if self.switch_carry is None else self.switch_carry.to_dicts()
            ctx.attrs["_range"] = {"first_ts": self.first_ts, "min_ts": self.min_ts, "untimed": self.untimed,
                                   "header_first_ns": self.header_first_ns, "carry": carry,
                                   "first_switch": dict(self.first_switch)}
            return
        _time_verdict(ctx, sink, self.first_ts, self.min_ts, self.untimed, self.header_first_ns)


def _time_verdict(ctx, sink, first_ts: int | None, min_ts: int | None, untimed: int,
                  header_first_ns: int | None) -> None:
    """Records without times, or with relative ones, cannot be placed: clock domain none."""
    if untimed and first_ts is None:
        ctx.clock_domain = CLOCK_NONE
        ctx.attrs["time_note"] = ("the records carry no time stamps (perf script -F without 'time'): "
                                  "they cannot be placed on the timeline")
        return
    relative = min_ts is not None and min_ts < 1 * NS and (
        header_first_ns is None or abs(header_first_ns - min_ts) > NS)
    if header_first_ns is not None and first_ts is not None and abs(header_first_ns - first_ts) > NS:
        relative = True
    if relative:
        ctx.clock_domain = CLOCK_NONE
        ctx.attrs["time_note"] = ("times are relative (perf script --reltime or --deltatime): "
                                  "they cannot be placed on the timeline")
        sink.issue("relative_time", ctx.attrs["time_note"], None, None)


# -- byte ranges ----------------------------------------------------------------------------------
_FRAME_LINE_B = re.compile(FRAME_LINE.encode())
_TIME_TOKEN_B = re.compile(TIME_TOKEN.encode())
MAX_RECORD_SCAN = 64 << 20     # no header line within this many bytes after a cut: stop cutting


def _is_header(line: bytes) -> bool:
    """What ``_classify`` calls a header line (not a comment, blank or frame line)."""
    line = line.rstrip(b"\r")
    if not line or line.startswith(b"#") or line.startswith(b"\t"):
        return False
    if line.startswith(b" "):
        if not line.strip():
            return False
        if _FRAME_LINE_B.match(line) and not _TIME_TOKEN_B.search(line):
            return False
    return True


def _header_at_or_after(f, pos: int, size: int) -> int | None:
    """Offset of the first header line that starts after ``pos`` (at a line start)."""
    f.seek(pos)
    buf, base, i = b"", pos, None
    while True:
        block = f.read(1 << 16)
        if not block:
            return None
        buf += block
        if i is None:                       # skip the rest of the line pos falls in
            nl = buf.find(b"\n")
            if nl < 0:
                continue
            i = nl + 1
        while True:
            nl = buf.find(b"\n", i)
            if nl < 0:
                break
            if _is_header(buf[i:nl]):
                return base + i
            i = nl + 1
        if len(buf) > MAX_RECORD_SCAN:
            return None


def _split_points(path: str, target: int) -> list[tuple[int, int, int]] | None:
    size = os.path.getsize(path)
    n = -(-size // max(1, target))
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, n):
            cut = _header_at_or_after(f, max(size * i // n, cuts[-1]), size)
            if cut is None:
                break
            if cut > cuts[-1]:
                cuts.append(cut)
        if len(cuts) < 2:
            return None
        # the number of each range's first line: one pass counting newlines
        f.seek(0)
        firsts, pos, lines = [], 0, 0
        for c in cuts:
            while pos < c:
                block = f.read(min(8 << 20, c - pos))
                if not block:
                    break
                lines += block.count(b"\n")
                pos += len(block)
            firsts.append(lines + 1)
    ends = cuts[1:] + [size]
    return list(zip(cuts, ends, firsts))


def _merge_ranges(results: list, sink):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ..model import STATUS_PARSED, TABLES
    from ..parse import SourceResult
    first = results[0]
    states = [r.attrs.pop("_range") for r in results]
    res = SourceResult(first.rel, kind=first.kind, format=first.format, clock_domain=first.clock_domain,
                       status=STATUS_PARSED, bytes=first.bytes, compressed=first.compressed, host=first.host,
                       rank=first.rank, pid=first.pid)
    res.bytes_read = sum(r.bytes_read for r in results)
    res.parse_s = sum(r.parse_s for r in results)

    # one stack tree: each range's nodes (parents before children) looked up or added in order
    keys: dict[tuple, int] = {}
    parent_of: list[int | None] = []
    frame_of: list[str] = []
    dso_of: list[str | None] = []
    depth_of: list[int] = []
    maps: list[list[int]] = []
    for r in results:
        files = r.parts.pop("stacks", [])
        mp: list[int] = []
        if files:
            t = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("stack_id")
            ids = t["stack_id"].to_pylist()
            if ids != list(range(len(ids))):
                raise ValueError(f"{r.rel}: the stack ids of a range are not 0..n-1")
            for parent, frame, dso, depth in zip(t["parent_id"].to_pylist(), t["frame"].to_pylist(),
                                                 t["dso"].to_pylist(), t["depth"].to_pylist()):
                pg = None if parent is None else mp[parent]
                k = (pg, frame, dso)
                g = keys.get(k)
                if g is None:
                    g = keys[k] = len(parent_of)
                    parent_of.append(pg)
                    frame_of.append(frame)
                    dso_of.append(dso)
                    depth_of.append(depth)
                mp.append(g)
            for f in files:
                os.unlink(f)
        maps.append(mp)
        r.counts["stacks"] = 0
    for r, mp in zip(results, maps):
        if mp == list(range(len(mp))):
            continue
        lookup = pa.array(mp, pa.int64())
        for f in r.parts.get("samples", []):
            t = pq.read_table(f)
            i = t.schema.get_field_index("stack_id")
            t = t.set_column(i, "stack_id", pc.take(lookup, t["stack_id"]))
            _rewrite(f, t)
        for f in r.parts.get("events", []):
            df = pl.read_parquet(f)
            old = df["attrs"].str.extract(r'"stack_id":(\d+)\}$', 1).cast(pl.Int64)
            if old.null_count() == len(old):
                continue
            new = pl.Series(mp, dtype=pl.Int64).gather(old)
            df = df.with_columns(attrs=pl.when(old.is_not_null()).then(
                pl.col("attrs").str.extract(r'^(.*"stack_id":)\d+\}$', 1) + new.cast(pl.String) + "}"
            ).otherwise(pl.col("attrs")))
            _rewrite(f, df.to_arrow().cast(TABLES["events"].arrow_schema()))
    if parent_of:
        sink.add_frame("stacks", pl.DataFrame({
            "stack_id": pl.Series(range(len(parent_of)), dtype=pl.Int64),
            "parent_id": pl.Series(parent_of, dtype=pl.Int64), "frame": pl.Series(frame_of, dtype=pl.String),
            "dso": pl.Series(dso_of, dtype=pl.String), "depth": pl.Series(depth_of, dtype=pl.Int32)}))

    # on-CPU intervals that span a cut: a range's last switch on a CPU ends at the first switch
    # on that CPU in the ranges after it
    carry: dict[int, dict] = {}
    spans = []
    for st in states:
        for cpu, ts in st["first_switch"].items():
            c = carry.pop(cpu, None)
            if c is not None and c["tid"] is not None and c["tid"] != 0:
                spans.append({**c, "end": ts})
        carry.update({c["cpu"]: c for c in st["carry"]})
    if spans:
        sw = pl.DataFrame(spans, schema={"cpu": pl.Int32, "ts_raw_ns": pl.Int64, "tid": pl.Int64,
                                         "comm": pl.String, "lineno": pl.Int64, "end": pl.Int64})
        sink.add_frame("events", sw.select(
            tid="tid", ts_raw_ns="ts_raw_ns", dur_ns=pl.col("end") - pl.col("ts_raw_ns"),
            category=pl.lit("sched"), name=pl.lit("oncpu"), line="lineno",
            attrs=pl.struct(pl.col("cpu"), pl.col("comm")).struct.json_encode()))

    # the clock decisions on the whole file's times
    class _Ctx:
        clock_domain = first.clock_domain
        attrs = dict(first.attrs)
    ctx = _Ctx()
    tracepoints: dict[str, int] = {}
    for r in results:
        for k, v in (r.attrs.get("tracepoints") or {}).items():
            tracepoints[k] = tracepoints.get(k, 0) + v
    ctx.attrs.update(samples=sum(r.attrs.get("samples", 0) for r in results), tracepoints=tracepoints,
                     stack_nodes=len(parent_of), distinct_frames=len({(f, d) for f, d in zip(frame_of, dso_of)}))
    firsts = [st["first_ts"] for st in states if st["first_ts"] is not None]
    mins = [st["min_ts"] for st in states if st["min_ts"] is not None]
    _time_verdict(ctx, sink, firsts[0] if firsts else None, min(mins) if mins else None,
                  sum(st["untimed"] for st in states), states[0]["header_first_ns"])
    res.clock_domain, res.attrs = ctx.clock_domain, ctx.attrs

    added = sink.close()
    parts: dict[str, list[str]] = {}
    for r in results:
        for t, fs in r.parts.items():
            parts.setdefault(t, []).extend(fs)
    for f in sink.files:
        parts.setdefault(f.name.split(".")[0], []).append(str(f))
    res.parts = parts
    counts: dict[str, int] = {}
    for c in [r.counts for r in results] + [added]:
        for t, n in c.items():
            counts[t] = counts.get(t, 0) + n
    res.counts = counts
    res.records = sum(n for t, n in counts.items() if t not in ("parse_issues", "facts"))
    res.issues = sum(r.issues for r in results) + sink.issues_total
    return res


def _rewrite(path: str, table) -> None:
    import pyarrow.parquet as pq
    tmp = f"{path}.tmp"
    pq.write_table(table, tmp, compression="lz4", row_group_size=122_880)
    os.replace(tmp, path)


PARSERS = (PerfScriptParser,)
