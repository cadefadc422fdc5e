"""Presentation helpers shared by the terminal summary and the HTML pages."""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import PurePosixPath

_NUMERIC = re.compile(r"^\d+(?:\.\d+)?$")


def group_sources(sources: list[dict], limit: int = 40) -> list[dict]:
    """Collapse long runs of alike files (snapshot folders) into one row."""
    if len(sources) <= limit:
        return [dict(s, count=1) for s in sources]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in sources:
        folder = str(PurePosixPath(s["path"]).parent)
        pattern = "/".join("*" if _NUMERIC.match(c) else c for c in folder.split("/"))
        key = (pattern, s["kind"], s["host"], s["rank"], s["status"])
        groups[key].append(s)
    out = []
    for key, items in groups.items():
        if len(items) < 3:
            out += [dict(s, count=1) for s in items]
            continue
        first = items[0]
        out.append(dict(first, path=f"{key[0]}/ ({len(items)} files)", count=len(items),
                        records=sum(i["records"] or 0 for i in items),
                        issues=sum(i["issues"] or 0 for i in items),
                        error=Counter(i["error"] for i in items).most_common(1)[0][0]))
    return sorted(out, key=lambda s: s["path"])


def where(e: dict) -> str:
    """Where a piece of evidence is: its source, and the line where it has one (a snapshot series,
    a whole file, has none)."""
    return e["source"] if e.get("line") is None else f"{e['source']}:{e['line']}"


UNTIMED = "time unknown"


def when(f: dict) -> str:
    """When a finding happened, as shown: its UTC time, or that the data gives it none."""
    return f.get("time") or UNTIMED


def clock_text(c: dict | None) -> str:
    """A source's clock placement in a few characters: 'boot ±1 ms', 'wall ±0 ms', 'boot: unplaced'."""
    if not c:
        return "-"
    if c["domain"] == "none":
        return "no times"
    if c.get("offset_s") is None:
        return f"{c['domain']}: unplaced"
    u = c.get("uncertainty_s")
    us = ("(uncertainty not stated)" if u is None else
          f"±{u * 1000:.3f} ms" if 0 < u < 0.001 else f"±{u * 1000:.0f} ms" if u < 1 else f"±{u:.1f} s")
    return f"{c['domain']} {us}"


def clock_of(f: dict, ref: dict | None = None) -> str:
    """A finding's time as people read it: "13:28:24.409" (UTC); with its date in front when that
    is not the date of ``ref`` (the failure); "time unknown" without a time."""
    t = f.get("time")
    if not t:
        return UNTIMED
    day, _, rest = t.partition("T")
    hms = rest[:12] if len(rest) >= 12 else rest.rstrip("Z")
    ref_day = (ref or {}).get("time", "").partition("T")[0]
    return hms if day == ref_day else f"{day} {hms}"


def rel_text(lead_s: float | None) -> str:
    """Time relative to the failure, as a trace viewer writes it: "T−31.7 s", "T", "T+0.2 s"."""
    if not isinstance(lead_s, (int, float)):
        return ""
    if abs(lead_s) < 0.05:
        return "T"
    a = abs(lead_s)
    num = f"{a:.1f} s" if a < 120 else f"{a / 60:.1f} min" if a < 7200 else f"{a / 3600:.1f} h" if a < 172800 \
        else f"{a / 86400:.0f} d"
    return f"T−{num}" if lead_s > 0 else f"T+{num}"


STRIP_WIDTH = 960
_LABEL_PX = 150          # room a mark's label needs before the next one on its row
_NICE = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600,
         43200, 86400)


def chain_strip(chain: dict, width: int = STRIP_WIDTH) -> dict | None:
    """The chain as marks on one time axis (what the report draws first): each timed link at its
    lead before the failure, labels stacked in rows where marks crowd, ticks in T−. None when fewer
    than two links have a time (nothing to draw an axis for)."""
    links = [l for l in chain.get("links") or () if l.get("lead_s") is not None and l.get("ts") is not None]
    if len(links) < 2:
        return None
    left, right = 24, 24
    hi, lo = max(l["lead_s"] for l in links), min(l["lead_s"] for l in links)
    span = hi - lo
    plot = width - left - right - _LABEL_PX

    def x_of(lead: float) -> float:
        return left + (hi - lead) / span * plot if span > 0 else left + plot / 2

    marks, row_end = [], []
    ordered = sorted(links, key=lambda l: -l["lead_s"])
    for i, l in enumerate(ordered):
        x = x_of(l["lead_s"])
        row = next((r for r, end in enumerate(row_end) if end <= x), len(row_end))
        if row == len(row_end):
            row_end.append(0.0)
        row_end[row] = x + _LABEL_PX
        who = (f"rank {l['rank']}" if l.get("rank") is not None else l.get("host") or "")
        role = "origin" if i == 0 else "failure" if i == len(links) - 1 else "link"
        marks.append({"x": round(x, 1), "row": row, "kind": l["kind"], "who": who, "rel": rel_text(l["lead_s"]),
                      "clock": clock_of(l, ordered[-1]), "role": role})
    rows = len(row_end)
    axis_y = 18 + rows * 38
    ticks = []
    if span > 0:
        step = next((s for s in _NICE if span / s <= 6), _NICE[-1])
        k = 0
        while k * step <= hi + 1e-9:
            if k * step >= lo - 1e-9:
                ticks.append({"x": round(x_of(k * step), 1), "text": rel_text(k * step).replace(".0 ", " ")})
            k += 1
    return {"width": width, "height": axis_y + 26, "axis_y": axis_y, "marks": marks, "ticks": ticks,
            "x0": marks[0]["x"], "x1": marks[-1]["x"]}
