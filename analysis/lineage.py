"""Process lineage: within one process, the first fatal thing explains what it does afterwards.

A rank that timed out in a collective raises, tears down, and may crash on the way out
(PyTorch really does segfault at exit after a gloo timeout); the launcher then reports it as
killed by SIGSEGV or exited with code 1. Those later findings are the *aftermath* of the first
one: they are explained by it and are never an origin, however final they look.

A process is one pid on one host; a finding that names only a rank is mapped to that rank's
pid when the bundle tells it (``pids``: rank -> pid). The findings of one process are ordered
by their earliest possible time (:meth:`Link.timing_ns`), ties by their point time, then an
exception that re-raises another process's error after that error. The first
one whose kind can start a process's end (:data:`STARTS`) explains every later finding of the
same process whose kind belongs to an end (:data:`AFTERMATH`), provided the explainer may have
happened first (its earliest time is not after the later one's latest time).

Worked example (``tests/analysis/test_lineage.py`` builds it): rank 0 (pid 100) times out in
gloo at 12:00:30.0 (collective_timeout), segfaults at 12:00:30.2 (segfault, pid 100) and
torchrun reports rank 0 killed by SIGSEGV at 12:00:31 (signal_kill, rank 0, whole second).
Ordered: timeout, segfault, signal_kill. The timeout starts the end; the segfault and the
SIGSEGV report are its aftermath: two edges ``timeout -> segfault`` and
``timeout -> signal_kill``, and neither may be the origin of a chain.
"""
from __future__ import annotations

from .links import Link, LinkKind as K

# Kinds that can start the end of a process (its first fatal thing).
STARTS = frozenset({
    K.PYTHON_EXCEPTION, K.COLLECTIVE_TIMEOUT, K.COLLECTIVE_MISMATCH, K.NCCL_INIT_FAILURE, K.OOM_KILL,
    K.SEGFAULT, K.SIGNAL_KILL, K.RANK_STALLED, K.HUNG_TASK, K.HANG_DUMP,
    K.DISK_FULL, K.SHM_EXHAUSTED, K.DATALOADER_WORKER_KILLED, K.RENDEZVOUS_FAILURE, K.PROCESS_EXIT,
})
# A process's death as reported: the last thing it does. It explains what follows it only when it
# surely came first (its window ends before the other finding's begins): a launcher's report of
# an exit, timed to its whole second, is not earlier than the exception that caused the exit.
DEATHS = frozenset({K.SIGNAL_KILL, K.SEGFAULT, K.PROCESS_EXIT})
# Kinds that are part of a process's end once something fatal happened to it.
AFTERMATH = frozenset({
    K.PYTHON_EXCEPTION, K.COLLECTIVE_TIMEOUT, K.COLLECTIVE_MISMATCH, K.SEGFAULT, K.SIGNAL_KILL,
    K.PROCESS_EXIT, K.OOM_KILL, K.DISK_FULL, K.SHM_EXHAUSTED, K.DATALOADER_WORKER_KILLED,
    K.RENDEZVOUS_FAILURE, K.NCCL_WARN,
})


def process_key(l: Link, pids: dict[int, int]) -> tuple | None:
    """(host, pid) of the process a finding is about, or None when it names none."""
    pid = l.pid
    if pid is None and l.rank is not None:
        pid = pids.get(l.rank)
    if pid is not None:
        return (l.host or "", pid)
    if l.rank is not None:
        return (l.host or "", "rank", l.rank)
    return None


def aftermath(links: list[Link], pids: dict[int, int]) -> list[tuple[Link, Link]]:
    """(first fatal finding, later finding it explains) pairs, for every process."""
    by_proc: dict[tuple, list[Link]] = {}
    for l in links:
        if l.ts_ns is None or l.kind == K.JOB_FAILURE:
            continue
        k = process_key(l, pids)
        if k is not None:
            by_proc.setdefault(k, []).append(l)
    pairs = []
    for ls in by_proc.values():
        # (at one time, an exception that raises another process's error again comes after that
        # error: a DataLoader re-raises what its worker printed below it)
        ls.sort(key=lambda l: (l.timing_ns()[0], l.ts_ns, l.attr("reraised_from") is not None))
        starts = [l for l in ls if l.kind in STARTS and not is_launcher_stop(l)]
        if not starts:
            continue
        first = next((l for l in starts if l.kind not in DEATHS), starts[0])
        early = [d for d in starts if d.kind in DEATHS and d.timing_ns()[1] < first.timing_ns()[0]]
        if early:
            first = early[0]
        lo = first.timing_ns()[0]
        for l in ls:
            if l is first or l.kind not in AFTERMATH:
                continue
            if lo <= l.timing_ns()[1]:
                pairs.append((first, l))
    return pairs


def is_launcher_stop(l: Link) -> bool:
    """A signal the launcher sent to a rank after another rank failed (SIGTERM, or the SIGKILL
    of its grace period): the end of the job reaching this rank, never a failure of its own."""
    if l.kind != K.SIGNAL_KILL:
        return False
    sig = l.attr("signal") or ""
    if l.attr("outside_signal") is True:
        return False
    if sig in ("SIGTERM", "SIGINT", "SIGHUP"):
        return True
    return l.attr("sent_by_launcher") is True
