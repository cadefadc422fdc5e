"""The ``aftertrace.report/1`` document (DESIGN.md "Report JSON")."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import orjson

from aftertrace.ingest.unwrap import describe

from . import chains, narrative, progress
from .rootcause import RootCause

SCHEMA = "aftertrace.report/1"
ANALYSIS_VERSION = "0.2"

NO_CHAIN = ("no causal chain: no earlier finding could be connected to the failure by a known way "
            "failures propagate, so the failure is its own origin (see the findings and their lead times)")


def dumps(rep: dict, indent: bool = True) -> str:
    """The report as JSON text, indented by two spaces (``report.json``, the CLI's ``--json``) or
    without whitespace (the copy the store keeps).

    orjson writes a report of a bundle of thousands of sources in a few percent of the standard
    encoder's time (whose indented output is pure Python). Its text differs only in spelling
    (``1e-05`` is ``0.00001``; text is UTF-8, not ``\\u`` escapes; a NaN is ``null``, which
    the standard encoder would write as ``NaN``, no JSON): the same document. What orjson refuses
    (an integer beyond 64 bits) takes the standard encoder."""
    try:
        return orjson.dumps(rep, option=(orjson.OPT_INDENT_2 if indent else 0) | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(rep, indent=2) if indent else json.dumps(rep)


def iso_utc(dt) -> str | None:
    """A store's timestamp (naive: UTC) as the report writes times: ISO-8601 with ``Z``."""
    if dt is None:
        return None
    if isinstance(dt, datetime):
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return str(dt)


def sources_json(store, incident_id: str) -> list[dict]:
    rows = store.query(
        """SELECT s.source_id, s.path, s.kind, s.format, s.host, s.rank, s.pid, s.status, s.records,
                  s.issues, s.error, s.clock_domain, s.bytes, s.host_from, s.rank_from, s.attrs,
                  c.offset_ns, c.uncertainty_ns, c.method, c.drift_ppm
           FROM sources s LEFT JOIN clock_map c
             ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '') AND c.domain = s.clock_domain
           WHERE s.incident_id = ? ORDER BY s.path""", [incident_id])
    out = []
    for r in rows:
        clock = None
        if r["clock_domain"] and r["clock_domain"] != "none":
            clock = {"domain": r["clock_domain"],
                     "offset_s": None if r["offset_ns"] is None else r["offset_ns"] / 1e9,
                     "uncertainty_s": None if r["uncertainty_ns"] is None else r["uncertainty_ns"] / 1e9,
                     "method": r["method"], "drift_ppm": r["drift_ppm"]}
        elif r["kind"] == "host_info":
            clock = {"domain": "none", "offset_s": None, "uncertainty_s": None,
                     "method": "clock anchors and host facts (used to place the other sources)"}
        elif r["clock_domain"] == "none":
            clock = {"domain": "none", "offset_s": None, "uncertainty_s": None,
                     "method": "the file carries no times"}
        attrs = json.loads(r["attrs"]) if r["attrs"] else {}
        out.append({"path": r["path"], "kind": r["kind"], "format": r["format"], "host": r["host"],
                    "rank": r["rank"], "pid": r["pid"], "status": r["status"], "records": r["records"],
                    "issues": r["issues"], "error": r["error"], "bytes": r["bytes"],
                    "host_from": r["host_from"], "rank_from": r["rank_from"], "clock": clock,
                    "read_past": describe(attrs.get("unwrapped"), attrs.get("format_from_line"))})
    return out


def build(store, incident_id: str, rc: RootCause, notes: list[str] | None = None,
          time_zone: dict | None = None) -> dict:
    inc = store.query("SELECT * FROM incidents WHERE incident_id = ?", [incident_id])[0]
    failure = rc.failure
    f_ts = failure.ts_ns if failure else None
    notes = list(notes or [])
    if failure is not None and (not rc.chains or len(rc.chains[0].links) == 1):
        notes.append(NO_CHAIN)
    origin = rc.chains[0].origin if rc.chains else None
    return {
        "schema": SCHEMA,
        "incident": {"id": incident_id, "title": inc["title"], "bundle_sha256": inc["bundle_sha256"],
                     "created_at": iso_utc(inc["created_at"]), "bundle_name": inc["bundle_name"]},
        "generator": {"name": "aftertrace", "analysis_version": ANALYSIS_VERSION},
        "time_zone": time_zone or {"zone": inc["time_zone"], "from": inc["time_zone_source"]},
        "summary": rc.summary,
        "sources": sources_json(store, incident_id),
        "failure": failure.to_json(f_ts) if failure else None,
        "origin": origin.to_json(f_ts) if origin else None,
        "launcher_root_cause": None if rc.launcher_root_cause is None else {
            "rank": rc.launcher_root_cause,
            "victim_of": narrative.launcher_victim_of(rc.chains[0], failure) if rc.chains and failure else None},
        "victims": [v.to_json(f_ts) for v in rc.victims],
        "anomalies": [a.to_json(f_ts) for a in rc.anomalies],
        "chains": [chains.chain_json(c, f_ts, narrative.chain_line(c, failure)) for c in rc.chains],
        "progress": progress.progress_json(rc.ranks),
        "notes": notes,
    }
