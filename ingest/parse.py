"""Parse one bundle file: detect, run its parser, spill rows, report what happened.

:func:`parse_file` is what the pipeline runs for each file, in a worker process
or in-process. It never raises: every outcome (unrecognized, partial, failed)
is a :class:`SourceResult` with a clear message naming the file (and the line
where it stopped, when known).

With ``job.parts_root`` (a run folder in the shared Parquet location) the parts of a
parse that did not fail are moved, once written, to their partitions
(``ingest.sink.partition_path``); a failed parse leaves none there.

Byte ranges. A parser whose format allows it (``Parser.split_points``: perf script
text, whose records are separated by blank lines) can have one large uncompressed file parsed
as several jobs, each a byte range cut at a record boundary (:func:`split_job`); each range's
lines keep their numbers in the whole file. :func:`merge_ranges` then makes the ranges' results
one source, as the unsplit parse would have (``Parser.merge_ranges`` does the format's part).
"""
from __future__ import annotations

import gzip
import io
import os
import time
import traceback
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .model import STATUS_FAILED, STATUS_PARSED, STATUS_PARTIAL, STATUS_TEXT, STATUS_UNRECOGNIZED, TABLES
from .reader import STREAM_ENDS, DecompressedLimit, _Limited, is_gzip
from .registry import ParseContext, Registry, default_registry
from .sink import COMPRESSION, TEMP_COMPRESSION, RowSink, partition_path


@dataclass
class ParseJob:
    path: str                 # extracted file on disk
    rel: str                  # path inside the bundle
    out_dir: str              # where this source's Parquet parts go
    max_bytes: int | None = None
    time_zone: str | None = None
    parser: str | None = None  # skip detection: use this parser (set after a first detect)
    source_id: int | None = None   # the source's id in the store (names its partitions)
    parts_root: str | None = None  # move the parts to partitions under this run folder
    host: str | None = None        # host of the partitions when known before the parse (path)
    byte_range: tuple[int, int, int] | None = None   # (start, end, number of the first line)
    part_base: int = 0             # added to the part numbers of the partitions (ranges)
    unwrap: tuple[str, ...] = ()   # wrapper layers peeled off every line (ingest.unwrap)
    from_line: int = 0             # where the format's lines begin after a preamble (0: at the top)
    text_reason: str | None = None  # kept as plain text: why no parser claimed it
    inline_rows: int = 0           # tables of at most this many rows come back in the result, not as parts


@dataclass
class SourceResult:
    rel: str
    kind: str = "unrecognized"
    format: str | None = None
    clock_domain: str | None = None
    status: str = STATUS_UNRECOGNIZED
    error: str | None = None
    records: int = 0
    issues: int = 0
    bytes: int = 0
    bytes_read: int = 0
    compressed: bool = False
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    parts: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    parse_s: float = 0.0
    inline: dict[str, Any] = field(default_factory=dict)   # table -> its rows (Arrow) where not a part

    # A result crosses a process boundary (the worker pool, Ray) pickled. Its inline tables go as
    # Arrow IPC byte strings (see _inline_bytes): pickling a table array by array costs several
    # times more on both sides, and the receiving side is the pipeline's busiest process.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.inline:
            state["inline"] = {t: _inline_bytes(t, tab) for t, tab in self.inline.items()}
        return state

    def __setstate__(self, state: dict) -> None:
        inline = state.get("inline")
        if inline:
            state = {**state, "inline": {t: _inline_table(t, b) for t, b in inline.items()}}
        self.__dict__.update(state)


def _inline_bytes(name: str, table) -> bytes | list[bytes]:
    """A table's rows for the trip between processes. A table of its parser schema (what the sink
    keeps inline, see ``RowSink._keep_inline``: no dictionary-encoded columns) goes as the IPC
    messages of its record batches alone, a list: both sides know the schema, and a stream,
    which carries it, costs twice as much to write and to read for the few hundred rows of a
    small file. Any other table as one IPC stream."""
    if table.schema == TABLES[name].arrow_schema():
        return [b.serialize().to_pybytes() for b in table.to_batches()]
    import pyarrow as pa
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema) as w:
        w.write_table(table)
    return out.getvalue().to_pybytes()


def _inline_table(name: str, data: bytes | list[bytes]):
    """What :func:`_inline_bytes` sent, as the table again."""
    import pyarrow as pa
    if isinstance(data, bytes):
        return pa.ipc.open_stream(data).read_all()
    schema = TABLES[name].arrow_schema()
    return pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), schema) for b in data], schema=schema)


def warm_up(_=None) -> None:
    """What a fresh worker process does before its first file: import the parsers."""
    default_registry()


# A file this small is parsed in a batch of such files, one task for the pool: handing a task to
# a worker process and its result back costs ~0.2 ms of the busy analysing process and as much
# of the worker, more than the parse of a small trace or log file itself takes.
BATCH_FILE_BYTES = 1 << 20
BATCH_BYTES = 8 << 20       # a batch's files hold at most this much together,
BATCH_FILES = 16            # and are at most this many (the pool's last tasks stay short)


@dataclass(frozen=True)
class ParseBatch:
    """Small files parsed one after the other as one task (see :func:`batched`)."""
    jobs: tuple[ParseJob, ...]


def parse_task(task: ParseJob | ParseBatch) -> SourceResult | list[SourceResult]:
    """What a pool worker runs for a task of :func:`batched`: the result of a job, the results
    of a batch's jobs in order (``parse_file`` never raises)."""
    if isinstance(task, ParseBatch):
        return [parse_file(j) for j in task.jobs]
    return parse_file(task)


def batched(jobs: list[ParseJob], sizes: dict[str, int]) -> list[ParseJob | ParseBatch]:
    """The pool's tasks for ``jobs`` (sorted largest first; ``sizes``: each job's bytes by its
    ``rel``, a byte range's own): each job a task of its own, except that runs of files of at
    most :data:`BATCH_FILE_BYTES` go as batches of up to :data:`BATCH_FILES` files and
    :data:`BATCH_BYTES` bytes. Byte ranges of one file are never batched."""
    out: list[ParseJob | ParseBatch] = []
    run: list[ParseJob] = []
    run_bytes = 0

    def close() -> None:
        nonlocal run, run_bytes
        if run:
            out.append(run[0] if len(run) == 1 else ParseBatch(tuple(run)))
        run, run_bytes = [], 0

    for job in jobs:
        size = sizes[job.rel] if job.byte_range is None else job.byte_range[1] - job.byte_range[0]
        if job.byte_range is not None or size > BATCH_FILE_BYTES:
            close()
            out.append(job)
            continue
        if len(run) == BATCH_FILES or run_bytes + size > BATCH_BYTES:
            close()
        run.append(job)
        run_bytes += size
    close()
    return out


def detect_files(files: list[tuple[str, str]], registry: Registry | None = None) -> list:
    """The detect stage for a batch of ``(path on disk, path in the bundle)``: each file's
    :class:`~ingest.registry.Detection`, or the message of what stopped it (unreadable, damaged
    compression). The pipeline runs batches in its worker pool when there are many files."""
    registry = registry or default_registry()
    out: list = []
    for path, rel in files:
        try:
            out.append(registry.sniff(path, rel))
        except Exception as e:
            out.append(str(e))
    return out


def parse_file(job: ParseJob, registry: Registry | None = None,
               on_part: Callable[[str, Path], None] | None = None) -> SourceResult:
    """Parse one file. With ``on_part``, each Parquet part is announced as soon as it is final
    (see :class:`RowSink`), so the caller can load it while the parse goes on; a failed parse
    then leaves its announced parts on disk (the caller drops the rows it loaded)."""
    t0 = time.perf_counter()
    registry = registry or default_registry()
    res = SourceResult(rel=job.rel)
    p = Path(job.path)
    try:
        res.bytes = p.stat().st_size
        res.compressed = is_gzip(p)
    except OSError as e:
        res.status, res.kind, res.error = STATUS_FAILED, "unrecognized", f"{job.rel}: cannot read: {e.strerror}"
        return res
    try:
        if job.parser:
            parser_cls = registry.by_name(job.parser)
        else:
            det = registry.sniff(p, job.rel)
            if det.reader is None:
                res.error = det.reason
                return res
            parser_cls = det.reader
            job = replace(job, unwrap=det.unwrap, from_line=det.from_line,
                          text_reason=None if det.recognized else det.reason)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        res.status, res.error = STATUS_FAILED, f"{job.rel}: cannot be read: {e}"
        return res

    res.kind, res.format, res.clock_domain = parser_cls.kind, parser_cls.name, parser_cls.clock_domain
    # (parts moved to a shared Parquet location stay there: compressed; others only travel to the store)
    sink = RowSink(job.out_dir, on_part=on_part, compression=COMPRESSION if job.parts_root else TEMP_COMPRESSION,
                   inline_rows=0 if job.parts_root or job.byte_range else job.inline_rows)
    if job.byte_range:
        ctx = RangeContext(p, job.rel, sink, job.byte_range, time_zone=job.time_zone)
    else:
        ctx = ParseContext(p, job.rel, sink, max_bytes=job.max_bytes, time_zone=job.time_zone, unwrap=job.unwrap)
    if job.unwrap:
        ctx.attrs["unwrapped"] = list(job.unwrap)
    if job.from_line > 1:
        ctx.attrs["format_from_line"] = job.from_line
    parser = parser_cls()
    failed = None
    try:
        parser.parse(ctx)
        if ctx.stream_error is not None:       # the lines ended early; the parser finished with them
            ctx.truncated = _stream_end(ctx.stream_error)
    except STREAM_ENDS as e:
        ctx.truncated = _stream_end(e)
    except Exception as e:  # a parser bug or an input it could not survive
        where = f" at line {ctx.lineno}" if getattr(ctx, "lineno", None) else ""
        tb = traceback.extract_tb(e.__traceback__)
        origin = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
        failed = f"parser {parser_cls.name} failed{where}: {type(e).__name__}: {e}{origin}"
    try:
        counts = sink.close(announce=failed is None)
    except Exception as e:
        failed = failed or f"could not write parsed rows: {e}"
        counts = dict(sink.counts)
    res.parse_s = time.perf_counter() - t0
    res.bytes_read = ctx.bytes_read
    res.issues = sink.issues_total
    res.host, res.rank, res.pid = ctx.host, ctx.rank, ctx.pid
    if ctx.clock_domain:
        res.clock_domain = ctx.clock_domain
    if ctx.format:
        res.format = ctx.format
    res.attrs = ctx.attrs
    if failed:
        res.status, res.error = STATUS_FAILED, f"{job.rel}: {failed}"
        for f in sink.files if on_part is None else ():
            Path(f).unlink(missing_ok=True)
        return res
    res.counts = counts
    res.records = sink.records
    res.inline = sink.inline
    parts: dict[str, list[str]] = {}
    for f in sink.files:
        parts.setdefault(f.name.split(".")[0], []).append(str(f))
    if job.parts_root:
        try:
            parts = _to_partitions(job, res.kind, job.host or res.host, parts)
        except OSError as e:
            _remove_parts(parts)
            res.status, res.error = STATUS_FAILED, f"{job.rel}: could not write parsed rows: {e}"
            res.counts, res.records = {}, 0
            return res
    res.parts = parts
    if getattr(parser_cls, "fallback", False):
        res.status = STATUS_TEXT
        res.error = f"kept as plain text: {job.text_reason or 'no parser recognised the contents'}" + (
            f"; {ctx.truncated}" if ctx.truncated else "")
    elif ctx.truncated:
        res.status, res.error = STATUS_PARTIAL, ctx.truncated
    elif res.issues:
        res.status, res.error = STATUS_PARTIAL, _issues_error(res)
    else:
        res.status = STATUS_PARSED
    return res


def _to_partitions(job: ParseJob, kind: str, host: str | None,
                   parts: dict[str, list[str]]) -> dict[str, list[str]]:
    """Move each part (``<table>.<n>.parquet``) to its partition; the new paths."""
    if job.source_id is None:
        raise ValueError(f"{job.rel}: a job with parts_root needs its source_id")
    out: dict[str, list[str]] = {}
    made: set[Path] = set()
    for table, files in parts.items():
        for f in files:
            n = int(Path(f).name.split(".")[1]) + job.part_base
            dest = partition_path(job.parts_root, table, kind, host, job.source_id, n)
            if dest.parent not in made:
                dest.parent.mkdir(parents=True, exist_ok=True)
                made.add(dest.parent)
            os.replace(f, dest)
            out.setdefault(table, []).append(str(dest))
    try:
        Path(job.out_dir).rmdir()       # (the staging folder, now empty)
    except OSError:
        pass
    return out


def _stream_end(e: Exception) -> str:
    if isinstance(e, DecompressedLimit):
        return f"stopped: {e}"
    if isinstance(e, EOFError):
        return "the compressed stream is truncated (the file ends early); rows before the cut were kept"
    return f"the compressed stream is damaged ({e}); rows before the damage were kept"


def _remove_parts(*parts: dict[str, list[str]]) -> None:
    for p in parts:
        for fs in p.values():
            for f in fs:
                Path(f).unlink(missing_ok=True)


def _issues_error(res: SourceResult) -> str:
    """What makes a parse with unusable lines partial: their count and the first one."""
    return f"{res.issues} line(s) could not be used{_first_issue(res.parts.get('parse_issues', []))}"


def _first_issue(files: list[str]) -> str:
    try:
        import pyarrow.parquet as pq
        if not files:
            return ""
        t = pq.read_table(files[0], columns=["line", "byte_offset", "message"]).slice(0, 1).to_pylist()
        if t:
            ln, off = t[0]["line"], t[0]["byte_offset"]
            if ln:
                return f" (first at line {ln}: {t[0]['message']})"
            if off is not None:     # (JSON traces name the byte where the bad event's chunk starts)
                return f" (first at byte {off}: {t[0]['message']})"
            return f" (first: {t[0]['message']})"
    except Exception:
        pass
    return ""


# -- byte ranges ---------------------------------------------------------------------------------
RANGE_PART_STRIDE = 100_000     # part numbers of range i start at i * this (partitions)


class _RangeRaw(_Limited):
    """Bytes [start, end) of a plain file, counted as the reader's streams count them."""

    def __init__(self, path: str, start: int, end: int):
        f = open(path, "rb")
        f.seek(start)
        super().__init__(f, None)
        self._left = end - start

    def readinto(self, b) -> int:
        if self._left <= 0:
            return 0
        n = super().readinto(memoryview(b)[:min(len(b), self._left)])
        self._left -= n
        return n


class RangeContext(ParseContext):
    """A :class:`ParseContext` over one byte range of a file; ``line_frames`` numbers the lines
    as in the whole file. (Only ``line_frames``: the formats that can be split read that.)"""

    def __init__(self, path, rel: str, sink: RowSink, byte_range: tuple[int, int, int],
                 time_zone: str | None = None):
        super().__init__(path, rel, sink, None, time_zone)
        self.byte_range = byte_range
        self.line_shift = byte_range[2] - 1

    def open(self):
        start, end, _ = self.byte_range
        self._stream = io.BufferedReader(_RangeRaw(self.path, start, end), buffer_size=1 << 20)
        return self._stream

    def lines(self):
        raise NotImplementedError(f"{self.rel}: a byte range is read with line_frames only")


def split_job(job: ParseJob, threshold: int, registry: Registry | None = None) -> list[ParseJob] | None:
    """The byte-range jobs of a file larger than ``threshold`` whose format allows it (None: parse
    it whole). Compressed files and files over the job's size limit are parsed whole."""
    registry = registry or default_registry()
    if not job.parser or job.byte_range or job.unwrap or threshold <= 0:
        return None
    try:
        parser_cls = registry.by_name(job.parser)
    except KeyError:
        return None
    points = getattr(parser_cls, "split_points", None)
    try:
        size = Path(job.path).stat().st_size
        if points is None or size <= threshold or is_gzip(job.path) or (job.max_bytes and size > job.max_bytes):
            return None
        ranges = points(job.path, threshold)
    except OSError:
        return None           # (the parse names the problem)
    if not ranges or len(ranges) < 2:
        return None
    out = []
    for i, rng in enumerate(ranges):
        out.append(replace(job, out_dir=f"{job.out_dir}.r{i:04d}", byte_range=rng,
                           part_base=i * RANGE_PART_STRIDE))
    return out


def merge_ranges(job: ParseJob, ranges: list[ParseJob], results: list, registry: Registry | None = None
                 ) -> SourceResult:
    """One source from its ranges' results (in range order; an exception for a range whose task
    was lost). A failed range fails the source: every range's parts are removed."""
    registry = registry or default_registry()
    failed = next((r for r in results if isinstance(r, BaseException) or r.status == STATUS_FAILED), None)
    if failed is not None:
        _remove_parts(*(r.parts for r in results if not isinstance(r, BaseException)))
        if isinstance(failed, BaseException):
            err = f"{job.rel}: parser process failed: {failed!r}"
        else:
            err = failed.error
        first = next((r for r in results if not isinstance(r, BaseException)), None)
        return SourceResult(job.rel, kind=first.kind if first else "unrecognized", status=STATUS_FAILED,
                            error=err, bytes=Path(job.path).stat().st_size)
    parser_cls = registry.by_name(job.parser)
    out_dir = Path(f"{job.out_dir}.merge")
    try:
        res = parser_cls.merge_ranges(results, RowSink(out_dir))
    except Exception as e:   # a bug, or a part that could not be read back: the source fails
        _remove_parts(*(r.parts for r in results))
        tb = traceback.extract_tb(e.__traceback__)
        origin = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
        return SourceResult(job.rel, kind=results[0].kind, status=STATUS_FAILED, bytes=results[0].bytes,
                            error=f"{job.rel}: merging its {len(results)} byte ranges failed: "
                                  f"{type(e).__name__}: {e}{origin}")
    res.rel = job.rel
    if job.parts_root:
        merged = {t: [f for f in fs if Path(f).parent == out_dir] for t, fs in res.parts.items()}
        moved = _to_partitions(replace(job, out_dir=str(out_dir), part_base=len(ranges) * RANGE_PART_STRIDE),
                               res.kind, job.host or res.host, {t: fs for t, fs in merged.items() if fs})
        for t, fs in res.parts.items():
            res.parts[t] = [f for f in fs if Path(f).parent != out_dir] + moved.get(t, [])
    if res.status != STATUS_FAILED and not res.error and res.issues:
        res.status, res.error = STATUS_PARTIAL, _issues_error(res)
    return res
