"""A file parsed as a pool worker parses it, and the rows of the tables it wrote, for the tests of a
format's parser."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from aftertrace.ingest.parse import ParseJob, SourceResult, parse_file
from aftertrace.ingest.registry import default_registry


def parse_tables(tmp_path: Path, path: Path, rel: str, tables: tuple[str, ...]) -> tuple[SourceResult, dict]:
    """(the parse's result, {table: its rows}) for ``path`` parsed as ``rel`` into ``tmp_path/out``."""
    out = tmp_path / "out"
    r = parse_file(ParseJob(str(path), rel, str(out)), default_registry())
    return r, {t: [row for f in sorted(out.rglob(f"{t}*.parquet")) for row in pq.read_table(f).to_pylist()]
               for t in tables}
