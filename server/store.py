"""The DuckDB store: one database file, schema from ``ingest.model``, a cursor per thread.

* ``Store(path)`` opens (or creates) the database, creates the tables and runs
  the migrations up to ``ingest.model.SCHEMA_VERSION``.
* ``store.cursor()`` returns this thread's own cursor (DuckDB connections are
  not shared between threads; cursors of one database are).
* Rows arrive in bulk: :meth:`Store.load_parts` inserts a source's Parquet parts
  with one ``INSERT ... SELECT FROM read_parquet`` per table.

Attached incidents (``--parts-dir``). An incident analysed with a shared Parquet
location keeps its heavy tables (:data:`ATTACHED_TABLES`) as the Parquet partitions its parse
tasks wrote, under one run folder ``<parts dir>/<incident>/<run>/<table>/kind=../host=../``; they
are not copied into the database. Each attached incident has one view per heavy table in the
schema ``aftertrace_parts`` (``events_<incident>``: ``read_parquet`` of the run's files, with
``incident_id`` a constant, ``source_id`` from the file name, or the column of a compacted file,
and ``ts_utc_ns`` computed from the per-source offsets in ``source_offsets`` that the clock
alignment writes). At the load's commit the small files of each partition folder are compacted
into one (:meth:`Store.compact_partitions`): queries open one file per kind and host, not one per
source. The schema
``aftertrace_attached`` holds, per heavy table, the view ``main.<table> UNION ALL`` those
per-incident views; once a store has an attached incident every cursor gets
``search_path = aftertrace_attached, main``, so the analysis and the UI read ``events`` and get
both kinds. A query that names one incident (``WHERE incident_id = ?``) keeps only its own branch
(the other branches' constant ``incident_id`` folds to false when the query is planned).

Writes to the heavy tables name ``main.<table>`` (a view cannot be written). A store with no
attached incident sets no search path: its tables are exactly as before.

The per-incident views are replaced inside the incident's load transaction (readers see the old
run or the new one); the union views only change when an incident joins (:meth:`Store.join`, a
short transaction of its own before the load begins), so two loads never write the same
catalog entry.
"""
from __future__ import annotations

import contextlib
import os
import threading
import weakref
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable, Iterable

import duckdb

from aftertrace.ingest.model import INCIDENT_TABLES, PARSER_TABLES, SCHEMA_VERSION, TABLES

# Parser tables an attached incident reads from its Parquet partitions (the rest, small, are
# inserted as for any incident).
ATTACHED_TABLES = ("events", "samples", "stacks", "metrics", "collectives", "steps", "flows")
ATTACHED_SCHEMA = "aftertrace_attached"    # union views: main.<table> + each incident's view
PARTS_SCHEMA = "aftertrace_parts"          # per-incident views over its run's Parquet files
# Store-side tables of attached incidents (not part of the model: nothing else reads them).
_ATTACHED_DDL = (
    """CREATE TABLE IF NOT EXISTS attached_incidents (
  incident_id VARCHAR NOT NULL PRIMARY KEY,
  root VARCHAR,
  tables VARCHAR
)""",
    # utc_ns = ts_raw_ns + offset_ns (+ drift); boot: events of a boot-clock source whose kernel
    # log has reboots are placed only when attrs.boot is this (the last boot), like the UPDATE
    # of analysis/clocks.py does for native incidents
    """CREATE TABLE IF NOT EXISTS source_offsets (
  incident_id VARCHAR NOT NULL,
  source_id INTEGER NOT NULL,
  offset_ns BIGINT,
  drift_ppm DOUBLE,
  boot INTEGER
)""",
    # a clock that stepped (clock_segments): one row per stretch [from_ns, to_ns) of raw time
    "ALTER TABLE source_offsets ADD COLUMN IF NOT EXISTS from_ns BIGINT",
    "ALTER TABLE source_offsets ADD COLUMN IF NOT EXISTS to_ns BIGINT",
)
_SID = r"CAST(regexp_extract(filename, '(\d+)-\d+\.parquet$', 1) AS INTEGER)"
COMPACTED = "compacted.parquet"   # a partition folder's small files in one (Store.compact_partitions)
COMPACT_MAX_FILE = 8 << 20        # files at least this large stay as they are


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
    """Schema 5: ``event_bins``, per-lane counts per second, which schema 11 replaced by
    ``track_bins``: nothing to create on the way there."""


def _v5_metric_bins(cur) -> None:
    """Schema 6: ``metric_bins`` (metric series per second for wide timeline windows); stores
    analysed before it draw wide windows from the metrics until analysed again."""
    cur.execute(TABLES["metric_bins"].ddl())


def _v6_members(cur) -> None:
    """Schema 7: ``members`` (which pids/tids were in which cgroup when); incidents analysed before it
    have no rows until analysed again."""
    cur.execute(TABLES["members"].ddl())


def _v7_clock_segments(cur) -> None:
    """Schema 8: ``clock_segments`` (a clock that stepped maps piecewise); incidents analysed before
    it map every clock with one offset until analysed again."""
    cur.execute(TABLES["clock_segments"].ddl())


def _v8_members_reads(cur) -> None:
    """Schema 9: ``members.prev_read_ns`` / ``next_read_ns`` (the reads around a change, which bound
    when it happened); incidents analysed before it have nulls there until ingested again."""
    for c in ("prev_read_ns", "next_read_ns"):
        cur.execute(f"ALTER TABLE members ADD COLUMN IF NOT EXISTS {c} BIGINT")


def _v9_row_times(cur) -> None:
    """Schema 10: ``row_times`` (kernel records placed by their raw copy or a cgroup counter);
    incidents analysed before it place them by their own clock until analysed again."""
    cur.execute(TABLES["row_times"].ddl())


def _v10_tracks(cur) -> None:
    """Schema 11: the timeline's ``tracks``, ``track_spans`` and ``track_bins`` (in place of per-lane ``event_bins``)
    and ``shares.view``; incidents analysed before it draw no tracks until analysed again."""
    cur.execute("DROP TABLE IF EXISTS event_bins")
    cur.execute(TABLES["tracks"].ddl())
    cur.execute(TABLES["track_bins"].ddl())
    cur.execute(TABLES["track_spans"].ddl())
    cur.execute("ALTER TABLE shares ADD COLUMN IF NOT EXISTS view VARCHAR")


def _v11_interrupted(cur) -> None:
    """Schema 12: ``incidents.interrupted`` (an analysis its process's death cut short is queued
    again once)."""
    cur.execute("ALTER TABLE incidents ADD COLUMN IF NOT EXISTS interrupted INTEGER")


# MIGRATIONS[v] brings a store from schema v to v + 1.
MIGRATIONS: dict[int, Callable[[Any], None]] = {1: _v1_metrics_line, 2: _v2_shares, 3: _v3_kineto_utc,
                                                4: _v4_event_bins, 5: _v5_metric_bins, 6: _v6_members,
                                                7: _v7_clock_segments, 8: _v8_members_reads,
                                                9: _v9_row_times, 10: _v10_tracks,
                                                11: _v11_interrupted}


def _close_quietly(con) -> None:
    try:
        con.close()
    except Exception:
        pass


def _loaded_columns(t, source_id: str) -> str:
    """The SELECT list that loads parser rows (aliased ``p``) into table ``t``: the incident
    (``$inc``), the source id (the SQL ``source_id``), the columns the loader adds as nulls, and
    ``ts_utc_ns`` as the raw time (:func:`analysis.clocks.align` then places every row or nulls it)."""
    sel = []
    names = {c.name for c in t.columns}
    for c in t.columns:
        if c.name == "incident_id":
            sel.append("$inc AS incident_id")
        elif c.name == "source_id":
            sel.append(f"{source_id} AS source_id")
        elif c.name == "ts_utc_ns" and "ts_raw_ns" in names:
            # (the raw time until the clock alignment places the row, or leaves it unplaced: most
            # rows are on a clock placed at offset 0, and an update that keeps a value costs a
            # fraction of one that writes it)
            sel.append(f"p.ts_raw_ns AS {c.name}")
        elif c.added_by_loader:
            sel.append(f"CAST(NULL AS {c.type}) AS {c.name}")
        else:
            sel.append(f"p.{c.name}")
    return ", ".join(sel)


# the stores of this process that are open (the CLI closes them before it ends its process)
_OPEN: "weakref.WeakSet[Store]" = weakref.WeakSet()


def close_open_stores() -> None:
    """Close every store this process still has open (DuckDB writes its checkpoint)."""
    for store in list(_OPEN):
        store.close()


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
        _OPEN.add(self)
        # Rows are never read back in insertion order (every query that needs an order says it), and
        # keeping it makes DuckDB re-assemble inserted row groups at commit: the commit of a 232 MB
        # Kineto trace's rows takes 0.25 s with it, 0.1 s without.
        self._con.execute("SET preserve_insertion_order = false")
        # A load's inserts are compressed and written to the file as each row group fills (DuckDB's
        # optimistic write), while the parse goes on; with DuckDB's default a transaction gathers five
        # row groups before it writes, so a load of fewer rows (a 232 MB Kineto trace: 546 k events)
        # was all compressed by its COMMIT, after the parse, where nothing runs beside it.
        try:
            self._con.execute("SET write_buffer_row_group_count = 1")
        except duckdb.Error:       # (a DuckDB without the setting: its own way of writing)
            pass
        # thread ident -> [thread, cursor, search-path generation]. Owned by the store, not by a
        # threading.local: a cursor freed by its thread's exit is freed inside PyThreadState_Clear,
        # and when that thread is a daemon ending while the interpreter finalizes, DuckDB's
        # destructor (which releases and retakes the GIL) aborts the whole process.
        self._cursors: dict[int, list] = {}
        self._lock = threading.Lock()
        self._search_path: str | None = None   # set once the store has an attached incident
        self._path_gen = 0                       # bumped when it changes (cursors follow)
        self._cols: dict[str, list[tuple[str, str]]] = {}
        self._yielding = 0                       # open yield_cores() blocks
        self._threads_before: str | None = None  # the threads setting they lowered
        if not read_only:
            self.migrate()
        self._refresh_attached(rebuild=not read_only)

    # -- connections ------------------------------------------------------------
    def cursor(self):
        me = threading.current_thread()
        ent = self._cursors.get(me.ident)
        if ent is None or ent[0] is not me:
            ent = self._new_cursor(me)
        if ent[2] != self._path_gen:
            gen, path, cur = self._path_gen, self._search_path, ent[1]
            cur.execute(f"SET search_path = '{path}'" if path else "RESET search_path")
            # attached incidents: their files' Parquet footers are kept between queries (a timeline
            # of a 64-rank incident, ~1,000 event files: 2.7 -> 1.8 s)
            cur.execute(f"SET parquet_metadata_cache = {'true' if path else 'false'}")
            ent[2] = gen
        return ent[1]

    def _new_cursor(self, me: threading.Thread) -> list:
        """A cursor for ``me``; the cursors of threads that have ended are closed here, on a live
        thread, so there is at most one per live thread."""
        with self._lock:
            dead = [k for k, (t, _, _) in self._cursors.items() if k == me.ident or not t.is_alive()]
            for k in dead:
                _close_quietly(self._cursors.pop(k)[1])
            ent = self._cursors[me.ident] = [me, self._con.cursor(), 0]
            return ent

    @contextlib.contextmanager
    def yield_cores(self, busy: int):
        """DuckDB's threads lowered to the cores that ``busy`` other processes leave (at least one)
        for the block. While parse workers hold every core, more DuckDB threads for the inserts only
        contend with them (the work is the same, handed between threads that wait for a core; see
        ``bench/RESULTS.md``). The setting is the database's, so blocks may nest or overlap (two
        analyses): the first one lowers it and the last one to end puts the setting back."""
        spare = max(1, (os.cpu_count() or 1) - max(0, busy))
        with self._lock:
            if self._yielding == 0:
                self._threads_before = self._con.execute("SELECT current_setting('threads')").fetchone()[0]
                if spare < int(self._threads_before):
                    self._con.execute(f"SET threads = {spare}")
            self._yielding += 1
        try:
            yield
        finally:
            with self._lock:
                self._yielding -= 1
                if self._yielding == 0 and self._threads_before is not None:
                    self._con.execute(f"SET threads = {int(self._threads_before)}")
                    self._threads_before = None

    def close(self) -> None:
        with self._lock:
            for _, cur, _ in self._cursors.values():
                _close_quietly(cur)
            self._cursors.clear()
        _close_quietly(self._con)
        _OPEN.discard(self)

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
        while version and version < SCHEMA_VERSION:
            MIGRATIONS[version](cur)
            version += 1
            cur.execute("INSERT OR REPLACE INTO aftertrace_meta VALUES ('schema_version', ?)", [str(version)])
        # attached incidents (any schema version: these tables are the store's own)
        for ddl in _ATTACHED_DDL:
            cur.execute(ddl)
        for schema in (ATTACHED_SCHEMA, PARTS_SCHEMA):
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")

    # -- writes ------------------------------------------------------------------
    def delete_incident_rows(self, incident_id: str) -> None:
        cur = self.cursor()
        for t in INCIDENT_TABLES:
            cur.execute(f"DELETE FROM main.{t} WHERE incident_id = ?", [incident_id])
        cur.execute("DELETE FROM main.source_offsets WHERE incident_id = ?", [incident_id])

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
            cur.execute(f"INSERT INTO main.{table} SELECT * FROM _rows")
        finally:
            cur.unregister("_rows")

    def load_parts(self, table: str, files: list[str], incident_id: str, source_id: int) -> None:
        """Bulk-insert a source's Parquet parts for one table."""
        if files:
            self.load_batch(table, files, [source_id] * len(files), incident_id)

    def load_tables(self, table: str, tables: list, source_ids: list[int], incident_id: str) -> None:
        """Bulk-insert Arrow tables of a table's parser columns (``source_ids[i]`` owns
        ``tables[i]``) in one statement."""
        import pyarrow as pa
        import pyarrow.compute as pc
        t = TABLES[table]
        schema = t.arrow_schema()
        some = [(x if x.schema == schema else x.cast(schema), int(sid)) for x, sid in zip(tables, source_ids)
                if x.num_rows]
        if not some:
            return
        # (one chunk: DuckDB stores a chunk of a few hundred rows in its own vectors)
        rows = pa.concat_tables([x for x, _ in some]).combine_chunks()
        # each table's source id over its rows: one run per table, decoded in one call
        ends = pa.array(list(accumulate(x.num_rows for x, _ in some)), pa.int32())
        sid = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, pa.array([s for _, s in some], pa.int32())))
        rows = rows.append_column("_sid", sid)
        cur = self.cursor()
        cur.register("_inline_rows", rows)
        try:
            cur.execute(f"INSERT INTO main.{table} SELECT {_loaded_columns(t, 'p._sid')} FROM _inline_rows p",
                        {"inc": incident_id})
        finally:
            cur.unregister("_inline_rows")

    def load_batch(self, table: str, files: list[str], source_ids: list[int], incident_id: str) -> None:
        """Bulk-insert Parquet parts of many sources (``source_ids[i]`` owns ``files[i]``) in one
        statement: a bundle of hundreds of small files loads in a few inserts, not thousands."""
        if not files:
            return
        sid = "m.sid" if len(set(source_ids)) > 1 else str(int(source_ids[0]))
        sel = _loaded_columns(TABLES[table], f"CAST({sid} AS INTEGER)")
        if len(set(source_ids)) > 1:
            src = ("read_parquet($files, filename = true, hive_partitioning = false) p JOIN "
                   "(SELECT unnest($files) AS f, unnest($sids) AS sid) m ON p.filename = m.f")
            params = {"inc": incident_id, "files": files, "sids": source_ids}
        else:
            src = "read_parquet($files, hive_partitioning = false) p"   # (partitions: kind=/host= are no columns)
            params = {"inc": incident_id, "files": files}
        self.cursor().execute(f"INSERT INTO main.{table} SELECT {sel} FROM {src}", params)

    # -- attached incidents (Parquet partitions read in place) ---------------------------------
    def attached(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """incident -> (run folder or None when it is native now, heavy tables with files)."""
        try:
            rows = self.cursor().execute(
                "SELECT incident_id, root, tables FROM main.attached_incidents ORDER BY incident_id").fetchall()
        except duckdb.CatalogException:     # (a read-only store made before attached incidents)
            return {}
        return {i: (r, tuple(t.split(",")) if t else ()) for i, r, t in rows}

    def tables_with_rows(self, incident_id: str) -> frozenset[str]:
        """The parser tables (``PARSER_TABLES``) that hold rows of the incident: its native rows
        looked at, and for an attached incident every table it keeps as partitions (taken to
        hold some: its files are not opened)."""
        # (EXISTS on main's own tables: over the attached union views DuckDB answered EXISTS and
        # LIMIT 1 wrongly, no rows or every row, while a count was right)
        # (one EXISTS per row of a union: as the columns of one row, DuckDB took ten times longer)
        sql = " UNION ALL ".join(f"SELECT '{t}' WHERE EXISTS (SELECT 1 FROM main.{t} WHERE incident_id = ?)"
                                 for t in PARSER_TABLES)
        got = {r[0] for r in self.cursor().execute(sql, [incident_id] * len(PARSER_TABLES)).fetchall()}
        root, tables = self.attached().get(incident_id, (None, ())) if self._search_path else (None, ())
        return frozenset(got | set(tables) if root else got)

    def attached_root(self, incident_id: str) -> str | None:
        """The run folder whose Parquet files hold the incident's heavy tables (None: native)."""
        if not self._search_path:
            return None
        rows = self.cursor().execute("SELECT root FROM main.attached_incidents WHERE incident_id = ?",
                                     [incident_id]).fetchall()
        return rows[0][0] if rows else None

    def join(self, incident_id: str) -> None:
        """Make the incident one of the attached ones (empty views for now) in a transaction of
        its own; :meth:`attach` then points its views at a run inside the load's transaction."""
        _check_id(incident_id)
        with self._lock:
            cur = self._con.cursor()
            try:
                if cur.execute("SELECT 1 FROM main.attached_incidents WHERE incident_id = ?",
                               [incident_id]).fetchall():
                    return
                cur.execute("BEGIN TRANSACTION")
                cur.execute("INSERT INTO main.attached_incidents VALUES (?, NULL, NULL)", [incident_id])
                for t in ATTACHED_TABLES:
                    cur.execute(self._parts_view(t, incident_id, None, ()))
                members = [r[0] for r in cur.execute(
                    "SELECT incident_id FROM main.attached_incidents ORDER BY incident_id").fetchall()]
                self._union_views(cur, members)
                cur.execute("COMMIT")
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except Exception:
                    pass
                raise
            finally:
                cur.close()
        self._refresh_attached(rebuild=False)

    def attach(self, incident_id: str, root: str | None, tables: Iterable[str] = ()) -> None:
        """Point a member's views at ``root`` (its run folder; None: the incident is native now,
        its views are empty). Runs in the caller's transaction (the load's)."""
        tables = tuple(t for t in ATTACHED_TABLES if t in set(tables))
        cur = self.cursor()
        cur.execute("UPDATE main.attached_incidents SET root = ?, tables = ? WHERE incident_id = ?",
                    [root, ",".join(tables), incident_id])
        for t in ATTACHED_TABLES:
            cur.execute(self._parts_view(t, incident_id, root, tables))

    def _refresh_attached(self, rebuild: bool) -> None:
        members = self.attached()
        if members and rebuild:      # (at open: after a migration the views follow the tables)
            cur = self.cursor()
            for iid, (root, tables) in members.items():
                for t in ATTACHED_TABLES:
                    cur.execute(self._parts_view(t, iid, root, tables))
            self._union_views(cur, list(members))
        path = f"{ATTACHED_SCHEMA},main" if members else None
        if path != self._search_path:
            self._search_path = path
            self._path_gen += 1

    def _columns(self, table: str) -> list[tuple[str, str]]:
        """(name, type) of ``main.<table>`` in the order of the store (migrations append)."""
        if table not in self._cols:
            self._cols[table] = [tuple(r) for r in self.cursor().execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()]
        return self._cols[table]

    def _union_views(self, cur, members: list[str]) -> None:
        for t in ATTACHED_TABLES:
            names = ", ".join(c for c, _ in self._columns(t))
            parts = [f"SELECT {names} FROM main.{t}"]
            parts += [f"SELECT {names} FROM {PARTS_SCHEMA}.{t}_{_check_id(i)}" for i in members]
            cur.execute(f"CREATE OR REPLACE VIEW {ATTACHED_SCHEMA}.{t} AS " + "\nUNION ALL ".join(parts))

    def _parts_view(self, table: str, incident_id: str, root: str | None, tables: tuple[str, ...]) -> str:
        """The DDL of the incident's view of one heavy table."""
        cols = self._columns(table)
        name = f"{PARTS_SCHEMA}.{table}_{_check_id(incident_id)}"
        if root is None or table not in tables:
            sel = ", ".join(f"CAST(NULL AS {typ}) AS {c}" for c, typ in cols)
            return f"CREATE OR REPLACE VIEW {name} AS SELECT {sel} WHERE false"
        utc = "p.ts_raw_ns + o.offset_ns + CAST(COALESCE(o.drift_ppm, 0) * 1e-6 * p.ts_raw_ns AS BIGINT)"
        if table == "events":
            # a record placed by its copy on a better clock (row_times) takes that copy's time
            utc = ("COALESCE(rt.ts_utc_ns, CASE WHEN o.boot IS NOT NULL AND COALESCE(TRY_CAST(json_extract_string("
                   f"p.attrs, '$.boot') AS INTEGER), 0) <> o.boot THEN NULL ELSE {utc} END)")
        sel = []
        for c, typ in cols:
            if c == "incident_id":
                sel.append(f"{_sql_str(incident_id)} AS incident_id")
            elif c == "source_id":
                sel.append("p._sid AS source_id")
            elif c == "ts_utc_ns":
                sel.append(f"CAST({utc} AS {typ}) AS ts_utc_ns")
            else:
                sel.append(f"p.{c}")
        if next(Path(root).glob(f"{table}/*/*/{COMPACTED}"), None) is not None:
            sid = f"COALESCE(source_id, TRY_{_SID})"
            opts = "filename = true, hive_partitioning = false, union_by_name = true"
        else:
            sid, opts = _SID, "filename = true, hive_partitioning = false"
        src = f"(SELECT *, {sid} AS _sid FROM read_parquet({_sql_str(partition_glob(root, table))}, {opts})) p"
        if any(c == "ts_utc_ns" for c, _ in cols):
            src += (f" LEFT JOIN main.source_offsets o ON o.incident_id = {_sql_str(incident_id)} "
                    "AND o.source_id = p._sid AND (o.from_ns IS NULL OR p.ts_raw_ns >= o.from_ns) "
                    "AND (o.to_ns IS NULL OR p.ts_raw_ns < o.to_ns)")
        if table == "events":
            src += (f" LEFT JOIN main.row_times rt ON rt.incident_id = {_sql_str(incident_id)} "
                    "AND rt.source_id = p._sid AND rt.line = p.line")
        return f"CREATE OR REPLACE VIEW {name} AS SELECT {', '.join(sel)} FROM {src}"

    def compact_partitions(self, root: str | Path, table: str) -> int:
        """Rewrite the small files (under :data:`COMPACT_MAX_FILE`) of each partition folder of a
        table as one file, ``compacted.parquet``, that has a ``source_id`` column (the per-source
        files name theirs). A query then opens one file per kind and host instead of one per
        source: the analysis of a 512-rank incident reads ~7,000 files per table without it.
        Returns the number of files replaced."""
        cur = self.cursor()
        n = 0
        for d in sorted({p.parent for p in Path(root).glob(f"{table}/*/*/*.parquet")}):
            small = sorted(f for f in d.glob("*.parquet")
                           if f.name != COMPACTED and f.stat().st_size < COMPACT_MAX_FILE)
            if len(small) < 2:
                continue
            files = "[" + ", ".join(_sql_str(f.as_posix()) for f in small) + "]"
            cur.execute(f"COPY (SELECT * EXCLUDE (filename), {_SID} AS source_id FROM read_parquet({files}, "
                        "filename = true, hive_partitioning = false)) "
                        f"TO {_sql_str((d / COMPACTED).as_posix())} (FORMAT parquet, COMPRESSION zstd)")
            for f in small:
                f.unlink()
            n += len(small)
        return n

    # -- reads -------------------------------------------------------------------
    def query(self, sql: str, params: Any = None) -> list[dict]:
        cur = self.cursor()
        res = cur.execute(sql, params or [])
        names = [d[0] for d in res.description]
        return [dict(zip(names, row)) for row in res.fetchall()]

    def columns(self, sql: str, params: Any = None) -> dict[str, list]:
        """The result as one list per column, in the result's order: for results of many rows,
        several times cheaper than :meth:`query` (no Python object per row). The values are the
        ones ``query`` gives, but for HUGEINT (a ``sum`` of integers), which comes as a Decimal:
        cast it where it is selected."""
        tab = self.cursor().sql(sql, params=params or []).to_arrow_table()
        return {name: col.to_pylist() for name, col in zip(tab.column_names, tab.columns)}


def partition_glob(root: str | Path, table: str) -> str:
    """Every Parquet partition of one table under a run folder (``<table>/kind=*/host=*/*``)."""
    return f"{Path(root).as_posix()}/{table}/*/*/*.parquet"


def _sql_str(v: str) -> str:
    return "'" + str(v).replace("'", "''") + "'"


def _check_id(incident_id: str) -> str:
    """Incident ids name views: only letters, digits and underscores."""
    if not incident_id or not all(c.isascii() and (c.isalnum() or c == "_") for c in incident_id):
        raise StoreError(f"incident id {incident_id!r} cannot name a view")
    return incident_id
