"""Record small real log-only incidents: a 2-rank torchrun/gloo job on CPU that fails on purpose.

Usage (from the repository root; torch is not an aftertrace dependency, so point at a Python
that has it):

    TORCH_PY=/opt/torchenv/bin/python python3 sample_traces/scripts/record_logs_incidents.py \
        exception hang sigkill mismatch

For each scenario NAME it writes ``sample_traces/logs-NAME/<hostname>/``:

    host/hostname, host/date          `hostname`, `date` (the zone for local-time strings)
    logs/torchrun.log                 torchrun's combined stdout+stderr (--tee 3: workers'
                                      lines prefixed "[defaultN]:")
    logs/torchrun_log_dir/...         what `torchrun --log-dir` wrote per local rank

The job is ``record_logs_job.py`` (see its docstring for the faults). Environment of the job:
TORCH_CPP_LOG_LEVEL=INFO (c10 log lines) and TORCH_DISTRIBUTED_DEBUG=INFO (DETAIL for
``mismatch``; override with AFTERTRACE_DIST_DEBUG), TZ unchanged. AFTERTRACE_SAMPLE_NAME names
the output folder ``logs-<name>`` when one scenario is recorded under another name. Nothing is
edited afterwards.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FAULTS = {"exception", "hang", "sigkill", "sigsegv", "mismatch"}


def record(name: str, torch_py: str) -> Path:
    host = socket.gethostname()
    out = ROOT / f"logs-{os.environ.get('AFTERTRACE_SAMPLE_NAME', name)}" / host
    if out.exists():
        shutil.rmtree(out)
    (out / "host").mkdir(parents=True)
    (out / "logs").mkdir()
    (out / "host" / "hostname").write_text(subprocess.run(["hostname"], capture_output=True,
                                                          text=True).stdout)
    env = dict(os.environ, TORCH_CPP_LOG_LEVEL="INFO", AFTERTRACE_FAULT=name, OMP_NUM_THREADS="1",
               TORCH_DISTRIBUTED_DEBUG=os.environ.get("AFTERTRACE_DIST_DEBUG",
                                                      "DETAIL" if name == "mismatch" else "INFO"))
    torchrun = str(Path(torch_py).parent / "torchrun")
    cmd = [torchrun, "--nproc_per_node=2", "--tee", "3",
           "--log-dir", str(out / "logs" / "torchrun_log_dir"),
           str(HERE / "record_logs_job.py")]
    with open(out / "logs" / "torchrun.log", "wb") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=180,
                                cwd=ROOT.parent).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    (out / "host" / "date").write_text(subprocess.run(["date"], capture_output=True, text=True).stdout)
    print(f"{name}: torchrun exit {rc} -> {out}")
    return out


def main(argv: list[str]) -> int:
    torch_py = os.environ.get("TORCH_PY", sys.executable)
    names = argv or sorted(FAULTS)
    bad = [n for n in names if n not in FAULTS]
    if bad:
        print(f"unknown scenario(s) {bad}; choose from {sorted(FAULTS)}", file=sys.stderr)
        return 2
    for n in names:
        record(n, torch_py)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
