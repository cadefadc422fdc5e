"""Shared pieces of the metric detectors: series from the aligned store, robust baselines,
episodes, robust slopes, evidence lines.

Baseline: every detector compares a derived series with the incident's *own* quiet level,
measured with robust statistics: the median and the MAD (median absolute deviation, x 1.4826
to estimate a standard deviation), which a minority of unusual points does not move. The
quiet period is whichever of two candidates has the lower median: the first quarter of the
recording (at least 4 points: collectors start before the trouble — but a job's start-up may
be busy), or the whole recording (right when the anomaly covers less than half of it). In the
sample bundle the throttling covers 62 % of the recording (whole-series median 0.81 s/s, first
quarter 0), while memory grows fastest during start-up (the whole series is the quiet one).
A point is *high* when it exceeds ``max(abs_min, median + max(k * sigma, min_rise))``; the
numbers of each detector are documented in its module.

Episodes: high points joined when separated by at most ``gap`` low points; an episode needs
``min_points`` high points unless it runs to the end of the series (a recording that stops
during the anomaly). The onset is the first high point: the change happened within the
interval that ends there, i.e. within one snapshot interval before the onset time.
"""
from __future__ import annotations

import json
import statistics
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from analysis.links import Evidence
from ingest.timeparse import fmt_hms as hms  # noqa: F401 - the detectors' time of day


@dataclass
class Series:
    source: str
    source_id: int
    host: str | None
    entity: str
    metric: str
    unit: str
    ts_raw: list[int]
    ts_utc: list[int | None]
    values: list[float]
    attrs: dict
    uncertainty_ns: int | None



# The step lines of the text logs, one row each (the app-log parser writes one ``metrics`` row
# per step line and value: metric step / step_time, entity 'rank N'): rank, host, path, ts (UTC),
# line, step_value and dt (the step time, s; null where the line had none). A CTE body, its one
# parameter the incident id.
STEP_LINES = """
    SELECT TRY_CAST(regexp_extract(m.entity, '^rank (\\d+)$', 1) AS INTEGER) AS rank,
           COALESCE(m.host, s.host) AS host, s.path, m.ts_utc_ns AS ts, max(m.line) AS line,
           max(CASE WHEN m.metric = 'step' THEN m.value END) AS step_value,
           max(CASE WHEN m.metric = 'step_time' THEN m.value END) AS dt
    FROM metrics m JOIN sources s USING (incident_id, source_id)
    WHERE m.incident_id = ? AND m.metric IN ('step', 'step_time') AND m.entity LIKE 'rank %'
      AND m.ts_utc_ns IS NOT NULL
    GROUP BY ALL"""

def load(store, incident_id: str, metrics: list[str]) -> list[Series]:
    # A source's attrs (a group's member list: 160 KB for 100,000 snapshot files) are read once
    # per source, not once per row (38,000 rows x 160 KB: 13-21 s and GBs of copies).
    rows = store.query(
        """SELECT m.source_id, s.path, COALESCE(m.host, s.host) AS host, m.entity, m.metric, m.unit,
                  m.ts_raw_ns, m.ts_utc_ns, m.value, c.uncertainty_ns
           FROM metrics m JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = m.incident_id AND c.host = COALESCE(s.host, '')
                AND c.domain = s.clock_domain
           WHERE m.incident_id = ? AND s.kind = 'cgroup' AND m.metric IN (SELECT unnest(?))
                 AND m.ts_raw_ns IS NOT NULL AND m.value IS NOT NULL
           ORDER BY m.source_id, m.entity, m.metric, m.ts_raw_ns""", [incident_id, metrics])
    out: dict[tuple, Series] = {}
    attrs_cache: dict[int, dict] = {}
    if rows:
        for a in store.query("SELECT source_id, attrs FROM sources WHERE incident_id = ? AND source_id IN "
                             "(SELECT unnest(?))", [incident_id, sorted({r["source_id"] for r in rows})]):
            attrs_cache[a["source_id"]] = json.loads(a["attrs"]) if a["attrs"] else {}
    for r in rows:
        key = (r["source_id"], r["host"], r["entity"], r["metric"])
        s = out.get(key)
        if s is None:
            s = out[key] = Series(r["path"], r["source_id"], r["host"], r["entity"], r["metric"], r["unit"],
                                  [], [], [], attrs_cache[r["source_id"]], r["uncertainty_ns"])
        s.ts_raw.append(r["ts_raw_ns"])
        s.ts_utc.append(r["ts_utc_ns"])
        s.values.append(r["value"])
    return list(out.values())


def value_at(s: Series | None, t: int):
    """The series' (first) value at time ``t``, or None. A series' times are in order (``load``
    sorts them), so this bisects where a scan cost the series' length per look-up."""
    if s is None:
        return None
    i = bisect_left(s.ts_raw, t)
    return s.values[i] if i < len(s.ts_raw) and s.ts_raw[i] == t else None


def between(s: Series, t0: int, t1: int) -> tuple[list[int], list[float]]:
    """The series' times and values with ``t0 <= time <= t1`` (bisected, in order)."""
    i, j = bisect_left(s.ts_raw, t0), bisect_right(s.ts_raw, t1)
    return s.ts_raw[i:j], s.values[i:j]


def by_entity(series: list[Series]) -> dict[tuple, dict[str, Series]]:
    out: dict[tuple, dict[str, Series]] = {}
    for s in series:
        out.setdefault((s.source_id, s.host, s.entity), {})[s.metric] = s
    return out


def baseline(values: list[float]) -> tuple[float, float]:
    """(median, robust sigma = 1.4826 * MAD) of the series."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return med, 1.4826 * mad


def quiet_baseline(values: list[float]) -> tuple[float, float]:
    """(median, sigma) of the quieter of: the first quarter of the series, the whole series."""
    head = values[:max(4, len(values) // 4)]
    return min(baseline(head), baseline(values))


def threshold(values: list[float], k: float, abs_min: float, min_rise: float = 0.0) -> tuple[float, float, float]:
    med, sigma = quiet_baseline(values)
    return max(abs_min, med + max(k * sigma, min_rise)), med, sigma


def episodes(values: list[float], thr: float, gap: int = 2, min_points: int = 2) -> list[tuple[int, int]]:
    """(first, last) indices of runs of values above thr (joined over <= gap low points)."""
    highs = [i for i, v in enumerate(values) if v > thr]
    runs: list[list[int]] = []
    for i in highs:
        if runs and i - runs[-1][-1] <= gap + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    out = []
    for r in runs:
        if len(r) >= min_points or r[-1] == len(values) - 1:
            out.append((r[0], r[-1]))
    return out


def first_rise(values: list[float], a: int, med: float, sigma: float, floor: float = 0.0) -> int:
    """The first point of the rise that crosses the threshold at ``a``: walking back while the
    values are still above the quiet level (median + 2 sigma, and above ``floor``). A change that
    began late in an interval shows there only in part, under the threshold: the window must
    start before that interval, or it claims a precision the snapshots do not have."""
    soft = max(floor, med + 2 * sigma)
    while a > 1 and values[a - 1] > soft:
        a -= 1
    return a


def onset_window(s: Series, a: int, onset: int | None = None) -> tuple[tuple[str, object], ...]:
    """Link attrs saying the change happened between the snapshot before point ``a`` and the
    onset (``onset``, default ``a``)."""
    onset = a if onset is None else onset
    if a == 0 or s.ts_utc[a - 1] is None or s.ts_utc[onset] is None:
        return ()
    return (("ts_lo_ns", s.ts_utc[a - 1]), ("ts_hi_ns", s.ts_utc[onset]), ("ts_bound", "between"))


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """Median of the pairwise slopes: a line fit that a few odd points do not move."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


def evidence(s: Series, wanted: list[tuple[int, str, str]], zone: str | None) -> tuple[Evidence, ...]:
    """The raw snapshot lines behind (ts_raw_ns, entity, metric) values, re-read from the members."""
    from ingest.formats.cgroup import evidence as locate
    try:
        found = locate(s.source, s.attrs, wanted, zone)
    except (OSError, ValueError) as e:
        return (Evidence(s.source, None, f"(snapshot files could not be re-read: {e})"),)
    return tuple(Evidence(path, line, text) for path, line, text in found)


def time_zone(store, incident_id: str) -> str | None:
    r = store.query("SELECT time_zone FROM incidents WHERE incident_id = ?", [incident_id])
    return r[0]["time_zone"] if r else None


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def entity_name(entity: str) -> str:
    return "the host" if entity == "host" else (f"cgroup {entity}" if entity.startswith("/") else entity)
