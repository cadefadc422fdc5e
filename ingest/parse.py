"""Parse one bundle file: detect, run its parser, spill rows, report what happened.

:func:`parse_file` is what the pipeline runs for each file, in a worker process
or in-process. It never raises: every outcome (unrecognized, partial, failed)
is a :class:`SourceResult` with a clear message naming the file (and the line
where it stopped, when known).
"""
from __future__ import annotations

import gzip
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .model import STATUS_FAILED, STATUS_PARSED, STATUS_PARTIAL, STATUS_UNRECOGNIZED
from .reader import STREAM_ENDS, DecompressedLimit, Head, is_gzip
from .registry import ParseContext, Registry, default_registry
from .sink import RowSink


@dataclass
class ParseJob:
    path: str                 # extracted file on disk
    rel: str                  # path inside the bundle
    out_dir: str              # where this source's Parquet parts go
    max_bytes: int | None = None
    time_zone: str | None = None
    parser: str | None = None  # skip detection: use this parser (set after a first detect)


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


def detect_file(path: str, rel: str, registry: Registry | None = None):
    registry = registry or default_registry()
    head = Head.read(path, rel)
    return registry.detect(head)


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
            det = registry.detect(Head.read(p, job.rel))
            if not det.recognized:
                res.error = det.reason
                return res
            parser_cls = det.parser
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        res.status, res.error = STATUS_FAILED, f"{job.rel}: cannot be read: {e}"
        return res

    res.kind, res.format, res.clock_domain = parser_cls.kind, parser_cls.name, parser_cls.clock_domain
    sink = RowSink(job.out_dir, on_part=on_part)
    ctx = ParseContext(p, job.rel, sink, max_bytes=job.max_bytes, time_zone=job.time_zone)
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
    parts: dict[str, list[str]] = {}
    for f in sink.files:
        parts.setdefault(f.name.split(".")[0], []).append(str(f))
    res.parts = parts
    if ctx.truncated:
        res.status, res.error = STATUS_PARTIAL, ctx.truncated
    elif res.issues:
        first = _first_issue(sink)
        res.status = STATUS_PARTIAL
        res.error = f"{res.issues} line(s) could not be used{first}"
    else:
        res.status = STATUS_PARSED
    return res


def _stream_end(e: Exception) -> str:
    if isinstance(e, DecompressedLimit):
        return f"stopped: {e}"
    if isinstance(e, EOFError):
        return "the compressed stream is truncated (the file ends early); rows before the cut were kept"
    return f"the compressed stream is damaged ({e}); rows before the damage were kept"


def _first_issue(sink: RowSink) -> str:
    try:
        import pyarrow.parquet as pq
        files = [f for f in sink.files if f.name.startswith("parse_issues.")]
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
