"""Wrappers around known formats: peeled off for detection and for the parse, line numbers kept."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from ingest.parse import ParseJob, parse_file
from ingest.registry import default_registry
from ingest.unwrap import layers, peel_line

# the module's worked example (two lines of a real paste, tests/data/realworld/dev/llamafactory-7396_*)
PASTE = (
    "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
    "[80747] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600067 milliseconds before timing out.\n")

DMESG = ["[ 7530.032030] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
         "[ 7530.040000] Out of memory: Killed process 1212 (python3) total-vm:1000kB, anon-rss:900kB, "
         "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0",
         "[ 7531.000000] eth0: link up"]


def _events(out) -> list[dict]:
    rows = []
    for f in sorted(out.glob("events*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def test_the_module_worked_example(tmp_path):
    f = tmp_path / "paste.log"
    f.write_text(PASTE)
    det = default_registry().sniff(f, "paste.log")
    assert det.parser.name == "app_log" and det.unwrap == ("bracket_number",)
    r = parse_file(ParseJob(str(f), "paste.log", str(tmp_path / "out")))
    assert r.status == "parsed" and r.attrs["unwrapped"] == ["bracket_number"]
    timeouts = [e for e in _events(tmp_path / "out") if e["kind"] == "collective_timeout"]
    assert sorted((e["rank"], e["line"]) for e in timeouts) == [(0, 1), (4, 2)]
    assert timeouts[0]["text"].startswith("[rank")          # the evidence is the line the parser read


def test_quoted_kernel_log_is_read_as_dmesg_with_its_line_numbers(tmp_path):
    f = tmp_path / "kmsg.txt"
    f.write_text("> # cat /proc/kmsg\n" + "".join(f"> {ln}\n" for ln in DMESG))
    det = default_registry().sniff(f, "kmsg.txt")
    assert det.parser.name == "dmesg_raw" and det.unwrap == ("quote",)
    r = parse_file(ParseJob(str(f), "kmsg.txt", str(tmp_path / "out")))
    assert r.attrs["unwrapped"] == ["quote"]
    kill = [e for e in _events(tmp_path / "out") if e["kind"] == "oom_kill"]
    assert len(kill) == 1 and kill[0]["line"] == 3 and json.loads(kill[0]["attrs"])["victim_pid"] == 1212
    assert kill[0]["ts_raw_ns"] == 7530_040_000_000


def test_a_container_runtime_wrapper_around_kernel_lines(tmp_path):
    f = tmp_path / "console.log"
    f.write_text("".join(json.dumps({"log": ln + "\n", "stream": "stdout", "time": "2024-01-01T00:00:00Z"}) + "\n"
                         for ln in DMESG))
    det = default_registry().sniff(f, "console.log")
    assert det.parser.name == "dmesg_raw" and det.unwrap == ("docker_json",)


def test_a_preamble_before_the_format(tmp_path):
    f = tmp_path / "job.out"
    pre = "".join(f"+ export VAR{i}=value{i}\n" for i in range(300))
    f.write_text(pre + "".join(ln + "\n" for ln in DMESG * 3))
    det = default_registry().sniff(f, "job.out")
    assert det.parser.name == "dmesg_raw" and det.from_line > 1
    r = parse_file(ParseJob(str(f), "job.out", str(tmp_path / "out")))
    assert r.attrs["format_from_line"] == det.from_line
    assert any(e["kind"] == "oom_kill" and e["line"] == 302 for e in _events(tmp_path / "out"))


def test_free_form_tags_are_a_wrapper_only_when_they_repeat():
    words = [f"word{i}: something" for i in range(20)]
    assert list(layers(words)) == []
    tagged = [f"node-{i % 2}: [ {i}.000000] eth0: link up" for i in range(20)]
    assert [n for n, _ in layers(tagged)][0] == ("host_label",)


def test_indentation_is_peeled_as_common_width_only():
    lines = ["    Traceback (most recent call last):", "      File \"x.py\", line 1, in <module>",
             "    RuntimeError: boom"]
    names, peeled = next(iter(layers(lines)))
    assert names == ("indent:4",)
    assert peeled[1] == "  File \"x.py\", line 1, in <module>"
    assert peel_line(lines[1], names) == peeled[1]


def test_a_wrapper_on_some_lines_only_is_peeled_where_it_is(tmp_path):
    """A console capture where raw printk lines and their OpenWrt logread copies
    (``Thu May 14 19:29:11 2020 kern.warn kernel: [ 2542.160640] ...``) are interleaved."""
    real = Path(__file__).resolve().parents[1] / "data" / "realworld" / "dev" / \
        "linux-wireless-ath10k-lockup_openwrt-console-logread-interleaved.log"
    det = default_registry().sniff(real, real.name)
    assert det.parser.name == "dmesg_raw" and det.unwrap == ("syslog_kernel",)
    r = parse_file(ParseJob(str(real), real.name, str(tmp_path / "out")))
    assert r.status == "partial" and r.issues == 6
    bad = sorted(row["line"] for f in (tmp_path / "out").glob("parse_issues*.parquet")
                 for row in pq.read_table(f).to_pylist())
    # left unread: hostapd's syslog lines (1-3) and three console lines broken mid-word
    # ("hu May 14 ...", "25] ath10k_ahb ...", "fi: failed to halt axi bus: 0")
    assert bad == [1, 2, 3, 24, 26, 47]
