"""The step detectors' column code gives what the plain rule gives.

``straggler`` and ``step_slowdown`` read the step lines as Arrow columns and compute medians,
baselines and episodes over them; each reference below is the rule written plainly over the rows
of the SQL ``STEP_LINES`` (Python lists, ``statistics.median``, ``_series.episodes``). Compared on
hypothesis-generated step logs: ties of time (whole-second stamps), the same lines in a second
file, lines without a step time, NaN and zero times, one to four ranks; and the pieces alone on
floats with NaN, -0.0 and infinities.
"""
from __future__ import annotations

import json
import math
import statistics

import pyarrow as pa
from hypothesis import example, given, settings, strategies as st

from aftertrace.analysis.detectors import step_slowdown, straggler
from aftertrace.analysis.detectors._series import (STEP_LINES, episodes, hms, median, quiet_baseline, quiet_baseline_of, spans,
                                        step_lines)
from aftertrace.analysis.links import Evidence, Link, LinkKind, Provenance

T = 1_800_000_000_000_000_000


def same_float(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if a != a or b != b:
        return a != a and b != b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# -- medians, baselines, episodes ------------------------------------------------------------------
floats = st.lists(st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.2, 0.5, 1.3, 7.0, -1.0, float("nan"), float("inf"),
                                   float("-inf")]), min_size=1, max_size=30)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(floats)
def test_median_and_baseline(values):
    col = pa.array(values, pa.float64())
    assert same_float(median(col), statistics.median(values))
    got, want = quiet_baseline_of(col), quiet_baseline(values)
    assert same_float(got[0], want[0]) and same_float(got[1], want[1]), (got, want)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, float("nan")]), max_size=40), st.integers(0, 3),
       st.integers(1, 4))
def test_spans_are_episodes(values, gap, min_points):
    at, starts, ends = spans(pa.array([v > 1.0 for v in values], pa.bool_()), gap=gap)
    at, starts, ends = at.to_pylist(), starts.to_pylist(), ends.to_pylist()
    got = [(at[a], at[b]) for a, b in zip(starts, ends) if b - a + 1 >= min_points or at[b] == len(values) - 1]
    assert got == episodes(values, 1.0, gap=gap, min_points=min_points)


# -- step logs -------------------------------------------------------------------------------------
@st.composite
def step_logs(draw):
    """Per rank its step times (None: the line has no step time), and how the lines are written."""
    ranks = {}
    for r in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 30))
        base = draw(st.sampled_from([0.1, 0.5]))
        a, k = draw(st.integers(0, 30)), draw(st.integers(0, 14))
        slow = draw(st.sampled_from([1.0, 1.3, 1.31, 2.0, 2.5, 10.0]))
        hole, h = draw(st.integers(0, 8)), draw(st.sampled_from([0, 0, 1, 2, 3]))     # normal steps amid the slow
        dts = [base * (slow if a <= i < a + k and not a + hole <= i < a + hole + h else 1.0) for i in range(n)]
        for i in draw(st.lists(st.integers(0, 29), max_size=3)):
            if i < n:
                dts[i] = draw(st.sampled_from([None, float("nan"), 0.0, -0.0, 0.65, base * 3]))
        ranks[r] = dts
    return {"ranks": ranks,
            "second": draw(st.sampled_from([None, None, 10**9])),          # whole seconds: lines share times
            "tee": draw(st.booleans()),                                    # every line also in a second file
            "null_time": draw(st.booleans()),                              # no step time: a null row, not none
            "host": draw(st.sampled_from([None, "node-2"])),               # the rows' own host
            "events": draw(st.integers(0, 9)) == 0}                        # an older store: step events


_STORE: dict = {}


def _store(tmp_path_factory, log):
    """The log written as the app-log parser writes it (or as step events), into one store reused
    by every example."""
    from aftertrace.server.store import Store
    if "s" not in _STORE:
        _STORE["s"] = Store(tmp_path_factory.mktemp("steps") / "s.duckdb")
    store = _STORE["s"]
    for table in ("metrics", "events", "sources"):
        store.cursor().execute(f"DELETE FROM {table}")
    paths = ["logs/rank.log", "logs/launcher.log"]
    store.insert_rows("sources", [{"incident_id": "i", "source_id": i + 1, "path": p, "kind": "app_log", "host": "node-1",
                                   "status": "parsed", "clock_domain": "wall"} for i, p in enumerate(paths)])
    metrics, events = [], []
    for r, dts in log["ranks"].items():
        t = T + r * 1_000_000
        for n, dt in enumerate(dts):
            t += int((dt if dt and dt == dt and dt > 0 else 0.5) * 1e9)
            ts = t - t % log["second"] if log["second"] else t
            for copy in range(2 if log["tee"] else 1):
                line = 1 + copy * 100_000 + n * 10 + r
                if log["events"]:
                    events.append({"incident_id": "i", "source_id": 1 + copy, "host": None, "rank": r, "pid": 10 + r,
                                   "ts_raw_ns": ts, "ts_utc_ns": ts, "name": "step", "line": line,
                                   "text": f"step {n}", "attrs": json.dumps({"step": n, "step_time_s": dt})})
                    continue
                row = {"incident_id": "i", "source_id": 1 + copy, "host": log["host"], "entity": f"rank {r}",
                       "ts_raw_ns": ts, "ts_utc_ns": ts, "unit": "s", "line": line}
                metrics.append({**row, "metric": "step", "value": float(n)})
                if dt is not None or log["null_time"]:
                    metrics.append({**row, "metric": "step_time", "value": dt})
    store.insert_rows("metrics", metrics)
    store.insert_rows("events", events)
    return store


def _order(v):
    """SQL's ascending order, nulls last."""
    return (v is None, v if v is not None else 0)


def _lines(store, where: str) -> list[dict]:
    return store.query(f"""WITH lines AS ({STEP_LINES})
        SELECT rank, host, path, ts, line, step_value, CAST(trunc(step_value) AS BIGINT) AS step, dt FROM lines
        WHERE rank IS NOT NULL AND step_value IS NOT NULL {where}""", ["i"])


def ref_straggler(store) -> list[Link]:
    """The rule over rows: each (rank, step) once (the first by time, path, line), the peers'
    median with ``statistics.median``, runs at or above RATIO joined over one step below."""
    rows = sorted(_lines(store, "AND dt IS NOT NULL"), key=lambda r: (
        r["rank"], r["step"], r["ts"], r["path"], _order(r["line"]), _order(r["host"])))
    first: dict[tuple, dict] = {}
    for r in rows:
        first.setdefault((r["rank"], r["step"]), r)
    by_rank: dict[int, list[dict]] = {}
    at_step: dict[int, list[tuple[int, float]]] = {}
    for (rank, step), r in sorted(first.items()):
        by_rank.setdefault(rank, []).append(r)
        at_step.setdefault(step, []).append((rank, r["dt"]))
    if len(by_rank) < 2:
        return []
    found = []
    for rank, rs in sorted(by_rank.items()):
        meds = [statistics.median(p) if (p := [dt for q, dt in at_step[r["step"]] if q != rank]) else None for r in rs]
        at = [i for i, m in enumerate(meds) if m is not None and m > 0]
        vals = [rs[i]["dt"] / meds[i] for i in at]
        runs = [[i for i in range(x, y + 1) if vals[i] >= straggler.RATIO]
                for x, y in episodes(vals, straggler.RATIO - 1e-12, gap=1, min_points=1)]
        best = max(runs, key=len, default=[])
        if len(best) < straggler.MIN_STEPS:
            continue
        f = rs[at[best[0]]]
        slow = statistics.median(vals[i] for i in best)
        start = f["ts"] - int(f["dt"] * 1e9)
        text = (f"rank {rank} straggled: its steps took {slow:.1f}x the median of its peers' same steps "
                f"for {len(best)} steps from step {f['step']} (began ~{hms(start)})")
        ev = tuple(Evidence(rs[at[i]]["path"], rs[at[i]]["line"],
                            f"step={rs[at[i]]['step']} step_time={rs[at[i]]['dt']:.3f}s "
                            f"({vals[i]:.1f}x the peers' median)") for i in best[:2])
        found.append(Link(kind=LinkKind.STRAGGLER, ts_ns=start, summary=text, source=f["path"], host=f["host"],
                          rank=rank, evidence=ev, provenance=Provenance.INFERRED, confidence=0.8,
                          attrs=(("ratio", slow), ("steps", len(best)), ("until_ns", rs[at[best[-1]]]["ts"]))))
    return found


def ref_step_slowdown(store) -> list[Link]:
    """The rule over rows: per (host, rank) its steps by time, a line seen twice once; the quiet
    baseline and the first episode with ``statistics.median`` and ``_series.episodes``."""
    rows, said = _lines(store, ""), True
    for r in rows:
        r["text"] = r["pid"] = None
    if not rows:
        said = False
        rows = store.query("""SELECT COALESCE(e.host, s.host) AS host, e.rank, e.pid, e.ts_utc_ns AS ts, e.line, e.text,
                                     s.path, TRY_CAST(json_extract_string(e.attrs, '$.step') AS BIGINT) AS step,
                                     TRY_CAST(json_extract_string(e.attrs, '$.step_time_s') AS DOUBLE) AS dt
                              FROM events e JOIN sources s USING (incident_id, source_id)
                              WHERE e.incident_id = 'i' AND e.name = 'step'""")
    rows.sort(key=lambda r: (_order(r["host"]), r["rank"], r["ts"], r["path"], _order(r["line"])))
    series: dict[tuple, list[dict]] = {}
    seen = set()
    for r in rows:
        if (r["host"], r["rank"], r["step"], r["ts"]) not in seen:
            seen.add((r["host"], r["rank"], r["step"], r["ts"]))
            series.setdefault((r["host"], r["rank"]), []).append(r)
    found = []
    S = step_slowdown
    for (host, rank), rs in series.items():
        if len(rs) < S.MIN_STEPS:
            continue
        if sum(r["dt"] is not None for r in rs) >= 0.8 * len(rs):
            rs = [r for r in rs if r["dt"] is not None]
            vals = [float(r["dt"]) for r in rs]
        else:
            vals = [(q["ts"] - p["ts"]) / 1e9 for p, q in zip(rs, rs[1:])]
            rs = rs[1:]
        if len(vals) < S.MIN_STEPS:
            continue
        med, sigma = quiet_baseline(vals)
        thr = max(S.RATIO * med, med + S.K * sigma, med + S.ABS_MIN_S)
        eps = episodes(vals, thr, gap=2, min_points=S.MIN_POINTS)
        if not eps:
            continue
        a, b = eps[0]
        slow = statistics.median(vals[a:b + 1])
        first, before = rs[a], (rs[a - 1] if a > 0 else None)
        start = first["ts"] - int(vals[a] * 1e9)
        text = S.summary(rank, slow, med, first["step"], start, b - a + 1, b == len(vals) - 1)    # (the wording)
        window = ()
        if before is not None:
            window = (("ts_lo_ns", before["ts"] - int(vals[a - 1] * 1e9)), ("ts_hi_ns", first["ts"]),
                      ("ts_bound", "between"))

        def said_text(r):
            if not said:
                return r["text"] or ""
            return (f"step={r['step']}" + (f" step_time={r['dt']:.3f}s" if r["dt"] is not None else "")
                    + " (the values read from this line)")
        ev = tuple(Evidence(r["path"], r["line"], said_text(r)) for r in (before, first) if r is not None)
        found.append(Link(kind=LinkKind.STEP_SLOWDOWN, ts_ns=start, summary=text, source=first["path"], host=host,
                          rank=rank, pid=first["pid"], evidence=ev, provenance=Provenance.INFERRED,
                          confidence=0.9 if slow > 3 * thr / S.RATIO else 0.75,
                          attrs=(("baseline_s", med), ("slow_s", slow), ("first_slow_step", first["step"]),
                                 ("until_ns", rs[b]["ts"])) + window))
    return found


def _outcome(f):
    try:
        return repr(f())            # repr: NaN and -0.0 compare as written
    except Exception as e:          # a step number SQL cannot cast, a time out of range: the same error
        return type(e).__name__


@settings(max_examples=150, deadline=None, derandomize=True)
@given(step_logs())
def test_step_lines_are_the_sql_rows(tmp_path_factory, log):
    store = _store(tmp_path_factory, log)
    got = step_lines(store, "i")
    cols = {k: got.cols.column(k).to_pylist() for k in got.cols.column_names}
    rows = [(rank, got.hosts[h], got.paths[p], ts, line, sv, dt) for rank, h, p, ts, line, sv, dt in
            zip(*(cols[k] for k in ("rank", "host", "path", "ts", "line", "step_value", "dt")))]
    want = [tuple(r[k] for k in ("rank", "host", "path", "ts", "line", "step_value", "dt")) for r in
            sorted(_lines(store, ""), key=lambda r: (_order(r["host"]), r["rank"], r["ts"], r["path"]))]
    assert repr(rows) == repr(want)


def _log(ranks, **kw):
    return {"ranks": ranks, "second": None, "tee": False, "null_time": False, "host": None, "events": False, **kw}


@settings(max_examples=150, deadline=None, derandomize=True)
@given(step_logs())
# slow runs 3 + 3 apart by two normal steps (two runs), by one (one run of 6); a line twice
@example(_log({0: [0.5] * 16, 1: [0.5] * 3 + [1.0] * 3 + [0.5] * 2 + [1.0] * 3 + [0.5] * 5}))
@example(_log({0: [0.5] * 16, 1: [0.5] * 3 + [1.0] * 3 + [0.5] + [1.0] * 3 + [0.5] * 6}, tee=True))
def test_detectors_match_the_plain_rule(tmp_path_factory, log):
    store = _store(tmp_path_factory, log)
    assert _outcome(lambda: straggler.detect(store, "i")) == _outcome(lambda: ref_straggler(store))
    assert _outcome(lambda: step_slowdown.detect(store, "i")) == _outcome(lambda: ref_step_slowdown(store))


def test_the_references_see_findings(tmp_path_factory):
    # (the comparison above is only as good as the findings it compares)
    store = _store(tmp_path_factory, _log({0: [0.5] * 20, 1: [0.5] * 8 + [2.0] * 12}, tee=True))
    assert [x.kind for x in ref_straggler(store)] == [LinkKind.STRAGGLER]
    assert [x.rank for x in ref_step_slowdown(store)] == [1]
    assert straggler.detect(store, "i") == ref_straggler(store)
    assert step_slowdown.detect(store, "i") == ref_step_slowdown(store)
    two_runs = _log({0: [0.5] * 16, 1: [0.5] * 3 + [1.0] * 3 + [0.5] * 2 + [1.0] * 3 + [0.5] * 5})
    assert ref_straggler(_store(tmp_path_factory, two_runs)) == []
    one_run = _log({0: [0.5] * 16, 1: [0.5] * 3 + [1.0] * 3 + [0.5] + [1.0] * 3 + [0.5] * 6})
    assert [x.attr("steps") for x in ref_straggler(_store(tmp_path_factory, one_run))] == [6]


def test_one_run_reads_the_step_lines_once(tmp_path_factory, monkeypatch):
    """Within one run of the detectors the step lines are read once and shared (by both step
    detectors); outside it every call reads them, and the findings are the same."""
    from aftertrace.analysis import detectors
    from aftertrace.analysis.detectors import _series
    store = _store(tmp_path_factory, _log({0: [0.5] * 20, 1: [0.5] * 8 + [2.0] * 12}, tee=True))
    reads = []
    real = _series.read_step_lines
    monkeypatch.setattr(_series, "read_step_lines", lambda *a: reads.append(a) or real(*a))
    alone = straggler.detect(store, "i") + step_slowdown.detect(store, "i")
    assert len(reads) == 2
    reads.clear()
    with _series.shared_reads():
        shared = straggler.detect(store, "i") + step_slowdown.detect(store, "i")
        assert _series.step_lines(store, "i") is _series.step_lines(store, "i")
    assert len(reads) == 1 and shared == alone
    reads.clear()
    found = detectors.run(store, "i", [])
    steps = [l for l in found if l.kind in (LinkKind.STRAGGLER, LinkKind.STEP_SLOWDOWN)]
    assert len(reads) == 1 and sorted(steps, key=lambda l: l.kind.value) == sorted(alone, key=lambda l: l.kind.value)
