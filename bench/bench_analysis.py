"""Analysis cost (everything after the parse: clocks, timeline bins, findings, chains, report)
on inputs whose size grows the number of findings, and clock alignment on many Kineto files.

Inputs, built from real files and cached under ``bench/out/``:

* ``crashes``: one host whose launcher log is a long run of real failures: the torchrun
  captures of every sample bundle (``sample_traces/*/vm/logs/torchrun.log``: exceptions, a
  SIGKILL, a SIGSEGV, collective timeouts and mismatches, OOM kills, ChildFailedError blocks)
  played one after another, again and again, each copy moved forward in time to start after
  the previous one ended and given new pids, as a job that the scheduler keeps restarting
  writes it. Every copy is a new failure, so findings grow with the size.
* ``kineto``: the real Kineto traces of the sample bundle (``oom-after-throttle``, 12 files per
  rank) copied per rank with the rank (and, on the second host, the base time) rewritten: 8
  ranks on 2 hosts; ``x1`` each rank's 12 files, ``xN`` N times as many files per rank, as
  later profiler cycles of a longer run (times and step numbers moved on).

``python bench/bench_analysis.py [--mb 10,20,50,100] [--kineto 1,4,16] [--rounds N] [--old DIR]``
prints one JSON line per measurement (time, CPU time, peak RSS, and where the time went), then
a Markdown table of min / median per input; ``--old DIR`` runs the code of another checkout
(e.g. ``git archive <commit> | tar -x -C DIR``) on the same inputs, interleaved with this
one's, alternating which goes first. ``python -m bench --only analysis`` writes the rows to
RESULTS.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, machine, run_child  # noqa: E402

SAMPLES = ROOT / "sample_traces"
# Played in this order in every copy (each a separate recorded job).
CRASH_LOGS = [SAMPLES / n / "vm/logs/torchrun.log" for n in (
    "logs-exception", "logs-hang", "logs-sigkill", "logs-mismatch", "logs-ddp-detail-segv",
    "oom-after-throttle", "oom-leak-only", "collected-oom-after-throttle", "collected-hang")]
GAP_S = 7          # seconds between one job's last line and the restarted job's first

# The time stamps of these logs: Python logging / torchrun's ChildFailedError (year first, any
# separator before the time) and glog lines of c10d and torch.distributed.elastic (no year).
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d\d)-(\d\d)([ _T])(\d\d):(\d\d):(\d\d)(?!\d)")
_GLOG = re.compile(r"(?<![\w])([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?=\.\d)")
# Where these logs name a process: "(pid: N)", "pid=N", "process N", a glog line's thread id.
_PIDS = re.compile(r"\(pid: (\d+)\)|\bpid=(\d+)|\bprocess (\d+)|^(?:\[default\d+\]:)?[IWEF]\d{4} [\d:.]+ (\d+) ", re.M)


def _times(text: str, year: int) -> list[datetime]:
    out = [datetime(int(m[1]), int(m[2]), int(m[3]), int(m[5]), int(m[6]), int(m[7])) for m in _ISO.finditer(text)]
    out += [datetime(year, int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6])) for m in _GLOG.finditer(text)]
    return out


def _shift(text: str, delta: timedelta, year: int, pids: dict[str, str]) -> str:
    def iso(m):
        t = datetime(int(m[1]), int(m[2]), int(m[3]), int(m[5]), int(m[6]), int(m[7])) + delta
        return f"{t:%Y-%m-%d}{m[4]}{t:%H:%M:%S}"

    def glog(m):
        t = datetime(year, int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6])) + delta
        return f"{m[1]}{t:%m%d %H:%M:%S}"

    text = _GLOG.sub(glog, _ISO.sub(iso, text))
    if pids:
        text = re.sub(r"(?<![\w.])(" + "|".join(sorted(pids, key=len, reverse=True)) + r")(?![\w])",
                      lambda m: pids[m[1]], text)
    return text


def crash_bundle(target_bytes: int, dest: Path | None = None) -> Path:
    """``crashes``: a one-host bundle whose ``logs/torchrun.log`` holds the real failures of the
    sample bundles repeated to ``target_bytes``, each copy a later restart with new pids
    (under bench/out/ unless ``dest`` is given)."""
    dest = dest or OUT / f"analysis-crashes-{target_bytes // 1_000_000}MB"
    log = dest / "vm/logs/torchrun.log"
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "vm/logs").mkdir(parents=True)
    (dest / "vm/host").mkdir()
    (dest / "vm/host/hostname").write_text("vm\n")
    srcs = []
    for p in CRASH_LOGS:
        text = p.read_text()
        year = int(_ISO.search(text)[1])
        ts = _times(text, year)
        pids = sorted({g for m in _PIDS.finditer(text) for g in m.groups() if g and len(g) >= 3})
        srcs.append((text, year, min(ts), max(ts), pids))
    cursor = srcs[0][2]
    n, k = 0, 0
    with open(log, "w") as f:
        while n < target_bytes:
            for text, year, t0, t1, pids in srcs:
                delta = cursor - t0
                new = {p: str(300 + (int(p) + 4099 * k) % 4_000_000) for p in pids} if k else {}
                n += f.write(_shift(text, delta, year, new))
                cursor += (t1 - t0) + timedelta(seconds=GAP_S)
            k += 1
    # the job's host's clock after the last line, as the collection wrote it
    (dest / "vm/host/date").write_text(f"{cursor:%a %b %d %H:%M:%S} UTC {cursor:%Y}\n")
    (dest / ".complete").write_text("")
    return dest


ANALYZE = r"""
import time, tempfile, shutil, sys, resource
from pathlib import Path
t0 = time.perf_counter()
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.analysis import clocks, timeline, rootcause, findings, progress, report, chains, clock_collectives, detectors
import aftertrace.server.service as service
spent = {}
def timed(mod, name, label):
    fn = getattr(mod, name)
    def wrap(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
    setattr(mod, name, wrap)
for mod, name, label in (
        (clocks, 'align', 'clocks.align'), (clock_collectives, 'host_offsets', 'clock collectives'),
        (timeline, 'build_tracks', 'timeline.build_tracks'),
        (findings, 'oom_kills', 'findings.oom_kills'), (findings, 'typed_events', 'findings.typed_events'),
        (findings, 'refine_launcher_times', 'findings.refine_launcher_times'),
        (detectors, 'run', 'detectors'),
        (findings, 'merge_duplicates', 'findings.merge_duplicates'),
        (progress, 'rank_progress', 'progress.rank_progress'),
        (progress, 'after_last_sign_of_life', 'progress.after_last_sign_of_life'),
        (progress, 'stalled_links', 'progress.stalled_links'),
        (findings, 'terminal_failure', 'findings.terminal_failure'),
        (rootcause, 'find_chains', 'chains.find_chains'), (rootcause, '_victims', 'rootcause._victims'),
        (rootcause.narrative, 'summary', 'narrative.summary'),
        (rootcause, 'analyze', 'rootcause.analyze (all)'), (service.report_mod, 'build', 'report.build')):
    if hasattr(mod, name):
        timed(mod, name, label)
home = Path(tempfile.mkdtemp(prefix='bench-analysis-'))
svc = Service(Settings.from_env(home=home))
t, c = time.perf_counter(), time.process_time()
sub = svc.submit_path(BUNDLE)
rep = svc.analyze(sub.incident_id)
dt, cpu = time.perf_counter() - t, time.process_time() - c
after_parse = sum(v for k, v in spent.items() if k in ('clocks.align', 'timeline.build_tracks',
                                                      'rootcause.analyze (all)', 'report.build'))
RESULT = dict(seconds=dt, cpu_s=cpu, analysis_s=after_parse, spent={k: round(v, 3) for k, v in sorted(spent.items())},
              anomalies=len(rep['anomalies']), sources=len(rep['sources']),
              chain=' -> '.join(l['kind'] for l in rep['chains'][0]['links']) if rep['chains'] else '',
              failure=(rep['failure'] or {}).get('summary', '')[:80])
shutil.rmtree(home)
"""


# -- Kineto files per rank ---------------------------------------------------------------------
PROFILER = SAMPLES / "oom-after-throttle/vm/profiler"
HOST_SHIFT_NS = 1_700_000_000     # the second host's wall clock runs this far ahead


def kineto_bundle(scale: int, ranks: int = 8, per_host: int = 4, dest: Path | None = None) -> Path:
    """``kineto``: ``ranks`` ranks on ``ranks / per_host`` hosts; each rank holds the real Kineto
    traces of one of the sample's two ranks (12 files, one profiler cycle each: two
    ProfilerStep markers and their gloo all-reduces), ``scale`` times over: each repetition
    the next profiler cycles of a longer run, moved on in time by the 12 files' span and in
    step numbers by their count. The rank in ``distributedInfo`` is rewritten; every host
    after the first has its clock ``HOST_SHIFT_NS`` ahead, for clock alignment to find from
    the collectives."""
    dest = dest or OUT / f"analysis-kineto-x{scale}"
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    by_pid: dict[str, list[dict]] = {}
    for f in sorted(PROFILER.glob("*.pt.trace.json.gz")):
        by_pid.setdefault(f.name.split(".")[0], []).append(json.loads(gzip.decompress(f.read_bytes())))
    pids = sorted(by_pid)
    span, steps = {}, {}
    for p, docs in by_pid.items():
        ts = [int(d["baseTimeNanoseconds"]) + int(float(e["ts"]) * 1000) for d in docs for e in d["traceEvents"]
              if "ts" in e]
        span[p] = max(ts) - min(ts) + 1_000_000_000
        steps[p] = 1 + max(int(e["name"].split("#")[1]) for d in docs for e in d["traceEvents"]
                           if str(e.get("name", "")).startswith("ProfilerStep#"))
    for r in range(ranks):
        h, local = divmod(r, per_host)
        host = f"node-{h}"
        d = dest / host / "profiler"
        d.mkdir(parents=True, exist_ok=True)
        (dest / host / "hostname").write_text(host + "\n")
        p = pids[r % len(pids)]
        for k in range(scale):
            for i, doc in enumerate(by_pid[p]):
                doc = dict(doc)
                doc["baseTimeNanoseconds"] = int(doc["baseTimeNanoseconds"]) + k * span[p] + (HOST_SHIFT_NS if h else 0)
                doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=r, world_size=ranks)
                if k:
                    doc["traceEvents"] = [
                        dict(e, name=f"ProfilerStep#{int(e['name'].split('#')[1]) + k * steps[p]}")
                        if str(e.get("name", "")).startswith("ProfilerStep#") else e for e in doc["traceEvents"]]
                name = f"{host}_{20000 + local}.{k:03d}{i:02d}.pt.trace.json.gz"
                (d / name).write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    (dest / ".complete").write_text("")
    return dest


INGEST = r"""
import time, json
from pathlib import Path
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
home = Path(HOME)
svc = Service(Settings.from_env(home=home))
t = time.perf_counter()
iid = svc.submit_path(BUNDLE).incident_id
rep = svc.analyze(iid)
(home / "incident").write_text(iid)
RESULT = dict(seconds=time.perf_counter() - t, sources=len(rep['sources']))
"""

ALIGN = r"""
import time, resource
from pathlib import Path
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.analysis import clocks, clock_collectives
home = Path(HOME)
st = Service(Settings.from_env(home=home)).store
iid = (home / "incident").read_text()
st.query("SELECT count(*) AS n FROM collectives WHERE incident_id = ?", [iid])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
entries = clocks.align(st, iid)
dt = time.perf_counter() - t
t = time.perf_counter()
offs = clock_collectives.host_offsets(st, iid)
dt_cc = time.perf_counter() - t
n = st.query("SELECT count(*) AS files FROM sources WHERE incident_id = ? AND kind = 'torch_trace'", [iid])[0]
RESULT = dict(seconds=dt, collectives_s=dt_cc, rss_before_mib=before, files=n['files'],
              offsets=[(o.host, o.offset_ns, o.uncertainty_ns, o.pairs) for o in offs])
"""


def kineto_home(scale: int) -> Path:
    """The ``kineto`` bundle at ``scale`` ingested and analysed once (cached): its store's home."""
    home = OUT / f"analysis-kineto-x{scale}.home"
    if not (home / "incident").exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        run_child(f"HOME = {str(home)!r}\nBUNDLE = {str(kineto_bundle(scale))!r}\n" + INGEST)
    return home


def align(home: Path, cwd: Path | None = None) -> dict:
    """``clocks.align`` of the stored incident in a fresh process (``cwd``: whose code runs):
    seconds, peak RSS, the RSS before it, the host offsets found."""
    return run_child(f"HOME = {str(home)!r}\n" + ALIGN, cwd=cwd)


def analyze(bundle: Path, cwd: Path | None = None) -> dict:
    """``Service.submit_path`` + ``analyze`` of ``bundle`` in a fresh process (``cwd``: whose
    code runs): wall time, peak RSS, the seconds spent in each analysis step (``spent``; the
    parse is the rest)."""
    return run_child(f"BUNDLE = {str(bundle)!r}\n" + ANALYZE, cwd=cwd)


def _stats(xs: list[float], fmt: str = ".2f") -> str:
    return f"{min(xs):{fmt}} / {statistics.median(xs):{fmt}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", default="10,20,50,100", help="sizes of the crash-dense log, MB ('' for none)")
    ap.add_argument("--kineto", default="1,4,16", help="Kineto files per rank, times the sample's ('' for none)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--old", type=Path, help="a checkout of the code to compare with (run interleaved with this one)")
    args = ap.parse_args()
    codes = [("new", ROOT)] + ([("old", args.old)] if args.old else [])
    got: dict[tuple, list[dict]] = {}
    for rnd in range(args.rounds):
        for mb in [int(x) for x in args.mb.split(",") if x]:
            b = crash_bundle(mb * 1_000_000)
            for label, cwd in (codes if rnd % 2 == 0 else codes[::-1]):
                r = analyze(b, cwd)
                got.setdefault(("crashes", mb, label), []).append(r)
                print(json.dumps(dict(r, input=f"crashes {mb} MB", code=label, round=rnd)), flush=True)
        for k in [int(x) for x in args.kineto.split(",") if x]:
            home = kineto_home(k)
            for label, cwd in (codes if rnd % 2 == 0 else codes[::-1]):
                r = align(home, cwd)
                got.setdefault(("kineto", k, label), []).append(r)
                print(json.dumps(dict(r, input=f"kineto x{k}", code=label, round=rnd)), flush=True)
    print(f"\n{machine()}, {args.rounds} round(s), min / median\n")
    print("| input | code | seconds | CPU s | peak RSS MiB | findings / files | seconds in (median run) |")
    print("|---|---|---:|---:|---:|---:|---|")
    for (what, size, label), rs in got.items():
        mid = sorted(rs, key=lambda r: r["seconds"])[len(rs) // 2]
        if what == "crashes":
            spent = ", ".join(f"{k} {v:.2f}" for k, v in mid["spent"].items() if v >= 0.05)
            print(f"| crash-dense log {size} MB | {label} | {_stats([r['seconds'] for r in rs])} | "
                  f"{_stats([r['cpu_s'] for r in rs])} | {_stats([r['peak_rss_mib'] for r in rs], '.0f')} | "
                  f"{mid['anomalies']:,} | {spent} |")
        else:
            print(f"| Kineto x{size} | {label} | {_stats([r['seconds'] for r in rs])} | | "
                  f"{_stats([r['peak_rss_mib'] for r in rs], '.0f')} | {mid['files']:,} | "
                  f"host_offsets {_stats([r['collectives_s'] for r in rs])} s; RSS before {mid['rss_before_mib']:.0f}; "
                  f"offsets {mid['offsets']} |")


if __name__ == "__main__":
    main()
