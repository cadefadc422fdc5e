"""SQL fragments that several analyses share."""
from __future__ import annotations


def events_named(names: tuple[str, ...]) -> str:
    """One incident's events named one of ``names``, as a subquery to select from in place of
    ``events`` (one parameter per name, each the incident id).

    DuckDB takes a list of names (``name IN (...)``, or ``OR``) as a hint for skipping row groups
    and filters the rows after the scan, so a query that keeps a few named rows but selects wide
    columns (attrs, text) reads those columns for every event of the incident. One scan per name,
    each with an equality, reads them for the named rows alone (ten times faster on 0.5 M
    events), from the store's table and from an attached incident's Parquet alike."""
    return "(" + " UNION ALL ".join(
        "SELECT * FROM events WHERE incident_id = ? AND name = '" + n.replace("'", "''") + "'" for n in names) + ")"
