"""Exports of an analysed incident, for the tools people already use (the service layer).

An export format is a module: every module of :mod:`aftertrace.analysis.export`, and the report's
own renderer :mod:`aftertrace.web.report_render`, that declares ``EXPORT`` (its name, the file
ending it is known by, its media type, what it holds, whether it takes a window, other names it
answers to) and ``export(src, out, start, end, progress) -> stats`` is one; adding a format is
adding such a module. The formats today:

=========  =========================================================  =================
format     what                                                       file
=========  =========================================================  =================
perfetto   Perfetto protobuf trace: host -> process/rank -> thread    ``.pftrace``
           tracks, spans, counters, perf samples, the findings
chrome     Chrome trace JSON of every rank merged on the aligned      ``.json``
           clock (chrome://tracing, Perfetto's JSON importer)
folded     collapsed stacks of the perf samples in a window           ``.folded``
           (``frame;frame;frame count``: flamegraph.pl, speedscope)
speedscope the perf samples in a window as speedscope's file: one       ``.speedscope.json``
           profile per process, in time order (www.speedscope.app)
html       the report as one self-contained file: chain, findings,    ``.html``
           the trace viewer on one window and the flame graph
=========  =========================================================  =================

``collapsed`` is accepted for ``folded`` (the name DESIGN.md's API uses). What a writer may ask
of the incident is :class:`ExportSource`. The CLI writes to the file the user names; the HTTP
route writes into the incident's own folder (``exports/``) and sends that file, so nothing lands
outside it. The modules are looked for on first use (the commands that do not export do not
load them).
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

from aftertrace.ingest.bundle import disk_full, is_disk_full

from .errors import BadRequest, read_as

if TYPE_CHECKING:      # (the command line reads the formats without loading the queries' modules)
    from .queries import Queries
    from .settings import Settings

Progress = Callable[[int, int], None]
# where the format modules are: every module of these packages, and these modules
_PACKAGES = ("aftertrace.analysis.export",)
_MODULES = ("aftertrace.web.report_render",)


@dataclass(frozen=True)
class ExportFormat:
    """One export format, as its module declares it (``EXPORT``) with its writer (``export``)."""
    name: str
    suffix: str                 # the file ending it is known by (the longest that fits wins)
    media_type: str
    what: str                   # one line: what the file holds, for which tool
    write: Callable[..., dict]  # (src, out, start, end, progress) -> what was written
    windowed: bool = False      # takes a window (start, end); else the whole incident
    aliases: tuple[str, ...] = ()


@functools.cache
def formats() -> dict[str, ExportFormat]:
    """Every export format, by name."""
    mods = [importlib.import_module(f"{pkg}.{info.name}") for pkg in _PACKAGES
            for info in sorted(pkgutil.iter_modules(importlib.import_module(pkg).__path__), key=lambda i: i.name)]
    mods += [importlib.import_module(m) for m in _MODULES]
    out: dict[str, ExportFormat] = {}
    for mod in mods:
        decl = getattr(mod, "EXPORT", None)
        if decl is None:
            continue
        f = ExportFormat(write=mod.export, **decl)
        if f.name in out:
            raise ValueError(f"two export formats named {f.name!r} ({mod.__name__})")
        out[f.name] = f
    return dict(sorted(out.items()))


def format_of(path: str | os.PathLike) -> str:
    """The export format a file name asks for, by its ending (the longest that fits), or ''."""
    name = os.fspath(path).lower()
    fits = [(len(f.suffix), f.name) for f in formats().values() if name.endswith(f.suffix)]
    return max(fits)[1] if fits else ""


def normalize(fmt: str) -> str:
    """The name of the format ``fmt`` names (its name or another it answers to)."""
    f = (fmt or "").lower()
    known = formats()
    f = next((x.name for x in known.values() if f in x.aliases), f)
    if f not in known:
        others = sorted(a for x in known.values() for a in x.aliases)
        raise BadRequest(f"unknown export format {fmt!r}: use one of {', '.join(known)}"
                         + (f" (or {', '.join(others)})" if others else ""))
    return f


class ExportSource:
    """What a format's writer may ask of the incident it exports."""

    def __init__(self, queries: Queries, incident_id: str):
        self._q = queries
        self.store = queries.store
        self.incident_id = incident_id

    def report(self) -> dict:
        return self._q.get_report(self.incident_id)

    def timeline(self, start: str | None, end: str | None) -> dict:
        return self._q.timeline(self.incident_id, start, end)

    def flamegraph(self, start: str | None, end: str | None) -> dict:
        return self._q.flamegraph(self.incident_id, start, end)

    def window(self, start: str | None, end: str | None):
        """The window as the flame graph's filter (a bad time is the request's fault)."""
        from aftertrace.analysis import flamegraph as fgm
        with read_as("the window"):
            return fgm.Filter(fgm.parse_time(start), fgm.parse_time(end))

    def rank_processes(self) -> dict[int, dict]:
        return self._q.rank_processes(self.incident_id)


class Exports:
    """Exports of analysed incidents (a part of :class:`server.service.Service`, built over its
    settings and its :class:`server.queries.Queries`)."""

    def __init__(self, settings: Settings, queries: Queries):
        self.settings = settings
        self.queries = queries

    def export(self, incident_id: str, fmt: str, out: BinaryIO, start: str | None = None,
               end: str | None = None, progress: Progress | None = None) -> dict:
        """Write one export to ``out``; returns what was written (counts, window)."""
        f = formats()[normalize(fmt)]
        iid = self.queries.analysed_incident(incident_id)
        if not f.windowed and (start or end):
            windowed = [x.name for x in formats().values() if x.windowed]
            raise BadRequest(f"{f.name} exports the whole incident; a window applies to {', '.join(windowed)}")
        return f.write(ExportSource(self.queries, iid), out, start, end, progress)

    def export_file(self, incident_id: str, fmt: str, start: str | None = None, end: str | None = None) -> Path:
        """Write an export into the incident's folder (``exports/``) and return its path. Written
        to a temporary name first: a failed export leaves no half file behind."""
        fmt = normalize(fmt)
        iid = self.queries.analysed_incident(incident_id)
        folder = self.settings.incident_dir(iid) / "exports"
        window = "" if not (start or end) else "-window"
        path = folder / f"aftertrace-{iid}{window}{formats()[fmt].suffix}"
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                self.export(iid, fmt, fh, start, end)
            os.replace(tmp, path)
        except OSError as e:
            if is_disk_full(e):
                raise disk_full(f"the {fmt} export of incident {iid}") from None
            raise
        finally:
            tmp.unlink(missing_ok=True)
        return path
