"""One untimed copy of a cgroup or PSI file: its counters are findings with no time."""
from __future__ import annotations

import shutil
from pathlib import Path

from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

REAL = Path(__file__).resolve().parents[1] / "data" / "realworld" / "dev"


def _analyze(tmp_path, *names) -> dict:
    b = tmp_path / "bundle"
    for n in names:
        shutil.copytree(REAL / n, b / n)
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    return svc.analyze(svc.submit_path(b).incident_id)


def _findings(rep) -> list[dict]:
    out = [rep["failure"], rep["origin"], *rep["victims"], *rep["anomalies"]]
    out += [l for c in rep["chains"] for l in c["links"]]
    return [f for f in out if f]


def test_the_module_worked_example(tmp_path):
    rep = _analyze(tmp_path, "miha-site-blog005")
    (src,) = rep["sources"]
    assert (src["kind"], src["format"], src["status"], src["clock"]["domain"]) == ("cgroup", "cgroup_file", "parsed",
                                                                                  "none")
    thr = {f["summary"] for f in _findings(rep) if f["kind"] == "cpu_throttle"}
    assert thr == {"The CPU quota of cgroup /miha-site-blog005 ran out: throttled in 100 of 218 CPU periods "
                   "(45.9 %), 9.9 s in all, since it was created (one copy of its cpu.stat, with no time)"}


def test_low_pressure_and_plain_counters_are_no_finding(tmp_path):
    # /proc/pressure/io at 1.11 % and cpuacct counters: read, and nothing to point at
    rep = _analyze(tmp_path, "coreos-overlay-638", "coreos-bugs-71")
    assert {s["format"] for s in rep["sources"]} == {"cgroup_file"}
    assert all(s["status"] == "parsed" for s in rep["sources"])
    assert _findings(rep) == []
