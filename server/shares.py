"""Read-only links to one incident's report (service layer; no FastAPI here).

A link is ``/r/{token}``: 32 random bytes from :mod:`secrets` (256 bits), URL-safe base64.
The store keeps only the token's SHA-256 and a public ``share_id`` (its first 16 hex
digits) to list and revoke links by; the token itself is returned once, when the link is
made. A revoked or unknown token gets the same "not found" (nothing tells them apart).
"""
from __future__ import annotations

import hashlib
import re
import secrets
import time

from aftertrace.analysis.flamegraph import parse_time
from aftertrace.ingest.timeparse import fmt_utc

from typing import Callable

from .errors import BadRequest, NotFound, read_as
from .queries import Queries
from .store import Store


# what a viewer's state may hold (it is put back into a URL fragment as it is)
_VIEW = re.compile(r"[A-Za-z0-9=&.,:;_~+%@-]*")


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class Shares:
    """Share links of analysed incidents (a part of :class:`server.service.Service`, built over its
    store, its :class:`server.queries.Queries` and its incident status, ``incident``)."""

    def __init__(self, store: Store, queries: Queries, incident: Callable[[str], dict]):
        self.store = store
        self.queries = queries
        self._incident = incident

    def create_share(self, incident_id: str, note: str | None = None, start: str | None = None,
                     end: str | None = None, view: str | None = None) -> dict:
        iid = self.queries.analysed_incident(incident_id)
        with read_as("the window"):
            s_ns, e_ns = parse_time(start), parse_time(end)
        if (s_ns is None) != (e_ns is None) or (s_ns is not None and e_ns <= s_ns):
            raise BadRequest("a shared window needs both start and end, end after start")
        if note is not None and len(note) > 2000:
            raise BadRequest("the note is longer than 2000 characters")
        if view is not None and (len(view) > 4000 or not _VIEW.fullmatch(view)):
            raise BadRequest("the view is the timeline's URL fragment: at most 4000 characters of "
                             "letters, digits and = & . , : ; _ ~ + % @ -")
        token = secrets.token_urlsafe(32)
        h = _hash(token)
        self.store.insert_rows("shares", [{
            "share_id": h[:16], "token_sha256": h, "incident_id": iid,
            "created_ns": time.time_ns(), "note": note or None,
            "window_start_ns": s_ns, "window_end_ns": e_ns, "revoked_ns": None, "view": view or None}])
        return {"token": token, "url": f"/r/{token}", "share_id": h[:16], "incident": iid}

    def list_shares(self, incident_id: str) -> list[dict]:
        inc = self._incident(incident_id)
        rows = self.store.query(
            """SELECT share_id, created_ns, note, window_start_ns, window_end_ns, revoked_ns, view FROM shares
               WHERE incident_id = ? ORDER BY created_ns""", [inc["id"]])
        return [self._share_json(r) for r in rows]

    def revoke_share(self, token: str | None = None, share_id: str | None = None,
                     incident_id: str | None = None) -> dict:
        if token:
            rows = self.store.query("SELECT * FROM shares WHERE token_sha256 = ?", [_hash(token)])
        else:
            rows = self.store.query("SELECT * FROM shares WHERE share_id = ? AND incident_id = ?",
                                    [share_id or "", incident_id or ""])
        if not rows:
            raise NotFound("no such share link")
        r = rows[0]
        if r["revoked_ns"] is None:
            now = time.time_ns()
            self.store.cursor().execute("UPDATE shares SET revoked_ns = ? WHERE share_id = ?", [now, r["share_id"]])
            r["revoked_ns"] = now
        return self._share_json(r)

    def shared(self, token: str) -> tuple[dict, dict]:
        """(share, report) for a live token; :class:`NotFound` otherwise."""
        rows = self.store.query("SELECT * FROM shares WHERE token_sha256 = ? AND revoked_ns IS NULL",
                                [_hash(token)])
        if not rows:
            raise NotFound("this link does not exist or was revoked")
        share = self._share_json(rows[0])
        return share, self.queries.get_report(rows[0]["incident_id"])

    def shared_incident(self, token: str) -> str:
        """The incident a live token shows; :class:`NotFound` otherwise."""
        rows = self.store.query("SELECT incident_id FROM shares WHERE token_sha256 = ? AND revoked_ns IS NULL",
                                [_hash(token)])
        if not rows:
            raise NotFound("this link does not exist or was revoked")
        return rows[0]["incident_id"]

    @staticmethod
    def _share_json(r: dict) -> dict:
        return {"share_id": r["share_id"], "created_at": fmt_utc(r["created_ns"]), "note": r["note"],
                "window": None if r["window_start_ns"] is None else
                {"start": fmt_utc(r["window_start_ns"]), "end": fmt_utc(r["window_end_ns"])},
                "revoked_at": fmt_utc(r["revoked_ns"]), "view": r.get("view")}
