"""Cost curve of ``aftertrace analyze`` on the two executors: local process pool vs Ray, and on
the two storages: rows copied into DuckDB (native) vs Parquet partitions attached (``--parts-dir``).

For each rank count, the bundle of ``bench.suite.build_rank_bundle`` (under bench/out/) is analysed
in a fresh process per executor and storage (so Ray's start is counted), with a fresh store, the
same number of parse workers / Ray CPUs and ``inline_bytes=0`` (every multi-file parse goes to
the executor). Prints (and with ``--out`` writes) a Markdown table of wall seconds, the parse
stage, the driver-side rest, the store's size, and the measured per-file parse costs
(``sources.parse_s``: one file, one core), then an estimate for a 4,096-rank incident from them.

    .venv/bin/python bench/bench_executors.py --ranks 8,64,512 --storages native,parquet \
        --out bench/results/executors.md
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
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
bundle, executor, workers, storage = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
home = Path(tempfile.mkdtemp(prefix='bench-exec-'))
stages = {}
def progress(stage, done, total):
    stages.setdefault(stage, time.perf_counter())
parts = home / 'parts' if storage == 'parquet' else None
svc = Service(Settings(home=home, db_path=home / 'db.duckdb', workers=workers, inline_bytes=0, executor=executor,
                       parts_dir=parts))
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
t = time.perf_counter()
svc.timeline(sub.incident_id)
timeline_s = time.perf_counter() - t
svc.store.cursor().execute('CHECKPOINT')
svc.store.close()
db_mb = (home / 'db.duckdb').stat().st_size / 1e6
parts_mb = sum(f.stat().st_size for f in parts.rglob('*') if f.is_file()) / 1e6 if parts else 0.0
shutil.rmtree(home, ignore_errors=True)
print('RESULT ' + json.dumps(dict(seconds=dt, start_s=start_s, parse_stage_s=parse_s, sources=len(rep['sources']),
      store_s=stages.get('analyze', t0) - stages.get('store', t0), analysis_s=dt - (stages.get('analyze', t0) - t0),
      timeline_s=timeline_s, db_mb=db_mb, parts_mb=parts_mb,
      ok=sum(1 for s in rep['sources'] if s['status'] in ('parsed', 'partial')), kinds=kinds,
      chain=' -> '.join(l['kind'] for l in chain))))
"""


def run(bundle: Path, executor: str, workers: int, storage: str = "native") -> dict:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, str(bundle), executor, str(workers), storage], cwd=ROOT,
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
    ap.add_argument("--storages", default="native",
                    help="native (rows copied into DuckDB) and/or parquet (partitions attached, --parts-dir)")
    ap.add_argument("--target-min", type=float, default=10.0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    ranks_list = [int(x) for x in a.ranks.split(",")]
    rows, per_rank, attached = [], {}, {}
    loads = []
    for ranks in ranks_list:
        bundle, mb = build_rank_bundle(ranks, OUT / f"bundle-{ranks}-ranks")
        files = sum(1 for f in bundle.rglob("*") if f.is_file() and f.name != ".complete")
        for storage in a.storages.split(","):
            for ex in a.executors.split(","):
                loads.append(os.getloadavg()[0])
                r = run(bundle, ex, a.workers, storage)
                r["storage"] = storage
                rows.append((ranks, files, mb, ex, r))
                print(f"{ranks:>5} ranks {files:>7,} files {mb:6.0f} MB  {ex:<5} {storage:<7} wall {r['wall_s']:6.1f} s  "
                      f"start {r['start_s']:5.1f} s  analyze {r['seconds']:6.1f} s  parse stage {r['parse_stage_s']:6.1f} s  "
                      f"store {r['store_s']:5.1f} s  analysis {r['analysis_s']:5.1f} s  db {r['db_mb']:.0f} MB  "
                      f"parts {r['parts_mb']:.0f} MB  {r['ok']}/{r['sources']} sources  chain {r['chain'] or '-'}",
                      flush=True)
                if ex == "local" and storage == "native":
                    per_rank[ranks] = r
                if ex == "local" and storage == "parquet":
                    attached[ranks] = r

    lines = [f"# Executors: local process pool vs Ray ({a.workers} parse workers / Ray CPUs)", "",
             "    " + " ".join(["python", "bench/bench_executors.py"] + (sys.argv[1:] if argv is None else argv)),
             "",
             f"Machine: {os.cpu_count()} CPUs (`nproc`), one process per analysis (Ray's start is counted in "
             "*wall*), a fresh store each, `inline_bytes=0`. *wall*: the whole child process; *analyze*: "
             "`Service.submit_path` + `analyze`; *executor start*: `ray.init` of a local Ray, before the analysis "
             "(a server pays it once); *parse stage*: from the first parse task to the load's "
             "commit (host-info files, parsed in-process before it, are not in it); *store*: the load's last "
             "inserts, the partitions' compaction (parquet) and the commit; *analysis*: clock "
             "alignment, bins, findings, report after the commit; *timeline*: one default "
             "`Service.timeline` call afterwards; *DuckDB MB*, *Parquet MB*: the DuckDB file after a "
             "checkpoint, and the Parquet partitions (storage `parquet`: `--parts-dir`, the heavy tables read in place). "
             f"Load average (1 min) at the start of the runs: {min(loads):.1f} to {max(loads):.1f}.", "",
             "| ranks | files | MB | executor | storage | wall s | executor start s | analyze s | parse stage s | "
             "store s | analysis s | timeline ms | DuckDB MB | Parquet MB | sources parsed | chain |",
             "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for ranks, files, mb, ex, r in rows:
        lines.append(f"| {ranks} | {files:,} | {mb:.0f} | {ex} | {r['storage']} | {r['wall_s']:.1f} | {r['start_s']:.1f} | "
                     f"{r['seconds']:.1f} | {r['parse_stage_s']:.1f} | {r['store_s']:.1f} | {r['analysis_s']:.1f} | "
                     f"{1000 * r['timeline_s']:.0f} | "
                     f"{r['db_mb']:.0f} | {r['parts_mb']:.0f} | {r['ok']:,} of {r['sources']:,} | {r['chain'] or '-'} |")

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
        budget = a.target_min * 60
        lines += ["", f"## Estimate for a {n:,}-rank incident", "",
                  f"- Sources: {tot_files / big:.1f} parsed sources per rank (at {big} ranks) -> "
                  f"~{tot_files / big * n:,.0f} parse tasks; raw files ~{rows[-1][1] / rows[-1][0] * n:,.0f} "
                  "(a host's cgroup snapshot series is one task).",
                  f"- Parse work: {1000 * tot_core / tot_files:.0f} ms per source per core on average -> "
                  f"{tot_core / big:.2f} core-s per rank -> **{core_s / 3600:.1f} core-hours** "
                  f"({core_s:,.0f} core-s).",
                  ]
        ray_rows = [x for x in rows if x[0] == big and x[3] == "ray" and x[4]["storage"] == "native"]
        ray_task_s = 0.0
        if ray_rows:    # Ray's extra parse-stage time over the local pool, in core-s per task
            ray_task_s = max(0.0, (ray_rows[0][4]["parse_stage_s"] - r["parse_stage_s"]) * a.workers / tot_files)
            lines.append(f"- Ray's overhead measured at {big} ranks: {1000 * ray_task_s:.0f} ms per task per core "
                         f"(parse stage {ray_rows[0][4]['parse_stage_s']:.1f} s vs {r['parse_stage_s']:.1f} s on "
                         f"{a.workers} cores, Ray's own daemons on the same cores) -> "
                         f"+{ray_task_s * tot_files / big * n:,.0f} core-s at {n:,} ranks.")
        for storage, x in (("native", r), ("parquet", attached.get(big))):
            if x is None:
                continue
            drv = max(0.0, x["seconds"] - x["parse_stage_s"])
            drv_n = drv / big * n
            left = budget - drv_n
            head = (f"- Storage {storage}: on the driver at {big} ranks {drv:.1f} s (store stage {x['store_s']:.1f} s, "
                    f"analysis {x['analysis_s']:.1f} s, the rest extraction and detection), ~{drv_n:,.0f} s at "
                    f"{n:,} ranks scaled linearly; DuckDB {x['db_mb'] / big * n / 1000:.1f} GB"
                    + (f", partitions {x['parts_mb'] / big * n / 1000:.1f} GB" if storage == "parquet" else "") + ". ")
            if left > 0:
                cs = [(core_s + extra * tot_files / big * n) / left for extra in (0.0, ray_task_s)]
                head += (f"For a {a.target_min:.0f}-minute analysis the parse must fit in the {left:,.0f} s left: "
                         f"**~{cs[0]:,.0f} cores** on the local pool, **~{cs[1]:,.0f}** on Ray "
                         f"({max(1, -(-round(cs[1]) // 32))} machine(s) of 32 cores).")
            else:
                head += (f"That alone exceeds {a.target_min:.0f} minutes: more parse cores do not reach the "
                         "target (the driver-side stages are the limit).")
            lines.append(head)
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out).with_suffix(".json").write_text(json.dumps(
            [dict(ranks=x[0], files=x[1], mb=x[2], executor=x[3], **x[4]) for x in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
