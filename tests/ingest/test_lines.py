"""ingest.lines: chunked, vectorised line splitting must see exactly what a line loop sees."""
import gzip
import io

import pytest

from aftertrace.ingest.lines import line_frames
from aftertrace.ingest.registry import ParseContext
from aftertrace.ingest.sink import RowSink


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_same_lines_as_python(chunk):
    data = b"a\n\nb\r\n  c \n\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f sep bytes\n\"q\n# x\nlast-no-newline"
    frames = list(line_frames(io.BytesIO(data), chunk_bytes=chunk))
    got = [(r["lineno"], r["line"]) for f in frames for r in f.iter_rows(named=True)]
    want = [(i, ln.rstrip("\r")) for i, ln in enumerate(data.decode().split("\n"), 1)]
    assert got == want


@pytest.mark.parametrize("data", [b"ok x\r\r\nb\n", b"\xff x\r\r\nb\n", b"\xff\x01\x02\x0e\x0f x\r\r\nb\n"])
def test_one_carriage_return_is_dropped_whatever_the_bytes(data):
    got = [ln for f in line_frames(io.BytesIO(data)) for ln in f["line"].to_list()]
    first = data.split(b"\n")[0][:-1].decode("utf-8", "replace")
    assert got == [first, "b"] and got[0].endswith(" x\r")


def test_bad_utf8_lines_are_flagged_and_counted(tmp_path):
    p = tmp_path / "x.log.gz"
    p.write_bytes(gzip.compress(b"ok\nbad \xff\xfe here\nok2\n"))
    sink = RowSink(tmp_path / "out")
    ctx = ParseContext(p, "x.log.gz", sink)
    rows = [r for f in ctx.line_frames(chunk_bytes=4) for r in f.iter_rows(named=True)]
    assert [(r["lineno"], r["bad_utf8"]) for r in rows] == [(1, False), (2, True), (3, False)]
    assert sink.issues_total == 1 and ctx.lineno == 3 and ctx.bytes_read == 19


def test_lines_holding_a_nul_byte_are_flagged_wherever_it_is():
    # at the start, in a whole 8-byte word, in the tail after the last word, next to bytes that
    # are not UTF-8; and bytes that only look like a zero under word arithmetic (0x01, 0x80, 0xff)
    lines = [b"\x00start", b"12345678\x00abcdefgh", b"abcdefghij\x00", b"\xff\x00\xfe", b"\x01\x80\x01\x80\x01\x80\x01\x80",
             b"\xff" * 9, b"plain line", b"", b"0123456\x00"]
    data = b"\n".join(lines) + b"\n"
    rows = [r for f in line_frames(io.BytesIO(data)) for r in f.iter_rows(named=True)]
    assert [r["nul"] for r in rows] == [b"\x00" in ln for ln in lines]
    assert [r["bad_utf8"] for r in rows] == [_not_utf8(ln) for ln in lines]
    assert [r["line"] for r in rows] == [ln.decode("utf-8", "replace") for ln in lines]


def _not_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@pytest.mark.parametrize("chunk", [4096, 1 << 20, 32 << 20])
def test_every_line_within_the_size_limit_is_handed_out_whatever_the_read_size(tmp_path, chunk):
    # one large read may cross the per-file limit: the bytes before the limit still come out (the
    # lines, and the one the limit cuts), then the error
    from aftertrace.ingest.reader import DecompressedLimit, open_binary
    p = tmp_path / "x.log"
    p.write_bytes(b"".join(b"line %06d of a log\n" % i for i in range(100_000)))
    limit = 1_234_567
    stream = open_binary(p, limit)
    got = []
    with pytest.raises(DecompressedLimit):
        for f in line_frames(stream, chunk_bytes=chunk):
            got += f["line"].to_list()
    data = p.read_bytes()[:limit]
    assert got == data.decode().split("\n")
    assert stream.raw.count == limit


def test_a_read_at_the_limit_raises_instead_of_ending_the_stream(tmp_path):
    from aftertrace.ingest.reader import DecompressedLimit, open_binary
    p = tmp_path / "x.bin"
    p.write_bytes(b"x" * 101)
    stream = open_binary(p, 100)          # (kept: the buffered stream closes its raw when collected)
    raw = stream.raw
    assert raw.readinto(bytearray(1000)) == 100    # the bytes within the limit
    with pytest.raises(DecompressedLimit):         # more exists: an error, not 0 (the end)
        raw.readinto(bytearray(10))
    whole = open_binary(p, 101)                    # a file of exactly the limit is whole
    exact = whole.raw
    assert exact.readinto(bytearray(1000)) == 101 and exact.readinto(bytearray(10)) == 0


def test_a_small_file_does_not_get_a_chunk_sized_buffer():
    # bundles hold thousands of few-kB logs: a 32 MB read buffer made (and zeroed) for each cost
    # ~20 ms apiece; the buffer doubles only while a file fills it
    import tracemalloc
    data = b"".join(b"line %d of a small log\n" % i for i in range(200))
    tracemalloc.start()
    try:
        got = [ln for f in line_frames(io.BufferedReader(io.BytesIO(data))) for ln in f["line"].to_list()]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == data.decode().splitlines()
    assert peak < 1 << 20


def test_the_size_hint_is_the_file_or_gzip_trailer_size(tmp_path):
    from aftertrace.ingest.reader import size_hint
    data = b"".join(b"line %d\n" % i for i in range(5000))
    plain, packed = tmp_path / "a.log", tmp_path / "a.log.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    assert size_hint(plain) == size_hint(packed) == len(data)
    assert size_hint(tmp_path / "missing") is None
    (tmp_path / "cut.gz").write_bytes(b"\x1f\x8b")       # (too short for a trailer: no hint)
    assert size_hint(tmp_path / "cut.gz") is None


def test_a_hinted_file_is_read_into_one_buffer_of_its_size(monkeypatch):
    # (growing the buffer from 64 kB to a 10 MB file's size cost three times its read and split)
    import aftertrace.ingest.lines as lines
    data = b"".join(b"line %d of a larger log\n" % i for i in range(20000))
    sizes = []
    real = lines._read_into
    monkeypatch.setattr(lines, "_read_into", lambda stream, buf, start: sizes.append(len(buf)) or
                        real(stream, buf, start))
    got = [ln for f in line_frames(io.BufferedReader(io.BytesIO(data)), size_hint=len(data)) for ln in f["line"].to_list()]
    assert got == data.decode().splitlines() and sizes[0] == len(data) + 1 and len(sizes) <= 2
    sizes.clear()
    list(line_frames(io.BufferedReader(io.BytesIO(data))))
    assert sizes[0] == lines.FIRST_READ and len(sizes) > 3      # (without a hint: it grows)


def _reference_lines(data: bytes) -> list[str]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(ln[:-1] if ln.endswith(b"\r") else ln).decode("utf-8", "replace") for ln in lines]


# (ill-formed UTF-8 of every kind: a lone continuation byte, a cut sequence, an overlong form, a
# surrogate, a code point above U+10FFFF; and a real U+FFFD, which is not a bad byte)
def _refused(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


_PIECES = [b"a", b" ", b"\n", b"\r", b"\xff", b"\xc3\xa9", b"\x00", b"\x01", b"\x80", b"\xe2\x82",
           b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80", b"\xef\xbf\xbd"]


@pytest.mark.parametrize("seed", range(3))
def test_lines_equal_a_plain_split_whatever_the_bytes_and_chunk_size(seed):
    # the reused buffer, its growth, the carried partial line and the replacement of bytes that are
    # not UTF-8 against bytes.split and Python's decoder (hypothesis, a fixed number of examples per
    # seed); a line is flagged exactly when Python's strict decoder refuses it
    from hypothesis import given, settings, strategies as st, HealthCheck

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(_PIECES), max_size=80).map(b"".join), st.integers(1, 48 + seed * 500),
           st.one_of(st.none(), st.integers(0, 200)))
    def check(data, chunk, hint):      # (a size hint, right or wrong, sizes the buffer only)
        rows = [r for f in line_frames(io.BufferedReader(io.BytesIO(data)), chunk_bytes=chunk, size_hint=hint)
                for r in f.iter_rows()]
        assert [r[1] for r in rows] == _reference_lines(data)
        assert [r[2] for r in rows] == [_refused(ln) for ln in data.split(b"\n")[:len(rows)]]

    check()


def test_lines_not_utf8_past_the_first_replacement_buffer_and_blank_lines_as_nulls():
    # 30,000 lines of bytes that are not UTF-8 grow into 270 kB of replacements (more than the
    # split's first buffer for them holds: it splits again with room), between ASCII lines, empty
    # ones (null with blank_as_null) and lines of at most 12 bytes (held in their views)
    from aftertrace.ingest.native import split_lines
    lines = [b"\xff\xfe\xfd", b"", b"short", b"a line of ASCII longer than twelve bytes", b"\xc3\xa9t\xc3\xa9"] * 30_000
    buf = bytearray(b"\n".join(lines) + b"\npartial")
    text, flags, used = split_lines(buf, len(buf), False, True)
    assert used == len(buf) - len(b"partial")
    want = [ln.decode("utf-8", "replace") if ln else None for ln in lines]
    assert text.type.equals(__import__("pyarrow").string_view()) and text.to_pylist() == want
    assert flags.to_pylist() == [int(_not_utf8(ln)) for ln in lines]
    buf[:] = b"x" * len(buf)      # (the lines are copies: the caller may reuse its buffer at once)
    assert text.to_pylist() == want


def test_a_chunk_past_a_view_offset_window_is_split_into_its_lines():
    # a view's offset is an int32 into the data buffer it names: past 1 GiB the lines point into
    # the next window of the chunk's copy (a chunk grows this large for one very long line)
    from aftertrace.ingest.native import WINDOW, split_lines
    import polars as pl
    line = (b"0123456789abcdef" * 65536)[:(1 << 20) - 1]           # 1 MiB with its newline
    n = WINDOW // (1 << 20) + 3
    buf = bytearray(b"".join(line[:-3] + b"%03d\n" % (i % 1000) for i in range(n)))
    text, flags, used = split_lines(buf, len(buf), True, False)
    s = pl.Series(text)
    assert used == len(buf) and len(s) == n and not any(flags.to_pylist())
    assert s.str.slice(-3).to_list() == ["%03d" % (i % 1000) for i in range(n)]
    assert s.str.len_bytes().unique().to_list() == [len(line)]
    assert s.str.starts_with("0123456789abcdef").all()
    del buf, text, s


def test_ahead_hands_out_each_item_worked_in_order_and_each_error_where_it_happened():
    import threading
    from aftertrace.ingest.lines import ahead
    where = []

    def items():
        for i in range(1, 5):
            yield i
        raise OSError("the stream was cut")

    def work(x):
        where.append(threading.current_thread() is threading.main_thread())
        if x == 3:
            raise ValueError("item 3")
        return x * 10

    got = []
    with pytest.raises(OSError, match="cut"):
        for x in ahead(items()):
            got.append(x)
    assert got == [1, 2, 3, 4]          # every item before the error that ended them
    got = []
    with pytest.raises(ValueError, match="item 3"):
        for x in ahead(items(), work):
            got.append(x)
    assert got == [10, 20] and not any(where)     # (worked on the worker thread)


def test_ahead_closed_early_closes_its_items_once_the_worker_is_out_of_them():
    import threading
    from aftertrace.ingest.lines import ahead
    state = {"closed": False, "read": 0}
    gate = threading.Event()

    def items():
        try:
            for i in range(10):
                if i == 2:
                    gate.wait(5)        # (the worker is in here while the consumer closes)
                state["read"] += 1
                yield i
        finally:
            state["closed"] = True

    gen = items()
    it = ahead(gen)
    assert (next(it), next(it)) == (0, 1)      # (the worker now waits in the read of item 2)
    threading.Timer(0.2, gate.set).start()
    it.close()                          # waits for the worker's read, then closes the items
    assert state["closed"] and not gen.gi_running and state["read"] == 3


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_a_file_of_many_chunks_read_ahead_gives_every_line_then_the_limit(tmp_path, chunk):
    # (a file larger than a chunk is read ahead on a thread: the same lines, line numbers and
    # byte count, the issues of its lines on the parser's thread, and the size limit after them)
    p = tmp_path / "x.log"
    p.write_bytes(b"".join((b"line %06d \xff\n" if i % 997 == 0 else b"line %06d of a log\n") % i
                           for i in range(100_000)))
    limit = 1_234_567
    sink = RowSink(tmp_path / "out")
    ctx = ParseContext(p, "x.log", sink, max_bytes=limit)
    rows = [(r["lineno"], r["line"]) for f in ctx.line_frames(chunk_bytes=chunk) for r in f.iter_rows(named=True)]
    want = p.read_bytes()[:limit].decode("utf-8", "replace").split("\n")
    assert rows == list(enumerate(want, 1))
    assert ctx.stream_error is not None and ctx.bytes_read == limit and ctx.lineno == len(want)
    assert sink.issues_total == sum(1 for w in want if "\ufffd" in w) > 50
