"""The benchmark suite: every figure of bench/RESULTS.md from one command.

    .venv/bin/python -m bench [--quick] [--only STAGE,...] [--out bench/RESULTS.md]

Each stage runs in its own process (``python -m bench.suite STAGE``) and prints its rows as
one JSON line; each timed tool inside a stage runs in a fresh child process of its own, so
peak RSS is that tool's alone. Inputs are real samples scaled up deterministically (same
bytes for the same size) under ``bench/out/``:

========  =================================================================================
perf      perf script with deep call chains (FlameGraph's system-wide -g recording), 100/500 MB;
          aftertrace vs a bare Python line loop
kineto    a real HTA trace repeated x2/x8 with shifted ts and flow ids (58/232 MB); aftertrace
          into DuckDB vs HolisticTraceAnalysis ``parse_trace_dataframe`` vs ``orjson.loads`` and
          ``json.loads`` of the whole file (the floor for JSON ingest); full: also x32 (928 MB)
logs      NCCL INFO logs, crash-dense torchrun/training logs, and a training log of real step
          lines continued with one crash at the end, 30/100 MB; vs a one-regex line loop
kernel    raw and iso dmesg, crash-dense (a real boot log + real OOM/hung-task reports) and the
          real boot log alone, 50/200 MB; vs a line loop
cgroup    the sample's cgroup snapshot series copied to 10,000/100,000 files
small     a bundle's small files one at a time, as a parse worker takes them (``parse_file``, the
          parser known, the small tables kept in memory): ms per file of one host of the 8-rank
          bundle (a rank's 100 KB Kineto trace, its launcher and worker logs, the perf ``.gz``,
          dmesg), where the fixed cost per file, not the bytes, is what a bundle of many files pays
e2e       ``aftertrace analyze`` (Service.submit_path + analyze) of bundles of 8 and 64 ranks
          (full: also 512) built from the real sample: per host of 8 ranks its perf recording,
          dmesg, cgroup snapshots and host facts, per rank its Kineto traces (rank rewritten)
query     timeline window latency p50/p95 at 1 M (full: also 10 M) events and flame-graph
          latency over 0.2 M (2 M) samples: the sample's rows copied in time
export    Perfetto and Chrome trace export of the 1 M (10 M) event incident (bench_export)
whole     whole processes alternated on one file (bench_whole): ``aftertrace analyze`` of perf script
          vs FlameGraph's ``stackcollapse-perf.pl``, of Kineto JSON vs HolisticTraceAnalysis, of NCCL,
          training and kernel logs vs ``lnav -n``; 30/100 MB (full: also perf 500 MB, Kineto 232 MB)
analysis  the analysis of crash-dense torchrun logs, 10 and 100 MB (quick: 10, 30): every sample
          bundle's real failures played again and again, each a later restart (bench_analysis),
          whole ``Service.analyze`` and where its time goes; and clock alignment over 1x, 4x, 16x
          the Kineto files per rank (the sample's traces as later profiler cycles, 8 ranks on
          2 hosts): its time and peak memory
========  =================================================================================

A stage that fails, or a figure that is missing, is written as MISSING with the reason and
makes the command exit 1: never a silent gap.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
HTA_PYTHON = os.environ.get("AFTERTRACE_HTA_PYTHON", "/opt/htaenv/bin/python")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))


def row(area, input, tool, value, unit, target=None, met=None, rss=None, note=""):
    return {"area": area, "input": input, "tool": tool, "value": value, "unit": unit, "target": target,
            "met": met, "rss_mib": rss, "note": note}


def _child(code: str, timeout: int = 1800) -> dict:
    from common import run_child
    return run_child(code)


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6


# -- stages --------------------------------------------------------------------------------------
def stage_perf(quick: bool) -> list[dict]:
    import bench_perf
    from common import scaled
    mb = 100 if quick else 500
    path = scaled(f"perf-callchain-{mb}MB.txt", bench_perf.SOURCES["callchain"], mb * 1_000_000)
    size = _mb(path)
    a = _child(bench_perf.PARSE.format(path=str(path)))
    b = _child(bench_perf.LOOP.format(path=str(path)))
    ours, loop = size / a["seconds"], size / b["seconds"]
    inp = f"perf script, deep call chains, {size:.0f} MB"
    return [row("perf script", inp, "aftertrace perf_script", ours, "MB/s", ">= 150", ours >= 150, a["peak_rss_mib"],
                f"{a['samples']:,} samples"),
            row("perf script", inp, "bare Python line loop (baseline)", loop, "MB/s", rss=b["peak_rss_mib"],
                note=f"aftertrace/loop = {ours / loop:.2f}")]


def stage_kineto(quick: bool) -> list[dict]:
    import bench_kineto as bk
    scales = [2] if quick else [8, 32]
    rows = []
    OUT.mkdir(parents=True, exist_ok=True)
    for k in scales:
        path = OUT / f"kineto-x{k}.json"
        if not path.exists():
            bk.scaled(bk.REAL / bk.SCALE_FROM, path, k)
        size = _mb(path)
        inp = f"Kineto JSON, real HTA trace x{k}, {size:.0f} MB"
        work = Path(tempfile.mkdtemp(prefix="bench-kineto-"))
        try:
            at = bk.best(sys.executable, bk.AFTERTRACE_RUN, 2 if k <= 8 else 1, str(path), str(work), str(ROOT), "store")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if "error" in at:
            raise RuntimeError(f"aftertrace on {path.name}: {at['error']}")
        ours = size / at["total_s"]
        rows.append(row("Kineto", inp, "aftertrace kineto into DuckDB", ours, "MB/s", ">= 100", ours >= 100,
                        at["rss_mb"], f"{at['events']:,} events; peak RSS {at['rss_mb'] / size:.2f}x the file"))
        floor = _child(f"""
import time, orjson, json
t = time.perf_counter(); d = orjson.loads(open({str(path)!r}, 'rb').read()); t1 = time.perf_counter() - t
del d
t = time.perf_counter(); d = json.loads(open({str(path)!r}, 'rb').read()); t2 = time.perf_counter() - t
RESULT = dict(seconds=t1, json_s=t2)
""")
        rows.append(row("Kineto", inp, "orjson.loads of the whole file (floor: decode only, no columns)",
                        size / floor["seconds"], "MB/s", rss=floor["peak_rss_mib"],
                        note=f"json.loads {size / floor['json_s']:.0f} MB/s"))
        if k <= 8:
            if not Path(HTA_PYTHON).exists():
                rows.append(row("Kineto", inp, "HolisticTraceAnalysis", None, "MB/s", note=f"MISSING: no {HTA_PYTHON}"))
                continue
            ht = bk.best(HTA_PYTHON, bk.HTA_RUN, 1, str(path))
            if "error" in ht:
                rows.append(row("Kineto", inp, "HolisticTraceAnalysis", None, "MB/s", note=f"MISSING: {ht['error']}"))
                continue
            theirs = size / ht["total_s"]
            rows.append(row("Kineto", inp, "HolisticTraceAnalysis 0.5 parse_trace_dataframe", theirs, "MB/s",
                            rss=ht["rss_mb"]))
            rows.append(row("Kineto", inp, "aftertrace / HTA", ours / theirs, "x", ">= 5", ours / theirs >= 5))
    return rows


def stage_logs(quick: bool) -> list[dict]:
    import bench_logs
    from common import scaled
    mb = 30 if quick else 100
    rows = []
    names = {"nccl": "NCCL INFO logs", "app": "torchrun/training logs, crash-dense",
             "train": "training log: real step lines continued, one crash at the end"}
    for label in ("nccl", "app", "train"):
        path = (bench_logs.train_log(mb * 1_000_000) if label == "train" else
                scaled(f"logs-{label}-{mb}MB.log", bench_logs.SOURCES[label], mb * 1_000_000))
        size = _mb(path)
        inp = f"{names[label]}, {size:.0f} MB"
        a = _child(bench_logs.PARSE.format(path=str(path), repeat=2))
        b = _child(bench_logs.LOOP.format(path=str(path), rx=bench_logs.LOOP_RX))
        ours = size / a["seconds"]
        rows.append(row("logs", inp, f"aftertrace {a['tool'].split()[1]}", ours, "MB/s", ">= 150", ours >= 150,
                        a["peak_rss_mib"], f"{size / a['cpu_s']:.0f} MB per CPU-s; {a['events']:,} events, "
                                           f"{a['metrics'] or 0:,} metric rows"))
        rows.append(row("logs", inp, "one-regex Python line loop (baseline)", size / b["seconds"], "MB/s",
                        rss=b["peak_rss_mib"]))
        # the least any parser must do here: read and split the lines, write the metric rows
        fl = min((_child(bench_logs.FLOOR.format(path=str(path), metrics=a["metrics"] or 0)) for _ in range(2)),
                 key=lambda r: r["seconds"])
        rows.append(row("logs", inp, "floor: read and split the lines, write the metric rows, no parsing",
                        size / fl["seconds"], "MB/s", rss=fl["peak_rss_mib"],
                        note=f"{size / fl['cpu_s']:.0f} MB per CPU-s; aftertrace takes {a['seconds'] / fl['seconds']:.1f}x the floor's time"))
    return rows


def stage_kernel(quick: bool) -> list[dict]:
    import bench_kernel as bkk
    mb = 50 if quick else 200
    OUT.mkdir(parents=True, exist_ok=True)
    work = OUT / f"kernel-{mb}"
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "dmesg_raw_scaled.txt").exists():
        bkk.scaled_logs(work, mb)
    if not (work / "boot_raw_scaled.txt").exists():
        bkk.realistic_logs(work, mb)
    rows = []
    for name in ("dmesg_raw_scaled.txt", "dmesg_decode_iso_scaled.txt", "boot_raw_scaled.txt",
                 "boot_decode_iso_scaled.txt"):
        path = work / name
        size = _mb(path)
        a = _child(f"""
import time, tempfile, shutil
from aftertrace.ingest.parse import parse_file, ParseJob
from aftertrace.ingest.registry import default_registry
default_registry()
best = None
for _ in range(2):       # (the faster of two parses, as for the other text logs)
    out = tempfile.mkdtemp(); t, c = time.perf_counter(), time.process_time()
    r = parse_file(ParseJob({str(path)!r}, {name!r}, out))
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    shutil.rmtree(out)
    if best is None or dt < best[0]:
        best = (dt, cpu)
RESULT = dict(seconds=best[0], cpu_s=best[1], fmt=r.format, events=r.counts.get('events'), status=r.status)
""")
        ours = size / a["seconds"]
        shape = "crash-dense" if name.startswith("dmesg") else "a real GPU server's boot log, as it is"
        inp = f"kernel log ({'raw dmesg' if 'raw' in name else 'dmesg --decode --time-format iso'}), {shape}, {size:.0f} MB"
        rows.append(row("kernel log", inp, f"aftertrace {a['fmt']}", ours, "MB/s", ">= 150", ours >= 150,
                        a["peak_rss_mib"], f"{size / a['cpu_s']:.0f} MB per CPU-s; {a['events']:,} events"))
        loop = _child(f"""
import sys; sys.path.insert(0, {str(ROOT / 'bench')!r})
from bench_kernel import python_loop
from pathlib import Path
RESULT = dict(seconds=python_loop(Path({str(path)!r})))
""")
        rows.append(row("kernel log", inp, "one-regex Python line loop (baseline)", size / loop["seconds"], "MB/s",
                        rss=loop["peak_rss_mib"]))
        fl = min((_child(bkk.FLOOR.format(path=str(path))) for _ in range(2)), key=lambda r: r["seconds"])
        rows.append(row("kernel log", inp, "floor: read and split the lines, write each as an event, no parsing (one thread)",
                        size / fl["seconds"], "MB/s", rss=fl["peak_rss_mib"],
                        note=f"{size / fl['cpu_s']:.0f} MB per CPU-s; aftertrace takes {a['seconds'] / fl['seconds']:.2f}x the floor's time"))
    return rows


def stage_cgroup(quick: bool) -> list[dict]:
    n = 10_000 if quick else 100_000
    r = _child(f"""
import sys, time, tempfile, shutil
from pathlib import Path
sys.path.insert(0, {str(ROOT / 'bench')!r})
from bench_cgroup import build
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.registry import default_registry, write_group_manifest
from aftertrace.server.store import Store
out = Path(tempfile.mkdtemp(prefix='bench-cg-'))
n = build(out / 'bundle', {n})
reg = default_registry()
files = sorted((str(p.relative_to(out / 'bundle')), str(p)) for p in (out / 'bundle').rglob('*') if p.is_file())
t = time.perf_counter()
((parser, g),) = reg.claim_groups(files)
man = write_group_manifest(g, out / 'g.json')
r = parse_file(ParseJob(man, g.rel, str(out / 'g'), None, 'UTC', parser.name), reg)
s = Store(str(out / 's.duckdb'))
for table, parts in r.parts.items():
    s.load_parts(table, parts, 'bench', 1)
dt = time.perf_counter() - t
shutil.rmtree(out)
RESULT = dict(seconds=dt, files=len(g.members), rows=r.records)
""")
    per_min = r["files"] / r["seconds"] * 60
    return [row("cgroup", f"cgroup snapshot series, {r['files']:,} files (the sample's real snapshots)",
                "aftertrace claim + parse + load", per_min, "files/min", ">= 100,000", per_min >= 100_000,
                r["peak_rss_mib"], f"{r['rows']:,} rows")]


SMALL_RUN = r"""
import statistics, tempfile, time, shutil
from dataclasses import replace
from pathlib import Path
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import size_hint
from aftertrace.ingest.registry import default_registry
from aftertrace.ingest.sink import INLINE_ROWS
reg = default_registry()
out = Path(tempfile.mkdtemp(prefix='bench-small-'))
res = {}
for label, files in GROUPS:
    parser = reg.sniff(files[0], Path(files[0]).name).reader.name
    jobs = [ParseJob(f, Path(f).name, '', parser=parser, inline_rows=INLINE_ROWS) for f in files]
    parse_file(replace(jobs[0], out_dir=str(out / 'warm')), reg)     # (imports, caches: not a file's cost)
    times, k = [], 0
    start = time.perf_counter()
    while k < 5 or (time.perf_counter() - start < 2.0 and k < 2000):
        t = time.perf_counter()
        r = parse_file(replace(jobs[k % len(jobs)], out_dir=str(out / str(k))), reg)
        times.append(time.perf_counter() - t)
        k += 1
    res[label] = dict(ms=statistics.median(times) * 1000, n=k, files=len(files),
                      bytes=sum(Path(f).stat().st_size for f in files) / len(files),
                      text=sum(size_hint(f) for f in files) / len(files), status=r.status, fmt=r.format)
shutil.rmtree(out)
RESULT = res
"""


def stage_small(quick: bool) -> list[dict]:
    bundle, _ = build_rank_bundle(8, OUT / "bundle-8-ranks")
    host = bundle / "node-000"
    logs = sorted((host / "logs").rglob("*.log"))
    groups = [
        ("Kineto trace of one rank's profiler cycle", sorted(map(str, (host / "profiler").glob("*.json")))[:48]),
        ("torchrun launcher log", [str(p) for p in logs if p.name == "torchrun.log"]),
        ("a worker's stderr log (torchrun log_dir)", [str(p) for p in logs if p.name == "stderr.log" and p.stat().st_size]),
        ("perf script, gzip (one host's recording)", [str(p) for p in sorted((host / "perf").glob("*.gz"))]),
        ("kernel log (raw dmesg)", [str(host / "dmesg.txt")]),
    ]
    groups = [(label, files) for label, files in groups if files]
    r = _child(f"GROUPS = {groups!r}\n" + SMALL_RUN)
    rows = []
    for label, files in groups:
        g = r[label]
        size = f"{g['bytes'] / 1024:,.0f} KB" + (f" ({g['text'] / 1e6:.1f} MB of text)" if g["text"] != g["bytes"] else "")
        rows.append(row("small files", f"{label}, {size}" + (f" ({g['files']} such files)" if g["files"] > 1 else ""),
                        f"aftertrace {g['fmt']}, one file as a parse worker takes it", g["ms"], "ms per file",
                        rss=r["peak_rss_mib"],
                        note=f"{g['text'] / 1e6 / (g['ms'] / 1000):.1f} MB/s of text; median of {g['n']} parses; "
                             f"{g['status']}"))
    return rows


def build_rank_bundle(ranks: int, dest: Path, per_host: int = 8) -> tuple[Path, float]:
    """A bundle of ``ranks`` ranks from the real sample: each host of ``per_host`` ranks gets the
    sample's host files (perf, dmesg, cgroup snapshots, host facts, launcher logs); each rank
    gets the Kineto traces of one of the sample's two ranks with its rank rewritten."""
    if dest.exists() and (dest / ".complete").exists():
        return dest, sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) / 1e6
    shutil.rmtree(dest, ignore_errors=True)
    src = SAMPLE / "vm"
    traces = sorted((src / "profiler").glob("*.json.gz"))
    by_pid: dict[str, list[Path]] = {}
    for t in traces:
        by_pid.setdefault(t.name.split(".")[0], []).append(t)
    pids = sorted(by_pid)
    docs = {p: [json.loads(gzip.decompress(t.read_bytes())) for t in by_pid[p]] for p in pids}
    hosts = math.ceil(ranks / per_host)
    for h in range(hosts):
        host = f"node-{h:03d}"
        hd = dest / host
        shutil.copytree(src, hd, ignore=shutil.ignore_patterns("profiler"))
        (hd / "host" / "hostname").write_text(host + "\n")
        (hd / "profiler").mkdir()
        for local in range(min(per_host, ranks - h * per_host)):
            rank = h * per_host + local
            pid = pids[local % len(pids)]
            for i, doc in enumerate(docs[pid]):
                d = dict(doc)
                di = dict(d.get("distributedInfo") or {})
                di.update(rank=rank, world_size=ranks)
                d["distributedInfo"] = di
                name = f"{host}_{20000 + local}.{i:04d}.pt.trace.json"
                (hd / "profiler" / name).write_text(json.dumps(d))
    (dest / ".complete").write_text("")
    return dest, sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) / 1e6


def stage_e2e(quick: bool) -> list[dict]:
    from common import machine_reference
    rows = []
    ref = machine_reference()
    for ranks in ([8, 64] if quick else [8, 64, 512]):
        bundle, mb = build_rank_bundle(ranks, OUT / f"bundle-{ranks}-ranks")
        files = sum(1 for f in bundle.rglob("*") if f.is_file())
        r = _child(f"""
import resource, time, tempfile, shutil
from pathlib import Path
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
home = Path(tempfile.mkdtemp(prefix='bench-e2e-'))
svc = Service(Settings.from_env(home=home))
t = time.perf_counter()
sub = svc.submit_path({str(bundle)!r})
rep = svc.analyze(sub.incident_id)
dt = time.perf_counter() - t
ok = sum(1 for s in rep['sources'] if s['status'] in ('parsed', 'partial'))
chain = rep['chains'][0]['links'] if rep['chains'] else []
shutil.rmtree(home)
# (CPU of this process, and of its ended children: the parse workers, tar packing the folder)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
RESULT = dict(seconds=dt, sources=len(rep['sources']), ok=ok, chain=' -> '.join(l['kind'] for l in chain),
              cpu_main=me.ru_utime + me.ru_stime, cpu_children=kids.ru_utime + kids.ru_stime)
""")
        target = "< 60 s per GB" if mb >= 500 else None
        per_gb = r["seconds"] / (mb / 1000)
        rows.append(row("end to end", f"{ranks} ranks: {files:,} files, {mb:.0f} MB", "aftertrace analyze",
                        r["seconds"], "s", target, (per_gb < 60) if target else None, r["peak_rss_mib"],
                        f"{mb / r['seconds']:.0f} MB/s; {r['ok']:,} of {r['sources']:,} sources parsed; "
                        f"CPU {r['cpu_main']:.1f} s in the analysing process, {r['cpu_children']:.1f} s in its "
                        f"workers and tar; chain {r['chain'] or '-'}; {ref}"))
    return rows


QUERY_RUN = r"""
import random, statistics, tempfile, time, shutil, sys
from pathlib import Path
sys.path.insert(0, ROOT + '/bench')
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.analysis.timeline import build_tracks
home = Path(tempfile.mkdtemp(prefix='bench-q-'))
svc = Service(Settings.from_env(home=home))
sub = svc.submit_path(ROOT + '/sample_traces/oom-after-throttle')
svc.analyze(sub.incident_id)
iid, st = sub.incident_id, svc.store
base = st.query("SELECT count(*) AS n, min(ts_utc_ns) AS a, max(ts_utc_ns) AS b FROM events "
                "WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", [iid])[0]
span = base['b'] - base['a'] + 1_000_000_000
copies = max(0, -(-EVENTS // base['n']) - 1)
from bench_export import _copy      # the placed rows, time-shifted copies
for t in ('events', 'metrics', 'samples'):
    _copy(st, t, iid, span, copies)
build_tracks(st, iid)
tot = st.query("SELECT count(*) AS n, min(ts_utc_ns) AS a, max(ts_utc_ns) AS b FROM events WHERE incident_id = ?", [iid])[0]
nsamp = st.query("SELECT count(*) AS n FROM samples WHERE incident_id = ?", [iid])[0]['n']
rng = random.Random(7)
def lat(fn, width_s, n=20):
    out = []
    for i in range(n + 1):
        w = int(width_s * 1e9) if width_s else tot['b'] - tot['a']
        s = tot['a'] + (rng.randrange(0, max(1, tot['b'] - tot['a'] - w)) if width_s else 0)
        t = time.perf_counter(); fn(iid, str(s / 1e9), str((s + w) / 1e9)); dt = (time.perf_counter() - t) * 1000
        if i:
            out.append(dt)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]
res = {}
for label, w in (('10 s', 10), ('1 min', 60), ('10 min', 600), ('1 h', 3600), ('whole', 0)):
    # as the viewer asks for a window: the default tracks at 2,200 px, without the catalog
    res['timeline ' + label] = lat(lambda i, a, b: svc.timeline(i, a, b, None, None, 2200, 2000, False), w)
for label, w in (('1 min', 60), ('10 min', 600), ('whole', 0)):
    res['flame graph ' + label] = lat(svc.flamegraph, w, 10)
shutil.rmtree(home)
RESULT = dict(seconds=0, events=tot['n'], samples=nsamp, hours=(tot['b'] - tot['a']) / 3.6e12, lat=res)
"""


def stage_query(quick: bool) -> list[dict]:
    rows = []
    for n in ([1_000_000] if quick else [1_000_000, 10_000_000]):
        r = _child(f"ROOT = {str(ROOT)!r}\nEVENTS = {n}\n" + QUERY_RUN)
        inp = f"{r['events'] / 1e6:.1f} M events, {r['samples'] / 1e6:.2f} M samples over {r['hours']:.1f} h"
        for what, (p50, p95) in r["lat"].items():
            tl = what.startswith("timeline")
            rows.append(row("query latency", inp, f"{what} window p50 / p95", p50, "ms",
                            "< 150" if tl else None, (p95 < 150) if tl else None, r["peak_rss_mib"],
                            f"p95 {p95:.0f} ms"))
    return rows


def stage_export(quick: bool) -> list[dict]:
    path = ROOT / "bench" / "bench_export.py"
    if not path.exists():
        raise RuntimeError("bench/bench_export.py is missing")
    n = 1_000_000 if quick else 10_000_000
    p = subprocess.run([sys.executable, str(path), "--events", str(n), "--memory-limit", "2GB"],
                       capture_output=True, text=True, cwd=ROOT, timeout=1500)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip().splitlines()[-1:])
    rows = []
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rows.append(row("export", f"{r['events'] / 1e6:.1f} M events (+ metrics, samples)",
                        f"aftertrace export --format {r['tool']}", r["seconds"], "s", rss=r["peak_rss_mib"],
                        note=f"{r['MB']:.0f} MB written; {r['events/s'] / 1e3:.0f} k events/s; "
                             "DuckDB memory_limit 2GB"))
    if len(rows) != 2:
        raise RuntimeError(f"expected 2 export rows, got {len(rows)}")
    return rows


def _breakdown(r: dict) -> str:
    """Where an analysis' seconds went, from bench_analysis's per-function timings."""
    sp = r["spent"]
    find = sum(sp.get(k, 0) for k in ("findings.oom_kills", "findings.typed_events", "findings.refine_launcher_times",
                                      "detectors", "findings.merge_duplicates"))
    prog = sum(sp.get(k, 0) for k in ("progress.rank_progress", "progress.after_last_sign_of_life",
                                      "progress.stalled_links"))
    parts = [("parse + load", r["seconds"] - r["analysis_s"]), ("clocks", sp.get("clocks.align", 0)),
             ("timeline tracks", sp.get("timeline.build_tracks", 0)), ("findings", find),
             ("of which merge", sp.get("findings.merge_duplicates", 0)),
             ("refine", sp.get("findings.refine_launcher_times", 0)), ("detectors", sp.get("detectors", 0)),
             ("progress", prog), ("chains", sp.get("chains.find_chains", 0)), ("report", sp.get("report.build", 0))]
    return ", ".join(f"{k} {v:.2f}" for k, v in parts)


def stage_analysis(quick: bool) -> list[dict]:
    import bench_analysis as ba
    sizes = [10, 30] if quick else [10, 100]
    rows, took = [], {}
    for mb in sizes:
        bundle = ba.crash_bundle(mb * 1_000_000)
        r = min((ba.analyze(bundle) for _ in range(2)), key=lambda r: r["seconds"])
        took[mb] = r["seconds"]
        rows.append(row("analysis", f"crash-dense torchrun log, {mb} MB ({r['anomalies']:,} findings)",
                        "aftertrace analyze (Service.submit_path + analyze)", r["seconds"], "s",
                        rss=r["peak_rss_mib"], note=f"{r['cpu_s']:.1f} CPU-s; seconds in: {_breakdown(r)}"))
    lo, hi = sizes
    ratio = took[hi] / took[lo]
    rows.append(row("analysis", f"crash-dense torchrun logs, {hi} MB vs {lo} MB", "analysis time ratio", ratio, "x",
                    f"<= {1.2 * hi / lo:.0f}", ratio <= 1.2 * hi / lo, note="O(n log n) in findings: at most 1.2x linear"))
    rss = {}
    for k in (1, 4, 16):
        r = min((ba.align(ba.kineto_home(k)) for _ in range(2)), key=lambda r: r["peak_rss_mib"])
        rss[k] = r["peak_rss_mib"]
        (host, off, unc, pairs), = r["offsets"]
        rows.append(row("analysis", f"Kineto x{k}: {r['files']:,} files, 8 ranks on 2 hosts", "clocks.align", r["seconds"],
                        "s", rss=r["peak_rss_mib"],
                        note=f"RSS before it {r['rss_before_mib']:.0f} MiB; host_offsets {r['collectives_s']:.2f} s; "
                             f"{pairs} collectives matched, {host} at {off / 1e9:+.6f} s +- {unc / 1e3:.0f} us"))
    ratio = rss[16] / rss[1]
    rows.append(row("analysis", "Kineto x16 vs x1 files", "clock alignment peak RSS ratio", ratio, "x", "<= 1.5",
                    ratio <= 1.5))
    return rows


def stage_whole(quick: bool) -> list[dict]:
    import bench_whole
    from bench_whole import NAMES
    rows = []
    for r in bench_whole.measure(quick, 2 if quick else 3):
        at, an = r["aftertrace"], r[r["anchor"]]
        target = {"stackcollapse": 5.0, "hta": 5.0, "lnav": 1.5}[r["anchor"]]
        if "seconds" not in an:
            rows.append(row("whole process", r["input"], NAMES[r["anchor"]], None, "x",
                            note=f"MISSING: {an['missing']}"))
            continue
        ratio = an["seconds"] / at["seconds"]
        rows.append(row("whole process", r["input"], f"aftertrace analyze vs {NAMES[r['anchor']]}", ratio, "x",
                        f">= {target:g}", ratio >= target, at["rss"],
                        f"aftertrace {at['seconds']:.2f} s ({r['mb'] / at['seconds']:.0f} MB/s), "
                        f"{NAMES[r['anchor']]} {an['seconds']:.2f} s, {an['rss']:.0f} MiB; median of {at['n']}"))
    return rows


STAGES = {"perf": stage_perf, "kineto": stage_kineto, "logs": stage_logs, "kernel": stage_kernel,
          "cgroup": stage_cgroup, "small": stage_small, "e2e": stage_e2e, "query": stage_query, "export": stage_export,
          "analysis": stage_analysis, "whole": stage_whole}


# -- the harness ---------------------------------------------------------------------------------
NOTES = "<!-- notes: kept when the table above is measured again -->"
MEASURED = "<!-- measured: "     # + a JSON object: area -> when its rows were measured (partial runs keep it)


def _fmt(v, unit):
    if v is None:
        return "MISSING"
    if unit == "files/min":
        return f"{v:,.0f}"
    return f"{v:.2f}" if unit == "x" else (f"{v:.1f}" if v < 10 else f"{v:,.0f}")


def write_results(rows: list[dict], args, started: float, out: Path) -> None:
    from common import cpu_model
    la = os.getloadavg()
    cmd = "python -m bench" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    lines = ["# Benchmark results", "",
             f"Measured by `{cmd}` on {platform.node()} ({os.cpu_count()} CPUs, {cpu_model()}, "
             f"Python {platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"in {(time.time() - started) / 60:.1f} min; load average at the end {la[0]:.1f}/{la[1]:.1f}/{la[2]:.1f}. "
             "Inputs are real samples scaled up (see `bench/suite.py`); every tool ran in a fresh process; "
             "RSS = that process's peak resident memory (Python + Polars/DuckDB/pyarrow baseline included). "
             "A missed target is marked **no**; its profile and what was done are in the notes below and in "
             "`bench/results/`.", "",
             "| area | input | what runs | value | unit | target | met | peak RSS MiB | notes |",
             "|---|---|---|---:|---|---|---|---:|---|"]
    fresh = []
    for r in rows:
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        rss = "" if r["rss_mib"] is None else f"{r['rss_mib']:.0f}"
        fresh.append(f"| {r['area']} | {r['input']} | {r['tool']} | {_fmt(r['value'], r['unit'])} | {r['unit']} | "
                     f"{r['target'] or ''} | {met} | {rss} | {r['note']} |")
    old = out.read_text() if out.exists() else ""
    now = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    areas = {r["area"] for r in rows}
    when = {} if not (args.only and old) else _measured_areas(old)
    when.update({a: now for a in areas})
    if args.only and old:       # a partial run replaces its areas' rows and keeps the others
        fresh = _merge_rows(old, fresh, areas)
        earlier: dict[str, list[str]] = {}
        for a, t in when.items():
            if a not in areas:
                earlier.setdefault(t, []).append(a)
        lines[2] += (f" Only the rows of `{args.only}` were measured by this run; the others are kept from earlier "
                     "runs: " + "; ".join(f"{', '.join(sorted(a))} at {t}" for t, a in sorted(earlier.items())) + ".")
    lines[3:3] = ["", MEASURED + json.dumps(when, sort_keys=True) + " -->"]     # (before the table's head)
    lines += fresh
    if NOTES in old:
        lines += ["", NOTES + old.split(NOTES, 1)[1].rstrip("\n")]
    out.write_text("\n".join(lines) + "\n")


def _table_rows(text: str) -> list[str]:
    head = text.split(NOTES, 1)[0]
    return [ln for ln in head.splitlines() if ln.startswith("| ") and not ln.startswith("| area |")]


def _measured_line(text: str) -> str:
    m = re.search(r"^Measured by .*?(\d{4}-\d\d-\d\d \d\d:\d\d UTC)", text, re.M)
    return m.group(1) if m else "time unknown"


def _measured_areas(text: str) -> dict[str, str]:
    """When each area's rows were measured: the file's ``MEASURED`` comment; a file without one
    (written before it existed) gives its header's time to every area of its table."""
    m = re.search("^" + re.escape(MEASURED) + r"(\{.*\}) -->$", text, re.M)
    if m:
        return json.loads(m.group(1))
    t = _measured_line(text)
    return {ln.split(" | ", 1)[0][2:]: t for ln in _table_rows(text)}


def _merge_rows(old: str, fresh: list[str], areas: set[str]) -> list[str]:
    """The old table's rows with those of ``areas`` replaced by ``fresh`` (at their first place)."""
    out, placed = [], False
    for ln in _table_rows(old):
        if ln.split(" | ", 1)[0][2:] in areas:
            if not placed:
                out += fresh
                placed = True
        else:
            out.append(ln)
    return out if placed else out + fresh


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description="aftertrace benchmark suite")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (under 5 minutes)")
    ap.add_argument("--only", help="comma-separated stages: " + ",".join(STAGES))
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    args = ap.parse_args(argv)
    stages = args.only.split(",") if args.only else list(STAGES)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"unknown stage(s) {unknown}")
    started = time.time()
    rows, missing = [], []
    for s in stages:
        t = time.time()
        print(f"== {s}", flush=True)
        p = subprocess.run([sys.executable, "-m", "bench.suite", s] + (["--quick"] if args.quick else []),
                           capture_output=True, text=True, cwd=ROOT)
        try:
            got = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
        except (ValueError, IndexError):
            got = None
        if got is None:
            why = (p.stderr or p.stdout or "no output").strip().splitlines()[-1][:300]
            got = [row(s, "-", f"stage {s}", None, "-", note=f"MISSING: the stage failed: {why}")]
        for r in got:
            if r["value"] is None:
                missing.append(f"{r['area']} / {r['tool']}: {r['note']}")
            print(f"  {r['tool']:60s} {_fmt(r['value'], r['unit']):>10s} {r['unit']:9s} {r['note']}", flush=True)
        rows += got
        print(f"   ({time.time() - t:.0f} s)", flush=True)
    write_results(rows, args, started, Path(args.out))
    print(f"written to {args.out} in {(time.time() - started) / 60:.1f} min")
    if missing:
        print("MISSING figures:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    return 0


def _stage_main(argv) -> int:
    name, quick = argv[0], "--quick" in argv[1:]
    print(json.dumps(STAGES[name](quick)))
    return 0


if __name__ == "__main__":
    sys.exit(_stage_main(sys.argv[1:]))
