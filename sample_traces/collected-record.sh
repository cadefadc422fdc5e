#!/usr/bin/env bash
# Record a REAL incident with `aftertrace collect` (the black-box recorder) and keep its bundle.
#
# Usage (as root; cgroup v1 cpu, cpuacct and memory hierarchies under /sys/fs/cgroup):
#   TORCH_PY=/opt/torchenv/bin/python sample_traces/collected-record.sh oom  [WORK_DIR] [KEEP_AS]
#   TORCH_PY=/opt/torchenv/bin/python sample_traces/collected-record.sh hang [WORK_DIR] [KEEP_AS]
# KEEP_AS (optional): copy the bundle to that folder and write <KEEP_AS>.truth.json next to it.
#
# Unlike record_oom_after_throttle.sh, nothing here gathers files: the collector does. This
# script only makes the job fail and notes, for the truth file, when it did what:
#
#   oom   a 2-rank gloo torchrun job (scripts/train_job.py) runs under
#         `aftertrace collect --perf --files <profiler traces> -- torchrun ...`, the whole command
#         inside new cgroups cpu,cpuacct,memory:/$CG_NAME (memory.limit_in_bytes MEM_LIMIT_MB).
#         At BASELINE_S cpu.cfs_quota_us is cut to THROTTLE_QUOTA_US; THROTTLE_S later a flag file
#         makes rank 0 leak LEAK_MB per step until the memory cgroup's OOM killer kills it.
#   hang  the same launcher with scripts/record_logs_job.py: rank 1 sleeps forever before the
#         all_reduce of step FAULT_STEP; rank 0 waits in that all_reduce until gloo's timeout
#         (PG_TIMEOUT_S), raises, and torchrun tears the job down. The collector's default
#         watchdog pattern (gloo's "Timed out waiting ...ms for recv operation") triggers too.
#
# Phases are longer than record_oom_after_throttle.sh's (20 s + 30 s instead of 18 + 15): the job
# starts ~10 s slower here (the collector and perf share its 0.3-CPU quota), and the memory_growth
# detector measures the leak against the cgroup's quiet level, which needs enough quiet snapshots.
# KEEP=2m keeps trial runs' OOM kills (earlier than 2 minutes) out of the bundle's kernel log.
#
# The cgroups are removed and the background helpers stopped on exit (also on Ctrl-C).
set -euo pipefail

SCENARIO=${1:?usage: $0 oom|hang [WORK_DIR] [KEEP_AS]}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
WORK=${2:-$(mktemp -d /tmp/aftertrace-collect-rec.XXXXXX)}
KEEP_AS=${3:-}
PY=${TORCH_PY:-/opt/torchenv/bin/python}
TORCHRUN=$(dirname "$PY")/torchrun
AFTERTRACE=${AFTERTRACE:-$ROOT/.venv/bin/aftertrace}
SYS_PY=${SYS_PY:-$(python3 -c 'import sys; print(sys.executable)')}
CG_NAME=${CG_NAME:-aftertrace_collect_$SCENARIO}
BASELINE_S=${BASELINE_S:-20}
THROTTLE_S=${THROTTLE_S:-30}
THROTTLE_QUOTA_US=${THROTTLE_QUOTA_US:-30000}
CFS_PERIOD_US=${CFS_PERIOD_US:-100000}
MEM_LIMIT_MB=${MEM_LIMIT_MB:-2560}
LEAK_MB=${LEAK_MB:-256}
BATCH=${AFTERTRACE_BATCH:-512}
FAULT_STEP=${FAULT_STEP:-20}
PG_TIMEOUT_S=${PG_TIMEOUT_S:-20}
KEEP=${KEEP:-2m}
INTERVAL=${INTERVAL:-0.5s}     # as record_oom_after_throttle.sh; at 1s a trial run's leak looked too smooth to the memory_growth detector
DEADLINE_S=${DEADLINE_S:-240}

die() { echo "collected-record: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ -x "$PY" ] || die "torch python not found: $PY (set TORCH_PY)"
[ -x "$TORCHRUN" ] || die "torchrun not found next to $PY"
[ -x "$AFTERTRACE" ] || die "aftertrace not found: $AFTERTRACE"
case "$SCENARIO" in oom|hang) ;; *) die "scenario must be oom or hang";; esac
for f in cpu/cpu.cfs_quota_us cpuacct/cpuacct.usage memory/memory.limit_in_bytes; do
  [ -f /sys/fs/cgroup/$f ] || die "cgroup v1 file /sys/fs/cgroup/$f missing"
done
[ -n "$KEEP_AS" ] && [ -e "$KEEP_AS" ] && die "$KEEP_AS exists; remove it first"

mkdir -p "$WORK"/{side,profiler,cwd,torchrun_logs}
EV=$WORK/events.log
: > "$EV"
FLAG=$WORK/leak.flag
OUT=$WORK/collect
CPU_CG=/sys/fs/cgroup/cpu/$CG_NAME
ACCT_CG=/sys/fs/cgroup/cpuacct/$CG_NAME
MEM_CG=/sys/fs/cgroup/memory/$CG_NAME

ev() { local t=$EPOCHREALTIME; echo "$1 ${t/./}000 ${*:2}" >> "$EV"; }
exec {NAPFD}<> <(:)
nap() { read -r -t "$1" -u "$NAPFD" _ || true; }

COL_PID= WATCH_PID=
CREATED_CGS=()
cleanup() {
  set +e
  trap '' INT TERM
  [ -n "$COL_PID" ] && kill -0 "$COL_PID" 2>/dev/null && { kill -TERM "$COL_PID"; sleep 5; kill -KILL "$COL_PID"; }
  [ -n "$WATCH_PID" ] && { kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null; }
  for cg in "${CREATED_CGS[@]}"; do
    [ -d "$cg" ] || continue
    while read -r t; do kill -KILL "$t" 2>/dev/null; done < "$cg/cgroup.procs"
    for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
    [ -d "$cg" ] && echo "collected-record: WARNING could not remove $cg" >&2
  done
  rm -f "$FLAG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for cg in "$CPU_CG" "$ACCT_CG" "$MEM_CG"; do
  [ -d "$cg" ] && die "$cg already exists (left over?); rmdir it first"
  mkdir "$cg"
  CREATED_CGS+=("$cg")
done
echo "$CFS_PERIOD_US" > "$CPU_CG/cpu.cfs_period_us"
echo -1 > "$CPU_CG/cpu.cfs_quota_us"
if [ "$SCENARIO" = oom ]; then
  echo 0 > "$MEM_CG/memory.swappiness" 2>/dev/null || true
  echo $((MEM_LIMIT_MB << 20)) > "$MEM_CG/memory.limit_in_bytes"
  [ -f "$MEM_CG/memory.memsw.limit_in_bytes" ] && echo $((MEM_LIMIT_MB << 20)) > "$MEM_CG/memory.memsw.limit_in_bytes"
fi

# ground truth only (not in the bundle): the kernel clocks at the start, and the OOM counter
"$SYS_PY" -c 'import time,json;print(json.dumps({"realtime_ns":time.clock_gettime_ns(time.CLOCK_REALTIME),"monotonic_ns":time.clock_gettime_ns(time.CLOCK_MONOTONIC),"boottime_ns":time.clock_gettime_ns(time.CLOCK_BOOTTIME)}))' > "$WORK/clocks.start.json"
"$SYS_PY" - "$MEM_CG/memory.oom_control" "$EV" <<'PYEOF' &
import sys, time
path, ev = sys.argv[1], sys.argv[2]
while True:
    try:
        kv = dict(l.split() for l in open(path).read().splitlines() if l.strip())
    except OSError:
        break
    if kv.get("oom_kill", "0") != "0":
        with open(ev, "a") as f:
            f.write("oom_kill_seen %d oom_kill=%s\n" % (time.time_ns(), kv["oom_kill"]))
        break
    time.sleep(0.05)
PYEOF
WATCH_PID=$!

if [ "$SCENARIO" = oom ]; then
  JOB=("$TORCHRUN" --standalone --nnodes=1 --nproc_per_node=2 --log-dir "$WORK/torchrun_logs" --tee 3
       "$SCRIPT_DIR/scripts/train_job.py")
  COLLECT_ARGS=(--out "$OUT" --keep "$KEEP" --interval "$INTERVAL" --perf
                --files "$WORK/profiler/*.pt.trace.json.gz")
else
  JOB=("$TORCHRUN" --standalone --nnodes=1 --nproc_per_node=2 --log-dir "$WORK/torchrun_logs" --tee 3
       "$SCRIPT_DIR/scripts/record_logs_job.py")
  COLLECT_ARGS=(--out "$OUT" --keep "$KEEP" --interval "$INTERVAL" --perf)
fi

# the whole `aftertrace collect -- torchrun ...` command runs inside the job's cgroups
(
  echo "$BASHPID" > "$CPU_CG/cgroup.procs"
  echo "$BASHPID" > "$ACCT_CG/cgroup.procs"
  echo "$BASHPID" > "$MEM_CG/cgroup.procs"
  cd "$WORK/cwd"
  export AFTERTRACE_PROFILER_DIR=$WORK/profiler AFTERTRACE_LEAK_FLAG=$FLAG AFTERTRACE_LEAK_MB=$LEAK_MB \
         AFTERTRACE_SIDE_DIR=$WORK/side AFTERTRACE_BATCH=$BATCH PYTHONUNBUFFERED=1 \
         AFTERTRACE_FAULT=hang AFTERTRACE_FAULT_STEP=$FAULT_STEP AFTERTRACE_FAULT_RANK=1 \
         AFTERTRACE_HANG_S=100000000 AFTERTRACE_PG_TIMEOUT_S=$PG_TIMEOUT_S AFTERTRACE_MAX_STEPS=1000000
  exec setsid "$AFTERTRACE" collect "${COLLECT_ARGS[@]}" -- "${JOB[@]}"
) > "$WORK/collect.stdout" 2> "$WORK/collect.stderr" &
COL_PID=$!
ev job_start collector_pid=$COL_PID
T0=$SECONDS

wait_until() { while [ $((SECONDS - T0)) -lt "$1" ]; do kill -0 "$COL_PID" 2>/dev/null || return 1; nap 0.2; done; }
if [ "$SCENARIO" = oom ]; then
  if wait_until "$BASELINE_S"; then
    echo "$THROTTLE_QUOTA_US" > "$CPU_CG/cpu.cfs_quota_us"
    ev throttle_applied cfs_quota_us=$THROTTLE_QUOTA_US cfs_period_us=$CFS_PERIOD_US
    if wait_until $((BASELINE_S + THROTTLE_S)); then
      touch "$FLAG"
      ev leak_flag_set leak_mb_per_step=$LEAK_MB
    fi
  fi
fi
while kill -0 "$COL_PID" 2>/dev/null; do
  if [ $((SECONDS - T0)) -ge "$DEADLINE_S" ]; then
    ev deadline_kill; kill -TERM "$COL_PID"; sleep 10; kill -KILL "$COL_PID" 2>/dev/null || true
  fi
  nap 0.1
done
rc=0; wait "$COL_PID" || rc=$?
ev collector_end exit_code=$rc
COL_PID=

BUNDLE=$(ls -d "$OUT"/bundle-* 2>/dev/null | tail -1 || true)
[ -n "$BUNDLE" ] || die "no bundle was written (see $WORK/collect.stderr)"
echo "collected-record: collector exit status $rc; bundle $BUNDLE"

if [ -n "$KEEP_AS" ]; then
  cp -r "$BUNDLE" "$KEEP_AS"
  LEAK_MB=$LEAK_MB "$SYS_PY" - "$SCENARIO" "$WORK" "$KEEP_AS" "$MEM_CG" \
      "collected-record.sh $SCENARIO (CG_NAME=$CG_NAME BASELINE_S=$BASELINE_S THROTTLE_S=$THROTTLE_S THROTTLE_QUOTA_US=$THROTTLE_QUOTA_US CFS_PERIOD_US=$CFS_PERIOD_US MEM_LIMIT_MB=$MEM_LIMIT_MB LEAK_MB=$LEAK_MB AFTERTRACE_BATCH=$BATCH FAULT_STEP=$FAULT_STEP PG_TIMEOUT_S=$PG_TIMEOUT_S KEEP=$KEEP INTERVAL=$INTERVAL)" \
      "$rc" "$PY" <<'PYEOF' > "${KEEP_AS%/}.truth.json"
import glob, json, os, re, subprocess, sys, time
scenario, work, bundle, mem_cg, cmd, rc, torch_py = sys.argv[1:8]
host = next(d for d in os.listdir(bundle) if os.path.isdir(os.path.join(bundle, d)))
hd = os.path.join(bundle, host)
man = json.load(open(os.path.join(bundle, "aftertrace-manifest.json")))
ev = {}
for line in open(os.path.join(work, "events.log")):
    p = line.split()
    ev[p[0]] = {"epoch_ns": int(p[1]), **{k: (int(v) if re.fullmatch(r"-?\d+", v) else v)
                                         for k, v in (x.split("=", 1) for x in p[2:])}}
side = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(os.path.join(work, "side", "*.json"))}
ranks = {str(v["rank"]): {"pid": v["pid"], "local_rank": v["local_rank"], "ppid": v["ppid"],
                           "init_done_epoch_ns": v["init_done_ns"]} for k, v in side.items() if k.startswith("rank")}
log = open(glob.glob(os.path.join(hd, "logs", "*.log"))[0], errors="replace").read().splitlines()
if not ranks:   # record_logs_job.py writes no side files: its init lines name each rank's pid
    for l in log:
        m = re.search(r"\[rank(\d+)\] train: initialized process group .* local_rank=(\d+) pid=(\d+)", l)
        if m:
            ranks[m.group(1)] = {"pid": int(m.group(3)), "local_rank": int(m.group(2)), "from": l}
clocks = json.load(open(os.path.join(work, "clocks.start.json")))
off = (clocks["realtime_ns"] - clocks["monotonic_ns"]) / 1e9
kills = []
dm = os.path.join(hd, "dmesg.txt")
for i, l in enumerate(open(dm, errors="replace").read().splitlines() if os.path.exists(dm) else []):
    m = re.match(r"^\[\s*(\d+\.\d+)\] Memory cgroup out of memory: Killed process (\d+) \(([^)]*)\)", l)
    if m and str(m.group(2)) in {str(r["pid"]) for r in ranks.values()}:
        kills.append({"dmesg_line_no": i + 1, "dmesg_line": l, "boot_s": float(m.group(1)),
                      "killed_pid": int(m.group(2)), "epoch_s_est": round(float(m.group(1)) + off, 6),
                      "epoch_s_est_method": "printk seconds + (REALTIME - MONOTONIC read at the start; "
                                            "printk's clock is within ~1 ms of MONOTONIC on this host)"})
def ver(c):
    try:
        return subprocess.run(c, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception:
        return None
truth = {
    "schema": "aftertrace.sample_truth/1", "bundle": os.path.basename(os.path.normpath(bundle)), "host": host,
    "recorded_with": cmd, "scenario": scenario,
    "versions": {"perf": ver(["perf", "--version"]), "kernel": ver(["uname", "-r"]),
                 "torch": ver([torch_py, "-c", "import torch;print(torch.__version__)"])},
    "boot_id": man["hosts"][host]["boot_id"], "time_zone": man["time_zone"],
    "events": ev, "collector_exit_status": int(rc),
    "pids": {"ranks": ranks, "launcher": (man["job"].get("launcher") or {}).get("pid")},
    "clock_gettime_start": clocks,
    "manifest_trigger": man["trigger"],
    "torchrun_log": {"child_failed_error": any("ChildFailedError" in l for l in log),
                     "exitcode_lines": [l for l in log if "exitcode" in l][:6],
                     "fault_lines": [l for l in log if "injecting fault" in l or "Timed out waiting" in l][:4]},
}
if scenario == "oom":
    truth["leak"] = {"mb_per_step": int(os.environ.get("LEAK_MB", "256")), **(
        {"first_leak_step": side["leak_start"]["step"], "first_leak_epoch_ns": side["leak_start"]["ts_ns"],
         "pid": side["leak_start"]["pid"]} if "leak_start" in side else {})}
    truth["oom_kill"] = kills[0] if kills else None
    truth["expected_chain"] = ["cpu_throttle", "memory_growth", "oom_kill", "job_failure"]
else:
    truth["expected_chain"] = ["rank_stalled (rank 1)", "collective_timeout (rank 0)", "job_failure"]
print(json.dumps(truth, indent=2))
PYEOF
  echo "collected-record: kept as $KEEP_AS, truth in ${KEEP_AS%/}.truth.json"
fi
echo "collected-record: work folder $WORK"
