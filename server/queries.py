"""Read-side service calls over the store (part of the service layer; no FastAPI here)."""
from __future__ import annotations

from analysis import flamegraph as fg
from ingest.timeparse import fmt_utc


class NotFoundError(LookupError):
    pass


class Queries:
    """Mixed into :class:`server.service.Service`; uses ``self.store``."""

    def resolve_incident(self, ref: str) -> str:
        """An incident id from an id or a unique prefix of one."""
        rows = self.store.query("SELECT incident_id FROM incidents WHERE incident_id LIKE ? || '%'", [ref])
        if len(rows) == 1:
            return rows[0]["incident_id"]
        if not rows:
            raise NotFoundError(f"no incident {ref!r}")
        raise NotFoundError(f"{ref!r} matches {len(rows)} incidents; give more of the id")

    def clock_table(self, incident_id: str) -> list[dict]:
        """clock_map rows of the incident with the number of sources each one places."""
        return self.store.query(
            """SELECT c.host, c.domain, c.offset_ns, c.uncertainty_ns, c.method, c.evidence,
                      (SELECT count(*) FROM sources s WHERE s.incident_id = c.incident_id
                         AND COALESCE(s.host, '') = c.host AND s.clock_domain = c.domain) AS sources
               FROM clock_map c WHERE c.incident_id = ? ORDER BY c.host, c.domain""",
            [self.resolve_incident(incident_id)])

    def flamegraph(self, incident_id: str, start: str | None = None, end: str | None = None,
                   host: str | None = None, pid: int | None = None, comm: str | None = None,
                   event: str | None = None, weight: str = "samples",
                   baseline_start: str | None = None, baseline_end: str | None = None) -> dict:
        """The stack tree of the samples in a window; with a baseline window, a differential tree."""
        incident_id = self.resolve_incident(incident_id)
        if weight not in ("samples", "period"):
            raise ValueError("weight must be 'samples' or 'period'")
        f = fg.Filter(fg.parse_time(start), fg.parse_time(end), host or None, pid, comm or None,
                      event or None, weight)
        base = None
        if baseline_start or baseline_end:
            base = fg.Filter(fg.parse_time(baseline_start), fg.parse_time(baseline_end), host or None, pid,
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
        }
