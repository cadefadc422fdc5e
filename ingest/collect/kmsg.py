"""The kernel log, followed live, written as raw ``dmesg`` prints it.

``/dev/kmsg`` hands out one record per read: ``prio,seq,usec,flags[,...];text`` followed by
`` KEY=value`` dictionary lines (Documentation/ABI/testing/dev-kmsg). ``usec`` is the printk
clock (``local_clock()``, boot-relative, the clock perf uses by default); it is kept exactly,
as ``[%5lu.%06lu] text`` like util-linux ``dmesg`` without options, so the bundle's
``dmesg.txt`` is the raw format with boot-relative times that the kmsg/dmesg parsers and the
clock alignment read. Non-printable bytes arrive escaped as ``\\xNN``; they are unescaped, and
a message holding newlines becomes one line per part, each with the record's time.
A read that fails with EPIPE means records were overwritten before they were read: that is
counted (``lost``), and reading goes on. The sequence numbers tell how many were missed.

Without a readable ``/dev/kmsg`` (not root, ``dmesg_restrict``), ``dmesg`` (raw) is polled
instead: lines newer than the last one seen are kept.

Kernel lines that name a job process (an OOM kill, a segfault) are handed to a callback, so
a recorder attached by ``--pid`` can say how the process ended.
"""
from __future__ import annotations

import errno
import os
import re
import select
import subprocess
import threading
import time

_ESC = re.compile(rb"\\x([0-9a-fA-F]{2})")
RAW_LINE = re.compile(r"^\[\s*(\d+)\.(\d{6,9})\] ?(.*)$")


def unescape(b: bytes) -> str:
    return _ESC.sub(lambda m: bytes([int(m.group(1), 16)]), b).decode("utf-8", "replace")


def format_line(usec: int, text: str) -> str:
    return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {text}"


def parse_record(rec: bytes) -> tuple[int, int, int, str] | None:
    """(prio, seq, usec, text) of one /dev/kmsg record; None when it is not one."""
    head, sep, rest = rec.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 4:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    msg = rest.split(b"\n", 1)[0]            # the dictionary lines (" KEY=value") are dropped
    return prio, seq, usec, unescape(msg)


def render(usec: int, text: str) -> str:
    return "".join(format_line(usec, part) + "\n" for part in (text.split("\n") or [""]))


class KernelLog(threading.Thread):
    """Follows the kernel log into ``sink(bytes)``; ``min_usec`` drops older records of the
    backlog (those before the keep window)."""

    def __init__(self, sink, min_usec: int = 0, poll_s: float = 2.0, on_line=None, prefer_dmesg: bool = False):
        super().__init__(name="aftertrace-kmsg", daemon=True)
        self.sink = sink
        self.min_usec = min_usec
        self.poll_s = poll_s
        self.on_line = on_line
        self.stop_event = threading.Event()
        self.method: str | None = None
        self.error: str | None = None
        self.records = 0
        self.lost_reads = 0
        self.seq_gaps = 0
        self.last_seq: int | None = None
        self.first_usec: int | None = None
        self.last_usec: int | None = None
        self.last_read_ns = 0
        self._fd: int | None = None
        if not prefer_dmesg:
            try:
                self._fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
                self.method = "/dev/kmsg followed live"
            except OSError as e:
                self.error = f"/dev/kmsg: {e.strerror or e}"
        if self._fd is None:
            probe = self._dmesg()
            if probe is not None:
                self.method = "dmesg polled every %.0f s" % poll_s
            else:
                why = self._dmesg_error or "failed"
                self.error = (self.error + "; " if self.error else "") + (why if why.startswith("dmesg") else
                                                                          "dmesg: " + why)

    @property
    def available(self) -> bool:
        return self.method is not None

    def _emit(self, usec: int, text: str) -> None:
        if usec < self.min_usec:
            return
        self.records += 1
        if self.first_usec is None:
            self.first_usec = usec
        self.last_usec = usec
        self.sink(render(usec, text).encode("utf-8", "replace"))
        if self.on_line is not None:
            try:
                self.on_line(usec, text)
            except Exception:
                pass

    def run(self) -> None:
        if self._fd is not None:
            self._run_kmsg()
        elif self.method:
            self._run_dmesg()

    def _run_kmsg(self) -> None:
        fd = self._fd
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not self.stop_event.is_set():
            try:
                rec = os.read(fd, 16384)
            except BlockingIOError:
                self.last_read_ns = time.time_ns()
                poller.poll(250)
                continue
            except OSError as e:
                if e.errno == errno.EPIPE:      # overwritten before we read it
                    self.lost_reads += 1
                    continue
                if e.errno == errno.EINTR:
                    continue
                self.error = f"/dev/kmsg read failed: {e.strerror or e}"
                break
            if not rec:
                poller.poll(250)
                continue
            r = parse_record(rec)
            if r is None:
                continue
            _, seq, usec, text = r
            if self.last_seq is not None and seq > self.last_seq + 1:
                self.seq_gaps += seq - self.last_seq - 1
            self.last_seq = seq
            self._emit(usec, text)
        try:
            os.close(fd)
        except OSError:
            pass

    _dmesg_error: str | None = None

    def _dmesg(self) -> list[tuple[int, str]] | None:
        try:
            r = subprocess.run(["dmesg"], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            self._dmesg_error = str(e)
            return None
        if r.returncode != 0:
            self._dmesg_error = (r.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"])[0]
            return None
        out = []
        for line in r.stdout.decode("utf-8", "replace").splitlines():
            m = RAW_LINE.match(line)
            if m:
                frac = (m.group(2) + "000")[:6]
                out.append((int(m.group(1)) * 1_000_000 + int(frac), m.group(3)))
        return out

    def _run_dmesg(self) -> None:
        last: tuple[int, int] = (-1, 0)      # (usec, how many lines at that usec were emitted)
        while not self.stop_event.is_set():
            lines = self._dmesg()
            self.last_read_ns = time.time_ns()
            if lines is not None:
                if lines and last[0] > lines[-1][0]:
                    last = (-1, 0)        # the buffer was cleared (dmesg -C) or the host rebooted
                same = 0
                for usec, text in lines:
                    if usec < last[0]:
                        continue
                    if usec == last[0]:
                        same += 1
                        if same <= last[1]:
                            continue
                    else:
                        same = 1
                    self._emit(usec, text)
                    last = (usec, same)
            self.stop_event.wait(self.poll_s)

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout)
