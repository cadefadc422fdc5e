"""The recorder: one process beside the job, a few threads, a bounded ring, bundles on trigger.

Threads: the main loop (every ``--interval``: process tree, cgroup/proc snapshot, NCCL file
tails, the request file, the job's state, triggers; every 5 s a clock anchor; every few
seconds the ring's limits), the kernel-log follower, the output pump (when wrapping a
command), nvidia-smi's reader (when there is one), and a bundle writer while a bundle is
written (snapshots go on meanwhile). perf and nvidia-smi are child processes in their own
sessions.

The job is never harmed by the recorder: it runs in its own session (the recorder forwards
SIGINT/SIGTERM/SIGHUP to it), every recorder error is caught and recorded, and the output
pump keeps draining the job's pipe whatever happens to the ring. As root the recorder lowers
its own ``oom_score_adj`` so that a memory-cgroup OOM kill picks the job, not its recorder.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from . import cgroups as cgmod
from . import host as hostmod
from .kmsg import KernelLog
from .perf import FILE_PATTERN, Perf
from .procs import ProcTable, read_stat
from .ring import NS, Ring
from .sources import FileTailer, NvidiaSmi, OutputPump, nccl_globs, stdout_binary
from .trigger import Reason, TriggerState, Watchdog
from .writer import BundleRequest, BundleWriter, iso

PRUNE_EVERY_NS = 5 * NS
CGROUP_REDETECT_NS = 5 * NS
# ``echo why > trigger`` creates the request file, then writes it: an empty one younger than this
# is read at a later check (at once when the job has ended)
REQUEST_SETTLE_S = 1.0


@dataclass
class Config:
    out: str
    command: list[str] | None = None
    pid: int | None = None
    cgroups: list[str] = field(default_factory=list)
    keep_s: float = 900.0
    max_bytes: int = 256 << 20
    interval_s: float = 1.0
    perf: bool = False
    perf_freq: int = 49
    perf_switch_s: int = 30
    watchdog: list[str] = field(default_factory=list)
    watchdog_defaults: bool = True
    linger_s: float = 5.0
    archive: bool = False
    files: list[str] = field(default_factory=list)
    # a wall clock that steps (NTP, a VM paused by its host) is placed between two anchors
    anchor_every_s: float = 5.0
    nvidia: bool = True
    head_bytes: int = 256 * 1024
    passthrough: bool = True
    kernel_log: str = "auto"          # auto | dmesg | off
    hang_after_s: float | None = None   # no output for this long while the job runs: a trigger
    live: bool = True                 # a bundle written while the job runs takes its processes' stacks (live.py)
    strace_s: float = 3.0
    argv: list[str] = field(default_factory=list)


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


class Recorder:
    def __init__(self, cfg: Config, log=None):
        self.cfg = cfg
        self._log_fn = log
        self.out = os.path.abspath(cfg.out)
        self.ring: Ring | None = None
        self.facts: dict = {}
        self.missing: dict[str, str] = {}        # what -> why (current state)
        self.notes: list[str] = []
        self.trig = TriggerState(int(cfg.linger_s * NS))
        self.watchdog = Watchdog(cfg.watchdog, cfg.watchdog_defaults)
        self.hang_fired = False
        self.child: subprocess.Popen | None = None
        self.job_pid: int | None = None
        self.job_started_ns: int | None = None
        self.job_ended_ns: int | None = None
        self.job_rc: int | None = None
        self.job_kernel: list[str] = []         # kernel lines naming a job process
        self.procs: ProcTable | None = None
        self.snap = cgmod.Snapshotter()
        self.explicit_cgroups = bool(cfg.cgroups)
        self.cg_notes: list[str] = []
        self.kernel: KernelLog | None = None
        self.pump: OutputPump | None = None
        self.tailer: FileTailer | None = None
        self.nvidia: NvidiaSmi | None = None
        self.perf: Perf | None = None
        self.bundles: list[str] = []
        self.writer_thread: threading.Thread | None = None
        self.writing = threading.Lock()
        self.stop_flag = threading.Event()
        self.interrupts = 0
        self.snapshots = 0
        self.snapshot_s = 0.0
        self.last_anchor_ns = 0
        self.last_anchor_mono_ns = 0
        self.mono_offset_ns: int | None = None
        self.t0_ns = time.time_ns()
        self.cpu0 = self._cpu()
        self.nccl_pattern: str | None = None
        self.perf_died = False
        self.perf_restart = False
        self.mounts: list = []
        self._old_handlers: dict = {}

    # -- output -----------------------------------------------------------------------
    def log(self, msg: str) -> None:
        if self._log_fn is not None:
            self._log_fn(msg)
        else:
            try:
                sys.stderr.write(f"aftertrace collect: {msg}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    # -- setup ------------------------------------------------------------------------
    def _setup_out(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        ring = os.path.join(self.out, "ring")
        marker = os.path.join(ring, "state", "ring.json")
        if os.path.isdir(ring):
            if not os.path.exists(marker):
                raise SystemExit(f"{ring} exists and is not a collector ring; choose another --out")
            import shutil
            shutil.rmtree(ring)         # the previous run's ring: its job is gone
        self.ring = Ring(ring, int(self.cfg.keep_s * NS), self.cfg.max_bytes)
        # segments close often enough that the age limit trims the ring to about --keep
        self.rotate_s = min(60.0, max(5.0, self.cfg.keep_s / 4))
        self.ring.write_state("ring.json", json.dumps({"started_ns": self.t0_ns, "pid": os.getpid(),
                                                       "argv": self.cfg.argv}).encode())
        self.s_snap = self.ring.stream("snap", ext="jsonl", rotate_s=self.rotate_s)
        self.s_anchor = self.ring.stream("anchors", ext="jsonl", rotate_s=3600, compress=False)
        self.s_kmsg = self.ring.stream("kmsg", ext="txt", rotate_s=self.rotate_s)

    def take_anchor(self) -> dict:
        a = hostmod.anchor()
        self.s_anchor.write((json.dumps(a) + "\n").encode())
        self.last_anchor_ns = a["wall_ns"]
        self.last_anchor_mono_ns = time.monotonic_ns()   # the interval on a clock that does not step
        self.mono_offset_ns = a["realtime_ns"] - a["monotonic_ns"]
        return a

    def _start_kernel(self) -> None:
        if self.cfg.kernel_log == "off":
            self.missing["kernel log"] = "turned off (--no-kernel-log)"
            return
        keep_usec = int(self.cfg.keep_s * 1e6)
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.kernel = KernelLog(self.s_kmsg.write, min_usec=max(0, now_usec - keep_usec),
                                poll_s=max(2.0, self.cfg.interval_s), on_line=self._kernel_line,
                                prefer_dmesg=self.cfg.kernel_log == "dmesg")
        if not self.kernel.available:
            self.missing["kernel log"] = self.kernel.error or "unavailable"
            self.kernel = None
            return
        if self.kernel.error:
            self.notes.append(f"kernel log: {self.kernel.error}; fell back to {self.kernel.method}")
        self.kernel.start()

    _KILLED = re.compile(r"Killed process (\d+)|\[(\d+)\]: segfault|[( ]pid[=: ](\d+)")

    def _kernel_line(self, usec: int, text: str) -> None:
        if self.procs is None or not ("Killed process" in text or "segfault" in text or "general protection" in text):
            return
        known = {p.pid for p in self.procs.procs.values()}
        for m in self._KILLED.finditer(text):
            pid = int(next(g for g in m.groups() if g))
            if pid in known and len(self.job_kernel) < 20:
                self.job_kernel.append(f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {text}")
                break

    def _spawn(self) -> None:
        cmd = self.cfg.command
        r, w = os.pipe()
        try:
            self.child = subprocess.Popen(cmd, stdout=w, stderr=w, start_new_session=True)
        except OSError as e:
            os.close(r)
            os.close(w)
            raise SystemExit(f"cannot start {cmd[0]!r}: {e.strerror or e}")
        finally:
            try:
                os.close(w)
            except OSError:
                pass
        self.job_pid = self.child.pid
        self.job_started_ns = time.time_ns()
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(cmd[0])) or "job"
        self.output_name = base + ".log"
        head = self.ring.stream("output.head", ext="log", rotate_s=10 ** 9, compress=False, pinned=True)
        tail = self.ring.stream("output", ext="log", rotate_s=self.rotate_s)
        self.pump = OutputPump(r, head, tail, self.cfg.head_bytes,
                               stdout_binary() if self.cfg.passthrough else None, on_line=self._output_line)
        self.pump.start()

    def _attach(self) -> None:
        pid = self.cfg.pid
        st = read_stat(pid)
        if st is None:
            raise SystemExit(f"no process {pid}")
        self.job_pid = pid
        self.job_started_ns = time.time_ns()
        self.output_name = "job.log"
        self.missing["job stdout+stderr"] = ("attached to a running process (--pid): its output goes where it "
                                             "was sent; wrap the command (-- CMD) to record it")

    def _output_line(self, line: str) -> None:
        self.last_output_ns = time.time_ns()
        p = self.watchdog.check(line)
        if p is not None:
            self.trig.add(Reason("watchdog", f"output line matched /{p}/", time.time_ns(), line[:2000]))

    def _nccl_line(self, line: str) -> None:
        p = self.watchdog.check(line)
        if p is not None:
            self.trig.add(Reason("watchdog", f"NCCL debug file line matched /{p}/", time.time_ns(), line[:2000]))

    def _lower_oom_score(self) -> None:
        """After the job is started (it keeps its own score): an OOM kill in a memory cgroup that the
        recorder shares with the job should pick the job, not the recorder."""
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("-999\n")
            self.notes.append("the collector runs with oom_score_adj -999 (an OOM kill picks the job, not it)")
        except OSError as e:
            self.notes.append(f"the collector could not lower its oom_score_adj ({e.strerror or e}): an OOM kill "
                              "in a memory cgroup it shares with the job may pick it")

    def _setup_perf(self) -> None:
        if not self.cfg.perf:
            self.missing["perf samples"] = "not requested (--perf)"
            return
        folder = os.path.join(self.ring.root, "perf")
        self.ring.add_external(folder, FILE_PATTERN)
        max_files = int(self.cfg.keep_s // self.cfg.perf_switch_s) + 2
        self.perf = Perf(folder, self.cfg.perf_freq, self.cfg.perf_switch_s, max_files)
        if not self.perf.start():
            self.missing["perf samples"] = self.perf.error or "perf could not start"
            self.log(f"perf: {self.perf.error}; recording without it")
            self.perf = None

    def _setup_nvidia(self) -> None:
        if not self.cfg.nvidia:
            self.missing["nvidia-smi samples"] = "turned off (--no-gpu)"
            return
        nv = NvidiaSmi(self.ring.stream("nvidia_smi", ext="csv", rotate_s=self.rotate_s),
                       max(200, int(self.cfg.interval_s * 1000)))
        if nv.start_process():
            self.nvidia = nv
        else:
            self.missing["nvidia-smi samples"] = nv.error

    def _setup_nccl(self) -> None:
        env = dict(os.environ) if self.child is not None else {}
        pattern = env.get("NCCL_DEBUG_FILE") or (self.procs.env_value("NCCL_DEBUG_FILE") if self.procs else None)
        self.tailer = FileTailer(self.ring, "nccl", on_line=self._nccl_line, rotate_s=self.rotate_s)
        if pattern:
            self.nccl_pattern = pattern
            cwd = os.getcwd() if self.child is not None else (self.procs.procs.get(self.job_pid).cwd
                                                                 if self.procs and self.job_pid in self.procs.procs
                                                                 else None)
            self.tailer.add_globs(nccl_globs(pattern, cwd, self.facts.get("fqdn") or self.facts["hostname"]))
        else:
            nd = env.get("NCCL_DEBUG") or (self.procs.env_value("NCCL_DEBUG") if self.procs else None)
            self.missing["NCCL debug files"] = (
                "NCCL_DEBUG_FILE is not set in the job's environment" +
                (f" (NCCL_DEBUG={nd}: NCCL's lines go to the job's output)" if nd else ""))

    # -- cgroups -------------------------------------------------------------------------
    def _detect_cgroups(self, mounts) -> None:
        dirs: list[cgmod.CgDir] = []
        notes: list[str] = []
        if self.explicit_cgroups:
            for arg in self.cfg.cgroups:
                d, n = cgmod.resolve_arg(arg, mounts)
                dirs += d
                notes += n
        else:
            pids = ([] if self.job_ended_ns else [self.job_pid or os.getpid()]) + \
                [p.pid for p in (self.procs.live() if self.procs else [])]
            if not pids:
                return          # the job is gone: keep the folders found while it ran
            for pid in dict.fromkeys(pids):
                st = read_stat(pid)
                if st is None or st[3] in ("Z", "X"):
                    continue        # an exiting process reads as the root cgroup: not its own
                d, n = cgmod.cgroups_of(pid, mounts)
                dirs += d
                notes += [x for x in n if "root cgroup" not in x or pid == self.job_pid]
        if not self.explicit_cgroups:
            # a job's cgroups are kept once seen: its processes end, or move (a wrapper that joins
            # the job's cgroups before exec), and the earlier series stays wanted
            known = {d.path for d in dirs}
            dirs = [d for d in self.snap.dirs if d.path not in known] + dirs
        if self.snap.set_dirs(dirs):
            self.log("snapshotting cgroups: " + (", ".join(d.path for d in self.snap.dirs) or "none"))
        self.cg_notes = list(dict.fromkeys(self.cg_notes + [n for n in notes if "cannot be read" not in n]))[-20:]

    # -- the loop ------------------------------------------------------------------------
    def _job_state(self) -> bool:
        """True while the job runs. Sets job_ended_ns / job_rc when it ends."""
        if self.job_ended_ns is not None:
            return False
        if self.child is not None:
            rc = self.child.poll()
            if rc is None:
                return True
            self.job_rc = rc
        else:
            st = read_stat(self.job_pid)
            if st is not None and st[3] not in ("Z", "X"):
                return True
        self.job_ended_ns = time.time_ns()
        return False

    def _snapshot(self, now: int | None = None) -> None:
        """One snapshot, stamped with CLOCK_REALTIME just before its files are read (as the
        sample recorder names its folders)."""
        t0 = time.perf_counter()
        pids = self.procs.status_pids() if self.procs else []
        now = time.time_ns()
        files = self.snap.read(pids)
        self.s_snap.write((json.dumps({"t": now, "f": files}, separators=(",", ":")) + "\n").encode(), now)
        self.snapshots += 1
        self.snapshot_s += time.perf_counter() - t0

    def _check_request_file(self, final: bool = False) -> None:
        p = os.path.join(self.out, "trigger")
        try:
            st = os.stat(p)
        except OSError:
            return
        if st.st_size == 0 and not final and time.time() - st.st_mtime < REQUEST_SETTLE_S:
            return
        try:
            with open(p, "rb") as f:
                text = f.read(400).decode("utf-8", "replace").strip().splitlines()
            os.unlink(p)
        except OSError:
            return
        self.trig.add(Reason("request_file", f"{p} appeared" + (f": {text[0]}" if text else ""), time.time_ns()))

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGUSR1:
            self.trig.add(Reason("sigusr1", "the collector received SIGUSR1", time.time_ns()))
            return
        self.interrupts += 1
        if self.child is not None and self.child.poll() is None:
            sig = signum if self.interrupts < 3 else signal.SIGKILL
            try:
                os.killpg(self.child.pid, sig)
            except OSError:
                try:
                    self.child.send_signal(sig)
                except OSError:
                    pass
            self.log(f"{_signame(signum)} forwarded to the job (pid {self.child.pid})"
                     + ("; SIGKILL" if sig == signal.SIGKILL else ""))
        else:
            self.stop_flag.set()

    def run(self) -> int:
        cfg = self.cfg
        if not cfg.command and read_stat(cfg.pid) is None:
            raise SystemExit(f"no process {cfg.pid}")
        if cfg.command:
            exe = cfg.command[0]
            if not (shutil.which(exe) if "/" not in exe else os.access(exe, os.X_OK) and os.path.isfile(exe)):
                raise SystemExit(f"cannot start {exe!r}: not found or not executable")
        self._setup_out()
        try:
            self._setup(cfg)
            self._loop(cfg)
            return self._finish()
        finally:
            self._shutdown()

    def _setup(self, cfg: Config) -> None:
        self.facts = hostmod.facts()
        self.ring.write_state("host.json", json.dumps(self.facts).encode())
        for s in (signal.SIGUSR1, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[s] = signal.signal(s, self._on_signal)
        self.take_anchor()
        self._start_kernel()
        if not cfg.command:
            self._attach()
        self.procs = ProcTable([self.job_pid] if self.job_pid else [])
        self.procs.refresh()
        self.mounts = cgmod.read_mounts()
        if not self.mounts:
            self.missing["cgroup snapshots"] = "no cgroup file system is mounted (/proc/self/mountinfo)"
        # Before the job starts (wrap mode): the cgroups it will inherit are ours, and a snapshot
        # or two of them before it runs is the quiet level its growth is measured against.
        self._detect_cgroups(self.mounts)
        self._snapshot()
        self._setup_perf()          # before the job, so that its start is in the perf data
        self._setup_nvidia()
        if cfg.command:
            self._snapshot()
            self._spawn()
            self._lower_oom_score()
            self.procs.roots = [self.job_pid]
            self.procs.refresh()
            self._detect_cgroups(self.mounts)
        self._setup_nccl()
        self.log(self._banner())

    def _loop(self, cfg: Config) -> None:
        mounts = self.mounts
        next_tick = time.monotonic()
        last_prune = last_cg = time.time_ns()
        while True:
            now = time.time_ns()
            running = self._job_state()
            self.procs.refresh(now)
            if self.procs.changed or now - last_cg >= CGROUP_REDETECT_NS:
                if not self.explicit_cgroups or now - last_cg >= CGROUP_REDETECT_NS:
                    self._detect_cgroups(mounts)
                last_cg = now
                if self.procs.changed:
                    self.ring.write_state("procs.json", json.dumps(self.procs.to_json()).encode())
                    self.procs.changed = False
            self._snapshot()
            if time.monotonic_ns() - self.last_anchor_mono_ns >= cfg.anchor_every_s * NS:
                self.take_anchor()
            try:
                self.tailer.poll()
            except Exception as e:
                self.notes.append(f"NCCL file tail: {type(e).__name__}: {e}")
            self._check_request_file(final=not running or self.stop_flag.is_set())
            if not running or self.stop_flag.is_set():
                return
            if cfg.hang_after_s and not self.hang_fired:
                quiet = now - (getattr(self, "last_output_ns", None) or self.job_started_ns or now)
                if quiet >= cfg.hang_after_s * NS:
                    self.hang_fired = True
                    self.trig.add(Reason("hang", f"no output line from the job for {quiet / NS:.0f} s "
                                                 f"(--hang-after {cfg.hang_after_s:g}s)", now))
            if self.trig.due(now) and not self._writer_busy():
                self._bundle_async()
            if not self._writer_busy():
                if self.perf_restart:
                    # perf is (re)started by this thread: it dies with the thread that started it
                    self.perf_restart = False
                    if self.perf is not None and not self.perf.start():
                        self.missing["perf samples"] = f"perf could not be restarted after a bundle: {self.perf.error}"
                        self.perf = None
                if now - last_prune >= PRUNE_EVERY_NS:
                    self.ring.prune(now)
                    last_prune = now
                    if self.perf is not None and not self.perf.running and not self.perf_died:
                        self.perf_died = True
                        self.notes.append(f"perf record stopped by itself at {iso(now)}: {self.perf._log_tail()}")
                        self.log(f"perf record stopped: {self.perf._log_tail()}")
            next_tick += cfg.interval_s
            delay = next_tick - time.monotonic()
            if delay < 0:
                next_tick = time.monotonic()
                delay = 0
            self.stop_flag.wait(delay)

    def _writer_busy(self) -> bool:
        return self.writer_thread is not None and self.writer_thread.is_alive()

    def _finish(self) -> int:
        """The job ended (or the recorder was stopped): last readings, bundle, exit status."""
        if self.pump is not None:
            self.pump.join(3.0)
            if self.pump.is_alive():
                self.notes.append("the job's output pipe stayed open after it ended (a process it started "
                                  "still holds it); output after that is not in the bundle")
        if self.job_ended_ns is not None:
            # let the kernel-log reader catch up with what the end of the job printed
            deadline = time.monotonic() + 1.5
            while self.kernel is not None and time.monotonic() < deadline and \
                    self.kernel.last_read_ns < self.job_ended_ns + 300_000_000:
                time.sleep(0.05)
            now = time.time_ns()
            self.procs.refresh(now)
            self._snapshot(now)
            self.take_anchor()
            r = self._exit_reason()
            if r is not None:
                self.trig.add(r)
        if self.writer_thread is not None:
            self.writer_thread.join()
        if self.trig.pending:
            self._write_bundle(self.trig.take())
        elif self.job_ended_ns is not None:
            self.log(f"the job ended ({self._status_text()}): no trigger, no bundle written "
                     f"(the last {self.cfg.keep_s:.0f} s are in {self.ring.root})")
        rc = self.job_rc
        if rc is None:
            return 130 if self.interrupts and self.child is None else 0
        return rc if rc >= 0 else 128 - rc

    def _status_text(self) -> str:
        rc = self.job_rc
        if rc is None:
            return "exit status not visible to a process that is not its parent" if self.job_ended_ns else "running"
        return f"exit code {rc}" if rc >= 0 else f"killed by {_signame(-rc)}"

    def _exit_reason(self) -> Reason | None:
        rc, t = self.job_rc, self.job_ended_ns
        if self.child is None:
            if self.stop_flag.is_set() and self.job_ended_ns is None:
                return None
            kern = f"; the kernel log says: {self.job_kernel[-1]}" if self.job_kernel else ""
            return Reason("pid_gone", f"process {self.job_pid} ended ({self._status_text()}){kern}", t)
        if rc is None or rc == 0:
            return None
        if rc < 0:
            kind = "interrupted" if self.interrupts and -rc in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) \
                else "signal"
            return Reason(kind, f"the job was killed by {_signame(-rc)}", t)
        return Reason("exit", f"the job exited with code {rc}", t)

    # -- bundles -----------------------------------------------------------------------------
    def _bundle_async(self) -> None:
        reasons = self.trig.take()
        self.writer_thread = threading.Thread(target=self._write_bundle, args=(reasons,),
                                              name="aftertrace-bundle", daemon=True)
        self.writer_thread.start()

    def _ranks(self) -> dict:
        out = {}
        for r, p in self.procs.ranks().items():
            e = p.env
            d = {"pid": p.pid, "comm": p.comm, "ppid": p.ppid,
                 "first_seen": iso(p.first_seen_ns), "last_seen_alive": iso(p.last_seen_ns),
                 "ended": p.ended_ns is not None}
            for k, key in (("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE"),
                           ("group_rank", "GROUP_RANK")):
                if e.get(key, "").isdigit():
                    d[k] = int(e[key])
            out[r] = d
        return out

    def _job_json(self) -> dict:
        lp = self.procs.launcher() if self.procs else None
        j = {"mode": "wrap" if self.child is not None else "pid",
             "command": self.cfg.command, "pid": self.job_pid,
             "started": iso(self.job_started_ns), "ended": iso(self.job_ended_ns),
             "status": self._status_text(), "exit_code": self.job_rc if (self.job_rc or 0) >= 0 else None,
             "signal": _signame(-self.job_rc) if self.job_rc is not None and self.job_rc < 0 else None}
        root = self.procs.procs.get(self.job_pid) if self.procs else None
        if root is not None and not self.cfg.command:
            j["command"] = root.cmdline
        if lp is not None:
            j["launcher"] = {"pid": lp.pid, "comm": lp.comm, "cmdline": lp.cmdline[:300]}
            run_id = next((p.env.get("TORCHELASTIC_RUN_ID") for p in self.procs.procs.values()
                           if p.env.get("TORCHELASTIC_RUN_ID")), None)
            if run_id:
                j["torchelastic_run_id"] = run_id
        if self.job_kernel:
            j["kernel_lines"] = self.job_kernel
        return j

    def _collector_json(self) -> dict:
        cpu = self._cpu() - self.cpu0
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = (time.time_ns() - self.t0_ns) / 1e9
        k = self.kernel
        return {"version": _version(), "argv": self.cfg.argv, "pid": os.getpid(),
                "started": iso(self.t0_ns), "interval_s": self.cfg.interval_s, "keep_s": self.cfg.keep_s,
                "max_bytes": self.cfg.max_bytes, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                "cpu_percent": round(100 * cpu / wall, 3) if wall > 0 else None,
                "children_cpu_s": round(ch.ru_utime + ch.ru_stime, 3),
                "rss_kb": _rss_kb(), "threads": threading.active_count(),
                "snapshots": self.snapshots,
                "snapshot_ms_mean": round(1000 * self.snapshot_s / self.snapshots, 3) if self.snapshots else None,
                "ring_bytes_written": self.ring.written, "ring_bytes_now": self.ring.total_bytes(),
                "ring_pruned": self.ring.pruned,
                "write_errors": {n: s.last_error for n, s in self.ring.streams.items() if s.errors},
                "realtime_minus_monotonic_ns": self.mono_offset_ns,
                "kernel_log_method": k.method if k else None,
                "kernel_log_lost": {"failed_reads": k.lost_reads, "sequence_gaps": k.seq_gaps} if k else None,
                "process_tree": self.procs.method if self.procs else None,
                "cgroup_folders": [d.path for d in self.snap.dirs],
                "watchdog": [p for p, _ in self.watchdog.patterns]}

    def _write_bundle(self, reasons: list[Reason]) -> str | None:
        with self.writing:
            try:
                return self._write_bundle_locked(reasons)
            except Exception as e:
                self.log(f"writing the bundle failed: {type(e).__name__}: {e}")
                return None

    def _write_bundle_locked(self, reasons: list[Reason]) -> str:
        t_first = min(r.ts_ns for r in reasons)
        if self.job_ended_ns is None:
            self.take_anchor()
        now = time.time_ns()
        for r in reasons:
            self.log(f"trigger: {r.detail}")
        perf = self.perf
        if perf is not None:
            perf.stop()
        missing = dict(self.missing)
        if self.snap.dirs == [] and "cgroup snapshots" not in missing:
            missing["cgroup snapshots"] = "; ".join(self.cg_notes) or "no cgroup found for the job"
        if self.nvidia is not None and self.nvidia.rows == 0 and self.nvidia.error:
            missing["nvidia-smi samples"] = self.nvidia.error
        if self.tailer is not None and self.nccl_pattern and not self.tailer.offsets:
            missing["NCCL debug files"] = f"NCCL_DEBUG_FILE={self.nccl_pattern}: no such file appeared"
        notes = list(self.notes) + [f"cgroups: {n}" for n in self.cg_notes]
        if self.snap.vanished:
            notes.append("cgroup folders that disappeared while recording: " + ", ".join(self.snap.vanished))
        req = BundleRequest(
            out_dir=self.out, window_start_ns=t_first - int(self.cfg.keep_s * NS), window_end_ns=now,
            reasons=reasons, facts=self.facts, job=self._job_json(), procs=self.procs.to_json(),
            ranks=self._ranks(), missing=[{"what": k, "reason": v} for k, v in missing.items()],
            notes=notes, collector=self._collector_json(), output_name=getattr(self, "output_name", "job.log"),
            extra_globs=self.cfg.files, extra_max_bytes=max(1 << 20, self.cfg.max_bytes // 4),
            archive=self.cfg.archive, nvidia_header=self.nvidia.header if self.nvidia else None,
            live=self._live_capture if self.cfg.live and self.job_ended_ns is None else None)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t_first / 1e9))
        path, man = BundleWriter(self.ring, req, perf).write(f"bundle-{stamp}")
        if perf is not None and self.job_ended_ns is None and not self.stop_flag.is_set():
            self.perf_restart = True        # by the main loop (see _loop)
        self.bundles.append(path)
        size = disk_usage(path)
        self.log(f"bundle written: {path} ({size / 1e6:.1f} MB; captured: "
                 + ", ".join(c["what"] for c in man["captured"])
                 + ("; missing: " + ", ".join(m["what"] for m in man["missing"]) if man["missing"] else "") + ")")
        self.log(f"analyse it with:  aftertrace analyze {path}")
        return path

    def _live_capture(self, dest: str, host: str) -> tuple[list[dict], list[dict]]:
        """The running job's processes' stacks, blocked calls and /dev/shm (``live.py``)."""
        from .live import capture
        self.procs.refresh(time.time_ns())
        return capture(self.procs.live(), dest, host, self.cfg.strace_s)

    def _banner(self) -> str:
        k = self.kernel.method if self.kernel else f"off ({self.missing.get('kernel log')})"
        what = (f"job pid {self.job_pid} ({' '.join(self.cfg.command)[:80]})" if self.cfg.command
                else f"pid {self.job_pid}")
        return (f"recording {what} into {self.ring.root} (keep {self.cfg.keep_s:g} s, at most "
                f"{self.cfg.max_bytes / 1e6:.0f} MB, every {self.cfg.interval_s:g} s); kernel log: {k}; "
                f"perf: {'on' if self.perf else 'off'}; gpu: {'nvidia-smi' if self.nvidia else 'none'}; "
                f"trigger: exit/signal, watchdog lines, {os.path.join(self.out, 'trigger')}, SIGUSR1 to pid {os.getpid()}")

    def _shutdown(self) -> None:
        for s, h in self._old_handlers.items():
            try:
                signal.signal(s, h if h is not None else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
        if self.writer_thread is not None and self.writer_thread.is_alive():
            self.writer_thread.join()
        if self.kernel is not None:
            self.kernel.stop()
        if self.nvidia is not None:
            self.nvidia.stop()
        if self.perf is not None:
            self.perf.stop()
        if self.ring is not None:
            self.ring.close()


def _rss_kb() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def disk_usage(path: str | os.PathLike) -> int:
    """Bytes in a file, or in the files under a folder (those that vanish meanwhile left out)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                n += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return n


def _version() -> str:
    try:
        from .. import __version__
        return __version__
    except Exception:
        return "?"
