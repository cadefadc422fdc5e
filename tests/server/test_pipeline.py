"""The pipeline: parallel parsing, failure isolation, statuses, idempotent re-analysis."""
import gzip
from pathlib import Path

import pytest

from aftertrace.ingest.formats import PARSERS
from aftertrace.ingest.registry import Parser, Registry
import aftertrace.server.pipeline as pipeline_mod
import aftertrace.server.service as service_mod
from aftertrace.server.service import Service

RAW = "[ {:>4}.000000] line {}\n"
ROOT = Path(__file__).resolve().parents[2]


def _bundle(root, n_files=6, lines=200):
    for i in range(n_files):
        d = root / f"node-{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"dmesg{i}.txt").write_text("".join(RAW.format(k, k) for k in range(1, lines + 1)))
    return root


@pytest.mark.parametrize("detect_batch", [512, 1], ids=["detect-here", "detect-pooled"])
def test_parallel_and_inline_give_the_same_rows(tmp_path, settings, monkeypatch, detect_batch):
    b = _bundle(tmp_path / "b")
    (b / "node-0" / "broken.log.gz").write_bytes(gzip.compress(b"[ 1.0] x\n" * 5000)[:200])
    (b / "node-1" / "notes.bin").write_bytes(bytes(range(256)) * 4)
    monkeypatch.setattr(pipeline_mod, "DETECT_BATCH", detect_batch)   # (pooled from 4 batches on)
    par = Service(settings.with_(workers=2, inline_bytes=0))
    sub = par.submit_path(b)
    rep_par = par.analyze(sub.incident_id)
    n_par = par.store.query("SELECT count(*) AS n FROM events")[0]["n"]
    par.store.close()
    seq = Service(settings.with_(home=tmp_path / "h2", db_path=tmp_path / "h2" / "db.duckdb", workers=1))
    sub2 = seq.submit_path(b)
    rep_seq = seq.analyze(sub2.incident_id)
    assert n_par >= 6 * 200
    assert seq.store.query("SELECT count(*) AS n FROM events")[0]["n"] == n_par
    assert [(s["path"], s["status"], s["records"], s["host"], s["error"]) for s in rep_par["sources"]] == \
           [(s["path"], s["status"], s["records"], s["host"], s["error"]) for s in rep_seq["sources"]]
    statuses = {s["path"]: s["status"] for s in rep_par["sources"]}
    assert statuses["node-1/notes.bin"] == "unrecognized" and statuses["node-0/broken.log.gz"] != "parsed"


def test_host_files_parsed_on_the_running_workers_give_what_this_process_gives(tmp_path, settings, monkeypatch):
    """Many host-info files (a node's date, uptime, boot id...) go to the workers once they run;
    the time zone they state and every source's rows are those of a parse in this process."""
    import shutil
    b = _bundle(tmp_path / "b", n_files=4, lines=50)
    for node in ("node-0", "node-1"):
        shutil.copytree(ROOT / "sample_traces/oom-after-throttle/vm/host", b / node / "host")
    monkeypatch.setattr(pipeline_mod, "DETECT_BATCH", 1)          # (the workers start for the detection)
    monkeypatch.setattr(pipeline_mod, "POOLED_HOST_FILES", 1)
    par = Service(settings.with_(workers=2, inline_bytes=0))
    calls = []
    real = pipeline_mod.Pipeline._parse_all
    monkeypatch.setattr(pipeline_mod.Pipeline, "_parse_all",
                        lambda self, jobs, *a, **k: calls.append(k.get("pooled")) or real(self, jobs, *a, **k))
    rep_par = par.analyze(par.submit_path(b).incident_id)
    assert calls[0] is True                                      # (the host files' call)
    seq = Service(settings.with_(home=tmp_path / "h2", db_path=tmp_path / "h2" / "db.duckdb", workers=1))
    rep_seq = seq.analyze(seq.submit_path(b).incident_id)
    rows = lambda svc: sorted(svc.store.query("SELECT s.path, f.key, f.value FROM facts f JOIN sources s "
                                              "USING (incident_id, source_id)"), key=str)
    assert rows(par) == rows(seq) and len(rows(par)) > 10
    assert rep_par["time_zone"] == rep_seq["time_zone"]
    assert [(s["path"], s["status"], s["records"], s["host"]) for s in rep_par["sources"]] == \
           [(s["path"], s["status"], s["records"], s["host"]) for s in rep_seq["sources"]]


def test_the_store_yields_the_cores_the_parse_holds(tmp_path, settings, monkeypatch):
    """In this process the parse holds one core; with the pool, every worker's."""
    from contextlib import contextmanager
    from aftertrace.server.store import Store
    busy = []

    @contextmanager
    def recorded(self, n):
        busy.append(n)
        yield
    monkeypatch.setattr(Store, "yield_cores", recorded)
    b = _bundle(tmp_path / "b", n_files=4, lines=20)
    here = Service(settings.with_(workers=1))
    here.analyze(here.submit_path(b).incident_id)
    pooled = Service(settings.with_(home=tmp_path / "h2", db_path=tmp_path / "h2" / "db.duckdb", workers=2,
                                    inline_bytes=0))
    pooled.analyze(pooled.submit_path(b).incident_id)
    assert busy == [1, 2]


class Crashing(Parser):
    name = "crashing"
    kind = "app_log"
    priority = 99
    clock_domain = "wall"

    @classmethod
    def detect(cls, head):
        return head.text.startswith("CRASH")

    def parse(self, ctx):
        for lineno, line in ctx.lines():
            if lineno == 3:
                raise ValueError("boom")
            ctx.sink.event(name="x", line=lineno)


def test_one_failing_file_never_stops_the_others(tmp_path, settings):
    b = _bundle(tmp_path / "b", n_files=2, lines=5)
    (b / "bad.log").write_text("CRASH 1\nCRASH 2\nCRASH 3\nCRASH 4\n")
    svc = Service(settings)
    svc.registry = Registry(PARSERS + (Crashing,))
    sub = svc.submit_path(b)
    rep = svc.analyze(sub.incident_id)
    src = {s["path"]: s for s in rep["sources"]}
    assert src["bad.log"]["status"] == "failed"
    assert src["bad.log"]["records"] == 0
    assert "bad.log: parser crashing failed at line 3: ValueError: boom" in src["bad.log"]["error"]
    assert src["node-0/dmesg0.txt"]["status"] == "parsed" and src["node-0/dmesg0.txt"]["records"] == 5
    assert svc.store.query("SELECT count(*) AS n FROM events WHERE source_id = "
                           "(SELECT source_id FROM sources WHERE path = 'bad.log')")[0]["n"] == 0


def test_partial_files_name_their_bad_lines(tmp_path, settings):
    b = tmp_path / "b"
    b.mkdir()
    (b / "dmesg.txt").write_text("[    1.000000] a\n[    2.000000] b\n\x01\x02 not a record\n[    3.000000] c\n")
    with gzip.open(b / "cut.txt.gz", "wb") as f:
        f.write("".join(RAW.format(k, k) for k in range(1, 2001)).encode())
    data = (b / "cut.txt.gz").read_bytes()
    (b / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    svc = Service(settings)
    rep = svc.analyze(svc.submit_path(b).incident_id)
    src = {s["path"]: s for s in rep["sources"]}
    assert src["dmesg.txt"]["status"] == "partial" and src["dmesg.txt"]["records"] == 3
    assert src["dmesg.txt"]["error"] == "1 line(s) could not be used (first at line 3: not a dmesg_raw record)"
    assert src["cut.txt.gz"]["status"] == "partial"
    assert "truncated" in src["cut.txt.gz"]["error"]
    assert 0 < src["cut.txt.gz"]["records"] < 2000
    (issue,) = svc.parse_issues(rep["incident"]["id"])
    assert (issue["path"], issue["line"], issue["kind"]) == ("dmesg.txt", 3, "bad_line")


def test_reanalysis_replaces_rows(tmp_path, settings):
    b = _bundle(tmp_path / "b", n_files=1, lines=10)
    svc = Service(settings)
    sub = svc.submit_path(b)
    svc.analyze(sub.incident_id)
    svc.analyze(sub.incident_id)
    again = svc.submit_path(b)
    assert again.incident_id == sub.incident_id and again.existed
    svc.analyze(again.incident_id)
    assert svc.store.query("SELECT count(*) AS n FROM events")[0]["n"] == 10
    assert svc.store.query("SELECT count(*) AS n FROM sources")[0]["n"] == 1


def test_archive_of_a_folder_gets_the_folders_paths(tmp_path, settings):
    import tarfile
    b = tmp_path / "mybundle"
    (b / "vm" / "host").mkdir(parents=True)
    (b / "vm" / "host" / "hostname").write_text("vm\n")
    (b / "vm" / "dmesg.txt").write_text("[    1.000000] x\n")
    (b / "vm" / "logs").mkdir()
    (b / "vm" / "logs" / "x.log").write_text("hello\n")
    tgz = tmp_path / "upload.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(b, arcname="mybundle")
    single = tmp_path / "node-7.tgz"
    with tarfile.open(single, "w:gz") as tf:
        tf.add(b / "vm", arcname="node-7")
    svc = Service(settings)
    from_dir = svc.analyze(svc.submit_path(b).incident_id)
    from_tgz = svc.analyze(svc.submit_path(tgz).incident_id)
    paths = lambda rep: sorted((s["path"], s["host"]) for s in rep["sources"])
    assert paths(from_dir) == paths(from_tgz) == [("vm/dmesg.txt", "vm"), ("vm/host/hostname", "vm"),
                                                  ("vm/logs/x.log", "vm")]
    assert "all files were in one folder mybundle/; paths are shown without it" in from_tgz["notes"]
    # a host's own folder is never stripped
    node = svc.analyze(svc.submit_path(single).incident_id)
    assert sorted(s["path"] for s in node["sources"])[0] == "node-7/dmesg.txt"


def test_a_folder_is_read_in_place_then_from_the_raw_copy(tmp_path, settings, monkeypatch):
    written: list[list[str]] = []
    real = pipeline_mod.extract

    def extract(raw, dest, limits, local):
        ex = real(raw, dest, limits, local)
        written.append(sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()))
        return ex
    monkeypatch.setattr(pipeline_mod, "extract", extract)
    b = _bundle(tmp_path / "b", n_files=2, lines=7)
    svc = Service(settings)
    sub = svc.submit_path(b)
    rep = svc.analyze(sub.incident_id)
    assert written == [[]]                                        # nothing copied
    assert sum(s["records"] for s in rep["sources"]) == 14
    # another process, later, after the folder is gone: the raw copy is extracted
    import shutil
    shutil.rmtree(b)
    svc2 = Service(settings, store=svc.store)
    rep2 = svc2.analyze(sub.incident_id)
    assert written[1] == ["node-0/dmesg0.txt", "node-1/dmesg1.txt"]
    assert [(s["path"], s["records"]) for s in rep2["sources"]] == [(s["path"], s["records"]) for s in rep["sources"]]
    # the extraction is not kept once the rows are in (the raw bundle is, to analyse it again)
    assert not (settings.incident_dir(sub.incident_id) / "files").exists()


def test_the_sources_say_what_was_read_past(tmp_path, settings):
    """A file copied from an 80-column terminal and a quoted kernel log: the report's sources say
    what was undone to read them (the JSON, and the page's note column)."""
    log = (ROOT / "tests" / "data" / "app_log" / "torchrun_mismatch.log").read_text().splitlines()
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "copied.log").write_text("".join(ln[i:i + 80] + "\n" for ln in log for i in range(0, max(len(ln), 1), 80)))
    (b / "kmsg.txt").write_text("> [ 7530.040000] Out of memory: Killed process 1212 (python3) total-vm:1000kB, "
                                "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n"
                                "> [ 7531.000000] eth0: link up\n")
    svc = Service(settings)
    rep = svc.analyze(svc.submit_path(b, title="pasted").incident_id)
    said = {s["path"].rsplit("/", 1)[-1]: s["read_past"] for s in rep["sources"]}
    assert said == {"copied.log": ["lines a terminal cut at 80 columns joined back"],
                    "kmsg.txt": ["peeled off: a quoted paste (e-mail or Markdown '> ')"]}


@pytest.mark.parametrize("broken", ["build_tracks", "analyze"])
def test_the_timeline_tables_and_the_findings_fail_the_analysis_alike(tmp_path, settings, monkeypatch, broken):
    # The timeline's tables are built beside the search for findings: a failure of either fails
    # the analysis with its own error, after both have stopped; a later analysis runs afresh.
    import aftertrace.analysis.rootcause as rootcause_mod
    import aftertrace.analysis.timeline as timeline_mod
    mod = timeline_mod if broken == "build_tracks" else rootcause_mod
    real = getattr(mod, broken)

    def boom(*a, **kw):
        raise RuntimeError(f"{broken} broke")
    monkeypatch.setattr(mod, broken, boom)
    svc = Service(settings)
    sub = svc.submit_path(ROOT / "sample_traces" / "oom-after-throttle")
    with pytest.raises(RuntimeError, match=f"{broken} broke"):
        svc.analyze(sub.incident_id)
    inc = svc.get_incident(sub.incident_id)
    assert inc["status"] == "failed" and f"{broken} broke" in inc["error"]
    monkeypatch.setattr(mod, broken, real)
    svc.analyze(sub.incident_id)
    assert svc.get_incident(sub.incident_id)["status"] == "done"
    assert svc.store.query("SELECT count(*) AS n FROM tracks WHERE incident_id = ?", [sub.incident_id])[0]["n"] > 0


def test_what_a_dead_process_left_running_is_queued_again_once(tmp_path, settings):
    svc = Service(settings)
    ids = {}
    for name in ("queued", "died-once", "died-twice", "done"):
        b = _bundle(tmp_path / name, n_files=1, lines=3 + len(ids))
        ids[name] = svc.submit_path(b).incident_id
    svc.analyze(ids["done"])
    cur = svc.store.cursor()
    cur.execute("UPDATE incidents SET status = 'running' WHERE incident_id IN (?, ?)",
                [ids["died-once"], ids["died-twice"]])
    cur.execute("UPDATE incidents SET interrupted = 1 WHERE incident_id = ?", [ids["died-twice"]])
    svc.store.close()

    again = Service(settings)       # (the next process to open the store)
    got = {name: again.store.query("SELECT status, error, interrupted FROM incidents WHERE incident_id = ?",
                                   [iid])[0] for name, iid in ids.items()}
    assert got["queued"] == {"status": "queued", "error": None, "interrupted": 0}
    assert got["died-once"] == {"status": "queued", "error": None, "interrupted": 1}
    assert got["died-twice"] == {"status": "failed", "error": service_mod.INTERRUPTED, "interrupted": 2}
    assert got["done"]["status"] == "done"
    assert again.pending() == [ids["queued"], ids["died-once"]]          # (in the order they were sent)
    again.analyze(ids["died-once"])
    assert again.store.query("SELECT status, interrupted FROM incidents WHERE incident_id = ?",
                             [ids["died-once"]]) == [{"status": "done", "interrupted": 0}]
    assert again.pending() == [ids["queued"]]
    sub = again.submit_path(tmp_path / "died-twice")       # sent again by hand: a fresh start
    assert sub.queued and again.store.query("SELECT status, interrupted FROM incidents WHERE incident_id = ?",
                                            [ids["died-twice"]]) == [{"status": "queued", "interrupted": 0}]


@pytest.mark.parametrize("pooled", [False, True], ids=["here", "pooled"])
def test_a_stopping_service_hands_its_analysis_back(tmp_path, settings, pooled):
    import threading
    b = _bundle(tmp_path / "b", n_files=6, lines=200)
    svc = Service(settings.with_(workers=2, inline_bytes=0) if pooled else settings)
    iid = svc.submit_path(b).incident_id
    at_parse, go = threading.Event(), threading.Event()

    def progress(stage, done, total):
        if stage == "parse":
            at_parse.set()
            go.wait(10)
    out: list = []
    left: list = []
    t = threading.Thread(target=lambda: out.append(_raises(svc.analyze, iid, progress)))
    t.start()
    assert at_parse.wait(30)
    stopping = threading.Thread(target=lambda: left.append(svc.stop(20)))
    stopping.start()
    while not svc._stopping.is_set():
        pass
    go.set()
    t.join(30)
    stopping.join(30)
    assert isinstance(out[0], service_mod.HandedBack), out
    assert left == [[]]                                  # (none left running)
    assert svc.store.query("SELECT status, error, interrupted FROM incidents") == \
        [{"status": "queued", "error": None, "interrupted": 0}]
    assert svc.store.query("SELECT count(*) AS n FROM events")[0]["n"] == 0
    with pytest.raises(service_mod.HandedBack):          # (nothing more starts here)
        svc.analyze(iid)
    svc.store.close()
    again = Service(settings)
    assert again.pending() == [iid]
    assert again.analyze(iid)["incident"]["id"] == iid


def test_an_analysis_stopped_by_ctrl_c_is_failed_not_queued(tmp_path, settings):
    svc = Service(settings)
    iid = svc.submit_path(_bundle(tmp_path / "b", n_files=2, lines=5)).incident_id

    def progress(stage, done, total):
        if stage == "parse":
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        svc.analyze(iid, progress)
    assert svc.store.query("SELECT status, error FROM incidents") == \
        [{"status": "failed", "error": service_mod.STOPPED_BY_USER}]
    assert svc.pending() == []


def _raises(fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        return e


def test_an_archive_gives_the_report_of_its_folder_evidence_lines_and_all(tmp_path, settings):
    # (some findings re-read their evidence lines from the extracted files: the extraction is kept
    # until the findings are made, and dropped after)
    import json
    import tarfile
    sample = ROOT / "sample_traces" / "oom-after-throttle"
    tgz = tmp_path / "oat.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(sample, arcname=sample.name)
    svc = Service(settings)
    from_dir = svc.analyze(svc.submit_path(sample).incident_id)
    iid = svc.submit_path(tgz).incident_id
    from_tgz = svc.analyze(iid)
    keep = lambda rep: json.dumps({k: rep[k] for k in ("chains", "anomalies", "origin")}, sort_keys=True)
    assert keep(from_tgz) == keep(from_dir)
    assert [len(l["evidence"]) for l in from_tgz["chains"][0]["links"]][:2] == [10, 4]
    assert sorted(p.name for p in settings.incident_dir(iid).iterdir()) == ["report.json"]


def test_a_workers_error_file_and_its_logs_give_one_finding(settings):
    # the recorded incident as it was gathered: the launcher's log and torchrun's worker folders,
    # each a stderr.log and an error.json (tests/data/torchelastic_error/PROVENANCE.md)
    svc = Service(settings)
    rep = svc.analyze(svc.submit_path(ROOT / "sample_traces" / "logs-exception").incident_id)
    origin = rep["chains"][0]["links"][0]
    assert (origin["kind"], origin["rank"], origin["pid"]) == ("python_exception", 1, 32259)
    said = {e["source"].rsplit("/", 2)[-2] + "/" + e["source"].rsplit("/", 1)[-1] for e in origin["evidence"]}
    assert {"1/error.json", "1/stderr.log"} <= said
    files = {s["path"].rsplit("/", 2)[-2] + "/" + s["path"].rsplit("/", 1)[-1]: (s["kind"], s["rank"], s["rank_from"])
             for s in rep["sources"] if s["path"].endswith("error.json")}
    assert files == {"0/error.json": ("torchelastic_error", 0, "worker folder"),
                     "1/error.json": ("torchelastic_error", 1, "worker folder")}


def test_an_error_file_alone_is_given_the_rank_and_pid_the_launchers_table_names_it_for(tmp_path, settings):
    # the launcher's log and one worker's error.json, no worker log: torchrun's failure table
    # names the file (error_file: .../<run>/attempt_0/1/error.json) under rank 1, pid 32259
    src = ROOT / "sample_traces" / "logs-exception" / "vm" / "logs"
    b = tmp_path / "b"
    (b / "logs").mkdir(parents=True)
    (b / "logs" / "torchrun.log").write_bytes((src / "torchrun.log").read_bytes())
    (ef,) = src.glob("torchrun_log_dir/*/attempt_0/1/error.json")
    dest = b / "logs" / ef.relative_to(src)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(ef.read_bytes())
    svc = Service(settings)
    rep = svc.analyze(svc.submit_path(b).incident_id)
    (f,) = [f for f in rep["anomalies"] if f["kind"] == "python_exception" and f["rank"] == 1]
    assert (f["pid"], {e["source"].rsplit("/", 1)[-1] for e in f["evidence"]}) == (32259, {"error.json", "torchrun.log"})
    assert [s["rank"] for s in rep["sources"] if s["path"].endswith("error.json")] == [None]
