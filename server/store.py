"""The DuckDB store: one database file, schema from ``ingest.model``, a cursor per thread.

* ``Store(path)`` opens (or creates) the database, creates the tables and runs
  the migrations up to ``ingest.model.SCHEMA_VERSION``.
* ``store.cursor()`` returns this thread's own cursor (DuckDB connections are
  not shared between threads; cursors of one database are).
* Rows arrive in bulk: :meth:`Store.load_parts` inserts a source's Parquet parts
  with one ``INSERT ... SELECT FROM read_parquet`` per table.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterable

import duckdb

from ingest.model import INCIDENT_TABLES, SCHEMA_VERSION, TABLES


class StoreError(Exception):
    pass


class StoreBusy(StoreError):
    pass


# Migrations from version N to N+1, as functions of a cursor. Version 1 is the
# initial schema created from the model.
def _v1_metrics_line(cur) -> None:
    """Schema 2: ``metrics.line`` (text-log metrics cite their line)."""
    cur.execute("ALTER TABLE metrics ADD COLUMN IF NOT EXISTS line BIGINT")


def _v2_shares(cur) -> None:
    """Schema 3: the ``shares`` table (read-only report links)."""
    cur.execute(TABLES["shares"].ddl())


def _v3_kineto_utc(cur) -> None:
    """Schema 4: ``collectives.ts_utc_ns`` and ``steps.ts_utc_ns`` (queryable by aligned time)."""
    for t in ("collectives", "steps"):
        cur.execute(f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS ts_utc_ns BIGINT")


def _v4_event_bins(cur) -> None:
    """Schema 5: ``event_bins`` (per-lane, per-second counts for wide timeline windows); stores
    analysed before it answer wide windows from the events until analysed again."""
    cur.execute(TABLES["event_bins"].ddl())


def _v5_metric_bins(cur) -> None:
    """Schema 6: ``metric_bins`` (metric series per second for wide timeline windows); stores
    analysed before it draw wide windows from the metrics until analysed again."""
    cur.execute(TABLES["metric_bins"].ddl())


# MIGRATIONS[v] brings a store from schema v to v + 1.
MIGRATIONS: dict[int, Callable[[Any], None]] = {1: _v1_metrics_line, 2: _v2_shares, 3: _v3_kineto_utc,
                                                4: _v4_event_bins, 5: _v5_metric_bins}


class Store:
    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(self.path, read_only=read_only)
        except duckdb.IOException as e:
            msg = str(e)
            if "lock" in msg.lower():
                raise StoreBusy(
                    f"the store {self.path} is in use by another aftertrace process "
                    "(is `aftertrace serve` running? stop it, pass another --db, or upload through the UI)"
                ) from None
            raise StoreError(f"cannot open the store {self.path}: {msg}") from None
        # Rows are never read back in insertion order (every query that needs an order says it), and
        # keeping it makes DuckDB re-assemble inserted row groups at commit: the commit of a 232 MB
        # Kineto trace's rows takes 0.25 s with it, 0.1 s without.
        self._con.execute("SET preserve_insertion_order = false")
        self._local = threading.local()
        self._lock = threading.Lock()
        if not read_only:
            self.migrate()

    # -- connections ------------------------------------------------------------
    def cursor(self):
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._local.cur = self._con.cursor()
        return cur

    def close(self) -> None:
        try:
            self._con.close()
        except Exception:
            pass

    # -- schema ------------------------------------------------------------------
    def schema_version(self) -> int:
        cur = self.cursor()
        rows = cur.execute("SELECT value FROM aftertrace_meta WHERE key = 'schema_version'").fetchall()
        return int(rows[0][0]) if rows else 0

    def migrate(self) -> None:
        cur = self.cursor()
        cur.execute(TABLES["aftertrace_meta"].ddl())
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"the store {self.path} has schema version {version}, newer than this "
                             f"aftertrace ({SCHEMA_VERSION}); upgrade aftertrace")
        if version == 0:
            for t in TABLES.values():
                cur.execute(t.ddl())
            cur.execute("INSERT OR REPLACE INTO aftertrace_meta VALUES ('schema_version', ?)",
                        [str(SCHEMA_VERSION)])
            return
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](cur)
            version += 1
            cur.execute("INSERT OR REPLACE INTO aftertrace_meta VALUES ('schema_version', ?)", [str(version)])

    # -- writes ------------------------------------------------------------------
    def delete_incident_rows(self, incident_id: str) -> None:
        cur = self.cursor()
        for t in INCIDENT_TABLES:
            cur.execute(f"DELETE FROM {t} WHERE incident_id = ?", [incident_id])

    def insert_rows(self, table: str, rows: Iterable[dict]) -> None:
        """Insert a few rows given as dicts (for the small tables: sources, clock_map)."""
        import pyarrow as pa
        rows = list(rows)
        if not rows:
            return
        t = TABLES[table]
        schema = t.arrow_schema(parser_side=False)
        cols = {c.name: [r.get(c.name) for r in rows] for c in t.columns}
        tbl = pa.table({n: pa.array(v, type=schema.field(n).type) for n, v in cols.items()}, schema=schema)
        cur = self.cursor()
        cur.register("_rows", tbl)
        try:
            cur.execute(f"INSERT INTO {table} SELECT * FROM _rows")
        finally:
            cur.unregister("_rows")

    def load_parts(self, table: str, files: list[str], incident_id: str, source_id: int) -> None:
        """Bulk-insert a source's Parquet parts for one table."""
        if files:
            self.load_batch(table, files, [source_id] * len(files), incident_id)

    def load_batch(self, table: str, files: list[str], source_ids: list[int], incident_id: str) -> None:
        """Bulk-insert Parquet parts of many sources (``source_ids[i]`` owns ``files[i]``) in one
        statement: a bundle of hundreds of small files loads in a few inserts, not thousands."""
        if not files:
            return
        t = TABLES[table]
        sel = []
        for c in t.columns:
            if c.name == "incident_id":
                sel.append("$inc AS incident_id")
            elif c.name == "source_id":
                sel.append("CAST(m.sid AS INTEGER) AS source_id" if len(set(source_ids)) > 1 else
                           f"CAST({int(source_ids[0])} AS INTEGER) AS source_id")
            elif c.added_by_loader:
                sel.append(f"CAST(NULL AS {c.type}) AS {c.name}")
            else:
                sel.append(f"p.{c.name}")
        if len(set(source_ids)) > 1:
            src = ("read_parquet($files, filename = true) p JOIN "
                   "(SELECT unnest($files) AS f, unnest($sids) AS sid) m ON p.filename = m.f")
            params = {"inc": incident_id, "files": files, "sids": source_ids}
        else:
            src = "read_parquet($files) p"
            params = {"inc": incident_id, "files": files}
        self.cursor().execute(f"INSERT INTO {table} SELECT {', '.join(sel)} FROM {src}", params)

    # -- reads -------------------------------------------------------------------
    def query(self, sql: str, params: Any = None) -> list[dict]:
        cur = self.cursor()
        res = cur.execute(sql, params or [])
        names = [d[0] for d in res.description]
        return [dict(zip(names, row)) for row in res.fetchall()]

    def query_pl(self, sql: str, params: Any = None):
        import polars as pl
        return pl.from_arrow(self.cursor().sql(sql, params=params or None).to_arrow_table())
