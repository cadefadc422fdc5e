"""The training job of the incident corpus: a 2-rank CPU data-parallel job (gloo) that can be
made to fail in the ways real jobs fail. Launched by torchrun.

It prints what a real training script prints (Python logging, one ``step=N`` line per step
per rank) and never announces a fault: what really happened, and when, goes only to the
side folder (``AFTERTRACE_SIDE_DIR``), which is the recorder's ground truth and is never part
of a bundle.

Faults that happen *inside* the job start when the recorder creates the flag file
``AFTERTRACE_FAULT_FLAG`` (so the recorder chooses the moment), on rank
``AFTERTRACE_FAULT_RANK``:

  leak        the rank keeps ``AFTERTRACE_LEAK_MB`` MiB per step in a list (a cache never freed)
  exception   the rank's labels go out of range: torch raises IndexError in cross_entropy
  mismatch    the rank runs all_gather where its peers run all_reduce (no DDP in this mode:
              DDP's constructor crashes under TORCH_DISTRIBUTED_DEBUG=DETAIL on torch 2.13 CPU)
  io          every step the rank appends its metrics to ``AFTERTRACE_IO_FILE`` and fsyncs
              (always, not only after the flag: the recorder freezes that file system)
  ckpt        rank 0 saves a checkpoint every ``AFTERTRACE_CKPT_EVERY`` steps to
              ``AFTERTRACE_CKPT_DIR`` and keeps them all (the disk fills up)
  loader      batches come from a DataLoader with ``AFTERTRACE_LOADER_WORKERS`` workers and
              large samples, passed through shared memory (/dev/shm)
  exit        the rank leaves with ``os._exit(3)``: no traceback, no message (a library that
              calls exit() on an error it does not report)
  worker_leak the rank's DataLoader workers keep 8 MiB per sample they load (with
              AFTERTRACE_LOADER_WORKERS)
  deadlock    the rank takes a lock it already holds: its main thread sleeps forever (state S,
              no CPU, nothing printed) and wakes for no signal but a fatal one
  worker_segv one of the rank's DataLoader workers (``AFTERTRACE_LOADER_WORKERS``), the first to
              load a sample once the flag exists, reads through a null pointer in native code
              (``ctypes.string_at(0)``) inside ``__getitem__``; once, in that worker only. Its
              SIGSEGV disposition is the default when it reads (see ``Samples.crash``), so the
              kernel logs ``segfault at 0`` for it and the rank's DataLoader raises
  worker_exception one of the rank's DataLoader workers, the first to load a sample once the flag
              exists, finds the sample's record corrupt (truncated) and raises a plain
              ``ValueError`` in ``__getitem__``; once, in that worker only. torch's worker loop
              sends it to the rank, whose DataLoader re-raises it there (``Caught ValueError in
              DataLoader worker process N.`` with the worker's original traceback); nothing of
              torch's default handling is changed

Faults from outside (SIGSTOP, the freezer cgroup, SIGKILL, CPU quota, other tenants) need
nothing from the job. Other settings: AFTERTRACE_WATCHDOG_S (every rank runs a thread that logs
a warning each N seconds while its last step is more than N seconds old, as training scripts'
own "no progress" watchdogs do; unset: none), AFTERTRACE_PG_TIMEOUT_S (collective timeout, default
30), AFTERTRACE_HIDDEN, AFTERTRACE_BATCH, AFTERTRACE_PROFILER_DIR (Kineto traces of two steps
every ``AFTERTRACE_PROFILE_EVERY`` steps; unset: no profiler), AFTERTRACE_MAX_STEPS.
"""

import ctypes
import datetime
import faulthandler
import fcntl
import json
import logging
import os
import signal
import socket
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def side(name, **obj):
    d = os.environ.get("AFTERTRACE_SIDE_DIR")
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    obj.setdefault("ts_ns", time.time_ns())
    tmp = os.path.join(d, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(d, name + ".json"))


class Samples(torch.utils.data.Dataset):
    """Random samples of ``dim`` floats with a side payload (think: the raw sequence a sample
    came from). Each worker's batch travels through shared memory. Once ``long_flag`` exists,
    the payloads are long (the part of the data set with long sequences)."""

    def __init__(self, n, dim, classes, long_flag, leak_flag="", hang_flag="", segv_flag="", exc_flag=""):
        self.n, self.dim, self.classes, self.long_flag, self.leak_flag = n, dim, classes, long_flag, leak_flag
        self.hang_flag, self.segv_flag, self.exc_flag = hang_flag, segv_flag, exc_flag
        self.kept = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        long = bool(self.long_flag) and os.path.exists(self.long_flag)
        payload = torch.zeros((1 << 18) if long else 16)
        if self.hang_flag and os.path.exists(self.hang_flag):
            # the worker blocks for good reading its sample (a dead network mount, a lock): silent
            d = os.environ.get("AFTERTRACE_SIDE_DIR", "")
            if d and not os.path.exists(os.path.join(d, "fault.json")):
                side("fault", what="the rank's DataLoader workers block reading a sample",
                     rank=int(os.environ.get("RANK", "-1")), pid=os.getppid(), worker_pid=os.getpid(), step=-1)
            threading.Event().wait()
        if self.segv_flag and os.path.exists(self.segv_flag):
            self.crash()
        if self.exc_flag and os.path.exists(self.exc_flag) and self.claim("worker_exception"):
            self.corrupt(i)
        if self.leak_flag and os.path.exists(self.leak_flag):
            self.kept.append(b"\x5a" * (8 << 20))     # a per-sample cache in the worker, never freed
        return torch.randn(self.dim, generator=g), int(torch.randint(0, self.classes, (1,), generator=g)), payload


    @staticmethod
    def claim(name):
        """True in the one worker that creates ``<side dir>/<name>.claim`` first (O_EXCL), once."""
        d = os.environ.get("AFTERTRACE_SIDE_DIR", "")
        if not d:
            return False
        try:
            os.close(os.open(os.path.join(d, name + ".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False                             # another worker took the fault already
        return True

    def decode(self, i, raw):
        """A sample's record as stored: ``dim`` little-endian float32 values."""
        want = self.dim * 4
        if len(raw) != want:
            raise ValueError(f"corrupt sample {i}: expected {self.dim} float32 values ({want} bytes), "
                             f"got {len(raw)} bytes")
        return torch.frombuffer(bytearray(raw), dtype=torch.float32)

    def corrupt(self, i):
        """The sample's record is truncated (a partly written shard): decoding it raises ValueError
        in this worker. The worker notes its pid and the time just before it raises."""
        raw = os.urandom(1000)
        info = torch.utils.data.get_worker_info()
        side("fault", what="a DataLoader worker of the rank raises ValueError on a corrupt sample",
             rank=int(os.environ.get("RANK", "-1")), pid=os.getppid(), worker_pid=os.getpid(),
             worker_id=None if info is None else info.id, sample=i, step=-1, ts_ns=time.time_ns())
        self.decode(i, raw)

    def crash(self):
        """A null-pointer read in native code (a decoder or extension with a bad pointer), in the one
        worker that claims the fault first (an O_EXCL file beside the side files), once.

        The worker's SIGSEGV disposition is made the default first: a forked worker inherits the
        rank's faulthandler (torchrun's ``@record`` enables it) and torch's worker loop installs its
        own handler, which prints ``ERROR: Unexpected segmentation fault encountered in worker.`` and
        re-raises; the kernel logs ``segfault at`` only for a fault no handler catches. Either way the
        worker dies of SIGSEGV."""
        d = os.environ.get("AFTERTRACE_SIDE_DIR", "")
        if not d:
            return
        try:
            os.close(os.open(os.path.join(d, "worker_segv.claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return                                   # another worker crashed already
        faulthandler.disable()
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        with open("/proc/self/status") as f:
            caught = int(next(l for l in f if l.startswith("SigCgt:")).split()[1], 16)
        side("fault", what="a DataLoader worker of the rank reads through a null pointer in native code",
             rank=int(os.environ.get("RANK", "-1")), pid=os.getppid(), worker_pid=os.getpid(),
             faulthandler=faulthandler.is_enabled(), sigsegv_caught=bool(caught & (1 << (signal.SIGSEGV - 1))),
             step=-1)
        ctypes.string_at(0)      # SIGSEGV in C, in the worker


def batches(batch, dim, classes, long_flag, leak_flag="", hang_flag="", segv_flag="", exc_flag=""):
    workers = int(os.environ.get("AFTERTRACE_LOADER_WORKERS", "0"))
    if workers:
        ds = Samples(10**9, dim, classes, long_flag, leak_flag, hang_flag, segv_flag, exc_flag)
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                         prefetch_factor=int(os.environ.get("AFTERTRACE_PREFETCH", "4")),
                                         persistent_workers=True,
                                         timeout=float(os.environ.get("AFTERTRACE_LOADER_TIMEOUT", "0")))
        for x, y, _ in dl:
            yield x, y
    while True:
        yield torch.randn(batch, dim), torch.randint(0, classes, (batch,))


@record
def main():
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    fault = os.environ.get("AFTERTRACE_FAULT", "none")
    fault_rank = int(os.environ.get("AFTERTRACE_FAULT_RANK", "1"))
    flag = os.environ.get("AFTERTRACE_FAULT_FLAG", "")
    timeout_s = float(os.environ.get("AFTERTRACE_PG_TIMEOUT_S", "30"))
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s")
    log = logging.getLogger("train")

    side(f"rank{rank}", rank=rank, local_rank=local_rank, pid=os.getpid(), ppid=os.getppid(),
         host=socket.gethostname())
    if fault == "stale_lock" and rank == fault_rank:
        # the rank's data cache is locked by a process a previous job left behind: it waits for
        # the lock before joining the process group, silently, as file-lock helpers do
        lock = open(os.environ["AFTERTRACE_LOCK_FILE"], "a")
        side("fault", what="waits for a cache lock a stale process holds, before joining", rank=rank,
             pid=os.getpid(), step=-1)
        fcntl.flock(lock, fcntl.LOCK_EX)
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    log.info("initialized process group backend=gloo world_size=%d local_rank=%d pid=%d",
             world, local_rank, os.getpid())
    last_step = [time.monotonic()]
    watch_s = float(os.environ.get("AFTERTRACE_WATCHDOG_S", "0"))
    if watch_s > 0:
        def watchdog():
            while True:
                time.sleep(watch_s)
                idle = time.monotonic() - last_step[0]
                if idle > watch_s:
                    log.warning("watchdog: no step for %.0f s", idle)
        threading.Thread(target=watchdog, name="watchdog", daemon=True).start()

    dim, classes = 512, 10
    hidden = int(os.environ.get("AFTERTRACE_HIDDEN", "1024"))
    batch = int(os.environ.get("AFTERTRACE_BATCH", "256"))
    model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, classes))
    net = model if fault == "mismatch" else DDP(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    mine = rank == fault_rank
    leak_mb = int(os.environ.get("AFTERTRACE_LEAK_MB", "128"))
    leaked = []
    io_file = os.environ.get("AFTERTRACE_IO_FILE") if fault == "io" and mine else None
    ckpt_dir = os.environ.get("AFTERTRACE_CKPT_DIR") if fault == "ckpt" and rank == 0 else None
    ckpt_every = int(os.environ.get("AFTERTRACE_CKPT_EVERY", "20"))
    prof = None
    prof_dir = os.environ.get("AFTERTRACE_PROFILER_DIR")
    if prof_dir:
        every = int(os.environ.get("AFTERTRACE_PROFILE_EVERY", "40"))
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=every - 3, warmup=1, active=2, repeat=0),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(prof_dir, use_gzip=True))
        prof.start()
    data = batches(batch, dim, classes, flag if fault == "loader" and mine else "",
                   flag if fault == "worker_leak" and mine else "", flag if fault == "worker_hang" and mine else "",
                   flag if fault == "worker_segv" and mine else "", flag if fault == "worker_exception" and mine else "")
    fired = False
    step = 0
    max_steps = int(os.environ.get("AFTERTRACE_MAX_STEPS", "1000000"))
    try:
        while step < max_steps:
            t0 = time.perf_counter()
            now = mine and flag and not fired and os.path.exists(flag)
            if now:
                fired = True
            if fault == "uneven" and fired:
                # this rank's shard is shorter: its loop ends, it tears down and exits 0
                side("fault", what="its data runs out: it leaves the training loop and exits 0", rank=rank,
                     pid=os.getpid(), step=step)
                break
            x, y = next(data)
            if fault == "spin" and fired:
                # a bug that loops forever without yielding (a retry loop, a bad termination test):
                # the rank burns its CPU and makes no progress
                side("fault", what="loops forever on the CPU", rank=rank, pid=os.getpid(), step=step)
                while True:
                    pass
            if fault == "deadlock" and fired:
                side("fault", what="lock taken twice", rank=rank, pid=os.getpid(), step=step)
                lock = threading.Lock()
                lock.acquire()
                lock.acquire()
            if fault == "exit" and fired:
                side("fault", what="os._exit(3)", rank=rank, pid=os.getpid(), step=step)
                os._exit(3)
            if fault == "abort" and fired:
                side("fault", what="abort() in native code (a failed check)", rank=rank, pid=os.getpid(),
                     step=step)
                ctypes.CDLL(None).abort()   # as a C++ CHECK or assert in an extension does
            if fault == "segv" and fired:
                side("fault", what="null pointer read in native code", rank=rank, pid=os.getpid(), step=step)
                ctypes.string_at(0)      # SIGSEGV in C, as a bad extension or driver call would
            if fault == "exception" and fired:
                side("fault", what="labels out of range", rank=rank, pid=os.getpid(), step=step)
                y = y + classes          # a label past the last class: cross_entropy raises
            with torch.profiler.record_function("forward_backward"):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(net(x), y)
                loss.backward()
            if net is model:             # mismatch mode: gradients averaged by hand
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
                t = torch.tensor([loss.item()])
                if fired:
                    side("fault", what="all_gather where the peers all_reduce", rank=rank, pid=os.getpid(),
                         step=step)
                    out = [torch.zeros(1) for _ in range(world)]
                    dist.all_gather(out, t)
                else:
                    dist.all_reduce(t)
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
            if fault == "leak" and fired:
                if not leaked:
                    side("fault", what="leak starts", rank=rank, pid=os.getpid(), step=step, mb=leak_mb)
                leaked.append(b"\xa5" * (leak_mb << 20))
            dt = time.perf_counter() - t0
            log.info("step=%d step_time=%.3fs loss=%.4f", step, dt, loss.item())
            if io_file:
                with open(io_file, "a") as f:
                    f.write(json.dumps({"step": step, "loss": loss.item(), "t": time.time()}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
            if ckpt_dir and step and step % ckpt_every == 0:
                path = os.path.join(ckpt_dir, f"ckpt_step{step:06d}.pt")
                side("ckpt_begin", step=step, path=path)
                try:
                    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path)
                except BaseException:
                    side("ckpt_failed", step=step, path=path)
                    raise
                log.info("saved checkpoint %s", path)
            if prof is not None:
                prof.step()
            step += 1
            last_step[0] = time.monotonic()
    except BaseException as e:
        side(f"exit_rank{rank}", exc=type(e).__name__, msg=str(e)[:500], step=step)
        raise
    finally:
        if prof is not None:
            prof.stop()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
