"""RowSink: parts of whole row groups, in order; streamed announcements and held parts."""
import json

import polars as pl
import pyarrow.parquet as pq

from aftertrace.ingest import sink as sink_mod
from aftertrace.ingest.sink import RowSink


def _frame(lo, hi):
    return pl.DataFrame({"ts_raw_ns": list(range(lo, hi)), "name": [f"e{i}" for i in range(lo, hi)]})


def _ts(path):
    return pq.read_table(path, columns=["ts_raw_ns"])["ts_raw_ns"].to_pylist()


def test_parts_are_announced_as_written_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(sink_mod, "ROW_GROUP", 100)
    seen = []
    s = RowSink(tmp_path, on_part=lambda table, path: seen.append((table, path.name, _ts(path))))
    s.add_frame("events", _frame(0, 150))          # one whole group is written at once
    assert [(t, n) for t, n, _ in seen] == [("events", "events.00000.parquet")]
    s.add("events", ts_raw_ns=150, name="row")     # a buffered row after frames: frames first
    s.add_frame("events", _frame(151, 160))
    s.close()
    assert [n for _, n, _ in seen] == [f.name for f in s.files]
    assert [ts for _, _, v in seen for ts in v] == list(range(160))
    assert s.published == len(s.files) == 4


def test_held_parts_wait_for_close_and_may_be_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(sink_mod, "ROW_GROUP", 100)
    seen = []
    s = RowSink(tmp_path, on_part=lambda table, path: seen.append(_ts(path)[0]))
    s.hold()
    s.add_frame("events", _frame(0, 250))        # two whole groups in one part; 50 rows wait
    assert len(s.files) == 1 and seen == [] and s.published == 0
    for f in s.files:   # what the Kineto parser does when the time base comes last
        t = pq.read_table(f)
        pq.write_table(t.set_column(t.schema.get_field_index("ts_raw_ns"), "ts_raw_ns",
                                    [[v + 1000 for v in t["ts_raw_ns"].to_pylist()]]), f)
    s.close()
    assert seen == [1000, 200]     # the rewritten part, then the rest


def test_a_failed_parse_does_not_announce_held_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(sink_mod, "ROW_GROUP", 100)
    seen = []
    s = RowSink(tmp_path, on_part=lambda table, path: seen.append(path))
    s.add_frame("events", _frame(0, 100))
    s.hold()
    s.add_frame("events", _frame(100, 300))
    s.close(announce=False)
    assert len(seen) == 1 and len(s.files) == 2


def _codecs(path):
    md = pq.ParquetFile(path).metadata
    return {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}


def test_temporary_parts_are_uncompressed_kept_ones_compressed(tmp_path):
    # parse_file writes parts that only travel to the store uncompressed, and parts for a shared
    # Parquet location (kept) with the sink's codec
    from aftertrace.ingest.parse import ParseJob, parse_file
    log = tmp_path / "dmesg.txt"
    log.write_text("".join(f"[{i}.000001] usb 1-1: new device {i}\n" for i in range(1, 200)))
    temp = parse_file(ParseJob(str(log), "dmesg.txt", str(tmp_path / "t")))
    kept = parse_file(ParseJob(str(log), "dmesg.txt", str(tmp_path / "k"), parts_root=str(tmp_path / "root"),
                               source_id=1))
    assert temp.status == kept.status == "parsed"
    assert _codecs(temp.parts["events"][0]) == {"UNCOMPRESSED"}
    assert _codecs(kept.parts["events"][0]) == {sink_mod.COMPRESSION.upper()}


def test_categorical_text_is_written_dictionary_encoded_and_read_as_text(tmp_path, monkeypatch):
    # a Categorical column (metric names on millions of step rows) goes to Parquet as it is;
    # pyarrow, Polars and DuckDB read it back as the table's plain text, alone or mixed with
    # frames of plain text in one part
    import duckdb
    import pyarrow as pa
    monkeypatch.setattr(sink_mod, "ROW_GROUP", 4)
    cat = pl.DataFrame({"metric": ["step", "loss", "step"], "value": [1.0, 2.0, 3.0]},
                       schema_overrides={"metric": pl.Categorical})
    plain = pl.DataFrame({"metric": ["mem"], "value": [4.0]})
    s = RowSink(tmp_path / "a")
    s.add_frame("metrics", cat)
    s.close()
    s2 = RowSink(tmp_path / "b")
    s2.add_frame("metrics", cat)
    s2.add_frame("metrics", plain)              # 4 rows: one part of both frames
    s2.close()
    (only,), (mixed,) = s.files, s2.files
    # (written from the dictionary as it is: no Arrow schema stored; a part of plain text keeps it)
    assert b"ARROW:schema" not in (pq.read_metadata(only).metadata or {})
    s3 = RowSink(tmp_path / "c")
    s3.add_frame("metrics", plain)
    s3.close()
    assert b"ARROW:schema" in pq.read_metadata(s3.files[0]).metadata
    for f, want in ((only, ["step", "loss", "step"]), (mixed, ["step", "loss", "step", "mem"])):
        assert pq.read_table(f).schema.field("metric").type == pa.string()
        assert pq.read_table(f)["metric"].to_pylist() == want
        assert pl.read_parquet(f).schema["metric"] == pl.String
        assert duckdb.connect().execute(f"select list(metric) from '{f}'").fetchone()[0] == want
    assert pq.read_table(only).schema.field("value").type == pa.float64()


def test_may_inline_says_what_close_would_keep_inline(tmp_path):
    s = RowSink(tmp_path / "s", inline_rows=2)
    assert s.may_inline("events")                 # (nothing yet: nothing to write)
    s.event(name="x", line=1)
    s.event(name="y", line=2)
    assert s.may_inline("events") and not s.may_inline("parse_issues")
    s.event(name="z", line=3)
    assert not s.may_inline("events")
    s.flush("facts")
    assert s.may_inline("facts")
    s.flush("events")                             # (a part written: the table stays a part)
    s.event(name="w", line=4)
    assert not s.may_inline("events")
    s.close()
    assert "events" not in s.inline
    assert not RowSink(tmp_path / "t").may_inline("events")     # (a sink that keeps nothing inline)


def test_a_sink_whose_rows_all_travel_inline_makes_no_folder(tmp_path):
    s = RowSink(tmp_path / "small", inline_rows=10)
    s.event(name="x", line=1)
    s.fact("k", "v")
    s.close()
    assert set(s.inline) == {"events", "facts"} and not s.files
    assert not (tmp_path / "small").exists()
    big = RowSink(tmp_path / "big", inline_rows=1)
    big.event(name="x", line=1)
    big.event(name="y", line=2)
    big.close()
    assert [f.name for f in big.files] == ["events.00000.parquet"] and (tmp_path / "big").is_dir()


def test_add_rows_writes_what_add_writes_row_by_row(tmp_path):
    """Rows given at once are stored as :meth:`RowSink.add` stores each: attrs as JSON text, text
    clipped, a number too large for its column dropped with an issue; parts of ``batch_rows`` rows
    (the part boundaries too); an unknown column refused."""
    import pytest
    rows = [{"ts_raw_ns": i, "name": f"e{i}", "attrs": {"n": i, "s": "ü"} if i % 3 else None,
             "text": "x" * (sink_mod.MAX_TEXT + 5) if i == 4 else f"line {i}", "line": i} for i in range(11)]
    rows[7]["pid"] = 10 ** 30                   # (a corrupted number: no int64)
    one, bulk = RowSink(tmp_path / "one", batch_rows=4), RowSink(tmp_path / "bulk", batch_rows=4)
    for s in (one, bulk):                       # (a row already buffered: the batches count it)
        s.add("events", ts_raw_ns=-1, name="first")
    for r in rows:
        one.add("events", **dict(r))
    bulk.add_rows("events", [dict(r) for r in rows])
    assert one.close() == bulk.close()
    assert [f.name for f in one.files] == [f.name for f in bulk.files] and len(bulk.files) > 3
    for fa, fb in zip(one.files, bulk.files):
        assert pq.read_table(fa).to_pylist() == pq.read_table(fb).to_pylist()
    got = [r for f in bulk.files if f.name.startswith("events") for r in pq.read_table(f).to_pylist()]
    assert got[5]["attrs"] == '{"n":4,"s":"ü"}' and got[5]["text"].endswith("…")
    assert len(got[5]["text"]) == sink_mod.MAX_TEXT and got[8]["pid"] is None
    with pytest.raises(KeyError):
        bulk.add_rows("events", [{"nope": 1}])


def test_attrs_json_is_compact_json_of_every_value():
    """attrs are compact JSON text; what orjson refuses (an integer beyond 64 bits, a lone
    surrogate) takes the standard library in the same shape; keys that are not strings become
    strings and other objects their ``str``, as before."""
    from pathlib import PurePosixPath
    assert sink_mod.attrs_json({"n": 4, "s": "ü", "l": [1, 2.5, None], 3: True}) == \
        '{"n":4,"s":"ü","l":[1,2.5,null],"3":true}'
    assert sink_mod.attrs_json({"p": PurePosixPath("/a/b"), "t": (1, 2)}) == '{"p":"/a/b","t":[1,2]}'
    big = {"pid": 10 ** 30, "s": "é"}
    assert sink_mod.attrs_json(big) == '{"pid":1000000000000000000000000000000,"s":"é"}'
    assert json.loads(sink_mod.attrs_json({"x": "\ud800"})) == {"x": "\ud800"}


def test_attrs_of_reads_what_attrs_json_writes_and_what_orjson_refuses():
    import json
    from aftertrace.ingest.sink import attrs_json, attrs_of
    a = {"a": 1, "b": [1.5, None], "c": "x\u00e9", "d": {"e": True}}
    assert attrs_of(attrs_json(a)) == a and attrs_of(None) == {} and attrs_of("") == {}
    # an integer beyond 64 bits and NaN: orjson refuses them, the standard library reads them
    text = '{"big": 123456789012345678901234567890, "nan": NaN}'
    got = attrs_of(text)
    assert got["big"] == 123456789012345678901234567890 and got["nan"] != got["nan"]
    assert json.dumps(got) == json.dumps(json.loads(text))
