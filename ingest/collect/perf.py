"""``perf record`` in switch-output mode, and its files turned into ``perf script`` text.

perf runs system-wide (``-a``) with ``-k CLOCK_MONOTONIC`` so every output file carries a
``# reference time`` header (the best clock anchor aftertrace reads, ±1 ms), samples
``cpu-clock`` at ``--perf-freq`` Hz with call chains, and records every process exit, fork
and exec (``-c 1``: each tracepoint hit, not a sample of them), as
``sample_traces/record_oom_after_throttle.sh`` does. ``--switch-output=<N>s`` closes a file
every N seconds (``perf.data.<local time stamp>``) and ``--switch-max-files`` bounds how many
perf keeps; the ring also deletes files older than the keep window.

The file being written cannot be read, so a bundle stops perf (SIGINT: it writes its last
file), converts the files of the window with ``perf script --header`` (gzipped), and the
recorder starts perf again if the job is still running.
"""
from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import time

FILE_PATTERN = r"^perf\.data\.\d+$"
EVENTS = ["-e", "cpu-clock/freq={freq},name=cpu-clock/", "-e", "sched:sched_process_exit",
          "-e", "sched:sched_process_fork/call-graph=no/", "-e", "sched:sched_process_exec/call-graph=no/"]


_SETPRIV: list | None = None


def pdeathsig_prefix(sig: str) -> list[str]:
    """``setpriv --pdeathsig SIG --``: a helper process ends when the recorder thread that started
    it dies (perf on SIGINT writes its last file first). Empty where setpriv cannot do it."""
    global _SETPRIV
    if _SETPRIV is None:
        _SETPRIV = []
        sp = shutil.which("setpriv")
        if sp:
            try:
                r = subprocess.run([sp, "--help"], capture_output=True, text=True, timeout=10)
                if "--pdeathsig" in r.stdout:
                    _SETPRIV = [sp]
            except (OSError, subprocess.SubprocessError):
                pass
    return [_SETPRIV[0], "--pdeathsig", sig, "--"] if _SETPRIV else []


class Perf:
    def __init__(self, folder: str, freq: int = 49, switch_s: int = 30, max_files: int = 40,
                 extra_args: list[str] | None = None):
        self.folder = folder
        self.freq = freq
        self.switch_s = switch_s
        self.max_files = max_files
        self.extra = extra_args or []
        self.exe = shutil.which("perf")
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self.events_note: str | None = None
        self.cmdline: list[str] = []
        self.starts = 0
        self._prefix: list[str] | None = None

    def _cmd(self, tracepoints: bool) -> list[str]:
        ev = [e.format(freq=self.freq) for e in EVENTS] if tracepoints else \
            ["-e", f"cpu-clock/freq={self.freq},name=cpu-clock/"]
        if self._prefix is None:
            self._prefix = pdeathsig_prefix("INT")
        return [*self._prefix, self.exe, "record", "-k", "CLOCK_MONOTONIC", "-a", "-g", "-c", "1", *ev,
                f"--switch-output={self.switch_s}s", f"--switch-max-files={self.max_files}",
                *self.extra, "-o", os.path.join(self.folder, "perf.data")]

    def start(self) -> bool:
        if not self.exe:
            self.error = "perf not found on PATH"
            return False
        os.makedirs(self.folder, exist_ok=True)
        errors = []
        for tracepoints in (True, False):
            cmd = self._cmd(tracepoints)
            log = open(os.path.join(self.folder, "perf_record.log"), "wb")
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
            except OSError as e:
                self.error = f"perf record could not start: {e}"
                return False
            finally:
                log.close()
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline and self.proc.poll() is None:
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.cmdline = cmd[len(self._prefix or []):]
                self.error = None
                self.starts += 1
                if not tracepoints:
                    self.events_note = "sched tracepoints unavailable: cpu-clock samples only"
                return True
            errors.append(self._log_tail())
        self.error = "perf record exited at once: " + errors[-1] + (
            f" (with the sched tracepoints: {errors[0]})" if errors[0] != errors[-1] else "")
        self.proc = None
        return False

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.folder, "perf_record.log"), "rb") as f:
                f.seek(max(0, os.path.getsize(f.name) - 2000))
                lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        for i, ln in enumerate(lines):
            if "rror" in ln or "ermission" in ln or "paranoid" in ln:
                text = ln.strip()
                if text.rstrip(":").lower() == "error" and i + 1 < len(lines):   # "Error:" then the reason
                    text = lines[i + 1].strip()
                return text
        return lines[-1].strip() if lines else "(no output)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            except OSError:
                pass
        self.proc = None

    def files(self, since_ns: int) -> list[str]:
        out = []
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.startswith("perf.data.") and n[10:].isdigit())
        except OSError:
            return out
        for n in names:
            p = os.path.join(self.folder, n)
            try:
                if os.stat(p).st_mtime_ns >= since_ns:
                    out.append(p)
            except OSError:
                continue
        return out

    def script(self, src: str, dst_gz: str, timeout: float = 300.0) -> tuple[bool, str]:
        """``perf script --header -i src | gzip > dst_gz``. (ok, message)."""
        tmp = dst_gz + ".tmp"
        try:
            with gzip.open(tmp, "wb", compresslevel=6) as out:
                p = subprocess.Popen([self.exe, "script", "--header", "-i", src], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                t0 = time.monotonic()
                assert p.stdout is not None
                header = True
                while True:
                    chunk = p.stdout.read(1 << 20)
                    if not chunk:
                        break
                    if header:
                        chunk, header = _fix_header(chunk)
                    out.write(chunk)
                    if time.monotonic() - t0 > timeout:
                        p.kill()
                        break
                err = p.stderr.read().decode("utf-8", "replace") if p.stderr else ""
                rc = p.wait()
            if rc != 0:
                os.unlink(tmp)
                return False, f"perf script exited {rc}: {(err.strip().splitlines() or [''])[-1]}"
            os.replace(tmp, dst_gz)
            return True, ""
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False, f"perf script failed: {e}"


_ZERO_TIMES = (b"# time of first sample : 0.000000", b"# time of last sample : 0.000000")


def _fix_header(chunk: bytes) -> tuple[bytes, bool]:
    """perf 6.x writes a zero sample-time header into switch-output files ("time of first sample :
    0.000000", "sample duration : 0.000 ms"): it did not record the boundary, and a reader would
    take the samples' real times for relative ones. Those three lines say nothing and are left
    out; every other header line is kept. Returns (chunk, still in the header)."""
    end = chunk.find(b"\n# ========\n", 10)
    head, rest = (chunk, b"") if end < 0 else (chunk[:end + 1], chunk[end + 1:])
    lines = head.split(b"\n")
    if any(ln.strip() in _ZERO_TIMES for ln in lines):
        lines = [ln for ln in lines if ln.strip() not in _ZERO_TIMES
                 and not (ln.startswith(b"# sample duration :") and ln.split(b":", 1)[1].strip() == b"0.000 ms")]
    return b"\n".join(lines) + rest, end < 0
