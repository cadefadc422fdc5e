"""Every chain scenario (``scenarios.py``): the best chain starts at the true origin and ends at
the failure, and the origin's time window holds the true start of the fault."""
import json

import pytest

from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

from .corpus import causal_order_violations
from .scenarios import SCENARIOS, build, judge


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    return Service(Settings.from_env(home=home))


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(sc, service, tmp_path):
    bundle = build(sc, tmp_path)
    sub = service.submit_path(bundle, title=sc.name)
    rep = service.analyze(sub.incident_id)
    res = judge(sc, rep)
    msg = json.dumps(res, indent=1) + "\n" + rep["summary"]
    assert causal_order_violations(rep) == [], msg
    assert res["failure_ok"], msg
    assert res["top1"] and res["ends_at_failure"] and res["includes_ok"] and res["hosts_ok"], msg
    if sc.true_origin_utc:
        assert res["origin_window_s"] == 0.0, msg          # the truth lies in the stated window
        assert abs(res["origin_err_s"]) < 1.0, msg
