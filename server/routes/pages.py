"""The HTML pages: the incident list and upload form, an incident's report, flame graph and timeline,
a share link's pages, sign-in, and what they load (Plotly) and the health check."""
from __future__ import annotations

import secrets

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from aftertrace.ingest import __version__
from aftertrace.web import pages

from ..app import _SESSION, ApiError, AppContext, _local_path, _session_of
from ..errors import NotFound, read_as


def router(ctx: AppContext) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    svc, settings, upload_limit = ctx.service, ctx.settings, ctx.upload_limit
    _submit, _one_of_each, _writer = ctx.submit, ctx.one_of_each, ctx.writer

    @router.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js():
        return FileResponse(pages.plotly_js_path(), media_type="application/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index():
        return pages.index_page(svc.list_incidents(), needs_token=bool(settings.api_token))

    @router.post("/upload", include_in_schema=False, max_body_size=upload_limit)
    async def html_upload(request: Request, bundle: UploadFile = File(...), title: str | None = Form(None),
                          token: str | None = Form(None)):
        try:
            _writer(request, token)
            await _one_of_each(request)
            out = await run_in_threadpool(_submit, bundle, title)
        except ApiError as e:
            return HTMLResponse(pages.error_page(e.status, e.message), status_code=e.status)
        return RedirectResponse(out["url"], status_code=303)

    @router.get("/incidents/{incident_id}", response_class=HTMLResponse, include_in_schema=False)
    def incident_page(incident_id: str, all: bool = False):
        inc = svc.get_incident(incident_id)
        rep = svc.get_report(incident_id) if inc["status"] == "done" else None
        issues = svc.parse_issues(incident_id, 200) if rep else []
        return pages.incident_page(inc, rep, all_files=all, needs_token=bool(settings.api_token), issues=issues)

    @router.get("/incidents/{incident_id}/flamegraph", response_class=HTMLResponse, include_in_schema=False)
    def flamegraph_page(incident_id: str, start: str | None = None, end: str | None = None,
                        host: str | None = None, pid: str | None = None, comm: str | None = None,
                        baseline_start: str | None = None, baseline_end: str | None = None,
                        rank: str | None = None):
        from aftertrace.web.flamegraph import filter_form, flame_subtitle, standalone_html
        # (the page's form sends empty fields for "any")
        with read_as("the pid or rank (a number)"):
            pid_n = int(pid) if pid else None
            rank_n = int(rank) if rank else None
        fg = svc.flamegraph(incident_id, start, end, host or None, pid_n, comm or None, None, "samples",
                            baseline_start, baseline_end, rank_n)
        diff = fg["baseline"] is not None
        return standalone_html(fg["tree"], f"Flame graph — incident {fg['incident']}", flame_subtitle(fg), diff,
                               form=filter_form(fg, baseline_start, baseline_end))

    @router.get("/incidents/{incident_id}/timeline", response_class=HTMLResponse, include_in_schema=False)
    def timeline_page(incident_id: str):
        inc = svc.get_incident(incident_id)
        return pages.timeline_page(inc, api=f"/api/incidents/{inc['id']}/timeline", report=f"/incidents/{inc['id']}")

    def _shared_page(token: str, render) -> HTMLResponse:
        """A share link's page, ``render(share, report)``, for a live token only (a 404 tells no
        unknown link from a revoked one); never sent on as a referrer, never indexed."""
        try:
            share, rep = svc.shared(token)
        except NotFound:
            return HTMLResponse(pages.error_page(404, "This link does not exist or was revoked."), status_code=404)
        return HTMLResponse(render(share, rep), headers={"Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex"})

    @router.get("/r/{token}/timeline", response_class=HTMLResponse, include_in_schema=False)
    def shared_timeline_page(token: str):
        def render(share, rep):
            inc = {"id": rep["incident"]["id"], "title": rep["incident"].get("title") or rep["incident"]["id"]}
            return pages.timeline_page(inc, api=f"/api/shared/{token}/timeline", report=f"/r/{token}", share=share)
        return _shared_page(token, render)

    @router.get("/r/{token}", response_class=HTMLResponse, include_in_schema=False)
    def shared_page(token: str):
        from aftertrace.web import report_render

        def render(share, rep):
            share["timeline_url"] = f"/r/{token}/timeline" + (f"#{share['view']}" if share.get("view") else "")
            return report_render.html(rep, share=share)
        return _shared_page(token, render)

    @router.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form(next: str | None = None):
        return pages.login_page(_local_path(next))

    @router.post("/login", include_in_schema=False)
    def login(request: Request, token: str = Form(""), next: str | None = Form(None)):
        if not settings.api_token:
            return RedirectResponse(_local_path(next), status_code=303)
        if not secrets.compare_digest(token.encode(), settings.api_token.encode()):
            return HTMLResponse(pages.login_page(_local_path(next), "That is not this server's token."),
                                status_code=401)
        r = RedirectResponse(_local_path(next), status_code=303)
        r.set_cookie(_SESSION, _session_of(settings.api_token), httponly=True, samesite="strict", path="/",
                     secure=request.url.scheme == "https")
        return r

    @router.get("/healthz", include_in_schema=False)
    def healthz():
        return {"ok": True, "version": __version__}

    return router
