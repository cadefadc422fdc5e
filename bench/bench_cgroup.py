"""Snapshot files per minute: the cgroup group parser on a scaled copy of the real series.

Input: the 112 real snapshots of sample_traces/oom-after-throttle/vm/cgroup (13 files each),
copied over and over under new, later snapshot-time folder names (contents byte for byte, so
the counters jump back at each copy boundary: the counter-reset path is exercised too), into
``--out`` (default /tmp/aftertrace-bench-cgroup, removed afterwards unless --keep).

Measured, in this process:
  claim   the registry's group claim over the file list (what the pipeline does first)
  parse   parse_file on the group manifest: read every member, metric rows + derived series
          spilled to Parquet (the work the pipeline does per source)
  load    bulk insert of the Parquet parts into a DuckDB store (the pipeline's load step)
and, with --pipeline, the whole ``Service.analyze`` (intake of the folder as a tar, extraction,
claim, parse, load, alignment, detectors) on the same folder.

    .venv/bin/python bench/bench_cgroup.py --files 100000 [--pipeline]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aftertrace.ingest.parse import ParseJob, parse_file  # noqa: E402
from aftertrace.ingest.registry import default_registry, write_group_manifest  # noqa: E402

SRC = ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "cgroup"


def build(out: Path, n_files: int) -> int:
    snaps = sorted(p for p in SRC.iterdir() if p.is_dir())
    members = [[(str(f.relative_to(s)), f.read_bytes()) for f in sorted(s.rglob("*")) if f.is_file()]
               for s in snaps]
    t0 = int(snaps[0].name.split(".")[0])
    written = k = 0
    while written < n_files:
        snap = members[k % len(members)]
        name = f"{t0 + k // 2}.{(k % 2) * 500000:06d}"
        for rel, data in snap:
            p = out / "node-1" / "cgroup" / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            written += 1
        k += 1
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--out", default="/tmp/aftertrace-bench-cgroup")
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    n = build(out / "bundle", a.files)
    print(f"built {n} snapshot files in {time.perf_counter() - t:.1f} s")
    work = out / "work"
    work.mkdir()
    try:
        files = sorted((str(p.relative_to(out / "bundle")), str(p)) for p in (out / "bundle").rglob("*")
                       if p.is_file())
        reg = default_registry()
        t = time.perf_counter()
        ((parser, g),) = reg.claim_groups(files)
        t_claim = time.perf_counter() - t
        man = write_group_manifest(g, work / "g.json")
        t = time.perf_counter()
        r = parse_file(ParseJob(man, g.rel, str(work / "g"), None, "UTC", parser.name), reg)
        t_parse = time.perf_counter() - t
        from aftertrace.server.store import Store
        store = Store(str(work / "s.duckdb"))
        t = time.perf_counter()
        for table, parts in r.parts.items():
            store.load_parts(table, parts, "bench", 1)
        t_load = time.perf_counter() - t
        total = t_claim + t_parse + t_load
        print(f"files {len(g.members)}  status {r.status}  rows {r.records}  resets {r.attrs['counter_resets']}")
        print(f"claim {t_claim:.2f} s  parse {t_parse:.2f} s  load {t_load:.2f} s  total {total:.2f} s")
        print(f"=> {len(g.members) / total * 60:,.0f} snapshot files per minute (claim+parse+load)")
        if a.pipeline:
            from aftertrace.server.service import Service
            from aftertrace.server.settings import Settings
            svc = Service(Settings.from_env(home=work / "home"))
            t = time.perf_counter()
            rep = svc.analyze(svc.submit_path(out / "bundle").incident_id)
            t_all = time.perf_counter() - t
            print(f"pipeline (submit+analyze, {len(rep['sources'])} source(s), "
                  f"{len(rep['anomalies'])} finding(s)): {t_all:.2f} s "
                  f"=> {n / t_all * 60:,.0f} files per minute end to end")
    finally:
        if not a.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
