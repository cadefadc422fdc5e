"""Exports of an analysed incident, for the tools people already use (the service layer).

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

``collapsed`` is accepted for ``folded`` (the name DESIGN.md's API uses). The CLI writes to the
file the user names; the HTTP route writes into the incident's own folder (``exports/``) and
sends that file, so nothing lands outside it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable

from aftertrace.ingest.bundle import disk_full, is_disk_full

from .errors import BadRequest, read_as

FORMATS = {"perfetto": ".pftrace", "chrome": ".json", "folded": ".folded", "speedscope": ".speedscope.json",
           "html": ".html"}
ALIASES = {"collapsed": "folded", "pftrace": "perfetto", "json": "chrome"}
MEDIA_TYPES = {"perfetto": "application/octet-stream", "chrome": "application/json",
               "folded": "text/plain; charset=utf-8", "speedscope": "application/json",
               "html": "text/html; charset=utf-8"}

Progress = Callable[[int, int], None]


def format_of(path: str | os.PathLike) -> str:
    """The export format a file name asks for, by its ending (the longest that fits), or ''."""
    name = os.fspath(path).lower()
    fits = [(len(ext), f) for f, ext in FORMATS.items() if name.endswith(ext)]
    return max(fits)[1] if fits else ""


def normalize(fmt: str) -> str:
    f = ALIASES.get((fmt or "").lower(), (fmt or "").lower())
    if f not in FORMATS:
        raise BadRequest(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)} (or collapsed)")
    return f


class Exports:
    """Mixed into :class:`server.service.Service` (needs ``store``, ``settings``, ``timeline``,
    ``flamegraph``, ``get_report``, ``resolve_incident``)."""

    def export(self, incident_id: str, fmt: str, out: BinaryIO, start: str | None = None,
               end: str | None = None, progress: Progress | None = None) -> dict:
        """Write one export to ``out``; returns what was written (counts, window)."""
        fmt = normalize(fmt)
        iid = self.analysed_incident(incident_id)
        if fmt in ("perfetto", "chrome"):
            if start or end:
                raise BadRequest(f"{fmt} exports the whole incident; a window applies to folded, speedscope and html")
            from aftertrace.analysis.export import chrome, perfetto
            return (perfetto if fmt == "perfetto" else chrome).write(self.store, iid, out, progress)
        if fmt == "speedscope":
            from aftertrace.analysis import flamegraph as fgm
            from aftertrace.analysis.export import speedscope
            with read_as("the window"):
                f = fgm.Filter(fgm.parse_time(start), fgm.parse_time(end))
            return dict(speedscope.write(self.store, iid, out, f, f"aftertrace incident {iid}",
                                         self._rank_processes(iid)), window={"start": start, "end": end})
        if fmt == "folded":
            fg = self.flamegraph(iid, start, end)
            text = "".join(line + "\n" for line in fg["folded"])
            out.write(text.encode("utf-8"))
            return {"format": fmt, "samples": fg["tree"]["value"], "stacks": len(fg["folded"]),
                    "samples_total": fg["samples_total"], "window": fg["filter"]}
        return self._export_html(iid, out, start, end)

    def _export_html(self, iid: str, out: BinaryIO, start: str | None, end: str | None) -> dict:
        from aftertrace.web import report_render
        from aftertrace.web.flamegraph import flame_subtitle
        rep = self.get_report(iid)
        try:
            tl = self.timeline(iid, start, end)
        except ValueError:
            if start is not None or end is not None:
                raise
            # nothing could be placed in time (pasted text, a lone snapshot): the report alone
            text = report_render.html(rep)
            out.write(text.encode("utf-8"))
            return {"format": "html", "bytes": len(text.encode("utf-8")), "window": None, "tracks": 0, "samples": 0}
        fg = self.flamegraph(iid, tl["start"], tl["end"])
        whole = False
        if fg["tree"]["value"] == 0 and fg["samples_total"] > 0:    # no samples in the window: all of them
            fg, whole = self.flamegraph(iid), True
        flame = None
        if fg["tree"]["value"]:
            sub = flame_subtitle(fg) + (" · the whole recording (none in the timeline's window)" if whole else "")
            flame = {"tree": fg["tree"], "title": "perf samples", "subtitle": sub, "diff": False}
        text = report_render.html(rep, timeline=tl, flame=flame)
        out.write(text.encode("utf-8"))
        return {"format": "html", "bytes": len(text.encode("utf-8")), "window": {"start": tl["start"], "end": tl["end"]},
                "tracks": len(tl["data"]), "samples": fg["tree"]["value"]}

    def export_file(self, incident_id: str, fmt: str, start: str | None = None, end: str | None = None) -> Path:
        """Write an export into the incident's folder (``exports/``) and return its path. Written
        to a temporary name first: a failed export leaves no half file behind."""
        fmt = normalize(fmt)
        iid = self.analysed_incident(incident_id)
        folder = self.settings.incident_dir(iid) / "exports"
        window = "" if not (start or end) else "-window"
        path = folder / f"aftertrace-{iid}{window}{FORMATS[fmt]}"
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
