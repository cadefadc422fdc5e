"""The worked example of analysis/clocks.py's docstring, end to end through the pipeline."""
import json
from pathlib import Path

import pytest

from aftertrace.analysis.clocks import Anchor, solve_boot
from aftertrace.ingest.timeparse import fmt_utc
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def svc(tmp_path):
    return Service(Settings.from_env(home=tmp_path / "home"))


def _analyze(svc, root):
    sub = svc.submit_path(root)
    return sub.incident_id, svc.analyze(sub.incident_id)


def test_docstring_worked_example(svc, tmp_path):
    b = tmp_path / "bundle" / "node-1"
    (b / "host").mkdir(parents=True)
    (b / "host" / "anchors.txt").write_text("1234.56 2000.00\n1764417073.250000000\n")
    (b / "dmesg.txt").write_text("[ 1200.000000] hello from the kernel\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    cm = svc.store.query("SELECT host, domain, offset_ns, uncertainty_ns, method FROM clock_map WHERE incident_id = ?",
                         [iid])
    assert cm == [{"host": "node-1", "domain": "boot", "offset_ns": 1_764_415_838_685_000_000,
                   "uncertainty_ns": 34_000_000, "method": "uptime+date"}]
    ev = svc.store.query("SELECT ts_raw_ns, ts_utc_ns FROM events WHERE incident_id = ?", [iid])
    assert ev == [{"ts_raw_ns": 1_200_000_000_000, "ts_utc_ns": 1_764_417_038_685_000_000}]
    assert fmt_utc(ev[0]["ts_utc_ns"]) == "2025-11-29T11:50:38.685000Z"
    src = {s["path"]: s for s in rep["sources"]}
    assert src["node-1/dmesg.txt"]["clock"] == {"domain": "boot", "offset_s": 1764415838.685,
                                                "uncertainty_s": 0.034, "method": "uptime+date", "drift_ppm": None}


def test_uptime_and_date_in_two_files_of_one_folder(svc, tmp_path):
    b = tmp_path / "bundle" / "node-2"
    (b / "host").mkdir(parents=True)
    (b / "host" / "uptime.start").write_text("100.00 150.00\n")
    (b / "host" / "date.start").write_text("1764417073.000000000\n")
    (b / "dmesg.txt").write_text("[  100.005000] x\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    (cm,) = svc.store.query("SELECT offset_ns, uncertainty_ns, method FROM clock_map WHERE incident_id = ? "
                            "AND domain = 'boot'", [iid])
    assert cm["offset_ns"] == 1_764_417_073_000_000_000 - 100_005_000_000
    assert cm["uncertainty_ns"] == 55_000_000 + 2_000_100   # + 20 ppm of the 100.005 s stamp
    (ev,) = svc.store.query("SELECT ts_utc_ns FROM events WHERE incident_id = ?", [iid])
    assert ev["ts_utc_ns"] == 1_764_417_073_000_000_000


def test_btime_only_is_coarse():
    e = solve_boot("h", [Anchor("h", "btime", 0, 1_700_000_000 * 10**9, 10**9, "stat")])
    assert (e.offset_ns, e.uncertainty_ns, e.method) == (1_700_000_000 * 10**9, 10**9, "btime")


def test_median_of_pairs_and_spread_as_uncertainty():
    pairs = [Anchor("h", "uptime_date", 0, off, 10_000_000, "a") for off in (1_000_000_000, 1_020_000_000,
                                                                               5_000_000_000)]
    e = solve_boot("h", pairs)
    assert e.offset_ns == 1_020_000_000
    assert e.uncertainty_ns == 3_980_000_000   # a disagreeing anchor widens the stated uncertainty


def test_no_anchor_leaves_boot_sources_unplaced(svc, tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "dmesg.txt").write_text("[    5.000000] x\n")
    iid, rep = _analyze(svc, b)
    (ev,) = svc.store.query("SELECT ts_utc_ns FROM events WHERE incident_id = ?", [iid])
    assert ev["ts_utc_ns"] is None
    assert rep["sources"][0]["clock"]["offset_s"] is None
    assert rep["sources"][0]["clock"]["method"].startswith("none")


def test_records_of_an_earlier_boot_stay_unplaced(svc, tmp_path):
    b = tmp_path / "bundle" / "node-1"
    (b / "host").mkdir(parents=True)
    (b / "host" / "anchors.txt").write_text("100.00 200.00\n1764417073.000000000\n")
    (b / "dmesg.txt").write_text(
        "[  500.000000] before the reboot\n[  600.000000] still before\n"
        "[    0.000000] Linux version 6.1.0 (builder@host) #1 SMP\n[   50.000000] after the reboot\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    rows = svc.store.query("SELECT line, ts_utc_ns FROM events WHERE incident_id = ? ORDER BY line", [iid])
    placed = {r["line"]: r["ts_utc_ns"] for r in rows}
    assert placed[1] is None and placed[2] is None
    assert placed[4] == 1_764_417_073_000_000_000 - 100_005_000_000 + 50_000_000_000


def test_clocks_command(svc, tmp_path):
    import os
    import subprocess
    import sys
    b = tmp_path / "bundle" / "node-1"
    (b / "host").mkdir(parents=True)
    (b / "host" / "anchors.txt").write_text("1234.56 2000.00\n1764417073.250000000\n")
    (b / "dmesg.txt").write_text("[ 1200.000000] hello\n")
    home = tmp_path / "h"
    env = dict(os.environ, AFTERTRACE_HOME=str(home), COLUMNS="200")
    run = lambda *a: subprocess.run([sys.executable, "-m", "aftertrace.server.cli", *a], capture_output=True, text=True, env=env)
    assert run("analyze", str(tmp_path / "bundle")).returncode == 0
    iid = [l for l in run("incidents").stdout.split() if len(l) == 12][0]
    out = run("clocks", iid[:5]).stdout
    assert "node-1" in out and "+1764415838.685000 s" in out and "±34.000 ms" in out and "uptime+date" in out


def _ctime(ns: int) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%a %b %e %H:%M:%S %Y").replace("  ", " ")


def test_dmesg_T_pairs_bound_the_offset_and_flag_a_disagreeing_anchor(svc, tmp_path):
    true_off = 1_764_415_838_685_000_000
    raws = [1200_000_000_000 + k * 137_000_000 for k in range(12)]   # sub-second phases differ
    b = tmp_path / "bundle" / "node-1"
    (b / "host").mkdir(parents=True)
    raw_lines, t_lines = [], []
    for k, r in enumerate(raws):
        msg = f"eth0: event number {k}"
        raw_lines.append(f"[{r // 10**9:5d}.{(r % 10**9) // 1000:06d}] {msg}")
        t_lines.append(f"[{_ctime(true_off + r)}] {msg}")
    (b / "dmesg.txt").write_text("\n".join(raw_lines) + "\n")
    (b / "dmesg_T.txt").write_text("\n".join(t_lines) + "\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    (cm,) = svc.store.query("SELECT offset_ns, uncertainty_ns, method FROM clock_map WHERE incident_id = ? AND "
                            "domain = 'boot'", [iid])
    assert cm["method"] == "raw dmesg next to dmesg -T"
    assert abs(cm["offset_ns"] - true_off) <= cm["uncertainty_ns"] < 100_000_000   # narrowed well below 1 s
    # now an uptime+date anchor that says something 3 s different: kept, and reported as skew
    (b / "host" / "anchors.txt").write_text(f"1200.00 2000.00\n{(true_off + 1_200_005_000_000 + 3 * 10**9) / 1e9:.9f}\n")
    iid2, rep2 = _analyze(svc, tmp_path / "bundle")
    skews = [a for a in rep2["anomalies"] if a["kind"] == "clock_skew"]
    assert len(skews) == 1 and "disagree" in skews[0]["summary"] and skews[0]["provenance"] == "inferred"


_TWINS = """SELECT t.line, t.ts_utc_ns AS t_utc, r.ts_utc_ns AS raw_utc, {unc} AS unc, rt.by_line
             FROM events t JOIN sources s USING (incident_id, source_id)
             LEFT JOIN clock_map c ON c.incident_id = t.incident_id AND c.host = COALESCE(s.host, '')
                  AND c.domain = s.clock_domain
             LEFT JOIN row_times rt ON rt.incident_id = t.incident_id AND rt.source_id = t.source_id
                  AND rt.line = t.line
             LEFT JOIN events r ON r.incident_id = t.incident_id AND r.source_id = rt.by_source_id
                  AND r.line = rt.by_line
             WHERE t.incident_id = ? AND s.path LIKE '%dmesg_T.txt' ORDER BY t.line"""


def test_a_dmesg_T_record_takes_the_time_of_its_raw_copy(svc, tmp_path):
    from aftertrace.analysis.clocks import row_uncertainty_sql
    true_off = 1_764_415_838_685_000_000
    raws = [1200_000_000_000 + k * 137_000_000 for k in range(12)]
    b = tmp_path / "bundle" / "node-1"
    (b / "host").mkdir(parents=True)
    raw_lines = [f"[{r // 10**9:5d}.{(r % 10**9) // 1000:06d}] eth0: event number {k}" for k, r in enumerate(raws)]
    # the converted log was taken later: its first record is a raw record's text that repeats
    raw_lines.insert(0, "[  100.000000] eth0: link up")
    raw_lines.append(f"[ 1300.000000] eth0: link up")
    t_lines = [f"[{_ctime(true_off + 1300 * 10**9)}] eth0: link up"]
    t_lines += [f"[{_ctime(true_off + r)}] eth0: event number {k}" for k, r in enumerate(raws)]
    (b / "dmesg.txt").write_text("\n".join(raw_lines) + "\n")
    (b / "dmesg_T.txt").write_text("\n".join(t_lines) + "\n")
    iid, _ = _analyze(svc, tmp_path / "bundle")
    rows = svc.store.query(_TWINS.format(unc=row_uncertainty_sql("t")), [iid])
    assert len(rows) == 13
    # the repeated text pairs the first 'link up' of each log, 1200 s apart: not taken
    assert rows[0]["by_line"] is None and abs(rows[0]["t_utc"] - (true_off + 1300 * 10**9)) < 2 * 10**9
    for r in rows[1:]:
        assert r["t_utc"] == r["raw_utc"] is not None    # exactly the raw record's time and window
        (raw_unc,) = svc.store.query(
            "SELECT uncertainty_ns FROM clock_map WHERE incident_id = ? AND domain = 'boot'", [iid])
        assert r["unc"] == raw_unc["uncertainty_ns"] < 100_000_000


def test_two_hosts_with_their_own_boot_clocks(svc, tmp_path):
    """Injected offsets: host A booted 1.7 s later than the anchors of host B would suggest, host B
    runs 40 s behind; each host's own anchor places its own kernel lines at the true instant."""
    truth = 1_764_417_000_000_000_000
    for host, boot_at in (("node-1", truth - 500 * 10**9 + 1_700_000_000), ("node-2", truth - 900 * 10**9 - 40 * 10**9)):
        b = tmp_path / "bundle" / host
        (b / "host").mkdir(parents=True)
        up = truth + 60 * 10**9 - boot_at          # uptime read 60 s after the event
        (b / "host" / "anchors.txt").write_text(f"{up // 10**9}.{(up % 10**9) // 10**7:02d} 1.00\n"
                                                f"{(truth + 60 * 10**9) / 1e9:.9f}\n")
        r = truth - boot_at
        (b / "dmesg.txt").write_text(f"[{r // 10**9:5d}.{(r % 10**9) // 1000:06d}] the same instant on {host}\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    rows = svc.store.query("SELECT s.host, e.ts_utc_ns, c.uncertainty_ns FROM events e JOIN sources s "
                           "USING (incident_id, source_id) JOIN clock_map c ON c.incident_id = e.incident_id AND "
                           "c.host = s.host AND c.domain = 'boot' WHERE e.incident_id = ?", [iid])
    assert len(rows) == 2
    for r in rows:
        assert abs(r["ts_utc_ns"] - truth) <= r["uncertainty_ns"], r


def test_no_anchor_but_a_shared_death(svc, tmp_path):
    """The sample with its anchors taken away: only raw dmesg and the launcher's log remain. The
    OOM-killed rank's death, on the kernel clock and in torchrun's report, places the kernel log."""
    import json
    import shutil
    from pathlib import Path
    sample = Path(__file__).resolve().parents[2] / "sample_traces"
    b = tmp_path / "bundle" / "vm"
    (b / "logs").mkdir(parents=True)
    shutil.copy(sample / "oom-after-throttle/vm/dmesg.txt", b / "dmesg.txt")
    shutil.copy(sample / "oom-after-throttle/vm/logs/torchrun.log", b / "logs/torchrun.log")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    src = {s["path"]: s for s in rep["sources"]}
    assert src["vm/dmesg.txt"]["clock"]["method"].startswith("a process death")
    (oom,) = [a for a in rep["anomalies"] if a["kind"] == "oom_kill"]
    truth = json.loads((sample / "oom-after-throttle.truth.json").read_text())
    # the kernel printed the kill 13 ms before the recorder's poll saw it in memory.oom_control
    true_s = truth["events"]["oom_kill_seen"]["epoch_ns"] / 1e9 - 0.013
    err = abs(oom["ts"] - true_s)
    assert err < 1.0 and err <= oom["uncertainty_s"]


def test_drift_from_two_windows_is_measured_and_applied(svc, tmp_path):
    """The drift example of analysis/clocks.py's docstring: pairs 10 h apart, offsets 1.8 s apart."""
    b = tmp_path / "bundle" / "node-1"
    for name, up, wall in (("start", "1000.00", "1764417073.250000000"),
                           ("end", "37000.00", "1764453075.050000000")):   # +36000 s of uptime, +36001.8 s of wall
        (b / "host" / name).mkdir(parents=True)
        (b / "host" / name / "anchors.txt").write_text(f"{up} 0.00\n{wall}\n")
    (b / "dmesg.txt").write_text("[19000.000000] half way\n")
    iid, rep = _analyze(svc, tmp_path / "bundle")
    (cm,) = svc.store.query("SELECT offset_ns, drift_ppm, uncertainty_ns, method, evidence FROM clock_map "
                            "WHERE incident_id = ?", [iid])
    import json
    d = json.loads(cm["evidence"])["drift"]
    assert d["applied"] and d["ppm"] == pytest.approx(50.0, abs=0.01) and d["uncertainty_ppm"] < 1.0
    assert cm["drift_ppm"] == pytest.approx(50.0, abs=0.01) and "drift +50.0 ppm" in cm["method"]
    (ev,) = svc.store.query("SELECT ts_utc_ns FROM events WHERE incident_id = ?", [iid])
    first_pair_only = 1764417073.250 - 1000.005 + 19000.0
    assert ev["ts_utc_ns"] / 1e9 == pytest.approx(first_pair_only + 0.9, abs=0.002)


def test_drift_too_coarse_to_apply_is_reported_not_applied():
    a = [Anchor("h", "uptime_date:1", 1_078_935_000_000, 1_795_958_886_830_382_383 + 0, 10_000_000, "s"),
         Anchor("h", "uptime_date:2", 1_132_535_000_000, 1_795_958_940_425_026_587, 10_000_000, "s")]
    e = solve_boot("h", a)
    assert e.drift_ppm is None and e.drift is not None and not e.drift["applied"]
    assert e.drift["span_s"] == pytest.approx(53.6) and e.drift["uncertainty_ppm"] == pytest.approx(373.1, abs=0.1)


def test_kineto_collectives_and_steps_get_utc_times(svc, tmp_path):
    import shutil
    from pathlib import Path
    data = Path(__file__).resolve().parents[1] / "data" / "torch_trace"
    b = tmp_path / "bundle" / "node-1"
    b.mkdir(parents=True)
    for f in sorted(data.glob("*.json*"))[:4]:
        shutil.copy(f, b / f.name)
    iid, rep = _analyze(svc, tmp_path / "bundle")
    for table in ("collectives", "steps"):
        rows = svc.store.query(
            f"""SELECT t.ts_raw_ns, t.ts_utc_ns, c.offset_ns FROM {table} t JOIN sources s USING (incident_id, source_id)
                JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
                 AND c.domain = s.clock_domain WHERE t.incident_id = ?""", [iid])
        assert rows, table
        assert all(r["ts_utc_ns"] == r["ts_raw_ns"] + r["offset_ns"] for r in rows), table


def test_a_worker_reported_at_its_error_record_time_is_no_clock_skew(tmp_path):
    # sample_traces/collected-hang: torchrun reports rank 0's exit at the time its @record error
    # file was written, ~1 s before perf saw the process exit; that is no clock disagreement
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    iid = svc.submit_path(ROOT / "sample_traces" / "collected-hang").incident_id
    rep = svc.analyze(iid)
    assert not [a for a in rep["anomalies"] if a["kind"] == "clock_skew"]
    (boot,) = [r for r in svc.clock_table(iid) if r["domain"] == "boot"]
    assert boot["method"].startswith("perf reference time") and boot["uncertainty_ns"] == 1_000_000
    ev = json.loads(boot["evidence"])
    assert any("process death" in m[0] for m in ev["other_methods"]) and not ev["conflicts"]


def test_kernel_wall_docstring_example():
    from aftertrace.analysis.clocks import ClockEntry, solve_kernel_wall
    boot = ClockEntry("vm", "boot", 1_796_161_653_812_760_000, 1_000_000, "perf reference time")
    t = 1_796_163_296_000_000_000          # "[Tue Dec  1 22:14:56 2026]"
    pairs = [{"raw_ns": 1_643_343_165_000, "t_ns": t, "raw_path": "dmesg.txt", "t_path": "dmesg_T.txt"},
             {"raw_ns": 1_643_912_000_000, "t_ns": t, "raw_path": "dmesg.txt", "t_path": "dmesg_T.txt"}]
    e = solve_kernel_wall("vm", boot, pairs, {"dmesg_ctime"})
    assert (e.domain, e.offset_ns, e.uncertainty_ns) == ("kernel_wall", 1_440_342_500, 284_417_500 + 1_000_000)
    for p in pairs:      # each record's true time lies in its stated window
        assert abs(t + e.offset_ns - (p["raw_ns"] + boot.offset_ns)) <= e.uncertainty_ns
    alone = solve_kernel_wall("vm", None, [], {"dmesg_ctime"})
    assert (alone.offset_ns, alone.uncertainty_ns) == (750_000_000, 1_250_000_000)
    assert "no raw kernel log" in alone.method


def test_paired_readings_do_not_depend_on_the_order_rows_come_in(tmp_path):
    """An uptime file beside two date files of the same resolution, read 6 ms apart: the pair is
    made with the first date file by path, whichever order the store holds the facts in (a query
    without an order gave either, so one boot offset in a few moved between runs)."""
    from aftertrace.analysis.clocks import _paired_readings
    from aftertrace.server.store import Store
    store = Store(tmp_path / "s.duckdb")
    srcs = [(1, "vm/host/start/proc_uptime", [("reading.boottime_ns", "1608000000000"), ("reading.tag", "start")]),
            (2, "vm/host/start/date", [("reading.wall_ns", "1796163261006000000"), ("reading.wall_res_ns", "1000000"),
                                       ("reading.tag", "start")]),
            (3, "vm/host/start/date_iso", [("reading.wall_ns", "1796163261000000000"),
                                           ("reading.wall_res_ns", "1000000"), ("reading.tag", "start")])]
    got = []
    for iid, order in (("a", srcs), ("b", srcs[::-1])):
        store.insert_rows("sources", [{"incident_id": iid, "source_id": sid, "path": path, "host": "vm",
                                       "kind": "host_info", "status": "parsed"} for sid, path, _ in order])
        store.insert_rows("facts", [{"incident_id": iid, "source_id": sid, "host": None, "key": k, "value": v,
                                     "line": 1} for sid, _, facts in order for k, v in reversed(facts)])
        got.append([(a.local_ns, a.wall_ns, a.source) for a in _paired_readings(store, iid, set())])
    assert got[0] == got[1] == [(1608000000000, 1796163261006000000 + 500_000,
                                 "vm/host/start/proc_uptime + vm/host/start/date")]
