"""Flame graph presentation: a self-contained HTML file (no network, no CDN) from a stack tree."""
from __future__ import annotations

from .pages import _env, script_json, static_text


def standalone_html(tree: dict, title: str, subtitle: str, diff: bool = False, form: dict | None = None) -> str:
    """The flame graph as one HTML file; with ``form`` (the served page), a bar of filters above it."""
    payload = {"tree": tree, "title": title, "subtitle": subtitle, "diff": diff}
    return _env.get_template("flamegraph_standalone.html").render(
        title=title, data_json=script_json(payload), flame_js=static_text("flame.js"), form=form)


def filter_form(fg: dict, baseline_start: str | None = None, baseline_end: str | None = None) -> dict:
    """What the served flame graph's filter bar shows: the window and filters in effect, and what
    the window's samples could be narrowed to (host, rank, process, command), each with its share."""
    f, ch = fg["filter"], fg["choices"]
    total = ch["total"] or 1

    def pct(n: int) -> str:
        return f"{100 * n / total:.0f} %" if n * 100 >= total else "<1 %"
    by_pid = {(p["host"], p["pid"]): p["samples"] for p in ch["pids"]}
    return {
        "start": f["start"] or "", "end": f["end"] or "", "baseline_start": baseline_start or "",
        "baseline_end": baseline_end or "", "host": f["host"] or "", "comm": f["comm"] or "",
        "pid": "" if f["pid"] is None or fg.get("rank") is not None else str(f["pid"]),
        "rank": "" if fg.get("rank") is None else str(fg["rank"]),
        "hosts": [(h["host"], f"{h['host']} ({pct(h['samples'])})") for h in ch["hosts"]],
        "comms": [(c["comm"], f"{c['comm']} ({pct(c['samples'])})") for c in ch["comms"]],
        "pids": [(str(p["pid"]), f"{p['pid']} {p['comm']}" + (f" on {p['host']}" if p["host"] else "")
                  + f" ({pct(p['samples'])})") for p in ch["pids"]],
        "ranks": [(str(r["rank"]), f"rank {r['rank']} (pid {r['pid']}"
                   + (f", {pct(by_pid[(r['host'], r['pid'])])}" if (r["host"], r["pid"]) in by_pid else "") + ")")
                  for r in ch["ranks"]],
    }


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
