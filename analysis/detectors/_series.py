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

Columns: the step detectors read a log's step lines (millions in a long run) as Arrow columns
(``step_lines``) and take ``median``, ``quiet_baseline_of`` and ``spans`` over them: the values of
``statistics.median``, ``quiet_baseline`` and ``episodes`` without a Python object per point.
"""
from __future__ import annotations

import json
import statistics
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from aftertrace.analysis.links import Evidence
from aftertrace.analysis.present import has_rows
from aftertrace.ingest.timeparse import fmt_hms as hms  # noqa: F401 - the detectors' time of day


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
# parameter the incident id. ``step_lines`` reads the same rows as columns.
_RANK = "TRY_CAST(regexp_extract(m.entity, '^rank (\\d+)$', 1) AS INTEGER)"
_STEP_ROWS_WHERE = """m.incident_id = ? AND m.metric IN ('step', 'step_time') AND m.entity LIKE 'rank %'
      AND m.ts_utc_ns IS NOT NULL"""
STEP_LINES = f"""
    SELECT {_RANK} AS rank,
           COALESCE(m.host, s.host) AS host, s.path, m.ts_utc_ns AS ts, max(m.line) AS line,
           max(CASE WHEN m.metric = 'step' THEN m.value END) AS step_value,
           max(CASE WHEN m.metric = 'step_time' THEN m.value END) AS dt
    FROM metrics m JOIN sources s USING (incident_id, source_id)
    WHERE {_STEP_ROWS_WHERE}
    GROUP BY ALL"""

# The metrics rows behind STEP_LINES, ungrouped (the source's host and path are joined in Python).
_STEP_ROWS = f"""
    SELECT {_RANK} AS rank, m.source_id, m.host, m.metric = 'step' AS is_step, m.ts_utc_ns AS ts,
           m.line, m.value
    FROM metrics m WHERE {_STEP_ROWS_WHERE}"""


@dataclass(frozen=True)
class StepLines:
    """The rows of STEP_LINES that have a rank and a step value, as Arrow columns in (host, rank,
    ts, path) order (each line once: those four are its key): rank, host and path (codes into
    ``hosts`` and ``paths``, numbered in the order of the strings, no host last, as SQL's ORDER BY
    puts them), ts, line, step_value, dt."""
    cols: pa.Table
    hosts: list
    paths: list


# What several detectors of one run read: filled inside ``shared_reads`` (one analysis, one
# thread: a context variable, so that concurrent analyses in a server never see each other's).
_SHARED: ContextVar[dict | None] = ContextVar("detector_reads", default=None)


@contextmanager
def shared_reads():
    """Within this block, what several detectors read from the store (the step lines) is read
    once: the store does not change while the detectors run."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def step_lines(store, incident_id: str) -> StepLines:
    """:func:`read_step_lines`, once per ``shared_reads`` block."""
    shared = _SHARED.get()
    if shared is None:
        return read_step_lines(store, incident_id)
    key = ("step_lines", incident_id)
    if key not in shared:
        shared[key] = read_step_lines(store, incident_id)
    return shared[key]


def read_step_lines(store, incident_id: str) -> StepLines:
    """STEP_LINES as columns, sorted, without grouping the rows in SQL where they need none.

    A step line is one ``step`` row and (mostly) one ``step_time`` row with the same (rank, host,
    path, ts), and no two lines share those: then each metric's rows sorted by that key pair up,
    and GROUP BY's max of one value is that value. Where a key has two rows of one metric (two
    step lines at one time: a log stamped in whole seconds, a line captured twice in one file), or
    the key's columns span more than one int64 holds, STEP_LINES itself groups them."""
    src = store.query("SELECT source_id, host, path FROM sources WHERE incident_id = ?", [incident_id])
    raw = store.cursor().sql(_STEP_ROWS, params=[incident_id]).to_arrow_table()
    if src and raw.num_rows:
        got = _paired(raw, src)
        if got is not None:
            return got
    tab = store.cursor().sql(f"""
        WITH lines AS ({STEP_LINES})
        SELECT rank, host, path, ts, line, step_value, dt FROM lines
        WHERE rank IS NOT NULL AND step_value IS NOT NULL""", params=[incident_id]).to_arrow_table()
    hcode, hosts = ordered_codes(tab.column("host"))
    pcode, paths = ordered_codes(tab.column("path"))
    cols = pa.table({"rank": tab.column("rank"), "host": hcode, "path": pcode, "ts": tab.column("ts"),
                     "line": tab.column("line"), "step_value": tab.column("step_value"), "dt": tab.column("dt")})
    return StepLines(sorted_by(cols, ("host", "rank", "ts", "path")), hosts, paths)


def ordered_codes(strings, also=()) -> tuple[pa.Array, list]:
    """Each string's number in the sorted list of the distinct ones (None last), and that list
    (Python orders str as SQL orders VARCHAR: by code point, which is UTF-8's byte order)."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks() if strings.num_chunks else pa.array([], strings.type)
    enc = pc.dictionary_encode(strings)
    seen = enc.dictionary.to_pylist()
    names = sorted(set(seen) | {a for a in also if a is not None})
    names.append(None)
    at = {v: i for i, v in enumerate(names)}
    code = pc.take(pa.array([at[v] for v in seen], pa.int32()), enc.indices)
    return pc.fill_null(code, len(names) - 1), names


def sorted_by(tab: pa.Table, keys) -> pa.Table:
    """The rows in the order of ``keys``, ascending with nulls last (SQL's ORDER BY); stable."""
    tab = tab.combine_chunks()
    if in_order(tab, keys):
        return tab
    return tab.take(order_of(tab, keys)).combine_chunks()


def order_of(tab: pa.Table, keys) -> pa.Array:
    """``sort_indices`` by ``keys`` (ascending, nulls last, stable)."""
    key = one_key(tab, keys)
    if key is not None:
        return pc.sort_indices(key)
    return pc.sort_indices(tab, sort_keys=[(k, "ascending") for k in keys])      # (nulls last)


def one_key(tab: pa.Table, keys) -> pa.Array | None:
    """Integer columns ``keys`` (without nulls) as one int64 per row that orders the rows as they
    do, one key after the other (a column's values less its least, in mixed radix); None where
    they are not such or the product of their ranges passes 2**62. One column sorts about twice
    as fast as several, and rows with equal keys have equal numbers."""
    key, width = pa.repeat(pa.scalar(0, pa.int64()), tab.num_rows), 1
    for k in keys:
        c = tab.column(k)
        if not pa.types.is_integer(c.type) or c.null_count:
            return None
        lo, hi = pc.min_max(c).as_py().values()
        if lo is None or lo == hi:
            continue
        width *= hi - lo + 1
        if width >= 2 ** 62:
            return None
        key = pc.add(pc.multiply(key, hi - lo + 1), pc.subtract(pc.cast(c, pa.int64()), lo))
    return key


def in_order(tab: pa.Table, keys, strict: bool = False) -> bool:
    """Whether integer ``keys`` without nulls are in order already (a log's lines mostly are);
    ``strict``: and no two rows have the same keys."""
    n = tab.num_rows
    if n < 2:
        return True
    if any(not pa.types.is_integer(tab.schema.field(k).type) or tab.column(k).null_count for k in keys):
        return False
    back = equal = None         # per row: before the previous one; same keys so far
    for k in keys:
        c = tab.column(k)
        cur, prev = c.slice(1), c.slice(0, n - 1)
        lt = pc.less(cur, prev)
        back = lt if back is None else pc.or_(back, pc.and_(equal, lt))
        equal = pc.equal(cur, prev) if equal is None else pc.and_(equal, pc.equal(cur, prev))
    return not pc.any(pc.or_(back, equal) if strict else back).as_py()


def repeats(tab: pa.Table, keys) -> pa.Array:
    """Per row: whether it has the previous row's values of ``keys`` (never null); the first row
    has none."""
    n = tab.num_rows
    same = pa.array([False] * min(n, 1), pa.bool_())
    if n > 1:
        eq = None
        for k in keys:
            c = tab.column(k)
            e = pc.fill_null(pc.equal(c.slice(1), c.slice(0, n - 1)), False)
            eq = e if eq is None else pc.and_(eq, e)
        same = pa.concat_arrays([same, eq.combine_chunks() if isinstance(eq, pa.ChunkedArray) else eq])
    return same


def _paired(raw: pa.Table, src: list[dict]) -> StepLines | None:
    """STEP_LINES from ungrouped rows where no key has two rows of one metric (else None): a
    line's step value, step time and line number are then those of its rows."""
    raw = raw.combine_chunks()
    paths = sorted({r["path"] for r in src})
    host = raw.column("host")
    if host.null_count < len(host):
        m_code, names = ordered_codes(host, also=[r["host"] for r in src])
    else:
        names = sorted({r["host"] for r in src if r["host"] is not None}) + [None]
    # the source's path and host (codes) by its id: a list indexed by id where the ids are few
    # and close (they are numbered from 1), else a hash look-up
    sid = raw.column("source_id")
    lo, hi = pc.min_max(sid).as_py().values()
    if hi - lo < 100_000:
        by_id: list = [None] * (hi - lo + 1)
        for i, r in enumerate(src):
            if lo <= r["source_id"] <= hi:
                by_id[r["source_id"] - lo] = i
        at = pc.take(pa.array(by_id, pa.int32()), pc.subtract(sid, lo))
    else:
        at = pc.index_in(sid, value_set=pa.array([r["source_id"] for r in src], sid.type))
    p_at, h_at = {p: i for i, p in enumerate(paths)}, {h: i for i, h in enumerate(names)}
    pcode = pc.take(pa.array([p_at[r["path"]] for r in src], pa.int32()), at)
    hcode = pc.take(pa.array([h_at[r["host"]] for r in src], pa.int32()), at)
    if host.null_count < len(host):     # COALESCE(m.host, s.host)
        hcode = pc.coalesce(pc.if_else(pc.is_null(host), None, m_code), hcode)
    tab = pa.table({"host": hcode, "rank": raw.column("rank"), "ts": raw.column("ts"), "path": pcode,
                    "line": raw.column("line"), "value": raw.column("value"), "is_step": raw.column("is_step")})
    if tab.column("rank").null_count or at.null_count:
        tab = tab.filter(pc.and_(pc.is_valid(tab.column("rank")), pc.is_valid(at)))
    # The key (host, rank, ts, path) as one number: sorted by it, the rows of each metric must
    # rise (no key twice); a step_time row then belongs to the step row of its key.
    key = one_key(tab, ("host", "rank", "ts", "path"))
    if key is None:
        return None
    is_step = tab.column("is_step")
    # each metric's rows (indices into tab) in key order
    s_at, t_at = (pc.indices_nonzero(m) for m in (is_step, pc.invert(is_step)))
    s_at, t_at = (pc.take(rows, pc.sort_indices(pc.take(key, rows))) for rows in (s_at, t_at))
    s_key, t_key = pc.take(key, s_at), pc.take(key, t_at)
    for k in (s_key, t_key):
        if len(k) > 1 and not pc.all(pc.less(k.slice(0, len(k) - 1), k.slice(1))).as_py():
            return None
    n = len(s_at)
    step = {k: pc.take(tab.column(k), s_at) for k in ("rank", "host", "path", "ts", "line", "value")}
    if len(t_at):
        if len(t_key) != n or not pc.all(pc.equal(s_key, t_key)).as_py():
            # some keys have one metric only (a line without its step time): look each up
            t_at = pc.take(t_at, pc.index_in(s_key, value_set=t_key))
        dt = pc.take(tab.column("value"), t_at)
        line = pc.max_element_wise(step["line"], pc.take(tab.column("line"), t_at), skip_nulls=True)
    else:
        dt, line = pa.nulls(n, pa.float64()), step["line"]
    cols = pa.table({"rank": step["rank"], "host": step["host"], "path": step["path"], "ts": step["ts"],
                     "line": line, "step_value": step["value"], "dt": dt})
    if cols.column("step_value").null_count:
        cols = cols.filter(pc.is_valid(cols.column("step_value")))
    return StepLines(cols.combine_chunks(), names, paths)


def step_numbers(store, step_value) -> pa.Array:
    """``CAST(trunc(step_value) AS BIGINT)``; a value that SQL cannot cast raises SQL's error."""
    t = pc.trunc(step_value)
    ok = pc.and_(pc.is_finite(t), pc.and_(pc.greater_equal(t, -2.0 ** 63), pc.less(t, 2.0 ** 63)))
    if pc.any(pc.invert(ok)).as_py():
        bad = pc.filter(step_value, pc.invert(ok))[0].as_py()
        store.cursor().execute("SELECT CAST(trunc(?::DOUBLE) AS BIGINT)", [bad]).fetchall()
    return pc.cast(t, pa.int64())


def load(store, incident_id: str, metrics: list[str]) -> list[Series]:
    # A source's attrs (a group's member list: 160 KB for 100,000 snapshot files) are read once
    # per source, not once per row (38,000 rows x 160 KB: 13-21 s and GBs of copies).
    if not has_rows(store, incident_id, "metrics"):
        return []
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


def median(x: pa.Array) -> float:
    """``statistics.median`` of a column of floats, found by selection (linear time) instead of a
    sort: the middle value, or ``(lower + upper) / 2`` of the middle two as there. Where the result
    hangs on the order Python's sort leaves (a NaN, which compares false with everything; a -0.0
    beside a 0.0, equal but printed apart) it is ``statistics.median`` itself."""
    n = len(x)
    if n == 0 or pc.any(pc.is_nan(x)).as_py() or _negative_zero(x):
        return statistics.median(x.to_pylist())
    if n % 2:
        return pc.quantile(x, q=0.5, interpolation="lower")[0].as_py()
    i = n // 2 - 1      # the middle two, at i and i + 1 in sorted order (one selection for both)
    lower, upper = pc.quantile(x, q=[i / (n - 1), (i + 1) / (n - 1)], interpolation="nearest").to_pylist()
    return (lower + upper) / 2


def _negative_zero(x: pa.Array) -> bool:
    zeros = pc.filter(x, pc.equal(x, 0.0))
    return len(zeros) > 0 and pc.any(pc.less(pc.divide(1.0, zeros), 0.0)).as_py()


def quiet_baseline_of(x: pa.Array) -> tuple[float, float]:
    """``quiet_baseline`` of a column of floats (the same values)."""
    def base(v):
        med = median(v)
        return med, 1.4826 * median(pc.abs(pc.subtract(v, med)))
    return min(base(x.slice(0, max(4, len(x) // 4))), base(x))


def spans(high: pa.Array, gap: int, breaks: pa.Array | None = None) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``episodes`` of a boolean column (true: a high point), before the ``min_points`` rule: the
    index of each high point, and per episode the positions of its first and last high points in
    that list. ``breaks`` (per row: it starts another series) ends an episode there too."""
    at = pc.cast(pc.indices_nonzero(high), pa.int64())
    n = len(at)
    if n == 0:
        return at, at, at
    new = pc.greater(pc.subtract(at.slice(1), at.slice(0, n - 1)), gap + 1)
    if breaks is not None:
        # a break between two high points: at a row after the first, up to the second
        seen = pc.cumulative_sum(pc.cast(breaks, pa.int64()))
        b = pc.take(seen, at)
        new = pc.or_(new, pc.not_equal(b.slice(1), b.slice(0, n - 1)))
    starts = pa.concat_arrays([pa.array([0], pa.int64()), pc.add(pc.cast(pc.indices_nonzero(new), pa.int64()), 1)])
    ends = pa.concat_arrays([pc.subtract(starts.slice(1), 1), pa.array([n - 1], pa.int64())])
    return at, starts, ends


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
    from aftertrace.ingest.formats.cgroup import evidence as locate
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
