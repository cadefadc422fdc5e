"""When a rank stopped: the worked example of ``analysis/progress.py`` exactly."""
from analysis import progress
from analysis.links import Evidence, Link, LinkKind as K

S = 1_000_000_000
T0 = 1796119200 * S      # 2026-12-01 10:00:00.000 UTC


def at(s):
    return T0 + int(round(s * S))


def link(kind, t, rank=None, pid=None, **attrs):
    return Link(kind=kind, ts_ns=t, summary=f"{kind.value}: gloo recv timed out", source="x", host="vm", rank=rank,
                pid=pid, evidence=(Evidence("x", 1, "l"),), attrs=tuple(attrs.items()))


def test_worked_example():
    p0 = progress.RankProgress(0, "vm", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=90, last_step_ns=at(0), step_time_s=0.035,
                               last_step_ev=Evidence("torchrun.log", 400, "step=90"))
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(30.1),
                   ts_hi_ns=at(30.3), ts_bound="between")
    p0.ended = [timeout]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout])
    assert (stall.rank, stall.pid, stall.ts_ns) == (1, 101, at(0))
    assert stall.timing_ns() == (at(0), at(0.37))
    assert "stopped before 10:00:00.370" in stall.summary and "waited 30 s" in stall.summary


def test_a_status_snapshot_or_a_hung_task_report_bounds_it_tighter():
    p0 = progress.RankProgress(0, "vm", 100, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step_ns=at(0), step_time_s=0.035,
                               stuck_ns=at(0.25), stuck_state="stopped (T)")
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(30.1),
                   ts_hi_ns=at(30.3), ts_bound="between")
    p0.ended = [timeout]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout])
    assert stall.timing_ns() == (at(0), at(0.25)) and stall.attr("state") == "stopped (T)"
    p1.stuck_ns = None
    hung = link(K.HUNG_TASK, at(10.2), pid=101, blocked_s=10)
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout, hung])
    assert stall.timing_ns() == (at(0), at(0.2))


def test_without_a_waiting_peer_a_long_silence_is_a_stall():
    p0 = progress.RankProgress(0, "vm", 100, last_line_ns=at(100))
    p1 = progress.RankProgress(1, "vm", 101, last_line_ns=at(0))
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [])
    assert stall.rank == 1 and "100.0 s before any other rank's" in stall.summary
    p1.last_line_ns = at(90)
    assert progress.stalled_links({0: p0, 1: p1}, []) == []
