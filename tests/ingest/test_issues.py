"""Parse issues come from one catalogue (ingest/issues.py): every kind a parser says is in it, a
kind outside it is refused, and the budgeted API stores the first lines and counts the rest."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from aftertrace.ingest.issues import ISSUE_KINDS, SEVERITIES, issue_kind
from aftertrace.ingest.sink import RowSink

ROOT = Path(__file__).resolve().parents[2]


def _said_kinds() -> dict[str, str]:
    """Every issue kind written as a literal where a parser reports one: ``issue("kind", ...)``,
    ``issues("kind", ...)`` and the Kineto reader's ``problems.append(("kind", ...))``."""
    pat = re.compile(r"""(?:\.issues?\(|problems\.append\(\()\s*["']([a-z_]+)["']""")
    out = {}
    for p in sorted((ROOT / "ingest").rglob("*.py")):
        for m in pat.finditer(p.read_text()):
            out.setdefault(m.group(1), p.relative_to(ROOT).as_posix())
    return out


def test_every_kind_a_parser_says_is_catalogued_and_every_catalogued_kind_is_said():
    said = _said_kinds()
    assert len(said) >= 12, said
    assert {k: f for k, f in said.items() if k not in ISSUE_KINDS} == {}
    assert sorted(set(ISSUE_KINDS) - set(said)) == []
    for k in ISSUE_KINDS.values():
        assert k.severity in SEVERITIES and k.about and k.name == k.name.lower()


def test_a_kind_outside_the_catalogue_is_refused(tmp_path):
    sink = RowSink(tmp_path / "out", max_issues=3)
    with pytest.raises(ValueError, match="not in ingest/issues.py"):
        sink.issue("oops", "a parser's typo")
    assert issue_kind("bad_line").severity == "lost"


def test_many_issues_are_stored_up_to_the_budget_and_all_counted(tmp_path):
    sink = RowSink(tmp_path / "out", max_issues=3)
    sink.issue("bad_line", "one", 1, "a")
    sink.issues("undecodable", "bytes replaced", 10, ((n, f"line {n}") for n in range(2, 12)))
    assert sink.issues_total == 11 and sink.counts["parse_issues"] == 3 and sink.issue_room() == 0
    sink.issues("bad_line", "more", 4, iter(()))
    assert sink.issues_total == 15 and sink.counts["parse_issues"] == 3
