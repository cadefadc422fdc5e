"""Frame helpers the log grammars share (the app-log engine and the NCCL grammar)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import polars as pl
import pyarrow as pa

T = TypeVar("T")
HALF_ROWS = 50_000       # a frame is cut in two when each half has at least this many rows
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def in_halves(fn: Callable[[pl.DataFrame], T], df: pl.DataFrame) -> list[T]:
    """``[fn(df)]``, or ``[fn(first half), fn(second half)]`` computed at once on two threads.

    For a *row-wise* step (each row's result depends on that row alone, and the result keeps the
    rows' order), concatenating the halves' results gives ``fn(df)``. Polars releases the GIL
    while it computes, so the two halves use two cores; a small frame is not worth the handover.
    """
    if df.height < 2 * HALF_ROWS or (os.cpu_count() or 1) < 2:
        return [fn(df)]
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-half")
    h = df.height // 2
    second = _pool.submit(fn, df.slice(h))
    first = fn(df.slice(0, h))
    return [first, second.result()]


def rows_in_halves(fn: Callable[[pl.DataFrame], pl.DataFrame], df: pl.DataFrame) -> pl.DataFrame:
    """``fn(df)`` for a row-wise step that returns a frame: :func:`in_halves`, the halves' rows put
    back together (a column only one half made is null in the other's rows)."""
    parts = in_halves(fn, df)
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")


# Polars' frame operations each cost a fixed ~0.1-0.2 ms (a query planned and handed to its thread
# pool), which is most of the parse of a small log; a Series made from an Arrow array is not a query.
_ARROW = {pl.String: pa.string_view(), pl.Int64: pa.int64(), pl.Int32: pa.int32(), pl.UInt32: pa.uint32(),
          pl.UInt8: pa.uint8(), pl.Float64: pa.float64(), pl.Boolean: pa.bool_()}


def nulls(name: str, n: int, dtype) -> pl.Series:
    """A series of ``n`` nulls of ``dtype``."""
    t = _ARROW.get(dtype)
    if t is None:
        return pl.Series(name, [], dtype=dtype).extend_constant(None, n)
    return pl.Series(name, pa.nulls(n, t))


def scatter(n: int, idx: pl.Series, values: pl.Series) -> pl.Series:
    """A series of ``n`` nulls with ``values`` at the row numbers ``idx``."""
    out = nulls(values.name, n, values.dtype)
    return out.scatter(idx, values) if len(idx) else out


def repeat(name: str, value, n: int, dtype=pl.String) -> pl.Series:
    """``value`` ``n`` times, as a series made from an Arrow array (not a query)."""
    t = _ARROW.get(dtype)
    if t is None:
        return pl.repeat(value, n, eager=True, dtype=dtype).alias(name)
    return pl.Series(name, pa.repeat(pa.scalar(value, t), n))


def lists(name: str, items: list, typ: pa.DataType) -> pl.Series:
    """A list column of ``items`` (each an iterable of values), built as Arrow offsets and values:
    Polars builds a list of Python lists one inner series at a time."""
    offsets, values = [0], []
    for it in items:
        values.extend(it)
        offsets.append(len(values))
    return pl.Series(name, pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ)))


def extract_prefix(df: pl.DataFrame, col: str, rx: str, msg: str = "msg") -> pl.DataFrame:
    """Named groups of an anchored *prefix* regex, plus ``msg`` = the rest of the line.

    The regexes stop at the end of the prefix (no ``.*$`` capture): capturing the whole line
    is what makes regex extraction slow, slicing the rest off is nearly free.
    """
    g = df.with_columns(pl.col(col).str.extract_groups(f"^(?P<whole>{rx.lstrip('^')})").alias("_g")).unnest("_g")
    return g.with_columns(pl.col(col).str.slice(pl.col("whole").str.len_chars()).alias(msg)).drop("whole")

