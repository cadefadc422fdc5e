"""Record one real incident of the evaluation corpus on this Linux host (run as root).

    TORCH_PY=/opt/torchenv/bin/python python3 sample_traces/scripts/record_incident.py \\
        SCENARIO OUT_DIR [--rank N] [--via collect] [--no-perf] [--decoy NAME ...]
        [--perf-clock default] [--no-anchors]

A gloo training job (``incident_job.py``, 2 ranks or ``--nproc``) runs under torchrun inside fresh cgroup v1
groups; after a quiet baseline something goes wrong, the way it goes wrong on real clusters,
and the job fails. What the recorder did, and when, is the ground truth: it is written to
``OUT_DIR.truth.json`` and never into the bundle ``OUT_DIR/``.

The bundle is what a person would gather by hand (``--via hand``, the default):

    <host>/host/start/, <host>/host/end/   clock anchors before and after the job:
                                           /proc/uptime, date +%s.%N, date, date --iso-8601=ns,
                                           /proc/stat (not with --no-anchors)
    <host>/host/{hostname,boot_id,uname_a}
    <host>/dmesg.txt, <host>/dmesg_T.txt   raw dmesg and dmesg -T, taken after the job
    <host>/perf/perf.script.txt.gz         perf script --header (system-wide, -k CLOCK_MONOTONIC
                                           or with --perf-clock default perf's own clock,
                                           cpu-clock with call chains, process exit/fork/exec)
    <host>/cgroup/<epoch>/...              snapshots every 0.5 s (``snapshot_loop.py``) of the
                                           job's cgroups and of every other group the scenario
                                           makes, with cgroup.procs/tasks, PSI, loadavg, meminfo
    <host>/logs/torchrun.log               torchrun's stdout+stderr (--tee 3)
    <host>/logs/torchrun_log_dir/...       torchrun --log-dir
    <host>/profiler/*.pt.trace.json.gz     Kineto traces (two steps every 40 per rank)

or, with ``--via collect``, what ``aftertrace collect`` wrote around the same job (the
collector runs the launch command; this script only causes the fault and notes the truth).

Scenarios (the rank at fault is ``--rank``, default 1):

  sigstop        SIGSTOP to the rank: it stops; its peer times out in gloo; torchrun SIGTERMs
                 it (ignored while stopped) and SIGKILLs it after its grace period
  freezer        the rank's process moved into a freezer cgroup that is then FROZEN
  sigkill        SIGKILL to the rank from outside (not the OOM killer)
  hung-io        the rank fsyncs its metrics to a loop-mounted ext4 every step; the file
                 system is frozen (fsfreeze): the rank blocks in D state, the hung-task
                 watchdog (timeout set to 10 s for the recording) reports it
  exception      the rank's labels go out of range: IndexError in cross_entropy
  mismatch       the rank runs all_gather where its peer runs all_reduce (DETAIL checks on)
  leak           the rank leaks 256 MiB per step until the memory cgroup's OOM killer kills it
  throttle-leak  the job's CPU quota is cut to 0.3 CPU, 20 s later the rank starts leaking
  shm            batches come from DataLoader workers through a /dev/shm of 64 MiB (a private
                 mount namespace for the job): a worker dies of SIGBUS
  disk-full      rank 0 checkpoints every 10 steps to a 48 MiB file system and keeps them all
  tenant         another tenant's cgroup, beside the job's under one parent memory limit,
                 grows (6 processes) until the limit: the OOM killer kills a rank, though the
                 job does not grow
  cpu-hog        a SCHED_FIFO busy loop outside the job runs on the CPU the rank is pinned to
                 (RT throttling off, as on some HPC nodes): the rank gets no CPU (on kernels with
                 the fair deadline server, 6.12 and later, it still gets 5 %: its steps slow
                 twentyfold but its peer does not time out, and the job runs to the deadline)
  rt-hog         a busy loop outside the job (a plain python3 started by the recorder, in no job
                 cgroup) is pinned (taskset) to the one CPU the rank is bound to and made real-time
                 (chrt -f 50); RT throttling stays on (refused if sched_rt_runtime_us is -1), so the
                 rank keeps about 5 % of its CPU; the other ranks have the other CPUs. The job's steps
                 are heavy for it (hidden 4096, batch 12288: ~8 s a step here, a third of it between
                 two of the rank's gradient all-reduces), so that at 5 % the rank's peer waits longer
                 than the process group's timeout and fails in gloo. The hog is killed when the job
                 has ended, or after the timeout + 60 s
  launcher-kill  SIGKILL to torchrun and the ranks at once (a scheduler ending the job)
  sigterm        SIGTERM to the rank from outside (a preemption), not from the launcher
  worker-kill    batches come from 2 DataLoader workers per rank; SIGKILL to one of the rank's workers
  silent-exit    the rank calls os._exit(3): no traceback, no message
  deadlock       the rank takes a lock it already holds and sleeps forever
  watchdog-deadlock  the same, in a job whose ranks each run a "no progress" watchdog thread
                 (AFTERTRACE_WATCHDOG_S=5): the stuck rank's watchdog keeps logging a warning
                 every 5 s until the job ends
  segv           the rank reads through a null pointer in native code (ctypes): SIGSEGV
  worker-hang    the rank's 2 DataLoader workers block for good reading a sample; the DataLoader's
                 own timeout (10 s) raises in the rank
  spin           the rank loops forever on the CPU (a retry loop that never ends): busy, no progress
  uneven         the rank's data runs out early (uneven shards): it leaves the loop, tears down
                 and exits 0, silently; its peer's next collective fails
  rank-quota     the rank's process is moved into its own cpu cgroup whose quota is 1 ms per 1 s
                 (a per-container limit set wrong): it barely runs; its peer times out
  stale-lock     a process left behind by an earlier job holds the lock of the rank's data cache
                 (flock); the rank waits for it before joining the process group, its peer times
                 out at start (a rendezvous failure)
  worker-oom     the rank's DataLoader workers keep 8 MiB per sample until the job's memory cgroup
                 (2.5 GiB) OOM-kills one
  worker-segv    batches come from 2 DataLoader workers per rank; at the flag, the first of the rank's
                 workers to load a sample reads through a null pointer in native code
                 (ctypes.string_at(0) in the dataset's __getitem__), once; its SIGSEGV disposition is
                 the default then (faulthandler disabled, torch's worker handler replaced), so the kernel
                 logs `segfault at 0` for the worker (needs /proc/sys/debug/exception-trace 1: set for
                 the recording, restored after); the rank's DataLoader raises, the job fails
  abort          a native library's check fails in the rank: abort() (SIGABRT), no Python traceback
  fd-limit       batches come from 2 DataLoader workers per rank (persistent, torch's default
                 file_descriptor sharing: the rank receives each batch tensor's shared-memory fd from
                 the worker over a new socket, so it opens files every step); at the fault time the
                 rank's open-file limit is lowered from outside (`prlimit --pid PID --nofile=N:N`, N its
                 open fds counted in /proc/PID/fd just before, plus 4: an operator or container runtime
                 setting a limit wrong); its next batches cannot be received and torch's DataLoader
                 raises `RuntimeError: Too many open files. Communication with the workers is no longer
                 possible...`; torchrun reports the rank, its peer fails
  worker-exception
                 batches come from 2 DataLoader workers per rank; at the flag, the first of the rank's
                 workers to load a sample finds its record truncated (a corrupt sample) and raises a plain
                 `ValueError: corrupt sample N: expected 512 float32 values (2048 bytes), got 1000 bytes`
                 in the dataset's __getitem__, once, in that worker only (it notes its pid and the time
                 just before it raises); torch's worker loop hands it to the rank, whose DataLoader
                 re-raises it (`ValueError: Caught ValueError in DataLoader worker process N.` with the
                 worker's original traceback); the rank fails, torchrun reports it, its peer fails

Decoys (``--decoy``, any number, each started at about a third of the baseline):

  throttled-cgroup   an unrelated cgroup /backup whose busy process is CPU-throttled
  oom-other          an unrelated process in cgroup /cron killed by its memory cgroup's OOM killer
  segv-other         an unrelated process crashes with a segmentation fault
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CG = "/sys/fs/cgroup"
SYS_PY = sys.executable
SCENARIOS = ("sigstop", "freezer", "sigkill", "hung-io", "exception", "mismatch", "leak", "throttle-leak",
             "shm", "disk-full", "tenant", "cpu-hog", "launcher-kill", "sigterm", "worker-kill",
             "silent-exit", "deadlock", "worker-oom", "segv", "stale-lock", "uneven", "rank-quota", "spin", "worker-hang", "abort",
             "rt-hog", "worker-segv", "fd-limit", "worker-exception", "watchdog-deadlock")
DECOYS = ("throttled-cgroup", "oom-other", "segv-other")


def now() -> int:
    return time.time_ns()


def write(path: str | Path, data: str) -> None:
    with open(path, "w") as f:
        f.write(data)


def sh(cmd: list[str], **kw) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw).stdout


class Recording:
    def __init__(self, a, torch_py: str):
        self.a = a
        self.torch_py = torch_py
        self.torchrun = str(Path(torch_py).parent / "torchrun")
        self.host = socket.gethostname()
        self.out = Path(a.out).resolve()
        self.bundle_host = self.out / self.host
        self.work = Path(tempfile.mkdtemp(prefix="atrec-"))
        self.side = self.work / "side"
        self.flag = self.work / "fault.flag"
        self.events: list[dict] = []
        self.cgroups: list[str] = []          # created cgroup folders, removed at the end
        self.helpers: list[subprocess.Popen] = []
        self.mounts: list[str] = []
        self.job: subprocess.Popen | None = None
        self.job_cg = a.cgroup
        self.snap_cgs = [a.cgroup]
        self.env: dict[str, str] = {}
        self.truth: dict = {}
        self.cleanups: list = []

    # -- bookkeeping
    def ev(self, what: str, **kw) -> int:
        t = now()
        self.events.append({"what": what, "ts_ns": t, **kw})
        print(f"record: {what} {kw}", file=sys.stderr)
        return t

    def mkcg(self, hier: str, path: str, **settings) -> str:
        d = f"{CG}/{hier}/{path.strip('/')}"
        parent = os.path.dirname(d)
        if not os.path.isdir(parent):
            self.mkcg(hier, os.path.dirname(path.strip("/")))
        if os.path.isdir(d):
            raise SystemExit(f"record: {d} exists (left over from an earlier run?); remove it first")
        os.mkdir(d)
        self.cgroups.append(d)
        for k, v in settings.items():
            write(f"{d}/{k}", str(v))
        return d

    def join(self, pid: int, hier: str, path: str) -> None:
        write(f"{CG}/{hier}/{path.strip('/')}/cgroup.procs", str(pid))

    def side_json(self, name: str) -> dict | None:
        p = self.side / f"{name}.json"
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return None

    def rank_pids(self, timeout: float = 120) -> dict[int, int]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = {i: self.side_json(f"rank{i}") for i in range(self.a.nproc)}
            if all(r.values()):
                return {i: v["pid"] for i, v in r.items()}
            if self.job is not None and self.job.poll() is not None:
                break
            time.sleep(0.2)
        return {}

    def alive(self) -> bool:
        return self.job is not None and self.job.poll() is None

    def sleep_while_alive(self, s: float) -> bool:
        end = time.monotonic() + s
        while time.monotonic() < end:
            if not self.alive():
                return False
            time.sleep(0.05)
        return True

    def spawn(self, cmd: list[str], cg: str | None = None, hiers=("cpu", "cpuacct", "memory"), **kw):
        pre = None
        if cg:
            paths = [f"{CG}/{h}/{cg.strip('/')}/cgroup.procs" for h in hiers
                     if os.path.isdir(f"{CG}/{h}/{cg.strip('/')}")]

            def pre():
                for p in paths:
                    with open(p, "w") as f:
                        f.write(str(os.getpid()))
                os.setsid()
        # a helper leads its own process group (killed as a group), in a cgroup or not
        p = subprocess.Popen(cmd, preexec_fn=pre, start_new_session=pre is None, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, **kw)
        self.helpers.append(p)
        return p

    # -- the host side
    def anchors(self, which: str) -> None:
        # --no-anchors: the readings are taken (the truth needs them) but kept out of the bundle,
        # as in a bundle gathered by hand without uptime/date
        d = (self.work / "anchors" if self.a.no_anchors else self.bundle_host / "host") / which
        d.mkdir(parents=True, exist_ok=True)
        (d / "proc_uptime").write_text(Path("/proc/uptime").read_text())
        (d / "date_epoch").write_text(sh(["date", "+%s.%N"]))
        (d / "date").write_text(sh(["date"]))
        (d / "date_iso").write_text(sh(["date", "--iso-8601=ns"]))
        (d / "proc_stat").write_text(Path("/proc/stat").read_text())
        self.truth.setdefault("clocks", {})[which] = {
            "realtime_ns": time.clock_gettime_ns(time.CLOCK_REALTIME),
            "monotonic_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
            "boottime_ns": time.clock_gettime_ns(time.CLOCK_BOOTTIME)}

    def kmsg_probe(self, label: str) -> None:
        """A line written to the kernel log with the monotonic and wall clocks read around the
        write: the truth of the kernel log's own clock (printk's clock is not CLOCK_MONOTONIC;
        on this VM it runs some ppm apart). The line holds no time, so nothing in the bundle
        gives the answer away."""
        m0, r0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_REALTIME)
        try:
            with open("/dev/kmsg", "w") as f:
                f.write(f"aftertrace-recorder: clock probe {label}\n")
        except OSError:
            return
        m1, r1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_REALTIME)
        self.truth.setdefault("kmsg_probes", []).append(
            {"text": f"aftertrace-recorder: clock probe {label}", "monotonic_ns": [m0, m1], "realtime_ns": [r0, r1]})

    def wall_step(self, delta_s: float) -> None:
        """Step CLOCK_REALTIME by delta_s mid-job, as an NTP step or a VM resumed by its host does
        (the boot clock runs on). The machine's clock is stepped back when the recording ends."""
        delta = int(delta_s * 1e9)
        self.kmsg_probe("before wall step")
        m0, r0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_REALTIME)
        time.clock_settime_ns(time.CLOCK_REALTIME, r0 + delta + time.clock_gettime_ns(time.CLOCK_MONOTONIC) - m0)
        m1, r1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_REALTIME)
        self.truth.setdefault("wall_steps", []).append(
            {"monotonic_ns": [m0, m1], "realtime_ns": [r0, r1], "delta_ns": delta})
        self.ev("wall_step", delta_ns=delta)

        def back() -> None:
            time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME) - delta)
        self.cleanups.append(back)
        self.kmsg_probe("after wall step")

    def probe_loop(self, every_s: float = 10.0) -> None:
        n = 0
        while self.alive():
            n += 1
            self.kmsg_probe(f"during job {n}")
            end = time.monotonic() + every_s
            while self.alive() and time.monotonic() < end:
                time.sleep(0.2)

    def cleanup(self) -> None:
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                print(f"record: cleanup: {e}", file=sys.stderr)
        for p in self.helpers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
        for m in reversed(self.mounts):
            subprocess.run(["fsfreeze", "-u", m], capture_output=True)
            subprocess.run(["umount", "-l", m], capture_output=True)
        for d in reversed(self.cgroups):
            for _ in range(20):
                try:
                    for t in Path(f"{d}/cgroup.procs").read_text().split():
                        try:
                            os.kill(int(t), signal.SIGKILL)
                        except OSError:
                            pass
                    if os.path.exists(f"{d}/freezer.state"):
                        write(f"{d}/freezer.state", "THAWED")
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.3)


# ---------------------------------------------------------------- faults

def fault_sigstop(r: Recording, rank: int, pids: dict) -> None:
    r.truth["origin"] = {"kinds": ["rank_stalled", "process_stopped"], "rank": rank, "pid": pids[rank],
                         "start_ns": [r.ev("sigstop", pid=pids[rank], rank=rank)] * 2}
    os.kill(pids[rank], signal.SIGSTOP)


def fault_freezer(r: Recording, rank: int, pids: dict) -> None:
    d = f"{CG}/freezer/{r.job_cg.strip('/')}/rank{rank}"
    os.mkdir(d)
    r.cgroups.append(d)
    # the rank and its threads move first, the freeze comes a few snapshots later
    write(f"{d}/cgroup.procs", str(pids[rank]))
    r.ev("moved_to_freezer_cgroup", pid=pids[rank], cgroup=d)
    time.sleep(2.0)
    t = r.ev("frozen", cgroup=d, pid=pids[rank], rank=rank)
    write(f"{d}/freezer.state", "FROZEN")
    r.truth["origin"] = {"kinds": ["rank_stalled", "process_frozen", "cgroup_frozen"], "rank": rank,
                         "pid": pids[rank], "entity": d[len(CG) + len("/freezer"):], "start_ns": [t, t]}
    # a frozen process cannot die, so torchrun's SIGKILL waits: an operator thaws the group once
    # the peer's timeout and the launcher's grace period have passed
    release(r, lambda: (write(f"{d}/freezer.state", "THAWED"), r.ev("thawed", cgroup=d)))


def release(r: Recording, fn) -> None:
    tm = threading.Timer(r.a.pg_timeout + 45, fn)
    tm.daemon = True
    tm.start()


def fault_sigkill(r: Recording, rank: int, pids: dict) -> None:
    t = r.ev("sigkill", pid=pids[rank], rank=rank)
    os.kill(pids[rank], signal.SIGKILL)
    r.truth["origin"] = {"kinds": ["signal_kill", "rank_stalled"], "rank": rank, "pid": pids[rank],
                         "start_ns": [t, t]}


def _children(pid: int) -> list[int]:
    """The processes a process started (every thread's children: one forks from any thread)."""
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return kids


def fault_sigterm(r: Recording, rank: int, pids: dict) -> None:
    t = r.ev("sigterm", pid=pids[rank], rank=rank)
    os.kill(pids[rank], signal.SIGTERM)
    r.truth["origin"] = {"kinds": ["signal_kill"], "rank": rank, "pid": pids[rank], "start_ns": [t, t],
                         "what": "SIGTERM from outside (a preemption), not from the launcher"}


def fault_worker_kill(r: Recording, rank: int, pids: dict) -> None:
    kids = _children(pids[rank])
    if not kids:
        raise SystemExit("record: the rank has no DataLoader workers")
    victim = min(kids)
    t = r.ev("sigkill_worker", pid=victim, rank=rank, workers=kids)
    os.kill(victim, signal.SIGKILL)
    r.truth["origin"] = {"kinds": ["dataloader_worker_killed", "signal_kill"], "rank": rank, "pid": pids[rank],
                         "pids": [victim], "start_ns": [t, t],
                         "what": f"SIGKILL from outside to DataLoader worker {victim} of the rank"}


def fault_worker_leak(r: Recording, rank: int, pids: dict) -> None:
    kids = _children(pids[rank])
    t = r.ev("fault_flag", rank=rank, workers=kids)
    r.flag.touch()
    r.truth["origin"] = {"kinds": ["memory_growth", "oom_kill", "dataloader_worker_killed"], "rank": rank,
                         "pid": pids[rank], "pids": kids, "start_ns": [t, t + 1_000_000_000],
                         "what": "the rank's DataLoader workers start keeping 8 MiB per sample"}


def fault_worker_segv(r: Recording, rank: int, pids: dict) -> None:
    # the workers that may take the fault (the one that does writes its pid and time to the side)
    kids = _children(pids[rank])
    if not kids:
        raise SystemExit("record: the rank has no DataLoader workers")
    t = r.ev("fault_flag", rank=rank, workers=kids)
    r.flag.touch()
    r.truth["flag_ns"] = t


FD_MARGIN = 4        # fds the rank may still open once its limit is lowered


def _limits_nofile(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return line.split()[3:5]
    return []


def fault_fd_limit(r: Recording, rank: int, pids: dict) -> None:
    # as an operator (or a container runtime) sets the limit wrong on a running process: the rank's
    # open fds are counted first, then its soft and hard RLIMIT_NOFILE set a few above that count
    pid = pids[rank]
    fds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    n = len(fds) + FD_MARGIN
    was = _limits_nofile(pid)
    cmd = ["prlimit", "--pid", str(pid), f"--nofile={n}:{n}"]
    t0 = r.ev("prlimit_nofile", pid=pid, rank=rank, open_fds=len(fds), fds={k: fds[k] for k in sorted(fds)},
              nofile_was=was, command=cmd, workers=_children(pid))
    p = subprocess.run(cmd, capture_output=True, text=True)
    t1 = r.ev("nofile_set", pid=pid, rank=rank, rc=p.returncode, stderr=p.stderr.strip(), nofile=_limits_nofile(pid),
              open_fds=len(os.listdir(f"/proc/{pid}/fd")))
    if p.returncode != 0:
        raise SystemExit(f"record: prlimit failed: {p.stderr.strip()}")
    r.truth["origin"] = {"kinds": ["python_exception"], "rank": rank, "pid": pid, "start_ns": [t0, t1],
                         "nofile": n, "open_fds": len(fds), "nofile_was": was,
                         "what": f"the open-file limit of rank {rank} (pid {pid}) lowered from outside to {n} "
                                 f"(`{' '.join(cmd)}`; it had {len(fds)} files open): its next new fds fail "
                                 "with EMFILE"}


def fault_launcher_kill(r: Recording, rank: int, pids: dict) -> None:
    # as a scheduler ends a job step: SIGKILL to the launcher and every worker at once
    lp = r.side_json("rank0")["ppid"]
    t = r.ev("sigkill_job", launcher_pid=lp, pids=pids)
    for p in [lp] + list(pids.values()):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    r.truth["origin"] = {"kinds": ["signal_kill", "job_killed", "job_failure"], "rank": None, "pid": lp,
                         "start_ns": [t, t], "what": "the launcher and the workers were SIGKILLed from outside"}


def fault_flag(r: Recording, rank: int, pids: dict) -> None:
    t = r.ev("fault_flag", rank=rank)
    r.flag.touch()
    r.truth["flag_ns"] = t


def fault_hung_io(r: Recording, rank: int, pids: dict) -> None:
    t = r.ev("fsfreeze", mount=r.io_mount, rank=rank)
    subprocess.run(["fsfreeze", "-f", r.io_mount], check=True)
    release(r, lambda: (subprocess.run(["fsfreeze", "-u", r.io_mount]), r.ev("fs_thawed", mount=r.io_mount)))
    step_s = _median_step(r)
    r.truth["origin"] = {"kinds": ["hung_task", "rank_stalled", "process_blocked"], "rank": rank,
                         "pid": pids[rank], "start_ns": [t, t + int(2 * step_s * 1e9)],
                         "what": "the rank blocks at its next fsync on the frozen file system"}


def fault_throttle(r: Recording, rank: int, pids: dict) -> None:
    t = r.ev("throttle", cfs_quota_us=30000, cgroup=r.job_cg)
    write(f"{CG}/cpu/{r.job_cg.strip('/')}/cpu.cfs_quota_us", "30000")
    r.truth["origin"] = {"kinds": ["cpu_throttle"], "rank": None, "entity": r.job_cg, "start_ns": [t, t]}
    if r.sleep_while_alive(20):
        fault_flag(r, rank, pids)


def fault_rank_quota(r: Recording, rank: int, pids: dict) -> None:
    sub = f"{r.job_cg.strip('/')}/rank{rank}"
    r.mkcg("cpu", sub, **{"cpu.cfs_period_us": 1000000, "cpu.cfs_quota_us": 1000})
    r.mkcg("cpuacct", sub)
    t = r.ev("rank_quota", cgroup="/" + sub, cfs_quota_us=1000, cfs_period_us=1000000, pid=pids[rank])
    for h in ("cpu", "cpuacct"):
        r.join(pids[rank], h, sub)
    r.truth["origin"] = {"kinds": ["cpu_throttle"], "rank": rank, "pid": pids[rank], "entity": "/" + sub,
                         "start_ns": [t, t + 100_000_000],
                         "what": f"rank {rank} moved into /{sub} with a CPU quota of 1 ms per second"}


def fault_tenant(r: Recording, rank: int, pids: dict) -> None:
    code = ("import time\nkeep=[]\nwhile True:\n    keep.append(b'\\x5a'*(16<<20))\n    time.sleep(0.5)\n")
    t = r.ev("tenant_starts", cgroup=r.tenant_cg, processes=12)
    tp = [r.spawn([SYS_PY, "-c", code], cg=r.tenant_cg, hiers=("cpu", "cpuacct", "memory")) for _ in range(12)]
    r.truth["origin"] = {"kinds": ["memory_growth", "foreign_memory"], "rank": None, "entity": r.tenant_cg,
                         "pids": [p.pid for p in tp], "start_ns": [t, t + 1_000_000_000],
                         "what": "processes of another cgroup under the same memory limit grow"}


def fault_cpu_hog(r: Recording, rank: int, pids: dict) -> None:
    cpu = r.rank_cpu[rank]
    code = "while True:\n    pass\n"
    write("/proc/sys/kernel/sched_rt_runtime_us", "-1")
    r.cleanups.append(lambda: write("/proc/sys/kernel/sched_rt_runtime_us", r.rt_runtime))
    t = r.ev("rt_hog_starts", cpu=cpu)
    p = r.spawn(["chrt", "-f", "50", "taskset", "-c", str(cpu), SYS_PY, "-c", code], cg=None)
    r.truth["origin"] = {"kinds": ["cpu_contention", "foreign_cpu", "rank_stalled"], "rank": rank,
                         "pid": pids[rank], "hog_pid": p.pid, "start_ns": [t, t + 500_000_000],
                         "what": f"a SCHED_FIFO busy loop (pid {p.pid}) on CPU {cpu}, where the rank is pinned"}
    # a starved CPU must not outlive the job for long: the hog is stopped when the peer's timeout
    # has certainly fired
    threading.Timer(r.a.pg_timeout + 25, lambda: _kill(p)).start()


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass


def rt_throttling() -> tuple[int, int]:
    """(sched_rt_runtime_us, sched_rt_period_us): a real-time busy loop is only safe while RT
    throttling leaves the other tasks some of the CPU (runtime not -1, less than the period)."""
    rt = int(Path("/proc/sys/kernel/sched_rt_runtime_us").read_text())
    period = int(Path("/proc/sys/kernel/sched_rt_period_us").read_text())
    if rt < 0 or rt >= period:
        raise SystemExit(f"record: sched_rt_runtime_us is {rt} (period {period}): RT throttling is off, and a "
                         "SCHED_FIFO busy loop could freeze the machine; refusing")
    return rt, period


def pin_rank(pid: int, cpu: int) -> list[int]:
    """Every thread of the rank bound to ``cpu`` (threads started later inherit it); the tids."""
    tids = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
            tids.append(int(tid))
        except OSError:
            pass
    return sorted(tids)


def fault_rt_hog(r: Recording, rank: int, pids: dict) -> None:
    cpu = r.rank_cpu[rank]
    # threads the rank started since it was pinned inherited its CPU; bind again all the same
    tids = pin_rank(pids[rank], cpu)
    off = [t for t in tids if os.sched_getaffinity(t) != {cpu}]
    if off:
        raise SystemExit(f"record: threads {off} of rank {rank} are not bound to CPU {cpu}")
    rt, period = rt_throttling()
    cmd = ["taskset", "-c", str(cpu), "chrt", "-f", "50", SYS_PY, "-c", "while True:\n    pass\n"]
    t0 = r.ev("rt_hog_starting", cpu=cpu, command=cmd, rank=rank, rank_pid=pids[rank], rank_tids=tids,
              sched_rt_runtime_us=rt, sched_rt_period_us=period)
    p = r.spawn(cmd, cg=None)      # the recorder's own cgroups: none of the job's
    # running once taskset and chrt have exec'd the busy loop: SCHED_FIFO 50, bound to the CPU
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            ok = (os.readlink(f"/proc/{p.pid}/exe") == os.path.realpath(SYS_PY)
                  and os.sched_getscheduler(p.pid) == os.SCHED_FIFO
                  and os.sched_getparam(p.pid).sched_priority == 50 and os.sched_getaffinity(p.pid) == {cpu})
        except OSError:
            ok = False
        if ok:
            break
        time.sleep(0.001)
    else:
        _kill(p)
        raise SystemExit("record: the hog did not become a SCHED_FIFO task bound to the CPU")
    t1 = r.ev("rt_hog_running", pid=p.pid, command=cmd, comm=Path(f"/proc/{p.pid}/comm").read_text().strip(),
              cpu=cpu, policy="SCHED_FIFO", priority=50,
              cgroup=Path(f"/proc/{p.pid}/cgroup").read_text().split())
    r.rt_hog = p
    r.truth["origin"] = {"kinds": ["cpu_contention"], "rank": rank, "pid": pids[rank], "cpu": cpu,
                         "hog_pid": p.pid, "hog_command": cmd, "start_ns": [t0, t1],
                         "what": f"a busy loop outside the job (pid {p.pid}, python3), made SCHED_FIFO 50 and "
                                 f"bound to CPU {cpu}, the one CPU rank {rank} is bound to: with RT throttling "
                                 f"({rt} of {period} us) the rank keeps about 5 % of it"}

    def bounded() -> None:
        if p.poll() is None:
            _kill(p)
            p.wait()
            r.ev("rt_hog_killed", pid=p.pid, why=f"bounded: {r.a.pg_timeout + 60:.0f} s after it started")
    tm = threading.Timer(r.a.pg_timeout + 60, bounded)
    tm.daemon = True
    tm.start()


FAULTS = {"sigstop": fault_sigstop, "freezer": fault_freezer, "sigkill": fault_sigkill,
          "launcher-kill": fault_launcher_kill, "exception": fault_flag, "mismatch": fault_flag,
          "leak": fault_flag, "hung-io": fault_hung_io, "throttle-leak": fault_throttle,
          "tenant": fault_tenant, "cpu-hog": fault_cpu_hog, "shm": fault_flag, "disk-full": None,
          "sigterm": fault_sigterm, "worker-kill": fault_worker_kill, "silent-exit": fault_flag,
          "deadlock": fault_flag, "watchdog-deadlock": fault_flag, "worker-oom": fault_worker_leak, "segv": fault_flag, "stale-lock": None,
          "uneven": fault_flag, "rank-quota": fault_rank_quota, "spin": fault_flag,
          "worker-hang": fault_flag, "abort": fault_flag, "rt-hog": fault_rt_hog,
          "worker-segv": fault_worker_segv, "fd-limit": fault_fd_limit,
          "worker-exception": fault_worker_segv}      # the same: the flag, with the rank's workers noted


# ---------------------------------------------------------------- decoys

def decoy(r: Recording, name: str) -> None:
    if name == "throttled-cgroup":
        r.mkcg("cpu", "backup", **{"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": 10000})
        r.mkcg("cpuacct", "backup")
        r.mkcg("memory", "backup")
        r.snap_extra.append("backup")
        p = r.spawn([SYS_PY, "-c", "while True:\n    pass\n"], cg="backup")
        r.truth.setdefault("decoys", []).append(
            {"what": "an unrelated cgroup /backup throttled to 0.1 CPU", "kinds": ["cpu_throttle"],
             "entity": "/backup", "pid": p.pid, "ts_ns": r.ev("decoy_throttled_cgroup", pid=p.pid)})
    elif name == "oom-other":
        r.mkcg("memory", "cron", **{"memory.limit_in_bytes": 200 << 20})
        r.snap_extra.append("cron")
        code = "keep=[]\nwhile True:\n    keep.append(b'\\x11'*(16<<20))\n"
        p = r.spawn([SYS_PY, "-c", code], cg="cron", hiers=("memory",))
        r.truth.setdefault("decoys", []).append(
            {"what": "an unrelated process in /cron killed by its cgroup's OOM killer", "kinds": ["oom_kill"],
             "entity": "/cron", "pid": p.pid, "ts_ns": r.ev("decoy_oom_other", pid=p.pid)})
    elif name == "segv-other":
        p = r.spawn([SYS_PY, "-c", "import ctypes, time\ntime.sleep(0.2)\nctypes.string_at(0)\n"])
        r.truth.setdefault("decoys", []).append(
            {"what": "an unrelated python3 process crashed (segfault)", "kinds": ["segfault"],
             "pid": p.pid, "ts_ns": r.ev("decoy_segv_other", pid=p.pid)})


# ---------------------------------------------------------------- the recording

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", choices=SCENARIOS)
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=1)
    ap.add_argument("--nproc", type=int, default=2, help="ranks (torchrun --nproc_per_node)")
    ap.add_argument("--via", choices=("hand", "collect"), default="hand")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--perf-clock", choices=("monotonic", "default"), default="monotonic",
                    help="perf record -k CLOCK_MONOTONIC (writes a reference time) or perf's own clock "
                         "(printk's, no reference time: what a plain `perf record` gives)")
    ap.add_argument("--no-anchors", action="store_true",
                    help="no uptime/date/btime readings in the bundle (the truth keeps them)")
    ap.add_argument("--decoy", action="append", default=[], choices=DECOYS)
    ap.add_argument("--baseline", type=float, default=15.0, help="seconds of normal steps before the fault")
    ap.add_argument("--pg-timeout", type=float, default=30.0)
    ap.add_argument("--cgroup", default="train_job", help="the job's cgroup path (every hierarchy)")
    ap.add_argument("--deadline", type=float, default=240.0)
    ap.add_argument("--wall-step", type=float, default=None, metavar="SECONDS",
                    help="step the wall clock by this much halfway through the baseline (NTP step, VM resume)")
    a = ap.parse_args()
    torch_py = os.environ.get("TORCH_PY", "/opt/torchenv/bin/python")
    if os.geteuid() != 0:
        raise SystemExit("record: must run as root")
    if Path(a.out).exists():
        raise SystemExit(f"record: {a.out} exists; remove it first")
    r = Recording(a, torch_py)
    r.snap_extra = []
    r.rt_runtime = Path("/proc/sys/kernel/sched_rt_runtime_us").read_text().strip()
    r.rt_hog = None
    if a.scenario == "rt-hog":
        rt_throttling()            # refused before anything starts when RT throttling is off
        if (os.cpu_count() or 1) < 2:
            raise SystemExit("record: rt-hog needs 2 CPUs (one for the rank at fault, one for the others)")
    try:
        return record(r)
    finally:
        r.cleanup()
        print(f"record: scratch in {r.work}", file=sys.stderr)


def record(r: Recording) -> int:
    a = r.a
    host_dir = r.bundle_host
    for d in ("host", "logs", "profiler"):
        (host_dir / d).mkdir(parents=True, exist_ok=True)
    (r.work / "cwd").mkdir()
    r.side.mkdir()
    # The job's cgroups.
    cg = a.cgroup.strip("/")
    r.job_cg = "/" + cg
    mem = {}
    if a.scenario in ("leak", "throttle-leak", "worker-oom"):
        mem = {"memory.limit_in_bytes": 2560 << 20}
    if a.scenario == "tenant":
        # one parent limit for two tenants: the job and another team's ETL
        parent = os.path.dirname(cg) or "node"
        if parent == "node" and not cg.startswith("node/"):
            cg = f"node/{cg}"
            r.job_cg = "/" + cg
        r.mkcg("memory", parent, **{"memory.limit_in_bytes": 3800 << 20})
        r.tenant_cg = f"/{parent}/etl"
        r.mkcg("memory", r.tenant_cg)
        r.mkcg("cpu", r.tenant_cg)
        r.mkcg("cpuacct", r.tenant_cg)
        r.snap_extra += [parent, r.tenant_cg.strip("/")]
    r.mkcg("cpu", cg, **{"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": -1})
    r.mkcg("cpuacct", cg)
    r.mkcg("memory", cg, **mem)
    r.mkcg("freezer", cg)
    write("/proc/sys/kernel/hung_task_timeout_secs", "10")
    r.cleanups.append(lambda: write("/proc/sys/kernel/hung_task_timeout_secs", "120"))
    if a.scenario == "worker-segv":
        # the kernel's `segfault at` line for an unhandled fault is printed only with exception-trace on
        et = Path("/proc/sys/debug/exception-trace").read_text().strip()
        if et != "1":
            write("/proc/sys/debug/exception-trace", "1")
            r.cleanups.append(lambda: write("/proc/sys/debug/exception-trace", et))
        r.ev("exception_trace", was=et, now=Path("/proc/sys/debug/exception-trace").read_text().strip())

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="INFO",
               AFTERTRACE_SIDE_DIR=str(r.side), AFTERTRACE_FAULT_FLAG=str(r.flag),
               AFTERTRACE_FAULT_RANK=str(a.rank), AFTERTRACE_PG_TIMEOUT_S=str(a.pg_timeout),
               AFTERTRACE_PROFILER_DIR=str(r.work / "profiler"), AFTERTRACE_PROFILE_EVERY="40",
               TORCH_DISTRIBUTED_DEBUG="DETAIL" if a.scenario == "mismatch" else "INFO")
    fault_env = {"worker-exception": "worker_exception", "worker-segv": "worker_segv", "abort": "abort", "worker-hang": "worker_hang", "spin": "spin", "uneven": "uneven", "stale-lock": "stale_lock", "segv": "segv", "worker-oom": "worker_leak", "deadlock": "deadlock", "watchdog-deadlock": "deadlock", "silent-exit": "exit", "exception": "exception", "mismatch": "mismatch", "leak": "leak", "throttle-leak": "leak",
                 "hung-io": "io", "disk-full": "ckpt", "shm": "loader"}
    env["AFTERTRACE_FAULT"] = fault_env.get(a.scenario, "none")
    if a.scenario in ("leak", "throttle-leak"):
        env.update(AFTERTRACE_LEAK_MB="256", AFTERTRACE_BATCH="512")
    if a.scenario == "watchdog-deadlock":
        env["AFTERTRACE_WATCHDOG_S"] = "5"
    if a.scenario == "rt-hog":
        # heavy steps (~8 s here): at the 5 % RT throttling leaves, the gap between two of the
        # rank's all-reduces outlasts the peer's timeout; Kineto every 4 steps, as there are few
        env.update(AFTERTRACE_HIDDEN="4096", AFTERTRACE_BATCH="12288", AFTERTRACE_PROFILE_EVERY="4")
    wrap: list[str] = []
    if a.scenario == "hung-io":
        img = r.work / "metrics.img"
        subprocess.run(["truncate", "-s", "64M", str(img)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
        r.io_mount = "/mnt/atrec-metrics"
        os.makedirs(r.io_mount, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(img), r.io_mount], check=True)
        r.mounts.append(r.io_mount)
        env["AFTERTRACE_IO_FILE"] = r.a_io_file = f"{r.io_mount}/rank{a.rank}.metrics.jsonl"
    if a.scenario == "disk-full":
        r.ckpt_mount = "/mnt/atrec-ckpt"
        os.makedirs(r.ckpt_mount, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", r.ckpt_mount], check=True)
        r.mounts.append(r.ckpt_mount)
        env.update(AFTERTRACE_CKPT_DIR=r.ckpt_mount, AFTERTRACE_CKPT_EVERY="10")
    if a.scenario in ("worker-kill", "worker-oom", "worker-hang", "worker-segv", "fd-limit", "worker-exception"):
        env.update(AFTERTRACE_LOADER_WORKERS="2", AFTERTRACE_PREFETCH="4")
    if a.scenario == "worker-hang":
        env["AFTERTRACE_LOADER_TIMEOUT"] = "10"
    if a.scenario == "shm":
        env.update(AFTERTRACE_LOADER_WORKERS="2", AFTERTRACE_PREFETCH="8")
        # the job's own mount namespace with a small /dev/shm (as a container runtime gives one)
        wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                "mount -t tmpfs -o size=64m shm /dev/shm && exec \"$@\"", "shm-wrap"]
    if a.scenario == "stale-lock":
        lock = r.work / "cache.lock"
        lock.touch()
        holder = subprocess.Popen(["flock", "-x", str(lock), "sleep", "100000"], start_new_session=True)
        r.helpers.append(holder)
        r.ev("stale_lock_holder", pid=holder.pid, lock=str(lock))
        env["AFTERTRACE_LOCK_FILE"] = str(lock)
    if a.scenario == "cpu-hog":
        # ranks pinned one per CPU, as launchers do with --bind / numactl
        r.rank_cpu = {k: k % os.cpu_count() for k in range(a.nproc)}
    if a.scenario == "rt-hog":
        # the rank at fault alone on its CPU; the others share the rest
        ncpu = os.cpu_count()
        mine = a.rank % ncpu
        rest = [c for c in range(ncpu) if c != mine]
        others = [k for k in range(a.nproc) if k != a.rank]
        r.rank_cpu = {a.rank: mine, **{k: rest[i % len(rest)] for i, k in enumerate(others)}}
    job_py = str(HERE / "incident_job.py")
    torchrun = [r.torchrun, "--standalone", "--nnodes=1", f"--nproc_per_node={a.nproc}",
                "--log-dir", str(r.work / "torchrun_logs" if a.via == "collect" else host_dir / "logs" / "torchrun_log_dir"),
                "--tee", "3", job_py]
    # Recorders.
    perf = None
    snap = None
    subprocess.run(["dmesg", "-C"], check=False)
    r.kmsg_probe("start")
    if a.via == "hand":
        (host_dir / "host" / "hostname").write_text(sh(["hostname"]))
        (host_dir / "host" / "boot_id").write_text(Path("/proc/sys/kernel/random/boot_id").read_text())
        (host_dir / "host" / "uname_a").write_text(sh(["uname", "-a"]))
        if not a.no_perf:
            perf = subprocess.Popen(
                ["perf", "record"] + (["-k", "CLOCK_MONOTONIC"] if a.perf_clock == "monotonic" else []) +
                ["-a", "-g", "-c", "1",
                 "-e", "cpu-clock/freq=29,name=cpu-clock/", "-e", "sched:sched_process_exit",
                 "-e", "sched:sched_process_fork/call-graph=no/", "-e", "sched:sched_process_exec/call-graph=no/",
                 "-o", str(r.work / "perf.data")], stdout=subprocess.DEVNULL, stderr=open(r.work / "perf.log", "w"))
        time.sleep(1.5)
        r.anchors("start")
    if a.via == "hand":
        snap_cgs = [cg] + r.snap_extra
        # decoy groups are made before the loop starts so that it sees them from the first snapshot
        for d in a.decoy:
            if d == "throttled-cgroup":
                snap_cgs.append("backup")
            if d == "oom-other":
                snap_cgs.append("cron")
        if a.scenario in ("freezer", "rank-quota"):
            snap_cgs.append(f"{cg}/rank{a.rank}")
        snap = subprocess.Popen([SYS_PY, str(HERE / "snapshot_loop.py"), "--out", str(host_dir / "cgroup"),
                                 "--interval", "0.5"] + sum((["--cgroup", c] for c in snap_cgs), []))
        time.sleep(1.0)
    # The job.
    if a.via == "collect":
        aftertrace = os.environ.get("AFTERTRACE", str(HERE.parents[1] / ".venv" / "bin" / "aftertrace"))
        # the collector snapshots the job's own cgroups, as a user would run it: a neighbour's
        # group is only what the kernel's reports say of it
        extra: list[str] = []
        cmd = [aftertrace, "collect", "--out", str(r.work / "collect"), "--keep", "3m", "--interval", "0.5s",
               "--files", str(r.work / "profiler" / "*.pt.trace.json.gz"), "--quiet-output"] + extra + \
              ([] if a.no_perf else ["--perf", "--perf-freq", "29"]) + ["--"] + torchrun
    else:
        cmd = torchrun
    cmd = wrap + cmd
    joins = [f"{CG}/{h}/{cg}/cgroup.procs" for h in ("cpu", "cpuacct", "memory", "freezer")]
    launch = ["sh", "-c", "for f in " + " ".join(joins) + "; do echo $$ > $f; done; exec setsid \"$@\"",
              "launch"] + cmd
    logf = open(host_dir / "logs" / "torchrun.log", "wb") if a.via == "hand" else open(r.work / "collect.out", "wb")
    r.ev("job_start", command=cmd)
    r.job = subprocess.Popen(launch, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=r.work / "cwd")
    threading.Thread(target=r.probe_loop, daemon=True).start()
    pids = r.rank_pids()
    if not pids:
        raise SystemExit("record: the ranks never came up (see the log)")
    r.ev("ranks_up", pids=pids)
    r.truth["ranks"] = {str(k): {"pid": v} for k, v in pids.items()}
    if a.scenario == "cpu-hog":
        for k, p in pids.items():
            for tid in os.listdir(f"/proc/{p}/task"):
                subprocess.run(["taskset", "-p", "-c", str(r.rank_cpu[k]), tid], capture_output=True)
        r.ev("ranks_pinned", cpus=r.rank_cpu)
    if a.scenario == "rt-hog":
        tids = {k: pin_rank(p, r.rank_cpu[k]) for k, p in pids.items()}
        r.ev("ranks_pinned", cpus=r.rank_cpu, tids=tids)
    t_fault = a.baseline
    t0 = time.monotonic()
    for d in a.decoy:
        if r.sleep_while_alive(max(0.0, t0 + a.baseline / 3 - time.monotonic())):
            decoy(r, d)
    if a.wall_step is not None and r.sleep_while_alive(max(0.0, t0 + a.baseline / 2 - time.monotonic())):
        r.wall_step(a.wall_step)
    if r.sleep_while_alive(max(0.0, t0 + t_fault - time.monotonic())):
        f = FAULTS[a.scenario]
        if f is not None:
            f(r, a.rank, pids)
    end = time.monotonic() + a.deadline
    while r.alive() and time.monotonic() < end:
        time.sleep(0.1)
    if r.alive():
        r.ev("deadline_kill")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(r.job.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(5)
    rc = r.job.wait()
    r.ev("job_end", exit_code=rc)
    if r.rt_hog is not None and r.rt_hog.poll() is None:
        _kill(r.rt_hog)
        r.rt_hog.wait()
        r.ev("rt_hog_killed", pid=r.rt_hog.pid, why="the job has ended")
    for p in r.helpers:            # tenants and decoys stop with the job (their kills are not the story)
        _kill(p)
    logf.close()
    for m in list(r.mounts):       # a frozen file system thaws only now (the rank was killed)
        subprocess.run(["fsfreeze", "-u", m], capture_output=True)
    time.sleep(2.0)
    r.kmsg_probe("end")
    time.sleep(0.2)
    if a.via == "hand":
        r.anchors("end")
        snap.send_signal(signal.SIGTERM)
        snap.wait()
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        (host_dir / "dmesg.txt").write_text(sh(["dmesg"]))
        (host_dir / "dmesg_T.txt").write_text(sh(["dmesg", "-T"]))
        if perf is not None:
            (host_dir / "perf").mkdir(exist_ok=True)
            with open(host_dir / "perf" / "perf.script.txt", "wb") as f:
                subprocess.run(["perf", "script", "--header", "-i", str(r.work / "perf.data")], stdout=f,
                               stderr=subprocess.DEVNULL)
            subprocess.run(["gzip", "-9", str(host_dir / "perf" / "perf.script.txt")], check=True)
        for p in glob.glob(str(r.work / "profiler" / "*.json.gz")):
            shutil.copy(p, host_dir / "profiler")
    else:
        bundles = sorted(glob.glob(str(r.work / "collect" / "bundle-*")))
        if not bundles:
            raise SystemExit("record: the collector wrote no bundle")
        shutil.rmtree(r.out)
        shutil.copytree(bundles[-1], r.out)
    write_truth(r, rc, pids)
    return 0


def _median_step(r: Recording) -> float:
    """The rank's step time, from the metrics it wrote to the (still readable) file system."""
    try:
        ts = [json.loads(l)["t"] for l in Path(r.a_io_file).read_text().splitlines()[-50:]]
    except (OSError, ValueError, KeyError):
        return 1.0
    d = sorted(b - a for a, b in zip(ts, ts[1:]))
    return d[len(d) // 2] if d else 1.0


def emfile_lines(r: Recording) -> list[str]:
    """The job's log lines that state the rank ran out of file descriptors, in order, once each."""
    return log_lines(r, ("Too many open files", "Errno 24", "EMFILE"))


def log_lines(r: Recording, needles: tuple[str, ...]) -> list[str]:
    """The job's log lines that hold any of ``needles``, in order, once each."""
    # torchrun's combined log (--tee 3: every rank's lines, prefixed) where there is one, else any log
    files = sorted(Path(r.out).rglob("torchrun.log")) or [r.work / "collect.out"] + sorted(Path(r.out).rglob("*.log"))
    seen: list[str] = []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.rstrip()
            if any(n in line for n in needles) and line not in seen:
                seen.append(line)
    return seen


def write_truth(r: Recording, rc: int, pids: dict) -> None:
    a = r.a
    side = {Path(p).stem: json.loads(Path(p).read_text()) for p in glob.glob(str(r.side / "*.json"))}
    t = r.truth
    if a.scenario in ("exception", "mismatch", "leak", "silent-exit", "deadlock", "watchdog-deadlock", "segv", "stale-lock", "uneven", "spin", "worker-hang", "abort") or (
            a.scenario == "throttle-leak" and "origin" not in t):
        f = side.get("fault")
        if f:
            kinds = {"abort": ["signal_kill", "process_exit"], "worker-hang": ["dataloader_stall", "rank_stalled", "python_exception"],
                     "spin": ["rank_stalled"], "uneven": ["process_exit", "rank_stalled"], "stale-lock": ["rank_stalled", "rendezvous_failure"], "segv": ["segfault", "signal_kill", "process_exit"], "deadlock": ["rank_stalled"], "watchdog-deadlock": ["rank_stalled"], "silent-exit": ["process_exit"], "exception": ["python_exception"], "mismatch": ["collective_mismatch", "python_exception"],
                     "leak": ["memory_growth"], "throttle-leak": ["memory_growth"]}[a.scenario]
            t["origin"] = {"kinds": kinds, "rank": f["rank"], "pid": f["pid"], "start_ns": [f["ts_ns"], f["ts_ns"]],
                           "what": f["what"]}
    if a.scenario == "disk-full":
        b = side.get("ckpt_begin")
        x = side.get("ckpt_failed") or side.get("exit_rank0")
        if b and x:
            t["origin"] = {"kinds": ["disk_full", "python_exception"], "rank": 0, "pid": pids[0],
                           "start_ns": [b["ts_ns"], x["ts_ns"]], "what": f"checkpoint {b.get('path')} failed"}
    if a.scenario == "worker-segv":
        f = side.get("fault")
        if f:
            t["origin"] = {"kinds": ["dataloader_worker_killed", "segfault"], "rank": f["rank"], "pid": f["pid"],
                           "pids": [f["worker_pid"]], "worker_pid": f["worker_pid"],
                           "start_ns": [f["ts_ns"], f["ts_ns"]],
                           "what": f"DataLoader worker {f['worker_pid']} of the rank reads through a null pointer in "
                                   "native code (ctypes.string_at(0) in __getitem__): SIGSEGV, no handler"}
    if a.scenario == "worker-exception":
        f = side.get("fault")
        if f:
            t["origin"] = {"kinds": ["python_exception"], "rank": f["rank"], "pid": f["pid"],
                           "pids": [f["worker_pid"]], "worker_pid": f["worker_pid"], "worker_id": f.get("worker_id"),
                           "sample": f.get("sample"), "start_ns": [f["ts_ns"], f["ts_ns"]],
                           "what": f"DataLoader worker {f['worker_pid']} of the rank raises ValueError in __getitem__ "
                                   f"on a corrupt sample ({f.get('sample')}); the rank's DataLoader re-raises it"}
            first = side.get(f"exit_rank{a.rank}")
            if first:
                # when the re-raised error reached the rank's training loop (side file)
                t["origin"]["first_error_ns"] = first["ts_ns"]
                t["origin"]["error"] = f"{first.get('exc')}: {first.get('msg')}"
            e = {"what": "rank_error_worker_exception", "ts_ns": first["ts_ns"] if first else None, "rank": a.rank,
                 "pid": pids[a.rank], "lines": log_lines(r, ("Caught ValueError", "corrupt sample",
                                                             "Original Traceback")),
                 "time_from": "the rank's side file: the error reaching its training loop",
                 "lines_from": "torchrun's combined log"}
            r.events.append(e)
            r.events.sort(key=lambda x: x["ts_ns"] or 0)
    if a.scenario == "fd-limit" and "origin" in t:
        first = side.get(f"exit_rank{a.rank}")
        lines = emfile_lines(r)
        if first:
            # the rank's first error for want of fds, when it reached its training loop (side file)
            t["origin"]["first_error_ns"] = first["ts_ns"]
            t["origin"]["error"] = f"{first.get('exc')}: {first.get('msg')}"
        e = {"what": "rank_error_emfile", "ts_ns": first["ts_ns"] if first else None, "rank": a.rank,
             "pid": pids[a.rank], "lines": lines,
             "time_from": "the rank's side file: the error reaching its training loop",
             "lines_from": "torchrun's combined log"}
        r.events.append(e)
        r.events.sort(key=lambda x: x["ts_ns"] or 0)
    if a.scenario == "shm":
        first = side.get(f"exit_rank{a.rank}")
        if first:
            t["origin"] = {"kinds": ["shm_exhausted", "dataloader_worker_killed", "python_exception"], "rank": a.rank,
                           "pid": pids[a.rank], "start_ns": [t.get("flag_ns", first["ts_ns"]), first["ts_ns"]],
                           "what": "a DataLoader worker of the rank ran out of shared memory: /dev/shm (64 MiB) "
                                   "is full once the samples grow"}
    t.update({
        "schema": "aftertrace.corpus_truth/1",
        "id": r.out.name, "scenario": a.scenario, "via": a.via, "host": r.host,
        "perf": not a.no_perf and a.via == "hand" or (a.via == "collect" and not a.no_perf),
        "perf_clock": None if a.no_perf else a.perf_clock, "anchors_in_bundle": not a.no_anchors,
        "fault_rank": a.rank, "nproc": a.nproc, "job_cgroup": r.job_cg, "job_exit_code": rc,
        "side": side, "events": r.events,
        "recorded_with": " ".join([f"TORCH_PY={r.torch_py}", "python3", "sample_traces/scripts/record_incident.py"]
                                  + sys.argv[1:]),
        "versions": {"kernel": sh(["uname", "-r"]).strip(), "perf": sh(["perf", "--version"]).strip(),
                     "torch": sh([r.torch_py, "-c", "import torch;print(torch.__version__)"]).strip()},
    })
    Path(str(r.out) + ".truth.json").write_text(json.dumps(t, indent=2) + "\n")
    print(f"record: bundle {r.out}, truth {r.out}.truth.json, job exit {rc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
