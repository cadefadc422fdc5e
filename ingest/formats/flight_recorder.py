"""PyTorch's Flight Recorder, dumped as JSON -> one rank's last collectives and where each of its
process groups stood.

With ``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) set, every process group of a
rank records its last collectives in a ring buffer; a hang handler or the NCCL watchdog's timeout
(``TORCH_NCCL_DUMP_ON_TIMEOUT``) dumps it, one file per rank. The JSON form
(``torch._C._distributed_c10d._dump_fr_trace_json()``)::

    {"version": "2.10", "comm_lib_version": "", "nccl_comm_state": {},
     "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
     "pg_status": {"0": {"last_completed_collective": "13", "last_enqueued_collective": "14",
                         "last_started_collective": "-1"}},
     "entries": [{"collective_seq_id": 14, "p2p_seq_id": 0, "is_p2p": false, "op_id": 14, "pg_id": 0,
                  "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce",
                  "input_sizes": [[1024]], "input_dtypes": ["Float"], "state": "scheduled",
                  "retired": false, "time_created_ns": 1796672581669374383,
                  "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0,
                  "timeout_ms": 20000, "frames": [...], ...}]}

The rank is not in the file: it is the number its name ends in (``fr_trace_rank_0.json``,
``nccl_trace_rank_3``, ``_dump_5.json``), the convention PyTorch's own ``fr_trace`` analyzer
reads. The default dump is a pickle: aftertrace never unpickles an uploaded file (a pickle runs
code when loaded), so one is named (``flight_recorder_pickle``) and said to need the JSON dump.

Rows: ``collectives`` (role ``call``): one per entry, at ``time_created_ns`` (when the rank
enqueued it, wall clock), backend and collective from ``profiling_name``, process group (id,
description), ``seq`` (the collective or p2p sequence number), elements, dtype and bytes of the
inputs, the group's size from ``pg_config``, and a duration where the recorder timed it (NCCL
with timing on: started -> completed). ``events`` (category ``collective``): ``fr_pg_status``
per process group (attrs ``pg``, ``last_enqueued``, ``last_started``, ``last_completed``, ``ranks``;
no time of its own: placed at the group's last entry) and ``fr_pending`` per entry that had not
completed when the dump was taken (``state`` scheduled or started, not retired), with its
``seq``, ``op``, ``timeout_ms`` and call stack (``frames``, when recorded).

Clock: the host's wall clock (``time_created_ns`` is ns since the epoch).

Real samples: tests/data/flight_recorder/ (PROVENANCE.md).
"""
from __future__ import annotations

import json
import math
import re

from ..model import CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from .kineto_fields import canonical_collective, dtype_bytes

RANK_IN_NAME = re.compile(r"(\d+)(?:\.json)?$")
MAX_JSON_BYTES = 256 << 20
MAX_FRAMES = 16
PICKLE_NAME = re.compile(r"(?:^|/)(?:nccl_trace_rank_|fr_trace_rank_|_dump_)\d+(?:\.pkl|\.pickle)?$")


def rank_of(path: str) -> int | None:
    """The rank a dump's file name ends in (the ``fr_trace`` convention: prefix + rank)."""
    m = RANK_IN_NAME.search(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _int(v) -> int | None:
    """An integer the dump gives as a number or as its text ("13"; -1: none yet)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    return None


def _nelems(sizes) -> int | None:
    """Elements of all the input tensors (``input_sizes``: a shape per tensor)."""
    if not isinstance(sizes, list) or not sizes:
        return None
    total = 0
    for shape in sizes:
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            return None
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def _frames(entry: dict) -> list[str]:
    out = []
    for f in entry.get("frames") or []:
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            out.append(f"{f['name']} ({f.get('filename') or '?'}:{f.get('line')})")
        if len(out) >= MAX_FRAMES:
            break
    return out


class FlightRecorderJsonParser(Parser):
    name = "flight_recorder_json"
    kind = "flight_recorder"
    priority = 30
    clock_domain = CLOCK_WALL
    description = "PyTorch Flight Recorder dumps as JSON (_dump_fr_trace_json, fr_trace's JSON)"
    reads_lines = False

    @classmethod
    def detect(cls, head: Head) -> bool:
        t = head.text.lstrip()[:8000]
        if not t.startswith("{") or '"entries"' not in t:
            return False
        # (the JSON dump's keys are sorted: a long dump's entries come before pg_config and pg_status)
        if '"collective_seq_id"' in t and '"profiling_name"' in t and '"time_created_ns"' in t:
            return True
        return ('"pg_status"' in t or '"pg_config"' in t) and re.search(r'"entries"\s*:\s*\[\s*\]', t) is not None

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        doc = ctx.json_document(MAX_JSON_BYTES, "Flight Recorder JSON")
        if doc is None:
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
            sink.issue("bad_json", "not a Flight Recorder dump (an object with entries)", 1, None)
            return
        rank = rank_of(ctx.rel)
        if rank is not None:
            ctx.rank = rank
        groups: dict[str, list[int]] = {}       # pg name -> its ranks
        for key, cfg in (doc.get("pg_config") or {}).items() if isinstance(doc.get("pg_config"), dict) else ():
            if isinstance(cfg, dict):
                try:
                    ranks = json.loads(cfg.get("ranks")) if isinstance(cfg.get("ranks"), str) else cfg.get("ranks")
                except json.JSONDecodeError:
                    ranks = None
                if isinstance(ranks, list):
                    groups[str(cfg.get("name", key))] = [r for r in ranks if isinstance(r, int)]
        last_at: dict[str, int] = {}            # pg id -> the time of its last entry
        ordinal: dict[str, int] = {}
        for n, e in enumerate(doc["entries"]):
            if not isinstance(e, dict):
                sink.issue("bad_event", f"entry {n}: not an object", None, None)
                continue
            ts = _int(e.get("time_created_ns"))
            if ts is None or ts <= 0:
                sink.issue("bad_event", f"entry {n}: no time_created_ns", None, None)
                continue
            pname = e.get("profiling_name") if isinstance(e.get("profiling_name"), str) else "?"
            backend, _, op = pname.partition(":") if ":" in pname else (None, "", pname)
            pg = e.get("process_group") if isinstance(e.get("process_group"), list) else []
            pg_name = str(pg[0]) if pg else (str(e["pg_id"]) if _int(e.get("pg_id")) is not None else None)
            pg_desc = str(pg[1]) if len(pg) > 1 else None
            pg_id = str(_int(e.get("pg_id"))) if _int(e.get("pg_id")) is not None else pg_name
            p2p = bool(e.get("is_p2p"))
            seq = _int(e.get("p2p_seq_id") if p2p else e.get("collective_seq_id"))
            started, completed = _int(e.get("time_discovered_started_ns")), _int(e.get("time_discovered_completed_ns"))
            dur = None
            if started and completed and completed >= started:
                dur = completed - started
            elif isinstance(e.get("duration_ms"), (int, float)) and not isinstance(e.get("duration_ms"), bool) \
                    and math.isfinite(e["duration_ms"]) and e["duration_ms"] >= 0:
                dur = int(e["duration_ms"] * 1e6)
            nel = _nelems(e.get("input_sizes"))
            dtypes = e.get("input_dtypes") if isinstance(e.get("input_dtypes"), list) else []
            dtype = dtypes[0] if dtypes and isinstance(dtypes[0], str) else None
            size = dtype_bytes(dtype)
            key = pg_id or ""
            # (a dump of one group may name it differently in pg_config: gloo's has no name)
            group = groups.get(pg_name) if pg_name in groups else (next(iter(groups.values())) if len(groups) == 1 else None)
            ordinal[key] = ordinal.get(key, -1) + 1
            sink.add("collectives", rank=rank, role="call", backend=backend,
                     collective=canonical_collective(op) or "unknown", op=pname, pg=pg_name, pg_desc=pg_desc,
                     seq=seq, ordinal=ordinal[key], ts_raw_ns=ts, dur_ns=dur, in_nelems=nel,
                     out_nelems=_nelems(e.get("output_sizes")), dtype=dtype,
                     bytes=nel * size if nel is not None and size else None,
                     group_size=len(group) if group is not None else None)
            last_at[key] = max(ts, last_at.get(key, ts))
            state = e.get("state") if isinstance(e.get("state"), str) else None
            if state in ("scheduled", "started") and not e.get("retired"):
                sink.event(rank=rank, ts_raw_ns=ts, category="collective", name="fr_pending", line=None,
                           text=f"{pname} seq {seq} of process group {pg_name} ({pg_desc}): {state}, not completed",
                           attrs={"pg": pg_name, "pg_id": pg_id, "pg_desc": pg_desc, "seq": seq, "op": pname,
                                  "p2p": p2p, "state": state, "timeout_ms": _int(e.get("timeout_ms")),
                                  "frames": _frames(e)})
        status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
        for pg_id, st in status.items():
            if not isinstance(st, dict):
                continue
            last = {k: _int(st.get(f"last_{k}_collective")) for k in ("enqueued", "started", "completed")}
            sink.event(rank=rank, ts_raw_ns=last_at.get(str(pg_id)), category="collective", name="fr_pg_status",
                       line=None, text=f"process group {pg_id}: last enqueued collective {last['enqueued']}, "
                                       f"started {last['started']}, completed {last['completed']}",
                       attrs={"pg_id": str(pg_id), "last_enqueued": last["enqueued"], "last_started": last["started"],
                              "last_completed": last["completed"]})
        ctx.attrs.update(fr_version=doc.get("version"), entries=len(doc["entries"]), groups=len(status))


class FlightRecorderPickleParser(Parser):
    """A Flight Recorder dump in its default form, a pickle: named, never loaded (loading a pickle
    runs code it names)."""
    name = "flight_recorder_pickle"
    kind = "flight_recorder"
    priority = 31
    clock_domain = CLOCK_WALL
    description = "PyTorch Flight Recorder pickle dumps (recognised, not read: dump them as JSON)"
    reads_lines = False
    reads_binary = True

    @classmethod
    def detect(cls, head: Head) -> bool:
        # pickle protocol 2-5 and the dump's own keys among its first strings
        return head.data[:1] == b"\x80" and head.data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") \
            and b"entries" in head.data[:65536] and (b"pg_status" in head.data[:65536]
                                                      or b"pg_config" in head.data[:65536]
                                                      or PICKLE_NAME.search(head.path) is not None)

    def parse(self, ctx: ParseContext) -> None:
        rank = rank_of(ctx.rel)
        if rank is not None:
            ctx.rank = rank
        ctx.sink.issue("not_read", "a Flight Recorder dump pickled (aftertrace does not load pickles from a bundle: "
                                   "dump it as JSON with torch._C._distributed_c10d._dump_fr_trace_json(), or "
                                   "convert it where it was made)", None, None)


PARSERS = (FlightRecorderJsonParser, FlightRecorderPickleParser)
