"""Parser detection on real files (tests/data, see tests/data/PROVENANCE.md)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from aftertrace.ingest.formats.kernel.dmesg import DmesgCtimeParser, DmesgRawParser
from aftertrace.ingest.formats.host_info import HostInfoParser
from aftertrace.ingest.parse import detect_files
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import Parser, Registry, default_registry

DATA = Path(__file__).resolve().parent.parent / "data"

RAW_DMESG = [
    "issue_reportportal-k8s-203_memcg_oom_raw.log",
    "issue_kata-runtime-1310_oom_in_guest_raw.log",
    "gpud__pstore-erst_null-deref.txt",
    "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log",
]
# Real files that are not raw dmesg, and the parser each one must go to (None: no parser).
# A lone cgroup file outside a snapshot folder or a /sys/fs/cgroup copy tells nothing datable.
NEGATIVES = {
    "flamegraph__perf-dd-stacks-01.txt": "perf_script",
    "raddet__nccl_debug.log": "nccl_log",
    "netdata-12595_v1_cpu.stat": None,
    "kepler-159_v2_root_cpu.stat": None,
    "hta__cpu_only_rank-34.pt.trace.json.gz": "kineto",
    "gpud__dmesg-iso_peermem.log": "dmesg_iso",
}
# host_info fixtures captured on the development machine (PROVENANCE.md)
HOST_INFO = ["proc_uptime", "date", "date_epoch", "date_iso", "date_rfc", "boot_id", "uname",
             "btime", "proc_stat", "anchors.txt", "hostname"]
FIRST_CUT = ("dmesg_raw", "dmesg_ctime", "host_info")


@pytest.fixture(scope="module")
def reg() -> Registry:
    return default_registry()


def head_of(path: Path, rel: str | None = None) -> Head:
    return Head.read(path, rel or path.name)


def test_registry_is_ordered_by_priority_with_unique_names(reg):
    names = [p.name for p in reg.parsers]
    assert len(names) == len(set(names))
    assert [p.priority for p in reg.parsers] == sorted((p.priority for p in reg.parsers), reverse=True)
    assert set(FIRST_CUT) | {"perf_script", "kineto", "nccl_log", "app_log", "dmesg_iso"} <= set(names)
    assert reg.by_name("dmesg_raw") is DmesgRawParser
    with pytest.raises(KeyError):
        reg.by_name("no_such_parser")


def test_the_test_data_is_small():
    for p in DATA.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 128_000, p


@pytest.mark.parametrize("name", RAW_DMESG)
def test_real_raw_dmesg_is_claimed_by_dmesg_raw(reg, name):
    det = reg.detect(head_of(DATA / "dmesg" / name))
    assert det.recognized
    assert det.parser is DmesgRawParser
    assert (det.parser.kind, det.parser.clock_domain) == ("dmesg", "boot")
    assert det.reason == ""
    assert not DmesgCtimeParser.detect(head_of(DATA / "dmesg" / name))
    assert not HostInfoParser.detect(head_of(DATA / "dmesg" / name))


@pytest.mark.parametrize("name", RAW_DMESG)
def test_raw_dmesg_detected_through_gzip_and_under_any_name(reg, tmp_path, name):
    p = tmp_path / "whatever.bin.gz"
    p.write_bytes(gzip.compress((DATA / "dmesg" / name).read_bytes()))
    assert reg.detect(Head.read(p, "node-3/whatever.bin.gz")).parser is DmesgRawParser


@pytest.mark.parametrize("name", NEGATIVES)
def test_real_non_dmesg_files_go_to_their_own_parser(reg, name):
    head = head_of(DATA / "negative" / name)
    det = reg.detect(head)
    want = NEGATIVES[name]
    if want is None:
        assert det.parser is None and not det.recognized
        assert det.reason == "no parser recognised the contents"
        assert sorted(det.tried) == sorted(p.name for p in reg.parsers)
    else:
        assert det.parser is not None and det.parser.name == want
    for p in (DmesgRawParser, DmesgCtimeParser, HostInfoParser):
        assert p.detect(head) is False, p.name


def test_gzipped_trace_head_is_the_decompressed_json():
    head = head_of(DATA / "negative" / "hta__cpu_only_rank-34.pt.trace.json.gz")
    assert head.data.lstrip().startswith(b"{")
    assert b'"distributedInfo"' in head.data
    assert head.name == "hta__cpu_only_rank-34.pt.trace.json"
    assert not head.binary


def test_detect_file_helper(reg):
    raw, negative, missing = detect_files([(str(DATA / "dmesg" / RAW_DMESG[0]), "x"),
                                           (str(DATA / "negative" / "kepler-159_v2_root_cpu.stat"), "y"),
                                           (str(DATA / "no-such-file"), "z")])
    assert raw.parser is DmesgRawParser
    assert negative.parser is None
    assert isinstance(missing, str) and "no-such-file" in missing


@pytest.mark.parametrize("name", HOST_INFO)
def test_captured_host_info_files_are_claimed(reg, name):
    det = reg.detect(head_of(DATA / "host_info" / name))
    assert det.parser is HostInfoParser, det.reason
    assert det.parser.kind == "host_info"


def test_hostname_only_by_file_name(reg, tmp_path):
    (tmp_path / "hostname").write_text("gpu-node-12\n")
    (tmp_path / "HOSTNAME.txt").write_text("gpu-node-12\n")
    (tmp_path / "notes.txt").write_text("gpu-node-12\n")
    assert reg.detect(head_of(tmp_path / "hostname", "node/hostname")).parser is HostInfoParser
    assert reg.detect(head_of(tmp_path / "HOSTNAME.txt")).parser is HostInfoParser
    det = reg.detect(head_of(tmp_path / "notes.txt"))
    assert det.parser is None and det.reason == "no parser recognised the contents"


@pytest.mark.parametrize("name,content", [
    ("cpuacct.usage", "1234567890\n"),
    ("memory.usage_in_bytes", "2147483648\n"),
    ("memory.max_usage_in_bytes", "1795958369\n"),     # a value that looks like an epoch
    ("cpu.max", "max 100000\n"),
    ("pids.current", "12\n"),
])
def test_cgroup_single_value_files_are_not_host_info(reg, tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content)
    det = reg.detect(head_of(p, f"cgroup/{name}"))
    assert det.parser.name == "cgroup_file"           # one cgroup file on its own, named as the kernel does
    det = reg.detect(head_of(p, "cgroup/not_a_cgroup_file"))
    assert det.parser is None or det.parser.kind != "host_info"


@pytest.mark.parametrize("name,content", [
    ("date", "1795958369\n"),           # whole-second epoch: only when the name says so
    ("epoch.txt", "1795958369\n"),
    ("anything", "1795958369.5\n"),     # a fraction makes it a reading whatever the name
])
def test_epoch_readings(reg, tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content)
    assert reg.detect(head_of(p)).parser is HostInfoParser


def test_host_info_refuses_a_file_with_one_foreign_line(reg, tmp_path):
    good = (DATA / "host_info" / "anchors.txt").read_text()
    p = tmp_path / "anchors.txt"
    p.write_text(good + "this line is not host info\n")
    assert reg.detect(head_of(p)).parser is None


def test_proc_stat_without_btime_is_not_claimed(reg, tmp_path):
    lines = [ln for ln in (DATA / "host_info" / "proc_stat").read_text().splitlines()
             if not ln.startswith("btime")]
    assert len(lines) >= 7
    p = tmp_path / "stat"
    p.write_text("\n".join(lines) + "\n")
    assert reg.detect(head_of(p)).parser is None
    # ... and with its btime line it is
    assert reg.detect(head_of(DATA / "host_info" / "proc_stat")).parser is HostInfoParser


def test_large_files_are_not_host_info(reg, tmp_path):
    p = tmp_path / "date"
    p.write_text("1795958369.5\n" * 6000)      # > 64 KiB head
    head = head_of(p)
    assert not head.complete
    assert reg.detect(head).parser is None


def test_empty_and_binary_files(reg, tmp_path):
    e = tmp_path / "empty.log"
    e.write_bytes(b"")
    det = reg.detect(head_of(e))
    assert (det.parser, det.reason) == (None, "empty file")
    b = tmp_path / "core.bin"
    b.write_bytes(bytes(range(256)) * 40)
    det = reg.detect(head_of(b))
    assert (det.parser, det.reason) == (None, "binary data (not a text format aftertrace reads)")
    assert det.tried == ()


def test_head_of_utf8_text_with_a_cut_multibyte_char_is_text(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes(("[    1.000000] caf\u00e9\n" * 5000).encode())
    head = Head.read(p, "x.log", size=4097)     # cuts inside the 2-byte é somewhere
    assert not head.binary
    assert not head.complete
    assert all(ln == "[    1.000000] caf\u00e9" for ln in head.lines)


def test_dmesg_ctime_detection(reg, tmp_path):
    p = tmp_path / "dmesg_T.txt"
    p.write_text("[Sun Nov 29 13:11:13 2026] Linux version 6.1\n"
                 "[Sun Nov 29 13:11:14 2026] Memory cgroup out of memory: Killed process 42 (python)\n")
    assert reg.detect(head_of(p)).parser is DmesgCtimeParser


def test_registry_refuses_duplicate_parser_names():
    with pytest.raises(ValueError, match="duplicate parser names"):
        Registry([DmesgRawParser, DmesgRawParser])


def test_unknown_clock_domain_is_refused_at_class_creation():
    with pytest.raises(ValueError, match="unknown clock domain"):
        class Bad(Parser):  # noqa: F841
            name = "bad"
            kind = "app_log"
            clock_domain = "galactic"


class _Crashing(Parser):
    name = "crashing"
    kind = "app_log"
    priority = 99
    clock_domain = "wall"

    @classmethod
    def detect(cls, head):
        raise RuntimeError("detector bug")


def test_a_crashing_detector_is_reported_not_raised():
    det = Registry([_Crashing]).detect(Head.from_bytes("x.log", b"hello\n"))
    assert det.parser is None
    assert "detector crashing failed: RuntimeError" in det.reason


def test_a_crashing_detector_does_not_hide_the_file_from_other_parsers():
    head = head_of(DATA / "dmesg" / RAW_DMESG[0])
    det = Registry([_Crashing, DmesgRawParser]).detect(head)
    assert det.parser is DmesgRawParser


def test_a_garbage_line_with_nul_bytes_does_not_make_a_log_binary(reg, tmp_path):
    text = (DATA / "dmesg" / RAW_DMESG[0]).read_bytes()
    p = tmp_path / "dmesg.txt"
    p.write_bytes(text[:200] + b"\n\x00\x00\xff garbage \xfe\x00\n" + text[200:])
    det = reg.detect(head_of(p))
    assert det.parser is DmesgRawParser
