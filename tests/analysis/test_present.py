"""Which parser tables hold an incident's rows, asked before a query: the worked example of
``analysis/present.py`` exactly, and the analysis of real samples the same whether or not the
queries on tables without rows are run."""
from pathlib import Path

import pytest

from aftertrace.analysis import clocks, present, rootcause
from aftertrace.ingest.model import PARSER_TABLES
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "tests/data/perf_script/flamegraph__perf-funcab-pid-01.txt"
SAMPLES = [PERF, ROOT / "sample_traces/oom-after-throttle", ROOT / "sample_traces/logs-sigkill",
           ROOT / "tests/data/perf_script/copyforward__perf.script"]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    svc = Service(Settings.from_env(home=tmp_path_factory.mktemp("present") / "home"))
    out = {}
    for p in SAMPLES:
        iid = svc.submit_path(p).incident_id
        svc.analyze(iid)
        out[p] = iid
    return svc.store, out


@pytest.fixture(scope="module")
def attached(tmp_path_factory):
    """oom-after-throttle analysed with a Parquet location: its heavy tables are partitions."""
    home = tmp_path_factory.mktemp("present-parts")
    svc = Service(Settings(home=home, db_path=home / "db.duckdb", workers=2, inline_bytes=0, executor="local",
                           parts_dir=home / "parts"))
    iid = svc.submit_path(SAMPLES[1]).incident_id
    svc.analyze(iid)
    return svc.store, iid


class Counting:
    """A store that counts the questions it is asked."""

    def __init__(self, store):
        self.store, self.n = store, 0

    def tables_with_rows(self, incident_id):
        self.n += 1
        return self.store.tables_with_rows(incident_id)


def test_worked_example(analysed):
    store, iids = analysed
    iid = iids[PERF]
    assert present.with_rows(store, iid) == {"facts", "samples", "stacks"}
    assert not present.has_rows(store, iid, "events") and present.has_rows(store, iid, "samples")
    # within one analysis the question is asked of the store once; outside one, each time
    counted = Counting(store)
    with present.one_analysis():
        assert [present.has_rows(counted, iid, t) for t in ("events", "samples", "metrics")] == [False, True, False]
        assert counted.n == 1
        assert present.with_rows(counted, iids[SAMPLES[1]]) >= {"events", "metrics"} and counted.n == 2
    present.has_rows(counted, iid, "events")
    present.has_rows(counted, iid, "events")
    assert counted.n == 4
    with pytest.raises(ValueError):
        present.has_rows(store, iid, "clock_map")      # (the analysis writes it: not a parser table)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_the_findings_are_those_of_every_query_run(analysed, sample, monkeypatch):
    store, iids = analysed
    iid = iids[sample]

    def findings():
        with present.one_analysis():
            entries = clocks.align(store, iid)
            rc = rootcause.analyze(store, iid, clocks.skew_links(entries))
        return entries, rc

    gated = findings()
    monkeypatch.setattr(present, "with_rows", lambda store, incident_id: frozenset(PARSER_TABLES))
    assert findings() == gated
    if sample == PERF:
        assert present.with_rows(store, iid) == frozenset(PARSER_TABLES)    # (the patch is in place)


def test_an_attached_incident_holds_what_its_partitions_and_native_tables_hold(attached, analysed):
    store, iid = attached
    native_store, iids = analysed
    assert store.attached_root(iid) is not None
    assert present.with_rows(store, iid) == present.with_rows(native_store, iids[SAMPLES[1]])
    assert {"events", "metrics", "samples", "facts", "anchors"} <= present.with_rows(store, iid)

    def findings():
        with present.one_analysis():
            entries = clocks.align(store, iid)
            return entries, rootcause.analyze(store, iid, clocks.skew_links(entries))
    gated = findings()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(present, "with_rows", lambda store, incident_id: frozenset(PARSER_TABLES))
        assert findings() == gated


def test_a_store_that_cannot_say_is_taken_to_hold_every_table():
    class Rows:
        def query(self, sql, params=None):
            return []
    assert present.with_rows(Rows(), "i") == frozenset(PARSER_TABLES)
