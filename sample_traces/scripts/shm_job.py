"""A DataLoader that passes tensors larger than /dev/shm holds (sample logs-dataloader-shm).

Run it where /dev/shm is small, e.g. in a private mount namespace, as root:

    unshare -m bash -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm && \
        WORKERS=3 SAMPLE_MB=24 python sample_traces/scripts/shm_job.py' > train.log 2>&1

Each worker puts its batch (SAMPLE_MB MiB) in shared memory for the main process; once /dev/shm
is full a worker's allocation fails (torch 2.13: ENOSPC at once, re-raised in the main process by
the DataLoader). STRATEGY=file_system uses torch's other sharing strategy.
"""
import logging
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [rank0] train: %(message)s")
log = logging.getLogger()
MB = int(os.environ.get("SAMPLE_MB", "24"))


class Big(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return torch.full((MB * 1024 * 1024 // 4,), float(i))


if os.environ.get("STRATEGY"):
    torch.multiprocessing.set_sharing_strategy(os.environ["STRATEGY"])
dl = DataLoader(Big(), batch_size=1, num_workers=int(os.environ.get("WORKERS", "3")), prefetch_factor=2)
log.info("pid=%d workers=%s sample=%d MiB", os.getpid(), os.environ.get("WORKERS", "3"), MB)
t = time.time()
for step, x in enumerate(dl):
    log.info("step=%d loss=%.4f step_time=%.3f", step, float(x.mean()), time.time() - t)
    t = time.time()
    time.sleep(0.2)
    if step >= 50:
        break
log.info("done")
