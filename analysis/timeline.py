"""The aligned timeline of an incident in a time window: lanes of events and metric series,
answered from the store by windowed queries that aggregate when dense.

Lanes group events by host -> source -> rank: one lane per (host, source path, rank); a
rank's Kineto traces (a file per profiler cycle) are one lane. In the window, a lane with at most
``max_events`` events ships them (time, duration, name, kind, severity, line, a short
text); a denser lane ships ``bins`` equal-width buckets instead (count, most common name,
whether a typed finding is in it) — the browser never receives every event. Lanes holding
typed findings come first, then the busiest, at most ``max_lanes``.

Wide windows (buckets of a second or more) are answered from ``event_bins``, the events
counted per lane and UTC second after clock alignment (:func:`build_bins`), so their cost
does not grow with the number of events; narrower windows read the events themselves.

Metric series (cgroup CPU throttling, memory against its limit, pressure stall, GPU
utilisation, step times from the logs) are reduced to at most ``bins`` points each: the
maximum of each bucket, which keeps spikes visible.

All times are UTC nanoseconds (``ts_utc_ns``); rows the clock alignment could not place are
not on the timeline (their count is returned).
"""
from __future__ import annotations

from dataclasses import dataclass

# Metrics shown by default, as SQL LIKE patterns, in display order.
DEFAULT_METRICS = ("cpu.throttled_s_per_s", "memory.usage_bytes", "memory.limit_bytes", "psi.cpu.some.stall_pct",
                   "psi.memory.some.stall_pct", "psi.io.some.stall_pct", "gpu.%util%", "step_time")
TEXT_CHARS = 240


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    max_events: int = 1500
    bins: int = 400
    max_lanes: int = 60
    lanes: tuple[str, ...] = ()          # lane ids to keep (empty: all)
    metrics: tuple[str, ...] = DEFAULT_METRICS


def bounds(store, incident_id: str) -> tuple[int | None, int | None]:
    """Earliest and latest placed time of the incident's events and metrics."""
    r = store.query(
        """SELECT min(a) AS a, max(b) AS b FROM (
             SELECT min(ts_utc_ns) AS a, max(ts_utc_ns + COALESCE(dur_ns, 0)) AS b FROM events WHERE incident_id = ?
             UNION ALL SELECT min(ts_utc_ns), max(ts_utc_ns) FROM metrics WHERE incident_id = ?)""",
        [incident_id, incident_id])[0]
    return r["a"], r["b"]


def _lane(src: dict, host, rank) -> tuple[str, str, str, int | None, str | None]:
    """(lane id, host, source label, rank, source kind) of events of one source with this host/rank.
    host / source / rank; a rank's Kineto traces (a file per profiler cycle) are one lane."""
    host = host if host is not None else src["host"]
    rank = rank if rank is not None else src["rank"]
    label = "torch_trace" if src["kind"] == "torch_trace" else src["path"]
    parts = [host or "?", label] + ([f"rank {rank}"] if rank is not None else [])
    return " / ".join(parts), host, label, rank, src["kind"]


BIN_NS = 1_000_000_000


def build_bins(store, incident_id: str) -> int:
    """Fill ``event_bins`` (placed events counted per (source, host, rank) and UTC second) and
    ``metric_bins`` (each metric series reduced per UTC second: first time, largest value). Run
    after clock alignment; returns the event_bins rows written."""
    cur = store.cursor()
    cur.execute("DELETE FROM event_bins WHERE incident_id = ?", [incident_id])
    cur.execute(
        f"""INSERT INTO event_bins
            SELECT incident_id, source_id, host, rank, ts_utc_ns // {BIN_NS} AS sec, count(*) AS n,
                   count(kind) AS typed, mode(name ORDER BY name) AS name
            FROM events WHERE incident_id = ? AND ts_utc_ns IS NOT NULL
            GROUP BY incident_id, source_id, host, rank, sec""", [incident_id])
    cur.execute("DELETE FROM metric_bins WHERE incident_id = ?", [incident_id])
    cur.execute(
        f"""INSERT INTO metric_bins
            SELECT m.incident_id, COALESCE(m.host, s.host), m.entity, m.metric, any_value(m.unit),
                   m.ts_utc_ns // {BIN_NS} AS sec, min(m.ts_utc_ns), max(m.value)
            FROM metrics m JOIN sources s USING (incident_id, source_id)
            WHERE m.incident_id = ? AND m.ts_utc_ns IS NOT NULL
            GROUP BY m.incident_id, COALESCE(m.host, s.host), m.entity, m.metric, sec""", [incident_id])
    return store.query("SELECT count(*) AS n FROM event_bins WHERE incident_id = ?", [incident_id])[0]["n"]


def _has_bins(store, incident_id: str) -> bool:
    return bool(store.query("SELECT 1 AS x FROM event_bins WHERE incident_id = ? LIMIT 1", [incident_id]))


def _clock(src: dict) -> dict:
    """How the lane's source was put on UTC: its clock domain, the mapping's uncertainty (s)
    and the method (the sources table shows the same)."""
    u = src.get("uncertainty_ns")
    return {"domain": src.get("clock_domain"), "placed": src.get("offset_ns") is not None,
            "uncertainty_s": None if u is None else u / 1e9, "method": src.get("method")}


def window(store, incident_id: str, w: Window) -> dict:
    """Grouping and filtering happen on plain columns (source id, host, rank); lane labels are
    made from the few groups afterwards, so a window over millions of events stays one scan."""
    if w.end_ns <= w.start_ns:
        raise ValueError("the window's end must be after its start")
    srcs = {r["source_id"]: r for r in store.query(
        """SELECT s.source_id, s.path, s.kind, s.host, s.rank, s.clock_domain, c.offset_ns, c.uncertainty_ns, c.method
           FROM sources s LEFT JOIN clock_map c ON c.incident_id = s.incident_id
                AND c.host = COALESCE(s.host, '') AND c.domain = s.clock_domain
           WHERE s.incident_id = ?""", [incident_id])}
    longest = store.query("SELECT COALESCE(max(dur_ns), 0) AS d FROM events WHERE incident_id = ? AND dur_ns > 0",
                          [incident_id])[0]["d"]
    # ts >= start - longest lets the store skip row groups by their time ranges; the exact
    # overlap test follows
    cond = """e.incident_id = ? AND e.ts_utc_ns >= ? AND e.ts_utc_ns < ?
              AND e.ts_utc_ns + COALESCE(e.dur_ns, 0) >= ?"""
    args = [incident_id, w.start_ns - longest, w.end_ns, w.start_ns]
    width = max(1, (w.end_ns - w.start_ns) // w.bins)
    # Wide windows (bins of a second or more) count from the per-second table: seconds that
    # overlap the window, events attributed to the second they start in.
    wide = width >= BIN_NS and _has_bins(store, incident_id)
    sec_args = [incident_id, w.start_ns // BIN_NS, (w.end_ns - 1) // BIN_NS]
    if wide:
        groups = store.query("""SELECT source_id, host, rank, sum(n) AS n, sum(typed) AS typed FROM event_bins
                                WHERE incident_id = ? AND sec BETWEEN ? AND ? GROUP BY ALL""", sec_args)
    else:
        groups = store.query(f"""SELECT e.source_id, e.host, e.rank, count(*) AS n, count(e.kind) AS typed
                                 FROM events e WHERE {cond} GROUP BY ALL""", args)
    lanes_by_id: dict[str, dict] = {}
    keys: dict[tuple, str] = {}
    for g in groups:
        src = srcs.get(g["source_id"])
        if src is None:
            continue
        lid, host, label, rank, kind = _lane(src, g["host"], g["rank"])
        lane = lanes_by_id.setdefault(lid, {"id": lid, "host": host, "source": label, "source_kind": kind,
                                            "rank": rank, "count": 0, "typed": 0, "clock": _clock(src)})
        lane["count"] += int(g["n"])
        lane["typed"] += int(g["typed"])
        keys[(g["source_id"], g["host"], g["rank"])] = lid
    lane_rows = sorted(lanes_by_id.values(), key=lambda l: (-l["typed"], -l["count"], l["id"]))
    if w.lanes:
        keep = set(w.lanes)
        lane_rows = [l for l in lane_rows if l["id"] in keep]
    total_lanes = len(lane_rows)
    lane_rows = lane_rows[:w.max_lanes]
    shown = {l["id"] for l in lane_rows}
    sparse = {l["id"] for l in lane_rows if l["count"] <= w.max_events}
    dense = shown - sparse

    def key_filter(ids: set) -> tuple[str, list]:
        ks = [k for k, lid in keys.items() if lid in ids]
        return ("""JOIN (SELECT unnest(?) AS k_src, unnest(?) AS k_host, unnest(?) AS k_rank) k
                   ON e.source_id = k.k_src AND e.host IS NOT DISTINCT FROM k.k_host
                   AND e.rank IS NOT DISTINCT FROM k.k_rank""",
                [[k[0] for k in ks], [k[1] for k in ks], [k[2] for k in ks]])

    events: dict[str, list] = {}
    if sparse:
        join, kargs = key_filter(sparse)
        for r in store.query(
                f"""SELECT e.source_id, e.host AS e_host, e.rank AS e_rank, e.ts_utc_ns AS ts, e.dur_ns AS dur,
                           e.name, e.kind, e.severity, e.line, left(e.text, {TEXT_CHARS}) AS text
                    FROM events e {join} WHERE {cond} ORDER BY e.ts_utc_ns, e.source_id, e.line, e.name""", kargs + args):
            sid = r.pop("source_id")
            lid = keys[(sid, r.pop("e_host"), r.pop("e_rank"))]
            r["source"] = srcs[sid]["path"]
            events.setdefault(lid, []).append(r)
    binned: dict[str, dict] = {}
    if dense and wide:
        join, kargs = key_filter(dense)
        rows = store.query(
            f"""SELECT e.source_id, e.host AS e_host, e.rank AS e_rank,
                       greatest(0, (e.sec * {BIN_NS} - ?) // ?) AS b, sum(e.n) AS n,
                       arg_max(e.name, e.n) AS name, sum(e.typed) AS typed
                FROM event_bins e {join} WHERE e.incident_id = ? AND e.sec BETWEEN ? AND ?
                GROUP BY ALL""", [w.start_ns, width] + kargs + sec_args)
    elif dense:
        join, kargs = key_filter(dense)
        rows = store.query(
                f"""SELECT e.source_id, e.host AS e_host, e.rank AS e_rank,
                           greatest(0, (e.ts_utc_ns - ?) // ?) AS b, count(*) AS n, mode(e.name) AS name,
                           count(e.kind) AS typed
                    FROM events e {join} WHERE {cond} GROUP BY ALL""", [w.start_ns, width] + kargs + args)
    else:
        rows = []
    for r in rows:
        lid = keys[(r.pop("source_id"), r.pop("e_host"), r.pop("e_rank"))]
        cell = binned.setdefault(lid, {}).setdefault(r["b"], {"ts": w.start_ns + r["b"] * width, "dur": width,
                                                             "n": 0, "name": r["name"], "typed": 0, "_top": 0})
        cell["n"] += int(r["n"])
        cell["typed"] += int(r["typed"])
        if r["n"] > cell["_top"]:
            cell["_top"], cell["name"] = r["n"], r["name"]
    lanes = []
    for l in lane_rows:
        lane = dict(l)
        if l["id"] in sparse:
            lane["events"] = events.get(l["id"], [])
        else:
            cells = sorted(binned.get(l["id"], {}).values(), key=lambda c: c["ts"])
            for c in cells:
                c.pop("_top")
            lane["bins"] = cells
        lanes.append(lane)
    return {"start_ns": w.start_ns, "end_ns": w.end_ns, "lanes": lanes, "lanes_total": total_lanes,
            "metrics": _metrics(store, incident_id, w),
            "unplaced_events": store.query("SELECT count(*) AS n FROM events WHERE incident_id = ? "
                                           "AND ts_utc_ns IS NULL", [incident_id])[0]["n"]}


def _metrics(store, incident_id: str, w: Window) -> list[dict]:
    if not w.metrics:
        return []
    width = max(1, (w.end_ns - w.start_ns) // w.bins)
    like = " OR ".join("m.metric LIKE ?" for _ in w.metrics)
    if width >= BIN_NS and store.query("SELECT 1 AS x FROM metric_bins WHERE incident_id = ? LIMIT 1",
                                       [incident_id]):
        # wide windows: from the per-second reduction (seconds whose first row is in the window)
        rows = store.query(
            f"""SELECT m.host, m.entity, m.metric, any_value(m.unit) AS unit, (m.ts - ?) // ? AS b,
                       max(m.v) AS v, min(m.ts) AS ts
                FROM metric_bins m
                WHERE m.incident_id = ? AND m.ts BETWEEN ? AND ? AND ({like})
                GROUP BY ALL ORDER BY m.host, m.entity, m.metric, b""",
            [w.start_ns, width, incident_id, w.start_ns, w.end_ns, *w.metrics])
    else:
        rows = store.query(
            f"""SELECT COALESCE(m.host, s.host) AS host, m.entity, m.metric, any_value(m.unit) AS unit,
                       (m.ts_utc_ns - ?) // ? AS b, max(m.value) AS v, min(m.ts_utc_ns) AS ts
                FROM metrics m JOIN sources s USING (incident_id, source_id)
                WHERE m.incident_id = ? AND m.ts_utc_ns IS NOT NULL AND m.ts_utc_ns BETWEEN ? AND ? AND ({like})
                GROUP BY ALL ORDER BY host, m.entity, m.metric, b""",
            [w.start_ns, width, incident_id, w.start_ns, w.end_ns, *w.metrics])
    series: dict[tuple, dict] = {}
    for r in rows:
        key = (r["host"], r["entity"], r["metric"])
        s = series.setdefault(key, {"id": " / ".join(str(k) for k in key if k), "host": r["host"],
                                    "entity": r["entity"], "metric": r["metric"], "unit": r["unit"], "points": []})
        s["points"].append([r["ts"], r["v"]])
    order = {p: i for i, p in enumerate(w.metrics)}

    def rank(s):
        for p, i in order.items():
            if p.replace("%", "") in s["metric"]:
                return i
        return len(order)
    return sorted(series.values(), key=lambda s: (rank(s), s["id"]))
