"""The parser registry: which format module claims a file.

Each format module defines one or more :class:`Parser` subclasses with a
declared ``name``, source ``kind``, detection ``priority`` (higher is tried
first) and ``clock_domain``, a ``detect(head)`` that is a dry run of its own
line grammar on the file's first KiBs (after gunzip), and ``parse(ctx)`` that
streams rows into ``ctx.sink``. Detection never trusts the file name alone; a
file no parser claims gets the named result ``unrecognized``.

Adding a format = adding one module to ``ingest/formats`` and listing its
parsers in ``ingest.formats.PARSERS``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

from .model import CLOCK_DOMAINS
from .reader import Head, iter_lines, open_binary
from .sink import RowSink


class ParseContext:
    """What a parser gets: the file, a sink, and a place to state what it learnt."""

    def __init__(self, path: str | os.PathLike, rel: str, sink: RowSink,
                 max_bytes: int | None = None, time_zone: str | None = None):
        self.path = str(path)
        self.rel = rel
        self.sink = sink
        self.max_bytes = max_bytes
        self.time_zone = time_zone       # bundle time zone hint for local-time strings
        # Filled by the parser:
        self.host: str | None = None     # host named by the contents
        self.rank: int | None = None
        self.pid: int | None = None
        self.clock_domain: str | None = None   # override of the parser's declared domain
        self.format: str | None = None         # finer format variant (e.g. dmesg_T)
        self.attrs: dict[str, Any] = {}
        self.truncated: str | None = None      # why the file ended early, if it did
        self.bytes_read = 0
        self.lineno = 0                        # last line handed out by lines()
        self._stream = None

    def open(self):
        """Binary stream of the decompressed file (closed by the pipeline)."""
        self._stream = open_binary(self.path, self.max_bytes)
        return self._stream

    def line_frames(self, chunk_bytes: int | None = None):
        """Polars frames of (lineno, line, bad_utf8) over the decompressed file (see ingest.lines).

        Lines that were not valid UTF-8 are counted as issues here; the frames still carry them
        (with U+FFFD) so the parser decides whether it can use them.
        """
        from .lines import CHUNK_BYTES, line_frames
        stream = self.open()
        try:
            for df in line_frames(stream, chunk_bytes or CHUNK_BYTES):
                self.lineno = int(df["lineno"][-1]) if len(df) else self.lineno
                bad = df.filter(df["bad_utf8"])
                room = max(0, self.sink.max_issues - self.sink.counts["parse_issues"])
                for row in bad.head(room).iter_rows(named=True):
                    self.sink.issue("undecodable", "line is not valid UTF-8; bad bytes replaced",
                                    line=row["lineno"], text=row["line"][:200])
                self.sink.issues_total += max(0, len(bad) - room)   # counted, not stored
                yield df
        finally:
            self.bytes_read = stream.raw.count
            stream.close()

    def lines(self) -> Iterator[tuple[int, str]]:
        """(lineno, text) for every line; undecodable lines are counted as issues."""
        stream = self.open()

        def bad(lineno: int, raw: bytes) -> None:
            self.sink.issue("undecodable", "line is not valid UTF-8; bad bytes replaced",
                            line=lineno, text=raw[:200].decode("utf-8", "replace"))

        try:
            for lineno, text in iter_lines(stream, bad):
                self.lineno = lineno
                yield lineno, text
        finally:
            self.bytes_read = stream.raw.count
            stream.close()


class Parser:
    name: ClassVar[str]
    kind: ClassVar[str]
    priority: ClassVar[int] = 50
    clock_domain: ClassVar[str]
    description: ClassVar[str] = ""

    @classmethod
    def detect(cls, head: Head) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def parse(self, ctx: ParseContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "clock_domain" in cls.__dict__ and cls.clock_domain not in CLOCK_DOMAINS:
            raise ValueError(f"{cls.__name__}: unknown clock domain {cls.clock_domain!r}")


@dataclass(frozen=True)
class Detection:
    parser: type[Parser] | None
    reason: str = ""          # for unrecognized files: why nothing claimed it
    tried: tuple[str, ...] = field(default=())

    @property
    def recognized(self) -> bool:
        return self.parser is not None


class Registry:
    def __init__(self, parsers):
        names = [p.name for p in parsers]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parser names in {names}")
        self.parsers: tuple[type[Parser], ...] = tuple(
            sorted(parsers, key=lambda p: (-p.priority, p.name)))

    def detect(self, head: Head) -> Detection:
        if not head.data:
            return Detection(None, "empty file")
        if head.binary:
            return Detection(None, "binary data (not a text format aftertrace reads)")
        tried, errors = [], []
        for p in self.parsers:
            tried.append(p.name)
            try:
                if p.detect(head):
                    return Detection(p, tried=tuple(tried))
            except Exception as e:  # a detector bug must not hide the file from the others
                errors.append(f"detector {p.name} failed: {e!r}")
        reason = "no parser recognised the contents"
        if errors:
            reason += " (" + "; ".join(errors) + ")"
        return Detection(None, reason, tuple(tried))

    def by_name(self, name: str) -> type[Parser]:
        for p in self.parsers:
            if p.name == name:
                return p
        raise KeyError(name)


def default_registry() -> Registry:
    from .formats import PARSERS
    return Registry(PARSERS)
