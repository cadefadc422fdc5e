"""When a rank stopped: the worked example of ``analysis/progress.py`` exactly."""
import dataclasses

from aftertrace.analysis import progress
from aftertrace.analysis.links import Evidence, Link, LinkKind as K

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


def test_worked_example_a_line_after_the_peers_wait_is_not_progress():
    p0 = progress.RankProgress(0, "vm", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=90, last_step_ns=at(0), step_time_s=0.035,
                               last_step_ev=Evidence("torchrun.log", 400, "step=90"),
                               last_line_ns=at(6), last_line_ev=Evidence("torchrun.log", 401, "no progress for 6 s"))
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(30.1),
                   ts_hi_ns=at(30.3), ts_bound="between")
    p0.ended = [timeout]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout])
    assert stall.ts_ns == at(0) and stall.timing_ns() == (at(0), at(0.37))
    assert "last line at 10:00:06.000" in stall.summary
    assert "its last line, at 10:00:06.000, came after that: not progress" in stall.summary
    # a bound before its last step is no bound: the step was progress, whatever came after it
    p1.last_step_ns = at(0.5)
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout])
    assert stall.ts_ns == at(6) and "not progress" not in stall.summary


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


def test_a_stall_starts_at_the_last_progress_not_at_the_last_cpu_sample():
    # the rank left its loop after step 90 and still ran (its teardown) until it exited
    p0 = progress.RankProgress(0, "vm", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=90, last_step_ns=at(0), step_time_s=0.035,
                               last_cpu_ns=at(0.9), exit_ns=at(0.95))
    reset = link(K.PYTHON_EXCEPTION, at(1.1), rank=0, pid=100, exc_msg="Connection closed by peer")
    p0.ended = [reset]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [reset])
    assert stall.ts_ns == at(0) and stall.timing_ns()[1] >= at(0.9)
    assert stall.attr("exited_ns") == at(0.95)
    assert "it still ran after its last progress" in stall.summary and "before any peer failed" in stall.summary


def test_a_launcher_killed_from_outside_takes_its_nodes_rank():
    pa = progress.RankProgress(0, "nodeA", 100, last_step_ns=at(0.4))
    pb = progress.RankProgress(1, "nodeB", 200, last_step_ns=at(0.2))
    ended = Link(kind=K.JOB_FAILURE, ts_ns=at(0.5), summary="aftertrace collect: the job ended with killed by SIGKILL",
                 source="bundle-nodeB/aftertrace-manifest.json", host="nodeB", pid=199,
                 evidence=(Evidence("m", 3, "job"),), attrs=(("signal", "SIGKILL"), ("launcher_pid", 199)))
    out = progress.killed_launchers({0: pa, 1: pb}, [ended])
    kill = out[-1]
    assert (kill.kind, kill.host, kill.rank, kill.pid) == (K.SIGNAL_KILL, "nodeB", 1, 199)
    assert kill.timing_ns() == (at(0.2), at(0.5))
    assert kill.attr("outside_signal") is True and kill.attr("launcher_killed") is True
    # a launcher that ended with an exit code was not killed
    code = dataclasses.replace(ended, attrs=(("exit_code", 1), ("launcher_pid", 199)))
    assert progress.killed_launchers({0: pa, 1: pb}, [code]) == [code]


def test_a_peer_error_long_after_the_first_wait_is_aftermath_not_a_wait():
    # rank 1 was frozen at 0 s; rank 0 timed out at 30 s; rank 1, thawed at 50 s, found its peer gone
    p0 = progress.RankProgress(0, "nodeA", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "nodeB", 200, last_step=90, last_step_ns=at(0), step_time_s=0.035)
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000)
    later = link(K.PYTHON_EXCEPTION, at(50.5), rank=1, pid=200, exc_msg="Connection closed by peer")
    p0.ended, p1.ended = [timeout], [later]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout, later])
    assert (stall.rank, stall.ts_ns) == (1, at(0))
    assert "reported no failure of its own by then" in stall.summary


def test_a_stated_wait_out_of_any_range_bounds_nothing():
    p0 = progress.RankProgress(0, "vm", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=90, last_step_ns=at(0), step_time_s=0.035)
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=10**23)
    p0.ended = [timeout]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout])
    assert stall.ts_ns == at(0) and "waited" not in stall.summary


def test_a_stall_seen_only_by_cpu_samples_starts_as_early_as_the_last_sample_can_be():
    """A rank whose last sign of life is a perf sample on a boot clock placed within ±300 ms: it
    may have stopped as early as 300 ms before that sample's placed time (a stale-lock wait the
    recording dated 14 ms before the sample fell outside a window that started at the sample)."""
    from aftertrace.analysis.progress import RankProgress, _stall_window
    t = 1_796_174_431_302_682_200
    p = RankProgress(1, "vm", 27496, last_cpu_ns=t, last_cpu_unc_ns=300_000_000)
    lo, hi, _ = _stall_window(p, [], [])
    assert lo == t - 300_000_000 and hi > t
    # a sign of progress is the bound as it stands (it was placed with the rows it came from)
    q = RankProgress(1, "vm", 27496, last_cpu_ns=t, last_cpu_unc_ns=300_000_000, last_line_ns=t - 10**9)
    assert _stall_window(q, [], [])[0] == t - 10**9


def test_worked_example_a_timeout_without_a_time_of_its_own_ends_its_wait():
    p0 = progress.RankProgress(0, "vm", 100, last_step=91, last_step_ns=at(0.03), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=90, last_step_ns=at(0), step_time_s=0.035)
    timeout = link(K.COLLECTIVE_TIMEOUT, at(18), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(5),
                   ts_hi_ns=at(31), ts_bound="between")
    (moved,) = progress.after_the_wait_began({0: p0, 1: p1}, [timeout])
    assert moved.timing_ns() == (at(30.03), at(31)) and moved.ts_ns == at(30.515)
    assert "30 s it waited" in moved.attr("ts_after")
    # a window its wait's end falls outside of is left as it is, and so is a line with its own time
    late = dataclasses.replace(timeout, ts_ns=at(30.7), attrs=tuple(dict(timeout.attrs, ts_lo_ns=at(30.5)).items()))
    assert progress.after_the_wait_began({0: p0, 1: p1}, [late]) == [late]
    timed = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000)
    assert progress.after_the_wait_began({0: p0, 1: p1}, [timed]) == [timed]
