#!/usr/bin/env bash
# Record a REAL "OOM kill after CPU throttling" crash bundle on this Linux host.
#
# Usage (as root, cgroup v1 cpu/cpuacct/memory hierarchies mounted under /sys/fs/cgroup):
#   TORCH_PY=/opt/torchenv/bin/python sample_traces/record_oom_after_throttle.sh [OUT_DIR] [TRUTH_JSON]
# Defaults: OUT_DIR=sample_traces/oom-after-throttle (next to this script),
#           TRUTH_JSON=<OUT_DIR>.truth.json (ground truth for tests, NOT part of the bundle).
#
# What happens (times relative to the job start, all tunable by env):
#   - perf record (system-wide, cpu-clock + sched tracepoints, -k CLOCK_MONOTONIC), a cgroup
#     snapshot loop (every SNAP_INTERVAL s) and an OOM watcher start; host clock anchors are taken.
#   - a 2-rank gloo torchrun job starts inside cgroups <cpu|cpuacct|memory>/$CG_NAME.
#   - at BASELINE_S: cpu.cfs_quota_us of the job's cpu cgroup is lowered to THROTTLE_QUOTA_US.
#   - at BASELINE_S+THROTTLE_S: a flag file makes rank 0 leak LEAK_MB MiB per step until the
#     memory cgroup limit (memory.limit_in_bytes = MEM_LIMIT_MB MiB) makes the kernel's memcg OOM
#     killer SIGKILL it; torchrun then tears down the job.
#   - afterwards: host anchors again, dmesg, dmesg -T, perf script --header, traces, logs.
# The cgroups are removed and all background helpers stopped on exit.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$SCRIPT_DIR/oom-after-throttle}
TRUTH=${2:-${OUT%/}.truth.json}
PY=${TORCH_PY:-/opt/torchenv/bin/python}
CG_NAME=${CG_NAME:-aftertrace_job}
BASELINE_S=${BASELINE_S:-18}          # job start -> throttle (includes ~5 s of torch/gloo start-up)
THROTTLE_S=${THROTTLE_S:-15}          # throttle -> leak start
THROTTLE_QUOTA_US=${THROTTLE_QUOTA_US:-30000}   # 0.3 CPU for 2 busy ranks: ~6x slower steps
CFS_PERIOD_US=${CFS_PERIOD_US:-100000}
MEM_LIMIT_MB=${MEM_LIMIT_MB:-2560}    # job baseline is ~0.9 GiB on torch 2.13 CPU -> ~1.6 GiB headroom
LEAK_MB=${LEAK_MB:-256}
SNAP_INTERVAL=${SNAP_INTERVAL:-0.5}
DEADLINE_S=${DEADLINE_S:-240}         # hard stop if the OOM never comes
PERF_FREQ=${PERF_FREQ:-49}           # keeps the perf script text ~10 MB (sched_switch dominates)
BATCH=${AFTERTRACE_BATCH:-512}
CLEAR_DMESG=${CLEAR_DMESG:-0}         # 1: dmesg -C before recording (drops earlier runs' OOM kills)

die() { echo "record: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ -x "$PY" ] || die "torch python not found: $PY (set TORCH_PY)"
for f in cpu/cpu.cfs_quota_us cpuacct/cpuacct.usage memory/memory.limit_in_bytes; do
  [ -f /sys/fs/cgroup/$f ] || die "cgroup v1 file /sys/fs/cgroup/$f missing (needs cgroup v1 cpu, cpuacct, memory)"
done
command -v perf >/dev/null || die "perf not found"
TORCHRUN=$(dirname "$PY")/torchrun
[ -x "$TORCHRUN" ] || die "torchrun not found next to $PY"

# helpers run with the real interpreter binary (a pyenv/asdf shim would fork a dozen
# processes per call, all visible as perf sched_process_* events)
SYS_PY=${SYS_PY:-$(python3 -c 'import sys; print(sys.executable)')}
HOST=$(hostname)
[ -e "$OUT" ] && die "$OUT exists; remove it first"
B=$OUT/$HOST
WORK=$(mktemp -d /tmp/aftertrace-rec.XXXXXX)
EV=$WORK/events.log
SIDE=$WORK/side
FLAG=$WORK/leak.flag
mkdir -p "$B"/{host/start,host/end,perf,cgroup,logs,profiler} "$SIDE" "$WORK/cwd"
: > "$EV"

CPU_CG=/sys/fs/cgroup/cpu/$CG_NAME
ACCT_CG=/sys/fs/cgroup/cpuacct/$CG_NAME
MEM_CG=/sys/fs/cgroup/memory/$CG_NAME

# no forks in the polling paths (they would show up as perf sched_process_* events):
# timestamps from $EPOCHREALTIME (us), sleeping via read -t on a never-written pipe
ev() { local t=$EPOCHREALTIME; echo "$1 ${t/./}000 ${*:2}" >> "$EV"; }
exec {NAPFD}<> <(:)
nap() { read -r -t "$1" -u "$NAPFD" _ || true; }

PERF_PID= SNAP_PID= JOB_PID=
CREATED_CGS=()
cleanup() {
  set +e
  trap '' INT TERM   # a second signal must not cut the cleanup short
  [ -n "$JOB_PID" ] && kill -0 "$JOB_PID" 2>/dev/null && { kill -TERM "$JOB_PID"; sleep 3; kill -KILL "$JOB_PID"; }
  for p in $SNAP_PID; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [ -n "$PERF_PID" ] && kill -0 "$PERF_PID" 2>/dev/null && { kill -INT "$PERF_PID"; wait "$PERF_PID"; }
  for cg in "${CREATED_CGS[@]}"; do
    [ -d "$cg" ] || continue
    while read -r t; do kill -KILL "$t" 2>/dev/null; done < "$cg/cgroup.procs"
    for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
    [ -d "$cg" ] && echo "record: WARNING could not remove $cg" >&2
  done
  rm -f "$FLAG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- cgroups
for cg in "$CPU_CG" "$ACCT_CG" "$MEM_CG"; do
  [ -d "$cg" ] && die "$cg already exists (left over from an earlier run?); rmdir it first"
  mkdir "$cg"
  CREATED_CGS+=("$cg")
done
echo "$CFS_PERIOD_US" > "$CPU_CG/cpu.cfs_period_us"
echo -1 > "$CPU_CG/cpu.cfs_quota_us"
echo 0 > "$MEM_CG/memory.swappiness" 2>/dev/null || true
echo $((MEM_LIMIT_MB << 20)) > "$MEM_CG/memory.limit_in_bytes"
# no swap for the job either (only where swap accounting exists; must be >= limit)
[ -f "$MEM_CG/memory.memsw.limit_in_bytes" ] && echo $((MEM_LIMIT_MB << 20)) > "$MEM_CG/memory.memsw.limit_in_bytes"
echo 0 > "$MEM_CG/memory.oom_control" 2>/dev/null || true   # OOM killer enabled (default)

[ "$CLEAR_DMESG" = 1 ] && dmesg -C

# ---------------------------------------------------------------- host anchors
anchors() {  # $1 = start|end ; back to back, clock reads first
  local d=$B/host/$1
  cat /proc/uptime > "$d/proc_uptime"
  date +%s.%N > "$d/date_epoch"
  date > "$d/date"
  date --iso-8601=ns > "$d/date_iso"
  cat /proc/stat > "$d/proc_stat"
  # ground truth only (not in the bundle): all three kernel clocks from one process
  "$SYS_PY" -c 'import time,json;print(json.dumps({"realtime_ns":time.clock_gettime_ns(time.CLOCK_REALTIME),"monotonic_ns":time.clock_gettime_ns(time.CLOCK_MONOTONIC),"boottime_ns":time.clock_gettime_ns(time.CLOCK_BOOTTIME)}))' > "$WORK/clocks.$1.json"
}
cat /proc/sys/kernel/random/boot_id > "$B/host/boot_id"
hostname > "$B/host/hostname"
uname -a > "$B/host/uname_a"

# ---------------------------------------------------------------- recorders
# -c 1: every tracepoint hit is recorded (a global -F would sample tracepoints too);
# cpu-clock samples at $PERF_FREQ Hz; only cpu-clock and sched_process_exit keep call chains
# (context switches, forks and execs without them keep the text under ~15 MB)
perf record -k CLOCK_MONOTONIC -a -g -c 1 \
  -e "cpu-clock/freq=$PERF_FREQ,name=cpu-clock/" -e sched:sched_switch/call-graph=no/ \
  -e sched:sched_process_exit -e sched:sched_process_fork/call-graph=no/ \
  -e sched:sched_process_exec/call-graph=no/ \
  -o "$WORK/perf.data" > "$WORK/perf_record.log" 2>&1 &
PERF_PID=$!
ev perf_start pid=$PERF_PID

"$SYS_PY" "$SCRIPT_DIR/scripts/cgroup_snapshot.py" --out "$B/cgroup" --cgroup "$CG_NAME" \
  --interval "$SNAP_INTERVAL" --events "$EV" &
SNAP_PID=$!

nap 2   # let perf open its events
anchors start
ev anchors_start

# ---------------------------------------------------------------- the job
(
  echo "$BASHPID" > "$CPU_CG/cgroup.procs"
  echo "$BASHPID" > "$ACCT_CG/cgroup.procs"
  echo "$BASHPID" > "$MEM_CG/cgroup.procs"
  cd "$WORK/cwd"
  export AFTERTRACE_PROFILER_DIR=$B/profiler AFTERTRACE_LEAK_FLAG=$FLAG AFTERTRACE_LEAK_MB=$LEAK_MB \
         AFTERTRACE_SIDE_DIR=$SIDE AFTERTRACE_BATCH=$BATCH PYTHONUNBUFFERED=1
  # own session/process group (setsid does not fork here), so signals torchrun sends to its
  # group never reach this script
  exec setsid "$TORCHRUN" --standalone --nnodes=1 --nproc_per_node=2 \
       --log-dir "$B/logs/torchrun_log_dir" --tee 3 \
       "$SCRIPT_DIR/scripts/train_job.py"
) > "$B/logs/torchrun.log" 2>&1 &
JOB_PID=$!
ev job_start torchrun_pid=$JOB_PID
T0=$SECONDS

wait_until() { while [ $((SECONDS - T0)) -lt "$1" ]; do kill -0 "$JOB_PID" 2>/dev/null || return 1; nap 0.2; done; }

if wait_until "$BASELINE_S"; then
  echo "$THROTTLE_QUOTA_US" > "$CPU_CG/cpu.cfs_quota_us"
  ev throttle_applied cfs_quota_us=$THROTTLE_QUOTA_US cfs_period_us=$CFS_PERIOD_US
  if wait_until $((BASELINE_S + THROTTLE_S)); then
    touch "$FLAG"
    ev leak_flag_set leak_mb_per_step=$LEAK_MB
  fi
fi
while kill -0 "$JOB_PID" 2>/dev/null; do
  if [ $((SECONDS - T0)) -ge "$DEADLINE_S" ]; then
    ev deadline_kill; kill -TERM "$JOB_PID"; sleep 5; kill -KILL "$JOB_PID" 2>/dev/null || true
  fi
  nap 0.1
done
rc=0; wait "$JOB_PID" || rc=$?
ev job_end exit_code=$rc
JOB_PID=

nap 2
anchors end
ev anchors_end
kill "$SNAP_PID" 2>/dev/null || true
wait "$SNAP_PID" 2>/dev/null || true
SNAP_PID=
kill -INT "$PERF_PID"; wait "$PERF_PID" || true
PERF_PID=
ev recorders_stopped

dmesg > "$B/dmesg.txt"
dmesg -T > "$B/dmesg_T.txt"

# ---------------------------------------------------------------- post-processing
perf script --header -i "$WORK/perf.data" > "$B/perf/perf.script.txt" 2> "$WORK/perf_script.err"
if [ "$(stat -c %s "$B/perf/perf.script.txt")" -gt $((2 << 20)) ]; then gzip -9 "$B/perf/perf.script.txt"; fi
# profiler traces are written gzipped by the job; compress any stray plain one
find "$B/profiler" -type f -name '*.json' -exec gzip -9 {} +
find "$B/logs" -type f -size +2M -exec gzip -9 {} +

# ground truth (outside the bundle)
"$SYS_PY" "$SCRIPT_DIR/scripts/make_truth.py" --bundle "$OUT" --host "$HOST" --work "$WORK" \
  --cgroup "$CG_NAME" --mem-limit-bytes $((MEM_LIMIT_MB << 20)) --leak-mb "$LEAK_MB" \
  --command "CLEAR_DMESG=$CLEAR_DMESG TORCH_PY=$PY $0${*:+ $*}" --torch-py "$PY" \
  --params "BASELINE_S=$BASELINE_S THROTTLE_S=$THROTTLE_S THROTTLE_QUOTA_US=$THROTTLE_QUOTA_US CFS_PERIOD_US=$CFS_PERIOD_US MEM_LIMIT_MB=$MEM_LIMIT_MB LEAK_MB=$LEAK_MB SNAP_INTERVAL=$SNAP_INTERVAL PERF_FREQ=$PERF_FREQ AFTERTRACE_BATCH=$BATCH CLEAR_DMESG=$CLEAR_DMESG CG_NAME=$CG_NAME" \
  > "$TRUTH"
echo "record: bundle in $OUT, truth in $TRUTH, scratch in $WORK"
