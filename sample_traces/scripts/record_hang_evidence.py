"""Record a DataLoader deadlock and the evidence an engineer takes by hand while it hangs.

    python3 sample_traces/scripts/record_hang_evidence.py OUT_DIR

Runs ``hang_job.py`` under torchrun (2 ranks, gloo, ``--tee 3``) with the process group's
timeout at AFTERTRACE_PG_TIMEOUT_S (default 40 s). When no rank has logged a step for
HANG_AFTER_S seconds (default 6), it takes, for the launcher, each rank and each rank's
children (the DataLoader workers): ``py-spy dump`` (text and ``--json``), a bounded
``strace -f -tt -T -p`` (STRACE_S seconds, default 3), and copies of ``/proc/<pid>/status``,
``stack`` and ``wchan``; then waits for the job to end by itself (the peer's all_reduce times
out). TOOLS (default ``py-spy,strace,proc``) chooses what is taken; ``gdb`` adds ``gdb -p PID
-batch -ex "thread apply all bt"`` of each process (native stacks, as an engineer without py-spy
takes them). Layout: OUT_DIR/vm/logs/torchrun.log, vm/stacks/py-spy-<pid>.{txt,json},
vm/stacks/gdb-<pid>.txt, vm/strace/strace-<pid>.txt, vm/proc/<pid>/{status,stack,wchan}, and
OUT_DIR/capture.json (the commands, the pids by role, the capture times).

Needs root (ptrace of another process, /proc/<pid>/stack), torch and py-spy in TORCH_PY's
environment (default /opt/torchenv/bin/python), strace on the PATH.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    torch_py = os.environ.get("TORCH_PY", "/opt/torchenv/bin/python")
    bindir = Path(torch_py).parent
    pyspy = shutil.which("py-spy", path=str(bindir)) or shutil.which("py-spy")
    host = out / "vm"
    for d in ("logs", "stacks", "strace", "proc"):
        (host / d).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               AFTERTRACE_PG_TIMEOUT_S=os.environ.get("AFTERTRACE_PG_TIMEOUT_S", "40"))
    log_path = host / "logs" / "torchrun.log"
    cmd = [str(bindir / "torchrun"), "--nproc-per-node", "2", "--tee", "3", str(HERE / "hang_job.py")]
    log = open(log_path, "w")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out)
    hang_after = float(os.environ.get("HANG_AFTER_S", "6"))
    tools = set(os.environ.get("TOOLS", "py-spy,strace,proc").split(","))
    strace_s = float(os.environ.get("STRACE_S", "3"))
    last, last_t, steps = None, time.time(), 0
    while job.poll() is None:
        time.sleep(0.5)
        text = log_path.read_text(errors="replace")
        n = len(re.findall(r" step=\d+", text))
        if n != steps:
            steps, last_t = n, time.time()
        if steps and time.time() - last_t >= hang_after:
            break
    if job.poll() is not None:
        print("the job ended before it hung", file=sys.stderr)
        return 1
    agent = job.pid
    ranks = children(agent)
    workers = {r: children(r) for r in ranks}
    cap = {"command": cmd, "hang_detected_after_s": hang_after, "agent": agent, "ranks": ranks,
           "workers": {str(k): v for k, v in workers.items()}, "captures": []}
    for pid in [agent] + ranks + [w for r in ranks for w in workers[r]]:
        t0 = time.time_ns()
        if "py-spy" in tools:
            for fmt, args in (("txt", []), ("json", ["--json"])):
                with open(host / "stacks" / f"py-spy-{pid}.{fmt}", "w") as f:
                    subprocess.run([pyspy, "dump", "--pid", str(pid)] + args, stdout=f, stderr=subprocess.STDOUT)
        if "gdb" in tools:
            with open(host / "stacks" / f"gdb-{pid}.txt", "w") as f:
                subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"], stdout=f,
                               stderr=subprocess.STDOUT, timeout=120)
        for name in ("status", "stack", "wchan") if "proc" in tools else ():
            (host / "proc" / str(pid)).mkdir(exist_ok=True)
            try:
                shutil.copyfile(f"/proc/{pid}/{name}", host / "proc" / str(pid) / name)
            except OSError as e:
                print(f"/proc/{pid}/{name}: {e}", file=sys.stderr)
        cap["captures"].append({"pid": pid, "stacks_ns": t0})
    for pid in ranks + [w for r in ranks for w in workers[r]] if "strace" in tools else ():
        t0 = time.time_ns()
        subprocess.run(["timeout", "-s", "INT", str(strace_s), "strace", "-f", "-tt", "-T", "-p", str(pid),
                        "-o", str(host / "strace" / f"strace-{pid}.txt")], stderr=subprocess.DEVNULL)
        next(c for c in cap["captures"] if c["pid"] == pid)["strace_ns"] = t0
    rc = job.wait(timeout=600)
    cap["job_exit_code"] = rc
    (out / "capture.json").write_text(json.dumps(cap, indent=1) + "\n")
    print(json.dumps(cap, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
