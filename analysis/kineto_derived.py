"""Per-rank views of torch.profiler (Kineto) traces: steps, collectives, GPU idle gaps.

Input: the rows ``ingest.formats.kineto`` stored for one incident (``events``, ``steps``,
``collectives``; one source per trace file). Output: Polars frames, one row per item,
with the rank resolved (row's own rank, else its source's) and ``ts_utc_ns`` filled from
``clock_map`` when the source's clock could be placed (null otherwise).

Merging a rank's files
----------------------
``tensorboard_trace_handler`` writes one file per profiler cycle, so a rank usually has
several sources. Cycles normally cover disjoint windows, but copies of the same file,
an on-demand trace taken during a scheduled one, or a ``.json.tmp`` next to its finished
``.json`` overlap. Rows are therefore merged per rank and an item that two files both hold
-- same rank, same identity (name/op, thread or device/stream) and the same start and
duration to the nanosecond -- is kept once (the copy from the lowest source id). Anything
computed from the merged rows (ordinals, durations between markers) is computed after the
merge, never per file.

Steps
-----
``ProfilerStep#N`` spans give the step number and its duration directly. A rank without
them but with the optimizer's ``Optimizer.step#<opt>.step`` annotation gets one step per
optimizer call, numbered in time order, whose duration is the time from one optimizer call
to the next (the last one has none) -- ``marker`` says which of the two a row came from.

Collectives
-----------
Ordinals are recomputed over the merged rows: the k-th collective of a rank in a process
group (per role: ``exec`` = the communication itself, ``call`` = the c10d call) has
``ordinal`` k. With the trace's ``seq`` (when PyTorch wrote it) or with the ordinal, the
same collective can be found on every rank -- the input to cross-rank clock alignment
(ends of a large allreduce are near-simultaneous) and to straggler/stall detection. When
the ranks' traces start at different collectives (a rank's window began later), ordinals
differ by a constant per rank; ``seq`` does not.

GPU idle gaps
-------------
Per rank, trace file, device and stream: busy spans (kernel, gpu_memcpy, gpu_memset) are
sorted by start; a gap is the time from the latest end seen so far to the next start when
that is positive and at least ``min_gap_ns``. Gaps are computed inside one trace file (time
between two files was not profiled, it is not idle time) and identical gaps found in two
overlapping files of the same rank are kept once.
"""
from __future__ import annotations

import polars as pl

from aftertrace.ingest.formats.kineto_fields import ARG, GPU_BUSY_CATEGORIES

_UTC = """LEFT JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
                           AND c.domain = s.clock_domain"""


def _frame(store, sql: str, params: list) -> pl.DataFrame:
    return pl.from_arrow(store.cursor().sql(sql, params=params).to_arrow_table())


def _int_arg(column: str) -> str:
    """SQL for an ARG_FIELDS integer read from events.attrs (first raw key present)."""
    keys = [f"TRY_CAST(json_extract_string(e.attrs, '$.\"{k}\"') AS BIGINT)" for k in ARG[column].keys]
    return f"COALESCE({', '.join(keys)})" if len(keys) > 1 else keys[0]


def steps(store, incident_id: str) -> pl.DataFrame:
    """One row per (rank, side, step) after merging the rank's files; see the module docstring."""
    df = _frame(store, 
        f"""SELECT COALESCE(t.rank, s.rank) AS rank, COALESCE(t.host, s.host) AS host, t.pid, t.tid, t.side, t.step,
                   t.name, t.ts_raw_ns, t.dur_ns, t.ts_raw_ns + c.offset_ns AS ts_utc_ns, t.source_id, s.path
            FROM steps t JOIN sources s USING (incident_id, source_id) {_UTC}
            WHERE t.incident_id = ?
            ORDER BY rank, t.side, t.ts_raw_ns, t.source_id""", [incident_id])
    if df.is_empty():
        return df.with_columns(marker=pl.lit(None, dtype=pl.String))
    df = df.with_columns(marker=pl.when(pl.col("name").str.starts_with("ProfilerStep#"))
                         .then(pl.lit("ProfilerStep")).otherwise(pl.lit("optimizer")))
    df = df.unique(subset=["rank", "side", "name", "ts_raw_ns", "dur_ns"], keep="first", maintain_order=True)
    has_ps = df.filter(pl.col("marker") == "ProfilerStep").select("rank", "side").unique().with_columns(
        _ps=pl.lit(True))
    df = df.join(has_ps, on=["rank", "side"], how="left", nulls_equal=True)
    prof = df.filter(pl.col("_ps").fill_null(False) & (pl.col("marker") == "ProfilerStep"))
    prof = prof.unique(subset=["rank", "side", "step"], keep="first", maintain_order=True)
    opt = df.filter(pl.col("_ps").is_null() & (pl.col("marker") == "optimizer")).sort("rank", "side", "ts_raw_ns")
    opt = opt.with_columns(
        step=pl.int_range(pl.len()).over("rank", "side").cast(pl.Int64),
        dur_ns=(pl.col("ts_raw_ns").shift(-1).over("rank", "side") - pl.col("ts_raw_ns")),
    )
    out = pl.concat([prof, opt], how="vertical_relaxed").drop("_ps")
    return out.sort("rank", "side", "step")


def step_durations(store, incident_id: str, side: str = "cpu") -> pl.DataFrame:
    """The per-rank step duration series: rank, step, ts_raw_ns, ts_utc_ns, dur_s."""
    df = steps(store, incident_id)
    if df.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "ts_raw_ns": pl.Int64,
                                    "ts_utc_ns": pl.Int64, "dur_s": pl.Float64})
    return (df.filter(pl.col("side") == side)
            .select("rank", "step", "ts_raw_ns", "ts_utc_ns", dur_s=pl.col("dur_ns") / 1e9)
            .sort("rank", "step"))


def collectives(store, incident_id: str) -> pl.DataFrame:
    """Collectives of every rank, merged across each rank's files, with ordinals over the merge."""
    df = _frame(store, 
        f"""SELECT COALESCE(t.rank, s.rank) AS rank, COALESCE(t.host, s.host) AS host, t.pid, t.tid, t.role,
                   t.backend, t.collective, t.op, t.pg, t.pg_desc, t.seq, t.ts_raw_ns, t.dur_ns,
                   t.ts_raw_ns + t.dur_ns AS end_raw_ns, t.ts_raw_ns + c.offset_ns AS ts_utc_ns,
                   t.ts_raw_ns + t.dur_ns + c.offset_ns AS end_utc_ns, t.in_nelems, t.out_nelems, t.dtype,
                   t.bytes, t.group_size, t.device, t.stream, t.external_id, t.correlation, t.source_id, s.path
            FROM collectives t JOIN sources s USING (incident_id, source_id) {_UTC}
            WHERE t.incident_id = ?
            ORDER BY rank, t.ts_raw_ns, t.source_id""", [incident_id])
    if df.is_empty():
        return df.with_columns(ordinal=pl.lit(None, dtype=pl.Int64))
    df = df.unique(subset=["rank", "role", "op", "pid", "tid", "device", "stream", "ts_raw_ns", "dur_ns"],
                   keep="first", maintain_order=True)
    return df.with_columns(
        ordinal=pl.int_range(pl.len()).over("rank", "role", "pg").cast(pl.Int64)).sort("rank", "ts_raw_ns")


def gpu_idle_gaps(store, incident_id: str, min_gap_ns: int = 0) -> pl.DataFrame:
    """Idle time per (rank, device, stream): rank, device, stream, start/end (raw and UTC), gap_ns."""
    cats = ", ".join(f"'{c}'" for c in GPU_BUSY_CATEGORIES)
    df = _frame(store, 
        f"""SELECT COALESCE(e.rank, s.rank) AS rank, COALESCE(e.host, s.host) AS host, e.source_id,
                   {_int_arg('device')} AS device, {_int_arg('stream')} AS stream,
                   e.ts_raw_ns, e.ts_raw_ns + COALESCE(e.dur_ns, 0) AS end_raw_ns, c.offset_ns
            FROM events e JOIN sources s USING (incident_id, source_id) {_UTC}
            WHERE e.incident_id = ? AND s.kind = 'torch_trace' AND e.category IN ({cats})
            ORDER BY e.source_id, device, stream, e.ts_raw_ns""", [incident_id])
    schema = {"rank": pl.Int32, "host": pl.String, "device": pl.Int64, "stream": pl.Int64,
              "gap_start_raw_ns": pl.Int64, "gap_end_raw_ns": pl.Int64, "gap_ns": pl.Int64,
              "gap_start_utc_ns": pl.Int64, "gap_end_utc_ns": pl.Int64}
    if df.is_empty():
        return pl.DataFrame(schema=schema)
    keys = ["source_id", "device", "stream"]
    df = df.with_columns(busy_until=pl.col("end_raw_ns").cum_max().over(keys))
    df = df.with_columns(gap_start_raw_ns=pl.col("busy_until").shift(1).over(keys))
    gaps = df.filter(pl.col("gap_start_raw_ns").is_not_null()
                     & (pl.col("ts_raw_ns") - pl.col("gap_start_raw_ns") > max(min_gap_ns, 0)))
    gaps = gaps.select(
        "rank", "host", "device", "stream", "gap_start_raw_ns", gap_end_raw_ns=pl.col("ts_raw_ns"),
        gap_ns=pl.col("ts_raw_ns") - pl.col("gap_start_raw_ns"),
        gap_start_utc_ns=pl.col("gap_start_raw_ns") + pl.col("offset_ns"),
        gap_end_utc_ns=pl.col("ts_raw_ns") + pl.col("offset_ns"))
    gaps = gaps.unique(subset=["rank", "device", "stream", "gap_start_raw_ns", "gap_end_raw_ns"], keep="first",
                       maintain_order=True)
    return gaps.cast({k: v for k, v in schema.items()}).sort("rank", "device", "stream", "gap_start_raw_ns")


def merged_events(store, incident_id: str, rank: int | None = None) -> pl.DataFrame:
    """A rank's (or every rank's) trace events with the copies held by overlapping files dropped."""
    where = "" if rank is None else "AND COALESCE(e.rank, s.rank) = ?"
    params = [incident_id] if rank is None else [incident_id, rank]
    df = _frame(store, 
        f"""SELECT COALESCE(e.rank, s.rank) AS rank, COALESCE(e.host, s.host) AS host, e.pid, e.tid,
                   e.ts_raw_ns, e.ts_utc_ns, e.dur_ns, e.category, e.name, e.attrs, e.source_id
            FROM events e JOIN sources s USING (incident_id, source_id)
            WHERE e.incident_id = ? AND s.kind = 'torch_trace' {where}
            ORDER BY rank, e.ts_raw_ns, e.source_id""", params)
    return df.unique(subset=["rank", "pid", "tid", "ts_raw_ns", "dur_ns", "category", "name", "attrs"],
                     keep="first", maintain_order=True)
