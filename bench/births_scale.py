"""Clock matching by births at scale: a synthetic bundle of N threads forked by one cgroup member
(perf ``sched_process_fork`` lines under the header of tests/data/clock_match/leak-r1-births)
and N/2 cgroup snapshots 0.5 s apart, each thread listed in ``tasks`` for 1.2 s.

    python3 bench/births_scale.py N OUT     # writes the bundle
"""
import os
import shutil
import sys
from pathlib import Path

n = int(sys.argv[1]); out = sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
HEADER = Path(__file__).resolve().parents[1] / "tests/data/clock_match/leak-r1-births/vm/perf/perf.script.txt"
hdr = HEADER.read_text().split("\n#\n")[0]
os.makedirs(f"{out}/vm/perf")
off = 1796203208.242
snaps = n // 2
with open(f"{out}/vm/perf/perf.script.txt", "w") as f:
    f.write(hdr + "\n#\n")
    for k in range(n):
        b = 1000.0 + k * 0.25 + 0.1
        f.write(f"      pt_elastic  2251 [001]   {b:.6f}: sched:sched_process_fork: comm=pt_elastic pid=2251 child_comm=x child_pid={10000+k} ffffffff813a5531 __traceiter_sched_process_fork+0x31 ([kernel.kallsyms])\n")
for j in range(snaps + 2):
    t = off + 1000.0 + j * 0.5
    d = f"{out}/vm/cgroup/{t:.6f}/cpu/job"; os.makedirs(d)
    alive = [10000 + k for k in range(n) if 1000.0 + k*0.25 + 0.1 + off <= t < 1000.0 + k*0.25 + 0.1 + off + 1.2]
    open(f"{d}/tasks", "w").write("\n".join(map(str, [2251] + alive)) + "\n")
    open(f"{d}/cgroup.procs", "w").write("2251\n")
    open(f"{d}/cpu.stat", "w").write("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
