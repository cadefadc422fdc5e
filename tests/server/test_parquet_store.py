"""Attached Parquet: an incident analysed with a shared Parquet location keeps its heavy
tables as partitions that the store reads in place (server/store.py), and gives the same report,
timeline, flame graph and rows as the same bundle stored natively, on the local executor and on
a real local Ray (``ray.init(num_cpus=2)``, skipped when ray is not installed).
"""
import json
from pathlib import Path

import pytest

from aftertrace.ingest.sink import NO_VALUE, partition_path, partition_value
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.server.store import ATTACHED_TABLES, Store

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
TABLES = ["events", "samples", "stacks", "metrics", "collectives", "steps", "flows", "facts", "anchors",
          "parse_issues", "sources", "clock_map", "clock_segments", "row_times", "tracks", "track_spans", "track_bins", "metric_bins"]
TIMING = {"parse_s", "duration_s", "duration", "analyzed_at", "created_at", "elapsed_s", "generated_at"}

try:
    import ray
except ImportError:
    ray = None


def _without_timing(x):
    if isinstance(x, dict):
        return {k: _without_timing(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_without_timing(v) for v in x]
    return x


def _timeline(tl: dict) -> dict:
    """The timeline without its buckets' names (mode(name): with a tie, whichever the scan met
    first); spans come in a total order already."""
    tl = _without_timing(tl)
    for d in tl["data"].values():
        for b in d["bins"]:
            b.pop()
    return tl


def _settings(home: Path, parts: Path | None, executor: str = "local") -> Settings:
    return Settings(home=home, db_path=home / "db.duckdb", workers=2, inline_bytes=0, executor=executor,
                    parts_dir=parts)


# Columns left out of the row hashes: timings; perf stack ids (numbered per parse in no fixed
# order; the flame graphs, compared whole, cover the stacks); the name of a track's bucket, which
# is mode(name) in analysis/timeline.py and picks any of the names tied for most frequent; the
# evidence
# of a clock (its "other_methods" estimates depend on the order analysis/clocks.py's
# collect_anchors reads the anchors in, which no ORDER BY fixes: the offset used does not).
EXCLUDE = {"sources": ("parse_s",), "samples": ("stack_id",), "stacks": ("stack_id", "parent_id"),
           "track_bins": ("name",), "clock_map": ("evidence",)}


def _snapshot(svc: Service, iid: str) -> dict:
    st = svc.store
    rows = {}
    for t in TABLES:
        sid = "source_id, " if t not in ("clock_map", "clock_segments", "metric_bins", "tracks", "track_spans", "track_bins") else ""
        ex = f" EXCLUDE ({', '.join(EXCLUDE[t])})" if t in EXCLUDE else ""
        if t == "events":       # (perf events name their stack in attrs)
            ex = """ REPLACE (regexp_replace(attrs, '"stack_id":[0-9]+', '"stack_id":_') AS attrs)"""
        rows[t] = st.query(f"SELECT {sid}count(*) AS n, sum(hash(x)) AS h FROM (SELECT *{ex} FROM {t} "
                           "WHERE incident_id = ?) x GROUP BY ALL ORDER BY ALL", [iid])
    return {"report": _without_timing(svc.get_report(iid)), "rows": rows,
            "timeline": _timeline(svc.timeline(iid)),
            "timeline_all": _timeline(svc.timeline(iid, start="0", end="4102444800")),
            "flame": _without_timing(svc.flamegraph(iid)),
            "flame_period": _without_timing(svc.flamegraph(iid, weight="period")),
            "clocks": [{k: v for k, v in c.items() if k != "evidence"} for c in svc.clock_table(iid)]}


def _analyse(home: Path, bundle: str, parts: Path | None, executor: str = "local") -> tuple[Service, str, dict]:
    svc = Service(_settings(home, parts, executor))
    sub = svc.submit_path(SAMPLES / bundle)
    svc.analyze(sub.incident_id)
    return svc, sub.incident_id, _snapshot(svc, sub.incident_id)


def _same(a: dict, b: dict) -> None:
    for key in a:
        assert json.dumps(a[key], sort_keys=True, default=str) == json.dumps(b[key], sort_keys=True, default=str), key


# -- partition names ----------------------------------------------------------------------------
def test_partition_names_are_hive_style_and_stay_in_their_folder(tmp_path):
    p = partition_path(tmp_path, "events", "dmesg", "node-07", 12, 3)
    assert p == tmp_path / "events" / "kind=dmesg" / "host=node-07" / "12-00003.parquet"
    for hostile in ("../../etc", "/abs/path", "..", "a/../../b", "x\x00y", "h=1/kind=2", "ü 漢"):
        q = partition_path(tmp_path, "events", "dmesg", hostile, 1, 0)
        assert q.parent.parent.parent == tmp_path / "events" and q.parent.name.startswith("host=")
        assert "/" not in partition_value(hostile) and "\x00" not in partition_value(hostile)
        assert q.resolve().is_relative_to(tmp_path.resolve())
    assert partition_value(None) == partition_value("") == NO_VALUE
    assert len(partition_value("h" * 5000)) <= 120
    assert partition_value("a" * 300) != partition_value("a" * 299 + "b")
    with pytest.raises(KeyError):
        partition_path(tmp_path, "../x", "k", "h", 1, 0)


def test_parts_dir_setting(tmp_path, monkeypatch):
    assert Settings.from_env(home=tmp_path).parts_dir is None
    monkeypatch.setenv("AFTERTRACE_PARTS", str(tmp_path / "shared"))
    assert Settings.from_env(home=tmp_path).parts_dir == (tmp_path / "shared").resolve()
    with pytest.raises(ValueError, match="object storage"):
        Settings.from_env(home=tmp_path, parts_dir="s3://bucket/parts")
    with pytest.raises(ValueError, match="glob"):
        Settings.from_env(home=tmp_path, parts_dir=str(tmp_path / "a*b"))


@pytest.mark.parametrize("command", ["analyze", "serve"])
def test_cli_takes_parts_dir(tmp_path, command):
    from aftertrace.server import cli
    args = cli.build_parser().parse_args([command, *([str(SAMPLES)] if command == "analyze" else []),
                                          "--home", str(tmp_path), "--parts-dir", str(tmp_path / "p")])
    assert cli._settings(args).parts_dir == (tmp_path / "p").resolve()


# -- the same incident, native and attached ---------------------------------------------------------
@pytest.mark.parametrize("bundle", ["oom-after-throttle", "collected-hang", "logs-mismatch", "oom-leak-only"])
def test_attached_incident_reads_like_the_native_one(tmp_path, bundle):
    _, _, native = _analyse(tmp_path / "native", bundle, None)
    svc, iid, attached = _analyse(tmp_path / "attached", bundle, tmp_path / "parts")
    assert sum(r["n"] for r in native["rows"]["events"]) > 0
    _same(native, attached)
    st = svc.store
    if bundle.startswith("oom-"):   # dmesg -T next to the raw log: its records at their raw copies' times
        (n,) = st.query("""SELECT count(*) AS n FROM events t JOIN row_times r USING (incident_id, source_id, line)
                           JOIN events w ON w.incident_id = t.incident_id AND w.source_id = r.by_source_id
                                AND w.line = r.by_line
                           WHERE t.incident_id = ? AND t.ts_utc_ns = w.ts_utc_ns""", [iid])
        assert n["n"] > 0 and n["n"] == sum(r["n"] for r in attached["rows"]["row_times"])
    for t in ATTACHED_TABLES:     # nothing copied in: the rows are read from the partitions
        assert st.query(f"SELECT count(*) AS n FROM main.{t} WHERE incident_id = ?", [iid])[0]["n"] == 0
    (run,) = (tmp_path / "parts" / iid).iterdir()
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*.parquet"))
    assert files and all(f.split("/")[0] in ATTACHED_TABLES + ("facts", "anchors", "parse_issues", "members")
                         for f in files)
    assert all(f.split("/")[1].startswith("kind=") and f.split("/")[2].startswith("host=") for f in files)
    assert not (run / "_staging").exists()


@pytest.fixture(scope="module")
def local_ray():
    if ray is None:
        pytest.skip("ray is not installed (pip install 'aftertrace[ray]')")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.parametrize("bundle", ["oom-after-throttle", "logs-mismatch"])
def test_attached_on_ray_reads_like_native_on_the_local_pool(tmp_path, local_ray, bundle):
    _, _, native = _analyse(tmp_path / "native", bundle, None)
    svc, _, attached = _analyse(tmp_path / "ray", bundle, tmp_path / "parts", executor="ray")
    assert svc._ray is not None
    _same(native, attached)


# -- re-analysis, detaching, the native store untouched -----------------------------------------------
def test_reanalysis_replaces_the_run_and_native_again_detaches(tmp_path):
    home, parts = tmp_path / "home", tmp_path / "parts"
    svc, iid, first = _analyse(home, "logs-mismatch", parts)
    (run1,) = (parts / iid).iterdir()
    svc.analyze(iid)
    (run2,) = (parts / iid).iterdir()
    assert run2 != run1 and not run1.exists()
    _same(first, _snapshot(svc, iid))
    svc.store.close()
    native = Service(_settings(home, None))          # the same store, no Parquet location now
    native.analyze(iid)
    assert not run2.exists()
    assert native.store.attached()[iid] == (None, ())
    assert native.store.query("SELECT count(*) AS n FROM main.events WHERE incident_id = ?", [iid])[0]["n"] > 0
    _same(first, _snapshot(native, iid))


def test_a_native_store_has_no_views_in_the_way(tmp_path):
    st = Store(tmp_path / "db.duckdb")
    assert st._search_path is None
    st.cursor().execute("INSERT INTO metrics (incident_id, source_id, metric, value) VALUES ('i', 1, 'm', 2.5)")
    assert st.query("SELECT count(*) AS n FROM metrics")[0]["n"] == 1


def test_a_native_incident_beside_attached_ones_reads_only_its_table(tmp_path):
    home, parts = tmp_path / "home", tmp_path / "parts"
    svc, att, _ = _analyse(home, "logs-mismatch", parts)
    svc.store.close()
    svc = Service(_settings(home, None))
    nat = svc.submit_path(SAMPLES / "logs-exception").incident_id
    svc.analyze(nat)
    st = svc.store
    plan = st.cursor().execute("EXPLAIN SELECT count(*) FROM events WHERE incident_id = ?", [nat]).fetchall()
    text = "\n".join(r[1] for r in plan)
    assert "PARQUET" not in text.upper() and "events" in text
    plan = st.cursor().execute("EXPLAIN SELECT count(*) FROM events WHERE incident_id = ?", [att]).fetchall()
    assert "PARQUET" in "\n".join(r[1] for r in plan).upper()
    n = st.query("SELECT incident_id, count(*) AS n FROM events GROUP BY 1 ORDER BY 1")
    assert {r["incident_id"] for r in n} == {att, nat}


# -- byte ranges in the pipeline ----------------------------------------------------------------------
def _bundle_with_plain_perf(tmp_path: Path) -> Path:
    """The sample with its perf script text uncompressed (gzip cannot be cut by byte range)."""
    import gzip
    import shutil
    b = tmp_path / "bundle"
    shutil.copytree(SAMPLES / "oom-after-throttle", b)
    gz = b / "vm" / "perf" / "perf.script.txt.gz"
    with gzip.open(gz, "rb") as f, open(gz.with_suffix(""), "wb") as g:
        shutil.copyfileobj(f, g)
    gz.unlink()
    return b


def _analyse_bundle(home: Path, bundle: Path, parts: Path | None, split_bytes: int,
                    executor: str = "local") -> tuple[Service, str, dict]:
    svc = Service(_settings(home, parts, executor).with_(split_bytes=split_bytes))
    sub = svc.submit_path(bundle)
    svc.analyze(sub.incident_id)
    return svc, sub.incident_id, _snapshot(svc, sub.incident_id)


@pytest.mark.parametrize("parts", [False, True], ids=["native", "attached"])
def test_a_perf_file_parsed_in_byte_ranges_gives_the_same_incident(tmp_path, parts, monkeypatch):
    bundle = _bundle_with_plain_perf(tmp_path)
    perf = bundle / "vm" / "perf" / "perf.script.txt"
    _, _, whole = _analyse_bundle(tmp_path / "whole", bundle, None, 0)
    import aftertrace.server.pipeline as pipeline_mod
    merged = []
    real = pipeline_mod.merge_ranges
    monkeypatch.setattr(pipeline_mod, "merge_ranges",
                        lambda job, ranges, results, reg=None: merged.append(len(ranges)) or real(job, ranges, results, reg))
    svc, iid, split = _analyse_bundle(tmp_path / "split", bundle, tmp_path / "parts" if parts else None,
                                      perf.stat().st_size // 9)
    src = svc.store.query("SELECT attrs FROM sources WHERE incident_id = ? AND path = 'vm/perf/perf.script.txt'",
                          [iid])
    assert json.loads(src[0]["attrs"])["samples"] > 1000
    assert merged and merged[0] >= 8          # (the file was parsed in ranges)
    _same(whole, split)


def test_byte_ranges_on_ray_with_attached_parquet(tmp_path, local_ray):
    bundle = _bundle_with_plain_perf(tmp_path)
    perf = bundle / "vm" / "perf" / "perf.script.txt"
    _, _, whole = _analyse_bundle(tmp_path / "whole", bundle, None, 0)
    svc, _, split = _analyse_bundle(tmp_path / "ray", bundle, tmp_path / "parts", perf.stat().st_size // 5,
                                    executor="ray")
    assert svc._ray is not None
    _same(whole, split)
