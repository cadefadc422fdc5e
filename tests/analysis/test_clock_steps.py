"""A wall clock that stepped: the worked example of analysis.clock_steps, a clock that merely
drifts, and a real recording whose wall clock was stepped +2.4 s mid-job."""
from analysis.clock_steps import Reading, runs
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
    offset (within 20 ms of the recorder's truth), the window covers both sides, and the report
    says the clock stepped."""
    from server.service import Service, Settings
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
    assert abs(segs[2]["offset_ns"] - segs[0]["offset_ns"] - step["delta_ns"]) < 20 * MS
    # every probe the kernel logged: placed within its stated window, and within 20 ms outside the window
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
            assert abs(r["ts_utc_ns"] - true) < 20 * MS, r["text"]
    rep = svc.get_report(sub.incident_id)
    (f,) = [a for a in rep["anomalies"] if a["kind"] == "clock_step"]
    assert "stepped +2.39" in f["summary"] or "stepped +2.40" in f["summary"]


def test_dmesg_T_alone_next_to_a_stepped_boot_clock_moves_the_earlier_records_by_the_step():
    """dmesg -T converted every record with the boot instant of when it ran, after the step: a
    record of the earlier stretch is placed by that stretch's offset, the printed times where a
    record may be on either side by the step's window."""
    from analysis.clocks import ClockEntry, solve_kernel_wall
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
