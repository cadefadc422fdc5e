"""Record a real snapshot series of cgroup membership, freezer and process state (run as root, Linux,
cgroup v1 hierarchies at /sys/fs/cgroup/{cpu,cpuacct,memory,freezer,pids} plus the v2 'unified' mount).

What happens (times are written to <out>/truth.json):
  * process A (python3, two threads, sleeping 50 ms in a loop) is put in group <name> of every hierarchy;
  * --join s in: process B (/usr/bin/sleep) joins the same groups;
  * A is stopped with SIGSTOP, then continued with SIGCONT;
  * the v1 freezer group is frozen (freezer.state FROZEN), then thawed;
  * B is moved back to the root group of every hierarchy (it leaves <name>; it stays alive);
  * the v2 group is frozen through cgroup.freeze, then unfrozen;
  * B is killed; A is killed and one snapshot is taken before it is reaped (a zombie), one after.
Every --interval seconds this process copies, verbatim, into <out>/vm/cgroup/<epoch s>.<us>/ (the
layout `aftertrace collect` writes): the cgroup files listed in FILES under their /sys/fs/cgroup
path, /proc/pressure/* (also as pressure/<res>, the way some scripts copy them), and /proc/<pid>/status
and /proc/<pid>/cgroup of A and B. Every group it creates is removed on exit. Usage:
    python3 record_membership.py --out DIR [--name aftertrace_members]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

CG = "/sys/fs/cgroup"
FILES = {
    "cpu": ("cpu.stat", "cpu.cfs_quota_us", "cgroup.procs", "tasks", "notify_on_release"),
    "cpuacct": ("cpuacct.usage", "cpuacct.usage_percpu", "cpuacct.stat", "cgroup.procs"),
    "memory": ("memory.usage_in_bytes", "memory.stat", "cgroup.procs", "tasks"),
    "freezer": ("freezer.state", "freezer.self_freezing", "freezer.parent_freezing", "cgroup.procs", "tasks"),
    "pids": ("pids.current", "pids.events", "cgroup.procs"),
    "unified": ("cgroup.procs", "cgroup.threads", "cgroup.events", "cgroup.freeze", "cgroup.controllers",
                "cgroup.stat", "cgroup.type", "cpu.stat", "cpu.pressure", "memory.pressure", "io.pressure"),
}


def w(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def read(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="aftertrace_members")
    ap.add_argument("--interval", type=float, default=0.5)
    a = ap.parse_args()
    out, name = a.out, a.name
    os.makedirs(out)
    made = [f"{CG}/{c}/{name}" for c in FILES]
    procs = []
    truth = {"name": name, "interval_s": a.interval, "steps": []}

    def step(what):
        truth["steps"].append({"what": what, "ns": time.time_ns()})

    def move(pid, to_root=False):
        for c in FILES:
            w(f"{CG}/{c}/cgroup.procs" if to_root else f"{CG}/{c}/{name}/cgroup.procs", pid)

    def cleanup(*_):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for d in made:
            for fn, v in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                if os.path.exists(f"{d}/{fn}"):
                    try:
                        w(f"{d}/{fn}", v)
                    except OSError:
                        pass
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in made:
            for _ in range(50):
                try:
                    if os.path.isdir(d):
                        os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    snaps = os.path.join(out, "vm", "cgroup")
    n = 0

    def snapshot():
        nonlocal n
        ts = time.time_ns()
        d = os.path.join(snaps, f"{ts // 10**9}.{(ts // 1000) % 10**6:06d}")
        copies = {}
        for c, files in FILES.items():
            for fn in files:
                copies[f"{c}/{name}/{fn}"] = f"{CG}/{c}/{name}/{fn}"
        for res in ("cpu", "memory", "io"):
            copies[f"proc/pressure/{res}"] = f"/proc/pressure/{res}"
            copies[f"pressure/{res}"] = f"/proc/pressure/{res}"
        for p in procs:
            for fn in ("status", "cgroup"):
                copies[f"proc/{p.pid}/{fn}"] = f"/proc/{p.pid}/{fn}"
        for rel, src in copies.items():
            b = read(src)
            if b is None:
                continue
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "wb") as f:
                f.write(b)
        n += 1

    try:
        for d in made:
            os.makedirs(d, exist_ok=True)
        code = ("import threading, time\n"
                "def t():\n    while True: time.sleep(0.05)\n"
                "threading.Thread(target=t, daemon=True).start()\nt()\n")
        pa = subprocess.Popen(["/usr/bin/python3", "-c", code])
        procs.append(pa)
        move(pa.pid)
        truth["a_pid"] = pa.pid
        step("A in the groups")
        plan = [(2.0, "B joins"), (3.0, "SIGSTOP A"), (4.5, "SIGCONT A"), (5.5, "freezer FROZEN"),
                (7.0, "freezer THAWED"), (8.0, "B to the root groups"), (9.0, "cgroup.freeze 1"),
                (10.5, "cgroup.freeze 0"), (11.5, "kill B"), (12.0, "kill A")]
        t0 = time.time()
        pb = None
        while plan or n == 0:
            now = time.time() - t0
            while plan and now >= plan[0][0]:
                what = plan.pop(0)[1]
                if what == "B joins":
                    pb = subprocess.Popen(["/usr/bin/sleep", "1000"])
                    procs.append(pb)
                    move(pb.pid)
                    truth["b_pid"] = pb.pid
                elif what == "SIGSTOP A":
                    pa.send_signal(signal.SIGSTOP)
                elif what == "SIGCONT A":
                    pa.send_signal(signal.SIGCONT)
                elif what.startswith("freezer"):
                    w(f"{CG}/freezer/{name}/freezer.state", what.split()[1])
                elif what == "B to the root groups":
                    move(pb.pid, to_root=True)
                elif what.startswith("cgroup.freeze"):
                    w(f"{CG}/unified/{name}/cgroup.freeze", what.split()[1])
                elif what == "kill B":
                    pb.kill()
                    pb.wait()
                elif what == "kill A":
                    pa.kill()
                    time.sleep(0.1)
                step(what)
            snapshot()
            time.sleep(max(0.0, a.interval - (time.time() - t0 - now)))
        pa.wait()          # reaped only now: the snapshot before this one saw a zombie
        step("A reaped")
        snapshot()
        truth["snapshots"] = n
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump(truth, f, indent=2)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
