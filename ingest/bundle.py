"""Bundle intake: keep the raw bundle, then extract it safely into the incident folder.

Accepted inputs: a directory, a ``.tar`` (plain, gzip, xz or bzip2 compressed),
a ``.zip``, or a single file (gzip-compressed or not; a ``.gz`` single file is
kept compressed and read through transparent gunzip). The kind is found from
the bytes, not the name.

Order of work (nothing a user gave is ever lost):

1. :func:`store_raw` copies the input into the content-addressed store
   ``<bundles>/<sha256>.<ext>`` and hashes the copy (a directory is packed into an
   uncompressed tar; its hash is over the canonical listing of relative paths
   and file hashes, so the same tree always gets the same id).
2. :func:`extract` unpacks that raw copy into ``<incident>/files``. Every
   member is checked: paths are normalised and must stay inside the folder
   (``../``, absolute paths, drive letters, NUL are refused), links are never
   created (one pointing inside is recorded as an alias of its target, one
   pointing outside is refused), device files and FIFOs are refused, files are
   created with ``O_EXCL|O_NOFOLLOW``, and limits on member count, bytes per
   member and total decompressed bytes stop decompression bombs. Each refused
   member is reported with its reason; the others are unaffected. Every member has its own
   path (a repeated name is shown as ``name (copy N)``).
"""
from __future__ import annotations

import bz2
import errno
import functools
import gzip
import hashlib
import lzma
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import zipfile
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

CHUNK = 1 << 20
MAX_NAME_HEADER = 64 * 1024         # GNU long name / pax header of one tar member (tarfile reads it whole)
MAX_NAME_HEADERS = 64 * 1024**2     # all of them in one archive (tarfile keeps every member's name)


@dataclass(frozen=True)
class IntakeLimits:
    max_members: int = 100_000                  # files in one bundle
    max_member_bytes: int = 8 * 1024**3         # one decompressed file
    max_total_bytes: int = 32 * 1024**3         # whole decompressed bundle
    max_upload_bytes: int = 4 * 1024**3         # raw upload size (server)
    # A bundle expands to at most this many times its own size, or ``ratio_floor_bytes`` where that
    # is more: real logs and traces compress 5-50x with gzip (a log of one line repeated, a few
    # hundred); a decompression bomb, thousands. Within the floor any bundle may expand.
    max_ratio: int = 200
    ratio_floor_bytes: int = 1024**3

    def expansion_limit(self, raw_bytes: int) -> int:
        """The bytes a bundle of ``raw_bytes`` may expand to."""
        return min(self.max_total_bytes, max(self.ratio_floor_bytes, self.max_ratio * raw_bytes))


class IntakeError(Exception):
    """The input cannot be read at all (missing, unreadable, empty)."""


class DiskFull(IntakeError):
    """The aftertrace home's disk (or quota) is full: the server's problem, not the bundle's."""


def is_disk_full(err: BaseException) -> bool:
    if isinstance(err, DiskFull):
        return True
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "no space left on device" in str(err).lower() or "disk quota exceeded" in str(err).lower()


def disk_full(what: str) -> DiskFull:
    return DiskFull(f"{what}: no space left on the disk of the aftertrace home; free space and try again")


@dataclass
class Member:
    path: str                       # normalised path inside the bundle ('' parts removed)
    size: int = 0                   # bytes written (decompressed)
    status: str = "ok"              # ok | refused | alias | skipped
    message: str = ""
    where: str | None = None        # the extracted file's path (a string: bundles of 100k files exist)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def file(self) -> Path | None:
        """The extracted file."""
        return None if self.where is None else Path(self.where)


@dataclass
class RawBundle:
    sha256: str
    name: str                       # what the user gave (file or folder name)
    kind: str                       # dir | tar | zip | file
    raw_path: Path                  # content-addressed copy
    bytes: int                      # size of the input as given
    compression: str | None = None  # gzip | xz | bzip2 for tars and single files
    from_dir: bool = False          # the user gave a folder (kept as a tar)
    created: bool = False           # this intake put raw_path in the store (it was not there before)

    @property
    def origin(self) -> str:
        return "dir" if self.from_dir else self.kind


@dataclass
class Extracted:
    root: Path
    members: list[Member] = field(default_factory=list)
    stopped: str | None = None      # why extraction stopped early, if it did

    @property
    def files(self) -> list[Member]:
        return [m for m in self.members if m.ok]


# ---------------------------------------------------------------------------
# kind sniffing

def _magic(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(512)


def _is_tar_header(block: bytes) -> bool:
    return len(block) >= 263 and block[257:262] == b"ustar"


def sniff_kind(path: Path) -> tuple[str, str | None]:
    """('tar'|'zip'|'file', compression) from the file's bytes."""
    head = _magic(path)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip", None
    if _is_tar_header(head):
        return "tar", None
    opener = None
    comp = None
    if head[:2] == b"\x1f\x8b":
        opener, comp = gzip.open, "gzip"
    elif head[:6] == b"\xfd7zXZ\x00":
        opener, comp = lzma.open, "xz"
    elif head[:3] == b"BZh":
        opener, comp = bz2.open, "bzip2"
    if opener is not None:
        try:
            with opener(path, "rb") as f:
                inner = f.read(512)
        except (OSError, EOFError, lzma.LZMAError, zlib.error, RuntimeError):   # damaged at its start
            inner = b""
        if _is_tar_header(inner):
            return "tar", comp
        return "file", comp
    return "file", None


# ---------------------------------------------------------------------------
# raw store

def _hash_copy(src, dst, limit: int | None = None) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    while True:
        chunk = src.read(CHUNK)
        if not chunk:
            break
        n += len(chunk)
        if limit is not None and n > limit:
            raise IntakeError(f"the bundle is larger than the upload limit of {limit} bytes")
        h.update(chunk)
        dst.write(chunk)
    return h.hexdigest(), n


def _ext(kind: str, comp: str | None, name: str) -> str:
    if kind == "tar":
        return {None: ".tar", "gzip": ".tar.gz", "xz": ".tar.xz", "bzip2": ".tar.bz2"}[comp]
    if kind == "zip":
        return ".zip"
    return ".gz" if comp == "gzip" else ".bin"


def _finish_raw(tmp: Path, bundles: Path, sha: str, kind: str, comp, name: str, size: int) -> RawBundle:
    dest = bundles / f"{sha}{_ext(kind, comp, name)}"
    created = not dest.exists()
    if created:
        os.replace(tmp, dest)
    else:
        tmp.unlink()
    return RawBundle(sha, name, kind, dest, size, comp, created=created)


def store_stream(stream, name: str, bundles: Path, limit: int | None = None) -> RawBundle:
    """Store an uploaded stream (file-like) under its SHA-256."""
    return _store(name, bundles, "wb", lambda out: _hash_copy(stream, out, limit))


def store_raw(path: str | os.PathLike, bundles: Path) -> RawBundle:
    """Copy a user's file or directory into the content-addressed store."""
    src = Path(path)
    if not src.exists():
        raise IntakeError(f"{src}: no such file or directory")
    if src.is_dir():
        return _store_dir(src, bundles)
    if not src.is_file():
        raise IntakeError(f"{src}: not a regular file or directory")
    if not os.access(src, os.R_OK):
        raise IntakeError(f"{src}: permission denied")
    try:
        with open(src, "rb") as f:
            return _store_file(f, src.name, bundles)
    except PermissionError as e:
        raise IntakeError(f"{src}: {e.strerror}") from None


def _store_file(f, name: str, bundles: Path) -> RawBundle:
    """:func:`store_stream` of an open regular file: copied by the kernel where it can, and the
    copy hashed (its bytes are the bundle, whatever happens to the original meanwhile). A Python
    loop of reads and writes passes every byte through the interpreter twice; on a large file
    that took several times as long as the kernel's copy and a hash of it together."""
    return _store(name, bundles, "r+b", lambda out: _copy_and_hash(f, out))


COPY_STEP = 16 << 20       # bytes the kernel copies before the hash of the copy catches up


def _copy_and_hash(src, dst) -> tuple[str, int]:
    """Copy open file ``src`` from its position to its end into ``dst`` and hash the copy: (SHA-256,
    bytes). The kernel copies a step at a time while a second thread hashes the step before, read
    back from the copy (both leave the GIL): the two take about as long as the longer of them,
    where one after the other took their sum (500 MB: 0.28 s of copy, 0.34 s of hash)."""
    if not hasattr(os, "copy_file_range"):
        n = _copy_file(src, dst)
        return _hash_file(dst), n
    h = hashlib.sha256()
    n = 0
    with ThreadPoolExecutor(1, thread_name_prefix="intake-hash") as pool:
        behind = None
        try:
            while True:
                k = os.copy_file_range(src.fileno(), dst.fileno(), COPY_STEP)
                if k == 0:
                    break
                if behind is not None:
                    behind.result()
                behind = pool.submit(_hash_range, h, dst.fileno(), n, k)
                n += k
        except OSError as e:
            if n or e.errno not in _NO_KERNEL_COPY:
                raise
            n = _copy_by_reads(src, dst)    # (no kernel copy between these two files)
            return _hash_file(dst), n
        if behind is not None:
            behind.result()
    return h.hexdigest(), n


def _hash_range(h, fd: int, offset: int, size: int) -> None:
    """Feed ``size`` bytes of file ``fd`` from ``offset`` to hash ``h``."""
    buf = bytearray(min(size, 4 * CHUNK))
    view = memoryview(buf)
    end = offset + size
    while offset < end:
        k = os.preadv(fd, [view[:min(len(buf), end - offset)]], offset)
        if k == 0:
            raise OSError(errno.EIO, "the copy is shorter than the bytes copied")
        h.update(view[:k])
        offset += k


def _store(name: str, bundles: Path, mode: str, write: Callable) -> RawBundle:
    """The raw bundle that ``write(a new temporary file opened with mode)`` writes, stored under the
    SHA-256 it returns with the size: ``(sha, size)``. Nothing is left of a failed or empty one."""
    bundles.mkdir(parents=True, exist_ok=True)
    fd, tmpname = tempfile.mkstemp(prefix=".upload-", dir=bundles)
    tmp = Path(tmpname)
    try:
        with os.fdopen(fd, mode) as out:
            sha, size = write(out)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise disk_full(f"{name}: not stored") from None
        raise
    if size == 0:
        tmp.unlink()
        raise IntakeError(f"{name}: the upload is empty")
    kind, comp = sniff_kind(tmp)
    return _finish_raw(tmp, bundles, sha, kind, comp, name, size)


# (copy_file_range's refusals that leave the copy to reads and writes: file systems or kernels
# that cannot copy between these two files)
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF}


def _copy_file(src, dst) -> int:
    """Copy open file ``src`` from its position to its end into ``dst``; the bytes copied."""
    n = 0
    if hasattr(os, "copy_file_range"):
        try:
            while True:
                k = os.copy_file_range(src.fileno(), dst.fileno(), 1 << 30)
                if k == 0:
                    return n
                n += k
        except OSError as e:
            if n or e.errno not in _NO_KERNEL_COPY:
                raise
    return _copy_by_reads(src, dst)


def _copy_by_reads(src, dst) -> int:
    """:func:`_copy_file` by reads and writes."""
    n = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        k = src.readinto(buf)
        if not k:
            return n
        dst.write(view[:k])
        n += k


def _hash_file(f) -> str:
    """SHA-256 of open file ``f`` from its start."""
    f.seek(0)
    h = hashlib.sha256()
    buf = bytearray(4 * CHUNK)
    view = memoryview(buf)
    while True:
        k = f.readinto(buf)
        if not k:
            return h.hexdigest()
        h.update(view[:k])


def _walk(src: Path):
    """Sorted (kind, rel, full path, size, link target) of a folder; the listing hash over them.

    kind: F regular file (hashed), L symbolic link (recorded, never followed), S anything else.
    Unreadable files are left out.
    """
    sha, entries, _ = _scan(src)
    return sha, entries


def _scan(src: Path, on_entry: Callable[[str], None] | None = None):
    """:func:`_walk`'s listing hash and entries, and whether a regular file among them has other
    names (hard links). ``on_entry`` is called with each entry's path as it joins the entries.

    The order is that of ``os.walk(src)`` without following links: a folder's files by name, then
    its links to folders by name, then each of its sub-folders by name, depth first. One
    ``os.scandir`` per folder; paths are built as strings (bundles of 100k files exist).

    The folder is listed first, then its files are hashed in that order while
    :class:`_ReadAhead` asks the kernel for the next ones: files that are not in the page cache
    (a bundle just copied from the nodes' disks, a network file system) are then read many at a
    time instead of one after the other.
    """
    listed = _listing(src)
    listing = hashlib.sha256()
    entries = []
    shared = False
    ahead = _ReadAhead([(full, size) for _, full, mode, size, _ in listed if stat.S_ISREG(mode)])
    try:
        for rel, full, mode, size, links in listed:
            if stat.S_ISLNK(mode):
                target = os.readlink(full)
                entries.append(("L", rel, full, 0, target))
                listing.update(f"L\0{rel}\0{target}\n".encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(mode):
                try:
                    digest = ahead.sha256(full)
                except PermissionError:
                    continue
                shared = shared or links > 1
                entries.append(("F", rel, full, size, None))
                listing.update(f"F\0{rel}\0{size}\0{digest}\n".encode("utf-8", "surrogateescape"))
            else:
                entries.append(("S", rel, full, 0, None))
                listing.update(f"S\0{rel}\n".encode("utf-8", "surrogateescape"))
            if on_entry:
                on_entry(rel)
    finally:
        ahead.close()
    return listing.hexdigest(), entries, shared


def _listing(src: Path) -> list[tuple[str, str, int, int, int]]:
    """(path in the bundle, full path, and from its ``lstat``: mode, size, number of links) of every
    entry under ``src``, in :func:`_scan`'s order."""
    out = []
    top = os.fspath(src)
    todo = [(top, "")]          # (folder, its path in the bundle with a trailing '/')
    while todo:
        folder, prefix = todo.pop()
        listed = _list_folder(folder)
        if listed is None:
            continue
        names, subdirs = listed
        base = os.path.join(folder, "")
        for name in names:
            full = base + name
            st = os.lstat(full)
            out.append((prefix + name, full, st.st_mode, st.st_size, st.st_nlink))
        todo.extend((base + d, prefix + d + "/") for d in reversed(subdirs))
    return out


class _ReadAhead:
    """Hashes a list of files in order, and reads ahead once the reads turn out to wait for the
    disk: a thread asks the kernel (``POSIX_FADV_WILLNEED``, which queues the reads and returns)
    for the next files, up to :attr:`FILES` files and :attr:`BYTES` bytes ahead (of a large file,
    its first :attr:`PER_FILE` bytes).

    A file in the page cache is opened and read in a few microseconds plus its bytes at memory
    speed, where a read from a disk or a network file system waits a hundred microseconds or
    more; reads queued together wait about as long as one. So the reads (not the hashing) of each
    :attr:`PROBE` files are timed, and the thread starts once they took more than twice as long
    as reads from memory would (:attr:`MEMORY_S` per file plus :attr:`MEMORY_BPS`)
    :attr:`SLOW_PROBES` times in a row: for files that are cached its requests would only cost
    system calls.
    """
    FILES = 512
    BYTES = 64 << 20
    PER_FILE = 8 << 20      # (a large file's own sequential reads bring in the rest)
    PROBE = 16
    SLOW_PROBES = 3         # (in a row: one slow probe can be another process taking the core)
    MEMORY_S = 20e-6
    MEMORY_BPS = 2e9

    def __init__(self, files: list[tuple[str, int]]):
        self.files = files
        self.at = 0             # files read (or skipped) by the loop
        self.waited = 0.0       # seconds in the reads of the current probe
        self.probe_bytes = 0
        self.slow = 0           # slow probes in a row
        self.thread: threading.Thread | None = None
        self.moved = threading.Condition()
        self.closed = False
        self.usable = hasattr(os, "posix_fadvise") and len(files) > self.PROBE
        self.buf = bytearray(CHUNK)

    def sha256(self, path: str) -> str:
        """SHA-256 of the next file of the list, ``path``."""
        h = hashlib.sha256()
        view = memoryview(self.buf)
        clock = time.perf_counter
        waited = 0.0
        bufs = [self.buf]
        try:
            t = clock()
            # (the descriptor's reads, not a file object's: most files of a large bundle are a few
            # hundred bytes, and the object cost more than their reads)
            fd = os.open(path, os.O_RDONLY)
            try:
                while True:
                    n = os.readv(fd, bufs)
                    waited += clock() - t
                    if not n:
                        break
                    h.update(view[:n])
                    t = clock()
            finally:
                os.close(fd)
        finally:
            self._done(waited)
        return h.hexdigest()

    def _done(self, waited: float) -> None:
        i = self.at
        self.at = i + 1
        if self.thread is not None:
            if i % 32 == 0 or self.files[i][1] >= self.PER_FILE:
                with self.moved:
                    self.moved.notify()
            return
        if not self.usable:
            return
        self.waited += waited
        self.probe_bytes += self.files[i][1]
        if (i + 1) % self.PROBE:
            return
        slow = self.waited > 2 * (self.PROBE * self.MEMORY_S + self.probe_bytes / self.MEMORY_BPS)
        self.slow = self.slow + 1 if slow else 0
        if self.slow == self.SLOW_PROBES:
            self.thread = threading.Thread(target=self._run, name="intake-read-ahead", daemon=True)
            self.thread.start()
        self.waited, self.probe_bytes = 0.0, 0

    def _run(self) -> None:
        issued: deque[tuple[int, int]] = deque()    # (file, bytes asked for) the loop has not read yet
        pending = 0
        nxt = 0
        n = len(self.files)
        while not self.closed:
            at = self.at
            while issued and issued[0][0] < at:
                pending -= issued.popleft()[1]
            nxt = max(nxt, at)
            if nxt >= n:
                return
            path, size = self.files[nxt]
            size = min(size, self.PER_FILE)
            if nxt - at >= self.FILES or (issued and pending + size > self.BYTES):
                with self.moved:
                    if not self.closed and self.at == at:
                        self.moved.wait(0.05)
                continue
            issued.append((nxt, size))
            pending += size
            nxt += 1
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def close(self) -> None:
        self.closed = True
        if self.thread is not None:
            with self.moved:
                self.moved.notify()
            self.thread.join()


def _list_folder(folder: str) -> tuple[list[str], list[str]] | None:
    """(names recorded, sub-folders entered) of one folder as ``os.walk`` sees it: a link to a
    folder is recorded and not entered. None when the folder cannot be listed: ``os.walk`` then
    leaves it out, even the names read before the error."""
    files, dir_links, subdirs = [], [], []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if not is_dir:
                    files.append(entry.name)
                    continue
                try:
                    is_link = entry.is_symlink()
                except OSError:
                    is_link = False
                (dir_links if is_link else subdirs).append(entry.name)
    except OSError:
        return None
    files.sort()
    dir_links.sort()
    subdirs.sort()
    return files + dir_links, subdirs


class _TarFeed:
    """The system's tar packing a folder while it is scanned (much faster than tarfile for many
    small files, and on another core than the hashing): each entry's name is handed to it as the
    scan lists it, in the scan's order, so the tar holds exactly the entries."""

    def __init__(self, src: Path, tmp: Path):
        self.proc: subprocess.Popen | None = None
        tool = shutil.which("tar")
        if tool is None:
            return
        self.errors = tempfile.TemporaryFile()      # (not a pipe: a tar blocked on it would stop reading names)
        try:
            self.proc = subprocess.Popen([tool, "--format=gnu", "--no-recursion", "--null", "-C", str(src), "-cf",
                                          str(tmp), "-T", "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=self.errors)
        except OSError:
            self.errors.close()

    def add(self, rel: str) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.write(rel.encode("utf-8", "surrogateescape") + b"\0")
        except OSError:         # tar stopped (a full disk): packed in Python instead, see finish
            self.stop()

    def finish(self) -> bool:
        """Whether tar packed every name it was given."""
        if self.proc is None:
            return False
        try:
            self.proc.stdin.close()
            return self.proc.wait(timeout=3600) == 0
        except (OSError, subprocess.SubprocessError):
            self.stop()
            return False
        finally:
            if self.proc is not None:
                self.errors.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.errors.close()


def _tar_with_python(entries, tmp: Path) -> None:
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        for kind, rel, full, size, target in entries:
            ti = tarfile.TarInfo(rel)
            if kind == "L":
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                tf.addfile(ti)
            elif kind == "F":
                ti.size, ti.mode = size, 0o644
                with open(full, "rb") as f:
                    tf.addfile(ti, f)
            else:
                ti.type = tarfile.FIFOTYPE  # marks a special file; refused at extraction
                tf.addfile(ti)


def _store_dir(src: Path, bundles: Path) -> RawBundle:
    """Pack a directory into a tar (links and special files are recorded, not followed).

    The bundle's id is the hash of the sorted listing (paths, sizes, file hashes), so the same
    tree always gets the same id, whatever the tar's own bytes (times, order) are.
    """
    bundles.mkdir(parents=True, exist_ok=True)
    fd, tmpname = tempfile.mkstemp(prefix=".dir-", suffix=".tar", dir=bundles)
    os.close(fd)
    tmp = Path(tmpname)
    try:
        feed = _TarFeed(src, tmp)     # (the listing hash, the bundle's id, is known at the end)
        try:
            sha, entries, shared = _scan(src, feed.add)
        except BaseException:
            feed.stop()
            raise
        by_tool = feed.finish()
        files = [e for e in entries if e[0] == "F"]
        if not files:
            raise IntakeError(f"{src}: the directory holds no readable files")
        dest = bundles / f"{sha}.tar"
        created = not dest.exists()
        if not created:           # the same tree was stored before
            tmp.unlink()
        else:
            if not by_tool:
                _tar_with_python(entries, tmp)
            os.replace(tmp, dest)
            if _packed_as_listed(entries, shared, by_tool):
                _remember_packed(dest, entries)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise disk_full(f"{src}: not stored") from None
        raise
    return RawBundle(sha, src.name, "tar", dest, sum(e[3] for e in files), None, from_dir=True, created=created)


# What the raw tars of folders packed by this process hold, as their entries: extracting such a
# folder where it lies (``extract(..., local_dir=...)``) then takes the members from here instead
# of reading the tar back. Kept only where the tar is known to hold exactly the entries, in order,
# with the types and names that reading it back would give; a few folders at most.
_PACKED: dict[str, tuple[tuple, list]] = {}
_PACKED_KEEP = 4
_PACKED_LOCK = threading.Lock()


def _packed_as_listed(entries, shared: bool, by_tool: bool) -> bool:
    """Whether the tar just packed from ``entries`` reads back as exactly these members."""
    if tarfile.ENCODING.lower().replace("-", "") != "utf8":     # names are handed to tar as UTF-8
        return False
    if any(e[0] == "S" for e in entries):   # the tar types them (device, FIFO) or leaves them out
        return False
    if by_tool:
        # GNU tar stores the second name of a file as a hard link, and may read a listed name
        # that starts with '-' or holds a backslash as something else than the name itself.
        if shared or not _is_gnu_tar() or any(e[1].startswith("-") or "\\" in e[1] for e in entries):
            return False
    # names and link targets long enough for a name header: reading back counts them against
    # the limits of _BoundedTarInfo (bounded from above here: each one in a header of its own)
    sizes = [len(rel.encode("utf-8", "surrogateescape")) + len((target or "").encode("utf-8", "surrogateescape")) + 2
             for _, rel, _, _, target in entries]
    return max(sizes) <= MAX_NAME_HEADER and sum(sizes) <= MAX_NAME_HEADERS


@functools.lru_cache(maxsize=1)
def _is_gnu_tar() -> bool:
    tool = shutil.which("tar")
    if tool is None:
        return False
    try:
        r = subprocess.run([tool, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.startswith(b"tar (GNU tar) ")


def _tar_identity(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _remember_packed(dest: Path, entries) -> None:
    with _PACKED_LOCK:
        _PACKED.pop(str(dest), None)
        _PACKED[str(dest)] = (_tar_identity(dest), entries)
        while len(_PACKED) > _PACKED_KEEP:
            del _PACKED[next(iter(_PACKED))]


def _packed_members(raw: RawBundle) -> Iterator[_Entry] | None:
    """The members of ``raw`` as packed by this process, if its tar is still the one packed."""
    with _PACKED_LOCK:
        kept = _PACKED.pop(str(raw.raw_path), None)
    if kept is None or raw.kind != "tar" or raw.compression is not None:
        return None
    identity, entries = kept
    try:
        if _tar_identity(raw.raw_path) != identity:
            return None
    except OSError:
        return None
    return (_Entry(rel, "symlink", link=target) if kind == "L" else _Entry(rel, "file", size=size)
            for kind, rel, _, size, target in entries)


# ---------------------------------------------------------------------------
# safe extraction

def safe_relpath(name: str, backslash_is_sep: bool = False) -> str | None:
    """Normalise a member name; None if it is not allowed to exist in the bundle."""
    if not name or "\x00" in name:
        return None
    if backslash_is_sep:
        name = name.replace("\\", "/")
    if name.startswith("/") or (len(name) >= 2 and name[1] == ":" and name[0].isalpha()):
        return None
    # (most names are normal already, with no empty, "." or ".." part: kept as they are)
    if ".." not in name and "//" not in name and "/./" not in name and not name.startswith("./") \
            and not name.endswith(("/", "/.")) and name != ".":
        return name
    parts = []
    for p in name.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            return None
        parts.append(p)
    if not parts:
        return None
    return "/".join(parts)


def _why_unsafe(name: str) -> str:
    if "\x00" in name:
        return "refused: the name contains a NUL byte"
    if name.startswith("/") or (len(name) >= 2 and name[1] == ":"):
        return "refused: absolute path (would be written outside the incident folder)"
    if ".." in name.replace("\\", "/").split("/"):
        return "refused: '..' in the path (would be written outside the incident folder)"
    return "refused: empty or invalid member name"


class _Budget:
    def __init__(self, limits: IntakeLimits, raw_bytes: int):
        self.limits = limits
        self.max_total = limits.expansion_limit(raw_bytes)
        self.total = 0
        self.count = 0
        self.dirs: set[str] = set()     # folders created or checked (never links: none are made)
        self.root_str: str | None = None

    def past_total(self) -> str:
        lim = self.limits
        if self.max_total < lim.max_total_bytes:
            return (f"refused: the bundle expands past {self.max_total} bytes, the most it may "
                    f"({lim.max_ratio} times its own size, at least {lim.ratio_floor_bytes} bytes): "
                    "a decompression bomb?")
        return f"refused: the bundle's decompressed size limit of {lim.max_total_bytes} bytes was reached"


class _LimitHit(Exception):
    def __init__(self, message: str, whole: bool):
        super().__init__(message)
        self.whole = whole   # True: the bundle-wide limit, stop everything


def _write_member(root: Path, rel: str, src, budget: _Budget) -> tuple[str, int]:
    # ``rel`` passed safe_relpath (no '..', not absolute). Folders are created one by one and
    # anything on the way that is not a plain folder is refused; extraction never creates a
    # link, so a folder checked once stays inside the incident folder. (String paths: this
    # runs once per member, and bundles of 100k small files exist.)
    parts = rel.split("/")
    base = budget.root_str or str(root)
    cur = base
    for part in parts[:-1]:
        cur = cur + os.sep + part
        if cur in budget.dirs:
            continue
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            os.mkdir(cur)
            budget.dirs.add(cur)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise FileExistsError(f"a file of the same name as folder {part!r} already exists")
        budget.dirs.add(cur)
    dest = cur + os.sep + parts[-1]
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    n = 0
    lim = budget.limits
    try:
        with os.fdopen(fd, "wb") as out:
            while True:
                chunk = src.read(CHUNK)
                if not chunk:
                    break
                n += len(chunk)
                budget.total += len(chunk)
                if n > lim.max_member_bytes:
                    raise _LimitHit(f"refused: larger than the per-file limit of {lim.max_member_bytes} bytes "
                                    "after decompression", whole=False)
                if budget.total > budget.max_total:
                    raise _LimitHit(budget.past_total(), whole=True)
                out.write(chunk)
    except BaseException:
        try:
            os.unlink(dest)
        except FileNotFoundError:
            pass
        raise
    return dest, n


def _link_member(rel: str, target: str, hard: bool) -> Member:
    if hard:
        t = safe_relpath(target)
    else:
        base = PurePosixPath(rel).parent.as_posix()
        t = None if target.startswith("/") else safe_relpath(
            os.path.normpath(f"{base}/{target}") if base != "." else os.path.normpath(target))
    if t is None:
        shown = target if len(target) <= 200 else target[:200] + "..."
        return Member(rel, 0, "refused", f"refused: link to {shown!r} points outside the bundle")
    return Member(rel, 0, "alias", f"link to {t} inside the bundle (not created; the target is read instead)")


def extract(raw: RawBundle, dest: Path, limits: IntakeLimits = IntakeLimits(),
            local_dir: Path | None = None) -> Extracted:
    """Unpack ``raw`` into ``dest`` (which is emptied first).

    ``local_dir``: the folder ``raw`` was just packed from (a folder given on the command line).
    Its files are then read where they are instead of being written again; the member list, the
    checks and the limits are the raw tar's, exactly as for an extraction (the member list as
    packed, when this process packed the tar and kept it, see :data:`_PACKED`).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    out = Extracted(dest)
    budget = _Budget(limits, raw.bytes)
    budget.root_str = str(dest.resolve())
    packed = _packed_members(raw) if local_dir is not None else None
    if packed is not None:      # packed by this process: its members are known without reading it
        _admit(packed, dest, budget, out, backslash_is_sep=False, stop_when_damaged=True,
               stop_on_member_limit=False, local_root=str(local_dir))
    elif raw.kind == "tar":
        _extract_tar(raw, dest, budget, out, str(local_dir) if local_dir is not None else None)
    elif raw.kind == "zip":
        _extract_zip(raw, dest, budget, out)
    else:
        name = safe_relpath(PurePosixPath(raw.name).name) or "bundle"
        if raw.compression == "gzip" and not name.endswith(".gz"):
            name += ".gz"
        target = dest / name
        try:    # (the stored raw file is never written again: a second name for it, not a second copy)
            os.link(raw.raw_path, target)
        except OSError:     # (another file system, or one without hard links)
            shutil.copyfile(raw.raw_path, target)
        out.members.append(Member(name, target.stat().st_size, "ok", "", str(target)))
    _unique_paths(out.members)
    return out


def _unique_paths(members: list[Member]) -> None:
    """One row per path, and every path valid text.

    A name with bytes that are not UTF-8 (tarfile and the file system hand them over as lone
    surrogates, which the store cannot hold) is shown with ``\\xNN`` escapes; the file on disk
    keeps its name. A refused or aliased member whose name repeats another member's (a
    duplicate, a link and a file of the same name, the same '../' name twice) is shown as
    ``name (copy N)``; extracted files are named first, so they keep their names.
    """
    taken: set[str] = set()
    for first in (True, False):
        for m in members:
            if m.ok != first:
                continue
            m.path = _text(m.path)
            if m.path in taken:
                n = 2
                while f"{m.path} (copy {n})" in taken:
                    n += 1
                m.path = f"{m.path} (copy {n})"
            taken.add(m.path)


def _text(name: str) -> str:
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:      # a surrogate that is not an escaped byte
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _skip_noise(rel: str) -> bool:
    parts = rel.split("/")
    return parts[0] == "__MACOSX" or parts[-1] in (".DS_Store", "Thumbs.db")


@dataclass
class _Entry:
    """One archive member as the format adapter sees it, before any check."""
    name: str                               # raw member name
    type: str                               # file | symlink | hardlink | refuse
    link: str = ""                          # link target
    why: str = ""                           # reason, for type 'refuse'
    open: Callable[[], object] | None = None
    size: int = 0                           # declared size (used when the file is read in place)


_DAMAGE = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)


def _admit(entries: Iterator[_Entry], dest: Path, budget: _Budget, out: Extracted, *,
           backslash_is_sep: bool, stop_when_damaged: bool, stop_on_member_limit: bool,
           local_root: str | None = None) -> None:
    """The checks every member goes through, whatever the archive format.

    With ``local_root`` (a folder the user gave, just packed into the raw store) the members are
    not written again: each is read in place after checking it is still the same plain file.
    """
    seen: set[str] = set()
    local_base = os.path.join(local_root, "") if local_root is not None else None
    for e in entries:
        budget.count += 1
        if budget.count > budget.limits.max_members:
            out.stopped = (f"the bundle has more than {budget.limits.max_members} members; "
                           "the rest was not extracted")
            return
        rel = safe_relpath(e.name, backslash_is_sep)
        if rel is None:
            out.members.append(Member(e.name, 0, "refused", _why_unsafe(e.name)))
            continue
        if _skip_noise(rel):
            out.members.append(Member(rel, 0, "skipped", "skipped: archiver metadata"))
            continue
        if e.type in ("symlink", "hardlink"):
            out.members.append(_link_member(rel, e.link, e.type == "hardlink"))
            continue
        if e.type == "refuse":
            out.members.append(Member(rel, 0, "refused", f"refused: {e.why}"))
            continue
        if rel in seen:
            out.members.append(Member(rel, 0, "refused", "refused: duplicate member; the first copy is kept"))
            continue
        try:
            if local_base is not None:
                path, n = _use_in_place(local_base + rel, e.size, budget)
            else:
                with e.open() as src:
                    path, n = _write_member(dest, rel, src, budget)
        except _LimitHit as err:
            out.members.append(Member(rel, 0, "refused", str(err)))
            if err.whole or stop_on_member_limit:
                out.stopped = str(err).replace("refused: ", "extraction stopped: ")
                return
            continue
        except _DAMAGE as err:
            out.members.append(Member(rel, 0, "refused", f"refused: the member is truncated or damaged ({err})"))
            if stop_when_damaged:
                out.stopped = f"the archive is damaged or truncated after {len(out.members) - 1} members: {err}"
                return
            continue
        except (NotImplementedError, RuntimeError) as err:   # zip: unsupported compression, password
            out.members.append(Member(rel, 0, "refused", f"refused: cannot be read ({err})"))
            continue
        except OSError as err:   # the member's path is the row's; the server's folders are not shown
            if is_disk_full(err):   # not the member's fault: the whole analysis stops
                raise disk_full(f"extracting {rel}") from None
            out.members.append(Member(rel, 0, "refused", f"refused: {err.strerror or err}"))
            continue
        seen.add(rel)
        out.members.append(Member(rel, n, "ok", "", path))


def _use_in_place(path: str, size: int, budget: _Budget) -> tuple[str, int]:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        raise OSError(f"{path} changed since the bundle was stored")
    lim = budget.limits
    budget.total += size
    if size > lim.max_member_bytes:
        raise _LimitHit(f"refused: larger than the per-file limit of {lim.max_member_bytes} bytes", whole=False)
    if budget.total > budget.max_total:
        raise _LimitHit(budget.past_total(), whole=True)
    return path, size


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads a GNU long name or a pax header into memory whatever its declared size: a
    small tar.gz can declare a name of gigabytes. Refuse such headers before they are read."""

    def _check_header_size(self, tf):
        if self.size > MAX_NAME_HEADER:
            raise tarfile.SubsequentHeaderError(
                f"a member's name/extended header declares {self.size} bytes (limit {MAX_NAME_HEADER})")
        seen = getattr(tf, "_name_header_bytes", 0) + self.size
        if seen > MAX_NAME_HEADERS:
            raise tarfile.SubsequentHeaderError(
                f"the members' name/extended headers exceed {MAX_NAME_HEADERS} bytes in all")
        tf._name_header_bytes = seen

    def _proc_gnulong(self, tf):
        self._check_header_size(tf)
        return super()._proc_gnulong(tf)

    def _proc_pax(self, tf):
        self._check_header_size(tf)
        return super()._proc_pax(tf)


def _tar_entries(tf: tarfile.TarFile, out: Extracted) -> Iterator[_Entry]:
    while True:
        try:
            ti = tf.next()
        except RecursionError:   # tarfile follows chained extended headers recursively
            out.stopped = (f"the archive is damaged after {len(out.members)} members: "
                           "too many chained extended headers")
            return
        except (tarfile.TarError, OSError, EOFError, zlib.error, RuntimeError) as e:   # (bz2: RuntimeError)
            out.stopped = f"the archive is damaged after {len(out.members)} members: {e}"
            return
        if ti is None:
            return
        if ti.isdir():
            continue
        if ti.issym() or ti.islnk():
            yield _Entry(ti.name, "hardlink" if ti.islnk() else "symlink", link=ti.linkname)
        elif not ti.isreg():
            what = "device file" if (ti.ischr() or ti.isblk()) else "FIFO" if ti.isfifo() else "special file"
            yield _Entry(ti.name, "refuse", why=what)
        else:
            yield _Entry(ti.name, "file", open=lambda ti=ti: tf.extractfile(ti), size=ti.size)


def _extract_tar(raw: RawBundle, dest: Path, budget: _Budget, out: Extracted,
                 local_root: str | None = None) -> None:
    try:
        tf = tarfile.open(raw.raw_path, "r:*", tarinfo=_BoundedTarInfo)
    except (tarfile.TarError, OSError, EOFError, zlib.error, RuntimeError) as e:   # (RecursionError: chained headers)
        out.stopped = f"the archive cannot be opened: {e}"
        return
    with tf:
        # In a compressed tar, skipping past a refused member means decompressing it:
        # a member over the limit stops the whole extraction.
        _admit(_tar_entries(tf, out), dest, budget, out, backslash_is_sep=False, stop_when_damaged=True,
               stop_on_member_limit=raw.compression is not None, local_root=local_root)


def _zip_entries(zf: zipfile.ZipFile) -> Iterator[_Entry]:
    for zi in zf.infolist():
        if zi.is_dir():
            continue
        mode = zi.external_attr >> 16
        if stat.S_ISLNK(mode):
            try:
                with zf.open(zi) as f:       # not zf.read: the member may be a bomb
                    target = f.read(4096).decode("utf-8", "replace")
            except Exception:
                target = "?"
            yield _Entry(zi.filename, "symlink", link=target)
        elif mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode) != 0:
            yield _Entry(zi.filename, "refuse", why="special file")
        elif zi.flag_bits & 0x1:
            yield _Entry(zi.filename, "refuse", why="encrypted member")
        else:
            yield _Entry(zi.filename, "file", open=lambda zi=zi: zf.open(zi))


def _extract_zip(raw: RawBundle, dest: Path, budget: _Budget, out: Extracted) -> None:
    try:
        zf = zipfile.ZipFile(raw.raw_path)
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as e:   # (a name flagged UTF-8 that is not)
        out.stopped = f"the archive cannot be opened: {e}"
        return
    with zf:
        _admit(_zip_entries(zf), dest, budget, out, backslash_is_sep=True, stop_when_damaged=False,
               stop_on_member_limit=False)
