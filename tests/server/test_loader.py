"""IncidentLoad: parts inserted while files are parsed, in one transaction per analysis."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.model import TABLES
from aftertrace.server.loader import IncidentLoad
from aftertrace.server.store import Store


def _part(path, names):
    schema = TABLES["events"].arrow_schema()
    cols = {f.name: [None] * len(names) for f in schema}
    cols.update(name=names, ts_raw_ns=list(range(len(names))))
    pq.write_table(pa.table(cols, schema=schema), path)
    return path


def _names(store, iid="inc"):
    return [(r["source_id"], r["name"]) for r in store.query(
        "SELECT source_id, name FROM events WHERE incident_id = ? ORDER BY source_id, ts_raw_ns", [iid])]


def _sources(store, iid, n):
    store.insert_rows("sources", [{"incident_id": iid, "source_id": i, "path": f"f{i}", "kind": "x",
                                   "status": "parsed"} for i in range(1, n + 1)])


def test_replaces_the_incident_rows_at_commit_only(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    old = IncidentLoad(s, "inc")
    old.part(1, "events", _part(tmp_path / "old.parquet", ["old"]))
    old.commit(lambda: _sources(s, "inc", 1))
    load = IncidentLoad(s, "inc")
    load.part(1, "events", _part(tmp_path / "a.parquet", ["a1", "a2"]))
    load.parts(2, {"events": [str(_part(tmp_path / "b.parquet", ["b1"]))]})
    load._drain()
    assert _names(s) == [(1, "old")]          # other readers see the old rows until the commit
    load.commit(lambda: _sources(s, "inc", 2))
    assert _names(s) == [(1, "a1"), (1, "a2"), (2, "b1")]
    assert s.query("SELECT count(*) AS n FROM sources WHERE incident_id = 'inc'") == [{"n": 2}]


def test_a_failed_source_is_dropped(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    load = IncidentLoad(s, "inc")
    load.part(1, "events", _part(tmp_path / "a.parquet", ["a"]))
    load.part(2, "events", _part(tmp_path / "b.parquet", ["half of b"]))
    load.drop_source(2)                       # its parse failed after that part was announced
    load.commit(lambda: None)
    assert _names(s) == [(1, "a")]


def test_a_failed_insert_rolls_back_and_keeps_the_old_rows(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    first = IncidentLoad(s, "inc")
    first.part(1, "events", _part(tmp_path / "old.parquet", ["old"]))
    first.commit(lambda: None)
    load = IncidentLoad(s, "inc")
    load.part(1, "events", _part(tmp_path / "a.parquet", ["a"]))
    load.part(1, "events", tmp_path / "missing.parquet")
    load.part(1, "events", _part(tmp_path / "c.parquet", ["c"]))
    with pytest.raises(Exception, match="missing.parquet"):
        load.commit(lambda: None)
    assert _names(s) == [(1, "old")]
    with pytest.raises(RuntimeError, match="closed"):
        load.part(1, "events", tmp_path / "c.parquet")
    load.abort()                              # harmless once closed


def test_abort_rolls_back(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    load = IncidentLoad(s, "inc")
    load.part(1, "events", _part(tmp_path / "a.parquet", ["a"]))
    load.abort()
    assert _names(s) == []
    # the store is usable afterwards
    again = IncidentLoad(s, "inc")
    again.part(1, "events", _part(tmp_path / "b.parquet", ["b"]))
    again.commit(lambda: None)
    assert _names(s) == [(1, "b")]


# -- attached incidents (a run folder of Parquet partitions) ----------------------------------------
def _partition(root, sid, names, host="h1"):
    from aftertrace.ingest.sink import partition_path
    p = partition_path(root, "events", "app_log", host, sid, 0)
    p.parent.mkdir(parents=True, exist_ok=True)
    return _part(p, names)


def test_attached_rows_are_read_in_place_and_a_new_run_replaces_the_old_at_commit(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    run1, run2 = tmp_path / "parts" / "inc" / "r1", tmp_path / "parts" / "inc" / "r2"
    load = IncidentLoad(s, "inc", run1)
    load.part(1, "events", _partition(run1, 1, ["a"]))
    load.commit(lambda: _sources(s, "inc", 1))
    assert _names(s) == [(1, "a")]
    assert s.query("SELECT count(*) AS n FROM main.events") == [{"n": 0}]     # not copied in
    load = IncidentLoad(s, "inc", run2)
    load.part(1, "events", _partition(run2, 1, ["b1", "b2"]))
    load.part(2, "events", _partition(run2, 2, ["half of c"]))
    load.drop_source(2)                       # its parse failed: its partitions go
    load._drain()
    assert _names(s) == [(1, "a")]            # the old run until the commit
    load.commit(lambda: _sources(s, "inc", 2))
    assert _names(s) == [(1, "b1"), (1, "b2")]
    assert not run1.exists() and not list(run2.rglob("2-*.parquet"))


def test_an_aborted_attached_load_removes_its_run_and_keeps_the_old_one(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    run1, run2 = tmp_path / "parts" / "inc" / "r1", tmp_path / "parts" / "inc" / "r2"
    load = IncidentLoad(s, "inc", run1)
    load.part(1, "events", _partition(run1, 1, ["a"]))
    load.commit(lambda: None)
    load = IncidentLoad(s, "inc", run2)
    load.part(1, "events", _partition(run2, 1, ["b"]))
    load.abort()
    assert _names(s) == [(1, "a")] and run1.exists() and not run2.exists()


def _rows(names, ts_type=pa.int64()):
    """An inline events table (the small tables a worker sends back), ``ts_raw_ns`` of ``ts_type``."""
    schema = TABLES["events"].arrow_schema()
    cols = {f.name: pa.nulls(len(names), f.type) for f in schema}
    cols.update(name=pa.array(names, pa.string()), ts_raw_ns=pa.array(range(len(names)), ts_type))
    return pa.table(cols)


def test_inline_tables_of_many_sources_keep_their_source_ids(tmp_path, monkeypatch):
    s = Store(tmp_path / "s.duckdb")
    load = IncidentLoad(s, "inc")
    load.tables(1, {"events": _rows(["a1", "a2", "a3"])})
    load.tables(2, {"events": _rows([])})                          # (nothing to insert)
    load.tables(3, {"events": _rows(["c1"], pa.int32())})          # (cast to the store's schema)
    load.tables(4, {"events": _rows(["d1", "d2"]), "metrics": None})
    load.commit(lambda: None)
    assert _names(s) == [(1, "a1"), (1, "a2"), (1, "a3"), (3, "c1"), (4, "d1"), (4, "d2")]


def test_store_load_tables_runs_each_source_id_over_its_rows(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    s.load_tables("events", [_rows(["x"]), _rows([]), _rows(["y1", "y2"]), _rows(["z"])], [7, 8, 9, 10], "inc")
    assert _names(s) == [(7, "x"), (9, "y1"), (9, "y2"), (10, "z")]
    s.load_tables("events", [_rows([])], [1], "inc")                # only empty tables: no insert
    assert len(_names(s)) == 4
