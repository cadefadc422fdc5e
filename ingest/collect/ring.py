"""The on-disk ring: bounded by age (``--keep``) and by size (``--max-mb``).

Layout under ``<out>/ring/``::

    <stream>/<start_ns>.<ext>.part            the segment being written (one per stream)
    <stream>/<start_ns>-<end_ns>.<ext>[.gz]   closed segments (gzipped later when compressible)
    perf/perf.data.<stamp>                    perf's own switch-output files (external, see prune)
    state/*.json                              small state files (host facts, process table)

A stream is a sequence of appended byte chunks (lines of the job's output, kernel-log
lines, JSON records). The active segment is closed after ``rotate_s`` seconds or
``rotate_bytes`` bytes; closing renames it with its end time. :meth:`Ring.prune` deletes
closed segments whose end is older than the keep window, then the oldest closed
segments (of any stream) until the ring is under its size limit. Pinned streams (the
first KiBs of the job's output) are exempt from the age limit and are the last to go
for size. The active segments are never deleted; they are bounded by ``rotate_bytes``.

Writes go straight to the file (unbuffered), so a killed collector leaves everything it
wrote readable. Every write error (disk full, folder removed) is counted, never raised:
the recorder must not take the job down with it.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Iterator

NS = 1_000_000_000
_SEG = re.compile(r"^(\d+)(?:-(\d+))?\.([A-Za-z0-9_]+)(\.part|\.gz)?$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A stream name usable as one folder name."""
    s = _SAFE.sub("_", name).strip("._") or "stream"
    return s[:120]


@dataclass(frozen=True)
class Segment:
    stream: str
    path: str
    start_ns: int
    end_ns: int | None          # None: the active segment
    size: int
    compressed: bool

    @property
    def active(self) -> bool:
        return self.end_ns is None


class Stream:
    """One append-only sequence of segments. Thread-safe."""

    def __init__(self, ring: "Ring", name: str, ext: str = "txt", rotate_s: float = 60.0,
                 rotate_bytes: int | None = None, compress: bool = True, pinned: bool = False):
        self.ring = ring
        self.name = name
        self.dir = os.path.join(ring.root, safe_name(name))
        self.ext = ext
        self.rotate_ns = int(rotate_s * NS)
        self.rotate_bytes = rotate_bytes or ring.default_rotate_bytes
        self.compress = compress
        self.pinned = pinned
        self.lock = threading.Lock()
        self._fd: int | None = None
        self._path: str | None = None
        self._start = 0
        self._size = 0
        self.bytes_written = 0
        self.errors = 0
        self.last_error: str | None = None
        os.makedirs(self.dir, exist_ok=True)
        self._recover()

    def _recover(self) -> None:
        """Close a ``.part`` left by an earlier collector run in the same folder."""
        for fn in os.listdir(self.dir):
            m = _SEG.match(fn)
            if m and m.group(4) == ".part":
                p = os.path.join(self.dir, fn)
                end = int(os.stat(p).st_mtime_ns)
                os.replace(p, os.path.join(self.dir, f"{m.group(1)}-{max(end, int(m.group(1)))}.{m.group(3)}"))

    def write(self, data: bytes, now_ns: int | None = None) -> None:
        if not data:
            return
        now = now_ns if now_ns is not None else time.time_ns()
        with self.lock:
            try:
                if self._fd is not None and (now - self._start >= self.rotate_ns or
                                             self._size + len(data) > self.rotate_bytes and self._size):
                    self._close(now)
                if self._fd is None:
                    self._start = now
                    self._path = os.path.join(self.dir, f"{now}.{self.ext}.part")
                    self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    self._size = 0
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
                self._size += len(data)
                self.bytes_written += len(data)
                self.ring.count_write(len(data))
            except OSError as e:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                self._abandon()

    def _abandon(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._path = None

    def _close(self, now: int) -> None:
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        end = max(now, self._start)
        final = os.path.join(self.dir, f"{self._start}-{end}.{self.ext}")
        try:
            os.replace(self._path, final)
        except OSError as e:
            self.errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
        self._path = None

    def rotate(self, now_ns: int | None = None, force: bool = False) -> None:
        """Close the active segment when it is due (or now, with ``force``)."""
        now = now_ns if now_ns is not None else time.time_ns()
        with self.lock:
            if self._fd is not None and (force or now - self._start >= self.rotate_ns):
                try:
                    self._close(now)
                except OSError as e:
                    self.errors += 1
                    self.last_error = f"{type(e).__name__}: {e}"
                    self._abandon()

    def close(self) -> None:
        self.rotate(force=True)

    def segments(self) -> list[Segment]:
        out = []
        try:
            names = os.listdir(self.dir)
        except OSError:
            return out
        for fn in names:
            m = _SEG.match(fn)
            if not m:
                continue
            p = os.path.join(self.dir, fn)
            try:
                size = os.stat(p).st_size
            except OSError:
                continue        # pruned meanwhile
            active = m.group(4) == ".part"
            out.append(Segment(self.name, p, int(m.group(1)), None if active else int(m.group(2)),
                               size, m.group(4) == ".gz"))
        out.sort(key=lambda s: (s.start_ns, s.end_ns is None))
        return out

    def compress_closed(self) -> int:
        """gzip closed plain segments (compressible streams only). Returns bytes saved."""
        if not self.compress:
            return 0
        saved = 0
        for s in self.segments():
            if s.active or s.compressed:
                continue
            tmp = s.path + ".gz.tmp"
            try:
                with open(s.path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                os.replace(tmp, s.path + ".gz")
                saved += s.size - os.stat(s.path + ".gz").st_size
                os.unlink(s.path)
            except OSError as e:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                for p in (tmp,):
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
        return saved

    def read_segments(self, since_ns: int | None = None, until_ns: int | None = None) -> Iterator[bytes]:
        """The bytes of every segment that overlaps [since, until], oldest first."""
        for s in self.segments():
            end = s.end_ns if s.end_ns is not None else time.time_ns()
            if since_ns is not None and end < since_ns:
                continue
            if until_ns is not None and s.start_ns > until_ns:
                continue
            data = read_segment(s)
            if data is not None:
                yield data


def read_segment(s: Segment) -> bytes | None:
    try:
        with open(s.path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if s.compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            import zlib
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                data = d.decompress(data)
            except zlib.error:
                return None
    return data


@dataclass
class PruneStats:
    age: int = 0
    size: int = 0
    bytes: int = 0
    total_after: int = 0


class Ring:
    def __init__(self, root: str, keep_ns: int, max_bytes: int):
        self.root = root
        self.keep_ns = keep_ns
        self.max_bytes = max_bytes
        # one active segment per stream stays well under the limit
        self.default_rotate_bytes = max(256 * 1024, max_bytes // 32)
        self.streams: dict[str, Stream] = {}
        self.external_dirs: list[tuple[str, re.Pattern]] = []   # (folder, closed-file pattern)
        self.written = 0
        self.pruned: dict[str, dict[str, int]] = {}    # stream -> {"age": n, "size": n, "bytes": n}
        self.oldest_dropped_end: dict[str, int] = {}    # stream -> end of the newest dropped segment
        self._lock = threading.Lock()
        os.makedirs(root, exist_ok=True)
        os.makedirs(os.path.join(root, "state"), exist_ok=True)

    def count_write(self, n: int) -> None:
        with self._lock:
            self.written += n

    def stream(self, name: str, **kw) -> Stream:
        s = self.streams.get(name)
        if s is None:
            s = self.streams[name] = Stream(self, name, **kw)
        return s

    def add_external(self, folder: str, pattern: str) -> None:
        """Files another program writes (perf's switch-output files) that the ring also bounds."""
        os.makedirs(folder, exist_ok=True)
        self.external_dirs.append((folder, re.compile(pattern)))

    def external_files(self) -> list[tuple[str, int, int]]:
        """(path, mtime_ns, size) of the closed external files."""
        out = []
        for folder, pat in self.external_dirs:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for fn in names:
                if not pat.match(fn):
                    continue
                p = os.path.join(folder, fn)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                out.append((p, st.st_mtime_ns, st.st_size))
        return sorted(out, key=lambda x: x[1])

    def write_state(self, name: str, data: bytes) -> None:
        p = os.path.join(self.root, "state", name)
        tmp = p + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except OSError:
            pass

    def total_bytes(self) -> int:
        n = 0
        for s in self.streams.values():
            n += sum(seg.size for seg in s.segments())
        n += sum(sz for _, _, sz in self.external_files())
        return n

    def _drop(self, stream: str, path: str, size: int, end_ns: int, why: str, st: PruneStats) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError:
            return
        d = self.pruned.setdefault(stream, {"age": 0, "size": 0, "bytes": 0})
        d[why] += 1
        d["bytes"] += size
        self.oldest_dropped_end[stream] = max(self.oldest_dropped_end.get(stream, 0), end_ns)
        setattr(st, why, getattr(st, why) + 1)
        st.bytes += size

    def prune(self, now_ns: int | None = None) -> PruneStats:
        """Rotate due segments, compress closed ones, then apply the age and size limits."""
        now = now_ns if now_ns is not None else time.time_ns()
        st = PruneStats()
        for s in list(self.streams.values()):
            s.rotate(now)
            s.compress_closed()
        # (end_ns, pinned, stream, path, size)
        closed: list[tuple[int, bool, str, str, int]] = []
        active_bytes = 0
        for s in list(self.streams.values()):
            for seg in s.segments():
                if seg.active:
                    active_bytes += seg.size
                else:
                    closed.append((seg.end_ns, s.pinned, s.name, seg.path, seg.size))
        for path, mtime, size in self.external_files():
            closed.append((mtime, False, "perf", path, size))
        cutoff = now - self.keep_ns
        keep = []
        for c in closed:
            if not c[1] and c[0] < cutoff:
                self._drop(c[2], c[3], c[4], c[0], "age", st)
            else:
                keep.append(c)
        total = active_bytes + sum(c[4] for c in keep)
        if total > self.max_bytes:
            # oldest first; pinned segments last
            for c in sorted(keep, key=lambda c: (c[1], c[0])):
                if total <= self.max_bytes:
                    break
                self._drop(c[2], c[3], c[4], c[0], "size", st)
                total -= c[4]
        st.total_after = total
        return st

    def close(self) -> None:
        for s in self.streams.values():
            s.close()
