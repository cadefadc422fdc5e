"""Whose a cgroup's growth was: the worked example of ``analysis/attribution.py`` exactly."""
import dataclasses

from aftertrace.analysis import attribution
from aftertrace.analysis.links import Evidence, Link, LinkKind as K

S = 1_000_000_000
T0 = 1796169553 * S
RANKS = {0: 1029, 1: 1030}
TASKS = ((1025, 54257, "pt_elastic"), (1029, 95224, "python3"), (1030, 95709, "python3"),
         (1041, 293649, "pt_data_worker"), (1042, 60756, "pt_data_worker"),
         (1043, 269481, "pt_data_worker"), (1046, 60807, "pt_data_worker"))
MEMBERS = tuple(t[0] for t in TASKS)


def link(kind, t, rank=None, pid=None, entity=None, **attrs):
    return Link(kind=kind, ts_ns=t, summary=kind.value, source="x", host="vm", rank=rank, pid=pid,
                evidence=(Evidence("x", 1, "l"),), attrs=tuple(attrs.items()), entity=entity)


def _growth():
    return link(K.MEMORY_GROWTH, T0, entity="/train_job", until_ns=T0 + S, members=MEMBERS,
                job_pids=(1025, 1029, 1030), ranks=(0, 1), outside=False, membership="read")


def _oom(victim):
    return link(K.OOM_KILL, T0 + 2 * S, pid=victim, oom_memcg="/train_job", memcg="/train_job", tasks=TASKS)


def _attribute(named_by: dict[int, str]):
    died = [link(K.DATALOADER_WORKER_KILLED, T0 + 3 * S, rank=r, pid=RANKS[r], worker_pids=w)
            for r, w in named_by.items()]
    links = [_growth(), _oom(1041)] + died
    children = attribution.named_children(links, RANKS, {})
    jp = attribution.descendants(children, set(RANKS.values()) | {1025})
    owner = {d: r for r, p in RANKS.items() for d in attribution.descendants(children, {p})}
    out = attribution.grower(links, jp, {p: r for r, p in RANKS.items()}, owner, RANKS)
    return next(l for l in out if l.kind == K.MEMORY_GROWTH), children


def test_worked_example():
    g, children = _attribute({1: "1043"})
    assert children == {1030: {1043}}
    assert (g.rank, g.pid, g.entity) == (1, 1030, "/train_job")
    assert g.attr("owner") == "inferred" and g.attr("owner_unknown_pids") == (1041,)
    assert "pt_data_worker 1043" in g.summary and "pt_data_worker 1041" in g.summary
    assert "does not say" in g.summary


def test_holders_of_two_ranks_leave_the_growth_to_the_cgroup():
    g, _ = _attribute({1: "1043", 0: "1041"})
    assert (g.rank, g.pid) == (None, None)


def test_a_holder_seen_outside_the_growing_cgroup_is_not_guessed_into_a_rank():
    g0 = _growth()          # the snapshots saw the ranks and 1043 inside, never 1041
    g = dataclasses.replace(g0, attrs=tuple((k, MEMBERS[:3] + (1043,) if k == "members" else v)
                                            for k, v in g0.attrs))
    died = link(K.DATALOADER_WORKER_KILLED, T0 + 3 * S, rank=1, pid=1030, worker_pids="1043")
    children = attribution.named_children([died], RANKS, {})
    owner = {d: r for r, p in RANKS.items() for d in attribution.descendants(children, {p})}
    out = attribution.grower([g, _oom(1041), died], set(owner) | {1025}, {1029: 0, 1030: 1}, owner, RANKS)
    assert next(l for l in out if l.kind == K.MEMORY_GROWTH).rank is None


def test_a_rank_holding_half_is_read_not_inferred():
    g, _ = _attribute({1: "1041, 1043"})       # pid(s) list: both workers named by rank 1
    assert (g.rank, g.attr("owner"), g.attr("owner_unknown_pids")) == (1, "read", None)


def test_an_oom_report_known_to_the_second_may_print_before_the_growth_it_follows():
    # dmesg -T: the report is somewhere in [T0 - 0.4 s, T0 + 0.6 s], the growth starts at T0
    oom = dataclasses.replace(_oom(1041), ts_ns=T0 - 400_000_000,
                              attrs=_oom(1041).attrs + (("ts_resolution_ns", S),))
    died = link(K.DATALOADER_WORKER_KILLED, T0 + 3 * S, rank=1, pid=1030, worker_pids="1043")
    children = attribution.named_children([died], RANKS, {})
    owner = {d: r for r, p in RANKS.items() for d in attribution.descendants(children, {p})}
    out = attribution.grower([_growth(), oom, died], set(owner) | {1025}, {1029: 0, 1030: 1}, owner, RANKS)
    assert next(l for l in out if l.kind == K.MEMORY_GROWTH).rank == 1
    early = dataclasses.replace(oom, ts_ns=T0 - 2 * S)         # wholly before the growth: not its report
    out = attribution.grower([_growth(), early, died], set(owner) | {1025}, {1029: 0, 1030: 1}, owner, RANKS)
    assert next(l for l in out if l.kind == K.MEMORY_GROWTH).rank is None


def test_perf_names_the_rank_that_faulted_the_growth_in(tmp_path):
    """No OOM report to read: the development recording leak-r1-collect, its growth taken without
    its owner, is named by perf's samples of rank 1 in the kernel's page-fault path."""
    import json
    from pathlib import Path

    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    from tests.analysis.corpus import build, cases
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    (c,) = [c for c in cases(("dev",)) if c.id == "dev/leak-r1-collect/full"]
    sub = svc.submit_path(build(c, Path(tmp_path / "b")), title=c.id)
    rep = svc.analyze(sub.incident_id)
    g = next(a for a in rep["anomalies"] if a["kind"] == "memory_growth" and a.get("rank") == 1)
    ranks = {int(r): v["pid"] for r, v in c.truth["ranks"].items()}
    t0 = int(g["time_window"][0] * 1e9)
    t1 = t0 + 5 * S                       # it grew for 5.0 s (its summary)
    bare = Link(kind=K.MEMORY_GROWTH, ts_ns=t0, summary="grew", source="x", host=g["host"], entity=g["entity"],
                evidence=(Evidence("x", 1, "l"),),
                attrs=(("until_ns", t1), ("job_pids", tuple(ranks.values())), ("outside", False)))
    owner = {p: r for r, p in ranks.items()}
    (named,) = attribution.faulters(svc.store, sub.incident_id, [bare], owner, ranks)
    assert (named.rank, named.pid, named.attr("owner")) == (1, ranks[1], "sampled")
    assert "faulting pages in" in named.summary
    # the samples of the other rank alone say nothing about who grew
    (same,) = attribution.faulters(svc.store, sub.incident_id, [bare], {ranks[0]: 0}, ranks)
    assert same.rank is None and json.dumps(same.attrs, default=str).count("sampled") == 0


def test_ranks_of_two_machines_with_the_same_pids_are_told_apart_by_host():
    """Containers on two machines: rank 0 on node-a and rank 1 on node-b are both pid 7, their
    DataLoader workers both pid 30. Node-b's job cgroup grows and its OOM report lists pid 7
    holding most of it: the growth is rank 1's (the rank on node-b), whatever order the ranks come
    in; node-a's own OOM report, at the same time, says nothing about node-b."""
    ranks, hosts = {0: 7, 1: 7}, {0: "node-a", 1: "node-b"}

    def on(host, l):
        return dataclasses.replace(l, host=host)

    tasks_b = ((7, 500_000, "python3"), (30, 20_000, "pt_data_worker"))
    tasks_a = ((30, 400_000, "pt_data_worker"), (7, 100_000, "python3"))
    growth = on("node-b", _growth())
    oom_a = on("node-a", link(K.OOM_KILL, T0 + 2 * S, pid=30, oom_memcg="/train_job", memcg="/train_job",
                              tasks=tasks_a))
    oom_b = on("node-b", link(K.OOM_KILL, T0 + 2 * S, pid=7, oom_memcg="/train_job", memcg="/train_job",
                              tasks=tasks_b))
    for order in (ranks, dict(reversed(ranks.items()))):
        view = attribution.host_views(order, hosts, {7: {30}})
        assert view("node-b").rank_pids == {1: 7} and view("node-b").owner == {7: 1, 30: 1}
        assert view(None).by_pid == {} and view(None).owner == {}    # (pid 7 is both ranks': neither)
        for ooms in ([oom_a, oom_b], [oom_b, oom_a]):
            (g,) = [l for l in attribution.grower([growth, *ooms], {7, 30}, view=view) if l.kind == K.MEMORY_GROWTH]
            assert (g.rank, g.pid) == (1, 7), (order, ooms)
            assert "rank 1 (pid 7)" in g.summary


def test_a_pid_of_the_job_on_one_machine_is_not_the_jobs_on_another():
    """Rank 0's DataLoader worker is pid 30 on node-a; on node-b, pid 30 is a backup process
    outside the job. Node-b's growth, its OOM report showing pid 30 holding most, is not the
    job's doing there: neither is it pinned on pid 30 as a job process, nor on any rank."""
    ranks, hosts = {0: 7, 1: 7}, {0: "node-a", 1: "node-b"}
    died = dataclasses.replace(link(K.DATALOADER_WORKER_KILLED, T0 + 3 * S, rank=0, pid=7, worker_pids="30"),
                               host="node-a")
    children = attribution.named_children([died], ranks, attribution.Children(), hosts)
    assert children.on("node-a") == {7: {30}} and children.on("node-b") == {} and children == {7: {30}}
    jp = attribution.JobPids({h: attribution.descendants(children.on(h), {7}) for h in ("node-a", "node-b")})
    assert jp.on("node-a") == {7, 30} and jp.on("node-b") == {7} and set(jp) == {7, 30}
    growth = dataclasses.replace(_growth(), host="node-b")
    oom = dataclasses.replace(link(K.OOM_KILL, T0 + 2 * S, pid=30, oom_memcg="/train_job", memcg="/train_job",
                                   tasks=((30, 500_000, "backup"), (7, 50_000, "python3"))), host="node-b")
    view = attribution.host_views(ranks, hosts, children)
    (g,) = [l for l in attribution.grower([growth, oom], jp, view=view) if l.kind == K.MEMORY_GROWTH]
    assert (g.rank, g.pid) == (None, None)
    # with one set of pids for every machine, 30 passed for the job's on node-b
    (old,) = [l for l in attribution.grower([growth, oom], set(jp), view=view) if l.kind == K.MEMORY_GROWTH]
    assert old.pid == 30


def test_a_finding_about_a_workers_pid_is_its_ranks():
    """The kernel's segfault record names pid 30, which rank 0's log named as its DataLoader worker
    on node-a: the finding is rank 0's there; on node-b, pid 30 is nobody's; a pid that descends
    from two ranks is neither's; a finding with a rank keeps it."""
    ranks, hosts = {0: 7, 1: 8}, {0: "node-a", 1: "node-a"}
    died = dataclasses.replace(link(K.DATALOADER_WORKER_KILLED, T0, rank=0, pid=7, worker_pids="30"),
                               host="node-a")
    kids = attribution.Children()
    kids.add("node-a", 8, (31,))
    kids.add("node-a", 7, (31,))
    view = attribution.host_views(ranks, hosts, attribution.named_children([died], ranks, kids, hosts))
    segv = dataclasses.replace(link(K.SEGFAULT, T0, pid=30), host="node-a")
    elsewhere = dataclasses.replace(segv, host="node-b")
    shared = dataclasses.replace(segv, pid=31)
    kept = dataclasses.replace(segv, rank=1)
    out = attribution.owned([segv, elsewhere, shared, kept, died], view)
    assert [l.rank for l in out] == [0, None, None, 1, 0]
    assert [l.attr("started_by_rank") for l in out] == [True, None, None, None, None]
