"""ingest.lines: chunked, vectorised line splitting must see exactly what a line loop sees."""
import gzip
import io

import pytest

from ingest.lines import line_frames
from ingest.registry import ParseContext
from ingest.sink import RowSink


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_same_lines_as_python(chunk):
    data = b"a\n\nb\r\n  c \n\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f sep bytes\n\"q\n# x\nlast-no-newline"
    frames = list(line_frames(io.BytesIO(data), chunk_bytes=chunk))
    got = [(r["lineno"], r["line"]) for f in frames for r in f.iter_rows(named=True)]
    want = [(i, ln.rstrip("\r")) for i, ln in enumerate(data.decode().split("\n"), 1)]
    assert got == want


def test_bad_utf8_lines_are_flagged_and_counted(tmp_path):
    p = tmp_path / "x.log.gz"
    p.write_bytes(gzip.compress(b"ok\nbad \xff\xfe here\nok2\n"))
    sink = RowSink(tmp_path / "out")
    ctx = ParseContext(p, "x.log.gz", sink)
    rows = [r for f in ctx.line_frames(chunk_bytes=4) for r in f.iter_rows(named=True)]
    assert [(r["lineno"], r["bad_utf8"]) for r in rows] == [(1, False), (2, True), (3, False)]
    assert sink.issues_total == 1 and ctx.lineno == 3 and ctx.bytes_read == 19
