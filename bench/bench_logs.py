"""Text-log ingest throughput (NCCL + training/launcher logs): aftertrace's parser vs a Python line loop.

Inputs, concatenated from real files to the target size:

* ``nccl``: NCCL 2.27 nccl-tests INFO log with COLL lines (Timez-zx/nccl-tests) and the
  16-node NCCL 2.7 init/ring/tree log from bigscience (``tests/data/nccl_log``);
* ``app``: the real torchrun captures recorded for the samples (``tests/data/app_log``, gloo on
  CPU, ``--tee 3`` prefixes, c10 INFO lines, tracebacks, ChildFailedError blocks) and the
  oom-after-throttle bundle's torchrun.log (steps). Crash-dense: a crash every few hundred lines.
* ``train`` (in the harness, ``python -m bench``): the shape of a long run's log: the oom-after-throttle torchrun.log's header, its
  real step lines continued (each copy's step numbers and times shifted by the copy's length, see
  :func:`train_log`) to the target size, and its crash (ChildFailedError) once at the end.

Rows written: ``events`` (meaningful lines one each; repetitive NCCL INFO lines, step lines and
plain log lines collapsed to one event per process/device or rank, see ``ingest.formats.logs.engine``)
and ``metrics`` (one row per step line and value: step, loss, step_time).

The comparison is what a user would run instead: a plain Python loop over the lines that
applies one regex per line (the NCCL header, or a timestamp) — far less work than the parser.
The harness (``python -m bench``) adds a *floor* row per input: reading and splitting every line
(``ingest.lines``) and writing as many metric rows as the parse yielded, through the same sink,
with no parsing at all: the least any parser of this input must do on this machine.
Each row also gives ``cpu_s``, the process's CPU seconds (all threads): on a shared machine it
moves much less with the load than the wall-clock seconds do. The parser's time starts after
the parser modules are imported (``import_s``, a once-per-process cost: ~0.75 s, which alone
would be more than 100 MB at 150 MB/s takes). ``--repeat N`` parses the file N times in the
child process and reports the fastest run (wall), with that run's ``cpu_s``.

    python bench/bench_logs.py [--mb 200] [--repeat 3]
"""
from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NCCL = ROOT / "tests/data/nccl_log"
APP = ROOT / "tests/data/app_log"
SOURCES = {
    "nccl": [NCCL / "timez-zx__nccl-tests_nccl.log.gz", NCCL / "bigscience__n16_32gb_all_reduce_bench.txt.gz"],
    "app": [APP / "torchrun_hang.log", APP / "torchrun_exception.log", APP / "torchrun_mismatch.log",
            ROOT / "sample_traces/oom-after-throttle/vm/logs/torchrun.log"],
}

TRAIN_SOURCE = ROOT / "sample_traces/oom-after-throttle/vm/logs/torchrun.log"
_STEP = re.compile(r"^(\[default\d+\]:)(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})( \w+ \[rank\d+\] [\w.]+: step=)(\d+)(\D.*)$",
                   re.S)


def train_log(target_bytes: int) -> Path:
    """``train``: the real log's header, its step lines repeated with step numbers and times moved
    on by one copy's span each time, up to ``target_bytes``, then its crash. Cached under bench/out/."""
    dest = OUT / f"logs-train-{target_bytes // 1_000_000}MB.log"
    if dest.exists() and dest.stat().st_size >= target_bytes:
        return dest
    lines = TRAIN_SOURCE.read_text().splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if _STEP.match(ln)]
    head, tail = lines[:at[0]], lines[at[-1] + 1:]
    steps = [_STEP.match(lines[i]).groups() for i in at]
    fmt = "%Y-%m-%d %H:%M:%S,%f"
    times = [datetime.strptime(g[1], fmt) for g in steps]
    span = times[-1] - times[0] + (times[-1] - times[-3])     # (two ranks: one more step's time)
    per_copy = max(int(g[3]) for g in steps) + 1
    OUT.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as f:
        n = sum(f.write(ln) for ln in head)
        k = 0
        while n < target_bytes:
            for g, t in zip(steps, times):
                t = t + span * k
                n += f.write(f"{g[0]}{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}{g[2]}"
                             f"{int(g[3]) + per_copy * k}{g[4]}")
            k += 1
        for ln in tail:
            f.write(ln)
    return dest


LOOP_RX = rb"^(?:\S+:\d+:\d+ \[\d+\] NCCL (INFO|WARN)|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"

PARSE = """
import time, shutil, tempfile
t0 = time.perf_counter()
from aftertrace.ingest.parse import parse_file, ParseJob
from aftertrace.ingest.registry import default_registry
default_registry()      # (imports every parser module: once per worker process, not per file)
import_s = time.perf_counter() - t0
best = None
for _ in range({repeat}):
    out = tempfile.mkdtemp()
    t, c = time.perf_counter(), time.process_time()
    r = parse_file(ParseJob({path!r}, "bench.log", out, time_zone="UTC"))
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    shutil.rmtree(out)
    if best is None or dt < best[0]:
        best = (dt, cpu)
dt, cpu = best
RESULT = dict(tool="aftertrace " + str(r.format) + " -> Parquet parts", seconds=dt, status=r.status,
              events=r.counts.get("events"), metrics=r.counts.get("metrics"),
              interpolated=r.attrs.get("interpolated_events"), cpu_s=round(cpu, 2),
              import_s=round(import_s, 2))
"""
FLOOR = """
import time, tempfile, shutil
import polars as pl
from aftertrace.ingest.lines import line_frames
from aftertrace.ingest.sink import RowSink
t0 = time.perf_counter()
out = tempfile.mkdtemp()
sink = RowSink(out, compression="none")
t, c = time.perf_counter(), time.process_time()
lines = 0
with open({path!r}, "rb") as f:
    for df in line_frames(f):
        lines += df.height
left = {metrics}
cat = pl.Categorical
while left > 0:        # the metric rows the input yields, built as the parser builds them
    n = min(left, 1_000_000)
    sink.add_frame("metrics", pl.select(pl.int_range(0, n).alias("line")).with_columns(
        pl.lit("rank 0", cat).alias("entity"), pl.col("line").alias("ts_raw_ns"), pl.lit("loss", cat).alias("metric"),
        pl.col("line").cast(pl.Float64).alias("value"), pl.lit("-", cat).alias("unit")))
    left -= n
sink.close()
dt, cpu = time.perf_counter() - t, time.process_time() - c
shutil.rmtree(out)
RESULT = dict(tool="floor: read and split the lines, write the metric rows (no parsing)", seconds=dt,
              cpu_s=round(cpu, 2), lines=lines)
"""
LOOP = """
import re, time
rx = re.compile({rx!r})
t, c = time.perf_counter(), time.process_time()
n = 0
with open({path!r}, "rb") as f:
    for line in f:
        if rx.match(line):
            n += 1
dt, cpu = time.perf_counter() - t, time.process_time() - c
RESULT = dict(tool="plain Python line loop, one regex per line", seconds=dt, matched=n, cpu_s=round(cpu, 2))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1, help="parse each input N times, report the fastest run")
    args = ap.parse_args()
    compare("logs", ".log", SOURCES, [PARSE, LOOP], args.mb, ("events", "metrics", "matched", "cpu_s", "import_s"),
            rx=LOOP_RX, repeat=max(1, args.repeat))

if __name__ == "__main__":
    main()
