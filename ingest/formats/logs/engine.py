"""The log engine: training and launcher logs (PyTorch c10/c10d, torchrun/elastic, Python
logging, tracebacks) and NCCL lines, read by the same code line by line, so a job's stdout that
interleaves everything is handled whichever format (:mod:`.applog`, :mod:`.nccl`) claimed the
file. What it reads is :mod:`.grammar` (wrappers, line families, messages, blocks; NCCL's lines:
:mod:`.nccl_grammar`); the blocks are grouped and walked by :mod:`.blocks`, the times read by
:mod:`.logtime`.

Per 32 MiB chunk of lines (``ctx.line_frames()``), vectorised Polars regex and the compiled
readers of :mod:`ingest.native` (each reads what the regexes here state, on ASCII text, and
leaves any other line to them):

1. Wrapper prefixes are peeled off and kept (``WRAP``): ``torchrun --tee``
   ``[default3]:`` (local rank), torch's ``[rank3]: `` on Python output,
   ``srun --label`` ``12: `` (task = rank), OpenMPI ``[1,3]<stdout>:``, Ray
   ``(Actor pid=N) ... [repeated 15x across cluster]`` and markdown quotes.
2. Every line goes to the first line family that matches (``FAMILIES``):
   ``nccl`` (see :mod:`.nccl_grammar`), ``c10`` (``[rank3]:[E1218 20:27:21.426415540
   File.cpp:629] msg`` and the old ``[E ProcessGroupNCCL.cpp:414] msg``),
   ``elastic`` (torch logging ``E0724 20:47:36.140000 1237 path.py:986] msg``),
   ``usdt`` (Kineto ``USDT:2026-11-29 13:28:48 pid:tid File.cpp:52] msg``),
   ``dated`` (Python logging / DeepSpeed / ISO-8601 stamps, optional offset),
   ``syslog`` (``Nov 29 13:28:11 host prog[pid]: msg``), ``pylog``
   (``WARNING:torch.distributed.run:msg``) and ``plain`` (untimed lines that say
   something: steps, exception lines, desync/gloo messages). Other lines are not
   errors: they are counted (``other_lines``) and skipped. The families' tests and headers are
   read in one compiled pass (:func:`ingest.native.log_heads`), the stamp as integer pieces.
3. Messages are matched against ``MESSAGES`` (watchdog timeouts with the
   WorkNCCL fields, desync reports, collective mismatches, Flight Recorder
   notices, gloo timeouts/closed connections, elastic worker failures and
   closing signals, step/progress lines) which sets the event name, typed kind
   and fields.
4. Multi-line blocks are grouped per output stream (the wrapper prefix):
   Python tracebacks (chained ones included) become one ``python_exception``
   event with exception type, message, last frame and rank; faulthandler dumps
   (``Fatal Python error: Segmentation fault``) one event of the fatal signal they
   name (``FATAL_SIGNALS``: ``segfault`` for SIGSEGV and SIGBUS, ``signal_kill``
   for SIGABRT, SIGFPE and SIGILL; an interpreter's own fatal error ends in
   ``abort()``, so SIGABRT); the
   ``ChildFailedError`` summary one ``job_failure`` event plus one event per
   failure (time, host, rank, local_rank, exitcode, signal, pid, error file,
   traceback, ``root_cause``) typed ``signal_kill`` (exitcode < 0) or
   ``process_exit``.
5. Times: see :mod:`.logtime` (local zone, year inference, c10 seconds, and the
   interpolation of untimed lines with its uncertainty).
6. Ranks: stated on the line (``[rank3]:``, ``[Rank 3]``, ``rank=3``, srun
   task), else the rank stated elsewhere on the same stream (``[default0]`` is
   local rank 0; its ``[rank0]`` lines say which global rank that is), else for
   NCCL lines the rank of the pid's largest communicator.

Both cores on one file: the row-wise steps (1, 2's line families, 3 and 5's reading of the
stamps: each row's result depends on that row alone) run on the two halves of a large chunk at
once (:func:`.frames.in_halves`; Polars releases the GIL while it computes), and the Parquet
parts are written on the sink thread (:class:`ingest.sink.SinkThread`) while the next chunk is
read. The stateful steps (blocks, the NCCL collapse, ranks, the collapse groups) stay in order
on the parser's thread, so the rows are those of a parse on one thread.

Events carry host/rank/pid/tid, ``ts_raw_ns`` (wall clock), ``ts_interpolated``,
category = family, name, kind for findings with ``attrs.summary``, severity, the
1-based line and the raw text. What is one event and what is counted:

* One event per line (or block): everything that says something — NCCL version,
  communicator Init/Destroy/Abort, ``comm ... nNodes``, channel counts, NET/bootstrap
  lines, error returns and init failures, WARN/TRACE/CALL lines, every MESSAGES match
  (timeouts, desync, mismatches, Flight Recorder, gloo, elastic failures), tracebacks
  and ChildFailedError blocks, and every timed line at warning level or above.
* Collapsed (one event per group, for the whole file: the group's *last* line, with
  ``attrs.collapsed`` = the class, ``lines`` = how many lines it stands for,
  ``first_line``/``last_line`` and ``first_ts_ns`` when the first line's time is known):

  - ``coll`` (NCCL COLL lines, name ``nccl_coll`` with the last call's fields), ``op``
    (tuning and proxy lines, name ``nccl_op``) and ``topo`` (every other INFO line:
    channels, rings, trees, connections, proxy setup...; name ``nccl_topology``, with
    ``transports`` seen and the number of ``channels``), per (class, host, pid, cudaDev).
    Untimed ones are dropped right after the wrapper step (``nccl.collapse_info``), before
    any regex extraction; their count travels with the line that stands for them.
  - ``step``: every step/progress line is ``metrics`` rows (``step``, ``loss``,
    ``step_time``; entity ``rank N``), and each rank's last step line is the ``step`` event.
  - ``log``: timed lines of the families below warning level that match nothing specific,
    per rank (null: the launcher's own lines): the count and the last line.

  The raw file stays in the bundle; ``line`` numbers point into it. ``line_families`` in
  the source attrs counts the lines read per family (events and collapsed lines).
"""
from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ... import native
from ...model import CLOCK_NONE
from ...registry import ParseContext
from ...sink import SinkThread, attrs_json, attrs_of
from ...timeparse import NS
from ..kernel.signatures import Unknown
from .blocks import EXC_KINDS, block_rows, group_blocks
from .c10phase import MAX_PAIRS as MAX_PHASE_PAIRS, Phase
from .frames import extract_prefix, in_halves, lists, repeat, rows_in_halves, scatter
from .grammar import (EXC_LINE, FAMILIES, FATAL_SIGNALS, LOSS_NOCAP, LOSS_VALUE, MESSAGE_ANY, MESSAGE_LITERALS,
                      MESSAGES, NOCAP, PG_RANK, PLAIN_HINTS, RANK_IN_TEXT, RAY_REPEAT, SAID, SEVERITY, STEP,
                      STEP_TIME, TEE, TEE_MORE, UNDERLYING, WRAP, WRAP_START, message_in, signame, timeout_summary)
from .logtime import MONTH_NUM, frac_ns_expr, frac_res_expr, hms_parts, interpolate, local_epoch_ns
from .nccl_grammar import (COLLAPSED_NAMES, CONNECT_FILES, INFO_GRAMMAR, INIT_FAILURE_FILES, NCCL_RESULT,
                           WARN_LABELS, collapse_info, nccl_frame, warn_class)

MAX_CARRY_ROWS = 200_000

# The finding kinds the engine writes (``events.kind``): the messages', the blocks' (tracebacks,
# fatal signals, a launcher's failure report) and NCCL's warnings and failed inits.
KINDS_WRITTEN = frozenset({m.kind for m in MESSAGES if m.kind} | {k for _, k in FATAL_SIGNALS.values()}
                          | {u[1] for u in UNDERLYING} | {k for _, k, _ in EXC_KINDS.values()}
                          | {"python_exception", "job_failure", "signal_kill", "process_exit", "nccl_warn",
                             "nccl_init_failure", "hang_dump"})

_INFO_ENTRY = {lit: i for i, (_n, lit, _rx, _ints) in enumerate(INFO_GRAMMAR)}
assert len(_INFO_ENTRY) == len(INFO_GRAMMAR), "INFO_GRAMMAR literals must be distinct"

# ---------------------------------------------------------------------------------------------
@dataclass
class _State:
    """What one file's parse remembers across chunks."""
    zone: str | None
    mtime_year: int
    ref_year: int | None = None
    ref_month: int | None = None
    year_from: str | None = None
    stream_rank: dict = field(default_factory=dict)
    stream_pid: dict = field(default_factory=dict)
    pid_rank: dict = field(default_factory=dict)      # (host, pid) -> (nranks, rank)
    pid_host: dict = field(default_factory=dict)      # pid -> host (clean NCCL lines)
    hosts: set = field(default_factory=set)
    ranks: set = field(default_factory=set)
    pids: set = field(default_factory=set)
    init_failed: set = field(default_factory=set)
    pending_failed: list = field(default_factory=list)
    block_pids: set = field(default_factory=set)
    families: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    last_step: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    comms: dict = field(default_factory=dict)
    other_lines: int = 0
    other_rows: pl.Series | None = None  # line numbers of this chunk's unrecognised lines
    other_from: int = 0                 # lines before this one are counted in other_lines
    coll_lines: int = 0
    context_line: int | None = None     # a row re-read only as interpolation context
    collapse_floor: int | None = None   # (the same, while a chunk's lines are collapsed)
    pending: dict = field(default_factory=dict)   # NCCL lines dropped early, by the line standing for them
    stash: "_Stash" = field(default_factory=lambda: _Stash())     # the collapse groups (see _collapse_rows)
    interpolated: int = 0
    timed: int = 0
    garbage: int = 0
    phase: Phase = field(default_factory=Phase)
    info_read: dict = field(default_factory=dict)   # NCCL message -> what INFO_GRAMMAR reads (see _info_read)


_WRAP_COLS = native.WRAP_GROUPS


def _wrap(df: pl.DataFrame) -> pl.DataFrame:
    """lineno, line, the wrapper's groups (``_WRAP_COLS``), body, repeated, stream: what WRAP and
    RAY_REPEAT read from each line. The compiled reader (:func:`ingest.native.wraps`) reads them;
    the lines it leaves (a byte it looked at is not ASCII) take the regexes (:func:`_wrap_regex`)."""
    base = df.select("lineno", "line")
    lines = native.texts(base["line"])
    w = native.wraps(lines)
    cols = [pl.Series(c, native.slices(lines, *w.groups[c])) if c in w.groups else pl.lit(None, pl.String).alias(c)
            for c in _WRAP_COLS]
    ends = pc.max(w.body_len).as_py()
    body = pl.col("line") if not pc.max(w.body_at).as_py() and (ends is None or ends < 0) else \
        pl.Series("body", native.slices(lines, w.body_at, w.body_len))
    out = base.with_columns(*cols, body.alias("body"), pl.Series("repeated", w.repeated))
    keys = ("tee", "srun", "ray_pid", "mpi_rank")
    if any(c in w.groups for c in keys):
        # (a group no line has is the empty string on every row: a literal, not a column of nulls to fill)
        stream = pl.concat_str([pl.col(c).fill_null("") if c in w.groups else pl.lit("") for c in keys], separator="|")
    else:
        stream = pl.lit("|||", pl.String)
    out = out.with_columns(stream.alias("stream"))
    if w.unsure:
        left = pl.Series(w.code) == native.UNSURE
        i = left.arg_true()
        sub = _wrap_regex(base.filter(left))
        out = out.with_columns(*(out[c].scatter(i, sub[c].cast(out[c].dtype)) for c in out.columns
                                 if c not in ("lineno", "line")))
    return out


def _wrap_regex(df: pl.DataFrame) -> pl.DataFrame:
    """:func:`_wrap` by the regexes."""
    # WRAP is all-optional and anchored: on a line without a wrapper it matches the empty string
    # at once (every first token of WRAP needs the WRAP_START prefix), so body = line there.
    base = df.select("lineno", "line")
    line = pl.col("line")
    has = base.select(line.str.contains(WRAP_START)).to_series()
    wcols = ("ray_actor", "ray_pid", "mpi_job", "mpi_rank", "tee", "srun", "wrank")
    if has.any():
        # The common wrapper, torchrun's ``[defaultN]:`` alone, is cut by a one-group extraction
        # (a capture of WRAP's seven groups costs several times more per line). After a tee
        # prefix WRAP can only go on with an srun task or a ``[rankN]: `` prefix: those lines,
        # and the lines with any other wrapper, take the full WRAP regex.
        base = base.with_columns(line.str.extract(TEE, 1).alias("tee")).with_columns(
            line.str.slice(pl.col("tee").str.len_chars().fill_null(-10) + 10).alias("body"))   # ("[default" "]:")
        slow = base.select(pl.col("tee").is_null() | pl.col("body").str.contains(TEE_MORE)).to_series() & has
        if slow.any():
            w = extract_prefix(base.filter(slow).select("lineno", "line"), "line", WRAP, "body")
            i = slow.arg_true()
            n = base.height
            base = base.with_columns(
                *(pl.lit(None, pl.String).alias(c) for c in wcols if c != "tee" and w[c].null_count() == w.height),
                *(scatter(n, i, w[c]).alias(c) for c in wcols if c != "tee" and w[c].null_count() < w.height),
                pl.when(slow).then(scatter(n, i, w["tee"])).otherwise(pl.col("tee")).alias("tee"),
                pl.when(slow).then(scatter(n, i, w["body"])).otherwise(pl.col("body")).alias("body"))
        else:
            base = base.with_columns(*(pl.lit(None, pl.String).alias(c) for c in wcols if c != "tee"))
        base = base.select("lineno", "line", *wcols, "body")
    else:
        base = base.with_columns(*(pl.lit(None, pl.String).alias(c) for c in wcols), pl.col("line").alias("body"))
    rep = pl.col("body").str.ends_with("across cluster]")
    if base.select(rep.any()).item():
        base = base.with_columns(
            _on_rows(base, rep, pl.col("body").str.extract(RAY_REPEAT, 1), pl.Int32).alias("repeated"),
            _on_rows(base, rep, pl.col("body").str.replace(RAY_REPEAT, ""), pl.String).alias("_rb"))
        base = base.with_columns(pl.coalesce(pl.col("_rb"), pl.col("body")).alias("body")).drop("_rb")
    else:
        base = base.with_columns(pl.lit(None, pl.Int32).alias("repeated"))
    if not has.any():       # (no wrapper on any line: one stream, the same text on every row)
        return base.with_columns(pl.lit("|||", pl.String).alias("stream"))
    return base.with_columns(
        pl.concat_str([pl.col("tee").fill_null(""), pl.col("srun").fill_null(""), pl.col("ray_pid").fill_null(""),
                       pl.col("mpi_rank").fill_null("")], separator="|").alias("stream"))


def _with_common(df: pl.DataFrame, family: str, **cols) -> pl.DataFrame:
    """Give a family frame the common columns (missing ones null). A stamp's pieces are integer
    columns: ``t_y``, ``t_mo``, ``t_d``, ``t_h``, ``t_mi``, ``t_s``, its fraction ``t_fns`` (ns), its
    resolution ``t_res`` (ns) and its stated UTC offset ``t_off`` (s); :func:`_stamp_cols` reads
    them from the regexes' text."""
    out = df.lazy().with_columns(pl.lit(family).alias("category"), **cols)
    have = out.collect_schema()
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in _COMMON.items() if c not in have]
    # (one query: a frame operation costs a fixed ~0.1 ms, most of a small log's parse)
    return out.with_columns(missing).with_columns(*(pl.col(c).cast(t, strict=False) for c, t in _COMMON.items())) \
        .collect()


_COMMON = {
    "host": pl.String, "pid": pl.Int64, "tid": pl.Int64, "rank": pl.Int64, "sev": pl.String,
    "t_y": pl.Int32, "t_mo": pl.Int32, "t_d": pl.Int32, "t_h": pl.Int32, "t_mi": pl.Int32, "t_s": pl.Int32,
    "t_fns": pl.Int64, "t_res": pl.Int64, "t_off": pl.Int64, "msg": pl.String, "name": pl.String,
    "kind": pl.String, "attrs": pl.String,
}


def _stamp_cols(hms: pl.Expr, frac: pl.Expr | None = None, off: pl.Expr | None = None) -> dict[str, pl.Expr]:
    """The integer stamp columns of :func:`_with_common` from a stamp's text: ``HH:MM:SS``, the
    fraction's digits and the offset (``Z``, ``+HH:MM`` or ``+HHMM``)."""
    h, mi, s = hms_parts(hms)
    # (a stamp whose hour is not ASCII digits, which \d also matches, is still a stamp: hour -1,
    # a time no clock reads)
    out = {"t_h": pl.when(hms.is_not_null()).then(h.fill_null(-1)), "t_mi": mi, "t_s": s}
    if frac is not None:
        out["t_fns"] = frac_ns_expr(frac)
    if off is not None:
        out["t_off"] = (pl.when(off == "Z").then(0).otherwise(
            off.str.slice(0, 1).replace_strict({"+": 1, "-": -1}, default=1, return_dtype=pl.Int64)
            * (off.str.slice(1, 2).cast(pl.Int64, strict=False) * 3600
               + off.str.slice(-2, 2).cast(pl.Int64, strict=False) * 60)))
    return out


def _json_attrs(df: pl.DataFrame, fields: list[str], ints: tuple[str, ...] = ()) -> pl.Expr:
    fields = [f for f in fields if f in df.columns]
    if not fields:
        return pl.lit(None, pl.String)
    exprs = [pl.col(f).cast(pl.Int64, strict=False) if f in ints else pl.col(f) for f in fields]
    return pl.struct(exprs).struct.json_encode()


def _families(base: pl.DataFrame, st: _State) -> list[pl.DataFrame]:
    """Split the chunk's rows into line families; returns one frame per family (common columns)."""
    out: list[pl.DataFrame] = []
    st.other_rows = None
    rest = base
    # NCCL first (header may sit anywhere in the line).
    nc = nccl_frame(rest)
    if not nc.is_empty():
        isn = rest.select(pl.col("lineno").is_in(nc["lineno"].implode())).to_series()
        out.extend(_nccl_events(rest.filter(isn), nc, st))
        rest = rest.filter(~isn)
    is_bare = rest["body"].str.starts_with("NCCL version ")
    if is_bare.any():       # (a filter copies every column: only when some line is one)
        bare = rest.filter(is_bare)
        b = bare.with_columns(pl.col("body").str.extract(r"^NCCL version (\d+\.\d+\.\d+(?:[+-][a-z]+[\d.]*)?)", 1).alias("version"))
        out.append(_with_common(b, "nccl", name=pl.lit("nccl_version"), sev=pl.lit("info"),
                                attrs=_json_attrs(b, ["version"])))
        rest = rest.filter(~is_bare)
    if rest.is_empty():
        return out
    parts = in_halves(_line_families, rest)
    for fam in (*FAMILIES, "plain"):
        got = [p[0][fam] for p in parts if fam in p[0]]
        if got:
            out.append(got[0] if len(got) == 1 else pl.concat(got, how="vertical_relaxed"))
    st.other_rows = pl.concat([p[1] for p in parts])
    return out


def _line_families(rest: pl.DataFrame) -> tuple[dict[str, pl.DataFrame], pl.Series]:
    """The frame of each family with lines in ``rest`` (each line in the first family that
    matches; a row-wise step), and the line numbers of the lines no family took that say
    something (not blank).

    The compiled reader (:func:`ingest.native.log_heads`) reads the families' headers; the
    lines it leaves (not ASCII, and the odd header only the regexes can judge) take the regexes.
    Each family's rows stay in the order of ``rest``."""
    heads = native.log_heads(native.texts(rest["body"]))
    code = pl.Series("_fc", heads.code)
    out, left = _regex_families(rest.filter(code == native.UNSURE)) if heads.unsure else ({}, None)
    present = set(code.unique().to_list())
    if present - {0, native.UNSURE}:
        cols = {k: pl.Series("_h_" + k, v) for k, v in heads._asdict().items() if k not in ("code", "unsure")}
        r = rest.with_columns(code, *cols.values())
        for i, fam in enumerate(FAMILIES, 1):
            if i in present:
                f = _compiled_family(r.filter(pl.col("_fc") == i), fam)
                out[fam] = f if fam not in out else pl.concat([out[fam], f], how="diagonal_relaxed").sort(
                    "lineno", maintain_order=True)
        out = {fam: out[fam] for fam in FAMILIES if fam in out}
    rest = rest.filter(code == 0)
    if left is not None and not left.is_empty():
        rest = pl.concat([rest, left]).sort("lineno", maintain_order=True)
    hint = rest.select(pl.col("body").str.contains("|".join(re.escape(h) for h in PLAIN_HINTS))).to_series()
    p = rest.filter(hint)
    if not p.is_empty():
        out["plain"] = _with_common(p.with_columns(pl.col("body").alias("msg")), "plain")
    return out, rest.filter(~hint & (rest["body"].str.strip_chars() != ""))["lineno"]


def _regex_families(rest: pl.DataFrame) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """The families of ``rest`` by FAMILIES' regexes, and the rows no family took."""
    out: dict[str, pl.DataFrame] = {}
    for fam, (test, rx) in FAMILIES.items():
        if rest.is_empty():
            break
        hit = rest.select(pl.col("body").str.contains(test)).to_series()
        if not hit.any():
            continue
        out[fam] = _timed_family(extract_prefix(rest.filter(hit), "body", rx), fam)
        rest = rest.filter(~hit)
    return out, rest


_SEV_CODE = {i: v for i, v in enumerate(native.SEVERITIES) if v}


def _compiled_family(r: pl.DataFrame, fam: str) -> pl.DataFrame:
    """A family frame from the compiled reader's columns (``_h_*``, see :class:`ingest.native.LogHeads`),
    as :func:`_timed_family` makes it from the regexes' groups (the texts are ASCII: byte offsets
    are character offsets)."""
    h = lambda k: pl.col("_h_" + k)
    body = native.texts(r["body"])

    def span(a: str, e: str) -> pl.Expr:
        return pl.lit(pl.Series(native.slices(body, r["_h_" + a].to_arrow(), (r["_h_" + e] - r["_h_" + a]).to_arrow())))

    cols = dict(msg=pl.lit(pl.Series(native.slices(body, r["_h_msg_at"].to_arrow()))),
                sev=h("sev").replace_strict(_SEV_CODE, default=None, return_dtype=pl.String),
                rank=h("rank"), pid=h("pid"), tid=h("tid"), t_y=h("y"), t_mo=h("mo"), t_d=h("d"), t_h=h("hh"),
                t_mi=h("mi"), t_s=h("ss"), t_fns=h("fns"), t_res=h("res"), t_off=h("off"))
    if fam in ("c10", "elastic", "usdt"):
        cols["attrs"] = pl.concat_str([pl.lit('{"file":"'), span("f_at", "f_end"), pl.lit('","fline":'),
                                       h("fline").cast(pl.String), pl.lit("}")])
        cols["name"] = span("f_at", "name_end") if fam == "c10" else pl.lit("elastic" if fam == "elastic" else "kineto")
    elif fam == "syslog":
        prog = span("f_at", "f_end")
        cols.update(host=span("h_at", "h_end"), name=prog, attrs=pl.concat_str([pl.lit('{"prog":"'), prog, pl.lit('"}')]))
    elif fam == "pylog":
        cols.update(name=pl.lit("log"), attrs=pl.concat_str([pl.lit('{"logger":"'), span("f_at", "f_end"), pl.lit('"}')]))
    else:
        cols["name"] = pl.lit("log")
    out = r.with_columns(**cols)
    return _with_common(out.drop("_fc", *(c for c in out.columns if c.startswith("_h_"))), fam)


def _count_other(st: _State, upto: int | None) -> None:
    """Count the chunk's unrecognised lines before ``upto`` (None: all of them): the lines from
    ``upto`` on travel into the next chunk and are counted there."""
    o, st.other_rows = st.other_rows, None
    if o is not None:
        st.other_lines += int(((o >= st.other_from) if upto is None else o.is_between(st.other_from, upto - 1)).sum())
    st.other_from = max(st.other_from, upto or 0)


def _timed_family(g: pl.DataFrame, fam: str) -> pl.DataFrame:
    md = pl.col("mo_d") if "mo_d" in g.columns else None
    if fam in ("c10", "elastic"):
        cols = dict(
            t_mo=md.str.slice(0, md.str.len_chars() - 2).cast(pl.Int32, strict=False),
            t_d=md.str.slice(-2, 2).cast(pl.Int32, strict=False), t_res=pl.lit(NS if fam == "c10" else 1_000_000),
            **_stamp_cols(pl.col("hms"), pl.col("us").str.slice(0, 3) if fam == "elastic" else None),
            sev=pl.col("sev").replace_strict(SEVERITY, default=None),
            name=pl.lit(fam), attrs=_json_attrs(g, ["file", "fline"], ("fline",)))
        if fam == "c10":
            cols["name"] = pl.col("file").str.replace(r"\.\w+$", "")
        return _with_common(g, fam, **cols)
    if fam == "usdt":
        return _with_common(g, fam, t_y=pl.col("date").str.slice(0, 4), t_mo=pl.col("date").str.slice(5, 2),
                            t_d=pl.col("date").str.slice(8, 2), **_stamp_cols(pl.col("hms")), t_res=pl.lit(NS),
                            name=pl.lit("kineto"), attrs=_json_attrs(g, ["file", "fline"], ("fline",)))
    if fam == "dated":
        return _with_common(g, fam, t_y=pl.col("date").str.slice(0, 4), t_mo=pl.col("date").str.slice(5, 2),
                            t_d=pl.col("date").str.slice(8, 2), **_stamp_cols(pl.col("hms"), pl.col("frac"), pl.col("off")),
                            t_res=frac_res_expr(pl.col("frac")),
                            sev=pl.col("sev").replace_strict(SEVERITY, default=None), name=pl.lit("log"))
    if fam == "syslog":
        return _with_common(g, fam, t_mo=pl.col("mon").replace_strict(MONTH_NUM, default=None),
                            t_d=pl.col("day").str.strip_chars(), **_stamp_cols(pl.col("hms")), t_res=pl.lit(NS),
                            name=pl.col("prog"), attrs=_json_attrs(g, ["prog"]))
    if fam == "pylog":
        return _with_common(g, fam, sev=pl.col("sev").replace_strict(SEVERITY, default=None),
                            name=pl.lit("log"), attrs=_json_attrs(g, ["logger"]))
    raise KeyError(fam)


def _nccl_events(rows: pl.DataFrame, nc: pl.DataFrame, st: _State) -> list[pl.DataFrame]:
    g = rows.join(nc, on="lineno", how="inner")
    # host of a run-in or spliced header: the host this pid had on a clean line
    # (in line order: a pid seen under two hosts takes the first one's)
    for r in g.filter(~pl.col("host_unsure")).select("host", "pid").unique(maintain_order=True).iter_rows():
        st.pid_host.setdefault(r[1], r[0])
        st.hosts.add(r[0])
    if g["host_unsure"].any():
        un = g.filter(pl.col("host_unsure")).select("lineno", "host", "pid")
        fixed = [st.pid_host.get(pid) or next((h for h in st.hosts if host.endswith(h)), host)
                 for _, host, pid in un.iter_rows()]
        m = un.select("lineno").with_columns(pl.Series("_fh", fixed, dtype=pl.String))
        g = g.join(m, on="lineno", how="left").with_columns(
            pl.coalesce(pl.col("_fh"), pl.col("host")).alias("host")).drop("_fh")
    nts = pl.col("nts")
    g = g.with_columns(
        t_y=nts.str.slice(0, 4), t_mo=nts.str.slice(5, 2), t_d=nts.str.slice(8, 2),
        **_stamp_cols(nts.str.slice(11, 8), pl.col("nts_frac")), t_res=frac_res_expr(pl.col("nts_frac")),
        sev=pl.col("level").replace_strict(SEVERITY, default=None))
    # Which INFO grammar entry a message is, and the fields the entry reads from it, depend on the
    # message alone, and NCCL repeats its INFO lines across ranks, processes and runs (a few hundred
    # distinct messages in a million lines): each distinct message is read once per file
    # (``_State.info_read``) and its name and fields go to every row that has it.
    info = pl.col("level") != "WARN"
    msgs = g.lazy().filter(info).select("msg").unique().collect()["msg"].to_list()
    read = st.info_read
    new = [m for m in msgs if m not in read]
    if new:
        if len(read) + len(new) > MAX_INFO_READ:    # (a file of ever new messages: memory stays bounded)
            read.clear()
            new = msgs
        read.update(_info_read(new))
    seen = {m: read[m] for m in msgs if read[m] is not None}
    base_fields = ["dev", "level", "src", "srcline", "func", "trace_ms", "tag", "spliced"]
    g = g.with_columns(attrs=_json_attrs(g, base_fields, ("srcline", "tag")), name=(
        pl.when(pl.col("level") == "WARN").then(pl.lit("nccl_warn"))
        .when(pl.col("level") == "TRACE").then(pl.lit("nccl_trace"))
        .when(pl.col("level") == "CALL").then(pl.lit("nccl_call"))
        .otherwise(pl.lit("nccl_info"))))
    if seen:
        names = {m: v[0] for m, v in seen.items()}
        fas = {m: v[1] for m, v in seen.items()}
        g = g.with_columns(pl.when(info).then(pl.col("msg").replace_strict(names, default=None, return_dtype=pl.String))
                           .alias("_n"),
                           pl.when(info).then(pl.col("msg").replace_strict(fas, default=None, return_dtype=pl.String))
                           .alias("_fa"))
        # the entry's fields follow the header fields in one object (as one struct would encode them)
        g = g.with_columns(name=pl.coalesce(pl.col("_n"), pl.col("name")),
                           attrs=_merge_json_some(g, pl.col("attrs"), "_fa")).drop("_n", "_fa")
    # a communicator's rank is not the process's global rank (that one is found per pid later)
    return [_with_common(g.drop("rank", strict=False), "nccl")]


MAX_INFO_READ = 100_000     # distinct NCCL messages whose reading a file's parse keeps


def _info_read(msgs: list[str]) -> dict[str, tuple[str, str] | None]:
    """Each message's INFO grammar entry name and the JSON object of the fields it reads (None:
    no entry reads it). The first entry of INFO_GRAMMAR whose literal occurs is the one (one
    Aho-Corasick pass finds them all; the lowest entry number wins); each entry's regex then runs
    on its own messages only."""
    out: dict[str, tuple[str, str] | None] = dict.fromkeys(msgs)
    sub = (pl.col("msg").str.extract_many(list(_INFO_ENTRY), overlapping=True)
           .list.eval(pl.element().replace_strict(_INFO_ENTRY, return_dtype=pl.Int32)).list.min())
    cand = pl.DataFrame({"msg": msgs}, schema={"msg": pl.String}).select("msg", sub.alias("_sub")).filter(
        pl.col("_sub").is_not_null())
    for (entry,), part in cand.partition_by("_sub", as_dict=True).items():
        name, _lit, rx, ints = INFO_GRAMMAR[entry]
        x = part.with_columns(pl.col("msg").str.extract_groups(rx).alias("x")).unnest("x")
        fields = re.findall(r"\?P<(\w+)>", rx)
        x = x.filter(pl.any_horizontal([pl.col(f).is_not_null() for f in fields]))
        for m, fa in x.select("msg", _json_attrs(x, fields, ints).alias("_fa")).iter_rows():
            out[m] = (name, fa)
    return out


# ---------------------------------------------------------------------------------------------
def _messages(ev: pl.DataFrame) -> pl.DataFrame:
    """Apply MESSAGES + step/rank extraction to the non-NCCL message texts.

    The regexes run on narrow frames (row number + text) of the rows that can match, and their
    results go back by row number in one step: the wide frame is filtered once, at the end.
    """
    n = ev.height
    m, cat = pl.col("_m"), pl.col("category")
    # NCCL rows are not tested (their grammar is applied in _nccl_events)
    narrow = ev.lazy().with_row_index("_i").filter(cat.fill_null("") != "nccl").select(
        "_i", cat, pl.coalesce(pl.col("msg"), pl.col("body")).alias("_m"), pl.col("body")).collect()
    names, kinds, fas, idx = [], [], [], []
    # lone exception lines (a traceback whose header is not in the file)
    exc = narrow.filter(cat == "plain")      # (then the regex on those rows alone)
    exc = exc.filter(pl.col("body").str.contains(EXC_LINE))
    if not exc.is_empty():
        x = exc.with_columns(pl.col("body").str.extract_groups(EXC_LINE).alias("x")).unnest("x")
        idx.append(x["_i"])
        fas.append(x.select(_json_attrs(x, ["exc", "exc_msg"])).to_series())
        names.append(repeat("_n", "exception", x.height))
        kinds.append(repeat("_k", "python_exception", x.height))
        narrow = narrow.filter(~pl.col("_i").is_in(x["_i"].implode()))
    cand = narrow.filter(m.str.contains(MESSAGE_ANY))
    # Which literals each candidate holds, in one Aho-Corasick pass (``overlapping``: every
    # occurrence of every literal): the entries whose literal no candidate holds are not tested.
    present = set()
    if not cand.is_empty():
        cand = cand.with_columns(m.str.extract_many(MESSAGE_LITERALS, overlapping=True).alias("_lits"))
        present = set(cand["_lits"].explode().drop_nulls().unique().to_list())
    for name, kind, lit, rx, ints in MESSAGES:
        if cand.is_empty():
            break
        if lit not in present:
            continue
        hit = cand.select(pl.col("_lits").list.contains(lit)).to_series()
        if not hit.any():
            continue
        x = cand.filter(hit).with_columns(m.str.extract_groups(rx).alias("x")).unnest("x")
        fields = re.findall(r"\?P<(\w+)>", rx)
        x = x.filter(pl.any_horizontal([pl.col(f).is_not_null() for f in fields]))
        if x.is_empty():
            continue
        idx.append(x["_i"])
        fas.append(x.select(_json_attrs(x, fields, ints)).to_series())
        names.append(repeat("_n", name, x.height))
        kinds.append(repeat("_k", kind, x.height))
        cand = cand.filter(~pl.col("_i").is_in(x["_i"].implode()))
    said = pl.concat(idx) if idx else pl.Series("_i", [], dtype=pl.UInt32)
    out = {}
    if idx:
        out["_n"] = scatter(n, said, pl.concat(names))
        out["_k"] = scatter(n, said, pl.concat(kinds))
        out["_fa"] = scatter(n, said, pl.concat(fas))
    # steps / progress (rows no message matched): the compiled reader reads the step lines' values
    # as the regexes below do; the messages it leaves (not ASCII) take the regexes
    sv = native.step_values(native.texts(narrow["_m"]))
    code = pl.Series("_sc", sv.code)
    got = pl.DataFrame([narrow["_i"], pl.Series("_step", sv.step), pl.Series("_total", sv.total),
                        pl.Series("_loss", sv.loss), pl.Series("_stime", sv.stime)]).filter(code == 1)
    if sv.unsure:
        cand = narrow.filter(code == native.UNSURE).filter(m.str.contains(r"(?i)step|iteration"))
        if not cand.is_empty():
            # (the case-insensitive patterns run as case-sensitive ones on the lowercased text: faster)
            cand = cand.with_columns(m.str.to_lowercase().alias("_low"))    # (once, not per pattern)
            low = pl.col("_low")
            x = cand.with_columns(_step_match(low).alias("_g0")).filter(pl.col("_g0").is_not_null())
            if not x.is_empty():
                x = _step_values(x.select("_i", "_low", "_g0"), "_low", "_g0")
                got = pl.concat([got, x.select(got.columns)])
    if idx and not got.is_empty():
        got = got.filter(~pl.col("_i").is_in(said.implode()))
    if not got.is_empty():
        # step lines are collapsed (see _collapse_rows): the values stay columns, the attrs
        # object is only written for the line that remains an event
        for c in ("_step", "_total", "_loss", "_stime"):
            out[c] = scatter(n, got["_i"], got[c])
    if not out:
        return ev.filter(cat.fill_null("") != "plain").with_columns(
            pl.when((cat != "nccl") & (pl.col("sev").is_null() | pl.col("sev").is_in(["info", "debug", "notice"])))
            .then(pl.lit("log")).otherwise(pl.col("_cls")).alias("_cls"))
    ev = ev.with_columns(**out, **{c: pl.lit(None, pl.Int64 if c == "_step" else pl.String)
                                   for c in ("_n", "_k", "_fa", "_step") if c not in out})
    is_step = pl.col("_step").is_not_null()
    matched = pl.col("_n").is_not_null() | is_step
    # plain lines that matched nothing specific are not events; timed lines that said nothing
    # specific below warning level are collapsed per rank (class "log", see _collapse_rows)
    low_sev = pl.col("sev").is_null() | pl.col("sev").is_in(["info", "debug", "notice"])
    keep = ev.select((cat.fill_null("") != "plain") | matched).to_series()
    if not keep.all():      # (a filter copies every column of the wide frame)
        ev = ev.filter(keep)
    ev = ev.with_columns(
        pl.when(pl.col("_n").is_not_null()).then(pl.col("_n")).when(is_step).then(pl.lit("step"))
        .otherwise(pl.col("name")).alias("name"),
        pl.when(pl.col("_n").is_not_null()).then(pl.col("_k")).otherwise(pl.col("kind")).alias("kind"),
        _merge_json_some(ev, pl.col("attrs"), "_fa").alias("attrs"),
        pl.when(is_step).then(pl.lit("step"))
        .when(~matched & (cat != "nccl") & low_sev).then(pl.lit("log"))
        .otherwise(pl.col("_cls")).alias("_cls"))
    return ev.drop("_n", "_k", "_fa")


def _step_match(low: pl.Expr) -> pl.Expr:
    """The STEP match in lowercased text (null: not a step line)."""
    return low.str.extract(NOCAP[STEP], 0)


def _step_values(df: pl.DataFrame, low: str, match: str) -> pl.DataFrame:
    """``_step``, ``_total``, ``_loss`` and ``_stime`` (s) of lowercased step lines (column ``low``;
    ``match``: their :func:`_step_match`), as the groups of STEP, LOSS and STEP_TIME give them,
    without capture regexes (see :data:`NOCAP`); ``df``'s other columns are kept."""
    # (the two matches used twice are computed once, in a step of their own)
    df = df.with_columns(pl.col(match).str.extract_all(r"\d+").alias("_nums"),
                         pl.col(low).str.extract(NOCAP[STEP_TIME], 0).alias("_stm"))
    nums, stm = pl.col("_nums"), pl.col("_stm")
    st_v = stm.str.extract(r"[\d.]+", 0).cast(pl.Float64, strict=False)
    return df.with_columns(
        nums.list.get(0, null_on_oob=True).cast(pl.Int64, strict=False).alias("_step"),
        nums.list.get(1, null_on_oob=True).cast(pl.Int64, strict=False).alias("_total"),
        pl.col(low).str.extract(LOSS_NOCAP, 0).str.extract(LOSS_VALUE, 0)
        .cast(pl.Float64, strict=False).alias("_loss"),
        (st_v / pl.when(stm.str.starts_with("step_time")).then(1.0).otherwise(1000.0)).alias("_stime"),
    ).drop("_nums", "_stm")


def _merge_json(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """Concatenate two JSON-object strings (either may be null)."""
    return (pl.when(a.is_null()).then(b)
            .when(b.is_null()).then(a)
            .otherwise(pl.concat_str([a.str.slice(0, a.str.len_chars() - 1), pl.lit(","), b.str.slice(1)])))


def _merge_json_some(df: pl.DataFrame, a: pl.Expr, b: str) -> pl.Expr:
    """``_merge_json(a, col(b))`` computed only on the rows where ``b`` is set (often few: the
    string slicing and concatenation of every row's attrs is not free)."""
    some = pl.col(b).is_not_null()
    if not df.select(some.any()).item():
        return a
    return pl.coalesce(pl.lit(_on_rows(df, some, _merge_json(a, pl.col(b)), pl.String)), a)


# ---------------------------------------------------------------------------------------------
def _chunk_events(df: pl.DataFrame, st: _State, final: bool) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Events of one chunk, and the raw rows to carry into the next chunk."""
    base = rows_in_halves(_wrap, df)
    _feed_phase(base, st.phase)
    base, kept = collapse_info(base, st.pending, st.collapse_floor)
    if kept is not None:
        df = df.filter(kept)
    blocks, consumed, open_at = group_blocks(base, final)
    lines_for_fams = base.filter(~pl.col("lineno").is_in(pl.Series(list(consumed), dtype=pl.Int64).implode())) \
        if consumed else base
    fams = _families(lines_for_fams, st)
    frames = [f for f in fams if not f.is_empty()]
    keep = [c for c in ("lineno", "line", "body", "stream", "wrank", "srun", "repeated",
                        "category", "host", "pid", "tid", "dev", "rank", "sev", *_T_COLS, "msg", "name", "kind", "attrs", "_cls")]
    if frames:
        ev = pl.concat([f.select([c for c in keep if c in f.columns]) for f in frames], how="diagonal_relaxed")
        ev = rows_in_halves(_messages, ev)
        ev = _times(ev, st)
    else:
        ev = pl.DataFrame(schema={"lineno": pl.Int64})
    brows = block_rows(blocks, st.block_pids, st.zone)
    if brows:
        bf = pl.DataFrame({      # (columns, not row dicts: Polars reads lists much faster)
            "lineno": [r["line"] for r in brows], "line": [r["text"] for r in brows],
            "stream": [r.get("stream", "") for r in brows], "category": [r["category"] for r in brows],
            "name": [r["name"] for r in brows], "kind": [r["kind"] for r in brows],
            "sev": [r["severity"] for r in brows], "rank": [r.get("rank") for r in brows],
            "pid": [r.get("pid") for r in brows], "host": [r.get("host") for r in brows],
            "ts": [r.get("ts") for r in brows], "res": [r.get("res") for r in brows],
            "attrs": [attrs_json(r["attrs"]) for r in brows],
            "wrank": [None] * len(brows), "_blk": [True] * len(brows)}, schema_overrides={
            "lineno": pl.Int64, "rank": pl.Int64, "pid": pl.Int64, "ts": pl.Int64, "res": pl.Int64,
            "host": pl.String, "wrank": pl.String, "kind": pl.String}, strict=False)   # (a 30-digit pid: null)
        ev = pl.concat([ev, bf], how="diagonal_relaxed") if ev.width > 1 else bf
    if ev.width <= 1 or ev.is_empty():
        carry = None if final else (df.filter(pl.col("lineno") >= open_at) if open_at else None)
        _count_other(st, None if carry is None else open_at)
        return pl.DataFrame(), carry
    if not ev["lineno"].is_sorted():     # (one family and no blocks: in order already)
        ev = ev.sort("lineno", maintain_order=True)
    # what waits for the next chunk: rows after the last timed row, and any open block
    carry_from = None
    if not final:
        last_timed = ev.select(pl.col("lineno").filter(pl.col("ts").is_not_null()).max()).item()
        if last_timed is None:
            carry_from = int(df["lineno"].min())
        elif int(ev["lineno"].max()) > last_timed:
            carry_from = int(last_timed) + 1
        if open_at is not None:
            carry_from = open_at if carry_from is None else min(carry_from, open_at)
        if carry_from is not None and int(df["lineno"].max()) - carry_from + 1 > MAX_CARRY_ROWS:
            carry_from = open_at
    carry = None
    if not final:
        if carry_from is not None:
            ev = ev.filter(pl.col("lineno") < carry_from)
        # The last timed row before the cut travels along as context: the lower bound of the
        # interpolation of the next chunk's first untimed rows (a traceback right after the cut has
        # no other), also when nothing else waits. Every row before the cut is emitted here; in the
        # next chunk the rows before it are context only (``context_line``).
        ctx_row = ev.select(pl.col("lineno").filter(
            pl.col("ts").is_not_null() & ~pl.col("category").is_in(["launcher", "traceback"])).max()).item()
        if carry_from is not None:
            carry = df.filter(pl.col("lineno") >= (carry_from if ctx_row is None else int(ctx_row)))
        elif ctx_row is not None:
            carry_from = int(df["lineno"].max()) + 1
            carry = df.filter(pl.col("lineno") == int(ctx_row))
        if carry is not None:
            st.context_line = carry_from - 1
    _count_other(st, carry_from)
    return ev, carry


_T_COLS = ("t_y", "t_mo", "t_d", "t_h", "t_mi", "t_s", "t_fns", "t_res", "t_off")


def _times(ev: pl.DataFrame, st: _State) -> pl.DataFrame:
    """ts (epoch ns, wall) and res (ns) for every row with a stamp; year inference."""
    dated = pl.col("t_y").is_not_null() & pl.col("t_h").is_not_null()
    ev = ev.with_columns(
        pl.when(dated).then(pl.col("t_y")).forward_fill().backward_fill().alias("_ry"),
        pl.when(dated).then(pl.col("t_mo")).forward_fill().backward_fill().alias("_rm"))
    y, mo = ev.select(pl.col("t_y").filter(dated).last(), pl.col("t_mo").filter(dated).last()).row(0)
    if y is not None:       # (the last dated row's year and month; no copy of the rows)
        st.ref_year, st.ref_month = int(y), int(mo)
        st.year_from = st.year_from or "dated lines in the file"
    need_year = (pl.col("t_y").is_null() & pl.col("t_h").is_not_null())
    if ev.select(need_year.any()).item() and st.ref_year is None and ev.select(pl.col("_ry").is_null().all()).item():
        st.year_from = st.year_from or "file modification time (no dated line in the file)"
    stamps = functools.partial(_stamps, ref_year=st.ref_year if st.ref_year else st.mtime_year,
                               ref_month=st.ref_month, zone=st.zone)
    return rows_in_halves(stamps, ev)


def _stamps(ev: pl.DataFrame, ref_year: int, ref_month: int | None, zone: str | None) -> pl.DataFrame:
    """``ts`` and ``res`` of each row from its stamp's pieces (a row-wise step): ``_ry`` and ``_rm``
    are the year and month of the nearest dated row, ``ref_year`` and ``ref_month`` the file's."""
    ry = pl.coalesce(pl.col("_ry"), pl.lit(ref_year))
    rm = pl.col("_rm").fill_null(ref_month) if ref_month else pl.coalesce(pl.col("_rm"), pl.col("t_mo"))
    year = (pl.when(pl.col("t_y").is_not_null()).then(pl.col("t_y"))
            .when(pl.col("t_mo") - rm > 6).then(ry - 1)
            .when(rm - pl.col("t_mo") > 6).then(ry + 1)
            .otherwise(ry))
    # (the year is used several times: a column first, see local_epoch_ns)
    ev = ev.with_columns(year.alias("_yr"))
    year, hms, off = pl.col("_yr"), (pl.col("t_h"), pl.col("t_mi"), pl.col("t_s")), pl.col("t_off")
    local = local_epoch_ns(year, pl.col("t_mo"), pl.col("t_d"), hms, pl.col("t_fns"), zone)
    timed = pl.col("t_h").is_not_null()
    if ev.select(off.is_null().all()).item():      # (no stated offset: no UTC reading)
        ts = pl.when(timed).then(local)
    else:
        utc = local_epoch_ns(year, pl.col("t_mo"), pl.col("t_d"), hms, pl.col("t_fns"), None) - off * NS
        ts = pl.when(~timed).then(None).when(off.is_not_null()).then(utc).otherwise(local)
    return ev.with_columns(
        ts.alias("ts"),
        pl.when(timed).then(pl.col("t_res")).alias("res"),
    ).drop("_ry", "_rm", "_yr", *_T_COLS)   # (the pieces are not read after
    # this: fewer columns to sort)


# ---------------------------------------------------------------------------------------------
def _on_rows(df: pl.DataFrame, mask: pl.Expr, expr: pl.Expr, dtype) -> pl.Series:
    """``expr`` evaluated only on the rows where ``mask`` holds (null elsewhere): for costly regexes."""
    sub = df.lazy().with_row_index("_on_i").filter(mask).select(
        "_on_i", expr.cast(dtype, strict=False).alias("_v")).collect()
    return scatter(df.height, sub["_on_i"], sub["_v"])


def _ranks(ev: pl.DataFrame, st: _State) -> pl.DataFrame:
    """Fill rank and pid from what each stream / NCCL pid states elsewhere."""
    txt = pl.coalesce(pl.col("msg"), pl.col("body"), pl.lit(""))
    own = pl.coalesce(pl.col("rank").cast(pl.Int64, strict=False), pl.col("wrank").cast(pl.Int64, strict=False))
    # the rank a message states, where the row has none of its own and is not NCCL's: RANK_IN_TEXT's
    # groups, else c10d's "[PG ... Rank N]" prefix of the message; read by the compiled reader, and
    # by the regexes on the messages it leaves (not ASCII)
    sub = ev.lazy().with_row_index("_on_i").filter(own.is_null() & (pl.col("category") != "nccl")).select(
        "_on_i", txt.alias("_t"), "msg").collect()
    if not sub.is_empty():
        rs = native.rank_said(native.texts(sub["_t"]))
        said = sub.select("_on_i", pl.coalesce(pl.Series(rs.g1), pl.Series(rs.g2), pl.when(
            pl.col("msg").is_not_null()).then(pl.Series(rs.pg))).alias("_v"))
        if rs.unsure:
            left = pl.Series(rs.code) == native.UNSURE
            rk = pl.col("_t").str.extract_groups(RANK_IN_TEXT)
            x = sub.filter(left).select(pl.coalesce(
                rk.struct.field("1").cast(pl.Int64, strict=False), rk.struct.field("2").cast(pl.Int64, strict=False),
                pl.col("msg").str.extract(PG_RANK, 1).cast(pl.Int64, strict=False)).alias("_v"))["_v"]
            said = said.with_columns(said["_v"].scatter(left.arg_true(), x))
        ev = ev.with_columns(scatter(ev.height, said["_on_i"], said["_v"]).alias("_said"))
    else:
        ev = ev.with_columns(pl.lit(None, pl.Int64).alias("_said"))
    ev = ev.with_columns(pl.coalesce(own, pl.col("_said"), pl.col("srun").cast(pl.Int64, strict=False))
                         .alias("rank")).drop("_said")
    # stream -> rank / pid learnt from lines that state them (worker streams only; the first value
    # a stream states stays, so the streams already in a map are not read for it again)
    ws = ev.lazy().select("stream", "rank", "category", "pid", "body").filter(
        (pl.col("stream").fill_null("") != "|||") & (pl.col("stream").fill_null("") != "")).collect()
    for s, r in ws.filter(pl.col("rank").is_not_null() & ~pl.col("stream").is_in(list(st.stream_rank))).group_by(
            "stream").agg(pl.col("rank").first()).iter_rows():
        st.stream_rank.setdefault(s, r)
    pid_said = pl.coalesce(pl.when(pl.col("category").is_in(["usdt"])).then(pl.col("pid")),
                           pl.col("body").str.extract(r"\bpid[=:] ?(\d+)\b", 1).cast(pl.Int64, strict=False))
    if st.stream_pid:
        ws = ws.filter(~pl.col("stream").is_in(list(st.stream_pid)))
    ws = ws.filter((pl.col("category") == "usdt") | pl.col("body").str.contains("pid", literal=True))
    for s, p in ws.with_columns(pid_said.alias("_p")).filter(pl.col("_p").is_not_null()).group_by("stream").agg(
            pl.col("_p").first()).iter_rows():
        st.stream_pid.setdefault(s, p)
    # NCCL pid -> rank of its largest communicator
    # (a row equal to an earlier one changes nothing below: the table keeps the first comm entry and
    # the largest nranks, and "complete" is only ever set; so each distinct row is read once, in order)
    inits = ev.lazy().filter(pl.col("name") == "nccl_comm_init").select("host", "pid", "attrs").unique(
        maintain_order=True).collect()
    for host, pid, attrs in inits.iter_rows():
        a = json.loads(attrs)
        key = (host, pid, a.get("cuda_dev"))      # one process may drive several GPUs (nccl-tests -g)
        cur = st.pid_rank.get(key)
        if a.get("nranks") is not None and (cur is None or a["nranks"] > cur[0]):
            st.pid_rank[key] = (a["nranks"], a.get("rank"))
        if a.get("comm") not in st.comms:
            st.comms[a.get("comm")] = {k: a.get(k) for k in (
                "rank", "nranks", "cuda_dev", "nvml_dev", "bus_id", "comm_id", "api")} | {"host": host, "pid": pid}
        if a.get("phase") == "COMPLETE":
            st.comms[a.get("comm")]["complete"] = True
    # (each map fills the rows without a value only: skipped where every row has one)
    if st.stream_rank and ev["rank"].null_count():
        ev = ev.with_columns(pl.coalesce(pl.col("rank"), pl.col("stream").replace_strict(
            st.stream_rank, default=None, return_dtype=pl.Int64)).alias("rank"))
    if st.stream_pid and ev["pid"].null_count():
        ev = ev.with_columns(pl.when(pl.col("category") == "elastic").then(pl.col("pid")).otherwise(
            pl.coalesce(pl.col("pid"), pl.col("stream").replace_strict(st.stream_pid, default=None,
                                                                        return_dtype=pl.Int64))).alias("pid"))
    if st.pid_rank and ev.select(((pl.col("category") == "nccl") & pl.col("rank").is_null()).any()).item():
        keys = pl.concat_str([pl.col("host").fill_null(""), pl.col("pid").cast(pl.String),
                              pl.col("dev").cast(pl.String)], separator=":")
        mp = {f"{h or ''}:{p}:{d}": r for (h, p, d), (_, r) in st.pid_rank.items()}
        ev = ev.with_columns(pl.when(pl.col("category") == "nccl").then(pl.coalesce(
            pl.col("rank"), keys.replace_strict(mp, default=None, return_dtype=pl.Int64))).otherwise(
            pl.col("rank")).alias("rank"))
    return ev


def _typed(ev: pl.DataFrame, st: _State) -> pl.DataFrame:
    """Kinds and summaries that need per-row logic (few rows: WARNs, failures, errors)."""
    ev = ev.with_columns(
        pl.when(pl.col("name") == "nccl_warn").then(pl.lit("nccl_warn")).otherwise(pl.col("kind")).alias("kind"))
    sel = ev.filter(pl.col("kind").is_not_null() | pl.col("name").is_in(
        ["nccl_error_return", "worker_failed", "nccl_version", "closing_signal"]))
    # rows summarised already (the grouped blocks, ``_blk``: every one has a summary) are left as
    # they are: not decoded in Python, nor their attrs searched for the summary
    if "_blk" in sel.columns:
        sel = sel.filter(pl.col("_blk").is_null())
    summ = pl.col("attrs").str.json_path_match("$.summary")
    sel = sel.filter((pl.col("name") == "nccl_version") | summ.is_null() | (summ == ""))
    if sel.is_empty():
        return ev
    upd = {}
    for r in sel.select("lineno", "name", "kind", "attrs", "host", "pid", "rank", "msg", "body").iter_rows(named=True):
        a = json.loads(r["attrs"]) if r["attrs"] else {}
        a = {k: v for k, v in a.items() if v is not None}
        kind, name = r["kind"], r["name"]
        who = _who(r)
        msg = (r["msg"] or r["body"] or "").strip()
        if name == "nccl_version":
            st.versions.setdefault(a.get("version"), r["lineno"])
            continue
        if name == "closing_signal":     # `via 9`: the signal's name, as the other lines give it
            if str(a.get("signal") or "").isdigit():
                a["signal"] = signame(-int(a["signal"])) or a["signal"]
                upd[r["lineno"]] = (kind, json.dumps(a))
            continue
        if a.get("summary"):        # blocks: summarised where they were grouped
            continue
        if name == "nccl_warn":
            cls = warn_class(msg)
            a["warn_class"] = cls
            a["summary"] = f"NCCL WARN ({WARN_LABELS[cls]}){who}: {msg[:240]}"
        elif name == "nccl_error_return":
            src = os.path.basename(a.get("err_src", ""))
            key = (r["host"], r["pid"])
            code = a.get("err_code")
            a["nccl_result"] = NCCL_RESULT.get(code)
            if src in INIT_FAILURE_FILES and key not in st.init_failed:
                st.init_failed.add(key)
                kind = "nccl_init_failure"
                what = ("NCCL could not connect the communicator's ranks" if src in CONNECT_FILES
                        else "NCCL communicator init failed")
                a["summary"] = (f"{what}{who}: {a['nccl_result'] or 'error ' + str(code)}"
                                f" returned through {a.get('err_src')}:{a.get('err_line')}")
            else:
                upd[r["lineno"]] = (kind, json.dumps(a))
                continue
        elif name == "worker_failed":
            code = a.get("exitcode")
            sig = signame(code) if code is not None else None
            a["signal"] = sig
            a["summary"] = (f"torchrun: worker local_rank {a.get('local_rank')} (pid {a.get('worker_pid')}) failed "
                            f"with exitcode {code}" + (f" ({sig})" if sig else ""))
            st.pending_failed.append((r["lineno"], a))
        elif kind == "collective_timeout":
            a["summary"] = timeout_summary(name, a, who, msg)
        elif kind == "collective_mismatch":
            a["summary"] = f"collective mismatch{who}: {msg[:240]}"
        elif kind == "python_exception":
            said = message_in(a.get("exc_msg") or "")
            if said:
                a.update(said[2])
                if said[1]:
                    kind = said[1]
            a["summary"] = f"{a.get('exc')}: {(a.get('exc_msg') or '')[:240]}{who}"
        elif kind == "nccl_warn":
            pass
        else:
            told = SAID.get(name)
            a.setdefault("summary", told.format_map(Unknown(a)) + who if told else f"{name}{who}: {msg[:240]}")
        upd[r["lineno"]] = (kind, json.dumps(a, default=str))
    if not upd:
        return ev
    ks = list(upd)
    m = pl.DataFrame({"lineno": ks, "_k": [upd[k][0] for k in ks], "_a": [upd[k][1] for k in ks]},
                     schema={"lineno": pl.Int64, "_k": pl.String, "_a": pl.String})
    ev = ev.join(m, on="lineno", how="left").with_columns(
        pl.when(pl.col("_a").is_not_null()).then(pl.col("_k")).otherwise(pl.col("kind")).alias("kind"),
        pl.coalesce(pl.col("_a"), pl.col("attrs")).alias("attrs")).drop("_k", "_a")
    return ev


def _who(r: dict) -> str:
    parts = []
    if r.get("rank") is not None:
        parts.append(f"rank {r['rank']}")
    if r.get("host"):
        parts.append(f"{r['host']}" + (f":{r['pid']}" if r.get("pid") is not None else ""))
    elif r.get("pid") is not None:
        parts.append(f"pid {r['pid']}")
    return (" on " + ", ".join(parts)) if parts else ""



# ---------------------------------------------------------------------------------------------
OUT_COLS = ("host", "rank", "pid", "tid", "ts_raw_ns", "ts_interpolated", "category", "name", "kind",
            "severity", "line", "text", "attrs")


_EV_SCHEMA = {"host": pl.String, "rank": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "dev": pl.String, "ts": pl.Int64,
              "res": pl.Int64, "category": pl.String, "name": pl.String, "kind": pl.String, "sev": pl.String,
              "attrs": pl.String, "msg": pl.String, "body": pl.String, "stream": pl.String, "wrank": pl.String,
              "srun": pl.String, "repeated": pl.Int32, "_cls": pl.String, "_step": pl.Int64, "_total": pl.Int64,
              "_loss": pl.Float64, "_stime": pl.Float64}
_NCCL_CLASSES = list(COLLAPSED_NAMES)
_STEP_FIELDS = {"_step": "step", "_total": "total_steps", "_loss": "loss", "_stime": "step_time_s"}


def _collapse_rows(cl: pl.DataFrame, st: _State, sink) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collapsed rows of a chunk (``_cls`` set): step metrics, group counts; returns each group's
    last row of the chunk (with ``_g``) and the chunk's groups (class, lines, first line and time,
    sets: what :class:`_Stash` keeps with that row once it is made, see :func:`_emit`).

    Groups: NCCL classes per (class, host, pid, cudaDev); steps and plain log lines per rank.
    Every step line becomes ``metrics`` rows (step, loss, step_time). The groups accumulate in
    ``st.stash`` over the whole file; each group's last row is the one event written for it at
    the end (``_finish``).
    """
    s = lambda c: pl.col(c).cast(pl.String).fill_null("")
    is_nccl = pl.col("_cls").is_in(_NCCL_CLASSES)
    # the group's key columns per row; its name (the stash's key) is written for each group, not
    # for each row (two key tuples may write one name, "a|1" and 1 or "a" and "1|1": one group then)
    nccl = cl.select(is_nccl.sum()).item()
    if nccl == 0 or nccl == cl.height:      # (one kind of group: its own columns are the key)
        keys = ["_cls", "host", "pid", "dev"] if nccl else ["_cls", "rank"]
    else:
        keys = ["_cls", "_kh", "_kp", "_kd", "_kr"]
        cl = cl.with_columns(*(pl.when(is_nccl).then(pl.col(c)).alias(k) for k, c in (("_kh", "host"), ("_kp", "pid"),
                                                                                      ("_kd", "dev"))),
                             pl.when(~is_nccl).then(pl.col("rank")).alias("_kr"))
    if len(keys) == 5:
        name = pl.when(is_nccl).then(pl.concat_str([s(c) for c in keys[:4]], separator="|")).otherwise(
            pl.concat_str([s("_cls"), s("_kr")], separator="|"))
    else:
        name = pl.concat_str([s(c) for c in keys], separator="|")
    name = name.alias("_g")
    steps = cl.filter(pl.col("_cls") == "step")
    if not steps.is_empty():
        # (the names, units and entities repeat on millions of rows: Categorical columns, which
        # the sink writes dictionary-encoded as they are)
        cat = pl.Categorical
        # ("rank N" written once per rank, not per row: the ranks' names as an Enum, then Categorical)
        ranks = sorted(steps["rank"].drop_nulls().unique().to_list())
        names = [f"rank {r}" for r in ranks]
        m = steps.select(pl.col("host").cast(cat), pl.col("rank").replace_strict(
            dict(zip(ranks, names)), default=None, return_dtype=pl.Enum(names)).cast(cat).alias("entity"),
            pl.col("ts").alias("ts_raw_ns"), pl.col("lineno").alias("line"), "_step", "_loss", "_stime")
        parts = [m.select("host", "entity", "ts_raw_ns", pl.lit("step", cat).alias("metric"),
                          pl.col("_step").cast(pl.Float64).alias("value"), pl.lit("count", cat).alias("unit"), "line")]
        for col, metric, unit in (("_loss", "loss", "-"), ("_stime", "step_time", "s")):
            v = m.filter(pl.col(col).is_not_null())
            if not v.is_empty():
                parts.append(v.select("host", "entity", "ts_raw_ns", pl.lit(metric, cat).alias("metric"),
                                      pl.col(col).alias("value"), pl.lit(unit, cat).alias("unit"), "line"))
        sink.add_frame("metrics", pl.concat(parts).filter(pl.col("value").is_not_null()))
    agg = cl.group_by(*keys, maintain_order=True).agg(
        pl.len().alias("n"), pl.col("lineno").min().alias("first"),
        pl.col("ts").sort_by("lineno").first().alias("first_ts"), pl.col("lineno").max().alias("last")).with_columns(name)
    if agg["_g"].n_unique() < agg.height:
        agg = agg.group_by("_g", maintain_order=True).agg(
            pl.col("_cls").first(), pl.col("n").sum(), pl.col("first").min(),
            pl.col("first_ts").sort_by("first").first(), pl.col("last").max())
    agg = agg.select("_g", "_cls", "n", "first", "first_ts", "last")
    for k, v in cl.group_by("category").len().iter_rows():
        st.families[k] = st.families.get(k, 0) + v
    # lines dropped before parsing (NCCL INFO) count for the row that stood for them
    extra: dict = {}
    if st.pending:
        for g, ln in cl.filter(pl.col("lineno").is_in(list(st.pending))).select(name, "lineno").iter_rows():
            p = st.pending.pop(ln)
            e = extra.setdefault(g, {"n": 0, "via": set(), "chan": set()})
            e["n"] += p["n"]
            e["via"] |= p["via"]
            e["chan"] |= p["chan"]
    if extra:
        st.families["nccl"] = st.families.get("nccl", 0) + sum(x["n"] for x in extra.values())
        x = pl.DataFrame([pl.Series("_g", list(extra), pl.String),
                          pl.Series("_xn", [x["n"] for x in extra.values()], pl.Int64),
                          lists("via", [sorted(x["via"]) for x in extra.values()], pa.string()),
                          lists("chan", [x["chan"] for x in extra.values()], pa.int32())])
        groups = agg.join(x, on="_g", how="left").select(
            "_g", "_cls", pl.col("n") + pl.col("_xn").fill_null(0), "first", "first_ts", "via", "chan")
    else:
        groups = agg.select("_g", "_cls", "n", "first", "first_ts",
                               *(pl.lit(None, t).alias(c) for c, t in _GROUP_SETS.items()))
    reps = cl.filter(pl.col("lineno").is_in(agg["last"].implode())).with_columns(name).drop(
        [k for k in keys if k.startswith("_k")])
    reps = reps.with_columns(pl.when(is_nccl & (pl.col("_cls") != "coll")).then(
        pl.col("_cls").replace_strict(COLLAPSED_NAMES, default=None)).otherwise(pl.col("name")).alias("name"))
    if reps.select((pl.col("_cls") == "step").any()).item():
        sj = pl.struct([pl.col(c).alias(a) for c, a in _STEP_FIELDS.items()]).struct.json_encode()
        reps = reps.with_columns(pl.when(pl.col("_cls") == "step").then(_merge_json(pl.col("attrs"), sj))
                                 .otherwise(pl.col("attrs")).alias("attrs"))
    return reps, groups


def _emit(ev: pl.DataFrame, st: _State, sink) -> None:
    ev = ev.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in _EV_SCHEMA.items() if c not in ev.columns])
    ev = _ranks(ev, st)
    ev = interpolate(ev, "ts", "res")
    if st.context_line is not None:
        ev = ev.filter(pl.col("lineno") > st.context_line)
    has_cls = pl.col("_cls").is_not_null()
    reps = None
    if ev.select(has_cls.any()).item():
        cl, ev = ev.filter(has_cls), ev.filter(~has_cls)
        st.hosts.update(h for h in cl["host"].unique().to_list() if h)
        st.ranks.update(r for r in cl["rank"].unique().to_list() if r is not None)
        st.pids.update(p for p in cl.filter(pl.col("category") != "elastic")["pid"].unique().to_list()
                       if p is not None)
        reps, groups = _collapse_rows(cl, st, sink)
    ev = _typed(ev, st)
    if reps is not None:
        ev = pl.concat([ev, reps], how="diagonal_relaxed")
    else:
        ev = ev.with_columns(pl.lit(None, pl.String).alias("_g"))
    # the time bounds, the resolution of typed rows and Ray's repeat count are appended to the
    # attrs object in one merge (the members without braces, joined; null ones left out)
    bounds = pl.when(pl.col("ts_interp")).then(pl.concat_str([
        pl.lit('"ts_bound":"'), pl.col("ts_bound"), pl.lit('"'),
        pl.when(pl.col("ts_bound") == "between").then(pl.concat_str([
            pl.lit(',"ts_lo_ns":'), pl.col("ts_lo").cast(pl.String), pl.lit(',"ts_hi_ns":'),
            pl.col("ts_hi").cast(pl.String), pl.lit(',"ts_uncertainty_ns":'),
            ((pl.col("ts_hi") - pl.col("ts_lo")) // 2).cast(pl.String)])).otherwise(pl.lit(""))]))
    typed_res = pl.when(pl.col("kind").is_not_null() & ~pl.col("ts_interp") & pl.col("res").is_not_null()).then(
        pl.concat_str([pl.lit('"ts_resolution_ns":'), pl.col("res").cast(pl.String)]))
    extra = pl.concat_str([pl.lit('"repeated":'), pl.col("repeated").cast(pl.String)])
    # a finding on a torchrun ``[defaultN]:`` stream whose global rank no line stated: the local
    # rank is kept, for the launcher's failure table (rank N (local_rank: M)) to resolve later
    tee = pl.col("stream").fill_null("").str.extract(r"^(\d+)\|\|\|$", 1)
    local = pl.when(pl.col("kind").is_not_null() & pl.col("rank").is_null() & tee.is_not_null()).then(
        pl.concat_str([pl.lit('"local_rank":'), tee]))
    ev = ev.with_columns(_x=pl.concat_str([bounds, typed_res, extra, local], separator=",", ignore_nulls=True))
    a, x = pl.col("attrs"), pl.col("_x")
    ev = ev.with_columns(attrs=pl.when(x == "").then(a).when(a.is_null()).then(pl.concat_str([
        pl.lit("{"), x, pl.lit("}")])).otherwise(pl.concat_str([a.str.slice(0, a.str.len_chars() - 1), pl.lit(","), x,
                                                                pl.lit("}")]))).drop("_x")
    out = ev.select(
        pl.col("host"), pl.col("rank").cast(pl.Int32, strict=False), pl.col("pid"), pl.col("tid"),
        pl.col("ts").alias("ts_raw_ns"), pl.col("ts_interp").alias("ts_interpolated"),
        pl.col("category"), pl.col("name").fill_null(pl.col("category")), pl.col("kind"),
        pl.col("sev").alias("severity"), pl.col("lineno").alias("line"),
        pl.col("line").str.slice(0, 4000).alias("text"), pl.col("attrs"), pl.col("_g"))
    if reps is not None:
        st.stash.add(groups.join(out.filter(pl.col("_g").is_not_null()), on="_g", how="left"))
        out = out.filter(pl.col("_g").is_null())
    out = out.drop("_g")
    out = _underlying(out)
    _count(out, st)
    st.hosts.update(h for h in out["host"].unique().to_list() if h)
    st.ranks.update(r for r in out["rank"].unique().to_list() if r is not None)
    st.pids.update(p for p in out.filter(pl.col("category") != "elastic")["pid"].unique().to_list() if p is not None)
    sink.add_frame("events", out)


def _underlying(out: pl.DataFrame) -> pl.DataFrame:
    """``out`` plus one event per line that names an ``UNDERLYING`` fault (see there)."""
    text = out["text"].fill_null("")
    if not text.str.contains_any([u[2] for u in UNDERLYING]).any():
        return out
    extra = []
    for name, kind, lit, summary in UNDERLYING:
        hit = out.filter(text.str.contains(lit, literal=True))
        if hit.is_empty():
            continue
        hit = hit.unique("line", keep="first", maintain_order=True)
        extra.append(hit.with_columns(pl.lit("fault").alias("category"), pl.lit(name).alias("name"),
                                      pl.lit(kind).alias("kind"),
                                      pl.lit(json.dumps({"summary": summary, "read_from": "the line's error"}))
                                      .alias("attrs")))
    return pl.concat([out, *extra], how="vertical_relaxed")


def _count(out: pl.DataFrame, st: _State) -> None:
    """Bookkeeping of written events for the source attrs (time coverage, lines per family)."""
    st.timed += int(out["ts_raw_ns"].is_not_null().sum() - out["ts_interpolated"].sum())
    st.interpolated += int(out["ts_interpolated"].sum())
    for k, v in out.group_by("category").len().iter_rows():
        st.families[k] = st.families.get(k, 0) + v


def _collapsed_events(st: _State) -> Iterator[pl.DataFrame]:
    """The one event of each collapse group (its last line), with what it stands for in attrs: in
    line order, :data:`COLLAPSED_BATCH` groups a frame (their attrs are Python objects meanwhile)."""
    groups = st.stash.merged()
    if groups is None:
        return
    lines = groups["line"].to_list()
    # (in line order)
    order = sorted((i for i, v in enumerate(lines) if v is not None), key=lines.__getitem__)
    del lines
    if not order:
        return
    if order != list(range(groups.height)):
        groups = groups[order]
    del order
    have = groups.schema
    for lo in range(0, groups.height, COLLAPSED_BATCH):
        batch = groups.slice(lo, COLLAPSED_BATCH)
        attrs = []
        # (Series, not frame operations: each of those costs more than the few groups of most files)
        for cls, n, first, first_ts, via, chan, row_attrs, line, rank, ts in zip(*(batch[c].to_list() for c in (
                "_cls", "n", "first", "first_ts", "via", "chan", "attrs", "line", "rank", "ts_raw_ns"))):
            a = attrs_of(row_attrs)
            a.update(collapsed=cls, lines=n, first_line=first, last_line=line)
            if first_ts is not None:
                a["first_ts_ns"] = first_ts
            if cls == "topo":
                a["transports"] = via or []
                a["channels"] = len(chan or ())
            attrs.append(attrs_json(a))
            if cls == "step":
                st.last_step[rank] = {"step": a.get("step"), "line": line, "ts_raw_ns": ts}
            elif cls == "coll":
                st.coll_lines += n
        yield pl.DataFrame([pl.Series("attrs", attrs, pl.String) if c == "attrs" else
                            batch[c] if have[c] == t else batch[c].cast(t) for c, t in _EVENT_COLS.items()])


COLLAPSED_BATCH = 65_536


_EVENT_COLS = {"host": pl.String, "rank": pl.Int32, "pid": pl.Int64, "tid": pl.Int64, "ts_raw_ns": pl.Int64,
               "ts_interpolated": pl.Boolean, "category": pl.String, "name": pl.String, "kind": pl.String,
               "severity": pl.String, "line": pl.Int64, "text": pl.String, "attrs": pl.String}
_GROUP_SETS = {"via": pl.List(pl.String), "chan": pl.List(pl.Int32)}    # (a group's sets, see _Stash)


class _Stash:
    """The collapse groups of a file: per group (``_g``) its class, line count, first line and
    time, the transports and channel numbers of its dropped topology lines, and its last row (an
    event's columns, :data:`_EVENT_COLS`), which becomes the group's one event at the end.

    Each chunk adds a frame of its groups; the frames are merged into one row per group when they
    hold more rows than twice the groups of the last merge. Kept as columns, not as Python objects
    per group: a file can have as many groups as lines (an NCCL log of thousands of processes),
    and the merges cost time linear in the rows added.
    """
    MIN_MERGE_ROWS = 50_000

    def __init__(self) -> None:
        self.parts: list[pl.DataFrame] = []
        self.rows = 0
        self.merged_rows = 0

    def add(self, part: pl.DataFrame) -> None:
        # (copied out of the chunk: a string column that Polars filters or gathers still points
        # into the whole chunk's text, which would then be kept until the end of the file)
        part = pl.from_arrow(part.to_arrow())
        self.parts.append(part)
        self.rows += part.height
        if len(self.parts) > 1 and self.rows > max(2 * self.merged_rows, self.MIN_MERGE_ROWS):
            self.parts = [self.merged()]
            self.rows = self.merged_rows = self.parts[0].height

    def merged(self) -> pl.DataFrame | None:
        """One row per group: its lines summed, its first line and that line's time, the union of
        its sets, and the row of its last line."""
        if not self.parts:
            return None
        if len(self.parts) == 1:        # (a chunk's frame has one row per group)
            return self.parts[0]
        every = pl.concat(self.parts, how="diagonal_relaxed")
        heads = every.group_by("_g", maintain_order=True).agg(
            pl.col("_cls").first(), pl.col("n").sum(), pl.col("first").min(),
            pl.col("first_ts").sort_by("first").first(),
            pl.col("via").explode().drop_nulls().unique().sort(),
            pl.col("chan").explode().drop_nulls().unique().sort())
        last = every.filter(pl.col("line").is_not_null()).sort("line").unique("_g", keep="last")
        return heads.join(last.select("_g", *_EVENT_COLS), on="_g", how="left", maintain_order="left")


def parse_log(ctx: ParseContext) -> None:
    """Parse a text log (NCCL, c10, torchrun, training) into events, facts and source attrs."""
    try:
        mtime_year = datetime.fromtimestamp(os.stat(ctx.path).st_mtime, timezone.utc).year
    except OSError:
        mtime_year = 1970
    st = _State(zone=ctx.time_zone, mtime_year=mtime_year)
    # The chunks' parts are written on another thread while the next chunk is parsed, and every
    # sink call of the chunks (the reader's too) goes through that thread, in order.
    real = ctx.sink
    ctx.sink = sink = SinkThread(real)
    try:
        _chunks(ctx, st, sink)
    except BaseException:
        sink.close(check=False)
        raise
    finally:
        ctx.sink = real
    sink.close()
    _finish(ctx, st)


def _chunks(ctx: ParseContext, st: _State, sink: SinkThread) -> None:
    carry = None
    frames = ctx.line_frames()
    # A file of one chunk is known to end with it (the look at what follows costs nothing). In a
    # larger one each chunk is parsed as if more followed, and what waits at the end for lines that
    # never come is parsed last, as the end: a look ahead would wait for the next chunk's read,
    # which goes on meanwhile on the reader's thread (see ParseContext.line_frames).
    peek = ctx.one_chunk()
    pending = next(frames, None)
    while pending is not None:
        nxt = next(frames, None) if peek else pending
        df = pending.select("lineno", "line")
        garbage = pending["nul"]
        if garbage.any():
            st.garbage += int(garbage.sum())
            for ln, text in df.filter(garbage).head(20).iter_rows():
                sink.issue("garbage", "binary data (NUL bytes) in a text log; line skipped", line=ln,
                           text=text.replace("\x00", "\\0")[:200])
            df = df.filter(~garbage)
        if carry is not None:
            df = pl.concat([carry, df])
        ctx_line, st.context_line = st.context_line, None
        st.collapse_floor = ctx_line
        ev, carry = _chunk_events(df, st, final=nxt is None)
        new_ctx, st.context_line = st.context_line, ctx_line
        if ev.width > 1 and not ev.is_empty():
            _emit(ev, st, sink)
        st.context_line = new_ctx
        pending = nxt if peek else next(frames, None)
    if carry is not None and not carry.is_empty():
        ctx_line = st.collapse_floor = st.context_line
        ev, _ = _chunk_events(carry, st, final=True)
        st.context_line = ctx_line
        if ev.width > 1 and not ev.is_empty():
            _emit(ev, st, sink)


_PHASE_C10 = r"^(?:\[rank\d+\]:)?\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{9} "
_PHASE_EXACT = r"^(?:(?:\[rank\d+\]:)?[DIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ |\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d[.,]\d{3})"


def _feed_phase(base: pl.DataFrame, ph: Phase) -> None:
    """c10 stamps and the exactly timed lines of the same streams, to :class:`.c10phase.Phase`."""
    if ph.pairs >= MAX_PHASE_PAIRS:
        return
    new = base.select("lineno", "stream", "body").filter(pl.col("lineno") > ph.upto)
    # (a c10 stamp starts the line with "[": the regex on those lines only, a log without any has none)
    lead = new["body"].str.starts_with("[")
    if not lead.any():
        return
    c10 = _on_rows(new, lead, pl.col("body").str.contains(_PHASE_C10), pl.Boolean).fill_null(False)
    if not c10.any():
        return
    streams = new.filter(c10)["stream"].unique().implode()
    rows = new.filter(c10 | (pl.col("stream").is_in(streams) & pl.col("body").str.contains(_PHASE_EXACT)))
    step = 4 * MAX_PHASE_PAIRS      # (a slice at a time: the pairs are full long before most logs end)
    for k in range(0, rows.height, step):
        part = rows.slice(k, step)
        ph.feed_lines(part["lineno"], part["stream"], native.texts(part["body"]))
        if ph.pairs >= MAX_PHASE_PAIRS:
            break


def _finish(ctx: ParseContext, st: _State) -> None:
    sink = ctx.sink
    phase = st.phase.result()
    if phase is not None:
        sink.fact("wall_monotonic_phase", json.dumps(phase))
    for last in _collapsed_events(st):
        st.timed += int(last["ts_raw_ns"].is_not_null().sum() - last["ts_interpolated"].sum())
        st.interpolated += int(last["ts_interpolated"].sum())
        sink.add_frame("events", last)
    # Worker failures the launcher reported but never summarised (no ChildFailedError block).
    for lineno, a in st.pending_failed:
        if a.get("worker_pid") not in st.block_pids:
            sink.fact("unsummarised_worker_failure", json.dumps(a), line=lineno)
    if st.pending_failed and not st.block_pids:
        ctx.attrs["worker_failures_without_summary"] = len(st.pending_failed)
    for v, line in st.versions.items():
        sink.fact("nccl_version", v, line=line)
    for rank, d in sorted(st.last_step.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        sink.fact("last_step" if rank is None else f"last_step.rank{rank}", d["step"], line=d["line"])
    for comm, d in list(st.comms.items())[:200]:
        sink.fact("nccl_comm", json.dumps(dict(d, comm=comm)), host=d.get("host"))
    if len(st.hosts) == 1:
        ctx.host = next(iter(st.hosts))
    if len(st.ranks) == 1:
        ctx.rank = int(next(iter(st.ranks)))
    if len(st.pids) == 1:
        ctx.pid = int(next(iter(st.pids)))
    if st.timed == 0 and st.interpolated == 0:
        ctx.clock_domain = CLOCK_NONE
    ctx.attrs.update({
        "line_families": dict(sorted(st.families.items())),
        "other_lines": st.other_lines,
        "nccl_coll_lines": st.coll_lines,
        "timed_events": st.timed,
        "interpolated_events": st.interpolated,
        "time_zone": ctx.time_zone or "UTC",
    })
    if st.year_from:
        ctx.attrs["year_from"] = st.year_from
    if st.versions:
        ctx.attrs["nccl_versions"] = sorted(v for v in st.versions if v)
    if st.last_step:
        ctx.attrs["last_step"] = {("?" if r is None else str(r)): d["step"] for r, d in st.last_step.items()}
    if st.comms:
        ctx.attrs["nccl_comms"] = len(st.comms)
    if len(st.hosts) > 1:
        ctx.attrs["hosts"] = sorted(st.hosts)[:64]
    if st.garbage:
        ctx.attrs["garbage_lines"] = st.garbage
    # dropped NCCL lines whose standing-in line never became an event
    unattributed = sum(p["n"] for p in st.pending.values())
    if unattributed:
        ctx.attrs["nccl_collapsed_unattributed"] = unattributed
