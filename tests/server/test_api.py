"""The HTTP API end to end: upload, background analysis, status, report, errors, escaping."""
import io
import re
import tarfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aftertrace.server.app import create_app

LOCAL = "http://127.0.0.1:8000"   # (the server answers to its own names only: the address it listens on)

OOM_LINE = ("[ 7063.247407] Memory cgroup out of memory: Killed process 12345 (python) total-vm:9216kB, "
            "anon-rss:2048kB, file-rss:512kB, shmem-rss:0kB, UID:0 pgtables:64kB oom_score_adj:0")


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        yield c


def _wait(client, iid, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        r = client.get(f"/api/incidents/{iid}")
        assert r.status_code == 200
        if r.json()["status"] in ("done", "failed"):
            return r.json()
        time.sleep(0.05)
    raise AssertionError("analysis did not finish")


def test_upload_analyse_report(client):
    data = _tgz({
        "node-1/host/anchors.txt": b"7000.00 9000.00\n1764417073.000000000\n",
        "node-1/dmesg.txt": f"[ 7000.000000] start\n{OOM_LINE}\n".encode(),
        "node-1/evil/../../escape.txt": b"x",
    })
    r = client.post("/api/incidents", files={"bundle": ("incident.tgz", data)}, data={"title": "OOM test"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) >= {"id", "status", "url"} and body["status"] == "queued"
    assert body["url"] == f"/incidents/{body['id']}"
    st = _wait(client, body["id"])
    assert st["status"] == "done", st
    assert st["title"] == "OOM test"
    rep = client.get(f"/api/incidents/{body['id']}/report").json()
    assert rep["schema"] == "aftertrace.report/1"
    assert rep["incident"]["id"] == body["id"]
    paths = {s["path"]: s for s in rep["sources"]}
    assert paths["node-1/dmesg.txt"]["status"] == "parsed"
    assert paths["node-1/dmesg.txt"]["host"] == "node-1"
    refused = [s for s in rep["sources"] if s["status"] == "failed"]
    assert len(refused) == 1 and "'..'" in refused[0]["error"]
    (oom,) = rep["anomalies"]
    assert oom["kind"] == "oom_kill" and oom["pid"] == 12345 and oom["host"] == "node-1"
    # 7063.247407 s boot -> 1764417073 - (7000.005) + 7063.247407
    assert oom["ts"] == pytest.approx(1764417073.0 - 7000.005 + 7063.247407, abs=1e-6)
    assert oom["evidence"][0] == {"source": "node-1/dmesg.txt", "line": 2, "text": OOM_LINE}
    listed = client.get("/api/incidents").json()["incidents"]
    assert [i["id"] for i in listed] == [body["id"]]


def test_same_bundle_twice_does_not_duplicate_rows(client, settings):
    data = _tgz({"dmesg.txt": f"{OOM_LINE}\n".encode()})
    a = client.post("/api/incidents", files={"bundle": ("a.tgz", data)}).json()
    _wait(client, a["id"])
    b = client.post("/api/incidents", files={"bundle": ("again.tgz", data)}).json()
    assert b["id"] == a["id"] and b["existing"] is True
    _wait(client, b["id"])
    store = client.app.state.service.store
    assert store.query("SELECT count(*) AS n FROM events")[0]["n"] == 1
    assert store.query("SELECT count(*) AS n FROM sources")[0]["n"] == 1
    assert store.query("SELECT count(*) AS n FROM incidents")[0]["n"] == 1
    assert len(list(settings.bundles_dir.iterdir())) == 1


def test_error_envelope(client):
    r = client.get("/api/incidents/doesnotexist")
    assert r.status_code == 404
    assert r.json() == {"error": {"status": 404, "code": "not_found", "message": "no incident 'doesnotexist'"}}
    r = client.post("/api/incidents")
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = client.get("/api/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post("/api/incidents", files={"bundle": ("empty.txt", b"")})
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]


def test_upload_limit(settings):
    from aftertrace.ingest.bundle import IntakeLimits
    s = settings.with_(limits=IntakeLimits(max_upload_bytes=1000))
    with TestClient(create_app(s), base_url=LOCAL) as c:
        r = c.post("/api/incidents", files={"bundle": ("big.txt", b"x" * 5000)})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert [p for p in s.bundles_dir.iterdir()] == []


def test_strings_from_bundles_are_escaped(client):
    evil = "<script>alert(1)</script>"
    data = _tgz({f"{evil}.txt": f"[    1.000000] {evil}\n".encode()})
    r = client.post("/api/incidents", files={"bundle": ("x.tgz", data)}, data={"title": evil})
    iid = r.json()["id"]
    _wait(client, iid)
    for page in ("/", f"/incidents/{iid}"):
        html = client.get(page).text
        assert evil not in html
        assert "&lt;script&gt;" in html


def test_html_pages_and_openapi(client):
    assert "Upload a crash bundle" in client.get("/").text
    r = client.get("/incidents/nope")
    assert r.status_code == 404 and "no incident" in r.text
    spec = client.get("/openapi.json").json()
    assert "/api/incidents" in spec["paths"] and "/api/incidents/{incident_id}/report" in spec["paths"]


def test_flamegraph_route_and_page(client):
    from pathlib import Path
    perf = (Path(__file__).resolve().parents[1] / "data/perf_script/flamegraph__example-perf-stacks.txt.gz").read_bytes()
    r = client.post("/api/incidents", files={"bundle": ("perf.txt.gz", perf)})
    iid = r.json()["id"]
    assert _wait(client, iid)["status"] == "done"
    fg = client.get(f"/api/incidents/{iid}/flamegraph").json()
    assert fg["tree"]["value"] == 1315 and fg["samples_total"] == 1315 and fg["samples_unplaced"] == 1315
    assert client.get(f"/api/incidents/{iid}/flamegraph", params={"comm": "perf"}).json()["tree"]["value"] < 1315
    r = client.get(f"/api/incidents/{iid}/flamegraph", params={"start": "not a time"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    assert client.get("/api/incidents/nope/flamegraph").status_code == 404
    page = client.get(f"/incidents/{iid}/flamegraph")
    assert page.status_code == 200 and '"value": 1315' in page.text
    assert f'/incidents/{iid}/flamegraph' in client.get(f"/incidents/{iid}").text


def test_root_cause_views_escape_bundle_strings(client):
    from aftertrace.web import report_render
    evil = "<b>evil</b>"
    line = OOM_LINE.replace("(python)", f"({evil})")
    data = _tgz({"node-1/host/anchors.txt": b"7000.00 9000.00\n1764417073.000000000\n",
                 "node-1/dmesg.txt": f"[ 7000.000000] start\n{line}\n".encode()})
    iid = client.post("/api/incidents", files={"bundle": ("x.tgz", data)}).json()["id"]
    assert _wait(client, iid)["status"] == "done"
    rep = client.get(f"/api/incidents/{iid}/report").json()
    # a lone OOM kill: it is the failure, nothing explains it, and the report says so
    assert rep["failure"]["kind"] == "oom_kill" and evil in rep["failure"]["summary"]
    assert [l["kind"] for l in rep["chains"][0]["links"]] == ["oom_kill"]      # its own origin
    assert any("no causal chain" in n for n in rep["notes"])
    assert "The job failed at" in rep["summary"]
    for html in (client.get(f"/incidents/{iid}").text, report_render.html(rep)):
        assert evil not in html and "&lt;b&gt;evil&lt;/b&gt;" in html
        assert 'id="rootcause"' in html
    md = report_render.markdown(rep)
    assert evil not in md and "\\<b\\>evil\\</b\\>" in md


def test_share_link_lifecycle(client):
    data = _tgz({"node-1/dmesg.txt": f"[ 7000.000000] start\n{OOM_LINE}\n".encode(),
                 "node-1/train.log": b"2026-11-29 13:28:24,000 INFO step 1 loss 2.5\n"
                                     b"2026-11-29 13:28:25,000 INFO step 2 loss 2.4\n"})
    iid = client.post("/api/incidents", files={"bundle": ("x.tgz", data)}).json()["id"]
    assert _wait(client, iid)["status"] == "done"
    r = client.post(f"/api/incidents/{iid}/shares", json={"note": "look at <this>"})
    assert r.status_code == 201, r.text
    sh = r.json()
    token = sh["token"]
    assert sh["url"] == f"/r/{token}" and len(token) >= 43            # 256 random bits, base64url
    listed = client.get(f"/api/incidents/{iid}/shares").json()["shares"]
    assert [s["share_id"] for s in listed] == [sh["share_id"]] and "token" not in listed[0]
    page = client.get(f"/r/{token}")
    assert page.status_code == 200 and 'id="rootcause"' in page.text
    assert "look at &lt;this&gt;" in page.text and "<this>" not in page.text
    # nothing else reachable from it but its own timeline view
    assert re.findall(r'href="(/[^"]*)"', page.text) == [f"/r/{token}/timeline"]
    assert page.headers["referrer-policy"] == "no-referrer"
    tl_page = client.get(f"/r/{token}/timeline")
    assert tl_page.status_code == 200 and f'data-api="/api/shared/{token}/timeline"' in tl_page.text
    assert f'/incidents/{iid}"' not in tl_page.text and tl_page.headers["referrer-policy"] == "no-referrer"
    tl = client.get(f"/api/shared/{token}/timeline").json()
    assert tl["incident"] == iid and tl["tracks"]
    # a share of a view: the fragment is kept and the shared page links to it
    view = "start=1795958904.6&end=1795958904.8&sel=3%401795958904.7&fold=p%3Avm"
    sh2 = client.post(f"/api/incidents/{iid}/shares", json={"view": view}).json()
    assert f'href="/r/{sh2["token"]}/timeline#{view.replace("&", "&amp;")}"' in client.get(sh2["url"]).text
    assert f'data-view="{view.replace("&", "&amp;")}"' in client.get(sh2["url"] + "/timeline").text
    bad = client.post(f"/api/incidents/{iid}/shares", json={"view": 'x"><script>'})
    assert bad.status_code == 400 and "fragment" in bad.json()["error"]["message"]
    twin = client.get(f"/api/shared/{token}").json()
    assert twin["share"]["note"] == "look at <this>" and twin["report"]["incident"]["id"] == iid
    # the store keeps a hash, never the token
    store = client.app.state.service.store
    assert token not in str(store.query("SELECT * FROM shares"))
    r = client.delete(f"/api/shares/{token}")
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert client.get(f"/r/{token}").status_code == 404
    assert client.get(f"/api/shared/{token}").status_code == 404
    assert client.get(f"/r/{token}/timeline").status_code == 404
    assert client.get(f"/api/shared/{token}/timeline").status_code == 404
    assert client.get(f"/r/{token[:-2]}xx").status_code == 404
    assert client.delete("/api/shares/nope").status_code == 404
    bad = client.post(f"/api/incidents/{iid}/shares", json={"start": "2026-01-01T00:00:00Z"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_request"
    assert client.post("/api/incidents/nope/shares", json={}).status_code == 404


def test_bearer_token_guards_reads_and_writes(settings):
    s = settings.with_(api_token="s3cret")
    with TestClient(create_app(s), base_url=LOCAL) as c:
        data = _tgz({"dmesg.txt": f"{OOM_LINE}\n".encode()})
        r = c.post("/api/incidents", files={"bundle": ("a.tgz", data)})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = c.post("/api/incidents", files={"bundle": ("a.tgz", data)}, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 201
        iid = r.json()["id"]
        assert c.get(f"/api/incidents/{iid}/report").status_code == 401
        assert c.post(f"/api/incidents/{iid}/shares", json={}).status_code == 401
        assert c.post("/upload", files={"bundle": ("a.tgz", data)}).status_code == 401
        r = c.get("/")
        assert r.status_code == 401 and 'action="/login"' in r.text
        c.headers["authorization"] = "Bearer s3cret"
        _wait(c, iid)
        assert c.get(f"/api/incidents/{iid}/report").status_code == 200
        assert 'name="token"' in c.get("/").text


def test_incident_page_lists_skipped_lines_with_their_numbers(client):
    lines = [f"[    {i}.000000] line {i}" for i in range(1, 40)]
    lines[20] = "[ garbage <script>x</script> \xff"
    data = _tgz({"node-1/dmesg.txt": ("\n".join(lines) + "\n").encode("latin-1")})
    iid = client.post("/api/incidents", files={"bundle": ("x.tgz", data)}).json()["id"]
    assert _wait(client, iid)["status"] == "done"
    issues = client.get(f"/api/incidents/{iid}/issues").json()["issues"]
    assert issues and issues[0]["path"] == "node-1/dmesg.txt" and issues[0]["line"] == 21
    html = client.get(f"/incidents/{iid}").text
    assert 'id="issues"' in html and "node-1/dmesg.txt:21" in html
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_incident_page_shows_what_each_rank_was_doing_escaped(client):
    """The recorded DataLoader deadlock, one frame of rank 1's dump renamed to markup: the page's
    stacks table shows it as text."""
    root = Path(__file__).resolve().parents[2] / "sample_traces" / "hang-dataloader-lock"
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    dump = "vm/stacks/py-spy-12580.txt"
    files[dump] = files[dump].replace(b"    main (hang_job.py:79)", b"    <script>alert(1)</script> (hang_job.py:79)")
    iid = client.post("/api/incidents", files={"bundle": ("hang.tgz", _tgz(files))}).json()["id"]
    assert _wait(client, iid, timeout=60)["status"] == "done"
    html = client.get(f"/incidents/{iid}").text
    assert 'id="stacks"' in html and "pid 12677: was blocked in Shards.__getitem__ (hang_job.py:37)" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; (hang_job.py:79)" in html
    rep = client.get(f"/api/incidents/{iid}/report").json()
    (r1,) = [p for p in rep["progress"] if p["rank"] == 1]
    assert r1["stack"]["elsewhere"] is True and r1["stack"]["waits_for"] == "dataloader"


def test_pages_and_scripts_are_gzipped_for_clients_that_accept_it(client):
    r = client.get("/static/timeline.js", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip"
    assert r.headers["x-content-type-options"] == "nosniff"
    r = client.get("/", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and "content-encoding" not in r.headers


def test_the_api_docs_and_the_icon_are_served_from_here(client):
    page = client.get("/docs").text
    assert "/static-docs/swagger-ui-bundle.js" in page and "cdn." not in page and "https://" not in page
    js = client.get("/static-docs/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    assert client.get("/static-docs/swagger-ui.css").status_code == 200
    assert client.get("/openapi.json").json()["info"]["title"] == "aftertrace"
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_a_running_analysis_says_its_stage_and_time(client):
    """While the pipeline runs, the status (and the page) say which stage it is in and for how long."""
    svc = client.app.state.service
    seen = []
    data = _tgz({"node-1/dmesg.txt": f"[ 7000.000000] start\n{OOM_LINE}\n".encode(),
                 "node-1/other.txt": b"[ 7001.000000] later\n"})
    iid = client.post("/api/incidents", files={"bundle": ("p.tgz", data)}).json()["id"]
    _wait(client, iid)

    def watch(stage, done, total):
        st = client.get(f"/api/incidents/{iid}").json()
        seen.append((st["status"], st["progress"]["stage"], st["progress"]["total"]))
        if stage == "parse" and done == 0:
            page = client.get(f"/incidents/{iid}").text
            assert "parsing the files (0 of 2)" in page and "s so far" in page
            seen.append(("page", "checked", 0))
    svc.analyze(iid, progress=watch)
    assert ("page", "checked", 0) in seen
    seen = [s for s in seen if s[0] != "page"]
    assert {s[1] for s in seen} >= {"extract", "detect", "parse", "store", "analyze"}
    assert all(s[0] == "running" for s in seen)
    assert "progress" not in client.get(f"/api/incidents/{iid}").json()


def test_an_incident_not_analysed_yet_answers_409_with_its_status(settings, tmp_path):
    # a queued (or running, or failed) incident has no rows to show: each data endpoint says so in the
    # envelope, its pages show its status; an unknown id is a 404 and an unreadable window a 400
    from aftertrace.server.service import Service
    log = tmp_path / "train.log"
    log.write_text("2026-11-29 13:31:51,235 INFO [rank0] train: step=499 step_time=0.123s loss=2.3080\n")
    svc = Service(settings)
    with TestClient(create_app(settings, svc), base_url=LOCAL) as c:
        # (queued after the app started: queued before, the app's start would analyse it)
        iid = svc.submit_path(log).incident_id
        for what in ("report", "timeline", "timeline/detail?track=0&t=0", "flamegraph", "export?format=folded",
                     "issues"):
            r = c.get(f"/api/incidents/{iid}/{what}")
            assert r.status_code == 409, (what, r.text)
            assert r.json() == {"error": {"status": 409, "code": "not_analysed",
                                          "message": f"incident {iid} is queued: nothing to show yet"}}, what
            assert c.get(f"/api/incidents/ffff{iid}/{what}").status_code == 404, what
        r = c.post(f"/api/incidents/{iid}/shares", json={})
        assert r.status_code == 409
        assert c.get(f"/incidents/{iid}").status_code == 200
        assert c.get(f"/incidents/{iid}/timeline").status_code == 200     # (its data: the 409 above)
        r = c.get(f"/incidents/{iid}/flamegraph")
        assert r.status_code == 409 and "queued" in r.text
        svc.analyze(iid)
        r = c.get(f"/api/incidents/{iid}/timeline", params={"start": "half past nine"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
        assert r.json()["error"]["message"].startswith("the window: ")
        r = c.get(f"/api/incidents/{iid}/flamegraph", params={"start": "1e400"})
        assert r.status_code == 400, r.text
        r = c.get(f"/incidents/{iid}/flamegraph", params={"pid": "x"})
        assert r.status_code == 400 and "pid or rank" in r.text
        assert c.get(f"/api/incidents/{iid}/timeline").status_code == 200


def test_the_same_bundle_uploaded_at_once_is_one_incident_analysed_once(settings):
    # 8 uploads of one bundle at once, 5 bundles: every upload answers 201 with the one incident, and
    # each incident is analysed once (a bundle sent again joins its incident as it stands)
    import threading
    svc_runs = []
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        svc = c.app.state.service
        real = svc.analyze
        svc.analyze = lambda iid, **k: svc_runs.append(iid) or real(iid, **k)
        sent = []
        for n in range(5):
            data = _tgz({"dmesg.txt": f"[ 1.{n:06d}] round {n}\n{OOM_LINE}\n".encode()})
            sent.append(data)
            gate, got = threading.Barrier(8), []

            def upload():
                gate.wait()
                got.append(c.post("/api/incidents", files={"bundle": (f"r{n}.tgz", data)}))
            threads = [threading.Thread(target=upload) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert [r.status_code for r in got] == [201] * 8, [r.text for r in got if r.status_code != 201]
            ids = {r.json()["id"] for r in got}
            assert len(ids) == 1
            assert sorted(r.json()["existing"] for r in got) == [False] + [True] * 7
            assert _wait(c, ids.pop())["status"] == "done"
        assert len(svc_runs) == len(set(svc_runs)) == 5
        assert svc.store.query("SELECT count(*) AS n FROM incidents")[0]["n"] == 5
        # the same bundle once more, when done: it joins (no second analysis); one that failed is retried
        iid = svc_runs[0]
        r = c.post("/api/incidents", files={"bundle": ("again.tgz", sent[0])})
        assert r.json() == {"id": iid, "status": "done", "url": f"/incidents/{iid}", "existing": True}
        svc.store.cursor().execute("UPDATE incidents SET status = 'failed', error = 'x' WHERE incident_id = ?", [iid])
        r = c.post("/api/incidents", files={"bundle": ("again.tgz", sent[0])})
        assert r.json()["status"] == "queued" and r.json()["existing"] is True
        assert _wait(c, iid)["status"] == "done" and svc_runs.count(iid) == 2


def test_an_incident_is_deleted_with_every_byte_of_it_and_nothing_else(settings, tmp_path):
    from aftertrace.ingest.model import INCIDENT_TABLES
    from aftertrace.server.service import Service
    svc = Service(settings)
    with TestClient(create_app(settings, svc), base_url=LOCAL) as c:
        ids, sent = [], []
        for tag in ("a", "b"):
            sent.append(_tgz({"dmesg.txt": f"[ 7000.000000] {tag}\n{OOM_LINE}\n".encode()}))
            ids.append(c.post("/api/incidents", files={"bundle": (f"{tag}.tgz", sent[-1])}).json()["id"])
            assert _wait(c, ids[-1])["status"] == "done"
        a, b = ids
        token = c.post(f"/api/incidents/{a}/shares", json={}).json()["token"]
        assert c.get(f"/api/incidents/{a}/export", params={"format": "chrome"}).status_code == 200
        store = svc.store

        def rows_of(iid):
            return {t: store.query(f"SELECT count(*) AS n FROM {t} WHERE incident_id = ?", [iid])[0]["n"]
                    for t in (*INCIDENT_TABLES, "shares", "incidents")}

        def files_of(iid):
            folder = settings.incident_dir(iid)
            return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        raw_a = Path(store.query("SELECT raw_path FROM incidents WHERE incident_id = ?", [a])[0]["raw_path"])
        a_rows, b_rows = rows_of(a), rows_of(b)
        b_files, b_report = files_of(b), c.get(f"/api/incidents/{b}/report").json()
        assert raw_a.is_file() and rows_of(a)["events"] > 0 and any(k.startswith("exports/") for k in files_of(a))

        r = c.delete(f"/api/incidents/{a[:6]}")         # a prefix names nothing to delete
        assert r.status_code == 404 and "whole id" in r.json()["error"]["message"]
        size = raw_a.stat().st_size + sum(len(v) for v in files_of(a).values())
        r = c.delete(f"/api/incidents/{a}")
        assert r.status_code == 200 and r.json() == {"deleted": a, "bytes_freed": size}
        assert set(rows_of(a).values()) == {0}
        assert not settings.incident_dir(a).exists() and not raw_a.exists()
        assert c.get(f"/api/incidents/{a}").status_code == 404 and c.get(f"/r/{token}").status_code == 404
        assert c.delete(f"/api/incidents/{a}").status_code == 404
        # the other incident is as it was, byte for byte
        assert rows_of(b) == b_rows and files_of(b) == b_files and c.get(f"/api/incidents/{b}/report").json() == b_report
        assert [i["id"] for i in c.get("/api/incidents").json()["incidents"]] == [b]
        # the same bundle sent again after its incident was deleted is a new incident, analysed afresh
        again = c.post("/api/incidents", files={"bundle": ("a.tgz", sent[0])}).json()
        assert again["id"] == a and again["existing"] is False and _wait(c, a)["status"] == "done"
        assert raw_a.is_file() and rows_of(a) == dict(a_rows, shares=0)
        # one that is queued is kept
        log = tmp_path / "q.log"
        log.write_text("2026-11-29 13:31:51,235 INFO [rank0] train: step=1 step_time=0.1s loss=2.3\n")
        q = svc.submit_path(log).incident_id
        r = c.delete(f"/api/incidents/{q}")
        assert r.status_code == 409 and r.json()["error"]["code"] == "not_analysed"
        assert c.get(f"/api/incidents/{q}").json()["status"] == "queued"


def test_deleting_needs_the_token_when_one_is_set(settings):
    with TestClient(create_app(settings.with_(api_token="s3cret")), base_url=LOCAL) as c:
        r = c.post("/api/incidents", files={"bundle": ("x.tgz", _tgz({"dmesg.txt": f"{OOM_LINE}\n".encode()}))},
                   headers={"authorization": "Bearer s3cret"})
        iid = r.json()["id"]
        c.headers["authorization"] = "Bearer s3cret"       # (every read needs it too)
        _wait(c, iid)
        del c.headers["authorization"]
        assert c.delete(f"/api/incidents/{iid}").status_code == 401
        assert c.delete(f"/api/incidents/{iid}", headers={"authorization": "Bearer nope"}).status_code == 401
        assert c.delete(f"/api/incidents/{iid}", headers={"authorization": "Bearer s3cret"}).status_code == 200
