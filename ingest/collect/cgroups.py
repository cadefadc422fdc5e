"""Which cgroups to snapshot, and one snapshot of them.

The job's cgroups come from ``/proc/<pid>/cgroup`` of its processes (``id:controllers:path``;
``0::path`` is the cgroup v2 hierarchy) mapped onto the mounts in ``/proc/self/mountinfo``
(cgroup v1 mounts name their controllers in the super options, ``rw,cpu``; the v2 mount has
fstype ``cgroup2``). ``--cgroup`` takes either a folder inside a cgroup mount
(``/sys/fs/cgroup/memory/job``) or a cgroup path (``/job``) looked up in every mounted
hierarchy. Root cgroups are not snapshotted unless asked for by name (the host-wide view is
already in ``/proc/pressure``, ``/proc/loadavg`` and ``/proc/meminfo``).

A snapshot copies the known files verbatim, under the path they have below
``/sys/fs/cgroup`` (``memory/aftertrace_job/memory.stat``): names that
``ingest/formats/_cgroup_read.resolve`` knows, so the bundle's ``cgroup/<epoch.usec>/...``
folders read as one cgroup series. Besides counters, each snapshot keeps who is in the cgroup
(``cgroup.procs``, ``/proc/<pid>/cgroup`` of the job's processes) and whether it is frozen
(``freezer.state``, ``cgroup.events``): a host finding names the ranks it touched, and a job
frozen by its orchestrator shows as such.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

CGROUP_ROOT = "/sys/fs/cgroup"
# v1 controllers whose files aftertrace reads
V1_WANTED = frozenset({"cpu", "cpuacct", "memory", "pids", "freezer"})
# every cgroup file aftertrace reads (v1 and v2); a folder gets those of them it has
CG_FILES = (
    # cpu v1 / v2
    "cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.max", "cpu.pressure",
    "cpuacct.usage", "cpuacct.stat",
    # memory v1
    "memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.failcnt",
    "memory.memsw.usage_in_bytes", "memory.oom_control", "memory.stat",
    # memory v2
    "memory.current", "memory.max", "memory.high", "memory.peak", "memory.swap.current",
    "memory.events", "memory.pressure",
    # io, pids
    "io.stat", "io.pressure", "pids.current", "pids.max", "pids.events",
    # membership and freezing (v1 freezer, v2 cgroup.events: populated, frozen)
    "cgroup.procs", "freezer.state", "cgroup.events",
)
HOST_FILES = ("/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io", "/proc/loadavg",
              "/proc/meminfo")


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    root: str
    fstype: str                      # cgroup | cgroup2
    controllers: frozenset = field(default_factory=frozenset)


@dataclass(frozen=True)
class CgDir:
    path: str                        # folder on this host
    rel: str                         # its path in a snapshot folder
    version: int
    controllers: tuple = ()
    cgroup: str = "/"                # the cgroup path inside its hierarchy


def _unescape(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[Mount]:
    out = []
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        a, b = left.split(), right.split()
        if len(a) < 5 or len(b) < 3 or b[0] not in ("cgroup", "cgroup2"):
            continue
        ctrls = frozenset(o for o in b[2].split(",") if o not in ("rw", "ro") and "=" not in o
                          and o not in ("relatime", "nsdelegate", "memory_recursiveprot", "noatime",
                                        "nosuid", "nodev", "noexec", "clone_children", "xattr",
                                        "cpuset_v2_mode", "favordynmods", "memory_localevents"))
        out.append(Mount(_unescape(a[4]), _unescape(a[3]), b[0], ctrls if b[0] == "cgroup" else frozenset()))
    return out


def _rel(path: str, mount: Mount) -> str:
    if path == CGROUP_ROOT or path.startswith(CGROUP_ROOT + "/"):
        return os.path.relpath(path, CGROUP_ROOT).replace(os.sep, "/")
    base = os.path.basename(mount.mountpoint.rstrip("/")) or "cgroup"
    sub = os.path.relpath(path, mount.mountpoint).replace(os.sep, "/")
    return base if sub == "." else f"{base}/{sub}"


def _in_mount(mount: Mount, cgpath: str) -> str:
    """The folder of cgroup ``cgpath`` (as /proc/<pid>/cgroup names it) in ``mount``."""
    p = cgpath
    if mount.root not in ("/", "") and (p == mount.root or p.startswith(mount.root.rstrip("/") + "/")):
        p = p[len(mount.root.rstrip("/")):] or "/"
    return os.path.normpath(os.path.join(mount.mountpoint, p.lstrip("/")))


def cgroups_of(pid: int, mounts: list[Mount], include_root: bool = False) -> tuple[list[CgDir], list[str]]:
    """The cgroup folders of a process (and notes on what was left out)."""
    from .host import read_text
    text = read_text(f"/proc/{pid}/cgroup")
    notes: list[str] = []
    if text is None:
        return [], [f"/proc/{pid}/cgroup cannot be read"]
    out: list[CgDir] = []
    seen = set()
    at_root: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, ctrl, cgpath = parts
        if hid == "0" and ctrl == "":
            mounts_v = [m for m in mounts if m.fstype == "cgroup2"]
            version, ctrls = 2, ()
        else:
            want = frozenset(c for c in ctrl.split(",") if c and not c.startswith("name="))
            if not want & V1_WANTED:
                continue
            mounts_v = [m for m in mounts if m.fstype == "cgroup" and want <= m.controllers]
            version, ctrls = 1, tuple(sorted(want))
        if not mounts_v:
            notes.append(f"hierarchy {ctrl or 'v2'} of pid {pid} is not mounted here")
            continue
        if cgpath in ("/", "") and not include_root:
            at_root.append(ctrl or "v2")
            continue
        m = mounts_v[0]
        d = _in_mount(m, cgpath)
        if d in seen:
            continue
        seen.add(d)
        if not os.path.isdir(d):
            notes.append(f"{d} (cgroup {cgpath} of pid {pid}) does not exist here")
            continue
        out.append(CgDir(d, _rel(d, m), version, ctrls, cgpath))
    if at_root:
        notes.append(f"pid {pid} is in the root cgroup of {', '.join(sorted(at_root))} (not snapshotted: "
                     "the host-wide view is /proc/pressure, /proc/loadavg, /proc/meminfo)")
    return out, notes


def resolve_arg(arg: str, mounts: list[Mount]) -> tuple[list[CgDir], list[str]]:
    """``--cgroup`` value -> folders: a folder in a cgroup mount, or a cgroup path looked up in
    every mounted hierarchy that aftertrace reads."""
    notes: list[str] = []
    p = os.path.normpath(arg)
    for m in sorted(mounts, key=lambda m: -len(m.mountpoint)):
        mp = os.path.normpath(m.mountpoint)
        if p == mp or p.startswith(mp + "/"):
            if not os.path.isdir(p):
                return [], [f"--cgroup {arg}: no such folder"]
            cg = "/" + os.path.relpath(p, mp).replace(os.sep, "/") if p != mp else "/"
            return [CgDir(p, _rel(p, m), 2 if m.fstype == "cgroup2" else 1,
                          tuple(sorted(m.controllers)), cg)], notes
    out = []
    for m in mounts:
        if m.fstype == "cgroup" and not (m.controllers & V1_WANTED):
            continue
        d = _in_mount(m, "/" + arg.strip("/"))
        if os.path.isdir(d):
            out.append(CgDir(d, _rel(d, m), 2 if m.fstype == "cgroup2" else 1,
                             tuple(sorted(m.controllers)), "/" + arg.strip("/")))
    if not out:
        notes.append(f"--cgroup {arg}: not found in any mounted cgroup hierarchy "
                     f"({', '.join(m.mountpoint for m in mounts) or 'none mounted'})")
    return out, notes


class Snapshotter:
    """Reads the known files of a set of cgroup folders plus host files, verbatim."""

    def __init__(self):
        self.dirs: list[CgDir] = []
        self._files: dict[str, list[str]] = {}      # folder -> its known files
        self.host_files = [p for p in HOST_FILES if os.path.exists(p)]
        self.vanished: list[str] = []

    def set_dirs(self, dirs: list[CgDir]) -> bool:
        """Replace the folder set; True when it changed."""
        new = {d.path: d for d in dirs}
        if list(new) == [d.path for d in self.dirs]:
            return False
        self.dirs = list(new.values())
        for d in self.dirs:
            if d.path not in self._files:
                try:
                    have = set(os.listdir(d.path))
                except OSError:
                    have = set()
                self._files[d.path] = [f for f in CG_FILES if f in have]
        return True

    def read(self, pids: list[int] = ()) -> dict[str, str]:
        """{path in the snapshot folder: text}."""
        out: dict[str, str] = {}
        for p in self.host_files:
            t = _read(p)
            if t is not None:
                out[p.lstrip("/")] = t
        for d in self.dirs:
            files = self._files.get(d.path, [])
            got = 0
            for fn in files:
                t = _read(os.path.join(d.path, fn))
                if t is not None:
                    out[f"{d.rel}/{fn}"] = t
                    got += 1
            if files and not got and d.path not in self.vanished:
                self.vanished.append(d.path)
        for pid in pids:
            for name in ("status", "cgroup"):
                t = _read(f"/proc/{pid}/{name}")
                if t is not None:
                    out[f"proc/{pid}/{name}"] = t
        return out


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")
