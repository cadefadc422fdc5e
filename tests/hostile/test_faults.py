"""Faults around the ingest: the process killed (SIGKILL) in the middle of an analysis (CLI and
server), the disk filling up, and many uploads at once against a real uvicorn server.

What must hold after each: the raw bundle is intact, the store opens, an incident is never shown
as done with half its rows (one load transaction, committed at the end), an incident a dead
process left 'running' is queued again by the next process that opens the store (the server then
analyses it; a second death fails it, "interrupted: ..."), a server stopped by SIGTERM hands its
analyses back queued, and analysing the same bundle again completes with the same report.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest

import hostile_corpus as hc
from aftertrace.ingest.bundle import _walk
from aftertrace.ingest.model import INCIDENT_TABLES, TABLES
from aftertrace.server.service import INTERRUPTED
from aftertrace.server.store import Store

LOCAL = "http://127.0.0.1:8000"   # (the server answers to its own names only: the address it listens on)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
PY = sys.executable


def _env(home: Path) -> dict:
    env = dict(os.environ, AFTERTRACE_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="200")
    env.pop("AFTERTRACE_TOKEN", None)
    return env


def _cli(home: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "aftertrace.server.cli", *args], cwd=ROOT, env=_env(home), capture_output=True,
                          text=True, timeout=timeout)


def _kill_when_parsing(proc: subprocess.Popen, home: Path, timeout: float = 60) -> str:
    """SIGKILL ``proc`` as soon as an incident's work folder holds a parsed part (rows are being
    loaded into the open transaction); returns the incident id."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for work in (home / "incidents").glob("*/work"):
            try:
                if any(work.rglob("*.parquet")):
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(10)
                    return work.parent.name
            except FileNotFoundError:
                pass
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (rc {proc.returncode}) before it could be killed")
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("no parse started")


def _incident_rows(db: Path, iid: str) -> tuple[dict, dict[str, int]]:
    """(incident row, rows per incident table) read with a plain Store (no recovery)."""
    st = Store(db)
    try:
        inc = st.query("SELECT status, error, interrupted FROM incidents WHERE incident_id = ?", [iid])
        counts = {t: st.query(f"SELECT count(*) AS n FROM {t} WHERE incident_id = ?", [iid])[0]["n"]
                  for t in INCIDENT_TABLES}
        for t in INCIDENT_TABLES:      # every table is readable
            st.query(f"SELECT count(*) AS n FROM {t}")
        st.cursor().execute("CHECKPOINT")
    finally:
        st.close()
    return (inc[0] if inc else {}), counts


def _check_raw_dir_bundle(home: Path, src: Path) -> None:
    """The folder's raw tar is stored under its listing hash, whole: each file's bytes as given."""
    sha, entries = _walk(src)
    raw = home / "bundles" / f"{sha}.tar"
    assert raw.is_file(), sorted(p.name for p in (home / "bundles").iterdir())
    files = {rel: full for kind, rel, full, _, _ in entries if kind == "F"}
    with tarfile.open(raw) as tf:
        seen = 0
        for m in tf:
            if m.isfile():
                got = hashlib.sha256(tf.extractfile(m).read()).hexdigest()
                want = hashlib.sha256(Path(files[m.name]).read_bytes()).hexdigest()
                assert got == want, m.name
                seen += 1
    assert seen == len(files)


def _shape(rep: dict) -> dict:
    return {"summary": rep["summary"],
            "anomalies": sorted((a["kind"], a.get("time")) for a in rep["anomalies"]),
            "chains": [[l["kind"] for l in c["links"]] for c in rep["chains"]]}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    """The sample's report from one uninterrupted CLI run."""
    home = tmp_path_factory.mktemp("baseline") / "home"
    out = home.parent / "rep.json"
    r = _cli(home, "analyze", str(SAMPLE), "--json", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


# -- the CLI killed while parsing ---------------------------------------------------------

def test_cli_killed_during_ingest(tmp_path, baseline):
    home = tmp_path / "home"
    proc = subprocess.Popen([PY, "-m", "aftertrace.server.cli", "analyze", str(SAMPLE)], cwd=ROOT, env=_env(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    iid = _kill_when_parsing(proc, home)
    assert proc.returncode == -signal.SIGKILL

    _check_raw_dir_bundle(home, SAMPLE)
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert inc["status"] == "running", inc
    assert counts == {t: 0 for t in INCIDENT_TABLES}, counts    # the load never committed

    # the next process to open the store queues it again (the command line leaves it queued:
    # its analysis waits for a server, or for the same bundle analysed again)
    r = _cli(home, "incidents")
    assert r.returncode == 0 and iid in r.stdout and "queued" in r.stdout, r.stdout + r.stderr
    inc, _ = _incident_rows(home / "aftertrace.duckdb", iid)
    assert (inc["status"], inc["error"], inc["interrupted"]) == ("queued", None, 1), inc

    out = tmp_path / "rep.json"
    r = _cli(home, "analyze", str(SAMPLE), "--json", str(out))
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    assert rep["incident"]["id"] == iid
    assert _shape(rep) == _shape(baseline)
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert (inc["status"], inc["interrupted"]) == ("done", 0) and counts["sources"] > 0 and counts["events"] > 0


# -- a server killed while analysing ---------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, home: Path, threads: int | None = None):
        self.home, self.port = home, _free_port()
        if threads is None:
            cmd = [PY, "-m", "aftertrace.server.cli", "serve", "--port", str(self.port)]
        else:   # the same app with more background analyses at once
            cmd = [PY, "-c", "import sys, uvicorn; from aftertrace.server.app import create_app; "
                   "from aftertrace.server.settings import Settings; "
                   f"uvicorn.run(create_app(Settings.from_env(analysis_threads={threads})), "
                   f"host='127.0.0.1', port={self.port}, log_level='warning')"]
        self.log = open(home.parent / f"server-{self.port}.log", "wb")
        home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(home), stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.logtext()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("server did not start")

    def logtext(self) -> str:
        """The server's whole log (a few KB: its status polls are most of it): a line of its start
        is looked for after the analysis, and a traceback anywhere in it fails a test."""
        if not self.log.closed:
            self.log.flush()
        return (self.home.parent / f"server-{self.port}.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _wait_done(url: str, iid: str, timeout: float = 120) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = httpx.get(f"{url}/api/incidents/{iid}", timeout=30).json()
        if st["status"] in ("done", "failed"):
            return st
        time.sleep(0.05)
    raise AssertionError(f"{iid} not finished in {timeout} s")


def _tgz(files: dict[str, bytes]) -> bytes:
    return hc.tar_bytes(list(files.items()), "w:gz")


def _sample_tgz() -> bytes:
    return _tgz({p.relative_to(SAMPLE.parent).as_posix(): p.read_bytes()
                 for p in sorted(SAMPLE.rglob("*")) if p.is_file()})


def _killed_server(home: Path, data: bytes | None = None) -> str:
    """Start a server on ``home`` (sending it ``data``, a bundle), SIGKILL it while it parses;
    returns the incident being parsed. A dead process's work folders are cleared first: the next
    parse is then the one seen."""
    for work in (home / "incidents").glob("*/work"):
        import shutil
        shutil.rmtree(work)
    srv = Server(home)
    try:
        if data is not None:
            r = httpx.post(srv.url + "/api/incidents", files={"bundle": ("oom.tgz", data)}, timeout=60)
            assert r.status_code == 201, r.text
        return _kill_when_parsing(srv.proc, home)
    finally:
        srv.stop()


def test_server_killed_during_analysis(tmp_path):
    # killed once: the next start analyses it again; killed while doing that too: it fails (the
    # analysis may be what kills the process) and serves nothing but its status and reason
    home = tmp_path / "home"
    data = _sample_tgz()
    iid = _killed_server(home, data)
    assert iid == hashlib.sha256(data).hexdigest()[:12]
    assert hashlib.sha256((home / "bundles" / f"{hashlib.sha256(data).hexdigest()}.tar.gz").read_bytes()
                          ).hexdigest() == hashlib.sha256(data).hexdigest()
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert inc["status"] == "running", inc
    assert counts == {t: 0 for t in INCIDENT_TABLES}, counts

    assert _killed_server(home) == iid        # (taken up again at the start, and killed again)
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert (inc["status"], inc["interrupted"]) == ("running", 1), inc
    assert counts == {t: 0 for t in INCIDENT_TABLES}, counts

    srv = Server(home)
    try:
        st = httpx.get(f"{srv.url}/api/incidents/{iid}").json()
        assert st["status"] == "failed" and st["error"] == INTERRUPTED, st
        assert any(i["id"] == iid and i["status"] == "failed"
                   for i in httpx.get(srv.url + "/api/incidents").json()["incidents"])
        # a failed incident serves its status and reason, and nothing of its data (no half-loaded rows)
        for what in ("report", "timeline", "timeline/detail?track=0&t=0", "flamegraph", "export?format=chrome",
                     "issues"):
            r = httpx.get(f"{srv.url}/api/incidents/{iid}/{what}")
            assert r.status_code == 409, (what, r.text)
            assert r.json()["error"]["code"] == "not_analysed" and INTERRUPTED in r.json()["error"]["message"]
        r = httpx.get(f"{srv.url}/incidents/{iid}/flamegraph")
        assert r.status_code == 409 and "failed" in r.text
        # sent again by hand: analysed afresh
        r = httpx.post(srv.url + "/api/incidents", files={"bundle": ("oom.tgz", data)}, timeout=60)
        assert r.status_code == 201, r.text
        assert r.json()["id"] == iid and r.json()["existing"] is True
        st = _wait_done(srv.url, iid)
        assert st["status"] == "done", (st, srv.logtext())
        rep = httpx.get(f"{srv.url}/api/incidents/{iid}/report").json()
        assert rep["summary"].startswith("It started with CPU throttling") and "The job failed at 13:28:56.147 UTC" in rep["summary"], rep["summary"]
    finally:
        srv.stop()
    assert "Traceback" not in srv.logtext()


def test_server_killed_once_analyses_it_at_its_next_start(tmp_path, baseline):
    home = tmp_path / "home"
    data = _sample_tgz()
    iid = _killed_server(home, data)
    srv = Server(home)
    try:
        st = _wait_done(srv.url, iid)
        assert st["status"] == "done", (st, srv.logtext())
        assert _shape(httpx.get(f"{srv.url}/api/incidents/{iid}/report").json()) == _shape(baseline)
    finally:
        srv.stop()
    assert f"incident {iid} was queued before this start: analysing it" in srv.logtext()
    assert "Traceback" not in srv.logtext()


def test_server_stopped_hands_back_its_analysis_and_its_queue(tmp_path, baseline):
    # SIGTERM while parsing: the running analysis stops at its next step (its workers ended), its
    # rows are rolled back, and it and the one queued behind it run at the next start
    home = tmp_path / "home"
    # (the sample and a thousand small notes: a parse of seconds, still running when the signal comes)
    files = {p.relative_to(SAMPLE.parent).as_posix(): p.read_bytes() for p in sorted(SAMPLE.rglob("*")) if p.is_file()}
    files.update({f"oom-after-throttle/vm/notes/n{k:04d}.txt": f"note {k}: nothing happened\n".encode() * 20
                  for k in range(1000)})
    data = _tgz(files)
    other = _tgz({"job/vm/logs/torchrun.log": (SAMPLE / "vm" / "logs" / "torchrun.log").read_bytes()})
    srv = Server(home)
    try:
        iid = httpx.post(srv.url + "/api/incidents", files={"bundle": ("oom.tgz", data)}, timeout=60).json()["id"]
        iid2 = httpx.post(srv.url + "/api/incidents", files={"bundle": ("log.tgz", other)}, timeout=60).json()["id"]
        t0 = time.monotonic()
        while not any((home / "incidents" / iid / "work").rglob("*.parquet")):
            assert time.monotonic() - t0 < 60, srv.logtext()
            time.sleep(0.005)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(30)
        took = time.monotonic() - t0
    finally:
        srv.stop()
    # (uvicorn ends by raising the signal again once it has shut down: the exit says what stopped it)
    assert srv.proc.returncode in (0, -signal.SIGTERM), srv.logtext()
    assert took < 15, took
    assert f"analysis of {iid} stopped with aftertrace: queued for its next start" in srv.logtext()
    for i in (iid, iid2):
        inc, counts = _incident_rows(home / "aftertrace.duckdb", i)
        assert (inc["status"], inc["error"], inc["interrupted"]) == ("queued", None, 0), (i, inc)
        assert counts == {t: 0 for t in INCIDENT_TABLES}, counts
    srv = Server(home)
    try:
        assert _wait_done(srv.url, iid)["status"] == "done"
        assert _wait_done(srv.url, iid2)["status"] == "done"
        rep = httpx.get(f"{srv.url}/api/incidents/{iid}/report").json()
        assert _shape(rep)["chains"] == _shape(baseline)["chains"] and len(rep["sources"]) > 1000
    finally:
        srv.stop()
    assert "Traceback" not in srv.logtext()


# -- disk full ------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text


def test_disk_full(tmp_path, small_disk):
    home = small_disk / "home"
    log = (SAMPLE / "vm" / "logs" / "torchrun.log").read_bytes()

    # 1. the bundle fits in the raw store, its extracted files do not
    big = _tgz({"job/vm/logs/torchrun.log": log, "job/vm/filler.log": b"x" * (40 << 20)})
    bpath = tmp_path / "expands.tgz"
    bpath.write_bytes(big)
    r = _cli(home, "analyze", str(bpath))
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    _no_traceback(r.stdout + r.stderr)
    assert "no space left" in r.stderr.lower(), r.stderr
    iid = hashlib.sha256(big).hexdigest()[:12]
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert inc["status"] == "failed" and "no space left" in inc["error"].lower(), inc
    assert str(small_disk) not in inc["error"]           # the server's folders are not shown
    assert counts == {t: 0 for t in INCIDENT_TABLES}

    # 2. the bundle itself does not fit
    rand = tmp_path / "random.bin.gz"
    with open(rand, "wb") as f:
        f.write(b"\x1f\x8b")
        f.write(os.urandom(30 << 20))
    r = _cli(home, "analyze", str(rand))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    _no_traceback(r.stdout + r.stderr)
    assert "no space left" in r.stderr.lower(), r.stderr
    assert not list((home / "bundles").glob(".upload-*")), "the partial copy was left behind"

    # the store still opens, nothing is done, and once space is freed the first bundle analyses
    st = Store(home / "aftertrace.duckdb")
    try:
        rows = st.query("SELECT incident_id, status FROM incidents")
    finally:
        st.close()
    assert rows and all(x["status"] == "failed" for x in rows), rows
    import shutil
    shutil.rmtree(home / "incidents", ignore_errors=True)
    small = _tgz({"job/vm/logs/torchrun.log": log})
    spath = tmp_path / "small.tgz"
    spath.write_bytes(small)
    r = _cli(home, "analyze", str(spath))
    assert r.returncode == 0, r.stderr


def test_disk_full_then_freed_the_same_bundle_analyses(tmp_path, small_disk):
    # the disk is full because of something else; the failed analysis keeps nothing of its own
    # (its extraction is what would hold the space); once the other thing is gone the same bundle
    # analyses, and an upload of it too
    home = small_disk / "home"
    log = (SAMPLE / "vm" / "logs" / "torchrun.log").read_bytes()
    body = log * (9_000_000 // len(log) + 1)
    bundle = _tgz({"job/vm/logs/torchrun.log": body})
    bpath = tmp_path / "job.tgz"
    bpath.write_bytes(bundle)
    r = _cli(home, "incidents")                       # (the store, before the disk fills)
    assert r.returncode == 0, r.stderr
    filler = small_disk / "someone-elses.bin"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * (free - len(body) // 2 - len(bundle)))
    r = _cli(home, "analyze", str(bpath))
    assert r.returncode == 1 and "no space left" in r.stderr.lower(), (r.returncode, r.stdout, r.stderr)
    _no_traceback(r.stdout + r.stderr)
    iid = hashlib.sha256(bundle).hexdigest()[:12]
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert inc["status"] == "failed" and counts == {t: 0 for t in INCIDENT_TABLES}, inc
    folder = home / "incidents" / iid
    assert [p.name for p in folder.iterdir()] == ["error.txt"], list(folder.rglob("*"))

    filler.unlink()
    r = _cli(home, "analyze", str(bpath))
    assert r.returncode == 0, (r.stdout, r.stderr)
    inc, counts = _incident_rows(home / "aftertrace.duckdb", iid)
    assert inc["status"] == "done" and counts["events"] > 0, inc
    assert not (folder / "files").exists()            # (nor after a success: the raw bundle is kept)


# -- many uploads at once -------------------------------------------------------------------

N_UPLOADS = 20


def _distinct_bundle(k: int) -> bytes:
    log = (SAMPLE / "vm" / "logs" / "torchrun.log").read_bytes()
    return _tgz({"job/vm/logs/torchrun.log": log + f"[bundle {k}] unique line {k}\n".encode(),
                 f"job/vm/notes-{k:02d}.txt": f"bundle {k}\n".encode()})


@pytest.mark.parametrize("threads", [None, 4], ids=["serve", "4-analysis-threads"])
def test_concurrent_uploads(tmp_path, threads):
    home = tmp_path / "home"
    bundles = [_distinct_bundle(k) for k in range(N_UPLOADS)]
    srv = Server(home, threads)
    try:
        results: dict[int, object] = {}
        barrier = threading.Barrier(N_UPLOADS)

        def up(k: int) -> None:
            try:
                barrier.wait(10)
                results[k] = httpx.post(srv.url + "/api/incidents",
                                        files={"bundle": (f"b{k}.tgz", bundles[k])}, timeout=120)
            except Exception as e:  # noqa: BLE001
                results[k] = e

        ts = [threading.Thread(target=up, args=(k,)) for k in range(N_UPLOADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(180)
        bad = {k: v for k, v in results.items() if not isinstance(v, httpx.Response) or v.status_code != 201}
        assert not bad and len(results) == N_UPLOADS, (bad, srv.logtext())
        ids = {k: v.json()["id"] for k, v in results.items()}
        assert len(set(ids.values())) == N_UPLOADS
        for k, iid in ids.items():
            assert iid == hashlib.sha256(bundles[k]).hexdigest()[:12]
            st = _wait_done(srv.url, iid)
            assert st["status"] == "done", (k, st, srv.logtext())
    finally:
        srv.stop()
    assert "Traceback" not in srv.logtext() and "Conflict" not in srv.logtext(), srv.logtext()

    st = Store(home / "aftertrace.duckdb")
    try:
        per = {}
        for k, iid in ids.items():
            paths = {r["path"] for r in st.query("SELECT path FROM sources WHERE incident_id = ?", [iid])}
            assert paths == {"vm/logs/torchrun.log", f"vm/notes-{k:02d}.txt"}, (k, paths)
            per[iid] = tuple(st.query(f"SELECT count(*) AS n FROM {t} WHERE incident_id = ?", [iid])[0]["n"]
                             for t in INCIDENT_TABLES)
            # every row belongs to one of its own incident's sources
            for t in INCIDENT_TABLES:
                if "source_id" not in {c.name for c in TABLES[t].columns} or t == "sources":
                    continue
                orphans = st.query(f"SELECT count(*) AS n FROM {t} x WHERE incident_id = ? AND NOT EXISTS "
                                   "(SELECT 1 FROM sources s WHERE s.incident_id = x.incident_id "
                                   "AND s.source_id = x.source_id)", [iid])[0]["n"]
                assert orphans == 0, (t, iid)
        assert len(set(per.values())) == 1, per            # the same content: the same rows, no mixing
        assert per[ids[0]][INCIDENT_TABLES.index("events")] > 0
        total = {t: st.query(f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in INCIDENT_TABLES}
        assert total == {t: N_UPLOADS * n for t, n in zip(INCIDENT_TABLES, per[ids[0]])}, total
        assert {r["status"] for r in st.query("SELECT status FROM incidents")} == {"done"}
    finally:
        st.close()
