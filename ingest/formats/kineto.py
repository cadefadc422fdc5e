"""torch.profiler / Kineto Chrome-trace JSON (``*.pt.trace.json[.gz]``, ``*.json.tmp``, plain Chrome traces).

What is read (reference: shared/reference/FORMATS.md section 2)
-------------------------------------------------------------
* Layouts: an object with ``traceEvents`` (keys before and after the array are metadata),
  or a bare array of events; pretty-printed (torch 2.x writes one key per line),
  one event per line, or minified. The stream is cut into chunks of whole events by
  :mod:`._kineto_stream` (its docstring explains why the cutting is safe), so memory is
  bounded by a few chunks, not by the file (the flows, paired at the end, are the only rows
  kept: about 50 bytes per flow event). Per chunk the work is vectorised: one Polars frame
  of the event fields, ``attrs`` as one Arrow string array built from the joined raw
  ``args`` bytes, and once the events fill a row group the Parquet parts are written on a
  second thread (:class:`ingest.sink.SinkThread`) while the next chunk is decoded. Chunks of fewer
  than :data:`SMALL_CHUNK` events (a small file, such as the per-rank traces of a large job,
  whose last event is a chunk of its own) are read together, with Python lists and a few
  Arrow arrays instead of Polars queries, to the same rows: the fixed cost of the vectorised
  queries would be most of their parse.
* Time. Every ``ts`` becomes **wall-clock epoch nanoseconds** in ``ts_raw_ns`` (clock
  domain ``wall``):

  - traces with ``baseTimeNanoseconds`` (Kineto >= May 2024): ``ts`` is float microseconds
    relative to it: ``ns = baseTimeNanoseconds + round(ts * 1000)``. The key usually comes
    before ``traceEvents`` but re-serialised files put it after the array; rows are then
    written relative and shifted once the trailer has been read (the Parquet parts are
    rewritten, nothing is held in memory);
  - older traces: ``ts`` is absolute epoch microseconds (int, or float with a fraction):
    recognised by its size (> 1e15 us, i.e. after 2001-09-09);
  - neither: the base is unknown. That is a named result: clock domain ``process``,
    ``attrs.time_base = "unknown"`` and a ``no_time_base`` issue -- never a guess.

  ``ts`` is converted as ``floor(ts) * 1000 + round(frac(ts) * 1000)`` so relative traces
  keep their nanoseconds exactly; absolute float traces carry the float's own rounding
  (at 1.7e15 us a double resolves 0.25 us), which is what the writer gave.
* Phases: ``X`` spans of every category and ``i``/``I`` instants -> ``events``
  (category = Kineto ``cat``; the 2021 names Operator/Runtime/Kernel/Memcpy/Memset are
  stored under today's names). GPU-side events (kernel, gpu_memcpy, gpu_memset,
  gpu_user_annotation) carry Kineto's device index and stream in pid/tid; they are stored
  with pid/tid null (they are not OS ids) and keep ``device``/``stream`` in ``attrs``.
  ``attrs`` is the event's raw ``args`` JSON, unchanged; :data:`.kineto_fields.ARG_FIELDS`
  is the one table that maps its keys to typed columns. ``C`` counters -> ``metrics``
  (one row per numeric series, metric ``<name>:<series>``), and the ``[memory]`` instants
  of ``profile_memory=True`` also -> ``metrics`` (``torch.memory:allocated`` /
  ``torch.memory:reserved``, bytes, entity ``cpu`` / ``cuda:N``). ``s``/``t``/``f`` flows
  are paired by (category, id) -> ``flows``. ``M`` metadata (process/thread names,
  labels, sort indexes) -> ``facts`` (``kineto.<name>``). Any other phase is counted and
  reported once per phase as ``unsupported_phase``.
* Identity: ``distributedInfo`` (rank, world_size, backend, pg_config) and ``host_name``
  from the contents; the default ``tensorboard_trace_handler`` worker name
  ``<host>_<pid>.<time_ns>.pt.trace.json[.gz]`` gives host and pid when the contents do
  not; the process is the pid labelled ``CPU`` in the metadata. One file per profiler
  cycle is one source; the analysis layer (``analysis.kineto_derived``) merges a rank's
  files and drops events that two files both hold.
* Derived rows (per file): ``steps`` from ``ProfilerStep#N`` markers (CPU and GPU side);
  ``collectives`` from NCCL kernels of every naming generation, gloo work spans
  (``gloo:<op>`` annotations on the gloo threads) and c10d calls (``c10d::<op>`` on the
  caller, completed with the sizes/process group of the ``record_param_comms`` op they
  contain).
* Truncation (``*.json.tmp`` of a process that died while writing, cut downloads): every
  complete event before the cut is kept; the file is ``partial`` and the issue names the
  byte offset (in the decompressed stream) of the first byte that could not be used.
"""
from __future__ import annotations

import bisect
import json
import io
import math
import operator
import re
from collections import Counter
from contextlib import closing
from array import array
from itertools import accumulate, chain, compress, repeat
from pathlib import PurePosixPath
from typing import get_args

import msgspec
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import native
from ..sink import SinkThread
from ..model import CLOCK_PROCESS, CLOCK_WALL
from ..lines import ahead
from ..reader import Head, size_hint
from ..registry import ParseContext, Parser
from .kineto_fields import (BACKEND_ANNOTATION, C10D_NOT_COLLECTIVE, C10D_OP, CATEGORY_ALIASES,
                             DERIVED_NAMES, GPU_CATEGORIES, NCCL_KERNEL, OPTIMIZER_STEP, STEP_MARKER,
                             canonical_collective, dtype_bytes, read_args)
from ._kineto_stream import BLOCK, Chunk, EventColumns, EventReader, Ev, Outcome, Phase

FLOW_PART_ROWS = 1 << 16        # rows per Parquet part of the flows table
ABSOLUTE_US = 1e15               # ts above this many microseconds is absolute epoch time
MAX_TS_US = 4e15                # larger |ts| is no time (epoch us of the year 2096; ns would overflow soon after)
KINETO_KEYS = ("schemaVersion", "baseTimeNanoseconds", "deviceProperties", "distributedInfo",
               "displayTimeUnit", "traceName")
KINETO_CATS = frozenset({"cpu_op", "user_annotation", "kernel", "cuda_runtime", "cuda_driver",
                         "python_function", "gpu_memcpy", "gpu_memset", "gpu_user_annotation",
                         "Operator", "Runtime", "Kernel", "Trace", "cpu_instant_event", "ac2g", "fwdbwd"})
PHASES = frozenset(get_args(Phase)) - {""}    # every phase of the Chrome trace format
WORKER_FILE = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_(?P<pid>\d+)\.\d{13,19}\.pt\.trace\.json"
                         r"(?:\.gz)?(?:\.tmp)?$")
_EVENT_PHASES = ("X", "i", "I")
_EVENT_PHASE_SET = frozenset(_EVENT_PHASES)
_EVENT_COLUMNS = ("pid", "tid", "ts_raw_ns", "dur_ns", "category", "name", "attrs")
_ALIAS = CATEGORY_ALIASES.get
_FLOW_PHASES = ("s", "t", "f")
# Chunks of fewer events are read with Python lists (see _State._small_chunk): below this
# size the fixed cost of the vectorised path's queries is larger than the per-event work.
SMALL_CHUNK = 3000
DETECT_BYTES = 16 << 10         # detect() reads the first events from this much of the head first
_KEEP_PIDS = 1 << 20            # small chunks' pids kept for counting at the end, at most (then counted)
# The prefilter of derived rows in Python's re: it lets through every name that Polars' regex
# engine does (its ``$`` also matches before a final newline), and _derived checks each name
# it gets.
_DERIVED = re.compile(DERIVED_NAMES)
_DERIVED_NAME: dict[str, bool] = {}    # name -> whether _DERIVED lets it through (names recur in every file)


def _coerce(v) -> Ev | None:
    """A plain decoded value -> Ev, for chunks that did not fit the typed fast path."""
    if not isinstance(v, dict) or not isinstance(v.get("ph"), str):
        return None
    kw = {}
    for k in ("ph", "cat", "bp", "s"):
        if isinstance(v.get(k), str):
            kw[k] = v[k]
    for k in ("name", "pid", "tid", "id"):
        x = v.get(k)
        if isinstance(x, (str, int, float)) and not isinstance(x, bool):
            kw[k] = x
    for k in ("ts", "dur"):
        x = v.get(k)
        if isinstance(x, str):
            try:
                x = float(x)
            except ValueError:
                x = None
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            kw[k] = float(x)
    if isinstance(v.get("args"), dict):
        kw["args"] = msgspec.Raw(_dumps(v["args"]))
    return Ev(**kw)


def _dumps(v) -> bytes:
    """orjson.dumps, or the standard library's for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(v)
    except TypeError:
        return json.dumps(v, default=str).encode()


def _base_ns(v) -> int | None:
    """baseTimeNanoseconds when it is a number a time can have (not a corrupted 30-digit one)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < MAX_TS_US * 1000:
        return int(v)
    return None


def _args(e: Ev) -> dict:
    if not e.args:
        return {}
    try:
        a = orjson.loads(bytes(e.args))
    except orjson.JSONDecodeError:
        return {}
    return a if isinstance(a, dict) else {}


def _attrs(raws: list) -> pa.Array:
    """``events.attrs``: each event's raw ``args`` JSON text (``raws``: the events' ``args``;
    null without args), as one Arrow string array made from the joined raw bytes (no Python
    string per event). A raw newline can only be whitespace between JSON tokens (newlines
    inside strings are escaped), so the indentation of pretty-printed files is dropped safely."""
    lens = list(map(len, raws))
    data = b"".join(raws)
    big = len(data) >> 31
    offsets = array("q" if big else "i", list(accumulate(lens, initial=0)))
    valid = None                     # null where the event had no args
    if 0 in lens:
        valid = pa.array(list(map(bool, lens)), pa.bool_()).buffers()[1]
    arr = pa.Array.from_buffers(pa.large_string() if big else pa.string(), len(raws),
                                [valid, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        if not data.isascii():      # ASCII is valid UTF-8 (the common case: a fast check)
            arr.validate(full=True)
    except pa.ArrowInvalid:     # not UTF-8: fails as the text cast always did
        arr = pl.Series([bytes(r) or None for r in raws], dtype=pl.Binary).cast(pl.String).to_arrow()
    return _flat(arr) if b"\n" in data else arr


def _flat(attrs: pa.Array) -> pa.Array:
    """Raw args JSON texts without the line breaks (and the indentation after them) of a
    pretty-printed file (the callers skip it where their bytes hold no line break)."""
    return pl.Series(attrs).str.replace_all(r"\r?\n[ \t]*", "").to_arrow()


def _column_ids(evs: EventColumns, j: int) -> pl.Series:
    """pid (0), tid (1) or id (2) of every event of the columns, as :func:`_ints` reads them."""
    ints, strs = (pl.Series(a) for a in evs.ids(j))
    if strs.null_count() == len(strs):
        return ints
    seen = strs.drop_nulls().unique().to_list()
    return ints.fill_null(strs.replace_strict(dict(zip(seen, _ints(seen).to_list())), default=None,
                                              return_dtype=pl.Int64))


def _columns_frame(evs: EventColumns) -> pl.DataFrame:
    """The chunk's frame (what :meth:`_State.chunk` builds from Ev lists) from the columns the
    compiled reader read: the same values, a pid/tid string read as ``_ints`` reads it."""
    return pl.DataFrame({
        "ph": pl.Series(evs.column("ph")).replace_strict(dict(enumerate(native.KINETO_PHASES)),
                                                         return_dtype=pl.String),
        "cat": pl.Series(evs.column("cat")),        # (views into the bytes read: see the flow ends)
        "name": pl.Series(evs.column("name")),
        "pid": _column_ids(evs, 0).alias("pid"),
        "tid": _column_ids(evs, 1).alias("tid"),
        "ts": pl.Series(evs.column("ts")),
        "dur": pl.Series(evs.column("dur")),
    })


def _texts(values: list) -> pl.Series:
    """Names as text: a number is written as Polars writes it (both paths of a chunk use this)."""
    return pl.Series(values, dtype=pl.String, strict=False)


def _ints(values: list) -> pl.Series:
    """pids, tids and flow ids as Int64: a numeric string is read as its number, anything else
    (a label such as "Spans", a number beyond 64 bits) is null."""
    return pl.Series(values, dtype=pl.Int64, strict=False)


_I64 = pa.int64()
_NULL_I64 = pa.scalar(None, _I64)         # (made once: making a scalar costs more than using it)
_UNNAMED = pa.scalar("(unnamed)", pa.string())
_GPU_SET = pc.SetLookupOptions(pa.array(sorted(GPU_CATEGORIES), pa.string()))
_STR_OR_NONE = frozenset({str, type(None)})
_INT_OF: dict = {}          # str -> what _ints reads it as (a label such as "Spans" recurs in every file)
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_NOT_SEEN = object()


def _text_values(values: list) -> list:
    """``_texts(values).to_list()``; names are nearly always text already, which it keeps as it is."""
    if set(map(type, values)) <= _STR_OR_NONE:
        return values
    return _texts(values).to_list()


def _int_values(values: list) -> list:
    """``_ints(values).to_list()`` without a Series for the ints that are already Int64.

    Polars casts each value on its own, so only the others (a str pid such as "Spans", an
    int beyond 64 bits, a float from an untyped chunk) go through ``_ints``, once per distinct
    value, and every other int keeps its value. The mapping from those values to their casts
    leaves such an int as it is: no str equals an int, and an int that equals a float key is
    that float's cast (an integral float casts to itself when it fits 64 bits, else to null)."""
    odd = [v for v in set(values) if v is not None and (type(v) is not int or not _I64_MIN <= v <= _I64_MAX)]
    if not odd:
        return values
    conv, new = {}, []
    for v in odd:
        c = _INT_OF.get(v, _NOT_SEEN) if type(v) is str else _NOT_SEEN
        if c is _NOT_SEEN:
            new.append(v)
        else:
            conv[v] = c
    if new:
        got = _ints(new).to_list()
        conv.update(zip(new, got))
        if len(_INT_OF) > 4096:
            _INT_OF.clear()
        _INT_OF.update((v, c) for v, c in zip(new, got) if type(v) is str)
    return list(map(conv.get, values, values))


def _usable(t) -> bool:
    """A ts that is a time: a number with ``|ts| < MAX_TS_US`` (not NaN)."""
    return t is not None and -MAX_TS_US < t < MAX_TS_US


def _us_to_ns(ts: list, off: int) -> list:
    """float µs -> int ns, ``floor(ts) * 1000 + round(frac(ts) * 1000) + off`` (half to even), as
    the vectorised path does; None where ``ts`` is no time (the test of :func:`_usable`, inline).
    Computed by the compiled engine (``native.us_to_ns``, held to :func:`_py_us_to_ns`), here only
    where a time plus ``off`` leaves 64 bits."""
    got = native.us_to_ns(ts, 0, off, MAX_TS_US)
    return _py_us_to_ns(ts, off) if got is None else got


def _py_us_to_ns(ts: list, off: int) -> list:
    floor = math.floor
    return [(w := floor(t)) * 1000 + round((t - w) * 1000) + off if t is not None and -MAX_TS_US < t < MAX_TS_US
            else None for t in ts]


def _dur_to_ns(dur: list) -> list:
    """``dur * 1000`` rounded half to even; None where Polars' non-strict cast to Int64 gives null:
    not finite, or outside the Int64 range (for a float x, ``round(x)`` is in that range exactly
    when ``-2**63 <= x < 2**63``: the floats near those bounds are integers). Computed by the
    compiled engine (``native.us_to_ns``, held to :func:`_py_dur_to_ns`)."""
    return native.us_to_ns(dur, 1)


def _py_dur_to_ns(dur: list) -> list:
    return [round(x) if d is not None and -9223372036854775808.0 <= (x := d * 1000) < 9223372036854775808.0
            else None for d in dur]


def _int64_array(values: list) -> pa.Array:
    """Python ints (no None) as an Arrow int64 array, through the array module (a faster conversion)."""
    return pa.Array.from_buffers(_I64, len(values), [None, pa.py_buffer(array("q", values))])


_FLOW_END = ("category", "flow_id", "pid", "tid", "ts_raw_ns")


def _flow_rows(parts: list) -> list[tuple]:
    """The rows of flow ends kept per chunk (a Polars frame, or the small path's tuples)."""
    rows = []
    for p in parts:
        rows += p.rows() if isinstance(p, pl.DataFrame) else p
    return rows


def _flow_frame(parts: list, side: str) -> pl.DataFrame:
    """The flow ends of one side as one Polars frame (category, flow_id, <side>_pid, ...)."""
    schema = {("" if c in ("category", "flow_id") else f"{side}_") + c: pl.String if c == "category" else pl.Int64
              for c in _FLOW_END}
    return pl.concat([p if isinstance(p, pl.DataFrame) else pl.DataFrame(p, schema=schema, orient="row")
                      for p in parts])


def _pair_flows(starts: list[tuple], ends: list[tuple]) -> pa.Table:
    """The flows of a few flow ends: the rows of the full join of the start ends with the
    other ends on (category, flow_id), nulls equal (the join the vectorised path makes, for
    which no row order is promised either). A row is (category, flow_id, pid, tid, ts_raw_ns)."""
    key = 2                                   # (category, flow_id) lead both sides
    by_key: dict[tuple, list[tuple]] = {}
    for d in ends:
        by_key.setdefault(d[:key], []).append(d)
    rows = []
    for s in starts:
        got = by_key.get(s[:key])
        rows += [s + d[key:] for d in got] if got else [s + (None,) * (len(_FLOW_END) - key)]
    paired = {s[:key] for s in starts}
    rows += [d[:key] + (None,) * (len(_FLOW_END) - key) + d[key:] for d in ends if d[:key] not in paired]
    names = ["category", "flow_id"] + [f"{side}_{c}" for side in ("src", "dst") for c in _FLOW_END[key:]]
    n = len(rows)
    cols = list(zip(*rows)) if rows else [()] * len(names)
    ints = pa.array(list(chain.from_iterable(cols[1:])), _I64)     # (the integer columns one after the other)
    return pa.table([pa.array(cols[0], pa.string())] + [ints.slice(k * n, n) for k in range(len(names) - 1)],
                    names=names)


def _count_pids(parts: list) -> Counter:
    """The events per CPU-side pid, from the parts :class:`_State` keeps: {pid: events}, or the
    pids and categories of a small chunk's events. As in the vectorised path, an event of a GPU
    category or without a category is not counted as CPU-side."""
    counts: Counter = Counter()
    for p in parts:
        if isinstance(p, tuple):
            p = (pid for pid, c in zip(*p) if pid is not None and c is not None and c not in GPU_CATEGORIES)
        counts.update(p)
    return counts


def _nelems(dims) -> int | None:
    """Input Dims of the first input: [64, 64] -> 4096; a tensor list [[64], [8]] -> 72."""
    if not isinstance(dims, list) or not dims:
        return None
    first = dims[0]
    if isinstance(first, list) and first and all(isinstance(x, int) for x in first):
        n = 1
        for x in first:
            n *= x
        return n
    if isinstance(first, list) and first and all(isinstance(t, list) for t in first):
        total = 0
        for t in first:
            n = 1
            for x in t:
                if not isinstance(x, int):
                    return None
                n *= x
            total += n
        return total
    return None


class KinetoParser(Parser):
    name = "kineto"
    kind = "torch_trace"
    reads_lines = False
    priority = 60
    clock_domain = CLOCK_WALL
    description = "torch.profiler / Kineto Chrome-trace JSON (also plain Chrome traces)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        data = head.data.lstrip(b"\xef\xbb\xbf").lstrip()
        if not data[:1] in (b"{", b"["):
            return False
        # The first 50 events decide. They are read from the head's first DETECT_BYTES when those
        # hold them (a prefix is cut into the complete events at its start, as the whole head is),
        # else from the whole head.
        for part in (data[:DETECT_BYTES], data):
            reader = EventReader(io.BufferedReader(io.BytesIO(part)), block=len(part) + 1)
            events = []
            for chunk in reader:
                events.extend(chunk.events[:50])
                if len(events) >= 50:
                    break
            if len(events) >= 50 or len(part) == len(data):
                break
        out = reader.outcome
        ok = 0
        for v in events:
            e = v if isinstance(v, Ev) else _coerce(v)
            if e is not None and e.ph in PHASES and (e.ts is not None or e.ph == "M"):
                ok += 1
        if out.layout == "object":
            return ok >= 1 or any(k in out.header for k in KINETO_KEYS)
        if out.layout == "array":
            return ok >= 1 and ok >= len(events) * 0.9
        if out.layout == "object_without_events" and not head.complete:
            # a header larger than the sniffing window: Kineto's own keys at the top
            text = data[:4096]
            return data[:1] == b"{" and b'"schemaVersion"' in text and (
                b'"deviceProperties"' in text or b'"distributedInfo"' in text or b'"baseTimeNanoseconds"' in text)
        return False

    def parse(self, ctx: ParseContext) -> None:
        stream = ctx.open()
        st = _State(ctx)
        try:
            reader = EventReader(stream, columns=True)
            # (the next block is read and decoded on a worker thread while this chunk's rows are
            # made: the compiled reader and the reads release the GIL; the reader's outcome is
            # only read here for the header, which is known before the first chunk)
            hint = size_hint(ctx.path)
            many = hint is None or hint > BLOCK
            with closing(ahead(iter(reader), name="kineto-chunks") if many else iter(reader)) as chunks:
                for chunk in chunks:
                    st.chunk(chunk, reader.outcome)
                    del chunk            # its events go before the chunk after the next is decoded
            st.finish(reader.outcome)
            if reader.outcome.stream_error is not None:
                raise reader.outcome.stream_error   # parse_file names it (cut gzip, size limit)
        finally:
            st.sink_done(check=False)
            ctx.bytes_read = stream.raw.count
            stream.close()


class _State:
    """Everything one file's parse accumulates between chunks."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.sink = SinkThread(ctx.sink)    # while chunks are read; ctx.sink itself from finish() on
        self.offset: int | None = None       # ns added to every converted ts
        self.time_base: str | None = None
        self.pending_rebase = False
        self.phases: Counter = Counter()
        self.flow_src: list = []     # s ends of flows, per chunk: a Polars frame, or a list of row tuples
        self.flow_dst: list = []     # t/f ends
        self.steps: list[dict] = []
        self.colls: list[dict] = []
        self.param_comms: dict[tuple, list] = {}
        # CPU-side pids, per chunk in order: {pid: events} (vectorised) or (pids, categories) of the
        # events (small chunks); counted only when no process label or file name gives the pid
        self.cpu_pids: list = []
        self.cpu_pids_kept = 0               # events in the small chunks' parts of cpu_pids
        self.labelled_cpu: set[int] = set()
        self.kineto_cats = 0                 # events of a Kineto category (the small path: 1 once there is one)
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.slow_chunks = 0
        self.optimizer_steps: Counter = Counter()
        self.small: list[Chunk] = []         # typed chunks of few events not read yet
        self.small_events = 0

    # -- per chunk -----------------------------------------------------------------
    def _time_base(self, out: Outcome, tmin: float | None) -> None:
        """The time base: from the header, else from ``tmin`` (the smallest usable ts of the
        chunk; None leaves it to the next chunk)."""
        base = _base_ns(out.header.get("baseTimeNanoseconds"))
        if base is not None:
            self.offset, self.time_base = base, "baseTimeNanoseconds"
            return
        if tmin is None:
            return
        if tmin > ABSOLUTE_US:
            self.offset, self.time_base = 0, "absolute_epoch_us"
        else:
            self.offset, self.pending_rebase = 0, True
            self.sink.hold()   # the parts are rewritten if baseTimeNanoseconds comes after the events

    def chunk(self, chunk: Chunk, out: Outcome) -> None:
        if isinstance(chunk.events, EventColumns) and len(chunk.events) < SMALL_CHUNK:
            chunk = Chunk(chunk.events.events(), chunk.offset, chunk.typed)    # (read with the small ones)
        evs = chunk.events
        if chunk.typed and len(evs) < SMALL_CHUNK:
            # read with the next ones while they stay few (a file's last event is a chunk of its own)
            if self.small_events + len(evs) >= SMALL_CHUNK:
                self.read_small(out)
            self.small.append(chunk)
            self.small_events += len(evs)
            return
        self.read_small(out)
        if not chunk.typed:
            self.slow_chunks += 1
            typed = []
            for i, v in enumerate(evs):
                e = v if type(v) is Ev else _coerce(v)
                if e is None:
                    self.sink.issue("bad_event", f"event {i} of the chunk is not a trace event object",
                                    text=_dumps(v)[:200].decode("utf-8", "replace"),
                                    byte_offset=chunk.offset)
                else:
                    typed.append(e)
            evs = typed
        if not evs:
            return
        if len(evs) < SMALL_CHUNK:
            self._small_chunk(evs, [(0, chunk.offset)], out)
            return
        if isinstance(evs, EventColumns):
            df = _columns_frame(evs)
        else:
            df = pl.DataFrame({
                "ph": pl.Series([e.ph for e in evs], dtype=pl.String),
                "cat": pl.Series([e.cat for e in evs], dtype=pl.String),
                "name": _texts([e.name for e in evs]),
                "pid": _ints([e.pid for e in evs]),
                "tid": _ints([e.tid for e in evs]),
                "ts": pl.Series([e.ts for e in evs], dtype=pl.Float64),
                "dur": pl.Series([e.dur for e in evs], dtype=pl.Float64),
            })
        # a ts whose ns do not fit Int64 (a corrupted number) is no time: counted as an issue below
        df = df.with_columns(ts=pl.when(pl.col("ts").abs() < MAX_TS_US).then(pl.col("ts")))
        if self.offset is None:
            self._time_base(out, df["ts"].min())
        off = self.offset or 0
        whole = pl.col("ts").floor()
        df = df.with_row_index("i").with_columns(
            ts_ns=(whole.cast(pl.Int64) * 1000 + ((pl.col("ts") - whole) * 1000).round().cast(pl.Int64) + off),
            dur_ns=(pl.col("dur") * 1000).round().cast(pl.Int64, strict=False),
            category=pl.col("cat").replace(CATEGORY_ALIASES),
        )
        phases = dict(df["ph"].value_counts().iter_rows())
        self.phases.update(phases)
        # spans and instants -> events (nearly all the events: the others are split off when
        # there are any)
        n_ev = sum(phases.get(p, 0) for p in _EVENT_PHASES)
        if n_ev:
            self._events(df if n_ev == len(df) else df.filter(pl.col("ph").is_in(_EVENT_PHASES)), evs, chunk.offset)
        if n_ev == len(df):
            return
        # counters -> metrics
        for row in df.filter(pl.col("ph") == "C").iter_rows(named=True):
            self._counter(row, evs[row["i"]], chunk.offset)
        # flows
        fl = df.filter(pl.col("ph").is_in(_FLOW_PHASES))
        if len(fl):
            ids = _column_ids(evs, 2).gather(fl["i"]) if isinstance(evs, EventColumns) else \
                _ints([evs[i].id for i in fl["i"].to_list()])
            # (the category as a copy of its own: the flow ends are kept to the end of the file, and a
            # view into the bytes a chunk was read from would keep those bytes alive with them)
            fl = fl.select("ph", pl.Series("cat", fl["cat"].to_arrow()), "pid", "tid", "ts_ns").with_columns(flow_id=ids)
            for ends, keep, side in ((self.flow_src, pl.col("ph") == "s", "src"),
                                     (self.flow_dst, pl.col("ph") != "s", "dst")):
                ends.append(fl.filter(keep).select(pl.col("cat").alias("category"), "flow_id", **{
                    f"{side}_pid": "pid", f"{side}_tid": "tid", f"{side}_ts_raw_ns": "ts_ns"}))
        # metadata -> facts
        for row in df.filter(pl.col("ph") == "M").iter_rows(named=True):
            self._meta(row, evs[row["i"]])

    def read_small(self, out: Outcome) -> None:
        """Read the gathered chunks of few events, together (see :meth:`_small_chunk`)."""
        if not self.small:
            return
        chunks, self.small, self.small_events = self.small, [], 0
        evs, segments = [], []
        for c in chunks:
            segments.append((len(evs), c.offset))
            evs += c.events
        self._small_chunk(evs, segments, out)

    def _small_chunk(self, evs: list, segments: list[tuple[int, int]], out: Outcome) -> None:
        """:meth:`chunk` for chunks of few events (a small file, the last events of a large one),
        read together: the same rows and sink calls as :meth:`chunk` makes for each, without the
        fixed cost of a dozen Polars queries, which is most of the parse of a small file.

        ``evs`` are the events of the chunks one after the other; ``segments`` says where each
        chunk starts in ``evs`` and at which byte offset of the stream. The columns are Python
        lists, made once for all the chunks (``ts`` and ``dur`` by :func:`_us_to_ns` and
        :func:`_dur_to_ns`; names, pids and flow ids by the same Polars casts as in :meth:`chunk`,
        through :func:`_text_values` and :func:`_int_values`), and the events' columns Arrow
        arrays made from them. (Arrow kernels for ``ts``/``dur`` cost as much as the list
        comprehensions at these sizes, once their fixed cost per call is counted.) What depends
        on the chunk is done per chunk, in the order :meth:`chunk` does it: the time base comes
        from the first chunk with a usable ts, and the issues (at most 100 bad events per chunk,
        at the chunk's offset) and metrics of a chunk come before those of the next."""
        n = len(evs)
        bounds = [(lo, hi, off) for (lo, off), (hi, _) in zip(segments, segments[1:] + [(n, None)])]
        ph = [e.ph for e in evs]
        phases = Counter(ph)
        self.phases.update(phases)
        dur = [e.dur for e in evs]
        for p in ("i", "I"):                 # an instant has no duration, whatever it says
            i = -1
            for _ in range(phases[p]):
                i = ph.index(p, i + 1)
                dur[i] = None
        ts = [e.ts for e in evs]
        if self.offset is None and _base_ns(out.header.get("baseTimeNanoseconds")) is not None:
            self._time_base(out, None)           # (from the header: no ts needed)
        if self.offset is None:
            for lo, hi, _ in bounds:
                self._time_base(out, min(filter(_usable, ts[lo:hi]), default=None))
                if self.offset is not None:
                    break
        ts_ns = _us_to_ns(ts, self.offset or 0)
        dur_ns = _dur_to_ns(dur)
        name = _text_values([e.name for e in evs])
        pid = _int_values([e.pid for e in evs])
        tid = _int_values([e.tid for e in evs])
        cat = [e.cat for e in evs]
        category = list(map(_ALIAS, cat, cat))

        def row(i: int) -> dict:
            return dict(ph=ph[i], cat=cat[i], name=name[i], pid=pid[i], tid=tid[i], ts_ns=ts_ns[i], dur_ns=dur_ns[i],
                        category=category[i])

        # spans and instants -> events
        only_events = phases.keys() <= _EVENT_PHASE_SET
        is_event = None if only_events else list(map(_EVENT_PHASE_SET.__contains__, ph))
        keep = is_event                      # the event rows (None: every row)
        bad: list[int] = []
        if None in ts_ns:
            valid = list(map(operator.is_not, ts_ns, repeat(None)))
            bad = [i for i in range(n) if not valid[i] and (only_events or is_event[i])]
            keep = valid if only_events else list(map(operator.and_, is_event, valid))
        ev = range(n) if keep is None else list(compress(range(n), keep))
        attrs = None
        mem: list[int] = []
        if ev:
            def sub(values: list) -> list:          # the event rows of a column
                return values if keep is None else list(compress(values, keep))

            ev_ts = sub(ts_ns)
            m = len(ev_ts)
            ints = pa.array(sub(pid) + sub(tid) + sub(dur_ns), _I64)    # (one conversion for three columns)
            cols = [ints.slice(0, m), ints.slice(m, m), _int64_array(ev_ts), ints.slice(2 * m, m)]
            ev_category = sub(category)
            texts = pa.array(ev_category + sub(name), pa.string())
            category_a, name_a = texts.slice(0, m), texts.slice(m, m)
            if not GPU_CATEGORIES.isdisjoint(ev_category):
                gpu = pc.is_in(category_a, options=_GPU_SET)
                cols[0], cols[1] = pc.if_else(gpu, _NULL_I64, cols[0]), pc.if_else(gpu, _NULL_I64, cols[1])
            raws = [e.args for e in evs]
            attrs = _attrs(sub(raws))
            self.sink.add_frame("events", pa.Table.from_arrays(
                cols + [category_a, name_a.fill_null(_UNNAMED) if name_a.null_count else name_a, attrs],
                names=_EVENT_COLUMNS))
            lo, hi = min(ev_ts), max(ev_ts)
            self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
            self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)
            if not self.kineto_cats:         # (only whether there is one is read)
                self.kineto_cats = int(any(map(KINETO_CATS.__contains__, cat if keep is None else compress(cat, keep))))
            self.cpu_pids.append((sub(pid), ev_category))
            self.cpu_pids_kept += m
            if self.cpu_pids_kept > _KEEP_PIDS:      # (memory stays bounded on a file of many small chunks)
                self.cpu_pids, self.cpu_pids_kept = [dict(_count_pids(self.cpu_pids))], 0
            hits = set()
            for v in set(name):
                if v is not None:
                    h = _DERIVED_NAME.get(v)
                    if h is None:
                        h = _DERIVED.match(v) is not None
                        if len(_DERIVED_NAME) > 65536:
                            _DERIVED_NAME.clear()
                        _DERIVED_NAME[v] = h
                    if h:
                        hits.add(v)
            if hits:
                for i in compress(range(n), map(hits.__contains__, name)):
                    if keep is None or keep[i]:
                        self._derived(row(i), evs[i])
            if "[memory]" in name:
                mem = [j for j, i in enumerate(ev) if name[i] == "[memory]"]
        counters = [i for i in range(n) if ph[i] == "C"] if phases["C"] else []
        for lo, hi, offset in bounds:
            # per chunk: its issues (bad events, counters) and metrics (memory, counters) in order
            seg_bad = bad[bisect.bisect_left(bad, lo):bisect.bisect_left(bad, hi)]
            for i in seg_bad[:100]:
                self.sink.issue("bad_event", f"{ph[i]} event without a numeric ts", text=str(name[i])[:200],
                                byte_offset=offset)
            if len(seg_bad) > 100:
                self.sink.more_issues(len(seg_bad) - 100)
            if mem:
                seg_mem = [j for j in mem if lo <= ev[j] < hi]
                if seg_mem:
                    self._memory(pl.DataFrame({
                        "ts_raw_ns": pl.Series([ts_ns[ev[j]] for j in seg_mem], dtype=pl.Int64),
                        "attrs": pl.from_arrow(attrs.take(pa.array(seg_mem, pa.int64()))),
                    }))
            for i in counters[bisect.bisect_left(counters, lo):bisect.bisect_left(counters, hi)]:
                self._counter(row(i), evs[i], offset)
        if only_events:
            return
        other = list(compress(range(n), map(operator.not_, is_event)))
        # flows
        fl = [i for i in other if ph[i] in _FLOW_PHASES]
        if fl:
            ids = _int_values([evs[i].id for i in fl])
            ends = [(cat[i], f, pid[i], tid[i], ts_ns[i]) for i, f in zip(fl, ids)]
            self.flow_src.append([e for i, e in zip(fl, ends) if ph[i] == "s"])
            self.flow_dst.append([e for i, e in zip(fl, ends) if ph[i] != "s"])
        # metadata -> facts
        if phases["M"]:
            for i in other:
                if ph[i] == "M":
                    self._meta({"name": name[i], "pid": pid[i]}, evs[i])

    def _events(self, ev: pl.DataFrame, evs: list, offset: int) -> None:
        """X spans and i/I instants (rows ``ev`` of the chunk's ``evs``) -> events, and the
        steps, collectives and memory metrics they hold."""
        n_bad = ev["ts"].null_count()
        if n_bad:
            bad = ev.filter(pl.col("ts").is_null())
            for row in bad.head(100).iter_rows(named=True):
                self.sink.issue("bad_event", f"{row['ph']} event without a numeric ts", text=str(row["name"])[:200],
                                byte_offset=offset)
            if n_bad > 100:
                self.sink.more_issues(n_bad - 100)
            ev = ev.filter(pl.col("ts").is_not_null())
            if not len(ev):
                return
        gpu = pl.col("category").is_in(list(GPU_CATEGORIES))
        frame = ev.select(
            pid=pl.when(gpu).then(None).otherwise(pl.col("pid")),
            tid=pl.when(gpu).then(None).otherwise(pl.col("tid")),
            ts_raw_ns=pl.col("ts_ns"),
            dur_ns=pl.when(pl.col("ph") == "X").then(pl.col("dur_ns")).otherwise(None),
            category=pl.col("category"),
            name=pl.col("name").fill_null("(unnamed)"),
        )
        if isinstance(evs, EventColumns):
            raw = pl.Series(evs.column("args"))
            attrs = (raw if len(ev) == len(evs) else raw.gather(ev["i"])).to_arrow()
            if b"\n" in evs.data:
                attrs = _flat(attrs)
        else:
            attrs = _attrs([e.args for e in evs] if len(ev) == len(evs) else [evs[i].args for i in ev["i"].to_list()])
        self.sink.add_frame("events", frame.to_arrow().append_column("attrs", attrs))
        st = ev.select(lo=pl.col("ts_ns").min(), hi=pl.col("ts_ns").max(),
                       kineto=pl.col("cat").is_in(list(KINETO_CATS)).sum(),
                       memory=(pl.col("name") == "[memory]").sum()).row(0, named=True)
        self.first_ns = st["lo"] if self.first_ns is None else min(self.first_ns, st["lo"])
        self.last_ns = st["hi"] if self.last_ns is None else max(self.last_ns, st["hi"])
        self.kineto_cats += st["kineto"]
        cpu = ev.select(pl.col("pid").filter(~gpu & pl.col("pid").is_not_null()))
        if len(cpu):
            self.cpu_pids.append(dict(cpu["pid"].value_counts().iter_rows()))
        # derived rows: steps, collectives
        for row in ev.filter(pl.col("name").str.contains(DERIVED_NAMES)).iter_rows(named=True):
            self._derived(row, evs[row["i"]])
        if st["memory"]:
            mem = frame.with_row_index("_r").filter(pl.col("name") == "[memory]")
            self._memory(mem.with_columns(attrs=pl.from_arrow(attrs.take(mem["_r"].to_arrow()))))

    def _memory(self, mem: pl.DataFrame) -> None:
        """profile_memory instants -> allocated/reserved bytes per device (vectorised over the chunk)."""
        a = pl.col("attrs")
        m = mem.select(
            "ts_raw_ns",
            dtype=a.str.json_path_match("$['Device Type']").cast(pl.Int64, strict=False),
            did=a.str.json_path_match("$['Device Id']").cast(pl.Int64, strict=False),
            allocated=a.str.json_path_match("$['Total Allocated']").cast(pl.Float64, strict=False),
            reserved=a.str.json_path_match("$['Total Reserved']").cast(pl.Float64, strict=False),
        ).with_columns(entity=pl.when(pl.col("dtype") == 0).then(pl.lit("cpu"))
                       .when(pl.col("dtype") == 1).then(pl.format("cuda:{}", pl.col("did")))
                       .otherwise(pl.format("device_type_{}:{}", pl.col("dtype"), pl.col("did"))))
        for col, metric in (("allocated", "torch.memory:allocated"), ("reserved", "torch.memory:reserved")):
            part = m.filter(pl.col(col).is_not_null()).select(
                "entity", "ts_raw_ns", metric=pl.lit(metric), value=pl.col(col), unit=pl.lit("bytes"))
            self.sink.add_frame("metrics", part)

    def _counter(self, row: dict, e: Ev, offset: int) -> None:
        if row["ts_ns"] is None:
            self.sink.issue("bad_event", "counter without a numeric ts", text=str(row["name"])[:200],
                            byte_offset=offset)
            return
        entity = str(e.pid) if e.pid is not None else None
        for k, v in _args(e).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.sink.add("metrics", entity=entity, metric=f"{row['name']}:{k}", ts_raw_ns=row["ts_ns"],
                              value=float(v), unit="-")

    def _meta(self, row: dict, e: Ev) -> None:
        a = _args(e)
        value = a.get("name", a.get("labels", a.get("sort_index")))
        if row["name"] == "process_labels" and value == "CPU" and row["pid"] is not None:
            self.labelled_cpu.add(row["pid"])
        self.sink.fact(f"kineto.{row['name']}", _dumps(
            {"pid": e.pid, "tid": e.tid, "value": value if value is not None else a}).decode())

    def _derived(self, row: dict, e: Ev) -> None:
        name, cat = row["name"], row["category"]
        m = STEP_MARKER.match(name)
        om = None if m else OPTIMIZER_STEP.match(name)
        if (m or om) and row["ph"] == "X":
            gpu = cat in GPU_CATEGORIES
            side = "gpu" if gpu else "cpu"
            if m:
                step = int(m.group(1))
            else:   # no number in the name: the marker's order in the file
                step = self.optimizer_steps[side]
                self.optimizer_steps[side] += 1
            self.steps.append(dict(pid=None if gpu else row["pid"], tid=None if gpu else row["tid"],
                                   side=side, step=step, name=name, ts_raw_ns=row["ts_ns"], dur_ns=row["dur_ns"]))
            return
        if row["ph"] != "X":
            return
        if name == "record_param_comms":
            a = read_args(_args(e))
            if "collective" in a or "pg" in a or "in_nelems" in a:
                self.param_comms.setdefault((row["pid"], row["tid"]), []).append((row["ts_ns"], a))
            return
        km = NCCL_KERNEL.match(name) if cat == "kernel" else None
        cm = C10D_OP.match(name) if cat == "cpu_op" else None
        bm = BACKEND_ANNOTATION.match(name) if cat == "user_annotation" else None
        if km:
            role, backend, token = "exec", "nccl", km.group(1) or km.group(2)
        elif cm and cm.group(1).strip("_") not in C10D_NOT_COLLECTIVE:
            role, backend, token = "call", "c10d", cm.group(1)
        elif bm and bm.group(1) == "gloo":
            role, backend, token = "exec", "gloo", bm.group(2)
        else:
            return
        a = read_args(_args(e))
        coll = canonical_collective(a.get("collective")) or canonical_collective(token)
        gpu = cat in GPU_CATEGORIES
        in_n = a.get("in_nelems")
        if in_n is None:
            in_n = _nelems(a.get("input_dims"))
        dtype = a.get("dtype")
        if dtype is None and isinstance(a.get("input_type"), list) and a["input_type"]:
            t0 = a["input_type"][0]
            dtype = t0 if isinstance(t0, str) and t0 and t0 not in ("TensorList", "Scalar") else None
        self.colls.append(dict(
            pid=None if gpu else row["pid"], tid=None if gpu else row["tid"], role=role, backend=backend,
            collective=coll or "unknown", op=name, pg=a.get("pg"), pg_desc=a.get("pg_desc"), seq=a.get("seq"),
            ts_raw_ns=row["ts_ns"], dur_ns=row["dur_ns"], in_nelems=in_n, out_nelems=a.get("out_nelems"),
            dtype=dtype, group_size=a.get("group_size"), device=a.get("device"), stream=a.get("stream"),
            external_id=a.get("external_id"), correlation=a.get("correlation")))

    # -- end of file -------------------------------------------------------------------
    def _attach_param_comms(self) -> None:
        """c10d calls get the sizes and group of the record_param_comms op they contain."""
        index = {k: ([t for t, _ in sorted(v, key=lambda x: x[0])], sorted(v, key=lambda x: x[0]))
                 for k, v in self.param_comms.items()}
        for c in self.colls:
            if c["role"] != "call":
                continue
            got = index.get((c["pid"], c["tid"]))
            if not got:
                continue
            times, items = got
            end = c["ts_raw_ns"] + (c["dur_ns"] or 0)
            j = bisect.bisect_left(times, c["ts_raw_ns"])
            if j < len(times) and times[j] <= end:
                a = items[j][1]
                for k_col, k_arg in (("pg", "pg"), ("pg_desc", "pg_desc"), ("seq", "seq"), ("in_nelems", "in_nelems"),
                                     ("out_nelems", "out_nelems"), ("dtype", "dtype"), ("group_size", "group_size")):
                    if c.get(k_col) is None and a.get(k_arg) is not None:
                        c[k_col] = a[k_arg]
                if c["collective"] == "unknown" and a.get("collective"):
                    c["collective"] = canonical_collective(a["collective"]) or "unknown"

    def _write_derived(self) -> None:
        self._attach_param_comms()
        self.colls.sort(key=lambda c: c["ts_raw_ns"])
        ordinals: Counter = Counter()
        for c in self.colls:
            k = (c["role"], c["pg"])
            c["ordinal"] = ordinals[k]
            ordinals[k] += 1
            size = dtype_bytes(c["dtype"])
            c["bytes"] = c["in_nelems"] * size if size and c["in_nelems"] is not None else None
            self.sink.add("collectives", **c)
        for s in sorted(self.steps, key=lambda s: s["ts_raw_ns"]):
            self.sink.add("steps", **s)
        if self.flow_src:
            src, dst = self.flow_src, self.flow_dst
            self.flow_src, self.flow_dst = [], []
            if sum(map(len, src)) + sum(map(len, dst)) < SMALL_CHUNK:
                self.sink.add_frame("flows", _pair_flows(_flow_rows(src), _flow_rows(dst)))
            else:
                src, dst = _flow_frame(src, "src"), _flow_frame(dst, "dst")
                pairs = src.join(dst, on=["category", "flow_id"], how="full", coalesce=True, nulls_equal=True)
                del src, dst
                # in parts of a sink batch: converting and encoding one part at a time keeps memory low
                for part in pairs.iter_slices(FLOW_PART_ROWS):
                    self.sink.add_frame("flows", part)

    def _rebase(self, offset: int) -> None:
        cols = {"events": ("ts_raw_ns",), "metrics": ("ts_raw_ns",), "steps": ("ts_raw_ns",),
                "collectives": ("ts_raw_ns",), "flows": ("src_ts_raw_ns", "dst_ts_raw_ns")}
        self.sink.flush()
        if self.sink.published:
            raise RuntimeError("parts to rebase were already announced to the loader")
        for f in self.sink.files:
            table = f.name.split(".")[0]
            if table not in cols:
                continue
            t = pq.read_table(f)
            for c in cols[table]:
                t = t.set_column(t.schema.get_field_index(c), c, pc.add(t[c], offset))
            pq.write_table(t, f, compression="zstd")
        if self.first_ns is not None:
            self.first_ns += offset
            self.last_ns += offset

    def sink_done(self, check: bool = True) -> None:
        """The chunks' sink calls are all made: the sink is used directly from here on."""
        if isinstance(self.sink, SinkThread):
            bg, self.sink = self.sink, self.ctx.sink
            bg.close(check)

    def finish(self, out: Outcome) -> None:
        self.read_small(out)
        self.sink_done()
        ctx, sink = self.ctx, self.sink
        if out.layout == "not_json":
            raise ValueError("not JSON: the file starts with neither { nor [")
        meta = {**out.header, **out.trailer}
        if not self.pending_rebase and not sink.may_inline("events"):
            sink.flush("events")     # the last events part loads while the flows are paired
        self._write_derived()
        if self.pending_rebase or self.offset is None:
            base = _base_ns(meta.get("baseTimeNanoseconds"))
            if base is not None:
                self.time_base = "baseTimeNanoseconds"
                if self.pending_rebase:
                    self._rebase(base)
            elif self.pending_rebase:
                self.time_base = "unknown"
                ctx.clock_domain = CLOCK_PROCESS
                sink.issue("no_time_base", "ts is relative (below 1e15 us) and the file has no baseTimeNanoseconds: "
                           "times are kept relative to an unknown origin (clock domain process)")
        for kind, message, offset in out.problems:
            sink.issue(kind, message, byte_offset=offset)
        unsupported = {p: n for p, n in self.phases.items() if p not in _EVENT_PHASES + _FLOW_PHASES + ("C", "M")}
        for p, n in sorted(unsupported.items()):
            sink.issue("unsupported_phase", f"{n} event(s) of phase {p!r} are not read")
        if out.truncated_at is not None:
            n = sum(self.phases.values())
            ctx.truncated = (f"the JSON is cut at byte {out.truncated_at} (decompressed) inside the event array; "
                             f"the {n} complete events before the cut were kept")
            sink.issue("truncated", ctx.truncated, text=out.truncated_text, byte_offset=out.truncated_at)

        # identity
        di = meta.get("distributedInfo")
        if isinstance(di, dict):
            r = di.get("rank")
            if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
                ctx.rank = r
            sink.fact("distributed_info", _dumps(di).decode())
            for k in ("rank", "world_size", "backend", "nccl_version", "pg_count"):
                if k in di:
                    sink.fact(k, di[k])
        host = meta.get("host_name")
        wm = WORKER_FILE.match(PurePosixPath(ctx.rel).name)
        if isinstance(host, str) and host:
            ctx.host = host
        elif wm:
            ctx.host = wm.group("host")
        if len(self.labelled_cpu) == 1:
            ctx.pid = next(iter(self.labelled_cpu))
        elif wm:
            ctx.pid = int(wm.group("pid"))
        elif cpu_pids := _count_pids(self.cpu_pids):
            ctx.pid = cpu_pids.most_common(1)[0][0]
        if wm and ctx.pid is not None and int(wm.group("pid")) != ctx.pid:
            ctx.attrs["file_name_pid"] = int(wm.group("pid"))
        if wm and isinstance(host, str) and host and wm.group("host") != host:
            ctx.attrs["file_name_host"] = wm.group("host")
        if ctx.host:
            sink.fact("hostname", ctx.host)
        for k in ("schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "trace_id", "traceName", "host_name",
                  "cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version"):
            if k in meta and not isinstance(meta[k], (dict, list)):
                sink.fact(k, meta[k])
        dp = meta.get("deviceProperties")
        if isinstance(dp, list) and dp:
            sink.fact("device_names", ", ".join(str(d.get("name")) for d in dp if isinstance(d, dict)))

        kineto = any(k in meta for k in KINETO_KEYS) or self.kineto_cats > 0
        ctx.format = "kineto" if kineto else "chrome_trace"
        ctx.attrs.update({
            "layout": out.layout, "time_base": self.time_base,
            "base_time_ns": meta.get("baseTimeNanoseconds"),
            "events_by_phase": dict(sorted(self.phases.items())),
            "first_ts_ns": self.first_ns, "last_ts_ns": self.last_ns,
            "steps": len(self.steps), "collectives": len(self.colls),
        })
        if self.slow_chunks:
            ctx.attrs["chunks_read_slowly"] = self.slow_chunks
        if isinstance(di, dict):
            ctx.attrs["distributed"] = {k: di[k] for k in ("rank", "world_size", "backend", "pg_count") if k in di}


PARSERS = (KinetoParser,)
