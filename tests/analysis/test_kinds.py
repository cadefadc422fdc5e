"""Every finding kind is whole: it has its own phrase in the report, a producer makes it, and the
chain rules name only kinds (and roles) that something makes — so a rule can never wait for a
finding nobody makes, and a new kind cannot reach a report as its bare name. The producers'
declarations (``emits``, ``EMITS``, gathered by ``kinds.producers()``) are held to their code."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aftertrace.analysis import chain_rules, kinds
from aftertrace.analysis.detectors import DETECTORS
from aftertrace.analysis.links import Link, LinkKind
from aftertrace.analysis.narrative import phrase
from aftertrace.ingest.formats.logs.engine import KINDS_WRITTEN

ROOT = Path(__file__).resolve().parents[2]
ROLES = kinds.ROLES
MADE = {k for v in kinds.producers().values() for k in v}


@pytest.mark.parametrize("kind", list(LinkKind), ids=lambda k: k.value)
def test_every_kind_has_its_own_phrase(kind):
    bare = Link(kind=kind, ts_ns=1, summary="s", source="x", host="h", rank=0, pid=1)
    with_attrs = Link(kind=kind, ts_ns=1, summary="s", source="x", host="h", rank=0, pid=1, entity="/job",
                      attrs=(("cpu", 3), ("xid", 79), ("iface", "ib0"), ("signal", "SIGKILL")))
    for l in (bare, with_attrs):
        said = phrase(l)
        assert not said.startswith(kind.value.replace("_", " ") + " ("), said     # (the fallback: its bare name)
        assert "  " not in said and "None" not in said, said


def test_every_kind_is_made_by_a_producer():
    assert sorted({k.value for k in LinkKind} - MADE) == [], "kinds nothing makes"
    assert sorted(MADE - {k.value for k in LinkKind}) == [], "producers declare kinds the catalogue lacks"


def test_the_rules_name_only_kinds_and_roles():
    values = {k.value for k in LinkKind}
    for r in chain_rules.rules():
        assert r.cause in (values & MADE) | ROLES, r
        assert r.effect in (values & MADE) | ROLES, r
        assert r.why and 0 < r.prior <= 1 and r.window_s > 0, r
    assert kinds.CONDITIONS <= values and kinds.NOT_ORIGINS <= values
    assert chain_rules.never_origin() == {kinds.STOPPED} | kinds.NOT_ORIGINS
    # every role is reachable from a kind: role() maps two kinds onto the four finding roles
    assert {chain_rules.role(Link(kind=LinkKind.PYTHON_EXCEPTION, ts_ns=1, summary="x", source="s",
                                  attrs=(("exc_msg", m),))) for m in ("Connection closed by peer", "boom")} == \
        {kinds.PEER_ERROR, kinds.SELF_ERROR}


def test_the_kinds_are_declared_once_and_linkkind_is_theirs():
    # LinkKind is the catalogue: one member per declared kind, in its order, by its value; the
    # kinds of KINDS first, then those the producer modules declare themselves
    every = kinds.catalogue()
    assert [k.value for k in LinkKind] == [k.value for k in every]
    assert every[:len(kinds.KINDS)] == kinds.KINDS
    assert all(LinkKind[k.value.upper()] is LinkKind(k.value) is getattr(LinkKind, k.value.upper()) for k in every)
    assert kinds.CONDITIONS == {k.value for k in every if k.condition}
    assert kinds.NOT_ORIGINS == {k.value for k in every if not k.origin}
    assert all(k.about and k.about == k.about.strip() for k in every)


def test_a_detector_declares_its_kind_with_its_phrase_and_rules():
    # foreign_memory is declared in detectors/foreign_memory.py alone: a member like the others,
    # told in its own words, its rules among the chain's
    from aftertrace.analysis.detectors import foreign_memory
    k = LinkKind("foreign_memory")
    assert k is LinkKind.FOREIGN_MEMORY is foreign_memory.FOREIGN_MEMORY and k == "foreign_memory"
    assert "foreign_memory" not in {d.value for d in kinds.KINDS}
    assert phrase(Link(kind=k, ts_ns=1, summary="s", source="x", host="node-3")) == \
        "memory on node-3 taken by processes outside the job's cgroups"
    assert {(r.cause, r.effect) for r in chain_rules.rules() if "foreign_memory" in (r.cause, r.effect)} == \
        {("foreign_memory", "oom_kill"), ("foreign_memory", "memory_pressure"), ("foreign_memory", "memory_growth")}
    assert any(r.cause == "foreign_memory" for r in chain_rules.by_effect()["oom_kill"])
    assert "foreign_memory" in kinds.CONDITIONS


def test_a_kind_is_a_string_that_survives_pickling_and_json():
    import json
    import pickle
    k = LinkKind.OOM_KILL
    assert pickle.loads(pickle.dumps(k)) is k and json.dumps([k]) == '["oom_kill"]'
    assert (k.value, k.name, repr(k)) == ("oom_kill", "OOM_KILL", "<LinkKind.OOM_KILL: 'oom_kill'>")
    with pytest.raises(ValueError, match="'no_such_kind' is not a declared finding kind"):
        LinkKind("no_such_kind")
    with pytest.raises(AttributeError, match="no finding kind 'no_such_kind'"):
        LinkKind.NO_SUCH_KIND


@pytest.mark.parametrize("bad, said", [
    (kinds.FindingKind("oom_kill", "again", lambda l, r: "x"), "declared twice"),
    (kinds.FindingKind("stopped", "a role's name", lambda l, r: "x"), "cannot be a finding kind"),
    (kinds.FindingKind("Bad-Name", "not an identifier", lambda l, r: "x"), "cannot be a finding kind"),
    (kinds.FindingKind("new_kind", " padded ", lambda l, r: "x"), "say what it means"),
    (kinds.FindingKind("new_kind", "a rule about others", lambda l, r: "x",
                       rules=(kinds.Rule("oom_kill", "job_failure", kinds.Scope.JOB, 0.5, 60, "why"),)),
     "does not name it"),
])
def test_a_declaration_that_would_break_the_catalogue_is_refused(bad, said):
    before = len(kinds.catalogue())
    with pytest.raises(ValueError, match=said):
        kinds.declare(bad)
    assert len(kinds.catalogue()) == before


def _declared_in(tree: ast.AST) -> dict[str, str]:
    """A module's own kinds: ``NAME = declare(FindingKind("value", ...))`` -> {NAME: value}."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "declare" and len(node.targets) == 1:
            fk = node.value.args[0]
            out[node.targets[0].id] = fk.args[0].value
    return out


def _made_in(tree: ast.AST) -> set[str]:
    """The kinds a module's code makes findings of: ``Link(kind=LinkKind.X)``, ``replace(...,
    kind=K.X)`` and the like, where the kind is spelled out, or is one the module declares."""
    out = set()
    own = _declared_in(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(kw.arg == "kind" for kw in node.keywords):
            f = node.func
            if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in ("Link", "replace"):
                v = next(kw.value for kw in node.keywords if kw.arg == "kind")
                if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id in ("LinkKind", "K"):
                    out.add(LinkKind[v.attr].value)
                elif isinstance(v, ast.Name) and v.id in own:
                    out.add(own[v.id])
    return out


def test_the_analysis_modules_that_make_findings_declare_them():
    producers = {f"analysis/{m}.py" for m in kinds.PRODUCER_MODULES} | {
        Path(m.__file__).relative_to(ROOT).as_posix() for m in DETECTORS}
    made = kinds.producers()
    for p in sorted((ROOT / "analysis").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        got = _made_in(ast.parse(p.read_text()))
        if not got:
            continue
        assert rel in producers, f"{rel} makes {sorted(got)}: a detector module or one of kinds.PRODUCER_MODULES"
        name = ("detector " if "/detectors/" in rel else "analysis ") + p.stem
        assert got <= made[name], f"{rel} makes {sorted(got - made[name])} without declaring them in EMITS"


def test_the_log_engine_declares_the_kinds_its_code_writes():
    # every kind named by a string of the log engine's modules is one it declares it writes
    named = set()
    for p in (ROOT / "ingest" / "formats" / "logs").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds.BY_VALUE:
                named.add(node.value)
    assert named <= KINDS_WRITTEN, sorted(named - KINDS_WRITTEN)
