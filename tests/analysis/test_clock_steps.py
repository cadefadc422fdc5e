"""A wall clock that stepped: the worked example of analysis.clock_steps, a clock that merely
drifts, and a real recording whose wall clock was stepped +2.4 s mid-job."""
import re

from aftertrace.analysis.clock_steps import Reading, runs
from tests.analysis.corpus import build, cases

S = 1_000_000_000
MS = 1_000_000
B = 1796203208 * S      # the offsets of the example, whole seconds


def _r(local_s: float, mid: int | None, unc: int | None = None, lo: int | None = None, what: str = "x"):
    if mid is not None:
        return Reading(int(local_s * S), mid - unc, mid + unc, what)
    return Reading(int(local_s * S), lo, None, what)


def test_worked_example():
    rs = [_r(455, B + 242 * MS, 1 * MS, what="perf_reference"),
          _r(457, B + 240 * MS, 5 * MS, what="uptime_date"),
          _r(491, None, lo=B + 2 * S + 637 * MS, what="signal->exit"),
          _r(495, B + 2 * S + 642 * MS, 5 * MS, what="uptime_date")]
    (st,) = runs(rs[::-1])            # the order given does not matter
    assert (st.after_ns, st.by_ns) == (457 * S, 491 * S)
    assert st.delta_ns == 2_400 * MS
    assert (st.before.what, st.after.what) == ("uptime_date", "signal->exit")


def test_a_clock_that_drifts_within_what_ntp_slews_is_not_a_step():
    # 300 ppm over 1,000 s: the offset moves 300 ms, slowly, readings +-5 ms
    rs = [_r(t, B + int(t * 300_000), 5 * MS) for t in range(0, 1001, 100)]
    assert runs(rs) == []


def test_one_stray_reading_between_two_stretches_splits_nothing_it_cannot_size():
    # only one-sided bounds after the jump: the step is seen but its size is not known
    rs = [_r(10, B, 5 * MS), _r(20, B + 1 * MS, 5 * MS), _r(30, None, lo=B + 3 * S)]
    assert runs(rs) == []


def test_a_recording_whose_wall_clock_stepped(tmp_path):
    """dev/leak-r1-wallstep: perf -k and an uptime + date pair before the step, the launcher's
    signals and a second pair after it. Records after the step's window are placed on the new
    offset (within 30 ms of the recorder's truth), the window covers both sides, and the report
    says the clock stepped."""
    from aftertrace.server.service import Service, Settings
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/full"]
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    sub = svc.submit_path(build(c, tmp_path / "b"), title=c.id)
    svc.analyze(sub.incident_id)
    segs = svc.store.query("""SELECT from_ns, to_ns, offset_ns, uncertainty_ns, what FROM clock_segments
                              WHERE incident_id = ? AND domain = 'boot' ORDER BY from_ns NULLS FIRST""",
                           [sub.incident_id])
    assert [g["what"] for g in segs] == ["before the step", "the step's window", "after the step"]
    (step,) = c.truth["wall_steps"]
    probes = {p["text"]: p for p in c.truth["kmsg_probes"]}
    assert segs[0]["to_ns"] <= step["monotonic_ns"][0] <= segs[1]["to_ns"]
    # the step's size within the two sides' stated uncertainties (the later side, uptime + date cut
    # by the pairs and the phase of its stretch of the torchrun log, is [210.640087, 210.695049] s: 25 ms off)
    assert abs(segs[2]["offset_ns"] - segs[0]["offset_ns"] - step["delta_ns"]) <= (segs[0]["uncertainty_ns"]
                                                                                    + segs[2]["uncertainty_ns"])
    assert abs(segs[2]["offset_ns"] - segs[0]["offset_ns"] - step["delta_ns"]) < 30 * MS
    # every probe the kernel logged: placed within its stated window, and within 30 ms outside the window
    rows = svc.store.query(
        """SELECT e.text, e.ts_utc_ns, e.ts_raw_ns FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND s.path LIKE '%/dmesg.txt' AND e.text LIKE '%clock probe%'""",
        [sub.incident_id])
    assert len(rows) >= 5
    for r in rows:
        p = next(p for t, p in probes.items() if r["text"].endswith(t))
        true = sum(p["realtime_ns"]) // 2
        g = next(g for g in segs if (g["from_ns"] is None or r["ts_raw_ns"] >= g["from_ns"])
                 and (g["to_ns"] is None or r["ts_raw_ns"] < g["to_ns"]))
        assert abs(r["ts_utc_ns"] - true) <= g["uncertainty_ns"], r["text"]
        if g["what"] != "the step's window":
            assert abs(r["ts_utc_ns"] - true) < 30 * MS, r["text"]
    rep = svc.get_report(sub.incident_id)
    (f,) = [a for a in rep["anomalies"] if a["kind"] == "clock_step"]
    said = float(re.search(r"stepped ([+-][0-9.]+) s", f["summary"]).group(1))
    assert abs(said * 1e9 - step["delta_ns"]) < 30 * MS
    # the worked example of sampler_gaps (analysis/clock_steps.py): one gap of the snapshots holds the step
    from aftertrace.analysis.clock_steps import Gap, sampler_gaps
    assert sampler_gaps(svc.store, sub.incident_id) == {"vm": [Gap("vm", "vm/cgroup/", 1_796_203_684_584_640_000,
                                                                   1_796_203_687_484_659_000, 2_401_594_000)]}
    assert 0 < step["delta_ns"] <= 2_401_594_000


def test_a_gap_widens_the_records_no_reading_is_beside():
    """The worked example of analysis.clocks.widen_for_gaps."""
    from aftertrace.analysis.clock_steps import Gap
    from aftertrace.analysis.clocks import ClockEntry, widen_for_gaps
    e = ClockEntry("vm", "boot", B + 2_642 * MS, 10 * MS, "uptime+date")
    g = Gap("vm", "vm/cgroup", 1_796_203_684_584_640_000, 1_796_203_687_484_659_000, 2_401_594_000)
    w = widen_for_gaps(e, [g], [_r(491, B + 2_642 * MS, 10 * MS), _r(495, B + 2_642 * MS, 5 * MS)])
    cut = 1_796_203_687_484_659_000 - (B + 2_632 * MS)
    assert cut == 476_852_659_000
    (lo, hi, off, _, unc, what), after = w.segments
    assert (lo, hi, off, unc) == (None, cut, 1_796_203_209_441_203_000, 1_210_797_000) and "a gap of" in what
    assert after[:5] == (cut, None, e.offset_ns, None, 10 * MS)
    assert off - unc <= B + 240 * MS and off + unc >= e.offset_ns + 10 * MS
    # readings on both sides of the gap: it was a stall (or a step they would show), nothing widened
    assert widen_for_gaps(e, [g], [_r(455, B + 2_642 * MS, 10 * MS), _r(495, B + 2_642 * MS, 5 * MS)]) == e


def test_dmesg_T_alone_next_to_a_stepped_boot_clock_moves_the_earlier_records_by_the_step():
    """dmesg -T converted every record with the boot instant of when it ran, after the step: a
    record of the earlier stretch is placed by that stretch's offset, the printed times where a
    record may be on either side by the step's window."""
    from aftertrace.analysis.clocks import ClockEntry, solve_kernel_wall
    before, after = B + 242 * MS, B + 2 * S + 642 * MS
    boot = ClockEntry("vm", "boot", after, 1_264 * MS, "x",
                      segments=((None, 464 * S, before, None, 11 * MS, "before the step"),
                                (464 * S, 490 * S, (before + after) // 2, None, 1_264 * MS, "the step's window"),
                                (490 * S, None, after, None, 65 * MS, "after the step")))
    kw = solve_kernel_wall("vm", boot, [], {"dmesg_ctime"})
    (a, w, z) = kw.segments
    # conversion window: from 0.5 s before the printed second to 2 s after it -> +0.75 s +- 1.25 s
    assert (a[1], w[1]) == (464 * S + after - 2 * S, 490 * S + after + 500 * MS)
    assert a[2] == 750 * MS - 2_400 * MS and a[4] == 1_250 * MS + 11 * MS + 65 * MS
    assert z[2] == 750 * MS and z[4] == 1_250 * MS + 65 * MS
    assert w[4] == 1_250 * MS + 1_264 * MS + 65 * MS


def test_log_step_worked_example():
    """analysis/clocks.py unplaced_before_log_step's docstring, with its numbers."""
    from aftertrace.analysis.clock_phase import LogStep
    from aftertrace.analysis.clocks import LOG_STEP_WHAT, ClockEntry, unplaced_before_log_step
    e = ClockEntry("vm", "boot", 1_796_203_210_700_000_000, 100 * MS, "raw dmesg next to dmesg -T")
    x = LogStep("vm", "vm/logs/torchrun.log", 85, 1_796_203_679 * S, 498, 1_796_203_701_152_000_000,
                ((239_100_000, 247_100_000),), ((604_800_000, 844_900_000),), 55)
    got = unplaced_before_log_step(e, [x], [_r(495, B, MS)], 500 * S)
    cut = 490_562_000_000
    assert got.segments == ((None, cut, None, None, None, LOG_STEP_WHAT),
                            (cut, None, e.offset_ns, None, e.uncertainty_ns,
                             "after the wall clock's step (vm/logs/torchrun.log line 498 was written after it)"))
    assert got.offset_at(cut - 1)[0] is None and got.offset_at(cut)[0] == e.offset_ns
    assert got.steps[0]["after_line"] == 85 and got.steps[0]["before_line"] == 498
    assert unplaced_before_log_step(e, [x], [_r(480, B, MS)], 500 * S).segments[0][1] == 480_010_000_000
    assert unplaced_before_log_step(e, [x], [_r(460, B, MS)], 500 * S) is e


def test_a_log_step_alone_leaves_the_records_before_it_unplaced(tmp_path):
    """dev/leak-r1-wallstep with only dmesg -T (no raw log, no perf, no anchor): dmesg converted
    every record with the offset of after the step, which only the torchrun log's stamps show.
    The records printed before its first line written after the step (+0.5 s of dmesg's drift)
    are left unplaced, but for the OOM kill, which its cgroup's counter places on the wall clock;
    the report says why, with the two lines."""
    from aftertrace.server.service import Service, Settings
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/dmesg-T-only"]
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    sub = svc.submit_path(build(c, tmp_path / "b"), title=c.id)
    svc.analyze(sub.incident_id)
    rows = svc.store.query(
        """SELECT e.ts_raw_ns, e.ts_utc_ns, e.kind, r.uncertainty_ns, r.by_line
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN row_times r USING (incident_id, source_id, line)
           WHERE e.incident_id = ? AND s.path LIKE '%/dmesg_T.txt'""", [sub.incident_id])
    cut = 1_796_203_701_152_000_000 + 500 * MS
    (kill,) = [r for r in rows if r["kind"] == "oom_kill"]
    assert rows and all((r["ts_utc_ns"] is None) == (r["ts_raw_ns"] < cut) for r in rows if r is not kill)
    # printed before the cut, placed by the counter (snapshots 1796203700.484703 and ...701.484676,
    # one second more for the report's length in whole seconds); truth: stamp 490.259982 s on the
    # offset after the step, 1796203210.642160 s (the third worked example of analysis.clock_match)
    assert kill["ts_raw_ns"] < cut and kill["by_line"] is None
    assert (kill["ts_utc_ns"], kill["uncertainty_ns"]) == ((1_796_203_700_484_703_000 + 1_796_203_702_484_676_000) // 2,
                                                          (1_796_203_702_484_676_000 - 1_796_203_700_484_703_000 + 1) // 2)
    assert abs(kill["ts_utc_ns"] - (490_259_982_000 + 1_796_203_210_642_160_000)) <= kill["uncertainty_ns"]
    assert any(r["ts_utc_ns"] is not None for r in rows)
    rep = svc.get_report(sub.incident_id)
    (f,) = [a for a in rep["anomalies"] if a["kind"] == "clock_step"]
    assert "up to line 85 and another from line 498" in f["summary"] and "not placed" in f["summary"]


def test_a_side_of_a_step_that_no_reading_places_is_left_unplaced():
    """Readings after a step that bound the offset on one side only (a rank stuck in the kernel gives
    no lower bound): the stretch before the step keeps the offset of its own readings, the rest is
    not placed -- never placed by the earlier stretch's offset."""
    from aftertrace.analysis.clock_steps import Step
    from aftertrace.analysis.clocks import UNPLACED_SIDE_WHAT, ClockEntry, unplaced_beyond_steps
    e = ClockEntry("vm", "boot", B + 242 * MS, 1 * MS, "perf reference time")
    before, after = _r(455, B + 242 * MS, 1 * MS), Reading(500 * S, None, B - 4_258 * MS, "exit->failed line")
    st = Step(470 * S, 500 * S, -4_500 * MS, before, after)
    w = unplaced_beyond_steps(e, [st], [before, after], 0)
    assert w.segments == ((None, 470 * S + 1, e.offset_ns, None, 1 * MS, w.segments[0][5]),
                          (470 * S + 1, None, None, None, None, UNPLACED_SIDE_WHAT))
    assert unplaced_beyond_steps(e, [st], [before], 0) == e      # every stretch fits: nothing to leave out


def test_overlap_worked_example():
    """analysis/clock_steps.py's backward-step worked example, with its numbers."""
    from aftertrace.analysis.clock_steps import Overlap, overlaps_in
    boot = [100 * S + k * 500 * MS for k in range(24)]
    stamps = [b + (1000 * S if b < 105_800 * MS else 998_700 * MS) for b in boot]
    assert overlaps_in(stamps) == [(1104_500 * MS, 1105_700 * MS, 500 * MS, True)]
    # a read 0.3 s late and the next one back on the pace: close, but not crowded
    late = [b + 1000 * S + (300 * MS if k == 10 else 0) for k, b in enumerate(boot)]
    assert overlaps_in(late) == [(1105_300 * MS, 1105_500 * MS, 500 * MS, False)]
    # a series read in order shows nothing
    assert overlaps_in([b + 1000 * S for b in boot]) == []
    o = Overlap("vm", "vm/cgroup/", 1104_500 * MS, 1105_700 * MS, 500 * MS)
    assert o.last_ns - o.period_ns - 1000 * S == 105_200 * MS
    assert o.first_ns + o.period_ns - 998_700 * MS == 106_300 * MS


def test_a_backward_step_is_narrowed_to_the_crowded_stretch():
    """The step's window from the readings alone is 38 s wide; the series' crowded stretch holds
    it to [105.2, 106.3] s, each side's offset exact here."""
    from aftertrace.analysis.clock_steps import Overlap
    from aftertrace.analysis.clocks import Anchor, solve_stepped, step_readings
    o1, o2 = 1000 * S, 998_700 * MS
    anchors = [Anchor("vm", "uptime_date", t * S, t * S + off, MS, "vm/uptime.txt", 1)
               for t, off in ((90, o1), (92, o1), (130, o2), (132, o2))]
    steps = runs(step_readings(anchors, [], 0))
    (st,) = steps
    assert (st.after_ns, st.by_ns) == (92 * S, 130 * S)
    o = Overlap("vm", "vm/cgroup/", 1104_500 * MS, 1105_700 * MS, 500 * MS)
    e = solve_stepped("vm", anchors, [], 0, steps, overlaps=[o])
    (_, w0, *_), (_, w1, *_), _ = e.segments
    assert (w0 - 1, w1) == (105_200 * MS - MS, 106_300 * MS + MS)
    # a stretch longer than the step (and a period) allows is something else: the window stays
    far = Overlap("vm", "vm/cgroup/", 1101_000 * MS, 1105_700 * MS, 500 * MS)
    (_, w0, *_), (_, w1, *_), _ = solve_stepped("vm", anchors, [], 0, steps, overlaps=[far]).segments
    assert (w0, w1) == (92 * S + 1, 130 * S)


def test_unplaced_before_a_crowded_stretch_worked_example():
    """analysis/clocks.py unplaced_before_overlap's docstring, with its numbers."""
    from aftertrace.analysis.clock_steps import Overlap
    from aftertrace.analysis.clocks import OVERLAP_WHAT, ClockEntry, _printk_allowance, unplaced_before_overlap
    e = ClockEntry("vm", "boot", 998_700 * MS, 10 * MS, "raw dmesg next to dmesg -T")
    o = Overlap("vm", "vm/cgroup/", 1104_500 * MS, 1105_700 * MS, 500 * MS, True)
    got = unplaced_before_overlap(e, [o], [_r(130, 998_700 * MS, MS)], 0)
    cut = 106_310 * MS + _printk_allowance(0)
    assert got.segments[0] == (None, cut, None, None, None, OVERLAP_WHAT)
    assert got.segments[1][:5] == (cut, None, e.offset_ns, None, e.uncertainty_ns)
    assert got.offset_at(cut - 1)[0] is None and got.offset_at(cut)[0] == e.offset_ns
    assert got.steps[0]["overlap"] == "vm/cgroup/"
    # a reading before the first read after the step may be on either side: the entry stands
    assert unplaced_before_overlap(e, [o], [_r(105, 998_700 * MS, MS)], 0) is e
    # a stretch that is not crowded (a late read and its catch-up) says nothing
    late = Overlap("vm", "vm/cgroup/", 1104_500 * MS, 1105_700 * MS, 500 * MS, False)
    assert unplaced_before_overlap(e, [late], [], 0) is e
