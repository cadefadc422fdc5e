"""Share links: made, listed and revoked for an incident, and what a link shows (``/api/shared``)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from ..app import _SMALL_BODY, AppContext, ShareRequest, _errors


def router(ctx: AppContext) -> APIRouter:
    router = APIRouter(tags=["shares"])
    svc = ctx.service

    @router.post("/api/incidents/{incident_id}/shares", status_code=201, summary="Make a read-only link to the report",
                 responses=_errors(400, 401, 404, 409, 413),
                 max_body_size=_SMALL_BODY)
    def api_share(incident_id: str, request: Request, body: ShareRequest | None = None):
        body = body or ShareRequest()
        return svc.create_share(incident_id, body.note, body.start, body.end, body.view)

    @router.get("/api/incidents/{incident_id}/shares", summary="The incident's share links (without their tokens)",
                responses=_errors(404))
    def api_shares(incident_id: str):
        return {"shares": svc.list_shares(incident_id)}

    @router.delete("/api/incidents/{incident_id}/shares/{share_id}", summary="Revoke a share link by its id",
                   responses=_errors(401, 404))
    def api_revoke_by_id(incident_id: str, share_id: str, request: Request):
        return svc.revoke_share(share_id=share_id, incident_id=incident_id)

    @router.delete("/api/shares/{token}", summary="Revoke a share link", responses=_errors(401, 404))
    def api_revoke(token: str, request: Request):
        return svc.revoke_share(token=token)

    @router.get("/api/shared/{token}", summary="What a share link shows: the share and the report",
                responses=_errors(404, 409))
    def api_shared(token: str):
        share, rep = svc.shared(token)
        return {"share": share, "report": rep}

    @router.get("/api/shared/{token}/timeline",
                summary="The shared incident's timeline (as /api/incidents/{id}/timeline)",
                responses=_errors(400, 404, 409))
    def api_shared_timeline(token: str, start: str | None = None, end: str | None = None,
                            tracks: str | None = None, metrics: str | None = None, px: int = 1600,
                            max_events: int = 2000, catalog: bool = True):
        return svc.timeline(svc.shared_incident(token), start, end, tracks, metrics, px, max_events, catalog)

    @router.get("/api/shared/{token}/timeline/detail", summary="The events of a track of the shared incident",
                responses=_errors(400, 404, 409))
    def api_shared_timeline_detail(token: str, track: int, t: int):
        return svc.timeline_detail(svc.shared_incident(token), track, t)

    return router
