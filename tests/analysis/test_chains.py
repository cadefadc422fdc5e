"""The diagnosis on hand-built findings: the worked example of ``analysis/chains.py`` exactly,
parsimony (explaining away, decoys), scopes, time order, duplicates and stalled ranks."""
import dataclasses
import math

import pytest

from aftertrace.analysis import chains, findings, narrative, progress
from aftertrace.analysis.links import Evidence, Link, LinkKind as K, Provenance

S = 1_000_000_000
T0 = 1796119200 * S            # 2026-12-01 10:00:00 UTC


def at(s: float) -> int:
    return T0 + int(round(s * S))


def link(kind, t, host="vm", rank=None, pid=None, conf=1.0, prov=Provenance.READ, summary=None, entity=None,
         **attrs):
    return Link(kind=kind, ts_ns=t, summary=summary or f"{kind.value} {rank} {pid}", source="x", host=host, rank=rank,
                pid=pid, evidence=(Evidence("x", 1, "line"),), provenance=prov, confidence=conf,
                attrs=tuple(attrs.items()), entity=entity)


PIDS = {0: 100, 1: 101}


def worked_example():
    decoy = link(K.CPU_THROTTLE, at(-20), conf=0.9, prov=Provenance.INFERRED, entity="/backup", until_ns=at(40),
                 membership="read", members=(555,), job_pids=(), ranks=(), outside=True)
    stall = link(K.RANK_STALLED, at(0), rank=1, pid=101, conf=0.85, prov=Provenance.INFERRED,
                 ts_lo_ns=at(0), ts_hi_ns=at(0.37), ts_bound="between")
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.2), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(30.1),
                   ts_hi_ns=at(30.3), ts_bound="between")
    exit0 = link(K.PROCESS_EXIT, at(31), rank=0, pid=100, exitcode=1, root_cause=True, ts_resolution_ns=S)
    fail = link(K.JOB_FAILURE, at(31.5), root_cause_rank=0, root_cause_pid=100)
    stop = link(K.SIGNAL_KILL, at(31.6), rank=1, pid=101, signal="SIGTERM", root_cause=False)
    return decoy, stall, timeout, exit0, fail, stop


def test_worked_example_scores_exactly():
    decoy, stall, timeout, exit0, fail, stop = ex = worked_example()
    graph = chains.build_graph(list(ex), chains.Context(PIDS, {"vm"}))
    strength = {(e.cause.kind, e.effect.kind): round(e.strength, 3) for es in graph.values() for e in es}
    assert strength[(K.RANK_STALLED, K.COLLECTIVE_TIMEOUT)] == 0.686
    assert strength[(K.COLLECTIVE_TIMEOUT, K.PROCESS_EXIT)] == 0.95          # lineage
    assert strength[(K.PROCESS_EXIT, K.JOB_FAILURE)] == 0.899
    assert strength[(K.COLLECTIVE_TIMEOUT, K.JOB_FAILURE)] == 0.898
    assert strength[(K.RANK_STALLED, K.JOB_FAILURE)] == 0.457
    assert not any(e.cause is decoy for es in graph.values() for e in es)   # no job process in /backup
    best, *alts = chains.find_chains(list(ex), fail, PIDS)
    assert best.links == (stall, timeout, exit0, fail)
    assert round(best.score, 3) == 0.651
    assert math.log(best.score) * 5 == pytest.approx(math.log(0.2) + math.log(0.6856) + math.log(0.95)
                                                     + math.log(0.8992), abs=2e-3)
    assert [(e.effect, round(e.strength, 3)) for e in best.consequences] == [(stop, 0.807)]
    assert best.unexplained == (decoy,)
    assert alts == []        # the timeout alone is 3.4 times less likely: under the 30 % shown


def test_worked_example_summary_names_origin_victim_and_unrelated():
    ex = worked_example()
    best = chains.find_chains(list(ex), ex[4], PIDS)[0]
    text = narrative.summary(ex[4], [best], [])
    assert text.startswith("It started with rank 1 (pid 101) stopping")
    assert "rank 0 is a victim: it failed because of rank 1" in text
    assert "Unrelated" in text and "/backup" in text and "no job process in it" in text
    assert " -" not in text.replace(" -> ", "")       # no negative offsets anywhere


def test_decoy_on_another_host_is_not_a_cause():
    decoy, stall, timeout, exit0, fail, stop = worked_example()
    xid = link(K.GPU_XID, at(-5), host="node-b")
    best = chains.find_chains([xid, stall, timeout, exit0, fail, stop], fail, PIDS)[0]
    assert xid not in best.links and best.origin is stall and xid in best.unexplained


def test_cause_after_effect_beyond_uncertainty_is_refused():
    oom = link(K.OOM_KILL, at(10), pid=100)
    kill = link(K.SIGNAL_KILL, at(10.3), rank=0, pid=100, signal="SIGKILL", root_cause=True)
    fail = link(K.JOB_FAILURE, at(10.5), root_cause_rank=0)
    late = link(K.MEMORY_GROWTH, at(15), conf=0.9, entity="/job", until_ns=at(16))
    best = chains.find_chains([late, oom, kill, fail], fail, PIDS)[0]
    assert late not in best.links and best.origin is oom


def test_explained_origin_gives_way_to_its_cause_only_when_the_edge_beats_a_coincidence():
    oom = link(K.OOM_KILL, at(10), pid=100, oom_memcg="/job")
    kill = link(K.SIGNAL_KILL, at(10.3), rank=0, pid=100, signal="SIGKILL", root_cause=True)
    fail = link(K.JOB_FAILURE, at(10.5), root_cause_rank=0)
    assert chains.find_chains([kill, fail], fail, PIDS)[0].origin is kill
    assert chains.find_chains([oom, kill, fail], fail, PIDS)[0].origin is oom
    growth = link(K.MEMORY_GROWTH, at(2), conf=0.9, entity="/job", until_ns=at(10), near_limit=True)
    assert chains.find_chains([growth, oom, kill, fail], fail, PIDS)[0].origin is growth
    # the same growth of a cgroup outside the OOM's memory limit explains nothing of it
    other = dataclasses.replace(growth, entity="/other")
    assert chains.find_chains([other, oom, kill, fail], fail, PIDS)[0].origin is oom


def test_a_condition_that_ended_long_before_explains_nothing():
    oom = link(K.OOM_KILL, at(100), pid=100, oom_memcg="/job")
    fail = link(K.JOB_FAILURE, at(100.5), root_cause_rank=0)
    startup = link(K.MEMORY_GROWTH, at(2), conf=0.9, entity="/job", until_ns=at(12), near_limit=False)
    assert chains.find_chains([startup, oom, fail], fail, PIDS)[0].origin is oom


def test_a_teardown_crash_is_never_the_origin():
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.0), rank=0, pid=100, wait_ms=30000)
    segv = link(K.SEGFAULT, at(30.2), pid=100)
    kill = link(K.SIGNAL_KILL, at(31), rank=0, pid=100, signal="SIGSEGV", root_cause=True, ts_resolution_ns=S)
    fail = link(K.JOB_FAILURE, at(31.2), root_cause_rank=0)
    best = chains.find_chains([timeout, segv, kill, fail], fail, PIDS)[0]
    assert best.origin is timeout
    assert all(c.origin not in (segv, kill) for c in chains.find_chains([timeout, segv, kill, fail], fail, PIDS))


def test_a_dataloader_workers_segfault_is_the_origin_of_its_ranks_dead_worker():
    # the kernel names the worker (pid 1043, rank 1's: the rank's log named it); the rank reports a
    # dead worker and exits; a segfault of rank 0's worker explains nothing of rank 1
    segv = link(K.SEGFAULT, at(0), rank=1, pid=1043)
    died = link(K.DATALOADER_WORKER_KILLED, at(0.6), rank=1, pid=101, worker_pids="1043")
    exit1 = link(K.PROCESS_EXIT, at(1), rank=1, pid=101, exitcode=1, root_cause=True, ts_resolution_ns=S)
    fail = link(K.JOB_FAILURE, at(1.2), root_cause_rank=1, root_cause_pid=101)
    best = chains.find_chains([segv, died, exit1, fail], fail, PIDS)[0]
    assert [l.kind for l in best.links] == [K.SEGFAULT, K.DATALOADER_WORKER_KILLED, K.PROCESS_EXIT, K.JOB_FAILURE]
    other = dataclasses.replace(segv, rank=0, pid=1042)
    best = chains.find_chains([other, died, exit1, fail], fail, PIDS)[0]
    assert best.origin is died


def test_hang_stalled_rank_is_origin_and_launcher_blame_is_a_victim():
    p0 = progress.RankProgress(0, "vm", 100, last_step=4, last_step_ns=at(0), step_time_s=0.035)
    p1 = progress.RankProgress(1, "vm", 101, last_step=4, last_step_ns=at(0.001), last_line_ns=at(0.2),
                               last_line_ev=Evidence("log", 92, "step=4"), step_time_s=0.035)
    timeout = link(K.COLLECTIVE_TIMEOUT, at(30.5), rank=0, pid=100, wait_ms=30000, ts_lo_ns=at(30.4),
                   ts_hi_ns=at(30.6), ts_bound="between")
    exit0 = link(K.PROCESS_EXIT, at(31), rank=0, pid=100, exitcode=1, root_cause=True, ts_resolution_ns=S)
    stop1 = link(K.SIGNAL_KILL, at(31.5), rank=1, pid=101, signal="SIGTERM", root_cause=False)
    p0.ended, p1.ended = [timeout, exit0], [stop1]
    (stall,) = progress.stalled_links({0: p0, 1: p1}, [timeout, exit0, stop1])
    assert (stall.kind, stall.rank, stall.ts_ns) == (K.RANK_STALLED, 1, at(0.2))
    assert stall.timing_ns() == (at(0.2), at(0.6 + 0.07))      # entered by 0.6, two steps of 35 ms
    fail = link(K.JOB_FAILURE, at(31.5), root_cause_rank=0, root_cause_pid=100)
    best = chains.find_chains([stall, timeout, exit0, stop1, fail], fail, PIDS)[0]
    assert [l.kind for l in best.links] == [K.RANK_STALLED, K.COLLECTIVE_TIMEOUT, K.PROCESS_EXIT, K.JOB_FAILURE]


def test_no_stall_when_every_rank_failed_itself():
    p0 = progress.RankProgress(0, last_line_ns=at(0))
    p1 = progress.RankProgress(1, last_line_ns=at(0.5))
    exc = link(K.PYTHON_EXCEPTION, at(1), rank=1, exc_type="RuntimeError", exc_msg="injected failure")
    peer = link(K.PYTHON_EXCEPTION, at(1.2), rank=0, gloo_error="Connection closed by peer")
    p0.ended, p1.ended = [peer], [exc]
    assert progress.stalled_links({0: p0, 1: p1}, [exc, peer]) == []
    fail = link(K.JOB_FAILURE, at(2), root_cause_rank=1)
    best = chains.find_chains([exc, peer, fail], fail, PIDS)[0]
    assert best.origin is exc and peer not in best.links


def test_a_sigkill_after_an_ignored_sigterm_is_the_launchers():
    p1 = progress.RankProgress(1, "vm", 101, sigterm_ns=at(31))
    kill = link(K.SIGNAL_KILL, at(61.5), rank=1, pid=101, signal="SIGKILL", root_cause=False, ts_resolution_ns=S)
    (marked,) = progress.launcher_stops({1: p1}, [kill])
    assert marked.attr("sent_by_launcher") is True and marked.attr("sigterm_ignored_s") == 31.5
    assert not progress.own_failure(marked)


def test_a_sigterm_the_launcher_never_sent_is_the_ranks_own_failure():
    p1 = progress.RankProgress(1, "vm", 101)          # no "Sending process 101 closing signal" line
    term = link(K.SIGNAL_KILL, at(10), rank=1, pid=101, signal="SIGTERM", root_cause=True, ts_resolution_ns=S)
    (marked,) = progress.launcher_stops({1: p1}, [term])
    assert marked.attr("outside_signal") is True and progress.own_failure(marked)
    fail = link(K.JOB_FAILURE, at(10.5), root_cause_rank=1)
    assert chains.find_chains([marked, fail], fail, PIDS)[0].origin is marked
    p1.sigterm_ns = at(9)                              # the launcher did send it: a stop
    (stop,) = progress.launcher_stops({1: p1}, [term])
    assert stop.attr("outside_signal") is None and not progress.own_failure(stop)


def test_a_rank_that_exits_with_an_error_code_did_not_stall():
    p0 = progress.RankProgress(0, "vm", 100, last_line_ns=at(0))
    p1 = progress.RankProgress(1, "vm", 101, last_line_ns=at(0.1))
    gone = link(K.PROCESS_EXIT, at(0), rank=0, pid=100, exitcode=3, root_cause=True, ts_resolution_ns=S)
    peer = link(K.PYTHON_EXCEPTION, at(0.2), rank=1, pid=101, gloo_error="Connection closed by peer")
    p0.ended, p1.ended = [gone], [peer]
    assert progress.stalled_links({0: p0, 1: p1}, [gone, peer]) == []
    fail = link(K.JOB_FAILURE, at(0.5), root_cause_rank=0)
    assert chains.find_chains([gone, peer, fail], fail, PIDS)[0].origin is gone


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
