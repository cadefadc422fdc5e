"""SQL fragments that several analyses share."""
from __future__ import annotations


def rows_named(names: tuple[str, ...]) -> str:
    """A query of the rowids (``rid``) of one incident's events named one of ``names`` (its one
    parameter: the incident id), for a CTE that the wide columns are then read through:
    ``WITH named AS (...) SELECT ... FROM named JOIN events e ON e.rowid = named.rid``.

    DuckDB takes a list of names (``name IN (...)``, or ``OR``) as a hint for skipping row groups
    and filters the rows after the scan, so a query that keeps a few named rows but selects wide
    columns (attrs, text) reads those columns for every event of the incident; through this
    narrow set it reads them for the named rows alone (ten times faster on 0.5 M events)."""
    lits = ", ".join("'" + n.replace("'", "''") + "'" for n in names)
    return f"SELECT rowid AS rid FROM events WHERE incident_id = ? AND name IN ({lits})"
