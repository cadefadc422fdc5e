"""The evaluation corpus: real incidents recorded on a real host, each with the truth the
recorder measured, split into a development half and a held-out half.

``sample_traces/corpus/index.json`` lists the cases: the bundle folder, its truth file, its
half, and the variants built from it (sources dropped the way real bundles lack them: no clock
anchors, only ``dmesg -T``, no perf, no cgroup snapshots). The held-out half was recorded
before the engine was changed for it and is never used to tune rules, priors or thresholds;
``bench/eval_chains.py`` reports the halves apart.

The recordings under ``sample_traces/`` that predate the corpus (``oom-after-throttle``,
``logs-*``, ...) take part as development cases through ``scenarios.py``.

Judging (:func:`judge`): the report's best chain must start at the true origin — a kind the
truth accepts, the right rank/pid or cgroup — and that finding's stated time window must
contain the true start of the fault (the truth's ``start_ns`` interval: the two intersect).
A decoy (an unrelated throttled cgroup, OOM kill or crash the recorder caused on purpose) as
the origin is a miss.
"""
from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from .scenarios import SCENARIOS, _ts, build as build_scenario

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "sample_traces" / "corpus" / "index.json"

# Sources dropped by each variant, as globs relative to the host folder.
VARIANTS = {
    "full": (),
    "no-anchors": ("host/start", "host/end", "host/anchors.txt", "host/btime"),
    "dmesg-T-only": ("host/start", "host/end", "host/anchors.txt", "host/btime", "dmesg.txt", "perf"),
    "no-perf": ("perf",),
    "no-cgroup": ("cgroup",),
    # no reading that pairs the boot clock with the wall clock at all: perf's `-k` reference time
    # goes too (VARIANT_EDITS), as with a perf too old to write one
    "bare": ("host/start", "host/end", "host/anchors.txt", "host/btime"),
    "logs-only": ("host/start", "host/end", "host/anchors.txt", "host/btime", "dmesg.txt", "dmesg_T.txt",
                  "perf", "cgroup", "profiler", "kernel"),
}

# Lines taken out of files by a variant: glob (relative to the host folder) -> line prefix.
VARIANT_EDITS = {"bare": (("perf/*.gz", b"# reference time"),)}


@dataclass(frozen=True)
class Case:
    id: str                     # "<case>/<variant>"
    half: str                   # "dev" | "heldout"
    bundle: Path
    truth: dict
    drop: tuple[str, ...] = ()
    scenario: object = None     # a scenarios.Scenario for the pre-corpus samples
    tags: tuple[str, ...] = field(default=())
    edits: tuple[tuple[str, bytes], ...] = ()


def cases(halves=("dev", "heldout")) -> list[Case]:
    out: list[Case] = []
    if "dev" in halves:
        for sc in SCENARIOS:
            out.append(Case(sc.name, "dev", ROOT / sc.bundle, _scenario_truth(sc), scenario=sc))
    if INDEX.exists():
        idx = json.loads(INDEX.read_text())
        for c in idx["cases"]:
            if c["half"] not in halves:
                continue
            truth = json.loads((ROOT / c["truth"]).read_text())
            for v in c.get("variants", ["full"]):
                out.append(Case(f"{c['id']}/{v}", c["half"], ROOT / c["bundle"], truth, VARIANTS[v],
                                tags=tuple(c.get("tags", ())), edits=VARIANT_EDITS.get(v, ())))
    return out


def _scenario_truth(sc) -> dict:
    start = None if sc.true_origin_utc is None else int(_ts(sc.true_origin_utc) * 1e9)
    return {"origin": {"kinds": list(sc.origin_kinds), "rank": sc.origin_rank, "host": sc.origin_host,
                       "start_ns": None if start is None else [start, start]},
            "failure": {"kinds": [sc.failure_kind]}, "what": sc.what}


def build(c: Case, dest: Path) -> Path:
    """The case's bundle as a folder under ``dest`` (a copy: variants drop files)."""
    if c.scenario is not None:
        return build_scenario(c.scenario, dest)
    out = dest / c.id.replace("/", "__")
    if c.bundle.is_dir():
        shutil.copytree(c.bundle, out)
    else:                       # a recorded bundle as its .tar.gz: <name>/<host>/...
        out.mkdir(parents=True)
        with tarfile.open(c.bundle) as tf:
            tf.extractall(out, filter="data")
        (top,) = [p for p in out.iterdir() if p.is_dir()]
        out = top
    for host in [p for p in out.iterdir() if p.is_dir()]:
        for g in c.drop:
            for p in host.glob(g):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        for g, prefix in c.edits:
            for p in host.glob(g):
                _drop_lines(p, prefix)
    return out


def _drop_lines(path: Path, prefix: bytes) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        lines = [ln for ln in f if not ln.startswith(prefix)]
    with opener(path, "wb") as f:
        f.writelines(lines)


def _window(link: dict) -> tuple[float, float] | None:
    if link.get("ts") is None:
        return None
    w = link.get("time_window") or [link["ts"], link["ts"]]
    return float(w[0]), float(w[1])


def judge(c: Case, rep: dict) -> dict:
    """What the report got right (see the module docstring)."""
    t = c.truth
    o_t = t["origin"]
    chains = rep.get("chains") or []
    best = chains[0] if chains else None
    o = best["links"][0] if best else None
    res = {"case": c.id, "half": c.half, "failure": (rep.get("failure") or {}).get("kind"),
           "origin": None if o is None else f"{o['kind']} rank {o['rank']} pid {o['pid']} {o.get('entity') or ''}".strip(),
           "kind_ok": False, "who_ok": False, "window_ok": None, "origin_err_s": None, "ok": False}
    f_kinds = (t.get("failure") or {}).get("kinds")
    res["failure_ok"] = rep.get("failure") is not None and (not f_kinds or res["failure"] in f_kinds)
    if o is None:
        return res
    res["kind_ok"] = o["kind"] in o_t["kinds"]
    who = True
    if o_t.get("rank") is not None:
        who = o["rank"] == o_t["rank"] or (o_t.get("pid") is not None and o["pid"] == o_t["pid"])
    elif o_t.get("entity"):
        who = (o.get("entity") or "") == o_t["entity"] or o["pid"] in (o_t.get("pids") or [])
    elif o_t.get("pid") is not None:
        who = o["pid"] == o_t["pid"] or o["pid"] in (o_t.get("pids") or [])
    if o_t.get("host") and o.get("host") and o["host"] != o_t["host"]:
        who = False
    res["who_ok"] = who
    start = o_t.get("start_ns")
    w = _window(o)
    if start and w:
        lo, hi = start[0] / 1e9, start[1] / 1e9
        res["window_ok"] = w[0] <= hi and lo <= w[1]
        res["origin_err_s"] = round(o["ts"] - lo, 3) if o["ts"] < lo else (round(o["ts"] - hi, 3) if o["ts"] > hi else 0.0)
    res["ok"] = bool(res["failure_ok"] and res["kind_ok"] and res["who_ok"] and res["window_ok"] is not False
                     and (res["window_ok"] or not start))
    return res


def causal_order_violations(rep: dict) -> list[str]:
    """Every edge of every chain, and every finding a chain says it explains: the cause's
    earliest time is not after the effect's latest (from the windows the report states)."""
    bad = []
    for n, ch in enumerate(rep.get("chains") or []):
        ls = ch["links"]
        for a, b in zip(ls, ls[1:]):
            wa, wb = _window(a), _window(b)
            if wa and wb and wa[0] > wb[1] + 1e-6:
                bad.append(f"chain {n}: {a['kind']} ({wa[0]:.3f}) after its effect {b['kind']} (until {wb[1]:.3f})")
        for x in ch.get("consequences") or []:
            wc, we = (x.get("cause") or {}).get("time_window"), _window(x)
            if wc and we and wc[0] > we[1] + 1e-6:
                bad.append(f"chain {n}: {x['cause']['kind']} ({wc[0]:.3f}) explains {x['kind']} "
                           f"that ended by {we[1]:.3f}")
    return bad
