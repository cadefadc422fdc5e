"""Cost curve of ``aftertrace analyze`` on the two executors: local process pool vs Ray.

For each rank count, the bundle of ``bench.suite.build_rank_bundle`` (under bench/out/) is analysed
in a fresh process per executor (so Ray's start is counted), with a fresh store, the same number
of parse workers / Ray CPUs and ``inline_bytes=0`` (every multi-file parse goes to the executor).
Prints (and with ``--out`` writes) a Markdown table of wall seconds, the parse stage, and the
measured per-file parse costs (``sources.parse_s``: one file, one core), then an estimate for a
4,096-rank incident from those costs.

    .venv/bin/python bench/bench_executors.py --ranks 8,64 --out bench/results/executors.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.suite import OUT, build_rank_bundle  # noqa: E402

CHILD = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
from server.service import Service
from server.settings import Settings
bundle, executor, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
home = Path(tempfile.mkdtemp(prefix='bench-exec-'))
stages = {}
def progress(stage, done, total):
    stages.setdefault(stage, time.perf_counter())
svc = Service(Settings(home=home, db_path=home / 'db.duckdb', workers=workers, inline_bytes=0, executor=executor))
t = time.perf_counter()
if executor == 'ray':
    svc._executor(workers)      # ray.init: timed apart (a server pays it once)
start_s = time.perf_counter() - t
t0 = time.perf_counter()
sub = svc.submit_path(bundle)
rep = svc.analyze(sub.incident_id, progress=progress)
dt = time.perf_counter() - t0
parse_s = stages.get('store', t0) - stages.get('parse', t0)
kinds = svc.store.query("SELECT kind, count(*) AS files, sum(parse_s) AS parse_s, sum(bytes) AS bytes "
                        "FROM sources WHERE incident_id = ? AND status IN ('parsed', 'partial') "
                        "GROUP BY kind ORDER BY kind", [sub.incident_id])
chain = rep['chains'][0]['links'] if rep['chains'] else []
svc.store.close()
shutil.rmtree(home, ignore_errors=True)
print('RESULT ' + json.dumps(dict(seconds=dt, start_s=start_s, parse_stage_s=parse_s, sources=len(rep['sources']),
      ok=sum(1 for s in rep['sources'] if s['status'] in ('parsed', 'partial')), kinds=kinds,
      chain=' -> '.join(l['kind'] for l in chain))))
"""


def run(bundle: Path, executor: str, workers: int) -> dict:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, str(bundle), executor, str(workers)], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not line:
        raise SystemExit(f"{executor} on {bundle} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r = json.loads(line[-1][7:])
    r["wall_s"] = wall
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="8,64")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="parse processes (local) and Ray CPUs (ray); default: all CPUs")
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--target-min", type=float, default=10.0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    ranks_list = [int(x) for x in a.ranks.split(",")]
    rows, per_rank = [], {}
    for ranks in ranks_list:
        bundle, mb = build_rank_bundle(ranks, OUT / f"bundle-{ranks}-ranks")
        files = sum(1 for f in bundle.rglob("*") if f.is_file() and f.name != ".complete")
        for ex in a.executors.split(","):
            r = run(bundle, ex, a.workers)
            rows.append((ranks, files, mb, ex, r))
            print(f"{ranks:>5} ranks {files:>7,} files {mb:6.0f} MB  {ex:<5}  wall {r['wall_s']:6.1f} s  "
                  f"start {r['start_s']:5.1f} s  analyze {r['seconds']:6.1f} s  parse stage {r['parse_stage_s']:6.1f} s  "
                  f"{r['ok']}/{r['sources']} sources  chain {r['chain'] or '-'}", flush=True)
            if ex == "local":
                per_rank[ranks] = r

    lines = [f"# Executors: local process pool vs Ray ({a.workers} parse workers / Ray CPUs)", "",
             "    " + " ".join(["python", "bench/bench_executors.py"] + (sys.argv[1:] if argv is None else argv)),
             "",
             f"Machine: {os.cpu_count()} CPUs (`nproc`), one process per analysis (Ray's start is counted in "
             "*wall*), a fresh store each, `inline_bytes=0`. *wall*: the whole child process; *analyze*: "
             "`Service.submit_path` + `analyze`; *executor start*: `ray.init` of a local Ray, before the analysis "
             "(a server pays it once); *parse stage*: from the first parse task to the load's "
             "commit (host-info files, parsed in-process before it, are not in it).", "",
             "| ranks | files | MB | executor | wall s | executor start s | analyze s | parse stage s | sources parsed | chain |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for ranks, files, mb, ex, r in rows:
        lines.append(f"| {ranks} | {files:,} | {mb:.0f} | {ex} | {r['wall_s']:.1f} | {r['start_s']:.1f} | {r['seconds']:.1f} | "
                     f"{r['parse_stage_s']:.1f} | {r['ok']:,} of {r['sources']:,} | {r['chain'] or '-'} |")

    if per_rank:
        big = max(per_rank)
        r = per_rank[big]
        lines += ["", f"## Measured per-file parse costs ({big} ranks, local executor; `sources.parse_s`, one file on one core)", "",
                  "| kind | sources | per rank | parse core-s | ms per source | MB per source |", "|---|---:|---:|---:|---:|---:|"]
        tot_files = tot_core = 0.0
        for k in r["kinds"]:
            tot_files += k["files"]
            tot_core += k["parse_s"] or 0
            lines.append(f"| {k['kind']} | {k['files']:,} | {k['files'] / big:.2f} | {k['parse_s']:.1f} | "
                         f"{1000 * k['parse_s'] / k['files']:.1f} | {k['bytes'] / k['files'] / 1e6:.2f} |")
        lines.append(f"| **all** | {tot_files:,.0f} | {tot_files / big:.2f} | {tot_core:.1f} | "
                     f"{1000 * tot_core / tot_files:.1f} | |")
        n = 4096
        core_s = tot_core / big * n
        serial_s = max(0.0, r["seconds"] - r["parse_stage_s"]) / big * n   # extract, detect, load, analysis
        budget = a.target_min * 60
        par_budget = budget - serial_s
        cores = core_s / par_budget if par_budget > 0 else float("inf")
        lines += ["", f"## Estimate for a {n:,}-rank incident", "",
                  f"- Sources: {tot_files / big:.1f} parsed sources per rank (at {big} ranks) -> "
                  f"~{tot_files / big * n:,.0f} parse tasks; raw files ~{rows[-1][1] / rows[-1][0] * n:,.0f} "
                  "(a host's cgroup snapshot series is one task).",
                  f"- Parse work: {1000 * tot_core / tot_files:.0f} ms per source per core on average -> "
                  f"{tot_core / big:.2f} core-s per rank -> **{core_s / 3600:.1f} core-hours** "
                  f"({core_s:,.0f} core-s).",
                  f"- What stays on the driver today (extract, detect, DuckDB load, clocks/findings/report), "
                  f"scaled linearly from {big} ranks ({r['seconds'] - r['parse_stage_s']:.1f} s): "
                  f"~{serial_s:,.0f} s at {n:,} ranks.",
                  ]
        ray_rows = [x for x in rows if x[0] == big and x[3] == "ray"]
        ray_task_s = 0.0
        if ray_rows:    # Ray's extra parse-stage time over the local pool, in core-s per task
            ray_task_s = max(0.0, (ray_rows[0][4]["parse_stage_s"] - r["parse_stage_s"]) * a.workers / tot_files)
            lines.append(f"- Ray's overhead measured at {big} ranks: {1000 * ray_task_s:.0f} ms per task per core "
                         f"(parse stage {ray_rows[0][4]['parse_stage_s']:.1f} s vs {r['parse_stage_s']:.1f} s on "
                         f"{a.workers} cores, Ray's own daemons on the same cores) -> "
                         f"+{ray_task_s * tot_files / big * n:,.0f} core-s at {n:,} ranks.")
        if par_budget > 0:
            for name, extra in (("local pool", 0.0), ("Ray", ray_task_s)):
                c = (core_s + extra * tot_files / big * n) / par_budget
                lines.append(f"- {name}: for a {a.target_min:.0f}-minute analysis the parse must fit in the "
                             f"{par_budget:,.0f} s left: **~{c:,.0f} cores** "
                             f"({max(1, -(-round(c) // 32))} machine(s) of 32 cores).")
        else:
            lines.append(f"- The driver-side part alone exceeds {a.target_min:.0f} minutes: more parse cores "
                         "do not reach the target; the store must attach Parquet instead of loading rows "
                         "(the rest of issue 15).")
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
