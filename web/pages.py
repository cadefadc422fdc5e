"""HTML pages rendered from the service's JSON (Jinja2, autoescaped).

Every page here has a JSON twin in the API: ``/`` <-> ``/api/incidents``,
``/incidents/{id}`` <-> ``/api/incidents/{id}`` + ``/api/incidents/{id}/report``.
Strings from bundles are only ever inserted through autoescaping.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from aftertrace.ingest import __version__

from .present import chain_strip, clock_of, clock_text, group_sources, rel_text, when, where

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATES_DIR = HERE / "templates"

_env = Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)),
                   autoescape=select_autoescape(["html", "xml"], default=True))


_env.filters["clock"] = clock_text
_env.filters["where"] = where
_env.filters["when"] = when
_env.filters["clock_of"] = clock_of
_env.filters["rel"] = rel_text
_env.globals["chain_strip"] = chain_strip


def _render(name: str, **ctx) -> str:
    return _env.get_template(name).render(version=__version__, **ctx)


def index_page(incidents: list[dict], needs_token: bool = False) -> str:
    return _render("index.html", incidents=incidents, needs_token=needs_token)


def incident_page(incident: dict, report: dict | None, all_files: bool = False, needs_token: bool = False,
                  issues: list[dict] | None = None) -> str:
    counts = Counter(s["status"] for s in report["sources"]) if report else Counter()
    rows = []
    if report:
        rows = ([dict(s, count=1) for s in report["sources"]] if all_files
                else group_sources(report["sources"], limit=60))
    has_perf = bool(report) and any(s["kind"] == "perf_script" and s["records"] for s in report["sources"])
    return _render("incident.html", inc=incident, rep=report, counts=counts, rows=rows, has_perf=has_perf,
                   grouped=len(rows) < len(report["sources"]) if report else False, needs_token=needs_token,
                   issues=issues or [])


def timeline_page(incident: dict, api: str, report: str, share: dict | None = None) -> str:
    """The trace viewer over ``api`` (an incident's timeline, or a share link's)."""
    return _render("timeline.html", inc=incident, api=api, report=report, share=share)


def script_json(obj) -> str:
    """JSON to put inside a <script> element: "</script>", "<!--" and "&" cannot end or bend it."""
    import json
    return json.dumps(obj).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def static_text(name: str) -> str:
    return (STATIC_DIR / name).read_text(encoding="utf-8")


def plotly_js_path() -> Path:
    """plotly.js as shipped inside the plotly Python package: served by the app, no CDN."""
    import plotly
    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def login_page(next_url: str, message: str | None = None) -> str:
    return _render("login.html", next=next_url, message=message)


def error_page(status: int, message: str) -> str:
    return _render("error.html", status=status, message=message)
