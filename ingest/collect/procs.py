"""The job's process tree: who is alive, which rank each worker is, when each ended.

Children are found from ``/proc/<pid>/task/<tid>/children`` (every thread's: a child is
listed under the thread that forked it); without that file (kernels built without
CONFIG_PROC_CHILDREN) by scanning ``/proc/*/stat`` for parent ids. A new process's
``environ`` is read once for the launcher's variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``GROUP_RANK``, ``TORCHELASTIC_RUN_ID``, ``NCCL_DEBUG_FILE`` ...):
torchrun sets them for each worker, so rank -> pid is read, not guessed. Processes that a
worker forks inherit its ``RANK``; the rank's pid is the topmost process with that rank.

The table is bounded (``max_procs``); ended processes are kept (with the time they were
last seen alive) until the bound pushes the oldest out.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT",
            "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "SLURM_PROCID", "SLURM_JOB_ID",
            "OMPI_COMM_WORLD_RANK", "PMI_RANK", "CUDA_VISIBLE_DEVICES")


@dataclass
class Proc:
    pid: int
    ppid: int
    comm: str
    cmdline: str
    start_ticks: int
    first_seen_ns: int
    last_seen_ns: int
    ended_ns: int | None = None
    env: dict = field(default_factory=dict)
    cwd: str | None = None
    env_reads: int = 1

    @property
    def rank(self) -> int | None:
        for k in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            v = self.env.get(k)
            if v is not None and v.strip().lstrip("-").isdigit():
                return int(v)
        return None


def _read(path: str, limit: int = 1 << 16) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def read_stat(pid: int) -> tuple[str, int, int, str] | None:
    """(comm, ppid, start time in clock ticks, state) of a process."""
    b = _read(f"/proc/{pid}/stat", 4096)
    if not b:
        return None
    s = b.decode("utf-8", "replace")
    l, r = s.find("("), s.rfind(")")
    if l < 0 or r < 0:
        return None
    rest = s[r + 2:].split()
    try:
        return s[l + 1:r], int(rest[1]), int(rest[19]), rest[0]
    except (IndexError, ValueError):
        return None


def read_env(pid: int, keys=ENV_KEYS) -> dict:
    b = _read(f"/proc/{pid}/environ", 1 << 20)
    if not b:
        return {}
    out = {}
    want = set(keys)
    for item in b.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            ks = k.decode("utf-8", "replace")
            if ks in want:
                out[ks] = v.decode("utf-8", "replace")
    return out


class ProcTable:
    def __init__(self, roots: list[int], max_procs: int = 256, max_status: int = 64):
        self.roots = list(roots)
        self.max_procs = max_procs
        self.max_status = max_status
        self.procs: dict[int, Proc] = {}
        self.changed = False
        self._children_file = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
        self.method = "/proc/<pid>/task/<tid>/children" if self._children_file else "scan of /proc/*/stat"

    def _children(self, pid: int) -> list[int]:
        out = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            b = _read(f"/proc/{pid}/task/{tid}/children")
            if b:
                out.extend(int(x) for x in b.split() if x.isdigit())
        return out

    def _scan_children(self, parents: set[int]) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            st = read_stat(int(d))
            if st and st[1] in parents:
                kids.setdefault(st[1], []).append(int(d))
        return kids

    def _add(self, pid: int, now: int) -> Proc | None:
        st = read_stat(pid)
        if st is None:
            return None
        cmd = (_read(f"/proc/{pid}/cmdline", 4096) or b"").replace(b"\0", b" ").strip()
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = None
        p = Proc(pid, st[1], st[0], cmd.decode("utf-8", "replace")[:1024], st[2], now, now,
                 env=read_env(pid), cwd=cwd)
        self.procs[pid] = p
        self.changed = True
        return p

    def refresh(self, now_ns: int | None = None) -> tuple[list[Proc], list[Proc]]:
        """Walk the tree from the roots. Returns (new, ended) processes."""
        now = now_ns if now_ns is not None else time.time_ns()
        new: list[Proc] = []
        alive: set[int] = set()
        todo = [r for r in self.roots]
        seen: set[int] = set()
        scan = None if self._children_file else self._scan_children(
            set(self.roots) | {p.pid for p in self.procs.values() if p.ended_ns is None})
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            st = read_stat(pid)
            if st is None or st[3] in ("Z", "X"):
                continue
            p = self.procs.get(pid)
            if p is not None and p.start_ticks != st[2]:      # the pid was reused
                p.ended_ns = p.ended_ns or p.last_seen_ns
                self.procs[-pid - len(self.procs) * 1_000_000] = self.procs.pop(pid)
                p = None
            if p is None:
                if len(self.procs) >= self.max_procs and not self._evict():
                    continue
                p = self._add(pid, now)
                if p is None:
                    continue
                new.append(p)
            p.last_seen_ns = now
            if p.comm != st[0] or (p.rank is None and p.env_reads < 5):
                # a fork reads its parent's environment until it execs: read it again after the
                # exec (comm changes), and a few times while a young process names no rank
                p.env_reads += 1
                if p.comm != st[0]:
                    p.comm = st[0]
                    cmd = (_read(f"/proc/{pid}/cmdline", 4096) or b"").replace(b"\0", b" ").strip()
                    p.cmdline = cmd.decode("utf-8", "replace")[:1024]
                env = read_env(pid)
                if env and env != p.env:
                    p.env = env
                    self.changed = True
            if p.ended_ns is not None:
                p.ended_ns = None
                self.changed = True
            alive.add(pid)
            kids = scan.get(pid, []) if scan is not None else self._children(pid)
            todo.extend(kids)
        ended = []
        for p in self.procs.values():
            if p.ended_ns is None and p.pid not in alive:
                p.ended_ns = now
                ended.append(p)
                self.changed = True
        return new, ended

    def _evict(self) -> bool:
        gone = [k for k, p in self.procs.items() if p.ended_ns is not None]
        if not gone:
            return False
        k = min(gone, key=lambda k: self.procs[k].ended_ns)
        del self.procs[k]
        return True

    def live(self) -> list[Proc]:
        return [p for p in self.procs.values() if p.ended_ns is None]

    def status_pids(self) -> list[int]:
        return sorted(p.pid for p in self.live())[: self.max_status]

    def ranks(self) -> dict[int, Proc]:
        """rank -> the topmost process that has that rank in its environment (latest one if the
        rank was restarted)."""
        by_pid = {p.pid: p for p in self.procs.values()}
        out: dict[int, Proc] = {}
        for p in self.procs.values():
            r = p.rank
            if r is None:
                continue
            parent = by_pid.get(p.ppid)
            if parent is not None and parent.rank == r:
                continue
            cur = out.get(r)
            if cur is None or p.first_seen_ns > cur.first_seen_ns:
                out[r] = p
        return out

    def launcher(self) -> Proc | None:
        """The process that started the ranks (torchrun's agent), when there is one."""
        ranks = self.ranks()
        parents = {p.ppid for p in ranks.values()}
        for p in self.procs.values():
            if p.pid in parents and p.rank is None:
                return p
        return None

    def env_value(self, key: str) -> str | None:
        for pid in self.roots + sorted(self.procs):
            p = self.procs.get(pid)
            if p and key in p.env:
                return p.env[key]
        return None

    def to_json(self) -> dict:
        return {"method": self.method, "roots": self.roots,
                "procs": [asdict(p) for p in sorted(self.procs.values(), key=lambda p: p.first_seen_ns)]}
