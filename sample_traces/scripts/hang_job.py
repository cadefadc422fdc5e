"""Worker for record_hang_evidence.py: a 2-rank gloo DDP job whose DataLoader deadlocks.

Launched by torchrun. The dataset keeps a cache behind a ``threading.Lock``. From epoch
AFTERTRACE_FAULT_EPOCH (default 2) on, rank AFTERTRACE_FAULT_RANK (default 1) runs a background
thread in its main process that refreshes the cache, holding that lock most of the time. The
DataLoader forks its workers at the start of each epoch (no persistent workers): a worker forked
while the lock is held inherits it held, and blocks forever on its first sample. Nothing is
logged: the rank's main thread waits for the worker's data, its peer waits in the gradients'
all_reduce until the process group's timeout (AFTERTRACE_PG_TIMEOUT_S, default 600 s).

AFTERTRACE_FAULT=fifo instead makes that rank's main thread open a FIFO that nobody writes
(AFTERTRACE_FIFO, default /tmp/aftertrace-shard.fifo) at that epoch's start: a read that never
returns, as from a hung network file system.

AFTERTRACE_WATCHDOG_S=N arms Python's own hang watchdog in every rank, re-armed at each step:
``faulthandler.dump_traceback_later(N, exit=True)`` prints every thread's stack ("Timeout
(0:00:N)!") and ends the process with exit code 1 when a step takes N seconds.
"""

import datetime
import faulthandler
import logging
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    """Samples read through a small cache (a dict behind a lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cache = {}

    def __len__(self):
        return 64

    def __getitem__(self, i):
        with self.lock:
            x = self.cache.get(i % 8)
        if x is None:
            g = torch.Generator().manual_seed(i)
            x = torch.randn(64, generator=g)
        return x, i % 10


def refresh(ds: Shards, stop: threading.Event):
    while not stop.is_set():
        with ds.lock:
            ds.cache = {k: torch.randn(64) for k in range(8)}
            time.sleep(0.2)
        time.sleep(0.001)


@record
def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    fault_epoch = int(os.environ.get("AFTERTRACE_FAULT_EPOCH", "2"))
    fault_rank = int(os.environ.get("AFTERTRACE_FAULT_RANK", "1"))
    fault = os.environ.get("AFTERTRACE_FAULT", "lock")
    watchdog_s = float(os.environ.get("AFTERTRACE_WATCHDOG_S", "0"))
    timeout_s = float(os.environ.get("AFTERTRACE_PG_TIMEOUT_S", "600"))
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s")
    log = logging.getLogger("train")
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    log.info("initialized process group backend=gloo world_size=%d local_rank=%s pid=%d",
             world, os.environ.get("LOCAL_RANK"), os.getpid())
    ds = Shards()
    loader = DataLoader(ds, batch_size=8, num_workers=2, shuffle=False)
    model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    stop = threading.Event()
    step = 0
    for epoch in range(int(os.environ.get("AFTERTRACE_EPOCHS", "6"))):
        if epoch == fault_epoch and rank == fault_rank and fault == "fifo":
            # a read that never returns (a hung network file system): a FIFO nobody writes
            path = os.environ.get("AFTERTRACE_FIFO", "/tmp/aftertrace-shard.fifo")
            if not os.path.exists(path):
                os.mkfifo(path)
            log.info("epoch=%d reading %s", epoch, path)
            with open(path, "rb") as f:
                f.read()
        elif epoch == fault_epoch and rank == fault_rank:
            threading.Thread(target=refresh, args=(ds, stop), name="cache-refresh", daemon=True).start()
            time.sleep(0.05)
        for x, y in loader:
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            log.info("epoch=%d step=%d loss=%.4f step_time=%.3f", epoch, step, loss.item(), time.perf_counter() - t0)
            if watchdog_s:      # re-armed every step: it fires only when a step takes that long
                faulthandler.dump_traceback_later(watchdog_s, exit=True)
            step += 1
            time.sleep(0.05)
    stop.set()
    dist.destroy_process_group()
    log.info("done")


if __name__ == "__main__":
    main()
