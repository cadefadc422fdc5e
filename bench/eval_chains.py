"""Top-1 chain accuracy and origin-time error over the scenario suite (tests/analysis/scenarios.py).

    .venv/bin/python bench/eval_chains.py [--out bench/results/chains.md]

For every scenario: build its bundle (real recordings, variants with sources dropped or real
decoy files added), run the whole analysis, and compare the best chain with what really
happened. "top-1" = the best chain starts at the true origin (kind, rank, host), passes through
the expected links and ends at the failure; "origin error" = the origin finding's time minus
the true start of the fault (recorder's clock / the job's own fault-injection line); "in window"
= the truth lies inside the time window the report states for that finding.
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

from server.service import Service  # noqa: E402
from server.settings import Settings  # noqa: E402
from tests.analysis.scenarios import SCENARIOS, build, judge  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also write the Markdown table here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        svc = Service(Settings.from_env(home=Path(d) / "home"))
        for sc in SCENARIOS:
            t0 = time.perf_counter()
            sub = svc.submit_path(build(sc, Path(d)), title=sc.name)
            rep = svc.analyze(sub.incident_id)
            res = judge(sc, rep)
            res["ok"] = (res["failure_ok"] and res["top1"] and res["ends_at_failure"] and res["includes_ok"]
                         and res["hosts_ok"])
            res["seconds"] = time.perf_counter() - t0
            rows.append(res)
    lines = ["| scenario | failure | best chain's origin | top-1 | origin error s | truth in window | lead s | analysis s |",
             "|---|---|---|:-:|--:|:-:|--:|--:|"]
    for r in rows:
        err = "-" if r["origin_err_s"] is None else f"{r['origin_err_s']:+.3f}"
        win = "-" if r["origin_window_s"] is None else ("yes" if r["origin_window_s"] == 0 else f"no ({r['origin_window_s']} s)")
        lead = "-" if r["lead_s"] is None else f"{r['lead_s']:.1f}"
        lines.append(f"| {r['scenario']} | {r['failure']} | {r['origin']} | {'yes' if r['ok'] else 'NO'} | {err} | "
                     f"{win} | {lead} | {r['seconds']:.1f} |")
    ok = sum(r["ok"] for r in rows)
    errs = [abs(r["origin_err_s"]) for r in rows if r["origin_err_s"] is not None]
    inwin = sum(1 for r in rows if r["origin_window_s"] == 0)
    timed = sum(1 for r in rows if r["origin_window_s"] is not None)
    summary = (f"top-1 chain accuracy {ok}/{len(rows)} ({100 * ok / len(rows):.0f} %); origin-time error over the "
               f"{len(errs)} scenarios with a recorded truth: median {statistics.median(errs):.3f} s, max "
               f"{max(errs):.3f} s; truth inside the stated window in {inwin}/{timed}")
    text = "\n".join(lines) + "\n\n" + summary + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(
            "# Causal-chain evaluation\n\nCommand (from the repository root):\n\n    .venv/bin/python "
            "bench/eval_chains.py --out bench/results/chains.md\n\n" + (__doc__.split("\n", 3)[3]).strip()
            + "\n\n" + text)
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
