"""The Chrome trace JSON export, read back with ``json.load`` and checked against the store.

Incidents: the bundled real crash bundle (analysed once for the module), a bundle nobody can
parse (no rows: the JSON must still be valid), and a small incident written straight into a
store with odd strings, spans that overlap without nesting and two hosts using the same pids.
"""
from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from aftertrace.analysis.export import chrome
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.server.store import Store

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"


def _analysed(tmp_path_factory, bundle: Path, name: str):
    svc = Service(Settings.from_env(home=tmp_path_factory.mktemp(name)))
    sub = svc.submit_path(bundle)
    svc.analyze(sub.incident_id)
    return svc.store, sub.incident_id


def _export(store, iid, **kw):
    buf = io.BytesIO()
    stats = chrome.write(store, iid, buf, **kw)
    return buf.getvalue(), stats


def load(data: bytes) -> dict:
    """The JSON with every number as it was written (Decimal: no rounding to doubles)."""
    return json.loads(data, parse_float=Decimal)


def ns(x: Decimal) -> int:
    v = x * 1000
    assert v == v.to_integral_value(), f"{x} has more than three decimals"
    return int(v)


def q(store, sql, *params):
    return store.cursor().execute(sql, list(params)).fetchall()


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    store, iid = _analysed(tmp_path_factory, SAMPLE, "sample")
    data, stats = _export(store, iid)
    return store, iid, data, stats, load(data)


def names(doc: dict):
    """(process names by pid, thread names by (pid, tid)) from the M events."""
    procs, threads = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


def data_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] in ("X", "i")
            and e.get("cat") not in ("step", "collective", "aftertrace.finding")]


def test_one_event_per_line_and_valid_json(sample):
    _store, _iid, data, stats, doc = sample
    assert data.startswith(b'{"displayTimeUnit":"ns"') and data.endswith(b"}}\n")
    lines = data.split(b"\n")
    n_items = len(doc["traceEvents"]) + len(doc["samples"]) + len(doc["stackFrames"])
    # the header line, the two section lines, the closing line and the empty rest after the final newline
    assert len(lines) == n_items + 5 and lines[-1] == b"" and lines[-2] == b"}}"
    assert json.loads(data) == json.loads(data.decode("utf-8"))
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["incident_id"] == _iid
    assert stats["bytes"] == len(data)


def test_counts_per_phase_match_the_store(sample):
    store, iid, _data, stats, doc = sample
    ph = Counter(e["ph"] for e in doc["traceEvents"])
    n_events, n_spans = q(store, "SELECT COUNT(*), COUNT(*) FILTER (dur_ns >= 0) FROM events "
                                 "WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    (n_steps,), (n_coll,) = (q(store, f"SELECT COUNT(*) FROM {t} WHERE incident_id = ? AND ts_utc_ns IS NOT NULL "
                                      "AND dur_ns >= 0", iid)[0] for t in ("steps", "collectives"))
    (n_metrics,) = q(store, "SELECT COUNT(*) FROM metrics WHERE incident_id = ? AND ts_utc_ns IS NOT NULL "
                            "AND isfinite(value)", iid)[0]
    (n_samples,) = q(store, "SELECT COUNT(*) FROM samples WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    findings = stats["rows"]["findings"]["findings"] + stats["rows"]["findings"]["chain_links"]
    assert findings > 0
    assert ph["X"] == n_spans + n_steps + n_coll
    assert ph["i"] == n_events - n_spans + findings
    assert ph["C"] == n_metrics
    assert len(doc["samples"]) == n_samples
    assert {k: v for k, v in stats["events"].items() if k != "total"} == dict(ph)
    assert stats["rows"]["events"]["exported"] == n_events


def test_times_are_the_aligned_utc_nanoseconds(sample):
    store, iid, _data, _stats, doc = sample
    got = Counter()
    for e in data_events(doc):
        got[(ns(e["ts"]), ns(e["dur"]) if e["ph"] == "X" else None)] += 1
    want = Counter((ts, dur if dur is not None and dur >= 0 else None) for ts, dur in q(
        store, "SELECT ts_utc_ns, dur_ns FROM events WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid))
    assert got == want
    samples = Counter(ns(s["ts"]) for s in doc["samples"])
    assert samples == Counter(t for (t,) in q(store, "SELECT ts_utc_ns FROM samples WHERE incident_id = ? "
                                                     "AND ts_utc_ns IS NOT NULL", iid))
    # a reader that parses the numbers as doubles lands within a quarter microsecond
    plain = json.loads(_data)
    e0 = next(e for e in plain["traceEvents"] if e["ph"] == "X")
    e0d = next(e for e in doc["traceEvents"] if e["ph"] == "X")
    assert abs(e0["ts"] * 1000 - ns(e0d["ts"])) <= 250


def test_metadata_names_hosts_ranks_and_sources(sample):
    _store, _iid, _data, _stats, doc = sample
    procs, threads = names(doc)
    assert "host vm" in procs.values()
    assert procs[17988] == "vm: rank 0 (pid 17988)" and procs[17989] == "vm: rank 1 (pid 17989)"
    assert threads[(17988, 17988)] == "python3 17988"
    assert threads[(17988, 17997)].startswith("pt_gloo_runloop")       # a gloo thread of rank 0
    host_pid = next(p for p, n in procs.items() if n == "host vm")
    host_threads = {n for (p, _t), n in threads.items() if p == host_pid}
    assert "vm/dmesg.txt" in host_threads
    labels = {e["pid"]: e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"}
    assert labels[17988] == "host vm,rank 0"
    # every drawn event sits on a named process and thread
    for e in doc["traceEvents"]:
        if e["ph"] in ("X", "i"):
            assert e["pid"] in procs and (e["pid"], e["tid"]) in threads
        elif e["ph"] == "C":
            assert e["pid"] in procs
    # metrics are counters named after entity and metric, one series named by the unit
    mem = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "/aftertrace_job memory.usage_bytes"]
    assert mem and all(list(e["args"]) == ["bytes"] and e["pid"] == host_pid for e in mem)


def test_spans_nest_on_each_thread(sample):
    _store, _iid, _data, stats, doc = sample
    per = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            per[(e["pid"], e["tid"])].append((ns(e["ts"]), -ns(e["dur"])))
    for key, spans in per.items():
        spans.sort()
        stack = []
        for ts, neg in spans:
            end = ts - neg
            while stack and stack[-1] <= ts:
                stack.pop()
            assert not stack or end <= stack[-1], f"{key}: a span that does not nest"
            stack.append(end)
    procs, threads = names(doc)
    assert sum("(overlap" in n for n in threads.values()) == stats["tracks"]["lane"]


def test_samples_resolve_through_stack_frames(sample):
    store, iid, _data, _stats, doc = sample
    frames = doc["stackFrames"]

    def path(sf):
        out = []
        while sf is not None:
            out.append(frames[sf]["name"])
            sf = frames[sf].get("parent")
        return tuple(reversed(out))

    rows = q(store, "SELECT source_id, stack_id, parent_id, frame FROM stacks WHERE incident_id = ?", iid)
    node = {(s, k): (p, f) for s, k, p, f in rows}

    def store_path(sid, k):
        out = []
        while k is not None:
            p, f = node[(sid, k)]
            out.append(f)
            k = p
        return tuple(reversed(out))

    want = Counter((ts, tid, store_path(sid, k) if k is not None else None) for ts, sid, tid, k in q(
        store, "SELECT ts_utc_ns, source_id, tid, stack_id FROM samples WHERE incident_id = ? "
               "AND ts_utc_ns IS NOT NULL", iid))
    got = Counter((ns(s["ts"]), s["tid"], path(s["sf"]) if "sf" in s else None) for s in doc["samples"])
    assert got == want
    assert len(frames) == len(rows)
    assert all(s["weight"] > 0 and s["name"] == "cpu-clock" for s in doc["samples"])


def test_findings_on_their_own_process(sample):
    store, iid, _data, _stats, doc = sample
    rep = json.loads(q(store, "SELECT report FROM incidents WHERE incident_id = ?", iid)[0][0])
    procs, threads = names(doc)
    fpid = next(p for p, n in procs.items() if n == "aftertrace findings")
    fs = [e for e in doc["traceEvents"] if e.get("cat") == "aftertrace.finding"]
    assert fs and all(e["pid"] == fpid and e["ph"] == "i" for e in fs)
    chain = rep["chains"][0]
    links = [e for e in fs if threads[(e["pid"], e["tid"])].startswith("chain 1:")]
    assert [e["name"] for e in links] == [x["kind"] for x in chain["links"]]
    assert [ns(e["ts"]) for e in links] == [round(x["ts"] * 1e9) for x in chain["links"]]
    assert links[-1]["args"]["evidence"][0]["source"] == chain["links"][-1]["evidence"][0]["source"]


def test_same_incident_same_bytes(sample):
    store, iid, data, _stats, _doc = sample
    calls = []
    again, _ = _export(store, iid, progress=lambda d, t: calls.append((d, t)))
    assert again == data
    assert calls[-1][0] == calls[-1][1] and all(d <= t for d, t in calls)


def test_empty_incident_is_valid_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("nothing")
    (d / "notes.txt").write_text("nothing any parser claims\n")
    store, iid = _analysed(tmp_path_factory, d, "nothing-home")
    data, stats = _export(store, iid)
    doc = json.loads(data)
    assert doc["traceEvents"] == [] and doc["samples"] == [] and doc["stackFrames"] == {}
    assert stats["events"]["total"] == 0 and stats["time_range_ns"] is None


# -- a hand-made incident ------------------------------------------------------------------------

T0 = 1_795_958_900_000_000_000
ODD_NAME = 'say "hi"\n\tthere \\ ünï 日本 🚀'
ODD_TEXT = 'line one "quoted" \\ back\nline two \x00\x1b\x7f ünïcødé — 日本語 🚀 </script>\r\nend'
ODD_ATTRS = json.dumps({"k": 'v"\n', "n": 1, "nested": {"x": [1, 2.5]}, "é": "ü"}, ensure_ascii=False)


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("odd") / "odd.duckdb")
    iid = "odd0000000002"
    store.insert_rows("incidents", [{"incident_id": iid, "bundle_sha256": "0" * 64, "status": "done",
                                     "report": None}])
    store.insert_rows("sources", [
        dict(incident_id=iid, source_id=1, path='a/"odd" ünï.log', kind="app_log", host="a", rank=0, pid=100,
             status="parsed"),
        dict(incident_id=iid, source_id=2, path="b/app.log", kind="app_log", host="b", rank=1, pid=100,
             status="parsed")])
    rows = [dict(source_id=1, tid=101, ts=1000, dur=1000, name="A"),
            dict(source_id=1, tid=101, ts=1500, dur=2000, name="B"),          # overlaps A without nesting
            dict(source_id=1, tid=101, ts=1600, dur=100, name="C"),           # nests in A
            dict(source_id=1, tid=101, ts=4000, dur=None, name=ODD_NAME, text=ODD_TEXT, attrs=ODD_ATTRS,
                 category='c"at'),
            dict(source_id=1, tid=101, ts=4100, dur=None, name="broken", attrs='{"a": NaN'),
            dict(source_id=1, tid=101, ts=None, dur=None, name="unplaced"),
            dict(source_id=2, tid=101, ts=900, dur=50, name="on b")]
    store.insert_rows("events", [dict(incident_id=iid, source_id=r["source_id"], tid=r["tid"],
                                      ts_utc_ns=None if r["ts"] is None else T0 + r["ts"], dur_ns=r["dur"],
                                      name=r["name"], text=r.get("text"), attrs=r.get("attrs"),
                                      category=r.get("category")) for r in rows])
    data, stats = _export(store, iid)
    return store, iid, data, stats, load(data)


def test_odd_strings_survive(odd):
    _store, _iid, data, _stats, doc = odd
    (e,) = [e for e in doc["traceEvents"] if e.get("name") == ODD_NAME]
    assert e["args"]["text"] == ODD_TEXT and e["cat"] == 'c"at'
    assert e["args"]["source"] == 'a/"odd" ünï.log'
    assert e["args"]["args"] == json.loads(ODD_ATTRS, parse_float=Decimal)     # the stored JSON, unchanged
    assert ns(e["ts"]) == T0 + 4000
    (b,) = [e for e in doc["traceEvents"] if e.get("name") == "broken"]
    assert b["args"]["args"] == '{"a": NaN'
    assert "日本語".encode() in data and b"\\u0000" in data           # UTF-8 as is, control characters escaped


def test_overlap_lanes_and_hosts(odd):
    _store, _iid, _data, stats, doc = odd
    procs, threads = names(doc)
    ev = {e["name"]: e for e in doc["traceEvents"] if e["ph"] in ("X", "i")}
    a, b, c = ev["A"], ev["B"], ev["C"]
    assert (a["pid"], a["tid"]) == (c["pid"], c["tid"]) and a["tid"] % (1 << 22) == 101
    assert b["pid"] == a["pid"] and b["tid"] != a["tid"]
    assert threads[(b["pid"], b["tid"])].endswith("(overlap 1)")
    assert (ns(b["ts"]) - T0, ns(b["dur"])) == (1500, 2000)
    # two hosts, one pid: two processes, each named with the real pid
    assert stats["pids_remapped"]
    assert procs[a["pid"]] == "a: rank 0 (pid 100)" and procs[ev["on b"]["pid"]] == "b: rank 1 (pid 100)"
    assert a["pid"] != ev["on b"]["pid"]
    assert stats["rows"]["events"]["unplaced"] == 1 and stats["rows"]["events"]["exported"] == 6
