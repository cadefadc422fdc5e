"""perf script ingest on real files, checked against an independent naive reading of the same text."""
import gzip
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

DATA = Path(__file__).resolve().parents[1] / "data" / "perf_script"
SAMPLE_PERF = Path(__file__).resolve().parents[2] / "sample_traces/oom-after-throttle/vm/perf/perf.script.txt.gz"
FILES = sorted(p for p in DATA.iterdir() if p.name != "PROVENANCE.md")


def text_of(p: Path) -> str:
    b = p.read_bytes()
    return (gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b).decode("utf-8", "replace")


def naive(text: str):
    """An independent, slow reading: records split on blank lines, frames = indented hex lines."""
    frame_re = re.compile(r"^\s+([0-9a-fA-F]+) (.*)$")
    time_re = re.compile(r"\s\d+\.\d{6,9}:(\s|$)")
    records = []
    cur = None
    for line in text.split("\n"):
        if line.startswith("#"):
            continue
        if not line.strip():
            cur = None
            continue
        m = frame_re.match(line)
        if m and (line.startswith("\t") or not time_re.search(line)) and cur is not None:
            cur["frames"].append(m.group(2))
            continue
        cur = {"header": line, "frames": []}
        records.append(cur)
    return records


def sym(frame_text: str) -> str:
    m = re.match(r"^(.*?)(?:\+0x[0-9a-fA-F]+)?(?: \(([^()]*)\))?$", frame_text)
    s, dso = m.group(1), m.group(2)
    if dso == "inlined":
        return s + " (inlined)"
    return s


def parse(tmp_path, p: Path):
    r = parse_file(ParseJob(str(p), p.name, str(tmp_path / ("out-" + p.name))))
    tables = {t: pl.read_parquet(files) for t, files in r.parts.items()}
    return r, tables


@pytest.mark.parametrize("p", FILES, ids=lambda p: p.name)
def test_detected_and_parsed_without_issues(tmp_path, p):
    assert default_registry().detect(Head.read(p, p.name)).parser.name == "perf_script"
    r, t = parse(tmp_path, p)
    assert (r.status, r.issues) == ("parsed", 0), r.error


@pytest.mark.parametrize("p", [p for p in FILES if "sched" not in p.name], ids=lambda p: p.name)
def test_sample_count_and_stack_frames_match_a_naive_reading(tmp_path, p):
    recs = naive(text_of(p))
    r, t = parse(tmp_path, p)
    samples = t["samples"]
    assert len(samples) == len(recs)
    # every sample's stack, walked up the prefix tree, is the record's frame list (leaf first)
    stacks = t.get("stacks")
    parent, frame = {}, {}
    if stacks is not None:
        parent = dict(zip(stacks["stack_id"], stacks["parent_id"]))
        frame = dict(zip(stacks["stack_id"], stacks["frame"]))
    got = []
    for sid in samples["stack_id"].to_list():
        path = []
        while sid is not None:
            path.append(frame[sid])
            sid = parent[sid]
        got.append(tuple(path))
    want = []
    for rec in recs:
        frames = [sym(f) for f in rec["frames"]]
        if not frames:   # single-line stacks: "... event:  ip sym (dso)"
            m = re.search(r"\s[0-9a-f]{4,16} (\S.*?)(?: \([^()]*\))?\s*$", rec["header"].split(":", 2)[-1])
            frames = [sym(m.group(1))] if m else []
        want.append(tuple(frames))
    assert Counter(got) == Counter(want)


def test_example_perf_stacks_header_and_fields(tmp_path):
    r, t = parse(tmp_path, DATA / "flamegraph__example-perf-stacks.txt.gz")
    facts = dict(zip(t["facts"]["key"], t["facts"]["value"]))
    assert facts["hostname"] == "lgud-bgregg" and facts["perf_version"].startswith("3.13")
    assert r.host == "lgud-bgregg"
    s = t["samples"]
    first = s.row(0, named=True)
    # "perf   977/977   [000] 7628263.042515: cycles: "
    assert (first["comm"], first["pid"], first["tid"], first["cpu"], first["ts_raw_ns"], first["event"]) == \
        ("perf", 977, 977, 0, 7628263042515000, "cycles")
    assert len(s) == 1315 and s["cpu"].n_unique() > 1


def test_single_thread_id_leaves_pid_unknown(tmp_path):
    # "func_ab 15294 cpu-clock:" (no time) and "dd 29776 666709.771979: 10101010 cpu-clock:"
    r, t = parse(tmp_path, DATA / "flamegraph__perf-funcab-pid-01.txt")
    s = t["samples"]
    assert s["pid"].null_count() == len(s) and set(s["tid"]) == {15294}
    assert r.clock_domain == "none" and "no time stamps" in r.attrs["time_note"]
    assert s["ts_raw_ns"].null_count() == len(s) == 228


def test_pid_slash_tid(tmp_path):
    r, t = parse(tmp_path, DATA / "speedscope__simple-with-pid.linux-perf.txt")
    row = t["samples"].row(0, named=True)
    assert (row["comm"], row["pid"], row["tid"], row["ts_raw_ns"]) == ("simple-terminat", 9, 9, 198791127353000)


def test_custom_fields_without_comm_or_time(tmp_path):
    # perf script -F pid,period,event,ip,sym: "36695          1 cycles:  ffffffffbab12ddd perf_event_exec"
    r, t = parse(tmp_path, DATA / "lkml__perf-script-F-pid-period-event-ip-sym.txt")
    s = t["samples"]
    assert len(s) == 10 and set(s["tid"]) == {36695} and set(s["event"]) == {"cycles"}
    leaf = dict(zip(t["stacks"]["stack_id"], t["stacks"]["frame"]))
    assert leaf[s["stack_id"][0]] == "perf_event_exec"


def test_sched_tracepoints_without_cpu_and_with_stacks(tmp_path):
    r, t = parse(tmp_path, DATA / "dspeyer__perf-sched-cycles-2015-04-06.scr.gz")
    text = text_of(DATA / "dspeyer__perf-sched-cycles-2015-04-06.scr.gz")
    ev = t["events"]
    counts = Counter(ev["name"])
    for name in ("sched:sched_switch", "sched:sched_wakeup", "sched:sched_process_exec"):
        assert counts[name] == len(re.findall(rf"^\S.* {name}: ", text, re.M)), name
    assert counts["oncpu"] == 0          # these tracepoint lines carry no [cpu]
    assert len(t["samples"]) == len(re.findall(r"^\S.* cycles: *$", text, re.M)) == 926


def test_sample_bundle_recording(tmp_path):
    """Our own system-wide recording: -g cpu-clock + sched tracepoints, -k CLOCK_MONOTONIC."""
    r, t = parse(tmp_path, SAMPLE_PERF)
    text = text_of(SAMPLE_PERF)
    assert r.status == "parsed" and r.host == "vm"
    assert len(t["samples"]) == text.count(" cpu-clock: ") == 3811
    ev = t["events"]
    assert Counter(ev["name"])["sched:sched_switch"] == text.count(" sched:sched_switch: ") == 30773
    exit_ = ev.filter((pl.col("name") == "sched:sched_process_exit") & (pl.col("pid") == 17988)).row(0, named=True)
    assert exit_["ts_raw_ns"] == 1127869966000 and exit_["line"] == 61272
    assert json.loads(exit_["attrs"])["comm"] == "python3" and exit_["text"].startswith("python3 17988 [001]")
    (anchor,) = t["anchors"].rows(named=True)
    assert (anchor["name"], anchor["local_ns"], anchor["wall_ns"]) == \
        ("perf_reference", 1077087053977, 1795958884979506000)
    # on-CPU intervals: each starts at a switch-in and lasts until the next switch on that CPU
    oncpu = ev.filter(pl.col("name") == "oncpu")
    assert len(oncpu) > 0 and oncpu["dur_ns"].min() >= 0


def test_truncated_and_garbage_are_counted(tmp_path):
    good = text_of(DATA / "speedscope__simple-with-pid.linux-perf.txt")
    lines = good.split("\n")
    bad = "\n".join(lines[:10] + ["\x01\x02 garbage that is no record", "also not a record"] + lines[10:])
    cut = bad[: len(bad) - 7]          # a truncated last frame line
    p = tmp_path / "x.perf.txt"
    p.write_text(cut)
    r, t = parse(tmp_path, p)
    assert r.status == "partial"
    issues = t["parse_issues"]
    assert 11 in issues["line"].to_list() and 12 in issues["line"].to_list()


def test_relative_times_are_refused_clearly(tmp_path):
    text = text_of(DATA / "speedscope__simple-with-pid.linux-perf.txt")
    # what `perf script --reltime` prints: the first sample at 0.000000
    first = float(re.search(r"(\d+\.\d{6}):", text).group(1))
    rel = re.sub(r"(\d+\.\d{6}):", lambda m: f"{float(m.group(1)) - first:.6f}:", text)
    p = tmp_path / "rel.txt"
    p.write_text(rel)
    r, t = parse(tmp_path, p)
    assert r.clock_domain == "none" and "relative" in r.attrs["time_note"] and r.status == "partial"


def test_repeated_header_pieces_keep_each_records_values(tmp_path):
    """Headers that repeat the same comm/pid/cpu and the same tracepoint payload (parsed once per
    distinct value) still give each record its own time, line and stack; space-only lines are
    blank and space-indented frame lines belong to their record."""
    switch = ("sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> "
              "next_comm=app next_pid=5 next_prio=120")
    text = "\n".join([
        f"         swapper     0 [000]   100.000001:          1 {switch}",
        "\tffffffff81000001 schedule ([kernel.kallsyms])",
        "\tffffffff81000002 worker+0x1b ([kernel.kallsyms])",
        "",
        f"         swapper     0 [000]   100.000002:          1 {switch}",
        "\tffffffff81000001 schedule+0x4 ([kernel.kallsyms])",
        "\tffffffff81000003 idle ([kernel.kallsyms])",
        "   ",
        f"         swapper     0 [000]   100.000003:          1 {switch}",
        " \u3000",
        "             app     5 [001]   100.000004:     250000 cpu-clock: ",
        "    ffffffff81000001 schedule ([kernel.kallsyms])",
        "    ffffffff81000002 worker ([kernel.kallsyms])",
        "",
    ])
    p = tmp_path / "repeat.perf.txt"
    p.write_text(text)
    r, t = parse(tmp_path, p)
    assert r.format == "perf_script" and r.status == "parsed" and "parse_issues" not in t
    nodes = {row["stack_id"]: row for row in t["stacks"].iter_rows(named=True)}

    def path(sid):
        out = []
        while sid is not None:
            out.append(nodes[sid]["frame"])
            sid = nodes[sid]["parent_id"]
        return out[::-1]

    sw = t["events"].filter(pl.col("name") == "sched:sched_switch").sort("line")
    assert sw["line"].to_list() == [1, 5, 9]
    assert sw["ts_raw_ns"].to_list() == [100_000_001_000, 100_000_002_000, 100_000_003_000]
    attrs = [json.loads(a) for a in sw["attrs"]]
    assert [a["next_pid"] for a in attrs] == [5, 5, 5]
    assert [path(a["stack_id"]) if a["stack_id"] is not None else None for a in attrs] == \
        [["worker", "schedule"], ["idle", "schedule"], None]
    oncpu = t["events"].filter(pl.col("name") == "oncpu").sort("ts_raw_ns")
    assert oncpu["tid"].to_list() == [5, 5] and oncpu["dur_ns"].to_list() == [1000, 1000]
    (s,) = t["samples"].rows(named=True)
    assert (s["comm"], s["tid"], s["cpu"], s["period"]) == ("app", 5, 1, 250000)
    assert path(s["stack_id"]) == ["worker", "schedule"]


def test_non_ascii_commands_are_cut_where_their_fields_end(tmp_path):
    """A command name with non-ASCII text (comms are bytes the process chose; a thread named in
    Japanese, an accented script name) leaves the header's and the payload's fields where they
    are: the cuts are at byte offsets of the separators, not at that many characters."""
    switch = ("sched:sched_switch: prev_comm=データ処理 prev_pid=7 prev_prio=120 prev_state=S ==> "
              "next_comm=trainé next_pid=8 next_prio=120")
    text = "\n".join([
        f"    データ処理     7/7     [003]   71.180677:          1 {switch}",
        "       trainé     8/8     [003]   71.180680:     250000 cpu-clock: ",
        "\tffffffff81000001 schedule ([kernel.kallsyms])",
        "",
    ])
    p = tmp_path / "utf8.perf.txt"
    p.write_text(text, encoding="utf-8")
    r, t = parse(tmp_path, p)
    assert r.status == "parsed" and "parse_issues" not in t
    (sw,) = t["events"].filter(pl.col("name") == "sched:sched_switch").rows(named=True)
    a = json.loads(sw["attrs"])
    assert (sw["tid"], sw["ts_raw_ns"]) == (7, 71_180_677_000)
    assert (a["prev_comm"], a["prev_pid"], a["next_comm"], a["next_pid"]) == ("データ処理", 7, "trainé", 8)
    (s,) = t["samples"].rows(named=True)
    assert (s["comm"], s["pid"], s["tid"], s["cpu"], s["ts_raw_ns"]) == ("trainé", 8, 8, 3, 71_180_680_000)


@pytest.mark.parametrize("seed", range(2))
def test_compiled_header_reader_gives_what_the_regexes_give(tmp_path, monkeypatch, seed):
    """Headers of every shape (comms with blanks, digits, dashes, brackets and non-ASCII text;
    pid, pid/tid, negative numbers; with and without a cpu; fractions of 5 to 10 digits;
    30-digit numbers; a time far out of range; no time at all) parse to the same tables with
    the compiled reader as with the regexes alone (every line left to them)."""
    from hypothesis import HealthCheck, given, seed as hseed, settings, strategies as st

    import aftertrace.ingest.formats.perf_script as ps
    from aftertrace.ingest import native
    real = native.perf_headers

    def regexes_only(lines, max_seconds):
        r = real(lines, max_seconds)
        import pyarrow as pa
        return r._replace(code=pa.array([native.UNSURE] * len(r.code), pa.uint8()))

    def header(comm, ids, cpu, sec, frac, tail, rest):
        return st.tuples(st.sampled_from(["", "  ", "\t"]), comm, st.sampled_from([" ", "  ", "\t"]), ids, cpu,
                         st.sampled_from([" ", "   "]), sec, frac, tail, rest).map(
            lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}{t[4]}{t[5]}{t[6]}.{t[7]}{t[8]}{t[9]}")

    rest = st.sampled_from(["  250000 cpu-clock: ", "       sched:sched_switch: prev_comm=a prev_pid=1 prev_prio=120 "
                            "prev_state=S ==> next_comm=b next_pid=2 next_prio=120", " 1 cycles: ", " cycles:u: ",
                            " sched:sched_process_exit: comm=x pid=3 prio=120", ""])
    # the shapes perf writes, and headers with one odd piece each that the regexes must judge
    comm = st.sampled_from(["perf", "", "python3", "swapper", "memfd:sealed-91", "kworker/0:1", "a b", "x 5", "12",
                            "-3", "[x]", "a [1]", "a  b", "x-1"])
    good_ids = st.sampled_from(["17973", "0", "7", "-1", "-0", "17973/17975"])
    cpu = st.sampled_from([" [000]", "", " [1]", "  [003] "])
    sec = st.sampled_from(["1077", "0", "71"])
    frac = st.sampled_from(["163165", "1631650", "163165000", "000001"])
    tail = st.sampled_from([":", ": ", ":\t"])
    num = st.sampled_from(["123456789012345678901234567890", "a1", "--5", "1-2", "17973"])
    good = header(comm, good_ids, cpu, sec, frac, tail, rest)
    odd = st.one_of(
        header(st.sampled_from(["データ", "trainé", " lead", "x/", "a\x1fb"]), good_ids, cpu, sec, frac, tail, rest),
        header(comm, st.one_of(num, st.tuples(num, num).map("/".join)), cpu, sec, frac, tail, rest),
        header(comm, good_ids, st.sampled_from([" []", "[2]", " [99999999999]", " [1", " [x]"]), sec, frac, tail, rest),
        header(comm, good_ids, cpu, st.sampled_from(["9000000000", "12345678901234567890"]), frac, tail, rest),
        header(comm, good_ids, cpu, sec, st.sampled_from(["16316", "1631650001", "12345"]), tail, rest),
        header(comm, good_ids, cpu, sec, frac, st.sampled_from([":x", "", ":   "]), rest))
    untimed = st.tuples(st.sampled_from(["perf", "", "a b"]), good_ids, st.sampled_from([" [000]", ""]), rest).map(
        lambda t: f"{t[0]} {t[1]}{t[2]}{t[3]}")

    def tables(path, out):
        r = parse_file(ParseJob(str(path), path.name, str(out)))
        got = {t: pl.read_parquet(files).to_dicts() for t, files in sorted(r.parts.items())}
        return r.status, r.counts, got

    n = [0]

    @hseed(seed)
    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.one_of(good, good, odd, untimed), min_size=1, max_size=12))
    def check(heads):
        n[0] += 1
        p = tmp_path / f"h{seed}-{n[0]}.perf.txt"
        p.write_text("\n".join(h + "\n\tffffffff81000001 schedule ([kernel.kallsyms])\n" for h in heads),
                     encoding="utf-8")
        monkeypatch.setattr(ps.native, "perf_headers", real)
        a = tables(p, tmp_path / f"a{n[0]}")
        monkeypatch.setattr(ps.native, "perf_headers", regexes_only)
        b = tables(p, tmp_path / f"b{n[0]}")
        assert a == b, heads
        seen["status"].add(a[0])
        codes = real(native.texts(pl.Series(heads)), ps.MAX_SECONDS).code.to_pylist()
        seen["read"] += codes.count(1)
        seen["left"] += len(codes) - codes.count(1)

    seen = {"status": set(), "read": 0, "left": 0}
    check()
    # (both readers were at work: most headers read by the compiled one, some left, files parsed)
    assert seen["read"] > 100 and seen["left"] > 20 and "parsed" in seen["status"], seen


def test_detection_reads_on_while_the_body_can_still_reach_its_share():
    # The dry run stops reading once the lines left cannot lift its count to 80 % of the body;
    # a file whose first lines are foreign but whose body still reaches the share is read to the
    # end and claimed, and one just below the share is not. (Real records of the sample, no
    # "# perf" header: the body decides.)
    from aftertrace.ingest.formats.perf_script import PerfScriptParser
    lines = [ln for ln in text_of(SAMPLE_PERF).splitlines() if ln.strip() and not ln.startswith("#")][:400]
    heads = [ln for ln in lines if not ln.startswith(("\t", " "))]
    assert len(lines) == 400 and heads and sum(1 for ln in lines if ln.startswith("\t")) > 200

    def claimed(foreign: int) -> bool:
        body = ["a line of some other log, 2026-12-01 10:00:00"] * foreign + lines[:400 - foreign]
        return PerfScriptParser.detect(Head.from_lines("x.txt", body))

    assert claimed(0) and claimed(80)
    assert not claimed(81) and not claimed(300)
