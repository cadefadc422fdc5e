"""The FastAPI app: thin routes over :class:`server.service.Service`.

Build it with :func:`create_app(settings)`; nothing is global. This module holds what every
request goes through (the names the server answers to, the token, the body limits, the security
headers, one exception handler per kind of error) and builds the app from one router per resource
(:mod:`server.routes`: incidents, shares, pages). Every API error uses one envelope::

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
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from fastapi import FastAPI, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.routing import Match

from aftertrace.ingest import __version__
from aftertrace.ingest.bundle import DiskFull, IntakeError
from aftertrace.web import pages

from .errors import ServiceError
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


def _methods_of(routes, scope) -> set[str]:
    """The methods some route of ``routes`` (the app's, and those of the routers it includes)
    answers at the request's path."""
    methods: set[str] = set()
    for route in routes:
        inner = getattr(route, "original_router", None)      # (a router the app includes)
        if inner is not None:
            methods |= _methods_of(inner.routes, scope)
            continue
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


@dataclass(frozen=True)
class AppContext:
    """What the routers of one app share (see :mod:`server.routes`): its service and settings, the
    upload limit, and the upload's steps (store and queue a bundle; one field of each; the form's
    token check)."""
    service: Service
    settings: Settings
    upload_limit: int
    submit: Callable[[UploadFile, str | None], dict]
    one_of_each: Callable[[Request], Awaitable[None]]
    writer: Callable[[Request, str | None], None]


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
            headers = {"Allow": ", ".join(sorted(_methods_of(app.router.routes, request.scope)))}
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

    # -- routes: one router per resource -----------------------------------------------------
    from .routes import incidents, pages as page_routes, shares
    ctx = AppContext(svc, settings, upload_limit, _submit, _one_of_each, _writer)
    for r in (incidents.router(ctx), shares.router(ctx), page_routes.router(ctx)):
        app.include_router(r)

    return app
