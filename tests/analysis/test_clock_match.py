"""The worked example of analysis/clock_match.py's docstring, end to end through the pipeline,
on lines cut from two real recordings (tests/data/clock_match/PROVENANCE.md)."""
import json
from pathlib import Path

import pytest

from aftertrace.analysis.clock_match import METHOD, Bound, solve
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data" / "clock_match"


@pytest.fixture
def svc(tmp_path):
    return Service(Settings.from_env(home=tmp_path / "home"))


def _boot(svc, bundle):
    sub = svc.submit_path(bundle)
    svc.analyze(sub.incident_id)
    (cm,) = svc.store.query("SELECT offset_ns, uncertainty_ns, method, evidence FROM clock_map "
                            "WHERE incident_id = ? AND domain = 'boot'", [sub.incident_id])
    return sub.incident_id, cm


def test_docstring_worked_example(svc):
    iid, cm = _boot(svc, DATA / "exception-r2-4rank")
    assert cm["offset_ns"] == 1_796_161_679_055_671_000
    assert cm["uncertainty_ns"] == 81_238_000
    assert cm["method"].startswith(METHOD)
    assert "[1796161679.053671, 1796161679.136909] s" in cm["method"]
    assert "perf's -k clock (monotonic)" in cm["method"]
    used = json.loads(cm["evidence"])["used"]
    assert [(u["rule"], u["pid"]) for u in used[:2]] == [("signal->exit", 20970), ("exit->first signal", 20971)]
    # the recorder's truth (perf's reference time, left out of the mini bundle) is 0.55 ms away
    truth = 1_796_184_625_687_022_000 - 22_946_631_902_602
    assert abs(cm["offset_ns"] - truth) < 600_000
    # perf's exits are placed: the failed worker's ends before the first closing signal
    (ex,) = svc.store.query("SELECT ts_utc_ns FROM events WHERE incident_id = ? AND pid = 20971 "
                            "AND name = 'sched:sched_process_exit'", [iid])
    assert ex["ts_utc_ns"] < 1_796_184_649_884_000_000


def test_stopped_worker_killed_after_its_grace_period(svc):
    """The stopped rank ignores the SIGTERM; torchrun SIGKILLs it 30 s later and perf records its
    exit 43 ms after that line: its main thread was the last (``group_dead=true``) and freed the
    address space first. So the signal's millisecond is not trusted: the middle of the bounds."""
    iid, cm = _boot(svc, DATA / "sigstop-r1")
    ev = svc.store.query("SELECT json_extract_string(attrs, '$.signal') AS sig FROM events "
                         "WHERE incident_id = ? AND name = 'closing_signal' ORDER BY line", [iid])
    assert [e["sig"] for e in ev] == ["SIGTERM", "SIGKILL"]
    truth = 1_796_162_914_451_733_000 - 1_260_638_968_852
    lo = truth - 43_000_000
    assert cm["method"].startswith(METHOD)
    # L from the SIGKILL line (22:10:01.632, less 1 ms) and U from rank 0's exit before the SIGTERM
    assert cm["offset_ns"] - cm["uncertainty_ns"] <= truth <= cm["offset_ns"] + cm["uncertainty_ns"]
    assert cm["offset_ns"] > lo + 50_000_000
    assert abs(cm["offset_ns"] - truth) < 50_000_000
    assert cm["uncertainty_ns"] < 100_000_000


def _b(rule, lo=None, hi=None, clock="monotonic", typical=None):
    return Bound("h", rule, 1, lo, hi, "perf", 1, "log", 2, clock, typical)


def test_contradicting_pairs_place_nothing():
    m, bad = solve("h", [_b("signal->exit", lo=10_000_000), _b("exit->first signal", hi=5_000_000)])
    assert m is None and bad["gap_ns"] == 5_000_000


def test_one_sided_bounds_place_nothing():
    assert solve("h", [_b("signal->exit", lo=10), _b("signal->exit", lo=20)]) == (None, None)


def test_perf_on_its_own_clock_is_printks():
    m, _ = solve("h", [_b("signal->exit", lo=0, clock="", typical=1_000_000),
                       _b("exit->failed line", hi=300_000_000, clock="")])
    assert m.printk_clock and m.offset_ns == 2_000_000 and m.uncertainty_ns == 298_000_000


def test_without_a_typical_latency_the_middle():
    """A last thread's exit (it freed the address space first) suggests nothing."""
    m, _ = solve("h", [_b("signal->exit", lo=0), _b("exit->first signal", hi=100_000_000)])
    assert (m.offset_ns, m.uncertainty_ns) == (50_000_000, 50_000_000)


def test_timeline_tracks_say_how_their_clock_was_placed(svc):
    from aftertrace.analysis.timeline import tracks
    iid, cm = _boot(svc, DATA / "exception-r2-4rank")
    cat = tracks(svc.store, iid)
    perf = next(t["clock"] for t in cat if t["kind"] == "perf_script")      # a thread of the perf recording
    assert perf["domain"] == "boot" and perf["placed"] and perf["uncertainty_s"] == pytest.approx(0.081238)
    assert perf["method"].startswith(METHOD)
    log = next(t["clock"] for t in cat if (t["path"] or "").endswith("torchrun.log"))
    assert log["domain"] == "wall" and log["uncertainty_s"] == 0


def test_an_edge_whose_windows_overlap_is_undecidable():
    from types import SimpleNamespace as NS

    from aftertrace.analysis.chains import _order
    at = lambda lo, hi: NS(timing_ns=lambda: (lo, hi))  # noqa: E731
    assert _order(NS(cause=at(0, 10), effect=at(20, 30))) == "certain"
    assert _order(NS(cause=at(0, 25), effect=at(20, 30))) == "undecidable"
    assert _order(NS(cause=at(0, 10), effect=NS(timing_ns=lambda: None))) == "certain"


def test_births_against_cgroup_snapshots(svc):
    """The second worked example: no exit, no launcher line, no anchor; only perf's forks of the
    two workers and four cgroup snapshots around them (tests/data/clock_match/PROVENANCE.md)."""
    iid, cm = _boot(svc, DATA / "leak-r1-births")
    assert cm["method"].startswith(METHOD)
    assert "4 pairs bound it to [1796203208.135129, 1796203209.135704] s" in cm["method"]
    used = json.loads(cm["evidence"])["used"]
    assert [(u["rule"], u["pid"]) for u in used[:2]] == [("snapshot->birth", 2272), ("birth->snapshot", 2273)]
    # the recorder's truth (its clock probes, before the wall clock stepped) lies inside
    truth = 1_796_203_671_011_608_350 - 462_769_500_626
    assert abs(cm["offset_ns"] - truth) <= cm["uncertainty_ns"]
    # the middle of L and the snapshot that lists them, stamped 1796203675.584675 s, read within 50 ms
    typical = 1_796_203_675_584_675_000 + 50_000_000 - 466_950_467_000
    assert typical == 1_796_203_208_684_208_000
    assert cm["offset_ns"] == (1_796_203_208_135_129_000 + typical) // 2 == 1_796_203_208_409_668_500
    assert cm["uncertainty_ns"] == 1_796_203_209_135_704_000 - cm["offset_ns"]


def test_birth_needs_a_parent_inside_the_group(svc, tmp_path):
    """A process moved into the group from outside may have been forked long before the read that
    did not list it: only a child of a member is in the group from birth."""
    import shutil
    b = tmp_path / "b"
    shutil.copytree(DATA / "leak-r1-births", b)
    for d in (b / "vm" / "cgroup").iterdir():
        p = d / "cpu" / "train_job" / "cgroup.procs"
        p.write_text("\n".join(x for x in p.read_text().split() if x != "2251") + "\n")
    iid, cm = _boot(svc, b)
    assert cm["offset_ns"] is None


def test_births_read_out_of_order_bound_nothing(svc, tmp_path):
    """A read taken after the wall clock stepped back is stamped among the reads before the step:
    in the order of the stamps the workers join, leave and join again, and which join was their
    birth is not known."""
    import shutil
    b = tmp_path / "b"
    shutil.copytree(DATA / "leak-r1-births", b)
    shutil.copytree(b / "vm" / "cgroup" / "1796203675.584675", b / "vm" / "cgroup" / "1796203674.834671")
    iid, cm = _boot(svc, b)
    assert cm["offset_ns"] is None


def test_oom_kill_against_the_cgroup_count(tmp_path, svc):
    """The third worked example of the module docstring, on the development recording whole."""
    from tests.analysis.corpus import build, cases
    from aftertrace.analysis.clock_match import _oom_kills
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/full"]
    sub = svc.submit_path(build(c, tmp_path / "b"), title=c.id)
    svc.analyze(sub.incident_id)
    lo, hi = _oom_kills(svc.store, sub.incident_id, {"vm": ""})
    assert (lo.rule, lo.pid, lo.lo_ns, lo.boot_ns, lo.boot_line) == (
        "snapshot->oom kill", 2273, 1_796_203_700_484_703_000 - 490_259_982_000, 490_259_414_000, 89)
    assert (hi.rule, hi.hi_ns) == ("oom kill->snapshot", 1_796_203_701_484_676_000 - 490_259_414_000)
    truth_after = 1_796_203_208_242_107_724 + c.truth["wall_steps"][0]["delta_ns"]
    assert lo.lo_ns <= truth_after <= hi.hi_ns
    # on CLOCK_MONOTONIC (perf -k) the stamps are printk's: widened by its allowance (20 ppm of 490 s)
    lo_m, hi_m = _oom_kills(svc.store, sub.incident_id, {"vm": "monotonic"})
    assert (lo.lo_ns - lo_m.lo_ns, hi_m.hi_ns - hi.hi_ns) == (9_805_199, 9_805_199)
    assert lo_m.boot_clock == "monotonic" and lo_m.printk_stamp


def test_oom_kills_the_count_does_not_match_are_left_out(svc, tmp_path):
    """A kernel log with fewer kills of the group than its count (rotated, or cleared): which kill
    raised it is not known, so no bound."""
    from tests.analysis.corpus import build, cases
    from aftertrace.analysis.clock_match import _oom_kills
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/full"]
    sub = svc.submit_path(build(c, tmp_path / "b"), title=c.id)
    svc.analyze(sub.incident_id)
    svc.store.cursor().execute("UPDATE metrics SET value = value + 1 WHERE incident_id = ? AND metric = 'memory.oom_kill'",
                               [sub.incident_id])
    assert _oom_kills(svc.store, sub.incident_id, {"vm": ""}) == []


def test_a_count_that_falls_in_the_order_of_its_stamps_bounds_nothing(svc, tmp_path):
    """A count stamped lower after a higher one: the reads are out of order by their stamps (the
    wall clock stepped back while they were taken), so which rise came first is not known."""
    from tests.analysis.corpus import build, cases
    from aftertrace.analysis.clock_match import _oom_kills
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/full"]
    sub = svc.submit_path(build(c, tmp_path / "b"), title=c.id)
    svc.analyze(sub.incident_id)
    assert len(_oom_kills(svc.store, sub.incident_id, {"vm": ""})) == 2
    svc.store.cursor().execute(
        """UPDATE metrics SET value = 0 WHERE incident_id = ? AND metric = 'memory.oom_kill'
           AND ts_raw_ns = (SELECT max(ts_raw_ns) FROM metrics WHERE incident_id = ? AND metric = 'memory.oom_kill')""",
        [sub.incident_id, sub.incident_id])
    assert _oom_kills(svc.store, sub.incident_id, {"vm": ""}) == []


def test_a_signalled_process_whose_main_thread_was_its_last(svc, tmp_path):
    """The fourth worked example of the module docstring, on the development recording without its
    anchors; and a process signalled twice (it outlived a SIGTERM while stopped) suggests nothing."""
    from tests.analysis.corpus import build, cases
    from aftertrace.analysis.clock_match import _exits, _forks, _kill_bursts, bounds, launcher_lines
    want = {"dev/tenant/bare", "dev/sigstop-r1/bare"}
    got = {}
    for c in [c for c in cases(("dev",)) if c.id in want]:
        sub = svc.submit_path(build(c, tmp_path / c.id.replace("/", "_")), title=c.id)
        svc.analyze(sub.incident_id)
        iid = sub.incident_id
        got[c.id] = (c, iid, [b for b in bounds(svc.store, iid, launcher_lines(svc.store, iid))
                              if b.rule == "signal->exit"])
    c, iid, (sig,) = got["dev/tenant/bare"]
    assert _kill_bursts(svc.store, iid, None, _exits(svc.store, iid), _forks(svc.store, iid)) == {
        ("vm", 28845): 1_811_817_367_000}
    assert (sig.pid, sig.boot_ns, sig.lo_ns, sig.wall_line) == (28845, 1_811_817_985_000,
                                                                1_796_161_653_810_015_000, 620)
    assert sig.typical_ns == 1_000_000 + 1_811_817_985_000 - 1_811_817_367_000
    m, _ = solve("vm", [b for b in bounds(svc.store, iid, launcher_lines(svc.store, iid)) if b.host == "vm"])
    assert m.offset_ns == 1_796_161_653_812_633_000
    truth = c.truth["clocks"]["start"]["realtime_ns"] - c.truth["clocks"]["start"]["monotonic_ns"]
    assert abs(m.offset_ns - truth) < 200_000
    _, _, sigs = got["dev/sigstop-r1/bare"]
    assert [(b.pid, b.typical_ns) for b in sigs] == [(17883, None), (17883, None)]
