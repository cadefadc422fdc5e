"""Every finding kind is whole: it has its own phrase in the report, something emits it, and the
chain rules name only kinds (and roles) that exist — so a rule can never wait for a finding
nobody makes, and a new kind cannot reach a report as its bare name."""
from __future__ import annotations

from pathlib import Path

import pytest

from aftertrace.analysis import chain_rules, kinds
from aftertrace.analysis.links import Link, LinkKind
from aftertrace.analysis.narrative import phrase

ROOT = Path(__file__).resolve().parents[2]
ROLES = kinds.ROLES
# (where kinds are declared, reasoned about and told: not where they are produced)
NOT_PRODUCERS = {"analysis/kinds.py", "analysis/links.py", "analysis/chain_rules.py", "analysis/narrative.py"}


def _producers() -> dict[str, str]:
    out = {}
    for pkg in ("ingest", "analysis"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel not in NOT_PRODUCERS:
                out[rel] = p.read_text()
    return out


@pytest.mark.parametrize("kind", list(LinkKind), ids=lambda k: k.value)
def test_every_kind_has_its_own_phrase(kind):
    bare = Link(kind=kind, ts_ns=1, summary="s", source="x", host="h", rank=0, pid=1)
    with_attrs = Link(kind=kind, ts_ns=1, summary="s", source="x", host="h", rank=0, pid=1, entity="/job",
                      attrs=(("cpu", 3), ("xid", 79), ("iface", "ib0"), ("signal", "SIGKILL")))
    for l in (bare, with_attrs):
        said = phrase(l)
        assert not said.startswith(kind.value.replace("_", " ") + " ("), said     # (the fallback: its bare name)
        assert "  " not in said and "None" not in said, said


def test_every_kind_is_emitted_somewhere():
    sources = _producers()
    silent = []
    for k in LinkKind:
        spelled = (f'"{k.value}"', f"'{k.value}'", f"LinkKind.{k.name}", f"K.{k.name}")
        if not any(any(s in text for s in spelled) for text in sources.values()):
            silent.append(k.value)
    assert silent == [], f"kinds nothing emits: {silent}"


def test_the_rules_name_only_kinds_and_roles():
    values = {k.value for k in LinkKind}
    for r in chain_rules.RULES:
        assert r.cause in values | ROLES, r
        assert r.effect in values | ROLES, r
        assert r.why and 0 < r.prior <= 1 and r.window_s > 0, r
    assert kinds.CONDITIONS <= values and kinds.NOT_ORIGINS <= values
    assert chain_rules.NEVER_ORIGIN == {kinds.STOPPED, "clock_skew", "clock_step"}
    # every role is reachable from a kind: role() maps two kinds onto the four finding roles
    assert {chain_rules.role(Link(kind=LinkKind.PYTHON_EXCEPTION, ts_ns=1, summary="x", source="s",
                                  attrs=(("exc_msg", m),))) for m in ("Connection closed by peer", "boom")} == \
        {kinds.PEER_ERROR, kinds.SELF_ERROR}


def test_the_kinds_are_declared_once_and_the_enum_is_theirs():
    # LinkKind is made from the catalogue: one member per declared kind, in its order, by its value
    assert [k.value for k in LinkKind] == [k.value for k in kinds.KINDS]
    assert all(LinkKind[k.value.upper()] is LinkKind(k.value) for k in kinds.KINDS)
    assert kinds.CONDITIONS == {"cpu_throttle", "cpu_pressure", "memory_pressure", "memory_growth", "foreign_memory",
                                "step_slowdown", "straggler", "cpu_contention", "cgroup_frozen", "thermal_throttle",
                                "dataloader_stall"}
    assert all(k.about and k.about == k.about.strip() for k in kinds.KINDS)
