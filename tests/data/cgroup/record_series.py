"""Record real cgroup snapshot series in every layout aftertrace reads (run as root, Linux, cgroup v1
hierarchies at /sys/fs/cgroup/{cpu,cpuacct,memory} plus the v2 'unified' mount).

What happens (times are written to <out>/truth.json):
  * a busy python loop runs in v1 group cpu,cpuacct:/<name> and in v2 unified:/<name>;
  * after --baseline seconds cpu.cfs_quota_us of that group goes -1 -> --quota (period 100000);
  * --leak-after seconds later a second python process in memory:/<name>_mem (limit --mem-mb) starts to
    allocate --leak-mb every --leak-every seconds until the kernel's memcg OOM killer kills it;
  * every --interval seconds one loop (this process) snapshots the files, and writes them in four layouts:
      snapdirs/<ISO-8601 UTC time>/{cpu,cpuacct,memory}/<group>/... , unified/<group>/... , proc/...
      tail.txt      `date +%s.%N` then the real `tail -n +1 FILES...` output (==> path <== headers)
      hashes.txt    `### path @ <date --iso-8601=ns>` then the file, printed by a real bash loop
      series.jsonl  {"t_real_ns", "cgroup", "file", "raw"} per file
  * a point-in-time copy of the groups (sos-like sys/fs/cgroup/... + proc/..., with a `date` file) is taken
    once, right after the throttle change.
Every group it creates is removed on exit. Usage:
    python3 record_series.py --out DIR [--name aftertrace_issue7]
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


def w(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def files_for(name, pids):
    v1cpu = [f"{CG}/cpu/{name}/{n}" for n in ("cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us")]
    acct = [f"{CG}/cpuacct/{name}/cpuacct.usage"]
    mem = [f"{CG}/memory/{name}_mem/{n}" for n in (
        "memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.failcnt",
        "memory.stat", "memory.oom_control")]
    v2 = [f"{CG}/unified/{name}/{n}" for n in ("cpu.stat", "cpu.stat.local", "cpu.pressure", "memory.pressure",
                                                 "io.pressure")]
    host = ["/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io", "/proc/meminfo", "/proc/loadavg"]
    host += [f"/proc/{p}/status" for p in pids if os.path.exists(f"/proc/{p}/status")]
    return v1cpu + acct + mem + v2 + host


def read(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="aftertrace_issue7")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--baseline", type=float, default=6.0)
    ap.add_argument("--quota", type=int, default=20000)
    ap.add_argument("--leak-after", type=float, default=5.0)
    ap.add_argument("--mem-mb", type=int, default=300)
    ap.add_argument("--leak-mb", type=int, default=16)
    ap.add_argument("--leak-every", type=float, default=0.25)
    ap.add_argument("--tail-after-oom", type=float, default=3.0)
    a = ap.parse_args()
    out, name = a.out, a.name
    os.makedirs(out)
    made = [f"{CG}/cpu/{name}", f"{CG}/cpuacct/{name}", f"{CG}/memory/{name}_mem", f"{CG}/unified/{name}"]
    procs = []
    truth = {"name": name, "interval_s": a.interval, "quota_us": a.quota, "period_us": 100000,
             "mem_limit_bytes": a.mem_mb << 20, "leak_mb": a.leak_mb}

    def cleanup(*_):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    try:
        for d in made:
            os.makedirs(d, exist_ok=True)
        w(f"{CG}/memory/{name}_mem/memory.limit_in_bytes", a.mem_mb << 20)
        busy = subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"])
        procs.append(busy)
        for d in (f"{CG}/cpu/{name}", f"{CG}/cpuacct/{name}", f"{CG}/unified/{name}"):
            w(f"{d}/cgroup.procs", busy.pid)
        truth["busy_pid"] = busy.pid
        snapdirs = os.path.join(out, "snapdirs")
        tail = open(os.path.join(out, "tail.txt"), "ab")
        hashes = open(os.path.join(out, "hashes.txt"), "ab")
        jsonl = open(os.path.join(out, "series.jsonl"), "a")
        t0 = time.time()
        leak = None
        throttled = copied = False
        oom_seen_at = None
        n = 0
        while True:
            now = time.time()
            if not throttled and now - t0 >= a.baseline:
                w(f"{CG}/cpu/{name}/cpu.cfs_quota_us", a.quota)
                truth["throttle_applied_ns"] = time.time_ns()
                throttled = True
            if throttled and leak is None and now - t0 >= a.baseline + a.leak_after:
                code = ("import time\nkeep=[]\nwhile True:\n"
                        f"    keep.append(bytearray({a.leak_mb << 20}))\n    time.sleep({a.leak_every})\n")
                leak = subprocess.Popen(["/usr/bin/python3", "-c", code], preexec_fn=lambda: w(
                    f"{CG}/memory/{name}_mem/cgroup.procs", os.getpid()))
                procs.append(leak)
                truth["leak_start_ns"] = time.time_ns()
                truth["leak_pid"] = leak.pid
            pids = [busy.pid] + ([leak.pid] if leak and leak.poll() is None else [])
            files = files_for(name, pids)
            ts = time.time_ns()
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 10**9)) + ".%06dZ" % ((ts // 1000) % 10**6)
            data = {}
            for p in files:
                b = read(p)
                if b is None:
                    continue
                data[p] = b
                rel = p[len(CG) + 1:] if p.startswith(CG) else p.lstrip("/")
                dst = os.path.join(snapdirs, iso, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst, "wb") as f:
                    f.write(b)
                cgroup, _, fname = rel.rpartition("/")
                jsonl.write(json.dumps({"t_real_ns": ts, "cgroup": "/" + cgroup, "file": fname,
                                        "raw": b.decode()}) + "\n")
            jsonl.flush()
            # real tail -n +1 with a date line before each block
            tail.write(subprocess.run(["/usr/bin/date", "+%s.%N"], capture_output=True).stdout)
            tail.write(subprocess.run(["/usr/bin/tail", "-n", "+1"] + list(data), capture_output=True).stdout)
            tail.flush()
            hashes.write(subprocess.run(
                ["/bin/bash", "-c", 'for f in "$@"; do echo "### $f @ $(date --iso-8601=ns)"; cat "$f"; done',
                 "bash"] + list(data), capture_output=True).stdout)
            hashes.flush()
            if throttled and not copied:
                pit = os.path.join(out, "pit")
                for p, b in data.items():
                    rel = ("sys/fs/cgroup/" + p[len(CG) + 1:]) if p.startswith(CG) else p.lstrip("/")
                    os.makedirs(os.path.dirname(os.path.join(pit, rel)), exist_ok=True)
                    with open(os.path.join(pit, rel), "wb") as f:
                        f.write(b)
                with open(os.path.join(pit, "date"), "wb") as f:
                    f.write(subprocess.run(["/usr/bin/date"], capture_output=True).stdout)
                copied = True
            n += 1
            if leak is not None and leak.poll() is not None and oom_seen_at is None:
                oom_seen_at = time.time_ns()
                truth["leak_exit_seen_ns"] = oom_seen_at
                truth["leak_returncode"] = leak.returncode
            if oom_seen_at and time.time_ns() - oom_seen_at > a.tail_after_oom * 1e9:
                break
            if time.time() - t0 > 120:
                truth["gave_up"] = True
                break
            time.sleep(max(0.0, a.interval - (time.time() - now)))
        truth["snapshots"] = n
        for f in (tail, hashes, jsonl):
            f.close()
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump(truth, f, indent=2)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
