"""The command line as a user runs it: a real subprocess with a fresh AFTERTRACE_HOME."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aftertrace.ingest import __version__


def run(*args, home, cwd=None):
    env = dict(os.environ, AFTERTRACE_HOME=str(home), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "aftertrace.server.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_version(tmp_path):
    r = run("--version", home=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"aftertrace {__version__}"


def test_unreadable_path_is_one_line_and_nonzero(tmp_path):
    r = run("analyze", str(tmp_path / "missing.tgz"), home=tmp_path / "h")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "missing.tgz" in lines[0] and "no such file or directory" in lines[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("analyze", str(empty), home=tmp_path / "h")
    assert r.returncode == 2 and "holds no readable files" in r.stderr
    # (the intake runs beside the service's start: what stops it is still one line, and nothing is kept)
    (tmp_path / "zero.log").write_bytes(b"")
    r = run("analyze", str(tmp_path / "zero.log"), home=tmp_path / "h")
    assert r.returncode == 2 and r.stderr.strip() == "aftertrace: cannot read zero.log: the upload is empty"
    assert not [p for p in (tmp_path / "h" / "bundles").iterdir() if p.stat().st_size == 0]


def test_a_busy_store_leaves_no_stored_copy_behind(tmp_path):
    # The input is stored while the store is being opened: when the store cannot be opened (another
    # process holds it), the copy this command made goes again; one stored before stays.
    home = tmp_path / "h"
    home.mkdir()
    (tmp_path / "a.log").write_text("[    1.000000] hello\n")
    assert run("analyze", str(tmp_path / "a.log"), home=home).returncode == 0
    stored = sorted(p.name for p in (home / "bundles").iterdir())
    (tmp_path / "b.log").write_text("[    2.000000] other\n")
    hold = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
                             "print('ready', flush=True); time.sleep(60)", str(home / "aftertrace.duckdb")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout.readline().strip() == "ready"
        for name in ("b.log", "a.log"):
            r = run("analyze", str(tmp_path / name), home=home)
            assert r.returncode == 3 and "in use by another aftertrace process" in r.stderr
    finally:
        hold.kill()
        hold.wait()
    assert sorted(p.name for p in (home / "bundles").iterdir()) == stored


def test_a_bundle_of_many_folders_lists_its_sources_per_kind(tmp_path):
    # more rows than fit a terminal (one per folder after grouping alike files): one row per kind
    # and status instead, with the counts; the report still lists every file
    b = tmp_path / "b"
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(65):
        d = b / f"node-{letters[i // 26]}{letters[i % 26]}"
        d.mkdir(parents=True)
        (d / "dmesg.txt").write_text(f"[    1.000000] Linux version 6.1 node {i}\n[    2.000000] hello\n")
    (b / "node-aa" / "notes.bin").write_bytes(bytes(range(256)) * 4)
    r = run("analyze", str(b), "--json", str(tmp_path / "r.json"), home=tmp_path / "h")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Sources: 66 files — 65 parsed, 1 unrecognized, per kind" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert any("dmesg" in ln and "parsed" in ln and "65" in ln and "130" in ln for ln in rows), rows
    assert not any("node-ab/dmesg.txt" in ln for ln in rows)
    assert len(json.loads((tmp_path / "r.json").read_text())["sources"]) == 66


def test_the_terminal_lists_the_first_findings_and_says_how_many_more(tmp_path):
    import io
    from pathlib import Path
    from rich.console import Console
    from aftertrace.server.cli import MAX_FINDINGS, print_summary
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "oom-after-throttle"
    assert run("analyze", str(sample), "--json", str(tmp_path / "r.json"), home=tmp_path / "h").returncode == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    one = rep["anomalies"][0]
    rep["anomalies"] = [dict(one, summary=f"finding number {i}") for i in range(MAX_FINDINGS + 5)]
    buf = io.StringIO()
    print_summary(Console(file=buf, width=200), rep)
    out = buf.getvalue()
    assert f"Findings ({MAX_FINDINGS + 5}):" in out and f"finding number {MAX_FINDINGS - 1}\n" in out
    assert f"finding number {MAX_FINDINGS}\n" not in out
    assert "… and 5 more findings (every one is in the report" in out
    assert "Most likely chain" in out


def test_analyze_single_gz_file_and_json(tmp_path):
    import gzip
    f = tmp_path / "dmesg.txt.gz"
    f.write_bytes(gzip.compress(b"[    1.000000] a\n[    2.000000] Memory cgroup out of memory: Killed process "
                                b"4242 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB\n"))
    out = tmp_path / "r.json"
    r = run("analyze", str(f), "--json", str(out), "--title", "single file", home=tmp_path / "h")
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    assert rep["schema"] == "aftertrace.report/1" and rep["incident"]["title"] == "single file"
    (src,) = rep["sources"]
    assert (src["path"], src["kind"], src["status"], src["records"]) == ("dmesg.txt.gz", "dmesg", "parsed", 2)
    assert rep["anomalies"][0]["pid"] == 4242
    assert "dmesg.txt.gz" in r.stdout and "oom_kill" in r.stdout
    # a lone OOM kill is the failure; that nothing explains it is said, not hidden
    assert rep["failure"]["kind"] == "oom_kill" and rep["chains"] == []
    assert "no causal chain" in r.stdout
    r2 = run("incidents", home=tmp_path / "h")
    assert rep["incident"]["id"] in r2.stdout


def test_report_command_hang_in_three_formats(tmp_path):
    from pathlib import Path
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "logs-hang"
    h = tmp_path / "h"
    r = run("analyze", str(sample), "--json", str(tmp_path / "r.json"), home=h)
    assert r.returncode == 0, r.stderr
    iid = json.loads((tmp_path / "r.json").read_text())["incident"]["id"]
    # the terminal summary tells the story: rank 1 stopped, rank 0 (blamed by torchrun) waited for it
    assert "Most likely chain" in r.stdout and "rank_stalled" in r.stdout
    assert "rank 0 is a victim: it failed because of rank 1" in " ".join(r.stdout.split())   # (wrapped to the terminal)
    md = run("report", iid[:6], "-o", str(tmp_path / "r.md"), home=h)
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("# aftertrace report: logs-hang")
    assert "`rank_stalled` host vm, rank 1, pid 32413" in text
    assert "injecting fault hang at step 5" in text       # the stalled rank's last line, as evidence
    html = run("report", iid, "--format", "html", home=h)
    assert html.returncode == 0 and html.stdout.startswith("<!doctype html>") and 'id="chain-1"' in html.stdout
    js = json.loads(run("report", iid, home=h).stdout)
    assert js["origin"]["kind"] == "rank_stalled" and js["launcher_root_cause"] == {"rank": 0, "victim_of": 1}
    assert run("report", "nope", home=h).returncode == 2


def test_bundle_text_is_printed_as_it_is(tmp_path):
    # evidence lines name "file:100:" and quote the bundle's own text: neither an emoji code
    # (":100:" is one) nor markup may be rendered
    f = tmp_path / "dmesg.txt"
    lines = [f"[{i:5d}.000000] filler line {i}" for i in range(1, 100)]
    lines.append("[  100.000000] Memory cgroup out of memory: Killed process 4242 (py:smile:[bold]x[/bold]) "
                 "total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB")
    f.write_text("\n".join(lines) + "\n")
    r = run("analyze", str(f), home=tmp_path / "h")
    assert r.returncode == 0, r.stderr
    assert "dmesg.txt:100:" in r.stdout and "\U0001f4af" not in r.stdout
    assert "py:smile:[bold]x[/bold]" in r.stdout and "\U0001f604" not in r.stdout


def test_evidence_without_a_line_names_its_source_alone(tmp_path):
    """A clock step read from a snapshot series cites the series, which has no line: the terminal
    shows the source, not a line number of None (the development recording leak-r1-wallstep)."""
    from tests.analysis.corpus import build, cases
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-wallstep/full"]
    r = run("analyze", str(build(c, tmp_path / "b")), home=tmp_path / "h")
    assert r.returncode == 0, r.stderr
    assert "clock_step" in r.stdout and "vm/cgroup/: " in r.stdout
    assert ":None:" not in r.stdout


def test_an_incident_whose_analysis_failed_answers_its_reason_in_one_line(tmp_path):
    # every command that shows an incident's data says why there is none, exit status 2, no traceback
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    log = tmp_path / "train.log"
    log.write_text("2026-11-29 13:31:51,235 INFO [rank0] train: step=499 step_time=0.123s loss=2.3080\n")
    svc = Service(Settings.from_env(home=tmp_path / "h"))
    iid = svc.submit_path(log).incident_id
    svc.store.cursor().execute("UPDATE incidents SET status = 'failed', error = 'parser process failed: boom'")
    svc.store.close()
    out = tmp_path / "x.json"
    for args in (["report", iid], ["flamegraph", iid, "-o", str(tmp_path / "f.folded")],
                 ["export", iid, "-o", str(out)], ["clocks", iid]):
        r = run(*args, home=tmp_path / "h")
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip() == f"aftertrace: the analysis of incident {iid} failed: parser process failed: boom", args
        assert "Traceback" not in r.stderr and r.stdout == ""
    assert not out.exists() and not (tmp_path / "x.json.part").exists()
    r = run("report", "0123abc", home=tmp_path / "h")
    assert r.returncode == 2 and r.stderr.strip() == "aftertrace: no incident '0123abc'"


def test_delete_takes_the_whole_id_and_leaves_nothing(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("2026-11-29 13:31:51,235 INFO [rank0] train: step=499 step_time=0.123s loss=2.3080\n")
    home = tmp_path / "h"
    r = run("analyze", str(log), "--json", str(tmp_path / "rep.json"), home=home)
    assert r.returncode == 0, r.stderr
    iid = json.loads((tmp_path / "rep.json").read_text())["incident"]["id"]
    r = run("delete", iid[:5], home=home)
    assert r.returncode == 2 and r.stderr.strip() == f"aftertrace: no incident '{iid[:5]}': give the whole id to delete one ({iid})"
    r = run("delete", iid, home=home)
    assert r.returncode == 0 and r.stdout.startswith(f"incident {iid} deleted: its rows, share links, files and raw bundle")
    assert not (home / "incidents" / iid).exists() and list((home / "bundles").iterdir()) == []
    r = run("report", iid, home=home)
    assert r.returncode == 2 and r.stderr.strip() == f"aftertrace: no incident '{iid}'"


def test_sigterm_stops_an_analysis_on_the_command_line_as_ctrl_c_does(tmp_path):
    # the incident is marked failed (stopped), not left running for a later process to take up
    import signal
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[2]
    b = tmp_path / "b"
    for k in range(1500):           # (a parse of seconds: still running when the signal comes)
        (b / "notes").mkdir(parents=True, exist_ok=True)
        (b / "notes" / f"n{k:04d}.txt").write_text(f"note {k}: nothing happened\n" * 20)
    env = dict(os.environ, AFTERTRACE_HOME=str(tmp_path / "home"), PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, "-m", "aftertrace.server.cli", "analyze", str(b)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    # (the analysis is under way once its work folder is made: detection and the parse of the
    # 1,500 files follow; their small tables go to the store without a part in it)
    while not any((tmp_path / "home" / "incidents").glob("*/work")):
        assert proc.poll() is None and time.monotonic() - t0 < 60
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, errs = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, errs)
    assert "stopping at the next step (again to stop at once)" in errs and "Traceback" not in errs, errs
    assert "stopped; its incident" in errs
    from aftertrace.server.service import STOPPED_BY_USER
    from aftertrace.server.store import Store
    st = Store(tmp_path / "home" / "aftertrace.duckdb")
    try:
        assert st.query("SELECT status, error FROM incidents") == [{"status": "failed", "error": STOPPED_BY_USER}]
    finally:
        st.close()
