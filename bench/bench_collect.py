"""Overhead of ``aftertrace collect``: CPU % of the recorder and disk MB/minute over a fixed period.

Runs the recorder (``python -m aftertrace.ingest.collect``, the same process ``aftertrace collect`` execs
into) around a small stand-in job — a parent and two "ranks" (``RANK`` in their environment)
that each print a log line every 0.2 s — and measures, between a warm-up and the end of the
period:

* recorder CPU %: utime + stime of the recorder process (all its threads) / wall time, from
  ``/proc/<pid>/stat``; perf's own CPU (a child process) separately when ``--perf``;
* disk: bytes the recorder wrote (``/proc/<pid>/io`` ``wchar``: the ring, gzip of closed
  segments, state files; the job's output is not passed through here) and the growth of the
  ring folder on disk (after compression and pruning), both per minute;
* resident memory of the recorder at the end;

then asks for a bundle (the request file) and reports how long writing it took and its size,
and stops the job cleanly. Usage::

    .venv/bin/python bench/bench_collect.py --seconds 60 [--interval 1s] [--perf] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aftertrace.ingest.collect.recorder import disk_usage as du  # noqa: E402

JOB_RANK = r"""
import os, sys, time
stop, r = sys.argv[1], os.environ["RANK"]
i = 0
while not os.path.exists(stop):
    print(f"2026-01-01 00:00:00,000 INFO [rank{r}] train: step={i} step_time=0.200s loss=1.0", flush=True)
    i += 1
    time.sleep(0.2)
"""


def ticks(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def wchar(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int, comm: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        c = s[s.find("(") + 1:s.rfind(")")]
        ppid = int(s[s.rfind(")") + 2:].split()[1])
        if ppid == pid and c == comm:
            out.append(int(d))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured period (after a 5 s warm-up)")
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--keep", default="15m")
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--out", default="/tmp/aftertrace-bench-collect")
    ap.add_argument("--json", help="write the numbers here too")
    a = ap.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stop = out / "stop-job"
    (out / "rank.py").write_text(JOB_RANK)
    job = ["sh", "-c", f"for r in 0 1; do RANK=$r {sys.executable} {out}/rank.py {stop} & done; wait"]
    cmd = [sys.executable, "-m", "aftertrace.ingest.collect", "--out", str(out / "c"), "--keep", a.keep,
           "--interval", a.interval, "--no-gpu", "--quiet-output"] + (["--perf"] if a.perf else []) + ["--"] + job
    rec = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(5.0)                                   # warm-up: setup, perf start, first segments
        ring = out / "c" / "ring"
        t0, c0, w0, d0 = time.monotonic(), ticks(rec.pid), wchar(rec.pid), du(ring)
        perf0 = {p: ticks(p) for p in children(rec.pid, "perf")}
        time.sleep(a.seconds)
        t1, c1, w1, d1 = time.monotonic(), ticks(rec.pid), wchar(rec.pid), du(ring)
        perf1 = {p: ticks(p) for p in children(rec.pid, "perf")}
        rss = rss_kb(rec.pid)
        wall = t1 - t0
        res = {"seconds": round(wall, 1), "interval": a.interval, "perf": a.perf,
               "collector_cpu_percent": round(100 * (c1 - c0) / wall, 2),
               "collector_disk_writes_mb_per_min": round((w1 - w0) / 1e6 / wall * 60, 3),
               "ring_growth_on_disk_mb_per_min": round((d1 - d0) / 1e6 / wall * 60, 3),
               "ring_on_disk_mb": round(d1 / 1e6, 2), "collector_rss_mb": round((rss or 0) / 1024, 1)}
        if a.perf:
            pc = sum((perf1.get(p) or 0) - (perf0.get(p) or 0) for p in perf1)
            res["perf_cpu_percent"] = round(100 * pc / wall, 2)
            perf_dir = ring / "perf"
            res["perf_data_on_disk_mb"] = round(du(perf_dir) / 1e6, 2)
        # a bundle on request
        tb = time.monotonic()
        (out / "c" / "trigger").write_text("bench\n")
        bundle = None
        while time.monotonic() - tb < 300:
            found = [p for p in (out / "c").glob("bundle-*") if p.is_dir()]
            if found:
                bundle = found[0]
                break
            time.sleep(0.1)
        if bundle is not None:
            man = json.loads((bundle / "aftertrace-manifest.json").read_text())
            res["bundle_write_s_after_linger"] = round(time.monotonic() - tb - 5.0, 2)
            res["bundle_mb"] = round(du(bundle) / 1e6, 2)
            res["bundle_files"] = sum(len(f) for _, _, f in os.walk(bundle))
            col = man["collector"]
            res["snapshot_ms_mean"] = col.get("snapshot_ms_mean")
            res["ring_bytes_written_mb_per_min"] = round(col["ring_bytes_written"] / 1e6 / col["wall_s"] * 60, 3)
            res["captured"] = [c["what"] for c in man["captured"]]
    finally:
        stop.write_text("")
        try:
            rc = rec.wait(60)
        except subprocess.TimeoutExpired:
            rec.terminate()
            rc = rec.wait()
    res["collector_exit"] = rc
    print(json.dumps(res, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
