"""The timeline's JSON twin over the real sample: lanes, aggregation when dense, metrics, chain marks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, AFTERTRACE_HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "server.cli", "analyze", str(ROOT / "sample_traces" / "oom-after-throttle"),
                        "--json", str(home / "r.json")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    iid = json.loads((home / "r.json").read_text())["incident"]["id"]
    with TestClient(create_app(Settings.from_env(home=home))) as c:
        yield c, iid


def test_default_window_spans_the_chain(client):
    c, iid = client
    d = c.get(f"/api/incidents/{iid}/timeline").json()
    # 30 s before the origin (the throttle at 13:28:24.409) to 15 s after the failure (13:28:56.147)
    # (the report's times are float seconds: equal to the microsecond)
    assert abs(d["start_ns"] - 1795958874_409226000) < 1000 and abs(d["end_ns"] - 1795958951_147000000) < 1000
    lanes = {l["id"]: l for l in d["lanes"]}
    assert "vm / vm/logs/torchrun.log / rank 0" in lanes and "vm / torch_trace / rank 1" in lanes
    dmesg = lanes["vm / vm/dmesg.txt"]
    assert dmesg["count"] == len(dmesg["events"]) and any(e["kind"] == "oom_kill" for e in dmesg["events"])
    oom = next(e for e in dmesg["events"] if e["kind"] == "oom_kill")
    assert oom["line"] == 80 and "Killed process 17988" in oom["text"]
    perf = lanes["vm / vm/perf/perf.script.txt.gz"]
    assert "events" not in perf and perf["count"] > 1500          # dense: shipped as bins
    assert sum(b["n"] for b in perf["bins"]) == perf["count"] and len(perf["bins"]) <= 400
    metrics = {m["metric"] for m in d["metrics"]}
    assert {"cpu.throttled_s_per_s", "memory.usage_bytes", "memory.limit_bytes"} <= metrics
    assert all(len(m["points"]) <= 400 for m in d["metrics"])
    chain = [f["kind"] for f in d["findings"] if f["on_chain"]]
    assert chain == ["cpu_throttle", "memory_growth", "oom_kill", "signal_kill", "job_failure"]


def test_zoomed_window_and_lane_filter(client):
    c, iid = client
    d = c.get(f"/api/incidents/{iid}/timeline", params={"start": "2026-11-29T13:28:55.5Z",
                                                        "end": "2026-11-29T13:28:56.5Z",
                                                        "lanes": "vm / vm/dmesg.txt"}).json()
    (lane,) = d["lanes"]
    assert lane["id"] == "vm / vm/dmesg.txt" and d["lanes_total"] == 1
    assert all(1795958935_500_000_000 <= e["ts"] < 1795958936_500_000_000 for e in lane["events"])
    assert any(e["kind"] == "oom_kill" for e in lane["events"])


def test_timeline_errors_and_page(client):
    c, iid = client
    r = c.get(f"/api/incidents/{iid}/timeline", params={"start": "yesterday"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    assert c.get("/api/incidents/nope/timeline").status_code == 404
    page = c.get(f"/incidents/{iid}/timeline").text
    assert '<script src="/vendor/plotly.min.js"></script>' in page and "/static/timeline.js" in page
    js = c.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert "innerHTML" not in c.get("/static/timeline.js").text     # bundle text only via textContent
    # the pages name their icon (no request for a missing /favicon.ico on every page)
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    icon = c.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_wide_window_from_the_per_second_bins_matches_the_events(client):
    c, iid = client
    params = {"start": "2026-11-29T13:28:00Z", "end": "2026-11-29T13:29:00Z"}
    wide = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, bins=20)).json()      # 3 s buckets
    narrow = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, bins=2000)).json()  # 30 ms buckets
    # whole-second edges: the window starts and ends on a second, so both count the same events
    assert {l["id"]: l["count"] for l in wide["lanes"]} == {l["id"]: l["count"] for l in narrow["lanes"]}
    perf = next(l for l in wide["lanes"] if l["id"] == "vm / vm/perf/perf.script.txt.gz")
    assert sum(b["n"] for b in perf["bins"]) == perf["count"] and len(perf["bins"]) <= 20
    assert all(b["dur"] == 3_000_000_000 for b in perf["bins"])


def test_wide_window_metrics_from_the_per_second_reduction_match_the_rows(client):
    c, iid = client
    params = {"start": "2026-11-29T13:28:00Z", "end": "2026-11-29T13:29:00Z"}
    wide = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, bins=20)).json()      # 3 s: metric_bins
    narrow = c.get(f"/api/incidents/{iid}/timeline", params=dict(params, bins=2000)).json()  # 30 ms: metrics rows
    w = {m["id"]: m for m in wide["metrics"]}
    n = {m["id"]: m for m in narrow["metrics"]}
    assert set(w) == set(n) and len(w) >= 6
    for sid, m in w.items():
        pts, raw = m["points"], n[sid]["points"]
        assert len(pts) <= 20 and m["unit"] == n[sid]["unit"]
        # the same first time and the same peak: a bin shows the largest value of its seconds
        assert pts[0][0] == raw[0][0] and max(p[1] for p in pts) == max(p[1] for p in raw), sid
        assert [p[0] for p in pts] == sorted(p[0] for p in pts)
