"""Vectorised line reading: a text stream as Polars frames of (lineno, line).

Line-oriented parsers that must be fast (>= 150 MB/s) do not loop over lines in
Python: they read the decompressed stream in large chunks, cut each chunk at its
last newline, and split it into a one-column frame: with Arrow's ``split_pattern``
over the chunk's own bytes when they are valid UTF-8 (checked by Arrow), else with
Polars' CSV reader in lossy mode (a separator byte that does not occur in the chunk
is chosen, quoting is off, so every line arrives verbatim). ``\\r\\n`` endings lose
the ``\\r``. Parsing is then regex extraction over columns.

Memory is bounded by ``chunk_bytes`` (plus the frame built from it), never by
the file.
"""
from __future__ import annotations

import io
import struct
from typing import Iterator

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

CHUNK_BYTES = 32 * 1024 * 1024
FIRST_READ = 64 * 1024       # the read buffer's size until a file proves larger (see line_frames)
_SEPARATORS = (b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06", b"\x07", b"\x08", b"\x0e", b"\x0f")
REPLACEMENT = "\ufffd"


def _split(buf: bytearray, n: int, complete: bool, blank_as_null: bool) -> tuple[pl.Series, int]:
    """Lines of ``buf[:n]`` as a String series, and how many bytes of it they used.

    When ``complete`` is false the text after the last newline is not a whole line: it is
    left out (the caller keeps those bytes for the next chunk). Does not copy ``buf``.
    """
    cut = n if complete else buf.rfind(b"\n", 0, n) + 1
    if cut == 0:
        return pl.Series("line", [], dtype=pl.String), 0
    fast = _split_arrow(buf, cut, blank_as_null)
    if fast is not None:
        return fast, cut
    sep = next((c for c in _SEPARATORS if buf.find(c, 0, n) < 0), None)
    if sep is None:   # every candidate byte occurs: fall back to Python's split
        lines = buf[:cut].split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        s = pl.Series("line", [(ln[:-1] if ln.endswith(b"\r") else ln).decode("utf-8", "replace") for ln in lines],
                      dtype=pl.String)       # (one \r, as the other paths: "x\r\r\n" is "x\r")
        return s, cut
    # (Arrow found bytes that are not UTF-8: read lossily, U+FFFD for each bad sequence)
    df = pl.read_csv(io.BytesIO(buf[:n]), has_header=False, separator=sep.decode(), quote_char=None,
                     new_columns=["line"], schema={"line": pl.String}, encoding="utf8-lossy", infer_schema=False)
    s = df.get_column("line")
    if cut < n:
        s = s.slice(0, len(s) - 1)      # the partial last line
    return (s if blank_as_null else s.fill_null("")), cut


def _split_arrow(buf: bytearray, cut: int, blank_as_null: bool) -> pl.Series | None:
    """The common case, about 3x cheaper than the CSV reader: split ``buf[:cut]`` at newlines
    with Arrow (its lines are copied out: ``buf`` may be reused afterwards) and let Arrow's
    UTF-8 check validate them. None when the bytes are not valid UTF-8 (the caller then reads
    them lossily)."""
    data = pa.py_buffer(buf)
    offsets = pa.py_buffer(struct.pack("<2q", 0, cut))
    arr = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, data])
    parts = pc.split_pattern(arr, b"\n").flatten()
    if len(parts) and cut and buf[cut - 1] == 0x0A:
        parts = parts.slice(0, len(parts) - 1)     # after the last newline: nothing
    try:
        text = parts.cast(pa.large_string())
    except pa.ArrowInvalid:
        return None
    s = pl.Series("line", text)
    if buf.find(b"\r", 0, cut) >= 0:
        s = s.str.strip_suffix("\r")
    if blank_as_null:
        s = pl.select(pl.when(s != "").then(s).alias("line")).to_series()
    return s


def line_frames(stream, chunk_bytes: int = CHUNK_BYTES, blank_as_null: bool = False) -> Iterator[pl.DataFrame]:
    """Yield frames with columns ``lineno`` (Int64, 1-based), ``line`` (String), ``bad_utf8`` (Bool).

    ``bad_utf8`` marks lines whose bytes were not valid UTF-8 (replaced with U+FFFD).
    ``blank_as_null`` leaves empty lines as nulls (saves a copy for parsers that handle it).

    Every chunk is read into the same buffer (the lines are copied out of it by the split): a
    fresh 32 MB ``bytes`` per read is memory the kernel maps and zeroes anew each time, about a
    third of the cost of reading and splitting a chunk. The buffer starts small and doubles while
    the file fills it, up to a chunk (most files in a bundle are a few kB: a 32 MB buffer made
    for each would cost ~20 ms apiece).
    """
    buf = bytearray(min(chunk_bytes, FIRST_READ))
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
        s, used = _split(buf, n, False, blank_as_null)
        if used == 0:
            have = n
            continue
        frame = _frame(s, first, buf, n)
        have = n - used
        buf[:have] = buf[used:n]
        yield frame
        first += len(s)
    if have:
        s, _ = _split(buf, have, True, blank_as_null)
        yield _frame(s, first, buf, have)
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


def _frame(s: pl.Series, first: int, raw: bytearray, n: int) -> pl.DataFrame:
    if (raw.isascii() if n == len(raw) else bytes(raw[:n]).isascii()):
        bad = pl.repeat(False, len(s), eager=True, dtype=pl.Boolean)
    else:
        bad = s.str.contains(REPLACEMENT, literal=True).fill_null(False)
    return pl.DataFrame({
        "lineno": pl.int_range(first, first + len(s), eager=True, dtype=pl.Int64),
        "line": s,
        "bad_utf8": bad,
    })
