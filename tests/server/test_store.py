"""The DuckDB store: schema from the model, migrations, bulk loads, per-thread cursors."""
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.model import SCHEMA_VERSION, TABLES
from aftertrace.server import store as store_mod
from aftertrace.server.store import Store, StoreBusy, StoreError


def test_creates_every_table_with_documented_columns(tmp_path):
    s = Store(tmp_path / "a.duckdb")
    for name, t in TABLES.items():
        cols = [r["column_name"] for r in s.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [name])]
        assert cols == t.names, name
        for c in t.columns:
            assert c.unit and c.doc, f"{name}.{c.name} lacks a unit or doc"
    assert s.schema_version() == SCHEMA_VERSION


def test_round_trip_of_parquet_parts(tmp_path):
    s = Store(tmp_path / "a.duckdb")
    schema = TABLES["events"].arrow_schema()
    rows = {f.name: [None, None] for f in schema}
    rows.update(ts_raw_ns=[1_000, 2_000], name=["a", "b"], line=[3, 4], attrs=['{"x": 1}', None])
    path = tmp_path / "events.00000.parquet"
    pq.write_table(pa.table(rows, schema=schema), path)
    s.load_parts("events", [str(path)], "inc1", 7)
    got = s.query("SELECT incident_id, source_id, ts_raw_ns, ts_utc_ns, name, line, attrs FROM events ORDER BY line")
    # (the UTC time is the raw one until the clock alignment places the row or leaves it unplaced)
    assert got == [
        {"incident_id": "inc1", "source_id": 7, "ts_raw_ns": 1000, "ts_utc_ns": 1000, "name": "a", "line": 3,
         "attrs": '{"x": 1}'},
        {"incident_id": "inc1", "source_id": 7, "ts_raw_ns": 2000, "ts_utc_ns": 2000, "name": "b", "line": 4,
         "attrs": None},
    ]
    s.delete_incident_rows("inc1")
    assert s.query("SELECT count(*) AS n FROM events") == [{"n": 0}]


def test_reopen_keeps_data_and_version(tmp_path):
    p = tmp_path / "a.duckdb"
    s = Store(p)
    s.insert_rows("facts", [{"incident_id": "i", "source_id": 1, "key": "hostname", "value": "vm"}])
    s.close()
    s2 = Store(p)
    assert s2.query("SELECT key, value FROM facts") == [{"key": "hostname", "value": "vm"}]
    assert s2.schema_version() == SCHEMA_VERSION


def test_migration_runs_once_to_the_new_version(tmp_path, monkeypatch):
    p = tmp_path / "a.duckdb"
    Store(p).close()
    calls = []

    def to_next(cur):
        calls.append(1)
        cur.execute("ALTER TABLE facts ADD COLUMN note VARCHAR")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(store_mod.MIGRATIONS, SCHEMA_VERSION, to_next)
    s = Store(p)
    assert calls == [1]
    assert s.schema_version() == SCHEMA_VERSION + 1
    assert "note" in [r["column_name"] for r in s.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'facts'")]
    s.close()
    Store(p).close()
    assert calls == [1]


def test_store_from_a_newer_aftertrace_is_refused(tmp_path):
    p = tmp_path / "a.duckdb"
    s = Store(p)
    s.cursor().execute("UPDATE aftertrace_meta SET value = '999' WHERE key = 'schema_version'")
    s.close()
    with pytest.raises(StoreError, match="newer"):
        Store(p)


def test_cursor_per_thread(tmp_path):
    s = Store(tmp_path / "a.duckdb")
    seen = {}

    def work(i):
        seen[i] = s.cursor()          # keep the object so ids cannot be reused
        s.cursor().execute("SELECT 1").fetchall()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len({id(c) for c in seen.values()}) == 4
    assert s.cursor() is s.cursor()


def test_cursors_of_ended_threads_are_closed_by_a_live_thread(tmp_path):
    s = Store(tmp_path / "a.duckdb")
    kept = []
    t = threading.Thread(target=lambda: kept.append(s.cursor()))
    t.start()
    t.join()
    t = threading.Thread(target=s.cursor)        # a new thread's cursor prunes the dead one's
    t.start()
    t.join()
    with pytest.raises(Exception, match="closed"):
        kept[0].execute("SELECT 1")
    mine = s.cursor()
    s.close()                                    # closes every thread's cursor, then the database
    with pytest.raises(Exception, match="closed"):
        mine.execute("SELECT 1")


def test_daemon_threads_ending_at_interpreter_exit_do_not_abort(tmp_path):
    """A cursor freed as its thread ends while the interpreter finalizes used to abort the
    process (exit 134, a C++ exception out of DuckDB's destructor): the server's daemon worker
    threads end exactly then. About one run in two aborted, so a handful of runs must all pass."""
    code = textwrap.dedent(f"""
        import atexit, sys, threading, time
        from aftertrace.server.store import Store
        st = Store(sys.argv[1])
        evs = []
        def work(ev):
            st.cursor().execute("SELECT 1").fetchall()
            ev.wait()
        for _ in range(8):
            evs.append(threading.Event())
            threading.Thread(target=work, args=(evs[-1],), daemon=True).start()
        time.sleep(0.3)
        atexit.register(lambda: [e.set() for e in evs])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"{k}.duckdb")], cwd=store_mod.__file__.rsplit("/server/", 1)[0],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(8)]
    codes = [p.wait(60) for p in procs]
    assert codes == [0] * len(procs), [p.stderr.read()[-300:] for p in procs if p.returncode]


def test_busy_store_gives_a_clear_error(tmp_path):
    p = tmp_path / "a.duckdb"
    code = textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(p)!r})
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreBusy, match="in use by another aftertrace process"):
            Store(p)
    finally:
        proc.kill()
        proc.wait()


def test_schema_1_store_gains_metrics_line(tmp_path):
    """A store written by schema 1 (no metrics.line) is migrated in place and keeps its rows."""
    s = Store(tmp_path / "a.duckdb")
    cur = s.cursor()
    cur.execute("ALTER TABLE metrics DROP COLUMN line")
    cur.execute("INSERT INTO metrics (incident_id, source_id, metric, value) VALUES ('i', 1, 'm', 2.5)")
    cur.execute("UPDATE aftertrace_meta SET value = '1' WHERE key = 'schema_version'")
    s.close()
    s2 = Store(tmp_path / "a.duckdb")
    assert s2.schema_version() == SCHEMA_VERSION >= 2
    assert s2.query("SELECT metric, value, line FROM metrics") == [{"metric": "m", "value": 2.5, "line": None}]
    assert [c["name"] for c in s2.query("SELECT name FROM pragma_table_info('metrics')")][-1] == "line"


def test_long_text_columns_are_stored_with_zstd(tmp_path):
    # evidence text and args JSON: ZSTD loads ~2.5x cheaper than DuckDB's default (see model.Column)
    s = Store(tmp_path / "a.duckdb")
    schema = TABLES["events"].arrow_schema()
    n = 5000
    rows = {f.name: [None] * n for f in schema}
    rows.update(name=["x"] * n, text=[f"line {i} of some log" for i in range(n)],
                attrs=[f'{{"External id": {i}}}' for i in range(n)])
    path = tmp_path / "events.00000.parquet"
    pq.write_table(pa.table(rows, schema=schema), path)
    s.load_parts("events", [str(path)], "inc1", 1)
    s.cursor().execute("CHECKPOINT")
    got = {(r["column_name"], r["compression"]) for r in s.query(
        "SELECT DISTINCT column_name, compression FROM pragma_storage_info('events') "
        "WHERE column_name IN ('text', 'attrs') AND segment_type = 'VARCHAR'")}
    assert got == {("text", "ZSTD"), ("attrs", "ZSTD")}


def test_schema_6_store_gains_the_members_table(tmp_path):
    """A store written by schema 6 (no members table) is migrated in place and keeps its rows."""
    s = Store(tmp_path / "a.duckdb")
    cur = s.cursor()
    cur.execute("DROP TABLE members")
    cur.execute("INSERT INTO metrics (incident_id, source_id, metric, value) VALUES ('i', 1, 'm', 2.5)")
    cur.execute("UPDATE aftertrace_meta SET value = '6' WHERE key = 'schema_version'")
    s.close()
    s2 = Store(tmp_path / "a.duckdb")
    assert s2.schema_version() == SCHEMA_VERSION >= 7
    assert s2.query("SELECT metric, value FROM metrics") == [{"metric": "m", "value": 2.5}]
    cols = [c["name"] for c in s2.query("SELECT name FROM pragma_table_info('members')")]
    assert cols == TABLES["members"].names


def test_yield_cores_lowers_duckdbs_threads_until_the_last_block_ends(tmp_path, monkeypatch):
    import os
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    s = Store(tmp_path / "s.duckdb")
    threads = lambda: int(s.query("SELECT current_setting('threads') AS t")[0]["t"])
    s.cursor().execute("SET threads = 8")
    with s.yield_cores(6):
        assert threads() == 2                 # the cores the six workers leave
        with s.yield_cores(8):               # (a second analysis beside it: no fewer than one)
            assert threads() == 2
        assert threads() == 2                 # the first block still runs
    assert threads() == 8
    with s.yield_cores(0):                   # nothing busy: the setting stays
        assert threads() == 8
    with pytest.raises(RuntimeError):
        with s.yield_cores(7):
            assert threads() == 1
            raise RuntimeError("a failed parse")
    assert threads() == 8


def test_a_loads_rows_are_written_to_the_file_before_its_commit(tmp_path):
    """Rows inserted in a transaction go to the file as row groups fill, also when each insert is
    less than one row group (the loader inserts part by part), so the COMMIT that ends a load
    does not compress and write them all after the parse."""
    st = Store(tmp_path / "a.duckdb")
    st.cursor().execute("CHECKPOINT")
    before = (tmp_path / "a.duckdb").stat().st_size
    cur = st.cursor()
    cur.execute("BEGIN TRANSACTION")
    for k in range(3):
        cur.execute("INSERT INTO events (incident_id, source_id, ts_raw_ns, category, name, text) "
                    "SELECT 'i', 1, r, 'c', 'n' || (r % 97), 'line ' || r || ' of a log, long enough to weigh' "
                    f"FROM range({k * 100_000}, {(k + 1) * 100_000}) t(r)")
    written = (tmp_path / "a.duckdb").stat().st_size - before
    cur.execute("COMMIT")
    assert written > 1_000_000
    assert st.query("SELECT count(*) AS n FROM events")[0]["n"] == 300_000
    st.close()


def test_schema_11_store_gains_incidents_interrupted(tmp_path):
    """A store written by schema 11 (no incidents.interrupted) is migrated in place and keeps its rows."""
    s = Store(tmp_path / "a.duckdb")
    cur = s.cursor()
    cur.execute("ALTER TABLE incidents DROP COLUMN interrupted")
    cur.execute("INSERT INTO incidents (incident_id, bundle_sha256, status) VALUES ('i1', 'ab', 'running')")
    cur.execute("UPDATE aftertrace_meta SET value = '11' WHERE key = 'schema_version'")
    s.close()
    s2 = Store(tmp_path / "a.duckdb")
    assert s2.schema_version() == SCHEMA_VERSION >= 12
    assert s2.query("SELECT incident_id, status, interrupted FROM incidents") == \
        [{"incident_id": "i1", "status": "running", "interrupted": None}]
    assert [c["name"] for c in s2.query("SELECT name FROM pragma_table_info('incidents')")] == \
        TABLES["incidents"].names
