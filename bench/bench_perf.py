"""perf script ingest throughput: aftertrace's parser vs a bare Python line loop.

Input: real call-chain-heavy perf script files (FlameGraph's example-perf-stacks,
a system-wide -g recording; and the sample bundle's recording with sched
tracepoints), concatenated to the target size.

    python bench/bench_perf.py [--mb 500]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "callchain": [ROOT / "tests/data/perf_script/flamegraph__example-perf-stacks.txt.gz"],
    "sched+callchain": [ROOT / "sample_traces/oom-after-throttle/vm/perf/perf.script.txt.gz"],
}

PARSE = """
import time, shutil, tempfile
from aftertrace.ingest.parse import parse_file, ParseJob
from aftertrace.ingest.registry import default_registry
default_registry()          # imports (polars, the format modules) are not part of the measurement
out = tempfile.mkdtemp()
t = time.perf_counter()
r = parse_file(ParseJob({path!r}, "bench.txt", out))
dt = time.perf_counter() - t
shutil.rmtree(out)
RESULT = dict(tool="aftertrace perf_script -> Parquet parts", seconds=dt, status=r.status,
              samples=r.counts.get("samples"), events=r.counts.get("events"), stacks=r.counts.get("stacks"))
"""
LOOP = """
import time
t = time.perf_counter()
n = 0
with open({path!r}, "rb") as f:
    for line in f:
        if line.startswith(b"\\t"):
            n += 1
dt = time.perf_counter() - t
RESULT = dict(tool="bare Python line loop (count frame lines)", seconds=dt, frames=n)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    args = ap.parse_args()
    compare("perf", ".txt", SOURCES, [PARSE, LOOP], args.mb, ("samples", "events", "stacks", "frames"))

if __name__ == "__main__":
    main()
