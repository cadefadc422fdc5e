"""What makes the recorder write a bundle.

* the job ends badly: a non-zero exit status or a signal (a job attached by ``--pid``: any
  end, since only its parent can read its status);
* a watchdog line in the job's output or in its NCCL debug files (regular expressions:
  the defaults below, plus ``--watchdog``);
* a hang: no output line from the job for ``--hang-after`` (off by default), once per run;
* a request: the file ``<out>/trigger`` appears (its first line is kept as the reason), or
  the recorder receives SIGUSR1.

A bundle written while the job still runs first takes its processes' stacks, blocked calls,
kernel wait channels and /dev/shm usage (``live.py``).

A trigger while the job runs starts a short *linger* (``--linger``, default 5 s) so that the
bundle also holds what happens right after (the launcher tearing the job down); triggers
during the linger join the same bundle. A hang does not linger: its bundle is written at once,
while the processes are as the watchdog found them. The job's end always writes a bundle without
waiting. A watchdog pattern fires once per pattern per run (a hang prints its timeout
line many times).
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

# Lines that mean a collective hung or the launcher gave up: strong, rare signals.
DEFAULT_WATCHDOG = (
    r"Watchdog caught collective operation timeout",
    r"Timed out waiting \d+ ?ms for (?:send|recv) operation",
    r"NCCL (?:communicator was aborted|operation .* timed out)",
    r"ProcessGroupNCCL's watchdog got stuck",
    r"NCCL WARN .*[Tt]imeout",
    r"torch\.distributed\.DistBackendError",
)


@dataclass
class Reason:
    kind: str                 # exit | signal | watchdog | hang | request_file | sigusr1 | pid_gone | interrupted
    detail: str
    ts_ns: int
    line: str | None = None

    def to_json(self) -> dict:
        d = {"kind": self.kind, "detail": self.detail, "time_ns": self.ts_ns}
        if self.line is not None:
            d["line"] = self.line
        return d


class Watchdog:
    def __init__(self, patterns: list[str], defaults: bool = True):
        pats = (list(DEFAULT_WATCHDOG) if defaults else []) + list(patterns)
        self.patterns = [(p, re.compile(p)) for p in pats]
        self.fired: set[str] = set()

    def check(self, line: str) -> str | None:
        """The pattern a line matches (first time only), else None."""
        for p, rx in self.patterns:
            if p in self.fired:
                continue
            if rx.search(line):
                self.fired.add(p)
                return p
        return None


@dataclass
class TriggerState:
    linger_ns: int
    reasons: list[Reason] = field(default_factory=list)
    first_ns: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, r: Reason) -> None:
        with self.lock:
            self.reasons.append(r)
            if self.first_ns is None:
                self.first_ns = r.ts_ns

    @property
    def pending(self) -> bool:
        return bool(self.reasons)

    def due(self, now_ns: int | None = None, job_ended: bool = False) -> bool:
        with self.lock:
            if not self.reasons:
                return False
            # (a hang: nothing is coming that a linger would catch, and its processes' stacks are
            # what the bundle is for: now, while they are as the watchdog found them)
            if job_ended or any(r.kind in ("exit", "signal", "pid_gone", "hang") for r in self.reasons):
                return True
            now = now_ns if now_ns is not None else time.time_ns()
            return now - self.first_ns >= self.linger_ns

    def take(self) -> list[Reason]:
        with self.lock:
            out, self.reasons, self.first_ns = self.reasons, [], None
            return out
