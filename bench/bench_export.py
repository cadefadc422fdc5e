"""Export throughput and peak memory of the Perfetto and Chrome JSON exporters on a large incident.

    .venv/bin/python bench/bench_export.py [--events 10000000] [--only perfetto|chrome] [--keep]

Analyses ``sample_traces/oom-after-throttle`` into a fresh store under ``bench/out/``, then
copies the incident's placed rows with the times shifted by whole copies of its span until it
holds ``--events`` events (``INSERT ... SELECT`` in DuckDB; the last copy is cut to hit the
number exactly) -- the same tracks, names and densities, a longer incident. Metrics and perf
samples are copied as many times (``--events-only`` leaves them as they are). Then each
exporter runs in a fresh process (``python -c``) that opens the store read-only and writes the
export to a file next to it; the child reports its wall time and
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (peak RSS, DuckDB's buffers included;
``--memory-limit`` caps DuckDB's buffer pool in that process, which otherwise keeps the blocks
it has read while memory allows). Prints one
JSON line per run and a Markdown table: output MB, MB/s of output, events/s (rows of the events
table per second; all rows/s beside it), peak RSS.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import OUT, machine, run_child  # noqa: E402

CHILD = """
import time, json
from aftertrace.server.store import Store
from aftertrace.analysis.export import {fmt} as exporter
store = Store({db!r}, read_only=True)
if {limit!r}:
    store.cursor().execute("SET memory_limit = '{limit}'")
t0 = time.perf_counter()
with open({out!r}, "wb") as fh:
    stats = exporter.write(store, {iid!r}, fh)
seconds = time.perf_counter() - t0
RESULT = dict(tool={fmt!r}, seconds=seconds, bytes=stats["bytes"], rows=stats["rows"])
"""


def _columns(st, table: str) -> list[str]:
    return [r["column_name"] for r in st.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position", [table])]


def _copy(st, table: str, iid: str, span: int, copies: int, limit: int | None = None) -> None:
    """Append ``copies`` time-shifted copies of the incident's placed rows of ``table``."""
    if copies <= 0:
        return
    shifted = {"ts_utc_ns", "ts_raw_ns"}
    sel = ", ".join(f"{c} + k * {span}" if c in shifted else c for c in _columns(st, table))
    lim = f" LIMIT {limit}" if limit is not None else ""
    st.cursor().execute(f"""INSERT INTO main.{table} SELECT {sel} FROM main.{table}, range(1, {copies + 1}) AS r(k)
                           WHERE incident_id = ? AND ts_utc_ns IS NOT NULL{lim}""", [iid])


def build(home: Path, events: int, events_only: bool) -> tuple[Path, str, dict]:
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    svc = Service(Settings.from_env(home=home))
    sub = svc.submit_path(ROOT / "sample_traces" / "oom-after-throttle")
    svc.analyze(sub.incident_id)
    iid, st = sub.incident_id, svc.store
    base = st.query("SELECT count(*) AS n, min(ts_utc_ns) AS a, max(ts_utc_ns + COALESCE(dur_ns, 0)) AS b "
                    "FROM events WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", [iid])[0]
    span = base["b"] - base["a"] + 1_000_000_000
    t0 = time.perf_counter()
    if events > base["n"]:
        copies = -(-(events - base["n"]) // base["n"])
        # whole copies, and the last one cut so that the events number exactly --events
        _copy(st, "events", iid, span, copies, limit=events - base["n"])
        if not events_only:
            for t in ("metrics", "samples"):
                _copy(st, t, iid, span, copies)
    counts = {t: st.query(f"SELECT count(*) AS n FROM {t} WHERE incident_id = ?", [iid])[0]["n"]
              for t in ("events", "metrics", "samples", "steps", "collectives")}
    print(f"incident {iid}: {counts} built in {time.perf_counter() - t0:.1f} s", flush=True)
    st.cursor().execute("CHECKPOINT")
    st.close()
    return Path(svc.settings.db_path), iid, counts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--only", choices=("perfetto", "chrome"))
    ap.add_argument("--events-only", action="store_true", help="copy only the events, not metrics and samples")
    ap.add_argument("--keep", action="store_true", help="keep the store and the exports under bench/out/")
    ap.add_argument("--memory-limit", default="", help="DuckDB memory_limit in the exporting process, e.g. 1GB "
                    "(default: DuckDB's own, 80%% of RAM)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-export-", dir=OUT))
    try:
        db, iid, counts = build(work / "home", args.events, args.events_only)
        total_rows = sum(counts.values())
        rows = []
        for fmt in ("perfetto", "chrome"):
            if args.only and fmt != args.only:
                continue
            out = work / f"export.{'pftrace' if fmt == 'perfetto' else 'json'}"
            r = run_child(CHILD.format(fmt=fmt, db=str(db), out=str(out), iid=iid, limit=args.memory_limit))
            r["events"] = counts["events"]
            r["MB"] = r["bytes"] / 1e6
            r["MB/s"] = r["MB"] / r["seconds"]
            r["events/s"] = counts["events"] / r["seconds"]
            r["rows/s"] = total_rows / r["seconds"]
            print(json.dumps(r), flush=True)
            rows.append(r)
            if not args.keep:
                out.unlink(missing_ok=True)
        lim = f"; DuckDB memory_limit {args.memory_limit}" if args.memory_limit else ""
        print(f"\n{machine()}; incident rows: {counts}{lim}\n")
        print("| exporter | events | output MB | seconds | MB/s | events/s | rows/s (all tables) | peak RSS MiB |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['tool']} | {r['events']:,} | {r['MB']:.1f} | {r['seconds']:.1f} | {r['MB/s']:.1f} | "
                  f"{r['events/s']:,.0f} | {r['rows/s']:,.0f} | {r['peak_rss_mib']:.0f} |")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
