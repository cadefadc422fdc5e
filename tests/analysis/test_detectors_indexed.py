"""The detectors' look-ups by time and the stragglers' peer medians give what the scans gave.

Each reference below is the plain scan the detector did before (kept here, not in the
package): a look-up per episode over the whole series, a scan of every finding per OOM
counter increase, every rank's peers collected and sorted per step. Compared on
hypothesis-generated series, findings and step times (duplicate times, equal values, NaN).
"""
from __future__ import annotations

import statistics

from hypothesis import given, settings, strategies as st

from aftertrace.analysis.detectors import memory_growth, oom_events, straggler
from aftertrace.analysis.detectors._series import Series, between, value_at
from aftertrace.analysis.links import Link, LinkKind

T = 1_800_000_000_000_000_000


def series(ts, values):
    return Series("cg", 1, "n1", "/job", "m", "B", list(ts), list(ts), list(values), {}, None)


times = st.lists(st.integers(0, 30), max_size=25).map(sorted)          # in order, with repeats


@st.composite
def a_series(draw):
    ts = draw(times)
    return series(ts, [draw(st.sampled_from([0.0, 1.0, 2.0, 5.0, 100.0])) for _ in ts])


# -- look-ups by time ---------------------------------------------------------------------------
def ref_at(s, t):
    if s is None:
        return None
    for tt, v in zip(s.ts_raw, s.values):
        if tt == t:
            return v
    return None


def ref_no_release(u, g, end, start):
    peak = 0.0
    for t, v in zip(u.ts_raw, u.values):
        if g.ts_raw[end] <= t <= g.ts_raw[start]:
            peak = max(peak, v)
            if v < 0.99 * peak:
                return False
    return True


@settings(max_examples=300, deadline=None, derandomize=True)
@given(a_series(), st.integers(-1, 31), st.integers(-1, 31))
def test_value_at_and_between(s, t0, t1):
    assert value_at(s, t0) == ref_at(s, t0)
    assert between(s, t0, t1)[1] == [v for t, v in zip(s.ts_raw, s.values) if t0 <= t <= t1]
    assert value_at(None, t0) is None


@settings(max_examples=300, deadline=None, derandomize=True)
@given(a_series(), times.filter(len), st.data())
def test_no_release(u, gts, data):
    g = series(gts, [0.0] * len(gts))
    end = data.draw(st.integers(0, len(gts) - 1))
    start = data.draw(st.integers(0, len(gts) - 1))
    assert memory_growth._no_release(u, g, end, start) == ref_no_release(u, g, end, start)


# -- OOM counter increases against the kernel's kills --------------------------------------------
def ref_first_kill(links, t0, t1, host, source):
    for j, l in enumerate(links):
        if (l.kind == LinkKind.OOM_KILL and l.ts_ns is not None and (l.host == host or not host)
                and t0 <= l.ts_ns <= t1 and l.source != source):
            return j
    return None


@st.composite
def findings(draw):
    return [Link(kind=draw(st.sampled_from([LinkKind.OOM_KILL, LinkKind.OOM_KILL, LinkKind.SIGNAL_KILL])),
                 ts_ns=draw(st.none() | st.integers(0, 20).map(lambda s: T + s * 1_000_000_000)),
                 summary="k", source=draw(st.sampled_from(["dmesg", "cg"])), host=draw(st.sampled_from([None, "n1", "n2"])))
            for _ in range(draw(st.integers(0, 20)))]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(findings(), st.integers(0, 20), st.integers(0, 6), st.sampled_from([None, "", "n1", "n2"]),
       st.sampled_from(["dmesg", "cg"]))
def test_first_kill(links, a, width, host, source):
    t0 = T + a * 1_000_000_000
    t1 = t0 + width * 1_000_000_000
    assert oom_events._Kills(links).first(t0, t1, host, source) == ref_first_kill(links, t0, t1, host, source)


# -- stragglers: the median of the other ranks' times of a step ----------------------------------
def ref_peer_median(by_rank, rank, n):
    peers = [by_rank[q][n]["dt"] for q in by_rank if q != rank and n in by_rank[q]]
    return statistics.median(peers) if peers else None


step_times = st.sampled_from([0.1, 0.2, 0.2, 0.5, 1.3, 0.0, float("nan")])


@st.composite
def ranks(draw):
    return {r: {n: {"dt": draw(step_times)} for n in draw(st.sets(st.integers(0, 6), max_size=7))}
            for r in range(draw(st.integers(1, 9)))}


def _same(a, b):
    return (a is None and b is None) or a == b or (a != a and b != b)


_STORE: dict = {}


def _steps_store(tmp_path_factory, by_rank):
    """A store holding ``by_rank``'s step times as the app-log parser writes them (one store for
    every example: its metrics are replaced each time)."""
    from aftertrace.server.store import Store
    if "s" not in _STORE:
        st_ = _STORE["s"] = Store(tmp_path_factory.mktemp("peers") / "s.duckdb")
        st_.insert_rows("sources", [{"incident_id": "i", "source_id": 1, "path": "train.log", "kind": "app_log",
                                     "host": "n", "status": "parsed", "clock_domain": "wall"}])
    store = _STORE["s"]
    store.cursor().execute("DELETE FROM metrics")
    rows = [{"incident_id": "i", "source_id": 1, "host": "n", "entity": f"rank {r}", "metric": m,
             "ts_raw_ns": 1 + n, "ts_utc_ns": 1 + n, "value": float(v), "unit": "s", "line": 1 + n * 10 + r}
            for r, steps in by_rank.items() for n, row in steps.items()
            for m, v in (("step", n), ("step_time", row["dt"]))]
    if rows:
        store.insert_rows("metrics", rows)
    return store


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ranks())
def test_peer_medians(tmp_path_factory, by_rank):
    # the peers' median read by index from each step's sorted times (two ranks: the other's time),
    # and NaN steps taken as they come, against statistics.median over the other ranks' times
    t, _ = straggler._steps(_steps_store(tmp_path_factory, by_rank), "i")
    got: dict[int, list[tuple[int, float]]] = {}
    for r, n, med in zip(*(t.column(k).to_pylist() for k in ("rank", "step", "med"))):
        got.setdefault(r, []).append((n, med))
    for r, steps in by_rank.items():
        if not steps:
            assert r not in got
            continue
        assert [n for n, _ in got[r]] == sorted(steps)
        for n, med in got[r]:
            assert _same(med, ref_peer_median(by_rank, r, n)), (r, n)
