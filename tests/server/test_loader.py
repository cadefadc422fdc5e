"""IncidentLoad: parts inserted while files are parsed, in one transaction per analysis."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.model import TABLES
from server.loader import IncidentLoad
from server.store import Store


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
