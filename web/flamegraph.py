"""Flame graph presentation: a self-contained HTML file (no network, no CDN) from a stack tree."""
from __future__ import annotations

from .pages import _env, script_json, static_text


def standalone_html(tree: dict, title: str, subtitle: str, diff: bool = False) -> str:
    payload = {"tree": tree, "title": title, "subtitle": subtitle, "diff": diff}
    return _env.get_template("flamegraph_standalone.html").render(
        title=title, data_json=script_json(payload), flame_js=static_text("flame.js"))


def flame_subtitle(fg: dict) -> str:
    """'78 samples of 3811 · 2026-...Z to ...Z · pid=17988' (what the window and filters are)."""
    f = fg["filter"]
    parts = [f"{fg['tree']['value']} samples of {fg['samples_total']}"]
    if fg["baseline"]:
        parts[0] += f" (baseline {fg['tree'].get('base', 0)}: {fg['baseline']['start'] or 'start'} to " \
                    f"{fg['baseline']['end'] or 'end'})"
    parts.append(f"{f['start'] or fg['time_range']['start']} to {f['end'] or fg['time_range']['end']} UTC")
    parts += [f"{k}={f[k]}" for k in ("host", "pid", "comm", "event") if f.get(k) is not None]
    if fg["samples_unplaced"]:
        parts.append(f"{fg['samples_unplaced']} samples could not be placed in time")
    return " · ".join(parts)
