"""The timeline's JSON twin over the real sample: lanes, aggregation when dense, metrics, chain marks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aftertrace.server.app import create_app
from aftertrace.server.settings import Settings

LOCAL = "http://127.0.0.1:8000"   # (the server answers to its own names only: the address it listens on)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, AFTERTRACE_HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "aftertrace.server.cli", "analyze", str(ROOT / "sample_traces" / "oom-after-throttle"),
                        "--json", str(home / "r.json")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    iid = json.loads((home / "r.json").read_text())["incident"]["id"]
    with TestClient(create_app(Settings.from_env(home=home)), base_url=LOCAL) as c:
        yield c, iid


def _track(d, host, rank, label):
    return next(t for t in d["tracks"] if t["host"] == host and t["rank"] == rank and t["label"] == label)


def test_default_window_spans_the_chain_and_the_tracks_group_host_rank_thread(client):
    c, iid = client
    d = c.get(f"/api/incidents/{iid}/timeline").json()
    # 30 s before the origin (the throttle at 13:28:24.409) to 15 s after the failure (13:28:56.147)
    # (the report's times are float seconds: equal to the microsecond)
    assert abs(d["start_ns"] - 1795958874_409226000) < 1000 and abs(d["end_ns"] - 1795958951_147000000) < 1000
    assert d["origin_epoch_ns"] == str(d["origin_ns"]) and d["default_window"][0] == d["start_ns"] - d["origin_ns"]
    tracks = d["tracks"]
    assert [t["id"] for t in tracks] == list(range(len(tracks)))
    # each rank: its profiler's threads (all its trace files as one), then its log lines
    rank0 = [t["label"] for t in tracks if t["rank"] == 0]
    assert rank0 == ["profiler steps", "main thread 17988", "thread 17997", "thread 17999", "torchrun.log",
                     "stderr.log"]
    main = _track(d, "vm", 0, "main thread 17988")
    assert main["kind"] == "torch_trace" and main["pid"] == main["tid"] == 17988 and main["spans"] > 5000
    # one perf recording: one track per thread, named by its command, none split by rank
    perf = [t for t in tracks if t["kind"] == "perf_script"]
    assert all(t["rank"] is None for t in perf) and len({t["tid"] for t in perf}) == len(perf)
    assert _track(d, "vm", None, "python3 17988")["n"] > 7000
    dmesg = _track(d, "vm", None, "dmesg.txt")
    assert dmesg["path"] == "vm/dmesg.txt" and dmesg["typed"] == 1 and dmesg["clock"]["domain"] == "boot"
    # by default every track with a finding is answered; the OOM kill with its line
    data = d["data"][str(dmesg["id"])]
    oom = next(s for s in data["spans"] if s[4] == "oom_kill")
    assert oom[6] == 80 and oom[0] + d["origin_ns"] == 1795958935_760592000 + (oom[0] + d["origin_ns"]) % 1000
    metrics = {m["metric"] for m in d["metrics"]}
    assert {"cpu.throttled_s_per_s", "memory.usage_bytes", "memory.limit_bytes"} <= metrics
    chain = sorted((f["chain"], f["kind"]) for f in d["findings"] if f["chain"])
    assert [k for _, k in chain] == ["cpu_throttle", "memory_growth", "oom_kill", "signal_kill", "job_failure"]
    assert d["failure_rel"] == next(f["t"] for f in d["findings"] if f["kind"] == "job_failure")
    assert sum(o[1] for o in d["overview"]) == sum(t["n"] for t in tracks)


def test_level_of_detail_spans_a_pixel_wide_nested_and_the_rest_bucketed(client):
    c, iid = client
    d0 = c.get(f"/api/incidents/{iid}/timeline").json()
    main = _track(d0, "vm", 0, "main thread 17988")["id"]
    # a whole profiler step of rank 0 (13:28:25.267, 984 ms) at 1,000 px: 1 ms a pixel
    d = c.get(f"/api/incidents/{iid}/timeline", params={"start": "1795958905.2", "end": "1795958906.3", "px": 1000,
                                                        "tracks": str(main), "catalog": "false",
                                                        "max_events": 50}).json()
    assert "tracks" not in d and list(d["data"]) == [str(main)] and d["res_ns"] == 1_100_000
    t = d["data"][str(main)]
    step = next(s for s in t["spans"] if s[3] == "ProfilerStep#78")
    assert step[2] == 0 and step[1] == 984340735
    assert all(s[1] >= d["res_ns"] for s in t["spans"])               # every span shipped is a pixel or more
    first = {}
    for sp in t["spans"]:
        if step[0] <= sp[0] < step[0] + step[1]:
            first.setdefault(sp[3], sp[2])
    assert [first[n] for n in ("forward_backward", "DistributedDataParallel.forward", "aten::linear",
                               "aten::addmm")] == [1, 2, 3, 4]
    # the shorter ops: more than max_events of them, so bucketed, 4 px wide, counted exactly
    assert t["small"] > 50 and t["bins"] and sum(b[2] for b in t["bins"]) == t["small"]
    assert all(b[1] == 4 * d["res_ns"] for b in t["bins"])
    # zoomed in 100x the ops are spans themselves, and the step keeps its depth
    z = c.get(f"/api/incidents/{iid}/timeline", params={"start": "1795958905.55", "end": "1795958905.565", "px": 1000,
                                                        "tracks": str(main), "catalog": "false"}).json()
    zt = z["data"][str(main)]
    assert next(s for s in zt["spans"] if s[3] == "ProfilerStep#78")[2] == 0 and len(zt["spans"]) > 20
    assert not zt["bins"] and max(s[2] for s in zt["spans"]) >= 5


def test_a_bucket_is_named_by_its_most_common_name_the_first_in_name_order_among_equals(client):
    # the profiler step's ops and perf's samples bucketed from the events: each bucket's name is
    # its most common small event's, and where names are equally common the first in name order,
    # so a redrawn window names its buckets alike; in buckets of seconds (from track_bins) the
    # name is the busiest second's, alike at every request too
    c, iid = client
    store = c.app.state.service.store
    d0 = c.get(f"/api/incidents/{iid}/timeline").json()
    tracks = {t["id"]: t for t in d0["tracks"]}
    main, perf = _track(d0, "vm", 0, "main thread 17988")["id"], _track(d0, "vm", None, "python3 17988")["id"]
    ties = 0
    for tk, start, end, px, most in [(main, "1795958905.2", "1795958906.3", 1000, 50),
                                     (perf, "1795958880", "1795958940", 8000, 10),
                                     (perf, "1795958880", "1795958940", 100, 10)]:
        params = {"start": start, "end": end, "px": px, "tracks": str(tk), "catalog": "false", "max_events": most}
        first = c.get(f"/api/incidents/{iid}/timeline", params=params).json()
        assert first["data"] == c.get(f"/api/incidents/{iid}/timeline", params=params).json()["data"]
        t, origin, res = first["data"][str(tk)], first["origin_ns"], first["res_ns"]
        assert t["bins"]
        tr = tracks[tk]
        for b0, width, n, _typed, name in t["bins"]:
            lo = max(origin + b0, first["start_ns"])
            names = store.query(
                """SELECT name, count(*) AS n FROM events
                   WHERE incident_id = ? AND COALESCE(tid, -1) = ? AND ts_utc_ns >= ? AND ts_utc_ns < ?
                     AND COALESCE(dur_ns, 0) < ? AND kind IS NULL AND source_id IN (
                         SELECT source_id FROM sources WHERE incident_id = ? AND kind = ?)
                   GROUP BY name""", [iid, tr["tid"], lo, origin + b0 + width, res, iid, tr["kind"]])
            assert sum(r["n"] for r in names) == n and name in {r["name"] for r in names}
            if width < 1_000_000_000:
                top = max(r["n"] for r in names)
                best = sorted(r["name"] for r in names if r["n"] == top)
                assert name == best[0], (b0, names)
                ties += len(best) > 1
    assert ties        # (the sample has buckets whose two most common names are equally common)


def test_depths_worked_example():
    from aftertrace.analysis.timeline import depths
    # a step [0, 180) holding mm [10, 14) holding add [11, 11.02); a later mm; an instant inside the step
    rows = [[0, 180, None], [10, 4, None], [11, 0.02, None], [20, 4, None], [30, None, None], [200, 5, None]]
    depths(rows)
    assert [r[2] for r in rows] == [0, 1, 2, 1, 1, 0]


def test_detail_of_a_clicked_event_has_its_evidence(client):
    c, iid = client
    d = c.get(f"/api/incidents/{iid}/timeline").json()
    dmesg = _track(d, "vm", None, "dmesg.txt")
    oom = next(s for s in d["data"][str(dmesg["id"])]["spans"] if s[4] == "oom_kill")
    r = c.get(f"/api/incidents/{iid}/timeline/detail", params={"track": dmesg["id"], "t": oom[0]}).json()
    (e,) = [e for e in r["events"] if e["kind"] == "oom_kill"]
    assert e["source"] == "vm/dmesg.txt" and e["line"] == 80 and "Killed process 17988" in e["text"]
    assert e["time"].startswith("2026-11-29T13:28:55.76")


def test_timeline_errors_and_page(client):
    c, iid = client
    r = c.get(f"/api/incidents/{iid}/timeline", params={"start": "yesterday"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    r = c.get(f"/api/incidents/{iid}/timeline", params={"tracks": "1,x"})
    assert r.status_code == 400 and "track ids" in r.json()["error"]["message"]
    assert c.get("/api/incidents/nope/timeline").status_code == 404
    page = c.get(f"/incidents/{iid}/timeline").text
    assert "/static/trace.js" in page and "/static/timeline.js" in page and 'class="tv-main"' in page
    assert '<script src="/vendor/plotly.min.js"></script>' in page      # counter charts
    js = c.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    for f in ("timeline.js", "trace.js"):     # bundle text only via textContent or the canvas
        assert "innerHTML" not in c.get(f"/static/{f}").text
    # the pages name their icon (no request for a missing /favicon.ico on every page)
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    icon = c.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_wide_window_from_the_per_second_bins_matches_the_events(client):
    c, iid = client
    d0 = c.get(f"/api/incidents/{iid}/timeline").json()
    perf = _track(d0, "vm", None, "python3 17988")["id"]
    params = {"start": "2026-11-29T13:28:00Z", "end": "2026-11-29T13:29:00Z", "tracks": str(perf),
              "catalog": "false", "max_events": 10}
    wide = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, px=100)).json()      # 2.4 s buckets: track_bins
    narrow = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, px=8000)).json()  # 30 ms buckets: events
    w, n = wide["data"][str(perf)], narrow["data"][str(perf)]
    # whole-second edges: both count the same events, small and shipped as spans
    assert w["small"] + len(w["spans"]) == n["small"] + len(n["spans"])
    assert sum(b[2] for b in w["bins"]) == w["small"] and all(b[1] == 2_000_000_000 for b in w["bins"])


def test_wide_window_metrics_from_the_per_second_reduction_match_the_rows(client):
    c, iid = client
    params = {"start": "2026-11-29T13:28:00Z", "end": "2026-11-29T13:29:00Z", "tracks": "0", "catalog": "false"}
    wide = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, px=100)).json()      # 2.4 s: metric_bins
    narrow = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, px=8000)).json()  # 30 ms: metrics rows
    w = {m["id"]: m for m in wide["metrics"]}
    n = {m["id"]: m for m in narrow["metrics"]}
    assert set(w) == set(n) and len(w) >= 6
    for sid, m in w.items():
        pts, raw = m["points"], n[sid]["points"]
        assert m["unit"] == n[sid]["unit"]
        # the same first time and the same peak: a bucket shows the largest value of its seconds
        assert pts[0][0] == raw[0][0] and max(p[1] for p in pts) == max(p[1] for p in raw), sid
        assert [p[0] for p in pts] == sorted(p[0] for p in pts)
