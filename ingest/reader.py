"""Opening bundle files: transparent gunzip, decompression limits, the sniffing head.

Every parser reads through :func:`open_binary`, so gzip (including the
multi-member gzip that ``nvidia-bug-report.sh`` writes) is invisible to it and
the per-file decompression limit protects every parser alike.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024


class DecompressedLimit(Exception):
    """Raised when a file decompresses to more bytes than allowed."""


# how reading a file can end before its end: a cut or damaged gzip stream, the size limit
STREAM_ENDS = (EOFError, zlib.error, gzip.BadGzipFile, DecompressedLimit)


class _Limited(io.RawIOBase):
    """Counts bytes read from a stream; raises DecompressedLimit past ``limit``.

    Every byte within the limit is handed out, however large the reads: a read is cut to one
    byte more than the limit allows (that byte shows that the stream goes on), the bytes within
    the limit are returned, and the next read raises."""

    def __init__(self, raw, limit: int | None):
        self._raw = raw
        self.limit = limit
        self.count = 0
        self._over = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.limit is None:
            n = self._raw.readinto(b)
            self.count += n or 0
            return n
        if self._over:
            raise DecompressedLimit(f"decompressed data exceeds the per-file limit of {self.limit} bytes")
        room = self.limit - self.count
        view = memoryview(b).cast("B")
        n = self._raw.readinto(view[:room + 1] if len(view) > room else view)
        if n and self.count + n > self.limit:
            self._over = True
            n = room                     # (the byte past the limit is dropped)
            if n == 0:
                raise DecompressedLimit(f"decompressed data exceeds the per-file limit of {self.limit} bytes")
        self.count += n or 0
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class MadeAheadRaw(io.RawIOBase):
    """A raw stream whose bytes are made ahead by ``_fill(want)`` into ``_out``: ``readinto``
    hands them out; once none are left, the error ``_fill`` kept (if any) is raised, else EOF."""

    _out = b""
    _error: Exception | None = None
    _done = False

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def readinto(self, b) -> int:
        self._fill(len(b))
        if not self._out:
            if self._error is not None:
                err, self._error = self._error, None
                self._done = True
                raise err
            return 0
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


class _GunzipRaw(MadeAheadRaw):
    """Streaming gunzip that hands out every byte it could decompress.

    Unlike :class:`gzip.GzipFile` it returns the data decompressed before a
    truncation or damage and only then raises (``EOFError`` for a stream that
    ends early, ``gzip.BadGzipFile`` for damage), so parsers keep every complete
    line before the cut. Concatenated members (multi-member gzip) are read in turn.
    """

    def __init__(self, f, chunk: int = 256 * 1024):
        self._f = f
        self._chunk = chunk
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""      # compressed input not yet fed
        self._out = b""          # decompressed, not yet returned
        self._error: Exception | None = None
        self._done = False

    def _fill(self, want: int) -> None:
        while not self._out and not self._done and self._error is None:
            if self._d.eof:
                rest = self._d.unused_data + self._pending
                self._pending = b""
                if not rest:
                    rest = self._f.read(self._chunk)
                rest = rest.lstrip(b"\x00")
                if not rest:
                    more = self._f.read(self._chunk)
                    if not more:
                        self._done = True
                        return
                    rest = more.lstrip(b"\x00")
                    if not rest:
                        continue
                if not rest.startswith(GZIP_MAGIC[:1]) or (len(rest) > 1 and rest[:2] != GZIP_MAGIC):
                    self._error = gzip.BadGzipFile("data after the end of the gzip stream is not gzip")
                    return
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._pending = rest
            if not self._pending and not self._d.unconsumed_tail:
                self._pending = self._f.read(self._chunk)
                if not self._pending:
                    self._error = EOFError("the gzip stream ends early (file truncated)")
                    return
            src = self._d.unconsumed_tail or self._pending
            if not self._d.unconsumed_tail:
                self._pending = b""
            before = self._d.copy()
            try:
                self._out = self._d.decompress(src, max(want, 65536))
            except zlib.error as e:
                # zlib drops what this call decompressed before the damage: feed the same input
                # again in small pieces, from the state before the call, to hand it out anyway
                self._out = _until_damage(before, src)
                self._error = gzip.BadGzipFile(f"damaged gzip data: {e}")
                return

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


def _until_damage(d, src: bytes, piece: int = 256) -> bytes:
    out = []
    for i in range(0, len(src), piece):
        try:
            out.append(d.decompress(src[i:i + piece]))
        except zlib.error:
            break
    return b"".join(out)


def is_gzip(path: str | os.PathLike) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: str | os.PathLike, limit: int | None = None):
    """A buffered binary stream of the file's (decompressed) content."""
    f = open(path, "rb")
    if f.read(2) == GZIP_MAGIC:
        f.seek(0)
        raw = _GunzipRaw(f)
    else:
        f.seek(0)
        raw = f
    lim = _Limited(raw, limit)
    return io.BufferedReader(lim, buffer_size=1 << 20)


def size_hint(path: str | os.PathLike) -> int | None:
    """About how many bytes :func:`open_binary` will give for the file: its size, or for a gzip
    file the size its trailer records (that of the last member, modulo 4 GiB). A hint for the
    size of a read buffer, never a limit: None when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return os.fstat(f.fileno()).st_size
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except (OSError, ValueError):
        return None


def bytes_read(stream) -> int:
    """Decompressed bytes consumed so far by a stream from :func:`open_binary`."""
    return stream.raw.count


_TEXTY = bytes(range(32, 127)) + b"\t\n\r\x0b\x0c\x1b"


@dataclass
class Head:
    """The first KiBs of a file after gunzip: what ``detect`` functions look at.

    ``path`` is the file's path inside the bundle. Detection is a dry run of a
    parser's grammar on ``lines``; a path may only *add* to a content match.
    """

    path: str
    data: bytes
    complete: bool                 # the whole file fits in the head
    text: str = ""
    lines: list[str] = field(default_factory=list)
    binary: bool = False

    @classmethod
    def read(cls, path: str | os.PathLike, rel: str, size: int = HEAD_BYTES) -> "Head":
        chunks, n, damaged = [], 0, False
        with open_binary(path, limit=None) as f:
            # small reads so that a truncated or damaged gzip still yields its first bytes
            while n <= size:
                try:
                    c = f.read1(min(8192, size + 1 - n))
                except (EOFError, OSError, zlib.error):
                    damaged = True
                    break
                if not c:
                    break
                chunks.append(c)
                n += len(c)
        data = b"".join(chunks)
        complete = len(data) <= size and not damaged
        data = data[:size]
        return cls.from_bytes(rel, data, complete)

    @classmethod
    def from_bytes(cls, rel: str, data: bytes, complete: bool = True) -> "Head":
        h = cls(path=rel, data=data, complete=complete)
        sample = data[:8192]
        # A text log may carry a stray NUL or a garbage line (a crash mid-write): only a
        # sample that is mostly not text is binary.
        if sample.count(b"\x00") > len(sample) * 0.01:
            h.binary = True
        elif sample:
            # Lots of non-text bytes that are not valid UTF-8 either: binary.
            try:
                sample.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.start < len(sample) - 4:  # not just a character cut at the end
                    bad = sum(1 for b in sample if b not in _TEXTY and b < 128)
                    high = sum(1 for b in sample if b >= 128)
                    h.binary = (bad + high) > len(sample) * 0.10
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if not complete and len(lines) > 1:
            lines = lines[:-1]      # the last line is cut by the head size
        h.text = text
        h.lines = [ln.rstrip("\r") for ln in lines] if "\r" in text else lines
        if h.lines and h.lines[-1] == "":
            h.lines.pop()
        return h

    @classmethod
    def from_lines(cls, rel: str, lines: list[str], complete: bool = True) -> "Head":
        """A head made of these lines (a stretch of a file, or its lines with wrappers peeled off)."""
        return cls.from_bytes(rel, ("\n".join(lines) + "\n").encode("utf-8"), complete)

    @property
    def name(self) -> str:
        """Base file name without compression suffix, lower-cased."""
        n = PurePosixPath(self.path).name.lower()
        return n[:-3] if n.endswith(".gz") else n

    def nonblank(self, limit: int | None = None) -> list[str]:
        if limit is None:
            return [ln for ln in self.lines if ln.strip()]
        out = []
        for ln in self.lines:
            if ln.strip():
                out.append(ln)
                if len(out) >= limit:
                    break
        return out

    def share(self, pattern: re.Pattern, limit: int = 200) -> float:
        """Fraction of the first ``limit`` non-blank lines that match ``pattern``."""
        lines = self.nonblank(limit)
        if not lines:
            return 0.0
        return sum(1 for ln in lines if pattern.match(ln)) / len(lines)


def iter_lines(stream, on_undecodable=None):
    """Yield (lineno, text) for every line of a binary stream (1-based, no newline).

    Undecodable bytes are replaced; ``on_undecodable(lineno, raw)`` is called once
    per such line so the caller can count it as a parse issue.
    """
    for i, raw in enumerate(stream, 1):
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            s = raw.decode("utf-8", errors="replace")
            if on_undecodable is not None:
                on_undecodable(i, raw)
        yield i, s.rstrip("\n").rstrip("\r")

