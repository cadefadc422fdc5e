"""The FastAPI app: thin routes over :class:`server.service.Service`.

Build it with :func:`create_app(settings)`; nothing is global. Every API error
uses one envelope::

    {"error": {"status": 404, "code": "not_found", "message": "no incident 'x'"}}
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.util
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.routing import Match

from aftertrace.ingest import __version__
from aftertrace.ingest.bundle import DiskFull, IntakeError
from aftertrace.web import pages

from .errors import NotFound, ServiceError, read_as
from .exports import formats as export_formats
from .service import HandedBack, Service
from .settings import Settings

log = logging.getLogger("aftertrace")
# Swagger UI's files, from the fastapi-offline distribution (a dependency: nothing is fetched)
_DOCS_STATIC = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def envelope(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "code": code, "message": message}}, status_code=status,
                        headers=headers)


def _answer(request: Request, status: int, code: str, message: str, headers: dict | None = None):
    """An error as the asker reads it: the envelope under ``/api/``, the error page elsewhere
    (``headers``: what the status needs with it, a 405's ``Allow``)."""
    if not request.url.path.startswith("/api/"):
        return HTMLResponse(pages.error_page(status, message), status_code=status, headers=headers)
    return envelope(status, code, message, headers)


def _host_name(host: str) -> str:
    """The name of a Host header (``name:port``, ``[v6]:port``) without its port."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _methods_of(app, scope) -> set[str]:
    """The methods some route of the app answers at the request's path."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(dict(scope, method="GET")) if hasattr(route, "matches") else (Match.NONE, None)
        if match != Match.NONE and getattr(route, "methods", None):
            methods |= set(route.methods)
    return methods


def _same_origin(origin: str, host: str, scheme: str) -> bool:
    """Whether an Origin header names this server as the request reached it (scheme, Host)."""
    default = {"http": 80, "https": 443}
    try:
        o = urlsplit(origin)
        h = urlsplit(f"{scheme}://{host}")
        return (o.scheme == scheme and (o.hostname or "") == (h.hostname or "")
                and (o.port or default.get(o.scheme)) == (h.port or default.get(scheme)))
    except ValueError:      # (a port that is no number: no origin of this server)
        return False


_MULTIPART_SLACK = 1024 * 1024      # an upload's form around the file: boundaries, its name, the title
_SMALL_BODY = 64 * 1024             # the JSON of a share request is a few kB at most
_UPLOADS = ("/api/incidents", "/upload")
# what needs no token when the server has one: a share link's own views (the link is its key), the
# pages' assets, the sign-in page, the health check; /upload reads its token from the form itself
_OPEN = ("/r/", "/api/shared/", "/static/", "/static-docs/", "/vendor/")
_OPEN_EXACT = ("/login", "/favicon.ico", "/healthz", "/upload")
_SESSION = "aftertrace_session"


def _session_of(token: str) -> str:
    """The sign-in cookie's value for a server token (the token itself never goes into a cookie)."""
    return hmac.new(token.encode(), b"aftertrace session", hashlib.sha256).hexdigest()


def _local_path(url: str | None) -> str:
    """Where to go after signing in: a path of this server, else its start page."""
    url = url or "/"
    return url if url.startswith("/") and not url.startswith("//") and "\\" not in url else "/"

_NEEDS_TOKEN = "this server needs its token (AFTERTRACE_TOKEN): 'Authorization: Bearer <token>', or sign in at /login"

_CODES = {400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 409: "conflict",
          413: "too_large", 422: "invalid_request", 500: "internal_error",
          507: "insufficient_storage"}


# the pages' own scripts and styles (some inline: the self-contained report, the API docs), nothing
# from elsewhere
_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class _ErrorFields(BaseModel):
    status: int
    code: str
    message: str


class ErrorEnvelope(BaseModel):
    """Every error of the API."""
    error: _ErrorFields


_WHY = {400: "A window or argument it cannot read", 401: "A write without the bearer token (AFTERTRACE_TOKEN)",
        403: "A write from another site's page, or a name this server does not answer to",
        404: "No such incident or link", 409: "The incident is queued, being analysed or failed: its status and reason",
        413: "A body past the limit", 507: "No space left on the disk of the aftertrace home"}


def _errors(*codes: int) -> dict:
    """The ``responses`` of a route: its errors (and 403, which any request may get), one envelope."""
    return {c: {"model": ErrorEnvelope, "description": _WHY[c]} for c in sorted({403, *codes})}


class ShareRequest(BaseModel):
    note: str | None = None
    start: str | None = None      # optional timeline window to point at (ISO-8601 UTC or epoch s)
    end: str | None = None
    view: str | None = None       # the timeline viewer's state to open on (its URL fragment)


def create_app(settings: Settings, service: Service | None = None) -> FastAPI:
    svc = service or Service(settings)
    pool = ThreadPoolExecutor(max_workers=settings.analysis_threads, thread_name_prefix="analysis")

    @asynccontextmanager
    async def lifespan(app):
        # What a process before this one left queued (it stopped, or died while analysing) runs now.
        for iid in svc.pending():
            log.info("incident %s was queued before this start: analysing it", iid)
            pool.submit(_run, iid)
        yield
        # Stopping (SIGTERM, Ctrl-C): what has not started stays queued for the next start; what
        # runs stops at its next step and is queued again.
        pool.shutdown(wait=False, cancel_futures=True)
        left = await asyncio.to_thread(svc.stop, settings.stop_grace_s)
        if left:
            log.warning("analyses still running after %.0f s: %s (queued again when aftertrace next starts)",
                        settings.stop_grace_s, ", ".join(left))

    # Bodies are counted as they arrive and refused past the limit (413; the routes' max_body_size),
    # an honest Content-Length before any of it is read (own_names_and_own_pages_only): an upload's
    # limit on its two routes, a small one on every other write
    upload_limit = settings.limits.max_upload_bytes + _MULTIPART_SLACK
    # (the API docs are served from this machine: the default page loads Swagger UI from a CDN)
    app = FastAPI(title="aftertrace", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Post-mortem trace correlation for distributed ML training incidents.")
    app.state.service = svc
    app.state.settings = settings
    app.state.pool = pool

    app.mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static")
    app.mount("/static-docs", StaticFiles(directory=str(_DOCS_STATIC)), name="static-docs")

    @app.get("/docs", include_in_schema=False)
    async def api_docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="aftertrace API",
                                   swagger_js_url="/static-docs/swagger-ui-bundle.js",
                                   swagger_css_url="/static-docs/swagger-ui.css",
                                   swagger_favicon_url="/static/favicon.svg")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        # (pages name /static/favicon.svg; browsers still ask here for what has no <link rel=icon>)
        return FileResponse(pages.STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
    # pages, scripts and JSON compress well (the timeline page carries its data and Plotly): to every
    # client that accepts gzip, level 6 (level 9 costs twice the CPU for a few per cent)
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)

    # -- errors ------------------------------------------------------------------------
    @app.middleware("http")
    async def own_names_and_own_pages_only(request: Request, call_next):
        # A page on another site may send requests here (a form's POST needs no permission) and may
        # even reach a server on this machine's loopback through a name of its own that it points
        # there (DNS rebinding): a request for a name this server does not answer to is refused, and
        # so is a write sent by another site's page (its Origin, or the browser's Sec-Fetch-Site)
        host = request.headers.get("host", "")
        if not settings.answers_to(_host_name(host)):
            return _answer(request, 403, "forbidden", f"this server does not answer to the name {host!r} "
                           "(AFTERTRACE_ALLOWED_HOSTS lists the names it answers to)")
        path = request.url.path
        if not (path.startswith(_OPEN) or path in _OPEN_EXACT or _signed_in(request)):
            if path.startswith("/api/"):
                return envelope(401, "unauthorized", _NEEDS_TOKEN)
            return HTMLResponse(pages.login_page(_local_path(request.url.path +
                                                             (f"?{request.url.query}" if request.url.query else ""))),
                                status_code=401)
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            origin = request.headers.get("origin")
            if (origin is not None and not _same_origin(origin, host, request.url.scheme)) \
                    or request.headers.get("sec-fetch-site") == "cross-site":
                return _answer(request, 403, "forbidden", "a write sent by another site's page is refused")
            size = request.headers.get("content-length", "")
            if size.isdigit() and int(size) > (upload_limit if request.url.path in _UPLOADS else _SMALL_BODY):
                return _answer(request, 413, "too_large", _too_large(request.url.path))
        return await call_next(request)

    @app.middleware("http")
    async def no_sniffing(request: Request, call_next):
        # bundle text is served as text/plain or JSON (exports, issues): never let a browser
        # guess HTML or script from it; no page of this server is framed by another site, and a
        # page loads, sends and submits to this server alone (a string from a bundle that got into
        # a page as markup could not fetch or send anything elsewhere)
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        if response.headers.get("content-type", "").startswith("text/html"):
            response.headers.setdefault("Content-Security-Policy", _CSP)
        return response

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return envelope(exc.status, exc.code, exc.message)

    @app.exception_handler(DiskFull)
    async def _disk_full(request: Request, exc: DiskFull):
        return _answer(request, 507, "insufficient_storage", str(exc))

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        # what the service cannot answer (no such incident, a request it cannot read, an incident
        # with nothing to show yet)
        return _answer(request, exc.status, exc.code, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        detail = str(exc.detail)
        if exc.status_code == 413:      # (the body limit's own words name no limit)
            detail = _too_large(request.url.path)
        headers = exc.headers
        if exc.status_code == 405:      # (Starlette names the methods of the first route of the path only)
            headers = {"Allow": ", ".join(sorted(_methods_of(app, request.scope)))}
        return _answer(request, exc.status_code, _CODES.get(exc.status_code, "error"), detail, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
        return envelope(422, "invalid_request", "; ".join(parts) or "invalid request")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        # the exception's text may carry paths, SQL or settings: it goes to the log, not the client
        return envelope(500, "internal_error", "internal error (the details are in the server's log)")

    def _too_large(path: str) -> str:
        return (f"the upload is larger than the limit of {settings.limits.max_upload_bytes} bytes" if path in _UPLOADS
                else f"the request body is larger than the {_SMALL_BODY} bytes this endpoint takes")

    def _run(iid: str) -> None:
        try:
            svc.analyze(iid)
        except HandedBack:      # (the service said so in the log)
            pass
        except Exception:
            log.exception("analysis of %s failed", iid)

    def _submit(bundle: UploadFile, title: str | None) -> dict:
        try:
            sub = svc.submit_upload(bundle.file, bundle.filename or "upload", title or None)
        except DiskFull as e:
            raise ApiError(507, "insufficient_storage", str(e)) from None
        except IntakeError as e:
            status = 413 if "limit" in str(e) else 400
            raise ApiError(status, _CODES[status], str(e)) from None
        if sub.queued:          # (a bundle sent again joins its incident as it stands)
            pool.submit(_run, sub.incident_id)
        return {"id": sub.incident_id, "status": sub.status, "url": f"/incidents/{sub.incident_id}",
                "existing": sub.existed}

    async def _one_of_each(request: Request) -> None:
        """An upload names one bundle, one title and one token (a field sent twice is refused: which
        one would count is nobody's guess)."""
        form = await request.form()      # (the form the route already read)
        twice = sorted({k for k in form.keys() if len(form.getlist(k)) > 1})
        if twice:
            raise ApiError(400, "bad_request", f"the upload sends {', '.join(twice)} more than once")

    def _signed_in(request: Request, form_token: str | None = None) -> bool:
        """Whether the request carries the server's token (AFTERTRACE_TOKEN; none set: everyone is):
        as ``Authorization: Bearer``, as the upload form's field, or as the sign-in cookie."""
        if not settings.api_token:
            return True
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else form_token
        if given and secrets.compare_digest(given.encode(), settings.api_token.encode()):
            return True
        cookie = request.cookies.get(_SESSION, "")
        return bool(cookie) and secrets.compare_digest(cookie.encode(), _session_of(settings.api_token).encode())

    def _writer(request: Request, form_token: str | None = None) -> None:
        """The upload form's check (the one route the token middleware leaves open: the form carries
        the token as a field, which only the route reads)."""
        if not _signed_in(request, form_token):
            raise ApiError(401, "unauthorized", _NEEDS_TOKEN)

    # -- API -------------------------------------------------------------------------------
    @app.post("/api/incidents", status_code=201, summary="Upload a crash bundle", max_body_size=upload_limit,
              responses=_errors(400, 401, 413, 507))
    async def api_upload(request: Request, bundle: UploadFile = File(...), title: str | None = Form(None)):
        await _one_of_each(request)
        # storing the upload (copy, hash) and registering it block: off the event loop
        return await run_in_threadpool(_submit, bundle, title)

    @app.get("/api/incidents", summary="List incidents", responses=_errors())
    def api_list():
        return {"incidents": svc.list_incidents()}

    @app.get("/api/incidents/{incident_id}", summary="Incident status", responses=_errors(404))
    def api_get(incident_id: str):
        return svc.get_incident(incident_id)

    @app.delete("/api/incidents/{incident_id}", summary="Delete an incident and every byte of it",
                responses=_errors(400, 401, 404, 409),
                description="Its rows, its share links, its folder (extracted files, exports) and its raw bundle. "
                            "409 while it is queued or being analysed.")
    def api_delete(incident_id: str, request: Request):
        return svc.delete_incident(incident_id)

    @app.get("/api/incidents/{incident_id}/report", summary="The aftertrace.report/1 JSON", responses=_errors(404, 409))
    def api_report(incident_id: str):
        return svc.get_report(incident_id)

    @app.get("/api/incidents/{incident_id}/issues", summary="Lines that could not be parsed", responses=_errors(404, 409))
    def api_issues(incident_id: str, limit: int = 200):
        return {"issues": svc.parse_issues(incident_id, max(1, min(limit, 5000)))}

    @app.get("/api/incidents/{incident_id}/flamegraph", summary="Stack tree of the perf samples in a window",
             responses=_errors(400, 404, 409))
    def api_flamegraph(incident_id: str, start: str | None = None, end: str | None = None,
                       host: str | None = None, pid: int | None = None, comm: str | None = None,
                       event: str | None = None, weight: str = "samples",
                       baseline_start: str | None = None, baseline_end: str | None = None,
                       rank: int | None = None):
        return svc.flamegraph(incident_id, start, end, host, pid, comm, event, weight,
                              baseline_start, baseline_end, rank)

    exporting = export_formats()

    @app.get("/api/incidents/{incident_id}/export", summary="The incident as a file for other tools",
             response_class=FileResponse,
             responses={200: {"content": {f.media_type.split(";")[0]: {} for f in exporting.values()}},
                        **_errors(400, 404, 409, 507)},
             description="format: " + "; ".join(
                 f"{f.name}{'/' + '/'.join(f.aliases) if f.aliases else ''} ({f.suffix}): {f.what}"
                 for f in exporting.values()) + ". start/end: a window, for "
                 + ", ".join(f.name for f in exporting.values() if f.windowed) + ".")
    def api_export(incident_id: str, format: str = "perfetto", start: str | None = None, end: str | None = None):
        from .exports import normalize
        fmt = normalize(format)
        path = svc.export_file(incident_id, fmt, start, end)
        return FileResponse(path, media_type=exporting[fmt].media_type, filename=path.name)

    @app.get("/api/incidents/{incident_id}/timeline", summary="Tracks, spans and metrics of a time window",
             responses=_errors(400, 404, 409))
    def api_timeline(incident_id: str, start: str | None = None, end: str | None = None,
                     tracks: str | None = None, metrics: str | None = None, px: int = 1600,
                     max_events: int = 2000, catalog: bool = True):
        return svc.timeline(incident_id, start, end, tracks, metrics, px, max_events, catalog)

    @app.get("/api/incidents/{incident_id}/timeline/detail", summary="The events of a track at one time",
             responses=_errors(400, 404, 409))
    def api_timeline_detail(incident_id: str, track: int, t: int):
        return svc.timeline_detail(incident_id, track, t)

    @app.post("/api/incidents/{incident_id}/shares", status_code=201, summary="Make a read-only link to the report",
              responses=_errors(400, 401, 404, 409, 413),
              max_body_size=_SMALL_BODY)
    def api_share(incident_id: str, request: Request, body: ShareRequest | None = None):
        body = body or ShareRequest()
        return svc.create_share(incident_id, body.note, body.start, body.end, body.view)

    @app.get("/api/incidents/{incident_id}/shares", summary="The incident's share links (without their tokens)",
             responses=_errors(404))
    def api_shares(incident_id: str):
        return {"shares": svc.list_shares(incident_id)}

    @app.delete("/api/incidents/{incident_id}/shares/{share_id}", summary="Revoke a share link by its id",
                responses=_errors(401, 404))
    def api_revoke_by_id(incident_id: str, share_id: str, request: Request):
        return svc.revoke_share(share_id=share_id, incident_id=incident_id)

    @app.delete("/api/shares/{token}", summary="Revoke a share link", responses=_errors(401, 404))
    def api_revoke(token: str, request: Request):
        return svc.revoke_share(token=token)

    @app.get("/api/shared/{token}", summary="What a share link shows: the share and the report",
             responses=_errors(404, 409))
    def api_shared(token: str):
        share, rep = svc.shared(token)
        return {"share": share, "report": rep}

    @app.get("/api/shared/{token}/timeline", summary="The shared incident's timeline (as /api/incidents/{id}/timeline)",
             responses=_errors(400, 404, 409))
    def api_shared_timeline(token: str, start: str | None = None, end: str | None = None,
                            tracks: str | None = None, metrics: str | None = None, px: int = 1600,
                            max_events: int = 2000, catalog: bool = True):
        return svc.timeline(svc.shared_incident(token), start, end, tracks, metrics, px, max_events, catalog)

    @app.get("/api/shared/{token}/timeline/detail", summary="The events of a track of the shared incident",
             responses=_errors(400, 404, 409))
    def api_shared_timeline_detail(token: str, track: int, t: int):
        return svc.timeline_detail(svc.shared_incident(token), track, t)

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js():
        return FileResponse(pages.plotly_js_path(), media_type="application/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    # -- HTML ------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index():
        return pages.index_page(svc.list_incidents(), needs_token=bool(settings.api_token))

    @app.post("/upload", include_in_schema=False, max_body_size=upload_limit)
    async def html_upload(request: Request, bundle: UploadFile = File(...), title: str | None = Form(None),
                          token: str | None = Form(None)):
        try:
            _writer(request, token)
            await _one_of_each(request)
            out = await run_in_threadpool(_submit, bundle, title)
        except ApiError as e:
            return HTMLResponse(pages.error_page(e.status, e.message), status_code=e.status)
        return RedirectResponse(out["url"], status_code=303)

    @app.get("/incidents/{incident_id}", response_class=HTMLResponse, include_in_schema=False)
    def incident_page(incident_id: str, all: bool = False):
        inc = svc.get_incident(incident_id)
        rep = svc.get_report(incident_id) if inc["status"] == "done" else None
        issues = svc.parse_issues(incident_id, 200) if rep else []
        return pages.incident_page(inc, rep, all_files=all, needs_token=bool(settings.api_token), issues=issues)

    @app.get("/incidents/{incident_id}/flamegraph", response_class=HTMLResponse, include_in_schema=False)
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

    @app.get("/incidents/{incident_id}/timeline", response_class=HTMLResponse, include_in_schema=False)
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

    @app.get("/r/{token}/timeline", response_class=HTMLResponse, include_in_schema=False)
    def shared_timeline_page(token: str):
        def render(share, rep):
            inc = {"id": rep["incident"]["id"], "title": rep["incident"].get("title") or rep["incident"]["id"]}
            return pages.timeline_page(inc, api=f"/api/shared/{token}/timeline", report=f"/r/{token}", share=share)
        return _shared_page(token, render)

    @app.get("/r/{token}", response_class=HTMLResponse, include_in_schema=False)
    def shared_page(token: str):
        from aftertrace.web import report_render

        def render(share, rep):
            share["timeline_url"] = f"/r/{token}/timeline" + (f"#{share['view']}" if share.get("view") else "")
            return report_render.html(rep, share=share)
        return _shared_page(token, render)

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form(next: str | None = None):
        return pages.login_page(_local_path(next))

    @app.post("/login", include_in_schema=False)
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

    @app.get("/healthz", include_in_schema=False)
    def healthz():
        return {"ok": True, "version": __version__}

    return app
