"""The perf samples as a speedscope file (https://www.speedscope.app, its ``file-format-schema.json``).

One *sampled* profile per process (host, pid): its samples in time order, each a stack of
indices into the file's shared frame list (root first), with a weight. Consecutive samples with
the same stack are one entry whose weight is their count, so a process that sat in one place for
a second is one entry, not a thousand, and the time-order view stays right. The unit is ``none``
(a weight counts samples); profiles are ordered by their sample count, most first, and named
``host pid comm`` (``rank N`` when the report names the rank's process).

Worked example: process 17988 on vm took samples with stacks A;B, A;B, A;C, A;B: the frames are
``[A, B, C]`` and its profile's ``samples`` are ``[[0, 1], [0, 2], [0, 1]]`` with ``weights``
``[2, 1, 1]`` (``tests/analysis/test_speedscope.py``).
"""
from __future__ import annotations

import json
from typing import BinaryIO

from .. import flamegraph as fg

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def profiles(rows, paths: dict, ranks: dict | None = None) -> dict:
    """The speedscope document of ``rows`` = (host, pid, comm, source_id, stack_id) in time order
    per process, with ``paths`` = (source_id, stack_id) -> root-first frame names."""
    frames: list[dict] = []
    index: dict[str, int] = {}
    by_proc: dict[tuple, dict] = {}
    names = {(v.get("host"), v["pid"]): k for k, v in (ranks or {}).items()}

    def frame(name: str) -> int:
        i = index.get(name)
        if i is None:
            i = index[name] = len(frames)
            frames.append({"name": name})
        return i

    for host, pid, comm, sid, leaf in rows:
        p = by_proc.get((host, pid))
        if p is None:
            p = by_proc[(host, pid)] = {"comm": comm, "samples": [], "weights": [], "last": None}
        stack = paths.get((sid, leaf)) if leaf is not None else None
        key = (sid, leaf)
        if key == p["last"]:
            p["weights"][-1] += 1
            continue
        p["last"] = key
        p["samples"].append([frame(n) for n in (stack or ["[no stack]"])])
        p["weights"].append(1)
    out = []
    for (host, pid), p in sorted(by_proc.items(), key=lambda kv: -sum(kv[1]["weights"])):
        total = sum(p["weights"])
        rank = names.get((host, pid))
        name = " ".join(str(x) for x in (host, pid, p["comm"]) if x is not None)
        if rank is not None:
            name += f" (rank {rank})"
        out.append({"type": "sampled", "name": name, "unit": "none", "startValue": 0, "endValue": total,
                    "samples": p["samples"], "weights": p["weights"]})
    return {"$schema": SCHEMA, "version": "0.0.1", "shared": {"frames": frames}, "profiles": out,
            "activeProfileIndex": 0, "exporter": "aftertrace"}


# The export format this module writes (see server/exports.py: every module that declares one is a format)
EXPORT = {"name": "speedscope", "suffix": ".speedscope.json", "media_type": "application/json", "windowed": True,
          "what": "the perf samples of a window, one profile per process, in time order (www.speedscope.app)"}


def export(src, out: BinaryIO, start: str | None, end: str | None, progress=None) -> dict:
    """The format's writer as server/exports.py calls it: the samples of the window."""
    return dict(write(src.store, src.incident_id, out, src.window(start, end), f"aftertrace incident {src.incident_id}",
                      src.rank_processes()), window={"start": start, "end": end})


def write(store, incident_id: str, out: BinaryIO, f: fg.Filter, name: str, ranks: dict | None = None) -> dict:
    """Write the samples of the window/filters ``f`` as a speedscope file; returns what was written."""
    base, params = fg.samples_from(incident_id, f)
    leaves = store.cursor().execute(f"SELECT DISTINCT s.source_id, s.stack_id {base} AND s.stack_id IS NOT NULL",
                                    params).fetchall()
    paths = fg.stack_paths(store, incident_id, [(sid, leaf, None, 0) for sid, leaf in leaves])
    cur = store.cursor().execute(
        "SELECT COALESCE(s.host, src.host), COALESCE(s.pid, s.tid), COALESCE(s.comm, '[unknown]'), s.source_id, "
        f"s.stack_id {base} ORDER BY 1, 2, s.ts_utc_ns NULLS LAST, s.ts_raw_ns", params)
    n = 0

    def rows():
        # (read in batches: the samples are never all Python objects at once, only their merged entries)
        nonlocal n
        while batch := cur.fetchmany(100_000):
            n += len(batch)
            yield from batch
    doc = profiles(rows(), paths, ranks)
    doc["name"] = name
    data = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    out.write(data)
    return {"format": "speedscope", "samples": n, "profiles": len(doc["profiles"]),
            "frames": len(doc["shared"]["frames"]), "bytes": len(data)}
