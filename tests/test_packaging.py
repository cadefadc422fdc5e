"""A non-editable install ships every package with its templates and static files, and building
it leaves nothing in the checkout (an analysis subpackage once went missing; setuptools once left
build/ and *.egg-info behind)."""
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_package_and_the_web_files(tmp_path):
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert conf["build-system"]["build-backend"] == "hatchling.build"
    packages = conf["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert sorted(packages) == ["analysis", "ingest", "server", "web"]
    try:
        import hatchling  # noqa: F401
    except ImportError:
        pytest.skip("hatchling is not installed here (pip installs it to build; the config is checked above)")
    before = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    r = subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("aftertrace-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    on_disk = {str(p.relative_to(ROOT)) for top in packages for p in (ROOT / top).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk and on_disk <= names, sorted(on_disk - names)[:10]
    assert {"web/templates/timeline.html", "web/static/trace.js"} <= names
    # the line engine is compiled into it, for this platform, from the source it ships with
    from ingest.native import build as native_build
    assert f"ingest/native/{native_build.library_name()}" in names and "ingest/native/scan.c" in names
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    assert not any(n.startswith(("tests/", "bench/", "sample_traces/")) for n in names)
    after = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True,
                           text=True).stdout
    assert after == before                      # nothing written into the checkout
