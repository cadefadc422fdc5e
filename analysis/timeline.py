"""The aligned timeline of an incident as a trace viewer's tracks, answered per time window at
the level of detail the viewer can draw.

Tracks
------
Every placed event belongs to one track, grouped host -> rank (:func:`build_tracks`, run after
clock alignment, stores them in ``tracks``):

* a **thread track** is one thread of a profiler recording: a rank's Kineto traces (a file per
  profiler cycle) are read as one recording, as is a perf recording; keyed by (host, rank, kind,
  pid, tid);
* a **log track** is one source's lines for one host and rank (a launcher log that speaks for
  ranks 0 and 1 gives a track under each rank and one for the host); keyed by (host, rank,
  source).

The track list is the incident's, not the window's: tracks keep their place while zooming.

Level of detail
---------------
A window is drawn ``px`` pixels wide, so one pixel is ``res = (end - start) / px`` ns. On each
requested track:

* spans at least ``res`` long are shipped one by one (each is at least a pixel wide), with
  their nesting depth on the track; so are typed findings, whatever their length;
* the rest (instants and spans under a pixel) are shipped one by one when the track has at most
  ``max_events`` of them in the window and no more than one per two pixels, else as buckets
  ``res * BUCKET_PX`` wide (count, most common name, findings in it; of names equally common the
  first in name order); in a wide window (buckets of a second or more) always as buckets, named
  by the most common name of their busiest second.

A parent span is never shorter than its child, so whenever a child is shipped its parents are
too, and the depth a span is drawn at does not change with the zoom.

Worked example (the real sample, tested in tests/server/test_timeline.py): rank 0's main thread
from 13:28:25.2 to 13:28:26.3 (1.1 s) drawn 1,000 px wide has ``res`` = 1.1 ms. ProfilerStep#78
(984 ms) is shipped at depth 0 with forward_backward, DistributedDataParallel.forward, aten::linear
and aten::addmm nested under it (depths 1 to 4); the hundreds of ops shorter than 1.1 ms, more
than ``max_events`` = 50, become buckets of 4.4 ms, counted exactly. Zoomed to 13:28:25.550 -
.565 (``res`` = 15 us) every op there is a span of its own, five and more deep, with no bucket, and
the step is still at depth 0.

Wide windows (buckets of a second or more) count the small events from ``track_bins`` (events
per track and UTC second), and windows whose pixel is ``LONG_NS`` or more read their spans from
``track_spans`` (the long spans and the findings), so their cost does not grow with the number
of events.

Metric series (cgroup CPU throttling, memory against its limit, pressure stall, GPU
utilisation, step times from the logs) are reduced to at most ``px / 4`` points each: the
largest value of each bucket, which keeps spikes visible; the viewer draws them as counter
tracks under their host.

All times leave this module relative to ``origin_ns`` (the incident's first placed time), so a
browser holds them exactly as doubles; rows the clock alignment could not place are not on the
timeline (their count is returned).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

# Metrics shown by default, as SQL LIKE patterns, in display order.
DEFAULT_METRICS = ("cpu.throttled_s_per_s", "memory.usage_bytes", "memory.limit_bytes", "psi.cpu.some.stall_pct",
                   "psi.memory.some.stall_pct", "psi.io.some.stall_pct", "gpu.%util%", "step_time")
TEXT_CHARS = 240
BIN_NS = 1_000_000_000
BUCKET_PX = 4                  # a bucket of small events is this many pixels wide
LONG_NS = 100_000_000          # spans this long, and every finding, are also kept in track_spans
MAX_SPANS = 20_000             # spans shipped per track and window, longest first
# Kinds whose events are read per thread across all files of the kind (one recording).
THREAD_KINDS = ("torch_trace", "perf_script")
# Order of kinds within a rank or host.
KIND_ORDER = ("torch_trace", "nccl_log", "app_log", "text", "cgroup", "dmesg", "perf_script")


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    px: int = 1600                       # the width the window is drawn at, in pixels
    max_events: int = 2000               # small events shipped one by one per track
    tracks: tuple[int, ...] | None = None     # track ids to answer (None: the default set)
    max_tracks: int = 400
    metrics: tuple[str, ...] = DEFAULT_METRICS


def _key_sql(e: str = "e", s: str = "s") -> str:
    """The track key of an event row ``e`` of source ``s``, as the select list h, r, k, src, p, t
    (the same expression builds the tracks and finds a track's events)."""
    thread = f"{s}.kind IN {THREAD_KINDS!r}"
    return (f"COALESCE({e}.host, {s}.host, '') AS h, COALESCE({e}.rank, {s}.rank, -1) AS r, {s}.kind AS k, "
            f"CASE WHEN {thread} THEN -1 ELSE {e}.source_id END AS src, "
            # (a perf recording's thread is its tid: sched events name no pid)
            f"CASE WHEN {s}.kind = 'torch_trace' THEN COALESCE({e}.pid, -1) ELSE -1 END AS p, "
            f"CASE WHEN {thread} THEN COALESCE({e}.tid, -1) ELSE -1 END AS t")


_JOIN_TRACK = """JOIN tracks tr ON tr.incident_id = ev.incident_id AND tr.host = ev.h AND tr.rank = ev.r
                 AND tr.kind = ev.k AND tr.source_id = ev.src AND tr.pid = ev.p AND tr.tid = ev.t"""


def _on_tracks(where: str) -> str:
    """``FROM`` text of the incident's events that pass ``where`` with their track (aliases ev, tr);
    its first parameter is the incident id."""
    return f"""(SELECT e.*, {_key_sql()} FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND {where}) ev {_JOIN_TRACK}"""


def bounds(store, incident_id: str) -> tuple[int | None, int | None]:
    """Earliest and latest placed time of the incident's events and metrics."""
    r = store.query(
        """SELECT min(a) AS a, max(b) AS b FROM (
             SELECT min(ts_utc_ns) AS a, max(ts_utc_ns + COALESCE(dur_ns, 0)) AS b FROM events WHERE incident_id = ?
             UNION ALL SELECT min(ts_utc_ns), max(ts_utc_ns) FROM metrics WHERE incident_id = ?)""",
        [incident_id, incident_id])[0]
    return r["a"], r["b"]


def _label(row: dict, path: str | None, comm: str | None) -> str:
    """What a track is called: a log track by its file, a thread by what it is."""
    if row["source_id"] >= 0:
        parts = (path or "?").rsplit("/", 2)
        if row["kind"] == "stack_dump" and len(parts) == 3 and parts[1].isdigit():   # /proc/<pid>/stack: whose
            return f"{parts[2]} · pid {parts[1]}"
        return parts[-1] or (path or "?")
    pid, tid, cat = row["pid"], row["tid"], row["category"] or ""
    if row["kind"] == "torch_trace":
        if pid < 0:
            return "profiler steps"
        if cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
            return f"GPU {pid} stream {tid}"
        return f"main thread {tid}" if pid == tid else f"thread {tid}"
    if row["kind"] == "perf_script":
        return f"{comm or 'tid'} {tid}" if tid >= 0 else "perf (no thread)"
    return f"pid {pid} tid {tid}"


def build_tracks(store, incident_id: str) -> int:
    """Fill ``tracks`` (see the module docstring), ``track_spans`` (spans of LONG_NS or more and
    every finding, per track), ``track_bins`` (placed events counted per track and UTC second) and
    ``metric_bins`` (each metric series reduced per UTC second: first time, largest value). Run
    after clock alignment; returns the number of tracks."""
    cur = store.cursor()
    for t in ("tracks", "track_spans", "track_bins", "metric_bins"):
        cur.execute(f"DELETE FROM {t} WHERE incident_id = ?", [incident_id])
    # per key and category, summed per key here: the category a track is named by is its most
    # common one, ties broken by name (a store query's mode() breaks them by scan order)
    keyed: dict[tuple, dict] = {}
    for r in store.query(
            f"""SELECT h AS host, r AS rank, k AS kind, src AS source_id, p AS pid, t AS tid, category,
                       count(*) AS n, count(dur_ns) AS spans, count(kind) AS typed,
                       min(ts_utc_ns) AS first_ns, max(ts_utc_ns + COALESCE(dur_ns, 0)) AS last_ns
                FROM (SELECT {_key_sql()}, e.category, e.dur_ns, e.kind, e.ts_utc_ns
                      FROM events e JOIN sources s USING (incident_id, source_id)
                      WHERE e.incident_id = ? AND e.ts_utc_ns IS NOT NULL)
                GROUP BY ALL""", [incident_id]):
        key = (r["host"], r["rank"], r["kind"], r["source_id"], r["pid"], r["tid"])
        t = keyed.get(key)
        if t is None:
            keyed[key] = t = dict(r, _top=(r["n"], r["category"] or ""))
            continue
        for c in ("n", "spans", "typed"):
            t[c] += r[c]
        t["first_ns"], t["last_ns"] = min(t["first_ns"], r["first_ns"]), max(t["last_ns"], r["last_ns"])
        if (r["n"], r["category"] or "") > t["_top"]:
            t["_top"], t["category"] = (r["n"], r["category"] or ""), r["category"]
    rows = list(keyed.values())
    for r in rows:
        del r["_top"]
    paths = {r["source_id"]: r["path"] for r in store.query(
        "SELECT source_id, path FROM sources WHERE incident_id = ?", [incident_id])}
    # a perf thread's command: from its samples, else from the scheduler events that name it
    comms = {(r["host"], r["tid"]): r["comm"] for r in store.query(
        """SELECT host, tid, first(comm ORDER BY n DESC, comm) AS comm FROM (
             SELECT COALESCE(e.host, s.host, '') AS host, e.tid, json_extract_string(e.attrs, '$.prev_comm') AS comm,
                    count(*) AS n
             FROM events e JOIN sources s USING (incident_id, source_id)
             WHERE e.incident_id = ? AND s.kind = 'perf_script' AND e.name = 'sched:sched_switch'
               AND e.tid IS NOT NULL GROUP BY ALL) GROUP BY ALL""", [incident_id]) if r["comm"]}
    comms.update({(r["host"], r["tid"]): r["comm"] for r in store.query(
        """SELECT host, tid, first(comm ORDER BY n DESC, comm) AS comm FROM (
             SELECT COALESCE(m.host, s.host, '') AS host, m.tid, m.comm, count(*) AS n
             FROM samples m JOIN sources s USING (incident_id, source_id)
             WHERE m.incident_id = ? AND m.tid IS NOT NULL GROUP BY ALL) GROUP BY ALL""", [incident_id]) if r["comm"]})
    kind_rank = {k: i for i, k in enumerate(KIND_ORDER)}
    rows.sort(key=lambda r: (r["host"], r["rank"] < 0, r["rank"], kind_rank.get(r["kind"], len(KIND_ORDER)),
                             r["kind"], paths.get(r["source_id"], ""), r["pid"] != r["tid"], r["pid"], r["tid"]))
    for i, r in enumerate(rows):
        r["incident_id"], r["track_id"] = incident_id, i
        r["label"] = _label(r, paths.get(r["source_id"]), comms.get((r["host"], r["tid"])))
    store.insert_rows("tracks", rows)
    cur.execute(
        f"""INSERT INTO track_bins
            SELECT ev.incident_id, tr.track_id, ev.ts_utc_ns // {BIN_NS} AS sec, count(*) AS n,
                   count(ev.kind) AS typed, mode(ev.name ORDER BY ev.name) AS name
            FROM {_on_tracks("e.ts_utc_ns IS NOT NULL")}
            GROUP BY ALL""", [incident_id])
    cur.execute(
        f"""INSERT INTO track_spans
            SELECT ev.incident_id, tr.track_id, ev.ts_utc_ns, ev.dur_ns, ev.name, ev.kind, ev.severity, ev.line
            FROM {_on_tracks(f"e.ts_utc_ns IS NOT NULL AND (e.dur_ns >= {LONG_NS} OR e.kind IS NOT NULL)")}""",
        [incident_id])
    cur.execute(
        f"""INSERT INTO metric_bins
            SELECT m.incident_id, COALESCE(m.host, s.host), m.entity, m.metric, any_value(m.unit),
                   m.ts_utc_ns // {BIN_NS} AS sec, min(m.ts_utc_ns), max(m.value)
            FROM metrics m JOIN sources s USING (incident_id, source_id)
            WHERE m.incident_id = ? AND m.ts_utc_ns IS NOT NULL
            GROUP BY m.incident_id, COALESCE(m.host, s.host), m.entity, m.metric, sec""", [incident_id])
    return len(rows)


def owners(rep: dict | None) -> dict[int, str]:
    """pid -> whose process it is, as the report's progress table says: a rank's, or one of its
    DataLoader workers' (a dump or trace of one process is a file of the host, not of a rank)."""
    out: dict[int, str] = {}
    for p in (rep or {}).get("progress") or []:
        if p.get("pid") is not None:
            out.setdefault(p["pid"], f"rank {p['rank']}")
        for w in (p.get("stack") or {}).get("workers") or []:
            if w.get("pid") is not None:
                out.setdefault(w["pid"], f"rank {p['rank']}'s worker")
    return out


def tracks(store, incident_id: str, rep: dict | None = None) -> list[dict]:
    """The incident's tracks in order, as the viewer lists them (unknown host and rank as null).
    With the incident's report, a host's track of one process's file (a stack dump, a trace) says
    whose process it is ("py-spy-17730.txt · rank 1")."""
    out = []
    whose = owners(rep)
    for r in store.query(
            """SELECT t.track_id, t.host, t.rank, t.kind, t.source_id, t.pid, t.tid, t.label, t.category,
                      t.n, t.spans, t.typed, s.path, s.pid AS source_pid, s.clock_domain, c.uncertainty_ns,
                      c.offset_ns, c.method
               FROM tracks t
               -- a thread track's clock is its recording's: that of the first file of its kind on its host
               LEFT JOIN (SELECT kind, COALESCE(host, '') AS host, min(source_id) AS sid FROM sources
                          WHERE incident_id = ? GROUP BY ALL) rep
                    ON t.source_id < 0 AND rep.kind = t.kind AND rep.host = t.host
               LEFT JOIN sources s ON s.incident_id = t.incident_id AND s.source_id = COALESCE(rep.sid, t.source_id)
               LEFT JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
                    AND c.domain = s.clock_domain
               WHERE t.incident_id = ? ORDER BY t.track_id""", [incident_id, incident_id]):
        u = r.pop("uncertainty_ns")
        placed = r.pop("offset_ns") is not None
        domain, method = r.pop("clock_domain"), r.pop("method")
        r["id"] = r.pop("track_id")
        r["host"] = r["host"] or None
        if r["source_id"] < 0:
            r["path"] = None          # (a thread track reads every file of its recording)
        for k in ("rank", "source_id", "pid", "tid"):
            r[k] = None if r[k] < 0 else r[k]
        owner = whose.get(r.pop("source_pid"))
        if owner and r["rank"] is None and r["source_id"] is not None:
            r["label"] = f"{r['label']} · {owner}"
        r["clock"] = None if domain is None else {"domain": domain, "placed": placed, "method": method,
                                                  "uncertainty_s": None if u is None else u / 1e9}
        out.append(r)
    return out


def default_tracks(catalog: list[dict], limit: int) -> tuple[int, ...]:
    """The tracks a window answers when none are named: every track with a finding, then the
    rest in order, at most ``limit``."""
    typed = [t["id"] for t in catalog if t["typed"]]
    rest = [t["id"] for t in catalog if not t["typed"]]
    return tuple(sorted((typed + rest)[:limit]))


def depths(spans: list[list]) -> None:
    """Set each span's nesting depth (``row[2]``) on its track: rows are [t, dur, depth, ...] in
    the order (start, longest first); an instant (dur null) sits at the depth of where it falls."""
    ends: list[float] = []
    for row in spans:
        t, d = row[0], row[1]
        while ends and ends[-1] <= t:
            ends.pop()
        row[2] = len(ends)
        if d:
            ends.append(t + d)


def window(store, incident_id: str, w: Window, origin_ns: int) -> dict:
    """The requested tracks' spans, small events and buckets in ``[start, end)``, and the metric
    series, with times relative to ``origin_ns``."""
    if w.end_ns <= w.start_ns:
        raise ValueError("the window's end must be after its start")
    res = max(1, (w.end_ns - w.start_ns) // max(1, w.px))
    bucket = res * BUCKET_PX
    ids = list(w.tracks or ())[:w.max_tracks]
    out = {"origin_ns": origin_ns, "start_ns": w.start_ns, "end_ns": w.end_ns, "res_ns": res, "data": {},
           "metrics": _metrics(store, incident_id, w, origin_ns),
           "unplaced_events": store.query("SELECT count(*) AS n FROM events WHERE incident_id = ? "
                                          "AND ts_utc_ns IS NULL", [incident_id])[0]["n"]}
    if not ids:
        return out
    keys = {r[0]: r[1:] for r in store.cursor().execute(
        "SELECT track_id, source_id, tid FROM tracks WHERE incident_id = ? AND list_contains(?::INTEGER[], track_id)",
        [incident_id, ids]).fetchall()}
    # ts >= start - longest lets the store skip row groups by their time ranges; the exact overlap
    # test follows, so any bound at least as long as the longest span will do: where the tracks
    # were built, track_spans holds every span of LONG_NS or more (a few thousand rows, where the
    # events are millions)
    longest = store.query(
        f"SELECT greatest(COALESCE(max(dur_ns), 0), {LONG_NS}) AS d FROM track_spans WHERE incident_id = ?"
        if keys else "SELECT COALESCE(max(dur_ns), 0) AS d FROM events WHERE incident_id = ? AND dur_ns > 0",
        [incident_id])[0]["d"]

    def scan_of(want: list[int], big_only: bool = False) -> tuple[str, list]:
        """The window's events of the tracks ``want`` (aliases ev, tr) and the parameters; a cheap
        test on plain columns (the log tracks' sources, the thread tracks' tids) drops the other
        tracks' rows before any join."""
        srcs = sorted({keys[t][0] for t in want if t in keys and keys[t][0] >= 0})
        tids = sorted({keys[t][1] for t in want if t in keys and keys[t][0] < 0})
        sql = _on_tracks(f"""e.ts_utc_ns >= ? AND e.ts_utc_ns < ? AND e.ts_utc_ns + COALESCE(e.dur_ns, 0) >= ?
                     AND (list_contains(?::INTEGER[], e.source_id) OR list_contains(?::BIGINT[], COALESCE(e.tid, -1)))
                     {"AND (COALESCE(e.dur_ns, 0) >= ? OR e.kind IS NOT NULL)" if big_only else ""}""") + \
            " JOIN (SELECT unnest(?::INTEGER[]) AS want) q ON q.want = tr.track_id"
        return sql, [incident_id, w.start_ns - longest, w.end_ns, w.start_ns, srcs, tids,
                     *([res] if big_only else []), want]

    scan, args = scan_of(ids)
    scan_big, args_big = scan_of(ids, big_only=True)
    big = "(COALESCE(ev.dur_ns, 0) >= ? OR ev.kind IS NOT NULL)"
    data: dict[int, dict] = {}

    def slot(tid: int) -> dict:
        return data.setdefault(tid, {"spans": [], "bins": [], "small": 0, "spans_left_out": 0})

    # spans a pixel wide or more, and every finding: longest first within a track, at most MAX_SPANS;
    # when a pixel is LONG_NS or more they are all in track_spans
    from_spans = res >= LONG_NS and bool(store.query(
        "SELECT 1 AS x FROM track_spans WHERE incident_id = ? LIMIT 1", [incident_id]))
    # the small events: counted per track, shipped one by one where few, else bucketed. A bucket is
    # named by its most common name, the first in name order among equals (as each second of
    # track_bins is): the same name at every request. (The rows come as columns: a wide window's
    # tens of thousands of buckets as Python tuples cost more than the query.)
    at = w.start_ns - origin_ns
    wide = bucket >= BIN_NS and bool(store.query(
        "SELECT 1 AS x FROM track_bins WHERE incident_id = ? LIMIT 1", [incident_id]))
    # one by one only where they can be told apart: at most max_events, and at most one per two
    # pixels; the tracks with more are bucketed (each small event with its track's count of them)
    limit = min(w.max_events, max(1, w.px // 2))
    rows_and_buckets = f"""
        SELECT 1 AS part, tk, ts, dur, name, kind, severity, line, NULL::BIGINT AS i, small, NULL::BIGINT AS b,
               NULL::BIGINT AS n, NULL::BIGINT AS typed
        FROM small WHERE small <= {limit}
        UNION ALL
        SELECT 2, tk, NULL, NULL, mode(name ORDER BY name), NULL, NULL, NULL, NULL, any_value(small),
               greatest(0, (ts - ?) // ?) AS b, count(*), count(kind)
        FROM small WHERE small > {limit} GROUP BY tk, b"""
    window_rows = "SELECT tr.track_id AS tk, ev.ts_utc_ns AS ts, ev.dur_ns AS dur, ev.name, ev.kind, ev.severity, ev.line"
    longest_first = "row_number() OVER (PARTITION BY tk ORDER BY kind IS NULL, dur DESC, ts) AS i"
    if not from_spans and not wide:
        # one scan of the window's events for all three: its spans, its few small events, the
        # buckets of the many
        got = store.columns(
            f"""WITH win AS MATERIALIZED ({window_rows}, {big} AS big FROM {scan}),
                     small AS (SELECT *, count(*) OVER (PARTITION BY tk) AS small FROM win WHERE NOT big)
                SELECT 0 AS part, tk, ts, dur, name, kind, severity, line, i, NULL::BIGINT AS small,
                       NULL::BIGINT AS b, NULL::BIGINT AS n, NULL::BIGINT AS typed
                FROM (SELECT *, {longest_first} FROM win WHERE big) WHERE i <= {MAX_SPANS + 1}
                UNION ALL {rows_and_buckets}""", [res, *args, w.start_ns, bucket])
    else:
        if from_spans:
            spans_sql = f"""SELECT *, {longest_first} FROM (
                                SELECT track_id AS tk, ts_utc_ns AS ts, dur_ns AS dur, name, kind, severity, line
                                FROM track_spans WHERE incident_id = ? AND ts_utc_ns >= ? AND ts_utc_ns < ?
                                  AND ts_utc_ns + COALESCE(dur_ns, 0) >= ? AND list_contains(?::INTEGER[], track_id)
                                  AND (COALESCE(dur_ns, 0) >= ? OR kind IS NOT NULL))"""
            spans_args = [incident_id, w.start_ns - longest, w.end_ns, w.start_ns, ids, res]
        else:
            spans_sql = f"SELECT *, {longest_first} FROM ({window_rows} FROM {scan_big})"
            spans_args = args_big
        got = store.columns(
            f"""SELECT 0 AS part, tk, ts, dur, name, kind, severity, line, i, NULL::BIGINT AS small,
                       NULL::BIGINT AS b, NULL::BIGINT AS n, NULL::BIGINT AS typed
                FROM ({spans_sql}) WHERE i <= {MAX_SPANS + 1}""", spans_args)
        if wide:        # (buckets of seconds: read from track_bins, which costs no scan of the events)
            step = max(1, bucket // BIN_NS)
            width = step * BIN_NS
            wb = store.columns(
                f"""SELECT track_id, (sec * {BIN_NS} - ?) // ? AS b, sum(n)::BIGINT, sum(typed)::BIGINT,
                           arg_min(name, (-n, name))
                    FROM track_bins WHERE incident_id = ? AND sec BETWEEN ? AND ?
                         AND list_contains(?::INTEGER[], track_id) GROUP BY ALL ORDER BY track_id, b""",
                [w.start_ns, width, incident_id, w.start_ns // BIN_NS, (w.end_ns - 1) // BIN_NS, ids])
            last = s = None
            for tk, b, n, typed, name in zip(*wb.values()):
                if tk != last:          # (a track's buckets come together, in time order)
                    s, last = slot(tk), tk
                s["small"] += n
                s["bins"].append([at + b * width, width, n, typed, name])
        else:
            more = store.columns(
                f"""WITH win AS MATERIALIZED ({window_rows} FROM {scan} WHERE NOT {big}),
                         small AS (SELECT *, count(*) OVER (PARTITION BY tk) AS small FROM win)
                    {rows_and_buckets}""", [*args, res, w.start_ns, bucket])
            got = {k: got[k] + more[k] for k in got}
    for part, tk, ts, dur, name, kind, sev, line, i, small, b, n, typed in zip(*got.values()):
        s = slot(tk)
        if part == 0:
            if i > MAX_SPANS:
                s["spans_left_out"] = 1
            else:
                s["spans"].append([ts - origin_ns, dur, 0, name, kind, sev, line])
            continue
        s["small"] = small
        if part == 1:
            s["spans"].append([ts - origin_ns, dur, 0, name, kind, sev, line])
        else:
            s["bins"].append([at + b * bucket, bucket, n, typed, name])
    for d in data.values():
        d["spans"].sort(key=lambda r: (r[0], -(r[1] or 0), r[3] or "", r[6] or 0, r[4] or ""))
        depths(d["spans"])
        d["bins"].sort()
    out["data"] = {str(k): data[k] for k in sorted(data)}
    return out


def detail(store, incident_id: str, track_id: int, ts_ns: int, limit: int = 20) -> list[dict]:
    """The events of one track starting at ``ts_ns`` (UTC): what the viewer's details panel shows
    for a clicked span or instant (its evidence lines and arguments)."""
    rows = store.query(
        f"""SELECT ev.ts_utc_ns AS ts, ev.dur_ns AS dur, ev.name, ev.category, ev.kind, ev.severity, ev.pid, ev.tid,
                   ev.line, ev.text, ev.attrs, s2.path AS source
            FROM {_on_tracks("e.ts_utc_ns = ?")}
            JOIN sources s2 ON s2.incident_id = ev.incident_id AND s2.source_id = ev.source_id
            WHERE tr.track_id = ? ORDER BY ev.source_id, ev.line, ev.name LIMIT ?""",
        [incident_id, ts_ns, track_id, limit])
    for r in rows:
        try:
            r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else None
        except ValueError:
            pass
    return rows


def overview(store, incident_id: str, lo: int, hi: int, buckets: int = 600) -> list[list]:
    """Events per bucket over the whole incident (``[t, n, findings]``, t relative to ``lo``): the
    viewer's overview strip."""
    width = max(BIN_NS, -(-(hi - lo) // buckets))
    step = width // BIN_NS
    shift = lo // BIN_NS * BIN_NS - lo        # (the buckets start at lo's whole second)
    return [[b + shift, n, typed] for b, n, typed in store.cursor().execute(
        f"""SELECT (sec - ?) // ? * ? * {BIN_NS} AS b, sum(n)::BIGINT, sum(typed)::BIGINT FROM track_bins
            WHERE incident_id = ? GROUP BY b ORDER BY b""",
        [lo // BIN_NS, step, step, incident_id]).fetchall()]


def _metrics(store, incident_id: str, w: Window, origin_ns: int) -> list[dict]:
    if not w.metrics:
        return []
    width = max(1, (w.end_ns - w.start_ns) // max(1, w.px // 4))
    like = " OR ".join("m.metric LIKE ?" for _ in w.metrics)
    # the rows a little outside the window too, so that a series sampled more slowly than the
    # window is wide still draws its line across it
    reach = max(w.end_ns - w.start_ns, 5 * BIN_NS)
    w = Window(w.start_ns - reach, w.end_ns + reach, w.px, metrics=w.metrics)
    if width >= BIN_NS and store.query("SELECT 1 AS x FROM metric_bins WHERE incident_id = ? LIMIT 1",
                                       [incident_id]):
        # wide windows: from the per-second reduction (seconds whose first row is in the window)
        rows = store.columns(
            f"""SELECT m.host, m.entity, m.metric, any_value(m.unit) AS unit, (m.ts - ?) // ? AS b,
                       max(m.v) AS v, min(m.ts) AS ts
                FROM metric_bins m
                WHERE m.incident_id = ? AND m.ts BETWEEN ? AND ? AND ({like})
                GROUP BY ALL ORDER BY m.host, m.entity, m.metric, b""",
            [w.start_ns, width, incident_id, w.start_ns, w.end_ns, *w.metrics])
    else:
        rows = store.columns(
            f"""SELECT COALESCE(m.host, s.host) AS host, m.entity, m.metric, any_value(m.unit) AS unit,
                       (m.ts_utc_ns - ?) // ? AS b, max(m.value) AS v, min(m.ts_utc_ns) AS ts
                FROM metrics m JOIN sources s USING (incident_id, source_id)
                WHERE m.incident_id = ? AND m.ts_utc_ns IS NOT NULL AND m.ts_utc_ns BETWEEN ? AND ? AND ({like})
                GROUP BY ALL ORDER BY host, m.entity, m.metric, b""",
            [w.start_ns, width, incident_id, w.start_ns, w.end_ns, *w.metrics])
    series: dict[tuple, dict] = {}
    for host, entity, metric, unit, ts, v in zip(rows["host"], rows["entity"], rows["metric"], rows["unit"],
                                                 rows["ts"], rows["v"]):
        key = (host, entity, metric)
        s = series.get(key)
        if s is None:
            s = series[key] = {"id": " / ".join(str(k) for k in key if k), "host": host, "entity": entity,
                               "metric": metric, "unit": unit, "points": []}
        s["points"].append([ts - origin_ns, v])
    order = {p: i for i, p in enumerate(w.metrics)}

    def rank(s):
        for p, i in order.items():
            if p.replace("%", "") in s["metric"]:
                return i
        return len(order)
    return sorted(series.values(), key=lambda s: (rank(s), s["id"]))
