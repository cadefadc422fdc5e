"""Exports through the service, the CLI and the HTTP route: folded stacks and the self-contained
report on the real sample (Perfetto and Chrome traces: tests/analysis/test_export_*.py)."""
import json
import re
import subprocess
from datetime import datetime, timezone
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aftertrace.server.app import create_app
from aftertrace.server.exports import normalize
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

LOCAL = "http://127.0.0.1:8000"   # (the server answers to its own names only: the address it listens on)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "oom-after-throttle"


def _ns(iso: str) -> int:
    d = datetime.fromisoformat(iso).replace(tzinfo=timezone.utc)
    return int(d.timestamp()) * 10**9 + d.microsecond * 1000


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    settings = Settings.from_env(home=tmp_path_factory.mktemp("home"))
    svc = Service(settings)
    sub = svc.submit_path(SAMPLE, title='sample "<script>alert(1)</script>"')
    svc.analyze(sub.incident_id)
    return settings, svc, sub.incident_id


def test_folded_stacks_count_every_sample(analysed, tmp_path):
    _, svc, iid = analysed
    out = tmp_path / "s.folded"
    with open(out, "wb") as fh:
        stats = svc.export(iid, "collapsed", fh)
    lines = out.read_text().splitlines()
    total = svc.store.query("SELECT count(*) AS n FROM samples WHERE incident_id = ?", [iid])[0]["n"]
    assert total == stats["samples"] == stats["samples_total"] == 3811
    counts = []
    for ln in lines:
        stack, n = ln.rsplit(" ", 1)
        assert stack and ";;" not in stack
        counts.append(int(n))
    assert sum(counts) == total and len(lines) == len(set(l.rsplit(" ", 1)[0] for l in lines))
    # a window: only the samples in it (the OOM kill's 10 s)
    with open(out, "wb") as fh:
        st = svc.export(iid, "folded", fh, "2026-11-29T13:28:50.760Z", "2026-11-29T13:29:00.760Z")
    in_window = svc.store.query(
        "SELECT count(*) AS n FROM samples WHERE incident_id = ? AND ts_utc_ns >= ? AND ts_utc_ns < ?",
        [iid, _ns("2026-11-29T13:28:50.760"), _ns("2026-11-29T13:29:00.760")])[0]["n"]
    assert st["samples"] == in_window == sum(int(l.rsplit(" ", 1)[1]) for l in out.read_text().splitlines())
    assert 0 < in_window < total


def test_html_is_one_self_contained_file(analysed, tmp_path):
    _, svc, iid = analysed
    out = tmp_path / "r.html"
    with open(out, "wb") as fh:
        stats = svc.export(iid, "html", fh)
    text = out.read_text()
    assert stats["tracks"] >= 8 and stats["samples"] == 3811
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)       # nothing fetched
    assert "aftertraceViewer" in text and "aftertraceFlame" in text and "Plotly" not in text
    # the bundle's strings: escaped in the HTML, \u003c-escaped in the embedded JSON
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    data = text.split('<script id="embed-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    d = json.loads(data)
    assert d["timeline"]["start"].startswith("2026-11-29T13:27:54") and d["flame"]["tree"]["value"] == 3811
    assert {f["kind"] for f in d["timeline"]["findings"] if f["chain"]} >= {"cpu_throttle", "oom_kill"}
    assert d["timeline"]["tracks"] and d["timeline"]["data"]


def test_unknown_format_and_windows_are_refused(analysed):
    _, svc, iid = analysed
    with pytest.raises(ValueError, match="unknown export format 'svg'"):
        normalize("svg")
    with pytest.raises(ValueError, match="whole incident"):
        svc.export(iid, "chrome", open("/dev/null", "wb"), start="2026-11-29T13:28:50Z")


def test_http_route_sends_a_file_from_the_incident_folder(analysed):
    settings, svc, iid = analysed
    client = TestClient(create_app(settings, svc), base_url=LOCAL)
    r = client.get(f"/api/incidents/{iid}/export", params={"format": "collapsed"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert f'filename="aftertrace-{iid}.folded"' in r.headers["content-disposition"]
    assert sum(int(l.rsplit(" ", 1)[1]) for l in r.text.splitlines()) == 3811
    assert (settings.incident_dir(iid) / "exports" / f"aftertrace-{iid}.folded").exists()
    r = client.get(f"/api/incidents/{iid}/export", params={"format": "html"})
    assert r.status_code == 200 and "aftertraceFlame" in r.text
    r = client.get(f"/api/incidents/{iid}/export", params={"format": "svg"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    r = client.get("/api/incidents/nope/export", params={"format": "html"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    page = client.get(f"/incidents/{iid}").text
    assert f"/api/incidents/{iid}/export?format=perfetto" in page


def test_cli_export(analysed, tmp_path):
    settings, svc, iid = analysed
    svc.store.close()     # the CLI opens the store itself
    try:
        out = tmp_path / "r.folded"
        p = subprocess.run([sys.executable, "-m", "aftertrace.server.cli", "export", iid[:6], "-o", str(out),
                            "--db", str(settings.db_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "folded export of incident" in p.stdout and "samples 3811" in p.stdout
        assert out.exists() and not out.with_name(out.name + ".part").exists()
        p = subprocess.run([sys.executable, "-m", "aftertrace.server.cli", "export", iid, "-o", str(tmp_path / "x.svg"),
                            "--db", str(settings.db_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 2 and "cannot tell the export format from the file name" in p.stderr
        from aftertrace.server.exports import formats
        assert f"give --format ({', '.join(sorted(formats()))}) or a file ending in " in p.stderr
        p = subprocess.run([sys.executable, "-m", "aftertrace.server.cli", "export", iid, "-o", str(tmp_path / "x.svg"),
                            "--format", "svg", "--db", str(settings.db_path)], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        said = f"unknown export format 'svg': use one of {', '.join(sorted(formats()))}"
        assert p.returncode == 2 and said in p.stderr
    finally:
        svc.store.__init__(settings.db_path)


def test_the_report_file_of_a_bundle_with_no_time_at_all(tmp_path):
    """Pasted text with no time (a real Slurm excerpt): the one-file report is the report alone."""
    b = tmp_path / "b"
    b.mkdir()
    (b / "slurm.out").write_bytes((ROOT / "tests" / "data" / "realworld" / "dev" /
                                   "K-Net-30_slurmstepd-oom-kill.log").read_bytes())
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    iid = svc.submit_path(b).incident_id
    svc.analyze(iid)
    out = tmp_path / "r.html"
    with open(out, "wb") as fh:
        stats = svc.export(iid, "html", fh)
    assert (stats["window"], stats["tracks"]) == (None, 0)
    page = out.read_text()
    assert "Slurm counted 1 OOM kill(s)" in page and "time unknown" in page
    assert "embedded-timeline" not in page
    with open(tmp_path / "w.html", "wb") as fh, pytest.raises(ValueError):
        svc.export(iid, "html", fh, start="2026-01-01T00:00:00Z")   # a window asked for must hold something


def test_the_formats_are_the_modules_that_declare_one():
    from aftertrace.server.exports import format_of, formats
    fs = formats()
    # (the built-in ones; a module added to analysis/export/ is one more)
    assert {n: fs[n].windowed for n in ("chrome", "folded", "html", "perfetto", "speedscope")} == {
        "chrome": False, "folded": True, "html": True, "perfetto": False, "speedscope": True}
    assert [format_of(n) for n in ("a.PFTRACE", "a.json", "a.speedscope.json", "a.folded", "a.html", "a.svg")] == \
        ["perfetto", "chrome", "speedscope", "folded", "html", ""]
    assert [normalize(n) for n in ("collapsed", "pftrace", "json", "HTML")] == ["folded", "perfetto", "chrome", "html"]
    names = [n for f in fs.values() for n in (f.name, *f.aliases)]
    assert len(names) == len(set(names)) and all(f.what and f.media_type and f.suffix.startswith(".")
                                                 for f in fs.values())


def test_a_new_format_is_one_module(analysed, tmp_path, monkeypatch):
    """A module that declares EXPORT and export() is a format of the service, the CLI's file
    endings and the HTTP route, with nothing else to register."""
    import types
    import aftertrace.server.exports as exports
    toy = types.ModuleType("toy_export")
    toy.EXPORT = {"name": "toy", "suffix": ".toy.txt", "media_type": "text/plain; charset=utf-8", "windowed": True,
                  "what": "the finding count, as a test's toy"}

    def export(src, out, start, end, progress=None):
        n = len(src.report()["anomalies"])
        out.write(f"{src.incident_id} {n} {start} {end}\n".encode())
        return {"format": "toy", "findings": n}
    toy.export = export
    monkeypatch.setitem(sys.modules, "toy_export", toy)
    monkeypatch.setattr(exports, "_MODULES", exports._MODULES + ("toy_export",))
    exports.formats.cache_clear()
    try:
        settings, svc, iid = analysed
        assert exports.format_of("out.toy.txt") == "toy"
        path = svc.export_file(iid, "toy", "2026-11-29T13:28:50Z", None)
        n = len(svc.get_report(iid)["anomalies"])
        assert path.read_text() == f"{iid} {n} 2026-11-29T13:28:50Z None\n" and n > 0
        client = TestClient(create_app(settings, svc), base_url=LOCAL)
        r = client.get(f"/api/incidents/{iid}/export", params={"format": "toy"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert "toy (.toy.txt): the finding count" in client.get("/openapi.json").text
        with open(tmp_path / "x", "wb") as fh, pytest.raises(ValueError, match="a window applies to folded, html, "
                                                                           "speedscope, toy"):
            svc.export(iid, "chrome", fh, "2026-11-29T13:28:50Z")
    finally:
        exports.formats.cache_clear()
