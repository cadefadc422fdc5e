"""Worker for record_logs_incidents.py: a tiny 2-rank gloo DDP job that fails on purpose.

Launched by torchrun. One log line per step per rank (Python logging, the same format as
train_job.py). What goes wrong is chosen by AFTERTRACE_FAULT, at step AFTERTRACE_FAULT_STEP
(default 5), on rank AFTERTRACE_FAULT_RANK (default 1):

  exception   the rank raises RuntimeError (the script is decorated with @record, so torchrun
              prints the worker's traceback in its ChildFailedError summary)
  hang        the rank sleeps AFTERTRACE_HANG_S seconds (default 600) before its next
              collective; its peer's gloo all_reduce times out after AFTERTRACE_PG_TIMEOUT_S
              seconds (default 8)
  sigkill     the rank sends itself SIGKILL
  sigsegv     the rank sends itself SIGSEGV
  mismatch    the rank calls all_gather where its peer calls all_reduce
              (with TORCH_DISTRIBUTED_DEBUG=DETAIL torch reports the mismatch)
"""

import datetime
import logging
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


@record
def main():
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    fault = os.environ.get("AFTERTRACE_FAULT", "exception")
    fault_step = int(os.environ.get("AFTERTRACE_FAULT_STEP", "5"))
    fault_rank = int(os.environ.get("AFTERTRACE_FAULT_RANK", "1"))
    timeout_s = float(os.environ.get("AFTERTRACE_PG_TIMEOUT_S", "8"))
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s")
    log = logging.getLogger("train")

    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    log.info("initialized process group backend=gloo world_size=%d local_rank=%d pid=%d",
             world, local_rank, os.getpid())
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    # torch 2.13 CPU segfaults in DDP's constructor with TORCH_DISTRIBUTED_DEBUG=DETAIL
    # (recorded as sample logs-ddp-detail-segv); the mismatch scenario therefore averages the
    # gradients by hand instead of wrapping the model in DDP.
    ddp = model if fault == "mismatch" else DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(int(os.environ.get("AFTERTRACE_MAX_STEPS", "10"))):
        t0 = time.perf_counter()
        if rank == fault_rank and step == fault_step:
            log.warning("injecting fault %s at step %d", fault, step)
            if fault == "exception":
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if fault == "hang":
                time.sleep(float(os.environ.get("AFTERTRACE_HANG_S", "600")))
            if fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "sigsegv":
                os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "mismatch" and step == fault_step:
            t = torch.ones(4)
            if rank == fault_rank:
                out = [torch.zeros(4) for _ in range(world)]
                dist.all_gather(out, t)
            else:
                dist.all_reduce(t)
        x = torch.randn(32, 64)
        y = torch.randint(0, 10, (32,))
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        if ddp is model:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        log.info("step=%d step_time=%.3fs loss=%.4f", step, time.perf_counter() - t0, loss.item())
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
