"""Whole processes, side by side: ``aftertrace analyze FILE`` against what a user would run instead.

A user waits for the whole process (interpreter start, imports, parse, analysis, the store
written and closed), not for the parser alone, so each row times complete processes on the same
file, alternated in one run (the order reversed every round), and reports the median wall-clock
seconds and the peak RSS of each:

=========================  ===============================================================
perf script                FlameGraph's ``stackcollapse-perf.pl`` (Perl; folds every stack)
Kineto JSON                HolisticTraceAnalysis ``parse_trace_dataframe`` (its trace loader,
                           in its own venv: ``AFTERTRACE_HTA_PYTHON``, default /opt/htaenv)
NCCL / training / kernel   ``lnav -n FILE`` (lnav 0.11: indexes the file, detects its format and
logs                       prints it; output to /dev/null)
=========================  ===============================================================

``aftertrace analyze`` runs with a fresh ``AFTERTRACE_HOME`` each time. The Perl script is
not part of this repository: ``AFTERTRACE_STACKCOLLAPSE`` names it, else
``bench/out/FlameGraph/stackcollapse-perf.pl`` (``git clone
https://github.com/brendangregg/FlameGraph bench/out/FlameGraph``). A tool that is missing is
reported as MISSING, never skipped silently.

    python bench/bench_whole.py [--quick] [--rounds 3]

The full run adds perf script at 500 MB and Kineto at 232 MB, where a process's fixed cost
(about 0.3 s of interpreter and imports) weighs less.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, scaled  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AFTERTRACE = Path(sys.executable).with_name("aftertrace")
HTA_PYTHON = os.environ.get("AFTERTRACE_HTA_PYTHON", "/opt/htaenv/bin/python")
STACKCOLLAPSE = Path(os.environ.get("AFTERTRACE_STACKCOLLAPSE", OUT / "FlameGraph" / "stackcollapse-perf.pl"))
HTA_LOAD = ("import sys\nfrom hta.common.trace_parser import parse_trace_dataframe\n"
            "from hta.configs.parser_config import ParserConfig\n"
            "parse_trace_dataframe(sys.argv[1], ParserConfig())\n")


def inputs(quick: bool) -> list[tuple[str, Path, str]]:
    """(what, file, anchor) for each row; the files are the benches' scaled real samples."""
    import bench_kernel
    import bench_kineto
    import bench_logs
    import bench_perf
    mb = 30 if quick else 100
    perf = scaled(f"perf-callchain-{mb}MB.txt", bench_perf.SOURCES["callchain"], mb * 1_000_000)
    k = 2
    kineto = OUT / f"kineto-x{k}.json"
    if not kineto.exists():
        bench_kineto.scaled(bench_kineto.REAL / bench_kineto.SCALE_FROM, kineto, k)
    # (the fixed cost of a process -- interpreter, imports, the store -- weighs less on larger files:
    # the full run also times the anchors' own formats at 5x and 4x that size)
    large = []
    if not quick:
        big = OUT / "kineto-x8.json"
        if not big.exists():
            bench_kineto.scaled(bench_kineto.REAL / bench_kineto.SCALE_FROM, big, 8)
        large = [("perf script, deep call chains",
                  scaled("perf-callchain-500MB.txt", bench_perf.SOURCES["callchain"], 500 * 1_000_000), "stackcollapse"),
                 ("Kineto JSON, real HTA trace x8", big, "hta")]
    work = OUT / f"whole-kernel-{mb}MB"
    raw = work / "dmesg_raw_scaled.txt"
    if not raw.exists():
        work.mkdir(parents=True, exist_ok=True)
        raw, _iso = bench_kernel.scaled_logs(work, mb)
    return [
        ("perf script, deep call chains", perf, "stackcollapse"),
        ("Kineto JSON, real HTA trace x2", kineto, "hta"),
        ("NCCL INFO logs", scaled(f"logs-nccl-{mb}MB.log", bench_logs.SOURCES["nccl"], mb * 1_000_000), "lnav"),
        ("torchrun/training logs, crash-dense",
         scaled(f"logs-app-{mb}MB.log", bench_logs.SOURCES["app"], mb * 1_000_000), "lnav"),
        ("training log: real step lines, one crash at the end", bench_logs.train_log(mb * 1_000_000), "lnav"),
        ("kernel log (raw dmesg), crash-dense", raw, "lnav"),
    ] + large


def command(tool: str, path: Path) -> list[str] | str:
    """The argv of ``tool`` on ``path``, or why it cannot run here."""
    if tool == "aftertrace":
        return [str(AFTERTRACE), "analyze", str(path)] if AFTERTRACE.exists() else f"no {AFTERTRACE}"
    if tool == "stackcollapse":
        return ["perl", str(STACKCOLLAPSE), str(path)] if STACKCOLLAPSE.exists() else f"no {STACKCOLLAPSE}"
    if tool == "hta":
        return [HTA_PYTHON, "-c", HTA_LOAD, str(path)] if Path(HTA_PYTHON).exists() else f"no {HTA_PYTHON}"
    if tool == "lnav":
        return ["lnav", "-n", str(path)] if shutil.which("lnav") else "no lnav (apt-get install lnav)"
    raise KeyError(tool)


NAMES = {"aftertrace": "aftertrace analyze", "stackcollapse": "stackcollapse-perf.pl",
         "hta": "HolisticTraceAnalysis parse_trace_dataframe", "lnav": "lnav -n"}


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one whole process (its own, from wait4)."""
    home = tempfile.mkdtemp(prefix="bench-whole-")
    # (bytecode caches allowed, as on a user's machine: an install compiles them, and a checkout
    # writes them on the first run)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["AFTERTRACE_HOME"] = home
    # (the dirty pages of the runs before -- each aftertrace run stores a copy of its input -- are
    # written out first: else a run may wait for the disk's writeback of its predecessors; the disk
    # here writes ~210 MB/s, and the perf row's runs took 2.7 to 4.4 s depending on it)
    os.sync()
    try:
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=home)
        _, status, usage = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {p.returncode}: {err[-500:]}")
        return dt, usage.ru_maxrss / 1024
    finally:
        shutil.rmtree(home, ignore_errors=True)


def measure(quick: bool, rounds: int) -> list[dict]:
    out = []
    for what, path, anchor in inputs(quick):
        size = path.stat().st_size / 1e6
        tools = ["aftertrace", anchor]
        argv = {t: command(t, path) for t in tools}
        runs: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
        for r in range(rounds):
            for t in (tools if r % 2 == 0 else tools[::-1]):
                if isinstance(argv[t], list):
                    runs[t].append(run_once(argv[t]))
        res = {}
        for t in tools:
            if runs[t]:
                res[t] = dict(seconds=statistics.median(s for s, _ in runs[t]),
                              rss=statistics.median(m for _, m in runs[t]), n=len(runs[t]))
            else:
                res[t] = dict(missing=argv[t])
        out.append(dict(input=f"{what}, {size:.0f} MB", file=path.name, mb=size, anchor=anchor, **res))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="30 MB inputs instead of 100 MB")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for r in measure(a.quick, a.rounds):
        at, an = r["aftertrace"], r[r["anchor"]]
        line = f"{r['input']:60s} aftertrace {at.get('seconds', float('nan')):6.2f} s {at.get('rss', 0):6.0f} MiB"
        if "seconds" in an:
            line += (f" | {NAMES[r['anchor']]} {an['seconds']:6.2f} s {an['rss']:6.0f} MiB"
                     f" | anchor/aftertrace {an['seconds'] / at['seconds']:.2f}x")
        else:
            line += f" | {NAMES[r['anchor']]} MISSING: {an['missing']}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
