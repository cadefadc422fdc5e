"""Timeline window latency on an incident scaled up from the real sample.

    .venv/bin/python bench/bench_timeline.py [--events 10000000]

Analyses ``sample_traces/oom-after-throttle`` into a fresh store, then copies its placed events
(and metrics) with the times shifted by whole copies of the incident's span until the incident
holds ``--events`` events — the same lanes, names and densities, a longer incident. Then it
times ``Service.timeline`` (the query behind ``GET /api/incidents/{id}/timeline``) for windows
of several widths as the trace viewer asks for them (the default tracks at 2,200 px, no catalog),
each run 5 times in this process after one warm-up, and prints the median and worst latency with
the tracks/spans/buckets shipped; then the first request of a page (with the track catalog and
the overview).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aftertrace.server.service import Service  # noqa: E402
from aftertrace.server.settings import Settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        svc = Service(Settings.from_env(home=Path(d)))
        sub = svc.submit_path(ROOT / "sample_traces" / "oom-after-throttle")
        svc.analyze(sub.incident_id)
        iid = sub.incident_id
        st = svc.store
        base = st.query("SELECT count(*) AS n, min(ts_utc_ns) AS a, max(ts_utc_ns) AS b FROM events "
                        "WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", [iid])[0]
        span = base["b"] - base["a"] + 1_000_000_000
        copies = max(0, -(-args.events // base["n"]) - 1)
        t0 = time.perf_counter()
        from bench_export import _copy    # the placed rows, time-shifted copies
        for table in ("events", "metrics"):
            _copy(st, table, iid, span, copies)
        from aftertrace.analysis.timeline import build_tracks
        t1 = time.perf_counter()
        nb = build_tracks(st, iid)
        print(f"tracks rebuilt for the scaled incident: {nb:,} tracks in {time.perf_counter() - t1:.1f} s")
        total = st.query("SELECT count(*) AS n, min(ts_utc_ns) AS a, max(ts_utc_ns) AS b FROM events "
                         "WHERE incident_id = ?", [iid])[0]
        print(f"scaled: {total['n']:,} events over {(total['b'] - total['a']) / 3.6e12:.1f} h "
              f"({copies} copies of the sample's {base['n']:,}) in {time.perf_counter() - t0:.1f} s")
        a = total["a"]
        rows = []
        for label, width_s in (("whole incident", (total["b"] - a) / 1e9), ("1 hour", 3600), ("10 minutes", 600),
                               ("1 minute", 60), ("10 seconds", 10)):
            mid = a + (total["b"] - a) // 2
            s_ns, e_ns = (a, total["b"]) if label == "whole incident" else (mid, mid + int(width_s * 1e9))
            s, e = str(s_ns / 1e9), str(e_ns / 1e9)
            ask = lambda: svc.timeline(iid, s, e, None, None, 2200, 2000, False)
            ask()
            times, out = [], None
            for _ in range(5):
                t = time.perf_counter()
                out = ask()
                times.append((time.perf_counter() - t) * 1000)
            spans = sum(len(d["spans"]) for d in out["data"].values())
            bins = sum(len(d["bins"]) for d in out["data"].values())
            n_in = sum(d["small"] for d in out["data"].values()) + spans
            rows.append((label, n_in, len(out["data"]), spans, bins, statistics.median(times), max(times)))
        t = time.perf_counter()
        first = svc.timeline(iid)
        first_ms = (time.perf_counter() - t) * 1000
        print(f"first request of a page (catalog of {len(first['tracks'])} tracks, overview, default window): "
              f"{first_ms:.0f} ms")
        print("| window | events in window (approx.) | tracks answered | spans shipped | buckets shipped | median ms | worst ms |")
        print("|---|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            print(f"| {r[0]} | {r[1]:,} | {r[2]} | {r[3]:,} | {r[4]:,} | {r[5]:.0f} | {r[6]:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
