"""The event model: every table aftertrace stores, each column with its unit.

This module is the single definition of the schema. The DuckDB DDL
(``server.store``), the Arrow schemas that parsers write their row batches with
(``ingest.sink``) and the documentation all come from the ``TABLES`` below; a
column is never declared anywhere else.

Conventions
-----------
* Times are integer **nanoseconds**. ``ts_raw_ns`` is the source's *own* clock
  (the clock domain of its ``sources`` row: ``boot`` = ns since boot on the
  kernel clock, ``wall`` = ns since the Unix epoch as read on the host, possibly
  in local time converted with the bundle's time zone, ``process`` = ns since a
  process-local epoch). Only ``analysis`` converts raw times to UTC; the
  result lands in ``ts_utc_ns`` (ns since the Unix epoch, UTC; null where the
  source's clock could not be placed). Until then the loader keeps the raw time
  there.
* Durations are nanoseconds, sizes bytes, counts plain integers.
* ``attrs`` columns hold a JSON object (text) of whatever else a parser read,
  keyed by the names in that parser's field table.
* Rows produced by parsers never carry ``incident_id``/``source_id``: the
  pipeline adds them when it loads a source's batches (columns marked
  ``added_by_loader``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = 12

# Clock domains (DESIGN.md "Clocks").
CLOCK_BOOT = "boot"        # kernel local_clock / CLOCK_MONOTONIC-like, ns since boot
CLOCK_WALL = "wall"        # host wall clock (CLOCK_REALTIME), ns since epoch
CLOCK_PROCESS = "process"  # process-relative steady clock
CLOCK_NONE = "none"        # the source carries no usable time at all
# wall time the kernel log's reader computed from the boot clock when it ran (dmesg -T, dmesg
# --time-format iso): an estimated boot instant plus the printk stamp, not the wall clock itself
CLOCK_KERNEL_WALL = "kernel_wall"
CLOCK_DOMAINS = (CLOCK_BOOT, CLOCK_WALL, CLOCK_KERNEL_WALL, CLOCK_PROCESS, CLOCK_NONE)

# Source kinds (DESIGN.md "Report JSON").
SOURCE_KINDS = (
    "perf_script", "torch_trace", "nccl_log", "app_log", "dmesg", "cgroup",
    "host_info", "text", "unrecognized",
)
# Source statuses.
STATUS_PARSED = "parsed"
STATUS_PARTIAL = "partial"
STATUS_UNRECOGNIZED = "unrecognized"
STATUS_FAILED = "failed"
STATUS_TEXT = "text"        # no parser claimed the text file: kept as plain text (lines, times, signatures)
SOURCE_STATUSES = (STATUS_PARSED, STATUS_PARTIAL, STATUS_TEXT, STATUS_UNRECOGNIZED, STATUS_FAILED)

# Event severities, most to least severe.
SEVERITIES = ("emerg", "alert", "crit", "error", "warning", "notice", "info", "debug")

_ARROW = {
    "VARCHAR": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str                 # DuckDB type name
    unit: str                 # unit of the value ("ns", "bytes", "count", "-" for none)
    doc: str
    nullable: bool = True
    added_by_loader: bool = False   # filled by the pipeline, not by parsers
    # DuckDB storage compression, when not DuckDB's own choice. "zstd" for long, mostly unique
    # text (evidence lines, args JSON): DuckDB's default (FSST) costs about 2.5x the CPU to load
    # and stores 3.5x the bytes of ZSTD on the Kineto args of a 232 MB trace.
    compression: str | None = None

    @property
    def arrow_type(self) -> pa.DataType:
        return _ARROW[self.type]


@functools.lru_cache(maxsize=None)
def _arrow_schema(table: "Table", parser_side: bool) -> pa.Schema:
    cols = table.parser_columns if parser_side else table.columns
    return pa.schema([pa.field(c.name, c.arrow_type) for c in cols])


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    indexes: tuple[tuple[str, ...], ...] = field(default=())

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def parser_columns(self) -> tuple[Column, ...]:
        """The columns a parser writes (everything the loader does not add)."""
        return tuple(c for c in self.columns if not c.added_by_loader)

    def arrow_schema(self, parser_side: bool = True) -> pa.Schema:
        # (asked for every frame and every flush a parser writes: built once per table and side)
        return _arrow_schema(self, parser_side)

    def ddl(self) -> str:
        parts = []
        for c in self.columns:
            using = f" USING COMPRESSION {c.compression}" if c.compression else ""
            parts.append(f"{c.name} {c.type}{'' if c.nullable else ' NOT NULL'}{using}")
        if self.primary_key:
            parts.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  " + ",\n  ".join(parts) + "\n)"


def _c(name, type_, unit, doc, nullable=True, loader=False, compression=None) -> Column:
    return Column(name, type_, unit, doc, nullable, loader, compression)


_INC = _c("incident_id", "VARCHAR", "-", "incident this row belongs to", False, True)
_SRC = _c("source_id", "INTEGER", "-", "source (file) within the incident", False, True)

INCIDENTS = Table(
    "incidents",
    "One row per analysed bundle.",
    (
        _c("incident_id", "VARCHAR", "-", "short id derived from the bundle's SHA-256", False),
        _c("title", "VARCHAR", "-", "user-given title or the bundle's name"),
        _c("bundle_sha256", "VARCHAR", "-", "SHA-256 of the raw bundle (directories: of their canonical listing)", False),
        _c("bundle_name", "VARCHAR", "-", "file or folder name the user gave"),
        _c("bundle_kind", "VARCHAR", "-", "what the user gave: dir | tar | zip | file"),
        _c("bundle_bytes", "BIGINT", "bytes", "size of the raw bundle as given"),
        _c("raw_path", "VARCHAR", "-", "where the raw bundle is kept (content-addressed)"),
        _c("folder", "VARCHAR", "-", "the incident's own folder (extracted files, work files)"),
        _c("created_at", "TIMESTAMPTZ", "UTC", "when the bundle was first received"),
        _c("analyzed_at", "TIMESTAMPTZ", "UTC", "when the last analysis finished"),
        _c("status", "VARCHAR", "-", "queued | running | done | failed", False),
        _c("error", "VARCHAR", "-", "one-line reason when status is failed"),
        _c("time_zone", "VARCHAR", "-", "zone used for local-time strings of this bundle"),
        _c("time_zone_source", "VARCHAR", "-", "where that zone came from (manifest, date output, default)"),
        _c("duration_s", "DOUBLE", "s", "wall time the last analysis took"),
        _c("report", "VARCHAR", "-", "the aftertrace.report/1 JSON of the last analysis"),
        _c("interrupted", "INTEGER", "count", "analyses of this bundle cut short by their process dying "
           "(killed, crashed, out of memory) since it was last sent; one such is queued again, a second fails it"),
    ),
    primary_key=("incident_id",),
)

SOURCES = Table(
    "sources",
    "One row per file of the bundle (also refused or unrecognized ones).",
    (
        _INC, _SRC,
        _c("path", "VARCHAR", "-", "path inside the bundle, '/'-separated", False),
        _c("kind", "VARCHAR", "-", "source kind (SOURCE_KINDS)", False),
        _c("format", "VARCHAR", "-", "name of the parser that claimed the file (format variant)"),
        _c("host", "VARCHAR", "-", "host the file belongs to (from path or contents)"),
        _c("rank", "INTEGER", "-", "global training rank the file belongs to"),
        _c("pid", "BIGINT", "-", "process the file belongs to"),
        _c("clock_domain", "VARCHAR", "-", "clock of ts_raw_ns in this source's rows (CLOCK_DOMAINS)"),
        _c("bytes", "BIGINT", "bytes", "size on disk (compressed size for .gz)"),
        _c("bytes_read", "BIGINT", "bytes", "bytes read after decompression"),
        _c("compressed", "BOOLEAN", "-", "whether the file is gzip-compressed"),
        _c("records", "BIGINT", "count", "rows the parser produced (events, samples, metrics, anchors)"),
        _c("issues", "BIGINT", "count", "parse issues recorded for the file"),
        _c("status", "VARCHAR", "-", "parsed | partial | text | unrecognized | failed", False),
        _c("error", "VARCHAR", "-", "why the file failed, or what made it partial"),
        _c("host_from", "VARCHAR", "-", "how host was attributed (path, contents, folder, manifest)"),
        _c("rank_from", "VARCHAR", "-", "how rank was attributed"),
        _c("parse_s", "DOUBLE", "s", "wall time spent parsing the file"),
        _c("attrs", "VARCHAR", "-", "JSON: facts the parser read about the file (versions, headers)"),
    ),
    primary_key=("incident_id", "source_id"),
)

EVENTS = Table(
    "events",
    "Spans and instants from every source, on the source's own clock.",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("rank", "INTEGER", "-", "global rank (null: the source's rank or unknown)"),
        _c("pid", "BIGINT", "-", "process id the event is about or was printed by"),
        _c("tid", "BIGINT", "-", "thread id"),
        _c("ts_raw_ns", "BIGINT", "ns", "start time on the source's clock (null: the line had no time)"),
        _c("ts_utc_ns", "BIGINT", "ns", "start time in UTC after alignment (filled by analysis)", True, True),
        _c("ts_interpolated", "BOOLEAN", "-", "time was interpolated from neighbouring lines"),
        _c("dur_ns", "BIGINT", "ns", "duration; null for instants"),
        _c("category", "VARCHAR", "-", "event family: kernel, oom, log, cpu_op, kernel_launch, ..."),
        _c("name", "VARCHAR", "-", "short event name", False),
        _c("kind", "VARCHAR", "-", "typed finding kind when the event is one (oom_kill, gpu_xid, ...)"),
        _c("severity", "VARCHAR", "-", "SEVERITIES, when the source states one"),
        _c("line", "BIGINT", "line", "1-based line number of the event's first line in the file"),
        _c("text", "VARCHAR", "-", "the raw line(s) the event was read from (evidence)", compression="zstd"),
        _c("attrs", "VARCHAR", "-", "JSON: further fields (victim pid, comm, rss, args, ...)", compression="zstd"),
    ),
)

SAMPLES = Table(
    "samples",
    "Profiler samples (perf), each pointing at a leaf in the stacks tree.",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("pid", "BIGINT", "-", "process id"),
        _c("tid", "BIGINT", "-", "thread id"),
        _c("cpu", "INTEGER", "-", "CPU the sample was taken on"),
        _c("comm", "VARCHAR", "-", "command name"),
        _c("ts_raw_ns", "BIGINT", "ns", "sample time on the source's clock"),
        _c("ts_utc_ns", "BIGINT", "ns", "sample time in UTC after alignment", True, True),
        _c("event", "VARCHAR", "-", "sampled event (cpu-clock, cycles, ...)"),
        _c("period", "BIGINT", "count", "sample period (event units); 1 when not recorded"),
        _c("stack_id", "BIGINT", "-", "leaf node in stacks (null: no call chain)"),
    ),
)

STACKS = Table(
    "stacks",
    "De-duplicated call-stack prefix tree per source: a node is (parent, frame).",
    (
        _INC, _SRC,
        _c("stack_id", "BIGINT", "-", "node id, unique within the source", False),
        _c("parent_id", "BIGINT", "-", "parent node (null: a root frame)"),
        _c("frame", "VARCHAR", "-", "function name as printed", False),
        _c("dso", "VARCHAR", "-", "module the frame belongs to"),
        _c("depth", "INTEGER", "frames", "0 for a root frame"),
    ),
)

METRICS = Table(
    "metrics",
    "Time series: cgroup counters and their rates, pressure, GPU metrics; training progress read from "
    "text logs (nccl_log/app_log sources: one row per step line and value, metric step | loss | "
    "step_time, entity 'rank N'; each rank's last step line is also an event, named step).",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("entity", "VARCHAR", "-", "what is measured: cgroup path, device, 'host', 'rank N' (text logs; null: "
           "rank unknown)"),
        _c("metric", "VARCHAR", "-", "metric name, e.g. cpu.stat:nr_throttled; step (count), loss, step_time (s)",
           False),
        _c("ts_raw_ns", "BIGINT", "ns", "sample time on the source's clock"),
        _c("ts_utc_ns", "BIGINT", "ns", "sample time in UTC after alignment", True, True),
        _c("value", "DOUBLE", "see unit", "the value"),
        _c("unit", "VARCHAR", "-", "unit of value (ns, us, bytes, count, percent, ...)"),
        # (last: stores made before schema 2 get it by ALTER TABLE ... ADD COLUMN, at the end)
        _c("line", "BIGINT", "line", "1-based line of the file the value was read from (text logs; null: "
           "snapshot files, whose files are the evidence)"),
    ),
)

PARSE_ISSUES = Table(
    "parse_issues",
    "Lines or regions a parser could not use; parsing went on.",
    (
        _INC, _SRC,
        _c("line", "BIGINT", "line", "1-based line number (null when not line-based)"),
        _c("byte_offset", "BIGINT", "bytes", "offset in the decompressed stream, when known"),
        _c("kind", "VARCHAR", "-", "bad_line | truncated | undecodable | limit | ...", False),
        _c("message", "VARCHAR", "-", "what was wrong", False),
        _c("text", "VARCHAR", "-", "an excerpt of the offending input (at most 200 chars)"),
    ),
)

ANCHORS = Table(
    "anchors",
    "Clock anchors: one instant read on two clocks (e.g. /proc/uptime next to date).",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("name", "VARCHAR", "-", "anchor type: uptime_date, btime, perf_reference, ...", False),
        _c("domain", "VARCHAR", "-", "the local clock domain that was read (boot, process)", False),
        _c("local_ns", "BIGINT", "ns", "reading of the local clock", False),
        _c("wall_ns", "BIGINT", "ns", "reading of the wall clock at the same instant (epoch)", False),
        _c("wall_is_utc", "BOOLEAN", "-", "false when wall_ns was local time read without a zone"),
        _c("uncertainty_ns", "BIGINT", "ns", "how far apart the two readings may be", False),
        _c("boot_id", "VARCHAR", "-", "boot the local reading belongs to, when known"),
        _c("line", "BIGINT", "line", "line the anchor was read from"),
        _c("text", "VARCHAR", "-", "evidence text"),
    ),
)

FACTS = Table(
    "facts",
    "Key/value facts read from the bundle: hostname, boot_id, kernel, time zone, ...",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host the fact is about (null: the source's host)"),
        _c("key", "VARCHAR", "-", "fact name", False),
        _c("value", "VARCHAR", "-", "fact value as text"),
        _c("line", "BIGINT", "line", "line it was read from"),
    ),
)

MEMBERS = Table(
    "members",
    "Which process (cgroup.procs, /proc/<pid>/cgroup, the collector's manifest) or thread (tasks, "
    "cgroup.threads) was in which cgroup when. Bounded: for each file series (one cgroup's "
    "cgroup.procs, tasks or cgroup.threads in one hierarchy; one pid's /proc/<pid>/cgroup per "
    "hierarchy) a row is written at the first snapshot that read the file (change 'first'), at "
    "each snapshot where a pid/tid is listed after the previous read did not list it ('joined'), "
    "at the first read that no longer lists it ('left', present false), and at the last snapshot "
    "that read the file for those listed there ('last'). A snapshot that lacks the file says "
    "nothing (no 'left'). So a pid was in the cgroup from a 'first'/'joined' row up to the next "
    "'left' row of the same series (exclusive) or its 'last' row (inclusive). Manifest rows "
    "(basis 'manifest') are a 'first' row at the time the collector first saw the process and a "
    "'last' row at the time it last saw it, for every cgroup it snapshotted.",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("cgroup", "VARCHAR", "-", "cgroup path as the metrics name it in entity: '/aftertrace_job', "
           "'/kubepods.slice/x.scope'; the v2 hierarchy of a hybrid host (mounted at unified/) is "
           "'/unified/<path>'; '/' is the root cgroup", False),
        _c("controller", "VARCHAR", "-", "hierarchy: the v1 controller folder or /proc/<pid>/cgroup "
           "controller list as written (cpu, cpuacct, 'cpu,cpuacct', memory, freezer, pids, "
           "name=systemd, ...); 'unified' for the cgroup v2 hierarchy", False),
        _c("ts_raw_ns", "BIGINT", "ns", "snapshot time on the source's clock (wall; null: the copy has no time)"),
        _c("ts_utc_ns", "BIGINT", "ns", "snapshot time in UTC after alignment (filled by analysis)", True, True),
        _c("pid", "BIGINT", "-", "process (thread group) id; tasks/cgroup.threads rows: the tid when "
           "the series lists that id as a process anywhere (a main thread), else null"),
        _c("tid", "BIGINT", "-", "thread id (tasks, cgroup.threads rows); null for process rows"),
        _c("present", "BOOLEAN", "-", "false on 'left' rows: the file was read and no longer listed it",
           False),
        _c("change", "VARCHAR", "-", "first | joined | left | last (see the table's rule)", False),
        _c("basis", "VARCHAR", "-", "what was read: cgroup.procs | tasks | cgroup.threads | "
           "proc_cgroup (/proc/<pid>/cgroup) | manifest (aftertrace collect's manifest)", False),
        _c("file", "VARCHAR", "-", "path in the bundle of the file read (evidence)"),
        _c("line", "BIGINT", "line", "1-based line of that file that lists the pid/tid (null: 'left' rows, "
           "whose evidence is the file without it)"),
        _c("prev_read_ns", "BIGINT", "ns", "'joined' and 'left' rows: the time of the series' previous read "
           "(its snapshot, on the same clock as ts_raw_ns), which did not list the pid/tid ('joined') or still "
           "did ('left'); null otherwise"),
        _c("next_read_ns", "BIGINT", "ns", "'joined' and 'left' rows: the time of the series' next read, "
           "null at its last; a snapshot's reads end before the next snapshot begins"),
    ),
)

CLOCK_MAP = Table(
    "clock_map",
    "Per host and clock domain: how raw times become UTC (written by analysis).",
    (
        _c("incident_id", "VARCHAR", "-", "incident", False),
        _c("host", "VARCHAR", "-", "host ('' for sources with no host)", False),
        _c("domain", "VARCHAR", "-", "clock domain", False),
        _c("offset_ns", "BIGINT", "ns", "utc_ns = ts_raw_ns + offset_ns (+ drift term)"),
        _c("drift_ppm", "DOUBLE", "ppm", "rate error of the local clock, when two windows allowed it"),
        _c("uncertainty_ns", "BIGINT", "ns", "bound on the error of the mapping"),
        _c("method", "VARCHAR", "-", "how it was found (uptime+date, btime, assumed UTC, none)"),
        _c("evidence", "VARCHAR", "-", "JSON list of the anchors used"),
    ),
    primary_key=("incident_id", "host", "domain"),
)

CLOCK_SEGMENTS = Table(
    "clock_segments",
    "Where a host's wall clock stepped against one of its local clocks (an NTP step, a VM resumed by "
    "its host): the mapping is piecewise, one row per stretch of the local clock (written by "
    "analysis; a clock with no step has no rows and clock_map alone maps it).",
    (
        _c("incident_id", "VARCHAR", "-", "incident", False),
        _c("host", "VARCHAR", "-", "host ('' for sources with no host)", False),
        _c("domain", "VARCHAR", "-", "clock domain", False),
        _c("from_ns", "BIGINT", "ns", "first raw time of the stretch, on the local clock (null: from the start)"),
        _c("to_ns", "BIGINT", "ns", "raw time the stretch ends before (null: to the end)"),
        _c("offset_ns", "BIGINT", "ns", "utc_ns = ts_raw_ns + offset_ns (+ drift term) within the stretch"),
        _c("drift_ppm", "DOUBLE", "ppm", "rate error applied within the stretch"),
        _c("uncertainty_ns", "BIGINT", "ns", "bound on the error within the stretch; a stretch where the step "
           "may have happened covers the offsets on both sides"),
        _c("what", "VARCHAR", "-", "before the step | the step's window | after the step (numbered when several)",
           False),
    ),
)

ROW_TIMES = Table(
    "row_times",
    "Events placed by other evidence of the same instant than their source's clock, where it is "
    "narrower (written by analysis): a kernel record that dmesg -T printed in whole seconds is also "
    "in the raw kernel log, whose stamp, once placed, says where it lies; an OOM kill that a cgroup's "
    "oom_kill counter shows lies between two of its snapshots, on the wall clock; a record of a file "
    "with no time of its own (a stack dump, a df) that the collector captured is at the capture's "
    "time in its manifest. The event's ts_utc_ns is then this row's.",
    (
        _c("incident_id", "VARCHAR", "-", "incident", False),
        _c("source_id", "INTEGER", "-", "source of the event placed this way", False),
        _c("line", "BIGINT", "line", "the event's line in that source", False),
        _c("ts_utc_ns", "BIGINT", "ns", "UTC time of the record", False),
        _c("uncertainty_ns", "BIGINT", "ns", "bound on that time's error"),
        _c("by_source_id", "INTEGER", "-", "source of the evidence: the record's raw copy, or the "
           "snapshot series whose counter shows it", False),
        _c("by_line", "BIGINT", "line", "the raw copy's line (null: a snapshot series)"),
    ),
    primary_key=("incident_id", "source_id", "line"),
)


META = Table(
    "aftertrace_meta",
    "Store metadata: the schema version.",
    (
        _c("key", "VARCHAR", "-", "setting", False),
        _c("value", "VARCHAR", "-", "value"),
    ),
    primary_key=("key",),
)

# -- Kineto (torch.profiler) derived tables, written by ingest.formats.kineto ------------------
COLLECTIVES = Table(
    "collectives",
    "Collective operations read from profiler traces: NCCL kernels, gloo work, c10d calls (one row per span).",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("rank", "INTEGER", "-", "global rank (null: the source's rank)"),
        _c("pid", "BIGINT", "-", "process that issued it (null for GPU kernels: see device)"),
        _c("tid", "BIGINT", "-", "thread it ran on (CPU side)"),
        _c("role", "VARCHAR", "-", "exec (the communication itself: NCCL kernel, gloo worker span) | call (c10d op on the caller)", False),
        _c("backend", "VARCHAR", "-", "nccl | gloo | c10d (calls) | null when not stated"),
        _c("collective", "VARCHAR", "-", "canonical collective: allreduce, allgather, reducescatter, broadcast, alltoall, sendrecv, barrier, ... or unknown", False),
        _c("op", "VARCHAR", "-", "the event's own name (kernel name, c10d op, annotation)", False),
        _c("pg", "VARCHAR", "-", "process group name/id as the trace states it (null: not stated)"),
        _c("pg_desc", "VARCHAR", "-", "process group description (default_pg, ...)"),
        _c("seq", "BIGINT", "count", "collective sequence number from the trace (args Seq), when present"),
        _c("ordinal", "BIGINT", "count", "0-based order of this row among the file's rows of the same role and pg"),
        _c("ts_raw_ns", "BIGINT", "ns", "start on the source's clock", False),
        _c("dur_ns", "BIGINT", "ns", "duration"),
        _c("in_nelems", "BIGINT", "count", "input elements (In msg nelems, or the product of Input Dims)"),
        _c("out_nelems", "BIGINT", "count", "output elements (Out msg nelems)"),
        _c("dtype", "VARCHAR", "-", "element type as written"),
        _c("bytes", "BIGINT", "bytes", "input size: in_nelems x element size (null when the type is unknown)"),
        _c("group_size", "INTEGER", "count", "ranks in the group (Group size)"),
        _c("device", "INTEGER", "-", "GPU index (kernels)"),
        _c("stream", "BIGINT", "-", "GPU stream (kernels)"),
        _c("external_id", "BIGINT", "-", "Kineto External id (links CPU op, runtime call and kernel)"),
        _c("correlation", "BIGINT", "-", "CUPTI/roctracer correlation id (kernels)"),
        # (last: stores made before schema 4 get it by ALTER TABLE ... ADD COLUMN, at the end)
        _c("ts_utc_ns", "BIGINT", "ns", "start in UTC after alignment (filled by analysis)", True, True),
    ),
)

STEPS = Table(
    "steps",
    "Training step spans read from profiler traces (ProfilerStep#N markers).",
    (
        _INC, _SRC,
        _c("host", "VARCHAR", "-", "host (null: the source's host)"),
        _c("rank", "INTEGER", "-", "global rank (null: the source's rank)"),
        _c("pid", "BIGINT", "-", "process (null for GPU-side markers)"),
        _c("tid", "BIGINT", "-", "thread (CPU side)"),
        _c("side", "VARCHAR", "-", "cpu (user_annotation/cpu_op) | gpu (gpu_user_annotation)", False),
        _c("step", "BIGINT", "count", "step number N", False),
        _c("name", "VARCHAR", "-", "marker as written", False),
        _c("ts_raw_ns", "BIGINT", "ns", "start on the source's clock", False),
        _c("dur_ns", "BIGINT", "ns", "duration"),
        # (last: stores made before schema 4 get it by ALTER TABLE ... ADD COLUMN, at the end)
        _c("ts_utc_ns", "BIGINT", "ns", "start in UTC after alignment (filled by analysis)", True, True),
    ),
)

FLOWS = Table(
    "flows",
    "Flow arrows of profiler traces (ac2g: CPU launch -> GPU kernel, fwdbwd: forward op -> backward op).",
    (
        _INC, _SRC,
        _c("category", "VARCHAR", "-", "flow category (ac2g, fwdbwd, ...)"),
        _c("flow_id", "BIGINT", "-", "flow id as written (ac2g: the correlation id)"),
        _c("src_pid", "BIGINT", "-", "start: pid as written (OS pid, or GPU index for GPU-side ends)"),
        _c("src_tid", "BIGINT", "-", "start: tid as written (OS tid, or stream)"),
        _c("src_ts_raw_ns", "BIGINT", "ns", "start time on the source's clock (null: no start in the file)"),
        _c("dst_pid", "BIGINT", "-", "end: pid as written"),
        _c("dst_tid", "BIGINT", "-", "end: tid as written"),
        _c("dst_ts_raw_ns", "BIGINT", "ns", "end time on the source's clock (null: no end in the file)"),
    ),
)

TRACKS = Table(
    "tracks",
    "The timeline's tracks of an incident (written by analysis after clock alignment), grouped host -> "
    "rank. A thread track gathers one thread's spans from every file of its kind (a rank's Kineto "
    "traces, a file per profiler cycle, or a perf recording); a log track is one source's lines of "
    "one host and rank. The key columns hold '' / -1 for unknown so that events join them exactly.",
    (
        _INC,
        _c("track_id", "INTEGER", "-", "the track's place in the incident's order: host, rank, kind, source, "
           "process, thread", False),
        _c("host", "VARCHAR", "-", "events.host, else the source's host ('' when unknown)", False),
        _c("rank", "INTEGER", "-", "events.rank, else the source's rank (-1: the host's own)", False),
        _c("kind", "VARCHAR", "-", "source kind (torch_trace, perf_script, app_log, dmesg, ...)", False),
        _c("source_id", "INTEGER", "-", "a log track's one source (-1 on thread tracks)", False),
        _c("pid", "BIGINT", "-", "thread tracks: the events' pid (-1 when unknown or a log track)", False),
        _c("tid", "BIGINT", "-", "thread tracks: the events' tid (-1 when unknown or a log track)", False),
        _c("label", "VARCHAR", "-", "what the track is called on the timeline"),
        _c("category", "VARCHAR", "-", "the most common event category on the track"),
        _c("n", "BIGINT", "count", "placed events on the track", False),
        _c("spans", "BIGINT", "count", "of which spans (a duration)", False),
        _c("typed", "BIGINT", "count", "of which typed findings (events.kind set)", False),
        _c("first_ns", "BIGINT", "ns", "earliest placed start (UTC)"),
        _c("last_ns", "BIGINT", "ns", "latest placed end (UTC)"),
    ),
)

TRACK_SPANS = Table(
    "track_spans",
    "The long spans and every typed finding of each timeline track (written by analysis after clock "
    "alignment): a wide window's spans, each at least a pixel wide, are read from here instead of "
    "every event.",
    (
        _INC,
        _c("track_id", "INTEGER", "-", "tracks.track_id", False),
        _c("ts_utc_ns", "BIGINT", "ns", "start (UTC)", False),
        _c("dur_ns", "BIGINT", "ns", "duration (null: an instant, which is here for being a finding)"),
        _c("name", "VARCHAR", "-", "events.name", False),
        _c("kind", "VARCHAR", "-", "events.kind"),
        _c("severity", "VARCHAR", "-", "events.severity"),
        _c("line", "BIGINT", "line", "events.line"),
    ),
)

TRACK_BINS = Table(
    "track_bins",
    "Events counted per timeline track and UTC second (written by analysis after clock alignment): "
    "wide timeline windows are answered from here instead of every event.",
    (
        _INC,
        _c("track_id", "INTEGER", "-", "tracks.track_id", False),
        _c("sec", "BIGINT", "s", "UTC second of the events' start (ts_utc_ns // 1e9)", False),
        _c("n", "BIGINT", "count", "events starting in that second", False),
        _c("typed", "BIGINT", "count", "of which typed findings (events.kind set)", False),
        _c("name", "VARCHAR", "-", "the most common event name in that second"),
    ),
)

METRIC_BINS = Table(
    "metric_bins",
    "Metric series reduced per UTC second (written by analysis after clock alignment): wide "
    "timeline windows draw their series from here instead of every metric row.",
    (
        _INC,
        _c("host", "VARCHAR", "-", "host of the series (metrics.host, else the source's host)"),
        _c("entity", "VARCHAR", "-", "metrics.entity"),
        _c("metric", "VARCHAR", "-", "metrics.metric", False),
        _c("unit", "VARCHAR", "-", "metrics.unit (any of the second's rows)"),
        _c("sec", "BIGINT", "s", "UTC second (ts_utc_ns // 1e9)", False),
        _c("ts", "BIGINT", "ns", "time of the second's first row (UTC)", False),
        _c("v", "DOUBLE", "unit", "largest value in the second (what a timeline bin shows)"),
    ),
)

SHARES = Table(
    "shares",
    "Read-only links to one incident's report (/r/{token}). Only a hash of the token is kept: the "
    "link is shown once, when it is made.",
    (
        _c("share_id", "VARCHAR", "-", "public id: the first 16 hex digits of the token's SHA-256", False),
        _c("token_sha256", "VARCHAR", "-", "SHA-256 of the token (hex)", False),
        _c("incident_id", "VARCHAR", "-", "the one incident the link shows", False),
        _c("created_ns", "BIGINT", "ns", "when the link was made (UTC)", False),
        _c("note", "VARCHAR", "-", "a note shown on the shared page"),
        _c("window_start_ns", "BIGINT", "ns", "timeline window to point at, UTC (optional)"),
        _c("window_end_ns", "BIGINT", "ns", "end of that window (optional)"),
        _c("revoked_ns", "BIGINT", "ns", "when it was revoked, UTC (null: live)"),
        _c("view", "VARCHAR", "-", "the timeline view the link opens on (the viewer's URL state: window, "
           "selection, folded groups)"),
    ),
    primary_key=("share_id",),
)

TABLES: dict[str, Table] = {
    t.name: t for t in (
        META, INCIDENTS, SOURCES, EVENTS, SAMPLES, STACKS, METRICS, PARSE_ISSUES,
        ANCHORS, FACTS, MEMBERS, CLOCK_MAP, CLOCK_SEGMENTS, ROW_TIMES, COLLECTIVES, STEPS, FLOWS, SHARES,
        TRACKS, TRACK_SPANS, TRACK_BINS, METRIC_BINS,
    )
}

# Tables a parser writes rows into.
PARSER_TABLES = ("events", "samples", "stacks", "metrics", "parse_issues", "anchors", "facts",
                 "collectives", "steps", "flows", "members")
# Tables holding per-incident rows that are replaced when an incident is analysed again.
INCIDENT_TABLES = ("sources",) + PARSER_TABLES + ("clock_map", "clock_segments", "row_times", "tracks", "track_spans", "track_bins",
                                                   "metric_bins")
