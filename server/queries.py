"""Read-side service calls over the store (part of the service layer; no FastAPI here)."""
from __future__ import annotations

import json

from aftertrace.analysis import flamegraph as fg
from aftertrace.analysis import timeline as tl
from aftertrace.ingest.timeparse import fmt_utc

from .errors import BadRequest, NotFound, NotReady, read_as
from .store import Store


# times beyond this (ns from 1970) are refused: the store's columns are 64-bit
_YEARS_9000 = 9000 * 365 * 86400 * 10**9


class Queries:
    """What an analysed incident's rows and report answer: its id from a reference, its report, clocks,
    flame graph and timeline (a part of :class:`server.service.Service`, built over its store)."""

    def __init__(self, store: Store):
        self.store = store
        self._bounds_cache: dict = {}
        self._tracks_cache: dict = {}

    def get_report(self, incident_id: str) -> dict:
        """The incident's report, once its analysis is done (:class:`NotReady` before)."""
        rows = self.store.query("SELECT status, report, error FROM incidents WHERE incident_id = ?",
                                [incident_id])
        if not rows:
            raise NotFound(f"no incident {incident_id!r}")
        if rows[0]["status"] != "done" or not rows[0]["report"]:
            raise NotReady.of(incident_id, rows[0]["status"], rows[0]["error"])
        return json.loads(rows[0]["report"])

    def resolve_incident(self, ref: str) -> str:
        """``ref`` when it is an incident's whole id (what the API and the pages name incidents by:
        a part of an id names none, so no id is found by trying its first characters)."""
        if not ref or not all(c in "0123456789abcdef" for c in ref) or not self.store.query(
                "SELECT 1 AS x FROM incidents WHERE incident_id = ?", [ref]):
            raise NotFound(f"no incident {ref!r}")
        return ref

    def complete_id(self, ref: str) -> str:
        """An incident id from an id or a unique prefix of one, for a person at the command line
        (ids are hex: anything else, LIKE's wildcards included, names no incident)."""
        if not ref or not all(c in "0123456789abcdef" for c in ref):
            raise NotFound(f"no incident {ref!r}")
        rows = self.store.query("SELECT incident_id FROM incidents WHERE incident_id LIKE ? || '%'", [ref])
        if len(rows) == 1:
            return rows[0]["incident_id"]
        if not rows:
            raise NotFound(f"no incident {ref!r}")
        raise NotFound(f"{ref!r} matches {len(rows)} incidents; give more of the id")

    def analysed_incident(self, ref: str) -> str:
        """:meth:`resolve_incident` for what only an analysed incident has (its rows, its report, its
        exports): one that is queued, being analysed or whose analysis failed has none of them to
        show (:class:`NotReady`, with its status and reason)."""
        row = self.store.query("SELECT status, error FROM incidents WHERE incident_id = ?", [ref]) \
            if ref and all(c in "0123456789abcdef" for c in ref) else []
        if not row:
            raise NotFound(f"no incident {ref!r}")
        if row[0]["status"] != "done":
            raise NotReady.of(ref, row[0]["status"], row[0]["error"])
        return ref

    def clock_table(self, incident_id: str) -> list[dict]:
        """clock_map rows of the incident with the number of sources each one places, and, for a
        clock that stepped, its stretches (``segments``, in raw-time order; empty otherwise)."""
        iid = self.analysed_incident(incident_id)
        rows = self.store.query(
            """SELECT c.host, c.domain, c.offset_ns, c.uncertainty_ns, c.method, c.evidence,
                      (SELECT count(*) FROM sources s WHERE s.incident_id = c.incident_id
                         AND COALESCE(s.host, '') = c.host AND s.clock_domain = c.domain) AS sources
               FROM clock_map c WHERE c.incident_id = ? ORDER BY c.host, c.domain""", [iid])
        segs: dict[tuple, list] = {}
        for g in self.store.query(
                """SELECT host, domain, from_ns, to_ns, offset_ns, uncertainty_ns, what FROM clock_segments
                   WHERE incident_id = ? ORDER BY host, domain, from_ns NULLS FIRST""", [iid]):
            segs.setdefault((g.pop("host"), g.pop("domain")), []).append(g)
        for r in rows:
            r["segments"] = segs.get((r["host"], r["domain"]), [])
        return rows

    def flamegraph(self, incident_id: str, start: str | None = None, end: str | None = None,
                   host: str | None = None, pid: int | None = None, comm: str | None = None,
                   event: str | None = None, weight: str = "samples",
                   baseline_start: str | None = None, baseline_end: str | None = None,
                   rank: int | None = None) -> dict:
        """The stack tree of the samples in a window; with a baseline window, a differential tree.
        ``rank`` stands for that rank's process (its host and pid, as the report's progress names them)."""
        incident_id = self.analysed_incident(incident_id)
        if weight not in ("samples", "period"):
            raise BadRequest("weight must be 'samples' or 'period'")
        ranks = self.rank_processes(incident_id)
        if rank is not None:
            if rank not in ranks:
                raise BadRequest(f"no process of rank {rank} is known in this incident")
            host, pid = host or ranks[rank]["host"], ranks[rank]["pid"]
        with read_as("the window"):
            s_ns, e_ns = fg.parse_time(start), fg.parse_time(end)
        with read_as("the baseline window"):
            b_lo, b_hi = fg.parse_time(baseline_start), fg.parse_time(baseline_end)
        f = fg.Filter(s_ns, e_ns, host or None, pid, comm or None,
                      event or None, weight)
        base = None
        if baseline_start or baseline_end:
            base = fg.Filter(b_lo, b_hi, host or None, pid,
                             comm or None, event or None, weight)
        root = fg.build(self.store, incident_id, f, base)
        span = self.store.query(
            """SELECT min(ts_utc_ns) AS a, max(ts_utc_ns) AS b, count(*) AS n,
                      count(*) FILTER (WHERE ts_utc_ns IS NULL) AS unplaced
               FROM samples WHERE incident_id = ?""", [incident_id])[0]
        return {
            "incident": incident_id,
            "filter": {"start": fmt_utc(f.start_ns), "end": fmt_utc(f.end_ns), "host": f.host, "pid": f.pid,
                       "comm": f.comm, "event": f.event, "weight": weight},
            "baseline": None if base is None else {"start": fmt_utc(base.start_ns), "end": fmt_utc(base.end_ns)},
            "samples_total": span["n"], "samples_unplaced": span["unplaced"],
            "time_range": {"start": fmt_utc(span["a"]), "end": fmt_utc(span["b"])},
            "tree": root.to_json(diff=base is not None),
            "folded": fg.folded(root, diff=base is not None),
            "choices": dict(fg.choices(self.store, incident_id, f),
                            ranks=[dict(v, rank=k) for k, v in sorted(ranks.items())]),
            "rank": rank,
        }

    def rank_processes(self, incident_id: str) -> dict[int, dict]:
        """rank -> {host, pid} of each rank whose process the report's progress names."""
        # (only the progress part of the report is read out of its JSON, not the whole document)
        row = self.store.query("SELECT json_extract(report, '$.progress')::VARCHAR AS p FROM incidents "
                               "WHERE incident_id = ?", [incident_id])
        progress = json.loads(row[0]["p"]) if row and row[0]["p"] else []
        return {p["rank"]: {"host": p.get("host"), "pid": p["pid"]} for p in progress or ()
                if p.get("rank") is not None and p.get("pid") is not None}

    def _bounds(self, incident_id: str) -> tuple[int | None, int | None]:
        """The incident's placed time range, computed once per incident and analysis."""
        cache = self._bounds_cache
        stamp = self.store.query("SELECT analyzed_at FROM incidents WHERE incident_id = ?", [incident_id])
        key = (incident_id, stamp[0]["analyzed_at"] if stamp else None)
        if key not in cache:
            cache[key] = tl.bounds(self.store, incident_id)
        return cache[key]

    def _tracks(self, incident_id: str, rep: dict | None) -> list[dict]:
        """The incident's track list, read once per incident and analysis (``rep``: its report,
        which says whose process a host's file of one process is)."""
        cache = self._tracks_cache
        stamp = self.store.query("SELECT analyzed_at FROM incidents WHERE incident_id = ?", [incident_id])
        key = (incident_id, stamp[0]["analyzed_at"] if stamp else None)
        if key not in cache:
            if len(cache) > 16:
                cache.clear()
            cat = tl.tracks(self.store, incident_id, rep)
            if not cat and self.store.query("SELECT 1 AS x FROM events WHERE incident_id = ? AND ts_utc_ns IS NOT NULL "
                                            "LIMIT 1", [incident_id]):
                # analysed by an aftertrace before tracks existed: make them now, once
                tl.build_tracks(self.store, incident_id)
                cat = tl.tracks(self.store, incident_id, rep)
            cache[key] = cat
        return cache[key]

    def default_window(self, incident_id: str, rep: dict | None) -> tuple[int | None, int | None]:
        """From 30 s before the best chain's origin to 15 s after the failure; else the whole incident."""
        lo, hi = self._bounds(incident_id)
        f = (rep or {}).get("failure") or {}
        o = (rep or {}).get("origin") or {}
        if f.get("ts") is not None:
            first = o.get("ts") if o.get("ts") is not None else f["ts"] - 60
            return round((first - 30) * 1e9), round((f["ts"] + 15) * 1e9)
        return lo, hi

    def timeline(self, incident_id: str, start: str | None = None, end: str | None = None,
                 tracks: str | None = None, metrics: str | None = None, px: int = 1600,
                 max_events: int = 2000, catalog: bool = True) -> dict:
        """One window of the trace viewer (see :mod:`analysis.timeline`): the requested tracks'
        spans and buckets at ``px`` pixels, the metric series, and the report's findings and chain
        to mark on it. With ``catalog`` also the incident's track list, its default window and the
        overview strip (what a viewer needs once)."""
        incident_id = self.analysed_incident(incident_id)
        rep = self.get_report(incident_id)
        lo, hi = self._bounds(incident_id)
        if lo is None or hi is None:
            raise BadRequest("nothing in this incident could be placed in time")
        d0, d1 = self.default_window(incident_id, rep)
        with read_as("the window"):
            s_ns, e_ns = fg.parse_time(start), fg.parse_time(end)
        s_ns = d0 if s_ns is None else s_ns
        e_ns = d1 if e_ns is None else e_ns
        if not (-_YEARS_9000 < s_ns < _YEARS_9000 and -_YEARS_9000 < e_ns < _YEARS_9000):
            raise BadRequest("the window is outside the years 1970 ± 9000")
        if e_ns <= s_ns:
            e_ns = s_ns + 1_000_000_000
        cat = self._tracks(incident_id, rep)
        if tracks is None or tracks == "":
            ids = tl.default_tracks(cat, 400)
        else:
            try:
                ids = tuple(sorted({int(x) for x in tracks.split(",") if x.strip()}))
            except ValueError:
                raise BadRequest("tracks must be a comma-separated list of track ids") from None
            ids = tuple(i for i in ids if 0 <= i < 2**31)      # (no track has another id)
        w = tl.Window(s_ns, e_ns, max(100, min(px, 8000)), max(10, min(max_events, 20_000)), ids,
                      metrics=tuple(x for x in metrics.split(",") if x) if metrics is not None else tl.DEFAULT_METRICS)
        out = tl.window(self.store, incident_id, w, lo)
        out["incident"] = incident_id
        out["origin"], out["origin_epoch_ns"] = fmt_utc(lo), str(lo)
        out["start"], out["end"] = fmt_utc(s_ns), fmt_utc(e_ns)
        out["bounds"] = {"start": fmt_utc(lo), "end": fmt_utc(hi), "rel": [0, hi - lo]}
        out["default_window"] = [d0 - lo, d1 - lo]
        out["tracks_answered"] = list(ids)
        f = (rep or {}).get("failure") or {}
        out["failure_rel"] = None if f.get("ts") is None else round(f["ts"] * 1e9) - lo
        # the best chain's links as the chain states them (a link's time may be refined from its
        # finding's), then the other findings; a finding the chain holds is not listed twice
        links = (rep or {}).get("chains", [{}])[0].get("links", []) if (rep or {}).get("chains") else []
        item = lambda a, i: {"t": round(a["ts"] * 1e9) - lo, "time": a["time"], "kind": a["kind"], "host": a["host"],
                             "rank": a["rank"], "pid": a["pid"], "summary": a["summary"],
                             "lead_s": a.get("lead_s"), "chain": i}
        on_chain = {(l["kind"], l["host"], l["rank"], l["pid"]) for l in links}
        out["findings"] = [item(l, i + 1) for i, l in enumerate(links) if l.get("ts") is not None] + [
            item(a, None) for a in (rep or {}).get("anomalies", [])
            if a.get("ts") is not None and (a["kind"], a["host"], a["rank"], a["pid"]) not in on_chain]
        if catalog:
            out["tracks"] = cat
            out["overview"] = tl.overview(self.store, incident_id, lo, hi)
        return out

    def timeline_detail(self, incident_id: str, track: int, t: int) -> dict:
        """The events of a track at one time (relative to the incident's origin, as the viewer has it)."""
        incident_id = self.analysed_incident(incident_id)
        lo, _ = self._bounds(incident_id)
        if lo is None:
            raise BadRequest("nothing in this incident could be placed in time")
        if not (0 <= track < 2**31 and -_YEARS_9000 < lo + t < _YEARS_9000):
            return {"incident": incident_id, "track": track, "events": []}
        rows = tl.detail(self.store, incident_id, track, lo + t)
        for r in rows:
            r["time"] = fmt_utc(r.pop("ts"))
        return {"incident": incident_id, "track": track, "events": rows}

