"""Chrome trace JSON of a whole incident: every host and rank merged on the aligned UTC clock.

``write(store, incident_id, out, progress=None) -> stats`` streams one JSON object, one event
per line, that chrome://tracing and Perfetto's JSON importer open::

    {"displayTimeUnit":"ns","otherData":{...},"traceEvents":[
    {"ph":"M","name":"process_name","pid":...,"args":{"name":"vm: rank 0 (pid 17988)"}},
    {"ts":1795958894285563.524,"dur":12.500,"name":...,"args":{...},"cat":...,"ph":"X","pid":...,"tid":...},
    ...
    ],"samples":[
    {"ts":...,"pid":...,"tid":...,"cpu":0,"name":"cpu-clock","weight":20408163,"sf":"22:618"},
    ...
    ],"stackFrames":{
    "22:0":{"name":"[unknown]","category":"[unknown]"},
    "22:1":{"name":"method_vectorcall","category":"/usr/lib/libpython3.11.so.1.0","parent":"22:0"},
    ...
    }}

It is valid JSON whatever the incident holds (no rows at all included).

Mapping (tracks and ids: see :mod:`analysis.export`)
--------------------------------------------------
==================  ===========================================================================
store               Chrome trace event
==================  ===========================================================================
time                ``ts`` = ``ts_utc_ns`` in microseconds since the epoch, written as a number
                    with exactly three decimals (the nanoseconds are kept in the text; a reader
                    that parses them into a double keeps about 0.25 us at today's epoch);
                    ``dur`` likewise; ``displayTimeUnit`` ``ns``
host                a process named ``host <name>``; each source without a process is a thread
                    of it named by its path; host-level counters are its counters
process / rank      a process (the OS pid, or a per-host range when two hosts share pids, see
                    the package doc) named ``<host>: rank R (pid P)``, with ``process_labels``
                    and a ``process_sort_index`` that keeps a host's ranks together; its
                    process-wide events on a thread ``process-wide``
thread              its tid, ``thread_name`` from perf's comm when known
GPU stream, perf    threads of the process named ``GPU 0 stream 7``, ``... perf sched``,
  sched, steps,     ``steps (cpu)``, ``collectives (exec)``, ``... (overlap N)``
  collectives,
  lanes
events              spans: ``X`` (``dur``); instants: ``i`` with ``"s":"t"``; ``cat`` = the
                    event's category; ``args``: source, line, kind, severity, text (cut to 500
                    characters), args (the attrs JSON object as it is stored), interpolated,
                    dur_ns (clamped spans); spans are laid out on lanes so that each thread's
                    ``X`` events nest (the JSON importer needs it)
metrics             ``C`` events on the process (or host) the source belongs to, named
                    ``<entity> <metric>``, one series named after the unit
steps, collectives  ``X`` events ``step N`` / ``<collective>`` on their threads
report              ``i`` events on the process ``aftertrace findings`` (thread ``findings``,
                    and one thread per causal chain) with summary, lead, evidence, ...
samples + stacks    ``samples`` (ts, pid, tid, cpu, event, period as ``weight``, ``sf``) and
                    ``stackFrames``: the perf stack prefix tree itself, ids ``<source>:<node>``
==================  ===========================================================================

Strings are written by orjson (every character escaped as JSON needs, non-ASCII as UTF-8);
a string no encoder takes (lone surrogates) is replaced, never fatal. Stats: events per phase,
tracks per kind, rows per table (exported, unplaced, clamped, overflowed), samples, stack
frames, the time range and the bytes.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import BinaryIO, Callable

import orjson

from . import Track, Walk, arrow_reader, count_rows, cut, iter_samples

LINES_PER_WRITE = 4096


def _us(ns: int) -> bytes:
    """Nanoseconds as microseconds with exactly three decimals, e.g. ``1795958894285563.524``."""
    if ns < 0:
        return b"-" + _us(-ns)
    return b"%d.%03d" % (ns // 1000, ns % 1000)


def _dumps(obj) -> bytes:
    try:
        return orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_clean_obj(obj), default=str)


def _clean_obj(v):
    if isinstance(v, str):
        return v.encode("utf-8", "replace").decode("utf-8")
    if isinstance(v, dict):
        return {_clean_obj(str(k)): _clean_obj(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean_obj(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, orjson.Fragment):
        return v
    return v


def _attrs_value(attrs: str):
    """The attrs JSON as it is stored when it parses (embedded unchanged), else the text."""
    if attrs.endswith("\u2026"):           # cut by the query: too long to be JSON any more
        return attrs
    try:
        orjson.loads(attrs)
    except (orjson.JSONDecodeError, UnicodeEncodeError):
        return cut(attrs)
    return orjson.Fragment(attrs)


class _Lines:
    """The JSON text: sections of comma-separated lines, buffered."""

    def __init__(self, out: BinaryIO):
        self.out = out
        self.buf: list[bytes] = []
        self.bytes = 0
        self.first = True

    def raw(self, b: bytes) -> None:
        self.buf.append(b)
        if len(self.buf) >= LINES_PER_WRITE:
            self.flush()

    def item(self, b: bytes) -> None:
        self.raw((b"\n" if self.first else b",\n") + b)
        self.first = False

    def section(self, opener: bytes) -> None:
        self.raw(opener)
        self.first = True

    def flush(self) -> None:
        if self.buf:
            data = b"".join(self.buf)
            self.out.write(data)
            self.bytes += len(data)
            self.buf = []


class _Exporter(Walk):
    def __init__(self, store, incident_id: str, out: BinaryIO, progress: Callable[[int, int], None] | None):
        self.lines = _Lines(out)
        self.phases: Counter = Counter()
        self.rows: dict = {}
        super().__init__(store, incident_id, progress, self._metadata)

    def _event(self, head: bytes, body: dict) -> None:
        """One event line: ``head`` (the pre-formatted ``"ts":...`` members) then ``body``."""
        b = _dumps(body)
        self.lines.item(b"{" + head + b"," + b[1:] if len(b) > 2 else b"{" + head + b"}")
        self.phases[body.get("ph")] += 1

    def _meta(self, name: str, pid: int, tid: int | None, args: dict) -> None:
        ev = {"ph": "M", "name": name, "pid": pid, "tid": tid if tid is not None else 0, "args": args}
        self.lines.item(_dumps(ev))
        self.phases["M"] += 1

    def _metadata(self, t: Track) -> None:
        """Names and order of a new track (``M`` events)."""
        if t.kind in ("host", "findings"):
            self._meta("process_name", t.json_pid, None, {"name": t.name})
            self._meta("process_sort_index", t.json_pid, None, {"sort_index": t.sort_index})
            if t.kind == "findings":
                self._meta("thread_name", t.json_pid, t.json_tid, {"name": "findings"})
                self._meta("thread_sort_index", t.json_pid, t.json_tid, {"sort_index": -1})
        elif t.kind == "process":
            self._meta("process_name", t.json_pid, None, {"name": t.name})
            if t.labels:
                self._meta("process_labels", t.json_pid, None, {"labels": ",".join(t.labels)})
            self._meta("process_sort_index", t.json_pid, None, {"sort_index": t.sort_index})
            self._meta("thread_name", t.json_pid, t.json_tid, {"name": "process-wide"})
            self._meta("thread_sort_index", t.json_pid, t.json_tid, {"sort_index": -1})
        elif t.kind != "counter":
            self._meta("thread_name", t.json_pid, t.json_tid, {"name": t.name})
            self._meta("thread_sort_index", t.json_pid, t.json_tid, {"sort_index": t.sort_index})

    def _spans(self, table: str) -> None:
        """A span table's rows: ``X`` events on their lanes, ``i`` events for instants."""
        for m in self.spans(table, self.rows[table]):
            args: dict = {"source": m.source}
            args.update(m.values)
            if "args" in args:
                args["args"] = _attrs_value(args["args"])
            body: dict = {"name": m.name, "args": args}
            if m.category:
                body["cat"] = m.category
            if m.lane is not None:
                body["ph"] = "X"
                body["pid"], body["tid"] = m.lane.json_pid, m.lane.json_tid
                self._event(b'"ts":' + _us(m.ts) + b',"dur":' + _us(m.end - m.ts), body)
            else:
                body["ph"] = "i"
                body["s"] = "t"
                body["pid"], body["tid"] = m.track.json_pid, m.track.json_tid
                self._event(b'"ts":' + _us(m.ts), body)

    def metrics(self) -> None:
        for ts, value, c in self.counters(self.rows["metrics"]):
            self._event(b'"ts":' + _us(ts), {"ph": "C", "name": c.label, "pid": c.track.json_pid,
                                             "args": {c.series: value}})

    def findings(self) -> None:
        for fm in self.findings_marks(self.rows["findings"]):
            args = dict(fm.values)
            if fm.evidence:
                args["evidence"] = [{k: (cut(str(v)) if k == "text" else v) for k, v in e.items()}
                                    for e in fm.evidence]
            self._event(b'"ts":' + _us(fm.finding.ts_ns),
                        {"ph": "i", "s": "t", "name": fm.finding.kind, "cat": "aftertrace.finding",
                         "pid": fm.track.json_pid, "tid": fm.track.json_tid, "args": args})

    def sample_threads(self) -> dict:
        """Create (with their metadata, while ``traceEvents`` is open) the threads of the samples."""
        rows = self.cur.execute("""
            SELECT DISTINCT source_id, host, pid, tid FROM samples
            WHERE incident_id = ? AND ts_utc_ns >= 0 ORDER BY ALL""", [self.iid]).fetchall()
        threads = {}
        for key in rows:
            th = self.sample_thread(*key)
            if th is not None:
                threads[key] = th
        return threads

    def samples(self, threads: dict) -> None:
        st = self.rows["samples"]
        for batch in iter_samples(self.cur, self.iid):
            for ts, sid, host, pid, tid, cpu, _comm, event, period, stack_id in batch:
                ev = {}
                th = threads.get((sid, host, pid, tid))
                if th is not None:
                    ev["pid"], ev["tid"] = th.json_pid, th.json_tid
                if cpu is not None:
                    ev["cpu"] = cpu
                if event is not None:
                    ev["name"] = event
                if period is not None:
                    ev["weight"] = period
                if stack_id is not None:
                    ev["sf"] = f"{sid}:{stack_id}"
                else:
                    st["no_stack"] += 1
                b = _dumps(ev)
                self.lines.item(b'{"ts":' + _us(ts) + (b"," + b[1:] if len(b) > 2 else b"}"))
            st["exported"] += len(batch)
            if batch:       # (every sample is written, in time order)
                self.seen(batch[0][0], batch[-1][0], batch[-1][0])
            self.tick(len(batch))

    def stack_frames(self) -> int:
        n = 0
        reader = arrow_reader(self.cur, """
            SELECT k.source_id, k.stack_id, k.parent_id, k.frame, k.dso FROM stacks k
            WHERE k.incident_id = $iid AND k.source_id IN (SELECT DISTINCT source_id FROM samples
                                                           WHERE incident_id = $iid AND stack_id IS NOT NULL
                                                                 AND ts_utc_ns >= 0)
            ORDER BY k.source_id, k.stack_id""", {"iid": self.iid})
        for batch in reader:
            cols = [c.to_pylist() for c in batch.columns]
            for sid, stack_id, parent, frame, dso in zip(*cols):
                node = {"name": frame}
                if dso is not None:
                    node["category"] = dso
                if parent is not None:
                    node["parent"] = f"{sid}:{parent}"
                self.lines.item(b'"%d:%d":' % (sid, stack_id) + _dumps(node))
                n += 1
        return n

    def run(self) -> dict:
        counts = count_rows(self.cur, self.iid)
        self.rows = {
            "events": {"exported": 0, "spans": 0, "instants": 0, "unplaced": counts["events"][1]},
            "steps": {"exported": 0, "spans": 0, "instants": 0, "unplaced": counts["steps"][1]},
            "collectives": {"exported": 0, "spans": 0, "instants": 0, "unplaced": counts["collectives"][1]},
            "metrics": {"exported": 0, "skipped_values": 0, "unplaced": counts["metrics"][1]},
            "samples": {"exported": 0, "no_stack": 0, "unplaced": counts["samples"][1]},
            "findings": {"findings": 0, "chain_links": 0, "unplaced": 0},
        }
        self.total = sum(v[0] for v in counts.values()) + self.findings_total()
        other = {"generator": "aftertrace", "incident_id": self.iid,
                 "clock": "ts: microseconds since the Unix epoch, UTC (aligned across hosts)"}
        self.lines.raw(b'{"displayTimeUnit":"ns","otherData":' + _dumps(other) + b',"traceEvents":[')
        self.lines.first = True
        for table in ("events", "steps", "collectives"):
            self._spans(table)
        self.metrics()
        self.findings()
        threads = self.sample_threads()
        self.lines.section(b'\n],"samples":[')
        self.samples(threads)
        self.lines.section(b'\n],"stackFrames":{')
        frames = self.stack_frames()
        self.lines.raw(b"\n}}\n")
        self.lines.flush()
        lanes = self.lanes
        self.rows["events"].update(clamped=lanes.clamped, overflowed=lanes.overflowed, as_instant=lanes.as_instant)
        return {
            "format": "chrome",
            "incident_id": self.iid,
            "bytes": self.lines.bytes,
            "events": dict(sorted(self.phases.items()), total=sum(self.phases.values())),
            "tracks": dict(sorted(self.layout.counts.items()), total=len(self.layout.tracks)),
            "rows": self.rows,
            "stack_frames": frames,
            **self.walked(),
        }


# The export format this module writes (see server/exports.py: every module that declares one is a format)
EXPORT = {"name": "chrome", "suffix": ".json", "media_type": "application/json", "aliases": ("json",),
          "what": "Chrome trace JSON of every rank merged on the aligned clock (chrome://tracing, Perfetto's JSON "
                  "importer)"}


# (write(store, incident_id, out, progress) writes the incident as Chrome trace JSON)
export, write = _Exporter.export, _Exporter.write
