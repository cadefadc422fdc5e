"""Kineto trace ingest: aftertrace vs HolisticTraceAnalysis (HTA) trace loading, same files.

Usage (from the repository root):

    .venv/bin/python bench/bench_kineto.py [--hta-python /opt/htaenv/bin/python] [--scale 8] [--repeat 2]
                                           [--out bench/results/kineto.md]

Inputs: the real multi-rank Kineto traces in ``../shared/real_traces/torch_trace`` (HTA's
test traces: 2-rank NCCL jobs, rank 0/1 of a 128-rank job, ...), decompressed to plain JSON
in a scratch folder, plus one large file made from a real trace by repeating its events
``--scale`` times with shifted timestamps (to see throughput and peak memory on a file of
hundreds of MB). Every measurement runs in a fresh process (peak RSS = that process's
``ru_maxrss``):

* aftertrace: ``parse_file`` (detect + stream + Parquet parts) with each part inserted into
  a DuckDB store as soon as it is written (``server.loader.IncidentLoad``, what the pipeline
  does), until the commit -- "JSON into the store"; and, in a separate run, ``parse_file``
  alone -- "parse only";
* HTA: ``hta.common.trace_parser.parse_trace_dataframe(path, ParserConfig())`` -- HTA's
  per-file trace loading with its default settings, run with the interpreter given by
  ``--hta-python`` (HTA lives in its own venv; it is not an aftertrace dependency).

MB/s = MB of (decompressed) JSON / wall seconds of the load, best of ``--repeat`` runs.
The scratch folder is removed at the end.

``--stages FILE`` instead times the stages of aftertrace's ingest of one plain JSON file
(stream + decode alone, the whole parse, the DuckDB load per table): where to look first.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "real_traces" / "torch_trace"
INPUTS = [
    "hta__trace_diff_test_rank1of2.json.gz",
    "hta__df_index_resolver_rank1of2.json.gz",
    "hta__nccl_data.json.gz",
    "hta__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta__sampled_rank-0.json.gz",
    "hta__sampled_rank-1.json.gz",
]
SCALE_FROM = "hta__trace_diff_test_rank1of2.json.gz"

AFTERTRACE_RUN = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.server.loader import IncidentLoad
from aftertrace.server.store import Store
from aftertrace.ingest.registry import default_registry
path, work, mode = sys.argv[1], sys.argv[2], sys.argv[4]
reg = default_registry()            # imports every format module once: not part of a file's cost
s = Store(work + '/s.duckdb')       # schema creation: likewise
t0, c0 = time.perf_counter(), time.process_time()
if mode == 'parse':                 # parse only: Parquet parts, no store
    r = parse_file(ParseJob(path, path.rsplit('/', 1)[-1], work + '/parts'), reg)
    t1 = time.perf_counter()
else:                               # what the pipeline does: each part loads as soon as it is written
    load = IncidentLoad(s, 'bench')
    r = parse_file(ParseJob(path, path.rsplit('/', 1)[-1], work + '/parts'), reg, on_part=load.announcer(1))
    t1 = time.perf_counter()
    load.commit(lambda: None)
s.close()
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"total_s": t2 - t0, "parse_s": t1 - t0, "after_parse_s": t2 - t1, "status": r.status,
                  "cpu_s": c2 - c0, "events": r.counts.get("events"),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STAGES_RUN = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from aftertrace.ingest.formats._kineto_stream import EventReader
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.model import PARSER_TABLES
from aftertrace.server.store import Store
from aftertrace.ingest.registry import default_registry
path, work = sys.argv[1], sys.argv[2]
reg = default_registry()
s = Store(work + '/s.duckdb')
t0, c0 = time.perf_counter(), time.process_time()
with open(path, 'rb') as f:
    n = sum(len(c.events) for c in EventReader(f))
t1, c1 = time.perf_counter(), time.process_time()
r = parse_file(ParseJob(path, path.rsplit('/', 1)[-1], work + '/parts'), reg)
t2, c2 = time.perf_counter(), time.process_time()
load = {}
for t in PARSER_TABLES:
    if r.parts.get(t):
        a = time.perf_counter()
        s.load_parts(t, r.parts[t], 'bench', 1)
        load[t] = time.perf_counter() - a
s.close()
c3 = time.process_time()
print(json.dumps({"read_decode_s": t1 - t0, "parse_s": t2 - t1, "load_s": load, "events_read": n,
                  "cpu_s": {"read_decode": c1 - c0, "parse": c2 - c1, "load": c3 - c2},
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_RUN = r"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
import pandas
t0, c0 = time.perf_counter(), time.process_time()
meta, df, sym = parse_trace_dataframe(sys.argv[1], ParserConfig())
t1 = time.perf_counter()
print(json.dumps({"total_s": t1 - t0, "cpu_s": time.process_time() - c0, "events": len(df),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scaled(src: Path, dst: Path, times: int) -> None:
    """A large file from a real trace: its events repeated with ts shifted past the previous copy
    and flow ids (``s``/``f`` pairs) shifted past the previous copy's, as a longer run would have
    them (repeated ids would pair every copy's flow ends with every other's)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    evs = doc.pop("traceEvents")
    ts = [e["ts"] for e in evs if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000
    ids = [e["id"] for e in evs if e.get("ph") in ("s", "t", "f") and isinstance(e.get("id"), int)]
    id_span = max(ids, default=0) + 1
    with open(dst, "w") as f:
        head = json.dumps(doc)[:-1]
        f.write(head + ', "traceEvents": [\n')
        first = True
        for k in range(times):
            for e in evs:
                if k and "ts" in e:
                    e = dict(e, ts=e["ts"] + k * span)
                if k and e.get("ph") in ("s", "t", "f") and isinstance(e.get("id"), int):
                    e = dict(e, id=e["id"] + k * id_span)
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write("\n]}\n")


def run(python: str, code: str, *args: str) -> dict:
    if len(args) > 1 and Path(args[1]).is_dir():      # a fresh work folder per run
        shutil.rmtree(args[1])
        Path(args[1]).mkdir()
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(python: str, code: str, repeat: int, *args: str) -> dict:
    runs = [run(python, code, *args) for _ in range(repeat)]
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: r["total_s"]) if ok else runs[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hta-python", default="/opt/htaenv/bin/python")
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kineto.md"))
    ap.add_argument("--stages", metavar="JSON_FILE",
                    help="only time the stages of aftertrace's ingest of this (plain JSON) file: stream + "
                         "decode alone, the whole parse, the DuckDB load of each table")
    a = ap.parse_args()
    if a.stages:
        return stages(Path(a.stages))
    a.load_before = os.getloadavg()
    scratch = Path(tempfile.mkdtemp(prefix="kineto-bench-"))
    try:
        files = []
        for name in INPUTS:
            p = scratch / name[:-3]
            p.write_bytes(gzip.decompress((REAL / name).read_bytes()))
            files.append(p)
        if a.scale > 1:
            big = scratch / f"scaled_x{a.scale}_{SCALE_FROM[:-3]}"
            scaled(REAL / SCALE_FROM, big, a.scale)
            files.append(big)
        rows = []
        for p in files:
            mb = p.stat().st_size / 1e6
            work = scratch / ("w_" + p.name)
            work.mkdir()
            at = best(sys.executable, AFTERTRACE_RUN, a.repeat, str(p), str(work), str(ROOT), "store")
            po = best(sys.executable, AFTERTRACE_RUN, a.repeat, str(p), str(work), str(ROOT), "parse")
            at.update(parse_only_s=po.get("total_s"), parse_only_cpu_s=po.get("cpu_s"))
            shutil.rmtree(work, ignore_errors=True)
            ht = best(a.hta_python, HTA_RUN, a.repeat, str(p)) if Path(a.hta_python).exists() else {"error": "no HTA"}
            rows.append((p.name, mb, at, ht))
            print(p.name, f"{mb:.1f} MB", at, ht, flush=True)
        write(a.out, rows, a)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def stages(path: Path) -> int:
    """Where one file's time goes, in a fresh process (profile a change with this first)."""
    mb = path.stat().st_size / 1e6
    work = Path(tempfile.mkdtemp(prefix="kineto-stages-"))
    try:
        r = run(sys.executable, STAGES_RUN, str(path), str(work), str(ROOT))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "error" in r:
        print(r["error"])
        return 1
    load = sum(r["load_s"].values())
    print(f"{path.name}: {mb:.1f} MB, {r['events_read']} events, peak RSS {r['rss_mb']:.0f} MB")
    cpu = r["cpu_s"]
    for label, sec, c in (("stream + decode (EventReader alone)", r["read_decode_s"], cpu["read_decode"]),
                          ("parse_file (decode, columns, Parquet parts)", r["parse_s"], cpu["parse"]),
                          ("DuckDB load (Store.load_parts)", load, cpu["load"]),
                          ("into the store (parse + load)", r["parse_s"] + load, cpu["parse"] + cpu["load"])):
        print(f"  {label:45s} {sec:6.2f} s  {mb / sec:6.0f} MB/s  cpu {c:5.2f} s")
    for t, sec in sorted(r["load_s"].items(), key=lambda x: -x[1]):
        print(f"    load {t:12s} {sec:6.2f} s")
    return 0


NOTES = "<!-- notes: kept when the table above is measured again -->"


def _mbps(mb: float, r: dict, key: str = "total_s") -> str:
    return f"{mb / r[key]:.0f}" if r.get(key) else "error"


def write(out: str, rows, a) -> None:
    lines = [
        "# Kineto ingest: aftertrace vs HTA trace loading",
        "",
        f"Measured by `bench/bench_kineto.py --scale {a.scale} --repeat {a.repeat}` on "
        f"{platform.node()} ({os.cpu_count()} CPUs, Python {platform.python_version()}), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Load average (1/5/15 min) "
        f"{'/'.join(f'{x:.1f}' for x in a.load_before)} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the end, on {os.cpu_count()} CPUs: above "
        "about 1, other jobs shared the machine and absolute numbers are noisy and pessimistic; both "
        "tools ran under the same conditions, alternately.",
        "",
        "MB = decompressed JSON. aftertrace = parse_file (stream, decode, Parquet parts) with every part "
        "loaded into DuckDB while the file is parsed (server.loader.IncidentLoad, as the pipeline does), "
        "until the commit; parse only = parse_file alone, in another run. HTA = "
        "`parse_trace_dataframe(path, ParserConfig())` (its default JSON backend), HolisticTraceAnalysis "
        "0.5.0 in its own venv. Best of the runs; RSS = peak resident memory of the process.",
        "",
        "cpu s = CPU seconds of the process (all its threads, DuckDB's included).",
        "",
        "| file | MB | aftertrace MB/s into the store (parse only) | aftertrace cpu s into the store (parse only) | aftertrace peak RSS MB | HTA MB/s | HTA cpu s | HTA peak RSS MB | events (aftertrace / HTA rows) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    tot_mb = tot_at = tot_ht = 0.0
    for name, mb, at, ht in rows:
        lines.append(f"| {name} | {mb:.1f} | {_mbps(mb, at)} ({_mbps(mb, at, 'parse_only_s')}) | "
                     f"{at.get('cpu_s', 0):.2f} ({at.get('parse_only_cpu_s') or 0:.2f}) | "
                     f"{at.get('rss_mb', 0):.0f} | {_mbps(mb, ht)} | {ht.get('cpu_s', 0):.2f} | "
                     f"{ht.get('rss_mb', 0):.0f} | {at.get('events')} / {ht.get('events')} |")
        if "total_s" in at and "total_s" in ht:
            tot_mb += mb
            tot_at += at["total_s"]
            tot_ht += ht["total_s"]
    if tot_at and tot_ht:
        lines += ["", f"All files: aftertrace {tot_mb / tot_at:.0f} MB/s, HTA {tot_mb / tot_ht:.0f} MB/s "
                      f"({tot_ht / tot_at:.1f}x)."]
    # Notes written by hand below the marker are kept when the table is measured again.
    if Path(out).exists() and NOTES in Path(out).read_text():
        lines += ["", NOTES + Path(out).read_text().split(NOTES, 1)[1].rstrip("\n")]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
