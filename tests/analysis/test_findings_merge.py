"""merge_duplicates, refine_launcher_times and the OOM-kill grouping give what a plain scan gives.

The package indexes them (per group, segment tree, bisection) so that analysis cost grows as
n log n with the number of findings; the straightforward versions below compare every finding
with every kept one (every launcher line, every group), exactly as described in the package's
docstrings. Both run on the real findings of every sample bundle and of a log of repeated real
crashes, and on hypothesis-generated findings with overlapping, nested, untimed and unbounded
windows, pids known and unknown.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from aftertrace.analysis import clocks, findings
from aftertrace.analysis.findings import DEDUP_WINDOW_NS, _merge_pair
from aftertrace.analysis.links import Evidence, Link, LinkKind, Provenance
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p.name for p in (ROOT / "sample_traces").iterdir()
                 if p.is_dir() and p.name != "scripts")


# -- the straightforward versions -------------------------------------------------------------
def _said(l: Link) -> str:
    """The summary less the rank it may open with ("rank 1: ..."): the same report either way."""
    return l.summary.removeprefix(f"rank {l.rank}: ") if l.rank is not None else l.summary


def ref_merge_duplicates(links: list[Link]) -> list[Link]:
    out: list[Link] = []
    for l in links:
        w = l.timing_ns()
        for i, m in enumerate(out):
            if (m.kind != l.kind or m.host != l.host or m.rank != l.rank or _said(m) != _said(l)
                    or m.kind == LinkKind.OOM_KILL or (m.pid and l.pid and m.pid != l.pid)):
                continue
            mw = m.timing_ns()
            if (w is None) != (mw is None):
                continue
            if w is not None and (w[0] > mw[1] or mw[0] > w[1]):
                continue
            out[i] = _merge_pair(m, l)
            break
        else:
            out.append(l)
    return out


def ref_refine(rows: list[dict], links: list[Link]) -> list[Link]:
    if not rows:
        return links
    out = []
    for l in links:
        res = l.attr("ts_resolution_ns")
        if not isinstance(res, int) or l.ts_ns is None or l.kind not in (
                LinkKind.JOB_FAILURE, LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT):
            out.append(l)
            continue
        near = [r for r in rows if l.ts_ns <= r["ts"] < l.ts_ns + res
                and (not l.host or not r["host"] or r["host"] == l.host)]
        if not near:
            out.append(l)
            continue
        attrs = {k: v for k, v in l.attrs if k != "ts_resolution_ns"}
        own_stop = [r for r in near if r["name"] == "closing_signal" and r["pid"] == l.pid and l.pid]
        if l.kind == LinkKind.JOB_FAILURE:
            ts = near[0]["ts"]
        elif own_stop and l.attr("root_cause") is False:
            ts = own_stop[0]["ts"]
        else:
            attrs.update(ts_lo_ns=l.ts_ns, ts_hi_ns=near[0]["ts"], ts_bound="between")
            ts = (l.ts_ns + near[0]["ts"]) // 2
        out.append(dataclasses.replace(l, ts_ns=ts, attrs=tuple(attrs.items())))
    return out


def ref_kill_groups(rows: list[dict]) -> list[list[dict]]:
    groups: list[list[dict]] = []
    for r in rows:
        for g in groups:
            g0 = g[0]
            if g0["host"] == r["host"] and g0["pid"] == r["pid"] and (
                    g0["ts_utc_ns"] is None or r["ts_utc_ns"] is None
                    or abs(g0["ts_utc_ns"] - r["ts_utc_ns"]) <= DEDUP_WINDOW_NS):
                g.append(r)
                break
        else:
            groups.append([r])
    return groups


class Rows:
    """A store whose every query answers the given rows (the functions' one query each)."""

    def __init__(self, rows):
        self.rows = rows

    def query(self, sql, params=None):
        return [dict(r) for r in self.rows]


def _same_groups(got, want):
    return [[id(r) for r in g] for g in got] == [[id(r) for r in g] for g in want]


# -- real findings ----------------------------------------------------------------------------
def _crash_log_bundle(dest: Path) -> Path:
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "bench" / "bench_analysis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.crash_bundle(600_000, dest)     # the sample logs' crashes, played three times


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    svc = Service(Settings.from_env(home=root / "home"))
    out = {}
    for name in SAMPLES + ["repeated-crashes"]:
        path = ROOT / "sample_traces" / name if name in SAMPLES else _crash_log_bundle(root / name)
        iid = svc.submit_path(path).incident_id
        svc.analyze(iid)
        out[name] = iid
    return svc.store, out


@pytest.mark.parametrize("name", SAMPLES + ["repeated-crashes"])
def test_same_results_on_real_findings(analysed, name):
    store, iids = analysed
    iid = iids[name]
    raw = findings.oom_kills(store, iid) + findings.typed_events(store, iid)
    rows = store.query(
        """SELECT e.ts_utc_ns AS ts, e.name, TRY_CAST(json_extract_string(e.attrs, '$.worker_pid') AS BIGINT) AS pid,
                  COALESCE(e.host, s.host) AS host
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.name IN ('worker_failed', 'closing_signal') AND e.ts_utc_ns IS NOT NULL
           ORDER BY e.ts_utc_ns""", [iid])
    refined = findings.refine_launcher_times(Rows(rows), iid, raw)
    assert refined == ref_refine(rows, raw)
    links = findings.anomalies(store, iid) + clocks.skew_links(clocks.align(store, iid))
    merged = findings.merge_duplicates(links)
    assert merged == ref_merge_duplicates(links)
    if name == "logs-exception":        # (a worker's stderr.log and the launcher's --tee copy)
        assert len(merged) < len(links)
    if name == "repeated-crashes":      # every copy's launcher report is refined
        assert refined != raw
    # the same links in reverse and interleaved orders (the merge depends on the order)
    for order in (links[::-1], links[::2] + links[1::2]):
        assert findings.merge_duplicates(order) == ref_merge_duplicates(order)


def test_oom_kill_groups_on_real_kills(analysed):
    store, iids = analysed
    for name, iid in iids.items():
        rows = store.query(
            """SELECT e.ts_utc_ns, COALESCE(e.host, s.host) AS host, e.pid
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.kind = 'oom_kill' ORDER BY e.ts_utc_ns NULLS LAST""", [iid])
        assert _same_groups(findings._kill_groups(rows), ref_kill_groups(rows)), name


# -- generated findings -----------------------------------------------------------------------
T = 1_800_000_000_000_000_000
STEP = 250_000_000
times = st.integers(0, 40).map(lambda s: T + s * STEP) | st.integers(0, 400).map(lambda s: T + s * STEP)
# Few groups (kind, host, rank, summary), so that copies meet: each group gets many findings.
GROUPS = [(LinkKind.PYTHON_EXCEPTION, "n1", 0, "a"), (LinkKind.SIGNAL_KILL, None, 1, "a"),
          (LinkKind.JOB_FAILURE, "", None, "b"), (LinkKind.OOM_KILL, "n1", None, "a"),
          (LinkKind.PROCESS_EXIT, "n2", 1, "a")]


@st.composite
def links(draw, groups=GROUPS):
    ts = draw(st.none() | times)
    attrs = {}
    if draw(st.booleans()):
        lo = draw(times)
        attrs.update(ts_lo_ns=lo, ts_hi_ns=lo + draw(st.integers(0, 8)) * STEP)
    if draw(st.booleans()):
        attrs["ts_resolution_ns"] = draw(st.sampled_from([4 * STEP, 2 * STEP, 0]))
    bound = draw(st.sampled_from([None, None, None, "after", "between"]))
    if bound:
        attrs["ts_bound"] = bound
    rc = draw(st.sampled_from([None, True, False]))
    if rc is not None:
        attrs["root_cause"] = rc
    line = draw(st.integers(1, 6))
    kind, host, rank, summary = draw(st.sampled_from(groups))
    return Link(kind=kind, ts_ns=ts, summary=summary, source=draw(st.sampled_from(["x.log", "y.log"])),
                host=host, rank=rank, pid=draw(st.sampled_from([None, 0, 11, 12, 13])),
                evidence=(Evidence("x.log", line, f"line {line}"),), provenance=Provenance.READ,
                confidence=draw(st.sampled_from([1.0, 0.9])),
                uncertainty_ns=draw(st.sampled_from([None, 0, STEP, 12 * STEP])),
                attrs=tuple(attrs.items()))


@st.composite
def launcher_rows(draw):
    n = draw(st.integers(0, 12))
    rows = [{"ts": draw(times) + draw(st.integers(0, 3)) * 100_000_000,
             "name": draw(st.sampled_from(["worker_failed", "closing_signal"])),
             "pid": draw(st.sampled_from([None, 0, 11, 12])), "host": draw(st.sampled_from([None, "", "n1", "n2"]))}
            for _ in range(n)]
    return sorted(rows, key=lambda r: r["ts"])


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(links(), max_size=60) | st.lists(links(GROUPS[:1]), max_size=60))
def test_merge_same_as_scan(ls):
    assert findings.merge_duplicates(ls) == ref_merge_duplicates(ls)


def test_merge_takes_the_first_kept_copy_of_several():
    """Two kept copies that overlap (their pids differ) and a third copy without a pid: it
    merges into the first kept, also when an earlier kept copy elsewhere in time is searched
    first."""
    def at(s, pid, **a):
        return Link(LinkKind.PYTHON_EXCEPTION, T + int(s * 1e9), "a", "x.log", "n1", 0, pid,
                    (Evidence("x.log", int(s), ""),), attrs=tuple(a.items()), uncertainty_ns=1_000_000_000)
    ls = [at(100, 11), at(5, 12), at(5.5, 13), at(5.2, None)]
    got = findings.merge_duplicates(ls)
    assert got == ref_merge_duplicates(ls) and len(got) == 3 and got[1].evidence[-1].line == 5


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(launcher_rows(), st.lists(links(), max_size=25))
def test_refine_same_as_scan(rows, ls):
    assert findings.refine_launcher_times(Rows(rows), "i", ls) == ref_refine(rows, ls)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.none() | st.integers(0, 30).map(lambda s: T + s * 1_000_000_000),
                          st.sampled_from([None, "n1", "n2"]), st.sampled_from([None, 7, 8])), max_size=30),
       st.booleans())
def test_kill_groups_same_as_scan(kills, in_order):
    rows = [{"ts_utc_ns": t, "host": h, "pid": p} for t, h, p in kills]
    if in_order:      # as the query gives them (by time, untimed last); else any order
        rows.sort(key=lambda r: (r["ts_utc_ns"] is None, r["ts_utc_ns"] or 0))
    assert _same_groups(findings._kill_groups(rows), ref_kill_groups(rows))


def test_oom_kills_merges_copies_through_the_groups():
    rows = [{"ts_utc_ns": T + d, "ts_raw_ns": 5, "host": "n1", "pid": None, "line": i, "text": f"kill {i}",
             "attrs": json.dumps({"victim_pid": 7, "victim_comm": "python", "anon_rss_kb": 1024}),
             "path": f"d{i}.txt", "clock_domain": "boot", "uncertainty_ns": u, "counted_by": None}
            for i, (d, u) in enumerate([(0, 2_000_000), (400_000_000, 1_000), (9_000_000_000, None)])]
    kills = findings.oom_kills(Rows(rows), "i")
    assert [len(k.evidence) for k in kills] == [2, 1]
    assert kills[0].ts_ns == T + 400_000_000 and kills[0].uncertainty_ns == 1_000


# -- the chain search looks only at causes whose windows can meet the effect's -------------------
@pytest.mark.parametrize("name", SAMPLES + ["repeated-crashes"])
def test_chain_search_same_as_scanning_every_finding(analysed, name, monkeypatch):
    from aftertrace.analysis import chains, rootcause
    store, iids = analysed
    iid = iids[name]
    search, seen = rootcause.find_chains, []

    def both(links, failure, pids, job):
        # on the very findings the analysis searched, every earlier finding of the cause's role
        # considered: the bounds of the search opened up
        got = search(links, failure, pids, job)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(chains, "NEAREST", 10**9)
            mp.setattr(chains, "MAX_WIDTH_NS", 10**18)
            seen.append((got, search(links, failure, pids, job)))
        return got
    monkeypatch.setattr(rootcause, "find_chains", both)
    rootcause.analyze(store, iid, clocks.skew_links(clocks.align(store, iid)))
    ((got, want),) = seen
    assert got == want
    if name in ("oom-after-throttle", "repeated-crashes"):
        assert got and len(got[0].links) >= 3


CHAIN_KINDS = [LinkKind.CPU_THROTTLE, LinkKind.MEMORY_GROWTH, LinkKind.STEP_SLOWDOWN, LinkKind.OOM_KILL,
               LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT, LinkKind.PYTHON_EXCEPTION,
               LinkKind.COLLECTIVE_TIMEOUT, LinkKind.RANK_STALLED, LinkKind.SEGFAULT, LinkKind.JOB_FAILURE]


@st.composite
def chain_links(draw):
    ts = T + draw(st.integers(0, 4000)) * 1_000_000_000     # (beyond every rule's window)
    attrs = {}
    if draw(st.booleans()):
        attrs.update(ts_lo_ns=ts - draw(st.integers(0, 900)) * 1_000_000_000, ts_hi_ns=ts + 1_000_000_000,
                     ts_bound="between")
    elif draw(st.booleans()):
        attrs["ts_bound"] = "after"
    if draw(st.booleans()):
        attrs["ts_resolution_ns"] = 1_000_000_000
    kind = draw(st.sampled_from(CHAIN_KINDS))
    if kind == LinkKind.SIGNAL_KILL:
        attrs["signal"] = draw(st.sampled_from(["SIGKILL", "SIGTERM"]))
    if kind == LinkKind.PYTHON_EXCEPTION and draw(st.booleans()):
        attrs["exc_msg"] = "Connection closed by peer"
    return Link(kind=kind, ts_ns=ts, summary=f"{kind.value} {ts}", source="x.log",
                host=draw(st.sampled_from([None, "n1", "n2"])), rank=draw(st.sampled_from([None, 0, 1, 2])),
                pid=draw(st.sampled_from([None, 11, 12])), confidence=draw(st.sampled_from([1.0, 0.9, 0.6])),
                uncertainty_ns=draw(st.sampled_from([None, 0, 500_000_000, 200_000_000_000])),
                attrs=tuple(attrs.items()))


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(chain_links(), min_size=1, max_size=40), st.booleans())
def test_chain_search_same_as_scan_on_generated_findings(ls, in_time_order):
    from aftertrace.analysis import chains
    if in_time_order:         # as rootcause gives them (else: the plain scan, kept for any order)
        ls.sort(key=lambda l: l.ts_ns)
    failure = max((l for l in ls if l.kind == LinkKind.JOB_FAILURE), key=lambda l: l.ts_ns, default=ls[-1])
    got = chains.find_chains(ls, failure)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chains, "NEAREST", 10**9)
        mp.setattr(chains, "MAX_WIDTH_NS", 10**18)
        want = chains.find_chains(ls, failure)
    assert got == want


def test_local_ranks_are_resolved_by_the_launchers_table_in_the_same_file():
    from aftertrace.analysis.findings import local_ranks
    from aftertrace.analysis.links import Evidence, Link, LinkKind as K

    def mk(kind, src, rank=None, pid=None, **attrs):
        return Link(kind=kind, ts_ns=1, summary="x", source=src, rank=rank, pid=pid,
                    evidence=(Evidence(src, 1, "l"),), attrs=tuple(attrs.items()))
    exc = mk(K.PYTHON_EXCEPTION, "a/torchrun.log", local_rank=0)
    other = mk(K.PYTHON_EXCEPTION, "b/torchrun.log", local_rank=0)      # another node's launcher
    table = mk(K.PROCESS_EXIT, "a/torchrun.log", rank=8, pid=4711, local_rank=0)
    out = local_ranks([exc, other, table])
    assert (out[0].rank, out[0].pid) == (8, 4711)
    assert (out[1].rank, out[1].pid) == (None, None)


def test_a_dataloader_timeout_dates_when_the_input_stopped():
    from aftertrace.analysis.findings import starved_of_input
    from aftertrace.analysis.links import Evidence, Link, LinkKind as K
    S = 10**9
    t = 1796179497 * S
    # an untimed traceback after the rank's last timed line (t - 6 s), bounded by the exit at t + 4 s
    exc = Link(kind=K.PYTHON_EXCEPTION, ts_ns=t - 6 * S, summary="rank 1: RuntimeError: DataLoader timed out",
               source="torchrun.log", rank=1, pid=29634, evidence=(Evidence("torchrun.log", 649, "l"),),
               attrs=(("loader_wait_s", "10.0"), ("ts_bound", "after")))
    ended = Link(kind=K.PROCESS_EXIT, ts_ns=t + 4 * S, summary="exit", source="torchrun.log", rank=1, pid=29634,
                 evidence=(Evidence("torchrun.log", 700, "l"),), attrs=(("exitcode", 1),))
    out = starved_of_input([exc, ended])
    (stall,) = [l for l in out if l.kind == K.DATALOADER_STALL]
    assert (stall.rank, stall.pid, stall.ts_ns) == (1, 29634, t - 6 * S)    # exit - 10 s
    assert stall.timing_ns() == (t - 26 * S, t - 6 * S)                     # and another 10 s before
    assert stall.attr("until_ns") == t - 6 * S and len(out) == 3


def test_a_stated_wait_out_of_any_range_dates_nothing():
    from aftertrace.analysis.findings import starved_of_input
    from aftertrace.analysis.links import Evidence, Link, LinkKind as K
    for w in ("1e30", "inf", "nan", "-5", "ten"):
        exc = Link(kind=K.PYTHON_EXCEPTION, ts_ns=1796179497 * 10**9, summary="x", source="x", rank=1,
                   evidence=(Evidence("x", 1, "l"),), attrs=(("loader_wait_s", w),))
        assert starved_of_input([exc]) == [exc], w


def test_a_line_printed_by_a_rank_is_not_placed_after_its_death():
    from aftertrace.analysis.findings import printed_before_death
    # an untimed fatal-error dump of rank 1, between a timed line at t=10.0 s and the next timed
    # line of the combined log at t=10.4 s (another rank's); rank 1 died at 10.1 s (its exit, 1 ms)
    s = 10**9
    dump = Link(kind=LinkKind.SIGNAL_KILL, ts_ns=10 * s + s // 5, summary="Fatal Python error: Aborted",
                source="torchrun.log", rank=1, attrs=(("ts_lo_ns", 10 * s), ("ts_hi_ns", 10 * s + 2 * s // 5),
                                                      ("self_signal", True)))
    exit_ = Link(kind=LinkKind.SIGNAL_KILL, ts_ns=10 * s + s // 10, summary="exit", source="perf", rank=1,
                 uncertainty_ns=1_000_000)
    peer = Link(kind=LinkKind.PYTHON_EXCEPTION, ts_ns=10 * s + s // 5, summary="rank 0 lost its peer",
                source="torchrun.log", rank=0, attrs=(("ts_lo_ns", 10 * s), ("ts_hi_ns", 10 * s + 2 * s // 5)))
    out = printed_before_death([dump, exit_, peer])
    assert out[0].timing_ns() == (10 * s, 10 * s + s // 10 + 1_000_000)
    assert out[0].ts_ns == 10 * s + s // 20 + 500_000
    assert out[1] is exit_ and out[2] is peer      # another rank's line is not bounded by this death


def test_kills_that_name_no_victim_are_one_kill_only_within_one_file():
    """A report cut before its kill line and a runner's count of OOM kills, in two files: nothing
    says they are the same kill. Two such lines of one file (a step's and its batch's count) are."""
    def row(i, path):
        return {"ts_utc_ns": None, "ts_raw_ns": None, "host": "n1", "pid": None, "line": i, "text": f"kill {i}",
                "attrs": json.dumps({"summary": f"cut {i}", "victim_unknown": "cut"}), "path": path,
                "clock_domain": "none", "uncertainty_ns": None, "counted_by": None}
    kills = findings.oom_kills(Rows([row(1, "slurm.out"), row(7, "slurm.out"), row(2, "kmsg.txt")]), "i")
    assert sorted(len(k.evidence) for k in kills) == [1, 2]
    assert {k.summary for k in kills} == {"cut 1 on n1", "cut 2 on n1"}


def test_many_copies_merge_into_one_finding_whose_json_is_bounded():
    """A log that repeats one crash: every copy's line stays with the merged finding, its JSON
    shows the first ``EVIDENCE_SHOWN`` (the best copy's first) and the count."""
    from aftertrace.analysis.links import EVIDENCE_SHOWN
    n = 3 * EVIDENCE_SHOWN
    copies = [Link(LinkKind.PYTHON_EXCEPTION, None, "a", "x.log", "n1", 0, None,
                   (Evidence("x.log", i, f"RuntimeError: boom ({i})"),)) for i in range(1, n + 1)]
    (one,) = findings.merge_duplicates(copies)
    assert [e.line for e in one.evidence] == list(range(1, n + 1))
    js = one.to_json()
    assert js["evidence_total"] == n
    assert [e["line"] for e in js["evidence"]] == list(range(1, EVIDENCE_SHOWN + 1))
