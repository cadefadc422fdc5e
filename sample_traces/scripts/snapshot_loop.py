"""Periodic cgroup v1 + /proc snapshots, the way people script them by hand: every
--interval seconds, verbatim copies of the files into a folder named by the time.

    <out>/<epoch_s.ffffff>/<hierarchy>/<cgroup path>/<file>     for every --cgroup, in every
                                                                 hierarchy that has it
    <out>/<epoch_s.ffffff>/proc/pressure/{cpu,memory,io}
    <out>/<epoch_s.ffffff>/proc/{loadavg,meminfo}

Per hierarchy it copies the usual counters plus ``cgroup.procs`` and ``tasks`` (who is in
the group). The folder name is CLOCK_REALTIME read just before the files. One process, no
forks (nothing of it shows in perf's process events). Stops on SIGTERM/SIGINT.
"""

import argparse
import os
import signal
import threading
import time

FILES = {
    "cpu": ("cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cgroup.procs", "tasks"),
    "cpuacct": ("cpuacct.usage", "cpuacct.stat", "cgroup.procs"),
    "memory": ("memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes",
               "memory.failcnt", "memory.stat", "memory.oom_control", "cgroup.procs", "tasks"),
    "freezer": ("freezer.state", "cgroup.procs"),
}
PROC = ("pressure/cpu", "pressure/memory", "pressure/io", "loadavg", "meminfo")

stop = threading.Event()


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def snapshot(root, out, cgroups):
    ts = time.time_ns()
    d = os.path.join(out, "%d.%06d" % (ts // 1_000_000_000, (ts // 1000) % 1_000_000))
    for cg in cgroups:
        for hier, names in FILES.items():
            src = os.path.join(root, hier, cg)
            if not os.path.isdir(src):
                continue
            for n in names:
                data = read_bytes(os.path.join(src, n))
                if data is not None:
                    put(os.path.join(d, hier, cg, n), data)
    for n in PROC:
        data = read_bytes(os.path.join("/proc", n))
        if data is not None:
            put(os.path.join(d, "proc", n), data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cgroup", action="append", required=True, help="cgroup path below each hierarchy")
    ap.add_argument("--root", default="/sys/fs/cgroup")
    ap.add_argument("--interval", type=float, default=0.5)
    a = ap.parse_args()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    nxt = time.monotonic()
    while not stop.is_set():
        snapshot(a.root, a.out, [c.strip("/") for c in a.cgroup])
        nxt += a.interval
        stop.wait(max(0.0, nxt - time.monotonic()))


if __name__ == "__main__":
    main()
