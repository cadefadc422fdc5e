"""Perfetto protobuf trace (``.pftrace``) of a whole incident, on the aligned UTC clock.

``write(store, incident_id, out, progress=None) -> stats`` streams the incident's rows into
``out`` as ``TracePacket`` messages built with the ``perfetto`` package's protos
(``perfetto.protos.perfetto.trace.perfetto_trace_pb2``). The writer is the package's
:class:`~perfetto.trace_builder.proto_builder.StreamingTraceProtoBuilder` with one change:
packets are collected into one ``Trace`` message per ``PACKETS_PER_WRITE`` packets before they
are serialised (a ``Trace`` is one repeated field, so a run of ``Trace`` messages is one trace;
the bytes are exactly those the builder writes packet by packet, for about two thirds of the
CPU: no ``Trace`` and no copy per packet).

Mapping (tracks: see :mod:`analysis.export`)
-------------------------------------------
==================  ===========================================================================
store               Perfetto
==================  ===========================================================================
(clock)             a ``ClockSnapshot`` with BOOTTIME == REALTIME: packet timestamps are the
                    store's ``ts_utc_ns`` unchanged, and the UI can show them as UTC
host                a root ``TrackDescriptor`` named ``host <name>`` (children sorted by name)
process / rank      a ``TrackDescriptor`` with a ``ProcessDescriptor`` (pid, ``<host>: rank R
                    (pid P)``, labels ``host H`` / ``rank R``) whose ``parent_uuid`` is the
                    host track (trace processor keeps process tracks at the top level and
                    ignores the parent; the host is in the name)
thread              ``ThreadDescriptor`` (pid, tid, name from perf's comm) under its process
GPU stream, perf    child tracks of the process / thread (``sibling_merge_behavior`` NONE)
  sched, steps,
  collectives,
  overlap lanes
events              spans (``dur_ns`` not null): ``TYPE_SLICE_BEGIN`` at ``ts_utc_ns`` and
                    ``TYPE_SLICE_END`` at ``ts_utc_ns + dur_ns`` on the span's lane; instants:
                    ``TYPE_INSTANT``. Name and category interned (``event_names``,
                    ``event_categories``). Debug annotations: ``source`` (path in the bundle,
                    an interned string value), ``line``, ``kind``, ``severity``, ``text`` (cut
                    to 500 characters), ``args`` (the attrs JSON as a dict: first 32 keys,
                    nested values as JSON text), ``interpolated``, and ``dur_ns`` when the
                    span was clamped or written as an instant
metrics             one counter track per (entity, metric, unit), named ``<entity> <metric>
                    (<unit>)`` with ``unit_name``; each value a ``TYPE_COUNTER`` packet
                    (``double_counter_value``); NULL / non-finite values skipped and counted
samples + stacks    ``PerfSample`` packets (pid, tid, cpu, ``callstack_iid``) on their own
                    sequence, which interns ``function_names`` (frames as printed),
                    ``mapping_paths`` and ``mappings`` (one per DSO), ``frames`` and
                    ``callstacks`` (root frame first) as samples first need them; the UI shows
                    them as CPU samples / flame graphs of the process and thread
steps               slices ``step N`` on ``steps (cpu|gpu)`` of the rank's process
collectives         slices ``<collective>`` on ``collectives (exec|call)`` (op, backend, pg,
                    seq, ordinal, bytes, group size, device, stream as annotations)
report              instants on ``aftertrace findings`` (anomalies and the failure) and on
                    ``chain N: <origin>`` per causal chain (best first), with summary, host,
                    rank, pid, source, lead, confidence, why the link follows the one before,
                    and the evidence lines (an array of {source, line, text}); a flow
                    (``flow_ids``) joins a chain's links in order
==================  ===========================================================================

Sequences and interning: sequence 1 holds the clock snapshot, every track descriptor and every
track event; sequence 2 the perf samples. The first packet of each sequence has
``first_packet_on_sequence``, ``previous_packet_dropped`` and ``SEQ_INCREMENTAL_STATE_CLEARED``;
every packet that refers to interned data has ``SEQ_NEEDS_INCREMENTAL_STATE``; an interned
entry is written in the first packet that uses it (the debug annotation names, a fixed list, all
in the first packet). Tables are written one after the other, each in time order with its own
slice ends (an END at t comes before anything that starts at t); trace processor sorts packets
by time on import and keeps the file order of equal times.

The same incident gives the same bytes (track uuids are hashes of stable keys, rows are read in
a total order); the returned stats count packets per kind, tracks per kind, rows per table
(exported, unplaced, clamped, overflowed), interned entries, the time range and the bytes.
"""
from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import BinaryIO, Callable

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from . import (MAX_INTERNED, TEXT_MAX, End, Track, Walk, arrow_table, clean, count_rows, cut, iter_samples,
               parse_attrs, stable_uuid)

PACKETS_PER_WRITE = 2048
SEQ_EVENTS = 1
SEQ_SAMPLES = 2
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_INT64 = (-(1 << 63), (1 << 63) - 1)
_MAX_STACK_DEPTH = 4096


class _BatchingBuilder(StreamingTraceProtoBuilder):
    """``create_packet`` adds the packet to the pending ``Trace``; ``write_packet`` counts it and
    writes the pending ``Trace`` once it holds ``PACKETS_PER_WRITE`` packets."""

    def __init__(self, file: BinaryIO):
        super().__init__(file)
        self._trace = pb.Trace()
        self._pending = 0
        self.bytes = 0
        self.packets: Counter = Counter()

    def create_packet(self) -> pb.TracePacket:
        return self._trace.packet.add()

    def write_packet(self, packet: pb.TracePacket, kind: str = "other") -> None:  # noqa: ARG002
        self.packets[kind] += 1
        self._pending += 1
        if self._pending >= PACKETS_PER_WRITE:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            data = self._trace.SerializeToString()
            self._file.write(data)
            self.bytes += len(data)
            self._trace = pb.Trace()
            self._pending = 0


class _Interner:
    """str -> iid for one kind of interned data of a sequence (iids from 1)."""

    def __init__(self, limit: int = MAX_INTERNED):
        self.ids: dict = {}
        self.limit = limit

    def get(self, value) -> tuple[int | None, bool]:
        """(iid, whether it is new); (None, False) when the table is full."""
        iid = self.ids.get(value)
        if iid is not None:
            return iid, False
        if len(self.ids) >= self.limit:
            return None, False
        iid = len(self.ids) + 1
        self.ids[value] = iid
        return iid, True


def _json(v) -> str:
    try:
        return orjson.dumps(v).decode()
    except (TypeError, orjson.JSONEncodeError):
        return str(v)


def _add(add, iid: int | None, name: str | None, v) -> None:
    """Append one debug annotation (``add`` is a repeated field's ``add``) holding ``v``: scalars
    as such, strings cut to ``TEXT_MAX``, containers as JSON text; None is left out."""
    key = {"name_iid": iid} if iid is not None else {"name": name}
    t = type(v)
    if t is str:
        add(string_value=v if len(v) <= TEXT_MAX else cut(v), **key)
    elif t is int:
        if _INT64[0] <= v <= _INT64[1]:
            add(int_value=v, **key)
        else:
            add(string_value=str(v), **key)
    elif t is float:
        if math.isfinite(v):
            add(double_value=v, **key)
        else:
            add(string_value=str(v), **key)
    elif t is bool:
        add(bool_value=v, **key)
    elif v is None:
        return
    else:
        add(string_value=cut(_json(v)), **key)


def _add_args(add, iid: int, args) -> None:
    """The event's attrs: a dict annotation with one entry per key (nested values as JSON text),
    or the text when it is no JSON object."""
    if type(args) is not dict:
        _add(add, iid, None, args)
        return
    if not args:
        return
    a = add(name_iid=iid)
    entry = a.dict_entries.add
    for k, v in args.items():
        t = type(v)
        if t is str:
            entry(name=k, string_value=v if len(v) <= TEXT_MAX else cut(v))
        elif t is int and _INT64[0] <= v <= _INT64[1]:
            entry(name=k, int_value=v)
        elif t is float and math.isfinite(v):
            entry(name=k, double_value=v)
        elif t is bool:
            entry(name=k, bool_value=v)
        elif v is not None:
            entry(name=k, string_value=cut(v if t is str else _json(v)) if t in (dict, list) else str(v))


def _deep_clean(v):
    if isinstance(v, str):
        return clean(v)
    if isinstance(v, dict):
        return {clean(str(k)): _deep_clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_deep_clean(x) for x in v]
    return v


class _StackTree:
    """One perf source's stack prefix tree: parent and frame index per node (compact ``array``s
    when the node ids are dense, else dicts), and the distinct frames as (name, dso)."""

    def __init__(self, cur, incident_id: str, source_id: int):
        tbl = arrow_table(cur, """
            SELECT stack_id, COALESCE(parent_id, -1) AS parent_id,
                   dense_rank() OVER (ORDER BY frame, dso NULLS FIRST) - 1 AS fk, frame, dso
            FROM stacks WHERE incident_id = ? AND source_id = ?""", [incident_id, source_id])
        ids = tbl.column("stack_id").to_pylist()
        parents = tbl.column("parent_id").to_pylist()
        fks = tbl.column("fk").to_pylist()
        n = max(ids) + 1 if ids else 0
        self.dense = n <= 4 * len(ids) + 1024 and (not ids or min(ids) >= 0)
        if self.dense:
            self.parent = array("q", [-2]) * n          # -2: no such node
            self.fk = array("q", [0]) * n
            for i, p, k in zip(ids, parents, fks):
                self.parent[i] = p
                self.fk[i] = k
        else:
            self.parent = dict(zip(ids, parents))
            self.fk = dict(zip(ids, fks))
        self.frames: list = [None] * ((max(fks) + 1) if fks else 0)
        for k, f, d in zip(fks, tbl.column("frame").to_pylist(), tbl.column("dso").to_pylist()):
            if self.frames[k] is None:
                self.frames[k] = (f, d)

    def path(self, leaf: int) -> list[int] | None:
        """Frame indexes from the root to ``leaf`` (None: unknown node or a loop)."""
        out = []
        node = leaf
        parent, fk = self.parent, self.fk
        for _ in range(_MAX_STACK_DEPTH):
            if self.dense:
                if node < 0 or node >= len(parent) or parent[node] == -2:
                    return None
            elif node not in parent:
                return None
            out.append(fk[node])
            node = parent[node]
            if node < 0:
                out.reverse()
                return out
        return None


# Debug annotation names, interned once in the first packet of the event sequence.
ANNOTATION_NAMES = (
    "source", "line", "kind", "severity", "text", "args", "interpolated", "dur_ns", "marker",
    "op", "backend", "pg", "seq", "ordinal", "bytes", "group_size", "device", "stream",
    "summary", "role", "time", "host", "rank", "pid", "lead_s", "provenance", "confidence",
    "uncertainty_s", "entity", "time_window", "because", "chain", "evidence",
)
_A = {n: i + 1 for i, n in enumerate(ANNOTATION_NAMES)}


class _Exporter(Walk):
    def __init__(self, store, incident_id: str, out: BinaryIO, progress: Callable[[int, int], None] | None):
        self.w = _BatchingBuilder(out)
        self.first_on_seq = {SEQ_EVENTS: True, SEQ_SAMPLES: True}
        self.names = _Interner()
        self.cats = _Interner()
        self.src_strings = _Interner()
        self.stats_rows: dict = {}
        super().__init__(store, incident_id, progress, self._descriptor)

    # -- packets
    def _packet(self, seq: int, needs_state: bool) -> pb.TracePacket:
        pk = self.w.create_packet()
        pk.trusted_packet_sequence_id = seq
        if self.first_on_seq[seq]:
            self.first_on_seq[seq] = False
            pk.first_packet_on_sequence = True
            pk.previous_packet_dropped = 1     # a bool on the wire (the bundled protos declare uint32)
            pk.sequence_flags = _CLEARED | (_NEEDS if needs_state else 0)
        elif needs_state:
            pk.sequence_flags = _NEEDS
        return pk

    def _first_packet(self, ts: int) -> None:
        """The clock snapshot (BOOTTIME == REALTIME at ``ts``), which also opens the event sequence
        and interns the annotation names."""
        pk = self._packet(SEQ_EVENTS, True)
        pk.timestamp = ts
        cs = pk.clock_snapshot
        cs.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=ts)
        cs.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=ts)
        cs.primary_trace_clock = pb.BUILTIN_CLOCK_BOOTTIME
        add = pk.interned_data.debug_annotation_names.add
        for name, iid in _A.items():
            add(iid=iid, name=name)
        self.w.write_packet(pk, "clock_snapshot")

    def _descriptor(self, t: Track) -> None:
        pk = self._packet(SEQ_EVENTS, False)
        td = pk.track_descriptor
        td.uuid = t.uuid
        if t.parent is not None:
            td.parent_uuid = t.parent.uuid
        if t.kind == "process":
            td.process.pid = t.pid
            td.process.process_name = clean(t.name)
            td.process.process_labels.extend(clean(x) for x in t.labels)
        elif t.kind == "thread":
            td.thread.pid = t.pid
            td.thread.tid = t.tid
            td.thread.thread_name = clean(t.name)
        else:
            td.name = clean(t.name)
            if t.kind == "counter":
                td.counter.SetInParent()
                if t.unit and t.unit != "-":
                    td.counter.unit_name = clean(t.unit)
            if t.kind == "host":
                td.child_ordering = pb.TrackDescriptor.LEXICOGRAPHIC
            elif t.kind == "findings":
                td.child_ordering = pb.TrackDescriptor.EXPLICIT
            if t.parent is not None:
                td.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
                if t.kind == "chain":
                    td.sibling_order_rank = t.sort_index
        self.w.write_packet(pk, "track_descriptor")

    def _event(self, ts: int, typ: int, track_uuid: int, name: str | None, category: str | None,
               ) -> tuple[pb.TracePacket, pb.TrackEvent]:
        """A TrackEvent packet with its name and category interned (written by the caller)."""
        pk = self._packet(SEQ_EVENTS, True)
        pk.timestamp = ts
        te = pk.track_event
        te.type = typ
        te.track_uuid = track_uuid
        if name is None:
            name = "(unnamed)"
        iid, new = self.names.get(name)
        if iid is None:
            te.name = clean(name)
        else:
            te.name_iid = iid
            if new:
                pk.interned_data.event_names.add(iid=iid, name=clean(name))
        if category:
            ciid, cnew = self.cats.get(category)
            if ciid is None:
                te.categories.append(clean(category))
            else:
                te.category_iids.append(ciid)
                if cnew:
                    pk.interned_data.event_categories.add(iid=ciid, name=clean(category))
        return pk, te

    def _source(self, te: pb.TrackEvent, pk: pb.TracePacket, path: str) -> None:
        siid, new = self.src_strings.get(path)
        if siid is None:
            te.debug_annotations.add(name_iid=_A["source"], string_value=clean(path))
            return
        te.debug_annotations.add(name_iid=_A["source"], string_value_iid=siid)
        if new:
            pk.interned_data.debug_annotation_string_values.add(iid=siid, str=clean(path).encode("utf-8"))

    def _annotate(self, te: pb.TrackEvent, values: list[tuple[str, object]]) -> None:
        """Append ``(name, value)`` annotations (names from ``ANNOTATION_NAMES``; ``args`` is the
        attrs JSON text, written as its object). Strings no encoder takes (lone surrogates) are
        replaced, never fatal."""
        add = te.debug_annotations.add
        n = len(te.debug_annotations)
        try:
            for k, v in values:
                if k == "args":
                    _add_args(add, _A[k], parse_attrs(v))
                else:
                    _add(add, _A[k], None, v)
        except (UnicodeEncodeError, ValueError):
            del te.debug_annotations[n:]
            for k, v in values:
                v = _deep_clean(parse_attrs(v) if k == "args" else v)
                if k == "args":
                    _add_args(add, _A[k], v)
                else:
                    _add(add, _A[k], None, v)

    def _end(self, ts: int, uuid: int) -> None:
        pk = self._packet(SEQ_EVENTS, False)
        pk.timestamp = ts
        te = pk.track_event
        te.type = _END
        te.track_uuid = uuid
        self.w.write_packet(pk, "slice_end")

    # -- a span table's rows, in time order, each slice's end before the rows that start after it
    def _spans(self, table: str) -> None:
        write = self.w.write_packet
        for m in self.spans(table, self.stats_rows[table], ends=True):
            if isinstance(m, End):
                self._end(m.ts, m.lane.uuid)
                continue
            if m.lane is None:
                pk, te = self._event(m.ts, _INSTANT, m.track.uuid, m.name, m.category)
            else:
                pk, te = self._event(m.ts, _BEGIN, m.lane.uuid, m.name, m.category)
            self._source(te, pk, m.source)
            if m.values:
                self._annotate(te, m.values)
            write(pk, "instant" if m.lane is None else "slice_begin")

    def metrics(self) -> None:
        write = self.w.write_packet
        for ts, value, c in self.counters(self.stats_rows["metrics"]):
            pk = self._packet(SEQ_EVENTS, False)
            pk.timestamp = ts
            te = pk.track_event
            te.type = _COUNTER
            te.track_uuid = c.track.uuid
            te.double_counter_value = value
            write(pk, "counter")

    def findings(self) -> None:
        flows: dict[int, int] = {}
        for fm in self.findings_marks(self.stats_rows["findings"]):
            f = fm.finding
            pk, te = self._event(f.ts_ns, _INSTANT, fm.track.uuid, f.kind, "aftertrace.finding")
            vals = []
            for k, v in fm.values:
                if k == "time_window":
                    if isinstance(v, list):
                        vals.append((k, _json(v)))
                elif not isinstance(v, (dict, list)):
                    vals.append((k, v))
            if f.chain is not None:
                flow = flows.setdefault(f.chain, stable_uuid("chain-flow", self.iid, f.chain))
                (te.terminating_flow_ids if fm.last else te.flow_ids).append(flow)
            self._annotate(te, vals)
            if fm.evidence:
                a = te.debug_annotations.add(name_iid=_A["evidence"])
                for e in fm.evidence:
                    item = a.array_values.add()
                    for k, v in e.items():
                        _add(item.dict_entries.add, None, k, _deep_clean(v))
            self.w.write_packet(pk, "instant")

    @staticmethod
    def _intern_stack(idata, tree: "_StackTree", path: list[int], cs_iid: int, fnames: _Interner,
                      mpaths: _Interner, maps: _Interner, frames: _Interner) -> None:
        """Write the callstack ``cs_iid`` (and the frames, names and mappings it needs that were
        not written yet) into ``idata``."""
        frame_ids = []
        for k in path:
            fname, dso = tree.frames[k]
            fr_iid, fr_new = frames.get((fname, dso))
            if fr_new:
                fn_iid, fn_new = fnames.get(fname)
                if fn_new:
                    idata.function_names.add(iid=fn_iid, str=(clean(fname) or "").encode("utf-8"))
                m_iid, m_new = maps.get(dso or "")
                if m_new:
                    parts = [x for x in (dso or "[unknown]").split("/") if x] or [dso or "?"]
                    path_ids = []
                    for part in parts:
                        pp_iid, pp_new = mpaths.get(part)
                        if pp_new:
                            idata.mapping_paths.add(iid=pp_iid, str=clean(part).encode("utf-8"))
                        path_ids.append(pp_iid)
                    idata.mappings.add(iid=m_iid, path_string_ids=path_ids)
                idata.frames.add(iid=fr_iid, function_name_id=fn_iid, mapping_id=m_iid)
            frame_ids.append(fr_iid)
        idata.callstacks.add(iid=cs_iid, frame_ids=frame_ids)

    def samples(self) -> None:
        st = self.stats_rows["samples"]
        cur = self.cur
        sids = [r[0] for r in cur.execute(
            "SELECT DISTINCT source_id FROM samples WHERE incident_id = ? AND stack_id IS NOT NULL "
            "AND ts_utc_ns >= 0 ORDER BY 1", [self.iid]).fetchall()]
        trees = {sid: _StackTree(cur, self.iid, sid) for sid in sids}
        fnames, mpaths, maps, frames, stacks = (_Interner(1 << 62) for _ in range(5))
        for batch in iter_samples(cur, self.iid):
            for ts, sid, host, pid, tid, cpu, _comm, _event, _period, stack_id in batch:
                th = self.sample_thread(sid, host, pid, tid)
                cs_iid, new_stack, path = None, False, None
                if stack_id is None:
                    st["no_stack"] += 1
                elif sid in trees:
                    cs_iid, new_stack = stacks.get((sid, stack_id))
                    if new_stack:
                        path = trees[sid].path(stack_id)
                        if path is None:
                            del stacks.ids[(sid, stack_id)]
                            cs_iid, new_stack = None, False
                    if cs_iid is None:
                        st["bad_stack"] += 1
                pk = self._packet(SEQ_SAMPLES, cs_iid is not None)
                if new_stack:
                    self._intern_stack(pk.interned_data, trees[sid], path, cs_iid, fnames, mpaths, maps, frames)
                pk.timestamp = ts
                ps = pk.perf_sample
                if cpu is not None and cpu >= 0:
                    ps.cpu = cpu
                if th is not None:
                    ps.pid = th.pid
                    ps.tid = th.tid
                if cs_iid is not None:
                    ps.callstack_iid = cs_iid
                self.w.write_packet(pk, "perf_sample")
                st["exported"] += 1
            if batch:
                self.seen(batch[0][0], batch[-1][0], batch[-1][0])
            self.tick(len(batch))
        st["interned_callstacks"] = len(stacks.ids)
        st["interned_frames"] = len(frames.ids)
        st["interned_function_names"] = len(fnames.ids)
        st["interned_mappings"] = len(maps.ids)

    def run(self) -> dict:
        counts = count_rows(self.cur, self.iid)
        zero = {"exported": 0}
        self.stats_rows = {
            "events": dict(zero, spans=0, instants=0, unplaced=counts["events"][1]),
            "steps": dict(zero, spans=0, instants=0, unplaced=counts["steps"][1]),
            "collectives": dict(zero, spans=0, instants=0, unplaced=counts["collectives"][1]),
            "metrics": dict(zero, skipped_values=0, unplaced=counts["metrics"][1]),
            "samples": dict(zero, no_stack=0, bad_stack=0, unplaced=counts["samples"][1]),
            "findings": {"findings": 0, "chain_links": 0, "unplaced": 0},
        }
        self.total = sum(v[0] for v in counts.values()) + self.findings_total()
        first = self.cur.execute("""
            SELECT MIN(t) FROM (
                SELECT MIN(ts_utc_ns) FILTER (ts_utc_ns >= 0) AS t FROM events WHERE incident_id = $i
                UNION ALL SELECT MIN(ts_utc_ns) FILTER (ts_utc_ns >= 0) FROM samples WHERE incident_id = $i
                UNION ALL SELECT MIN(ts_utc_ns) FILTER (ts_utc_ns >= 0) FROM metrics WHERE incident_id = $i)""",
                                 {"i": self.iid}).fetchall()[0][0]
        self._first_packet(first if first is not None and first >= 0 else 0)
        for table in ("events", "steps", "collectives"):
            self._spans(table)
        self.metrics()
        self.findings()
        self.samples()
        self.w.flush()
        lanes = self.lanes
        self.stats_rows["events"].update(clamped=lanes.clamped, overflowed=lanes.overflowed,
                                         as_instant=lanes.as_instant)
        return {
            "format": "perfetto",
            "incident_id": self.iid,
            "bytes": self.w.bytes,
            "packets": dict(sorted(self.w.packets.items()), total=sum(self.w.packets.values())),
            "tracks": dict(sorted(self.layout.counts.items()), total=len(self.layout.tracks)),
            "rows": self.stats_rows,
            "interned": {"event_names": len(self.names.ids), "categories": len(self.cats.ids),
                         "annotation_names": len(_A), "source_paths": len(self.src_strings.ids)},
            **self.walked(),
        }


# The export format this module writes (see server/exports.py: every module that declares one is a format)
EXPORT = {"name": "perfetto", "suffix": ".pftrace", "media_type": "application/octet-stream", "aliases": ("pftrace",),
          "what": "Perfetto protobuf trace: host -> process/rank -> thread tracks, spans, counters, perf samples, the "
                  "findings (ui.perfetto.dev)"}


# (write(store, incident_id, out, progress) writes the incident as a Perfetto trace)
export, write = _Exporter.export, _Exporter.write
