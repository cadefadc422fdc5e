"""Executors (server/executors.py): the local process pool and Ray parse to the same results.

The Ray tests start a real local Ray (``ray.init(num_cpus=2)``); they are skipped when ray is
not installed (``pip install 'aftertrace[ray]'``).
"""
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.server.executors import ExecutorUnavailable, LocalExecutor, make_executor
from aftertrace.server.service import Service
from aftertrace.server.pipeline import Pipeline
from aftertrace.server.settings import Settings

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "oom-after-throttle"
FILES = ["vm/dmesg.txt", "vm/logs/torchrun.log",
         "vm/profiler/vm_17988.1795958928161470528.pt.trace.json.gz"]
# timings, and the per-analysis wall clock, differ from run to run
TIMING = {"parse_s", "duration_s", "duration", "analyzed_at", "created_at", "elapsed_s", "generated_at"}
TABLES = ["events", "flows", "samples", "stacks", "metrics", "facts", "collectives", "steps",
          "anchors", "parse_issues"]

try:
    import ray
except ImportError:
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'aftertrace[ray]')")


def _without_timing(x):
    if isinstance(x, dict):
        return {k: _without_timing(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_without_timing(v) for v in x]
    return x


# Nothing is exempt: analysis/detectors/step_slowdown.py once cited whichever copy of a step line
# (a worker's stderr.log or the launcher's --tee copy) was loaded first; its ORDER BY now breaks
# the tie by path, and the comparison below covers the citations too.
TIED: dict[str, tuple[str, ...]] = {}


def _untied(x):
    if isinstance(x, dict):
        drop = TIED.get(x.get("kind"), ())
        return {k: _untied(v) for k, v in x.items() if k not in drop}
    if isinstance(x, list):
        return [_untied(v) for v in x]
    return x


def _parts_rows(parts: dict[str, list[str]]) -> dict[str, list]:
    """Each table's rows over the parts, in a stable order (parts are named by sequence)."""
    out = {}
    for table, files in sorted(parts.items()):
        rows = []
        for f in sorted(files, key=lambda p: Path(p).name):
            rows += pq.read_table(f).to_pylist()
        out[table] = rows
    return out


def _result_fields(r) -> dict:
    d = dict(vars(r))
    d.pop("parts"), d.pop("parse_s"), d.pop("inline")
    return d


def _jobs(out: Path) -> list[ParseJob]:
    return [ParseJob(str(SAMPLE / rel), rel, str(out / f"{i:03d}"), None, "UTC") for i, rel in enumerate(FILES)]


def test_local_executor_gives_what_the_in_process_parse_gives(tmp_path):
    inproc = {j.rel: parse_file(j) for j in _jobs(tmp_path / "a")}
    pooled = {}
    with LocalExecutor(2) as ex:
        for job, r in ex.map_unordered(parse_file, _jobs(tmp_path / "b")):
            assert not isinstance(r, BaseException), r
            assert job.rel not in pooled
            pooled[job.rel] = r
    assert sorted(pooled) == sorted(FILES)
    for rel in FILES:
        a, b = inproc[rel], pooled[rel]
        assert a.records > 0 and a.status in ("parsed", "partial")
        assert _result_fields(a) == _result_fields(b)
        assert _parts_rows(a.parts) == _parts_rows(b.parts)
        assert all(f.startswith(str(tmp_path / "b")) for fs in b.parts.values() for f in fs)


def test_small_tables_come_back_with_the_result_as_the_parts_rows(tmp_path):
    """A job parsed in a worker with ``inline_rows`` sends its small tables back with its result
    (Arrow, pickled by the pool) instead of writing Parquet parts: the same rows, in the same
    order; the large tables stay parts, and parse_issues is always a part."""
    inproc = {j.rel: parse_file(j) for j in _jobs(tmp_path / "a")}
    with LocalExecutor(2) as ex:
        pooled = {job.rel: r for job, r in
                  ex.map_unordered(parse_file, [replace(j, inline_rows=4096) for j in _jobs(tmp_path / "b")])}
    inlined = 0
    for rel in FILES:
        a, b = inproc[rel], pooled[rel]
        assert not set(b.inline) & set(b.parts) and "parse_issues" not in b.inline
        assert all(t.num_rows <= 4096 for t in b.inline.values())
        inlined += len(b.inline)
        rows = _parts_rows(b.parts)
        rows.update({t: tab.to_pylist() for t, tab in b.inline.items()})
        assert rows == _parts_rows(a.parts), rel
        assert b.counts == a.counts and b.status == a.status
    assert inlined >= 3        # (facts at least, in each)


def test_a_result_pickles_its_inline_tables_as_arrow_ipc(tmp_path):
    """What crosses the process boundary: each inline table as Arrow IPC bytes (not the table
    array by array): its record batches' messages where it has its table's schema (the schema is
    not sent), else one stream; read back into the same rows and types; the rest as it is."""
    import pickle

    import pyarrow as pa

    from aftertrace.ingest.model import TABLES
    job = _jobs(tmp_path)[1]                       # (the torchrun log: events, facts, metrics inline)
    r = parse_file(replace(job, inline_rows=4096))
    assert len(r.inline) >= 2
    facts = r.inline["facts"]
    # another schema (a dictionary-encoded column), and a table of no rows, of several batches
    odd = facts.set_column(facts.schema.get_field_index("key"), "key", facts["key"].dictionary_encode())
    many = pa.concat_tables([facts, facts.slice(0, 1)])
    r = replace(r, inline={**r.inline, "steps": TABLES["steps"].arrow_schema().empty_table(), "facts": many,
                           "anchors": odd})
    state = r.__getstate__()
    assert isinstance(state["inline"]["anchors"], bytes)
    assert all(isinstance(b, list) and all(isinstance(m, bytes) for m in b)
               for t, b in state["inline"].items() if t != "anchors")
    assert len(state["inline"]["facts"]) == 2 and state["inline"]["steps"] == []
    back = pickle.loads(pickle.dumps(r))
    assert back.inline.keys() == r.inline.keys()
    for t, tab in r.inline.items():
        assert back.inline[t].schema == tab.schema and back.inline[t].to_pylist() == tab.to_pylist(), t
    assert {k: v for k, v in back.__dict__.items() if k != "inline"} == \
        {k: v for k, v in r.__dict__.items() if k != "inline"}
    assert r.inline and not pickle.loads(pickle.dumps(replace(r, inline={}))).inline


def test_local_executor_returns_the_exception_of_a_failed_call(tmp_path):
    with LocalExecutor(2) as ex:
        got = dict(ex.map_unordered(os.stat, [str(tmp_path / "missing"), str(tmp_path)]))
    assert isinstance(got[str(tmp_path / "missing")], FileNotFoundError)
    assert not isinstance(got[str(tmp_path)], BaseException)


def test_local_executor_keeps_its_workers_across_maps_until_closed():
    with LocalExecutor(2) as ex:
        first = {r for _, r in ex.map_unordered(_pid, range(8))}
        again = {r for _, r in ex.map_unordered(_pid, range(8))}
        assert again <= first and os.getpid() not in first     # (the detect stage's workers parse)
        # a worker that dies breaks its pool: the next map gets a new one
        died = dict(ex.map_unordered(os._exit, [3]))
        assert isinstance(died[3], BaseException)
        after = {r for _, r in ex.map_unordered(_pid, range(4))}
        assert after and not after & first
    assert ex._pool is None


def _pid(_):
    return os.getpid()


def test_local_executor_start_spawns_the_workers_the_first_map_uses():
    from aftertrace.ingest.parse import warm_up
    with LocalExecutor(2) as ex:
        ex.start(warm_up)
        started = set(ex._pool._processes)     # (spawned at once, before any map)
        assert len(started) == 2
        assert {r for _, r in ex.map_unordered(_pid, range(8))} <= started


def test_a_large_bundle_of_many_files_starts_the_pool_before_its_extraction(tmp_path):
    def pipeline(**kw) -> Pipeline:
        svc = Service(Settings(home=tmp_path / str(kw), db_path=tmp_path / f"{kw}.duckdb", inline_bytes=1000, **kw))
        return Pipeline(svc.settings, svc.store, None, svc._executor)
    two = pipeline(workers=2)
    early = two._early_executor({"bundle_kind": "dir", "bundle_bytes": 5000})
    try:
        assert early is not None and len(early._pool._processes) == 2
    finally:
        early.close()
    for kind, size in (("file", 5000), ("tar", 999)):     # a single file; a bundle parsed in-process
        assert two._early_executor({"bundle_kind": kind, "bundle_bytes": size}) is None
    assert pipeline(workers=1)._early_executor({"bundle_kind": "zip", "bundle_bytes": 5000}) is None


def _payload(n):
    return bytes([n % 251]) * (300_000 + n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are a Linux setting")
def test_local_executor_results_fit_the_pipe_whole():
    """A worker sends a result larger than a pipe's default 64 KiB without waiting for the reader."""
    import fcntl
    from aftertrace.server.executors import RESULT_PIPE_BYTES
    with LocalExecutor(2) as ex:
        got = dict(ex.map_unordered(_payload, range(6)))
        assert got == {n: _payload(n) for n in range(6)}
        size = fcntl.fcntl(ex._pool._result_queue._reader.fileno(), fcntl.F_GETPIPE_SZ)
    assert size >= min(RESULT_PIPE_BYTES, int(Path("/proc/sys/fs/pipe-max-size").read_text()))


def test_settings_choose_the_executor(tmp_path, monkeypatch):
    assert Settings.from_env(home=tmp_path).executor == "local"
    monkeypatch.setenv("AFTERTRACE_EXECUTOR", "ray")
    monkeypatch.setenv("AFTERTRACE_RAY_ADDRESS", "ray://head:10001")
    s = Settings.from_env(home=tmp_path)
    assert (s.executor, s.ray_address) == ("ray", "ray://head:10001")
    assert Settings.from_env(home=tmp_path, executor="local").executor == "local"
    with pytest.raises(ValueError, match="unknown executor"):
        Settings.from_env(home=tmp_path, executor="dask")


def test_ray_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)      # import ray -> ImportError
    with pytest.raises(ExecutorUnavailable, match=r"aftertrace\[ray\]"):
        make_executor("ray", 2)


def test_cli_analyze_takes_the_executor(tmp_path, monkeypatch):
    from aftertrace.server import cli
    seen = {}

    class Stop(Exception):
        pass

    def fake_service(settings):
        seen["s"] = settings
        raise Stop

    monkeypatch.setattr("aftertrace.server.service.Service", fake_service)
    args = cli.build_parser().parse_args(["analyze", str(SAMPLE), "--home", str(tmp_path),
                                          "--executor", "ray", "--ray-address", "auto"])
    with pytest.raises(Stop):
        cli._service(args, None)
    assert (seen["s"].executor, seen["s"].ray_address) == ("ray", "auto")


# -- the whole pipeline on both executors ------------------------------------------------------
def _analyse(tmp_path: Path, name: str, executor: str) -> dict:
    home = tmp_path / name
    settings = Settings(home=home, db_path=home / "db.duckdb", workers=2, inline_bytes=0, executor=executor)
    svc = Service(settings)
    sub = svc.submit_path(SAMPLE)
    rep = svc.analyze(sub.incident_id)
    iid = sub.incident_id
    st = svc.store
    sources = st.query("SELECT source_id, path, kind, format, host, rank, status, records, issues, error "
                       "FROM sources WHERE incident_id = ? ORDER BY source_id", [iid])
    counts = {}
    for t in TABLES:
        counts[t] = st.query(f"SELECT source_id, count(*) AS n FROM {t} WHERE incident_id = ? "
                             "GROUP BY source_id ORDER BY source_id", [iid])
    events = st.query("SELECT source_id, count(*) AS n, sum(hash(name)) AS h, min(ts_utc_ns) AS t0, max(ts_utc_ns) AS t1, sum(dur_ns) AS d "
                      "FROM events WHERE incident_id = ? GROUP BY source_id ORDER BY source_id", [iid])
    st.close()
    return {"ran_on_ray": svc._ray is not None, "report": rep, "sources": sources, "counts": counts, "events": events}


@pytest.fixture(scope="module")
def local_ray():
    if ray is None:
        pytest.skip("ray is not installed (pip install 'aftertrace[ray]')")
    started = not ray.is_initialized()
    if started:
        root = str(Path(__file__).resolve().parents[2])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": root}})
    yield ray
    if started:
        ray.shutdown()


@needs_ray
def test_ray_and_local_pool_give_identical_results(tmp_path, local_ray):
    local = _analyse(tmp_path, "local", "local")
    on_ray = _analyse(tmp_path, "ray", "ray")
    assert len(local["sources"]) > 20
    assert on_ray["ran_on_ray"] and not local["ran_on_ray"]   # (not the in-process path)
    assert local["sources"] == on_ray["sources"]
    assert local["counts"] == on_ray["counts"]
    assert sum(r["n"] for r in local["counts"]["events"]) > 0
    assert local["events"] == on_ray["events"]
    a, b = _untied(_without_timing(local["report"])), _untied(_without_timing(on_ray["report"]))
    assert any(x.get("kind") == "step_slowdown" for x in local["report"]["anomalies"])
    for key in ("chains", "anomalies", "failure", "origin", "victims", "sources", "summary"):
        assert json.dumps(a.get(key), sort_keys=True) == json.dumps(b.get(key), sort_keys=True), key
    assert a == b


@needs_ray
def test_ray_executor_returns_the_exception_of_a_failed_call(tmp_path, local_ray):
    ex = make_executor("ray", 2)
    got = dict(ex.map_unordered(os.stat, [str(tmp_path / "missing"), str(tmp_path)]))
    assert isinstance(got[str(tmp_path / "missing")], Exception)
    assert not isinstance(got[str(tmp_path)], BaseException)


_HOLDER = """
import os, sys, time
sys.path.insert(0, {root!r})
from aftertrace.server.executors import LocalExecutor

def nap(job):
    time.sleep(60)
    return os.getpid()

if __name__ == "__main__":
    ex = LocalExecutor(2)
    ex.start(os.getpid)
    got = ex.map_unordered(nap, [1, 2])
    time.sleep(0.1)
    print(" ".join(str(p.pid) for p in ex._pool._processes.values()), flush=True)
    next(got)
"""


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_the_pool_workers_end_with_the_process_that_started_them(tmp_path, sig):
    # a killed (or stopped) analysis leaves no parse worker behind, busy or not, nor their memory
    import signal
    import subprocess
    import time
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER.format(root=str(Path(__file__).resolve().parents[2])))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(Path(f"/proc/{p}").exists() for p in pids)
    proc.send_signal(getattr(signal, sig))
    proc.wait(10)
    t0 = time.monotonic()
    while any(_alive(p) for p in pids) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), f"workers {pids} outlived their parent ({sig})"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_abort_ends_busy_workers_and_the_map_yields_each_unfinished_job_failed():
    # (a stopping service: its parse must not hold the process for as long as a large file takes)
    import threading
    import time
    ex = LocalExecutor(2)
    try:
        ex.start(os.getpid)
        got: list = []
        t = threading.Thread(target=lambda: got.extend(ex.map_unordered(time.sleep, [60, 60, 60])))
        t0 = time.monotonic()
        t.start()
        time.sleep(0.5)
        ex.abort()
        t.join(20)
        assert not t.is_alive() and time.monotonic() - t0 < 20
        assert sorted(j for j, _ in got) == [60, 60, 60]
        assert all(isinstance(r, BaseException) for _, r in got), got
    finally:
        ex.close()
    ex.abort()      # (closed, or never started: nothing to end)


# -- small files in batches ------------------------------------------------------------------
def test_small_files_go_to_the_pool_in_batches():
    """Runs of files of at most BATCH_FILE_BYTES are one task per BATCH_FILES files (or
    BATCH_BYTES bytes); larger files and byte ranges are tasks of their own; a run of one file is
    the file's own task."""
    from aftertrace.ingest.parse import BATCH_BYTES, BATCH_FILE_BYTES, BATCH_FILES, ParseBatch, batched
    big = ParseJob("/b", "big", "/o")
    rng = replace(big, rel="r", byte_range=(0, 10, 1))
    small = [ParseJob(f"/s{i}", f"s{i}", "/o") for i in range(BATCH_FILES + 3)]
    sizes = {"big": BATCH_FILE_BYTES + 1, "r": 0, **{j.rel: 100 for j in small}}
    units = batched([big, small[0], rng, *small[1:]], sizes)
    assert units[0] is big and units[1] is small[0] and units[2] is rng
    assert isinstance(units[3], ParseBatch) and units[3].jobs == tuple(small[1:BATCH_FILES + 1])
    assert isinstance(units[4], ParseBatch) and units[4].jobs == tuple(small[BATCH_FILES + 1:])
    assert len(units) == 5
    # the bytes bound: files of the largest batched size go BATCH_BYTES // BATCH_FILE_BYTES to a batch
    per = BATCH_BYTES // BATCH_FILE_BYTES
    assert 1 < per < BATCH_FILES
    full = {j.rel: BATCH_FILE_BYTES for j in small[:per + 2]}
    assert [len(u.jobs) for u in batched(small[:per + 2], full)] == [per, 2]


def test_a_batch_whose_worker_died_is_parsed_again_file_by_file(tmp_path, monkeypatch):
    """A worker that dies takes its whole batch down; each of the batch's files is then parsed on
    its own, so that only a file that kills its worker fails, as when every file was a task."""
    from concurrent.futures.process import BrokenProcessPool

    from aftertrace.ingest.parse import ParseBatch

    class DiesOnBatches:
        name = "local"

        def __init__(self):
            self.units = []

        def map_unordered(self, fn, jobs):
            for j in jobs:
                self.units.append(j)
                yield j, (BrokenProcessPool("a worker died") if isinstance(j, ParseBatch) else fn(j))

        def start(self, warm):
            pass

        def close(self):
            pass

        def abort(self):
            pass

    fake = DiesOnBatches()
    svc = Service(Settings(home=tmp_path, db_path=tmp_path / "db.duckdb", workers=2, inline_bytes=0))
    monkeypatch.setattr(svc, "_executor", lambda workers: fake)
    sub = svc.submit_path(SAMPLE)
    rep = svc.analyze(sub.incident_id)
    in_batches = {j.rel for u in fake.units if isinstance(u, ParseBatch) for j in u.jobs}
    alone = [u.rel for u in fake.units if isinstance(u, ParseJob)]
    assert len(in_batches) > 5 and in_batches <= set(alone)
    failed = [s for s in rep["sources"] if "parser process failed" in (s.get("error") or "")]
    assert not failed and any(s["status"] == "parsed" for s in rep["sources"] if s["path"] in in_batches)
    assert rep["chains"] and rep["chains"][0]["links"][0]["kind"] == "cpu_throttle"
