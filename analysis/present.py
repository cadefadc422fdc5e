"""Which of the tables a parser writes hold rows of an incident: asked before a query is planned.

DuckDB takes a few milliseconds to plan one of the analysis's queries (joins, subqueries, JSON
paths) even when the table it reads holds no row of the incident; an incident of one perf
recording has no events, metrics or anchors, and most of its analysis would be such plans. A query
whose rows all come from one parser table (its ``FROM`` table, inner-joined to the rest) has no
rows when that table has none of the incident's, so it is not run then.

The parser tables do not change while an incident is analysed (clock alignment and the findings
write other tables), so within a :func:`one_analysis` block the store is asked once (its
``tables_with_rows``, one query: it knows where it keeps an incident's rows); outside one, at
each question.

Worked example (``tests/analysis/test_present.py``): the incident of
``tests/data/perf_script/flamegraph__perf-funcab-pid-01.txt`` (one ``perf script`` file) holds
samples, stacks and facts; :func:`with_rows` is ``{"facts", "samples", "stacks"}``,
``has_rows(store, incident, "events")`` is False, and the OOM kills, the typed events, the
launcher's lines and the forks and exits perf recorded are not queried: the analysis finds what
it finds with every query run.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from aftertrace.ingest.model import PARSER_TABLES

_KNOWN: ContextVar[dict | None] = ContextVar("aftertrace_tables_with_rows", default=None)


@contextmanager
def one_analysis():
    """Within this block an incident's parser tables are taken not to change: which of them hold
    rows is read once per incident (and store)."""
    token = _KNOWN.set({})
    try:
        yield
    finally:
        _KNOWN.reset(token)


def with_rows(store, incident_id: str) -> frozenset[str]:
    """The parser tables (:data:`ingest.model.PARSER_TABLES`) that hold rows of the incident, as
    the store says (``tables_with_rows``: it knows where it keeps them); a store that cannot say
    is taken to hold rows in every one."""
    known = _KNOWN.get()
    key = (id(store), incident_id)
    if known is not None and key in known:
        return known[key]
    ask = getattr(store, "tables_with_rows", None)
    got = frozenset(PARSER_TABLES) if ask is None else ask(incident_id)
    if known is not None:
        known[key] = got
    return got


def has_rows(store, incident_id: str, table: str) -> bool:
    """Whether the parser table ``table`` holds rows of the incident."""
    if table not in PARSER_TABLES:
        raise ValueError(f"{table!r} is not a table parsers write")
    return table in with_rows(store, incident_id)
