"""cgroup / pressure / host snapshot series: every layout from real files, exact values out.

Data: sample_traces/oom-after-throttle (the recorded incident) and tests/data/cgroup
(PROVENANCE.md: a series recorded on the development machine in all layouts, elastic's
real captured cgroup trees, a real nvidia-smi log).
"""
from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from pathlib import Path

import polars as pl
import pytest

from aftertrace.ingest.formats.cgroup import (CgroupConcatParser, CgroupJsonlParser, CgroupSnapshotsParser,
                                   CgroupTreeParser, evidence)
from aftertrace.ingest.formats.nvidia_smi import NvidiaSmiCsvParser
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry, write_group_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
TRUTH = json.loads((ROOT / "sample_traces" / "oom-after-throttle.truth.json").read_text())
DATA = ROOT / "tests" / "data" / "cgroup"
REC = DATA / "recorded"
REC_TRUTH = json.loads((REC / "truth.json").read_text())


def files_of(root: Path, prefix: str = "") -> list[tuple[str, str]]:
    return sorted((prefix + str(p.relative_to(root)), str(p)) for p in root.rglob("*") if p.is_file())


def run_groups(files, tmp_path, zone="UTC"):
    reg = default_registry()
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = []
    for n, (parser, g) in enumerate(reg.claim_groups(files)):
        man = write_group_manifest(g, tmp_path / f"g{n}.json")
        r = parse_file(ParseJob(man, g.rel, str(tmp_path / f"g{n}"), None, zone, parser.name), reg)
        out.append((parser, g, r))
    return out


def run_file(path: Path, rel: str, tmp_path, zone="UTC"):
    reg = default_registry()
    det = reg.detect(Head.read(path, rel))
    assert det.parser is not None, det.reason
    return det.parser, parse_file(ParseJob(str(path), rel, str(tmp_path / "out"), None, zone, det.parser.name), reg)


def metrics(r) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(f) for f in r.parts["metrics"]])


def value(df, entity, metric, ts):
    v = df.filter((pl.col("entity") == entity) & (pl.col("metric") == metric) & (pl.col("ts_raw_ns") == ts))
    assert len(v) == 1, (entity, metric, ts, len(v))
    return v["value"][0]


def ns(name: str) -> int:
    s, f = name.split(".")
    return int(s) * 10**9 + int((f + "000000000")[:9])


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    (res,) = run_groups(files_of(SAMPLE), tmp_path_factory.mktemp("sample"))
    return res


def test_the_snapshot_series_is_one_source_with_its_members(sample):
    parser, g, r = sample
    assert parser is CgroupSnapshotsParser and g.rel == "vm/cgroup/"
    assert len(g.members) == 1456 == TRUTH["cgroup"]["snapshots"] * 13
    assert all(rel.startswith("vm/cgroup/") for rel, _ in g.members)
    assert (r.status, r.kind, r.clock_domain, r.issues) == ("parsed", "cgroup", "wall", 0)
    a = r.attrs
    assert a["members"] == 1456 and a["snapshots"] == 112 and len(a["snapshot_dirs"]) == 112
    assert a["snapshot_dirs"][0] == TRUTH["cgroup"]["first_snapshot"]
    assert a["snapshot_dirs"][-1] == TRUTH["cgroup"]["last_snapshot"]
    assert sorted(a["member_paths"])[:3] == ["cpu/aftertrace_job/cpu.cfs_period_us",
                                            "cpu/aftertrace_job/cpu.cfs_quota_us", "cpu/aftertrace_job/cpu.stat"]
    assert a["entities"] == ["/aftertrace_job", "host"]
    assert a["counter_resets"] == 0


def test_raw_values_with_units_normalised(sample):
    df = metrics(sample[2])
    q = TRUTH["cgroup"]["quota_change_between_snapshots"]
    before, after = ns(q["before"]), ns(q["after"])
    st = TRUTH["cgroup"]["first_snapshot_with_nr_throttled_gt_0"]["cpu.stat"]
    assert value(df, "/aftertrace_job", "cpu.quota_ns", before) == -1
    assert value(df, "/aftertrace_job", "cpu.quota_ns", after) == 30000 * 1000
    assert value(df, "/aftertrace_job", "cpu.period_ns", after) == 100000 * 1000
    assert value(df, "/aftertrace_job", "cpu.nr_throttled", after) == int(st["nr_throttled"])
    assert value(df, "/aftertrace_job", "cpu.throttled_ns", after) == int(st["throttled_time"])   # v1: ns
    assert value(df, "/aftertrace_job", "cpu.usage_ns", after) == 31152644098                   # cpuacct.usage
    assert value(df, "/aftertrace_job", "memory.limit_bytes", after) == TRUTH["cgroup"]["memory.limit_in_bytes"]
    assert value(df, "host", "psi.cpu.some.total_ns", after) == 225332527 * 1000                # PSI: µs -> ns
    assert value(df, "host", "psi.cpu.some.avg10", after) == 8.5
    peak = df.filter(pl.col("metric") == "memory.usage_bytes")["value"].max()
    assert peak == TRUTH["cgroup"]["peak_memory.usage_in_bytes_seen"]


def test_derived_rates(sample):
    df = metrics(sample[2])
    q = TRUTH["cgroup"]["quota_change_between_snapshots"]
    before, after = ns(q["before"]), ns(q["after"])
    dt = (after - before) / 1e9
    assert value(df, "/aftertrace_job", "cpu.throttled_periods_per_s", after) == pytest.approx(2 / dt)
    assert value(df, "/aftertrace_job", "cpu.throttled_fraction", after) == 1.0
    assert value(df, "/aftertrace_job", "cpu.throttled_s_per_s", after) == pytest.approx(0.254935926 / dt)
    assert value(df, "/aftertrace_job", "cpu.quota_cores", after) == pytest.approx(0.3)
    assert value(df, "host", "psi.cpu.some.stall_pct", after) == pytest.approx(
        (225332527 - 225106309) / 1e6 / dt * 100)
    assert value(df, "/aftertrace_job", "memory.headroom_bytes", after) == 2684354560 - 881078272
    # the OOM kill shows as oom_kill 0 -> 1 between these two snapshots (truth: oom_kill_seen)
    oom = df.filter((pl.col("metric") == "memory.oom_kill_delta") & (pl.col("value") > 0))
    assert oom["ts_raw_ns"].to_list() == [ns("1795958935.908970")]
    assert ns("1795958935.408982") < TRUTH["events"]["oom_kill_seen"]["epoch_ns"] < ns("1795958935.908970")
    units = dict(df.select("metric", "unit").unique().iter_rows())
    assert units["cpu.cores_used"] == "cores" and units["memory.growth_bytes_per_s"] == "bytes/s"
    assert units["psi.memory.some.stall_pct"] == "percent" and units["cpu.throttled_s_per_s"] == "s/s"


def test_evidence_lines_are_re_read_from_the_member_files(sample):
    _, g, r = sample
    after = ns("1795958904.409226")
    ev = evidence(g.rel, r.attrs, [(after, "/aftertrace_job", "cpu.nr_throttled"),
                                   (after, "/aftertrace_job", "cpu.quota_ns"), (after, "host", "psi.cpu.some.total_ns")])
    assert ev == [
        ("vm/cgroup/1795958904.409226/cpu/aftertrace_job/cpu.stat", 2, "nr_throttled 2"),
        ("vm/cgroup/1795958904.409226/cpu/aftertrace_job/cpu.cfs_quota_us", 1, "30000"),
        ("vm/cgroup/1795958904.409226/proc/pressure/cpu", 1,
         "some avg10=8.50 avg60=15.70 avg300=19.76 total=225332527")]


def test_a_member_is_read_whole_gunzipped_and_within_its_limit(tmp_path):
    from aftertrace.ingest.formats._cgroup_read import read_member
    (tmp_path / "cpu.stat").write_bytes(b"nr_periods 3\nnr_throttled 1\n")
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "big").write_bytes(b"x" * 200_001)          # (more than one read of the descriptor)
    (tmp_path / "memory.stat.gz").write_bytes(gzip.compress(b"cache 4096\n"))
    (tmp_path / "odd").write_bytes(b"\xffkey 1\n")
    assert read_member(str(tmp_path / "cpu.stat")) == "nr_periods 3\nnr_throttled 1\n"
    assert read_member(str(tmp_path / "empty")) == ""
    assert read_member(str(tmp_path / "big")) == "x" * 200_001 == read_member(str(tmp_path / "big"), 200_001)
    with pytest.raises(ValueError, match="more than 200000 bytes"):
        read_member(str(tmp_path / "big"), 200_000)
    assert read_member(str(tmp_path / "memory.stat.gz"), 100) == "cache 4096\n"
    assert read_member(str(tmp_path / "odd")) == "\ufffdkey 1\n"
    with pytest.raises(OSError):
        read_member(str(tmp_path))


def test_a_member_too_large_is_named_without_a_line(tmp_path):
    """A snapshot file larger than a cgroup file can be is a parse issue that names the file (it
    has no line: none was read), and the series' other files are read."""
    from aftertrace.ingest.formats.cgroup import MAX_MEMBER_BYTES
    snap = tmp_path / "b" / "node-1" / "cgroup" / "1795958884.908782" / "cpu" / "job"
    snap.mkdir(parents=True)
    (snap / "cpu.stat").write_text("nr_periods 3\nnr_throttled 1\n")
    (snap / "cpu.cfs_quota_us").write_bytes(b"1" * (MAX_MEMBER_BYTES + 1))
    (_, g, r), = run_groups(files_of(tmp_path / "b"), tmp_path / "out")
    issues = pl.concat([pl.read_parquet(f) for f in r.parts["parse_issues"]])["message"].to_list()
    assert issues == [f"node-1/cgroup/1795958884.908782/cpu/job/cpu.cfs_quota_us: cannot be read: more than "
                      f"{MAX_MEMBER_BYTES} bytes"]
    assert r.status == "partial" and r.counts["metrics"] > 0


def test_a_file_is_read_for_evidence_only_when_it_can_hold_the_value():
    """``may_give`` answers without reading a file whether it can hold an (entity, metric): never
    no for a value it holds (every row of every cgroup/PSI file of the corpus), and no for the
    other metrics of a grammar whose metric names the table lists."""
    from aftertrace.ingest.formats._cgroup_read import may_give, parse_block, read_member, resolve
    checked, refused = 0, set()
    for root in (ROOT / "tests" / "data", ROOT / "sample_traces"):
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            parts = path.relative_to(root).parts
            fid = next((f for f in (resolve("/".join(parts[i:])) for i in range(len(parts) - 1)) if f), None)
            if fid is None:
                continue
            try:
                rows, _ = parse_block(fid, read_member(str(path)).splitlines())
            except (OSError, ValueError, EOFError):
                continue
            for ent, met, *_ in rows:
                assert may_give(fid, ent, met), (path, ent, met)
                checked += 1
            for ent, met in (("/aftertrace_job", "memory.usage_bytes"), ("host", "psi.cpu.some.total_ns"),
                             (fid.entity + "/other", "cpu.nr_throttled")):
                if not may_give(fid, ent, met):
                    refused.add((fid.spec.grammar, fid.name, met))
    assert checked > 10_000
    # what it rules out: another cgroup's value, another file's metric, another PSI resource
    assert ("flat", "cpu.stat", "memory.usage_bytes") in refused
    assert ("single", "memory.usage_in_bytes", "psi.cpu.some.total_ns") in refused
    assert ("psi", "pressure/io", "psi.cpu.some.total_ns") in refused
    assert ("flat", "memory.stat", "cpu.nr_throttled") in refused


def test_claims_leave_other_files_alone():
    claimed = {rel for _, g in default_registry().claim_groups(files_of(SAMPLE)) for rel, _ in g.members}
    assert all(rel.startswith("vm/cgroup/") for rel in claimed)
    assert not any("host/" in rel or rel.endswith(".txt") for rel in claimed)


# -- the series recorded in every layout (tests/data/cgroup/recorded) --------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    for name in ("snapdirs.tar.gz", "pit.tar.gz"):
        with tarfile.open(REC / name) as t:
            t.extractall(d / "bundle", filter="data")
    return d


def _series(df, entity, metric):
    return df.filter((pl.col("entity") == entity) & (pl.col("metric") == metric)).sort("ts_raw_ns")


def test_iso_named_snapshot_folders_and_json_lines_give_the_same_series(recorded, tmp_path):
    groups = run_groups(files_of(recorded / "bundle" / "snapdirs", "node/snap/"), tmp_path)
    (parser, g, r), = groups
    assert parser is CgroupSnapshotsParser and g.rel == "node/snap/" and r.status == "parsed"
    assert r.attrs["snapshots"] == REC_TRUTH["snapshots"]
    _, rj = run_file(REC / "series.jsonl.gz", "node/series.jsonl.gz", tmp_path)
    assert rj.format == "cgroup_jsonl" and rj.status == "parsed", rj.error
    a, b = metrics(r), metrics(rj)
    name = REC_TRUTH["name"]
    for ent, met in ((f"/{name}", "cpu.nr_throttled"), (f"/{name}_mem", "memory.usage_bytes"),
                     (f"/unified/{name}", "cpu.usage_ns"), (f"/{name}", "cpu.usage_ns"), ("host", "meminfo.MemAvailable_bytes"),
                     (f"pid {REC_TRUTH['busy_pid']}", "proc.nonvoluntary_ctxt_switches")):
        sa, sb = _series(a, ent, met), _series(b, ent, met)
        assert len(sa) >= 30 and sa["value"].to_list() == sb["value"].to_list(), (ent, met)
        # ISO folder names (µs) and t_real_ns (ns) are the same reading
        assert [t // 1000 for t in sb["ts_raw_ns"]] == [t // 1000 for t in sa["ts_raw_ns"]]


@pytest.mark.parametrize("name", ["tail.txt.gz", "hashes.txt.gz"])
def test_concatenated_layouts(name, tmp_path):
    _, r = run_file(REC / name, f"node/{name}", tmp_path)
    assert r.format == "cgroup_concat" and r.status == "parsed" and r.issues == 0, r.error
    df = metrics(r)
    ent = f"/{REC_TRUTH['name']}"
    q = _series(df, ent, "cpu.quota_ns")
    t_change = q.filter(pl.col("value") > 0)["ts_raw_ns"][0]
    t_before = q.filter(pl.col("ts_raw_ns") < t_change)["ts_raw_ns"][-1]
    assert t_before < REC_TRUTH["throttle_applied_ns"] < t_change
    assert q.filter(pl.col("value") > 0)["value"][0] == REC_TRUTH["quota_us"] * 1000
    lim = _series(df, f"{ent}_mem", "memory.limit_bytes")["value"].unique().to_list()
    assert lim == [REC_TRUTH["mem_limit_bytes"]]


def test_a_point_in_time_copy_is_timed_by_the_date_file_next_to_it(recorded, tmp_path):
    groups = run_groups(files_of(recorded / "bundle" / "pit", "node/pit/"), tmp_path)
    assert [(p, g.rel) for p, g, _ in groups] == [(CgroupTreeParser, "node/pit/proc/"),
                                                   (CgroupTreeParser, "node/pit/sys/fs/cgroup/")]
    text = (recorded / "bundle" / "pit" / "date").read_text()
    assert text == "Sun Nov 29 13:39:40 UTC 2026\n"
    for _, g, r in groups:
        assert r.status == "parsed" and r.attrs["time_from"] == "node/pit/date"
        assert r.attrs["time_ns"] == 1795959580 * 10**9
        assert metrics(r)["ts_raw_ns"].unique().to_list() == [1795959580 * 10**9]


def test_elastic_docker_capture_v1_and_v2_files(tmp_path):
    groups = run_groups(files_of(DATA / "elastic_docker"), tmp_path)
    (parser, g, r), = groups
    assert parser is CgroupTreeParser and g.rel == "sys/fs/cgroup/"
    # no date file in that capture: values kept, time unknown, and the source says so
    assert r.status == "partial" and "no time" in r.error and r.issues == 0
    df = metrics(r)
    scope = "/system.slice/docker-1c8fa019edd4b9d4b2856f4932c55929c5c118c808ed5faee9a135ca6e84b039.scope"
    got = {m: v for e, m, v in df.select("entity", "metric", "value").iter_rows() if e == "/system.slice"}
    assert got["cpu.usage_ns"] == 738173847375 * 1000 and got["cpu.quota_ns"] == -1
    assert got["cpu.period_ns"] == 100000 * 1000 and got["memory.usage_bytes"] == 11583053824
    assert "memory.limit_bytes" not in got            # memory.max "max": no limit, no row
    assert got["memory.oom_kill"] == 0 and got["psi.cpu.some.total_ns"] == 2798967170 * 1000
    io = df.filter(pl.col("entity") == "/system.slice dev=8:0")
    assert dict(io.select("metric", "value").iter_rows())["io.wbytes"] == 613809529856
    assert df.filter(pl.col("entity") == scope).height > 20
    v1 = df.filter(pl.col("entity") == "/docker/b29faf21b7eff959f64b4192c34d5d67a707fe8561e9eaa608cb27693fba4242")
    assert {"cpu.throttled_ns", "memory.usage_bytes", "memory.under_oom", "cpu.usage_ns"} <= set(v1["metric"])


def test_io_stat_with_a_device_only_line_is_not_an_error(tmp_path):
    b = tmp_path / "b" / "sys" / "fs" / "cgroup" / "x.slice"
    b.mkdir(parents=True)
    shutil.copy(DATA / "ubuntu2_io.stat", b / "io.stat")
    (_, _, r), = run_groups(files_of(tmp_path / "b"), tmp_path / "o")
    df = metrics(r)
    assert r.issues == 0 and set(df["entity"]) == {"/x.slice dev=253:0", "/x.slice dev=259:0"}
    assert df.filter((pl.col("entity") == "/x.slice dev=259:0") & (pl.col("metric") == "io.dbytes"))[
        "value"].to_list() == [3222265856]


def test_bad_lines_are_counted_with_member_and_line_and_parsing_goes_on(tmp_path):
    src = gzip.decompress((REC / "hashes.txt.gz").read_bytes()).decode().splitlines(keepends=True)
    src.insert(3, "this is not a cpu.stat line\n")
    p = tmp_path / "h.txt"
    p.write_text("".join(src))
    _, r = run_file(p, "h.txt", tmp_path)
    assert r.status == "partial" and r.issues == 1
    assert "first at line 4: cpu.stat: expected 'key value'" in r.error
    good = run_file(REC / "hashes.txt.gz", "g.txt", tmp_path / "g")[1]
    assert r.records == good.records


def test_counter_reset_is_detected(tmp_path):
    snaps = sorted(p for p in (SAMPLE / "vm" / "cgroup").iterdir())
    root = tmp_path / "b" / "cg"
    # the real files of a late snapshot under an early name, then an early one: counters go down
    shutil.copytree(snaps[100], root / "1795958880.000000")
    shutil.copytree(snaps[10], root / "1795958880.500000")
    (_, _, r), = run_groups(files_of(tmp_path / "b"), tmp_path / "o")
    assert r.attrs["counter_resets"] >= 3
    df = metrics(r)
    assert df.filter(pl.col("metric") == "cpu.cores_used").height == 0      # no rate across a reset


def test_registry_claims_by_content(tmp_path):
    reg = default_registry()
    det = lambda p: reg.detect(Head.read(p, p.name)).parser  # noqa: E731
    assert det(REC / "tail.txt.gz") is CgroupConcatParser
    assert det(REC / "series.jsonl.gz") is CgroupJsonlParser
    assert det(DATA / "nvidia_smi" / "aau_util.csv") is NvidiaSmiCsvParser
    assert det(DATA / "nvidia_smi" / "a100_noheader.csv") is None       # no header: columns unknown
    assert det(ROOT / "tests" / "data" / "negative" / "netdata-12595_v1_cpu.stat") is None


def test_nvidia_smi_log(tmp_path):
    _, r = run_file(DATA / "nvidia_smi" / "aau_util.csv", "node/util.csv", tmp_path)
    assert r.status == "parsed" and r.attrs["gpus"] == ["gpu0"]
    df = metrics(r)
    assert df.height == 17 * 5
    first = 1605188891412000000      # 2020/11/12 13:48:11.412, read as UTC (the bundle's zone)
    assert value(df, "gpu0", "gpu.utilization.gpu", first) == 99
    assert value(df, "gpu0", "gpu.memory.used_bytes", first) == 30994 * 1024 * 1024
    assert set(df["unit"]) == {"percent", "bytes"}


def test_one_cgroup_file_on_its_own_is_read_by_its_kernel_name(tmp_path):
    """A file copied alone (a ticket's attachment): the name says which file, the grammar must fit."""
    from aftertrace.ingest.parse import ParseJob, parse_file
    from aftertrace.ingest.registry import default_registry
    reg = default_registry()
    ctl = tmp_path / "cgroup.controllers"
    ctl.write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    r = parse_file(ParseJob(str(ctl), "job/cgroup.controllers", str(tmp_path / "a")))
    assert (r.format, r.status, r.clock_domain, r.counts["facts"]) == ("cgroup_file", "parsed", "none", 1)
    # notes after a value are a person's, not the kernel's: dropped
    st = tmp_path / "cpu.stat"
    st.write_text("nr_periods 218\nnr_throttled 100 # throttled!\nthrottled_usec 9911798\n")
    assert reg.sniff(st, "cpu.stat").parser.name == "cgroup_file"
    # the same lines under another name, or a name whose grammar does not fit: not this reader
    other = tmp_path / "stats.txt"
    other.write_text(st.read_text())
    assert reg.sniff(other, "stats.txt").recognized is False
    bad = tmp_path / "memory.events"
    bad.write_text("this is not the kernel's memory.events\n")
    assert reg.sniff(bad, "memory.events").recognized is False
