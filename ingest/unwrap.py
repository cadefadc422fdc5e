"""Wrappers around log lines: what people's tools put in front of the lines a parser knows.

A kernel log captured by a container runtime, a training log pasted with line numbers, a log
indented by a Markdown paste: each line is the format's own line behind a *wrapper*. Detection
(:meth:`ingest.registry.Registry.detect`) first asks the parsers about the file as it is; only
when none claims it does it peel wrappers off the head's lines, one layer at a time, and ask
again after each layer. The layers that made a parser claim the file travel with the parse job
(``ParseJob.unwrap``) and :meth:`ingest.registry.ParseContext.open` peels the same layers off
every line of the file as it is read, so the parser sees exactly the lines detection saw.
Line numbers do not change (one line in, one line out), so evidence still points into the file
as uploaded; the source's ``attrs.unwrapped`` names the layers.

A layer is peeled when it is on at least ``SHARE`` of the head's non-blank lines (a wrapper is
on every line its tool wrote; a paste may hold a few lines from elsewhere). Lines without it
are kept as they are. When that finds nothing, the wrappers only a tool writes
(``MACHINE_WRAPPERS``: a syslog prefix, docker/CRI/logfmt envelopes, stamps, quotes) are tried
again on ``MIXED_SHARE`` of the lines: a console capture where raw kernel lines and their syslog
copies alternate is one kernel log once the copies lose their prefix.

A terminal's cut is undone before any wrapper is peeled (layer ``cut:W``, see :func:`terminal_width`):
a log copied from a terminal W columns wide has every longer line broken into W-character pieces,
mid-word, and no parser knows the pieces. The piece that follows a full-width line is joined back
onto it; the line it came from is not handed to the parser (``JOINED``), so line numbers still do
not change.

Worked example (an excerpt pasted into an issue, with the log's line numbers in front)::

    [80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught ...
    [80747] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught ...

No parser claims the lines as they are. ``bracket_number`` is on both lines: peeled, the lines
begin ``[rank0]:[E321 ...`` and the training-log parser claims them (its own ``[rankN]:``
prefix gives the rank). ``[rank0]:`` is not peeled: detection stopped at the first layer that
made a parser claim the file.
"""
from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Callable

from .reader import MadeAheadRaw

SHARE = 0.8
MAX_LAYERS = 4


@dataclass(frozen=True)
class Wrapper:
    name: str
    description: str
    prefix: re.Pattern | None = None          # a prefix to drop (anchored at the line's start)
    transform: Callable[[str], str | None] | None = None   # or: the inner line (None: not this wrapper)
    example: str = ""

    def peel(self, line: str) -> str | None:
        """The line without this wrapper, or None when the line does not carry it."""
        if self.transform is not None:
            return self.transform(line)
        m = self.prefix.match(line)
        return line[m.end():] if m else None


def _docker_json(line: str) -> str | None:
    """``docker``'s json-file log driver: one JSON object per line, the line in ``log``."""
    if not line.startswith('{"log":'):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    log = obj.get("log") if isinstance(obj, dict) else None
    return log.rstrip("\n") if isinstance(log, str) else None


_LOGFMT_MSG = re.compile(r'(?:^|\s)msg="((?:[^"\\]|\\.)*)"')


def _logfmt_msg(line: str) -> str | None:
    """logrus / logfmt lines (containerd, kata, CRI-O): the quoted ``msg=`` value, unescaped."""
    if "msg=" not in line or not (line.startswith("time=") or line.startswith("level=")):
        return None
    m = _LOGFMT_MSG.search(line)
    if not m:
        return None
    try:
        return json.loads('"' + m.group(1) + '"')
    except ValueError:
        return m.group(1)


_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
# any month name of a locale (letters, maybe a dot): "Jan", "Dez", "déc.", "мая"
_MONTH = r"[^\W\d_]{3,5}\.?"

WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper("quote", "a quoted paste (e-mail or Markdown '> ')", re.compile(r"> ?"), example="> msg"),
    Wrapper("docker_json", "docker json-file log driver ({\"log\":...,\"stream\":...,\"time\":...})",
            transform=_docker_json, example='{"log":"[  1.2] x\\n","stream":"stdout","time":"2024-01-01T00:00:00Z"}'),
    Wrapper("cri", "containerd / CRI-O container log (time, stream, partial flag)",
            re.compile(_ISO + r" (?:stdout|stderr) [FP] "), example="2024-01-01T00:00:00.1Z stdout F msg"),
    Wrapper("logfmt_msg", "logrus/logfmt line (time=... level=... msg=\"...\"): the msg value",
            transform=_logfmt_msg, example='time="2019-03-12T10:00:00Z" level=debug msg="[ 1.2] x"'),
    Wrapper("iso_stamp", "a wall-clock stamp in front (kubectl logs --timestamps, docker logs -t, ts)",
            re.compile(r"\[?" + _ISO + r"\]?:? "), example="2024-01-01T00:00:00.123456789Z msg"),
    Wrapper("syslog_kernel", "a syslog prefix (any locale's month, host, facility.level) before "
            "kernel messages that carry their own [uptime]",
            re.compile(r"(?:[^\W\d_]{3}\.? )?" + _MONTH + r" {1,2}\d{1,2},? \d\d:\d\d:\d\d(?: \d{4})? "
                       r"(?:\S+ )?(?:kern\.\w+ )?kernel: (?=\[)"),
            example="Jan  1 00:00:12 host kern.err kernel: [   12.345] msg"),
    Wrapper("cat_n", "line numbers from cat -n / nl", re.compile(r" {0,8}\d{1,9}\t"), example="    12\tmsg"),
    Wrapper("bracket_number", "a number in brackets (line number or pid)", re.compile(r"\[\d{1,10}\] ?"),
            example="[80746] msg"),
    Wrapper("number_bar", "a line number and a bar", re.compile(r" {0,8}\d{1,9} ?[|│] ?"), example="12 | msg"),
    Wrapper("bracket_tag", "a repeated tag in brackets ([node-3], [worker:1])",
            re.compile(r"\[(?!\s*\d+\.\d+\])[^\]\s][^\]]{0,39}\]:? ?"), example="[node-3] msg"),
    Wrapper("host_label", "a host or task label (pdsh, parallel-ssh, docker compose)",
            re.compile(r"[A-Za-z][\w.@-]{0,62}(?: +\| |: )"), example="node-3: msg"),
)
_BY_NAME = {w.name: w for w in WRAPPERS}

# Wrappers a tool writes and nothing else looks like: peeled even when only some of the lines carry
# them (a console capture where raw printk lines and their syslog copies alternate), once peeling
# them off every line that has them, and no more, lets a parser claim the file.
MIXED_SHARE = 0.3
MACHINE_WRAPPERS = ("quote", "docker_json", "cri", "logfmt_msg", "iso_stamp", "syslog_kernel")


def _indent(width: int) -> Wrapper:
    return Wrapper(f"indent:{width}", f"{width} columns of indentation on every line (a quoted paste)",
                   re.compile(r"[ \t]{0,%d}" % width))


def wrapper(name: str) -> Wrapper:
    if name.startswith("indent:"):
        return _indent(int(name.split(":", 1)[1]))
    return _BY_NAME[name]


def _common_indent(lines: list[str]) -> int:
    widths = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
    return min(widths) if widths else 0


def layers(lines: list[str], share: float = SHARE, only: tuple[str, ...] | None = None):
    """Yield (names, lines) after each wrapper layer peeled off ``lines`` (the head's non-blank
    lines), outermost first; at most ``MAX_LAYERS``. A layer is on at least ``share`` of the lines;
    ``only`` limits the wrappers tried (by name)."""
    names: list[str] = []
    cur = [ln for ln in lines if ln.strip()]
    for _ in range(MAX_LAYERS):
        if not cur:
            return
        found = None
        ind = _common_indent(cur) if only is None else 0
        if ind:
            found = _indent(ind)
        else:
            for w in WRAPPERS:
                if only is not None and w.name not in only:
                    continue
                peeled = [w.peel(ln) for ln in cur]
                hits = sum(p is not None for p in peeled)
                if hits >= 2 and hits >= share * len(cur):
                    if w.name in ("bracket_tag", "host_label") and not _repeated(w, cur):
                        continue
                    found = w
                    break
        if found is None:
            return
        names.append(found.name)
        cur = [p if (p := found.peel(ln)) is not None else ln for ln in cur]
        cur = [ln for ln in cur if ln.strip()]
        yield tuple(names), cur


def _repeated(w: Wrapper, lines: list[str]) -> bool:
    """A free-form tag is a wrapper only when a few values repeat (a tag per node or task), not
    when every line starts with a different word."""
    vals = [ln[:m.end()] for ln in lines if (m := w.prefix.match(ln))]
    return len(set(vals)) <= max(1, min(64, len(vals) // 3))


CUT_MIN_WIDTH = 60
MAX_PIECES = 256            # pieces joined into one line at most (a line is bounded, whatever the file holds)
_BORDERS = ("|", "+", "│", "┃", "┼", "├", "┤", "╋")
# What stands, while parsing, where a piece was joined onto the line above: ParseContext drops these
# lines, so the parsers never see them and every other line keeps its number.
JOINED = "\x1ejoined onto the line above\x1e"


def _continues(line: str, nxt: str, width: int, head: str | None = None) -> bool:
    """Whether ``nxt`` is the rest of ``line``, cut by a terminal ``width`` columns wide: ``line`` fills
    the width and ``nxt`` does not start a record like ``head`` (the line being joined, of which
    ``line`` is the last piece) does (same first characters), is not blank, and neither is ``line``
    a table's row (it ends in a border and ``nxt`` starts with one) nor padded with spaces to the
    width (a console that pads)."""
    head = line if head is None else head
    return (len(line) == width and bool(nxt.strip()) and not _same_start(nxt, head) and not line.endswith("  ")
            and not (line[-1:] in _BORDERS and nxt[:1] in _BORDERS))


_DIGITS = str.maketrans("123456789", "000000000")


def _same_start(a: str, b: str) -> bool:
    """Whether two lines start alike: the same first characters, or, for lines that open with a
    number (a process id, a time), the same shape of their first eight (digits as digits): the
    threads of an ``strace -f`` trace, ``12671 16:41:11.367475 futex(`` and ``12611 16:41:11.367607
    restart_syscall(``, each start a record."""
    if a[:4] == b[:4]:
        return True
    return a[:1].isdigit() and b[:1].isdigit() and a[:8].translate(_DIGITS) == b[:8].translate(_DIGITS)


def terminal_width(lines: list[str]) -> int | None:
    """The width of the terminal that cut ``lines`` (a head's lines), or None when nothing was cut.

    A terminal breaks every line longer than its width W into pieces of exactly W characters, so in
    a copied log the longest length is W, many different lines have exactly that length (more than
    in the few lengths just under it, where a log's own line ends would spread), and most of them go
    on in the next line (see :func:`_continues`). Lines all as long as the widest by nature (a
    table's rows, a template repeated) fail the last test: the next line starts like them.

    Worked example, the recorded torchrun log ``tests/data/app_log/torchrun_mismatch.log`` as an
    80-column terminal shows it (its lines 455-456 once cut)::

        [default0]:[rank0]: RuntimeError: Detected mismatch between collectives on ranks
        . Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=20, OpType=

    Hundreds of lines are exactly 80 characters long, only a few are 72-79, and nearly every
    80-character line goes on in the next: 80. Its first line, ``[I1129 13:41:08.365019050
    debug.cpp:48] [c10d] The debug level is set to DETAIL.``, is 80 characters by itself, and the
    next line starts like it (``[I11``): it is not joined. The log as written gives None: its
    longest line is one of a kind.
    """
    # (every file's head passes here: the blank test, a copy of the line, only where it can matter)
    width = nonblank = 0
    for ln in lines:
        if (nonblank < 4 or len(ln) > width) and ln.strip():
            nonblank += 1
            width = max(width, len(ln))
    if nonblank < 4 or width < CUT_MIN_WIDTH:
        return None
    full = [ln for ln in lines if len(ln) == width]
    if len(set(full)) < 3 or len(full) <= sum(1 for ln in lines if width - 8 <= len(ln) < width and ln.strip()):
        return None
    cut = sum(1 for a, b in zip(lines, lines[1:]) if _continues(a, b, width))
    return width if cut >= 3 and cut >= 0.5 * len(full) else None


def rejoin(lines: list[str], width: int) -> list[str]:
    """``lines`` with each terminal cut joined back (see :func:`terminal_width`): the joined line
    stands where it started, and each piece joined onto it leaves an empty line (same count)."""
    out, i, n = [], 0, len(lines)
    while i < n:
        line, j = lines[i], i + 1
        while j < n and j - i < MAX_PIECES and _continues(lines[j - 1], lines[j], width, line):
            line += lines[j]
            j += 1
        out.append(line)
        out.extend([""] * (j - i - 1))
        i = j
    return out


def describe(names, from_line: int | None = None) -> list[str]:
    """What was undone to read a file, in words (the source's ``unwrapped`` and ``format_from_line``)."""
    out = []
    for n in names or ():
        if n.startswith("cut:"):
            out.append(f"lines a terminal cut at {n.split(':', 1)[1]} columns joined back")
        else:
            out.append(f"peeled off: {wrapper(n).description}")
    if from_line and from_line > 1:
        out.append(f"the format starts at line {from_line} (a preamble before it)")
    return out


def cut_width(names: tuple[str, ...]) -> int | None:
    """The terminal width of a ``cut:W`` layer among ``names``, if there is one."""
    for n in names:
        if n.startswith("cut:"):
            return int(n.split(":", 1)[1])
    return None


def peel_line(line: str, names: tuple[str, ...]) -> str:
    for n in names:
        if n.startswith("cut:"):
            continue
        p = wrapper(n).peel(line)
        if p is not None:
            line = p
    return line


class UnwrapRaw(MadeAheadRaw):
    """A binary stream of ``inner``'s lines with the layers ``names`` undone on each: a terminal's
    cut (``cut:W``) first, then the wrappers peeled.

    ``count`` is the inner stream's (decompressed bytes read), so byte accounting and the size
    limit stay those of the file as uploaded."""

    def __init__(self, inner, names: tuple[str, ...]):
        self._inner = inner
        self._ws = [wrapper(n) for n in names if not n.startswith("cut:")]
        self._width = cut_width(names)
        self._ahead = None          # (with a cut layer) the next line, read to see if it continues this one

    @property
    def count(self) -> int:
        return self._inner.raw.count

    def _line(self):
        """The next line as (text, CR, newline), or its raw bytes when it is not UTF-8, or None at the end."""
        if self._ahead is not None:
            got, self._ahead = self._ahead, None
            return got
        raw = self._inner.readline()
        if not raw:
            return None
        end = b"\n" if raw.endswith(b"\n") else b""
        line = raw[:-1] if end else raw
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return raw
        cr = text.endswith("\r")
        return (text[:-1] if cr else text), cr, end

    def _fill(self, want: int) -> None:
        while not self._out:
            got = self._line()
            if got is None:
                return
            if isinstance(got, bytes):
                self._out = got          # (the parser counts it as undecodable, as it would have)
                return
            text, cr, end = got
            joined, piece = 0, text
            if self._width is not None:
                while joined + 1 < MAX_PIECES:
                    nxt = self._line()
                    if isinstance(nxt, tuple) and _continues(piece, nxt[0], self._width, text):
                        piece = nxt[0]
                        text += piece
                        cr, end = nxt[1], nxt[2]
                        joined += 1
                        continue
                    self._ahead = nxt
                    break
            for w in self._ws:
                p = w.peel(text)
                if p is not None:
                    text = p
            # a peeled value may hold newlines of its own (a JSON "log" value): one line out per line in
            self._out = (text.replace("\r", "").replace("\n", " ").encode("utf-8") + (b"\r" if cr else b"")
                         + end + (JOINED + ("\r\n" if cr else "\n")).encode("utf-8") * joined)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def open_unwrapped(inner, names: tuple[str, ...]):
    return io.BufferedReader(UnwrapRaw(inner, names), buffer_size=1 << 20)
