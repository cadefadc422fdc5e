"""How aftertrace reads real files people paste: each file of the real-world corpus alone.

    .venv/bin/python bench/eval_files.py [--half dev|heldout|both] [--only SUBSTR] [--out FILE]
                                         [--json FILE]

The corpus is ``tests/data/realworld`` (``cases.json`` lists each case: its half, path, what kind
of file it is, its shape and the failure signatures a person points at in it, written down when
the file was collected, before aftertrace was run on it). Each case is analysed on its own, as
``aftertrace analyze <folder with just that file>`` does. A case is *recognised* when a parser of
its kind read it, *kept* when at least the plain-text reader did (status ``text``), and its
signatures are *found* when every kind the person pointed at is among the report's findings
(failure, origin, victims, anomalies, chain steps). What a person pointed at that aftertrace has
no finding kind for is listed ("no kind for"), not judged. The held-out half was collected and
committed before the parsers changed for it, and is never used to tune them.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import corpus_cli  # noqa: E402
from aftertrace.server.service import Service  # noqa: E402
from aftertrace.server.settings import Settings  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "realworld"
# what each collected kind of file is read as (a source kind of the report)
SOURCE_KIND = {"training_log": "app_log", "slurm_out": "app_log", "nccl_log": "nccl_log",
               "kernel_log": "dmesg", "container_log": None, "cgroup_file": "cgroup", "psi_file": "cgroup",
               "perf_script": "perf_script", "simpleperf_report": "perf_script", "other": None}


def cases(halves) -> list[dict]:
    out = []
    for c in json.loads((CORPUS / "cases.json").read_text()):
        if c["half"] in halves:
            out.append(c)
    return out


def finding_kinds(rep: dict) -> set[str]:
    kinds = set()
    for key in ("failure", "origin"):
        if rep.get(key):
            kinds.add(rep[key]["kind"])
    for key in ("victims", "anomalies"):
        kinds.update(f["kind"] for f in rep.get(key) or ())
    for ch in rep.get("chains") or ():
        for key in ("links", "consequences", "unexplained"):
            kinds.update(s["kind"] for s in ch.get(key) or ())
    return kinds


def judge(c: dict, rep: dict) -> dict:
    srcs = [s for s in rep["sources"] if not s["path"].endswith("/") or s["status"] != "unrecognized"]
    statuses = sorted({s["status"] for s in srcs})
    kinds = sorted({s["kind"] for s in srcs})
    want_kind = SOURCE_KIND.get(c["kind"])
    recognised = all(s["status"] in ("parsed", "partial") for s in srcs) and bool(srcs) and bool(
        want_kind is None or want_kind in kinds or (want_kind in ("app_log", "nccl_log")
                                                    and {"app_log", "nccl_log"} & set(kinds)))
    kept = bool(srcs) and all(s["status"] in ("parsed", "partial", "text") for s in srcs)
    said = {s["kind"] for s in c.get("signatures") or ()}
    want = sorted(k for k in said if not k.startswith("other:"))
    # what the person pointed at that aftertrace has no finding kind for (reported, not judged)
    unmodelled = sorted(k[len("other:"):] for k in said if k.startswith("other:"))
    found = finding_kinds(rep)
    missing = [k for k in want if k not in found]
    return {"case": c["id"], "half": c["half"], "kind": c["kind"], "shape": c.get("shape", ""),
            "status": "/".join(statuses), "source_kinds": "/".join(kinds),
            "formats": "/".join(sorted({s.get("format") or "-" for s in srcs})),
            "records": sum(s.get("records") or 0 for s in srcs), "recognised": recognised, "kept": kept,
            "want": want, "missing": missing, "unmodelled": unmodelled, "found": sorted(found),
            "ok": kept and not missing}


def run(halves, only: str | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        svc = Service(Settings.from_env(home=Path(d) / "home"))
        for c in cases(halves):
            if only and only not in c["id"]:
                continue
            src = CORPUS / c["half"] / c["path"]
            bundle = Path(d) / "bundles" / c["id"].replace("/", "_")
            bundle.mkdir(parents=True)
            if src.is_dir():
                shutil.copytree(src, bundle / src.name)
            else:
                shutil.copy(src, bundle / src.name)
            t0 = time.perf_counter()
            sub = svc.submit_path(bundle, title=c["id"])
            rep = svc.analyze(sub.incident_id)
            res = judge(c, rep)
            res["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(res)
            print(f"{'ok  ' if res['ok'] else 'MISS'} {c['half']:7s} {c['id']:50s} {res['status']:12s} "
                  f"{res['source_kinds']:10s} rec={res['records']} missing={res['missing']}", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | kind | shape | status | read as | records | recognised | signatures | missing | no kind for |",
             "|---|---|---|---|---|--:|:-:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['kind']} | {r['shape'][:60]} | {r['status']} | {r['formats']} | "
                     f"{r['records']} | {'yes' if r['recognised'] else ('text' if r['kept'] else 'NO')} | "
                     f"{', '.join(r['want']) or '-'} | {', '.join(r['missing']) or '-'} | "
                     f"{'; '.join(r['unmodelled']) or '-'} |")
    lines.append("")
    lines.append("| kind | files | recognised | kept as text | dropped | signatures wanted | found |")
    lines.append("|---|--:|--:|--:|--:|--:|--:|")
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["kind"], []).append(r)
    tot = [0] * 6
    for k in sorted(by):
        rs = by[k]
        v = [len(rs), sum(r["recognised"] for r in rs), sum(r["kept"] and not r["recognised"] for r in rs),
             sum(not r["kept"] for r in rs), sum(len(r["want"]) for r in rs),
             sum(len(r["want"]) - len(r["missing"]) for r in rs)]
        tot = [a + b for a, b in zip(tot, v)]
        lines.append(f"| {k} | " + " | ".join(map(str, v)) + " |")
    lines.append("| **all** | " + " | ".join(f"**{x}**" for x in tot) + " |")
    return "\n".join(lines)


def main() -> int:
    return corpus_cli(__doc__, "Real-world files evaluation",
                      ".venv/bin/python bench/eval_files.py --out bench/results/files.md", run, table,
                      lambda rows: all(r["ok"] for r in rows))


if __name__ == "__main__":
    sys.exit(main())
