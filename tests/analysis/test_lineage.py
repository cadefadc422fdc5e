"""Process lineage: the worked example of ``analysis/lineage.py`` exactly."""
from aftertrace.analysis import lineage
from aftertrace.analysis.links import Evidence, Link, LinkKind as K

S = 1_000_000_000
T0 = 1796162400 * S + 30 * S      # 12:00:30 in the example's terms


def link(kind, t, rank=None, pid=None, **attrs):
    return Link(kind=kind, ts_ns=t, summary=kind.value, source="x", host="vm", rank=rank, pid=pid,
                evidence=(Evidence("x", 1, "l"),), attrs=tuple(attrs.items()))


def test_worked_example():
    timeout = link(K.COLLECTIVE_TIMEOUT, T0, rank=0, pid=100)
    segv = link(K.SEGFAULT, T0 + 200_000_000, pid=100)
    kill = link(K.SIGNAL_KILL, T0 + S, rank=0, signal="SIGSEGV", ts_resolution_ns=S)
    pairs = lineage.aftermath([kill, segv, timeout], {0: 100})
    assert sorted((a.kind, b.kind) for a, b in pairs) == [(K.COLLECTIVE_TIMEOUT, K.SEGFAULT),
                                                          (K.COLLECTIVE_TIMEOUT, K.SIGNAL_KILL)]


def test_a_launchers_exit_report_does_not_explain_the_exception_it_reports():
    exc = link(K.PYTHON_EXCEPTION, T0 + 38_000_000, rank=0, pid=100)
    exit_ = link(K.PROCESS_EXIT, T0, rank=0, pid=100, exitcode=1, ts_resolution_ns=S)   # whole second: [T0, T0+1s]
    assert [(a.kind, b.kind) for a, b in lineage.aftermath([exit_, exc], {0: 100})] == [
        (K.PYTHON_EXCEPTION, K.PROCESS_EXIT)]


def test_other_processes_and_launcher_stops_are_not_lineage():
    a = link(K.PYTHON_EXCEPTION, T0, rank=1, pid=101)
    b = link(K.PYTHON_EXCEPTION, T0 + S, rank=0, pid=100)
    stop = link(K.SIGNAL_KILL, T0 + 2 * S, rank=0, pid=100, signal="SIGTERM")
    pairs = lineage.aftermath([a, b, stop], {0: 100, 1: 101})
    assert (a, b) not in pairs
    assert pairs == [(b, stop)]        # the stop is rank 0's aftermath, never a first
