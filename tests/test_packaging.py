"""A non-editable install ships every package (an analysis subpackage once went missing)."""
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_installed():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = conf["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(str(ROOT), include=include))
    on_disk = {str(p.parent.relative_to(ROOT)).replace("/", ".")
               for top in ("ingest", "analysis", "server", "web") for p in (ROOT / top).rglob("__init__.py")}
    assert on_disk and on_disk <= shipped
    templates = conf["tool"]["setuptools"]["package-data"]["web"]
    assert "templates/*.html" in templates and "static/*" in templates
