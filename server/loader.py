"""Loading an incident's rows into the store while its files are parsed.

One :class:`IncidentLoad` per analysis. It owns one thread with its own DuckDB cursor
and one transaction: the incident's old rows are deleted first, then every Parquet part
is inserted as soon as a parser announces it (``RowSink(on_part=...)``), and the
``sources`` rows and incident fields are written at the end, before ``COMMIT``. Readers
therefore see the old rows or the new ones, never a mix.

Why a thread: the parse of a large file is bound to one core by the GIL, while DuckDB's
insert runs in native code without it. Loading a 232 MB Kineto trace's parts as they
are written instead of after the parse takes its load (about a third of the time into
the store) off the critical path on a 2-core machine (see ``bench/results/kineto.md``).

Parts are gathered per table and inserted together (one ``read_parquet`` of many files) once
they add up to :data:`BATCH_BYTES` or :data:`BATCH_FILES`, and before a drop or the commit:
a bundle of 800 small Kineto files loads in a few dozen inserts instead of 4,000 (each insert
costs ~3 ms however small). A part of :data:`BIG_PART` bytes or more (a large file's rows, a
DuckDB row group at a time) is inserted at once, with what was gathered before it: gathering
those would hold a 232 MB trace's whole load back until its parse ends (2.9 s instead of 5.1 s
into the store for that file, see ``bench/results/kineto.md``).

The small tables of a file parsed in a worker come with its result as Arrow tables
(``ingest.sink.INLINE_ROWS``): :meth:`IncidentLoad.tables` gathers them like parts, up to
:data:`BATCH_ROWS` rows, and inserts each table's in one statement.

Every call is queued and runs in the order it was made. A failed insert is raised by
:meth:`IncidentLoad.commit`, which then rolls the transaction back; so does
:meth:`IncidentLoad.abort`. A source whose parse failed after some of its parts were
loaded is removed with :meth:`IncidentLoad.drop_source`.

Once inserted, a part is removed (its rows are in the store; the temporary parts are
written uncompressed, see ``ingest/sink.py``), except the ``facts`` and ``parse_issues`` parts,
which the pipeline reads again after the parse; the parts of attached incidents are their storage
and stay.

Attached incidents (``root``: the run folder of the incident's Parquet partitions, see
``server/store.py``): the parts of the heavy tables (``store.ATTACHED_TABLES``) stay where
they are and are not inserted; the small tables are inserted as above. Before ``COMMIT`` the small
files of each partition folder are compacted into one (``Store.compact_partitions``) and the
incident's views are pointed at the run, inside the transaction; after it the previous run's
folder is removed (and after a rollback, the new one). An incident that was attached and is
analysed without a Parquet location gets empty views (native again) the same way.
"""
from __future__ import annotations

import shutil
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from aftertrace.ingest.model import PARSER_TABLES

from .store import ATTACHED_TABLES, Store

BATCH_BYTES = 32 << 20      # Parquet bytes gathered per table before an insert
BATCH_FILES = 400
BATCH_ROWS = 200_000       # inline rows (small tables sent with a parse's result) gathered before an insert
BIG_PART = 1 << 20       # a part this large is inserted at once (a large file's rows load while it is parsed)
KEEP_PARTS = ("facts", "parse_issues")     # read again after the parse (time zone, first bad line)


class IncidentLoad:
    def __init__(self, store: Store, incident_id: str, root: str | Path | None = None):
        self.store = store
        self.incident_id = incident_id
        self.root = str(root) if root is not None else None
        members = store.attached()
        self.old_root = members.get(incident_id, (None,))[0]
        self.member = self.root is not None or incident_id in members
        if self.root is not None:
            store.join(incident_id)     # (its own transaction, before the load's begins)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"load-{incident_id}")
        self._futures: deque[Future] = deque()
        self._failed: BaseException | None = None
        self._open = True
        self._pending: dict[str, list[tuple[str, int]]] = {}   # table -> [(part, source id)], load thread only
        self._pending_bytes = 0
        self._rows: dict[str, list[tuple[object, int]]] = {}   # table -> [(Arrow rows, source id)], load thread only
        self._pending_rows = 0
        self._submit(self._begin)

    # -- what callers queue -----------------------------------------------------
    def part(self, source_id: int, table: str, path: str | Path) -> None:
        """Insert one Parquet part of a source's table (called from any thread)."""
        self._submit(self._gather, table, [str(path)], source_id)

    def parts(self, source_id: int, parts: dict[str, list[str]]) -> None:
        """Insert all the parts a finished parse listed (table order of the model)."""
        for table in PARSER_TABLES:
            files = parts.get(table)
            if files:
                self._submit(self._gather, table, list(files), source_id)

    def tables(self, source_id: int, tables: dict) -> None:
        """Insert the small tables a finished parse sent with its result (Arrow tables, see
        ``ingest.sink.INLINE_ROWS``), gathered with the parts."""
        some = {t: rows for t, rows in tables.items() if rows is not None and rows.num_rows}
        if some:        # (one queued call per source, not one per table: thousands of small files)
            self._submit(self._gather_tables, some, source_id)

    def announcer(self, source_id: int) -> Callable[[str, Path], None]:
        """An ``on_part`` callback for ``parse_file`` that loads into ``source_id``."""
        return lambda table, path: self.part(source_id, table, path)

    def drop_source(self, source_id: int) -> None:
        """Remove the rows loaded so far for a source (its parse failed), and its partitions."""
        self._submit(self._drop, source_id)
        if self.root is not None:
            remove_source_partitions(self.root, source_id)

    def commit(self, finish: Callable[[], None]) -> None:
        """Run ``finish`` (the last inserts) in the load's transaction and commit it; on any
        failure, roll back and raise the first error."""
        self._submit(self._flush)
        self._submit(finish)
        if self.member:
            self._submit(self._attach)
        try:
            self._drain()
            if self._failed is not None:
                raise self._failed
            self._pool.submit(self._exec, "COMMIT").result()
        except BaseException:
            self.abort()
            raise
        finally:
            self._close()
        if self.old_root and self.old_root != self.root:
            shutil.rmtree(self.old_root, ignore_errors=True)

    def abort(self) -> None:
        """Roll back everything loaded (safe to call more than once)."""
        if not self._open:
            return
        try:
            self._drain()
            self._pool.submit(self._exec, "ROLLBACK").result()
        except Exception:
            pass
        finally:
            self._close()
        if self.root is not None and self.root != self.old_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- on the load thread ---------------------------------------------------------
    def _submit(self, fn, *args) -> None:
        if not self._open:
            raise RuntimeError(f"the load of incident {self.incident_id} is closed")
        self._futures.append(self._pool.submit(self._guard, fn, *args))

    def _guard(self, fn, *args) -> None:
        if self._failed is None:           # after a failure nothing more is inserted
            try:
                fn(*args)
            except BaseException as e:
                self._failed = e

    def _begin(self) -> None:
        self._exec("BEGIN TRANSACTION")
        self.store.delete_incident_rows(self.incident_id)

    def _gather(self, table: str, files: list[str], source_id: int) -> None:
        if self.root is not None and table in ATTACHED_TABLES:
            return                   # read in place through the incident's views
        pend = self._pending.setdefault(table, [])
        big = False
        for f in files:
            pend.append((f, source_id))
            try:
                size = Path(f).stat().st_size
            except OSError:
                size = 0       # the insert names it
            self._pending_bytes += size
            big = big or size >= BIG_PART
        if big or self._pending_bytes >= BATCH_BYTES or sum(map(len, self._pending.values())) >= BATCH_FILES:
            self._flush()

    def _gather_tables(self, tables: dict, source_id: int) -> None:
        for table in PARSER_TABLES:
            rows = tables.get(table)
            if rows is None:
                continue
            if self.root is not None and table in ATTACHED_TABLES:
                raise ValueError(f"{table}: an attached incident's rows are Parquet partitions, not inline rows")
            self._rows.setdefault(table, []).append((rows, source_id))
            self._pending_rows += rows.num_rows
        if self._pending_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, {}, 0
        rows, self._rows, self._pending_rows = self._rows, {}, 0
        for table in PARSER_TABLES:
            if rows.get(table):
                self.store.load_tables(table, [t for t, _ in rows[table]], [sid for _, sid in rows[table]],
                                       self.incident_id)
            items = pending.get(table)
            if items:
                self.store.load_batch(table, [f for f, _ in items], [sid for _, sid in items], self.incident_id)
                if self.root is None and table not in KEEP_PARTS:
                    for f, _ in items:      # (in the store now: the part's disk space is given back)
                        Path(f).unlink(missing_ok=True)

    def _drop(self, source_id: int) -> None:
        self._flush()
        cur = self.store.cursor()
        for t in PARSER_TABLES:
            cur.execute(f"DELETE FROM main.{t} WHERE incident_id = ? AND source_id = ?",
                        [self.incident_id, source_id])

    def _attach(self) -> None:
        tables = [t for t in ATTACHED_TABLES
                  if self.root is not None and next(Path(self.root).glob(f"{t}/*/*/*.parquet"), None)]
        for t in tables:      # one file per kind and host instead of one per source (small ones)
            self.store.compact_partitions(self.root, t)
        self.store.attach(self.incident_id, self.root, tables)

    def _exec(self, sql: str) -> None:
        self.store.cursor().execute(sql)

    def _drain(self) -> None:
        while self._futures:
            self._futures.popleft().result()

    def _close(self) -> None:
        self._open = False
        self._pool.shutdown(wait=True)


def remove_source_partitions(root: str | Path, source_id: int) -> None:
    """Delete every partition file of one source under a run folder."""
    for t in PARSER_TABLES:
        for f in Path(root).glob(f"{t}/*/*/{int(source_id)}-*.parquet"):
            f.unlink(missing_ok=True)
