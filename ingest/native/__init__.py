"""aftertrace's line engine: compiled single passes over text (``scan.c``), as Arrow arrays: the
lines of a chunk (:func:`split_lines`), the launchers' wrappers before them (:func:`wraps`), the
numbers of step lines (:func:`step_values`), the rank a message states (:func:`rank_said`), the
classes and headers of NCCL INFO lines (:func:`nccl_info`), the fields of perf script record
headers (:func:`perf_headers`), the multi-line blocks of a log's stream (:class:`BlockWalker`),
the stamps a log's clock phase is read from and the pairs it is read by (:func:`phase_readings`,
:func:`phase_pairs`, :func:`phase_counts`); and cuts of a text column that share its bytes
(:func:`slices`).

The library is plain C loaded with ctypes (no Python headers, no ABI to match): the wheel ships
it built (``hatch_build.py``); a checkout or an editable install builds it on first use when
the library for the present source is missing (:mod:`.build`). Each function takes buffers
this module allocates from Arrow's memory pool and returns arrays that own them: no copy on the
way to Polars.
"""
from __future__ import annotations

import ctypes
import threading
from array import array
from typing import NamedTuple
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from . import build as _build

_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I64P = ctypes.POINTER(ctypes.c_int64)


def library() -> ctypes.CDLL:
    """The loaded engine, built first when the library of this source is not there."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _HERE / _build.library_name()
            if not path.exists():
                path = _build.build(_HERE)
            lib = ctypes.CDLL(str(path))
            lib.at_count_newlines.argtypes = [_P, _I64]
            lib.at_count_newlines.restype = _I64
            lib.at_split_views.argtypes = [_P, _I64, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _P, _I64,
                                           ctypes.c_int32, _I64P, _I64P, _I64P]
            lib.at_split_views.restype = _I64
            lib.at_step_values.argtypes = [_P, _I64] + [_P] * 9
            lib.at_step_values.restype = _I64
            lib.at_rank_said.argtypes = [_P, _I64] + [_P] * 7
            lib.at_rank_said.restype = _I64
            lib.at_nccl_info.argtypes = [_P, _I64] + [_P] * 5
            lib.at_nccl_info.restype = _I64
            lib.at_nccl_heads.argtypes = [_P, _I64, _P, _P]
            lib.at_nccl_heads.restype = _I64
            lib.at_nccl_groups.argtypes = [_I64, _P, _P, _P, _P, _I64, _P, _P, _P, _P]
            lib.at_nccl_groups.restype = _I64
            lib.at_perf_headers.argtypes = [_P, _I64] + [_P] * 11 + [_I64]
            lib.at_perf_headers.restype = _I64
            lib.at_log_heads.argtypes = [_P, _I64, _P]
            lib.at_log_heads.restype = _I64
            lib.at_dmesg_raw.argtypes = [_P, _I64] + [_P] * 7
            lib.at_dmesg_raw.restype = _I64
            lib.at_wraps.argtypes = [_P, _I64] + [_P] * 7
            lib.at_wraps.restype = _I64
            lib.at_slice_views.argtypes = [_P, _I64, _P, _P, _P, _P]
            lib.at_slice_views.restype = _I64
            lib.at_subsys.argtypes = [_P, _I64, _P, _P]
            lib.at_subsys.restype = _I64
            lib.at_kineto_events.argtypes = [_P, _I64, _I64] + [_P] * 17
            lib.at_kineto_events.restype = _I64
            lib.at_views.argtypes = [_P, _I64, _P, _P, _P, _P]
            lib.at_views.restype = _I64
            lib.at_blocks.argtypes = [_P, _I64, _P, _P, _I64, _I64, _P, _I64, _P, _P, _P, _P, _P]
            lib.at_blocks.restype = _I64
            lib.at_phase_readings.argtypes = [_P, _I64, _P, _P, _P]
            lib.at_phase_readings.restype = _I64
            lib.at_phase_forbidden.argtypes = [_I64] + [_P] * 9
            lib.at_phase_forbidden.restype = None
            lib.at_phase_pairs.argtypes = [_I64] + [_P] * 11 + [_I64, _I64, _I64] + [_P] * 11
            lib.at_phase_pairs.restype = _I64
            lib.at_phase_counts.argtypes = [_P, _P, _P, _I64, _I64, _I64, _P]
            lib.at_phase_counts.restype = _I64
            lib.at_us_to_ns.argtypes = [_P, _P, _I64, ctypes.c_int, _I64, ctypes.c_double, _P, _P]
            lib.at_us_to_ns.restype = _I64
            lib.at_body_walk.argtypes = [_P, _I64, _P, _P, _P, _I64, _I64, _P]
            lib.at_body_walk.restype = _I64
            _lib = lib
    return _lib


def _address(buf) -> int:
    """Address of a bytearray's (or other writable buffer's, an ``array.array``'s) first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)) if len(buf) else 0


WINDOW = 1 << 30       # scan.c's WINDOW_BITS: a view's offset is into the data buffer it names


def split_lines(buf: bytearray, n: int, complete: bool, blank_as_null: bool) -> tuple[pa.Array, pa.Array, int]:
    """The lines of ``buf[:n]`` as a ``string_view`` array (Polars takes it without a copy), a
    uint8 array of flags per line (bit 0: its bytes were not UTF-8, replaced with U+FFFD; bit 1:
    it holds a NUL byte), and how many bytes of ``buf`` the lines used (all of ``n`` when
    ``complete``; else up to the last newline).

    A line loses its newline and one trailing ``\\r``; with ``blank_as_null`` an empty line is
    null. ``buf`` is read, never kept: it may be reused at once (the lines' bytes are copied).
    """
    lib = library()
    src = _address(buf)
    lines = lib.at_count_newlines(src, n) + 1
    views = pa.allocate_buffer(16 * lines)
    valid = pa.allocate_buffer((lines + 7) // 8)
    bad = pa.allocate_buffer(lines)
    data = pa.allocate_buffer(max(n, 1))
    windows = [data.slice(k * WINDOW) for k in range(max(1, -(-n // WINDOW)))]
    used, nulls, extra_len = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    cap = 1 << 16
    while True:
        extra = pa.allocate_buffer(cap)
        count = lib.at_split_views(src, n, int(complete), int(blank_as_null), data.address, views.address,
                                   bad.address, valid.address, extra.address, cap, len(windows),
                                   ctypes.byref(used), ctypes.byref(nulls), ctypes.byref(extra_len))
        if count == -2 ** 63:
            raise ValueError("a line longer than 2 GiB")
        if count >= 0:
            break
        cap = -count        # (bytes that were not UTF-8 grew into replacements: the size they need)
    bufs = [valid if nulls.value else None, views, *windows] + ([extra.slice(0, extra_len.value)] if extra_len.value else [])
    text = pa.Array.from_buffers(pa.string_view(), count, bufs, null_count=nulls.value)
    flags = pa.Array.from_buffers(pa.uint8(), count, [None, bad])
    return text, flags, used.value


# -- the readers of messages (scan.c: at_step_values, at_rank_said, at_nccl_info) ---------------
UNSURE = 255      # a row the compiled reader leaves to the regexes


class _Col(ctypes.Structure):
    """scan.c's ``col_t``: a text column in either of Arrow's layouts."""
    _fields_ = [("offs", _P), ("data", _P), ("views", _P), ("bufs", _P), ("valid", _P)]


def texts(col) -> pa.Array:
    """A string column (a Polars Series, or anything with ``to_arrow``) as one Arrow array the
    readers take: a Series as Polars holds it (``string_view``: no copy), anything else as
    ``large_string``."""
    try:
        a = col.rechunk().to_arrow(compat_level=_newest())
    except (AttributeError, TypeError):
        a = col.to_arrow()
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return a if a.type in (pa.string_view(), pa.large_string()) else a.cast(pa.large_string())


def _newest():
    import polars as pl
    return pl.CompatLevel.newest()


def _column(texts: pa.Array) -> tuple[object, _Col]:
    """``texts`` (large_string or string_view) as the readers take it: what must stay alive while
    they read (the array, which may be a copy, and the list of its data buffers) and the
    ``col_t`` of its buffers (its slice offset applied)."""
    if texts.type not in (pa.large_string(), pa.string_view()):
        raise TypeError(f"texts must be large_string or string_view, not {texts.type}")
    if texts.offset and texts.null_count:
        texts = pa.concat_arrays([texts])      # (a bitmap that does not start at a byte: a fresh copy)
    bufs = texts.buffers()
    valid = bufs[0].address if bufs[0] is not None and texts.null_count else 0
    if texts.type == pa.large_string():
        offs, data = bufs[1], bufs[2]
        return texts, _Col(offs.address + 8 * texts.offset, data.address if data is not None else 0, 0, 0, valid)
    data = (ctypes.c_void_p * max(1, len(bufs) - 2))(*(b.address for b in bufs[2:]))
    return (texts, data), _Col(0, 0, bufs[1].address + 16 * texts.offset, ctypes.addressof(data), valid)


def slices(texts: pa.Array, start: pa.Array, length: pa.Array | None = None) -> pa.Array:
    """``texts[i][start[i] : start[i] + length[i]]`` for each row of a text array (:func:`texts`), as a
    ``string_view`` array that shares the bytes of ``texts`` (no copy of the text; Polars takes it
    as it is). ``start`` and ``length`` are int32 arrays of bytes (the callers cut ASCII prefixes,
    where bytes are characters; a cut inside a character moves to its edge, so the rows stay
    UTF-8); a row is null where its text is null or its start is null or negative; a null or
    negative length, or none, cuts to the end."""
    lib = library()
    n = len(texts)
    if len(start) != n or (length is not None and len(length) != n):
        raise ValueError("slices: start and length must have a value per row")
    if texts.type == pa.large_string() and texts.buffers()[2] is not None and texts.buffers()[2].size > 2 ** 31 - 1:
        texts = texts.cast(pa.string_view())    # (a view's offset into its buffer is an int32)
    alive, col = _column(texts)
    start = _int32s(start, -1)
    length = _int32s(length, -1) if length is not None else None
    views, valid = pa.allocate_buffer(max(16 * n, 1)), pa.allocate_buffer(max((n + 7) // 8, 1))
    nulls = lib.at_slice_views(ctypes.byref(col), n, _values_address(start),
                               _values_address(length) if length is not None else None,
                               views.address, valid.address) if n else 0
    src = alive[0] if isinstance(alive, tuple) else alive
    data = [b for b in src.buffers()[2:] if b is not None]
    del alive
    return pa.Array.from_buffers(pa.string_view(), n, [valid if nulls else None, views, *data], null_count=nulls)


def _int32s(a: pa.Array, null_as: int) -> pa.Array:
    """An int32 array without nulls (each null as ``null_as``) and without a slice offset."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if a.type != pa.int32():
        a = a.cast(pa.int32())
    if a.null_count:
        a = pc.fill_null(a, null_as)
    if a.offset:
        a = pa.concat_arrays([a])
    return a


def _values_address(a: pa.Array) -> int:
    return a.buffers()[1].address if len(a) else 0


class Steps(NamedTuple):
    """What :func:`step_values` read: ``code`` (uint8: 0 not a step line, 1 a step line, UNSURE
    where the regexes decide) and the values as nullable arrays: ``step``, ``total`` (int64),
    ``loss``, ``stime`` (float64, s); ``unsure``: how many rows were left."""
    code: pa.Array
    step: pa.Array
    total: pa.Array
    loss: pa.Array
    stime: pa.Array
    unsure: int


def step_values(msgs: pa.Array) -> Steps:
    """The step, total, loss and step time of each message of a text array (:func:`texts`) that is a
    step line (see ``at_step_values`` in scan.c)."""
    code, cols, unsure = _read(library().at_step_values, msgs, (pa.int64(), pa.int64(), pa.float64(), pa.float64()))
    return Steps(code, *cols, unsure)


def _read(fn, msgs: pa.Array, types: tuple) -> tuple[pa.Array, list[pa.Array], int]:
    """Call a reader of scan.c over the messages: its code per row, its nullable value columns (of
    ``types``, 8-byte values) and how many rows it left to the regexes."""
    n = len(msgs)
    alive, col = _column(msgs)
    code = pa.allocate_buffer(max(n, 1))
    vals = [pa.allocate_buffer(max(8 * n, 1)) for _ in types]
    oks = [pa.allocate_buffer(max(n, 1)) for _ in types]
    unsure = fn(ctypes.byref(col), n, code.address,
                *(a for v, ok in zip(vals, oks) for a in (v.address, ok.address))) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    if unsure < 0:
        raise MemoryError(f"{fn.__name__}: out of memory")
    return (pa.Array.from_buffers(pa.uint8(), n, [None, code]),
            [_nullable(v, ok, typ, n) for v, ok, typ in zip(vals, oks, types)], unsure)


def _nullable(values, ok, typ, n: int) -> pa.Array:
    """An array of ``typ`` from a values buffer and a byte per row that says whether it has one
    (the bytes packed into the validity bitmap)."""
    bits = pa.Array.from_buffers(pa.uint8(), n, [None, ok]).cast(pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(typ, n, [bits, values])


class RankSaid(NamedTuple):
    """What :func:`rank_said` read: ``code`` (uint8: UNSURE where the regexes decide, else 0) and
    int64 arrays: ``g1`` and ``g2`` (the groups of the engine's RANK_IN_TEXT) and ``pg`` (c10d's
    ``[PG ... Rank N]`` prefix); ``unsure``: how many rows were left."""
    code: pa.Array
    g1: pa.Array
    g2: pa.Array
    pg: pa.Array
    unsure: int


def rank_said(msgs: pa.Array) -> RankSaid:
    """The rank each message of a text array (:func:`texts`) states (see ``at_rank_said`` in scan.c)."""
    code, cols, unsure = _read(library().at_rank_said, msgs, (pa.int64(),) * 3)
    return RankSaid(code, *cols, unsure)


INFO_BRACKET, INFO_CHANNEL = 1, 2     # the bits of NcclInfo.flags


class NcclInfo(NamedTuple):
    """What :func:`nccl_info` read, per line: ``code`` (uint8: 0 not collapsed, 1 + the class
    (0 COLL, 1 per-operation, 2 topology), UNSURE where the regexes decide), ``kid`` (int32: the
    header's number), ``msg_at`` (int32: where the message starts, in bytes), ``flags`` (uint8:
    ``INFO_BRACKET`` the header starts with "[", ``INFO_CHANNEL`` the message starts with
    "Channel "); ``first`` (int64: the line where each header first appears) and how many lines
    were left to the regexes."""
    code: pa.Array
    kid: pa.Array
    msg_at: pa.Array
    flags: pa.Array
    first: pa.Array
    unsure: int


def nccl_info(lines: pa.Array) -> NcclInfo:
    """The class and header number of each NCCL INFO line (see ``at_nccl_info`` in scan.c)."""
    lib = library()
    n = len(lines)
    alive, col = _column(lines)
    code, flags = pa.allocate_buffer(max(n, 1)), pa.allocate_buffer(max(n, 1))
    kid, msg_at = pa.allocate_buffer(max(4 * n, 1)), pa.allocate_buffer(max(4 * n, 1))
    first = pa.allocate_buffer(max(8 * n, 1))
    nk = lib.at_nccl_info(ctypes.byref(col), n, code.address, kid.address, msg_at.address, flags.address,
                          first.address) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    if nk < 0:
        raise MemoryError("at_nccl_info: out of memory")
    codes = pa.Array.from_buffers(pa.uint8(), n, [None, code])
    return NcclInfo(codes, pa.Array.from_buffers(pa.int32(), n, [None, kid]),
                    pa.Array.from_buffers(pa.int32(), n, [None, msg_at]),
                    pa.Array.from_buffers(pa.uint8(), n, [None, flags]),
                    pa.Array.from_buffers(pa.int64(), nk, [None, first]),
                    pc.sum(pc.equal(codes, UNSURE)).as_py() or 0)


class NcclGroups(NamedTuple):
    """What :func:`nccl_groups` found: per group (class * headers + header; int64) its ``first`` and
    ``last`` row (-1: no line) and ``count``; ``keep`` (bool, per line: not dropped) and how many
    lines were ``dropped``."""
    first: pa.Array
    last: pa.Array
    count: pa.Array
    keep: pa.Array
    dropped: int


def nccl_groups(code: pa.Array, kid: pa.Array, flags: pa.Array, later: pa.Array | None, nk: int) -> NcclGroups:
    """The collapse groups of INFO lines read as :func:`nccl_info` reads them (``code``, ``kid`` and
    ``flags``: uint8, int32, uint8), of the lines where ``later`` (bool; None: every line) holds,
    ``nk`` headers (see ``at_nccl_groups`` in scan.c)."""
    lib = library()
    n = len(code)
    first, last, count = (pa.allocate_buffer(max(8 * 3 * nk, 1)) for _ in range(3))
    keep = pa.allocate_buffer(max(n, 1))
    ins = [pc.cast(later, pa.uint8()) if later is not None else None, code, kid, flags]
    ins = [None if a is None else (a if a.offset == 0 and a.null_count == 0 else pa.concat_arrays([a])) for a in ins]
    dropped = lib.at_nccl_groups(n, ins[1].buffers()[1].address, ins[2].buffers()[1].address,
                                 ins[3].buffers()[1].address, None if ins[0] is None else ins[0].buffers()[1].address,
                                 nk, first.address, last.address, count.address, keep.address) if n else 0
    del ins         # (the buffers it read stayed alive through the call)
    keep = pc.cast(pa.Array.from_buffers(pa.uint8(), n, [None, keep]), pa.bool_())
    return NcclGroups(*(pa.Array.from_buffers(pa.int64(), 3 * nk, [None, b]) for b in (first, last, count)), keep,
                      dropped)


_NH_FIELDS = 12


class NcclHeads(NamedTuple):
    """What :func:`nccl_heads` read, per line: ``code`` (uint8: 1 read, 0 not a line that starts
    with its header, UNSURE where the string operations decide) and, for code 1, in bytes (int32):
    ``host_end``, ``pid_at``/``pid_end``, ``tid_at``/``tid_end``, ``tail_at``/``tail_end`` (-1: no
    tail), ``dev_at``/``dev_end`` (-1: the tail is not a plain device), ``level_at``/``level_end``
    (-1: no " NCCL "), ``msg_at`` (-1: no message); ``unsure``: how many were left."""
    code: pa.Array
    host_end: pa.Array
    pid_at: pa.Array
    pid_end: pa.Array
    tid_at: pa.Array
    tid_end: pa.Array
    tail_at: pa.Array
    tail_end: pa.Array
    dev_at: pa.Array
    dev_end: pa.Array
    level_at: pa.Array
    level_end: pa.Array
    msg_at: pa.Array
    unsure: int


def nccl_heads(lines: pa.Array) -> NcclHeads:
    """The header of each NCCL line that starts with it (see ``at_nccl_heads`` in scan.c)."""
    lib = library()
    n = len(lines)
    alive, col = _column(lines)
    code = pa.allocate_buffer(max(n, 1))
    f = pa.allocate_buffer(max(4 * _NH_FIELDS * n, 1))
    left = lib.at_nccl_heads(ctypes.byref(col), n, code.address, f.address) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    cols = pa.Array.from_buffers(pa.int32(), _NH_FIELDS * n, [None, f])     # (the fields one after the other)
    fields = [cols.slice(k * n, n) for k in range(_NH_FIELDS)]
    return NcclHeads(pa.Array.from_buffers(pa.uint8(), n, [None, code]), *fields, left)


class PerfHeaders(NamedTuple):
    """What :func:`perf_headers` read, per line: ``code`` (uint8: 1 read, 0 no time token, UNSURE
    where the regexes decide) and, for code 1, ``p`` (int32: where the time token starts, in
    bytes), ``comm_at``/``comm_end`` (int32, bytes; -1: no comm), ``pid``, ``tid`` (int64, tid
    nullable), ``cpu`` (int32, nullable), ``ts`` (int64 ns) and ``rest_at`` (int32: where the
    text after the time starts); how many lines were left to the regexes."""
    code: pa.Array
    p: pa.Array
    comm_at: pa.Array
    comm_end: pa.Array
    pid: pa.Array
    tid: pa.Array
    cpu: pa.Array
    ts: pa.Array
    rest_at: pa.Array
    unsure: int


def perf_headers(lines: pa.Array, max_seconds: int) -> PerfHeaders:
    """The fields of perf script record headers (see ``at_perf_headers`` in scan.c); a time of
    ``max_seconds`` or more is left to the regexes."""
    lib = library()
    n = len(lines)
    alive, col = _column(lines)
    b1 = [pa.allocate_buffer(max(n, 1)) for _ in range(3)]          # code, tid_ok, cpu_ok
    b4 = [pa.allocate_buffer(max(4 * n, 1)) for _ in range(5)]      # p, comm_at, comm_end, cpu, rest_at
    b8 = [pa.allocate_buffer(max(8 * n, 1)) for _ in range(3)]      # pid, tid, ts
    code, tid_ok, cpu_ok = b1
    p, comm_at, comm_end, cpu, rest_at = b4
    pid, tid, ts = b8
    left = lib.at_perf_headers(ctypes.byref(col), n, code.address, p.address, comm_at.address, comm_end.address,
                               pid.address, tid.address, tid_ok.address, cpu.address, cpu_ok.address, ts.address,
                               rest_at.address, max_seconds) if n else 0
    del alive       # (the buffers it read stayed alive through the call)

    def arr(typ, buf):
        return pa.Array.from_buffers(typ, n, [None, buf])
    return PerfHeaders(arr(pa.uint8(), code), arr(pa.int32(), p), arr(pa.int32(), comm_at), arr(pa.int32(), comm_end),
                       arr(pa.int64(), pid), _nullable(tid, tid_ok, pa.int64(), n),
                       _nullable(cpu, cpu_ok, pa.int32(), n), arr(pa.int64(), ts), arr(pa.int32(), rest_at), left)


class LogHeads(NamedTuple):
    """What :func:`log_heads` read, per body: ``code`` (uint8: 0 no family, 1 c10, 2 elastic, 3 usdt,
    4 dated, 5 syslog, 6 pylog, UNSURE where the regexes decide) and, for codes 1-6: ``sev``
    (uint8: 0 none, then crit, error, warning, info, debug, notice: :data:`SEVERITIES`),
    ``msg_at`` (int32: where the message starts, in bytes), ``f_at``/``f_end`` (int32: the file,
    syslog's program or pylog's logger), ``name_end`` (int32: c10's file less its extension),
    ``h_at``/``h_end`` (int32: syslog's host), ``fline`` (int64: the file's line); nullable:
    ``rank``, ``pid``, ``tid`` (int64), ``y``, ``mo``, ``d``, ``hh``, ``mi``, ``ss`` (int32: the
    stamp's pieces), ``fns`` (int64: its fraction in ns), ``res`` (int64: its resolution in ns),
    ``off`` (int64: its stated UTC offset in s); ``unsure``: how many rows were left."""
    code: pa.Array
    sev: pa.Array
    msg_at: pa.Array
    f_at: pa.Array
    f_end: pa.Array
    name_end: pa.Array
    h_at: pa.Array
    h_end: pa.Array
    fline: pa.Array
    rank: pa.Array
    pid: pa.Array
    tid: pa.Array
    y: pa.Array
    mo: pa.Array
    d: pa.Array
    hh: pa.Array
    mi: pa.Array
    ss: pa.Array
    fns: pa.Array
    res: pa.Array
    off: pa.Array
    unsure: int


SEVERITIES = (None, "crit", "error", "warning", "info", "debug", "notice")


def log_heads(bodies: pa.Array) -> LogHeads:
    """The line family and header fields of each body of a text array (:func:`texts`), as the log
    engine's FAMILIES read them (see ``at_log_heads`` in scan.c)."""
    lib = library()
    n = len(bodies)
    alive, col = _column(bodies)
    m = max(n, 1)
    u8 = [pa.allocate_buffer(m) for _ in range(2)]                  # code, sev
    i32a = [pa.allocate_buffer(4 * m) for _ in range(6)]            # msg_at, f_at, f_end, name_end, h_at, h_end
    i64 = [pa.allocate_buffer(8 * m) for _ in range(7)]             # rank, pid, tid, fline, fns, res, off
    i32b = [pa.allocate_buffer(4 * m) for _ in range(6)]            # y, mo, d, hh, mi, ss
    oks = [pa.allocate_buffer(m) for _ in range(9)]                 # rank pid tid y md hms fns res off
    bufs = [*u8, *i32a, *i64, *i32b, *oks]
    outs = (ctypes.c_void_p * len(bufs))(*(b.address for b in bufs))
    left = lib.at_log_heads(ctypes.byref(col), n, outs) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    code, sev = (pa.Array.from_buffers(pa.uint8(), n, [None, b]) for b in u8)
    msg_at, f_at, f_end, name_end, h_at, h_end = (pa.Array.from_buffers(pa.int32(), n, [None, b]) for b in i32a)
    rank, pid, tid, fline, fns, res, off = i64
    y, mo, d, hh, mi, ss = i32b
    k_rank, k_pid, k_tid, k_y, k_md, k_hms, k_fns, k_res, k_off = oks
    return LogHeads(code, sev, msg_at, f_at, f_end, name_end, h_at, h_end,
                    pa.Array.from_buffers(pa.int64(), n, [None, fline]),
                    _nullable(rank, k_rank, pa.int64(), n), _nullable(pid, k_pid, pa.int64(), n),
                    _nullable(tid, k_tid, pa.int64(), n), _nullable(y, k_y, pa.int32(), n),
                    _nullable(mo, k_md, pa.int32(), n), _nullable(d, k_md, pa.int32(), n),
                    _nullable(hh, k_hms, pa.int32(), n), _nullable(mi, k_hms, pa.int32(), n),
                    _nullable(ss, k_hms, pa.int32(), n), _nullable(fns, k_fns, pa.int64(), n),
                    _nullable(res, k_res, pa.int64(), n), _nullable(off, k_off, pa.int64(), n), left)


WRAP_GROUPS = ("ray_actor", "ray_pid", "mpi_job", "mpi_rank", "tee", "srun", "wrank")


class Wraps(NamedTuple):
    """What :func:`wraps` read, per line: ``code`` (uint8: 1 a wrapper or Ray's repeat suffix was
    read, 0 neither, UNSURE where the regexes decide); ``groups``: each of :data:`WRAP_GROUPS`
    that some line has, as the int32 arrays of its start and length in bytes (start -1 where a
    line does not have it); ``body_at`` (int32: where the rest starts,
    bytes), ``body_len`` (int32: the rest's length in bytes where Ray's suffix ends it, -1 to the
    line's end), ``repeated`` (nullable int32: the suffix's count); ``unsure``: how many rows
    were left."""
    code: pa.Array
    groups: dict
    body_at: pa.Array
    body_len: pa.Array
    repeated: pa.Array
    unsure: int


def wraps(lines: pa.Array) -> Wraps:
    """The launchers' wrappers before each line of a text array (:func:`texts`), as the log
    engine's WRAP reads them (see ``at_wraps`` in scan.c)."""
    lib = library()
    n = len(lines)
    alive, col = _column(lines)
    m = max(n, 1)
    code, rep_ok = pa.allocate_buffer(m), pa.allocate_buffer(m)
    body_at, body_len, rep = (pa.allocate_buffer(4 * m) for _ in range(3))

    # (room for every group's span of every line, one read: the reader writes the spans of the lines
    # with a wrapper only, so a log without any leaves that memory untouched; the other rows are
    # read as -1 below)
    g0, g1 = pa.allocate_buffer(4 * m * len(WRAP_GROUPS)), pa.allocate_buffer(4 * m * len(WRAP_GROUPS))
    left = lib.at_wraps(ctypes.byref(col), n, code.address, g0.address, g1.address, body_at.address, body_len.address,
                        rep.address, rep_ok.address) if n else 0
    codes = pa.Array.from_buffers(pa.uint8(), n, [None, code])
    groups = {}
    wrapped = pc.equal(codes, 1) if n else None
    if n and pc.any(wrapped).as_py():
        starts = pa.Array.from_buffers(pa.int32(), n * len(WRAP_GROUPS), [None, g0])
        ends = pa.Array.from_buffers(pa.int32(), n * len(WRAP_GROUPS), [None, g1])
        for k, name in enumerate(WRAP_GROUPS):
            a = pc.if_else(wrapped, starts.slice(k * n, n), -1)
            if pc.max(a).as_py() >= 0:
                groups[name] = (a, pc.subtract(pc.if_else(wrapped, ends.slice(k * n, n), -1), a))
    return Wraps(codes, groups, pa.Array.from_buffers(pa.int32(), n, [None, body_at]),
                 pa.Array.from_buffers(pa.int32(), n, [None, body_len]), _nullable(rep, rep_ok, pa.int32(), n), left)


# the records of ``at_blocks`` (scan.c): int32 fields per block, per failure of a summary, per
# traceback piece of a failure
BLOCK_FIELDS = ("start", "end", "type", "exc", "fr_lo", "fr_hi", "has_cfe", "title", "fl_lo",
                "fl_hi")
FAILURE_KEYS = ("time", "host", "rank", "exitcode", "error_file")
FAILURE_FIELDS = ("entry", "root", "end", *(f"{k}_{x}" for k in FAILURE_KEYS for x in ("row", "at")), "tb_lo",
                  "tb_hi")
BT_TRACEBACK, BT_FATAL, BT_CFE_ALONE, BT_UNSURE = range(4)


class BlockWalk(NamedTuple):
    """What :meth:`BlockWalker.walk` read: ``blocks``, ``fails`` and ``tb`` as flat int32
    sequences of :data:`BLOCK_FIELDS`, :data:`FAILURE_FIELDS` and 3 (row, offset, stripped) per
    record; ``frames``: the rows of the blocks' frames; ``count``: how many blocks."""
    blocks: memoryview
    frames: memoryview
    fails: memoryview
    tb: memoryview
    count: int


class BlockWalker:
    """The multi-line blocks of one stream's rows (a text array, :func:`texts`) as the log
    engine's block walkers read them (see ``at_blocks`` in scan.c): ``starts``, the rows that open
    one, ascending, and ``kinds``, how (BT_TRACEBACK, BT_FATAL or BT_CFE_ALONE); ``cfe_exc``, a
    byte per row: whether the row, read as a traceback's last line, names a ChildFailedError;
    ``most``: how far a summary's closing border is looked for. The walk's buffers are reused:
    a walk's results hold until the next walk."""

    def __init__(self, bodies: pa.Array, starts: list[int], kinds: list[int], cfe_exc: bytes, most: int):
        n, ns = len(bodies), len(starts)
        if len(kinds) != ns or len(cfe_exc) != n:
            raise ValueError("blocks: a kind per start and a flag per row, please")
        self._alive, self._col = _column(bodies)
        self._n, self._ns, self._most = n, ns, most
        self._starts, self._kinds = (ctypes.c_int32 * ns)(*starts), (ctypes.c_uint8 * ns)(*kinds)
        self._cfe_exc = bytes(cfe_exc)
        m = max(n, 1)
        self._blk = pa.allocate_buffer(4 * len(BLOCK_FIELDS) * max(ns, 1))
        self._frames, self._tb = pa.allocate_buffer(4 * m), pa.allocate_buffer(12 * m)
        self._fails = pa.allocate_buffer(4 * len(FAILURE_FIELDS) * m)

    def walk(self, start_from: int = 0) -> BlockWalk:
        """The blocks from the first start at or after row ``start_from``."""
        counts = (ctypes.c_int64 * 3)()
        got = library().at_blocks(
            ctypes.byref(self._col), self._n, self._starts, self._kinds, self._ns, start_from, self._cfe_exc,
            self._most, self._blk.address, self._frames.address, self._fails.address, self._tb.address,
            counts) if self._ns else 0

        def ints(buf, k):
            return memoryview(buf).cast("B").cast("i")[:k]

        return BlockWalk(ints(self._blk, got * len(BLOCK_FIELDS)), ints(self._frames, counts[0]),
                         ints(self._fails, counts[1] * len(FAILURE_FIELDS)), ints(self._tb, 3 * counts[2]), got)


class DmesgRaw(NamedTuple):
    """What :func:`dmesg_raw` read, per line: ``code`` (uint8: 1 a record, 0 not one, UNSURE where
    the regexes decide) and, for records: ``ts`` (int64 ns on the boot clock, nullable),
    ``msg_at`` (int32: where the message starts, in bytes), ``prio`` (int32, nullable: the ``<N>``
    priority), ``lvl`` (uint8: 0 none, else 1 + the index of the ``--decode`` level in
    ``emerg alert crit err warn notice info debug``); ``unsure``: how many lines were left."""
    code: pa.Array
    ts: pa.Array
    msg_at: pa.Array
    prio: pa.Array
    lvl: pa.Array
    unsure: int


def dmesg_raw(lines: pa.Array) -> DmesgRaw:
    """The record fields of each line of a text array (:func:`texts`) as raw dmesg's grammar reads
    them (see ``at_dmesg_raw`` in scan.c)."""
    lib = library()
    n = len(lines)
    alive, col = _column(lines)
    m = max(n, 1)
    code, ts_ok, prio_ok, lvl = (pa.allocate_buffer(m) for _ in range(4))
    ts, msg_at, prio = pa.allocate_buffer(8 * m), pa.allocate_buffer(4 * m), pa.allocate_buffer(4 * m)
    left = lib.at_dmesg_raw(ctypes.byref(col), n, code.address, ts.address, ts_ok.address, msg_at.address,
                            prio.address, prio_ok.address, lvl.address) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    return DmesgRaw(pa.Array.from_buffers(pa.uint8(), n, [None, code]), _nullable(ts, ts_ok, pa.int64(), n),
                    pa.Array.from_buffers(pa.int32(), n, [None, msg_at]), _nullable(prio, prio_ok, pa.int32(), n),
                    pa.Array.from_buffers(pa.uint8(), n, [None, lvl]), left)


def subsys(msgs: pa.Array) -> tuple[pa.Array, pa.Array, int]:
    """The subsystem each kernel message of a text array (:func:`texts`) names first (see
    ``at_subsys`` in scan.c): per row a code (uint8: 1 named, 0 none, UNSURE where the regex
    decides), the name's length in bytes (int32), and how many rows were left."""
    lib = library()
    n = len(msgs)
    alive, col = _column(msgs)
    code, end = pa.allocate_buffer(max(n, 1)), pa.allocate_buffer(max(4 * n, 1))
    left = lib.at_subsys(ctypes.byref(col), n, code.address, end.address) if n else 0
    del alive       # (the buffers it read stayed alive through the call)
    return (pa.Array.from_buffers(pa.uint8(), n, [None, code]), pa.Array.from_buffers(pa.int32(), n, [None, end]), left)


# The trace event phases (the Literal of ingest.formats._kineto_stream.Phase, in at_kineto_events' order)
KINETO_PHASES = ("X", "i", "I", "C", "s", "t", "f", "M", "B", "E", "b", "e", "n", "O", "P", "N", "D", "R", "c", "")


class KinetoEvents(NamedTuple):
    """The events :func:`kineto_events` read, as columns (one row per event): ``ph`` (uint8, an
    index into KINETO_PHASES), ``cat``, ``name`` and ``args`` (string arrays: the text, args as its
    raw JSON; null where the event has none), ``ids`` (pid, tid and id: per field a pair of an
    int64 array, null unless the value was an integer, and a string array, null unless it was a
    string), ``ts`` and ``dur`` (float64, nullable), ``start``/``end`` (int64: each event's bytes
    in the body). The string arrays are views into the body (Arrow ``string_view``), not copies."""
    n: int
    ph: pa.Array
    cat: pa.Array
    name: pa.Array
    args: pa.Array
    ids: tuple
    ts: pa.Array
    dur: pa.Array
    start: pa.Array
    end: pa.Array


def kineto_events(body: bytes) -> KinetoEvents | None:
    """The elements of a JSON array's body (``ev, ev, ...``) as :class:`KinetoEvents`, or None
    where the compiled reader leaves the body to msgspec (see ``at_kineto_events`` in scan.c:
    anything it is not sure msgspec reads the same way, and anything that is not JSON)."""
    if len(body) >= 1 << 31:             # (a view's offset is 32 bits)
        return None
    lib = library()
    data = pa.py_buffer(body)
    cap = len(body) // 64 + 16           # (an event of the traces seen takes 100-400 bytes)
    while True:
        b1 = lambda k=1: pa.allocate_buffer(k * cap)      # noqa: E731
        b4 = lambda k=1: pa.allocate_buffer(4 * k * cap)  # noqa: E731
        b8 = lambda k=1: pa.allocate_buffer(8 * k * cap)  # noqa: E731
        ph, cat_at, cat_len, name_at, name_len = b1(), b8(), b4(), b8(), b4()
        int_ok, ints, str_at, str_len = b1(3), b8(3), b8(3), b4(3)
        ts, ts_ok, dur, dur_ok, args_at, args_len, start, end = b8(), b1(), b8(), b1(), b8(), b4(), b8(), b8()
        n = lib.at_kineto_events(data.address, len(body), cap, ph.address, cat_at.address, cat_len.address,
                                 name_at.address, name_len.address, int_ok.address, ints.address, str_at.address,
                                 str_len.address, ts.address, ts_ok.address, dur.address, dur_ok.address,
                                 args_at.address, args_len.address, start.address, end.address)
        if n != -2:
            break
        cap = body.count(b"{")           # (more events than the guess: room for every one there can be)
    if n < 0:
        return None

    def views(at, ln) -> pa.Array:
        v, valid = pa.allocate_buffer(16 * max(n, 1)), pa.allocate_buffer(max(n, 1))
        nulls = lib.at_views(data.address, n, at.address, ln.address, v.address, valid.address)
        bits = pa.Array.from_buffers(pa.uint8(), n, [None, valid]).cast(pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(pa.string_view(), n, [bits, v, data], null_count=nulls)

    ids = tuple((_nullable(ints.slice(8 * cap * j), int_ok.slice(cap * j), pa.int64(), n),
                 views(str_at.slice(8 * cap * j), str_len.slice(4 * cap * j))) for j in range(3))
    return KinetoEvents(
        n, pa.Array.from_buffers(pa.uint8(), n, [None, ph]), views(cat_at, cat_len), views(name_at, name_len),
        views(args_at, args_len), ids, _nullable(ts, ts_ok, pa.float64(), n), _nullable(dur, dur_ok, pa.float64(), n),
        pa.Array.from_buffers(pa.int64(), n, [None, start]), pa.Array.from_buffers(pa.int64(), n, [None, end]))


PH_NONE, PH_C10, PH_EXACT = 0, 1, 2     # what at_phase_readings reads a line as (or UNSURE)


class PhaseReadings(NamedTuple):
    """What :func:`phase_readings` read, per line: ``code`` (uint8: PH_NONE, PH_C10, PH_EXACT or
    UNSURE where the regexes decide), ``t1`` and ``t2`` (int64: c10's second and nine digits,
    or an exact stamp's time and resolution, ns); ``unsure``: how many rows were left."""
    code: pa.Array
    t1: pa.Array
    t2: pa.Array
    unsure: int


def phase_readings(lines: pa.Array) -> PhaseReadings:
    """The c10 and exact stamps of a text array (:func:`texts`) as the clock-phase reader reads
    them (``ingest.formats.logs.c10phase.reading``; see ``at_phase_readings`` in scan.c)."""
    n = len(lines)
    alive, col = _column(lines)
    m = max(n, 1)
    kind, t1, t2 = pa.allocate_buffer(m), pa.allocate_buffer(8 * m), pa.allocate_buffer(8 * m)
    left = library().at_phase_readings(ctypes.byref(col), n, kind.address, t1.address, t2.address) if n else 0
    del alive
    return PhaseReadings(pa.Array.from_buffers(pa.uint8(), n, [None, kind]),
                         pa.Array.from_buffers(pa.int64(), n, [None, t1]),
                         pa.Array.from_buffers(pa.int64(), n, [None, t2]), left)


def phase_forbidden(pairs: list) -> list[list[tuple[int, int]]]:
    """For each pair of readings ``(a, b)`` (``("c" | "x", t1, t2)``, b written after a), the
    phases (ns ranges of [0, 1 s)) under which b would read earlier than a (see
    ``at_phase_forbidden`` in scan.c)."""
    n = len(pairs)
    if not n:
        return []
    cols = [pa.array(v, t) for v, t in (
        ([int(a[0] == "c") for a, _ in pairs], pa.uint8()), ([a[1] for a, _ in pairs], pa.int64()),
        ([a[2] for a, _ in pairs], pa.int64()), ([int(b[0] == "c") for _, b in pairs], pa.uint8()),
        ([b[1] for _, b in pairs], pa.int64()), ([b[2] for _, b in pairs], pa.int64()))]
    lo, hi, count = pa.allocate_buffer(40 * n), pa.allocate_buffer(40 * n), pa.allocate_buffer(n)
    library().at_phase_forbidden(n, *(_values_address(c) for c in cols), lo.address, hi.address, count.address)
    los = pa.Array.from_buffers(pa.int64(), 5 * n, [None, lo]).to_pylist()
    his = pa.Array.from_buffers(pa.int64(), 5 * n, [None, hi]).to_pylist()
    return [list(zip(los[5 * k:5 * k + c], his[5 * k:5 * k + c]))
            for k, c in enumerate(pa.Array.from_buffers(pa.uint8(), n, [None, count]).to_pylist())]


def phase_counts(off, lo, hi, start: int, stop: int, nbins: int, values: bool = True) -> tuple[list[int] | None, int]:
    """How many of the clock phase's pairs ``[start, stop)`` rule out each of ``nbins`` bins, and
    the least count (see ``at_phase_counts`` in scan.c): pair k rules out the bins ``[lo[j], hi[j])``
    for j in ``[off[k], off[k + 1])`` (``array.array`` of int64, int32, int32). ``values``: False
    gives the least count alone."""
    counts = (ctypes.c_int64 * nbins)()
    least = library().at_phase_counts(_address(off), _address(lo), _address(hi), start, stop, nbins, counts)
    return (list(counts) if values else None), least


class PhasePairs(NamedTuple):
    """The pairs :func:`phase_pairs` made, as ``array.array`` columns: per pair the earlier line's
    number and reading (``a_line``, ``a_kind``, ``a1``, ``a2``), the later line's (``b_line``,
    ``b_kind``, ``b1``, ``b2``) and where its bins end (``bin_end``: the running offset into the
    bins, from ``bin_base``); the bins one after another (``bin_lo``, ``bin_hi``: pair k rules out
    ``[bin_lo[j], bin_hi[j])`` for j from the previous pair's end to its own, less ``bin_base``);
    ``upto`` and ``c10`` as the state now stands."""
    a_line: array
    a_kind: array
    a1: array
    a2: array
    b_line: array
    b_kind: array
    b1: array
    b2: array
    bin_end: array
    bin_lo: array
    bin_hi: array
    upto: int
    c10: int


def phase_pairs(linenos, sids, kind, t1, t2, state, upto: int, c10: int, room: int, bin_ns: int,
                bin_base: int = 0) -> PhasePairs:
    """The clock phase's pairs of lines in order (see ``at_phase_pairs`` in scan.c): ``linenos``
    (``array('q')``), ``sids`` (``array('i')``: stream numbers), readings ``kind`` (``array('B')``),
    ``t1``, ``t2`` (``array('q')``); ``state``: the streams' last readings (``array('B')``, and
    three of ``array('q')``, as long as the streams, updated in place)."""
    n = len(linenos)
    m = max(1, min(n, room))
    q = lambda k: array("q", bytes(8 * k))
    a_line, a1, a2, b_line, b1, b2, bin_end = (q(m) for _ in range(7))
    a_kind, b_kind = array("B", bytes(m)), array("B", bytes(m))
    bin_lo, bin_hi = array("i", bytes(4 * 5 * m)), array("i", bytes(4 * 5 * m))
    io_upto, io_c10 = ctypes.c_int64(upto), ctypes.c_int64(c10)
    cols = (a_line, a_kind, a1, a2, b_line, b_kind, b1, b2)
    k = library().at_phase_pairs(n, _address(linenos), _address(sids), _address(kind), _address(t1), _address(t2),
                                 *(_address(a) for a in state), ctypes.byref(io_upto), ctypes.byref(io_c10),
                                 min(n, room), bin_ns, bin_base, *(_address(a) for a in cols),
                                 _address(bin_lo), _address(bin_hi), _address(bin_end)) if n else 0
    nb = bin_end[k - 1] - bin_base if k else 0
    for a in (*cols, bin_end):
        del a[k:]
    del bin_lo[nb:], bin_hi[nb:]
    return PhasePairs(*cols, bin_end, bin_lo, bin_hi, io_upto.value, io_c10.value)


def us_to_ns(values: list, kind: int, off: int = 0, max_us: float = 0.0) -> list | None:
    """Kineto's microsecond values (floats, None) as integer nanoseconds, None where none (see
    ``at_us_to_ns`` in scan.c: kind 0 a time, plus ``off``, within ``max_us``; kind 1 a
    duration); None when a time plus ``off`` leaves int64."""
    n = len(values)
    if not n:
        return []
    a = pa.array(values, pa.float64())
    valid, data = a.buffers()
    out, ok = pa.allocate_buffer(8 * n), pa.allocate_buffer(n)
    if library().at_us_to_ns(data.address, valid.address if valid is not None else None, n, kind,
                             off, max_us, out.address, ok.address):
        return None
    got = memoryview(out).cast("q").tolist()
    flags = ok.to_pybytes()
    i = flags.find(0)
    while i >= 0:
        got[i] = None
        i = flags.find(0, i + 1)
    return got



BODY_LONG, BODY_UNSURE = -1, -2     # what body_walk says instead of the rows


def body_walk(msgs: pa.Array, cont: pa.Array, head: pa.Array, starts: list[int], most: int) -> pa.Array | int:
    """The kernel log's report body rows (see ``at_body_walk`` in scan.c): a boolean array, one per
    message of ``msgs`` (:func:`texts`); ``cont`` and ``head``: uint8 arrays (1: a continuation
    line, the head of a report); ``starts``: the rows walks start from. :data:`BODY_LONG` when a
    walk goes on past ``most`` rows, :data:`BODY_UNSURE` when it reaches a line not ASCII."""
    n = len(msgs)
    alive, col = _column(msgs)
    found = pa.allocate_buffer(max(n, 1))
    at = array("q", starts)
    got = library().at_body_walk(ctypes.byref(col), n, cont.buffers()[1].address + cont.offset,
                                 head.buffers()[1].address + head.offset, _address(at), len(at), most,
                                 found.address) if n else 0
    del alive
    if got < 0:
        return got
    return pa.Array.from_buffers(pa.uint8(), n, [None, found]).cast(pa.bool_())
