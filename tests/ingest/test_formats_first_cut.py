"""parse_file on real dmesg files and on host-info files: exact rows."""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.parse import ParseJob, SourceResult, parse_file

DATA = Path(__file__).resolve().parent.parent / "data"
from aftertrace.ingest.timeparse import NS

# An independent, deliberately simple reading of a raw dmesg record.
TS = re.compile(rb"^(?:<\d>)?\[\s*(\d+)\.(\d{6})\]")

RAW_DMESG = {
    # file: (records, first ts_raw_ns, last ts_raw_ns) -- checked by hand with grep
    "issue_reportportal-k8s-203_memcg_oom_raw.log": (20, 7063_247407_000, 7093_543753_000),
    "issue_kata-runtime-1310_oom_in_guest_raw.log": (12, 13_957383_000, 13_958013_000),
    "gpud__pstore-erst_null-deref.txt": (39, 201_650687_000, 201_922450_000),
    "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log": (15, 26825_855448_000, 26825_926638_000),
}


def rows(res: SourceResult, table: str) -> list[dict]:
    out = []
    for f in res.parts.get(table, []):
        out += pq.read_table(f).to_pylist()
    if table == "events":   # typed events are written after the plain ones: file order is `line`
        out.sort(key=lambda e: e["line"])
    return out


def parse(path: Path, tmp_path: Path, rel: str | None = None, **kw) -> SourceResult:
    return parse_file(ParseJob(str(path), rel or path.name, str(tmp_path / "out"), **kw))


def expected_records(data: bytes) -> list[tuple[int, int]]:
    """(line number, ts_raw_ns) of every timestamped line."""
    out = []
    for i, line in enumerate(data.split(b"\n"), 1):
        m = TS.match(line)
        if m:
            out.append((i, int(m.group(1)) * NS + int(m.group(2)) * 1000))
    return out


# ---------------------------------------------------------------------------
# dmesg


@pytest.mark.parametrize("name", sorted(RAW_DMESG))
def test_real_dmesg_counts_and_times(tmp_path, name):
    path = DATA / "dmesg" / name
    data = path.read_bytes()
    n, first, last = RAW_DMESG[name]
    exp = expected_records(data)
    assert len(exp) == n                     # the hand count agrees with the regex count
    res = parse(path, tmp_path)
    assert (res.status, res.kind, res.format, res.clock_domain) == ("parsed", "dmesg", "dmesg_raw", "boot")
    assert res.error is None
    assert res.records == n and res.counts["events"] == n
    assert res.issues == 0 and res.counts["parse_issues"] == 0
    assert res.bytes == len(data) and res.bytes_read == len(data)
    assert res.compressed is False
    ev = rows(res, "events")
    assert [(e["line"], e["ts_raw_ns"]) for e in ev] == exp
    assert ev[0]["ts_raw_ns"] == first and ev[-1]["ts_raw_ns"] == last
    assert all(e["category"] == "kernel" for e in ev)
    lines = data.decode().split("\n")
    assert all(e["text"] == lines[e["line"] - 1] for e in ev)


def test_oom_kill_victim(tmp_path):
    res = parse(DATA / "dmesg" / "issue_reportportal-k8s-203_memcg_oom_raw.log", tmp_path)
    ev = rows(res, "events")
    kills = [e for e in ev if e["kind"] == "oom_kill"]
    assert len(kills) == 2
    k, cut = kills
    # the second report is cut before its kill line (the issue's excerpt ends): the killer still ran
    assert (cut["line"], cut["pid"]) == (3, None)
    assert json.loads(cut["attrs"])["victim_unknown"]
    assert json.loads(cut["attrs"])["summary"] == ("The OOM killer was invoked by uwsgi; the report ends before it "
                                                   "names the process it killed")
    assert (k["line"], k["ts_raw_ns"], k["name"], k["pid"]) == (1, 7063_247407_000, "oom_kill", 63214)
    assert json.loads(k["attrs"]) == {
        "victim_pid": 63214, "victim_comm": "uwsgi", "scope": "memcg",
        "total_vm_kb": 3149468, "anon_rss_kb": 164992, "file_rss_kb": 52176, "shmem_rss_kb": 92,
        "uid": 0, "pgtables_kb": 1372, "oom_score_adj": 986,
        "scope_name": "memory-cgroup OOM killer", "signature": "oom.kill",
        "signatures_version": "kernel-signatures/3",
        "summary": "The memory-cgroup OOM killer killed pid 63214 (uwsgi), anon-rss 161.1 MiB",
    }
    # the reaper line names the same process but is not a second kill
    reaper = ev[1]
    assert (reaper["name"], reaper["kind"], reaper["pid"]) == ("oom_reaper", None, 63214)
    inv = ev[2]
    assert (inv["line"], inv["ts_raw_ns"], inv["name"]) == (3, 7093_543707_000, "oom_invoked")
    a = json.loads(inv["attrs"])
    assert {k: a[k] for k in ("comm", "gfp_mask", "order", "oom_score_adj")} == {
        "comm": "uwsgi", "gfp_mask": "0xcc0(GFP_KERNEL)", "order": 0, "oom_score_adj": 986}
    # the excerpt ends inside the report's call trace: it is kept with the report's head
    assert a["frames"][:3] == ["dump_stack+0x6d/0x8b", "dump_header+0x4f/0x1eb", "oom_kill_process.cold+0xb/0x10"]


def test_oom_invoked_with_nodemask(tmp_path):
    res = parse(DATA / "dmesg" / "issue_kata-runtime-1310_oom_in_guest_raw.log", tmp_path)
    ev = rows(res, "events")[0]
    assert (ev["line"], ev["ts_raw_ns"], ev["name"]) == (1, 13_957383_000, "oom_invoked")
    attrs = json.loads(ev["attrs"])
    assert (attrs["comm"], attrs["order"], attrs["oom_score_adj"]) == ("mem", 0, 0)


def test_pstore_priorities_become_severities(tmp_path):
    res = parse(DATA / "dmesg" / "gpud__pstore-erst_null-deref.txt", tmp_path)
    ev = rows(res, "events")
    assert [(e["severity"], e["name"], e["kind"]) for e in ev[:3]] == [
        ("info", "sysrq", None), ("alert", "kernel_bug", "kernel_oops"), ("alert", "IP", None)]
    assert ev[4]["severity"] == "warning"
    # the last line has no trailing newline and is still a record
    assert ev[-1]["line"] == 39 and ev[-1]["text"].endswith("---[ end trace 8794939ba0598b91 ]---")


def test_specific_line_times(tmp_path):
    res = parse(DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log", tmp_path)
    ev = {e["line"]: e for e in rows(res, "events")}
    assert ev[4]["ts_raw_ns"] == 26825_873379_000
    assert ev[4]["text"] == "[26825.873379] INFO: task ntpd:11794 blocked for more than 120 seconds."
    assert ev[13]["ts_raw_ns"] == 26825_918528_000


def test_a_reboot_inside_the_log_is_marked(tmp_path):
    a = (DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log").read_bytes()
    b = (DATA / "dmesg" / "issue_kata-runtime-1310_oom_in_guest_raw.log").read_bytes()
    p = tmp_path / "dmesg.txt"
    p.write_bytes(a + b)
    res = parse(p, tmp_path)
    assert (res.status, res.records) == ("parsed", 27)
    ev = rows(res, "events")
    marked = [e["line"] for e in ev if e["attrs"] and json.loads(e["attrs"]).get("boot_restart")]
    assert marked == [16]                       # the first record after 26825 s -> 13.957 s
    assert ev[15]["ts_raw_ns"] == 13_957383_000


def test_garbage_lines_are_counted_with_line_numbers(tmp_path):
    lines = (DATA / "dmesg" / "issue_reportportal-k8s-203_memcg_oom_raw.log").read_bytes().split(b"\n")
    assert lines[-1] == b""
    lines = lines[:-1]
    # garbage at (1-based) lines 6 and 13 of the new file, an undecodable record at line 17
    lines.insert(5, b"this line is not dmesg")
    lines.insert(12, b"@@@ <<garbage>> @@@")
    lines.insert(16, b"[ 7093.543800] bad bytes \xff\xfe here")
    lines.insert(17, b"   indented junk after a record: a continuation, not an issue")
    p = tmp_path / "dmesg.txt"
    p.write_bytes(b"\n".join(lines) + b"\n")
    res = parse(p, tmp_path)
    assert res.format == "dmesg_raw"
    assert res.status == "partial"
    assert res.records == 21
    assert res.issues == 3
    assert res.error == "3 line(s) could not be used (first at line 6: not a dmesg_raw record)"
    issues = rows(res, "parse_issues")
    assert [(i["line"], i["kind"]) for i in issues] == [
        (6, "bad_line"), (13, "bad_line"), (17, "undecodable")]
    assert issues[0]["text"] == "this line is not dmesg"
    ev = {e["line"]: e for e in rows(res, "events")}
    assert ev[17]["ts_raw_ns"] == 7093_543800_000
    assert "\ufffd" in ev[17]["text"]
    assert 6 not in ev and 13 not in ev and 18 not in ev


def _big_dmesg(n: int) -> bytes:
    return b"".join(b"[%6d.%06d] kworker: message number %d with some padding text\n" % (i // 1000, i % 1000 * 1000, i)
                    for i in range(n))


def test_truncated_large_gz_is_partial(tmp_path):
    text = _big_dmesg(60_000)              # ~3.8 MB, far more than the 64 KiB head
    gz = gzip.compress(text, mtime=0)
    cut = gz[: len(gz) * 6 // 10]
    p = tmp_path / "dmesg.gz"
    p.write_bytes(cut)
    res = parse(p, tmp_path)
    assert res.status == "partial"
    assert res.compressed is True
    assert res.error == ("the compressed stream is truncated (the file ends early); "
                         "rows before the cut were kept")
    assert res.records > 0


def test_truncated_large_gz_keeps_every_line_before_the_cut(tmp_path):
    text = _big_dmesg(60_000)
    gz = gzip.compress(text, mtime=0)
    cut = gz[: len(gz) * 6 // 10]
    decodable = zlib.decompressobj(31).decompress(cut)
    complete = decodable.count(b"\n")
    assert 20_000 < complete < 60_000
    p = tmp_path / "dmesg.gz"
    p.write_bytes(cut)
    res = parse(p, tmp_path)
    assert res.status == "partial"
    assert complete <= res.records <= complete + 1


def test_truncated_small_gz_is_partial_with_rows_before_the_cut(tmp_path):
    data = (DATA / "dmesg" / "gpud__pstore-erst_null-deref.txt").read_bytes()
    gz = gzip.compress(data, mtime=0)
    cut = gz[: len(gz) // 2]
    complete = zlib.decompressobj(31).decompress(cut).count(b"\n")
    assert complete >= 10
    p = tmp_path / "dmesg.gz"
    p.write_bytes(cut)
    res = parse(p, tmp_path)
    assert (res.status, res.format) == ("partial", "dmesg_raw"), res.error
    assert complete <= res.records <= complete + 1
    ev = rows(res, "events")
    assert ev[0]["ts_raw_ns"] == 201_650687_000


def test_gz_dmesg_parses_like_the_plain_file(tmp_path):
    data = (DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log").read_bytes()
    p = tmp_path / "dmesg.txt.gz"
    p.write_bytes(gzip.compress(data))
    res = parse(p, tmp_path)
    assert (res.status, res.records, res.compressed, res.bytes_read) == ("parsed", 15, True, len(data))


def test_multi_member_gz_dmesg_reads_every_member(tmp_path):
    data = (DATA / "dmesg" / "issue_reportportal-k8s-203_memcg_oom_raw.log").read_bytes()
    half = data.index(b"[ 7093.543712] Call Trace:")
    p = tmp_path / "dmesg.gz"
    p.write_bytes(gzip.compress(data[:half], mtime=0) + gzip.compress(data[half:], mtime=0)
                  + b"\x00" * 64)                         # zero padding after the last member
    res = parse(p, tmp_path)
    assert (res.status, res.records, res.bytes_read) == ("parsed", 20, len(data))
    assert [e["line"] for e in rows(res, "events")] == list(range(1, 21))


def test_damaged_gz_is_partial(tmp_path):
    text = _big_dmesg(60_000)
    gz = bytearray(gzip.compress(text, mtime=0))
    mid = len(gz) // 2
    gz[mid:mid + 64] = b"\xff" * 64
    p = tmp_path / "dmesg.gz"
    p.write_bytes(bytes(gz))
    res = parse(p, tmp_path)
    assert res.status == "partial"
    assert res.error.startswith("the compressed stream is damaged")
    # the rows of (roughly) the first half were kept, nothing after the damage
    assert 20_000 < res.records < 40_000


def test_decompressed_limit_makes_the_source_partial(tmp_path):
    path = DATA / "dmesg" / "issue_reportportal-k8s-203_memcg_oom_raw.log"
    res = parse(path, tmp_path, max_bytes=500)
    assert res.status == "partial"
    assert res.error == "stopped: decompressed data exceeds the per-file limit of 500 bytes"
    # every byte within the limit is read (the lines before it, and the one the limit cuts), nothing after
    within = path.read_bytes()[:500].count(b"\n") + 1
    assert res.records == within and res.bytes_read == 500


def test_decompressed_limit_stops_a_gzip_bomb(tmp_path):
    line = b"[  100.000000] x\n"
    p = tmp_path / "dmesg.gz"
    p.write_bytes(gzip.compress(line * 1_500_000, compresslevel=1))    # 25 MB inflated
    assert p.stat().st_size < 500_000
    limit = 1_000_000
    res = parse(p, tmp_path, max_bytes=limit)
    assert res.status == "partial"
    assert res.error == f"stopped: decompressed data exceeds the per-file limit of {limit} bytes"
    assert res.records <= limit // len(line)
    assert res.bytes_read <= limit + (1 << 20)


def test_parse_file_never_raises_on_a_missing_file(tmp_path):
    res = parse(tmp_path / "gone.log", tmp_path)
    assert res.status == "failed"
    assert res.error.startswith("gone.log: cannot read:")


def test_dmesg_ctime_uses_the_bundle_time_zone(tmp_path):
    p = tmp_path / "dmesg_T.txt"
    p.write_text("[Sun Nov 29 13:11:13 2026] Linux version 6.1\n"
                 "[Sun Nov 29 13:11:14 2026] Memory cgroup out of memory: Killed process 42 (python)\n")
    utc = parse(p, tmp_path / "a")
    berlin = parse(p, tmp_path / "b", time_zone="Europe/Berlin")
    assert (utc.format, utc.clock_domain) == ("dmesg_ctime", "kernel_wall")
    t_utc = [e["ts_raw_ns"] for e in rows(utc, "events")]
    t_ber = [e["ts_raw_ns"] for e in rows(berlin, "events")]
    # 2026-11-29 13:11:13 UTC = 1795957873 s; Berlin is UTC+1 in November
    assert t_utc == [1795957873 * NS, 1795957874 * NS]
    assert t_ber == [(1795957873 - 3600) * NS, (1795957874 - 3600) * NS]
    assert utc.attrs["time_zone"] == "UTC" and berlin.attrs["time_zone"] == "Europe/Berlin"
    kill = rows(utc, "events")[1]
    assert (kill["kind"], kill["pid"]) == ("oom_kill", 42)
    assert json.loads(kill["attrs"])["scope"] == "memcg"


# ---------------------------------------------------------------------------
# host_info


def facts(res: SourceResult) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in rows(res, "facts"):
        out.setdefault(r["key"], []).append(r["value"])
    return out


def test_uptime_and_c_date_make_one_anchor(tmp_path):
    p = tmp_path / "anchors"
    p.write_text("561.63 829.76\nSun Nov 29 13:19:29 UTC 2026\n")
    res = parse(p, tmp_path)
    assert (res.status, res.kind, res.clock_domain, res.records) == ("parsed", "host_info", "none", 1)
    [a] = rows(res, "anchors")
    # uptime 561.63 s is truncated to 10 ms: the reading lies in [561.630, 561.640) -> midpoint
    assert a["local_ns"] == 561 * NS + 630_000_000 + 5_000_000
    # 2026-11-29 13:19:29 UTC: 2026-11-29 is day 20786 after 1970-01-01
    # (56 years 1970..2025 = 56*365 + 14 leap days = 20454; Jan..Oct 2026 = 304; + 28 days),
    # so the epoch second is 20786*86400 + 13*3600 + 19*60 + 29 = 1795910400 + 47969.
    assert 56 * 365 + 14 + 304 + 28 == 20786
    assert 20786 * 86400 + 13 * 3600 + 19 * 60 + 29 == 1795958369
    # `date` has 1 s resolution: the reading lies in [29 s, 30 s) -> midpoint
    assert a["wall_ns"] == 1795958369 * NS + NS // 2
    assert a["wall_is_utc"] is True
    # 5 ms (uptime) + 0.5 s (date) + 5 ms for the one line between the readings
    assert a["uncertainty_ns"] == 5_000_000 + 500_000_000 + 5_000_000
    assert (a["name"], a["domain"], a["line"]) == ("uptime_date", "boot", 1)
    assert a["text"] == "561.63 829.76\nSun Nov 29 13:19:29 UTC 2026"
    f = facts(res)
    assert f["time_zone"] == ["UTC"]
    assert f["reading.boottime_ns"] == [str(561_635_000_000)]
    assert f["reading.wall_ns"] == [str(1795958369 * NS)]


def test_captured_uptime_and_epoch_anchor(tmp_path):
    """tests/data/host_info/anchors.txt: `cat /proc/uptime; date +%s.%N` on the dev machine."""
    res = parse(DATA / "host_info" / "anchors.txt", tmp_path)
    [a] = rows(res, "anchors")
    assert a["local_ns"] == 561_675_000_000                 # 561.67 s + 5 ms
    assert a["wall_ns"] == 1795958369_569216128             # ns resolution: taken as read
    assert a["uncertainty_ns"] == 10_000_000                 # 5 ms + 5 ms for one line apart
    assert a["wall_is_utc"] is True


@pytest.mark.parametrize("name,wall_ns,res_ns", [
    ("date_epoch", 1795958369_531127910, 1),
    ("date_iso", 1795958369_532384295, 1),
    ("date_rfc", 1795958369 * NS, NS),
    ("date", 1795958369 * NS, NS),
])
def test_captured_single_wall_readings(tmp_path, name, wall_ns, res_ns):
    res = parse(DATA / "host_info" / name, tmp_path)
    assert res.status == "parsed" and res.issues == 0
    assert rows(res, "anchors") == []
    f = facts(res)
    assert f["reading.wall_ns"] == [str(wall_ns)]
    assert f["reading.wall_res_ns"] == [str(res_ns)]


def test_iso_date_with_an_offset(tmp_path):
    p = tmp_path / "date.txt"
    p.write_text("2026-11-29T14:19:29,5+01:00\n")
    f = facts(parse(p, tmp_path))
    assert f["reading.wall_ns"] == [str(1795958369 * NS + NS // 2)]
    assert f["utc_offset"] == ["+01:00"]


def test_c_date_with_a_local_zone_uses_the_bundle_zone(tmp_path):
    p = tmp_path / "anchors"
    p.write_text("100.00 1.00\nSun Nov 29 14:19:29 CET 2026\n")
    [a] = rows(parse(p, tmp_path / "a", time_zone="Europe/Berlin"), "anchors")
    assert a["wall_ns"] == 1795958369 * NS + NS // 2
    assert a["wall_is_utc"] is True
    [b] = rows(parse(p, tmp_path / "b"), "anchors")          # no zone known: read as UTC, flagged
    assert b["wall_ns"] == (1795958369 + 3600) * NS + NS // 2
    assert b["wall_is_utc"] is False


def test_captured_btime_and_proc_stat(tmp_path):
    for name in ("btime", "proc_stat"):
        res = parse(DATA / "host_info" / name, tmp_path / name)
        [a] = rows(res, "anchors")
        assert (a["name"], a["local_ns"], a["wall_ns"], a["uncertainty_ns"]) == (
            "btime", 0, 1795957807 * NS, NS)
        assert facts(res)["btime"] == ["1795957807"]


def test_captured_hostname_uname_boot_id(tmp_path):
    h = parse(DATA / "host_info" / "hostname", tmp_path / "h")
    assert (h.host, facts(h)["hostname"]) == ("vm", ["vm"])
    u = parse(DATA / "host_info" / "uname", tmp_path / "u")
    assert u.host == "vm"
    assert facts(u)["kernel"] == ["6.18.44-fc-v657"]
    b = parse(DATA / "host_info" / "boot_id", tmp_path / "b")
    assert facts(b)["boot_id"] == ["1999405b-5cb5-442e-b8b3-5fa3df3699f8"]
    assert b.host is None


def test_uptime_alone_is_a_reading_for_pairing(tmp_path):
    res = parse(DATA / "host_info" / "proc_uptime", tmp_path)
    assert rows(res, "anchors") == []
    f = facts(res)
    assert f["reading.boottime_ns"] == [str(561_635_000_000)]
    assert f["reading.tag"] == [""]




@pytest.mark.parametrize("uptime_name,date_name,tag", [
    ("uptime.start", "date.start", "start"),
    ("uptime", "date", ""),
    ("uptime_2", "date-2", "2"),
    ("uptime.start.txt", "date.start.log", "start"),
    pytest.param("uptime.txt", "date.log", ""),
    pytest.param("uptime.out", "date", ""),
])
def test_pairing_tags_from_file_names(tmp_path, uptime_name, date_name, tag):
    up = tmp_path / uptime_name
    up.write_text("561.63 829.76\n")
    dt = tmp_path / date_name
    dt.write_text("1795958369.531127910\n")
    assert facts(parse(up, tmp_path / "u"))["reading.tag"] == [tag]
    assert facts(parse(dt, tmp_path / "d"))["reading.tag"] == [tag]
