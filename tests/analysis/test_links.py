"""Link.timing_ns: the window a finding may have happened in, computed once per link."""
import dataclasses
import pickle

from aftertrace.analysis.links import AFTER_BOUND_NS, Link, LinkKind


def test_window_widens_for_bounds_resolution_and_uncertainty():
    l = Link(LinkKind.PYTHON_EXCEPTION, 1_000, "a", "x.log", uncertainty_ns=10,
             attrs=(("ts_lo_ns", 900), ("ts_hi_ns", 1_200), ("ts_lo_ns", 0)))
    assert l.timing_ns() == (890, 1_210)        # the first ts_lo_ns counts, as attr() reads it
    assert Link(LinkKind.JOB_FAILURE, 5_000, "b", "y", attrs=(("ts_resolution_ns", 1_000),)).timing_ns() == (5_000, 6_000)
    assert Link(LinkKind.JOB_FAILURE, 5, "b", "y", attrs=(("ts_bound", "after"),)).timing_ns() == (5, 5 + AFTER_BOUND_NS)
    assert Link(LinkKind.JOB_FAILURE, None, "b", "y").timing_ns() is None


def test_a_replaced_link_has_its_own_window_and_the_cache_is_not_a_field():
    l = Link(LinkKind.OOM_KILL, 100, "s", "x", attrs=(("ts_lo_ns", 50), ("ts_hi_ns", 150)))
    assert l.timing_ns() == (50, 150)
    m = dataclasses.replace(l, ts_ns=1_000, attrs=())
    assert m.timing_ns() == (1_000, 1_000) and l.timing_ns() == (50, 150)
    fresh = Link(LinkKind.OOM_KILL, 100, "s", "x", attrs=(("ts_lo_ns", 50), ("ts_hi_ns", 150)))
    assert fresh == l and hash(fresh) == hash(l) and repr(fresh) == repr(l)
    assert pickle.loads(pickle.dumps(l)).timing_ns() == (50, 150)
