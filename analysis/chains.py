"""Diagnosis: the origin that explains the most of what was observed, and the chain from it.

**The graph.** Nodes are the findings placed in time. An edge *cause -> effect* exists when a
rule of :mod:`analysis.chain_rules` connects their kinds (or roles) within its scope, or when
both are about one process and the cause is that process's first fatal finding
(:mod:`analysis.lineage`), and — always — the cause can have happened before the effect:
its earliest possible time is not after the effect's latest (:meth:`Link.timing_ns`: clock
uncertainty, interpolated line times, a launcher's whole seconds). A point-in-time cause must
lead by at most the rule's window; a condition (throttling, growth, ...) must have begun before
the effect and lasted until at most ``lag_s`` before it began. The edge's strength is

    strength = prior x time x entity x confidence(cause)

* time = 1 - 0.5 x lead / window for a point cause (0.9 when its own time is after the effect's
  but the windows overlap); 1 for a condition in force when the effect began, falling to 0.5
  at the end of its lag;
* entity = 1 for the same process or a cgroup the bundle shows the process in; 0.7 when the
  bundle does not say who was in the cgroup; 0.9 between two ranks of the job; and for the job
  failure, 1 for the rank the launcher names, 0.9 for any other rank (the launcher names the
  first rank that *reported*, often a victim).

**Parsimony.** Every finding from which the failure can be reached is a candidate origin. A
candidate's explanation is a tree: every finding it reaches is attached by the strongest edge
from a finding attached before it (grown strongest edge first, as Prim's algorithm grows a
tree). How well it explains what was observed is a log-likelihood over every finding f up to
the failure (the origin itself excepted):

    L(o) = sum over f of  w(f) x log(max(s(f), P0))

where s(f) is the strength of the edge that attaches f to o's tree, and P0 (0.2) stands for a
finding that the candidate does not explain — a coincidence, unrelated to it. So one origin
takes over another's findings exactly when the edge between them is stronger than a coincidence;
a decoy (an unrelated throttled cgroup, an OOM kill of another process) explains only itself
and pays P0 in every hypothesis alike; a root cause explains its consequences and theirs.
w(f) is 1 up to the failure, 0.3 after it (the teardown), 0 for what can never be an origin (a
launcher's stop). Findings that are the aftermath of an earlier fatal finding of their own
process are never origins. Ties go to the stronger path to the failure, then to the earlier
finding. The chain is the tree's path from the origin to the failure; every other finding the
origin explains is listed with the edge that explains it, and the findings up to the failure
that it does not explain are listed as unexplained.

Worked example (``tests/analysis/test_chains.py`` rebuilds it): rank 1 (pid 101) stops
(rank_stalled, window 10:00:00.00-10:00:00.37, confidence 0.85); rank 0 (pid 100) times out
waiting for it (collective_timeout at 10:00:30.2, window .1-.3) and exits (process_exit at
10:00:31, whole second); torchrun fails the job at 10:00:31.5 naming rank 0 and SIGTERMs rank 1
(a stop, weight 0). An unrelated cgroup /backup (no job process in it) is throttled from
09:59:40 on. Edges: stall -> timeout 0.9 x (1 - 0.5 x 30.2/3600) x 0.9 x 0.85 = 0.686;
timeout -> exit 0.95 (lineage); exit -> failure 0.9 x 0.999 = 0.899; timeout -> failure
0.9 x 0.998 = 0.898; stall -> failure 0.6 x 0.996 x 0.9 x 0.85 = 0.457; the throttle has no
edge (no job process in /backup). L(stall) = log 0.2 (the throttle) + log 0.686 + log 0.95 +
log 0.899 = -2.14; L(timeout) = log 0.2 (throttle) + log 0.2 (stall) + log 0.95 + log 0.899 =
-3.38. The stall is the origin, 3.4 times as likely; the chain is stall -> timeout -> exit ->
failure, the stop of rank 1 is explained by the stall (lineage, 0.81), and the throttling of
/backup is listed as unexplained. The chain's score, exp(L / 5 findings), is 0.651.
"""
from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
from dataclasses import dataclass

from . import attribution, lineage
from .chain_rules import Rule, Scope, by_effect, never_origin, role
from .kinds import CONDITIONS, LINEAGE
from aftertrace.ingest.timeparse import fmt_utc

from .links import Link, LinkKind, Provenance

MAX_CHAINS = 3
ALTERNATIVE_MIN = 0.3     # alternatives scoring under 30 % of the best chain are not worth showing
MIN_EDGE = 0.1
BRANCH = 6                # the strongest causes kept per finding
AFTER_FAILURE_W = 0.3
NEIGHBOURHOOD_NS = 3600 * 10**9
MAX_VISITS = 20_000
NEAREST = 32              # point causes looked at per rule and effect, the latest first
MAX_WIDTH_NS = 3600 * 10**9  # a cause window wider than this (an hour) is not looked for further back
MAX_CANDIDATES = 200
P0 = 0.2                  # how likely a finding is a coincidence, unrelated to the origin
LINEAGE_RULE = Rule(LINEAGE, LINEAGE, Scope.PROCESS, 0.95, 3600,
                    "within one process, its first fatal error explains what it did afterwards")


@dataclass(frozen=True)
class Edge:
    cause: Link
    effect: Link
    rule: Rule
    strength: float
    lead_ns: int
    provenance: Provenance

    def to_json(self) -> dict:
        return {"from": self.cause.kind.value, "to": self.effect.kind.value, "because": self.rule.why,
                "scope": self.rule.scope.value, "strength": round(self.strength, 3),
                "lead_s": round(max(0, self.lead_ns) / 1e9, 3), "provenance": self.provenance.value}


@dataclass(frozen=True)
class Chain:
    links: tuple[Link, ...]      # oldest first, ending at the failure
    edges: tuple[Edge, ...]
    score: float
    # Everything else the origin explains, each with the edge that explains it.
    consequences: tuple[Edge, ...] = ()
    # Findings up to the failure that the origin does not explain.
    unexplained: tuple[Link, ...] = ()

    @property
    def origin(self) -> Link:
        return self.links[0]


@dataclass
class Context:
    """What the edges need beyond the findings: who is whom."""
    pids: dict[int, int]                 # rank -> pid
    hosts: set
    job: frozenset = frozenset()         # every pid of the job (ranks, launcher, what they started)

    def same_process(self, c: Link, e: Link) -> bool:
        if c.pid is not None and e.pid is not None:
            return c.pid == e.pid and (not c.host or not e.host or c.host == e.host)
        if c.rank is not None and e.rank is not None:
            return c.rank == e.rank
        cp = c.pid if c.pid is not None else self.pids.get(c.rank)
        ep = e.pid if e.pid is not None else self.pids.get(e.rank)
        return cp is not None and cp == ep

    def in_job(self, l: Link) -> bool:
        # (ranks calling different collectives is about the job's ranks even where no one rank is named)
        return l.rank is not None or l.kind in (LinkKind.JOB_FAILURE, LinkKind.RENDEZVOUS_FAILURE,
                                                LinkKind.COLLECTIVE_MISMATCH) or (
            l.pid is not None and (l.pid in self.pids.values() or l.pid in attribution.job_on(self.job, l.host)))


def _entity(rule: Rule, c: Link, e: Link, ctx: Context) -> float | None:
    if rule.cause_attr and c.attr(rule.cause_attr) is False:
        return None
    if rule.needs and c.attr(rule.needs) is not True:
        return None
    if rule.scope == Scope.MEMCG and e.kind == LinkKind.MEMORY_GROWTH:
        # a child's growth is its parent's when it is most of it
        if not (c.entity and e.entity and c.entity != e.entity and attribution.within(c.entity, e.entity)):
            return None
        cg, eg = c.attr("gain_bytes"), e.attr("gain_bytes")
        return 1.0 if isinstance(cg, (int, float)) and isinstance(eg, (int, float)) and cg >= 0.5 * eg else None
    if rule.scope == Scope.PROCESS:
        return 1.0 if ctx.same_process(c, e) else None
    if rule.scope == Scope.RANK:
        same = c.rank is not None and c.rank == e.rank and (not c.host or not e.host or c.host == e.host)
        return 1.0 if same else None
    if rule.scope == Scope.MEMCG:
        limit = e.attr("oom_memcg") or e.attr("memcg")
        if c.entity and limit and isinstance(limit, str):
            if not attribution.within(c.entity, limit):
                return None
            return 1.0
        return _host(c, e, ctx)
    if rule.scope == Scope.HOST:
        return _host(c, e, ctx)
    # JOB
    if not (ctx.in_job(c) or c.kind in JOB_LEVEL) or not (ctx.in_job(e) or e.kind in JOB_LEVEL):
        return None
    if e.kind == LinkKind.JOB_FAILURE:
        rc_rank, rc_pid = e.attr("root_cause_rank"), e.attr("root_cause_pid")
        if rc_rank is not None or rc_pid is not None:
            named = (c.rank is not None and c.rank == rc_rank) or (c.pid is not None and c.pid == rc_pid)
            return 1.0 if named else 0.9
    return 1.0 if ctx.same_process(c, e) else 0.9


# findings about the job as a whole (the launcher's failure report, the collector's hang watchdog)
JOB_LEVEL = frozenset({LinkKind.JOB_FAILURE, LinkKind.JOB_HANG})


def _host(c: Link, e: Link, ctx: Context) -> float | None:
    if c.host and e.host and c.host != e.host:
        return None
    if not (c.host and e.host) and len(ctx.hosts) > 1:
        return None
    if c.attr("membership") is not None:
        pid = e.pid if e.pid is not None else ctx.pids.get(e.rank)
        t = attribution.touches(c, pid, e.rank)
        if t is None or (not t and e.rank is None and e.pid is None):
            # an effect on the host as a whole (pressure, a kernel stall): the cgroup must hold
            # the job's processes for the job's cgroup to be its cause
            return 0.8 if not c.attr("outside") else None
        return 1.0 if t else None
    if ctx.same_process(c, e):
        return 1.0
    return 0.7


def _time(rule: Rule, c: Link, e: Link) -> float | None:
    cw, ew = c.timing_ns(), e.timing_ns()
    if cw[0] > ew[1]:
        return None                          # a cause is never after its effect
    lead = e.ts_ns - c.ts_ns
    if rule.min_lead_s and lead < rule.min_lead_s * 1e9:
        return None
    if rule.cause in CONDITIONS:
        until = c.attr("until_ns")
        until = until if isinstance(until, int) else cw[1]
        late = ew[0] - until                  # how long after the condition ended the effect began
        lag = rule.lag_s * 1e9
        if late > lag:
            return None
        return 1.0 if late <= 0 else 1.0 - 0.5 * late / lag
    window = rule.window_s * 1e9
    if lead > window + (cw[1] - cw[0]) + (ew[1] - ew[0]):
        return None
    if lead >= 0:
        return 1 - 0.5 * min(1.0, lead / window)
    return 0.9


def _enough(c: Link, e: Link) -> bool:
    """Whether the cause is big enough for the effect: a peer that waited N s in one collective
    was held up by a rank that stopped, or whose steps take about that long, not by steps that
    merely got slower."""
    if e.kind == LinkKind.COLLECTIVE_TIMEOUT and c.kind in (LinkKind.STEP_SLOWDOWN, LinkKind.STRAGGLER):
        wait = e.attr("wait_ms") or e.attr("timeout_ms")
        slow = c.attr("slow_s")
        if c.kind == LinkKind.STRAGGLER and c.attr("ratio"):
            slow = None
        if isinstance(wait, (int, float)) and isinstance(slow, (int, float)):
            return slow * 1000 >= 0.5 * wait
    return True


def _edge(rule: Rule, c: Link, e: Link, ctx: Context) -> Edge | None:
    if not _enough(c, e):
        return None
    tf = _time(rule, c, e)
    if tf is None:
        return None
    ent = _entity(rule, c, e, ctx)
    if ent is None:
        return None
    strength = rule.prior * tf * ent * c.confidence
    if strength < MIN_EDGE:
        return None
    read = (rule.scope == Scope.PROCESS and c.provenance == Provenance.READ and e.provenance == Provenance.READ)
    return Edge(c, e, rule, strength, e.ts_ns - c.ts_ns, Provenance.READ if read else Provenance.INFERRED)


def build_graph(nodes: list[Link], ctx: Context) -> dict[int, list[Edge]]:
    """Incoming edges per finding (by id), the ``BRANCH`` strongest per finding plus lineage."""
    by_role: dict[str, list[Link]] = {}
    for l in nodes:
        by_role.setdefault(role(l), []).append(l)
    starts: dict[str, list[int]] = {}
    widest: dict[str, int] = {}
    for r, ls in by_role.items():
        ls.sort(key=lambda l: l.timing_ns()[0])
        starts[r] = [l.timing_ns()[0] for l in ls]
        widest[r] = max(l.timing_ns()[1] - l.timing_ns()[0] for l in ls)
    incoming: dict[int, list[Edge]] = {}
    rules_to = by_effect()
    for e in nodes:
        ew = e.timing_ns()
        best: dict[int, Edge] = {}
        for rule in rules_to.get(role(e), ()):
            cands = by_role.get(rule.cause)
            if not cands:
                continue
            # causes that began no later than the effect's latest time; a point cause within the
            # rule's window (the nearest ``NEAREST`` of them: the lead weakens an edge), a
            # condition whenever it began
            hi = bisect.bisect_right(starts[rule.cause], ew[1])
            if rule.cause in CONDITIONS:
                pool = cands[:hi]
            else:
                # _time accepts a lead up to the window plus both widths; a cause's start is at most
                # its width before its time: so nothing starting earlier than this can qualify
                reach = int(rule.window_s * 1e9) + 2 * min(widest[rule.cause], MAX_WIDTH_NS) + (ew[1] - ew[0])
                lo = bisect.bisect_left(starts[rule.cause], ew[0] - reach)
                pool = cands[max(lo, hi - NEAREST):hi]
            for c in pool:
                if c is e:
                    continue
                ed = _edge(rule, c, e, ctx)
                if ed is not None and (id(c) not in best or ed.strength > best[id(c)].strength):
                    best[id(c)] = ed
        incoming[id(e)] = sorted(best.values(), key=lambda ed: -ed.strength)[:BRANCH]
    for first, later in lineage.aftermath(nodes, ctx.pids):
        ed = Edge(first, later, LINEAGE_RULE, LINEAGE_RULE.prior * first.confidence, later.ts_ns - first.ts_ns,
                  Provenance.READ if first.provenance == Provenance.READ else Provenance.INFERRED)
        lst = incoming.setdefault(id(later), [])
        lst[:] = [x for x in lst if x.cause is not first] + [ed]
    return incoming


def _tree(src: Link, outgoing: dict[int, list[Edge]]) -> dict[int, Edge | None]:
    """The explanation rooted at ``src``: every finding it reaches, attached to the tree by the
    strongest edge from a finding attached before it (strongest edges first, as Prim's
    algorithm grows a tree). Maps id(finding) -> the edge that explains it (None for ``src``)."""
    parent: dict[int, Edge | None] = {id(src): None}
    tie = itertools.count()
    heap = [(-ed.strength, next(tie), ed) for ed in outgoing.get(id(src), ())]
    heapq.heapify(heap)
    while heap and len(parent) < MAX_VISITS:
        _, _, ed = heapq.heappop(heap)
        v = ed.effect
        if id(v) in parent:
            continue
        parent[id(v)] = ed
        for nxt in outgoing.get(id(v), ()):
            if id(nxt.effect) not in parent:
                heapq.heappush(heap, (-nxt.strength, next(tie), nxt))
    return parent


def find_chains(links: list[Link], failure: Link | None, pids: dict[int, int] | None = None,
                job: set[int] = frozenset()) -> list[Chain]:
    if failure is None or failure.ts_ns is None:
        return []
    fw = failure.timing_ns()
    nodes = [l for l in links if l.ts_ns is not None and l.kind not in (LinkKind.CLOCK_SKEW, LinkKind.CLOCK_STEP)
             and l.timing_ns()[1] >= fw[0] - NEIGHBOURHOOD_NS and l.timing_ns()[0] <= fw[1] + NEIGHBOURHOOD_NS]
    if not any(l is failure for l in nodes):
        nodes.append(failure)
    ctx = Context(dict(pids or {}), {l.host for l in links if l.host},
                  job if isinstance(job, attribution.JobPids) else frozenset(job))
    incoming = build_graph(nodes, ctx)
    outgoing: dict[int, list[Edge]] = {}
    for eds in incoming.values():
        for ed in eds:
            outgoing.setdefault(id(ed.cause), []).append(ed)
    aftermath = {id(later) for first, later in lineage.aftermath(nodes, ctx.pids)}

    # candidates: everything the failure can be reached from (walk the incoming edges back)
    anc, todo = {id(failure): failure}, [failure]
    while todo:
        u = todo.pop()
        for ed in incoming.get(id(u), ()):
            if id(ed.cause) not in anc:
                anc[id(ed.cause)] = ed.cause
                todo.append(ed.cause)

    never = never_origin()

    def weight(f: Link) -> float:
        if role(f) in never and f is not failure:
            return 0.0
        return 1.0 if f.timing_ns()[0] <= fw[1] else AFTER_FAILURE_W

    if len(anc) > MAX_CANDIDATES:
        anc = _strongest_to(failure, incoming, MAX_CANDIDATES)
    weights = {id(l): weight(l) for l in nodes}
    total_w = sum(weights.values()) or 1.0
    log_p0 = math.log(P0)
    scored = []
    for o in anc.values():
        if role(o) in never or (id(o) in aftermath and o is not failure):
            continue
        if o is failure and len(anc) > 1 and any(id(x) not in aftermath and role(x) not in never
                                                 for x in anc.values() if x is not failure):
            continue
        tree = _tree(o, outgoing)
        if id(failure) not in tree:
            continue
        loglik = 0.0
        for i, w in weights.items():
            if not w or i == id(o):
                continue
            ed = tree.get(i)
            loglik += w * (max(math.log(ed.strength), log_p0) if ed is not None else log_p0)
        path = _path(o, failure, tree)
        strength = math.prod(ed.strength for ed in path)
        scored.append((loglik, strength, -o.timing_ns()[0], o, tree, path))
    scored.sort(key=lambda x: (-x[0], -x[1], -x[2]))
    if not scored:
        return []
    out: list[Chain] = []
    best = scored[0][0]
    covered: set[int] = set()
    for loglik, _, _, o, tree, path in scored:
        rel = math.exp(loglik - best)        # how likely this explanation is against the best one
        if out and (rel < ALTERNATIVE_MIN or id(o) in covered):
            continue
        out.append(_chain(o, failure, tree, path, nodes, math.exp(loglik / total_w)))
        covered |= set(tree)
        if len(out) == MAX_CHAINS:
            break
    return [_causal_times(ch) for ch in out]


def _strongest_to(failure: Link, incoming: dict[int, list[Edge]], n: int) -> dict[int, Link]:
    """The ``n`` findings with the strongest paths to the failure (a bound on the candidates of a
    bundle with thousands of findings; the strongest paths are where the explanations are)."""
    best = {id(failure): 1.0}
    seen: dict[int, Link] = {}
    tie = itertools.count()
    heap = [(-1.0, next(tie), failure)]
    while heap and len(seen) < n:
        s, _, u = heapq.heappop(heap)
        if id(u) in seen:
            continue
        seen[id(u)] = u
        for ed in incoming.get(id(u), ()):
            v = ed.cause
            t = -s * ed.strength
            if id(v) not in seen and t > best.get(id(v), 0.0):
                best[id(v)] = t
                heapq.heappush(heap, (-t, next(tie), v))
    return seen


def _path(o: Link, failure: Link, tree: dict[int, Edge | None]) -> list[Edge]:
    edges: list[Edge] = []
    cur = failure
    while cur is not o:
        ed = tree[id(cur)]
        edges.append(ed)
        cur = ed.cause
    edges.reverse()
    return edges


def _chain(o: Link, failure: Link, tree: dict, path_edges: list[Edge], nodes: list[Link], score: float) -> Chain:
    links = tuple([o] + [ed.effect for ed in path_edges])
    on = {id(l) for l in links}
    byid = {id(l): l for l in nodes}
    cons = [tree[i] for i in tree if i not in on and i in byid and tree[i] is not None]
    cons.sort(key=lambda ed: (ed.effect.ts_ns, -ed.strength))
    fw = failure.timing_ns()
    never = never_origin()
    unexplained = tuple(sorted((l for l in nodes if id(l) not in tree and l.timing_ns()[0] <= fw[1]
                                and role(l) not in never and l.kind != LinkKind.JOB_FAILURE),
                               key=lambda l: l.ts_ns))
    return Chain(links, tuple(path_edges), score, tuple(cons), unexplained)


def _causal_times(ch: Chain) -> Chain:
    """An effect is not before its cause: where a link's own time is before its cause's but its
    window allows later, it moves to its cause's time (at most to the end of its window). Only
    times that are uncertain move (a launcher's whole second, a time between two lines)."""
    links = list(ch.links)
    for i in range(1, len(links)):
        prev, cur = links[i - 1], links[i]
        w = cur.timing_ns()
        if prev.ts_ns is None or w is None or cur.ts_ns >= prev.ts_ns:
            continue
        hi = w[1] - (cur.uncertainty_ns or 0)
        if hi > cur.ts_ns:
            links[i] = dataclasses.replace(cur, ts_ns=min(prev.ts_ns, hi))
    if links == list(ch.links):
        return ch
    remap = {id(a): b for a, b in zip(ch.links, links)}
    edges = tuple(dataclasses.replace(e, cause=remap.get(id(e.cause), e.cause), effect=remap.get(id(e.effect), e.effect),
                                      lead_ns=remap.get(id(e.effect), e.effect).ts_ns
                                      - remap.get(id(e.cause), e.cause).ts_ns)
                  for e in ch.edges)
    cons = tuple(dataclasses.replace(e, cause=remap.get(id(e.cause), e.cause)) for e in ch.consequences)
    return Chain(tuple(links), edges, ch.score, cons, ch.unexplained)


def _window_s(l: Link) -> list[float] | None:
    w = l.timing_ns()
    return None if w is None else [w[0] / 1e9, w[1] / 1e9]


def _order(e: Edge) -> str:
    """``undecidable`` when the cause's time window reaches past the start of the effect's: the
    clocks' uncertainty (or a line's resolution) cannot tell which came first, and the edge
    rests on its rule alone; else ``certain``."""
    wc, we = e.cause.timing_ns(), e.effect.timing_ns()
    return "undecidable" if wc is not None and we is not None and wc[1] > we[0] else "certain"


def chain_json(ch: Chain, failure_ts_ns: int | None, summary: str) -> dict:
    return {"score": round(ch.score, 3), "summary": summary,
            "origin": ch.origin.kind.value,
            "lead_s": None if failure_ts_ns is None else round(max(0, failure_ts_ns - ch.origin.ts_ns) / 1e9, 3),
            "links": [l.to_json(failure_ts_ns) for l in ch.links],
            "edges": [dict(e.to_json(), order=_order(e)) for e in ch.edges],
            "consequences": [dict(e.effect.to_json(failure_ts_ns), because=e.rule.why,
                                  caused_by=next((i for i, l in enumerate(ch.links) if l is e.cause), None),
                                  cause={"kind": e.cause.kind.value, "rank": e.cause.rank, "pid": e.cause.pid,
                                         "time": fmt_utc(e.cause.ts_ns),
                                         "time_window": _window_s(e.cause)},
                                  strength=round(e.strength, 3))
                             for e in ch.consequences],
            "unexplained": [l.to_json(failure_ts_ns) for l in ch.unexplained]}
