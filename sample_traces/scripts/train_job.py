"""Tiny 2-rank CPU data-parallel training job used to record real crash bundles.

Launched by torchrun (gloo backend).  Every step: forward + backward of a small
MLP, DDP all_reduce of the gradients, optimizer step, one log line per rank.
torch.profiler runs with a schedule and writes Kineto traces per cycle with
tensorboard_trace_handler (default worker name "<hostname>_<pid>").

Controlled by environment variables (all optional):
  AFTERTRACE_PROFILER_DIR   where *.pt.trace.json.gz go (default ./profiler)
  AFTERTRACE_LEAK_FLAG      path of a flag file; once it exists, rank 0 starts
                            to leak AFTERTRACE_LEAK_MB MiB per step (default 128)
  AFTERTRACE_SIDE_DIR       directory for ground-truth side files (pid of each
                            rank, time of the first leaked allocation); these are
                            NOT part of the bundle
  AFTERTRACE_MAX_STEPS      stop after this many steps (default 100000)
  AFTERTRACE_HIDDEN         MLP width (default 1536)
  AFTERTRACE_BATCH          batch size (default 256)
"""

import json
import logging
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def _write_side(name, obj):
    side = os.environ.get("AFTERTRACE_SIDE_DIR")
    if not side:
        return
    os.makedirs(side, exist_ok=True)
    tmp = os.path.join(side, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(side, name))


# Deliberately NOT decorated with torch.distributed.elastic...errors.record: with @record, the
# SIGTERM that torchrun sends to rank 1 after rank 0's OOM kill makes rank 1 start writing
# error.json while it is CPU-throttled; torchrun can read the still-empty file and crash with a
# JSONDecodeError instead of printing the ChildFailedError summary (seen in a trial recording).
def main():
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)

    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s",
    )
    log = logging.getLogger("train")

    dist.init_process_group(backend="gloo")
    _write_side(f"rank{rank}.json", {"rank": rank, "local_rank": local_rank,
                                      "pid": os.getpid(), "ppid": os.getppid(),
                                      "init_done_ns": time.time_ns()})
    log.info("initialized process group backend=gloo world_size=%d local_rank=%d pid=%d",
             world, local_rank, os.getpid())

    hidden = int(os.environ.get("AFTERTRACE_HIDDEN", "1536"))
    batch = int(os.environ.get("AFTERTRACE_BATCH", "256"))
    model = nn.Sequential(
        nn.Linear(512, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10),
    )
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    leak_flag = os.environ.get("AFTERTRACE_LEAK_FLAG")
    leak_mb = int(os.environ.get("AFTERTRACE_LEAK_MB", "128"))
    max_steps = int(os.environ.get("AFTERTRACE_MAX_STEPS", "100000"))
    leaked = []  # the "bug": a per-step cache that is never freed

    prof_dir = os.environ.get("AFTERTRACE_PROFILER_DIR", "profiler")
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=5, warmup=1, active=2, repeat=0),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(prof_dir, use_gzip=True),
    )
    prof.start()
    step = 0
    try:
        while step < max_steps:
            t0 = time.perf_counter()
            x = torch.randn(batch, 512)
            y = torch.randint(0, 10, (batch,))
            with torch.profiler.record_function("forward_backward"):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(ddp(x), y)
                loss.backward()  # DDP all_reduce of gradient buckets (gloo)
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
            if rank == 0 and leak_flag and os.path.exists(leak_flag):
                if not leaked:
                    _write_side("leak_start.json", {"rank": rank, "pid": os.getpid(),
                                                    "step": step, "ts_ns": time.time_ns()})
                # touch every page so it is really charged to the memory cgroup
                leaked.append(b"\xa5" * (leak_mb << 20))
            dt = time.perf_counter() - t0
            log.info("step=%d step_time=%.3fs loss=%.4f", step, dt, loss.item())
            prof.step()
            step += 1
    finally:
        prof.stop()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
