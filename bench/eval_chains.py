"""Top-1 origin accuracy over the evaluation corpus, the development and held-out halves apart.

    .venv/bin/python bench/eval_chains.py [--half dev|heldout|both] [--only SUBSTR] [--out FILE]
                                          [--json FILE]

For every case (a real recorded incident, or a variant of it with sources dropped; see
``tests/analysis/corpus.py``): build its bundle, run the whole analysis as ``aftertrace analyze``
does, and judge the best chain against the recorder's truth. "top-1" = the origin is a kind the
truth accepts, on the right rank/pid or cgroup, and its stated time window contains the true
start of the fault. "error s" = how far the origin's point time is from the true start interval
(0: inside it). The held-out half was recorded before the engine changed for it and is never
used to tune rules, priors or thresholds.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import corpus_cli  # noqa: E402
from aftertrace.server.service import Service  # noqa: E402
from aftertrace.server.settings import Settings  # noqa: E402
from tests.analysis.corpus import build, cases, judge  # noqa: E402


def run(halves, only: str | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        svc = Service(Settings.from_env(home=Path(d) / "home"))
        for c in cases(halves):
            if only and only not in c.id:
                continue
            t0 = time.perf_counter()
            sub = svc.submit_path(build(c, Path(d)), title=c.id)
            rep = svc.analyze(sub.incident_id)
            res = judge(c, rep)
            res["seconds"] = round(time.perf_counter() - t0, 2)
            res["expected"] = f"{'/'.join(c.truth['origin']['kinds'])} rank {c.truth['origin'].get('rank')}"
            res["summary"] = rep.get("summary")
            rows.append(res)
            print(f"{'ok  ' if res['ok'] else 'MISS'} {c.half:7s} {c.id:45s} {res['origin']}", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | expected origin | best chain's origin | top-1 | window | error s | analysis s |",
             "|---|---|---|:-:|:-:|--:|--:|"]
    for r in rows:
        win = "-" if r["window_ok"] is None else ("yes" if r["window_ok"] else "no")
        err = "-" if r["origin_err_s"] is None else f"{r['origin_err_s']:+.3f}"
        lines.append(f"| {r['case']} | {r['expected']} | {r['origin']} | {'yes' if r['ok'] else 'NO'} | {win} | "
                     f"{err} | {r['seconds']:.1f} |")
    ok = sum(r["ok"] for r in rows)
    lines.append("")
    lines.append(f"top-1: {ok}/{len(rows)} ({100 * ok / max(1, len(rows)):.0f} %)")
    return "\n".join(lines)


def main() -> int:
    return corpus_cli(__doc__, "Diagnosis evaluation",
                      ".venv/bin/python bench/eval_chains.py --out bench/results/chains.md", run, table,
                      lambda rows: all(r["ok"] for r in rows))


if __name__ == "__main__":
    sys.exit(main())
