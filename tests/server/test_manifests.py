"""The collector's manifests through the whole pipeline: found in any folder, parsed as sources,
their hosts and time zone used, and a snapshot series with extra copied files still one source.

Data: sample_traces/collected-hang and collected-oom-after-throttle (real bundles of
`aftertrace collect`), tests/data/cgroup/members (real copies of cgroup.procs, freezer.state,
/proc/<pid>/status ..., see its PROVENANCE.md).
"""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

from aftertrace.server.service import Service

ROOT = Path(__file__).resolve().parents[2]
HANG = ROOT / "sample_traces" / "collected-hang"
OOM = ROOT / "sample_traces" / "collected-oom-after-throttle"
MEMBERS = ROOT / "tests" / "data" / "cgroup" / "members"


def analyse(settings, path: Path):
    svc = Service(settings)
    sub = svc.submit_path(path)
    rep = svc.analyze(sub.incident_id)
    return svc, sub.incident_id, rep


def q(svc, sql: str, iid: str) -> list[dict]:
    return svc.store.query(sql, [iid])


def test_a_collected_bundle_tarred_as_a_folder_keeps_its_manifest(tmp_path, settings):
    arc = tmp_path / "b.tgz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(HANG, arcname="bundle-20261129T185037Z")
    svc, iid, rep = analyse(settings, arc)
    src = {s["path"]: s for s in rep["sources"]}
    man = src["bundle-20261129T185037Z/aftertrace-manifest.json"]
    assert (man["kind"], man["status"], man["host"]) == ("host_info", "parsed", "vm")
    assert rep["time_zone"] == {"zone": "UTC", "from": "manifest"}
    rows = q(svc, "SELECT path, format, host_from FROM sources WHERE incident_id = ? AND path LIKE '%/vm/cgroup/'", iid)
    assert rows == [{"path": "bundle-20261129T185037Z/vm/cgroup/", "format": "cgroup_snapshots",
                     "host_from": "manifest"}]
    ev = q(svc, """SELECT e.name, e.kind, e.pid, e.ts_utc_ns FROM events e JOIN sources s USING (incident_id, source_id)
                   WHERE e.incident_id = ? AND s.format = 'collect_manifest' AND e.kind IS NOT NULL""", iid)
    assert ev == [{"name": "job_failure", "kind": "job_failure", "pid": 28739, "ts_utc_ns": 1795978239270000000}]
    m = q(svc, "SELECT count(*) AS n, count(ts_utc_ns) AS placed, min(ts_utc_ns = ts_raw_ns) AS same "
               "FROM members WHERE incident_id = ?", iid)
    assert m == [{"n": 18, "placed": 18, "same": True}]
    assert any(a["kind"] == "job_failure" and a["source"].endswith("aftertrace-manifest.json")
               for a in rep["anomalies"])
    svc.store.close()


def test_node_bundles_side_by_side_each_use_their_manifest(tmp_path, settings):
    up = tmp_path / "upload"
    shutil.copytree(HANG, up / "bundle-a")
    shutil.copytree(OOM, up / "bundle-b")
    svc, iid, rep = analyse(settings, up)
    src = {s["path"]: s for s in rep["sources"]}
    for b in ("bundle-a", "bundle-b"):
        assert src[f"{b}/aftertrace-manifest.json"]["status"] == "parsed"
    rows = q(svc, "SELECT path, host, host_from FROM sources WHERE incident_id = ? AND path LIKE '%/vm/%' "
                  "ORDER BY path", iid)
    assert rows and all(r["host"] == "vm" and r["host_from"] == "manifest" for r in rows)
    pids = q(svc, "SELECT value FROM facts WHERE incident_id = ? AND key = 'rank_pid' ORDER BY value", iid)
    assert [p["value"] for p in pids] == ["0=26247", "0=28797", "1=26248", "1=28798"]
    svc.store.close()


def test_a_manifest_written_by_hand_still_gives_its_zone_and_hosts(tmp_path, settings):
    b = tmp_path / "b"
    (b / "n1").mkdir(parents=True)
    shutil.copy(OOM / "vm" / "dmesg.txt", b / "n1" / "dmesg.txt")
    (b / "aftertrace-manifest.json").write_text(json.dumps(
        {"time_zone": "Europe/Berlin", "hosts": {"node-7": {"paths": ["n1/"]}}}))
    svc, iid, rep = analyse(settings, b)
    src = {s["path"]: s for s in rep["sources"]}
    assert (src["aftertrace-manifest.json"]["kind"], src["aftertrace-manifest.json"]["status"]) == ("host_info", "parsed")
    assert src["n1/dmesg.txt"]["host"] == "node-7"
    assert rep["time_zone"] == {"zone": "Europe/Berlin", "from": "manifest"}
    svc.store.close()


def test_extra_copies_in_snapshot_folders_are_read_not_listed(tmp_path, settings):
    """Real cgroup.procs, tasks, freezer.state, proc/<pid>/status ... in every snapshot folder of a
    collected bundle: no unrecognized sources; membership and process states are stored."""
    b = tmp_path / "b"
    shutil.copytree(HANG, b)
    with tarfile.open(MEMBERS / "series.tar.gz") as t:
        t.extractall(tmp_path / "rec", filter="data")
    rec = sorted((tmp_path / "rec" / "vm" / "cgroup").iterdir())
    for i, snap in enumerate(sorted((b / "vm" / "cgroup").iterdir())):
        for f in rec[i % len(rec)].rglob("*"):
            dst = snap / f.relative_to(rec[i % len(rec)])
            if f.is_file() and not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, dst)
        shutil.copy(MEMBERS / "memory.numa_stat", snap / "memory.numa_stat")
    svc, iid, rep = analyse(settings, b)
    assert not [s for s in rep["sources"] if s["status"] == "unrecognized"]
    (cg,) = [s for s in rep["sources"] if s["path"] == "vm/cgroup/"]
    assert cg["status"] == "partial" and cg["issues"] == 1
    (iss,) = q(svc, "SELECT p.kind, p.message FROM parse_issues p JOIN sources s USING (incident_id, source_id) "
                    "WHERE p.incident_id = ? AND s.path = 'vm/cgroup/'", iid)
    assert iss["kind"] == "not_read" and iss["message"].startswith("71 snapshots hold 'memory.numa_stat', not read")
    n = q(svc, "SELECT count(*) AS n FROM members WHERE incident_id = ? AND basis = 'cgroup.procs' "
               "AND ts_utc_ns IS NOT NULL", iid)[0]["n"]
    assert n > 0
    st = q(svc, "SELECT count(*) AS n FROM events WHERE incident_id = ? AND name = 'proc_state' "
                "AND ts_utc_ns IS NOT NULL", iid)[0]["n"]
    assert st > 0
    svc.store.close()
