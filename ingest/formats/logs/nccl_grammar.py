"""The NCCL line grammar (NCCL_DEBUG=VERSION/WARN/INFO/TRACE, NCCL_DEBUG_FILE, or stdout captures).

Line grammar (NVIDIA/nccl src/debug.cc, every version; FORMATS.md §3.1)::

    [2026-05-05 06:16:47] host:pid:tid [cudaDev] file.cc:123 (func) NCCL WARN msg   2.30.7+
    [2026-05-05 06:16:47.123456] host:pid:tid [cudaDev] file.cc:123 NCCL WARN msg   2.26+ (%Xf fraction)
    host:pid:tid [cudaDev] file.cc:123 NCCL WARN msg                                < 2.26 (no time)
    host:pid:tid [cudaDev] NCCL INFO msg                                            (time only with
                                                                                    NCCL_DEBUG_TIMESTAMP_LEVELS)
    host:pid:tid [cudaDev] 12.345678 func:123 NCCL TRACE msg                        ms since NCCL's debug init
    host:pid:tid NCCL CALL ncclGroupStart()
    NCCL version 2.7.8+cuda10.2                                                     NCCL_DEBUG=VERSION

The header is searched anywhere in the line, not only at its start, because
stdout captures glue NCCL lines to whatever the program had printed without a
newline (``...float  sum  -1mew0:64904:64904 [1] NCCL INFO AllReduce: ...``) and
several processes writing one ``NCCL_DEBUG_FILE`` splice lines into each other
(``... nranks ljm:803563:803603 [0] NCCL INFO comm ...``). For a spliced line
the *last* complete header wins (its pid and tid are exact; the host is the one
this pid had on a clean line, since the hostname run-in with the text before it
cannot be split by a regex), and the number of lost fragments is kept.

Facts read from the INFO lines (declarative table ``INFO_GRAMMAR``): version,
communicator Init START/COMPLETE (comm pointer, rank, nranks, cudaDev, nvmlDev,
busId — kept to join GPU Xid lines in dmesg —, commId, API), ``comm ... nRanks
nNodes localRanks localRank``, rings, trees, channel connections and their
transport, NET plugin / IB devices / bootstrap interface, channel counts,
Destroy/Abort COMPLETE, COLL calls (opCount, count, datatype, comm) and error
return chains (``file.cc:123 -> 3``). WARN lines are classified by
``WARN_CLASSES`` (first match wins) and typed ``nccl_warn``; the first error
chain of a process that passes through ``init.cc``/``bootstrap.cc`` (creating the
communicator) or ``transport.cc`` (connecting its ranks) is typed ``nccl_init_failure``.

Repetitive INFO lines are not one event each (see :func:`collapse_info` and the
"Collapsed" list in :mod:`.engine`): per (host, pid, cudaDev), the COLL lines, the
per-operation tuning/proxy lines and the other INFO lines (topology: channels, rings,
trees, connections) are each one event on their last line, counting the others.

The lines are read by the shared log engine (:mod:`.engine`): a file holding NCCL lines *and*
launcher/training lines is read line by line by the same code, whichever of the two formats
claimed it; :mod:`.nccl` claims a file (``nccl_log``) when NCCL lines make up a real part of its
head.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ... import native
from .frames import extract_prefix

_TS = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"
# The header, found anywhere in the line (lazy junk before it).
HEADER = (
    r"^(?P<pre>.*?)(?:\[(?P<nts>" + _TS + r")\] )?(?:\[(?P<tag>\d+)\] )?"
    r"(?P<host>[\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>\d+)\] )?"
    r"(?:(?P<trace_ms>\d+\.\d+) )?(?:(?P<src>[\w./\-]+):(?P<srcline>\d+) )?"
    r"(?:\((?P<func>[^()]*)\) )?NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)\b ?")
# The last header of a spliced line (greedy prefix): pid/tid are exact, the host is not.
LAST_HEADER = (r"^.*:(?P<pid2>\d+):(?P<tid2>\d+) (?:\[(?P<dev2>\d+)\] )?(?:[\w./\-]+:\d+ )?"
               r"NCCL (?P<level2>INFO|WARN) (?P<msg2>.*)$")
FAST_START = r"^[\w.\-]+:\d+:\d+ "
# what follows host:pid:tid on a clean line, before " NCCL "
HEADER_TAIL = (r"^(?:\[(?P<dev>\d+)\])?(?: ?(?P<trace_ms>\d+\.\d+))?(?: ?(?P<src>[\w./\-]+):(?P<srcline>\d+))?"
               r"(?: ?\((?P<func>[^()]*)\))?$")
SPLICE_MARK = r":\d+:\d+ (?:\[\d+\] )?(?:[\w./\-]+:\d+ )?NCCL (?:INFO|WARN) "
BARE_VERSION = r"^NCCL version (?P<version>[\w.+\-]+)"

class InfoFact(NamedTuple):
    """An INFO line that says a fact: lines whose message contains ``literal`` are matched
    against ``regex`` (named groups: the fields, ``ints`` of them integers); the event is ``name``."""
    name: str
    literal: str
    regex: str
    ints: tuple[str, ...]


class WarnClass(NamedTuple):
    """A class of WARN lines: the first whose ``regex`` is found in the message."""
    cls: str
    regex: str


_P = r"0x[0-9a-fA-F]+"
INFO_GRAMMAR: tuple[InfoFact, ...] = (
    InfoFact("nccl_version", "NCCL version", r"^NCCL version (?P<version>\d+\.\d+\.\d+(?:[+-][a-z]+[\d.]*)?)", ()),
    InfoFact("nccl_comm_init", " - Init ",
     r"^(?:\[Rank (?P<global_rank>\d+)\] )?(?:(?P<api>\w+) )?comm (?P<comm>" + _P + r") rank (?P<rank>\d+) "
     r"nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+)(?: nvmlDev (?P<nvml_dev>\d+))? "
     r"busId (?P<bus_id>[0-9a-fA-F]+)(?: commId (?P<comm_id>" + _P + r"))?"
     r"(?: parent (?P<parent>" + _P + r"))?.*?- Init (?P<phase>START|COMPLETE)",
     ("global_rank", "rank", "nranks", "cuda_dev", "nvml_dev")),
    InfoFact("nccl_comm_end", " COMPLETE",
     r"^comm (?P<comm>" + _P + r") rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+) "
     r"busId (?P<bus_id>[0-9a-fA-F]+) - (?P<phase>Destroy|Abort) COMPLETE",
     ("rank", "nranks", "cuda_dev")),
    InfoFact("nccl_comm_topology", "nNodes",
     r"^comm (?P<comm>" + _P + r") rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
     r"localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+)",
     ("rank", "nranks", "nnodes", "local_ranks", "local_rank")),
    InfoFact("nccl_init_timings", "Init timings",
     r"^Init timings(?: - (?P<api>\w+))?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<total_s>[\d.]+)",
     ("rank", "nranks")),
    InfoFact("nccl_connection", " via ",
     r"^Channel (?P<channel>\d+)(?:/\d+)? : (?P<from_rank>\d+)\[(?P<from_dev>[0-9a-fA-F]+)\] -> "
     r"(?P<to_rank>\d+)\[(?P<to_dev>[0-9a-fA-F]+)\](?: \[(?P<direction>send|receive)\])? "
     r"via (?P<transport>[\w/]+)", ("channel", "from_rank", "to_rank")),
    InfoFact("nccl_ring", "Channel ", r"^Channel (?P<channel>\d+)/(?P<nchannels>\d+) :\s+(?P<ring>[\d ]+?)\s*$",
     ("channel", "nchannels")),
    InfoFact("nccl_trees", "Trees", r"^Trees (?P<trees>.*)$", ()),
    InfoFact("nccl_channels", " coll channels",
     r"^(?P<coll_channels>\d+) coll channels,(?: (?P<collnet_channels>\d+) collnet channels,)?"
     r"(?: (?P<nvls_channels>\d+) nvls channels,)? (?P<p2p_channels>\d+) p2p channels",
     ("coll_channels", "collnet_channels", "nvls_channels", "p2p_channels")),
    InfoFact("nccl_connected", "Connected all ", r"^Connected all (?P<connected>rings|trees)", ()),
    InfoFact("nccl_net", "NET/", r"^NET/(?P<net>\w+)\s*: (?P<net_info>.*)$", ()),
    InfoFact("nccl_network", "Using network ", r"^Using network (?P<network>\w+)", ()),
    InfoFact("nccl_bootstrap", "Bootstrap", r"^Bootstrap ?: Using (?P<bootstrap_if>.*)$", ()),
    InfoFact("nccl_cuda_driver", "cudaDriverVersion", r"^cudaDriverVersion (?P<cuda_driver>\d+)", ("cuda_driver",)),
    InfoFact("nccl_coll", "opCount",
     r"^(?P<coll>\w+): opCount (?P<op_count>[0-9a-f]+) sendbuff (?P<sendbuff>\S+) recvbuff (?P<recvbuff>\S+) "
     r"count (?P<count>\d+) datatype (?P<datatype>\d+) op (?P<op>\d+) root (?P<root>-?\d+) "
     r"comm (?P<comm>" + _P + r")(?: \[nranks=(?P<nranks>\d+)\])?",
     ("count", "datatype", "op", "root", "nranks")),
    InfoFact("nccl_error_return", " -> ",
     r"^(?P<err_src>[\w./\-]+):(?P<err_line>\d+) -> (?P<err_code>\d+)(?: \[(?P<err_thread>[^\]]+)\])?",
     ("err_line", "err_code")),
)

# WARN classification: the first class whose regex is found in the message
WARN_CLASSES: tuple[WarnClass, ...] = (
    WarnClass("remote_closed", r"(?i)connection closed by (?:remote )?peer|connection reset by peer|remote process exited"
                      r"|peer .*(?:closed|exited)"),
    WarnClass("plugin", r"(?i)plugin"),
    WarnClass("network_ib", r"NET/IB|(?i:\bibv_|infiniband|\bmlx5|roce|completion .*error|\bqp\b)"),
    WarnClass("socket", r"(?i)socket|connect to .* failed|bind|address already in use|\binterface\b|NET/Socket"),
    WarnClass("timeout", r"(?i)timeout|timed out"),
    WarnClass("memory", r"(?i)alloc|out of memory|\bmmap|\bmunmap|register|cuMem|\bshm\b|/dev/shm"),
    WarnClass("cuda", r"(?i)\bcuda|\bnvml|\bcu[A-Z]\w+ failed|driver"),
    WarnClass("system_error", r"(?i)system ?error|errno|\bfailed\b"),
)
WARN_LABELS = {
    "remote_closed": "remote peer closed the connection", "plugin": "network plugin problem",
    "network_ib": "InfiniBand/RDMA network error", "socket": "socket error", "timeout": "timeout",
    "memory": "memory/registration error", "cuda": "CUDA/driver error", "system_error": "system error",
    "other": "warning",
}
NCCL_RESULT = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
               4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
# Error chains through these files mean the communicator was never ready: its creation (init.cc,
# bootstrap.cc) or the connections between its ranks (transport.cc: choosing and setting up the
# transport to each peer, at init or, with runtime connect, before the first collective).
INIT_FAILURE_FILES = ("init.cc", "bootstrap.cc", "transport.cc")
CONNECT_FILES = ("transport.cc",)

# (searched: the host may follow any junk; it starts where a run of host characters starts, so
# that a long run without a header costs one pass, not one per character of it)
_DETECT = re.compile(r"(?<![\w.\-])[\w.\-]*:\d+:\d+ (?:\[\d+\] )?(?:\d+\.\d+ )?(?:[\w./\-]+:\d+ )?"
                     r"(?:\([^()]*\) )?NCCL (?:INFO|WARN|TRACE|CALL)\b")
_DETECT_VERSION = re.compile(r"^NCCL version \d+\.\d+")


def warn_class(msg: str) -> str:
    for cls, rx in WARN_CLASSES:
        if re.search(rx, msg):
            return cls
    return "other"


def nccl_line_count(lines: list[str]) -> int:
    return sum(1 for ln in lines if _DETECT.search(ln) or _DETECT_VERSION.match(ln))


# -- collapsed INFO lines -----------------------------------------------------------------------
# INFO lines that stay one event each: a literal of INFO_GRAMMAR (less the per-channel entries),
# or an error return ``file.cc:123 -> 3``. Every other INFO line is repetitive (one per
# collective, per proxy operation, per channel/peer connection) and is collapsed.
# (anchored at the message's start: one cheap test per line; Init/Destroy/Abort/topology lines all
# start with "comm 0x", "[Rank N] comm 0x" or "<api> comm 0x")
INFO_KEEP = (r"^(?:NCCL version|Init timings|Connected all |NET/|Using network |Bootstrap|cudaDriverVersion"
             r"|comm |\[Rank \d+\] comm |\w+ comm 0x|\d+ coll channels|[\w./\-]+:\d+ -> \d)")
# per-operation lines (classes "coll": COLL calls, "op": tuning and proxy lines); the rest is "topo"
OP_LITERALS = (" Bytes -> Algo ", "opId=", "ncclPollProxyResponse", "Received and initiated operation")
COLLAPSED_NAMES = {"coll": "nccl_coll", "op": "nccl_op", "topo": "nccl_topology"}
_CLS_NAME = {0: "coll", 1: "op", 2: "topo"}


def collapse_info(base: pl.DataFrame, pending: dict, floor: int | None) -> tuple[pl.DataFrame, pl.Series | None]:
    """Mark the repetitive NCCL INFO lines of a chunk and drop those their group's ends stand for.

    A group is (class, header text ``host:pid:tid [dev]``). Its first line (for the first time)
    and its last line (the last activity) go on through the parser with ``_cls`` set; the lines
    between are dropped here and added up in ``pending[last line]`` (count, transports and
    channel numbers of topology lines), which :mod:`.engine` folds into the one event per
    (class, process, device). Lines with their own time (``[time] host:...``), spliced lines
    and lines at or before ``floor`` (the previous chunk's context row) are never dropped.
    The lines are read by the compiled reader (:func:`ingest.native.nccl_info`: the class and the
    header's number of every ASCII line), the others by the regexes below; the groups are counted
    by :func:`ingest.native.nccl_groups`.
    Returns the chunk with ``_cls`` and the mask of the rows kept (None: all).
    """
    body = native.texts(base["body"])
    r = native.nccl_info(body)
    code, kid, flags, mat, nk = r.code, r.kid, r.flags, r.msg_at, len(r.first)
    if r.unsure:
        code, kid, flags, mat, nk = _info_by_regex(base, r)
    later = None if floor is None else pc.greater(base["lineno"].to_arrow(), floor)
    grouped = pc.and_(pc.greater_equal(code, 1), pc.less_equal(code, 3))
    if later is not None:
        grouped = pc.and_(grouped, later)
    if not pc.any(grouped).as_py():
        return base.with_columns(pl.lit(None, pl.String).alias("_cls")), None
    # (the class as a number per row until the rows are dropped; named on the rows that stay)
    cls = pl.Series("_c", pc.if_else(grouped, code, pa.scalar(0, pa.uint8())))
    g = native.nccl_groups(code, kid, flags, later, nk)
    at = pc.indices_nonzero(pc.greater(g.count, 0))
    if not len(at):       # (only lines with a time of their own)
        return _named(base, cls), None
    lineno = base["lineno"]
    counts = pc.take(g.count, at).to_pylist()
    new: dict = {}
    # (a group of one or two lines is its first and last line: it stands for none other)
    for rep, n in zip(lineno.gather(pl.Series(pc.take(g.last, at))).to_list(), counts):
        if n > 2:
            new[rep] = {"n": n - 2, "via": set(), "chan": set()}
    # topology lines: the transports and channel numbers seen, per group (distinct ones only)
    bit = lambda b: pc.not_equal(pc.bit_wise_and(flags, pa.scalar(b, pa.uint8())), 0)
    topo_rows = pc.indices_nonzero(pc.and_(pc.and_(grouped, pc.equal(code, 3)),
                                           pc.and_(pc.invert(bit(native.INFO_BRACKET)), bit(native.INFO_CHANNEL))))
    if len(topo_rows):
        # (a process writes its channel lines again on every communicator: the distinct messages first;
        # the message from its offset: a character offset, the line being ASCII where the reader read it)
        t = pl.DataFrame([pl.Series("_kid", pc.take(kid, topo_rows)), base["body"].gather(pl.Series(topo_rows)),
                          pl.Series("_mat", pc.take(mat, topo_rows))]).lazy().select(
            "_kid", pl.col("body").str.slice(pl.col("_mat")).alias("_m")).unique().select(
            "_kid", pl.col("_m").str.extract(r" via (\S+)", 1).alias("via"), pl.col("_m").str.extract(
                r"^Channel (\d+)", 1).cast(pl.Int32, strict=False).alias("chan")).unique().collect()
        if not t.is_empty():
            # (each topology group's last line: class 2's groups are the last nk)
            reps = lineno.gather(pl.Series(pc.take(g.last, pc.add(t["_kid"].to_arrow().cast(pa.int64()), 2 * nk))))
            for (k, via, chan), rep in zip(t.iter_rows(), reps.to_list()):
                e = new.setdefault(rep, {"n": 0, "via": set(), "chan": set()})
                if via is not None:
                    e["via"].add(via)
                if chan is not None:
                    e["chan"].add(chan)
    if pending:
        # last lines of an earlier chunk that were carried into this one: what they stood for
        # passes to the last line of their group now
        # (the chunk's line numbers rise: each pending line's row by a binary search)
        keys = sorted(pending)
        rows = lineno.search_sorted(pl.Series(keys, dtype=lineno.dtype)).to_list()
        for ln, i in zip(keys, rows):
            if i >= len(lineno) or lineno[i] != ln:
                continue
            c, k, f = code[i].as_py(), kid[i].as_py(), flags[i].as_py()
            if not (1 <= c <= 3) or f & native.INFO_BRACKET or (later is not None and not later[i].as_py()):
                continue
            rep = lineno[g.last[(c - 1) * nk + k].as_py()]
            p = pending.pop(ln)
            e = new.setdefault(rep, {"n": 0, "via": set(), "chan": set()})
            e["n"] += p["n"]
            e["via"] |= p["via"]
            e["chan"] |= p["chan"]
    pending.update(new)
    if not g.dropped:     # (every group is its first and last line)
        return _named(base, cls), None
    mask = pl.Series("_keep", g.keep)
    return _named(base.filter(mask), cls.filter(mask)), mask


def _named(base: pl.DataFrame, cls: pl.Series) -> pl.DataFrame:
    """``base`` with ``_cls``: the name of each row's class number (0: none, null)."""
    return base.with_columns(cls.replace_strict({k + 1: v for k, v in _CLS_NAME.items()}, default=None,
                                                return_dtype=pl.String).alias("_cls"))


def _info_by_regex(base: pl.DataFrame, r) -> tuple:
    """The code, header number, flags and message offset (in characters) of every line, with the
    INFO lines the compiled reader left (not ASCII) read by the regexes, their headers numbered as
    the reader numbered its (a header it did not see gets the next number); and the number of
    headers."""
    m = pl.col("_m")
    rows = pl.DataFrame([pl.Series("_i", pc.indices_nonzero(pc.equal(r.code, native.UNSURE))).cast(pl.Int64)])
    rows = rows.with_columns(base["body"].gather(rows["_i"]).alias("body"))
    # (a literal split at the first " NCCL INFO ": its message and header)
    y = (rows.select("_i", "body", pl.col("body").str.splitn(" NCCL INFO ", 2).alias("_s"))
         .unnest("_s").rename({"field_0": "_k", "field_1": "_m"}))
    keep_all = m.is_null() | m.str.contains(INFO_KEEP) | m.str.contains(" NCCL ", literal=True)
    firsts = pl.Series(r.first, dtype=pl.Int64)
    known = base["body"].gather(firsts).str.slice(0, pl.Series(r.msg_at).gather(firsts) - len(" NCCL INFO ")) \
        if len(firsts) else pl.Series([], dtype=pl.String)
    ids = {k: i for i, k in enumerate(known.to_list())}
    y = y.with_columns(pl.when(keep_all).then(pl.lit(0, pl.UInt8))
                       .when(m.str.contains(" opCount ", literal=True)).then(pl.lit(1, pl.UInt8))
                       .when(m.str.contains_any(list(OP_LITERALS))).then(pl.lit(2, pl.UInt8))
                       .otherwise(pl.lit(3, pl.UInt8)).alias("_code"))
    kid = [ids.setdefault(k, len(ids)) if c else -1 for k, c in zip(y["_k"].to_list(), y["_code"].to_list())]
    y = y.with_columns(pl.Series("_kid", kid, dtype=pl.Int32),
                       (pl.col("_k").str.starts_with("[").cast(pl.UInt8) * native.INFO_BRACKET
                        + m.fill_null("").str.starts_with("Channel ").cast(pl.UInt8) * native.INFO_CHANNEL)
                       .cast(pl.UInt8).alias("_f"),
                       # (the message's start in characters, what the topology step's slice counts)
                       (pl.col("_k").str.len_chars() + len(" NCCL INFO ")).cast(pl.Int32).alias("_mat"))
    i = y["_i"]
    code = pl.Series(r.code).scatter(i, y["_code"]).to_arrow()
    kid_ = pl.Series(r.kid).scatter(i, y["_kid"]).to_arrow()
    flags = pl.Series(r.flags).scatter(i, y["_f"]).to_arrow()
    mat = pl.Series(r.msg_at).scatter(i, y["_mat"]).to_arrow()
    return code, kid_, flags, mat, len(ids)


def _heads_read(cand: pl.DataFrame, body, h, read: pl.Series) -> pl.DataFrame:
    """The rows the compiled reader read (``read``): lineno, host, pid, tid, level, msg, dev, and
    ``_tail``/``_simple`` (the tail after the ids; whether it is a plain device), as
    :func:`_heads_cut` makes them with string operations."""
    def cut(a, e=None):
        return pl.Series(native.slices(body, a, None if e is None else pc.subtract(e, a)))
    tail_at = pl.Series(h.tail_at)
    x = pl.DataFrame([cand["lineno"], cut(pa.repeat(pa.scalar(0, pa.int32()), len(body)), h.host_end).alias("host"),
                      cut(h.pid_at, h.pid_end).alias("pid"), cut(h.tid_at, h.tid_end).alias("tid"),
                      cut(h.level_at, h.level_end).alias("level"),
                      cut(h.msg_at).fill_null("").alias("msg"), cut(h.dev_at, h.dev_end).alias("dev"),
                      cut(h.tail_at, h.tail_end).alias("_tail"),
                      ((tail_at < 0) | (pl.Series(h.dev_at) >= 0)).alias("_simple")])
    return x.filter(read)


def _heads_cut(sub: pl.DataFrame) -> pl.DataFrame:
    """:func:`_heads_read`'s frame by string operations (lines that are not ASCII)."""
    # (literal splits: slicing at str.find positions counts characters, which is slower)
    x = sub.select("lineno", "body").with_columns(pl.col("body").str.splitn(" NCCL ", 2).alias("_hr")).unnest(
        "_hr", separator="~")
    x = x.with_columns(pl.col("_hr~field_0").str.splitn(" ", 2).alias("_hs"),
                       pl.col("_hr~field_1").str.splitn(" ", 2).alias("_rs")).unnest("_hs", "_rs", separator="~")
    ids = pl.col("_hs~field_0").str.split_exact(":", 2)
    tail = pl.col("_hs~field_1")
    simple = tail.is_null() | (tail.str.len_chars() == 0) | (
        tail.str.starts_with("[") & tail.str.ends_with("]") & ~tail.str.contains(" ", literal=True))
    return x.select("lineno", ids.struct.field("field_0").alias("host"), ids.struct.field("field_1").alias("pid"),
                    ids.struct.field("field_2").alias("tid"), pl.col("_rs~field_0").alias("level"),
                    pl.col("_rs~field_1").fill_null("").alias("msg"),
                    pl.when(simple).then(tail.str.strip_chars("[]")).alias("dev"), tail.alias("_tail"),
                    simple.alias("_simple"))


def nccl_frame(base: pl.DataFrame) -> pl.DataFrame:
    """NCCL rows of a chunk: header fields + ``msg`` + ``spliced`` (lost fragments).

    (The repetitive INFO lines were collapsed before, by :func:`collapse_info`.)
    """
    cand = base.filter(pl.col("body").str.contains("NCCL ", literal=True))
    if cand.is_empty():
        return cand
    # Most lines start with the header: cut at literal blanks (regex captures over whole lines are
    # the slow part), by the compiled reader (:func:`ingest.native.nccl_heads`) on ASCII lines and
    # by string operations on the others; the rest (time/tag prefixes, run-in or spliced lines) go
    # through the header search.
    body = native.texts(cand["body"])
    h = native.nccl_heads(body)
    code = pl.Series(h.code)
    fast = code == 1
    if h.unsure:
        fast = fast | ((code == native.UNSURE) & cand["body"].str.contains(FAST_START))
    parts = []
    if fast.any():
        x = _heads_read(cand, body, h, code == 1)
        if h.unsure:
            left = cand.filter(fast & (code == native.UNSURE))
            if not left.is_empty():
                x = pl.concat([x, _heads_cut(left)], how="vertical_relaxed").sort("lineno", maintain_order=True)
        simple = pl.col("_simple")
        y = x.filter(~simple)
        if not y.is_empty():
            t = y.select(pl.col("_tail").str.extract_groups(HEADER_TAIL).alias("_t")).unnest("_t")
            x = pl.concat([x.filter(simple), pl.concat([y.drop("dev"), t], how="horizontal")],
                          how="diagonal_relaxed")
        known = pl.col("level").is_in(["INFO", "WARN", "TRACE", "CALL", "ABORT"])
        if not x.select(known.all(ignore_nulls=False)).item():    # (a filter copies every column)
            x = x.filter(known)
        parts.append(x.select([c for c in x.columns if not c.startswith("_")]).with_columns(pl.lit("").alias("pre")))
    sub = cand.filter(~fast).select("lineno", "body")
    if not sub.is_empty():
        parts.append(extract_prefix(sub, "body", HEADER).drop("body").filter(pl.col("level").is_not_null()))
    g = pl.concat(parts, how="diagonal_relaxed")
    for c in ("nts", "tag", "dev", "trace_ms", "src", "srcline", "func"):
        if c not in g.columns:
            g = g.with_columns(pl.lit(None, pl.String).alias(c))
    if g.is_empty():     # (both parts hold only lines with a level)
        return g
    g = g.with_columns(pl.col("msg").fill_null(""))
    spliced = pl.col("msg").str.contains(" NCCL ", literal=True) & pl.col("msg").str.contains(SPLICE_MARK)
    if g.select(spliced.any()).item():
        last = g.select(pl.col("msg").str.extract_groups(LAST_HEADER).alias("l")).unnest("l")
        g = pl.concat([g, last], how="horizontal").with_columns(
            pl.when(spliced).then(pl.col("msg").str.count_matches(SPLICE_MARK)).otherwise(0).alias("spliced"),
            pl.when(spliced).then(pl.col("pid2")).otherwise(pl.col("pid")).alias("pid"),
            pl.when(spliced).then(pl.col("tid2")).otherwise(pl.col("tid")).alias("tid"),
            pl.when(spliced).then(pl.col("dev2")).otherwise(pl.col("dev")).alias("dev"),
            pl.when(spliced).then(pl.col("level2")).otherwise(pl.col("level")).alias("level"),
            pl.when(spliced).then(pl.col("msg2")).otherwise(pl.col("msg")).alias("msg"),
            (spliced | (pl.col("pre") != "")).alias("host_unsure"),
        ).drop("pid2", "tid2", "dev2", "level2", "msg2")
    else:
        g = g.with_columns(pl.lit(0).alias("spliced"), (pl.col("pre") != "").alias("host_unsure"))
    g = g.with_columns(
        pl.col("pid").cast(pl.Int64, strict=False), pl.col("tid").cast(pl.Int64, strict=False),
        pl.col("dev").cast(pl.Int32, strict=False),
        pl.col("trace_ms").cast(pl.Float64, strict=False),
        pl.col("nts").str.extract(r"\.(\d+)$").alias("nts_frac"))
    return g

