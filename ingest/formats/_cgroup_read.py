"""Reading cgroup / /proc snapshot blocks: file identity, block grammar, layouts, derived series.

A *block* is one copy of one file at one moment: ``(ts_ns, member, first line, path, lines)``.
Every layout (snapshot folders, ``==>``/``###``-headed concatenations, JSON lines, a
point-in-time tree copy) is turned into blocks by its own iterator; one block parser
(:func:`parse_block`) maps the lines to metric rows through ``_cgroup_table``; one
function (:func:`derive`) turns the raw series into rates. Evidence for a finding is
found by running the same iterator again and keeping the blocks and lines asked for.

Identity of a file (``resolve``): the path is cut after ``sys/fs/cgroup/``; a leading
``proc/`` names a host file (``proc/pressure/cpu`` -> entity ``host``, ``proc/<pid>/status``
and ``proc/<pid>/cgroup`` -> entity ``pid <pid>``; ``pressure/cpu`` without ``proc/`` is the
host's too); otherwise a leading cgroup-v1 controller folder (``cpu``,
``memory``, ``cpu,cpuacct``, ``unified``, ...) is dropped and the rest is the cgroup path:
``cpu/aftertrace_job/cpu.stat`` and ``memory/aftertrace_job/memory.stat`` are both entity
``/aftertrace_job``; ``kubepods.slice/x.scope/memory.events`` is ``/kubepods.slice/x.scope``.
(A v2 cgroup literally named like a v1 controller at the top level would lose that part.)
In hybrid mode the v2 ``unified`` mount is a hierarchy of its own: its groups keep the
prefix (``/unified/<path>``), so its cpu.stat and the v1 cpuacct.usage of the same group
stay two series. ``FileId.controller`` names the hierarchy: the v1 controller folder as
written, ``unified`` for the v2 mount and for paths with no controller folder (a v2 host's
copy), ``proc`` for host and process files.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..timeparse import NS, frac_to_ns, iso_to_ns, local_ns
from ._cgroup_table import (DELTAS, FILES, LOADAVG, PROC_FILES, PSI_KEYS, RATES, SIGNED,
                            UNLIMITED_BYTES, FileSpec)

V1_CONTROLLERS = frozenset(
    "cpu cpuacct cpu,cpuacct cpuacct,cpu memory pids blkio io cpuset systemd hugetlb freezer "
    "devices net_cls net_prio net_cls,net_prio perf_event rdma misc".split())
HOST = "host"

# Snapshot folder names: epoch seconds (9-11 digits, optional fraction) or ISO 8601
# (extended 2026-11-29T13:39:34.153146Z, basic 20261129T133934.153146Z; zone optional).
TS_EPOCH = re.compile(r"^(\d{9,11})(?:[.,](\d{1,9}))?$")
TS_ISO = re.compile(r"^(\d{4})-?(\d\d)-?(\d\d)[T_ ](\d\d)[:-]?(\d\d)[:-]?(\d\d)(?:[.,](\d{1,9}))?"
                    r"(Z|[+-]\d\d:?\d\d)?$")
_EPOCH_MIN, _EPOCH_MAX = 946_684_800, 4_102_444_800


def parse_time_name(s: str, zone: str | None = None) -> int | None:
    """A snapshot folder name or header time -> epoch ns (None: not a time)."""
    m = TS_EPOCH.match(s)
    if m:
        sec = int(m.group(1))
        return sec * NS + frac_to_ns(m.group(2)) if _EPOCH_MIN <= sec <= _EPOCH_MAX else None
    m = TS_ISO.match(s)
    if m:
        y, mo, d, h, mi, se, frac, off = m.groups()
        try:
            if off:
                off = "+00:00" if off == "Z" else off
                return iso_to_ns(f"{y}-{mo}-{d}", f"{h}:{mi}:{se}", frac, off if ":" in off else
                                 off[:3] + ":" + off[3:])
            return local_ns(int(y), int(mo), int(d), int(h), int(mi), int(se), frac_to_ns(frac), zone)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class FileId:
    entity: str
    name: str          # the file's name as the table knows it (cpu.stat, pressure/cpu, status)
    spec: FileSpec
    controller: str = "proc"


def resolve(path: str) -> FileId | None:
    """Which file this is and what it measures; None when the table does not know it."""
    parts = [p for p in path.strip("/").split("/") if p]
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == ["sys", "fs", "cgroup"]:
            parts = parts[i + 3:]
            break
    if not parts:
        return None
    if parts[0] == "proc" and len(parts) >= 2:
        rest = "/".join(parts[1:])
        if rest in PROC_FILES and rest != "status" and rest != "cgroup":
            return FileId(HOST, rest, PROC_FILES[rest])
        if len(parts) == 3 and parts[1].isdigit() and len(parts[1]) <= 10 and parts[2] in ("status", "cgroup"):
            return FileId(f"pid {int(parts[1])}", parts[2], PROC_FILES[parts[2]])
        return None
    if len(parts) == 2 and parts[0] == "pressure" and f"pressure/{parts[1]}" in PROC_FILES:
        return FileId(HOST, f"pressure/{parts[1]}", PROC_FILES[f"pressure/{parts[1]}"])
    spec = FILES.get(parts[-1])
    if spec is None:
        return None
    dirs = parts[:-1]
    controller = "unified"
    if dirs and dirs[0] in V1_CONTROLLERS:
        controller = dirs[0]
        dirs = dirs[1:]
    return FileId("/" + "/".join(dirs), parts[-1], spec, controller)


# -- one block -> rows --------------------------------------------------------------
_INT = re.compile(r"^-?\d+$")
_NUM = re.compile(r"^-?\d+(?:\.\d+)?$")


def _num(s: str) -> float | None:
    if _INT.match(s):
        return int(s)
    if _NUM.match(s):
        return float(s)
    return None


Row = tuple  # (entity, metric, value, unit, line index in block)


def may_give(fid: FileId, entity: str, metric: str) -> bool:
    """Whether a copy of the file ``fid`` can hold a row of ``metric`` for ``entity`` (see
    :func:`parse_block`), known without reading it: exactly for the grammars whose metric names
    the table lists (one number, ``key value`` lines, ``cpu.max``, PSI), True for the others. The
    evidence of a finding reads only the files that can hold its values."""
    spec, g = fid.spec, fid.spec.grammar
    if g not in ("flat", "single", "cpu_max", "psi"):
        return True
    if entity != fid.entity:
        return False
    if g == "psi":
        return metric.startswith(f"psi.{spec.fields['res'].metric}.")
    if g == "cpu_max":
        return metric in ("cpu.quota_ns", "cpu.period_ns")
    if any(f.metric == metric for f in spec.fields.values()):
        return True
    d = spec.default
    if g == "flat" and d is not None:
        head, _, tail = d.metric.partition("{key}")
        return len(metric) > len(head) + len(tail) and metric.startswith(head) and metric.endswith(tail)
    return False


def parse_block(fid: FileId, lines: list[str]) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows and bad lines (index in ``lines``, why) of one copy of one file."""
    rows: list[Row] = []
    bad: list[tuple[int, str]] = []
    spec, ent, g = fid.spec, fid.entity, fid.spec.grammar
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if g == "flat":
            k, _, v = line.partition(" ")
            val = _num(v.strip())
            if val is None:
                bad.append((i, f"{fid.name}: expected 'key value'"))
                continue
            f = spec.fields.get(k)
            if f is not None:
                rows.append((ent, f.metric, val * f.scale, f.unit, i))
            elif spec.default is not None:
                d = spec.default
                unit = "count" if k in spec.counters else d.unit
                rows.append((ent, d.metric.format(key=k), val * d.scale, unit, i))
        elif g == "single":
            f = spec.fields[""]
            if line == "max":
                continue            # no limit: no row (documented in the table)
            val = _num(line)
            if val is None or i > 0 and rows:
                bad.append((i, f"{fid.name}: expected one number"))
                continue
            rows.append((ent, f.metric, val if val < 0 else val * f.scale, f.unit, i))
        elif g == "cpu_max":
            q, _, p = line.partition(" ")
            pv = _num(p)
            if pv is None or (q != "max" and _num(q) is None):
                bad.append((i, "cpu.max: expected '$MAX $PERIOD'"))
                continue
            rows.append((ent, "cpu.quota_ns", -1 if q == "max" else _num(q) * 1000, "ns", i))
            rows.append((ent, "cpu.period_ns", pv * 1000, "ns", i))
        elif g == "psi":
            res = spec.fields["res"].metric
            kind, _, rest = line.partition(" ")
            if kind not in ("some", "full") or "=" not in rest:
                bad.append((i, f"{fid.name}: expected 'some|full avg10=.. avg60=.. avg300=.. total=..'"))
                continue
            for kv in rest.split():
                k, _, v = kv.partition("=")
                t = PSI_KEYS.get(k)
                val = _num(v)
                if t is None or val is None:
                    bad.append((i, f"{fid.name}: bad field {kv!r}"))
                    break
                rows.append((ent, f"psi.{res}.{kind}.{t[0]}", val * t[3], t[1], i))
        elif g == "io_stat":
            toks = line.split()
            dev = None
            for tok in toks:
                if "=" not in tok:
                    dev = tok       # MAJ:MIN (a device line without stats is valid: nothing to read)
                    continue
                k, _, v = tok.partition("=")
                f = spec.fields.get(k)
                val = _num(v)
                if f is not None and val is not None and dev is not None:
                    rows.append((f"{ent} dev={dev}", f.metric, val, f.unit, i))
        elif g == "loadavg":
            toks = line.split()
            vals = [_num(t) for t in toks[:3]]
            if len(toks) < 3 or any(v is None for v in vals):
                bad.append((i, "loadavg: expected 'load1 load5 load15 running/threads lastpid'"))
                continue
            for (m, u), v in zip(LOADAVG, vals):
                rows.append((ent, m, v, u, i))
        elif g == "colon":
            k, sep, v = line.partition(":")
            if not sep:
                bad.append((i, f"{fid.name}: expected 'Key: value'"))
                continue
            f = spec.fields.get(k)
            if f is not None:
                val = _num(v.split()[0]) if v.split() else None
                if val is None:
                    bad.append((i, f"{fid.name}: {k} is not a number"))
                    continue
                rows.append((ent, f.metric, val * f.scale, f.unit, i))
        elif g == "percpu":
            f = spec.fields[""]
            vals = [_num(t) for t in line.split()]
            if i > 0 or any(v is None for v in vals):
                bad.append((i, f"{fid.name}: expected one number per CPU on one line"))
                continue
            rows += [(f"{ent} cpu={n}", f.metric, v, f.unit, i) for n, v in enumerate(vals)]
        elif g == "freezer":
            v = FREEZER_STATES.get(line)
            if v is None or i > 0:
                bad.append((i, f"{fid.name}: expected THAWED, FREEZING or FROZEN"))
                continue
            rows.append((ent, spec.fields[""].metric, v, spec.fields[""].unit, i))
        elif g in ("pids", "tids"):
            if not _ID.match(line):
                bad.append((i, f"{fid.name}: expected one {'pid' if g == 'pids' else 'thread id'} per line"))
        elif g == "proc_cgroup":
            if not PROC_CGROUP_LINE.match(line):
                bad.append((i, "cgroup: expected 'hierarchy-ID:controller-list:cgroup-path'"))
    if fid.name == "status" and fid.controller == "proc":
        got = {r[1]: r for r in rows}
        a, b = got.get("proc.voluntary_ctxt_switches"), got.get("proc.nonvoluntary_ctxt_switches")
        if a and b:
            rows.append((ent, "proc.ctxt_switches", a[2] + b[2], "count", b[4]))
    return rows, bad


FREEZER_STATES = {"THAWED": 0.0, "FREEZING": 0.5, "FROZEN": 1.0}
_ID = re.compile(r"^\d{1,10}$")
PROC_CGROUP_LINE = re.compile(r"^(\d{1,10}):([^:]*):(/.*)$")


# -- layouts -> blocks ----------------------------------------------------------------
@dataclass
class Block:
    ts_ns: int | None
    member: str            # path in the bundle of the file that holds the block
    first_line: int        # 1-based line of lines[0] in that file
    fid: FileId | None     # (None only inside concat_blocks: a file no reader knows)
    lines: list[str]


_READ = 1 << 16


def read_member(disk: str, limit: int | None = None) -> str:
    """A member file's text (gunzipped), at most ``limit`` bytes (more: ValueError). Read
    through the descriptor, not a file object: a series of snapshots is thousands of files of a
    few hundred bytes, and a file object costs several times what their reads do."""
    fd = os.open(disk, os.O_RDONLY)
    try:
        chunks, got = [], 0
        while limit is None or got <= limit:
            b = os.read(fd, _READ if limit is None else min(_READ, limit + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if data[:2] == b"\x1f\x8b":
        import gzip
        data = gzip.decompress(data)
    if limit is not None and len(data) > limit:
        raise ValueError(f"more than {limit} bytes")
    return data.decode("utf-8", "replace")


def snapshot_blocks(members: Iterable[tuple[str, str]], prefix_len: int, zone: str | None,
                    want_ts: set[int] | None = None, limit: int | None = None,
                    on_error=None, on_unknown=None) -> Iterator[Block]:
    """Layout 1: ``<group>/<time>/<path>``; members are (path in bundle, file on disk).
    ``on_unknown(rel, path, ts)`` hears of the files no reader knows."""
    for rel, disk in members:
        sub = rel[prefix_len:]
        tname, _, path = sub.partition("/")
        ts = parse_time_name(tname, zone)
        if want_ts is not None and ts not in want_ts:
            continue
        fid = resolve(path)
        if fid is None:
            if on_unknown:
                on_unknown(rel, path, ts)
            continue
        try:
            text = read_member(disk, limit)
        except (OSError, ValueError, EOFError) as e:
            if on_error:
                on_error(rel, f"cannot be read: {e}")
            continue
        yield Block(ts, rel, 1, fid, text.splitlines())


HDR_TAIL = re.compile(r"^==> (.+) <==$")
HDR_HASH = re.compile(r"^### (\S.*?) @ (\S.*)$")


def header_time(s: str, zone: str | None) -> int | None:
    """A time line/field: epoch seconds, ISO 8601 (``date --iso-8601=ns``), or ``date`` C-locale."""
    s = s.strip()
    t = parse_time_name(s, zone)
    if t is not None:
        return t
    from .host_info import DATE_C, DATE_ISO
    from ..timeparse import MONTHS, offset_to_seconds, utc_ns
    m = DATE_ISO.match(s)
    if m:
        return iso_to_ns(m.group(1), m.group(2), m.group(3), m.group(4), zone)
    m = DATE_C.match(s)
    if m:
        mon, day, hh, mm, ss, frac, ampm, z, year = m.groups()
        h = int(hh) % 12 + (12 if ampm == "PM" else 0) if ampm else int(hh)
        if z.startswith(("+", "-")):
            return utc_ns(int(year), MONTHS[mon], int(day), h, int(mm), int(ss), frac_to_ns(frac)) \
                - offset_to_seconds(z) * NS
        is_utc = z.upper() in ("UTC", "GMT", "Z", "UCT")
        return local_ns(int(year), MONTHS[mon], int(day), h, int(mm), int(ss), frac_to_ns(frac),
                        "UTC" if is_utc else zone)
    return None


def concat_blocks(lines: Iterable[tuple[int, str]], rel: str, zone: str | None,
                  on_bad=None, on_unknown=None) -> Iterator[Block]:
    """Layout 2: ``==> path <==`` / ``### path @ time`` headers, optional time line before blocks."""
    ts: int | None = None
    cur: Block | None = None      # (fid None: a file no reader knows, whose lines are skipped)
    for lineno, raw in lines:
        line = raw.rstrip("\r")
        m = HDR_TAIL.match(line) or HDR_HASH.match(line)
        if m:
            if cur is not None and cur.fid is not None:
                yield cur
            path = m.group(1).strip()
            if m.re is HDR_HASH:
                t = header_time(m.group(2), zone)
                if t is None and on_bad:
                    on_bad(lineno, line, "header time not understood")
                ts = t if t is not None else ts
            fid = resolve(path)
            if fid is None:
                if on_unknown:
                    on_unknown(f"{rel}:{lineno}", path, ts)
                elif on_bad:
                    on_bad(lineno, line, f"file {path!r} is not one aftertrace reads; its lines are skipped")
            cur = Block(ts, rel, lineno + 1, fid, [])
            continue
        stripped = line.strip()
        # a time line (``date +%s.%N``, ``date``, ISO) starts the next round of blocks; a number
        # that is the first line of a block is that block's value, not a time
        if stripped and (stripped[0].isdigit() or stripped[:3] in _WEEKDAYS) and (
                cur is None or any(x.strip() for x in cur.lines)):
            t = header_time(stripped, zone)
            if t is not None:
                if cur is not None and cur.fid is not None:
                    yield cur
                cur = None
                ts = t
                continue
        if cur is not None and cur.fid is None:
            if stripped:
                cur.lines[:] = [line]      # (only whether the block has begun matters)
        elif cur is not None:
            cur.lines.append(line)
        elif stripped and on_bad:
            on_bad(lineno, line, "line outside any file block")
    if cur is not None and cur.fid is not None:
        yield cur


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
JSONL_TS = ("t_real_ns", "ts", "time", "timestamp")


def json_time(v, zone: str | None) -> int | None:
    """An epoch number (s, ms, µs or ns, told apart by magnitude) or a time string -> ns."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        a = abs(v)
        if a >= 1e17:
            return int(v)
        if a >= 1e14:
            return int(v * 1_000)
        if a >= 1e11:
            return int(v * 1_000_000)
        return int(round(v * NS))
    if isinstance(v, str):
        try:
            return header_time(v, zone)
        except (ValueError, OverflowError):     # a date the calendar does not have
            return None
    return None


def jsonl_blocks(lines: Iterable[tuple[int, str]], rel: str, zone: str | None,
                 on_bad=None, on_unknown=None) -> Iterator[Block]:
    """Layout 3: one JSON object per line: {"t_real_ns"|"ts", "cgroup"|"path", "file", "raw"}."""
    for lineno, raw in lines:
        if not raw.strip():
            continue
        try:
            o = json.loads(raw)
        except (ValueError, RecursionError) as e:   # (RecursionError: nested deeper than json can follow)
            if on_bad:
                on_bad(lineno, raw, f"not JSON: {e}")
            continue
        if not isinstance(o, dict) or not isinstance(o.get("raw"), str):
            if on_bad:
                on_bad(lineno, raw, "JSON object without a 'raw' text")
            continue
        key = next((k for k in JSONL_TS if k in o), None)
        ts = json_time(o[key], zone) if key else None
        where = o.get("cgroup") if "cgroup" in o else o.get("path", "")
        path = f"{where or ''}/{o['file']}" if o.get("file") else str(where or "")
        fid = resolve(path)
        if fid is None:
            if on_unknown:
                on_unknown(f"{rel}:{lineno}", path, ts)
            elif on_bad:
                on_bad(lineno, raw, f"file {path!r} is not one aftertrace reads")
            continue
        if ts is None and on_bad:
            on_bad(lineno, raw, "no time in the object; its values are kept without time")
        yield Block(ts, rel, lineno, fid, o["raw"].splitlines())


def metric_frame(cols: dict[str, list]):
    """A ``metrics`` frame (entity, metric, ts_raw_ns, value, unit) from column lists."""
    import polars as pl
    return pl.DataFrame(cols, schema={"entity": pl.String, "metric": pl.String, "ts_raw_ns": pl.Int64,
                                      "value": pl.Float64, "unit": pl.String}, strict=False)   # (too large: null)


def disk_root(members: list[tuple[str, str]], key: str) -> str:
    """The folder on disk that holds the bundle folder ``key`` of these members."""
    rel, disk = members[0]
    return disk[: len(disk) - (len(rel) - len(key))]


# -- derived series -----------------------------------------------------------------
def derive(entity: list, metric: list, ts: list, value: list) -> tuple[dict[str, list], list[dict]]:
    """Rates, deltas, headroom and quota cores from raw columns. Returns (columns, counter resets)."""
    import polars as pl
    df = pl.DataFrame({"entity": entity, "metric": metric, "ts_raw_ns": ts, "value": value},
                      schema={"entity": pl.String, "metric": pl.String, "ts_raw_ns": pl.Int64,
                              "value": pl.Float64}, strict=False)   # (a time too large: null, dropped)
    df = df.filter(pl.col("ts_raw_ns").is_not_null())
    out = []
    resets: list[dict] = []
    series = df.filter(pl.col("metric").is_in(list(RATES) + list(DELTAS) + ["cpu.nr_periods"])).unique(
        ["entity", "metric", "ts_raw_ns"], keep="last").sort(["entity", "metric", "ts_raw_ns"])
    if len(series):
        s = series.with_columns(
            dv=pl.col("value").diff().over(["entity", "metric"]),
            dt=(pl.col("ts_raw_ns").diff().over(["entity", "metric"]) / 1e9))
        s = s.filter(pl.col("dv").is_not_null() & (pl.col("dt") > 0))
        reset = s.filter((pl.col("dv") < 0) & ~pl.col("metric").is_in(list(SIGNED)))
        for r in reset.head(50).iter_rows(named=True):
            resets.append({"entity": r["entity"], "metric": r["metric"], "ts_raw_ns": r["ts_raw_ns"]})
        if len(reset) > 50:
            resets.append({"more": len(reset) - 50})
        ok = s.filter((pl.col("dv") >= 0) | pl.col("metric").is_in(list(SIGNED)))
        rmap = pl.DataFrame({"metric": list(RATES), "d_metric": [v[0] for v in RATES.values()],
                             "factor": [v[1] for v in RATES.values()], "d_unit": [v[2] for v in RATES.values()]})
        rates = ok.join(rmap, on="metric").select(
            "entity", pl.col("d_metric").alias("metric"), "ts_raw_ns",
            (pl.col("dv") / pl.col("dt") * pl.col("factor")).alias("value"), pl.col("d_unit").alias("unit"))
        dmap = pl.DataFrame({"metric": list(DELTAS), "d_metric": list(DELTAS.values())})
        deltas = ok.join(dmap, on="metric").select(
            "entity", pl.col("d_metric").alias("metric"), "ts_raw_ns", pl.col("dv").alias("value"),
            pl.lit("count").alias("unit"))
        out += [rates, deltas]
        # throttled fraction of periods: d nr_throttled / d nr_periods (same entity, same snapshot)
        per = ok.filter(pl.col("metric") == "cpu.nr_periods").select("entity", "ts_raw_ns", dp="dv")
        thr = ok.filter(pl.col("metric") == "cpu.nr_throttled").select("entity", "ts_raw_ns", dth="dv")
        frac = thr.join(per, on=["entity", "ts_raw_ns"]).filter(pl.col("dp") > 0).select(
            "entity", pl.lit("cpu.throttled_fraction").alias("metric"), "ts_raw_ns",
            (pl.col("dth") / pl.col("dp")).alias("value"), pl.lit("fraction").alias("unit"))
        out.append(frac)
    # headroom and quota cores (gauges at the same snapshot)
    def pair(a: str, b: str):
        x = df.filter(pl.col("metric") == a).unique(["entity", "ts_raw_ns"], keep="last").select(
            "entity", "ts_raw_ns", a=pl.col("value"))
        y = df.filter(pl.col("metric") == b).unique(["entity", "ts_raw_ns"], keep="last").select(
            "entity", "ts_raw_ns", b=pl.col("value"))
        return x.join(y, on=["entity", "ts_raw_ns"])
    hr = pair("memory.limit_bytes", "memory.usage_bytes").filter(pl.col("a") < UNLIMITED_BYTES).select(
        "entity", pl.lit("memory.headroom_bytes").alias("metric"), "ts_raw_ns",
        (pl.col("a") - pl.col("b")).alias("value"), pl.lit("bytes").alias("unit"))
    qc = pair("cpu.quota_ns", "cpu.period_ns").filter((pl.col("a") > 0) & (pl.col("b") > 0)).select(
        "entity", pl.lit("cpu.quota_cores").alias("metric"), "ts_raw_ns",
        (pl.col("a") / pl.col("b")).alias("value"), pl.lit("cores").alias("unit"))
    out += [hr, qc]
    res = pl.concat([o.with_columns(pl.col("value").cast(pl.Float64)) for o in out if len(o)]) if any(
        len(o) for o in out) else None
    if res is None:
        return {}, resets
    return res.to_dict(as_series=False), resets
