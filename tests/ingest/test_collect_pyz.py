"""The recorder stands alone: packed as one file (``aftertrace pack-recorder``), it runs with
Python's standard library only (``python -I -S``: no site-packages at all) and writes the bundle
the analyser reads."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from aftertrace.ingest.collect.pyz import members, write_pyz
from aftertrace.ingest.collect.schema import MANIFEST_NAME, SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def _imports(source: str) -> set[str]:
    """The top-level names of every absolute import in a module (nested ones too)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_the_recorder_imports_the_standard_library_and_itself_only():
    names = set()
    for name, src in members():
        names |= _imports(src.decode() if isinstance(src, bytes) else src.read_text())
    foreign = sorted(n for n in names if n not in sys.stdlib_module_names and n not in ("__future__", "aftertrace"))
    assert foreign == [], foreign
    assert {n for n, _ in members()} >= {"__main__.py", "aftertrace/__init__.py", "aftertrace/ingest/__init__.py",
                                          "aftertrace/ingest/collect/__init__.py", "aftertrace/ingest/collect/schema.py",
                                          "aftertrace/ingest/collect/writer.py"}


def test_the_packed_recorder_runs_without_site_packages_and_its_bundle_is_read(tmp_path):
    from aftertrace.server.cli import main
    pyz = tmp_path / "aftertrace-collect.pyz"
    assert main(["pack-recorder", str(pyz)]) == 0
    first = pyz.read_bytes()
    assert first.startswith(b"#!/usr/bin/env python3\n") and pyz.stat().st_mode & 0o111
    write_pyz(tmp_path / "again.pyz")
    assert (tmp_path / "again.pyz").read_bytes() == first          # (the same sources, the same bytes)

    r = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--out", str(tmp_path / "out"), "--",
                        "sh", "-c", "echo started; sleep 0.5; exit 3"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr and "trigger: the job exited with code 3" in r.stderr
    (bundle,) = (tmp_path / "out").glob("bundle-*")
    man = json.loads((bundle / MANIFEST_NAME).read_text())
    assert man["schema"] == SCHEMA and man["job"]["exit_code"] == 3

    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(bundle).incident_id)
    src = {s["path"]: s for s in rep["sources"]}
    assert src[MANIFEST_NAME]["status"] == "parsed" and src[MANIFEST_NAME]["format"] == "collect_manifest"
    assert rep["failure"] is not None and "exit code 3" in json.dumps(rep["failure"])
