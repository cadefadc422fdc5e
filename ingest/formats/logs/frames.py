"""Frame helpers the log grammars share (the app-log engine and the NCCL grammar)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import polars as pl

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


def extract_prefix(df: pl.DataFrame, col: str, rx: str, msg: str = "msg") -> pl.DataFrame:
    """Named groups of an anchored *prefix* regex, plus ``msg`` = the rest of the line.

    The regexes stop at the end of the prefix (no ``.*$`` capture): capturing the whole line
    is what makes regex extraction slow, slicing the rest off is nearly free.
    """
    g = df.with_columns(pl.col(col).str.extract_groups(f"^(?P<whole>{rx.lstrip('^')})").alias("_g")).unnest("_g")
    return g.with_columns(pl.col(col).str.slice(pl.col("whole").str.len_chars()).alias(msg)).drop("whole")

