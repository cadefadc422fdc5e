"""step_slowdown: a rank's training steps became much slower than its own earlier steps.

Series: per rank, the step times it reported (``step_time=`` of its step log lines, the
parser's ``step_time_s``), else the time between consecutive step lines; Kineto's
``ProfilerStep#N`` durations when the logs have no steps. The baseline is the rank's own
quiet level (``_series.quiet_baseline``: median and robust sigma of the first quarter or of
the whole series, whichever is lower). A step is *slow* above
``max(RATIO x median, median + K x sigma, median + ABS_MIN_S)``; an episode needs
``MIN_POINTS`` slow steps (joined over at most 2 normal ones) unless it runs to the last step.
Needs ``MIN_STEPS`` steps. The finding is stamped when the first slow step began (its log
time minus its step time), with a window from the start of the last normal step (a change
during that step makes it only a little slower) to the end of the first slow one, and cites
both step lines.

Example (the sample bundle, rank 0): steps took a median 0.13 s; from step 47 at 13:28:24.6
(0.3 s after the cgroup's CPU quota was cut to 0.3 CPUs) they took 1.3-3.1 s.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from aftertrace.analysis.links import Evidence, Link, LinkKind, Provenance

from ._series import (hms, median, ordered_codes, quiet_baseline_of, repeats, sorted_by, spans, step_lines,
                      step_numbers)

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.STEP_SLOWDOWN})

RATIO, K, ABS_MIN_S = 2.0, 6.0, 0.05
MIN_POINTS, MIN_STEPS = 3, 8


class _Steps:
    """One rank's step rows, oldest first, as Arrow columns (a long log has millions of step
    lines: only the rows a finding cites become Python values). ``row(i)`` is one row as a dict
    with ts, step, dt (s or None), path, line, text and pid."""

    def __init__(self, cols: dict[str, pa.Array], said: bool):
        self.cols, self.said = cols, said      # said: the text is the values read from a metrics line

    def __len__(self) -> int:
        return len(self.cols["ts"])

    def take(self, idx: pa.Array) -> "_Steps":
        return _Steps({k: pc.take(v, idx) for k, v in self.cols.items()}, self.said)

    def tail(self, start: int) -> "_Steps":
        return _Steps({k: v.slice(start) for k, v in self.cols.items()}, self.said)

    def row(self, i: int) -> dict:
        r = {k: v[i].as_py() for k, v in self.cols.items()}
        if self.said:
            r["text"] = (f"step={r['step']}" + (f" step_time={r['dt']:.3f}s" if r["dt"] is not None else "")
                         + " (the values read from this line)")
        return r


_FIELDS = ("ts", "step", "dt", "path", "line", "text", "pid")


def _grouped(cols: dict[str, pa.Array], host: pa.Array, hosts: list, said: bool) -> dict[tuple, _Steps]:
    """Rows ordered by host and rank (``host``: codes into ``hosts``) as one ``_Steps`` per
    (host, rank)."""
    rank = cols["rank"]
    firsts = pc.indices_nonzero(pc.invert(repeats(pa.table({"host": host, "rank": rank}), ("host", "rank"))))
    cuts = [*firsts.to_pylist(), len(rank)]
    return {(hosts[host[i].as_py()], rank[i].as_py()): _Steps({f: cols[f].slice(i, j - i) for f in _FIELDS}, said)
            for i, j in zip(cuts, cuts[1:])}


def _from_sql(store, sql: str, incident_id: str) -> dict[tuple, _Steps]:
    """The query's rows (host, rank, ts, step, dt, path, line, text, pid; ordered by host and
    rank) as one ``_Steps`` per (host, rank)."""
    tab = store.cursor().sql(sql, params=[incident_id]).to_arrow_table()
    cols = {k: tab.column(k).combine_chunks() for k in tab.column_names}
    host, hosts = ordered_codes(cols["host"])
    return _grouped(cols, host, hosts, said=False)


def _series(store, incident_id: str) -> dict[tuple, _Steps]:
    """Per (host, rank): its step rows oldest first.

    The same line captured twice (a worker's stderr.log and the launcher's --tee copy) counts once:
    of the rows of one (host, rank) with the same step and time, the first in (path, line) order."""
    # Text logs: one ``metrics`` row per step line and value (metric step / step_time, entity 'rank N').
    lines = step_lines(store, incident_id)      # in (host, rank, ts, path) order, each line once
    t = lines.cols
    if t.num_rows:
        t = t.append_column("step", step_numbers(store, t.column("step_value")))
        # lines of one (host, rank) and time (in two files: with one path those are a line's key)
        if len(lines.paths) > 1 and pc.any(repeats(t, ("host", "rank", "ts"))).as_py():
            # drop each that repeats the step of one before it in (path, line) order
            t = t.append_column("row", pc.indices_nonzero(pc.is_valid(t.column("ts"))))
            by_step = sorted_by(t, ("host", "rank", "ts", "step", "path", "line"))
            again = pc.filter(by_step.column("row"), repeats(by_step, ("host", "rank", "ts", "step")))
            t = t.filter(pc.invert(pc.is_in(t.column("row"), value_set=again.combine_chunks()))).drop_columns(["row"])
        cols = {k: t.column(k).combine_chunks() for k in t.column_names}
        cols["path"] = pa.DictionaryArray.from_arrays(cols["path"], pa.array(lines.paths, pa.string()))
        cols["text"] = pa.nulls(t.num_rows, pa.string())
        cols["pid"] = pa.nulls(t.num_rows, pa.int64())
        return _grouped(cols, cols["host"], lines.hosts, said=True)
    # older stores: one ``step`` event per step line
    out = _from_sql(store, """
        WITH lines AS (
            SELECT COALESCE(e.host, s.host) AS host, COALESCE(e.rank, s.rank) AS rank, e.pid,
                   e.ts_utc_ns AS ts, e.line, e.text, s.path,
                   TRY_CAST(json_extract_string(e.attrs, '$.step') AS BIGINT) AS step,
                   TRY_CAST(json_extract_string(e.attrs, '$.step_time_s') AS DOUBLE) AS dt
            FROM events e JOIN sources s USING (incident_id, source_id)
            WHERE e.incident_id = ? AND e.name = 'step' AND e.ts_utc_ns IS NOT NULL
              AND COALESCE(e.rank, s.rank) IS NOT NULL)
        SELECT host, rank, ts, step, dt, path, line, text, pid FROM lines
        QUALIFY row_number() OVER (PARTITION BY host, rank, step, ts ORDER BY path, line) = 1
        ORDER BY host, rank, ts, path, line""", incident_id)
    if not out:
        out = _from_sql(store, """
            SELECT COALESCE(st.host, s.host) AS host, st.rank, st.ts_raw_ns + st.dur_ns + c.offset_ns AS ts,
                   st.step, st.dur_ns / 1e9 AS dt, s.path, NULL::BIGINT AS line, st.name AS text, st.pid
            FROM steps st JOIN sources s USING (incident_id, source_id)
            JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
                 AND c.domain = s.clock_domain
            WHERE st.incident_id = ? AND st.rank IS NOT NULL AND st.name LIKE 'ProfilerStep#%'
              AND c.offset_ns IS NOT NULL AND st.dur_ns IS NOT NULL
            ORDER BY 1, 2, ts, s.path, st.step""", incident_id)
    return out


def _gaps(ts: pa.Array) -> pa.Array:
    """The times between consecutive rows, s (``(q - p) / 1e9`` of the integer ns)."""
    try:
        d = pc.subtract_checked(ts.slice(1), ts.slice(0, len(ts) - 1))
    except pa.ArrowInvalid:       # past int64: Python's integers
        v = ts.to_pylist()
        return pa.array([(q - p) / 1e9 for p, q in zip(v, v[1:])], pa.float64())
    return pc.divide(pc.cast(d, pa.float64(), safe=False), 1e9)


def summary(rank, slow: float, med: float, step, start: int, n: int, to_end: bool) -> str:
    """The finding's sentence: the slow steps' median ``slow`` against the baseline ``med`` (s),
    from step ``step`` (began at ``start``, UTC ns), over ``n`` steps (``to_end``: up to the last)."""
    text = (f"Training steps of rank {rank} slowed down: a median {slow:.3g} s per step from step "
            f"{step} (began ~{hms(start)}) against {med:.3g} s before ({slow / med:.0f}x)" if med > 0 else
            f"Training steps of rank {rank} slowed down to {slow:.3g} s from step {step}")
    text += f", over {n} step{'s' if n > 1 else ''}"
    return text + (" up to its last reported step" if to_end else "")


def detect(store, incident_id: str, zone: str | None = None) -> list[Link]:
    found = []
    for (host, rank), rows in _series(store, incident_id).items():
        if len(rows) < MIN_STEPS:
            continue
        dts = rows.cols["dt"]
        if len(dts) - dts.null_count >= 0.8 * len(rows):
            if dts.null_count:
                rows = rows.take(pc.indices_nonzero(pc.is_valid(dts)))
            vals = pc.cast(rows.cols["dt"], pa.float64())
        else:
            vals = _gaps(rows.cols["ts"])
            rows = rows.tail(1)
        if len(vals) < MIN_STEPS:
            continue
        med, sigma = quiet_baseline_of(vals)
        thr = max(RATIO * med, med + K * sigma, med + ABS_MIN_S)
        # the first episode with MIN_POINTS slow steps, or one that runs to the last step
        at, starts, ends = spans(pc.greater(vals, thr), gap=2)
        last = pc.take(at, ends)
        ok = pc.or_(pc.greater_equal(pc.add(pc.subtract(ends, starts), 1), MIN_POINTS),
                    pc.equal(last, len(vals) - 1))
        eps = pc.indices_nonzero(ok)
        if not len(eps):
            continue
        a, b = at[starts[eps[0].as_py()].as_py()].as_py(), last[eps[0].as_py()].as_py()
        slow = median(vals.slice(a, b - a + 1))
        first = rows.row(a)
        start = first["ts"] - int(vals[a].as_py() * 1e9)
        before = rows.row(a - 1) if a > 0 else None
        text = summary(rank, slow, med, first["step"], start, b - a + 1, b == len(vals) - 1)
        # The change came during the last normal step (which it made only a little slower) or
        # during the first slow step (which it made slow): between the start of the one and the
        # end of the other.
        window = ()
        if before is not None and a > 0:
            window = (("ts_lo_ns", before["ts"] - int(vals[a - 1].as_py() * 1e9)), ("ts_hi_ns", first["ts"]),
                      ("ts_bound", "between"))
        ev = tuple(Evidence(r["path"], r["line"], r["text"] or "") for r in (before, first) if r is not None)
        found.append(Link(kind=LinkKind.STEP_SLOWDOWN, ts_ns=start, summary=text, source=first["path"],
                          host=host, rank=rank, pid=first.get("pid"), evidence=ev,
                          provenance=Provenance.INFERRED,
                          confidence=0.9 if slow > 3 * thr / RATIO else 0.75,
                          attrs=(("baseline_s", med), ("slow_s", slow), ("first_slow_step", first["step"]),
                                 ("until_ns", rows.cols["ts"][b].as_py())) + window))
    return found
