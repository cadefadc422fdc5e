"""Every bundle of the evaluation corpus (``corpus.py``): no chain puts a cause after its effect,
and on the development half the best chain starts at the true origin, inside its stated window.

The held-out half is checked for the time property only here; its accuracy is measured by
``bench/eval_chains.py`` and never tuned on."""
import json

import pytest

from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

from .corpus import build, cases, causal_order_violations, judge

CASES = [c for c in cases() if c.scenario is None and c.id.endswith("/full")]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return Service(Settings.from_env(home=tmp_path_factory.mktemp("home")))


@pytest.mark.skipif(not CASES, reason="no corpus index")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_bundle(case, service, tmp_path):
    rep = service.analyze(service.submit_path(build(case, tmp_path), title=case.id).incident_id)
    assert causal_order_violations(rep) == [], rep["summary"]
    if case.half == "dev":
        res = judge(case, rep)
        assert res["ok"], json.dumps(res, indent=1) + "\n" + rep["summary"]
