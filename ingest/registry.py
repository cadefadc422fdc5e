"""The parser registry: which format module claims a file.

Each format module defines one or more :class:`Parser` subclasses with a
declared ``name``, source ``kind``, detection ``priority`` (higher is tried
first) and ``clock_domain``, a ``detect(head)`` that is a dry run of its own
line grammar on the file's first KiBs (after gunzip), and ``parse(ctx)`` that
streams rows into ``ctx.sink``. Detection never trusts the file name alone; a
file no parser claims gets the named result ``unrecognized``.

Adding a format = adding one module to ``ingest/formats`` and listing its
parsers in ``ingest.formats.PARSERS``.

Group parsers (one source made of many files)
---------------------------------------------
Some inputs are not one file but a *set* of files that only mean something
together: a series of cgroup snapshots (``vm/cgroup/<time>/cpu/<group>/cpu.stat``
... 1,456 tiny files) or a point-in-time copy of ``/sys/fs/cgroup``. A
:class:`GroupParser` sees the list of every extracted file *before* per-file
detection and :meth:`GroupParser.claim` returns :class:`Group` s: the source's
path (a folder, ending in ``/``) and its member files. The pipeline then

* takes the claimed files out of per-file detection (they get no ``sources``
  row of their own),
* writes the group's *manifest* (``{"rel", "root", "members": [[rel, file], ...],
  "extra"}``, see :func:`write_group_manifest`) into the work folder, and
* runs the group parser through the ordinary ``parse_file`` with the manifest as
  the job's file: ``ctx.path`` is the manifest, :func:`read_group` gives it back.

So a group is parsed, spilled and loaded exactly like one file (one ``sources``
row, one set of Parquet parts, same error handling, same process pool), and
everything else keeps the per-file path unchanged. A group parser's
``detect`` is never asked about single files; it lists the members it read in
``ctx.attrs`` and names member files and lines in its parse issues.
"""
from __future__ import annotations

import json
import os
from itertools import chain
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterator

from .model import CLOCK_DOMAINS
from .reader import STREAM_ENDS, Head, iter_lines, open_binary, size_hint
from .sink import RowSink
from .unwrap import (JOINED, MACHINE_WRAPPERS, MIXED_SHARE, cut_width, layers, open_unwrapped, rejoin,
                     terminal_width)

DEEP_BYTES = 1 << 20       # how far detection reads into a file that opens with a preamble
WRAP_LINES = 300           # head lines whose wrappers decide the layers to peel
PREAMBLE_STEP = 128        # later stretches of the head tried every this many lines
MAX_STARTS = 64            # at most this many places where the lines change shape are tried
WINDOW_LINES = 2000        # the lines of a later stretch the parsers are asked about


class ParseContext:
    """What a parser gets: the file, a sink, and a place to state what it learnt."""

    def __init__(self, path: str | os.PathLike, rel: str, sink: RowSink,
                 max_bytes: int | None = None, time_zone: str | None = None, unwrap: tuple[str, ...] = ()):
        self.path = str(path)
        self.rel = rel
        self.sink = sink
        self.max_bytes = max_bytes
        self.time_zone = time_zone       # bundle time zone hint for local-time strings
        self.unwrap = tuple(unwrap)      # wrapper layers peeled off every line (ingest.unwrap)
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
        self.line_shift = 0                    # added to line numbers (a byte range: lines before it)
        self.stream_error: Exception | None = None   # why the lines ended early (see lines())
        self._stream = None

    def open(self):
        """Binary stream of the decompressed file (closed by the pipeline), wrappers peeled off."""
        self._stream = open_binary(self.path, self.max_bytes)
        if self.unwrap:
            self._stream = open_unwrapped(self._stream, self.unwrap)
        return self._stream

    def json_document(self, max_bytes: int, what: str):
        """The file as one JSON document (at most ``max_bytes``: larger is an error naming ``what``),
        or None after a ``bad_json`` issue where it does not parse."""
        with self.open() as f:
            data = f.read(max_bytes + 1)
        self.bytes_read = len(data)
        if len(data) > max_bytes:
            raise ValueError(f"{what} larger than {max_bytes >> 20} MiB")
        try:
            return json.loads(data.decode("utf-8", "replace"))
        except json.JSONDecodeError as e:
            self.sink.issue("bad_json", f"not JSON: {e.msg}", e.lineno, None)
            return None

    def line_frames(self, chunk_bytes: int | None = None, blank_as_null: bool = False):
        """Polars frames of (lineno, line, bad_utf8, nul) over the decompressed file (see ingest.lines).

        Lines that were not valid UTF-8 are counted as issues here; the frames still carry them
        (with U+FFFD) so the parser decides whether it can use them.
        """
        from .lines import CHUNK_BYTES, ahead, line_frames
        stream = self.open()
        chunk = chunk_bytes or CHUNK_BYTES
        frames = line_frames(stream, chunk, blank_as_null, size_hint(self.path))
        if not self.one_chunk(chunk):     # (the next chunk is read while this one is parsed)
            frames = ahead(frames, name="line-frames")
        try:
            for df in frames:
                df = self.without_joined(df)
                if self.line_shift:
                    df = df.with_columns(df["lineno"] + self.line_shift)
                self.lineno = int(df["lineno"][-1]) if len(df) else self.lineno
                bad = df.filter(df["bad_utf8"])
                if len(bad):
                    first = bad.head(self.sink.issue_room())
                    self.sink.issues("undecodable", "line is not valid UTF-8; bad bytes replaced", len(bad),
                                     zip(first["lineno"], first["line"].str.slice(0, 200)))
                yield df
        except STREAM_ENDS as e:
            self.stream_error = e
        finally:
            frames.close()
            self.bytes_read = stream.raw.count
            stream.close()

    def one_chunk(self, chunk_bytes: int | None = None) -> bool:
        """Whether the file is known to fit in one chunk of :meth:`line_frames` (its size, or the
        size its gzip trailer records). A parser of such a file may look at what follows a chunk for
        nothing; in a larger one that look waits for the next chunk's read."""
        from .lines import CHUNK_BYTES
        hint = size_hint(self.path)
        return hint is not None and hint < (chunk_bytes or CHUNK_BYTES)

    def without_joined(self, df):
        """A frame of lines without those a terminal cut that were joined onto the line above (see
        ``ingest.unwrap.terminal_width``): every reader of line frames passes them through here."""
        if cut_width(self.unwrap) is None:
            return df
        import polars as pl
        return df.filter(pl.col("line").is_null() | (pl.col("line") != JOINED))

    def lines(self) -> Iterator[tuple[int, str]]:
        """(lineno, text) for every line; undecodable lines are counted as issues.

        A compressed stream that is cut or damaged, or the decompressed-size limit, ends the lines
        (here and in :meth:`line_frames`) as if the file ended there: the parser finishes with the
        lines it got, and ``stream_error`` says why they ended (``parse_file`` reports it)."""
        stream = self.open()

        def bad(lineno: int, raw: bytes) -> None:
            self.sink.issue("undecodable", "line is not valid UTF-8; bad bytes replaced",
                            line=lineno, text=raw[:200].decode("utf-8", "replace"))

        try:
            for lineno, text in iter_lines(stream, bad):
                self.lineno = lineno
                if text != JOINED:
                    yield lineno, text
        except STREAM_ENDS as e:
            self.stream_error = e
        finally:
            self.bytes_read = stream.raw.count
            stream.close()


class Parser:
    name: ClassVar[str]
    kind: ClassVar[str]
    priority: ClassVar[int] = 50
    clock_domain: ClassVar[str]
    description: ClassVar[str] = ""
    # the finding kinds its events may carry (``events.kind``; values of analysis/kinds.py): the
    # analysis's catalogue of who emits what reads them, and a test holds them to the code
    emits: ClassVar[frozenset[str]] = frozenset()
    # reads the file as lines (``line_frames``/``lines``), so a terminal's cut can be joined back for
    # it; a parser of a document (JSON) reads the bytes as they are
    reads_lines: ClassVar[bool] = True
    # its files are binary (the head is not text): only such parsers are asked of a binary head
    reads_binary: ClassVar[bool] = False

    @classmethod
    def detect(cls, head: Head) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def parse(self, ctx: ParseContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "clock_domain" in cls.__dict__ and cls.clock_domain not in CLOCK_DOMAINS:
            raise ValueError(f"{cls.__name__}: unknown clock domain {cls.clock_domain!r}")


@dataclass
class Group:
    """A set of files claimed by a :class:`GroupParser`, parsed as one source."""
    rel: str                                  # the source's path in the bundle: a folder ending in '/'
    members: list[tuple[str, str]]            # (path in the bundle, extracted file on disk), in order
    root: str | None = None                   # the folder on disk that holds the members, when one does
    extra: dict[str, Any] = field(default_factory=dict)   # what claim() learnt (layout, time files, ...)


class GroupParser(Parser):
    """A parser that reads a set of files as ONE source (see the module docstring)."""

    @classmethod
    def detect(cls, head: Head) -> bool:
        return False          # never claims a single file by its head

    @classmethod
    def claim(cls, files: list[tuple[str, str]], detect=None) -> list[Group]:  # pragma: no cover - abstract
        """From (path in bundle, file on disk) of every file not claimed yet, the groups this parser reads.
        ``detect(rel, disk)``, when given, tells whether a per-file parser reads a file."""
        raise NotImplementedError


def write_group_manifest(group: Group, path: str | os.PathLike) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"rel": group.rel, "root": group.root, "members": group.members, "extra": group.extra}, f)
    return str(path)


def read_group(ctx: "ParseContext") -> dict[str, Any]:
    """The manifest a group parser's ``ctx.path`` points at: ``rel``, ``root``, ``members``, ``extra``."""
    with open(ctx.path, encoding="utf-8") as f:
        return json.load(f)


@dataclass(frozen=True)
class Detection:
    parser: type[Parser] | None
    reason: str = ""          # for unrecognized files: why nothing claimed it
    tried: tuple[str, ...] = field(default=())
    unwrap: tuple[str, ...] = ()      # wrapper layers peeled off every line (ingest.unwrap)
    from_line: int = 0                # the head's line where the parser's grammar begins (after a preamble)
    fallback: type[Parser] | None = None   # a text file no parser claims: kept by this reader

    @property
    def recognized(self) -> bool:
        return self.parser is not None

    @property
    def reader(self) -> type[Parser] | None:
        """The parser that reads the file: the one that claimed it, else the plain-text fallback."""
        return self.parser or self.fallback


class Registry:
    def __init__(self, parsers):
        names = [p.name for p in parsers]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parser names in {names}")
        ordered = sorted(parsers, key=lambda p: (-p.priority, p.name))
        # per-file parsers (asked by detect) and group parsers (asked by claim_groups)
        self.parsers: tuple[type[Parser], ...] = tuple(p for p in ordered if not issubclass(p, GroupParser))
        self.groups: tuple[type[GroupParser], ...] = tuple(p for p in ordered if issubclass(p, GroupParser))
        # the reader of text files nobody claims (never asked by ``detect``)
        self.fallback: type[Parser] | None = next((p for p in self.parsers if getattr(p, "fallback", False)), None)
        self.parsers = tuple(p for p in self.parsers if p is not self.fallback)

    def claim_groups(self, files: list[tuple[str, str]]) -> list[tuple[type[GroupParser], Group]]:
        """Let each group parser, in priority order, claim sets of the files nobody claimed yet."""
        out: list[tuple[type[GroupParser], Group]] = []
        taken: set[str] = set()

        def per_file(rel: str, disk: str) -> bool:
            """Whether a per-file parser reads this file (a group leaves such files alone)."""
            try:
                return self.detect(Head.read(disk, rel)).recognized
            except Exception:       # unreadable: nobody reads it
                return False

        for p in self.groups:
            for g in p.claim([f for f in files if f[0] not in taken], detect=per_file):
                out.append((p, g))
                taken.update(rel for rel, _ in g.members)
        return out

    def detect(self, head: Head) -> Detection:
        if not head.data:
            return Detection(None, "empty file")
        if head.binary:
            for p in self.parsers:
                if p.reads_binary and p.detect(head):
                    return Detection(p, tried=(p.name,))
            if head.data[:2] in (b"\xff\xfe", b"\xfe\xff"):
                return Detection(None, "UTF-16 text (it starts with a byte-order mark); aftertrace reads UTF-8 "
                                       "text: convert it with iconv -f UTF-16 -t UTF-8")
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

    def sniff(self, path: str | os.PathLike, rel: str) -> Detection:
        """Which parser reads the file, looking past what hides a known format (see ``ingest.unwrap``).

        In order, the first that a parser claims: the head as it is; the head with wrapper layers
        peeled off its lines (one more layer each time); a later stretch of the head, then of the
        first ``DEEP_BYTES``, when the file opens with a preamble (shell tracing, module loads,
        banners) before the format's first line. A text file nobody claims comes back with the
        plain-text reader as ``fallback`` and the reason; binary data and empty files do not.

        Lines a terminal cut at its width are joined back first, in every one of these reads, and
        the parse joins them the same way (layer ``cut:W``, :func:`ingest.unwrap.terminal_width`)."""
        head = Head.read(path, rel)
        cut: tuple[str, ...] = ()
        if head.data and not head.binary:
            width = terminal_width(head.lines)
            if width is not None:
                cut = (f"cut:{width}",)
                head = Head.from_lines(head.path, rejoin(head.lines, width), head.complete)
        det = self.detect(head)
        if det.recognized and cut and not det.parser.reads_lines:
            return self.detect(Head.read(path, rel))
        if det.recognized or not head.data or head.binary:
            return replace(det, unwrap=cut) if cut else det
        found = self._look_past(head)
        if found is None and not head.complete:
            deep = Head.read(path, rel, size=DEEP_BYTES)
            if cut:
                deep = Head.from_lines(deep.path, rejoin(deep.lines, cut_width(cut)), deep.complete)
            found = self._look_past(deep, windows_only=True)
        if found is not None:
            return replace(found, unwrap=cut + found.unwrap)
        return replace(det, fallback=self.fallback, unwrap=cut)

    def _look_past(self, head: Head, windows_only: bool = False) -> Detection | None:
        lines = head.lines
        if not windows_only:
            for names, peeled in chain(layers(lines[:WRAP_LINES]),
                                       layers(lines[:WRAP_LINES], MIXED_SHARE, MACHINE_WRAPPERS)):
                det = self.detect(Head.from_lines(head.path, peeled, head.complete))
                if det.recognized:
                    return replace(det, unwrap=names)
        # where the lines change how they start (a preamble's end), then every PREAMBLE_STEP lines
        # (in the deeper read, twice as far each time)
        starts: set[int] = set()
        shape = [_shape(ln) for ln in lines]
        for i in range(1, len(lines) - 2):
            # a change of how lines start that holds for the next lines too
            if shape[i] != shape[i - 1] and shape[i] == shape[i + 1] == shape[i + 2] and shape[i] != " ":
                starts.add(i)
                if len(starts) >= MAX_STARTS:
                    break
        at = PREAMBLE_STEP
        while at < len(lines):
            starts.add(at)
            at = at * 2 if windows_only else at + PREAMBLE_STEP
        for start in sorted(starts):
            stretch = lines[start:start + WINDOW_LINES]
            det = self.detect(Head.from_lines(head.path, stretch, head.complete and start + WINDOW_LINES >= len(lines)))
            if det.recognized:
                return replace(det, from_line=start + 1)
        return None

    def by_name(self, name: str) -> type[Parser]:
        for p in self.parsers + self.groups + ((self.fallback,) if self.fallback else ()):
            if p.name == name:
                return p
        raise KeyError(name)


def _shape(line: str) -> str:
    """How a line starts, coarsely: a digit, a letter, blank, or the punctuation itself."""
    c = line[:1]
    if not c or c.isspace():
        return " "
    return "9" if c.isdigit() else ("a" if c.isalpha() else c)


_DEFAULT: tuple[tuple, Registry] | None = None


def default_registry() -> Registry:
    """The registry of the formats in :mod:`ingest.formats`: made once (a registry is not
    changed once made), and again only if the set of parsers is another one. Every file a parse
    worker takes asks for it."""
    global _DEFAULT
    from .formats import PARSERS
    key = tuple(PARSERS)
    made = _DEFAULT
    if made is None or made[0] != key:
        made = _DEFAULT = (key, Registry(PARSERS))
    return made[1]
