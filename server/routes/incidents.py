"""The incidents' API: upload, list, status, delete, report, parse issues, flame graph, export,
timeline (``/api/incidents...``)."""
from __future__ import annotations

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from ..app import AppContext, _errors
from ..exports import formats as export_formats


def router(ctx: AppContext) -> APIRouter:
    router = APIRouter(tags=["incidents"])
    svc, upload_limit = ctx.service, ctx.upload_limit
    _submit, _one_of_each = ctx.submit, ctx.one_of_each

    @router.post("/api/incidents", status_code=201, summary="Upload a crash bundle", max_body_size=upload_limit,
                 responses=_errors(400, 401, 413, 507))
    async def api_upload(request: Request, bundle: UploadFile = File(...), title: str | None = Form(None)):
        await _one_of_each(request)
        # storing the upload (copy, hash) and registering it block: off the event loop
        return await run_in_threadpool(_submit, bundle, title)

    @router.get("/api/incidents", summary="List incidents", responses=_errors())
    def api_list():
        return {"incidents": svc.list_incidents()}

    @router.get("/api/incidents/{incident_id}", summary="Incident status", responses=_errors(404))
    def api_get(incident_id: str):
        return svc.get_incident(incident_id)

    @router.delete("/api/incidents/{incident_id}", summary="Delete an incident and every byte of it",
                   responses=_errors(400, 401, 404, 409),
                   description="Its rows, its share links, its folder (extracted files, exports) and its raw bundle. "
                               "409 while it is queued or being analysed.")
    def api_delete(incident_id: str, request: Request):
        return svc.delete_incident(incident_id)

    @router.get("/api/incidents/{incident_id}/report", summary="The aftertrace.report/1 JSON",
                responses=_errors(404, 409))
    def api_report(incident_id: str):
        return svc.get_report(incident_id)

    @router.get("/api/incidents/{incident_id}/issues", summary="Lines that could not be parsed",
                responses=_errors(404, 409))
    def api_issues(incident_id: str, limit: int = 200):
        return {"issues": svc.parse_issues(incident_id, max(1, min(limit, 5000)))}

    @router.get("/api/incidents/{incident_id}/flamegraph", summary="Stack tree of the perf samples in a window",
                responses=_errors(400, 404, 409))
    def api_flamegraph(incident_id: str, start: str | None = None, end: str | None = None,
                       host: str | None = None, pid: int | None = None, comm: str | None = None,
                       event: str | None = None, weight: str = "samples",
                       baseline_start: str | None = None, baseline_end: str | None = None,
                       rank: int | None = None):
        return svc.flamegraph(incident_id, start, end, host, pid, comm, event, weight,
                              baseline_start, baseline_end, rank)

    exporting = export_formats()

    @router.get("/api/incidents/{incident_id}/export", summary="The incident as a file for other tools",
                response_class=FileResponse,
                responses={200: {"content": {f.media_type.split(";")[0]: {} for f in exporting.values()}},
                           **_errors(400, 404, 409, 507)},
                description="format: " + "; ".join(
                    f"{f.name}{'/' + '/'.join(f.aliases) if f.aliases else ''} ({f.suffix}): {f.what}"
                    for f in exporting.values()) + ". start/end: a window, for "
                    + ", ".join(f.name for f in exporting.values() if f.windowed) + ".")
    def api_export(incident_id: str, format: str = "perfetto", start: str | None = None, end: str | None = None):
        from ..exports import normalize
        fmt = normalize(format)
        path = svc.export_file(incident_id, fmt, start, end)
        return FileResponse(path, media_type=exporting[fmt].media_type, filename=path.name)

    @router.get("/api/incidents/{incident_id}/timeline", summary="Tracks, spans and metrics of a time window",
                responses=_errors(400, 404, 409))
    def api_timeline(incident_id: str, start: str | None = None, end: str | None = None,
                     tracks: str | None = None, metrics: str | None = None, px: int = 1600,
                     max_events: int = 2000, catalog: bool = True):
        return svc.timeline(incident_id, start, end, tracks, metrics, px, max_events, catalog)

    @router.get("/api/incidents/{incident_id}/timeline/detail", summary="The events of a track at one time",
                responses=_errors(400, 404, 409))
    def api_timeline_detail(incident_id: str, track: int, t: int):
        return svc.timeline_detail(incident_id, track, t)

    return router
