"""IncidentLoad streams a large file's parts: a big part is inserted when it is announced,
small parts are gathered (a regression here held a 232 MB trace's whole load back until the
end of its parse: 5.1 s instead of 2.9 s into the store)."""
import os

import pyarrow as pa
import pyarrow.parquet as pq

from aftertrace.ingest.model import TABLES
from aftertrace.server import loader
from aftertrace.server.loader import IncidentLoad
from aftertrace.server.store import Store


def _part(path, n, text_bytes=0):
    schema = TABLES["events"].arrow_schema()
    cols = {f.name: [None] * n for f in schema}
    # incompressible text so that the part's size on disk is what it says
    cols.update(name=[f"e{i}" for i in range(n)], ts_raw_ns=list(range(n)),
                text=[os.urandom(text_bytes // max(n, 1) // 2).hex() for _ in range(n)])
    pq.write_table(pa.table(cols, schema=schema), path, compression="none")
    return str(path)


def _recorded(monkeypatch, store):
    calls = []
    real = store.load_batch

    def load_batch(table, files, sids, iid):
        calls.append((table, [os.path.basename(f) for f in files]))
        return real(table, files, sids, iid)
    monkeypatch.setattr(store, "load_batch", load_batch)
    return calls


def test_a_big_part_is_inserted_when_announced_small_ones_are_gathered(tmp_path, monkeypatch):
    s = Store(tmp_path / "s.duckdb")
    calls = _recorded(monkeypatch, s)
    small = _part(tmp_path / "small.parquet", 3)
    big = _part(tmp_path / "big.parquet", 1000, text_bytes=2 * loader.BIG_PART)
    assert os.path.getsize(small) < loader.BIG_PART <= os.path.getsize(big)
    load = IncidentLoad(s, "inc")
    load.part(1, "events", small)
    load._drain()
    assert calls == []                                   # gathered: not inserted yet
    load.part(1, "events", big)
    load._drain()
    assert calls == [("events", ["small.parquet", "big.parquet"])]   # before the parse ends
    load.part(2, "events", _part(tmp_path / "small2.parquet", 2))
    load._drain()
    assert len(calls) == 1
    load.commit(lambda: None)
    assert calls[-1] == ("events", ["small2.parquet"])
    assert s.query("SELECT count(*) AS n FROM events WHERE incident_id = 'inc'") == [{"n": 1005}]


def _facts_part(path):
    schema = TABLES["facts"].arrow_schema()
    cols = {f.name: [None] for f in schema}
    cols.update(key=["time_zone"], value=["UTC"])
    pq.write_table(pa.table(cols, schema=schema), path)
    return str(path)


def test_inserted_parts_are_removed_except_those_read_again(tmp_path):
    # the temporary parts are uncompressed (ingest/sink.py): once in the store, their disk space is
    # given back; facts and parse_issues are read again by the pipeline after the parse
    s = Store(tmp_path / "s.duckdb")
    ev = _part(tmp_path / "events.parquet", 5)
    facts = _facts_part(tmp_path / "facts.parquet")
    load = IncidentLoad(s, "inc")
    load.parts(1, {"events": [ev], "facts": [facts]})
    load.commit(lambda: None)
    assert s.query("SELECT count(*) AS n FROM events WHERE incident_id = 'inc'") == [{"n": 5}]
    assert s.query("SELECT count(*) AS n FROM facts WHERE incident_id = 'inc'") == [{"n": 1}]
    assert not os.path.exists(ev) and os.path.exists(facts)


def test_a_failed_insert_removes_nothing(tmp_path):
    s = Store(tmp_path / "s.duckdb")
    good = _part(tmp_path / "good.parquet", 5)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    load = IncidentLoad(s, "inc")
    load.parts(1, {"events": [good, str(bad)]})
    try:
        load.commit(lambda: None)
    except Exception:
        pass
    else:
        raise AssertionError("the insert of a damaged part must fail")
    assert os.path.exists(good) and bad.exists()
