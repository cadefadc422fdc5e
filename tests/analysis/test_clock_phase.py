"""The boot clock narrowed by the wall clock's phase on CLOCK_MONOTONIC (analysis/clock_phase.py)."""
from __future__ import annotations

from aftertrace.analysis.clock_phase import SEC, intersect, narrow

B = 1796161653 * SEC
PHASE = [(809_900_000, 818_700_000)]      # tests/ingest/test_c10phase.py, the hungio-r1 log
TRUTH = B + 812_760_987


def test_worked_example_one_offset_in_the_window():
    lo, hi = narrow(B + 322_583_000, B + 964_808_000, PHASE)
    assert (lo, hi) == (B + 809_900_000, B + 818_700_000)
    assert (lo + hi) // 2 == B + 814_300_000 and lo <= TRUTH < hi


def test_a_window_wider_than_a_second_keeps_both_candidates():
    assert narrow(B - 500_000_000, B + 964_808_000, PHASE) == (B - SEC + 809_900_000, B + 818_700_000)


def test_a_window_without_that_phase_gives_none():
    assert narrow(B + 100_000_000, B + 800_000_000, PHASE) is None


def test_arcs_across_zero_and_intersections():
    across = [(-5_000_000, 3_000_000)]            # 0.995 s .. 0.003 s
    assert intersect(across, [(0, 1_000_000), (990_000_000, 999_000_000)]) == [(0, 1_000_000),
                                                                              (995_000_000, 999_000_000)]
    assert narrow(B + 990_000_000, B + SEC + 2_000_000, across) == (B + 995_000_000, B + SEC + 2_000_000)


def test_phases_of_an_analysed_incident_read_the_logs_that_state_one(tmp_path):
    """``phases`` on the store: the logs with a phase fact, each with the wall times its events
    cover (read for those sources only); an incident without such a log has none."""
    from pathlib import Path

    from aftertrace.analysis.clock_phase import phases
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    root = Path(__file__).resolve().parents[2] / "sample_traces" / "logs-hang" / "vm" / "logs"
    iid = svc.submit_path(root).incident_id
    svc.analyze(iid)
    stated = svc.store.query("""SELECT s.path, min(e.ts_raw_ns) AS lo, max(e.ts_raw_ns) AS hi
        FROM facts f JOIN sources s USING (incident_id, source_id) JOIN events e USING (incident_id, source_id)
        WHERE f.incident_id = ? AND f.key = 'wall_monotonic_phase' GROUP BY s.path ORDER BY s.path""", [iid])
    assert len(stated) >= 2
    (got,) = phases(svc.store, iid, {""}).values()
    assert got["logs"] == [r["path"] for r in stated]
    assert got["span_ns"] == (min(r["lo"] for r in stated), max(r["hi"] for r in stated))
    assert got["arcs_ns"] and got["pairs"] > 0
    trace = Path(__file__).resolve().parents[1] / "data" / "torch_trace" / "gloo2_truth_rank0.json"
    other = svc.submit_path(trace).incident_id
    svc.analyze(other)
    assert phases(svc.store, other, {""}) == {}
