"""Kernel-log ingest on real files, every format: exact records, typed findings, pids, times.

Files: tests/data/kernel/PROVENANCE.md. The ``vm_*`` files are this project's own machine after a
memory-cgroup OOM kill (pid 29133, and in the journal also pid 29493), a segfault (pid 29195) and
RT throttling that we caused ourselves. Expected values are read from the files here with small,
independent regexes and ``datetime``, never with the parser's code.
"""
from __future__ import annotations

import calendar
import gzip
import json
import os
import re
import shutil
import sys
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.parse import ParseJob, SourceResult, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

DATA = Path(__file__).resolve().parent.parent / "data"
K = DATA / "kernel"
from aftertrace.ingest.timeparse import NS


def rows(res: SourceResult, table: str) -> list[dict]:
    out = []
    for f in res.parts.get(table, []):
        out += pq.read_table(f).to_pylist()
    if table == "events":
        out.sort(key=lambda e: e["line"])
    return out


def parse(path: Path, tmp_path: Path, rel: str | None = None, **kw) -> SourceResult:
    return parse_file(ParseJob(str(path), rel or path.name, str(tmp_path / "out"), **kw))


def text_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode().split("\n")


def typed(res: SourceResult) -> list[dict]:
    return [dict(e, attrs=json.loads(e["attrs"])) for e in rows(res, "events") if e["kind"]]


def line_of(lines: list[str], needle: str, nth: int = 0) -> int:
    return [i for i, ln in enumerate(lines, 1) if needle in ln][nth]


# ---------------------------------------------------------------------------------------------
# every timestamp format of this machine's kernel log after the OOM kill we caused

def _raw_ts(line: str) -> int:
    m = re.search(r"\[\s*(\d+)\.(\d{6})\]", line)
    return int(m.group(1)) * NS + int(m.group(2)) * 1000


def _ctime_ts(line: str) -> int:
    m = re.search(r"\[\w{3} (\w{3}) +(\d+) (\d\d):(\d\d):(\d\d) (\d{4})\]", line)
    mon = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].index(m.group(1)) + 1
    return calendar.timegm((int(m.group(6)), mon, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                            int(m.group(5)))) * NS


def _iso_ts(line: str) -> int:
    m = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{6})([+-]\d\d:\d\d)", line)
    dt = datetime.strptime(m.group(1) + m.group(3), "%Y-%m-%dT%H:%M:%S%z")
    return int(dt.timestamp()) * NS + int(m.group(2)) * 1000


def _kmsg_ts(line: str) -> int:
    return int(line.split(",")[2]) * 1000


def _short_ts(line: str) -> int:   # journalctl -o short(-precise): no year; the file's mtime year is 2026
    m = re.match(r"(\w{3}) +(\d+) (\d\d:\d\d:\d\d)(?:\.(\d{6}))?", line)
    dt = datetime.strptime(f"2026 {m.group(1)} {m.group(2)} {m.group(3)}", "%Y %b %d %H:%M:%S")
    return calendar.timegm(dt.timetuple()) * NS + int(m.group(4) or 0) * 1000


def _short_iso_ts(line: str) -> int:
    m = re.match(r"(\S+?)(?:\.(\d{6}))?([+-]\d{4}) ", line)
    dt = datetime.strptime(m.group(1) + m.group(3), "%Y-%m-%dT%H:%M:%S%z")
    return int(dt.timestamp()) * NS + int(m.group(2) or 0) * 1000


FORMATS = {
    # file: (parser, clock, independent timestamp reader, record regex)
    "vm_dmesg.txt": ("dmesg_raw", "boot", _raw_ts, r"^\[\s*\d+\.\d{6}\] "),
    "vm_dmesg_r.txt": ("dmesg_raw", "boot", _raw_ts, r"^<\d+>\[\s*\d+\.\d{6}\] "),
    "vm_dmesg_decode.txt": ("dmesg_raw", "boot", _raw_ts, r"^\w+ *:\w+ *: \[\s*\d+\.\d{6}\] "),
    "vm_dmesg_T.txt": ("dmesg_ctime", "kernel_wall", _ctime_ts, r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\] "),
    "vm_dmesg_decode_T.txt": ("dmesg_ctime", "kernel_wall", _ctime_ts, r"^\w+ *:\w+ *: \[\w{3} "),
    "vm_dmesg_iso.txt": ("dmesg_iso", "kernel_wall", _iso_ts, r"^\d{4}-\d\d-\d\dT"),
    "vm_dmesg_decode_iso.txt": ("dmesg_iso", "kernel_wall", _iso_ts, r"^\w+ *:\w+ *: \d{4}-"),
    "vm_kmsg.txt.gz": ("dmesg_kmsg", "boot", _kmsg_ts, r"^\d+,\d+,\d+,[-c];"),
    "vm_journalctl_k_short.txt.gz": ("syslog", "wall", _short_ts, r"^\w{3} [ \d]\d \d\d:\d\d:\d\d vm [^: ]+:"),
    "vm_journalctl_k_short-precise.txt.gz": ("syslog", "wall", _short_ts, r"^\w{3} [ \d]\d [\d:]{8}\.\d{6} vm "),
    "vm_journalctl_k_short-iso.txt.gz": ("syslog_iso", "wall", _short_iso_ts, r"^\d{4}-\d\d-\d\dT[\d:]{8}\+0000 "),
    "vm_journalctl_k_short-iso-precise.txt.gz": ("syslog_iso", "wall", _short_iso_ts, r"^\d{4}-[^ ]+\.\d{6}\+0000 "),
    "vm_journalctl_k_short-monotonic.txt.gz": ("journal_monotonic", "boot", _raw_ts, r"^\[\s*\d+\.\d{6}\] vm "),
}


@pytest.fixture()
def mtime_2026(tmp_path):
    """Copies of the short journal files with the capture date as mtime (the year source)."""
    def copy(name: str) -> Path:
        p = tmp_path / name
        shutil.copy(K / name, p)
        t = calendar.timegm((2026, 11, 29, 13, 40, 0))
        os.utime(p, (t, t))
        return p
    return copy


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_own_oom_kill_in_every_format(tmp_path, mtime_2026, name):
    parser, clock, ts_of, rec_re = FORMATS[name]
    path = mtime_2026(name) if "short" in name else K / name
    lines = text_lines(K / name)
    res = parse(path, tmp_path)
    assert (res.status, res.kind, res.format, res.clock_domain) == ("parsed", "dmesg", parser, clock), res.error
    assert res.issues == 0
    expected_records = sum(1 for ln in lines if re.match(rec_re, ln))
    assert res.counts["events"] == expected_records
    ev = rows(res, "events")
    assert [e["line"] for e in ev] == [i for i, ln in enumerate(lines, 1) if re.match(rec_re, ln)]
    kinds = typed(res)
    kills = {k["pid"]: k for k in kinds if k["kind"] == "oom_kill"}
    kill_line = line_of(lines, "Killed process 29133 (python3)")
    k = kills[29133]
    assert (k["line"], k["ts_raw_ns"], k["name"]) == (kill_line, ts_of(lines[kill_line - 1]), "oom_kill")
    a = k["attrs"]
    assert (a["victim_pid"], a["victim_comm"], a["scope"], a["anon_rss_kb"], a["total_vm_kb"]) == (
        29133, "python3", "memcg", 65280, 78072)
    assert (a["constraint"], a["oom_memcg"], a["task_memcg"], a["memcg"]) == (
        "CONSTRAINT_MEMCG", "/aftertrace_issue6", "/aftertrace_issue6", "/aftertrace_issue6")
    assert a["memcg_usage"] == {"usage_kb": 65536, "limit_kb": 65536, "failcnt": int(
        re.search(r"memory: usage 65536kB, limit 65536kB, failcnt (\d+)", "\n".join(lines)).group(1))}
    assert a["trigger"] == {"pid": 29133, "comm": "python3", "cpu": int(
        re.search(r"CPU: (\d+) UID: 0 PID: 29133 Comm", "\n".join(lines)).group(1))}
    assert a["tasks"] == [{"pid": 29133, "uid": 0, "tgid": 29133, "total_vm": 19518, "rss": 17980,
                           "rss_anon": 16320, "rss_file": 1660, "rss_shmem": 0, "pgtables_bytes": 188416,
                           "swapents": 0, "oom_score_adj": 0, "name": "python3"}]
    assert a["invoked"] == {"comm": "python3", "gfp_mask": "0xcc0(GFP_KERNEL)", "order": 0, "oom_score_adj": 0}
    inv_line = line_of(lines, "python3 invoked oom-killer", -2 if "journalctl" in name else -1)
    assert a["report_first_line"] == inv_line
    assert k["dur_ns"] == ts_of(lines[kill_line - 1]) - ts_of(lines[inv_line - 1])
    assert "mem_cgroup_out_of_memory+0xc0/0x110" in a["frames"]
    assert a["summary"].startswith("The memory-cgroup OOM killer killed pid 29133 (python3), anon-rss 63.8 MiB "
                                   "in memory cgroup /aftertrace_issue6")
    seg = [t for t in kinds if t["kind"] == "segfault"]
    seg_line = line_of(lines, "python3[29195]: segfault at 0")
    assert [(s["line"], s["pid"], s["ts_raw_ns"]) for s in seg] == [
        (seg_line, 29195, ts_of(lines[seg_line - 1]))]
    assert seg[0]["attrs"]["object"] == "libc.so.6"
    rt = [t for t in kinds if t["kind"] == "rt_throttling"]
    rt_line = line_of(lines, "sched: RT throttling activated")
    assert [(r["line"], r["ts_raw_ns"]) for r in rt] == [(rt_line, ts_of(lines[rt_line - 1]))]
    # every OOM kill in the file, each once (the kernel log of this machine holds earlier recordings too)
    kill_pids = [int(m.group(1)) for m in (re.search(r"Killed process (\d+)", ln) for ln in lines) if m]
    assert sorted(kills) == sorted(kill_pids) and len(kill_pids) == len(set(kill_pids))


def test_own_second_kill_only_in_the_journal_is_live_received(tmp_path, mtime_2026):
    """The second OOM kill happened while journald ran: short-precise time is the receive time."""
    p = mtime_2026("vm_journalctl_k_short-precise.txt.gz")
    lines = text_lines(p)
    res = parse(p, tmp_path)
    kill = [t for t in typed(res) if t["pid"] == 29493][0]
    ln = line_of(lines, "Killed process 29493")
    assert (kill["line"], kill["ts_raw_ns"]) == (ln, _short_ts(lines[ln - 1]))
    assert kill["ts_raw_ns"] == calendar.timegm((2026, 11, 29, 13, 39, 15)) * NS + 982_000_000
    assert res.host == "vm"
    assert "modification time" in res.attrs["year_from"]


def test_syslog_year_follows_the_file_time(tmp_path):
    p = tmp_path / "kern.log"
    shutil.copy(K / "issue_ltp-1080_syslog_memcg_oom_rhel7.log", p)
    t = calendar.timegm((2020, 1, 10, 0, 0, 0))      # a file written in January: August is last year
    os.utime(p, (t, t))
    res = parse(p, tmp_path)
    ev = rows(res, "events")
    assert ev[0]["ts_raw_ns"] == calendar.timegm((2019, 8, 16, 20, 29, 54)) * NS
    k, cut = typed(res)
    assert (k["line"], k["pid"], k["attrs"]["victim_comm"], k["attrs"]["anon_rss_kb"], k["attrs"]["uid"]) == (
        8, 42424, "memcg_test_1", 96, 0)
    # the next report is cut by the excerpt's end before its kill line: the killer ran, victim unknown
    assert (cut["line"], cut["pid"], cut["kind"]) == (9, None, "oom_kill")
    assert k["attrs"]["scope"] == "memcg"                  # from the "Kill process" line before it
    assert ev[1]["text"].endswith("oom_score_adj name")    # the task table header is an event, untyped


def test_syslog_local_time_uses_the_bundle_zone(tmp_path, mtime_2026):
    p = mtime_2026("vm_journalctl_k_short.txt.gz")
    utc = parse(p, tmp_path / "a")
    ber = parse(p, tmp_path / "b", time_zone="Europe/Berlin")
    t_utc = [e["ts_raw_ns"] for e in rows(utc, "events")[:3]]
    t_ber = [e["ts_raw_ns"] for e in rows(ber, "events")[:3]]
    assert [a - b for a, b in zip(t_utc, t_ber)] == [3600 * NS] * 3
    assert ber.attrs["time_zone"] == "Europe/Berlin"


def test_journal_json_times_and_anchors(tmp_path):
    p = K / "vm_journalctl_k_json_tail.txt.gz"
    recs = [json.loads(ln) for ln in text_lines(p) if ln]
    res = parse(p, tmp_path)
    assert (res.status, res.format, res.clock_domain, res.issues) == ("parsed", "journal_json", "boot", 0)
    assert res.counts["events"] == len(recs)
    ev = rows(res, "events")
    assert [e["ts_raw_ns"] for e in ev] == [int(r["_SOURCE_MONOTONIC_TIMESTAMP"]) * 1000 for r in recs]
    kill = [t for t in typed(res) if t["kind"] == "oom_kill"]
    expect = [(int(re.search(r"Killed process (\d+)", r["MESSAGE"]).group(1)), i + 1,
               int(r["_SOURCE_MONOTONIC_TIMESTAMP"]) * 1000) for i, r in enumerate(recs)
              if "Killed process" in r["MESSAGE"]]
    assert [(k["pid"], k["line"], k["ts_raw_ns"]) for k in kill] == expect
    assert [e[0] for e in expect] == [17988, 29133, 29493]
    assert {k["severity"] for k in kill} == {"error"}       # PRIORITY 3
    assert res.host == "vm"
    # anchors: per 600 s window of printk time, the least delayed record
    windows: dict[int, list] = {}
    for n, r in enumerate(recs, 1):
        local = int(r["_SOURCE_MONOTONIC_TIMESTAMP"]) * 1000
        windows.setdefault(local // (600 * NS), []).append((int(r["__REALTIME_TIMESTAMP"]) * 1000 - local, local, n))
    anchors = sorted(rows(res, "anchors"), key=lambda a: a["local_ns"])
    assert len(anchors) == len(windows)
    for a, (w, pairs) in zip(anchors, sorted(windows.items())):
        off, local, n = min(pairs)
        assert (a["name"], a["domain"], a["local_ns"], a["wall_ns"], a["line"]) == (
            "journal", "boot", local, local + off, n)
        assert a["boot_id"] == "1999405b5cb5442eb8b35fa3df3699f8"
        assert a["uncertainty_ns"] >= 1_000_000
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert facts["boot_id"] == "1999405b5cb5442eb8b35fa3df3699f8"


def test_kmsg_continuation_lines_are_not_records(tmp_path):
    lines = text_lines(K / "vm_kmsg.txt.gz")
    res = parse(K / "vm_kmsg.txt.gz", tmp_path)
    conts = sum(1 for ln in lines if ln.startswith(" "))
    assert conts > 0
    assert res.counts["events"] == sum(1 for ln in lines if ln) - conts
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert facts["kernel"] == "6.18.44-fc-v657" and facts["boots"] == "1"


def test_dmesg_T_conversion_is_stated(tmp_path):
    res = parse(K / "vm_dmesg_T.txt", tmp_path)
    assert "converted to wall time by dmesg" in res.attrs["converted_by_dmesg"]
    assert "1 s resolution" in res.attrs["converted_by_dmesg"]


# ---------------------------------------------------------------------------------------------
# real public logs (tests/data/kernel, copied from shared/real_traces/dmesg)

def test_hung_tasks_keep_their_stack(tmp_path):
    res = parse(DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log", tmp_path)
    hung = typed(res)
    assert [(h["line"], h["pid"], h["attrs"]["comm"], h["attrs"]["blocked_s"]) for h in hung] == [
        (1, 5747, "kworker/2:1", 120), (4, 11794, "ntpd", 120), (7, 12767, "snmpd", 120),
        (10, 13083, "zebra", 120), (13, 13094, "fpmsyncd", 120)]
    assert hung[0]["attrs"]["stack"] == [
        "Tainted: G        W   E     4.19.0-6-amd64 #1 Debian 4.19.67-2+deb10u2",
        '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.']
    assert hung[1]["ts_raw_ns"] == 26825_873379_000


def test_untimed_hung_task_with_old_stack(tmp_path):
    p = K / "issue_ddnet-401_no_timestamp_hung_task.log"
    lines = text_lines(p)
    res = parse(p, tmp_path)
    assert (res.status, res.format, res.clock_domain) == ("parsed", "kernel_notime", "none")
    [h] = typed(res)
    assert (h["line"], h["pid"], h["ts_raw_ns"], h["kind"]) == (1, 27090, None, "hung_task")
    # a 3.x trace prints every frame as "[<addr>] ? fn": kept, since nothing better exists
    assert h["attrs"]["frames"][:2] == ["__mutex_lock_common.isra.5+0xff/0x164", "mutex_lock+0x1a/0x2d"]
    assert len(h["attrs"]["stack"]) == sum(1 for ln in lines[1:] if ln)      # every line after the head


def test_hung_task_new_format_in_syslog(tmp_path):
    p = tmp_path / "messages"
    shutil.copy(K / "issue_sof-linux-3387_syslog_hung_task_new_format.log", p)
    res = parse(p, tmp_path)
    assert (res.format, res.status, res.issues) == ("syslog", "partial", 1)   # the reporter's "..." line
    assert [(i["line"], i["text"]) for i in rows(res, "parse_issues")] == [(5, "...")]
    [h] = typed(res)
    assert (h["line"], h["pid"], h["attrs"]["blocked_s"]) == (9, 113, 122)
    assert h["attrs"]["stack"][2].startswith("task:kworker/u32:2   state:D")
    sudo = [e for e in rows(res, "events") if e["category"] == "syslog"]
    assert [(e["line"], e["name"], e["pid"]) for e in sudo] == [(7, "sudo", 3291)]


def test_aer_floods_fold_into_one_finding(tmp_path):
    res = parse(K / "issue_geerlingguy-rpi-pcie-64_aer_receiver_error_flood.log", tmp_path)
    ev = [dict(e, attrs=json.loads(e["attrs"])) for e in rows(res, "events") if e["name"] == "pcie_aer"]
    assert [(e["line"], e["kind"]) for e in ev] == [(1, "pcie_error"), (5, None), (9, None), (13, None)]
    assert ev[0]["attrs"]["repeats"] == 3 and ev[1]["attrs"]["repeat_of_line"] == 1
    assert ev[0]["attrs"]["device"] == "0000:00:1d.0"


def test_untimed_aer_lines(tmp_path):
    res = parse(K / "issue_pop-os-751_aer_no_timestamps_nvme.log", tmp_path)
    assert res.format == "kernel_notime" and res.issues == 0
    assert [(t["line"], t["attrs"]["device"]) for t in typed(res)] == [
        (1, "0000:00:1d.0"), (5, "0000:00:1d.0"), (8, "0000:03:00.0")]


def test_xid_flood_and_meanings(tmp_path):
    p = K / "gpud__dmesg-decode-iso_xid13_short.log"
    lines = text_lines(p)
    res = parse(p, tmp_path)
    xids = [dict(e, attrs=json.loads(e["attrs"])) for e in rows(res, "events") if e["name"] == "gpu_xid"]
    n13 = sum(1 for ln in lines if "NVRM: Xid (PCI:0000:38:00): 13," in ln)
    assert len(xids) == n13 + 1
    first = xids[0]
    assert (first["kind"], first["attrs"]["xid"], first["attrs"]["pci"], first["attrs"]["repeats"]) == (
        "gpu_xid", 13, "0000:38:00", n13 - 1)
    assert first["attrs"]["xid_name"] == "ROBUST_CHANNEL_GR_EXCEPTION"
    assert first["ts_raw_ns"] == _iso_ts(lines[0])
    x43 = xids[-1]
    assert (x43["kind"], x43["pid"], x43["attrs"]["process"], x43["attrs"]["xid"]) == (
        "gpu_xid", 2924364, "pt_main_thread", 43)
    assert first["severity"] == "warning"


def test_xid_48_63_94_in_iso_dmesg(tmp_path):
    p = DATA / "negative" / "gpud__dmesg-iso_peermem.log"     # read now: see the report to the lead
    res = parse(p, tmp_path)
    assert res.format == "dmesg_iso"
    found = [(t["line"], t["attrs"]["xid"], t["pid"]) for t in typed(res)]
    assert found == [(11, 48, None), (12, 63, None), (13, 94, None)]
    x94 = [dict(e, attrs=json.loads(e["attrs"])) for e in rows(res, "events") if e["line"] == 14][0]
    assert (x94["pid"], x94["kind"], x94["attrs"]["repeat_of_line"]) == (1248209, None, 13)


def test_kernel_oops_and_bug_with_registers(tmp_path):
    res = parse(DATA / "dmesg" / "gpud__pstore-erst_null-deref.txt", tmp_path)
    t = typed(res)
    assert [(x["line"], x["name"], x["kind"]) for x in t] == [(2, "kernel_bug", "kernel_oops"),
                                                            (5, "kernel_oops", "kernel_oops")]
    assert t[1]["attrs"]["proposed_kind"] == "kernel_oops"
    assert "write_sysrq_trigger+0x2f/0x40" in t[1]["attrs"]["frames"]


def test_rt_throttling_in_a_pasted_dmesg_diff(tmp_path):
    res = parse(K / "issue_krun-194_dmesg_diff_rt_throttling.log", tmp_path)
    assert (res.format, res.issues) == ("dmesg_raw", 3)       # ---, +++ and @@ lines
    [rt] = typed(res)
    assert (rt["line"], rt["ts_raw_ns"], rt["kind"]) == (7, 157_924835_000, "rt_throttling")


def test_kmsg_of_an_nvswitch_node(tmp_path):
    p = K / "gpud__dev-kmsg_raw_nvswitch.log"
    lines = [ln for ln in text_lines(p) if ln]
    res = parse(p, tmp_path)
    assert (res.format, res.status, res.counts["events"]) == ("dmesg_kmsg", "parsed", len(lines))
    assert rows(res, "events")[-1]["ts_raw_ns"] == int(lines[-1].split(",")[2]) * 1000


def test_memory_and_nic_faults_of_a_compute_node(tmp_path):
    # EDAC's count of corrected errors (dmesg -T), and an mlx5 adapter whose firmware stopped answering
    real = DATA / "realworld" / "dev"
    res = parse(real / "machine-shop-maintenance-66_dmesg-T-edac-ce-overflow.log", tmp_path / "a")
    assert [(t["line"], t["name"], t["kind"], t["attrs"]["count"], t["attrs"]["dimm"]) for t in typed(res)] == [
        (7, "memory_error", "hardware_error", 262, "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0")]
    res = parse(real / "charm-2635_dmesg-tacc-mlx5-health-compromised-irisc.log", tmp_path / "b")
    assert [(t["line"], t["name"], t["kind"], t["attrs"]["pci"]) for t in typed(res)] == [
        (2, "nic_health", "hardware_error", "0000:5e:00.0")]


@pytest.mark.parametrize("name,fmt", [
    ("gpud__journalctl-k-short-iso_k8s_node.log", "syslog_iso"),
    ("issue_gpud-pr1209_journalctl-k_gpu_node_boot.log", "syslog"),
    ("gpud__dmesg-decode-iso_peermem_err.log", "dmesg_iso"),
    ("issue_archfan-coreboot-2_aer_dll_timeout.log", "dmesg_raw"),
])
def test_other_real_logs_parse_cleanly(tmp_path, name, fmt):
    res = parse(K / name, tmp_path)
    assert (res.format, res.status, res.issues) == (fmt, "parsed", 0)


# ---------------------------------------------------------------------------------------------
# nvidia-bug-report.log.gz, sosreport names, boots, garbage

def test_nvidia_bug_report_sections(tmp_path):
    text = (K / "nvidia-bug-report_excerpt.log").read_bytes()
    # nvidia-bug-report.sh appends one gzip member per section
    parts = text.split(b"____________________________________________\n")
    p = tmp_path / "nvidia-bug-report.log.gz"
    p.write_bytes(b"".join(gzip.compress((b"____________________________________________\n" if i else b"") + part)
                           for i, part in enumerate(parts)))
    assert gzip.decompress(p.read_bytes()) == text
    lines = text.decode().split("\n")
    res = parse(p, tmp_path, rel="node-1/nvidia-bug-report.log.gz")
    assert (res.format, res.status, res.clock_domain, res.issues) == ("nvidia_bug_report", "parsed", "boot", 0)
    assert res.host == "nomade007"
    ev = rows(res, "events")
    dm = line_of(lines, "dmesg:")
    dmesg_lines = [i for i, ln in enumerate(lines, 1) if i > dm and re.match(r"^\[\s*\d+\.\d{6}\] ", ln)]
    scan_lines = [i for i, ln in enumerate(lines, 1) if re.match(r"^Oct 27 ", ln)]
    assert [e["line"] for e in ev] == sorted(scan_lines + dmesg_lines)
    by = {e["line"]: e for e in ev}
    assert by[dmesg_lines[-1]]["ts_raw_ns"] == _raw_ts(lines[dmesg_lines[-1] - 1])
    nvrm = by[line_of(lines, "NVRM: No NVIDIA GPU found.", 1)]
    a = json.loads(nvrm["attrs"])
    assert (nvrm["ts_raw_ns"], a["section"], a["local_time"], a["journal_boot"]) == (
        None, "journalctl -b -1", "Oct 27 16:48:06", -1)
    udev = by[line_of(lines, "systemd-udevd[389]")]
    assert (udev["category"], udev["pid"], json.loads(udev["attrs"])["section"]) == (
        "syslog", 389, "journalctl -b -0")
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert (facts["hostname"], facts["kernel"], facts["report_date"]) == (
        "nomade007", "6.0.1-arch2-1", "Thu Oct 27 08:50:11 PM -03 2022")


@pytest.mark.parametrize("src,rel,parser", [
    ("vm_dmesg.txt", "sosreport-vm-2026-11-29-abcdef/sos_commands/kernel/dmesg", "dmesg_raw"),
    ("vm_dmesg_T.txt", "sosreport-vm-2026-11-29-abcdef/sos_commands/kernel/dmesg_-T", "dmesg_ctime"),
    ("vm_dmesg.txt", "sosreport-vm-2026-11-29-abcdef/var/log/dmesg", "dmesg_raw"),
])
def test_sosreport_dmesg_files(tmp_path, src, rel, parser):
    p = tmp_path / Path(rel).name
    shutil.copy(K / src, p)
    assert default_registry().detect(Head.read(p, rel)).parser.name == parser
    res = parse(p, tmp_path, rel=rel)
    assert [t["pid"] for t in typed(res) if t["kind"] == "oom_kill"] == [17988, 29133]


def test_reboots_split_boots(tmp_path):
    # printk time restarts: 26825 s -> 1127 s -> 13.9 s
    c = (DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log").read_bytes()
    a = (K / "vm_dmesg.txt").read_bytes()
    b = (DATA / "dmesg" / "issue_kata-runtime-1310_oom_in_guest_raw.log").read_bytes()
    p = tmp_path / "dmesg.txt"
    p.write_bytes(c + a + b)
    nc, na, nb = c.count(b"\n"), a.count(b"\n"), b.count(b"\n")
    res = parse(p, tmp_path)
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert facts["boots"] == "3"
    assert (facts["boot.1.first_line"], facts["boot.2.first_line"]) == (str(nc + 1), str(nc + na + 1))
    ev = rows(res, "events")
    boots = [json.loads(e["attrs"]).get("boot", 0) if e["attrs"] else 0 for e in ev]
    assert boots == [0] * nc + [1] * na + [2] * nb
    restart = [e["line"] for e in ev if e["attrs"] and json.loads(e["attrs"]).get("boot_restart")]
    assert restart == [nc + 1, nc + na + 1]
    kills = [(t["pid"], t["attrs"].get("boot", 0)) for t in typed(res) if t["kind"] == "oom_kill"]
    # (the kata excerpt's report ends before its kill line: the killer ran in boot 2, victim unknown)
    assert kills == [(17988, 1), (29133, 1), (None, 2)]
    hung = [t["attrs"].get("boot", 0) for t in typed(res) if t["kind"] == "hung_task"]
    assert hung == [0] * 5


def test_a_boot_banner_starts_a_boot(tmp_path):
    """A log that restarts with the printk banner (nvidia-bug-report's real dmesg) after a later time."""
    lines = (K / "nvidia-bug-report_excerpt.log").read_text().split("\n")
    banner = [ln for ln in lines if re.match(r"^\[\s*\d+\.\d{6}\] ", ln)]
    a = (K / "vm_dmesg.txt").read_text()
    p = tmp_path / "dmesg.txt"
    p.write_text("\n".join(banner[:6]) + "\n" + a[:a.index("\n") + 1] + "\n".join(banner) + "\n")
    res = parse(p, tmp_path)
    facts = {f["key"]: f["value"] for f in rows(res, "facts")}
    assert facts["boots"] == "2" and facts["boot.1.first_line"] == "8"


def test_garbage_is_counted_and_skipped(tmp_path):
    lines = (K / "vm_dmesg_iso.txt").read_bytes().split(b"\n")[:-1]
    lines.insert(10, b"\xff\xfe garbage \xc3( line")
    lines.insert(20, b"not a kernel line at all")
    p = tmp_path / "dmesg_iso.txt"
    p.write_bytes(b"\n".join(lines) + b"\n")
    res = parse(p, tmp_path)
    assert (res.format, res.status, res.counts["events"]) == ("dmesg_iso", "partial", len(lines) - 2)
    assert [(i["line"], i["kind"]) for i in rows(res, "parse_issues")] == [
        (11, "undecodable"), (11, "bad_line"), (21, "bad_line")]
    assert res.issues == 3


# ---------------------------------------------------------------------------------------------
# the fast paths of the vectorised prefix split give what the general ones give


def _records(parser_cls, lines: list[str]):
    import polars as pl
    df = pl.DataFrame({"lineno": list(range(1, len(lines) + 1)), "line": lines, "bad_utf8": [False] * len(lines)})
    return parser_cls().records(df, None)


def test_iso_constant_columns_equal_per_row_columns():
    """One --decode width and one UTC offset per chunk: fields at constant columns. A chunk that mixes
    them takes the per-row path; the rows both share must come out the same."""
    from aftertrace.ingest.formats.kernel.dmesg import DmesgIsoParser
    same = ["kern  :info  : 2026-11-29T13:38:49,486513+01:00 Linux version 5.15.0",
            "kern  :err   : 2026-02-30T13:38:49,000001+01:00 feb 30 still reads",
            "kern  :warn  : 2026-11-29T24:00:00,000002+01:00  two spaces, one kept",
            "kern  :crit  : 2026-11-29T13:38:50,000003+01:00",
            "user  :notice: 2026-11-29T13:38:51,000004+01:00 w\u00e4rme: non-ASCII",
            "kern  :info  : not a record",
            "   indented continuation"]
    fast = _records(DmesgIsoParser, same)
    for extra in ("2026-11-29T13:38:52,000000-0530 no --decode, another offset",
                  "kern  :info  : 2026-11-29T13:38:52,000000+00:00 another offset"):
        slow = _records(DmesgIsoParser, same + [extra]).head(len(same))
        assert slow.equals(fast)
    assert fast["ts"].to_list()[:2] == [
        (calendar.timegm((2026, 11, 29, 13, 38, 49)) - 3600) * NS + 486513000,
        (calendar.timegm((2026, 3, 2, 13, 38, 49)) - 3600) * NS + 1000]
    assert fast["msg"].to_list()[2:5] == [" two spaces, one kept", "", "w\u00e4rme: non-ASCII"]
    assert fast["sev"].to_list()[:6] == ["info", "err", "warn", "crit", "notice", None]
    assert fast["ok"].to_list() == [True] * 5 + [False] * 2


def test_raw_stamp_fields():
    """Seconds as one float where the fraction has 6 digits, integer fields otherwise (ns printk);
    the one optional space after "]"; <N> and --decode prefixes."""
    from aftertrace.ingest.formats.kernel.dmesg import DmesgRawParser
    rec = _records(DmesgRawParser, [
        "[    0.000001] a", "[1234567.999999]b", "[    1.000000123]  ns", "<6>[ 4294967.295000] c",
        "kern  :warn  : [   12.500000] d", "+[    2.000000] e", "[    3.000000]", "garbage"])
    assert rec["ts"].to_list() == [1000, 1234567999999000, 1000000123, 4294967295000000, 12500000000,
                                   2000000000, 3000000000, None]
    assert rec["msg"].to_list() == ["a", "b", " ns", "c", "d", "e", "", "garbage"]
    assert rec["sev"].to_list() == [None, None, None, "6", "warn", None, None, None]


def test_subsystem_equals_the_capture():
    """kernel.subsystem answers per distinct 42-character head; SUBSYS's capture is the reference."""
    import polars as pl

    from aftertrace.ingest.formats.kernel.engine import SUBSYS, subsystem
    msgs = ["pcieport 0000:00:1c.1: AER: x", "pci 0000:d7: on NUMA node 5", "NVRM: Xid", "sched: RT",
            "eth0 (unregistering): link down", "systemd[1]: started", "nvidia-modeset[42]: x",
            "w\u00e4rme (x): thermal", "\u00e9l\u00e8ve: x", "a" * 39 + ": 39", "a" * 40 + ": 40",
            "b" * 38 + " (" + "c" * 40 + "): long", "eth0 (foo: bar): colon in parens", "x[12345678]: pid",
            "no subsystem here", "", "1abc: digit first", "a/b.c-d e: ok", "Killed process 1 (x)"] * 3
    s = pl.Series("msg", msgs)
    assert subsystem(s).to_list() == s.str.extract(SUBSYS, 1).to_list()


def test_compiled_subsystem_reader_equals_the_capture():
    """The compiled reader (``ingest.native.subsys``) reads what SUBSYS captures, on messages built
    from its pieces (hypothesis, a fixed number of examples): lazy names up to 39 characters, the
    "(...)" of up to 40 and the "[pid]" before ": ", in the regex's order; non-ASCII ones are left."""
    import polars as pl
    from hypothesis import HealthCheck, given, settings, strategies as st

    from aftertrace.ingest.formats.kernel.engine import SUBSYS, subsystem
    pieces = ["a", "Z", "eth0", "x" * 18, "y" * 38, "z" * 39, "1", "_", ".", "-", "/", " ", "  ", ":", ": ", " (",
              "(", ")", "c" * 39, "c" * 40, "c" * 41, "[", "]", "[12]", "[1x]", "12", "\t", "\u00e4", "\u0663", "x" * 90]

    @settings(max_examples=400, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.lists(st.sampled_from(pieces), max_size=10).map("".join), min_size=1, max_size=12))
    def check(msgs):
        s = pl.Series("msg", msgs + [None])
        assert subsystem(s).to_list() == s.str.extract(SUBSYS, 1).to_list(), msgs

    check()
    # every name, "(...)", "[pid]" and ending, each with each
    import itertools
    msgs = [n + p + d + t for n, p, d, t in itertools.product(
        ["a", "y" * 38, "z" * 39, "w" * 40, "a b"], ["", " (x)", " (" + "c" * 40 + ")", " (" + "c" * 41 + ")", " (a)b)", "(x)"],
        ["", "[12]", "[]", "[1x]"], [": ", ":", " : ", ": x", ""])]
    s = pl.Series("msg", msgs)
    assert subsystem(s).to_list() == s.str.extract(SUBSYS, 1).to_list()


def test_subsystem_and_prefixes_survive_a_hash_collision(monkeypatch):
    """Heads are grouped by a 64-bit hash and checked exactly: if two heads shared a hash, the text
    path gives the same answers (here every head gets one hash)."""
    import polars as pl

    from aftertrace.ingest.formats.kernel.engine import SUBSYS, subsystem
    from aftertrace.ingest.formats.kernel.frames import extract_distinct
    msgs = pl.Series("msg", ["NVRM: x", "sched: a", None, "", "eth0 (x): y", "NVRM: x", "x[1]: y", "plain"] * 2)
    pre = pl.Series("line", ["kern  :info  : ", None, "<6>", "user  :err   : ", "kern  :info  : "])
    want = subsystem(msgs).to_list(), extract_distinct(pre, r"(info|err)\s*: $").to_list()
    assert want == (msgs.str.extract(SUBSYS, 1).to_list(), pre.str.extract(r"(info|err)\s*: $", 1).to_list())
    hash_ = pl.Series.hash
    monkeypatch.setattr(pl.Series, "hash", lambda s, *a, **k: hash_(s, *a, **k) * 0)
    assert (subsystem(msgs).to_list(), extract_distinct(pre, r"(info|err)\s*: $").to_list()) == want


def test_oom_parts_are_tested_from_the_first_report_start():
    """Without an open OOM report the part test starts at the first hit that can open one; from there
    on (and with a report open) the column is the full test's."""
    import polars as pl

    from aftertrace.ingest.formats.kernel.engine import candidates
    msgs = ["memory: usage 1kB, limit 2kB, failcnt 3", "NVRM: Xid (PCI:0000:3b:00): 13, x",
            "python invoked oom-killer: gfp_mask=0x0", "memory: usage 1kB, limit 2kB, failcnt 3",
            "[  pid  ]   uid  tgid total_vm", "Memory cgroup stats for /x:"]
    n = len(msgs)
    rec = pl.DataFrame({"ok": [True] * n, "kern": [True] * n, "msg": msgs})
    full, lazy = candidates(rec, True), candidates(rec, False)
    assert lazy["oom_part"].to_list() == [False] * 3 + full["oom_part"].to_list()[3:]
    assert full["oom_part"].to_list() == [True, False, False, True, True, True]
    assert candidates(rec.head(2), False)["oom_part"].to_list() == [False, False]
    assert lazy.drop("oom_part").equals(full.drop("oom_part"))



_RAW_ODD = ["[99999.000000]no space", "\t[99999.000001] tab before", "[\t9999.000002] tab inside",
            "[9 999.000003] space in the seconds", "[99999.123456789] ns fraction", "[99999.5] short",
            "[\u00a09999.000004] no-break space", "[\uff19\uff19999.000005] fullwidth digits", "",
            "garbage", "   indented", "[99999999999999999999.000000] too large", "[99999.000006] ",
            "[99999.000007]", "[99999.000008]  two spaces", "[99999.000009] caf\u00e9: x",
            "[ 9999.000010] narrower", "[ 99999.000011] wider"]


# Heads of raw records, each a list of pieces; the test replaces each piece with each odd piece in
# turn, and hypothesis drops, doubles and replaces a few at once.
_RAW_HEADS = [["[", "  ", "12", ".", "123456", "]", " ", "msg"],
              ["<6>", "[", "99999", ".", "123456789", "]", " ", "a: b"],
              ["kern", "  ", ":", "info", "  ", ": ", "[", " ", "1", ".", "000001", "]", "x"],
              ["+", "<12>", "user", ":", " ", "warn", ": ", "[", "4000000000", ".", "000000", "]", " ", "m"],
              ["-", "[", "\t", "8999999999", ".", "999999", "]", "  ", "m"],
              [" ", "daemon", ":", "notice", ": ", "[", "9000000000", ".", "0000000", "]", "m"]]
_RAW_PIECES = sorted({p for h in _RAW_HEADS for p in h}) + [
    "", "[", "]", " ", "\t", ".", "0", "12345", "1234567890", "99999999999999999999", "<", ">", "<1234>", "<>",
    "<x>", ":", ":x", "warning", "emerg", "errx", "e\u00e9", "\uff19", "\u00a0", "x", "_", "a b", "[x]"]


def test_compiled_raw_reader_equals_the_raw_regexes():
    """Raw dmesg records are read by one compiled pass (``ingest.native.dmesg_raw``) and the lines it
    leaves by the regexes: the frame equals the regexes' alone on odd lines, on lines built from the
    grammar's pieces (hypothesis, a fixed number of examples) and on the real raw logs."""
    import polars as pl
    import pyarrow as pa
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from heads import each_piece_replaced, edited_heads
    from hypothesis import HealthCheck, given, settings
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.kernel import dmesg

    def df_of(lines):
        return pl.DataFrame({"lineno": list(range(1, len(lines) + 1)), "line": lines, "bad_utf8": [False] * len(lines)},
                            schema={"lineno": pl.Int64, "line": pl.String, "bad_utf8": pl.Boolean})

    def same(lines):
        p = dmesg.DmesgRawParser()
        assert p.records(df_of(lines), None).equals(p._records_regex(df_of(lines))), lines

    same(["[99998.000001] pci 0000:00:01.0: a", "[99999.999999] b", "[100000.000000] c: d",
          "<6>[ 99999.000010] a prefix", "kern  :info  : [ 1.000000] decode", "+[    1.000001] diff",
          "<7>user  :debug : [4.5] no", "[4000000000.000000] float range", "[8999999999.999999] float range",
          "[9000000000.000000] too late", None] + _RAW_ODD)

    @settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(edited_heads(_RAW_HEADS, _RAW_PIECES))
    def check(lines):
        same(lines)

    same(each_piece_replaced(_RAW_HEADS, _RAW_PIECES))
    check()
    lines = []
    for p in [*sorted((DATA / "dmesg").glob("*")), *sorted(K.glob("*"))]:
        if p.suffix in (".txt", ".log"):
            lines += p.read_text(errors="replace").splitlines()
    assert len(lines) > 1000
    same(lines)
    # (a record whose seconds the float path may round, and one with a prefix, are left to the regexes)
    r = native.dmesg_raw(pa.array(["[4000000000.000000] a", "[1.000000] a", "x [y]", "\u00e9[1.000000]"],
                                  pa.large_string()))
    assert r.code.to_pylist() == [255, 1, 255, 255] and r.unsure == 3


_ISO_ODD = ["", "   indented", "kern  :info  : not a record", "kern  :info  : 2026-11-29T13:38:49,486513+00:00",
            "kern  :info  : 2026-11-29T13:38:49,486513+00:00x no space",
            "kern :info : 2026-11-29T13:38:49,000001+00:00 other widths",
            "kern  : info : 2026-11-29T13:38:49,000002+00:00 space after the colon", "k\u00e9rn  :info  : "
            "2026-11-29T13:38:49,000003+00:00 non-ASCII facility", "2026-11-29T13:38:49,000004+00:00 no --decode",
            "kern  :info  : 2026-02-30T13:38:49,000005+00:00 feb 30",
            "kern  :info  : 2026-11-29T13:38:49,000006+0000 another offset"]


@pytest.mark.parametrize("extra", [[], [""], _ISO_ODD[:3], _ISO_ODD,
                                   ["kern  :info  : 2026-11-29T13:38:52,000000+01:00 another zone"]])
def test_iso_layout_rows_equal_the_per_row_path(monkeypatch, extra):
    """Lines with the layout of the chunk's first record (--decode widths, UTC offset, a space) skip the
    grammar, --decode and prefix tests (all of them in a chunk of such lines and blank ones); the frame
    is the one the per-row path builds (forced here by finding no layout)."""
    from aftertrace.ingest.formats.kernel import dmesg
    same = ["kern  :info  : 2026-11-29T13:38:49,486513+00:00 Linux version 5.15.0",
            "kern  :err   : 2026-11-29T13:38:50,000001+00:00 pci 0000:00:01.0: x",
            "user  :notice: 2026-11-29T13:38:51,000004+00:00  two spaces, one kept",
            "daemon:warn  : 2026-11-29T24:00:00,000002+00:00 24:00"]
    for lines in (same + extra, extra + same, [ln.split(": ", 1)[1] for ln in same] + extra):
        fast = _records(dmesg.DmesgIsoParser, lines)
        with monkeypatch.context() as m:
            m.setattr(dmesg, "_iso_layout", lambda s: None)
            assert _records(dmesg.DmesgIsoParser, lines).equals(fast), lines
    lay = dmesg._iso_layout(__import__("polars").Series(same))
    assert lay[1:] == (15, "+00:00")
    assert dmesg._iso_layout(__import__("polars").Series(["2026-11-29T13:38:49,486513+0100 x"])) is None


def test_boot_attrs_per_number_equal_per_row():
    """The plain events' boot attrs, made once per boot number, are the per-row text."""
    import polars as pl

    from aftertrace.ingest.formats.kernel.engine import _boot_attrs
    boot = pl.Series([0, 0, 1, 1, 1, 2, 1000, 1000, 12345678])
    new = pl.Series([False, False, True, False, False, True, True, False, True])
    want = [None, None, '{"boot":1,"boot_restart":true}', '{"boot":1}', '{"boot":1}',
            '{"boot":2,"boot_restart":true}', '{"boot":1000,"boot_restart":true}', '{"boot":1000}',
            '{"boot":12345678,"boot_restart":true}']
    assert _boot_attrs(boot, new).to_list() == want          # (per row: more numbers than `most`)
    assert _boot_attrs(boot.head(8), new.head(8)).to_list() == want[:8]
    assert _boot_attrs(boot.head(8), new.head(8), most=0).to_list() == want[:8]


def test_report_bodies_walked_from_the_heads_equal_the_forward_fill(monkeypatch):
    """KernelEngine._in_body (a walk forward from each stack head) gives the rows and the carried
    run of the forward fill over every row's body test, with and without a run carried in, with a
    head or a body line last, and falls back (None) on a run longer than its limit and on a chunk
    of fewer rows than WALK_MIN_ROWS."""
    import random

    import polars as pl

    from aftertrace.ingest.formats.kernel import engine as K

    class _P:
        clock_domain, untimed, name, per_line_host = "boot", False, "dmesg_raw", False

    class _Ctx:
        sink = None

    small = pl.DataFrame({"msg": ["Call Trace:", " frame+0x1/0x2"], "cont": [False, False],
                          "stack_head": [True, False]})
    assert K.KernelEngine(_Ctx(), _P())._in_body(small, small["stack_head"].arg_true()) is None
    monkeypatch.setattr(K, "WALK_MIN_ROWS", 0)      # (the walk itself, on small chunks)

    kinds = ["Call Trace:", " frame+0x1/0x2", "INFO: task x:1 blocked for more than 120 seconds.", "NVRM: x",
             "plain message", "RIP: 0010:x", "task:x state:D", "", "  indented"]
    # (a line that is not ASCII sends the chunk to the rounds in Python: both ways are held to the fill)
    kinds += ["  fr\u00e4me+0x1/0x2"] * (len(kinds) // 4) + ["pl\u00e4in"]
    from aftertrace.ingest import native
    said = []
    walk = native.body_walk
    monkeypatch.setattr(native, "body_walk", lambda *a: said.append(walk(*a)) or said[-1])
    rng = random.Random(6)
    for trial in range(300):
        n = rng.randint(1, 40)
        msgs = [rng.choice(kinds) for _ in range(n)]
        rec = pl.DataFrame({"msg": msgs, "cont": [rng.random() < 0.1 for _ in range(n)]})
        rec = rec.with_columns(stack_head=pl.col("msg").str.contains_any(list(K.STACK_NEEDLES)))
        for carry in (False, True):
            ref = rec.with_columns(K._BODY).with_columns(
                pl.when(~pl.col("body") | pl.col("stack_head")).then(pl.col("stack_head")).otherwise(None)
                .forward_fill().fill_null(carry).alias("in_report"))
            want = (ref["body"] & ~ref["stack_head"] & ref["in_report"]).to_list()
            e = K.KernelEngine(_Ctx(), _P())
            e.carry_stack_run = carry
            got = e._in_body(rec, rec["stack_head"].arg_true(), most=64)
            assert got.to_list() == want, (trial, carry, msgs)
            assert e.carry_stack_run == bool(ref["in_report"][-1])
            e.carry_stack_run = carry
            short = e._in_body(rec, rec["stack_head"].arg_true(), most=2)
            assert short is None or short.to_list() == want
    ways = [w if isinstance(w, int) else "rows" for w in said]
    assert min(ways.count(w) for w in ("rows", native.BODY_UNSURE, native.BODY_LONG)) > 30


def test_the_compiled_body_test_is_the_regex():
    """native.body_walk's test of a line (BODY, the report body regex, read by Polars) on every
    line of the kernel logs of the corpus and on lines made from BODY's own pieces, edited; a line
    that is not ASCII is left to the regex."""
    import polars as pl

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from heads import each_piece_replaced, holds_on_edited_heads
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.kernel import engine as K

    def compiled(lines: list[str]) -> list[bool] | int:
        # each line a walk of its own, stopped by a head row after it
        texts = [x for ln in lines for x in (ln, "")]
        head = pl.Series([i % 2 == 1 for i in range(len(texts))]).cast(pl.UInt8).to_arrow()
        got = native.body_walk(native.texts(pl.Series(texts)), pl.Series([0] * len(texts), dtype=pl.UInt8).to_arrow(),
                               head, list(range(0, len(texts), 2)), 64)
        return got if isinstance(got, int) else got.to_pylist()[0::2]

    def same(lines: list[str]) -> None:
        ascii_only = [ln for ln in lines if ln.isascii()]
        want = pl.Series(ascii_only, dtype=pl.String).str.contains(K.BODY).to_list()
        assert compiled(ascii_only) == want, [(ln, w) for ln, w in zip(ascii_only, want)]
        for ln in lines:
            if not ln.isascii():
                assert compiled([ln]) == native.BODY_UNSURE

    corpus = []
    for path in sorted(p for p in (DATA / "kernel").rglob("*") if p.is_file()) + \
            sorted(p for p in (DATA / "dmesg").rglob("*") if p.is_file()):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for ln in data.decode("utf-8", "replace").splitlines():
            corpus += [ln, ln.split("] ", 1)[-1]]          # (the line, and what follows its stamp)
    assert len(corpus) > 20_000
    same(corpus)
    heads = [["Call Trace:"], ["RIP:", " 0010:x"], ["R", "1", "2", ":", " 0"], ["CPU: ", "3", " PID"],
             ["[<", "ffffffff8100", ">]", " fn"], ["kworker/0:1", "  ", "D", " ", "ffff8880deadbeef", " ", "0"],
             ["? ", "fn+0x1"], ["---[ end", " trace"], [" ", "x"], ["\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\""]]
    pieces = ["", " ", "\t", "\x0b", "\x1c", "\x85", "\u00a0", "\u0663", "A", "g", "ffffffff", "0" * 17, ">", "]",
              "R", "9", ":", "D", "x", "\u00e9", "fffffff", "ffffffffffffffff"]
    same(each_piece_replaced(heads, pieces))
    holds_on_edited_heads(heads, pieces, same)


def test_head_codes_number_the_distinct_values_or_step_aside(monkeypatch):
    """head_codes numbers the distinct values in order of first appearance, nulls left null (or
    answers None: no pl.Categories); subsystem gives the capture's values on both paths."""
    import polars as pl

    from aftertrace.ingest.formats.kernel import engine as K, frames as F
    s = pl.Series("k", ["b", "a", "b", "", "c", "a"])
    heads, code = F.head_codes(s)
    if heads is not None:
        assert heads.gather(code).to_list() == s.to_list() and heads.n_unique() == len(heads)
    heads, code = F.head_codes(pl.Series("k", [None, "a", None, "b", "a"]))
    if heads is not None:
        assert heads.to_list() == ["a", "b"] and code.to_list() == [None, 0, None, 1, 0]
    msgs = pl.Series("msg", ["NVRM: x", "sched: a", "", "eth0 (x): y", "NVRM: x", "x[1]: y", "plain"] * 2)
    want = msgs.str.extract(K.SUBSYS, 1).to_list()
    assert K.subsystem(msgs).to_list() == want
    monkeypatch.setattr(F, "_CATEGORIES", None)
    assert F.head_codes(s) == (None, None) and K.subsystem(msgs).to_list() == want


def test_syslog_years_vectorised_equal_the_line_loop():
    """SyslogParser._years (running count of month wrap-arounds) gives the per-line loop's years,
    nulls kept, across chunks, with a first month later than the file time's."""
    import random

    import polars as pl

    from aftertrace.ingest.formats.kernel.journal import SyslogParser

    def loop(p, months):
        out = []
        for m in months:
            if m is None:
                out.append(None)
                continue
            if p.prev_month is None:
                if m > p.ref_month:
                    p.year -= 1
            elif m < p.prev_month - 6:
                p.year += 1
            p.prev_month = m
            out.append(p.year)
        return out

    rng = random.Random(11)
    for trial in range(200):
        ref = rng.randint(1, 12)
        a, b = SyslogParser(), SyslogParser()
        for p in (a, b):
            p.year, p.ref_month, p.prev_month = 2026, ref, None
        for _chunk in range(3):
            months = [None if rng.random() < 0.2 else rng.choice([1, 2, 6, 7, 11, 12])
                      for _ in range(rng.randint(0, 12))]
            if not any(m is not None for m in months):
                continue       # (records does not call _years then)
            want = loop(a, months)
            got = b._years(pl.Series(months, dtype=pl.Int64)).to_list()
            assert got == want and (a.year, a.prev_month) == (b.year, b.prev_month), (trial, months)


def _journal_json_variants() -> list[str]:
    """Real ``journalctl -o json`` lines and the shapes where a one-pass decode and ``json_path_match``
    could disagree: byte-array MESSAGE, numbers, nulls, booleans, nested objects, missing fields,
    unicode escapes (lone surrogates, escaped key names), duplicate keys, spacing, key names inside
    values."""
    recs = [json.loads(ln) for ln in text_lines(K / "vm_journalctl_k_json_tail.txt.gz") if ln][:40]
    base = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in recs]
    r0 = recs[0]
    out = list(base)

    def v(**kw):
        d = dict(r0)
        for k, x in kw.items():
            if x is ...:
                d.pop(k, None)
            else:
                d[k] = x
        return d

    for d in (v(MESSAGE=[104, 105, 255, 10]), v(PRIORITY=6), v(_PID=123, SYSLOG_PID="x"), v(_HOSTNAME=None),
              v(MESSAGE=None), v(_TRANSPORT=True), v(_SOURCE_MONOTONIC_TIMESTAMP=...), v(_BOOT_ID=...),
              v(X={"a": [1, {"b": None}]}), v(MESSAGE='say "_PID": 5 {x} [y] \\u0041'),
              v(MESSAGE="é 😀 \x01 \t \x7f"), v(__REALTIME_TIMESTAMP="12x"), v(MESSAGE="MESSAGE"), v()):
        out.append(json.dumps(d, separators=(",", ":"), ensure_ascii=False))
        out.append(json.dumps(d))                        # ", " / ": " spacing, \u escapes
    line = base[1]
    out += [line[:-1] + ',"_HOSTNAME":"dup"}', line[:-1] + ',"MESSAGE":"dup"}',
            line.replace('"MESSAGE"', '"MESS\\u0041GE"'), line.replace('"MESSAGE":"', '"MESSAGE":"\\ud800'),
            line.replace('"MESSAGE":"', '"MESSAGE":"\\ud83d\\ude00'), line.replace('":"', '" : "'),
            " " + line + " ", "{}", "{ }", '{"MESSAGE":"only"}']
    return out


def _per_field(lines: list[str]) -> list[tuple]:
    import polars as pl
    from aftertrace.ingest.formats.kernel.journal import _J
    return pl.DataFrame({"line": lines}).select(
        **{k: pl.col("line").str.json_path_match(p) for k, p in _J.items()}).rows()


@pytest.mark.parametrize("extra", [[], ["-- Boot 1999405b5cb5442eb8b35fa3df3699f8 --", "garbage", "", "[1,2]"],
                                   ['{"MESSAGE":"raw\ttab"}'], ['{"a":1}{}', "{broken}", '{"MESSAGE":"x",}']])
def test_journal_json_one_pass_decode_equals_per_field_path(extra):
    """The decoded fields equal ``json_path_match``'s on every line: tricky lines take the per-field
    path; invalid JSON that looks like an object makes the chunk's decode fail (a retry without raw
    control characters, else the per-field path for the chunk)."""
    import polars as pl
    from aftertrace.ingest.formats.kernel.journal import _json_fields
    lines = _journal_json_variants()
    lines = lines[:30] + extra + lines[30:] + extra
    got = _json_fields(pl.Series("line", lines, dtype=pl.String))
    assert got.schema == pl.Schema({k: pl.String for k in got.columns})
    assert got.rows() == _per_field(lines)
    assert _json_fields(pl.Series("line", [], dtype=pl.String)).rows() == []


def test_journal_json_a_broken_line_leaves_the_rest_of_the_chunk_decoded_in_one_pass(monkeypatch):
    """A journal cut mid-record (its last line broken, closed like an object): only that line joins
    the lines that take the per-field path anyway (the whole chunk did), and the fields equal the
    per-field path's on every line."""
    import polars as pl
    import aftertrace.ingest.formats.kernel.journal as J
    lines = _journal_json_variants()
    lines = lines + lines
    real = J._fields_slow

    def slow_rows(text: list[str]) -> int:
        rows = []
        monkeypatch.setattr(J, "_fields_slow", lambda src: rows.append(src.height) or real(src))
        assert J._json_fields(pl.Series("line", text, dtype=pl.String)).rows() == _per_field(text)
        return sum(rows)

    cut = lines[:80] + [lines[1][: len(lines[1]) // 2] + "}"] + lines[80:]
    assert slow_rows(cut) == slow_rows(lines) + 1 < len(lines) // 2


def test_journal_json_anchor_medians_and_ties(tmp_path):
    """Anchors: per (boot, 600 s window) the least delayed record, the first of equal ones, and the
    spread to statistics.median of the window's offsets (odd and even counts), over several chunks."""
    import random
    import statistics
    rng = random.Random(3)
    recs, lines = [], []
    for i in range(3000):
        boot = "b%d" % (i // 1200)
        local_us = (i % 1200) * 1_000_000 + rng.randint(0, 999)
        off_us = 1_795_959_000_000_000 + rng.choice([0, 0, 5, 70, 3_000_000, rng.randint(0, 10_000_000)])
        r = {"__REALTIME_TIMESTAMP": str(local_us + off_us), "_SOURCE_MONOTONIC_TIMESTAMP": str(local_us),
             "_BOOT_ID": boot, "MESSAGE": "m%d %s" % (i, "é" * rng.randint(0, 300)), "_TRANSPORT": "kernel",
             "PRIORITY": "6", "_HOSTNAME": "vm", "SYSLOG_IDENTIFIER": "kernel"}
        if i % 97 == 5:
            r["MESSAGE"] = [104, 105]
        recs.append(r)
        lines.append(json.dumps(r, separators=(",", ":"), ensure_ascii=False))
    p = tmp_path / "journal.json"
    p.write_text("\n".join(lines) + "\n")
    pairs: dict = {}
    for n, r in enumerate(recs, 1):
        local = int(r["_SOURCE_MONOTONIC_TIMESTAMP"]) * 1000
        off = int(r["__REALTIME_TIMESTAMP"]) * 1000 - local
        msg = r["MESSAGE"] if isinstance(r["MESSAGE"], str) else None
        pairs.setdefault((r["_BOOT_ID"], local // (600 * NS)), []).append((off, local, n, msg))
    want = []
    for key, ps in sorted(pairs.items()):
        best = min(ps, key=lambda q: q[0])
        unc = max(1_000_000, int(statistics.median(q[0] for q in ps) - best[0]))
        want.append((key[0], best[1], best[1] + best[0], best[2], unc))
    import aftertrace.ingest.formats.kernel.engine as KM
    for chunk in (None, 50_000):
        saved = KM.records_ahead.__defaults__, KM.line_frames_to_the_cut.__defaults__
        if chunk:
            KM.records_ahead.__defaults__ = (chunk,)
            KM.line_frames_to_the_cut.__defaults__ = (chunk, True)
        try:
            res = parse(p, tmp_path / str(chunk))
        finally:
            KM.records_ahead.__defaults__, KM.line_frames_to_the_cut.__defaults__ = saved
        assert res.format == "journal_json"
        got = [(a["boot_id"], a["local_ns"], a["wall_ns"], a["line"], a["uncertainty_ns"])
               for a in rows(res, "anchors")]
        assert got == want


def test_syslog_in_another_locale(tmp_path):
    """journalctl under LANG=ru_RU: glibc's month abbreviations of the locale (a real paste)."""
    p = tmp_path / "journal.txt"
    shutil.copy(DATA / "realworld" / "dev" / "solus-packages-1465_russian-locale-journal-usb.log", p)
    t = calendar.timegm((2024, 2, 1, 0, 0, 0))
    os.utime(p, (t, t))
    res = parse(p, tmp_path)
    assert (res.format, res.status) == ("syslog", "parsed")
    ev = rows(res, "events")
    assert ev[0]["ts_raw_ns"] == calendar.timegm((2024, 1, 28, 19, 1, 35)) * NS     # янв 28 19:01:35
    assert ev[0]["host"] == "solus"


@pytest.mark.parametrize("month,num", [("Dez", 12), ("déc.", 12), ("mär", 3), ("AGO", 8), ("10月", 10)])
def test_locale_month_names(month, num):
    from aftertrace.ingest.timeparse import LOCALE_MONTH_RE, LOCALE_MONTHS
    assert re.fullmatch(LOCALE_MONTH_RE, month)
    assert LOCALE_MONTHS[month.lower().rstrip(".")] == num


def test_busybox_syslogd_facility_priority(tmp_path):
    """busybox syslogd writes "<timestamp> <host> <facility>.<priority> <tag>: <msg>" (its
    format_message); the kernel's lines may come under any facility (klogd forwards them)."""
    p = tmp_path / "messages"
    p.write_text(
        "Jan  1 00:00:12 cam user.err kernel: python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
        "oom_score_adj=0\n"
        "Jan  1 00:00:12 cam user.warn kernel: Out of memory: Killed process 1212 (python3) total-vm:1000kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n"
        "Jan  1 00:00:13 cam daemon.info dnsmasq[812]: read /etc/hosts - 2 addresses\n")
    res = parse(p, tmp_path)
    assert (res.format, res.status, res.host) == ("syslog", "parsed", "cam")
    ev = {e["line"]: e for e in rows(res, "events")}
    assert ev[2]["kind"] == "oom_kill" and ev[2]["pid"] == 1212
    assert (ev[3]["category"], ev[3]["name"], ev[3]["pid"]) == ("syslog", "dnsmasq", 812)
