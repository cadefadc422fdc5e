"""A snapshot series beyond counters: membership, process states, freezing, settings, unread files.

Data: tests/data/cgroup/members (PROVENANCE.md): a real series recorded on this machine with
record_membership.py — a process A and a process B in one cgroup of every v1 hierarchy and
of the v2 'unified' mount, A stopped and continued, the v1 freezer group frozen and thawed,
B moved out, the v2 group frozen and unfrozen, B killed, A killed (a zombie) and reaped.
Regenerate the golden file after a reviewed change with
``AFTERTRACE_UPDATE_GOLDEN=1 python -m pytest tests/ingest/test_cgroup_state.py``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import polars as pl
import pytest

from aftertrace.ingest.formats import _cgroup_state
from aftertrace.ingest.formats.cgroup import CgroupConcatParser, CgroupSnapshotsParser
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry, write_group_manifest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cgroup" / "members"
TRUTH = json.loads((DATA / "truth.json").read_text())
GOLDEN = ROOT / "tests" / "golden" / "cgroup-members.summary.json"
A, B, NAME = TRUTH["a_pid"], TRUTH["b_pid"], TRUTH["name"]
STEP = {s["what"]: s["ns"] for s in TRUTH["steps"]}
HIERARCHIES = ("cpu", "cpuacct", "memory", "freezer", "pids", "unified")


def files_of(root: Path, prefix: str = "") -> list[tuple[str, str]]:
    return sorted((prefix + p.relative_to(root).as_posix(), str(p)) for p in root.rglob("*") if p.is_file())


def run_groups(files, out: Path):
    reg = default_registry()
    out.mkdir(parents=True, exist_ok=True)
    res = []
    for n, (parser, g) in enumerate(reg.claim_groups(files)):
        man = write_group_manifest(g, out / f"g{n}.json")
        res.append((parser, g, parse_file(ParseJob(man, g.rel, str(out / f"g{n}"), None, "UTC", parser.name), reg)))
    return res


def table(r, name: str) -> pl.DataFrame:
    files = r.parts.get(name, [])
    return pl.concat([pl.read_parquet(f) for f in files]) if files else pl.DataFrame()


def unpack(dst: Path) -> Path:
    with tarfile.open(DATA / "series.tar.gz") as t:
        t.extractall(dst, filter="data")
    return dst


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    return unpack(tmp_path_factory.mktemp("members"))


@pytest.fixture(scope="module")
def series(recorded, tmp_path_factory):
    (res,) = run_groups(files_of(recorded), tmp_path_factory.mktemp("out"))
    return res


def snaps(root: Path) -> list[str]:
    return sorted(os.listdir(root / "vm" / "cgroup"))


def ns(name: str) -> int:
    s, f = name.split(".")
    return int(s) * 10**9 + int((f + "000000000")[:9])


def after(step: str, recorded: Path) -> int:
    """The first snapshot taken after a recorded step."""
    return min(t for t in map(ns, snaps(recorded)) if t >= STEP[step])


def test_every_file_of_the_series_is_one_source(series, recorded):
    parser, g, r = series
    assert parser is CgroupSnapshotsParser and g.rel == "vm/cgroup/"
    assert len(g.members) == len(files_of(recorded)) == 1076
    assert r.status == "parsed" and r.issues == 0, r.error
    assert r.attrs["snapshots"] == TRUTH["snapshots"] == 26


def test_membership_rows_follow_the_recorded_moves(series, recorded):
    m = table(series[2], "members")
    first = ns(snaps(recorded)[0])
    procs = m.filter(pl.col("basis") == "cgroup.procs")
    for h in HIERARCHIES:
        cg = f"/unified/{NAME}" if h == "unified" else f"/{NAME}"
        rows = procs.filter(pl.col("controller") == h).sort("ts_raw_ns", "pid")
        got = [(r["pid"], r["change"], r["present"], r["ts_raw_ns"]) for r in rows.iter_rows(named=True)]
        assert got == [(A, "first", True, first), (B, "joined", True, after("B joins", recorded)),
                       (B, "left", False, after("B to the root groups", recorded)),
                       (A, "left", False, after("kill A", recorded))], h   # (a zombie is listed no more)
        assert set(rows["cgroup"]) == {cg}
    # evidence: the file and the line that lists the pid
    joined = procs.filter((pl.col("change") == "joined") & (pl.col("controller") == "cpu")).row(0, named=True)
    path = recorded / joined["file"]
    assert path.read_text().splitlines()[joined["line"] - 1] == str(B)


def test_tasks_rows_carry_the_pid_of_main_threads_only(series):
    m = table(series[2], "members").filter(pl.col("basis").is_in(["tasks", "cgroup.threads"]))
    assert m["tid"].null_count() == 0
    main = m.filter(pl.col("tid") == A)
    assert len(main) and (main["pid"] == A).all()
    thread = m.filter(~pl.col("tid").is_in([A, B]))     # A's second thread, not in cgroup.procs
    assert len(thread) and thread["pid"].null_count() == len(thread)


def test_proc_cgroup_rows_name_cgroups_as_the_metrics_do(series):
    r = series[2]
    m = table(r, "members").filter(pl.col("basis") == "proc_cgroup")
    ents = set(table(r, "metrics")["entity"])
    a = m.filter((pl.col("pid") == A) & (pl.col("change") == "first"))
    got = dict(zip(a["controller"], a["cgroup"]))
    assert got["unified"] == f"/unified/{NAME}" and got["cpu"] == f"/{NAME}" and got["blkio"] == "/"
    assert {f"/unified/{NAME}", f"/{NAME}"} <= ents
    # B moved back to the root groups: one left/joined pair per hierarchy it was moved in
    b = m.filter(pl.col("pid") == B)
    left = b.filter(pl.col("change") == "left")
    assert sorted(left["controller"]) == sorted(HIERARCHIES)
    assert set(b.filter(pl.col("change") == "joined")["cgroup"]) == {"/", "/unified"}


def test_process_states_are_events_at_each_change(series, recorded):
    ev = table(series[2], "events")
    st = ev.filter(pl.col("name") == "proc_state").sort("pid", "ts_raw_ns")
    a = [(r["ts_raw_ns"], json.loads(r["attrs"])["state"]) for r in st.filter(pl.col("pid") == A).iter_rows(named=True)]
    assert [s for _, s in a] == ["S", "T", "S", "D", "S", "Z"]
    assert a[1][0] == after("SIGSTOP A", recorded) and a[2][0] == after("SIGCONT A", recorded)
    assert a[3][0] == after("freezer FROZEN", recorded) and a[5][0] == after("kill A", recorded)
    b = [json.loads(x)["state"] for x in st.filter(pl.col("pid") == B)["attrs"]]
    assert b == ["S", "D", "S"]
    t = json.loads(st.filter(pl.col("pid") == A)["attrs"][1])
    assert t["state_word"] == "stopped" and t["prev_state"] == "S" and t["name"] == "python3"
    assert t["file"].endswith(f"/proc/{A}/status") and t["vm_rss_bytes"] > 0
    line = st.filter(pl.col("pid") == A).row(1, named=True)
    assert line["text"] == "State:\tT (stopped)"
    assert (recorded / t["file"]).read_text().splitlines()[line["line"] - 1] == line["text"]


def test_context_switches_stop_while_stopped_or_frozen(series, recorded):
    met = table(series[2], "metrics").filter(pl.col("entity") == f"pid {A}")
    cs = met.filter(pl.col("metric") == "proc.ctxt_switches").sort("ts_raw_ns")
    ts, v = cs["ts_raw_ns"].to_list(), cs["value"].to_list()
    stopped = [x for t, x in zip(ts, v) if after("SIGSTOP A", recorded) <= t < after("SIGCONT A", recorded)]
    frozen = [x for t, x in zip(ts, v) if after("cgroup.freeze 1", recorded) <= t < after("cgroup.freeze 0", recorded)]
    assert len(stopped) >= 2 and len(set(stopped)) == 1
    assert len(frozen) >= 2 and len(set(frozen)) == 1
    assert v[0] < stopped[0] < frozen[0]
    rss = met.filter(pl.col("metric") == "proc.vm_rss_bytes")
    assert (rss["value"] % 1024 == 0).all() and rss["unit"][0] == "bytes"


def test_freezing_is_a_metric_and_events(series, recorded):
    r = series[2]
    ev = table(r, "events").filter(pl.col("category") == "cgroup").sort("ts_raw_ns")
    got = [(x["name"], json.loads(x["attrs"])["cgroup"], x["ts_raw_ns"]) for x in ev.iter_rows(named=True)]
    assert got == [("cgroup_frozen", f"/{NAME}", after("freezer FROZEN", recorded)),
                   ("cgroup_thawed", f"/{NAME}", after("freezer THAWED", recorded)),
                   ("cgroup_frozen", f"/unified/{NAME}", after("cgroup.freeze 1", recorded)),
                   ("cgroup_thawed", f"/unified/{NAME}", after("cgroup.freeze 0", recorded))]
    fz = table(r, "metrics").filter(pl.col("metric") == "freezer.frozen")
    assert set(fz["value"]) == {0.0, 1.0} and set(fz["entity"]) == {f"/{NAME}", f"/unified/{NAME}"}


def test_host_pressure_copied_without_proc_is_read(series):
    met = table(series[2], "metrics")
    psi = met.filter((pl.col("entity") == "host") & (pl.col("metric") == "psi.cpu.some.total_ns"))
    # proc/pressure/cpu and pressure/cpu: the same kernel file copied twice per snapshot
    assert len(psi) == 2 * TRUTH["snapshots"]


def test_settings_are_facts_once_per_value(series):
    f = table(series[2], "facts")
    got = dict(zip(f["key"], f["value"]))
    assert got["cgroup.type"] == f"/unified/{NAME}: domain"
    assert got["notify_on_release"] == f"/{NAME}: 0"
    assert len(f.filter(pl.col("key") == "cgroup.type")) == 1


def test_golden_summary(series):
    r = series[2]
    m = table(r, "members").sort("basis", "controller", "cgroup", "pid", "tid", "ts_raw_ns")
    ev = table(r, "events").sort("name", "pid", "ts_raw_ns")
    summary = {
        "members": [[x["basis"], x["controller"], x["cgroup"], x["pid"], x["tid"], x["change"], x["present"],
                     x["ts_raw_ns"], x["file"], x["line"]] for x in m.iter_rows(named=True)],
        "events": [[x["name"], x["pid"], x["ts_raw_ns"], x["line"], x["text"]] for x in ev.iter_rows(named=True)],
        "attrs": {k: v for k, v in r.attrs.items() if k in ("members_rows", "proc_state_events", "freezer_events",
                                                           "setting_facts", "files", "snapshots")},
    }
    if os.environ.get("AFTERTRACE_UPDATE_GOLDEN"):
        GOLDEN.write_text(dump_rows(summary) + "\n")
    assert summary == json.loads(GOLDEN.read_text())


def dump_rows(obj, indent: int = 0) -> str:
    """JSON with one row per line (a reviewable diff): objects open up, lists of rows list a row a line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict) and obj:
        inner = ",\n".join(f"{pad}{json.dumps(k)}: {dump_rows(v, indent + 1)}" for k, v in sorted(obj.items()))
        return "{\n" + inner + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and all(isinstance(x, list) for x in obj):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj, sort_keys=True)



# -- files no reader knows, bad input, bounds ------------------------------------------------------
def test_an_unknown_file_in_every_snapshot_is_reported_once(recorded, tmp_path):
    root = tmp_path / "b"
    shutil.copytree(recorded, root)
    for s in snaps(root):
        shutil.copy(DATA / "memory.numa_stat", root / "vm" / "cgroup" / s / "memory" / NAME / "memory.numa_stat")
    (res,) = run_groups(files_of(root), tmp_path / "out")
    parser, g, r = res
    assert len(g.members) == 1076 + 26          # claimed: no source of their own
    iss = table(r, "parse_issues")
    assert iss["kind"].to_list() == ["not_read"]
    assert iss["message"][0].startswith("26 snapshots hold 'memory.numa_stat', not read")
    assert r.status == "partial" and r.attrs["not_read"] == {"memory.numa_stat": 26}


def test_a_file_another_parser_reads_stays_its_own_source(recorded, tmp_path):
    root = tmp_path / "b"
    shutil.copytree(recorded, root)
    s0 = snaps(root)[0]
    shutil.copy(ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "dmesg.txt", root / "vm" / "cgroup" / s0 / "dmesg.txt")
    files = files_of(root)
    (_, g), = default_registry().claim_groups(files)
    assert f"vm/cgroup/{s0}/dmesg.txt" not in {rel for rel, _ in g.members}
    assert len(g.members) == 1076


def test_garbage_in_membership_and_state_files_is_an_issue_with_file_and_line(recorded, tmp_path):
    root = tmp_path / "b"
    shutil.copytree(recorded, root)
    s = snaps(root)[5]
    procs = root / "vm" / "cgroup" / s / "cpu" / NAME / "cgroup.procs"
    procs.write_text(procs.read_text() + "not-a-pid\n\x00\x01garbage 12\n99999999999999999999\n")
    (root / "vm" / "cgroup" / s / "freezer" / NAME / "freezer.state").write_text("BANANA\n")
    pc = root / "vm" / "cgroup" / s / "proc" / str(A) / "cgroup"
    pc.write_text(pc.read_text() + "garbage\n")
    (res,) = run_groups(files_of(root), tmp_path / "out")
    r = res[2]
    assert r.status == "partial"
    msgs = table(r, "parse_issues")["message"].to_list()
    rel = f"vm/cgroup/{s}/cpu/{NAME}/cgroup.procs"
    n = len(procs.read_text().splitlines())
    assert [m for m in msgs if m.startswith(rel)] == [
        f"{rel}:{i}: cgroup.procs: expected one pid per line" for i in (n - 2, n - 1, n)]
    assert any(m.startswith(f"vm/cgroup/{s}/freezer/{NAME}/freezer.state:1: ") for m in msgs)
    assert any(m.startswith(f"vm/cgroup/{s}/proc/{A}/cgroup:") for m in msgs)
    m = table(r, "members")
    assert m["pid"].max() < 1 << 32       # the garbage is no pid
    # the good lines of the damaged file are still read: A stays in the cpu group at that snapshot
    cpu = m.filter((pl.col("basis") == "cgroup.procs") & (pl.col("controller") == "cpu"))
    assert (cpu.filter(pl.col("pid") == A)["change"].to_list()) == ["first", "left"]


def test_membership_is_bounded(recorded, tmp_path, monkeypatch):
    monkeypatch.setattr(_cgroup_state, "MAX_ITEMS", 100)
    (res,) = run_groups(files_of(recorded), tmp_path / "out")
    r = res[2]
    iss = table(r, "parse_issues")
    assert iss.filter(pl.col("kind") == "limit")["message"].to_list() == [
        "more than 100 listed pids/tids in the series: membership after that point is not read"]
    assert 0 < r.attrs["members_rows"] < 100


def test_concatenated_copies_report_unknown_files_once(recorded, tmp_path):
    """The real `tail -n +1` over the recorded copies (==> path <== blocks), one round per snapshot."""
    tail = shutil.which("tail")
    if tail is None:
        pytest.skip("no tail here")
    out = tmp_path / "tail.txt"
    with open(out, "wb") as f:
        for s in snaps(recorded)[:4]:
            d = tmp_path / s
            shutil.copytree(recorded / "vm" / "cgroup" / s, d)
            shutil.copy(DATA / "memory.numa_stat", d / "memory" / NAME / "memory.numa_stat")
            paths = [p.relative_to(d).as_posix() for p in sorted(d.rglob("*")) if p.is_file()]
            f.write(f"{s}\n".encode())
            f.write(subprocess.run([tail, "-n", "+1"] + paths, cwd=d, capture_output=True, check=True).stdout)
    head = Head.read(out, "tail.txt")
    assert CgroupConcatParser.detect(head)
    r = parse_file(ParseJob(str(out), "tail.txt", str(tmp_path / "o"), None, "UTC", "cgroup_concat"))
    iss = table(r, "parse_issues")
    assert iss["kind"].to_list() == ["not_read"], iss
    assert iss["message"][0].startswith("4 snapshots hold 'memory.numa_stat', not read")
    assert len(table(r, "members")) and len(table(r, "events").filter(pl.col("name") == "proc_state"))
