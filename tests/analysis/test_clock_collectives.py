"""Cross-host offsets from collectives: the module docstring's worked example, on the real sample."""
import gzip
import json
from pathlib import Path

import pytest

from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

PROFILER = Path(__file__).resolve().parents[2] / "sample_traces/oom-after-throttle/vm/profiler"
SHIFT_NS = 1_700_000_000


def _copy(src: Path, dest: Path, shift_ns: int = 0) -> None:
    data = json.loads(gzip.decompress(src.read_bytes()))
    data["baseTimeNanoseconds"] = int(data["baseTimeNanoseconds"]) + shift_ns
    dest.write_bytes(gzip.compress(json.dumps(data).encode()))


@pytest.fixture(scope="module", params=[SHIFT_NS, -40_000_000_000], ids=["+1.7s", "-40s"])
def shifted(tmp_path_factory, request):
    shift = request.param
    root = tmp_path_factory.mktemp("cc")
    for f in sorted(PROFILER.iterdir()):
        rank0 = f.name.startswith("vm_17988.")
        d = root / "bundle" / ("node-1" if rank0 else "node-2")
        d.mkdir(parents=True, exist_ok=True)
        _copy(f, d / f.name, 0 if rank0 else shift)
    svc = Service(Settings.from_env(home=root / "home"))
    iid = svc.submit_path(root / "bundle").incident_id
    rep = svc.analyze(iid)
    return svc, iid, rep, shift


def test_shift_recovered_within_a_millisecond(shifted):
    svc, iid, rep, shift = shifted
    cm = {r["host"]: r for r in svc.store.query(
        "SELECT host, offset_ns, uncertainty_ns, method FROM clock_map WHERE incident_id = ? AND domain = 'wall'",
        [iid])}
    assert cm["node-1"]["offset_ns"] == 0 and "reference host" in cm["node-1"]["method"]
    n2 = cm["node-2"]
    assert n2["method"].startswith("collectives: ") and "node-1" in n2["method"]
    err = n2["offset_ns"] + shift
    assert abs(err) < 1_000_000, err                       # within 1 ms
    assert abs(err) <= n2["uncertainty_ns"] < 1_000_000    # and the stated uncertainty covers it


def test_events_of_both_hosts_land_on_one_timeline(shifted):
    svc, iid, rep, shift = shifted
    rows = svc.store.query(
        """SELECT s.host, min(e.ts_utc_ns) AS first FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.name LIKE 'ProfilerStep#%' GROUP BY s.host""", [iid])
    first = {r["host"]: r["first"] for r in rows}
    # the two ranks start their profiled steps within a step of each other, not seconds apart
    assert abs(first["node-1"] - first["node-2"]) < 500_000_000


def test_one_host_gets_no_cross_host_estimate(tmp_path):
    from aftertrace.analysis.clock_collectives import host_offsets
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    b = tmp_path / "bundle" / "node-1"
    b.mkdir(parents=True)
    for f in sorted(PROFILER.iterdir())[:4]:
        _copy(f, b / f.name)
    iid = svc.submit_path(tmp_path / "bundle").incident_id
    svc.analyze(iid)
    assert host_offsets(svc.store, iid) == []
