"""A non-editable install ships every package with its templates and static files, all of it under
one name, ``aftertrace`` (installed, the checkout's folders ``ingest``, ``analysis``, ``server`` and
``web`` are ``aftertrace.ingest``...: names as common as ``server`` or ``web`` would clash with other
installed projects), every module imports from the wheel alone, and building it leaves nothing in
the checkout (an analysis subpackage once went missing; setuptools once left build/ and *.egg-info
behind)."""
import ast
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["analysis", "ingest", "server", "web"]


def test_the_checkouts_folders_install_as_aftertrace_packages():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert conf["build-system"]["build-backend"] == "hatchling.build"
    wheel = conf["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert sorted(wheel["only-include"]) == PACKAGES
    assert wheel["sources"] == {p: f"aftertrace/{p}" for p in PACKAGES}
    assert conf["project"]["scripts"] == {"aftertrace": "aftertrace.server.cli:run"}


def _absolute_imports(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module)
    return out


def test_no_module_imports_a_package_by_its_folders_name():
    """``import ingest...`` works in a checkout (its folder is on the path) and fails installed:
    every module of the project, its tests and benchmarks import ``aftertrace.*``."""
    stray = []
    for top in (*PACKAGES, "tests", "bench"):
        for p in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in p.parts:
                continue
            names = _absolute_imports(p.read_text())
            stray += [f"{p.relative_to(ROOT)}: {n}" for n in sorted(names) if n.split(".")[0] in PACKAGES]
    assert stray == []


def test_the_wheel_holds_aftertrace_alone_with_every_file_and_every_module_imports_from_it(tmp_path):
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
    from aftertrace.ingest import __version__
    assert {n.split("/")[0] for n in names} == {"aftertrace", f"aftertrace-{__version__}.dist-info"}
    on_disk = {"aftertrace/" + str(p.relative_to(ROOT)) for top in PACKAGES for p in (ROOT / top).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".so"}
    assert on_disk and on_disk <= names, sorted(on_disk - names)[:10]
    assert {"aftertrace/__init__.py", "aftertrace/web/templates/timeline.html", "aftertrace/web/static/trace.js"} <= names
    # the line engine is compiled into it, for this platform, from the source it ships with
    from aftertrace.ingest.native import build as native_build
    assert f"aftertrace/ingest/native/{native_build.library_name()}" in names
    assert "aftertrace/ingest/native/scan.c" in names
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    after = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True,
                           text=True).stdout
    assert after == before                      # nothing written into the checkout

    # Every module imports from the unpacked wheel and the installed dependencies, without the
    # checkout on the path (-S: no .pth file puts it there; run outside it: no current folder).
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    code = f"""
import sys
sys.path[:0] = [{str(unpacked)!r}, {sysconfig.get_paths()["purelib"]!r}, {sysconfig.get_paths()["platlib"]!r}]
import importlib, pkgutil, aftertrace
assert aftertrace.__file__.startswith({str(unpacked)!r}), aftertrace.__file__
for m in pkgutil.walk_packages(aftertrace.__path__, "aftertrace."):
    if not m.name.endswith("__main__") and not m.name.rsplit(".", 1)[-1].startswith("_scan-"):
        importlib.import_module(m.name)
assert aftertrace.ingest.native.library()._name.startswith({str(unpacked)!r})
print(sorted({{k.split(".")[0] for k in sys.modules}} & {set(PACKAGES)!r}))
"""
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["[]"]
