"""``aftertrace collect``: the ring's limits, the snapshot layout as the real cgroup parser reads
it, the manifest, every trigger, and a bundle the pipeline ingests.

Most tests need neither root nor cgroups: the recorder runs in-process around ``sh`` jobs, and
the bundle-level tests feed the ring with the real recorded sample (sample_traces/oom-after-throttle:
its kernel log, cgroup snapshots, anchors and torchrun log) through the collector's own writer.
Tests that create cgroups or run perf are skipped without root (they say why).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aftertrace.ingest.collect import add_arguments, config_from_args, parse_duration, parse_size
from aftertrace.ingest.collect import cgroups as cgmod
from aftertrace.ingest.collect.host import anchor, anchors_files, date_c
from aftertrace.ingest.collect.kmsg import parse_record, render
from aftertrace.ingest.collect.perf import _fix_header
from aftertrace.ingest.collect.procs import ProcTable
from aftertrace.ingest.collect.recorder import Config, Recorder
from aftertrace.ingest.collect.ring import NS, Ring
from aftertrace.ingest.collect.trigger import Reason, TriggerState, Watchdog
from aftertrace.ingest.collect.writer import BundleRequest, BundleWriter, snap_dir_name

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle" / "vm"
LINUX = sys.platform.startswith("linux")
IS_ROOT = LINUX and os.geteuid() == 0
V1_MEMORY = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()

pytestmark = pytest.mark.skipif(not LINUX, reason="the collector reads /proc and /sys: Linux only")


# -- arguments ---------------------------------------------------------------------------
def test_durations_sizes_and_arguments():
    assert parse_duration("15m") == 900 and parse_duration("500ms") == 0.5 and parse_duration("2h") == 7200
    assert parse_duration("30") == 30 and parse_duration("1.5s") == 1.5
    assert parse_size("256") == 256 << 20 and parse_size("2G") == 2 << 30 and parse_size("800K") == 800 << 10
    with pytest.raises(ValueError):
        parse_duration("soon")
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(["--out", "x", "--keep", "2m", "--", "torchrun", "--nproc", "2", "t.py"]))
    assert cfg.command == ["torchrun", "--nproc", "2", "t.py"] and cfg.keep_s == 120 and cfg.pid is None
    for bad in (["--out", "x"], ["--out", "x", "--pid", "1", "--", "sh"], ["--out", "x", "--interval", "1ms", "--", "sh"],
                ["--out", "x", "--watchdog", "(", "--", "sh"]):
        with pytest.raises(ValueError):
            config_from_args(p.parse_args(bad))


def test_cli_has_the_collect_subcommand():
    from aftertrace.server.cli import build_parser
    a = build_parser().parse_args(["collect", "--out", "d", "--perf", "--", "sh", "-c", "exit 1"])
    assert a.cmd == "collect" and a.perf and a.command[-3:] == ["sh", "-c", "exit 1"]


# -- the ring --------------------------------------------------------------------------------
def _ring(tmp_path, keep_s=60, max_bytes=64 << 20):
    return Ring(str(tmp_path / "ring"), int(keep_s * NS), max_bytes)


def test_ring_rotates_and_prunes_by_age(tmp_path):
    r = _ring(tmp_path, keep_s=60)
    s = r.stream("kmsg", rotate_s=10)
    t0 = 1_800_000_000 * NS
    for i in range(30):                          # one line every 5 s for 150 s
        s.write(f"line {i}\n".encode(), t0 + i * 5 * NS)
    segs = s.segments()
    assert len(segs) == 15 and segs[-1].active and not any(x.active for x in segs[:-1])
    st = r.prune(t0 + 150 * NS)
    kept = s.segments()
    # closed segments ending before now - 60 s are gone; the rest (and the active one) stay
    assert st.age > 0 and all(x.end_ns is None or x.end_ns >= t0 + 90 * NS for x in kept)
    text = b"".join(s.read_segments()).decode()
    assert "line 29" in text and "line 0\n" not in text
    assert r.pruned["kmsg"]["age"] == st.age
    # closed segments were gzipped and still read back
    assert any(x.compressed for x in kept)


def test_ring_prunes_oldest_first_to_its_size_and_keeps_pinned_last(tmp_path):
    r = _ring(tmp_path, keep_s=3600, max_bytes=4 << 20)
    pinned = r.stream("output.head", rotate_s=10 ** 9, compress=False, pinned=True)
    pinned.write(b"job start\n" * 1000, 1_800_000_000 * NS)
    big = r.stream("perfish", rotate_s=1, compress=False)
    t0 = 1_800_000_000 * NS
    blob = os.urandom(512 * 1024)               # incompressible, 0.5 MiB per segment
    for i in range(20):
        big.write(blob, t0 + i * 2 * NS)
    r.prune(t0 + 41 * NS)
    assert r.total_bytes() <= 4 << 20
    ends = [x.end_ns for x in big.segments() if not x.active]
    assert ends and min(ends) > t0 + 20 * NS        # the oldest went first
    assert pinned.segments() and r.pruned["perfish"]["size"] >= 10
    assert "output.head" not in r.pruned


def test_ring_write_errors_are_counted_not_raised(tmp_path):
    r = _ring(tmp_path)
    s = r.stream("x")
    shutil.rmtree(s.dir)
    s.write(b"a\n")
    assert s.errors == 1 and s.last_error


# -- pieces ----------------------------------------------------------------------------------
def test_kmsg_records_become_raw_dmesg_lines():
    r = parse_record(b"6,1234,1127868140,-;Memory cgroup out of memory: Killed process 17988 (python3)\n"
                     b" SUBSYSTEM=memory\n")
    assert r == (6, 1234, 1127868140, "Memory cgroup out of memory: Killed process 17988 (python3)")
    assert render(r[2], r[3]) == "[ 1127.868140] Memory cgroup out of memory: Killed process 17988 (python3)\n"
    assert render(5_000_001, "a\\x0ab".encode().decode("unicode_escape")) == "[    5.000001] a\n[    5.000001] b\n"
    assert parse_record(b"4,9,10,c;tab\\x09x")[3] == "tab\tx"
    assert parse_record(b"garbage") is None


def test_anchor_files_pair_each_uptime_with_its_own_wall_reading():
    a = anchor()
    assert a["uptime"] and abs(a["realtime_ns"] - time.time_ns()) < 5 * NS and a["read_ns"] < NS
    pairs = [{"uptime": f"{100 + i}.00 5.00", "wall_ns": 1_800_000_000 * NS + i * NS} for i in range(3)]
    (text,) = anchors_files(pairs)
    assert text == ("100.00 5.00\n1800000000.000000000\n\n101.00 5.00\n1800000001.000000000\n\n"
                    "102.00 5.00\n1800000002.000000000\n")
    many = anchors_files([dict(pairs[0])] * 300)
    assert len(many) == 3          # at most 120 pairs a file: the host-info parser's size limit
    assert "UTC" in date_c(1_800_000_000 * NS, "UTC")


def test_watchdog_and_trigger_state():
    w = Watchdog(["custom hang"], defaults=True)
    assert w.check("[rank0]: RuntimeError: ... Timed out waiting 20000ms for recv operation to complete")
    assert w.check("Timed out waiting 20000ms for recv operation to complete") is None   # once per pattern
    assert w.check("a custom hang here") == "custom hang"
    assert w.check("step=3 loss=1.0") is None
    ts = TriggerState(linger_ns=2 * NS)
    ts.add(Reason("watchdog", "x", 10 * NS))
    assert not ts.due(11 * NS) and ts.due(12 * NS) and ts.due(11 * NS, job_ended=True)
    ts.add(Reason("exit", "code 1", 11 * NS))
    assert ts.due(11 * NS) and [r.kind for r in ts.take()] == ["watchdog", "exit"] and not ts.pending


def test_perf_zero_sample_time_header_lines_are_left_out():
    c = (b"# ========\n# captured on    : Sun Nov 29 18:16:49 2026\n# time of first sample : 0.000000\n"
         b"# time of last sample : 0.000000\n# sample duration :      0.000 ms\n"
         b"# reference time: 2026-11-29 18:16:19.636747 = 1795976179.636747 (TOD) = 18371.744293930 (monotonic)\n"
         b"# ========\n#\nrm 31374 [000] 18371.846485: sched:sched_process_exit: comm=rm\n")
    out, still = _fix_header(c)
    assert b"time of first sample" not in out and b"sample duration" not in out and not still
    assert b"# reference time:" in out and out.endswith(b"comm=rm\n")
    real = c.replace(b"0.000000\n# time of last", b"18371.846485\n# time of last")
    assert b"time of first sample : 18371.846485" in _fix_header(real)[0]


def test_mountinfo_and_cgroup_paths(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text(
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /kubepods /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
        "22 1 0:21 / /proc rw - proc proc rw\n")
    m = cgmod.read_mounts(str(mi))
    assert [(x.mountpoint, x.fstype, sorted(x.controllers)) for x in m] == [
        ("/sys/fs/cgroup/cpu", "cgroup", ["cpu"]), ("/sys/fs/cgroup/memory", "cgroup", ["memory"]),
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", ["cpu", "cpuacct"]), ("/sys/fs/cgroup/unified", "cgroup2", [])]
    assert cgmod._in_mount(m[1], "/job/a") == "/sys/fs/cgroup/memory/job/a"
    assert cgmod._in_mount(m[3], "/kubepods/pod1") == "/sys/fs/cgroup/unified/pod1"
    assert cgmod._rel("/sys/fs/cgroup/memory/job", m[1]) == "memory/job"
    # the snapshot paths resolve to the entities the ingest expects
    from aftertrace.ingest.formats._cgroup_read import resolve
    assert resolve("memory/job/memory.usage_in_bytes").entity == "/job"
    assert resolve("cpu,cpuacct/job/cpu.stat").entity == "/job"
    assert resolve("proc/4242/status").entity == "pid 4242"
    # this host: our own cgroups resolve without error (whatever they are)
    dirs, notes = cgmod.cgroups_of(os.getpid(), cgmod.read_mounts())
    assert all(os.path.isdir(d.path) for d in dirs) and isinstance(notes, list)


def test_process_tree_reads_ranks_from_the_environment():
    p = subprocess.Popen(["sh", "-c", "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 sleep 5 & "
                                      "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 sleep 5 & wait"])
    try:
        t = ProcTable([p.pid])
        for _ in range(50):
            t.refresh()
            if len(t.ranks()) == 2:
                break
            time.sleep(0.05)
        ranks = t.ranks()
        assert sorted(ranks) == [0, 1] and all(r.ppid == p.pid for r in ranks.values())
        assert t.launcher().pid == p.pid and ranks[1].env["LOCAL_RANK"] == "1"
        assert p.pid in t.status_pids()
    finally:
        p.kill()
        p.wait()
    t.refresh()
    assert all(x.ended_ns is not None for x in t.procs.values())


# -- the snapshot layout, read by the real cgroup parser ---------------------------------------
def _copy_sample_cgroup_tree(tmp_path, snap: str) -> Path:
    """A fake cgroup v1 mount (cpu, cpuacct, memory) holding the sample's files of one snapshot."""
    fake = tmp_path / "sys" / "fs" / "cgroup"
    src = SAMPLE / "cgroup" / snap
    for f in src.rglob("*"):
        if f.is_file() and not f.relative_to(src).parts[0] == "proc":
            d = fake / f.relative_to(src)
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, d)
    return fake


def _parse_group(bundle: Path, tmp_path):
    from aftertrace.ingest.parse import ParseJob, parse_file
    from aftertrace.ingest.registry import default_registry, write_group_manifest
    import pyarrow.parquet as pq
    files = sorted((str(p.relative_to(bundle)), str(p)) for p in bundle.rglob("*") if p.is_file())
    reg = default_registry()
    groups = reg.claim_groups(files)
    ((parser, g),) = [(p, g) for p, g in groups if p.name == "cgroup_snapshots"]
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    man = write_group_manifest(g, work / "g.json")
    r = parse_file(ParseJob(man, g.rel, str(work / "g"), None, "UTC", parser.name), reg)
    rows = [row for f in r.parts.get("metrics", []) for row in pq.read_table(f).to_pylist()]
    return g, r, rows


def test_snapshots_are_laid_out_as_the_cgroup_parser_reads_them(tmp_path):
    fake = _copy_sample_cgroup_tree(tmp_path, "1795958904.409226")     # quota 30000, throttled
    snap = cgmod.Snapshotter()
    dirs = [cgmod.CgDir(str(fake / c / "aftertrace_job"), f"{c}/aftertrace_job", 1, (c,), "/aftertrace_job")
            for c in ("cpu", "cpuacct", "memory")]
    assert snap.set_dirs(dirs) and not snap.set_dirs(dirs)
    ring = _ring(tmp_path)
    s = ring.stream("snap", ext="jsonl")
    t0 = 1_795_958_904_409_226_000
    me = os.getpid()
    for i in range(3):
        files = snap.read([me])
        assert "memory/aftertrace_job/memory.stat" in files and f"proc/{me}/status" in files
        s.write((json.dumps({"t": t0 + i * 500_000_000, "f": files}) + "\n").encode(), t0 + i * 500_000_000)
    req = BundleRequest(out_dir=str(tmp_path), window_start_ns=t0 - NS, window_end_ns=t0 + 10 * NS,
                        facts={"hostname": "node-7"})
    w = BundleWriter(ring, req)
    w.tmp = str(tmp_path / "b")
    w.write_snapshots()
    bundle = tmp_path / "b"
    assert (bundle / "node-7/cgroup" / snap_dir_name(t0) / "cpu/aftertrace_job/cpu.stat").read_text() == \
        (SAMPLE / "cgroup/1795958904.409226/cpu/aftertrace_job/cpu.stat").read_text()
    g, r, rows = _parse_group(bundle, tmp_path)
    assert g.rel == "node-7/cgroup/" and r.status == "parsed" and r.issues == 0
    assert r.attrs["snapshots"] == 3 and r.clock_domain == "wall"
    got = {(x["entity"], x["metric"]) for x in rows}
    for want in (("/aftertrace_job", "cpu.nr_throttled"), ("/aftertrace_job", "cpu.quota_ns"),
                 ("/aftertrace_job", "cpu.usage_ns"), ("/aftertrace_job", "memory.usage_bytes"),
                 ("/aftertrace_job", "memory.limit_bytes"), ("/aftertrace_job", "memory.oom_kill"),
                 (f"pid {me}", "proc.vm_rss_bytes"), ("host", "host.load1")):
        assert want in got, want
    times = sorted({x["ts_raw_ns"] for x in rows if x["metric"] == "cpu.quota_ns"})
    assert times == [t0 // 1000 * 1000 + i * 500_000_000 for i in range(3)]   # folder names keep µs
    quota = {x["value"] for x in rows if x["metric"] == "cpu.quota_ns"}
    assert quota == {30_000_000.0}


# -- a bundle from the real sample, through the collector's writer and the pipeline -------------
def _sample_ring(tmp_path) -> tuple[Ring, int, int]:
    """The recorded sample's kernel log, snapshots, anchors and torchrun log, fed to a ring the
    way the recorder writes them."""
    ring = _ring(tmp_path, keep_s=3600)
    snap = ring.stream("snap", ext="jsonl")
    names = sorted((p.name for p in (SAMPLE / "cgroup").iterdir()), key=float)
    for n in names:
        sec, frac = n.split(".")
        t = int(sec) * NS + int(frac) * 1000
        base = SAMPLE / "cgroup" / n
        files = {str(f.relative_to(base)): f.read_text() for f in base.rglob("*") if f.is_file()}
        snap.write((json.dumps({"t": t, "f": files}) + "\n").encode(), t)
    first = int(names[0].split(".")[0]) * NS
    last = int(names[-1].split(".")[0]) * NS + NS
    ring.stream("kmsg").write((SAMPLE / "dmesg.txt").read_bytes(), last)
    log = (SAMPLE / "logs" / "torchrun.log").read_bytes()
    ring.stream("output.head", ext="log", pinned=True, compress=False).write(log[:200_000], first)
    ring.stream("output", ext="log").write(log[200_000:], last)
    anchors = ring.stream("anchors", ext="jsonl", compress=False)
    for phase in ("start", "end"):
        up = (SAMPLE / "host" / phase / "proc_uptime").read_text().strip()
        sec, frac = (SAMPLE / "host" / phase / "date_epoch").read_text().strip().split(".")
        wall = int(sec) * NS + int(frac.ljust(9, "0")[:9])
        boot = int(float(up.split()[0]) * 1e9)
        anchors.write((json.dumps({"uptime": up, "wall_ns": wall, "read_ns": 0, "realtime_ns": wall,
                                   "monotonic_ns": boot, "boottime_ns": boot}) + "\n").encode(), wall)
    return ring, first, last


def _request(tmp_path, first, last, **kw) -> BundleRequest:
    facts = {"hostname": "vm", "fqdn": "vm", "boot_id": "1999405b-5cb5-442e-b8b3-5fa3df3699f8",
             "kernel": "6.18.44-fc-v657", "uname_a": "Linux vm 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 x86_64",
             "time_zone": "UTC", "time_zone_from": "test", "btime": 1795957807, "cpus": 2}
    d = dict(out_dir=str(tmp_path), window_start_ns=first - NS, window_end_ns=last + 5 * NS,
             reasons=[Reason("exit", "the job exited with code 1", last)], facts=facts,
             job={"mode": "wrap", "command": ["torchrun", "train_job.py"], "pid": 17983, "status": "exit code 1"},
             ranks={0: {"pid": 17988, "local_rank": 0}, 1: {"pid": 17989, "local_rank": 1}},
             missing=[{"what": "perf samples", "reason": "not requested (--perf)"}],
             collector={"kernel_log_method": "/dev/kmsg followed live",
                        "realtime_minus_monotonic_ns": 1795957807892452000},
             output_name="torchrun.log")
    d.update(kw)
    return BundleRequest(**d)


def test_manifest_says_what_was_captured_and_what_was_not(tmp_path):
    ring, first, last = _sample_ring(tmp_path)
    path, man = BundleWriter(ring, _request(tmp_path, first, last)).write("bundle-test")
    b = Path(path)
    assert b.name == "bundle-test" and not list(tmp_path.glob(".bundle-test*"))
    on_disk = json.loads((b / "aftertrace-manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(man))
    assert man["schema"] == "aftertrace.collect/1" and man["time_zone"] == "UTC"
    h = man["hosts"]["vm"]
    assert h["paths"] == ["vm/"] and h["boot_id"].startswith("1999405b") and len(h["anchors"]) == 2
    assert set(h["anchors"][0]) == {"realtime_ns", "monotonic_ns", "boottime_ns"}
    assert man["ranks"]["0"] == {"pid": 17988, "local_rank": 0, "host": "vm"}
    assert man["trigger"]["reasons"][0]["kind"] == "exit"
    what = {c["what"]: c for c in man["captured"]}
    assert what["cgroup and /proc snapshots"]["count"] == 112
    assert what["cgroup and /proc snapshots"]["cgroups"] == ["cpu/aftertrace_job", "cpuacct/aftertrace_job",
                                                             "memory/aftertrace_job"]
    assert what["kernel log"]["count"] == 80 and what["clock anchors"]["count"] == 2
    assert what["job stdout+stderr"]["bytes"] == (SAMPLE / "logs/torchrun.log").stat().st_size
    assert {m["what"] for m in man["missing"]} == {"perf samples"}
    # the files themselves
    assert (b / "vm/dmesg.txt").read_bytes() == (SAMPLE / "dmesg.txt").read_bytes()
    assert (b / "vm/logs/torchrun.log").read_bytes() == (SAMPLE / "logs/torchrun.log").read_bytes()
    assert (b / "vm/host/anchors.txt").read_text().count("\n\n") == 1
    assert (b / "vm/host/hostname").read_text() == "vm\n"
    assert len(list((b / "vm/cgroup").iterdir())) == 112


def test_kernel_lines_before_the_window_are_left_out(tmp_path):
    ring, first, last = _sample_ring(tmp_path)
    # a window that starts inside the OOM report (printk 1127.868 s; UTC = printk + the offset)
    start = 1127_868_000_000 + 1795957807892452000
    path, man = BundleWriter(ring, _request(tmp_path, first, last, window_start_ns=start)).write("b2")
    lines = (Path(path) / "vm/dmesg.txt").read_text().splitlines()
    assert 0 < len(lines) < 80 and lines[-1].startswith("[ 1127.868140] Memory cgroup out of memory")
    assert all(float(ln[1:ln.index("]")]) >= 1127.868 for ln in lines)


def test_the_bundle_ingests_and_gives_the_recorded_chain(tmp_path):
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    ring, first, last = _sample_ring(tmp_path)
    path, _ = BundleWriter(ring, _request(tmp_path, first, last)).write("bundle-sample")
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    sub = svc.submit_path(path)
    rep = svc.analyze(sub.incident_id)
    src = {s["path"]: s for s in rep["sources"]}
    for p in ("vm/cgroup/", "vm/dmesg.txt", "vm/logs/torchrun.log", "vm/host/anchors.txt", "vm/host/boot_id",
              "vm/host/hostname", "vm/host/uname_a", "vm/host/btime", "vm/host/date", "aftertrace-manifest.json"):
        assert src[p]["status"] == "parsed", (p, src[p])
    assert all(s["host"] == "vm" for p, s in src.items() if p.startswith("vm/"))
    clock = src["vm/dmesg.txt"]["clock"]
    # 10 ms of anchors, plus printk's clock drift allowed over the kernel log's stamps (~20 min)
    assert clock["method"] == "uptime+date" and 0.011 < clock["uncertainty_s"] <= 0.011 + 20e-6 * 1800
    assert rep["time_zone"] == {"zone": "UTC", "from": "manifest"}
    kinds = [l["kind"] for l in rep["chains"][0]["links"]]
    assert kinds[0] == "cpu_throttle" and "memory_growth" in kinds and "oom_kill" in kinds
    assert kinds.index("memory_growth") < kinds.index("oom_kill") and kinds[-1] == "job_failure"
    svc.store.close()


# -- the recorder, in this process, around real processes: every trigger ------------------------
def _record(tmp_path, cmd, **kw) -> tuple[int, Recorder, list[str]]:
    out = tmp_path / "out"
    msgs: list[str] = []
    kw.setdefault("strace_s", 0.5)      # (a bundle written while the job runs straces it this long)
    cfg = Config(out=str(out), command=cmd, keep_s=60, interval_s=0.1, linger_s=kw.pop("linger_s", 0.5),
                 passthrough=False, nvidia=False, argv=["test"], **kw)
    rec = Recorder(cfg, log=msgs.append)
    rc = rec.run()
    return rc, rec, msgs


def _manifest(path: str) -> dict:
    return json.loads((Path(path) / "aftertrace-manifest.json").read_text())


def test_trigger_on_non_zero_exit(tmp_path):
    rc, rec, msgs = _record(tmp_path, ["sh", "-c", "echo started; sleep 0.5; exit 3"])
    assert rc == 3 and len(rec.bundles) == 1
    man = _manifest(rec.bundles[0])
    assert [r["kind"] for r in man["trigger"]["reasons"]] == ["exit"]
    assert man["job"]["exit_code"] == 3 and man["job"]["status"] == "exit code 3"
    assert (Path(rec.bundles[0]) / man["hosts"].popitem()[0] / "logs/sh.log").read_text() == "started\n"
    assert any(m.startswith("analyse it with:  aftertrace analyze ") and rec.bundles[0] in m for m in msgs)
    assert man["collector"]["snapshots"] >= 3 and man["collector"]["ring_bytes_written"] > 0


def test_clean_exit_writes_no_bundle(tmp_path):
    rc, rec, msgs = _record(tmp_path, ["sh", "-c", "echo fine"])
    assert rc == 0 and rec.bundles == [] and any("no bundle written" in m for m in msgs)
    assert (tmp_path / "out/ring/snap").is_dir()


def test_trigger_on_signal(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "sleep 0.3; kill -KILL $$"])
    assert rc == 128 + 9
    man = _manifest(rec.bundles[0])
    assert man["trigger"]["reasons"][0]["kind"] == "signal" and man["job"]["signal"] == "SIGKILL"


def test_trigger_on_watchdog_line_while_the_job_runs(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "echo step 1; sleep 0.2; "
                                    "echo '[rank0]: Watchdog caught collective operation timeout: WorkNCCL(...)'; "
                                    "sleep 2.5; echo done"], linger_s=0.5)
    assert rc == 0 and len(rec.bundles) == 1     # written while the job ran; its clean end adds none
    man = _manifest(rec.bundles[0])
    (r,) = man["trigger"]["reasons"]
    assert r["kind"] == "watchdog" and "Watchdog caught" in r["line"]
    assert man["job"]["ended"] is None and man["job"]["status"] == "running"


def test_a_silent_job_triggers_a_bundle_with_what_its_processes_were_doing(tmp_path):
    """--hang-after: no output for that long is a trigger; the bundle, written while the job
    runs, holds its processes' py-spy dumps and strace (or says why not: the tool is missing),
    their wait channels and /dev/shm's usage."""
    job = [sys.executable, "-c", "import time; print('step 1', flush=True); time.sleep(4)"]
    # (a hang does not wait out the linger: the processes are still there when the bundle is written)
    rc, rec, _ = _record(tmp_path, job, hang_after_s=1.0, strace_s=1.0, linger_s=5.0)
    assert rc == 0 and len(rec.bundles) == 1
    man = _manifest(rec.bundles[0])
    (r,) = man["trigger"]["reasons"]
    assert r["kind"] == "hang" and r["detail"].startswith("no output line from the job for ")
    host = next(iter(man["hosts"]))
    b = Path(rec.bundles[0]) / host
    got = {c["what"]: c for c in man["captured"]}
    lacking = {m["what"]: m["reason"] for m in man["missing"]}
    pid = man["job"]["pid"]
    if shutil.which("py-spy"):
        assert "MainThread" in (b / f"stacks/py-spy-{pid}.txt").read_text() and got["py-spy dumps"]["count"] >= 1
    else:
        assert lacking["py-spy dumps"].startswith("py-spy is not installed")
        # then gdb's native stacks, or why not
        if not shutil.which("gdb"):
            assert lacking["gdb backtraces"].startswith("gdb is not installed")
        elif "gdb backtraces" in got:
            assert "\n#0 " in (b / f"stacks/gdb-{pid}.txt").read_text() and got["gdb backtraces"]["count"] >= 1
        else:       # (ptrace refused: a container without CAP_SYS_PTRACE)
            assert "ptrace" in lacking["gdb backtraces of some processes"]
    if shutil.which("strace") and IS_ROOT:
        assert got["strace of the job's processes"]["seconds"] == 1.0
        assert "nanosleep" in (b / f"strace/strace-{pid}.txt").read_text()
    assert (b / f"proc/{pid}/wchan").exists() and (b / "host/df-dev-shm.txt").read_text().startswith("Filesystem")


def test_trigger_on_custom_watchdog_then_exit_joins_one_bundle(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "echo 'my job is STUCK'; sleep 0.2; exit 7"],
                         watchdog=["STUCK"], watchdog_defaults=False, linger_s=5)
    assert rc == 7 and len(rec.bundles) == 1
    assert [r["kind"] for r in _manifest(rec.bundles[0])["trigger"]["reasons"]] == ["watchdog", "exit"]


def test_nccl_debug_files_are_followed_and_watched(tmp_path, monkeypatch):
    import socket
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl.%h.%p.log"))
    line = "node-1:42:42 [0] NCCL INFO Init COMPLETE comm 0x1 rank 0 nranks 2"
    warn = "node-1:42:42 [0] NCCL WARN Timeout waiting for a collective"
    rc, rec, _ = _record(tmp_path, ["sh", "-c", f"f={tmp_path}/nccl.$(hostname).$$.log; echo '{line}' > $f; "
                                    f"sleep 0.3; echo '{warn}' >> $f; sleep 0.5; exit 1"])
    assert rc == 1 and len(rec.bundles) == 1
    man = _manifest(rec.bundles[0])
    host = next(iter(man["hosts"]))
    (f,) = (Path(rec.bundles[0]) / host / "nccl").iterdir()
    assert f.name == f"nccl.{socket.gethostname()}.{man['job']['pid']}.log"
    assert f.read_text() == f"{line}\n{warn}\n"
    assert [r["kind"] for r in man["trigger"]["reasons"]] == ["watchdog", "exit"]
    assert "NCCL debug file" in man["trigger"]["reasons"][0]["detail"]


def test_an_empty_request_file_is_read_once_written(tmp_path):
    # ``echo why > trigger`` creates the file before it writes it: a check between the two must
    # not fire the trigger without the reason; an empty file that stays empty fires it all the same
    out = tmp_path / "out"
    out.mkdir()
    cfg = Config(out=str(out), command=["true"], keep_s=60, interval_s=0.1, passthrough=False, nvidia=False,
                 argv=["test"])
    rec = Recorder(cfg, log=lambda m: None)
    trig = out / "trigger"
    trig.write_text("")
    rec._check_request_file()
    assert not rec.trig.reasons and trig.exists()
    trig.write_text("looks slow\n")
    rec._check_request_file()
    (r,) = rec.trig.reasons
    assert r.detail.endswith(": looks slow") and not trig.exists()
    trig.write_text("")
    old = time.time() - 5
    os.utime(trig, (old, old))
    rec._check_request_file()
    assert len(rec.trig.reasons) == 2 and rec.trig.reasons[1].detail.endswith("trigger appeared")
    trig.write_text("")
    rec._check_request_file(final=True)          # (the job has ended: no later check)
    assert len(rec.trig.reasons) == 3 and not trig.exists()


def test_trigger_on_request_file(tmp_path):
    out = tmp_path / "out"
    rc, rec, _ = _record(tmp_path, ["sh", "-c", f"sleep 0.3; echo 'looks slow' > {out}/trigger; sleep 1.2"])
    assert rc == 0 and len(rec.bundles) == 1 and not (out / "trigger").exists()
    (r,) = _manifest(rec.bundles[0])["trigger"]["reasons"]
    assert r["kind"] == "request_file" and r["detail"].endswith(": looks slow")


def test_trigger_on_sigusr1(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", f"sleep 0.3; kill -USR1 {os.getpid()}; sleep 1.2"])
    assert rc == 0 and len(rec.bundles) == 1
    assert _manifest(rec.bundles[0])["trigger"]["reasons"][0]["kind"] == "sigusr1"


def test_attached_process_that_ends_triggers_a_bundle(tmp_path):
    p = subprocess.Popen(["sh", "-c", "sleep 1"])
    out = tmp_path / "out"
    msgs: list[str] = []
    rec = Recorder(Config(out=str(out), pid=p.pid, keep_s=60, interval_s=0.1, nvidia=False, argv=["t"]),
                   log=msgs.append)
    try:
        rc = rec.run()
    finally:
        p.wait()
    assert rc == 0 and len(rec.bundles) == 1
    man = _manifest(rec.bundles[0])
    assert man["trigger"]["reasons"][0]["kind"] == "pid_gone" and man["job"]["mode"] == "pid"
    assert any(m["what"] == "job stdout+stderr" for m in man["missing"])


def test_archive_and_missing_command(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "exit 1"], archive=True)
    assert rc == 1 and rec.bundles[0].endswith(".tar.gz") and os.path.getsize(rec.bundles[0]) > 0
    import tarfile
    with tarfile.open(rec.bundles[0]) as tf:
        names = tf.getnames()
    assert any(n.endswith("aftertrace-manifest.json") for n in names)
    from aftertrace.ingest.collect import run
    p = argparse.ArgumentParser()
    add_arguments(p)
    msgs: list[str] = []
    assert run(p.parse_args(["--out", str(tmp_path / "o2"), "--", "/nonexistent/cmd"]), log=msgs.append) == 127
    assert msgs == ["cannot start '/nonexistent/cmd': not found or not executable"]
    assert not (tmp_path / "o2").exists()
    assert run(p.parse_args(["--out", str(tmp_path / "o3"), "--pid", "999999999"]), log=msgs.append) == 2


def test_recorded_bundle_of_a_real_process_ingests(tmp_path):
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "echo 'E1129 13:28:56.349000 1 x.py:1] failed'; sleep 1.2; exit 1"],
                         anchor_every_s=0.5)
    man = _manifest(rec.bundles[0])
    host = next(iter(man["hosts"]))
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(rec.bundles[0]).incident_id)
    src = {s["path"]: s for s in rep["sources"]}
    assert src[f"{host}/cgroup/"]["status"] == "parsed" and src[f"{host}/cgroup/"]["records"] > 0
    assert src[f"{host}/host/anchors.txt"]["status"] == "parsed"
    assert src[f"{host}/host/anchors.txt"]["records"] >= 3          # start, every 0.5 s, the end
    assert rep["time_zone"]["from"] == "manifest"
    if f"{host}/dmesg.txt" in src:                                    # only when the kernel printed something
        assert src[f"{host}/dmesg.txt"]["clock"]["method"] == "uptime+date"
    svc.store.close()


# -- with root: real cgroups, perf -------------------------------------------------------------
@pytest.mark.skipif(not (IS_ROOT and V1_MEMORY), reason="needs root and a cgroup v1 memory hierarchy")
def test_job_in_a_new_cgroup_is_found_and_snapshotted(tmp_path):
    name = f"aftertrace_test_collect_{os.getpid()}"
    cg = Path("/sys/fs/cgroup/memory") / name
    cg.mkdir()
    try:
        rc, rec, _ = _record(tmp_path, ["sh", "-c", f"echo $$ > {cg}/cgroup.procs; sleep 1; exit 2"])
        assert rc == 2
        man = _manifest(rec.bundles[0])
        (snaps,) = [c for c in man["captured"] if c["what"] == "cgroup and /proc snapshots"]
        assert f"memory/{name}" in snaps["cgroups"]
        host = next(iter(man["hosts"]))
        files = list((Path(rec.bundles[0]) / host / "cgroup").glob(f"*/memory/{name}/memory.usage_in_bytes"))
        assert len(files) >= 3
        # who was in it: cgroup.procs of the group and /proc/<pid>/cgroup of the job's processes
        assert len(list((Path(rec.bundles[0]) / host / "cgroup").glob(f"*/memory/{name}/cgroup.procs"))) >= 3
        job = man["job"]["pid"]
        assert list((Path(rec.bundles[0]) / host / "cgroup").glob(f"*/proc/{job}/cgroup"))
        g, r, _ = _parse_group(Path(rec.bundles[0]), tmp_path)
        import pyarrow.parquet as pq
        members = [row for f in r.parts.get("members", []) for row in pq.read_table(f).to_pylist()]
        for basis in ("cgroup.procs", "proc_cgroup"):     # (the shell moves itself: it may join late)
            assert any(m["pid"] == job and m["controller"] == "memory" and m["cgroup"] == f"/{name}"
                       and m["change"] in ("first", "joined") and m["basis"] == basis for m in members), basis
    finally:
        for _ in range(20):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _perf_works() -> bool:
    if not IS_ROOT or shutil.which("perf") is None:
        return False
    r = subprocess.run(["perf", "record", "-e", "cpu-clock", "-a", "-o", "/dev/null", "--", "true"],
                       capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _perf_works(), reason="needs perf able to record system-wide (root)")
def test_perf_files_become_perf_script_with_a_reference_time(tmp_path):
    rc, rec, _ = _record(tmp_path, ["sh", "-c", "sleep 1.5; exit 1"], perf=True)
    man = _manifest(rec.bundles[0])
    host = next(iter(man["hosts"]))
    files = sorted((Path(rec.bundles[0]) / host / "perf").glob("perf.*.script.txt.gz"))
    assert files and any(c["what"] == "perf samples" for c in man["captured"])
    import gzip
    head = gzip.decompress(files[0].read_bytes())[:20000].decode()
    assert "# reference time:" in head and "time of first sample : 0.000000" not in head
