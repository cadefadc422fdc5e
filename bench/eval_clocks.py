"""Clock placement of kernel events against the recorder's truth, the corpus halves apart.

    .venv/bin/python bench/eval_clocks.py [--half dev|heldout|both] [--only SUBSTR] [--out FILE]

The truth of a kernel record's time: the recorder writes lines to ``/dev/kmsg`` (``clock
probe ...``, no time in them) between two readings of ``CLOCK_REALTIME`` and ``CLOCK_MONOTONIC``
and keeps those readings in the truth file only. Each probe's printk stamp in the bundle's raw
``dmesg.txt`` against its wall readings gives printk's offset to UTC within 0.3 ms; a straight
line through the probes gives every other record's true time. Cases recorded before the probes
have only the recorder's two clock readings (before and after the job): their records' truth
takes printk's clock for ``CLOCK_MONOTONIC``, which the probes show is 38 ms off on this VM
(printk runs 1.7 ppm fast) -- those rows say ``truth: monotonic`` and are marked as weaker.
``dmesg_T.txt`` holds the same records in the same order, so its line *n* has the truth of
``dmesg.txt``'s line *n* (checked by their text).

For every variant (``full``, ``no-anchors``, ``bare``, ``dmesg-T-only``, ``no-perf``; see
``tests/analysis/corpus.py``) the whole analysis runs as ``aftertrace analyze`` does; then,
for every kernel record placed on UTC: its error against the truth and whether the truth lies
inside the window the report states for it (the clock mapping's uncertainty; an unknown
uncertainty counts as a zero-width window). A record left unplaced is counted as such (the exit
status asks that every placed record's truth lie in its window; the table shows how many were
placed). Records the report places inside a step's window of the wall clock (either side may
hold them) are counted apart, with the largest error of the others.
"""
from __future__ import annotations

import re
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import corpus_cli  # noqa: E402
from aftertrace.server.service import Service  # noqa: E402
from aftertrace.server.settings import Settings  # noqa: E402
from aftertrace.analysis.clocks import row_uncertainty_sql  # noqa: E402
from tests.analysis.corpus import build, cases  # noqa: E402

RAW = re.compile(rb"^\[\s*(\d+)\.(\d{6})\]\s?(.*)$")
T_LINE = re.compile(rb"^\[[^\]]*\]\s?(.*)$")
VARIANTS = ("full", "no-anchors", "bare", "dmesg-T-only", "no-perf")


def true_offset(clocks: dict, mono_ns: int) -> float:
    """realtime - monotonic at ``mono_ns``, linear between the recorder's two readings."""
    s, e = clocks["start"], clocks["end"]
    o0 = s["realtime_ns"] - s["monotonic_ns"]
    o1 = e["realtime_ns"] - e["monotonic_ns"]
    span = e["monotonic_ns"] - s["monotonic_ns"]
    f = 0.0 if span <= 0 else (mono_ns - s["monotonic_ns"]) / span
    return o0 + (o1 - o0) * min(1.0, max(0.0, f))


def _stamp(probe: dict, raw: list[bytes]) -> int | None:
    """The printk stamp (ns) of a clock probe's line: of the lines with its text, the one nearest
    the monotonic clock read around it (a kernel log read from /dev/kmsg by a collector also holds
    the probes of earlier recordings on the same boot). None: not in the log (not within 1 s)."""
    want = probe["text"].encode()
    best = None
    for line in raw:
        m = RAW.match(line)
        if m and m.group(3) == want:
            p = int(m.group(1)) * 1_000_000_000 + int(m.group(2)) * 1000
            if best is None or abs(p - probe["monotonic_ns"][0]) < abs(best - probe["monotonic_ns"][0]):
                best = p
    # printk and CLOCK_MONOTONIC part by tens of ms on this VM: a line further off is another probe's
    return best if best is not None and abs(best - probe["monotonic_ns"][0]) < 1_000_000_000 else None


def probe_fit(probes: list[dict], raw: list[bytes]):
    """printk stamp -> UTC from the recorder's clock probes: (a, b) of utc = p + a + b * p."""
    pts = []
    for pr in probes:
        p = _stamp(pr, raw)
        if p is not None:
            pts.append((p, (pr["realtime_ns"][0] + pr["realtime_ns"][1]) / 2 - p))
    if not pts:
        return None
    if len(pts) == 1 or max(p for p, _ in pts) - min(p for p, _ in pts) < 1e9:
        return sum(o for _, o in pts) / len(pts), 0.0
    n = len(pts)
    mp = sum(p for p, _ in pts) / n
    mo = sum(o for _, o in pts) / n
    b = sum((p - mp) * (o - mo) for p, o in pts) / sum((p - mp) ** 2 for p, _ in pts)
    return mo - b * mp, b


def truth_lines(bundle: Path, truth: dict) -> tuple[str, dict[str, dict[int, tuple[int, bytes]]]]:
    """How the truth was found, and {'dmesg.txt' | 'dmesg_T.txt': {line: (true utc ns, text)}}."""
    raw: list[bytes] = []
    tee: list[bytes] = []
    with tarfile.open(bundle) as tf:
        for m in tf.getmembers():
            if m.name.endswith("/dmesg.txt"):
                raw = tf.extractfile(m).read().splitlines()
            elif m.name.endswith("/dmesg_T.txt"):
                tee = tf.extractfile(m).read().splitlines()
    probes = truth.get("kmsg_probes") or []
    # The recorder stepped the wall clock (``--wall-step``): each side of a step has its own fit;
    # a record belongs to the side its printk stamp is on, against the probes written around it.
    cuts = [s["monotonic_ns"][0] for s in truth.get("wall_steps") or []]
    sides = [[pr for pr in probes if sum(pr["monotonic_ns"][0] >= c for c in cuts) == k]
             for k in range(len(cuts) + 1)]
    fits = [probe_fit(side, raw) for side in sides]
    fit = fits[0] if len(fits) == 1 else (fits if all(fits) else None)
    bounds = [min(_stamp(pr, raw) or 1 << 62 for pr in side) for side in sides[1:]] if len(fits) > 1 and fit else []
    how = "probes" if fit else "monotonic"
    # records before the recording's first probe (earlier recordings on the same boot, in a log read
    # from /dev/kmsg) have no truth here: the wall clock may have been stepped in between
    first = min((p for p in (_stamp(pr, raw) for pr in probes) if p is not None), default=None)
    out: dict[str, dict[int, tuple[int, bytes]]] = {"dmesg.txt": {}, "dmesg_T.txt": {}}
    for i, line in enumerate(raw, 1):
        m = RAW.match(line)
        if not m:
            continue
        p = int(m.group(1)) * 1_000_000_000 + int(m.group(2)) * 1000
        if first is not None and p < first:
            continue
        if bounds:
            a, b = fit[sum(p >= c for c in bounds)]
            off = a + b * p
        else:
            off = fit[0] + fit[1] * p if fit else true_offset(truth["clocks"], p)
        out["dmesg.txt"][i] = (int(p + off), m.group(3))
    for i, line in enumerate(tee, 1):
        m = T_LINE.match(line)
        t = out["dmesg.txt"].get(i)
        if m and t and m.group(1) == t[1]:
            out["dmesg_T.txt"][i] = t
    return how, out


def measure(svc, incident_id: str, truth: dict[str, dict[int, tuple[int, bytes]]]) -> list[dict]:
    rows = svc.store.query(
        f"""SELECT s.path, e.line, e.ts_utc_ns, {row_uncertainty_sql()} AS uncertainty_ns, c.method,
                  EXISTS (SELECT 1 FROM clock_segments g WHERE g.incident_id = c.incident_id AND g.host = c.host
                          AND g.domain = c.domain AND (g.what LIKE '%window%' OR g.what LIKE '%a gap of%')
                          AND (g.from_ns IS NULL OR e.ts_raw_ns >= g.from_ns)
                          AND (g.to_ns IS NULL OR e.ts_raw_ns < g.to_ns)) AS in_window
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                                AND c.domain = s.clock_domain
           WHERE e.incident_id = ? AND (s.path LIKE '%/dmesg.txt' OR s.path LIKE '%/dmesg_T.txt')
             AND s.kind = 'dmesg'""",
        [incident_id])
    out = []
    for name in ("dmesg.txt", "dmesg_T.txt"):
        errs, unc, inside, unplaced, methods, side = [], [], 0, 0, set(), []
        for r in rows:
            if r["path"].rsplit("/", 1)[-1] != name:
                continue
            t = truth[name].get(r["line"])
            if t is None:
                continue
            if r["ts_utc_ns"] is None:
                unplaced += 1
                continue
            err = r["ts_utc_ns"] - t[0]
            errs.append(err)
            if not r["in_window"]:
                side.append(abs(err))
            unc.append(r["uncertainty_ns"])
            methods.add(r["method"])
            if abs(err) <= (r["uncertainty_ns"] or 0):
                inside += 1
        if not errs and not unplaced:
            continue
        known = [u for u in unc if u is not None]
        out.append({"file": name, "records": len(errs) + unplaced, "placed": len(errs), "unplaced": unplaced,
                    "inside": inside, "max_err_ms": max((abs(e) for e in errs), default=None),
                    "median_err_ms": sorted(abs(e) for e in errs)[len(errs) // 2] if errs else None,
                    "in_window": len(errs) - len(side), "max_side_err_ms": max(side, default=None),
                    "stated_ms": (max(known) if len(known) == len(unc) else None) if unc else None,
                    "methods": sorted(methods)})
    return out


def run(halves, only: str | None) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        svc = Service(Settings.from_env(home=Path(d) / "home"))
        for c in cases(halves):
            if c.scenario is not None or c.id.rsplit("/", 1)[-1] not in VARIANTS:
                continue
            if not (c.truth.get("clocks") or c.truth.get("kmsg_probes")) or (only and only not in c.id):
                continue
            how, truth = truth_lines(c.bundle, c.truth)
            sub = svc.submit_path(build(c, Path(d)), title=c.id)
            svc.analyze(sub.incident_id)
            for m in measure(svc, sub.incident_id, truth):
                m.update(case=c.id, half=c.half, truth=how)
                out.append(m)
                print(f"{c.id:45s} {m['file']:12s} placed {m['placed']}/{m['records']} inside {m['inside']} "
                      f"max {ms(m['max_err_ms'])} ms stated {ms(m['stated_ms'])} ms; {m['in_window']} in a step's window, "
                      f"max {ms(m['max_side_err_ms'])} ms outside", file=sys.stderr)
    return out


def ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def table(rows: list[dict]) -> str:
    lines = ["| case | truth | file | kernel records | placed | truth inside the stated window | max error ms | "
             "median error ms | stated ± ms | in a step's window | max error ms outside it | method |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['truth']} | {r['file']} | {r['records']} | {r['placed']} | {r['inside']}/{r['placed']} | "
                     f"{ms(r['max_err_ms'])} | {ms(r['median_err_ms'])} | {ms(r['stated_ms'])} | "
                     f"{r['in_window']} | {ms(r['max_side_err_ms'])} | "
                     f"{'; '.join(r['methods']) or '-'} |")
    lines.append("")
    for how, v, f in [(h, v, f) for h in ("probes", "monotonic") for v in VARIANTS
                      for f in ("dmesg.txt", "dmesg_T.txt")]:
        vr = [r for r in rows if r["case"].endswith("/" + v) and r["file"] == f and r["truth"] == how]
        if not vr:
            continue
        n = sum(r["records"] for r in vr)
        p = sum(r["placed"] for r in vr)
        i = sum(r["inside"] for r in vr)
        mx = max((r["max_err_ms"] for r in vr if r["max_err_ms"] is not None), default=None)
        w = sum(r["in_window"] for r in vr)
        ms_side = max((r["max_side_err_ms"] for r in vr if r["max_side_err_ms"] is not None), default=None)
        lines.append(f"- truth from {how}, `{v}`, `{f}`: {p}/{n} kernel records placed, truth inside the stated window for {i}/{p}, "
                     f"largest error {ms(mx)} ms" + (f" ({w} placed inside a step's window of the wall clock, where "
                                                     f"either side may hold them; outside those windows "
                                                     f"{ms(ms_side)} ms)" if w else ""))
    return "\n".join(lines)


def main() -> int:
    return corpus_cli(__doc__, "Clock evaluation",
                      ".venv/bin/python bench/eval_clocks.py --out bench/results/clocks.md", run, table,
                      lambda rows: all(r["inside"] == r["placed"] for r in rows))


if __name__ == "__main__":
    sys.exit(main())
