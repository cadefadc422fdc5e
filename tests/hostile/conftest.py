"""Fixtures of the hostile-input suite; the corpus builders live in ``hostile_corpus.py`` beside this file."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))   # (pytest runs with --import-mode=importlib)

import hostile_corpus as hc  # noqa: E402

from aftertrace.server.settings import Settings  # noqa: E402

LIMITS = hc.LIMITS


@pytest.fixture
def hsettings(tmp_path: Path) -> Settings:
    return Settings.from_env(home=tmp_path / "home", limits=LIMITS, workers=1)


@pytest.fixture
def confined(tmp_path: Path):
    """``check(home, *inputs)`` after the work: every path that appeared under tmp_path since the
    test started, other than its own inputs, is inside the store (database, raw bundles) or an
    incident's own folder."""
    before = hc.snapshot(tmp_path)

    def check(home: Path, *inputs: Path) -> list[str]:
        """``inputs``: what the test itself wrote (the bundles it analyses)."""
        mine = tuple(p.relative_to(tmp_path).as_posix() for p in inputs)
        new = {p for p in hc.snapshot(tmp_path) - before
               if not any(p == m or p.startswith(m + "/") for m in mine)}
        home_rel = home.relative_to(tmp_path).as_posix()
        own = re.compile(re.escape(home_rel) + r"/(?:incidents/[0-9a-f]{12}|bundles)(?:/|$)")   # an incident's folder
        stores = {home_rel, f"{home_rel}/incidents", f"{home_rel}/aftertrace.duckdb",
                  f"{home_rel}/aftertrace.duckdb.wal"}
        outside = sorted(p for p in new if p not in stores and not own.match(p))
        assert outside == [], f"written outside the incident folders and the raw store: {outside}"
        strays = sorted(p for p in new if "evil" in p.rsplit("/", 1)[-1] and "/incidents/" not in f"/{p}")
        assert strays == [], strays
        return sorted(new)

    return check
