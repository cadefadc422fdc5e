"""Which host and rank a file belongs to: paths, contents, folders, the manifest."""
from __future__ import annotations

import pytest

from aftertrace.ingest.attribution import Attributable, host_from_path, rank_from_path, resolve


@pytest.mark.parametrize("path,host", [
    ("node-3/dmesg.txt", "node-3"),
    ("job/host=gpu12/x", "gpu12"),
    ("job_host=gpu12/x", "gpu12"),
    ("hostname=vm/x.log", "vm"),
    ("sosreport-node7-2024-01-01-abc/sos_commands/kernel/dmesg", "node7"),
    ("sosreport-vm.example.com-123/sos_commands/kernel/dmesg", "vm.example.com"),
    ("bundle/worker07/logs/train.log", "worker07"),
    ("gpu-node-12/dmesg", "gpu-node-12"),
    ("nid001234/dmesg", "nid001234"),
    ("trainer_2/stdout.log", "trainer_2"),
    ("node-3/rank7/stdout.log", "node-3"),
    # negatives: no host in the path
    ("logs/rank7.log", None),
    ("traces/worker0.rank-12.pt.trace.json", None),   # the file name is not a folder
    ("rank_3/stdout.log", None),
    ("node-3", None),                                   # a file named like a host
    ("node_modules/x.js", None),
    ("gpu/x.log", None),
    ("ghost=1/x.log", None),
    ("results/2024-01-01/x.log", None),
    ("vm/host/hostname", None),
])
def test_host_from_path(path, host):
    assert host_from_path(path) == host


@pytest.mark.parametrize("path,rank", [
    ("logs/rank7.log", 7),
    ("traces/worker0.rank-12.pt.trace.json", 12),
    ("rank_3/stdout.log", 3),
    ("x/rank=4/y.log", 4),
    ("RANK5.txt", 5),
    ("rank3/rank5.log", 5),                  # the file name wins over the folder
    ("hta/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 34),
    # negatives
    ("ranking/x.txt", None),
    ("frank7.txt", None),
    ("FRANK7.txt", None),
    ("logs/rank.log", None),
    ("logs/rank1234567.log", None),          # more than 6 digits is not a rank
    ("node-3/dmesg.txt", None),
])
def test_rank_from_path(path, rank):
    assert rank_from_path(path) == rank


@pytest.mark.parametrize("path", ["logs/local_rank1.log", "out/local-rank-3/stdout.log"])
def test_local_rank_is_not_a_global_rank(path):
    assert rank_from_path(path) is None


def A(path, kind="dmesg", content_host=None, content_rank=None) -> Attributable:
    return Attributable(path=path, kind=kind, content_host=content_host, content_rank=content_rank)


def test_folder_inherits_the_host_named_by_its_host_info():
    hn = A("vm/host/hostname", "host_info", content_host="vm")
    dm = A("vm/dmesg.txt")
    perf = A("vm/perf/perf.script", "perf_script")
    notes = resolve([hn, dm, perf])
    assert notes == []
    assert (hn.host, hn.host_from) == ("vm", "contents")
    assert (dm.host, dm.host_from) == ("vm", "folder")
    assert (perf.host, perf.host_from) == ("vm", "folder")
    assert dm.rank is None and dm.rank_from is None


def test_manifest_overrides_and_reports_the_contradiction():
    hn = A("vm/host/hostname", "host_info", content_host="vm")
    dm = A("vm/dmesg.txt")
    other = A("vm2/dmesg.txt")                     # 'vm' must not match the folder 'vm2'
    notes = resolve([hn, dm, other], {"node-3": ["vm/"]})
    assert (hn.host, hn.host_from) == ("node-3", "manifest")
    assert (dm.host, dm.host_from) == ("node-3", "manifest")
    assert (other.host, other.host_from) == (None, None)
    assert notes == ["vm/host/hostname: the manifest places it on node-3, its contents say vm"]


def test_manifest_agrees_with_a_fqdn_and_prefix_without_slash():
    hn = A("a/uname.txt", "host_info", content_host="node-3.cluster.local")
    dm = A("a/dmesg")
    notes = resolve([hn, dm], {"node-3": ["a"]})
    assert notes == []
    assert (dm.host, dm.host_from) == ("node-3", "manifest")


def test_path_beats_contents_and_contents_beat_nothing():
    a = A("node-3/uname.txt", "host_info", content_host="vm")
    b = A("misc/perf.script", "perf_script", content_host="gpu-a")
    assert resolve([a, b]) == []
    assert (a.host, a.host_from) == ("node-3", "path")
    assert (b.host, b.host_from) == ("gpu-a", "contents")


def test_root_host_info_makes_a_single_host_bundle():
    hn = A("hostname", "host_info", content_host="gpu1")
    dm = A("dmesg.txt")
    app = A("logs/train/rank3.log", "app_log")
    assert resolve([hn, dm, app]) == []
    assert dm.host == "gpu1" and app.host == "gpu1"
    assert app.host_from == "bundle"
    assert (app.rank, app.rank_from) == (3, "path")


def test_two_host_folders_do_not_leak_into_a_shared_folder():
    srcs = [A("alpha/hostname", "host_info", content_host="alpha-host"),
            A("alpha/dmesg"),
            A("beta/hostname", "host_info", content_host="beta-host"),
            A("beta/dmesg"),
            A("shared/launcher.log", "app_log")]
    assert resolve(srcs) == []
    assert [(s.host, s.host_from) for s in srcs] == [
        ("alpha-host", "contents"), ("alpha-host", "folder"),
        ("beta-host", "contents"), ("beta-host", "folder"),
        (None, None)]


def test_a_folder_naming_two_hosts_is_reported_and_left_unknown():
    srcs = [A("box/hostname", "host_info", content_host="a1"),
            A("box/uname.txt", "host_info", content_host="b1"),
            A("box/dmesg")]
    notes = resolve(srcs)
    assert srcs[2].host is None and srcs[2].host_from is None
    assert notes == ["host-info files in folder box/ name several hosts: a1, b1"]


def test_top_folder_named_after_a_host_named_in_contents():
    perf = A("profiles/perf.script", "perf_script", content_host="vmhost")
    log = A("vmhost/train.log", "app_log")
    resolve([perf, log])
    assert (log.host, log.host_from) == ("vmhost", "folder")


def test_rank_contents_win_and_a_contradiction_is_noted():
    t = A("traces/rank7.pt.trace.json", "torch_trace", content_rank=5)
    u = A("traces/rank2.pt.trace.json", "torch_trace", content_rank=2)
    notes = resolve([t, u])
    assert (t.rank, t.rank_from) == (5, "contents")
    assert (u.rank, u.rank_from) == (2, "contents")
    assert notes == ["traces/rank7.pt.trace.json: the file name says rank 7, its contents say rank 5"]


def test_nothing_known_stays_null():
    s = A("misc/notes.txt", "unrecognized")
    assert resolve([s]) == []
    assert (s.host, s.host_from, s.rank, s.rank_from) == (None, None, None, None)
