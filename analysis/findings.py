"""Findings read directly from typed events (first cut: the kernel's OOM kills).

The same kill is often in the bundle twice (raw ``dmesg`` and ``dmesg -T``, or
dmesg and journald): kills of one pid on one host within ``DEDUP_WINDOW_NS``
are one finding, timed by the copy with the best-placed clock, with every copy
kept as evidence.
"""
from __future__ import annotations

import json

from .links import Evidence, Link, LinkKind, Provenance

DEDUP_WINDOW_NS = 5_000_000_000


def _kib(n: int | None) -> str:
    if n is None:
        return "?"
    b = n * 1024
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{b} B"
        b /= 1024
    return str(n)


def oom_kills(store, incident_id: str) -> list[Link]:
    rows = store.query(
        """SELECT e.ts_utc_ns, e.ts_raw_ns, COALESCE(e.host, s.host) AS host, e.pid, e.line, e.text,
                  e.attrs, s.path, s.clock_domain, c.uncertainty_ns
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                AND c.domain = s.clock_domain
           WHERE e.incident_id = ? AND e.kind = 'oom_kill'
           ORDER BY e.ts_utc_ns NULLS LAST""", [incident_id])
    groups: list[list[dict]] = []
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
        for g in groups:
            g0 = g[0]
            if g0["host"] == r["host"] and g0["pid"] == r["pid"] and (
                    g0["ts_utc_ns"] is None or r["ts_utc_ns"] is None
                    or abs(g0["ts_utc_ns"] - r["ts_utc_ns"]) <= DEDUP_WINDOW_NS):
                g.append(r)
                break
        else:
            groups.append([r])
    links = []
    for g in groups:
        placed = [r for r in g if r["ts_utc_ns"] is not None]
        best = min(placed, key=lambda r: (r["uncertainty_ns"] is None, r["uncertainty_ns"] or 0)) if placed else g[0]
        a = best["attrs"]
        scope = "memory-cgroup OOM killer" if a.get("scope") == "memcg" else "kernel OOM killer"
        summary = (f"The {scope} killed pid {a.get('victim_pid')} ({a.get('victim_comm')}), "
                   f"anon-rss {_kib(a.get('anon_rss_kb'))}")
        if best["host"]:
            summary += f" on {best['host']}"
        links.append(Link(
            kind=LinkKind.OOM_KILL, ts_ns=best["ts_utc_ns"], summary=summary, source=best["path"],
            host=best["host"], pid=a.get("victim_pid"),
            evidence=tuple(Evidence(r["path"], r["line"], r["text"]) for r in g),
            provenance=Provenance.READ, confidence=1.0, uncertainty_ns=best["uncertainty_ns"]))
    return links


def typed_events(store, incident_id: str, skip: tuple[str, ...] = ("oom_kill",)) -> list[Link]:
    """Every event a parser typed (``events.kind`` set) becomes a finding read from the data.

    The summary is the event's ``attrs.summary`` when the parser wrote one, else its name and
    text. Kinds outside :class:`LinkKind` are kept out (and would be a parser bug).
    """
    rows = store.query(
        """SELECT e.ts_utc_ns, COALESCE(e.host, s.host) AS host, COALESCE(e.rank, s.rank) AS rank,
                  e.pid, e.line, e.text, e.name, e.kind, e.attrs, s.path, c.uncertainty_ns
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                AND c.domain = s.clock_domain
           WHERE e.incident_id = ? AND e.kind IS NOT NULL AND e.kind NOT IN (SELECT unnest(?))
           ORDER BY e.ts_utc_ns NULLS LAST, s.path, e.line""", [incident_id, list(skip)])
    known = {k.value for k in LinkKind}
    out = []
    for r in rows:
        if r["kind"] not in known:
            continue
        attrs = json.loads(r["attrs"]) if r["attrs"] else {}
        summary = attrs.get("summary") or f"{r['name']}: {(r['text'] or '')[:200]}"
        out.append(Link(kind=LinkKind(r["kind"]), ts_ns=r["ts_utc_ns"], summary=summary, source=r["path"],
                        host=r["host"], rank=r["rank"], pid=r["pid"],
                        evidence=(Evidence(r["path"], r["line"], r["text"] or ""),),
                        provenance=Provenance.READ, confidence=1.0, uncertainty_ns=r["uncertainty_ns"]))
    return out


def terminal_failure(links: list[Link]) -> Link | None:
    """The job's end as a launcher reported it: the last ``job_failure`` placed in time.

    (First cut: which rank started it and how it spread is the chain analysis's job.)
    """
    failures = [l for l in links if l.kind == LinkKind.JOB_FAILURE and l.ts_ns is not None]
    return max(failures, key=lambda l: l.ts_ns) if failures else None


def anomalies(store, incident_id: str) -> list[Link]:
    from .detectors import run as metric_detectors
    links = oom_kills(store, incident_id) + typed_events(store, incident_id)
    links = metric_detectors(store, incident_id, links)
    return sorted(links, key=lambda l: (l.ts_ns is None, l.ts_ns or 0))
