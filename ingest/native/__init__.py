"""aftertrace's line engine: compiled single passes over a text chunk (``scan.c``), as Arrow arrays.

The library is plain C loaded with ctypes (no Python headers, no ABI to match): the wheel ships
it built (``hatch_build.py``); a checkout or an editable install builds it on first use when
the library for the present source is missing (:mod:`.build`). Each function takes buffers
this module allocates from Arrow's memory pool and returns arrays that own them: no copy on the
way to Polars.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

import pyarrow as pa

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
            lib.at_split_lines.argtypes = [_P, _I64, ctypes.c_int, ctypes.c_int, _P, _I64, _P, _P, _P, _I64P, _I64P]
            lib.at_split_lines.restype = _I64
            _lib = lib
    return _lib


def _address(buf) -> int:
    """Address of a bytearray's (or other writable buffer's) first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)) if len(buf) else 0


def split_lines(buf: bytearray, n: int, complete: bool, blank_as_null: bool) -> tuple[pa.Array, pa.Array, int]:
    """The lines of ``buf[:n]`` as a ``large_string`` array, a boolean array marking the lines
    whose bytes were not UTF-8 (replaced with U+FFFD), and how many bytes of ``buf`` the lines
    used (all of ``n`` when ``complete``; else up to the last newline).

    A line loses its newline and one trailing ``\\r``; with ``blank_as_null`` an empty line is
    null. ``buf`` is read, never kept: it may be reused at once.
    """
    lib = library()
    src = _address(buf)
    lines = lib.at_count_newlines(src, n) + 1
    offs = pa.allocate_buffer(8 * (lines + 1))
    bits = (lines + 7) // 8
    valid = pa.allocate_buffer(bits)
    bad = pa.allocate_buffer(lines)
    used, nulls = ctypes.c_int64(), ctypes.c_int64()
    cap = n
    while True:
        out = pa.allocate_buffer(max(cap, 1), resizable=True)
        count = lib.at_split_lines(src, n, int(complete), int(blank_as_null), out.address, cap, offs.address,
                                   bad.address, valid.address, ctypes.byref(used), ctypes.byref(nulls))
        if count >= 0:
            break
        cap = -count        # (bytes that were not UTF-8 grew into replacements: the size it needs)
    out.resize(struct.unpack_from("<q", offs, 8 * count)[0])     # (the last offset: the text's size)
    text = pa.Array.from_buffers(pa.large_string(), count, [valid if nulls.value else None, offs, out],
                                 null_count=nulls.value)
    flags = pa.Array.from_buffers(pa.uint8(), count, [None, bad])
    return text, flags, used.value
