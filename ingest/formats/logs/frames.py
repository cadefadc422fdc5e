"""Frame helpers the log grammars share (the app-log engine and the NCCL grammar)."""
from __future__ import annotations

import polars as pl

def extract_prefix(df: pl.DataFrame, col: str, rx: str, msg: str = "msg") -> pl.DataFrame:
    """Named groups of an anchored *prefix* regex, plus ``msg`` = the rest of the line.

    The regexes stop at the end of the prefix (no ``.*$`` capture): capturing the whole line
    is what makes regex extraction slow, slicing the rest off is nearly free.
    """
    g = df.with_columns(pl.col(col).str.extract_groups(f"^(?P<whole>{rx.lstrip('^')})").alias("_g")).unnest("_g")
    return g.with_columns(pl.col(col).str.slice(pl.col("whole").str.len_chars()).alias(msg)).drop("whole")

