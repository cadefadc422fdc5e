"""Security of the HTTP API and pages (FastAPI TestClient): path parameters that try to reach
other files, upload and decompressed-size limits, share tokens, HTML escaping of every bundle
string on every page that shows one (and in the timeline figure the browser draws), no
environment or traceback in any response, the optional bearer token for writes, and an
OpenAPI-driven fuzz (schemathesis) with a small budget."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import hostile_corpus as hc
from hostile_corpus import LIMITS
from aftertrace.server.app import create_app

LOCAL = "http://127.0.0.1:8000"   # (the server answers to its own names only: the address it listens on)

X, Y, J = hc.XSS
PAYLOAD = X + Y + J
CANARY = "aftertrace-canary-5f0d1e"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(hsettings, monkeypatch):
    monkeypatch.setenv("AFTERTRACE_CANARY_SECRET", CANARY)
    with TestClient(create_app(hsettings), raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def _wait(c, iid: str, timeout: float = 30, headers=None) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout:
        st = c.get(f"/api/incidents/{iid}", headers=headers or {}).json()
        if st["status"] in ("done", "failed"):
            return st
        time.sleep(0.05)
    raise AssertionError(f"analysis of {iid} did not finish")


def _upload(c, data: bytes, filename: str = "bundle.tgz", title: str | None = None, headers=None) -> str:
    r = c.post("/api/incidents", files={"bundle": (filename, data)}, data={"title": title} if title else None,
               headers=headers or {})
    assert r.status_code == 201, r.text
    st = _wait(c, r.json()["id"], headers=headers)
    assert st["status"] == "done", st
    return r.json()["id"]


def _tgz(files: dict[str, bytes]) -> bytes:
    return hc.tar_bytes(list(files.items()), "w:gz")


def _small_bundle(tag: str = "") -> bytes:
    return _tgz({"node-1/dmesg.txt": hc.real("dmesg_raw")[1], "node-1/tag.log": tag.encode()})


def _hostile_real_bundle() -> dict[str, bytes]:
    """The real logs-hang recording (torchrun + 2 ranks) and a real perf script, with the payloads
    planted in log lines, a parse issue, a perf frame and comm, and a file name."""
    root = hc.SAMPLES_DIR / "logs-hang"
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    log = files["vm/logs/torchrun.log"].decode().splitlines()
    log[10] += " " + PAYLOAD
    files["vm/logs/torchrun.log"] = ("\n".join(log) + "\n").encode()
    files[f"vm/logs/rank{PAYLOAD}.log"] = files["vm/logs/torchrun.log"]
    dmesg = hc.real("dmesg_raw")[1].decode().splitlines()
    dmesg.insert(20, f"[ garbage {PAYLOAD}")                        # an unusable line: shown as an issue
    dmesg[30] += " " + PAYLOAD
    files["vm/dmesg.txt"] = ("\n".join(dmesg) + "\n").encode()
    perf = (hc.DATA / "perf_script/copyforward__perf.script").read_text()
    perf = perf.replace("anon_vma_interval_tree_insert", PAYLOAD.replace(" ", "_"))
    files["vm/perf.script"] = perf.replace("instrument", "ins" + X.replace(" ", ""), 3).encode()
    return files


# ---------------------------------------------------------------------------------------------
# path parameters

PROBES = [
    "/api/incidents/..%2F..%2Fetc%2Fpasswd", "/api/incidents/..%2f..%2faftertrace.duckdb/report",
    "/api/incidents/%2Fetc%2Fpasswd", "/api/incidents/%2e%2e/report", "/api/incidents/%2e%2e%2f%2e%2e/issues",
    "/api/incidents/..%5C..%5Cetc%5Cpasswd/report", "/api/incidents/%00/report", "/api/incidents/" + "a" * 4000,
    "/api/incidents/..%2Fbundles/export?format=html", "/api/incidents/%2e%2e/export?format=chrome",
    "/api/incidents/..%2F..%2F..%2Ftmp%2Fx/export?format=folded", "/api/incidents/%2e%2e/timeline",
    "/api/incidents/%2e%2e/flamegraph", "/api/incidents/%2e%2e/shares",
    "/api/shared/..%2F..%2Fetc%2Fpasswd", "/api/shared/%2e%2e", "/api/shared/%2Fetc%2Fpasswd",
    "/r/..%2F..%2Fetc%2Fpasswd", "/r/%2e%2e", "/r/" + "A" * 43,
    "/incidents/..%2F..%2Fetc%2Fpasswd", "/incidents/%2e%2e/timeline", "/incidents/%2e%2e/flamegraph",
    "/static/../server/app.py", "/static/..%2f..%2fserver%2fapp.py", "/static/%2e%2e/%2e%2e/pyproject.toml",
    "/static/%2fetc%2fpasswd", "/static//etc/passwd", "/static/..%5c..%5cserver%5capp.py",
    "/vendor/..%2f..%2fetc%2fpasswd", "/vendor/plotly.min.js%2f..%2f..%2fapp.py",
    "/bundles/", "/home/aftertrace.duckdb", "/aftertrace.duckdb",
]
LEAKS = ("root:x:0:0", "def create_app", "[project]", "DUCK", "Traceback", CANARY)


def test_path_parameters_cannot_reach_other_files(client, hsettings):
    iid = _upload(client, _small_bundle())
    before = hc.snapshot(hsettings.home)
    for url in PROBES:
        r = client.get(url)
        assert r.status_code in (404, 400, 422), (url, r.status_code, r.text[:200])
        assert not any(leak in r.text for leak in LEAKS), (url, r.text[:300])
        if url.startswith("/api/"):
            assert r.json()["error"]["status"] == r.status_code, url
    for url in ("/api/shares/..%2F..%2Fetc%2Fpasswd", f"/api/incidents/{iid}/shares/..%2F..", "/api/shares/%2e%2e"):
        assert client.delete(url).status_code == 404, url
    # the raw bundle is served by no route
    raw = next(hsettings.bundles_dir.iterdir()).name
    for url in (f"/bundles/{raw}", f"/api/bundles/{raw}", f"/static/../bundles/{raw}", f"/incidents/{iid}/files/node-1/dmesg.txt"):
        assert client.get(url).status_code == 404, url
    # nothing was written, except exports inside an incident's own folder
    new = hc.snapshot(hsettings.home) - before
    assert all(p.startswith(f"incidents/{iid}/exports") or p.endswith(".wal") for p in new), sorted(new)
    assert client.get(f"/api/incidents/{iid}").status_code == 200


# ---------------------------------------------------------------------------------------------
# size limits

def test_upload_size_limit_answers_413_with_the_envelope_and_keeps_nothing(client, hsettings):
    big = os.urandom(LIMITS.max_upload_bytes + 4096)
    r = client.post("/api/incidents", files={"bundle": ("big.tgz", big)})
    assert r.status_code == 413
    assert r.json() == {"error": {"status": 413, "code": "too_large",
                                  "message": f"the bundle is larger than the upload limit of {LIMITS.max_upload_bytes} bytes"}}
    assert list(hsettings.bundles_dir.iterdir()) == []          # no partial upload left behind
    r = client.post("/upload", files={"bundle": ("big.tgz", big)})
    assert r.status_code == 413 and "upload limit" in r.text
    assert client.get("/api/incidents").json()["incidents"] == []


def _post_stream(app, path: str, headers: dict, chunks) -> tuple[int, bytes, int]:
    """POST ``chunks`` to the ASGI app as a client streams a body: (status, response body, how many
    chunks the server pulled before it answered)."""
    import anyio
    pulled, sent, it = 0, [], iter(chunks)

    async def receive():
        nonlocal pulled
        body = next(it, None)
        if body is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        pulled += 1
        return {"type": "http.request", "body": body, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.encode(), v.encode()) for k, v in dict(headers, host="127.0.0.1:8000").items()],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    anyio.run(app, scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"), pulled


def test_an_upload_past_the_limit_is_refused_from_its_headers_or_as_it_streams(client, hsettings, tmp_path):
    # an honest Content-Length past the limit: refused before a byte of the body is read; a chunked
    # body: refused once the bytes read pass the limit (not after 4 GiB are spooled to disk)
    chunk = b"x" * 65536
    head = (b'--b0undary\r\nContent-Disposition: form-data; name="bundle"; filename="b.tgz"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n")

    def endless():      # (a file of 6.5 GB, if anything read it all)
        yield head
        yield from (chunk for _ in range(100_000))
    form = {"content-type": "multipart/form-data; boundary=b0undary"}
    for path in ("/api/incidents", "/upload"):
        status, body, pulled = _post_stream(client.app, path, dict(form, **{"content-length": str(5 * 1024**3)}), endless())
        assert (status, pulled) == (413, 0), path
        assert f"larger than the limit of {LIMITS.max_upload_bytes} bytes".encode() in body
        status, body, pulled = _post_stream(client.app, path, form, endless())
        assert status == 413 and pulled <= (LIMITS.max_upload_bytes + 1024 * 1024) // len(chunk) + 3, (path, pulled)
    assert json.loads(_post_stream(client.app, "/api/incidents", form, endless())[1]) == {
        "error": {"status": 413, "code": "too_large",
                  "message": f"the upload is larger than the limit of {LIMITS.max_upload_bytes} bytes"}}
    # every other write takes a small body only
    status, body, pulled = _post_stream(client.app, "/api/incidents/0123/shares", {"content-type": "application/json"},
                                        endless())
    assert status == 413 and pulled <= 2
    assert not hsettings.bundles_dir.exists() or list(hsettings.bundles_dir.iterdir()) == []
    assert client.get("/api/incidents").json()["incidents"] == []


def test_decompressed_size_limits_stop_bombs_uploaded_over_http(client):
    line = hc.real("dmesg_raw")[1].splitlines(keepends=True)[10]
    gz = hc.gzip_bomb(line, 1024**3)                              # 3 MB -> 1 GB
    iid = _upload(client, gz, "dmesg.txt.gz")
    (s,) = client.get(f"/api/incidents/{iid}/report").json()["sources"]
    assert s["status"] == "partial" and f"per-file limit of {LIMITS.max_member_bytes} bytes" in s["error"]
    tgz = hc.tar_gz_bomb(line, 512 * 1024**2, before=[("node-1/dmesg.txt", hc.real("dmesg_raw")[1])])
    iid = _upload(client, tgz, "bomb.tgz")
    rep = client.get(f"/api/incidents/{iid}/report").json()
    src = {s["path"]: s for s in rep["sources"]}
    assert src["node-1/dmesg.txt"]["status"] == "parsed"
    assert src["node-1/bomb.log"]["status"] == "failed" and "limit" in src["node-1/bomb.log"]["error"]
    assert any("extraction stopped" in n for n in rep["notes"])


# ---------------------------------------------------------------------------------------------
# share tokens

def test_share_tokens_are_long_random_revocable_and_show_only_their_incident(client):
    a = _upload(client, _small_bundle("a"), title="incident A")
    b = _upload(client, _small_bundle("b"), title="incident B secret title")
    shares = [client.post(f"/api/incidents/{a}/shares", json={}).json() for _ in range(3)]
    tokens = [s["token"] for s in shares]
    assert len(set(tokens)) == 3
    for t in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_\-]{43,}", t), t
        assert len(base64.urlsafe_b64decode(t + "=" * (-len(t) % 4))) >= 32       # 256 random bits
    token = tokens[0]
    page = client.get(f"/r/{token}")
    assert page.status_code == 200 and a in page.text
    assert b not in page.text and "incident B secret title" not in page.text
    assert not re.search(r'href="/(?!r/)', page.text)                             # links nowhere else
    twin = client.get(f"/api/shared/{token}").json()
    assert twin["report"]["incident"]["id"] == a and b not in json.dumps(twin)
    # the token never comes back, and the store keeps only its hash
    listed = client.get(f"/api/incidents/{a}/shares").json()["shares"]
    assert token not in json.dumps(listed)
    assert token not in str(client.app.state.service.store.query("SELECT * FROM shares"))
    # a share of A cannot be revoked through B; guesses and near misses find nothing
    assert client.delete(f"/api/incidents/{b}/shares/{shares[1]['share_id']}").status_code == 404
    for guess in (token[:-1] + ("A" if token[-1] != "A" else "B"), token[:20], shares[0]["share_id"], "x" * 43):
        assert client.get(f"/r/{guess}").status_code == 404
        assert client.get(f"/api/shared/{guess}").status_code == 404
    # revocation: the link stops working at once, with the same answer as an unknown token
    assert client.delete(f"/api/shares/{token}").status_code == 200
    gone, unknown = client.get(f"/api/shared/{token}"), client.get("/api/shared/" + "y" * 43)
    assert gone.status_code == unknown.status_code == 404 and gone.json() == unknown.json()
    assert client.get(f"/r/{token}").status_code == 404
    assert client.get(f"/r/{tokens[1]}").status_code == 200                        # the others still work
    assert client.delete(f"/api/incidents/{a}/shares/{shares[1]['share_id']}").status_code == 200
    assert client.get(f"/r/{tokens[1]}").status_code == 404


# ---------------------------------------------------------------------------------------------
# escaping

def _unescaped(html: str) -> list[str]:
    found = [p for p in (X, Y, "<img src=x", "<script>alert") if p in html]
    found += re.findall(r"""(?:href|src|action)\s*=\s*["']?\s*javascript:""", html, re.I)
    return found


def test_bundle_strings_are_escaped_everywhere_they_are_shown(client):
    files = _hostile_real_bundle()
    data = hc.tar_bytes(list(files.items()), "w:gz")
    iid = _upload(client, data, filename=f"{PAYLOAD}.tgz".replace("/", ""), title=PAYLOAD)
    rep = client.get(f"/api/incidents/{iid}/report").json()
    paths = [s["path"] for s in rep["sources"]]
    assert any(X in p for p in paths) and rep["incident"]["title"] == PAYLOAD      # the payloads are in the data
    token = client.post(f"/api/incidents/{iid}/shares", json={"note": PAYLOAD}).json()["token"]
    pages = ["/", f"/incidents/{iid}", f"/incidents/{iid}?all=1", f"/incidents/{iid}/timeline",
             f"/incidents/{iid}/flamegraph", f"/r/{token}", f"/api/incidents/{iid}/export?format=html",
             f"/incidents/{X}", f"/r/{X}"]
    for url in pages:
        r = client.get(url)
        assert r.status_code in (200, 404), (url, r.status_code)
        assert r.headers["content-type"].startswith("text/html"), url
        assert _unescaped(r.text) == [], (url, _unescaped(r.text))
        for blob in re.findall(r'<script[^>]*type="application/json"[^>]*>(.*?)</script>', r.text, re.S):
            assert "<" not in blob, url                                          # data blocks cannot end early
    # the pages did show them, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/incidents/{iid}").text
    assert "&lt;script&gt;" in client.get(f"/r/{token}").text
    # JSON answers carry the strings as data, as JSON
    for url in (f"/api/incidents/{iid}/report", f"/api/incidents/{iid}/timeline", f"/api/incidents/{iid}/issues",
                f"/api/shared/{token}", f"/api/incidents/{iid}/flamegraph", "/api/incidents"):
        r = client.get(url)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json", url
    tl = client.get(f"/api/incidents/{iid}/timeline").json()
    assert any(X in (t["path"] or "") or X in t["label"] for t in tl["tracks"])
    _viewer_never_parses_bundle_text_as_html()


def _viewer_never_parses_bundle_text_as_html() -> None:
    """The trace viewer draws bundle text on a canvas or sets it as textContent; the one Plotly
    chart (a counter's series) gets only numbers and an escaped unit."""
    for name in ("trace.js", "timeline.js", "flame.js"):
        js = (ROOT / "web/static" / name).read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in js, (name, sink)
    js = (ROOT / "web/static/timeline.js").read_text()
    assert "esc(unit)" in js and "esc(m.metric" not in js


# ---------------------------------------------------------------------------------------------
# no environment, no traceback

def test_internal_errors_answer_the_envelope_without_details(client, hsettings):
    iid = _upload(client, _small_bundle())
    svc = client.app.state.service

    def boom(*a, **kw):
        raise RuntimeError(f"{CANARY} {os.environ.get('AFTERTRACE_CANARY_SECRET')} {hsettings.db_path} "
                           "SELECT * FROM incidents")
    for name in ("get_report", "list_incidents", "timeline", "flamegraph", "get_incident"):
        setattr(svc, name, boom)
    for url in (f"/api/incidents/{iid}/report", "/api/incidents", f"/api/incidents/{iid}/timeline",
                f"/api/incidents/{iid}/flamegraph", f"/api/incidents/{iid}", "/", f"/incidents/{iid}"):
        r = client.get(url)
        assert r.status_code == 500, url
        assert r.json() == {"error": {"status": 500, "code": "internal_error",
                                      "message": "internal error (the details are in the server's log)"}}, url
        for leak in (CANARY, "Traceback", str(hsettings.home), "SELECT", "RuntimeError"):
            assert leak not in r.text, (url, leak)


def test_no_response_carries_the_environment(client, hsettings):
    iid = _upload(client, _small_bundle())
    token = client.post(f"/api/incidents/{iid}/shares", json={}).json()["token"]
    urls = ["/", "/docs", "/openapi.json", "/healthz", "/api/incidents", f"/api/incidents/{iid}",
            f"/api/incidents/{iid}/report", f"/api/incidents/{iid}/issues", f"/api/incidents/{iid}/timeline",
            f"/api/incidents/{iid}/shares", f"/api/shared/{token}", f"/r/{token}", f"/incidents/{iid}",
            f"/api/incidents/{iid}/export?format=chrome", "/api/incidents/nope", "/nope",
            f"/api/incidents/{iid}/timeline?start=not-a-time", f"/api/incidents/{iid}/issues?limit=x"]
    for url in urls:
        r = client.get(url)
        for leak in (CANARY, "Traceback (most recent call last)", str(hsettings.home), "AFTERTRACE_CANARY"):
            assert leak not in r.text, (url, leak)
    bad = client.get(f"/api/incidents/{iid}/issues?limit=x")
    assert bad.status_code == 422 and set(bad.json()["error"]) == {"status", "code", "message"}


# ---------------------------------------------------------------------------------------------
# bearer token

def test_with_a_token_set_every_read_and_write_needs_it_but_a_share_links_own(hsettings):
    secret = "tok-" + "9" * 40
    with TestClient(create_app(hsettings.with_(api_token=secret)), raise_server_exceptions=False, base_url=LOCAL) as c:
        data = _small_bundle()
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": secret},
                        {"Authorization": f"Basic {secret}"}, {"Authorization": "Bearer " + secret[:-1]},
                        {"Cookie": f"aftertrace_session={secret}"}):
            r = c.post("/api/incidents", files={"bundle": ("a.tgz", data)}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", headers
            assert c.get("/api/incidents", headers=headers).status_code == 401, headers
        assert c.post("/upload", files={"bundle": ("a.tgz", data)}, data={"token": "wrong"}).status_code == 401
        ok = {"Authorization": f"bearer {secret}"}
        assert c.get("/api/incidents", headers=ok).json()["incidents"] == []
        iid = _upload(c, data, headers=ok)
        sh = c.post(f"/api/incidents/{iid}/shares", json={}, headers=ok).json()
        reads = ["/", f"/incidents/{iid}", f"/incidents/{iid}/timeline", f"/incidents/{iid}/flamegraph", "/docs",
                 "/openapi.json", "/api/incidents", f"/api/incidents/{iid}", f"/api/incidents/{iid}/report",
                 f"/api/incidents/{iid}/shares", f"/api/incidents/{iid}/timeline", f"/api/incidents/{iid}/flamegraph",
                 f"/api/incidents/{iid}/issues", f"/api/incidents/{iid}/export?format=chrome"]
        for url in reads:        # every read needs it: the API's 401 envelope, a page's sign-in form
            r = c.get(url)
            assert r.status_code == 401, url
            assert iid not in r.text.replace(f"next={url}", "").replace(f'value="{url}"', "") or "/login" in r.text, url
            if url.startswith("/api/"):
                assert r.json()["error"]["code"] == "unauthorized", url
            else:
                assert 'action="/login"' in r.text, url
            assert c.get(url, headers=ok).status_code in (200, 400), url    # (400: this bundle has no time)
        # a share link's own views need none (the link is their key), nor the pages' assets
        for url in (f"/r/{sh['token']}", f"/r/{sh['token']}/timeline", f"/api/shared/{sh['token']}",
                    f"/api/shared/{sh['token']}/timeline", "/static/app.css", "/healthz", "/login"):
            assert c.get(url).status_code in (200, 400), url
        # writes too
        assert c.post(f"/api/incidents/{iid}/shares", json={}).status_code == 401
        assert c.delete(f"/api/shares/{sh['token']}").status_code == 401
        assert c.delete(f"/api/incidents/{iid}/shares/{sh['share_id']}").status_code == 401
        assert c.delete(f"/api/incidents/{iid}").status_code == 401
        assert c.delete(f"/api/shares/{sh['token']}", headers=ok).status_code == 200
        # the upload form sends it as a field
        r = c.post("/upload", files={"bundle": ("b.tgz", _small_bundle("b"))}, data={"token": secret},
                   follow_redirects=False)
        assert r.status_code == 303
        # a browser signs in once: an HttpOnly, same-site cookie that is not the token; back where it was
        r = c.post("/login", data={"token": "wrong", "next": f"/incidents/{iid}"}, follow_redirects=False)
        assert r.status_code == 401 and "set-cookie" not in r.headers
        r = c.post("/login", data={"token": secret, "next": f"/incidents/{iid}"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"/incidents/{iid}"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and secret not in cookie
        for url in reads:
            assert c.get(url).status_code in (200, 400), url    # (the client keeps the cookie)
        assert c.post(f"/api/incidents/{iid}/shares", json={}).status_code == 201
        for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
            r = c.post("/login", data={"token": secret, "next": bad}, follow_redirects=False)
            assert r.headers["location"] == "/", bad
        for r in [c.get(u, headers=ok) for u in reads]:
            assert secret not in r.text


# ---------------------------------------------------------------------------------------------
# OpenAPI-driven fuzz

@pytest.fixture
def fuzz_client(hsettings, monkeypatch):
    # (schemathesis calls an ASGI app by the test clients' name for a server, "testserver")
    monkeypatch.setenv("AFTERTRACE_CANARY_SECRET", CANARY)
    app = create_app(hsettings.with_(allowed_hosts=("127.0.0.1", "testserver")))
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def test_openapi_fuzz_finds_no_server_error_and_every_answer_is_documented(fuzz_client):
    # no 5xx, and every status code, content type and body is the one the OpenAPI document states
    client = fuzz_client
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                     status_code_conformance)
    _wait(client, _upload(client, _small_bundle()))
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    ran = 0
    for result in schema.get_all_operations():
        op = result.ok()

        # (a larger budget for a run by hand: AFTERTRACE_FUZZ_EXAMPLES=200)
        @settings(max_examples=int(os.environ.get("AFTERTRACE_FUZZ_EXAMPLES", "6")), deadline=None, database=None,
                  derandomize=True, suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def call(case):
            nonlocal ran
            ran += 1
            response = case.call()
            case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                                     content_type_conformance, response_schema_conformance])
            # exports and uploaded files come back as bytes that need not be UTF-8
            assert CANARY.encode() not in response.content and b"Traceback" not in response.content
        call()
    print(f"schemathesis: {ran} calls, no violation")
    assert ran >= 30


def test_only_a_whole_id_names_an_incident_and_nothing_is_sniffed(client):
    iid = _upload(client, _small_bundle("wild"))
    _wait(client, iid)
    for ref in ("%", "_", "%25", iid[:3] + "%", iid.upper()):
        r = client.get(f"/api/incidents/{ref}/flamegraph")  
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", ref
    for part in (iid[:1], iid[:6], iid[:-1]):       # a part of an id names nothing (no id is found by trying)
        assert client.get(f"/api/incidents/{part}/flamegraph").status_code == 404, part
        assert client.get(f"/api/incidents/{part}").status_code == 404, part
    assert client.get(f"/api/incidents/{iid}/flamegraph").status_code == 200
    r = client.get(f"/api/incidents/{iid}/issues")
    assert r.headers["x-content-type-options"] == "nosniff"


def test_no_page_is_framed_elsewhere_and_pages_load_from_this_server_alone(client):
    # every answer refuses to be framed by another site; every page (error pages too) carries a CSP
    # that lets it load, connect and submit to this server only, with no plugins and no <base>
    iid = _upload(client, _small_bundle("frame"))
    _wait(client, iid)
    token = client.post(f"/api/incidents/{iid}/shares", json={}).json()["token"]
    pages = ["/", f"/incidents/{iid}", f"/incidents/{iid}/timeline", f"/incidents/{iid}/flamegraph",
             f"/r/{token}", f"/r/{token}/timeline", "/incidents/0000", "/docs", "/no-such-page"]
    for url in pages:
        r = client.get(url)
        assert r.headers["content-type"].startswith("text/html"), url
        assert r.headers["x-frame-options"] == "DENY", url
        csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
        assert csp["default-src"] == "'self'" and csp["frame-ancestors"] == "'none'", url
        assert csp["object-src"] == "'none'" and csp["base-uri"] == "'none'" and csp["form-action"] == "'self'", url
        assert "http" not in r.headers["content-security-policy"] and "*" not in r.headers["content-security-policy"]
    for url in (f"/api/incidents/{iid}", f"/api/incidents/{iid}/report", "/api/incidents/0000"):
        r = client.get(url)
        assert r.headers["x-frame-options"] == "DENY" and "content-security-policy" not in r.headers, url


def test_a_name_it_does_not_answer_to_and_writes_from_other_sites_are_refused(hsettings, monkeypatch):
    # DNS rebinding: a page of attacker.example points its own name at 127.0.0.1 and reads the API;
    # CSRF: a page elsewhere posts a form (multipart needs no CORS permission) or a fetch with no-cors
    monkeypatch.setenv("AFTERTRACE_CANARY_SECRET", CANARY)
    with TestClient(create_app(hsettings), raise_server_exceptions=False, base_url=LOCAL) as c:
        iid = _upload(c, _small_bundle("csrf"))
        _wait(c, iid)
        for host in ("attacker.example", "attacker.example:8000", "127.0.0.1.nip.io", "10.0.0.5:8000", ""):
            for url in ("/", f"/api/incidents/{iid}/report", f"/incidents/{iid}"):
                r = c.get(url, headers={"host": host})
                assert r.status_code == 403, (host, url)
                assert CANARY not in r.text and iid not in r.text.replace(host, "")
            assert c.get("/api/incidents", headers={"host": host}).json()["error"]["code"] == "forbidden"
        for host in ("127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "app.localhost:8000"):
            assert c.get(f"/api/incidents/{iid}", headers={"host": host}).status_code == 200, host
        before = sorted(p.name for p in hsettings.bundles_dir.iterdir())
        data = _small_bundle("from elsewhere")
        for headers in ({"origin": "http://attacker.example"}, {"origin": "null"},
                        {"origin": "http://127.0.0.1:9999"}, {"origin": "https://127.0.0.1:8000"},
                        {"sec-fetch-site": "cross-site"}, {"origin": "http://127.0.0.1:x"}):
            r = c.post("/api/incidents", files={"bundle": ("b.tgz", data)}, headers=headers)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", headers
            r = c.post("/upload", files={"bundle": ("b.tgz", data)}, headers=headers, follow_redirects=False)
            assert r.status_code == 403 and "another site" in r.text, headers
            assert c.post(f"/api/incidents/{iid}/shares", json={}, headers=headers).status_code == 403
            assert c.delete("/api/shares/x", headers=headers).status_code == 403
        assert sorted(p.name for p in hsettings.bundles_dir.iterdir()) == before     # nothing was stored
        # the server's own pages, and clients that are no page (curl, the CLI), write as before
        for headers in ({"origin": "http://127.0.0.1:8000"}, {"sec-fetch-site": "same-origin"}, {}):
            r = c.post("/api/incidents", files={"bundle": ("b.tgz", data)}, headers=headers)
            assert r.status_code == 201, (headers, r.text)
    # listening on every address it answers to any name (AFTERTRACE_ALLOWED_HOSTS narrows it)
    for allowed, host, status in ((None, "aftertrace.corp.example", 200), (("aftertrace.corp.example",),
                                  "aftertrace.corp.example:8000", 200), (("aftertrace.corp.example",), "other.example", 403)):
        s = hsettings.with_(host="0.0.0.0", allowed_hosts=allowed, db_path=hsettings.home / f"{status}{host}.duckdb")
        with TestClient(create_app(s), raise_server_exceptions=False, base_url=LOCAL) as c:
            assert c.get("/api/incidents", headers={"host": host}).status_code == status, (allowed, host)


def test_the_smaller_answers_say_what_they_must(client, monkeypatch):
    # a 405 names the methods allowed; an upload that sends a field twice is refused (which one would
    # count?); an export that meets a full disk says so (507), leaving no half file
    import errno
    r = client.put("/api/incidents")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    r = client.patch("/")
    assert r.status_code == 405 and "allow" in r.headers
    a, b = _small_bundle("one"), _small_bundle("two")
    r = client.post("/api/incidents", files=[("bundle", ("a.tgz", a)), ("bundle", ("b.tgz", b))])
    assert r.status_code == 400 and r.json()["error"]["message"] == "the upload sends bundle more than once"
    r = client.post("/api/incidents", files={"bundle": ("a.tgz", a)}, data={"title": ["x", "y"]})
    assert r.status_code == 400 and "title" in r.json()["error"]["message"]
    r = client.post("/upload", files=[("bundle", ("a.tgz", a)), ("bundle", ("b.tgz", b))], follow_redirects=False)
    assert r.status_code == 400 and "more than once" in r.text
    assert client.get("/api/incidents").json()["incidents"] == []
    iid = _upload(client, a)
    svc = client.app.state.service

    def full(iid, fmt, out, *a, **k):
        out.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(svc.exports, "export", full)     # (what export_file writes with)
    r = client.get(f"/api/incidents/{iid}/export", params={"format": "chrome"})
    assert r.status_code == 507 and r.json()["error"]["code"] == "insufficient_storage"
    assert "no space left" in r.json()["error"]["message"]
    exports = client.app.state.settings.incident_dir(iid) / "exports"
    assert not exports.exists() or list(exports.iterdir()) == []
