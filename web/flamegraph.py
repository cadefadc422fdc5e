"""Flame graph presentation: a self-contained HTML file (no network, no CDN) from a stack tree."""
from __future__ import annotations

import json

from .pages import _env


def standalone_html(tree: dict, title: str, subtitle: str, diff: bool = False) -> str:
    payload = {"tree": tree, "title": title, "subtitle": subtitle, "diff": diff}
    # JSON inside <script>: neutralise "</" and the HTML-sensitive characters
    data = (json.dumps(payload).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return _env.get_template("flamegraph_standalone.html").render(title=title, data_json=data)
