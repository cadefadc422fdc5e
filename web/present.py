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
