"""Vectorised line reading: a text stream as Polars frames of (lineno, line, bad_utf8).

Line-oriented parsers that must be fast (>= 150 MB/s) do not loop over lines in
Python: they read the decompressed stream in large chunks, cut each chunk at its
last newline, and split it into a one-column frame in one compiled pass
(:func:`ingest.native.split_lines`: newlines, one trailing ``\\r`` dropped, bytes
that are not UTF-8 replaced by U+FFFD and the line marked; the lines are string
views into one copy of the chunk, the layout Polars holds strings in). Parsing is
then column work over the frame.

Memory is bounded by ``chunk_bytes`` (plus the frame built from it), never by
the file.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import polars as pl

from .native import split_lines

CHUNK_BYTES = 32 * 1024 * 1024
# Polars' ``str.find`` counted bytes until 2.1 and counts characters from 2.2: a cut at an offset it
# gave counts what it counts (the two agree on ASCII text, where a line's non-ASCII is what differs)
FIND_COUNTS_BYTES = pl.select(pl.lit("\u00e9/").str.find("/", literal=True)).item() == 2


def cut_found(text: pl.Expr, start, length=None) -> pl.Expr:
    """The text from ``start`` (``length`` long, else to its end), offsets as ``str.find`` gives
    them on this Polars (see :data:`FIND_COUNTS_BYTES`). The offsets must be those of a match's
    start or of ASCII text, so that a cut in bytes falls between characters."""
    if FIND_COUNTS_BYTES:
        return text.cast(pl.Binary).bin.slice(start, length).cast(pl.String)
    return text.str.slice(start, length)
FIRST_READ = 64 * 1024       # the read buffer's size until a file proves larger (see line_frames)


def _split(buf: bytearray, n: int, complete: bool, blank_as_null: bool) -> tuple[pl.DataFrame | None, int]:
    """Lines of ``buf[:n]`` as a frame (``line``, ``bad_utf8``, ``nul``), and how many bytes of it
    they used. When ``complete`` is false the text after the last newline is not a whole line: it
    is left out (the caller keeps those bytes for the next chunk). ``buf`` is not kept."""
    text, flags, used = split_lines(buf, n, complete, blank_as_null)
    if used == 0 and len(text) == 0:
        return None, 0
    flags = pl.Series("flags", flags)
    return pl.DataFrame({"line": pl.Series("line", text), "bad_utf8": (flags & 1).cast(pl.Boolean),
                         "nul": (flags & 2).cast(pl.Boolean)}), used


def line_frames(stream, chunk_bytes: int = CHUNK_BYTES, blank_as_null: bool = False,
                size_hint: int | None = None) -> Iterator[pl.DataFrame]:
    """Yield frames with columns ``lineno`` (Int64, 1-based), ``line`` (String), ``bad_utf8`` and
    ``nul`` (Bool).

    ``bad_utf8`` marks lines whose bytes were not valid UTF-8 (replaced with U+FFFD), ``nul`` the
    lines that hold a NUL byte (binary data in a text file: no text parser reads those).
    ``blank_as_null`` leaves empty lines as nulls (saves a copy for parsers that handle it).

    Every chunk is read into the same buffer (the lines are copied out of it by the split): a
    fresh 32 MB ``bytes`` per read is memory the kernel maps and zeroes anew each time, about a
    third of the cost of reading and splitting a chunk. The buffer starts small and doubles while
    the file fills it, up to a chunk (most files in a bundle are a few kB: a 32 MB buffer made
    for each would cost ~20 ms apiece). ``size_hint``, the stream's expected length
    (:func:`ingest.reader.size_hint`), sizes the first buffer instead: growing one from 64 kB
    to the size of a 10 MB file costs three times the read and split of that file.
    """
    first = FIRST_READ if size_hint is None else max(FIRST_READ, size_hint + 1)   # (+1: the end is seen)
    buf = bytearray(min(chunk_bytes, first))
    have = 0        # bytes at the front of buf: the partial last line of the previous chunk
    first = 1
    err: BaseException | None = None
    while err is None:
        if have == len(buf):                       # a line longer than the buffer: grow it
            buf.extend(bytes(chunk_bytes))
        n, err = _read_into(stream, buf, have)
        while n == len(buf) < chunk_bytes and err is None:  # more to come: double it, up to a chunk
            buf.extend(bytes(min(len(buf), chunk_bytes - len(buf))))
            n, err = _read_into(stream, buf, n)
        if n == have:
            break
        if n < len(buf):        # (the stream ended or failed: the buffer now ends with its data)
            del buf[n:]
        lines, used = _split(buf, n, False, blank_as_null)
        if lines is None:
            have = n
            continue
        have = n - used
        buf[:have] = buf[used:n]
        yield _frame(lines, first)
        first += lines.height
    if have:
        lines, _ = _split(buf, have, True, blank_as_null)
        if lines is not None:
            yield _frame(lines, first)
    if err is not None:   # a truncated/damaged stream or the size limit, after every line before it
        raise err


def _read_into(stream, buf: bytearray, start: int) -> tuple[int, BaseException | None]:
    """Fill ``buf[start:]`` from the stream; returns where the data in ``buf`` ends, and the error
    that stopped the read, if one did (what was read before it is kept: ``readinto1`` makes at most
    one read of the raw stream, so an error is raised by the call after the data before it).
    ``stream`` is a buffered binary stream (``io.BufferedIOBase``: every caller's)."""
    view = memoryview(buf)
    n, err = start, None
    try:
        while n < len(buf):
            got = stream.readinto1(view[n:])
            if not got:
                break
            n += got
    except Exception as e:   # noqa: BLE001 - re-raised by the caller after the good lines
        err = e
    finally:
        view.release()
    return n, err


def _frame(lines: pl.DataFrame, first: int) -> pl.DataFrame:
    return lines.select(pl.int_range(first, first + lines.height, dtype=pl.Int64).alias("lineno"), "line",
                        "bad_utf8", "nul")


_END = object()


def ahead(items: Iterator, work: Callable | None = None, name: str = "ahead") -> Iterator:
    """``work(item)`` (the item itself without ``work``) of each item of ``items``, the next one
    taken from ``items`` and worked on by a worker thread while the caller uses this one: reads,
    the splits of :func:`line_frames` and Polars release the GIL, so a chunk is read and split on
    the other core while the parser works on the one before. Items come out in order, and an
    error where it happened: the one that ended ``items`` after every item before it, the one
    ``work`` raised on an item in its place. ``items`` is closed when this generator is (never
    while the worker is in it)."""
    def step():
        item = next(items, _END)
        return item if item is _END or work is None else work(item)

    with ThreadPoolExecutor(1, thread_name_prefix=name) as pool:
        fut = pool.submit(step)
        try:
            while True:
                got = fut.result()
                if got is _END:
                    return
                fut = pool.submit(step)
                yield got
        finally:
            try:
                fut.result()          # (a generator may not be closed while another thread runs it)
            except BaseException:     # noqa: BLE001 - the consumer's error, if any, is the one that counts
                pass
            close = getattr(items, "close", None)
            if close is not None:
                close()
