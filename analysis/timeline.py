"""The aligned timeline of an incident in a time window: lanes of events and metric series,
answered from the store by windowed queries that aggregate when dense.

Lanes group events by host -> source -> rank: one lane per (host, source path, rank); a
rank's Kineto traces (a file per profiler cycle) are one lane. In the window, a lane with at most
``max_events`` events ships them (time, duration, name, kind, severity, line, a short
text); a denser lane ships ``bins`` equal-width buckets instead (count, most common name,
whether a typed finding is in it) — the browser never receives every event. Lanes holding
typed findings come first, then the busiest, at most ``max_lanes``.

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


# host / source / rank-or-process. A rank's Kineto traces (one file per profiler cycle) are one lane.
_LANE = """concat_ws(' / ', COALESCE(e.host, s.host, '?'),
             CASE WHEN s.kind = 'torch_trace' THEN 'torch_trace' ELSE s.path END,
             CASE WHEN COALESCE(e.rank, s.rank) IS NOT NULL THEN 'rank ' || COALESCE(e.rank, s.rank)::VARCHAR END)"""


def window(store, incident_id: str, w: Window) -> dict:
    if w.end_ns <= w.start_ns:
        raise ValueError("the window's end must be after its start")
    base = f"""FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.ts_utc_ns IS NOT NULL
                 AND e.ts_utc_ns < ? AND e.ts_utc_ns + COALESCE(e.dur_ns, 0) >= ?"""
    args = [incident_id, w.end_ns, w.start_ns]
    lane_rows = store.query(
        f"""SELECT {_LANE} AS lane, COALESCE(e.host, s.host) AS host,
                   CASE WHEN s.kind = 'torch_trace' THEN 'torch_trace' ELSE s.path END AS path, s.kind AS source_kind,
                   COALESCE(e.rank, s.rank) AS rank,
                   count(*) AS n, count(e.kind) AS typed
            {base} GROUP BY ALL ORDER BY typed DESC, n DESC, lane""", args)
    if w.lanes:
        keep = set(w.lanes)
        lane_rows = [r for r in lane_rows if r["lane"] in keep]
    total_lanes = len(lane_rows)
    lane_rows = lane_rows[:w.max_lanes]
    sparse = [r["lane"] for r in lane_rows if r["n"] <= w.max_events]
    dense = [r["lane"] for r in lane_rows if r["n"] > w.max_events]
    events: dict[str, list] = {}
    if sparse:
        for r in store.query(
                f"""SELECT {_LANE} AS lane, e.ts_utc_ns AS ts, e.dur_ns AS dur, e.name, e.kind, e.severity,
                           e.line, left(e.text, {TEXT_CHARS}) AS text, s.path AS source
                    {base} AND {_LANE} IN (SELECT unnest(?)) ORDER BY e.ts_utc_ns""", args + [sparse]):
            events.setdefault(r.pop("lane"), []).append(r)
    binned: dict[str, list] = {}
    if dense:
        width = max(1, (w.end_ns - w.start_ns) // w.bins)
        for r in store.query(
                f"""SELECT {_LANE} AS lane, (e.ts_utc_ns - ?) // ? AS b, count(*) AS n, mode(e.name) AS name,
                           count(e.kind) AS typed
                    {base} AND {_LANE} IN (SELECT unnest(?)) GROUP BY ALL ORDER BY lane, b""",
                [w.start_ns, width] + args + [dense]):
            lane = r.pop("lane")
            b = max(0, r.pop("b"))
            r["ts"] = w.start_ns + b * width
            r["dur"] = width
            binned.setdefault(lane, []).append(r)
    lanes = []
    for r in lane_rows:
        lane = {"id": r["lane"], "host": r["host"], "source": r["path"], "source_kind": r["source_kind"],
                "rank": r["rank"], "count": r["n"], "typed": r["typed"]}
        if r["lane"] in events:
            lane["events"] = events[r["lane"]]
        else:
            lane["bins"] = binned.get(r["lane"], [])
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
