"""Periodic cgroup v1 snapshot loop (one process, no forks, so it does not pollute
the perf sched_process_* events) plus an OOM watcher for the ground-truth log.

Every --interval seconds it copies, verbatim, into
  <out>/<epoch_seconds.ffffff>/cpu/<cg>/{cpu.stat,cpu.cfs_quota_us,cpu.cfs_period_us}
  <out>/<ts>/cpuacct/<cg>/cpuacct.usage
  <out>/<ts>/memory/<cg>/{memory.usage_in_bytes,memory.limit_in_bytes,memory.max_usage_in_bytes,
                          memory.failcnt,memory.stat,memory.oom_control}
  <out>/<ts>/proc/pressure/{cpu,memory,io}          (only if /proc/pressure exists)
The directory name is CLOCK_REALTIME taken just before the files are read.
Separately (thread, every 50 ms) it appends "oom_kill_seen <epoch_ns> oom_kill=N" to --events
the first time memory.oom_control's oom_kill counter is non-zero.  Stops on SIGTERM/SIGINT.
"""

import argparse
import os
import signal
import threading
import time

FILES = {
    "cpu": ("cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us"),
    "cpuacct": ("cpuacct.usage",),
    "memory": ("memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes",
               "memory.failcnt", "memory.stat", "memory.oom_control"),
}

stop = threading.Event()


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def snapshot(root, out, cg):
    ts = time.time_ns()
    d = os.path.join(out, "%d.%06d" % (ts // 1_000_000_000, (ts // 1000) % 1_000_000))
    for hier, names in FILES.items():
        dst = os.path.join(d, hier, cg)
        os.makedirs(dst, exist_ok=True)
        for n in names:
            data = read_bytes(os.path.join(root, hier, cg, n))
            if data is not None:
                with open(os.path.join(dst, n), "wb") as f:
                    f.write(data)
    if os.path.isdir("/proc/pressure"):
        dst = os.path.join(d, "proc", "pressure")
        os.makedirs(dst, exist_ok=True)
        for n in ("cpu", "memory", "io"):
            data = read_bytes(os.path.join("/proc/pressure", n))
            if data is not None:
                with open(os.path.join(dst, n), "wb") as f:
                    f.write(data)


def oom_watch(root, cg, events):
    path = os.path.join(root, "memory", cg, "memory.oom_control")
    while not stop.is_set():
        data = read_bytes(path)
        if data:
            for line in data.decode().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill" and v.strip() not in ("", "0"):
                    with open(events, "a") as f:
                        f.write("oom_kill_seen %d oom_kill=%s\n" % (time.time_ns(), v.strip()))
                    return
        stop.wait(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cgroup", required=True)
    ap.add_argument("--root", default="/sys/fs/cgroup")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--events")
    a = ap.parse_args()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    if a.events:
        threading.Thread(target=oom_watch, args=(a.root, a.cgroup, a.events), daemon=True).start()
    nxt = time.monotonic()
    while not stop.is_set():
        snapshot(a.root, a.out, a.cgroup)
        nxt += a.interval
        stop.wait(max(0.0, nxt - time.monotonic()))


if __name__ == "__main__":
    main()
