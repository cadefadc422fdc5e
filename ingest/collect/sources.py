"""The recorder's byte sources besides snapshots and the kernel log.

* :class:`OutputPump` — the wrapped job's stdout+stderr (one pipe, so their order is kept):
  passed through to the recorder's own stdout unchanged, written to the ring in whole
  lines (a line longer than 64 KiB is cut), and checked against the watchdog patterns.
  The first ``head_bytes`` go to a pinned stream (the job's start: configuration, rank and
  pid lines) that the age limit never drops.
* :class:`FileTailer` — files the job writes itself (NCCL_DEBUG_FILE): new bytes are
  copied into the ring every interval, a bounded amount per round.
* :class:`NvidiaSmi` — ``nvidia-smi --query-gpu=... --format=csv -lms N`` as one long-running
  process; its header line is kept aside so that every bundle's CSV starts with it.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

MAX_LINE = 64 * 1024


class OutputPump(threading.Thread):
    def __init__(self, fd: int, head, tail, head_bytes: int, passthrough, on_line=None):
        super().__init__(name="aftertrace-output", daemon=True)
        self.fd = fd
        self.head = head
        self.tail = tail
        self.head_left = head_bytes
        self.passthrough = passthrough        # a binary file (our stdout) or None
        self.on_line = on_line
        self.bytes = 0
        self.lines = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.error: str | None = None

    def _store(self, data: bytes) -> None:
        now = time.time_ns()
        if self.first_ns is None:
            self.first_ns = now
        self.last_ns = now
        if self.head_left > 0:
            # the head ends at a line end: lines stay whole in both streams
            cut = data.rfind(b"\n", 0, self.head_left) + 1 if len(data) > self.head_left else len(data)
            if cut > 0:
                self.head.write(data[:cut], now)
                self.head_left -= cut
                data = data[cut:]
            if data:
                self.head_left = 0
        if data:
            self.tail.write(data, now)

    def run(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            except OSError as e:
                self.error = str(e)
                break
            if not chunk:
                break
            self.bytes += len(chunk)
            if self.passthrough is not None:
                try:
                    self.passthrough.write(chunk)
                    self.passthrough.flush()
                except (OSError, ValueError):
                    self.passthrough = None     # our stdout went away; keep recording
            buf += chunk
            cut = buf.rfind(b"\n") + 1
            if cut == 0 and len(buf) >= MAX_LINE:
                cut = len(buf)
            if cut:
                whole, buf = buf[:cut], buf[cut:]
                try:
                    self._store(whole)
                    self._lines(whole)
                except Exception as e:    # never stop reading: the job would block on a full pipe
                    self.error = f"{type(e).__name__}: {e}"
        if buf:
            try:
                self._store(buf + b"\n")
                self._lines(buf)
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
        try:
            os.close(self.fd)
        except OSError:
            pass

    def _lines(self, data: bytes) -> None:
        parts = data.split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        self.lines += len(parts)
        if self.on_line is not None:
            for ln in parts:
                self.on_line(ln.decode("utf-8", "replace"))


def nccl_globs(pattern: str, cwd: str | None, hostname: str) -> list[str]:
    """NCCL_DEBUG_FILE's pattern (``%h`` host, ``%p`` pid) as globs."""
    p = pattern.replace("%h", hostname).replace("%p", "*").replace("%%", "%")
    if not os.path.isabs(p) and cwd:
        p = os.path.join(cwd, p)
    short = hostname.split(".")[0]
    out = [p]
    if short != hostname:
        out.append(pattern.replace("%h", short).replace("%p", "*"))
    return out


class FileTailer:
    """Copies new bytes of files matching globs into ring streams (``<label>/<basename>``)."""

    def __init__(self, ring, label: str, per_round_bytes: int = 4 << 20, on_line=None, max_files: int = 64,
                 rotate_s: float = 60.0):
        self.ring = ring
        self.rotate_s = rotate_s
        self.label = label
        self.globs: list[str] = []
        self.offsets: dict[str, tuple[int, int]] = {}      # path -> (inode, offset)
        self.per_round = per_round_bytes
        self.on_line = on_line
        self.max_files = max_files
        self.names: dict[str, str] = {}                    # path -> name in the bundle
        self._partial: dict[str, bytes] = {}

    def add_globs(self, globs: list[str]) -> None:
        for g in globs:
            if g not in self.globs:
                self.globs.append(g)

    def poll(self) -> int:
        n = 0
        budget = self.per_round
        for g in self.globs:
            for path in sorted(glob.glob(g)):
                if path not in self.offsets and len(self.offsets) >= self.max_files:
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                ino, off = self.offsets.get(path, (st.st_ino, 0))
                if ino != st.st_ino or st.st_size < off:      # replaced or truncated
                    off = 0
                if st.st_size <= off or budget <= 0:
                    self.offsets[path] = (st.st_ino, off)
                    continue
                want = min(st.st_size - off, budget)
                try:
                    with open(path, "rb") as f:
                        f.seek(off)
                        data = f.read(want)
                except OSError:
                    continue
                budget -= len(data)          # what is left is read next round
                name = self.names.setdefault(path, self._name(path))
                self.ring.stream(f"{self.label}/{name}", ext="log", rotate_s=self.rotate_s).write(data)
                self.offsets[path] = (st.st_ino, off + len(data))
                n += len(data)
                if self.on_line is not None:
                    text = self._partial.pop(path, b"") + data
                    cut = text.rfind(b"\n") + 1
                    if cut:
                        for ln in text[:cut].split(b"\n")[:-1]:
                            self.on_line(ln.decode("utf-8", "replace"))
                    rest = text[cut:]
                    if rest and len(rest) < MAX_LINE:
                        self._partial[path] = rest
        return n

    def _name(self, path: str) -> str:
        base = os.path.basename(path) or "file"
        used = set(self.names.values())
        name, i = base, 2
        while name in used:
            name = f"{i}-{base}"
            i += 1
        return name


QUERY = ("timestamp,index,pci.bus_id,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
         "temperature.gpu,power.draw,clocks.sm,pstate")


class NvidiaSmi(threading.Thread):
    def __init__(self, stream, interval_ms: int = 1000):
        super().__init__(name="aftertrace-nvidia-smi", daemon=True)
        self.stream = stream
        self.interval_ms = interval_ms
        self.header: bytes | None = None
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self.rows = 0
        self.exe = shutil.which("nvidia-smi")

    def start_process(self) -> bool:
        if not self.exe:
            self.error = "nvidia-smi not found on PATH (no NVIDIA driver on this host?)"
            return False
        try:
            from .perf import pdeathsig_prefix
            self.proc = subprocess.Popen([*pdeathsig_prefix("TERM"), self.exe, f"--query-gpu={QUERY}", "--format=csv",
                                          "-lms", str(self.interval_ms)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            self.error = f"nvidia-smi: {e}"
            return False
        self.start()
        return True

    def run(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.header is None:
                self.header = line
                continue
            if line == self.header:
                continue
            self.rows += 1
            self.stream.write(line)
        rc = self.proc.wait()
        if self.rows == 0:
            err = (self.proc.stderr.read() if self.proc.stderr else b"").decode("utf-8", "replace").strip()
            self.error = f"nvidia-smi exited with {rc}: {err.splitlines()[0] if err else 'no output'}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def hostname() -> str:
    return socket.gethostname()


def stdout_binary():
    try:
        return sys.stdout.buffer
    except AttributeError:
        return None
