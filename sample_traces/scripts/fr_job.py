"""A 2-rank gloo job with PyTorch's Flight Recorder on, where one rank stops calling collectives.

Launched by torchrun (``TORCH_FR_BUFFER_SIZE=2000`` in the environment turns the recorder on).
Each rank runs steps of one all_reduce; at step AFTERTRACE_FR_STALL_STEP (default 12) rank
AFTERTRACE_FR_STALL_RANK (default 1) stops before its all_reduce (a stuck input pipeline:
``time.sleep``), so its peer waits in the collective until the process group's timeout
(AFTERTRACE_PG_TIMEOUT_S, default 20 s). A watchdog thread in every rank dumps the recorder as
JSON (``torch._C._distributed_c10d._dump_fr_trace_json()``, no pickle) to
``$AFTERTRACE_FR_DIR/fr_trace_rank_<rank>.json`` when the rank has made no progress for
AFTERTRACE_FR_DUMP_AFTER_S seconds (default 6): what an operator's hang handler does;
AFTERTRACE_FR_PICKLE=1 also writes the default pickled dump (``nccl_trace_rank_<rank>``).

AFTERTRACE_FR_FAULT=mismatch instead makes that rank call ``all_gather`` where its peer calls
``all_reduce`` at that step (a desync: code paths that differ between ranks).
"""

import datetime
import logging
import os
import threading
import time

import torch
import torch.distributed as dist

logging.basicConfig(format="%(asctime)s %(levelname)s [rank%(rank)s] %(message)s", level=logging.INFO)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get(
        "AFTERTRACE_PG_TIMEOUT_S", "20"))))
    rank = dist.get_rank()
    log = logging.LoggerAdapter(logging.getLogger("train"), {"rank": rank})
    stall_step = int(os.environ.get("AFTERTRACE_FR_STALL_STEP", "12"))
    stall_rank = int(os.environ.get("AFTERTRACE_FR_STALL_RANK", "1"))
    out = os.environ.get("AFTERTRACE_FR_DIR", ".")
    dump_after = float(os.environ.get("AFTERTRACE_FR_DUMP_AFTER_S", "6"))
    last = [time.monotonic()]

    def watchdog() -> None:
        while True:
            time.sleep(0.5)
            if time.monotonic() - last[0] >= dump_after:
                path = os.path.join(out, f"fr_trace_rank_{rank}.json")
                with open(path, "wb") as f:
                    f.write(torch._C._distributed_c10d._dump_fr_trace_json())
                if os.environ.get("AFTERTRACE_FR_PICKLE"):      # the default form too, as fr_trace reads it
                    with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as f:
                        f.write(torch._C._distributed_c10d._dump_fr_trace())
                log.info("no progress for %.0f s: flight recorder dumped to %s", dump_after, path)
                return

    threading.Thread(target=watchdog, daemon=True, name="fr-watchdog").start()
    x = torch.ones(1024)
    for step in range(1, 40):
        t0 = time.monotonic()
        if step == stall_step and rank == stall_rank:
            if os.environ.get("AFTERTRACE_FR_FAULT") == "mismatch":
                log.info("step=%d gathering instead", step)
                dist.all_gather([torch.empty_like(x) for _ in range(dist.get_world_size())], x)
            else:
                log.info("step=%d waiting for input", step)
                time.sleep(3600)
        else:
            dist.all_reduce(x)
        if step % 4 == 0:
            dist.broadcast(x, src=0)
        last[0] = time.monotonic()
        log.info("step=%d step_time=%.3f", step, last[0] - t0)
        time.sleep(0.1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
