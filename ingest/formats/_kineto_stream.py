"""Streaming reader for Chrome-trace JSON: the document cut into lists of whole events.

How the cutting works (and why it is safe)
------------------------------------------
A trace is ``{...header keys..., "traceEvents": [ev, ev, ...], ...trailer keys...}`` or a
bare array ``[ev, ev, ...]``; it may be pretty-printed (torch 2.13 writes one key per
line), one event per line, or minified into a single line, and a process that died
while writing leaves a prefix with no closing ``]``. Loading the whole document would
need several times the file in memory, so the file is read in blocks and the event array
is cut into *chunks of whole events* that are each decoded at C speed (msgspec into a
small typed struct per event, ``args`` kept as raw JSON text; orjson for the header, the
trailer and for chunks holding an event that does not fit the typed form). For the parser a
block of at least ``COLUMNS_MIN`` bytes of events is first given to the compiled reader
(``at_kineto_events`` in ``ingest/native/scan.c``), which reads the same fields into columns
(:class:`EventColumns`) without an object per event, and leaves to msgspec any block it is not
sure it reads as msgspec does (``tests/ingest/test_kineto_columns.py``).

A cut candidate is a ``}`` followed by optional whitespace, ``,`` and optional whitespace
and ``{`` -- what separates two events of the array. The same bytes can occur inside a
string (kernel names such as ``{lambda()#1}``) or between two objects nested inside one
event (``"args": {"x": [{...}, {...}]}``). Such a false candidate is rejected by parsing:
the text ``[`` + (bytes from the chunk start up to and including the candidate ``}``) +
``]`` is valid JSON **only** if the candidate closes a top-level element of the array --
a cut inside a string leaves the string unterminated, a cut inside a nested object
leaves a ``{`` or ``[`` unclosed. So the reader takes the *last* candidate in the block,
and on a parse failure moves to the previous one; every accepted chunk is exactly a run
of complete events. A block with no acceptable candidate is grown with the next block
(one event larger than a block is read whole). A block's chunk is decoded in pieces of about
:data:`PIECE` bytes, each ending at a candidate that parses, while the piece is in the CPU
cache; the chunk is the same as if decoded at once (see :func:`_complete_events`).

At the end of the stream the rest is ``ev ] , trailer }`` (object), ``ev ]`` (bare
array) or a cut-off prefix. The end of the array is the first ``}`` followed by ``]``
for which ``[`` + rest[:that] + ``]`` parses (earlier ones are nested or in strings, by
the same argument). The keys after the array (Kineto writes ``traceName`` there, and
re-serialised files put ``baseTimeNanoseconds`` and ``distributedInfo`` there too) are
parsed as the trailer. When no end is found the file is truncated: the complete events
before the cut were already yielded; the last started event is tried alone, and what
remains is reported with its byte offset in the decompressed stream.

The header (keys before ``"traceEvents"``) is parsed by closing it with ``}``; a header
that is not valid JSON is reported and the events are read all the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

import msgspec
import orjson
import pyarrow as pa

from .. import native

BLOCK = 8 << 20                 # bytes read per step (one chunk of events per block)
PIECE = 1 << 20                 # bytes decoded at once (see _complete_events)
MAX_HEADER = 64 << 20           # header keys larger than this are not searched further
_WS = b" \t\r\n"
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


@dataclass
class Chunk:
    events: list | EventColumns  # Ev structs (typed), whatever the array held, or the compiled reader's
    offset: int                  # byte offset of the chunk's first byte in the stream
    typed: bool = True


@dataclass
class Outcome:
    layout: str = "unknown"      # object | array | object_without_events | not_json
    header: dict[str, Any] = field(default_factory=dict)
    trailer: dict[str, Any] = field(default_factory=dict)
    closed: bool = False         # the event array's closing ] was found
    truncated_at: int | None = None    # byte offset of the first byte that could not be used
    truncated_text: str | None = None
    problems: list[tuple[str, str, int | None]] = field(default_factory=list)  # (kind, message, offset)
    stream_error: Exception | None = None   # the stream failed (cut gzip, size limit) after these bytes
    bytes_total: int = 0


def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _boundary_before(buf: bytes, lo: int, hi: int) -> tuple[int, int]:
    """Last ``}`` ws? ``,`` ws? ``{`` in buf[lo:hi]: (index of the }, index of the {), or (-1, -1)."""
    j = buf.rfind(b"{", lo, hi)
    while j > lo:
        k = j - 1
        while k > lo and buf[k] in _WS:
            k -= 1
        if buf[k] == 0x2C:           # ','
            k -= 1
            while k > lo and buf[k] in _WS:
                k -= 1
            if buf[k] == 0x7D:       # '}'
                return k, j
        j = buf.rfind(b"{", lo, j)
    return -1, -1


_NO_ARGS = msgspec.Raw(b"")


# Every phase of the Chrome trace format (and "" for none). As a Literal the decoder hands out
# one shared string per phase instead of a new one per event (about a tenth less time to decode
# and build the columns); an event with another phase makes its chunk take the untyped path,
# which keeps it as it is.
Phase = Literal["X", "i", "I", "C", "s", "t", "f", "M", "B", "E", "b", "e", "n", "O", "P", "N", "D", "R", "c", ""]


class Ev(msgspec.Struct, gc=False):
    """The fields of a trace event that the parser reads; ``args`` stays raw JSON text."""
    ph: Phase = ""
    cat: str | None = None
    name: str | int | float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = _NO_ARGS
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None


_TYPED = msgspec.json.Decoder(list[Ev])
_ONE = msgspec.json.Decoder(Ev)
COLUMNS_MIN = 1 << 20        # a block of fewer bytes of events is decoded by msgspec (a few thousand
                             # events at most: read as Ev lists by the parser anyway, see SMALL_CHUNK)


class EventColumns:
    """The events of a chunk as the compiled reader read them (:func:`ingest.native.kineto_events`):
    columns instead of one :class:`Ev` per event, over ``data`` (the chunk's bytes: its strings are
    views into them). An event as an :class:`Ev` (``cols[i]``), or all of them (:meth:`events`), is
    decoded from its own bytes by msgspec, which reads it as it would have read it in the array."""

    def __init__(self, data: bytes, cols):
        self.data = data
        self.cols = cols

    def __len__(self) -> int:
        return self.cols.n

    def __getitem__(self, i: int) -> Ev:
        return _ONE.decode(memoryview(self.data)[self.cols.start[i].as_py():self.cols.end[i].as_py()])

    def events(self) -> list:
        return _TYPED.decode(b"".join((b"[", self.data, b"]")))

    def column(self, name: str) -> pa.Array:
        """One column (see :class:`ingest.native.KinetoEvents`)."""
        return getattr(self.cols, name)

    def ids(self, j: int) -> tuple[pa.Array, pa.Array]:
        """pid (0), tid (1) or id (2): the integers and the strings (see KinetoEvents.ids)."""
        return self.cols.ids[j]


def _read_columns(body: bytes, lo: int, hi: int):
    """``body[lo:hi]``'s events as :class:`EventColumns`, or None where the compiled reader leaves
    them to msgspec."""
    piece = bytes(memoryview(body)[lo:hi])
    cols = native.kineto_events(piece)
    return None if cols is None else EventColumns(piece, cols)


def _parse_array(body: bytes, lo: int = 0, hi: int | None = None):
    """Events of ``[body[lo:hi]]``: :class:`Ev` s (fast path), or plain values when some event does
    not fit the typed form (the parser sorts those out one by one); None when it is not JSON.
    The bracketed text is built with one copy of the bytes (no slice, no intermediate concat)."""
    data = b"".join((b"[", memoryview(body)[lo:hi], b"]"))
    try:
        return _TYPED.decode(data), True
    except (msgspec.ValidationError, RecursionError):   # (nested deeper than msgspec follows: orjson says)
        pass
    except msgspec.DecodeError:
        return None, False
    try:
        return orjson.loads(data), False
    except orjson.JSONDecodeError:
        return None, False


def _complete_events(buf: bytes, pos: int, hi: int, columns: bool = False):
    """The complete events at the start of ``buf[pos:hi]``: (events, typed, index of the ``{``
    after the last of them), or None when no candidate cut parses.

    The result is that of decoding ``buf[pos:k+1]`` for the *last* candidate ``k`` that
    parses, but decoded in pieces of about :data:`PIECE` bytes, each ending at a candidate
    that parses (so at a true boundary): a piece is decoded while it is in the CPU cache
    (about 1.6x faster than 8 MB at once), and the pieces together are exactly the events
    before ``k``, because after a true boundary the rest of a valid prefix is valid and
    vice versa. When a piece needs the untyped reader, the whole range is read again in
    one go, so a chunk is typed or not as a whole, as it was. With ``columns``, a range of at
    least COLUMNS_MIN bytes is first given whole (to its last candidate cut) to the compiled
    reader: the events it reads come as :class:`EventColumns`."""
    if columns and hi - pos >= COLUMNS_MIN:
        # the compiled reader takes the whole range up to its last cut at once (it does not need
        # the pieces msgspec is fed); a range it leaves is decoded below, as it always was
        k, nxt = _boundary_before(buf, pos, hi)
        got = _read_columns(buf, pos, k + 1) if k >= 0 else None
        if got is not None:
            return got, True, nxt
    out: list = []
    typed = True
    p = end = pos
    whole = False
    while True:
        last = whole or hi - p <= PIECE
        h = hi if last else p + PIECE
        while True:
            k, nxt = _boundary_before(buf, p, h)
            if k < 0:
                break
            evs, t = _parse_array(buf, p, k + 1)
            if evs is not None:
                break
            h = k                        # a false candidate: look before it
        if k < 0:
            if last:
                break
            whole = True                 # no cut in this piece (one large event): the rest at once
            continue
        if out:
            out += evs
        else:
            out = evs
        typed = typed and t
        p, end = nxt, k + 1
        if last:
            break
    if p == pos:
        return None
    if not typed:
        out, typed = _parse_array(buf, pos, end)
    return out, typed, p


class EventReader:
    """Iterate :class:`Chunk` s of complete events from a binary stream; then read ``outcome``."""

    def __init__(self, stream, block: int = BLOCK, *, columns: bool = False):
        self.stream = stream
        self.block = block
        self.columns = columns       # large pieces as EventColumns where the compiled reader reads them
        self.outcome = Outcome()

    def _read(self) -> bytes:
        """Up to one block; a stream that fails (cut gzip, size limit) still hands out what it had."""
        if self.outcome.stream_error is not None:
            return b""
        parts, n = [], 0
        try:
            while n < self.block:
                c = self.stream.read1(self.block - n)
                if not c:
                    break
                parts.append(c)
                n += len(c)
        except Exception as e:  # EOFError, BadGzipFile, zlib.error, DecompressedLimit: re-raised by the parser
            self.outcome.stream_error = e
        return b"".join(parts)

    def __iter__(self) -> Iterator[Chunk]:
        out = self.outcome
        buf = self._read()
        base = 0                       # stream offset of buf[0]
        eof = not buf
        if buf.startswith(b"\xef\xbb\xbf"):
            buf = buf[3:]
            base = 3
        i = _skip_ws(buf, 0)
        while i == len(buf) and not eof:
            more = self._read()
            eof = not more
            buf += more
            i = _skip_ws(buf, i)
        if i >= len(buf):
            out.layout = "not_json"
            return
        if buf[i] == 0x5B:               # '[' bare array
            out.layout = "array"
            pos = i + 1
        elif buf[i] == 0x7B:             # '{' object
            m = _EVENTS_KEY.search(buf, i)
            while m is None and not eof and len(buf) < MAX_HEADER:
                more = self._read()
                if not more:
                    eof = True
                    break
                buf += more
                m = _EVENTS_KEY.search(buf, max(i, len(buf) - len(more) - 64))
            if m is None:
                # no event array: an object of other keys (or a header cut before it)
                while not eof:
                    more = self._read()
                    if not more:
                        break
                    buf += more
                out.layout = "object_without_events"
                try:
                    v = orjson.loads(buf)
                    out.header = v if isinstance(v, dict) else {}
                    out.closed = True
                except orjson.JSONDecodeError as e:
                    out.truncated_at = base + len(buf)
                    out.problems.append(("bad_json", f"not a complete JSON object: {e}", base))
                out.bytes_total = base + len(buf)
                return
            out.layout = "object"
            head = buf[i + 1:m.start()].rstrip(_WS)
            if head.endswith(b","):
                head = head[:-1]
            if head.strip():
                try:
                    h = orjson.loads(b"{" + head + b"}")
                    out.header = h if isinstance(h, dict) else {}
                except orjson.JSONDecodeError as e:
                    out.problems.append(("bad_header", f"the keys before traceEvents are not valid JSON: {e}",
                                         base + i))
            pos = m.end()
        else:
            out.layout = "not_json"
            out.truncated_at = base + i
            return

        # -- the event array ----------------------------------------------------------
        pos = _skip_ws(buf, pos)
        while True:
            got = _complete_events(buf, pos, len(buf), self.columns)
            if got is not None:
                evs, typed, nxt = got
                got = None
                yield Chunk(evs, base + pos, typed)
                evs = None               # not kept while the next block is read
                pos = nxt
            more = b"" if eof else self._read()
            if not more:
                eof = True
                break
            buf = buf[pos:] + more       # keep only what was not used yet
            base += pos
            pos = 0

        # -- the rest: last events, end of array, trailer, or a cut ------------------------
        rest = buf[pos:]
        out.bytes_total = base + len(buf)
        stripped = rest.strip(_WS)
        if stripped.startswith(b"]"):       # an empty array or a trailing comma before ]
            self._trailer(stripped[1:], base + pos)
            out.closed = True
            return
        j = rest.find(b"]")
        while j >= 0:
            k = j - 1
            while k >= 0 and rest[k] in _WS:
                k -= 1
            if k >= 0 and rest[k] == 0x7D:
                evs, typed = _parse_array(rest, 0, k + 1)
                if evs is not None:
                    yield Chunk(evs, base + pos, typed)
                    out.closed = True
                    self._trailer(rest[j + 1:], base + pos + j + 1)
                    return
            j = rest.find(b"]", j + 1)
        # truncated: try the last started event alone
        body = stripped.rstrip(b",").rstrip(_WS)
        if body:
            evs, typed = _parse_array(body)
            if evs is not None:
                yield Chunk(evs, base + pos, typed)
                out.truncated_at = base + len(buf)
            else:
                out.truncated_at = base + pos
                out.truncated_text = rest[:200].decode("utf-8", "replace")
        else:
            out.truncated_at = base + len(buf)

    def _trailer(self, tail: bytes, offset: int) -> None:
        t = tail.strip(_WS)
        if t.startswith(b","):
            t = t[1:].strip(_WS)
        if self.outcome.layout == "array":
            if t:
                self.outcome.problems.append(("trailing_data", "data after the event array", offset))
            return
        if not t or t == b"}":
            return
        try:
            v = orjson.loads(b"{" + t)
            if isinstance(v, dict):
                self.outcome.trailer = v
        except orjson.JSONDecodeError as e:
            self.outcome.problems.append(("bad_trailer", f"the keys after traceEvents are not complete JSON: {e}",
                                          offset))
