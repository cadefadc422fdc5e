"""Where parsers put their rows: buffered, typed, spilled to Parquet parts.

A parser never talks to DuckDB (it may run in another process). It appends
rows to a :class:`RowSink`; every ``batch_rows`` rows of a table the buffer is
converted to an Arrow batch with the schema from :mod:`ingest.model` and written
to ``<out_dir>/<table>.<n>.parquet``. The pipeline bulk-loads those parts into the
store afterwards. Memory is therefore bounded by one batch per table, not by
the size of the input file.

Bulk producers (vectorised parsers) hand whole frames to :meth:`RowSink.add_frame`. Frames
are gathered into parts of whole DuckDB row groups (:data:`ROW_GROUP` rows): the store
inserts such parts in parallel and without re-slicing them, which makes a load of many
small frames about 1.5x faster. Rows keep the order in which they were added.

Streaming: with ``on_part``, every part is announced (``on_part(table, path)``) as soon as
it is written, so the pipeline can load it into the store while the parse goes on. A
parser that may still rewrite its parts (Kineto's time base after the event array) calls
:meth:`RowSink.hold` first; held parts are announced by :meth:`RowSink.close`.

Inline tables: with ``inline_rows`` (a file parsed in a worker process), a table that has no
part written and at most that many rows at :meth:`RowSink.close` is kept in ``inline`` as one
Arrow table instead, and travels to the loader with the parse's result (:data:`INLINE_ROWS`).

Partitions: with a shared Parquet location a finished source's parts are moved to
:func:`partition_path` (``<run>/<table>/kind=<kind>/host=<host>/<source id>-<n>.parquet``,
hive style; the values escaped by :func:`partition_value`).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from .issues import issue_kind
from .model import PARSER_TABLES, TABLES

COMPRESSION = "lz4"       # codec of parts that are kept (a shared Parquet location)
# Parts that only carry rows to the store are written uncompressed: compressing a kernel log's
# text (LZ4) was about a fifth of its parse, and the loader removes each part once it is inserted
# (server/loader.py), so the larger files (~1.5x the log) are on disk only for a moment.
TEMP_COMPRESSION = "none"
NO_DICTIONARY = {"text", "attrs", "ts_raw_ns", "ts_utc_ns", "dur_ns", "line", "value", "local_ns", "wall_ns",
                 "byte_offset", "stack_id", "parent_id"}
ROW_GROUP = 122_880    # DuckDB's row group size: frames are written in parts of whole row groups
SMALL_PART = 1024      # parts of fewer rows are written without dictionary encoding
_DICT_STRING = pa.dictionary(pa.int32(), pa.string())
MAX_TEXT = 4000        # longest evidence text kept per row (chars)
# A table of at most this many rows, of a file parsed in a worker process, travels to the loader
# with the parse's result instead of as a Parquet part: for the few dozen rows most tables of a
# small file hold, writing a part, reading it back and removing it costs more than the rows.
INLINE_ROWS = 4096
_NEVER_INLINE = ("parse_issues",)      # (read back from its part for the source's status line)
MAX_ISSUE_TEXT = 200   # longest excerpt kept per parse issue


def _clip(s: str | None, n: int) -> str | None:
    if s is None or len(s) <= n:
        return s
    return s[: n - 1] + "…"


def attrs_json(attrs: Any) -> str:
    """An ``attrs`` object as the tables keep it: compact JSON text (what JSON cannot hold as its
    own type, as its ``str``). orjson writes it several times faster than the standard library
    (a crash-dense kernel log's typed events carry ~11 MB of it per 200 MB); what orjson refuses
    (an integer beyond 64 bits, a lone surrogate) takes the standard library, in the same shape."""
    try:
        return orjson.dumps(attrs, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(attrs, default=str, ensure_ascii=False, separators=(",", ":"))


def attrs_of(text: str | None) -> dict:
    """An ``attrs`` object from the text the tables keep (None: no attrs, an empty object). orjson
    reads it several times faster than the standard library; what orjson refuses (an integer beyond
    64 bits, NaN) the standard library reads, to the same values."""
    if not text:
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _stored(name: str, v: Any) -> Any:
    """A row value as the table keeps it: attrs as JSON text, evidence text clipped."""
    if v is None:
        return None
    if name == "attrs":
        return v if isinstance(v, str) else attrs_json(v)
    if name == "text":
        return _clip(v, MAX_TEXT)
    return v


_SHAPED = ("attrs", "text")     # the columns whose values _stored changes


class RowSink:
    def __init__(self, out_dir: str | os.PathLike, batch_rows: int = 65536,
                 max_issues: int = 10000, on_part: Callable[[str, Path], None] | None = None,
                 compression: str = COMPRESSION, inline_rows: int = 0):
        self.out_dir = Path(out_dir)
        self.inline_rows = inline_rows
        self.inline: dict[str, pa.Table] = {}     # tables kept in memory at close (see INLINE_ROWS)
        self.compression = compression
        self._dir_made = False         # (made by the first write: a file whose rows all travel inline writes none)
        self.batch_rows = batch_rows
        self.max_issues = max_issues
        self._buf: dict[str, dict[str, list]] = {}
        self._frames: dict[str, list[pa.Table]] = {}     # add_frame tables not yet written
        self._frame_rows: dict[str, int] = {}
        self._parts: dict[str, int] = {t: 0 for t in PARSER_TABLES}
        self.counts: dict[str, int] = {t: 0 for t in PARSER_TABLES}
        self.issues_total = 0          # issues seen, including ones beyond max_issues
        self.files: list[Path] = []
        self.on_part = on_part
        self.published = 0             # parts announced through on_part
        self._held: list[tuple[str, Path]] | None = None

    # -- row appends -----------------------------------------------------------
    def add(self, table: str, **row: Any) -> None:
        buf = self._buf.get(table)
        if buf is None:
            cols = TABLES[table].parser_columns
            buf = self._buf[table] = {c.name: [] for c in cols}
        n = len(next(iter(buf.values())))
        for name, values in buf.items():
            v = row.pop(name, None)
            values.append(_stored(name, v) if name in _SHAPED else v)
        if row:
            raise KeyError(f"{table} has no column(s) {sorted(row)}")
        self.counts[table] += 1
        if n + 1 >= self.batch_rows:
            self._flush_rows(table)

    def add_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """:meth:`add` of each row, in order, column by column (one pass per column, not one
        call per row: for the thousands of rows a parser may hold back to the end)."""
        names = [c.name for c in TABLES[table].parser_columns]
        extra = {k for r in rows for k in r}.difference(names)
        if extra:
            raise KeyError(f"{table} has no column(s) {sorted(extra)}")
        buf = self._buf.get(table)
        if buf is None:
            buf = self._buf[table] = {name: [] for name in names}
        at = 0
        while at < len(rows):
            part = rows[at:at + self.batch_rows - len(next(iter(buf.values())))]
            for name, values in buf.items():
                if name in _SHAPED:
                    values.extend(_stored(name, r.get(name)) for r in part)
                else:
                    values.extend(r.get(name) for r in part)
            self.counts[table] += len(part)
            at += len(part)
            if len(next(iter(buf.values()))) >= self.batch_rows:
                self._flush_rows(table)

    def event(self, **row: Any) -> None:
        self.add("events", **row)

    def more_issues(self, n: int) -> None:
        """Issues counted but not stored one by one (beyond a parser's own budget)."""
        self.issues_total += max(0, int(n))

    def issue(self, kind: str, message: str, line: int | None = None,
              text: str | None = None, byte_offset: int | None = None) -> None:
        """Record a line or region that could not be used (``kind``: one of :mod:`ingest.issues`).
        Parsing goes on."""
        issue_kind(kind)
        self.issues_total += 1
        if self.counts["parse_issues"] >= self.max_issues:
            return  # counted, but not stored one by one
        self.add("parse_issues", kind=kind, message=message, line=line,
                 text=_clip(text, MAX_ISSUE_TEXT), byte_offset=byte_offset)

    def issue_room(self) -> int:
        """How many more issues this source stores one by one (its budget: ``max_issues``)."""
        return max(0, self.max_issues - self.counts["parse_issues"])

    def issues(self, kind: str, message: str, count: int, first: Iterable[tuple[int, str]]) -> None:
        """``count`` lines of one ``kind`` at once: of ``first`` ((line, text) of the first ones), as
        many as the source's budget has room for are stored, and all ``count`` are counted."""
        room = self.issue_room()
        stored = 0
        for line, text in first:
            if stored >= room:
                break
            self.issue(kind, message, int(line), text)
            stored += 1
        self.more_issues(count - stored)

    def fact(self, key: str, value: Any, line: int | None = None, host: str | None = None) -> None:
        self.add("facts", key=key, value=None if value is None else str(value), line=line, host=host)

    # -- bulk -------------------------------------------------------------------
    def add_frame(self, table: str, frame) -> None:
        """Append a Polars DataFrame or Arrow table whose columns are a subset of the table's."""
        if hasattr(frame, "to_arrow"):
            frame = frame.to_arrow()
        if frame.num_rows == 0:
            return
        schema = TABLES[table].arrow_schema()
        cols, fields = [], []
        for f in schema:
            if f.name in frame.column_names:
                c = frame.column(f.name)
                if pa.types.is_dictionary(c.type) and pa.types.is_string(f.type):
                    # a text column that comes dictionary-encoded (a Polars Categorical: a few
                    # distinct names on millions of rows) is written as it is (see _write)
                    c = c.cast(_DICT_STRING)
                    f = pa.field(f.name, _DICT_STRING, f.nullable)
                elif c.type != f.type:
                    c = c.cast(f.type)
                cols.append(c)
            else:
                cols.append(pa.nulls(frame.num_rows, f.type))
            fields.append(f)
        extra = set(frame.column_names) - set(schema.names)
        if extra:
            raise KeyError(f"{table} has no column(s) {sorted(extra)}")
        buf = self._buf.get(table)
        if buf and next(iter(buf.values())):
            self._flush_rows(table)       # rows added before this frame are written before it
        self._frames.setdefault(table, []).append(pa.table(cols, schema=pa.schema(fields)))
        self._frame_rows[table] = self._frame_rows.get(table, 0) + frame.num_rows
        self.counts[table] += frame.num_rows
        if self._frame_rows[table] >= ROW_GROUP:
            self._flush_frames(table, whole_groups=True)

    # -- output -----------------------------------------------------------------
    def _flush_frames(self, table: str, whole_groups: bool = False) -> None:
        """Write the gathered frames of a table; with ``whole_groups`` only whole row groups
        (the rest waits for the next frames)."""
        frames = self._frames.pop(table, None)
        if not frames:
            return
        if any(f.schema != frames[0].schema for f in frames[1:]):
            # (some frames carry dictionary-encoded text, some plain text: all plain)
            schema = TABLES[table].arrow_schema()
            frames = [f.cast(schema) if f.schema != schema else f for f in frames]
        tbl = pa.concat_tables(frames)
        n = tbl.num_rows // ROW_GROUP * ROW_GROUP if whole_groups else tbl.num_rows
        if n < tbl.num_rows:
            self._frames[table] = [tbl.slice(n)]
        self._frame_rows[table] = tbl.num_rows - n
        if n:
            self._write(table, tbl.slice(0, n))

    def _flush_rows(self, table: str) -> None:
        buf = self._buf.get(table)
        if not buf or not next(iter(buf.values())):
            return
        self._flush_frames(table)         # frames added before these rows are written before them
        schema = TABLES[table].arrow_schema()
        arrays = [self._array(table, buf, f) for f in schema]
        self._write(table, pa.table(arrays, schema=schema))
        for v in buf.values():
            v.clear()

    def _array(self, table: str, buf: dict[str, list], f: pa.Field) -> pa.Array:
        """The column's values as Arrow; a number that does not fit the column's type (a
        corrupted line with a 30-digit pid) is dropped from its row and counted as an issue."""
        values = buf[f.name]
        if values[0] is None and values.count(None) == len(values):   # (a column no row set)
            return pa.nulls(len(values), f.type)
        try:
            return pa.array(values, type=f.type)
        except (OverflowError, pa.ArrowInvalid):
            if not (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
                raise
        hi = (1 << (f.type.bit_width - 1)) if pa.types.is_integer(f.type) else None
        lines = buf.get("line")
        fixed = []
        for i, v in enumerate(values):
            if isinstance(v, int) and not isinstance(v, bool):
                if hi is None:
                    try:
                        v = float(v)
                    except OverflowError:
                        v = None
                elif not -hi <= v < hi:
                    v = None
                if v is None and table != "parse_issues":
                    self.issue("out_of_range", f"{f.name}: number too large for a {f.type} column; left out",
                               line=lines[i] if lines else None, text=str(values[i])[:60])
            fixed.append(v)
        return pa.array(fixed, type=f.type)

    def flush(self, table: str | None = None) -> None:
        """Write everything buffered (of one table, or of all)."""
        # (parse_issues last: writing the other tables may add issues, see _array)
        tables = [table] if table else [t for t in {**self._frames, **self._buf} if t != "parse_issues"] + \
            ["parse_issues"]
        for t in tables:
            self._flush_frames(t)
            self._flush_rows(t)

    def _write(self, table: str, tbl: pa.Table) -> None:
        n = self._parts[table]
        self._parts[table] = n + 1
        if not self._dir_made:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._dir_made = True
        path = self.out_dir / f"{table}.{n:05d}.parquet"
        # dictionary-encode only the columns that repeat (names, kinds); text and JSON do not. A small
        # part is written plain: setting up the dictionaries costs more than it saves there.
        dict_cols = [n for n in tbl.column_names if n not in NO_DICTIONARY] if tbl.num_rows >= SMALL_PART else False
        # A part with dictionary-encoded text columns is written without the Arrow schema, so that
        # every reader (DuckDB, pyarrow, Polars) reads those columns as the plain text of the
        # table's schema (its Parquet types are the same either way).
        plain = not any(pa.types.is_dictionary(t) for t in tbl.schema.types)
        pq.write_table(tbl, path, compression=self.compression, use_dictionary=dict_cols, write_statistics=False,
                       row_group_size=ROW_GROUP, store_schema=plain)
        self.files.append(path)
        self._announce(table, path)

    def _announce(self, table: str, path: Path) -> None:
        if self.on_part is None:
            return
        if self._held is not None:
            self._held.append((table, path))
        else:
            self.published += 1
            self.on_part(table, path)

    def hold(self) -> None:
        """Announce no part until :meth:`close`: the parser may still rewrite them."""
        if self._held is None:
            self._held = []

    def close(self, announce: bool = True) -> dict[str, int]:
        """Write what is buffered and announce held parts (not when ``announce`` is false:
        the parse failed and its rows are dropped)."""
        if self.inline_rows and announce:
            self._keep_inline()
        self.flush()
        held, self._held = self._held or [], None
        for table, path in held if announce else ():
            self._announce(table, path)
        return dict(self.counts)

    def _buffered_rows(self, table: str) -> int:
        buf = self._buf.get(table)
        return len(next(iter(buf.values()))) if buf else 0

    def may_inline(self, table: str) -> bool:
        """Whether ``table`` would travel inline if the sink were closed now (see
        :meth:`_keep_inline`): writing it as a part first would be wasted."""
        return (bool(self.inline_rows) and table not in _NEVER_INLINE and not self._parts[table]
                and self._frame_rows.get(table, 0) + self._buffered_rows(table) <= self.inline_rows)

    def _keep_inline(self) -> None:
        """Move the tables with no part written and at most ``inline_rows`` rows to ``inline``
        (their frames, then their rows: the order a flush writes them in)."""
        for table in list({**self._frames, **self._buf}):
            n_rows = self._buffered_rows(table)
            if not self.may_inline(table) or not self._frame_rows.get(table, 0) + n_rows:
                continue
            buf = self._buf.get(table)
            schema = TABLES[table].arrow_schema()
            pieces = self._frames.pop(table, [])
            self._frame_rows[table] = 0
            if n_rows:
                pieces.append(pa.table([self._array(table, buf, f) for f in schema], schema=schema))
                for v in buf.values():
                    v.clear()
            pieces = [x.cast(schema) if x.schema != schema else x for x in pieces]
            self.inline[table] = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    @property
    def records(self) -> int:
        return sum(v for k, v in self.counts.items() if k not in ("parse_issues", "facts"))


class SinkThread:
    """A parser's sink calls, run in order on one worker thread.

    Writing a Parquet part (encoding, compression: about a fifth of a parse) releases the
    GIL, so it overlaps the parser's work on the next chunk. Every call goes through the one
    thread in the order it was made, so the sink is never used by two threads at once and
    gets the same calls as before; at most two event frames wait, so memory stays bounded
    by a few chunks. A failed call is raised in the parser's thread.

    The thread is started by the frame with which the frames reach a row group (the sink
    writes a part then); until then the calls are made directly. A file of fewer events has
    nothing to overlap (its parts are all written when it is closed), and handing its calls
    to a thread would cost more than they do."""

    def __init__(self, sink: RowSink):
        self.sink = sink
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque = deque()
        self._rows = 0

    def _call(self, frame: bool, fn, *args, **kw) -> None:
        if self._pool is None:
            fn(*args, **kw)
            return
        self._pending.append((self._pool.submit(fn, *args, **kw), frame))
        while self._pending and (self._pending[0][0].done() or sum(f for _, f in self._pending) > 2):
            self._pending.popleft()[0].result()

    def add_frame(self, table: str, frame) -> None:
        self._rows += len(frame)
        if self._pool is None and self._rows >= ROW_GROUP:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sink")
        self._call(True, self.sink.add_frame, table, frame)

    def add(self, table: str, **row) -> None:
        self._call(False, self.sink.add, table, **row)

    def issue(self, *args, **kw) -> None:
        self._call(False, self.sink.issue, *args, **kw)

    def issues(self, kind: str, message: str, count: int, first: Iterable[tuple[int, str]]) -> None:
        self._call(False, self.sink.issues, kind, message, count, list(first))

    def issue_room(self) -> int:
        """The sink's room so far (the calls still waiting not yet in it)."""
        return self.sink.issue_room()

    def fact(self, *args, **kw) -> None:
        self._call(False, self.sink.fact, *args, **kw)

    @property
    def max_issues(self) -> int:
        return self.sink.max_issues

    @property
    def counts(self) -> dict[str, int]:
        """The sink's counts so far (the calls still waiting not yet in them)."""
        return self.sink.counts

    def hold(self) -> None:
        """Announce no part until the end (see ``RowSink.hold``), in order with the other calls."""
        self._call(False, self.sink.hold)

    def more_issues(self, n: int) -> None:
        """Issues counted but not stored one by one."""
        self._call(False, self.sink.more_issues, n)

    def close(self, check: bool = True) -> None:
        """Wait for every call (re-raising a failure when ``check``); the thread ends."""
        if self._pool is None:
            return
        try:
            while check and self._pending:
                self._pending.popleft()[0].result()
        finally:
            self._pool.shutdown(wait=True)


NO_VALUE = "__HIVE_DEFAULT_PARTITION__"     # a partition key without a value (hive's name for it)


def partition_value(v: str | None) -> str:
    """A partition value as one safe folder-name component: percent-encoded except letters,
    digits and ``._-~`` (``/`` becomes ``%2F``, so ``../x`` stays inside its ``host=`` folder),
    long values cut with a hash of the whole."""
    if v is None or v == "":
        return NO_VALUE
    s = quote(str(v), safe="")
    if len(s) > 120:
        s = s[:100] + "~" + hashlib.sha256(str(v).encode()).hexdigest()[:16]
    return s


def partition_path(root: str | os.PathLike, table: str, kind: str | None, host: str | None,
                   source_id: int, n: int) -> Path:
    """Where part ``n`` of a source's table goes under a run folder."""
    if table not in TABLES:
        raise KeyError(f"no table {table!r}")
    return (Path(root) / table / f"kind={partition_value(kind)}" / f"host={partition_value(host)}"
            / f"{int(source_id)}-{int(n):05d}.parquet")
