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


def peel_line(line: str, names: tuple[str, ...]) -> str:
    for n in names:
        p = wrapper(n).peel(line)
        if p is not None:
            line = p
    return line


class UnwrapRaw(MadeAheadRaw):
    """A binary stream of ``inner``'s lines with the wrapper layers ``names`` peeled off each.

    ``count`` is the inner stream's (decompressed bytes read), so byte accounting and the size
    limit stay those of the file as uploaded."""

    def __init__(self, inner, names: tuple[str, ...]):
        self._inner = inner
        self._ws = [wrapper(n) for n in names]

    @property
    def count(self) -> int:
        return self._inner.raw.count

    def _fill(self, want: int) -> None:
        while not self._out:
            raw = self._inner.readline()
            if not raw:
                return
            end = b"\n" if raw.endswith(b"\n") else b""
            line = raw[:-1] if end else raw
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self._out = raw          # (the parser counts it as undecodable, as it would have)
                return
            cr = text.endswith("\r")
            if cr:
                text = text[:-1]
            for w in self._ws:
                p = w.peel(text)
                if p is not None:
                    text = p
            # a peeled value may hold newlines of its own (a JSON "log" value): one line out per line in
            self._out = text.replace("\r", "").replace("\n", " ").encode("utf-8") + (b"\r" if cr else b"") + end

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def open_unwrapped(inner, names: tuple[str, ...]):
    return io.BufferedReader(UnwrapRaw(inner, names), buffer_size=1 << 20)
