"""Flame graphs by query: the stack tree of the samples in a window, never a re-parse.

Samples point at leaves of a per-source prefix tree (``stacks``: id, parent,
frame, dso). A flame graph for a window/host/pid/comm is

1. a group-by over ``samples`` (count and period per (source, leaf, comm)),
2. a walk from each distinct leaf to its root (distinct leaves are few),
3. a merge of those paths into one tree keyed by frame names, with the
   process name (comm) as the first level, as FlameGraph does.

A differential flame graph runs the same query for two windows (baseline and
the window of interest) and keeps both values on every node.

Window bounds are UTC nanoseconds and apply to ``ts_utc_ns``: samples whose
source could not be placed in time have none and fall outside any window
(a window-less query includes them).
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field
from datetime import datetime, timezone

from aftertrace.ingest.timeparse import NS


@dataclass
class Node:
    name: str
    value: int = 0
    base: int = 0                      # value in the baseline window (differential graphs)
    children: dict[str, "Node"] = field(default_factory=dict)

    def child(self, name: str) -> "Node":
        c = self.children.get(name)
        if c is None:
            c = self.children[name] = Node(name)
        return c

    def to_json(self, diff: bool = False) -> dict:
        out = {"name": self.name, "value": self.value}
        if diff:
            out["base"] = self.base
        if self.children:
            out["children"] = [c.to_json(diff) for _, c in sorted(self.children.items())]
        return out


@dataclass(frozen=True)
class Filter:
    start_ns: int | None = None
    end_ns: int | None = None
    host: str | None = None
    pid: int | None = None             # matches pid, or tid when perf printed only thread ids
    comm: str | None = None
    event: str | None = None
    weight: str = "samples"            # samples | period


_EPOCH = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?")


def parse_time(text: str | None) -> int | None:
    """'2026-11-29T13:28:40Z', '2026-11-29 13:28:40.5', or epoch seconds -> UTC ns."""
    if text is None or text == "":
        return None
    t = str(text).strip()
    m = _EPOCH.fullmatch(t)
    if m and (m.group(2) or m.group(3)):        # epoch seconds, read exactly to the nanosecond (a float would round at ~240 ns)
        whole, frac = m.group(2), (m.group(3) or "")[:9].ljust(9, "0")
        ns = int(whole or 0) * NS + int(frac)
        return -ns if m.group(1) == "-" else ns
    try:
        return int(round(float(t) * NS))
    except ValueError:
        pass
    t = t.replace("Z", "+00:00")
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * NS + dt.microsecond * 1000


def samples_from(incident_id: str, f: Filter) -> tuple[str, dict]:
    """``FROM samples s JOIN sources src ... WHERE ...`` of the samples the filter ``f`` keeps, and
    its parameters (every reader of the samples here starts from it)."""
    where = ["s.incident_id = $inc"]
    params: dict = {"inc": incident_id}
    if f.start_ns is not None:
        where.append("s.ts_utc_ns >= $start")
        params["start"] = f.start_ns
    if f.end_ns is not None:
        where.append("s.ts_utc_ns < $end")
        params["end"] = f.end_ns
    if f.host:
        where.append("COALESCE(s.host, src.host) = $host")
        params["host"] = f.host
    if f.pid is not None:
        where.append("(s.pid = $pid OR (s.pid IS NULL AND s.tid = $pid))")
        params["pid"] = f.pid
    if f.comm:
        where.append("s.comm = $comm")
        params["comm"] = f.comm
    if f.event:
        where.append("s.event = $event")
        params["event"] = f.event
    return ("FROM samples s JOIN sources src USING (incident_id, source_id) WHERE " + " AND ".join(where),
            params)


def _counts(store, incident_id: str, f: Filter) -> list[tuple]:
    base, params = samples_from(incident_id, f)
    value = "sum(s.period)" if f.weight == "period" else "count(*)"
    sql = f"SELECT s.source_id, s.stack_id, COALESCE(s.comm, '[unknown]') AS comm, {value} AS n {base} GROUP BY 1, 2, 3"
    return store.cursor().execute(sql, params).fetchall()


def stack_paths(store, incident_id: str, counts: list[tuple]) -> dict[tuple[int, int], list[str]]:
    """(source, leaf) -> root-first frame names, for the leaves in ``counts``."""
    sources = sorted({c[0] for c in counts if c[1] is not None})
    out: dict[tuple[int, int], list[str]] = {}
    for sid in sources:
        rows = store.cursor().execute(
            "SELECT stack_id, parent_id, frame, dso FROM stacks WHERE incident_id = ? AND source_id = ?",
            [incident_id, sid]).fetchall()
        parent = {r[0]: r[1] for r in rows}
        label = {r[0]: _label(r[2], r[3]) for r in rows}
        for c in counts:
            if c[0] != sid or c[1] is None:
                continue
            path, node, guard = [], c[1], 0
            while node is not None and guard < 10_000:
                path.append(label.get(node, "[missing frame]"))
                node = parent.get(node)
                guard += 1
            out[(sid, c[1])] = path[::-1]
    return out


def _label(frame: str, dso: str | None) -> str:
    if frame == "[unknown]" and dso and dso != "[unknown]":
        return f"[{dso.rsplit('/', 1)[-1]}]"
    return frame


def choices(store, incident_id: str, f: Filter, limit: int = 25) -> dict:
    """What the samples of the window ``f`` (its times only) could be narrowed to, each with its
    sample count, most first: hosts, commands, processes (with their command). A graph that is
    mostly another job's processes shows it here before anyone reads the frames."""
    base, params = samples_from(incident_id, Filter(f.start_ns, f.end_ns))
    cur = store.cursor()
    hosts = cur.execute(f"SELECT COALESCE(s.host, src.host) AS h, count(*) AS n {base} "
                        "GROUP BY 1 ORDER BY n DESC, h LIMIT $lim", dict(params, lim=limit)).fetchall()
    comms = cur.execute(f"SELECT COALESCE(s.comm, '[unknown]') AS c, count(*) AS n {base} "
                        "GROUP BY 1 ORDER BY n DESC, c LIMIT $lim", dict(params, lim=limit)).fetchall()
    pids = cur.execute(f"SELECT COALESCE(s.pid, s.tid) AS p, COALESCE(s.host, src.host) AS h, "
                       f"mode(COALESCE(s.comm, '[unknown]')) AS c, count(*) AS n {base} "
                       "AND COALESCE(s.pid, s.tid) IS NOT NULL GROUP BY 1, 2 ORDER BY n DESC, p LIMIT $lim",
                       dict(params, lim=limit)).fetchall()
    total = cur.execute(f"SELECT count(*) {base}", params).fetchone()[0]
    return {"total": total,
            "hosts": [{"host": h, "samples": n} for h, n in hosts if h is not None],
            "comms": [{"comm": c, "samples": n} for c, n in comms],
            "pids": [{"pid": p, "host": h, "comm": c, "samples": n} for p, h, c, n in pids]}


def build(store, incident_id: str, f: Filter = Filter(), baseline: Filter | None = None) -> Node:
    """The merged stack tree; with ``baseline``, every node also carries the baseline value."""
    root = Node("all")
    for target, which in ((f, "value"), (baseline, "base")):
        if target is None:
            continue
        counts = _counts(store, incident_id, target)
        paths = stack_paths(store, incident_id, counts)
        for sid, leaf, comm, n in counts:
            n = int(n or 0)
            frames = [comm] + (paths.get((sid, leaf), []) if leaf is not None else ["[no stack]"])
            node = root
            setattr(node, which, getattr(node, which) + n)
            for name in frames:
                node = node.child(name)
                setattr(node, which, getattr(node, which) + n)
    return root


def folded(root: Node, diff: bool = False) -> list[str]:
    """Collapsed stacks ``comm;outer;...;leaf count`` (``count_base count`` when diff)."""
    lines: list[str] = []

    def walk(node: Node, prefix: list[str]) -> None:
        own = node.value - sum(c.value for c in node.children.values())
        own_base = node.base - sum(c.base for c in node.children.values())
        if prefix and (own > 0 or (diff and own_base > 0)):
            stack = ";".join(p.replace(";", ":") for p in prefix)
            lines.append(f"{stack} {own_base} {own}" if diff else f"{stack} {own}")
        for name, c in sorted(node.children.items()):
            walk(c, prefix + [name])

    walk(root, [])
    return lines
