"""Times in text logs: vectorised local-time conversion, year inference and interpolation.

Log lines state their time in many ways (see FORMATS.md §0): full local dates
(Python logging ``2026-11-29 13:28:11,298``, NCCL ``[2026-05-05 06:16:47]``,
ChildFailedError ``2026-11-29_13:28:56``), ISO-8601 with an offset (already
absolute), and year-less stamps (c10 ``E1129 13:28:56.nnnnnnnnn``, torch elastic
``W1129 13:28:08.902000``, syslog ``Nov 29 13:28:11``). Every stamp is turned
into epoch ns on the host's wall clock (clock domain ``wall``) together with its
*resolution* ``res_ns``: the true instant lies in ``[ts, ts + res_ns)``.

* Local strings are read in the bundle's zone (``ctx.time_zone``: manifest,
  ``date`` output, else UTC).
* Year-less stamps take the year of the nearest fully dated line of the same
  file (the previous one, else the next one); a month more than six months away
  from that line's month is moved into the neighbouring year (a log running
  over New Year). A file with no dated line at all uses the year of the file's
  modification time and says so (``year_from`` in the source attrs).
* c10 stamps: ``MMDD HH:MM:SS.nnnnnnnnn`` — the nine digits are CLOCK_MONOTONIC's
  tv_nsec, not the wall clock's fraction, so they are dropped and the
  resolution is 1 s. torch elastic's six digits are milliseconds x 1000.

Interpolation of untimed lines
------------------------------
Lines without a time (NCCL INFO lines, tracebacks, launcher banners) are placed
between their timed neighbours *in the same file*: a log is appended in order,
so a line written after a line stamped ``a`` (resolution ``ra``) and before a
line stamped ``b`` (resolution ``rb``) was written in ``[a, b + rb)``. The
estimate is the middle of that interval, and the uncertainty (half its width)
is stored in the event's attrs as ``ts_uncertainty_ns`` next to the bounds
``ts_lo_ns``/``ts_hi_ns``; the event is flagged ``ts_interpolated``. When only
one side exists (before the first or after the last timed line) the estimate is
that neighbour's time and the attrs say ``ts_bound`` = ``before``/``after``
(the uncertainty is unbounded on the open side, so no number is given).
Neighbours are forward/backward fills over the file's rows, so this is a few
vectorised column operations per chunk; rows after the last timed line of a
chunk wait for the next chunk (see ``applog``), so the interval is the same as
if the file were read at once. Lines written by several processes into one
file (stdout captures) are only ordered by the order of the writes, which is
what the interval assumes; a line whose own time disagrees with its place in
the file keeps its own time.
"""
from __future__ import annotations

import polars as pl

from ...timeparse import NS, offset_to_seconds, tzinfo_for

MONTH_NUM = {m: str(i) for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}


def _zone_kind(zone: str | None) -> tuple[str, int | str]:
    """('utc', 0) | ('offset', seconds) | ('iana', name)."""
    if zone is None or tzinfo_for(zone) is None:
        return "utc", 0
    try:
        return "offset", offset_to_seconds(zone)
    except ValueError:
        pass
    if zone.upper() in ("UTC", "GMT", "Z", "UCT", "ETC/UTC", "ETC/GMT", "UNIVERSAL", "ZULU"):
        return "utc", 0
    return "iana", zone


def hms_parts(hms: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Hour, minute and second (Int32) of a ``HH:MM:SS`` string expression."""
    return tuple(hms.str.slice(i, 2).cast(pl.Int32, strict=False) for i in (0, 3, 6))


def local_epoch_ns(year: pl.Expr, month: pl.Expr, day: pl.Expr, hms: pl.Expr | tuple, frac_ns: pl.Expr,
                   zone: str | None) -> pl.Expr:
    """Epoch ns of local wall-clock pieces read in ``zone`` (null where the pieces are null/invalid).

    ``hms`` is a ``HH:MM:SS`` string expression, or its :func:`hms_parts`; the others are integer
    expressions. (Each piece is used several times: a caller on many rows passes columns, since
    an expression is computed again at each use within one step.)
    """
    h, mi, s = hms if isinstance(hms, tuple) else hms_parts(hms)
    # pl.datetime raises on an impossible date or time (a corrupted "13:40:99" or "Feb 30"): such
    # pieces become null first (ns times exist for the years 1678..2261)
    leap = ((year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))).cast(pl.Int32)
    days = pl.when(month == 2).then(28 + leap).when(month.is_in([4, 6, 9, 11])).then(30).otherwise(31)
    ok = (year.is_between(1678, 2261) & month.is_between(1, 12) & day.is_between(1, days)
          & h.is_between(0, 23) & mi.is_between(0, 59) & s.is_between(0, 59))
    naive = pl.datetime(pl.when(ok).then(year), month, day, h, mi, s, time_unit="ns")
    kind, val = _zone_kind(zone)
    if kind == "iana":
        naive = naive.dt.replace_time_zone(val, ambiguous="earliest", non_existent="null")
    ns = naive.dt.epoch("ns")
    if kind == "offset":
        ns = ns - pl.lit(int(val) * NS)
    return ns + frac_ns.fill_null(0)


def frac_ns_expr(frac: pl.Expr) -> pl.Expr:
    """'298' (fraction digits) -> ns, vectorised."""
    return frac.str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64, strict=False)


def frac_res_expr(frac: pl.Expr, whole_s: int = NS) -> pl.Expr:
    """Resolution implied by a fraction's digit count (1 s when there is none)."""
    n = frac.str.len_chars()
    return (pl.when(frac.is_null() | (n == 0)).then(pl.lit(whole_s))
            .otherwise(pl.lit(10, dtype=pl.Int64).pow(pl.lit(9) - n.clip(1, 9)))).cast(pl.Int64)


def interpolate(df: pl.DataFrame, ts: str = "ts", res: str = "res") -> pl.DataFrame:
    """Add ``ts_interp`` (bool), ``ts_lo``, ``ts_hi``, ``ts_bound`` and fill ``ts`` of untimed rows.

    Rows are in file order. See the module docstring for the method.
    """
    lo = pl.col(ts).forward_fill()
    hi = (pl.col(ts) + pl.col(res).fill_null(0)).backward_fill()
    untimed = pl.col(ts).is_null()
    out = df.with_columns(
        untimed.alias("ts_interp"),
        pl.when(untimed).then(lo).alias("ts_lo"),
        pl.when(untimed).then(hi).alias("ts_hi"),
    )
    both = pl.col("ts_lo").is_not_null() & pl.col("ts_hi").is_not_null() & (pl.col("ts_hi") >= pl.col("ts_lo"))
    return out.with_columns(
        pl.when(~pl.col("ts_interp")).then(pl.col(ts))
        .when(both).then((pl.col("ts_lo") + pl.col("ts_hi")) // 2)
        .otherwise(pl.coalesce(pl.col("ts_lo"), pl.col("ts_hi"))).alias(ts),
        pl.when(~pl.col("ts_interp")).then(None)
        .when(both).then(pl.lit("between"))
        .when(pl.col("ts_lo").is_not_null()).then(pl.lit("after"))
        .when(pl.col("ts_hi").is_not_null()).then(pl.lit("before"))
        .otherwise(None).alias("ts_bound"),
    ).with_columns(
        (pl.col("ts_interp") & pl.col(ts).is_not_null()).alias("ts_interp"))
