"""Metric detectors on real recorded incidents, end to end through the pipeline.

1. sample_traces/oom-after-throttle (cgroup v1, quota cut to 30000/100000 at a known time, a
   leak to the memcg OOM): cpu_throttle within one snapshot interval of the change, cpu_pressure,
   memory_growth before the OOM with a projection near the real OOM, the cgroup's OOM counter
   merged into the kernel's oom_kill finding.
2. tests/data/cgroup/recorded (ISO-named snapshot folders, quota cut to 20000/100000, leak to a
   300 MiB limit, no dmesg): the same findings from the counters alone.
"""
from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
TRUTH = json.loads((ROOT / "sample_traces" / "oom-after-throttle.truth.json").read_text())
REC = ROOT / "tests" / "data" / "cgroup" / "recorded"
REC_TRUTH = json.loads((REC / "truth.json").read_text())
from aftertrace.ingest.timeparse import NS


def analyze(tmp_path, bundle: Path) -> dict:
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    return svc.analyze(svc.submit_path(bundle).incident_id)


def kinds(rep, kind):
    return [a for a in rep["anomalies"] if a["kind"] == kind]


def ts_ns(a) -> int:
    return round(a["ts"] * 1e6) * 1000          # report ts is float seconds: compare at µs


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("s")
    b = d / "bundle" / "vm"
    for part in ("cgroup", "host"):
        shutil.copytree(SAMPLE / "vm" / part, b / part)
    for f in ("dmesg.txt", "dmesg_T.txt"):
        shutil.copy(SAMPLE / "vm" / f, b / f)
    return analyze(d, d / "bundle")


def test_the_series_is_one_source(sample_report):
    src = [s for s in sample_report["sources"] if s["kind"] == "cgroup"]
    assert [(s["path"], s["status"], s["host"]) for s in src] == [("vm/cgroup/", "parsed", "vm")]
    assert not any("/cgroup/1795" in s["path"] for s in sample_report["sources"])


def test_cpu_throttle_onset_within_one_snapshot_interval(sample_report):
    (a,) = kinds(sample_report, "cpu_throttle")
    applied = TRUTH["events"]["throttle_applied"]["epoch_ns"]
    interval = float(TRUTH["params"]["SNAP_INTERVAL"]) * NS
    assert 0 <= ts_ns(a) - applied <= interval
    assert a["source"] == "vm/cgroup/" and a["host"] == "vm"
    assert "cgroup /aftertrace_job" in a["summary"] and "quota 0.30 CPUs" in a["summary"]
    ev = {(e["source"], e["text"]) for e in a["evidence"]}
    assert ("vm/cgroup/1795958903.909024/cpu/aftertrace_job/cpu.cfs_quota_us", "-1") in ev
    assert ("vm/cgroup/1795958904.409226/cpu/aftertrace_job/cpu.cfs_quota_us", "30000") in ev
    assert ("vm/cgroup/1795958904.409226/cpu/aftertrace_job/cpu.stat", "throttled_time 254935926") in ev


def test_cpu_pressure_on_the_host_at_the_throttle(sample_report):
    (a,) = kinds(sample_report, "cpu_pressure")
    assert "the host" in a["summary"]
    assert abs(ts_ns(a) - TRUTH["events"]["throttle_applied"]["epoch_ns"]) <= NS
    assert all(e["source"].endswith("proc/pressure/cpu") for e in a["evidence"])
    assert not kinds(sample_report, "memory_pressure")


def test_memory_growth_before_the_oom_with_a_projection(sample_report):
    (a,) = kinds(sample_report, "memory_growth")
    leak = TRUTH["leak"]["first_leak_epoch_ns"]
    oom = TRUTH["oom_kill"]["epoch_s_est"] * NS
    assert leak <= ts_ns(a) <= leak + NS            # the snapshot after the first leaking step
    assert ts_ns(a) < oom - 10 * NS
    eta = float(re.search(r"reached ([\d.]+) s after onset", a["summary"]).group(1))
    assert abs(eta - (oom - ts_ns(a)) / NS) / ((oom - ts_ns(a)) / NS) < 0.25
    assert "2.50 GiB limit" in a["summary"]
    assert [e["text"] for e in a["evidence"]] == ["893657088", "993005568", "2641891328", "2684354560"]


def test_oom_counter_is_merged_into_the_kernel_oom_finding(sample_report):
    (a,) = kinds(sample_report, "oom_kill")
    assert a["pid"] == 17988
    texts = [(e["source"], e["text"]) for e in a["evidence"]]
    assert ("vm/cgroup/1795958935.408982/memory/aftertrace_job/memory.oom_control", "oom_kill 0") in texts
    assert ("vm/cgroup/1795958935.908970/memory/aftertrace_job/memory.oom_control", "oom_kill 1") in texts


@pytest.fixture(scope="module")
def recorded_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("r")
    with tarfile.open(REC / "snapdirs.tar.gz") as t:
        t.extractall(d / "x", filter="data")
    (d / "bundle" / "node-1").mkdir(parents=True)
    shutil.move(d / "x" / "snapdirs", d / "bundle" / "node-1" / "cgroup")
    return analyze(d, d / "bundle")


def test_recorded_series_throttle_growth_and_oom_from_counters(recorded_report):
    rep = recorded_report
    t = REC_TRUTH
    interval = t["interval_s"] * NS
    (thr,) = [a for a in kinds(rep, "cpu_throttle") if f"/{t['name']}" in a["summary"]]
    assert 0 <= ts_ns(thr) - t["throttle_applied_ns"] <= interval * 1.1
    (mg,) = kinds(rep, "memory_growth")
    assert t["leak_start_ns"] <= ts_ns(mg) <= t["leak_start_ns"] + 2 * interval
    assert ts_ns(mg) < t["leak_exit_seen_ns"] and "300.00 MiB limit" in mg["summary"]
    (oom,) = kinds(rep, "oom_kill")
    assert oom["source"] == "node-1/cgroup/" and oom["provenance"] == "read"
    assert t["leak_start_ns"] < ts_ns(oom) <= t["leak_exit_seen_ns"] + interval
    assert [e["text"] for e in oom["evidence"]] == ["oom_kill 0", "oom_kill 1"]
