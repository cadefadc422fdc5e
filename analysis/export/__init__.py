"""Trace exports of an analysed incident: the shared layer under :mod:`.perfetto` and :mod:`.chrome`.

Both exporters are pure functions over the store (``write(store, incident_id, out, progress)``);
this module holds what they share: which track a row lands on, the ids tracks get, the order
rows are read in, how spans that do not nest are laid out, and the walk itself (:class:`Walk`:
every row as a :class:`Mark` on its track and lane, each span's :class:`End` in time order for
formats that write ends apart, the metrics as counter values, the report's findings as
:class:`FindingMark`, the progress and the time range written), which each format's writer
extends with how it writes a span, an instant, a counter value or a finding.

Clock
-----
Every exported time is ``ts_utc_ns`` (the aligned UTC clock, ns since the epoch) -- the clock
the timeline and the report use. Rows whose source could not be placed on it (``ts_utc_ns`` is
NULL, or before 1970) are skipped and counted per table as ``unplaced``.

Tracks (one per line of the timeline)
-------------------------------------
Identity columns that are NULL on a row mean "the source's" (``events.host`` null: the
source's host, same for rank and pid), so every row's host/rank/pid is its own value, else its
source's. Then:

========================  ===========================================================  =========
row                       track                                                        kind
========================  ===========================================================  =========
(every host)              ``host <name>``: root of the host's host-level tracks         host
pid known, tid known      the thread (pid, tid) of the process (host, pid)              thread
pid known, no tid         the process (host, pid) itself: ``<host>: rank R (pid P)``    process
neither                   the source's own track under its host (named by its path)    source
Kineto GPU activity       ``GPU <device> stream <stream>`` under the rank's process     gpu
  (kernel, gpu_memcpy,    (device/stream from ``attrs``; ``gpu_user_annotation`` has
  gpu_memset, gpu_user_   neither and gets ``GPU annotations``): Kineto stores them
  annotation)             with pid/tid NULL because its pid/tid are device and stream
perf tracepoints and      ``perf sched`` under the thread (on-CPU intervals do not nest
  on-CPU spans            with the thread's own spans)                                 sched
metrics                   a counter per (entity, metric, unit), under the source's     counter
                          process when the source has one (Kineto counters, a rank's
                          log), else under the host (cgroup, PSI, nvidia-smi)
steps / collectives       ``steps (cpu|gpu)`` / ``collectives (exec|call)`` under the  steps,
                          rank's process                                               collectives
report                    ``aftertrace findings`` (anomalies, the failure) and one     findings,
                          child track per causal chain                                 chain
========================  ===========================================================  =========

A thread whose pid no row states (perf's default output has only the tid) gets the pid a
Kineto/log row pairs it with on the same host; else the tid is taken as its own pid (true for
every main thread). Perf samples use the same rule, and so do perf's tracepoint rows, whose
``pid`` names the task the event is about (a wakeup's wakee), not the thread it ran on.

Numbers: pids and tids go out as they are, unless one number is used on two hosts (containers
start every job at small pids); then each host's ids are moved into their own range
(``(host_index + 1) << 22 | id``; Linux pids are below 2**22) so that two hosts' processes are
never merged -- the names always carry the real pid. Tracks that are no OS thread (hosts,
sources, GPU streams, overflow lanes, findings) get synthetic ids from ``SYNTHETIC_BASE`` on
(Chrome JSON needs a pid/tid for every track), in the order they are first used.

Track uuids (Perfetto) are a 63-bit BLAKE2b hash of the track's key -- its kind and the stable
values that define it (host, pid, tid, source path, device, stream, metric, ...) -- so the same
incident gives the same uuids, run after run and store after store.

Order and nesting
-----------------
Rows are read in one ``ORDER BY`` per table: start time, longer spans first (a parent before
the children that start with it), then the source, line and a hash of the remaining columns,
so that the output depends on the rows only, never on how DuckDB stored them. Large tables are
read in time windows of about ``WINDOW_ROWS`` rows (bounds from approximate quantiles of the
start time), each sorted on its own, so that DuckDB never sorts more than one window at a time;
the concatenation is the same total order whatever the bounds. The price is one scan of the
table per window: cheap where row groups are time-clustered (a source's rows are loaded in
file order, so DuckDB's min/max skip most groups), a full decode per window where rows are
shuffled (about 0.25 s per million rows and window on two cores). Perfetto's
thread tracks (and the Chrome JSON importer) need the spans of one track to nest; real traces
break that: Kineto CPU ops written as absolute float microseconds overshoot their parent by a
rounding step, async work and merged duplicate cycles overlap, log spans overlap anything.
:class:`Lanes` places each span on the first lane of its track where it nests (lane 0 is the
track itself); a span that overshoots the enclosing span by at most ``NEST_SLACK_NS`` is
clamped to it (counted as ``clamped``, its real duration kept in its args); any other span goes
to an overflow lane ``<track> (overlap N)`` (counted as ``overflowed``). Past ``MAX_LANES``
lanes a span is written as an instant (counted as ``as_instant``).

Memory: rows are streamed in Arrow batches of ``BATCH_ROWS``; what is kept is one entry per
track, the open spans, the interned strings (bounded: names past ``MAX_INTERNED`` go out
inline), and for the Perfetto samples one parent array per perf source's stack tree.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import orjson

from aftertrace.ingest.formats.kineto_fields import GPU_CATEGORIES

Progress = Callable[[int, int], None]

BATCH_ROWS = 16384
WINDOW_ROWS = 500_000     # rows DuckDB sorts at once (see ``_windows``)
TEXT_MAX = 500            # characters of an event's text kept in the export
ATTRS_PARSE_MAX = 4000    # attrs JSON up to this length is exported as structured args
ATTRS_KEYS_MAX = 32       # at most this many top-level args per event
NEST_SLACK_NS = 1000      # a child may overshoot its parent by this much before it overflows
MAX_LANES = 64            # overflow lanes per track before spans become instants
MAX_INTERNED = 200_000    # interned strings per table before names go out inline
SYNTHETIC_BASE = 1 << 30  # first id of tracks that are no OS process/thread
_HOST_SHIFT = 22          # Linux pid_max <= 2**22
_MAX_REMAPPED_HOSTS = (1 << (30 - _HOST_SHIFT)) - 2


def stable_uuid(*key: Any) -> int:
    """A non-zero 63-bit id derived from ``key`` (str/int/None parts): the same key, the same id."""
    h = hashlib.blake2b(repr(key).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    v = int.from_bytes(h, "big") & ((1 << 63) - 1)
    return v or 1


def clean(s: str | None) -> str | None:
    """A string every encoder accepts (lone surrogates, which no UTF-8 encoder writes, replaced)."""
    if s is None:
        return None
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


def parse_attrs(attrs: str | None) -> dict | str | None:
    """``attrs`` as a dict when it is a JSON object (at most ``ATTRS_KEYS_MAX`` keys), else the
    text itself (cut to ``TEXT_MAX``)."""
    if attrs is None:
        return None
    try:
        v = orjson.loads(attrs)
    except (orjson.JSONDecodeError, UnicodeEncodeError, TypeError):
        return cut(attrs)
    if isinstance(v, dict):
        if len(v) > ATTRS_KEYS_MAX:
            v = dict(list(v.items())[:ATTRS_KEYS_MAX])
        return v
    return cut(attrs)


def cut(s: str | None, n: int = TEXT_MAX) -> str | None:
    if s is None or len(s) <= n:
        return clean(s)
    return clean(s[:n]) + "\u2026"


# -- the incident's sources ---------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    source_id: int
    path: str
    kind: str
    host: str | None
    rank: int | None
    pid: int | None


def load_sources(cur, incident_id: str) -> dict[int, Source]:
    rows = cur.execute("SELECT source_id, path, kind, host, rank, pid FROM sources WHERE incident_id = ? "
                       "ORDER BY source_id", [incident_id]).fetchall()
    return {r[0]: Source(*r) for r in rows}


def incident_exists(cur, incident_id: str) -> bool:
    return bool(cur.execute("SELECT 1 FROM incidents WHERE incident_id = ?", [incident_id]).fetchall())


# -- tracks ----------------------------------------------------------------------------------------

@dataclass(eq=False)
class Track:
    key: tuple
    kind: str            # host | process | thread | source | gpu | sched | lane | counter | steps |
    #                      collectives | findings | chain
    name: str
    parent: "Track | None"
    uuid: int
    pid: int | None = None          # OS process id as exported (process/thread tracks)
    tid: int | None = None          # OS thread id as exported (thread tracks)
    json_pid: int = 0               # Chrome JSON process of the track
    json_tid: int | None = None     # Chrome JSON thread of the track (None: counters, hosts)
    unit: str | None = None         # counters
    sort_index: int = 0
    labels: tuple = ()
    lanes: list = field(default_factory=list)   # lane tracks (lanes[0] is the track itself)
    stack: list = field(default_factory=list)   # ends of the spans open on this lane


@dataclass(frozen=True)
class CounterTrack:
    """A metric's counter track, as :meth:`Walk.counters` made it: its ``label`` (entity and metric)
    and ``series`` (its unit, or ``value``) for formats that name the value, its track for all."""
    track: "Track"
    label: str
    series: str


@dataclass(slots=True)
class Mark:
    """A row of a span table (events, steps, collectives) as the walk lays it out: a span on
    ``lane`` from ``ts`` to ``end`` (its end clamped where it overshot its parent), or, with
    ``lane`` None, an instant on ``track`` (``end``: ``ts`` plus its duration when it had one).
    ``values`` are the row's annotations in the order every format writes them, after the
    source: ``args`` is the attrs JSON text as stored, ``dur_ns`` the real duration of a
    clamped span or of a span written as an instant."""
    ts: int
    end: int
    track: "Track"
    lane: "Track | None"
    name: str
    category: str | None
    source: str
    values: list


@dataclass(slots=True)
class End:
    """Where a span of the walk ends (formats that write the begin and the end of a slice apart
    ask the walk for these: they come in time order, before any row that starts at or after them)."""
    ts: int
    lane: "Track"


@dataclass(slots=True)
class FindingMark:
    """A finding of the report (an anomaly, the failure or a chain's link) on its track, with the
    values every format writes (``summary``, the link's scalar fields, ``time_window`` as the
    report has it, ``because``, ``chain``) and its evidence lines ({source, line, text});
    ``last``: it ends its chain."""
    finding: "Finding"
    track: "Track"
    values: list
    evidence: list
    last: bool


# the link fields a finding carries into a trace, in order
FINDING_FIELDS = ("role", "time", "host", "rank", "pid", "source", "lead_s", "provenance", "confidence",
                  "uncertainty_s", "entity", "time_window")


class Walk:
    """What an exporter keeps while it walks an incident's rows: the cursor and sources, the
    tracks (``on_track`` writes a new track's description), the progress over every row read, and
    the first start, last start and last end written (the trace's time range).

    The walk itself is here, once for every format: :meth:`spans` lays out each row of a span
    table on its track and lane (a :class:`Mark`, and with ``ends`` each span's :class:`End` in
    time order), :meth:`counters` gives the metrics as counter values, :meth:`findings_marks`
    the report on its tracks, :meth:`sample_thread` a sample's thread. A format's writer is a
    subclass that only says how it writes a track, a span, an instant, a counter value, a
    finding and a sample."""

    def __init__(self, store, incident_id: str, progress: Callable[[int, int], None] | None,
                 on_track: Callable[["Track"], None]):
        self.cur = store.cursor()
        self.iid = incident_id
        self.progress = progress
        self.sources = load_sources(self.cur, incident_id)
        self.layout = Layout(self.cur, incident_id, self.sources, on_track)
        self.lanes = Lanes(self.layout)
        self.t_min = None     # first start
        self.t_max = None     # last start
        self.t_end = None     # last end
        self.done = 0
        self.total = 0
        self._findings: tuple | None = None

    @classmethod
    def write(cls, store, incident_id: str, out, progress: Callable[[int, int], None] | None = None) -> dict:
        """Write the incident to ``out`` in this writer's format; returns what was written (counts,
        tracks, the time range)."""
        if not incident_exists(store.cursor(), incident_id):
            raise KeyError(f"no incident {incident_id!r}")
        return cls(store, incident_id, out, progress).run()

    @classmethod
    def export(cls, src, out, start: str | None, end: str | None, progress=None) -> dict:
        """:meth:`write` as server/exports.py calls a format's writer: the whole incident (a trace
        has no window)."""
        return cls.write(src.store, src.incident_id, out, progress)

    def tick(self, n: int) -> None:
        self.done += n
        if self.progress:
            self.progress(self.done, self.total)

    def seen(self, first: int, last: int, end: int) -> None:
        """Widen the time range by rows written from ``first`` to ``last`` (starts), ending at ``end``."""
        if self.t_min is None or first < self.t_min:
            self.t_min = first
        if self.t_max is None or last > self.t_max:
            self.t_max = last
        if self.t_end is None or end > self.t_end:
            self.t_end = end

    def walked(self) -> dict:
        """What every format's summary says of the walk: the processes given other ids, and the
        time range written (ns, UTC)."""
        return {"pids_remapped": self.layout.remapped, "first_ts_ns": self.t_min, "last_ts_ns": self.t_max,
                "end_ts_ns": self.t_end, "time_range_ns": None if self.t_min is None else [self.t_min, self.t_end]}

    # -- the span tables
    def spans(self, table: str, stats: dict, ends: bool = False) -> Iterator["Mark | End"]:
        """The rows of ``table`` (``events``, ``steps`` or ``collectives``) in export order as
        :class:`Mark`, and with ``ends`` an :class:`End` for each span, in time order before the
        first row that starts at or after it (the last ones after the last row). Counts spans,
        instants and rows exported in ``stats``; widens the time range."""
        rows, laid = {"events": (iter_events, self._event_row), "steps": (iter_steps, self._step_row),
                      "collectives": (iter_collectives, self._collective_row)}[table]
        place = self.lanes.place
        heap: list = []
        n = 0                  # (ties between equal ends: first pushed, first out)
        pop, push = heapq.heappop, heapq.heappush
        first = last = end_max = None
        spans = instants = 0
        for batch in rows(self.cur, self.iid):
            if not batch:
                continue
            for row in batch:
                ts, dur = row[0], row[1]
                if ends:
                    while heap and heap[0][0] <= ts:
                        e, _, lane = pop(heap)
                        yield End(e, lane)
                track, name, category, source, values = laid(row)
                # a span on the first lane of its track where it nests; an instant where it has
                # no duration (or a negative one) or every lane of its track is taken
                lane = None
                if dur is not None and dur >= 0:
                    lane, end = place(track, ts, ts + dur)
                    if lane is None or end != ts + dur:
                        values.append(("dur_ns", dur))
                if lane is None:
                    end = ts + (dur if dur is not None and dur > 0 else 0)
                    instants += 1
                else:
                    spans += 1
                    if ends:
                        n += 1
                        push(heap, (end, n, lane))
                if end_max is None or end > end_max:
                    end_max = end
                yield Mark(ts, end, track, lane, name, category, source, values)
            if first is None:
                first = batch[0][0]
            last = batch[-1][0]
            self.tick(len(batch))
        while heap:
            e, _, lane = pop(heap)
            yield End(e, lane)
        stats["spans"] += spans
        stats["instants"] += instants
        stats["exported"] += spans + instants
        if first is not None:
            self.seen(first, last, end_max)

    # each row of a span table as (track, name, category, source path, values)
    def _event_row(self, row: tuple) -> tuple:
        (ts, dur, sid, host, rank, pid, tid, category, name, kind, severity, line, text, attrs, device, stream,
         interp) = row
        src = self.sources[sid]
        track = self.layout.event_track(src, host, rank, pid, tid, category, device, stream)
        values = []             # (appends: this runs for every event of the incident)
        if line is not None:
            values.append(("line", line))
        if kind is not None:
            values.append(("kind", kind))
        if severity is not None:
            values.append(("severity", severity))
        if text is not None:
            values.append(("text", text))
        if attrs is not None:
            values.append(("args", attrs))
        if interp:
            values.append(("interpolated", True))
        return track, name if name is not None else "(unnamed)", category, src.path, values

    def _step_row(self, row: tuple) -> tuple:
        ts, dur, sid, host, rank, pid, side, step, name = row
        src = self.sources[sid]
        layout = self.layout
        track = layout.child(layout.process_or_host(src, host, rank, pid), "steps", f"steps ({side})",
                             sort_index=1 << 43)
        return track, f"step {step}", "step", src.path, [("marker", name)]

    def _collective_row(self, row: tuple) -> tuple:
        (ts, dur, sid, host, rank, pid, role, backend, coll, op, pg, cseq, ordinal, nbytes, gsize, device,
         stream) = row
        src = self.sources[sid]
        layout = self.layout
        track = layout.child(layout.process_or_host(src, host, rank, pid), "collectives", f"collectives ({role})",
                             sort_index=1 << 43)
        values = [(k, v) for k, v in (("op", op), ("backend", backend), ("pg", pg), ("seq", cseq),
                                      ("ordinal", ordinal), ("bytes", nbytes), ("group_size", gsize),
                                      ("device", device), ("stream", stream)) if v is not None]
        return track, coll if coll is not None else "(unnamed)", "collective", src.path, values

    # -- the report
    def findings_marks(self, stats: dict) -> Iterator[FindingMark]:
        """The report's anomalies, failure and chain links in time order, each on the findings
        track or its chain's (``chain N: <origin> (score S)``); counts them in ``stats``."""
        items, chains, unplaced = self._report_findings()
        stats["unplaced"] = unplaced
        if not items:
            return
        root = self.layout.findings()
        tracks = {}
        for ci, ch in enumerate(chains):
            label = f"chain {ci + 1}: {ch.get('origin') or 'chain'}"
            score = ch.get("score")
            if isinstance(score, (int, float)) and not isinstance(score, bool):
                label += f" (score {score:g})"
            tracks[ci] = self.layout.child(root, "chain", label, ci, sort_index=ci)
        last_link = {f.chain: i for i, f in enumerate(items) if f.chain is not None}
        for i, f in enumerate(items):
            link = f.link
            values: list = [("summary", f.summary)]
            values += [(k, link[k]) for k in FINDING_FIELDS if link.get(k) is not None]
            if f.because:
                values.append(("because", f.because))
            if f.chain is not None:
                values.append(("chain", f"{f.chain + 1}: {chains[f.chain].get('summary') or ''}"))
            evidence = [{k: e[k] for k in ("source", "line", "text") if e.get(k) is not None}
                        for e in link.get("evidence") or [] if isinstance(e, dict)]
            yield FindingMark(f, root if f.chain is None else tracks[f.chain], values, evidence,
                              f.chain is not None and i == last_link[f.chain])
            stats["chain_links" if f.chain is not None else "findings"] += 1
        self.tick(len(items))
        self.seen(items[0].ts_ns, items[-1].ts_ns, items[-1].ts_ns)

    def findings_total(self) -> int:
        """How many findings :meth:`findings_marks` walks (for the progress's total)."""
        return len(self._report_findings()[0])

    def _report_findings(self) -> tuple[list, list, int]:
        if self._findings is None:
            self._findings = load_findings(self.cur, self.iid)
        return self._findings

    # -- samples
    def sample_thread(self, sid: int, host: str | None, pid: int | None, tid: int | None) -> Track | None:
        """The thread track a perf sample of (source, host, pid, tid) goes on (None: no pid known)."""
        h = host if host is not None else (self.sources[sid].host or "")
        p = self.layout.pid_of(h, pid, tid)
        return self.layout.thread(h, p, tid if tid is not None and tid >= 0 else p) if p is not None else None

    def counters(self, stats: dict) -> Iterator[tuple[int, float, CounterTrack]]:
        """The metric rows as (ts, value, counter), in time order, one counter track per (source,
        host, entity, metric, unit) under the source's process or host; a value that is not a
        finite number is skipped and counted (``stats``: ``exported``, ``skipped_values``)."""
        srcs, layout = self.sources, self.layout
        made: dict[tuple, CounterTrack] = {}
        first = last = None
        for batch in iter_metrics(self.cur, self.iid):
            for ts, sid, host, entity, metric, value, unit in batch:
                if value is None or not math.isfinite(value):
                    stats["skipped_values"] += 1
                    continue
                key = (sid, host, entity, metric, unit)
                c = made.get(key)
                if c is None:
                    parent = layout.process_or_host(srcs[sid], host)
                    label = f"{entity} {metric}" if entity else metric
                    named = bool(unit) and unit != "-"
                    track = layout.child(parent, "counter", label + (f" ({unit})" if named else ""), entity, metric,
                                         unit, unit=unit, sort_index=1 << 44)
                    c = made[key] = CounterTrack(track, label, unit if named else "value")
                yield ts, value, c
                stats["exported"] += 1
                if first is None:
                    first = ts
                last = ts
            self.tick(len(batch))
        if first is not None:
            self.seen(first, last, last)


class Layout:
    """Decides each row's track and creates tracks on first use; ``on_new(track)`` is called once
    per new track (parents first) so that an exporter can write its descriptor there."""

    def __init__(self, cur, incident_id: str, sources: dict[int, Source], on_new: Callable[[Track], None]):
        self.sources = sources
        self.on_new = on_new
        self.tracks: dict[tuple, Track] = {}
        self.counts: dict[str, int] = {}
        self._synthetic = SYNTHETIC_BASE
        self._prepass(cur, incident_id)

    # -- what the whole incident says about hosts, processes and threads
    def _prepass(self, cur, iid: str) -> None:
        base = """
        WITH src AS (SELECT source_id, host, rank, pid, kind FROM sources WHERE incident_id = $iid),
        ev AS (SELECT COALESCE(e.host, s.host, '') AS host, COALESCE(e.pid, s.pid) AS pid, e.tid,
                      COALESCE(e.rank, s.rank) AS rank, s.kind AS kind
               FROM events e JOIN src s USING (source_id) WHERE e.incident_id = $iid),
        sa AS (SELECT COALESCE(m.host, s.host, '') AS host, m.pid, m.tid, m.comm
               FROM samples m JOIN src s USING (source_id) WHERE m.incident_id = $iid)
        """
        p = {"iid": iid}
        # processes and their rank (events and sources)
        procs = cur.execute(base + """
            SELECT host, pid, MIN(rank) FROM (SELECT host, pid, rank FROM ev WHERE pid IS NOT NULL
                                              UNION ALL SELECT COALESCE(host, ''), pid, rank FROM src
                                              WHERE pid IS NOT NULL)
            GROUP BY host, pid""", p).fetchall()
        # the pid a Kineto/log row pairs a tid with
        pairs = cur.execute(base + """
            SELECT host, tid, MIN(pid) FROM ev
            WHERE kind IN ('torch_trace', 'app_log', 'nccl_log') AND pid >= 0 AND tid >= 0
            GROUP BY host, tid""", p).fetchall()
        # the command name perf saw most often for a tid (samples, and its on-CPU intervals)
        comms = cur.execute(base + """
            SELECT host, tid, comm, SUM(n) FROM (
                SELECT host, tid, comm, COUNT(*) AS n FROM sa WHERE tid IS NOT NULL AND comm IS NOT NULL
                GROUP BY host, tid, comm
                UNION ALL
                SELECT COALESCE(e.host, s.host, ''), e.tid, json_extract_string(e.attrs, '$.comm'), COUNT(*)
                FROM events e JOIN src s USING (source_id)
                WHERE e.incident_id = $iid AND s.kind = 'perf_script' AND e.name = 'oncpu' AND e.tid IS NOT NULL
                GROUP BY ALL)
            WHERE comm IS NOT NULL GROUP BY host, tid, comm""", p).fetchall()
        # every os id a host uses, and every host
        ids = cur.execute(base + """
            SELECT DISTINCT host, id FROM (
                SELECT host, pid AS id FROM ev UNION ALL SELECT host, tid FROM ev
                UNION ALL SELECT host, pid FROM sa UNION ALL SELECT host, tid FROM sa
                UNION ALL SELECT COALESCE(host, ''), pid FROM src)
            WHERE id IS NOT NULL AND id >= 0""", p).fetchall()
        hosts = cur.execute(base + """
            SELECT COALESCE(host, '') FROM src UNION SELECT host FROM ev UNION SELECT host FROM sa
            UNION SELECT COALESCE(m.host, s.host, '') FROM metrics m JOIN src s USING (source_id)
                  WHERE m.incident_id = $iid""", p).fetchall()
        self.proc_rank: dict[tuple, int | None] = {(h or "", pid): rank for h, pid, rank in procs}
        self.tid_pid: dict[tuple, int] = {(h or "", tid): pid for h, tid, pid in pairs}
        best: dict[tuple, tuple] = {}
        for h, tid, comm, n in comms:
            k = (h or "", tid)
            if k not in best or (n, comm) > best[k]:
                best[k] = (n, comm)
        self.comm: dict[tuple, str] = {k: v[1] for k, v in best.items()}
        self.hosts = sorted({h or "" for (h,) in hosts} | {h or "" for h, _ in ids})
        self.host_index = {h: i for i, h in enumerate(self.hosts)}
        users: dict[int, int] = {}
        for _h, n in ids:
            users[n] = users.get(n, 0) + 1
        collide = any(v > 1 for v in users.values())
        self.remapped = collide and len(self.hosts) <= _MAX_REMAPPED_HOSTS
        self._offset = {h: ((i + 1) << _HOST_SHIFT if self.remapped else 0) for h, i in self.host_index.items()}

    # -- ids
    def os_id(self, host: str, n: int) -> int:
        off = self._offset.get(host, 0)
        return off | n if off and 0 <= n < (1 << _HOST_SHIFT) else n

    def _synth(self) -> int:
        self._synthetic += 1
        return self._synthetic

    def pid_of(self, host: str, pid: int | None, tid: int | None) -> int | None:
        """The process of a row: its own pid, else the one paired with its tid, else the tid. A
        pid that Kineto/log rows show to be a thread of another process (perf's sched payloads
        name tasks, i.e. threads, ``pid``) is replaced by that process."""
        if pid is not None and pid >= 0:
            return self.tid_pid.get((host, pid), pid)
        if tid is not None and tid >= 0:
            return self.tid_pid.get((host, tid), tid)
        return None

    # -- track creation
    def _add(self, t: Track) -> Track:
        self.tracks[t.key] = t
        t.lanes.append(t)
        self.counts[t.kind] = self.counts.get(t.kind, 0) + 1
        self.on_new(t)
        return t

    def host(self, host: str) -> Track:
        key = ("host", host)
        t = self.tracks.get(key)
        if t is None:
            hi = self.host_index.get(host, len(self.host_index))
            t = self._add(Track(key, "host", f"host {host}" if host else "host (unknown)", None,
                                stable_uuid(*key), json_pid=self._synth(), sort_index=(hi + 1) << 20))
        return t

    def process(self, host: str, pid: int, rank: int | None = None) -> Track:
        key = ("process", host, pid)
        t = self.tracks.get(key)
        if t is None:
            h = self.host(host)
            r = self.proc_rank.get((host, pid), rank)
            comm = self.comm.get((host, pid))
            what = f"rank {r} (pid {pid})" if r is not None else (f"{comm} (pid {pid})" if comm else f"pid {pid}")
            name = f"{host}: {what}" if host else what
            labels = tuple(x for x in (f"host {host}" if host else None, f"rank {r}" if r is not None else None) if x)
            os_pid = self.os_id(host, pid)
            order = h.sort_index + 1 + (r if r is not None and 0 <= r < (1 << 19) else (1 << 19) + (pid % (1 << 19)))
            t = self._add(Track(key, "process", name, h, stable_uuid(*key), pid=os_pid, json_pid=os_pid,
                                json_tid=self._synth(), sort_index=order, labels=labels))
        return t

    def thread(self, host: str, pid: int, tid: int) -> Track:
        key = ("thread", host, pid, tid)
        t = self.tracks.get(key)
        if t is None:
            p = self.process(host, pid)
            comm = self.comm.get((host, tid))
            name = f"{comm} {tid}" if comm else f"thread {tid}"
            t = self._add(Track(key, "thread", name, p, stable_uuid(*key), pid=p.pid, tid=self.os_id(host, tid),
                                json_pid=p.json_pid, json_tid=self.os_id(host, tid), sort_index=tid))
        return t

    def source(self, host: str, src: Source) -> Track:
        key = ("source", host, src.path)
        t = self.tracks.get(key)
        if t is None:
            h = self.host(host)
            t = self._add(Track(key, "source", src.path, h, stable_uuid(*key), json_pid=h.json_pid,
                                json_tid=self._synth(), sort_index=src.source_id))
        return t

    def child(self, parent: Track, kind: str, name: str, *key_extra: Any, unit: str | None = None,
              sort_index: int = 0) -> Track:
        """A track under ``parent`` (GPU stream, perf sched, steps, lanes, counters, chains)."""
        key = (kind, parent.key, name) + key_extra
        t = self.tracks.get(key)
        if t is None:
            t = self._add(Track(key, kind, name, parent, stable_uuid(*key), json_pid=parent.json_pid,
                                json_tid=None if kind == "counter" else self._synth(), unit=unit,
                                sort_index=sort_index))
        return t

    def findings(self) -> Track:
        key = ("findings",)
        t = self.tracks.get(key)
        if t is None:
            t = self._add(Track(key, "findings", "aftertrace findings", None, stable_uuid(*key),
                                json_pid=self._synth(), json_tid=self._synth(), sort_index=0))
        return t

    # -- rows -> tracks
    def event_track(self, src: Source, host: str | None, rank: int | None, pid: int | None, tid: int | None,
                    category: str | None, device: int | None, stream: int | None) -> Track:
        h = host if host is not None else (src.host or "")
        if src.kind == "torch_trace" and category in GPU_CATEGORIES:
            p = pid if pid is not None else src.pid
            parent = self.process(h, p, rank) if p is not None and p >= 0 else self.source(h, src)
            if device is None and stream is None:
                return self.child(parent, "gpu", "GPU annotations", sort_index=1 << 40)
            name = f"GPU {device if device is not None else '?'} stream {stream if stream is not None else '?'}"
            return self.child(parent, "gpu", name,
                              sort_index=(1 << 40) + ((device or 0) << 24) + (stream or 0) % (1 << 24))
        if src.kind == "perf_script" and tid is not None and tid >= 0:
            # perf's pid column is the task an event is *about* (the wakee of a wakeup, the
            # child of a fork); the event happened on the thread that printed it
            p = self.pid_of(h, None, tid)
        else:
            p = self.pid_of(h, pid if pid is not None else src.pid, tid)
        if p is None:
            return self.source(h, src)
        if tid is None or tid < 0:
            return self.process(h, p, rank)
        th = self.thread(h, p, tid)
        if src.kind == "perf_script":
            return self.child(th, "sched", f"{th.name} perf sched", sort_index=1 << 41)
        return th

    def process_or_host(self, src: Source, host: str | None, rank: int | None = None,
                        pid: int | None = None) -> Track:
        h = host if host is not None else (src.host or "")
        p = pid if pid is not None else src.pid
        if p is not None and p >= 0:
            return self.process(h, p, rank if rank is not None else src.rank)
        return self.host(h)

    def lane(self, base: Track, i: int) -> Track:
        return self.child(base, "lane", f"{base.name} (overlap {i})", i, sort_index=(1 << 42) + i)


class Lanes:
    """Places spans so that each lane's spans nest (see the module docstring)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.clamped = 0
        self.overflowed = 0
        self.as_instant = 0

    def place(self, base: Track, start: int, end: int) -> tuple[Track | None, int]:
        """The lane ``[start, end]`` goes on and its (possibly clamped) end; ``(None, end)`` when
        every lane is taken (write it as an instant)."""
        lanes = base.lanes
        for lane in lanes:
            st = lane.stack
            while st and st[-1] <= start:
                st.pop()
            if not st or end <= st[-1]:
                st.append(end)
                if lane is not base:
                    self.overflowed += 1
                return lane, end
            if end - st[-1] <= NEST_SLACK_NS:
                end = st[-1]
                st.append(end)
                self.clamped += 1
                if lane is not base:
                    self.overflowed += 1
                return lane, end
        if len(lanes) >= MAX_LANES:
            self.as_instant += 1
            return None, end
        lane = self.layout.lane(base, len(lanes))
        lane.lanes.clear()                       # a lane is no base of its own
        lanes.append(lane)
        lane.stack.append(end)
        self.overflowed += 1
        return lane, end


# -- row streams -----------------------------------------------------------------------------------

def arrow_reader(cur, sql: str, params, rows: int = BATCH_ROWS):
    """A streaming Arrow reader over a query (a relation's reader: no extra copy of the rows;
    DuckDB >= 1.4 names it ``to_arrow_reader``, older ones ``fetch_arrow_reader``)."""
    rel = cur.sql(sql, params=params)
    fn = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
    return fn(rows)


def arrow_table(cur, sql: str, params):
    rel = cur.sql(sql, params=params)
    fn = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
    return fn()


def _batches(cur, sql: str, params) -> Iterator[list[tuple]]:
    for batch in arrow_reader(cur, sql, params):
        cols = [c.to_pylist() for c in batch.columns]
        yield list(zip(*cols))


def _windows(cur, table: str, incident_id: str, rows: int) -> list[tuple[int | None, int | None]]:
    """Time windows ``[lo, hi)`` (None: open) of about ``rows`` placed rows each, from the
    approximate quantiles of ``ts_utc_ns``: each window is sorted on its own, so that DuckDB's
    sort never holds more than one window (the concatenation is the same total order)."""
    n = cur.execute(f"SELECT COUNT(*) FROM {table} WHERE incident_id = ? AND ts_utc_ns >= 0",
                    [incident_id]).fetchall()[0][0]
    if n <= rows:
        return [(None, None)]
    k = -(-n // rows)
    qs = ", ".join(f"{i / k:.6f}" for i in range(1, k))
    got = cur.execute(f"SELECT approx_quantile(ts_utc_ns, [{qs}]) FROM {table} "
                      "WHERE incident_id = ? AND ts_utc_ns >= 0", [incident_id]).fetchall()[0][0]
    bounds = sorted({int(b) for b in got or [] if b is not None})
    edges = [None] + bounds + [None]
    return list(zip(edges[:-1], edges[1:]))


def _ordered(cur, table: str, incident_id: str, select: str, order: str) -> Iterator[list[tuple]]:
    """Placed rows of ``table`` in ``order`` (which starts with ``ts_utc_ns``), window by window."""
    for lo, hi in _windows(cur, table, incident_id, WINDOW_ROWS):
        cond, params = ["incident_id = ?", "ts_utc_ns >= 0"], [incident_id]
        if lo is not None:
            cond.append("ts_utc_ns >= ?")
            params.append(lo)
        if hi is not None:
            cond.append("ts_utc_ns < ?")
            params.append(hi)
        yield from _batches(cur, f"SELECT {select} FROM {table} WHERE {' AND '.join(cond)} ORDER BY {order}", params)


def count_rows(cur, incident_id: str) -> dict[str, tuple[int, int]]:
    """Per exported table: (rows with a UTC time, rows without)."""
    out = {}
    for t in ("events", "metrics", "samples", "steps", "collectives"):
        n, placed = cur.execute(f"SELECT COUNT(*), COUNT(*) FILTER (ts_utc_ns >= 0) FROM {t} "
                                "WHERE incident_id = ?",
                                [incident_id]).fetchall()[0]
        out[t] = (placed, n - placed)
    return out


GPU_LIST = ", ".join(f"'{c}'" for c in sorted(GPU_CATEGORIES))

EVENT_COLUMNS = ("ts", "dur", "source_id", "host", "rank", "pid", "tid", "category", "name", "kind", "severity",
                 "line", "text", "attrs", "device", "stream", "interpolated")


def iter_events(cur, incident_id: str) -> Iterator[list[tuple]]:
    """Placed events in export order, in batches of tuples (``EVENT_COLUMNS``)."""
    select = f"""ts_utc_ns, dur_ns, source_id, host, rank, pid, tid, category, name, kind, severity, line,
           CASE WHEN length(text) > {TEXT_MAX} THEN left(text, {TEXT_MAX}) || '\u2026' ELSE text END,
           CASE WHEN length(attrs) > {ATTRS_PARSE_MAX} THEN left(attrs, {TEXT_MAX}) || '\u2026' ELSE attrs END,
           CASE WHEN category IN ({GPU_LIST}) AND pid IS NULL
                THEN TRY_CAST(json_extract_string(attrs, '$.device') AS BIGINT) END,
           CASE WHEN category IN ({GPU_LIST}) AND pid IS NULL
                THEN TRY_CAST(json_extract_string(attrs, '$.stream') AS BIGINT) END,
           ts_interpolated"""
    order = ("ts_utc_ns, dur_ns DESC NULLS LAST, source_id, line NULLS FIRST, "
             "hash(name, category, host, rank, pid, tid, kind, severity, text, attrs)")
    return _ordered(cur, "events", incident_id, select, order)


def iter_metrics(cur, incident_id: str) -> Iterator[list[tuple]]:
    """(ts, source_id, host, entity, metric, value, unit) in time order."""
    return _ordered(cur, "metrics", incident_id, "ts_utc_ns, source_id, host, entity, metric, value, unit",
                    "ts_utc_ns, source_id, host NULLS FIRST, entity NULLS FIRST, metric, unit NULLS FIRST, value, "
                    "line")


def iter_samples(cur, incident_id: str) -> Iterator[list[tuple]]:
    """(ts, source_id, host, pid, tid, cpu, comm, event, period, stack_id) in time order."""
    return _ordered(cur, "samples", incident_id,
                    "ts_utc_ns, source_id, host, pid, tid, cpu, comm, event, period, stack_id",
                    "ts_utc_ns, source_id, cpu NULLS FIRST, tid NULLS FIRST, pid NULLS FIRST, stack_id NULLS FIRST, "
                    "period, event, comm")


def iter_steps(cur, incident_id: str) -> Iterator[list[tuple]]:
    """(ts, dur, source_id, host, rank, pid, side, step, name) in time order."""
    return _ordered(cur, "steps", incident_id, "ts_utc_ns, dur_ns, source_id, host, rank, pid, side, step, name",
                    "ts_utc_ns, dur_ns DESC NULLS LAST, source_id, side, step, name, pid, tid")


def iter_collectives(cur, incident_id: str) -> Iterator[list[tuple]]:
    """(ts, dur, source_id, host, rank, pid, role, backend, collective, op, pg, seq, ordinal, bytes,
    group_size, device, stream) in time order."""
    return _ordered(cur, "collectives", incident_id,
                    "ts_utc_ns, dur_ns, source_id, host, rank, pid, role, backend, collective, op, pg, seq, ordinal, "
                    "bytes, group_size, device, stream",
                    "ts_utc_ns, dur_ns DESC NULLS LAST, source_id, role, ordinal, op, pg, tid, device, stream")


# -- the report's findings -------------------------------------------------------------------------

@dataclass
class Finding:
    ts_ns: int
    kind: str
    summary: str
    link: dict            # the report's LINK object
    chain: int | None     # index of the chain (None: an anomaly or the failure)
    because: str | None = None   # chains: why this link follows from the one before


def _ts_ns(link: dict) -> int | None:
    ts = link.get("ts")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        return None
    return int(round(ts * 1e9))


def load_findings(cur, incident_id: str) -> tuple[list[Finding], list[dict], int]:
    """The report's anomalies and failure (``chain`` None) and each chain's links, oldest first;
    the chains themselves; and how many links had no usable time."""
    row = cur.execute("SELECT report FROM incidents WHERE incident_id = ?", [incident_id]).fetchall()[0]
    if not row or not row[0]:
        return [], [], 0
    try:
        rep = json.loads(row[0])
    except ValueError:
        return [], [], 0
    if not isinstance(rep, dict):
        return [], [], 0
    out: list[Finding] = []
    unplaced = [0]

    def placed(links) -> Iterator[tuple[int, dict, int]]:
        """(index, link, ts) of the links that are objects with a time (the others counted)."""
        for i, link in enumerate(links or []):
            if isinstance(link, dict):
                ts = _ts_ns(link)
                if ts is None:
                    unplaced[0] += 1
                else:
                    yield i, link, ts

    seen = set()
    for _, link, ts in placed(rep.get("anomalies")):
        seen.add((ts, link.get("kind")))
        out.append(Finding(ts, str(link.get("kind") or "finding"), str(link.get("summary") or ""), link, None))
    fail = rep.get("failure")
    if isinstance(fail, dict):
        ts = _ts_ns(fail)
        if ts is None:
            unplaced[0] += 1
        elif (ts, fail.get("kind")) not in seen:
            out.append(Finding(ts, str(fail.get("kind") or "failure"), str(fail.get("summary") or ""),
                               dict(fail, role="failure"), None))
    chains = [c for c in rep.get("chains") or [] if isinstance(c, dict)]
    for ci, ch in enumerate(chains):
        edges = [e for e in ch.get("edges") or [] if isinstance(e, dict)]
        for li, link, ts in placed(ch.get("links")):
            because = edges[li - 1].get("because") if 0 < li <= len(edges) else None
            out.append(Finding(ts, str(link.get("kind") or "link"), str(link.get("summary") or ""), link, ci,
                               because))
    out.sort(key=lambda f: (f.ts_ns, -1 if f.chain is None else f.chain, f.kind, f.summary))
    return out, chains, unplaced[0]
