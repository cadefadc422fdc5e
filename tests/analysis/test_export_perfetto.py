"""The Perfetto export, decoded with the perfetto package's own protos and checked against the store.

Incidents: the bundled real crash bundle (perf samples, Kineto traces per rank, dmesg, cgroup
metrics, a root-cause chain), a log-only bundle (tables left empty), real Kineto GPU traces
(kernels and copies on streams), a bundle nobody can parse (no rows at all), and a small
incident written straight into a store for what real files rarely hold at once: odd strings,
spans that overlap without nesting, unplaced rows, two hosts using the same pids.

Perfetto's trace processor cannot be downloaded here, so :func:`decode` re-implements what the
checks need of it: interned data resolved per sequence in file order (an iid must be defined
before it is used, on the same sequence, in a packet whose incremental state is valid), slices
rebuilt per track from BEGIN/END after a stable sort by time, stacks resolved from the interned
frames.
"""
from __future__ import annotations

import io
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from aftertrace.analysis.export import NEST_SLACK_NS, perfetto
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings
from aftertrace.server.store import Store

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"
LOGS = ROOT / "sample_traces" / "logs-exception"
KINETO = ROOT / "tests" / "data" / "torch_trace"

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
BEGIN, END, INSTANT, COUNTER = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                                pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER)


# -- fixtures ------------------------------------------------------------------------------------

def _analysed(tmp_path_factory, bundle: Path, name: str):
    svc = Service(Settings.from_env(home=tmp_path_factory.mktemp(name)))
    sub = svc.submit_path(bundle)
    svc.analyze(sub.incident_id)
    return svc.store, sub.incident_id


def _export(store, iid, **kw):
    buf = io.BytesIO()
    stats = perfetto.write(store, iid, buf, **kw)
    return buf.getvalue(), stats


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    store, iid = _analysed(tmp_path_factory, SAMPLE, "sample")
    data, stats = _export(store, iid)
    return store, iid, data, stats, decode(data)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    store, iid = _analysed(tmp_path_factory, LOGS, "logs")
    data, stats = _export(store, iid)
    return store, iid, data, stats, decode(data)


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu-bundle")
    for f in ("hta__sampled_rank-0.excerpt.json.gz", "hta__nccl_data.excerpt.json.gz"):
        shutil.copy(KINETO / f, d / f)
    store, iid = _analysed(tmp_path_factory, d, "gpu")
    data, stats = _export(store, iid)
    return store, iid, data, stats, decode(data)


# -- a decoder standing in for trace processor ---------------------------------------------------

class Decoded:
    def __init__(self):
        self.packets: list[pb.TracePacket] = []
        self.tracks: dict[int, pb.TrackDescriptor] = {}
        self.events: list[dict] = []      # BEGIN / INSTANT / COUNTER, names resolved
        self.ends: list[tuple] = []       # (ts, index, track)
        self.samples: list[dict] = []
        self.slices: list[dict] = []      # rebuilt from BEGIN/END
        self.clock = None

    def name(self, uuid: int) -> str:
        td = self.tracks[uuid]
        return td.name or td.process.process_name or td.thread.thread_name

    def path(self, uuid: int) -> tuple:
        out = []
        while uuid:
            out.append(self.name(uuid))
            uuid = self.tracks[uuid].parent_uuid
        return tuple(reversed(out))

    def by_name(self, name: str) -> list[int]:
        return [u for u in self.tracks if self.name(u) == name]


def _value(a: pb.DebugAnnotation, strings: dict):
    if a.HasField("string_value"):
        return a.string_value
    if a.HasField("string_value_iid"):
        return strings[a.string_value_iid]
    if a.HasField("int_value"):
        return a.int_value
    if a.HasField("double_value"):
        return a.double_value
    if a.HasField("bool_value"):
        return a.bool_value
    if len(a.dict_entries):
        return {e.name: _value(e, strings) for e in a.dict_entries}
    if len(a.array_values):
        return [_value(e, strings) for e in a.array_values]
    raise AssertionError(f"annotation without a value: {a}")


def decode(data: bytes) -> Decoded:
    """Packets in file order, with interning, flags and slice nesting checked on the way."""
    d = Decoded()
    trace = pb.Trace.FromString(data)
    state: dict[int, dict] = {}          # sequence -> interned tables
    seen_seq: set = set()
    for i, p in enumerate(trace.packet):
        d.packets.append(p)
        seq = p.trusted_packet_sequence_id
        assert seq, "every packet names its sequence"
        if seq not in seen_seq:
            seen_seq.add(seq)
            assert p.first_packet_on_sequence and p.sequence_flags & CLEARED, "first packet opens the sequence"
            state[seq] = defaultdict(dict)
        elif p.sequence_flags & CLEARED:
            state[seq] = defaultdict(dict)
        st = state[seq]
        if p.HasField("interned_data"):
            assert p.sequence_flags & NEEDS or p.sequence_flags & CLEARED
            idata = p.interned_data
            for fld in ("event_names", "event_categories", "debug_annotation_names"):
                for e in getattr(idata, fld):
                    assert e.iid not in st[fld], f"{fld} iid {e.iid} defined twice"
                    st[fld][e.iid] = e.name
            for fld in ("debug_annotation_string_values", "function_names", "mapping_paths"):
                for e in getattr(idata, fld):
                    assert e.iid not in st[fld]
                    st[fld][e.iid] = e.str.decode("utf-8")
            for m in idata.mappings:
                st["mappings"][m.iid] = "/".join(st["mapping_paths"][x] for x in m.path_string_ids)
            for f in idata.frames:
                st["frames"][f.iid] = (st["function_names"][f.function_name_id], st["mappings"][f.mapping_id])
            for c in idata.callstacks:
                st["callstacks"][c.iid] = tuple(st["frames"][x] for x in c.frame_ids)
        if p.HasField("clock_snapshot"):
            d.clock = p.clock_snapshot
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid and td.uuid not in d.tracks, "track uuids are unique"
            d.tracks[td.uuid] = td
        if p.HasField("track_event"):
            te = p.track_event
            assert te.track_uuid in d.tracks, "a track's descriptor comes before its events"
            if te.type == END:
                d.ends.append((p.timestamp, i, te.track_uuid))
                continue
            uses = te.HasField("name_iid") or len(te.category_iids) or any(
                a.HasField("name_iid") or a.HasField("string_value_iid") for a in te.debug_annotations)
            if uses:
                assert p.sequence_flags & NEEDS, "packets using interned data say so"
            name = st["event_names"][te.name_iid] if te.HasField("name_iid") else (te.name or None)
            cats = [st["event_categories"][c] for c in te.category_iids] + list(te.categories)
            args = {}
            for a in te.debug_annotations:
                key = st["debug_annotation_names"][a.name_iid] if a.HasField("name_iid") else a.name
                args[key] = _value(a, st["debug_annotation_string_values"])
            ev = {"ts": p.timestamp, "type": te.type, "track": te.track_uuid, "name": name,
                  "cat": cats[0] if cats else None, "args": args, "index": i,
                  "flows": list(te.flow_ids), "terminating_flows": list(te.terminating_flow_ids)}
            if te.type == COUNTER:
                ev["value"] = te.double_counter_value
            d.events.append(ev)
        if p.HasField("perf_sample"):
            ps = p.perf_sample
            if ps.HasField("callstack_iid"):
                assert p.sequence_flags & NEEDS
            frames = st["callstacks"][ps.callstack_iid] if ps.HasField("callstack_iid") else None
            d.samples.append({"ts": p.timestamp, "pid": ps.pid, "tid": ps.tid,
                              "cpu": ps.cpu if ps.HasField("cpu") else None, "frames": frames})
    # slices per track, as trace processor nests them: stable sort by time, END closes the top
    per_track = defaultdict(list)
    for ev in d.events:
        if ev["type"] in (BEGIN, INSTANT):
            per_track[ev["track"]].append((ev["ts"], ev["index"], ev))
    for ts, i, uuid in d.ends:
        per_track[uuid].append((ts, i, None))
    for uuid, items in per_track.items():
        items.sort(key=lambda x: (x[0], x[1]))
        stack = []
        for ts, _i, ev in items:
            if ev is None:
                assert stack, f"END without an open slice on {d.path(uuid)}"
                b = stack.pop()
                d.slices.append({"track": uuid, "ts": b["ts"], "end": ts, "name": b["name"], "ev": b})
            elif ev["type"] == BEGIN:
                if stack:
                    assert ev["ts"] >= stack[-1]["ts"]
                stack.append(ev)
        assert not stack, f"slices left open on {d.path(uuid)}"
    return d


# -- the store's side ------------------------------------------------------------------------------

def q(store, sql, *params):
    return store.cursor().execute(sql, list(params)).fetchall()


def store_spans(store, iid, table="events"):
    return Counter(q(store, f"SELECT ts_utc_ns, dur_ns FROM {table} WHERE incident_id = ? "
                            "AND ts_utc_ns IS NOT NULL AND dur_ns >= 0", iid))


def data_events(d: Decoded) -> list[dict]:
    """BEGIN/INSTANT of the events table (not steps, collectives or findings)."""
    return [e for e in d.events if e["type"] in (BEGIN, INSTANT)
            and e["cat"] not in ("step", "collective", "aftertrace.finding")]


# -- tests on the real sample --------------------------------------------------------------------

def test_track_tree_host_process_thread(sample):
    store, iid, _data, stats, d = sample
    kinds = Counter()
    for uuid, td in d.tracks.items():
        if td.parent_uuid:
            assert td.parent_uuid in d.tracks, "every parent is described"
        if td.HasField("process"):
            kinds["process"] += 1
            parent = d.tracks[td.parent_uuid]
            assert parent.name == "host vm" and not parent.parent_uuid
            assert td.process.process_name.startswith("vm: ")
            assert "host vm" in td.process.process_labels
        elif td.HasField("thread"):
            kinds["thread"] += 1
            proc = d.tracks[td.parent_uuid]
            assert proc.HasField("process") and proc.process.pid == td.thread.pid
    assert kinds["process"] == stats["tracks"]["process"] and kinds["thread"] == stats["tracks"]["thread"]
    assert len(d.tracks) == stats["tracks"]["total"] == stats["packets"]["track_descriptor"]
    # the two ranks, named by rank and pid, with the rank's threads under them
    for rank, pid in ((0, 17988), (1, 17989)):
        (proc,) = d.by_name(f"vm: rank {rank} (pid {pid})")
        assert d.tracks[proc].process.pid == pid
        assert f"rank {rank}" in d.tracks[proc].process.process_labels
        threads = {d.tracks[u].thread.tid for u in d.tracks if d.tracks[u].parent_uuid == proc
                   and d.tracks[u].HasField("thread")}
        assert pid in threads and len(threads) >= 3     # main thread and the gloo threads
        children = {d.name(u) for u in d.tracks if d.tracks[u].parent_uuid == proc}
        assert {"steps (cpu)", "collectives (call)", "collectives (exec)"} <= children
    # host-level: the kernel log as a source track, cgroup counters under the host
    (host,) = d.by_name("host vm")
    children = {d.name(u): d.tracks[u] for u in d.tracks if d.tracks[u].parent_uuid == host}
    assert "vm/dmesg.txt" in children
    counters = {td.name: td for td in children.values() if td.HasField("counter")}
    want = {f"{e} {m} ({u})" if u and u != "-" else f"{e} {m}" for e, m, u in q(store, """
        SELECT DISTINCT m.entity, m.metric, m.unit FROM metrics m JOIN sources s USING (incident_id, source_id)
        WHERE m.incident_id = ? AND s.kind = 'cgroup' AND m.ts_utc_ns IS NOT NULL""", iid)}
    assert want and want <= set(counters)
    assert counters["/aftertrace_job memory.usage_bytes (bytes)"].counter.unit_name == "bytes"
    assert counters["/aftertrace_job cpu.throttled_fraction (fraction)"].counter.unit_name == "fraction"
    # perf samples' threads are real threads of the ranks (perf printed only tids)
    perf_pids = {(s["pid"], s["tid"]) for s in d.samples}
    assert (17988, 17988) in perf_pids and (17988, 17997) in perf_pids


def test_uuids_are_hashes_of_stable_keys(sample):
    from aftertrace.analysis.export import stable_uuid
    _store, _iid, _data, _stats, d = sample
    (proc,) = d.by_name("vm: rank 0 (pid 17988)")
    assert proc == stable_uuid("process", "vm", 17988)
    (host,) = d.by_name("host vm")
    assert host == stable_uuid("host", "vm")


def test_counts_per_table_match_the_store(sample):
    store, iid, _data, stats, d = sample
    kinds = Counter(ev["type"] for ev in d.events)
    n_events, n_spans = q(store, "SELECT COUNT(*), COUNT(*) FILTER (dur_ns >= 0) FROM events "
                                 "WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    (n_steps,), (n_coll,) = (q(store, f"SELECT COUNT(*) FROM {t} WHERE incident_id = ? AND ts_utc_ns IS NOT NULL "
                                      "AND dur_ns >= 0", iid)[0] for t in ("steps", "collectives"))
    (n_metrics,) = q(store, "SELECT COUNT(*) FROM metrics WHERE incident_id = ? AND ts_utc_ns IS NOT NULL "
                            "AND isfinite(value)", iid)[0]
    (n_samples,) = q(store, "SELECT COUNT(*) FROM samples WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    rows = stats["rows"]
    assert rows["events"]["exported"] == n_events and rows["events"]["unplaced"] == 0
    assert rows["events"]["as_instant"] == 0
    assert kinds[BEGIN] == len(d.ends) == n_spans + n_steps + n_coll
    findings = rows["findings"]["findings"] + rows["findings"]["chain_links"]
    assert kinds[INSTANT] == n_events - n_spans + findings
    assert kinds[COUNTER] == n_metrics == rows["metrics"]["exported"]
    assert len(d.samples) == n_samples == rows["samples"]["exported"]
    assert stats["packets"]["total"] == len(d.packets)
    assert stats["bytes"] == len(_data)


def test_spans_keep_their_start_and_duration(sample):
    store, iid, _data, stats, d = sample
    assert stats["rows"]["events"]["clamped"] == 0
    got = Counter((s["ts"], s["end"] - s["ts"]) for s in d.slices
                  if s["ev"]["cat"] not in ("step", "collective"))
    assert got == store_spans(store, iid)
    got_steps = Counter((s["ts"], s["end"] - s["ts"]) for s in d.slices if s["ev"]["cat"] == "step")
    assert got_steps == store_spans(store, iid, "steps")
    # overlapping spans went to overflow lanes, named after their track
    lanes = [u for u in d.tracks if "(overlap " in d.name(u)]
    assert len(lanes) == stats["tracks"]["lane"]


def test_first_and_last_timestamps_are_the_stores(sample):
    store, iid, _data, stats, d = sample
    lo, hi, end = q(store, """
        SELECT MIN(t), MAX(t), MAX(e) FROM (
            SELECT ts_utc_ns AS t, ts_utc_ns + COALESCE(GREATEST(dur_ns, 0), 0) AS e FROM events WHERE incident_id = $1
            UNION ALL SELECT ts_utc_ns, ts_utc_ns FROM samples WHERE incident_id = $1
            UNION ALL SELECT ts_utc_ns, ts_utc_ns FROM metrics WHERE incident_id = $1)""", iid)[0]
    starts = [e["ts"] for e in d.events if e["cat"] != "aftertrace.finding"] + [s["ts"] for s in d.samples]
    assert min(starts) == lo == stats["first_ts_ns"]
    assert max(starts) == hi == stats["last_ts_ns"]
    assert max(t for t, _i, _u in d.ends) <= end
    # the clock snapshot says the timestamps are UTC wall time
    clocks = {c.clock_id: c.timestamp for c in d.clock.clocks}
    assert clocks[pb.BUILTIN_CLOCK_REALTIME] == clocks[pb.BUILTIN_CLOCK_BOOTTIME] == lo


def test_event_annotations(sample):
    store, iid, _data, _stats, d = sample
    (oom,) = [e for e in data_events(d) if e["args"].get("kind") == "oom_kill"
              and e["args"]["source"] == "vm/dmesg.txt"]
    (ts, line, text, severity) = q(store, """
        SELECT ts_utc_ns, line, text, severity FROM events WHERE incident_id = ? AND kind = 'oom_kill'
        AND source_id = (SELECT source_id FROM sources WHERE incident_id = ? AND path = 'vm/dmesg.txt')""",
                                   iid, iid)[0]
    assert oom["ts"] == ts and oom["args"]["line"] == line and oom["args"].get("severity") == severity
    assert oom["args"]["text"] == text and "Killed process 17988" in text
    # the kill is about the victim (events.pid): it shows on the victim's process
    assert d.name(oom["track"]) == "vm: rank 0 (pid 17988)"
    # Kineto args arrive as a dict of their keys
    ops = [e for e in data_events(d) if e["cat"] == "cpu_op" and isinstance(e["args"].get("args"), dict)]
    assert ops and all("External id" in e["args"]["args"] for e in ops[:50])
    assert all(e["args"]["source"].startswith("vm/profiler/") for e in ops)


def test_samples_resolve_to_the_stores_frames(sample):
    store, iid, _data, stats, d = sample
    rows = q(store, """
        WITH RECURSIVE up(source_id, leaf, node, depth, frame, dso) AS (
            SELECT s.source_id, s.stack_id, s.stack_id, 0, k.frame, k.dso
            FROM (SELECT DISTINCT source_id, stack_id FROM samples WHERE incident_id = $1 AND stack_id IS NOT NULL) s
            JOIN stacks k ON k.incident_id = $1 AND k.source_id = s.source_id AND k.stack_id = s.stack_id
            UNION ALL
            SELECT up.source_id, up.leaf, k.parent_id, up.depth + 1, p.frame, p.dso
            FROM up JOIN stacks k ON k.incident_id = $1 AND k.source_id = up.source_id AND k.stack_id = up.node
            JOIN stacks p ON p.incident_id = $1 AND p.source_id = up.source_id AND p.stack_id = k.parent_id)
        SELECT source_id, leaf, list(frame ORDER BY depth DESC), list(dso ORDER BY depth DESC) FROM up GROUP BY ALL""",
             iid)
    paths = {(sid, leaf): tuple(frames) for sid, leaf, frames, _dsos in rows}
    dsos = {(sid, leaf): tuple(ds) for sid, leaf, _f, ds in rows}
    want = Counter()
    for ts, sid, tid, stack_id in q(store, "SELECT ts_utc_ns, source_id, tid, stack_id FROM samples "
                                           "WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid):
        want[(ts, tid, paths.get((sid, stack_id)))] += 1
    got = Counter((s["ts"], s["tid"], tuple(f for f, _m in s["frames"]) if s["frames"] else None)
                  for s in d.samples)
    assert got == want
    # mappings carry the DSO path (root frame first, like the store's depth 0)
    s = next(s for s in d.samples if s["frames"] and len(s["frames"]) > 3)
    leaf = next(k for k, v in paths.items() if v == tuple(f for f, _m in s["frames"]))
    assert [m.strip("/") for _f, m in s["frames"]] == [(x or "").strip("/") for x in dsos[leaf]]
    assert stats["rows"]["samples"]["interned_callstacks"] == len({s["frames"] for s in d.samples if s["frames"]})


def test_samples_sequence_interning_flags(sample):
    _store, _iid, _data, _stats, d = sample
    seqs = {p.trusted_packet_sequence_id for p in d.packets if p.HasField("perf_sample")}
    events_seqs = {p.trusted_packet_sequence_id for p in d.packets if p.HasField("track_event")}
    assert len(seqs) == 1 and seqs.isdisjoint(events_seqs)
    first = next(p for p in d.packets if p.HasField("perf_sample"))
    assert first.first_packet_on_sequence and first.sequence_flags == CLEARED | NEEDS
    assert len(first.interned_data.callstacks) == 1 and len(first.interned_data.frames) >= 1


def test_findings_and_chains(sample):
    store, iid, _data, stats, d = sample
    rep = json.loads(q(store, "SELECT report FROM incidents WHERE incident_id = ?", iid)[0][0])
    (root,) = d.by_name("aftertrace findings")
    on_root = [e for e in d.events if e["track"] == root]
    placed = [a for a in rep["anomalies"] if a.get("ts") is not None]
    extra_failure = rep["failure"] is not None and not any(
        a["kind"] == rep["failure"]["kind"] and a["ts"] == rep["failure"]["ts"] for a in placed)
    assert len(on_root) == len(placed) + extra_failure == stats["rows"]["findings"]["findings"]
    oom = next(e for e in on_root if e["name"] == "oom_kill")
    a = next(a for a in placed if a["kind"] == "oom_kill")
    assert oom["ts"] == round(a["ts"] * 1e9)
    assert oom["args"]["summary"] == a["summary"]
    assert [(x["source"], x["line"]) for x in oom["args"]["evidence"]] == [(x["source"], x["line"])
                                                                           for x in a["evidence"]]
    # one track per chain, its links in order, joined by one flow that ends at the failure
    chain = rep["chains"][0]
    (ct,) = [u for u in d.tracks if d.tracks[u].parent_uuid == root]
    assert d.name(ct).startswith(f"chain 1: {chain['origin']}")
    links = [e for e in d.events if e["track"] == ct]
    assert [e["name"] for e in links] == [x["kind"] for x in chain["links"]]
    assert [e["ts"] for e in links] == [round(x["ts"] * 1e9) for x in chain["links"]]
    assert len({f for e in links for f in e["flows"] + e["terminating_flows"]}) == 1
    assert links[-1]["terminating_flows"] and all(e["flows"] for e in links[:-1])
    assert links[1]["args"]["because"] == chain["edges"][0]["because"]


def test_same_incident_same_bytes(sample):
    store, iid, data, _stats, _d = sample
    again, _ = _export(store, iid)
    assert again == data


def test_windowed_reads_give_the_same_bytes(sample, monkeypatch):
    import aftertrace.analysis.export as X
    store, iid, data, _stats, _d = sample
    monkeypatch.setattr(X, "WINDOW_ROWS", 4000)     # ~17 windows of events, 3 of metrics
    assert len(X._windows(store.cursor(), "events", iid, X.WINDOW_ROWS)) > 10
    again, _ = _export(store, iid)
    assert again == data


def test_progress_reaches_the_total(sample):
    store, iid, _data, _stats, _d = sample
    calls = []
    _export(store, iid, progress=lambda done, total: calls.append((done, total)))
    assert calls and all(0 < done <= total for done, total in calls)
    assert calls[-1][0] == calls[-1][1] and [c[0] for c in calls] == sorted(c[0] for c in calls)


# -- other incidents -------------------------------------------------------------------------------

def test_log_only_incident_with_empty_tables(logs):
    store, iid, _data, stats, d = logs
    for t in ("samples", "stacks", "collectives", "steps"):
        assert q(store, f"SELECT COUNT(*) FROM {t} WHERE incident_id = ?", iid)[0][0] == 0
    assert not d.samples and stats["rows"]["samples"]["exported"] == 0
    assert "perf_sample" not in stats["packets"]
    (n,) = q(store, "SELECT COUNT(*) FROM events WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    assert len(data_events(d)) == n > 0
    (nm,) = q(store, "SELECT COUNT(*) FROM metrics WHERE incident_id = ? AND ts_utc_ns IS NOT NULL", iid)[0]
    assert sum(e["type"] == COUNTER for e in d.events) == nm
    # multi-line evidence (a traceback) survives as it is
    tb = [e for e in data_events(d) if "\n" in (e["args"].get("text") or "")]
    assert tb


def test_incident_without_rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("nothing")
    (d / "notes.txt").write_text("nothing any parser claims\n")
    store, iid = _analysed(tmp_path_factory, d, "nothing-home")
    data, stats = _export(store, iid)
    dec = decode(data)
    assert [p.HasField("clock_snapshot") for p in dec.packets] == [True]
    assert stats["first_ts_ns"] is None and stats["time_range_ns"] is None
    assert stats["rows"]["events"]["exported"] == 0 and stats["tracks"]["total"] == 0


def test_unknown_incident_is_an_error(sample):
    store = sample[0]
    with pytest.raises(KeyError):
        _export(store, "nope")


def test_gpu_activity_on_stream_tracks(gpu):
    store, iid, _data, stats, d = gpu
    want = Counter(q(store, """
        SELECT 'GPU ' || json_extract_string(attrs, '$.device') || ' stream ' || json_extract_string(attrs, '$.stream')
        FROM events WHERE incident_id = ? AND category IN ('kernel', 'gpu_memcpy', 'gpu_memset')
              AND ts_utc_ns IS NOT NULL""", iid))
    assert len(want) >= 2                       # compute and NCCL streams
    got = Counter()
    for e in data_events(d):
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            path = d.path(e["track"])
            stream = next(x for x in path if x.startswith("GPU "))
            got[(stream,)] += 1
            assert d.tracks[d.tracks[e["track"]].parent_uuid].HasField("process") or "(overlap" in path[-1]
    assert got == Counter({(k[0],): v for k, v in want.items()})
    # GPU streams sit under the rank's process, next to its CPU threads
    for u, td in d.tracks.items():
        if td.name.startswith("GPU "):
            assert d.tracks[td.parent_uuid].HasField("process")
            assert td.sibling_merge_behavior == pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
    spans = Counter((s["ts"], s["end"] - s["ts"]) for s in d.slices if s["ev"]["cat"] not in ("step", "collective"))
    clamped = stats["rows"]["events"]["clamped"]
    if clamped == 0:
        assert spans == store_spans(store, iid)
    else:   # each clamped span is shortened by at most the slack, and says how long it really was
        odd = [s for s in d.slices if "dur_ns" in s["ev"]["args"]]
        assert len(odd) == clamped
        assert all(0 < s["ev"]["args"]["dur_ns"] - (s["end"] - s["ts"]) <= NEST_SLACK_NS for s in odd)


# -- a hand-made incident: odd strings, overlaps, unplaced rows, two hosts with the same pids ------

T0 = 1_795_958_900_000_000_000
ODD_NAME = 'say "hi"\n\tthere \\ ünï 日本 🚀'
ODD_TEXT = 'line one "quoted" \\ back\nline two \x00\x1b\x7f ünïcødé — 日本語 🚀 <b>&amp;</b>\r\nend'
ODD_ATTRS = json.dumps({"k": 'v"\n', "n": 1, "f": 1.5, "b": True, "big": 2 ** 70, "nested": {"x": [1, 2]},
                        "é": "ü"})


def make_incident(store: Store, iid: str = "odd0000000001") -> str:
    rep = {"schema": "aftertrace.report/1", "anomalies": [
        {"ts": (T0 + 5_000) / 1e9, "kind": "python_exception", "host": "a", "rank": 0, "pid": 100,
         "source": "a/app.log", "summary": ODD_NAME,
         "evidence": [{"source": "a/app.log", "line": 7, "text": ODD_TEXT}]},
        {"ts": None, "kind": "clock_skew", "summary": "no time", "evidence": []}],
        "failure": None, "chains": []}
    store.insert_rows("incidents", [{"incident_id": iid, "bundle_sha256": "0" * 64, "status": "done",
                                     "report": json.dumps(rep)}])
    src = [dict(source_id=1, path="a/app.log", kind="app_log", host="a", rank=0, pid=100),
           dict(source_id=2, path="b/app.log", kind="app_log", host="b", rank=1, pid=100),
           dict(source_id=3, path="a/rank0.pt.trace.json", kind="torch_trace", host="a", rank=0, pid=100),
           dict(source_id=4, path="a/dmesg.txt", kind="dmesg", host="a"),
           dict(source_id=5, path="a/perf.txt", kind="perf_script", host="a")]
    store.insert_rows("sources", [dict(s, incident_id=iid, status="parsed") for s in src])
    ev = [
        # thread (a, 100, 101): A [1000, 2000] with child C, B overlapping A without nesting, D overshooting A
        dict(source_id=1, tid=101, ts=1000, dur=1000, name="A", category="span"),
        dict(source_id=1, tid=101, ts=1100, dur=100, name="C", category="span"),
        dict(source_id=1, tid=101, ts=1500, dur=2000, name="B", category="span"),
        dict(source_id=1, tid=101, ts=1950, dur=350, name="D", category="span"),
        dict(source_id=1, tid=101, ts=3000, dur=None, name=ODD_NAME, category="log", kind="python_exception",
             severity="error", line=7, text=ODD_TEXT, attrs=ODD_ATTRS),
        dict(source_id=1, tid=101, ts=3100, dur=None, name="not json", attrs="{broken", text="x" * 700),
        dict(source_id=1, tid=101, ts=None, dur=None, name="unplaced"),
        dict(source_id=1, tid=101, ts=-T0 - 5, dur=None, name="before 1970"),     # a broken clock: unplaced too
        # host b, same pid and tid numbers
        dict(source_id=2, pid=100, tid=101, ts=1000, dur=500, name="on b", category="span"),
        # GPU activity: pid/tid NULL, device and stream in attrs; an annotation without them
        dict(source_id=3, ts=1200, dur=300, name="kernel 1", category="kernel",
             attrs=json.dumps({"device": 0, "stream": 7})),
        dict(source_id=3, ts=1400, dur=300, name="kernel 2", category="kernel",
             attrs=json.dumps({"device": 0, "stream": 7})),
        dict(source_id=3, ts=1300, dur=50, name="copy", category="gpu_memcpy",
             attrs=json.dumps({"device": 0, "stream": 20})),
        dict(source_id=3, ts=1100, dur=900, name="ProfilerStep#1", category="gpu_user_annotation", attrs="{}"),
        # a kernel log line: no process
        dict(source_id=4, ts=2500, dur=None, name="oom", category="kernel", kind="oom_kill", text="Killed process 100"),
    ]
    store.insert_rows("events", [dict(incident_id=iid, source_id=e["source_id"], pid=e.get("pid"), tid=e.get("tid"),
                                      ts_utc_ns=None if e["ts"] is None else T0 + e["ts"], dur_ns=e["dur"],
                                      name=e["name"], category=e.get("category"), kind=e.get("kind"),
                                      severity=e.get("severity"), line=e.get("line"), text=e.get("text"),
                                      attrs=e.get("attrs")) for e in ev])
    store.insert_rows("metrics", [
        dict(incident_id=iid, source_id=1, entity="rank 0", metric="loss", ts_utc_ns=T0 + 1000, value=2.5, unit="-"),
        dict(incident_id=iid, source_id=1, entity="rank 0", metric="loss", ts_utc_ns=T0 + 2000,
             value=float("nan"), unit="-"),
        dict(incident_id=iid, source_id=4, entity="/job", metric="memory.current", ts_utc_ns=T0 + 1500, value=1e9,
             unit="bytes"),
        dict(incident_id=iid, source_id=4, entity="/job", metric="memory.current", ts_utc_ns=None, value=1.0,
             unit="bytes")])
    store.insert_rows("stacks", [
        dict(incident_id=iid, source_id=5, stack_id=0, parent_id=None, frame="main", dso="/usr/bin/python3", depth=0),
        dict(incident_id=iid, source_id=5, stack_id=1, parent_id=0, frame='f"quoted"\n', dso="/usr/bin/python3",
             depth=1),
        dict(incident_id=iid, source_id=5, stack_id=2, parent_id=1, frame="ünï::g<int>", dso="[kernel.kallsyms]",
             depth=2)])
    store.insert_rows("samples", [
        dict(incident_id=iid, source_id=5, tid=101, cpu=1, comm="trainer", ts_utc_ns=T0 + 1050, event="cpu-clock",
             period=1, stack_id=2),
        dict(incident_id=iid, source_id=5, tid=101, cpu=1, comm="trainer", ts_utc_ns=T0 + 1060, event="cpu-clock",
             period=1, stack_id=1),
        dict(incident_id=iid, source_id=5, tid=555, cpu=0, comm="other", ts_utc_ns=T0 + 1070, event="cpu-clock",
             period=1, stack_id=None),
        dict(incident_id=iid, source_id=5, tid=101, cpu=1, comm="trainer", ts_utc_ns=None, event="cpu-clock",
             period=1, stack_id=2)])
    return iid


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("odd") / "odd.duckdb")
    iid = make_incident(store)
    data, stats = _export(store, iid)
    return store, iid, data, stats, decode(data)


def test_odd_strings_survive(odd):
    _store, _iid, _data, _stats, d = odd
    (e,) = [e for e in d.events if e["name"] == ODD_NAME and e["cat"] == "log"]
    assert e["args"]["text"] == ODD_TEXT and e["args"]["kind"] == "python_exception"
    assert e["args"]["severity"] == "error" and e["args"]["line"] == 7
    args = e["args"]["args"]
    assert args["k"] == 'v"\n' and args["n"] == 1 and args["f"] == 1.5 and args["b"] is True
    assert args["big"] == pytest.approx(2 ** 70)      # orjson reads integers past 64 bits as doubles
    assert json.loads(args["nested"]) == {"x": [1, 2]} and args["é"] == "ü"
    (bad,) = [e for e in d.events if e["name"] == "not json"]
    assert bad["args"]["args"] == "{broken" and bad["args"]["text"] == "x" * 500 + "\u2026"
    (f,) = [e for e in d.events if e["cat"] == "aftertrace.finding"]
    assert f["args"]["summary"] == ODD_NAME and f["args"]["evidence"][0]["text"] == ODD_TEXT
    frames = {s["frames"] for s in d.samples if s["frames"]}
    assert (("main", "usr/bin/python3"), ('f"quoted"\n', "usr/bin/python3"),
            ("ünï::g<int>", "[kernel.kallsyms]")) in frames


def test_overlaps_go_to_lanes_and_clamps_are_bounded(odd):
    _store, _iid, _data, stats, d = odd
    by_name = {s["name"]: s for s in d.slices}
    a, b, c, dd = by_name["A"], by_name["B"], by_name["C"], by_name["D"]
    thread = a["track"]
    assert d.tracks[thread].HasField("thread") and d.tracks[thread].thread.tid % (1 << 22) == 101   # (remapped)
    assert c["track"] == thread and dd["track"] == thread
    assert b["track"] != thread and d.tracks[b["track"]].parent_uuid == thread
    assert d.name(b["track"]).endswith("(overlap 1)")
    assert (b["ts"] - T0, b["end"] - T0) == (1500, 3500)
    assert (dd["ts"] - T0, dd["end"] - T0) == (1950, 2000) and dd["ev"]["args"]["dur_ns"] == 350
    # D, and "kernel 2", which starts 100 ns before "kernel 1" ends on the same stream
    assert stats["rows"]["events"]["clamped"] == 2 and stats["rows"]["events"]["overflowed"] == 1


def test_gpu_tracks_hosts_and_unplaced_rows(odd):
    _store, _iid, _data, stats, d = odd
    (proc_a,) = d.by_name("a: rank 0 (pid 100)")
    (proc_b,) = d.by_name("b: rank 1 (pid 100)")
    pa, pb_ = d.tracks[proc_a].process.pid, d.tracks[proc_b].process.pid
    assert stats["pids_remapped"] and pa != pb_ and pa % (1 << 22) == pb_ % (1 << 22) == 100
    assert d.name(d.tracks[proc_a].parent_uuid) == "host a" and d.name(d.tracks[proc_b].parent_uuid) == "host b"
    gpu = {d.name(u): u for u in d.tracks if d.name(u).startswith("GPU ")}
    assert set(gpu) == {"GPU 0 stream 7", "GPU 0 stream 20", "GPU annotations"}
    assert all(d.tracks[u].parent_uuid == proc_a for u in gpu.values())
    kernels = [s for s in d.slices if s["name"].startswith("kernel")]
    assert {d.name(s["track"]) for s in kernels} == {"GPU 0 stream 7"}       # overlapping: clamped/nested
    (dmesg,) = d.by_name("a/dmesg.txt")
    assert d.tracks[dmesg].parent_uuid == d.by_name("host a")[0]
    assert [e["name"] for e in d.events if e["track"] == dmesg] == ["oom"]
    rows = stats["rows"]
    assert rows["events"]["unplaced"] == 2 and rows["metrics"]["unplaced"] == 1
    assert not [e for e in d.events if e["name"] in ("unplaced", "before 1970")]
    assert rows["metrics"]["skipped_values"] == 1 and rows["samples"]["unplaced"] == 1
    assert rows["findings"] == {"findings": 1, "chain_links": 0, "unplaced": 1}
    # the sample of tid 101 lands in process 100 (paired by the log rows), the unknown tid in its own
    th = {(s["pid"] % (1 << 22), s["tid"] % (1 << 22)) for s in d.samples}
    assert th == {(100, 101), (555, 555)}
    counters = {d.name(u): d.tracks[u] for u in d.tracks if d.tracks[u].HasField("counter")}
    assert set(counters) == {"rank 0 loss", "/job memory.current (bytes)"}
    assert counters["rank 0 loss"].parent_uuid == proc_a
