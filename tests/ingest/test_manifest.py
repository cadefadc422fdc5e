"""The collector's manifest as a source, and where a bundle's manifests are found.

Data: the two real manifests `aftertrace collect` wrote for sample_traces/collected-hang and
sample_traces/collected-oom-after-throttle (see sample_traces/README.md); the hostile variants
are made from them in tmp_path. Regenerate the golden file after a reviewed change with
``AFTERTRACE_UPDATE_GOLDEN=1 python -m pytest tests/ingest/test_manifest.py``.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import polars as pl
import pytest

from aftertrace.ingest.formats import manifest as manifest_mod
from aftertrace.ingest.formats.manifest import CollectManifestParser, find_manifests, key_lines, schema_of
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
HANG = ROOT / "sample_traces" / "collected-hang" / "aftertrace-manifest.json"
OOM = ROOT / "sample_traces" / "collected-oom-after-throttle" / "aftertrace-manifest.json"
GOLDEN = ROOT / "tests" / "golden" / "collected-manifests.summary.json"


def parse(path: Path, tmp_path: Path, rel: str = "aftertrace-manifest.json"):
    return parse_file(ParseJob(str(path), rel, str(tmp_path / "out"), None, "UTC", "collect_manifest"))


def table(r, name: str) -> pl.DataFrame:
    files = r.parts.get(name, [])
    return pl.concat([pl.read_parquet(f) for f in files]) if files else pl.DataFrame()


# -- detection ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [HANG, OOM])
def test_the_collectors_manifests_are_claimed_by_their_parser(path):
    det = default_registry().detect(Head.read(path, path.name))
    assert det.parser is CollectManifestParser


def test_detection_is_a_dry_run_that_survives_a_cut_head():
    text = HANG.read_text()
    assert schema_of(text[:60]) == "aftertrace.collect/1"            # cut inside "job"
    assert CollectManifestParser.detect(Head.from_bytes("m.json", text[:60].encode(), complete=False))
    assert schema_of(text.replace('"aftertrace.collect/1"', '"aftertrace.collect/2"')) == "aftertrace.collect/2"


@pytest.mark.parametrize("text", [
    b'{"job": "x", "hosts": {"node-3": {"paths": ["node-3/"]}}}',       # written by hand: no schema
    b'{"schemaVersion": 1, "traceEvents": []}',                          # a Kineto trace
    b'[{"schema": "aftertrace.collect/1"}]',                             # not an object
    b'{"x": {"schema": "aftertrace.collect/1"}}',                        # not at the top level
    b'{"schema" "aftertrace.collect/1"}',                                # not JSON
    b'schema: aftertrace.collect/1',
])
def test_other_json_is_not_a_collector_manifest(text):
    assert not CollectManifestParser.detect(Head.from_bytes("aftertrace-manifest.json", text))


@pytest.mark.parametrize("schema,claimed", [
    (r'"aftertrace.collect\/1"', True),                    # the escapes that can spell the value
    (r'"\u0061ftertrace.collect/1"', True),
    (r'"aftertrace.collect\u002f1"', True),
    (r'"aftertrace.collect/1\n"', False),                  # other escapes spell another value
    (r'"aftertrace.collect\\1"', False),
])
def test_a_schema_written_with_escapes_is_read_as_json_reads_it(schema, claimed):
    text = '{"job": {"command": ["C:\\\\train.py"]}, "schema": %s, "hosts": {}}' % schema
    assert (json.loads(text)["schema"] == "aftertrace.collect/1") == claimed
    assert CollectManifestParser.detect(Head.from_bytes("m.json", text.encode())) == claimed
    assert CollectManifestParser.detect(Head.from_bytes("m.json", text.replace("schema", "sch\\u0065ma").encode())) \
        == claimed


# -- what it gives -----------------------------------------------------------------------------
def test_line_numbers_of_json_paths():
    text = HANG.read_text()
    lines = text.splitlines()
    kl = key_lines(text)
    assert lines[kl[("job",)] - 1].strip() == '"job": {'
    assert lines[kl[("job", "exit_code")] - 1].strip() == '"exit_code": 1,'
    assert lines[kl[("ranks", "1")] - 1].strip() == '"1": {'
    assert lines[kl[("trigger", "reasons", 1)] - 1].strip() == "{"
    assert '"kind": "exit"' in lines[kl[("trigger", "reasons", 1)]]
    assert lines[kl[("processes", 2)] - 1].strip() == "{" and '"pid": 28797' in lines[kl[("processes", 2)]]


def test_the_hang_manifest_as_rows(tmp_path):
    r = parse(HANG, tmp_path)
    assert r.status == "parsed" and r.issues == 0 and r.kind == "host_info" and r.format == "collect_manifest"
    assert r.host == "vm" and r.clock_domain == "wall"
    man = json.loads(HANG.read_text())
    ev = table(r, "events")
    (job,) = ev.filter(pl.col("name") == "job_failure").iter_rows(named=True)
    a = json.loads(job["attrs"])
    assert job["kind"] == "job_failure" and job["pid"] == man["job"]["launcher"]["pid"] == 28739
    assert job["ts_raw_ns"] == 1795978239270000000         # job.ended 2026-11-29T18:50:39.270Z
    assert (a["exit_code"], a["signal"], a["status"], a["launcher_pid"]) == (1, None, "exit code 1", 28739)
    assert json.loads(job["text"])["exit_code"] == 1 and job["line"] == 3
    trig = ev.filter(pl.col("name") == "trigger").sort("ts_raw_ns")
    assert trig["ts_raw_ns"].to_list() == [x["time_ns"] for x in man["trigger"]["reasons"]]
    assert [json.loads(x)["kind"] for x in trig["attrs"]] == ["watchdog", "exit"]
    assert "Timed out waiting 20000ms" in trig["text"][0]
    alive = ev.filter(pl.col("name") == "proc_seen_alive").sort("rank")
    assert alive["pid"].to_list() == [28797, 28798] and alive["rank"].to_list() == [0, 1]
    ended = ev.filter(pl.col("name") == "proc_ended").sort("rank")
    assert ended["ts_raw_ns"].to_list() == [1795978238770294109] * 2     # processes[].ended_ns
    f = table(r, "facts")
    assert sorted(f.filter(pl.col("key") == "rank_pid")["value"]) == ["0=28797", "1=28798"]
    m = table(r, "members")
    assert set(zip(m["controller"], m["cgroup"])) == {(c, "/aftertrace_collect_hang") for c in ("cpu", "cpuacct", "memory")}
    assert set(m["basis"]) == {"manifest"} and set(m["pid"]) == {28739, 28797, 28798}
    first = m.filter((pl.col("pid") == 28797) & (pl.col("change") == "first"))["ts_raw_ns"]
    assert set(first) == {1795978207771096380}


def test_a_job_that_ended_well_is_no_failure(tmp_path):
    man = json.loads(HANG.read_text())
    man["job"].update(exit_code=0, status="exit code 0")
    p = tmp_path / "aftertrace-manifest.json"
    p.write_text(json.dumps(man, indent=2))
    ev = table(parse(p, tmp_path), "events")
    (job,) = ev.filter(pl.col("category") == "collector").filter(pl.col("name").str.starts_with("job")).iter_rows(
        named=True)
    assert job["name"] == "job_ended" and job["kind"] is None


def test_a_signal_is_a_failure(tmp_path):
    man = json.loads(OOM.read_text())
    man["job"].update(exit_code=None, signal="SIGKILL", status="killed by SIGKILL")
    p = tmp_path / "aftertrace-manifest.json"
    p.write_text(json.dumps(man, indent=2))
    ev = table(parse(p, tmp_path), "events").filter(pl.col("name") == "job_failure")
    assert json.loads(ev["attrs"][0])["signal"] == "SIGKILL" and ev["kind"][0] == "job_failure"


def test_golden_summary(tmp_path):
    summary = {}
    for name, path in (("collected-hang", HANG), ("collected-oom-after-throttle", OOM)):
        r = parse(path, tmp_path / name)
        ev = table(r, "events").sort("name", "rank", "ts_raw_ns")
        m = table(r, "members").sort("controller", "pid", "change")
        summary[name] = {
            "status": r.status, "attrs": r.attrs,
            "events": [[x["name"], x["kind"], x["rank"], x["pid"], x["ts_raw_ns"], x["line"]]
                       for x in ev.iter_rows(named=True)],
            "facts": sorted([x["key"], x["value"], x["host"], x["line"]] for x in table(r, "facts").iter_rows(named=True)),
            "members": [[x["controller"], x["cgroup"], x["pid"], x["change"], x["ts_raw_ns"], x["line"]]
                        for x in m.iter_rows(named=True)],
        }
    if os.environ.get("AFTERTRACE_UPDATE_GOLDEN"):
        GOLDEN.write_text(dump_rows(summary) + "\n")
    assert summary == json.loads(GOLDEN.read_text())


def dump_rows(obj, indent: int = 0) -> str:
    """JSON with one row per line (a reviewable diff): objects open up, lists of rows list a row a line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict) and obj:
        inner = ",\n".join(f"{pad}{json.dumps(k)}: {dump_rows(v, indent + 1)}" for k, v in sorted(obj.items()))
        return "{\n" + inner + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and all(isinstance(x, list) for x in obj):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj, sort_keys=True)


# -- hostile ---------------------------------------------------------------------------------------
def test_a_manifest_cut_mid_write_keeps_the_keys_before_the_cut(tmp_path):
    data = HANG.read_bytes()
    cut = data.index(b'"ranks": {')          # inside "hosts", before "ranks"
    p = tmp_path / "aftertrace-manifest.json"
    p.write_bytes(data[:cut - 40])
    assert default_registry().detect(Head.read(p, p.name)).parser is CollectManifestParser
    r = parse(p, tmp_path)
    line = data[:cut - 40].count(b"\n") + 1
    assert r.status == "partial"
    assert r.error.startswith(f"the manifest is cut or damaged at line {line} (")
    assert r.error.endswith("6 top-level keys before it were read")     # schema ... window
    ev = table(r, "events")
    assert set(ev["name"]) == {"job_failure", "trigger"}
    assert table(r, "parse_issues")["kind"].to_list() == ["bad_json"]


def test_bytes_not_utf8_are_named_and_the_rest_is_read(tmp_path):
    data = HANG.read_bytes().replace(b'"comm": "pt_elastic"', b'"comm": "pt_\xff\xfelastic"', 1)
    p = tmp_path / "aftertrace-manifest.json"
    p.write_bytes(data)
    r = parse(p, tmp_path)
    iss = table(r, "parse_issues")
    assert iss["kind"].to_list() == ["undecodable"] and r.status == "partial"
    assert data.splitlines()[iss["line"][0] - 1].strip().startswith(b'"comm": "pt_')
    assert len(table(r, "events").filter(pl.col("name") == "job_failure")) == 1


def test_binary_garbage_after_the_schema_is_partial_with_the_line(tmp_path):
    p = tmp_path / "aftertrace-manifest.json"
    p.write_bytes(b'{"schema": "aftertrace.collect/1",\n "job": \xff\xfe\x00garbage')
    r = parse(p, tmp_path)
    assert r.status == "partial" and r.error.startswith("the manifest is cut or damaged at line 2 (")
    assert r.records == 0


def test_a_huge_manifest_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest_mod, "MAX_BYTES", 4096)
    r = parse(HANG, tmp_path)
    assert r.status == "failed" and "larger than 4096 bytes" in r.error


def test_a_compressed_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest_mod, "MAX_BYTES", 1 << 20)
    p = tmp_path / "aftertrace-manifest.json.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'{"schema": "aftertrace.collect/1", "notes": ["' + b"x" * (8 << 20) + b'"]}')
    r = parse(p, tmp_path, p.name)
    assert r.status == "failed" and "larger than" in r.error


def test_wrong_types_are_issues_with_path_and_line_and_the_rest_is_read(tmp_path):
    man = json.loads(HANG.read_text())
    man["job"]["exit_code"] = "1"
    man["ranks"]["1"]["pid"] = [28798]
    man["ranks"]["x"] = {"pid": 1}
    man["trigger"]["reasons"].append(5)
    man["processes"][0]["first_seen_ns"] = "soon"
    man["captured"][2]["cgroups"].append({"no": "path"})
    man["captured"][2]["cgroups"].append("cpu/../../etc")
    man["hosts"]["vm"]["boot_id"] = 7
    p = tmp_path / "aftertrace-manifest.json"
    text = json.dumps(man, indent=2)
    p.write_text(text)
    r = parse(p, tmp_path)
    assert r.status == "partial"
    iss = table(r, "parse_issues")
    got = dict(zip(iss["message"], iss["line"]))
    lines = text.splitlines()
    for msg, key in (("job.exit_code: expected int, found str", '"exit_code": "1",'),
                     ("ranks.1.pid: expected int, found list", '"pid": ['),
                     ("ranks.x: a rank is a number", '"x": {'),
                     ("trigger.reasons.2: expected object, found int", "5"),
                     ("processes.0.first_seen_ns: expected int, found str", '"first_seen_ns": "soon",'),
                     ("captured.2.cgroups: expected text, found dict", '"cgroups": ['),
                     ("captured.2.cgroups: not a cgroup path", '"cgroups": ['),
                     ("hosts.vm.boot_id: expected str, found int", '"boot_id": 7,')):
        assert msg in got, (msg, sorted(got))
        assert lines[got[msg] - 1].strip() == key, msg
    ev = table(r, "events")
    job = ev.filter(pl.col("name") == "job_failure")     # exit code unreadable, status still says 1
    assert len(job) == 0 and len(ev.filter(pl.col("name") == "job_ended")) == 1
    assert len(ev.filter(pl.col("name") == "trigger")) == 2
    assert sorted(table(r, "facts").filter(pl.col("key") == "rank_pid")["value"]) == ["0=28797"]


def test_nesting_deeper_than_json_can_follow_is_a_bad_value(tmp_path):
    p = tmp_path / "aftertrace-manifest.json"
    p.write_bytes(b'{"schema": "aftertrace.collect/1", "ranks": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    r = parse(p, tmp_path)
    assert r.status == "partial" and "RecursionError" in r.error


def test_not_an_object_fails_with_the_reason(tmp_path):
    p = tmp_path / "aftertrace-manifest.json"
    p.write_bytes(b'[{"schema": "aftertrace.collect/1"}]')
    r = parse(p, tmp_path)
    assert r.status == "failed" and "the manifest is not a JSON object" in r.error


# -- where the manifests are -----------------------------------------------------------------------
def _files(tmp_path: Path, tree: dict[str, bytes]) -> list[tuple[str, str, int]]:
    out = []
    for rel, data in tree.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        out.append((rel, str(p), len(data)))
    return out


def test_manifests_in_folders_name_paths_relative_to_their_folder(tmp_path):
    a, b = HANG.read_bytes(), OOM.read_bytes()
    m = find_manifests(_files(tmp_path, {"up/node-a/aftertrace-manifest.json": a,
                                         "up/node-b/aftertrace-manifest.json": b,
                                         "up/node-a/vm/dmesg.txt": b"x"}))
    assert m.paths == ["up/node-a/aftertrace-manifest.json", "up/node-b/aftertrace-manifest.json"]
    assert m.hosts == {"vm": ["up/node-a/vm/", "up/node-b/vm/"]}
    assert (m.time_zone, m.time_zone_from, m.notes) == ("UTC", "up/node-a/aftertrace-manifest.json", [])


def test_manifests_too_deep_unsafe_paths_bad_json_and_zone_conflicts_are_noted(tmp_path):
    other = json.dumps({"time_zone": "Europe/Berlin", "hosts": {"n1": {"paths": ["../../etc/", "/abs/", "n1/"]}}})
    m = find_manifests(_files(tmp_path, {
        "aftertrace-manifest.json": HANG.read_bytes(),
        "x/aftertrace-manifest.json": other.encode(),
        "y/aftertrace-manifest.json": b'{"schema": "aftertrace.collect/1", ',
        "z/aftertrace-manifest.json": b"[1, 2]",
        "a/b/c/d/e/aftertrace-manifest.json": HANG.read_bytes()}))
    assert m.paths == ["aftertrace-manifest.json", "x/aftertrace-manifest.json"]
    assert m.hosts == {"vm": ["vm/"], "n1": ["x/n1/"]}
    assert m.time_zone == "UTC"
    assert m.notes == [
        "x/aftertrace-manifest.json: hosts.n1.paths: '../../etc/' is not a path inside the bundle; ignored",
        "x/aftertrace-manifest.json: hosts.n1.paths: '/abs/' is not a path inside the bundle; ignored",
        "x/aftertrace-manifest.json states time zone 'Europe/Berlin', aftertrace-manifest.json states 'UTC': "
        "the first is used",
        "y/aftertrace-manifest.json: not valid JSON (Expecting property name enclosed in double quotes: line 1 "
        "column 36 (char 35)); its hosts and time zone are not used",
        "z/aftertrace-manifest.json: not a JSON object; its hosts and time zone are not used"]


def test_live_captures_are_dated(tmp_path):
    """A bundle written while the job hung (sample_traces/collected-hang-fifo): each capture taken at a
    moment is a ``capture`` event at its time (a trace of some seconds lasts them)."""
    r = parse(ROOT / "sample_traces" / "collected-hang-fifo" / "aftertrace-manifest.json", tmp_path)
    cap = table(r, "events").filter(pl.col("name") == "capture").sort("ts_raw_ns")
    man = json.loads((ROOT / "sample_traces" / "collected-hang-fifo" / "aftertrace-manifest.json").read_text())
    timed = [c for c in man["captured"] if "time_ns" in c]
    assert r.attrs["captures"] == len(timed) == cap.height >= 3
    assert cap["ts_raw_ns"].to_list() == sorted(c["time_ns"] for c in timed)
    strace = cap.filter(pl.col("text").str.starts_with("strace"))
    assert strace["dur_ns"].to_list() == [3_000_000_000] and strace["host"].to_list() == ["vm"]
    assert json.loads(cap["attrs"][0])["path"] == "vm/stacks/"
