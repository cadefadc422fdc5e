"""Wrappers around known formats: peeled off for detection and for the parse, line numbers kept."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.registry import default_registry
from aftertrace.ingest.unwrap import layers, peel_line

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
    # (its console also cut lines at 140 columns: joined back first)
    assert det.parser.name == "dmesg_raw" and det.unwrap == ("cut:140", "syslog_kernel")
    r = parse_file(ParseJob(str(real), real.name, str(tmp_path / "out")))
    assert r.status == "partial" and r.issues == 4
    bad = sorted(row["line"] for f in (tmp_path / "out").glob("parse_issues*.parquet")
                 for row in pq.read_table(f).to_pylist())
    # left unread: hostapd's syslog lines (1-3) and a console line that two writers broke mid-word
    # ("hu May 14 ...": its "T" ends a shorter line above)
    assert bad == [1, 2, 3, 24]


APP = Path(__file__).resolve().parents[1] / "data" / "app_log"


def _terminal(lines: list[str], width: int) -> list[str]:
    """What a terminal ``width`` columns wide shows: every longer line in pieces of ``width``."""
    out = []
    for ln in lines:
        out += [ln[i:i + width] for i in range(0, len(ln), width)] or [""]
    return out


def test_terminal_width_worked_example():
    from aftertrace.ingest.unwrap import rejoin, terminal_width
    lines = (APP / "torchrun_mismatch.log").read_text().splitlines()
    assert terminal_width(lines) is None
    cut = _terminal(lines, 80)
    assert cut[454:456] == ["[default0]:[rank0]: RuntimeError: Detected mismatch between collectives on ranks",
                            ". Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=20, OpType="]
    assert terminal_width(cut) == 80
    joined = rejoin(cut, 80)
    assert len(joined) == len(cut)
    assert joined[454].startswith("[default0]:[rank0]: RuntimeError: Detected mismatch between collectives on "
                                  "ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=20")
    assert joined[0] == cut[0] == lines[0] and len(lines[0]) == 80 and joined[1] == lines[1]   # not joined
    assert [ln for ln in joined if ln] == [ln for ln in lines if ln]


def test_lines_all_as_wide_as_the_widest_are_not_a_terminal_cut():
    real = Path(__file__).resolve().parents[1] / "data"
    for p in (real / "realworld" / "dev" / "azhpc-diagnostics-77_nvidia-smi-power-ERR.txt",      # a table
              real / "nccl_log" / "issue_nvidia-nccl-697_ncclSystemError_socket_dgxa100.log",     # a template
              real / "realworld" / "dev" / "colossalai-3172_rich-indented-log-sigterm-exitcode-9.log"):  # padded
        from aftertrace.ingest.unwrap import terminal_width
        assert terminal_width(p.read_text().splitlines()) is None, p.name


def test_a_log_cut_by_a_terminal_reads_as_the_log(tmp_path):
    """The same findings on the same line numbers as the log as written; the cut pieces are not lines."""
    lines = (APP / "torchrun_mismatch.log").read_text().splitlines()
    cut = _terminal(lines, 80)
    f = tmp_path / "copied.log"
    f.write_text("\n".join(cut) + "\n")
    det = default_registry().sniff(f, f.name)
    assert det.parser.name == "app_log" and det.unwrap == ("cut:80",)
    r = parse_file(ParseJob(str(f), f.name, str(tmp_path / "out")))
    assert r.attrs["unwrapped"] == ["cut:80"]
    r0 = parse_file(ParseJob(str(APP / "torchrun_mismatch.log"), "orig.log", str(tmp_path / "orig")))
    assert r0.status == r.status
    start = {}          # line of the cut file where each line of the log as written starts
    n = 1
    for i, ln in enumerate(lines, 1):
        start[i] = n
        n += max(1, -(-len(ln) // 80))
    want = sorted((start[e["line"]], e["kind"]) for e in _events(tmp_path / "orig") if e["kind"])
    got = sorted((e["line"], e["kind"]) for e in _events(tmp_path / "out") if e["kind"])
    assert got == want and ("collective_mismatch" in {k for _, k in got})


def test_a_join_is_bounded():
    from aftertrace.ingest.unwrap import MAX_PIECES, rejoin, terminal_width
    # 80 columns each, every one "continued" (a letter first: lines that open with numbers of one
    # shape start records, like an strace's)
    lines = [f"x{i:03d}" + "x" * 76 for i in range(1000)]
    assert terminal_width(lines) == 80
    joined = rejoin(lines, 80)
    assert len(joined) == 1000 and len(joined[0]) == 80 * MAX_PIECES and joined[MAX_PIECES].startswith(lines[MAX_PIECES])
