"""The chain search on hand-built findings: the worked example of ``analysis/chains.py``
exactly, explaining-away, scopes, time order, duplicates and stalled ranks."""
import pytest

from analysis import chains, findings, narrative, progress
from analysis.links import Evidence, Link, LinkKind as K, Provenance

S = 1_000_000_000
T0 = 1795958904409226000          # 13:28:24.409226 UTC, the sample's throttle snapshot


def at(s: float) -> int:
    return T0 + int(round(s * S))


def link(kind, t, host="vm", rank=None, pid=None, conf=1.0, prov=Provenance.READ, summary=None, **attrs):
    return Link(kind=kind, ts_ns=t, summary=summary or f"{kind.value} {rank} {pid}", source="x", host=host, rank=rank, pid=pid,
                evidence=(Evidence("x", 1, "line"),), provenance=prov, confidence=conf, attrs=tuple(attrs.items()))


def worked_example():
    throttle = link(K.CPU_THROTTLE, T0, conf=0.9, prov=Provenance.INFERRED)
    growth = link(K.MEMORY_GROWTH, at(15.49983), conf=0.9, prov=Provenance.INFERRED)
    oom = link(K.OOM_KILL, at(31.351366), pid=17988)
    kill = link(K.SIGNAL_KILL, at(31.664274), rank=0, pid=17988, signal="SIGKILL", root_cause=True)
    stop = link(K.SIGNAL_KILL, at(31.737774), rank=1, pid=17989, signal="SIGTERM", root_cause=False)
    fail = link(K.JOB_FAILURE, at(31.737774), root_cause_rank=0, root_cause_pid=17988)
    return throttle, growth, oom, kill, stop, fail


def test_worked_example_scores_exactly():
    throttle, growth, oom, kill, stop, fail = worked_example()
    best, *alts = chains.find_chains([throttle, growth, oom, kill, stop, fail], fail)
    assert best.links == (throttle, growth, oom, kill, fail)
    assert [round(e.strength, 3) for e in best.edges] == [0.402, 0.723, 0.949, 0.900]
    assert round(best.score, 3) == 0.635
    assert [e.provenance for e in best.edges][2] == Provenance.READ      # the same pid, stated by both
    # the launcher's SIGTERM of rank 1 is never a cause
    assert all(stop not in c.links for c in [best, *alts])
    # the alternatives that merely start later on the same path are not reported
    assert all(c.origin is not growth and c.origin is not oom for c in alts)
    lead = (fail.ts_ns - best.origin.ts_ns) / S
    assert lead == pytest.approx(31.737774)


def test_decoy_on_another_host_is_not_a_cause():
    throttle, growth, oom, kill, stop, fail = worked_example()
    xid = link(K.GPU_XID, at(11.0), host="node-b")
    best = chains.find_chains([xid, throttle, growth, oom, kill, fail], fail)[0]
    assert xid not in best.links and best.origin is throttle


def test_cause_after_effect_beyond_uncertainty_is_refused():
    _, _, oom, kill, _, fail = worked_example()
    late = link(K.MEMORY_GROWTH, oom.ts_ns + 5 * S, conf=0.9)
    best = chains.find_chains([late, oom, kill, fail], fail)[0]
    assert late not in best.links


def test_explained_origin_gives_way_to_its_cause():
    _, _, oom, kill, _, fail = worked_example()
    # without the OOM line the SIGKILL is the origin; with it, the SIGKILL is explained
    assert chains.find_chains([kill, fail], fail)[0].origin is kill
    assert chains.find_chains([oom, kill, fail], fail)[0].origin is oom


def test_hang_stalled_rank_is_origin_and_launcher_blame_is_a_victim():
    p0 = progress.RankProgress(0, "vm", 100, last_step=4, last_step_ns=at(0))
    p1 = progress.RankProgress(1, "vm", 101, last_step=4, last_step_ns=at(0.001), last_line_ns=at(0.2),
                               last_line_ev=Evidence("log", 92, "injecting fault hang at step 5"))
    timeout = link(K.COLLECTIVE_TIMEOUT, at(5), rank=0, pid=100, ts_lo_ns=at(0.2), ts_hi_ns=at(9.5),
                   ts_bound="between")
    exit0 = link(K.PROCESS_EXIT, at(7.5), rank=0, pid=100, exitcode=1, root_cause=True, ts_resolution_ns=S)
    stop1 = link(K.SIGNAL_KILL, at(9.5), rank=1, pid=101, signal="SIGTERM", root_cause=False)
    p0.ended, p1.ended = [timeout, exit0], [stop1]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout, exit0, stop1])
    assert (stall.kind, stall.rank, stall.ts_ns) == (K.RANK_STALLED, 1, at(0.2))
    assert stall.evidence[-1].line == 92 and stall.provenance == Provenance.INFERRED
    fail = link(K.JOB_FAILURE, at(7.5), root_cause_rank=0, root_cause_pid=100, ts_resolution_ns=S)
    best = chains.find_chains([stall, timeout, exit0, stop1, fail], fail)[0]
    assert [l.kind for l in best.links] == [K.RANK_STALLED, K.COLLECTIVE_TIMEOUT, K.PROCESS_EXIT, K.JOB_FAILURE]
    text = narrative.summary(fail, [best], [])
    assert "rank 0, was a victim" in text and "rank 1" in text


def test_no_stall_when_every_rank_failed_itself():
    p0 = progress.RankProgress(0, last_line_ns=at(0))
    p1 = progress.RankProgress(1, last_line_ns=at(0.5))
    exc = link(K.PYTHON_EXCEPTION, at(1), rank=1, exc_type="RuntimeError", exc_msg="injected failure")
    peer = link(K.PYTHON_EXCEPTION, at(1.2), rank=0, gloo_error="Connection closed by peer")
    p0.ended, p1.ended = [peer], [exc]
    assert progress.stalled_links({0: p0, 1: p1}, [exc, peer]) == []
    fail = link(K.JOB_FAILURE, at(2), root_cause_rank=1)
    best = chains.find_chains([exc, peer, fail], fail)[0]
    assert best.origin is exc and peer not in best.links


def test_duplicate_copies_merge_to_the_narrower_window():
    wide = link(K.COLLECTIVE_TIMEOUT, at(0), rank=0, summary="rank 0: gloo recv timed out", ts_bound="after")
    narrow = link(K.COLLECTIVE_TIMEOUT, at(5), rank=0, pid=100, summary="rank 0: gloo recv timed out",
                  ts_lo_ns=at(0.2), ts_hi_ns=at(9.5), ts_bound="between")
    other_rank = link(K.COLLECTIVE_TIMEOUT, at(5), rank=1)
    (merged, kept) = findings.merge_duplicates([wide, narrow, other_rank])
    assert merged.pid == 100 and merged.timing_ns() == (at(0.2), at(9.5)) and kept is other_rank
    assert len(merged.evidence) == 1    # both copies cite the same (source, line) here


def test_terminal_failure_without_a_launcher_report():
    oom = link(K.OOM_KILL, at(1), pid=5)
    stop = link(K.SIGNAL_KILL, at(2), rank=1, signal="SIGTERM")
    assert findings.terminal_failure([oom, stop]) is oom
    unplaced = link(K.OOM_KILL, None, pid=6)
    assert findings.terminal_failure([unplaced]) is unplaced
    assert findings.terminal_failure([link(K.CPU_THROTTLE, at(0))]) is None
