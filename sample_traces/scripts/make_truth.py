"""Write the ground-truth JSON for a recorded bundle (stdout).

Reads the recorder's scratch directory (events.log, side/*.json, clocks.*.json) and the
bundle itself (host anchors, dmesg, torchrun.log, perf header, cgroup snapshots).
Standard library only; run with the system python3.  The truth file is for tests and
is NOT part of the bundle.
"""

import argparse
import glob
import gzip
import json
import os
import re
import subprocess
import time


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def parse_events(path):
    out = {}
    for line in read(path).splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        attrs = {}
        for kv in parts[2:]:
            k, _, v = kv.partition("=")
            attrs[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
        out[parts[0]] = {"epoch_ns": int(parts[1]), **attrs}
    return out


def anchors(hostdir, phase):
    d = os.path.join(hostdir, phase)
    up = read(os.path.join(d, "proc_uptime")).split()
    btime = None
    for line in read(os.path.join(d, "proc_stat")).splitlines():
        if line.startswith("btime "):
            btime = int(line.split()[1])
    return {
        "proc_uptime": read(os.path.join(d, "proc_uptime")).strip(),
        "uptime_s": float(up[0]),
        "date_epoch": read(os.path.join(d, "date_epoch")).strip(),
        "date": read(os.path.join(d, "date")).strip(),
        "date_iso": read(os.path.join(d, "date_iso")).strip(),
        "btime": btime,
    }


def kmsg_clock_marker():
    """Measure printk clock (local_clock) vs CLOCK_MONOTONIC/REALTIME on this host by
    writing one marker line to /dev/kmsg (AFTER the bundle's dmesg was captured)."""
    tag = "aftertrace-truth-clock-marker-%d" % os.getpid()
    try:
        before = (time.clock_gettime_ns(time.CLOCK_REALTIME), time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        with open("/dev/kmsg", "w") as f:
            f.write(tag + "\n")
        after = (time.clock_gettime_ns(time.CLOCK_REALTIME), time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
        m = re.search(r"^\[\s*(\d+\.\d+)\] " + re.escape(tag), out, re.M)
        if not m:
            return None
        printk_s = float(m.group(1))
        mono_mid = (before[1] + after[1]) / 2e9
        real_mid = (before[0] + after[0]) / 2e9
        return {
            "printk_s": printk_s,
            "monotonic_s_mid": round(mono_mid, 6),
            "realtime_s_mid": round(real_mid, 6),
            "printk_minus_monotonic_s": round(printk_s - mono_mid, 6),
            "read_window_s": round((after[1] - before[1]) / 1e9, 6),
            "note": "marker written after the bundle's dmesg was captured; it is not in dmesg.txt",
        }
    except OSError:
        return None


def versions(torch_py):
    out = {}
    for key, cmd in (("perf", ["perf", "--version"]), ("kernel", ["uname", "-r"]),
                     ("torch", [torch_py, "-c", "import torch;print(torch.__version__)"]),
                     ("python", [torch_py, "--version"])):
        try:
            out[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out[key] = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--cgroup", required=True)
    ap.add_argument("--mem-limit-bytes", type=int, required=True)
    ap.add_argument("--leak-mb", type=int, required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--torch-py", default="")
    ap.add_argument("--params", default="")
    a = ap.parse_args()

    hostdir = os.path.join(a.bundle, a.host)
    ev = parse_events(os.path.join(a.work, "events.log"))
    side = {}
    for p in glob.glob(os.path.join(a.work, "side", "*.json")):
        side[os.path.basename(p)[:-5]] = json.loads(read(p))

    ranks = {}
    for k, v in sorted(side.items()):
        if k.startswith("rank"):
            ranks[str(v["rank"])] = {"pid": v["pid"], "local_rank": v["local_rank"],
                                     "ppid": v["ppid"], "init_done_epoch_ns": v["init_done_ns"]}

    # ---- dmesg: the memcg OOM kill
    dmesg = read(os.path.join(hostdir, "dmesg.txt")).splitlines()
    dmesg_t = read(os.path.join(hostdir, "dmesg_T.txt")).splitlines()
    job_pids = {r["pid"] for r in ranks.values()}
    kills = []
    for i, line in enumerate(dmesg):
        m = re.match(r"^\[\s*(\d+\.\d+)\] Memory cgroup out of memory: Killed process (\d+) \(([^)]*)\)", line)
        if m:
            k = {"dmesg_line_no": i + 1, "dmesg_line": line, "boot_s": float(m.group(1)),
                 "killed_pid": int(m.group(2)), "killed_comm": m.group(3)}
            if i < len(dmesg_t):
                k["dmesg_T_line"] = dmesg_t[i]
            kills.append(k)
    # the job's kill (earlier runs may still be in the ring buffer)
    mine = [k for k in kills if k["killed_pid"] in job_pids]
    oom = (mine or kills or [None])[0]
    other_oom_kills_in_dmesg = [k["dmesg_line"] for k in kills if k is not oom]
    pid_s = "pid=%d," % oom["killed_pid"] if oom else "\0"
    constraint = [l for l in dmesg if "oom-kill:constraint=" in l and pid_s in l]
    start = (oom["dmesg_line_no"] - 1) if oom else 0
    invoked = [l for l in dmesg[max(0, start - 200):start] if "invoked oom-killer" in l][-1:]
    reaper = [l for l in dmesg[start:] if oom and "oom_reaper: reaped process %d " % oom["killed_pid"] in l]
    clocks = {}
    for phase in ("start", "end"):
        p = os.path.join(a.work, "clocks.%s.json" % phase)
        if os.path.exists(p):
            clocks[phase] = json.loads(read(p))
    marker = kmsg_clock_marker()
    if oom and "start" in clocks:
        c = clocks["start"]
        off = (c["realtime_ns"] - c["monotonic_ns"]) / 1e9
        if marker:
            # printk time -> monotonic -> realtime
            oom["epoch_s_est"] = round(oom["boot_s"] - marker["printk_minus_monotonic_s"] + off, 6)
        else:
            oom["epoch_s_est"] = round(oom["boot_s"] + off, 6)
        oom["utc_est"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(oom["epoch_s_est"])) + \
            ".%06dZ" % round((oom["epoch_s_est"] % 1) * 1e6)
        oom["epoch_s_est_method"] = ("printk seconds + (REALTIME - MONOTONIC at start), corrected by the "
                                     "measured printk-minus-MONOTONIC marker offset")
    oom_block = {"first_line": invoked[0] if invoked else None,
                 "constraint_line": constraint[0] if constraint else None,
                 "reaper_line": reaper[0] if reaper else None,
                 "other_oom_kills_in_dmesg": other_oom_kills_in_dmesg}

    # ---- torchrun.log
    tlog_path = os.path.join(hostdir, "logs", "torchrun.log")
    tlog = read(tlog_path).splitlines() if os.path.exists(tlog_path) else []
    tr = {"exitcode_lines": [l for l in tlog if "exitcode" in l],
          "child_failed_error": any("ChildFailedError" in l for l in tlog),
          "sigterm_lines": [l for l in tlog if "closing signal" in l]}
    last_step = {}
    for l in tlog:
        m = re.search(r"\[rank(\d+)\] train: step=(\d+) step_time=([\d.]+)s", l)
        if m:
            last_step[m.group(1)] = {"step": int(m.group(2)), "line": l}
    tr["last_step_line_per_rank"] = last_step

    # ---- perf header
    perf_hdr = {}
    for p in glob.glob(os.path.join(hostdir, "perf", "perf.script.txt*")):
        for l in read(p).splitlines()[:60]:
            for key in ("captured on", "hostname", "os release", "perf version", "cmdline",
                        "time of first sample", "time of last sample", "clockid", "reference time"):
                if l.startswith("# " + key):
                    perf_hdr[key] = l[2:].split(":", 1)[1].strip() if key != "reference time" else l[2:]
        perf_hdr["file"] = os.path.relpath(p, a.bundle)

    # ---- cgroup snapshots
    snaps = sorted(os.listdir(os.path.join(hostdir, "cgroup")), key=float)
    first_throttled = None
    quota_change = None
    prev_q = None
    peak_usage = 0
    for s in snaps:
        base = os.path.join(hostdir, "cgroup", s)
        q = os.path.join(base, "cpu", a.cgroup, "cpu.cfs_quota_us")
        if os.path.exists(q):
            qv = int(read(q))
            if prev_q is not None and qv != prev_q and quota_change is None:
                quota_change = {"before": s_prev, "after": s, "from": prev_q, "to": qv}
            prev_q, s_prev = qv, s
        st = os.path.join(base, "cpu", a.cgroup, "cpu.stat")
        if first_throttled is None and os.path.exists(st):
            kv = dict(l.split() for l in read(st).splitlines() if l.strip())
            if int(kv.get("nr_throttled", 0)) > 0:
                first_throttled = {"snapshot": s, "cpu.stat": kv}
        u = os.path.join(base, "memory", a.cgroup, "memory.usage_in_bytes")
        if os.path.exists(u):
            peak_usage = max(peak_usage, int(read(u)))

    profiler = sorted(os.path.relpath(p, a.bundle) for p in glob.glob(os.path.join(hostdir, "profiler", "*")))

    truth = {
        "schema": "aftertrace.sample_truth/1",
        "bundle": os.path.basename(os.path.normpath(a.bundle)),
        "host": a.host,
        "recorded_with": a.command,
        "params": dict(kv.split("=", 1) for kv in a.params.split()),
        "versions": versions(a.torch_py),
        "boot_id": read(os.path.join(hostdir, "host", "boot_id")).strip(),
        "uname": read(os.path.join(hostdir, "host", "uname_a")).strip(),
        "time_zone": "UTC" if "UTC" in read(os.path.join(hostdir, "host", "start", "date")) else "see host/start/date",
        "events": ev,
        "pids": {"torchrun": ev.get("job_start", {}).get("torchrun_pid"), "ranks": ranks},
        "leak": {"mb_per_step": a.leak_mb, **({"first_leak_step": side["leak_start"]["step"],
                                                "first_leak_epoch_ns": side["leak_start"]["ts_ns"],
                                                "pid": side["leak_start"]["pid"]} if "leak_start" in side else {})},
        "cgroup": {"name": a.cgroup, "memory.limit_in_bytes": a.mem_limit_bytes,
                   "snapshots": len(snaps), "first_snapshot": snaps[0] if snaps else None,
                   "last_snapshot": snaps[-1] if snaps else None,
                   "quota_change_between_snapshots": quota_change,
                   "first_snapshot_with_nr_throttled_gt_0": first_throttled,
                   "peak_memory.usage_in_bytes_seen": peak_usage},
        "oom_kill": oom, "oom_kill_context": oom_block,
        "torchrun_log": tr,
        "perf_header": perf_hdr,
        "host_anchors": {"start": anchors(os.path.join(hostdir, "host"), "start"),
                         "end": anchors(os.path.join(hostdir, "host"), "end"),
                         "clock_gettime": clocks,
                         "printk_vs_monotonic": marker},
        "profiler_files": profiler,
    }
    print(json.dumps(truth, indent=2))


if __name__ == "__main__":
    main()
