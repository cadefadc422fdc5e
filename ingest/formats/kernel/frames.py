"""Frame helpers shared by the kernel-log formats and their engine: the record frame a format
builds from its lines (:func:`frame`, see :mod:`.engine`), its time conversions, and column
helpers that run a costly step on few rows or on few distinct values."""
from __future__ import annotations

import polars as pl

from ...timeparse import MAX_SECONDS, NS


_CATEGORIES = getattr(pl, "Categories", None)    # Polars >= 1.32 (marked unstable there)


def head_codes(key: pl.Series) -> tuple[pl.Series | None, pl.Series | None]:
    """(the distinct values, each row's number into them: null for a null) of a String series, by
    a cast to a Categorical with categories of its own (``pl.Categories.random()``: numbered 0, 1,
    ... in order of first appearance, exact, freed with the series); (None, None) where this Polars
    has no ``pl.Categories`` or the numbering is not the expected one (the caller then takes
    ``head_groups``)."""
    if _CATEGORIES is None:
        return None, None
    try:
        cats = _CATEGORIES.random()
        cat = key.cast(pl.Categorical(cats))
        heads = cats.to_series()      # (while ``cat`` lives: the categories are freed with it)
        code = cat.to_physical()
    except Exception:  # noqa: BLE001 - an API that may change: the hash path gives the same answers
        return None, None
    top = code.max()
    if code.null_count() != key.null_count() or len(heads) != (0 if top is None else int(top) + 1):
        return None, None
    return heads, code


def head_groups(key: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(index of the first row of each distinct value, each row's group number into it): the rows
    grouped by ``key``'s hash, checked exactly (each row's value equals its group's first value);
    on a hash collision the groups are the distinct values themselves (``unique``, text hashing)."""
    h = key.hash()
    first = h.arg_unique()
    groups = pl.DataFrame({"h": h.gather(first), "i": pl.int_range(len(first), eager=True, dtype=pl.UInt32)})
    code = h.to_frame("h").join(groups, on="h", how="left", maintain_order="left")["i"]
    if key.eq_missing(key.gather(first).gather(code)).all():
        return first, code
    k = key.to_frame("k").with_row_index("r")    # (never seen: two of a chunk's heads with one hash)
    firsts = k.group_by("k", maintain_order=True).agg(pl.col("r").first())
    code = k.join(firsts.with_row_index("i"), on="k", how="left", maintain_order="left", nulls_equal=True)["i"]
    return firsts["r"], code


def null_strings(n: int, name: str = "") -> pl.Series:
    """A String series of ``n`` nulls (without a Python list of ``n`` Nones)."""
    return pl.repeat(None, n, dtype=pl.String, eager=True).alias(name)


def scatter(mask: pl.Series, base: pl.Series, fn, values: pl.Series | pl.DataFrame) -> pl.Series:
    """``base`` with its ``mask`` rows replaced by ``fn(values[mask])``: a costly step on a few rows only."""
    idx = mask.arg_true()
    if len(idx) == 0:
        return base
    return base.clone().scatter(idx, fn(values[idx]))


def extract_distinct(s: pl.Series, pattern: str) -> pl.Series:
    """``s.str.extract(pattern, 1)``, run once per distinct value (for short, repetitive text such as
    ``--decode`` prefixes: capture extraction is the slow part; the values are numbered by
    ``head_codes``, or grouped by hash, ``head_groups``)."""
    if s.null_count() == len(s):
        return null_strings(len(s), s.name)
    heads, code = head_codes(s)
    if heads is None:
        first, code = head_groups(s)
        heads = s.gather(first)
    return heads.str.extract(pattern, 1).gather(code).alias(s.name)


def frame(df: pl.DataFrame, ok, ts, msg, sev=None, cont=None, meta=None, kern=None, host=None,
          ident=None, ipid=None, boot_mark=None) -> pl.DataFrame:
    """Build the record frame from expressions (see module doc); missing parts get defaults."""
    none_s = pl.lit(None, pl.String)
    if cont is None:   # the default continuation test runs on the lines that are not records only
        df = df.with_columns(ok.fill_null(False).alias("_ok_"))
        not_ok = ~df["_ok_"]
        cont = scatter(not_ok, pl.repeat(False, len(df), eager=True),
                        lambda lines: lines.str.contains(r"^\s+\S").fill_null(False), df["line"])
        df = df.with_columns(_cont_=cont)
        ok, cont = pl.col("_ok_"), pl.col("_cont_")
    return df.select(
        pl.col("lineno"), pl.col("line"), pl.col("bad_utf8"),
        ok.fill_null(False).alias("ok"),
        cont.fill_null(False).alias("cont"),
        (meta if meta is not None else pl.lit(False)).fill_null(False).alias("meta"),
        ts.cast(pl.Int64, strict=False).alias("ts"),      # (a number too large for a time: untimed)
        (sev if sev is not None else none_s).cast(pl.String).alias("sev"),
        pl.coalesce(msg, pl.col("line")).alias("msg"),
        (kern if kern is not None else pl.lit(True)).fill_null(True).alias("kern"),
        (host if host is not None else none_s).alias("host"),
        (ident if ident is not None else none_s).alias("ident"),
        (ipid if ipid is not None else pl.lit(None, pl.Int64)).cast(pl.Int64, strict=False).alias("ipid"),
        (boot_mark if boot_mark is not None else pl.lit(False)).fill_null(False).alias("boot_mark"),
    )


def sec_usec_ns(sec: pl.Expr, frac: pl.Expr) -> pl.Expr:
    """'1234' + '567890' (or 9 digits) -> ns."""
    f = frac.str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64, strict=False)
    s = sec.cast(pl.Int64, strict=False)
    return pl.when(s < MAX_SECONDS).then(s * NS + f)    # (more digits than a clock has: no time)


def days_from_civil(y: pl.Expr, m: pl.Expr, d: pl.Expr) -> pl.Expr:
    """Days since 1970-01-01 of a proleptic Gregorian date, vectorised (H. Hinnant's algorithm:
    shift the year to start in March so the leap day is last, count 400-year eras, then days)."""
    y = y - (m <= 2).cast(pl.Int64)
    era = y // 400
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def wall_ns(text: pl.Expr, fmt: str, zone: str | None) -> pl.Expr:
    """Local wall-clock strings -> UTC epoch ns in ``zone`` (DST gaps become null)."""
    dt = text.str.to_datetime(fmt, strict=False, time_unit="ns")
    if zone and zone not in ("UTC", "Etc/UTC", "GMT", "Z"):
        dt = dt.dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
    else:
        dt = dt.dt.replace_time_zone("UTC")
    return dt.dt.epoch("ns")
