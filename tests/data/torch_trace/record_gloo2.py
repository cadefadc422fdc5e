# Records a small real 2-rank gloo job's Kineto traces with torch.profiler (CPU).
import json, os, socket, time
import torch, torch.distributed as dist
from torch.profiler import profile, schedule, tensorboard_trace_handler, record_function, ProfilerActivity

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
out = os.environ["OUT"]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
truth = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "world_size": world, "marks": []}
handler = tensorboard_trace_handler(out, use_gzip=(rank == 1))
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=handler, record_shapes=True) as prof:
    for step in range(6):
        t0 = time.time_ns()
        with record_function(f"aftertrace_mark_{step}"):
            x = torch.randn(32, 64)
            loss = model(x).sum()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            t = torch.ones(1000) * rank
            dist.all_reduce(t)
            dist.barrier()
            opt.step(); opt.zero_grad()
        t1 = time.time_ns()
        truth["marks"].append({"step": step, "name": f"aftertrace_mark_{step}", "before_ns": t0, "after_ns": t1})
        prof.step()
with open(os.path.join(out, f"truth_rank{rank}.json"), "w") as f:
    json.dump(truth, f, indent=1)
dist.destroy_process_group()
