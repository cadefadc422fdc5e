"""Causal chains: from the terminal failure back to the anomaly where it started.

Nodes are the findings (``Link``s) that are placed in time; edges come from the typed rules
of :mod:`analysis.chain_rules`. An edge *cause -> effect* exists when a rule connects their
kinds (or roles), their entities match the rule's scope, and the cause can have happened
before the effect: its earliest possible time is not after the effect's latest possible time
(:meth:`Link.timing_ns` — clock uncertainty, interpolated line times and a launcher's whole
seconds all widen the windows) and the lead is within the rule's window. Its strength is

    strength = prior x time x entity x confidence(cause)

* time = 1 - 0.5 x lead / window (a cause right before the effect counts fully, one at the
  edge of the window half); when the cause's own time is after the effect's but the windows
  overlap (order unknown within the uncertainty), 0.95 if the cause's window starts before the
  effect's time, else 0.8;
* entity = 1 for the same rank/pid, or the rank/pid the launcher names as the root cause when
  the effect is the job failure; 0.9 same host or another rank of the job; 0.8 when one side has
  no host in a one-host bundle; 0.7 a job failure whose root cause the launcher put elsewhere;
* confidence is the cause finding's own (1 for lines read from the data, lower for detectors).

The search walks backwards from the failure, at most ``MAX_DEPTH`` links, the ``BRANCH``
strongest causes of each effect, edges of at least ``MIN_EDGE``. Every path found is a
candidate chain; its score is

    score = ORIGIN(first) x (1 - strongest cause of first) x geometric mean of the edge strengths

The geometric mean does not punish a longer chain for being long (every extra step must be
as well supported as the others to keep the score); the origin prior prefers chains that
start at something that happens to a job from outside (throttling, a GPU fault) over ones
that start at a symptom (a peer's timeout); and the middle factor explains an origin away
when the data holds a strong cause of it (a SIGKILL is no origin when the OOM killer's line
says it sent it), floored at ``UNEXPLAINED_MIN``. Chains that only repeat a better chain's links
are dropped, and so are alternatives under ``ALTERNATIVE_MIN`` of the best score; the best
``MAX_CHAINS`` are reported, best first, oldest link first.

Worked example (the sample bundle, ``tests/analysis/test_chains.py`` rebuilds it): the failure
is torchrun's job failure at 13:28:56.147. Its strongest cause is the SIGKILL of rank 0 (pid
17988, the rank the launcher names; 0.073 s before): 0.9 x (1 - 0.5 x 0.073/300) x 1.0 x 1.0 =
0.900. The SIGKILL's: the OOM kill of pid 17988 at 13:28:55.760, 0.313 s before:
0.95 x 0.9987 x 1.0 x 1.0 = 0.949. The OOM kill's: the memory growth of the cgroup from
13:28:39.909, 15.85 s before (no rank or pid on a cgroup finding: same host, 0.9; detector
confidence 0.9): 0.9 x 0.9912 x 0.9 x 0.9 = 0.723. The growth's: the CPU throttling seen at
13:28:24.409, 15.5 s before: 0.5 x 0.9914 x 0.9 x 0.9 = 0.402. Nothing explains the
throttling, so the chain throttle -> growth -> OOM kill -> SIGKILL -> failure scores
0.9 x 1 x (0.402 x 0.723 x 0.949 x 0.900)^(1/4) = 0.635, while the same chain starting at the
growth scores 0.7 x (1 - 0.402) x (0.723 x 0.949 x 0.900)^(1/3) = 0.357 and one starting at the
OOM kill 0.5 x (1 - 0.723) x (0.949 x 0.900)^(1/2) = 0.128. The throttling is the origin,
31.7 s before the failure.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .chain_rules import BY_EFFECT, ORIGIN, STOPPED, Rule, Scope, role
from .links import Link, LinkKind, Provenance

MAX_DEPTH, BRANCH, MIN_EDGE, MAX_CHAINS, MAX_EXPANSIONS = 8, 4, 0.12, 3, 50_000
CONSEQUENCE_MIN = 0.4     # how strong an edge to a finding off the path must be to list it
UNEXPLAINED_MIN = 0.05   # an origin with a cause as strong as 0.95 is hardly an origin
ALTERNATIVE_MIN = 0.3     # alternatives scoring under 30 % of the best chain are not worth showing


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
                "lead_s": round(self.lead_ns / 1e9, 3), "provenance": self.provenance.value}


@dataclass(frozen=True)
class Chain:
    links: tuple[Link, ...]      # oldest first, ending at the failure
    edges: tuple[Edge, ...]
    score: float
    # Other findings a link of the chain explains (the steps that slowed under the throttling):
    # not on the path to the failure, but part of the story and evidence that the link is real.
    consequences: tuple[Edge, ...] = ()

    @property
    def origin(self) -> Link:
        return self.links[0]


def _entity(rule: Rule, c: Link, e: Link, hosts: set) -> float | None:
    same_proc = (c.rank is not None and c.rank == e.rank) or (c.pid is not None and c.pid == e.pid)
    if e.kind == LinkKind.JOB_FAILURE:
        rc_rank, rc_pid = e.attr("root_cause_rank"), e.attr("root_cause_pid")
        if rc_rank is not None or rc_pid is not None:
            named = (c.rank is not None and c.rank == rc_rank) or (c.pid is not None and c.pid == rc_pid)
            if named:
                return 1.0
            if rule.scope == Scope.PROCESS:
                return None
            if c.rank is None and c.pid is None and rule.scope == Scope.HOST:
                return 0.9 if (c.host == e.host or e.host is None) else None
            return 0.7
    if rule.scope == Scope.PROCESS:
        return 1.0 if same_proc else None
    if rule.scope == Scope.HOST:
        if same_proc:
            return 1.0
        if c.host is not None and e.host is not None:
            return 0.9 if c.host == e.host else None
        return 0.8 if len(hosts) <= 1 else None
    return 1.0 if same_proc else 0.9


def _edge(rule: Rule, c: Link, e: Link, hosts: set) -> Edge | None:
    cw, ew = c.timing_ns(), e.timing_ns()
    if cw is None or ew is None or cw[0] > ew[1]:
        return None
    lead = e.ts_ns - c.ts_ns
    if rule.min_lead_s and lead < rule.min_lead_s * 1e9:
        return None
    window = rule.window_s * 1e9
    if lead > window + (cw[1] - cw[0]) + (ew[1] - ew[0]):
        return None
    ent = _entity(rule, c, e, hosts)
    if ent is None:
        return None
    if lead >= 0:
        tf = 1 - 0.5 * min(1.0, lead / window)
    else:   # the cause's own time is after the effect's: plausible only within the uncertainty
        tf = 0.95 if cw[0] <= e.ts_ns else 0.8
    strength = rule.prior * tf * ent * c.confidence
    if strength < MIN_EDGE:
        return None
    read = (rule.scope == Scope.PROCESS and c.pid is not None and c.pid == e.pid
            and c.provenance == Provenance.READ and e.provenance == Provenance.READ)
    return Edge(c, e, rule, strength, lead, Provenance.READ if read else Provenance.INFERRED)


def find_chains(links: list[Link], failure: Link | None) -> list[Chain]:
    if failure is None or failure.ts_ns is None:
        return []
    nodes = [l for l in links if l.ts_ns is not None and l is not failure
             and l.kind != LinkKind.CLOCK_SKEW and role(l) != STOPPED]
    by_role: dict[str, list[Link]] = {}
    for l in nodes:
        by_role.setdefault(role(l), []).append(l)
    # A role's findings in time order: how far their windows reach, so that causes() looks only
    # at those whose window can meet the rule's (the others _edge refuses), in the same order.
    reach: dict[str, tuple[list[int], int, int]] = {}
    for r, ls in by_role.items():
        ts = [l.ts_ns for l in ls]
        if all(a <= b for a, b in zip(ts, ts[1:])):
            ws = [l.timing_ns() for l in ls]
            reach[r] = (ts, max(w[1] - w[0] for w in ws), max(l.ts_ns - w[0] for l, w in zip(ls, ws)))
    hosts = {l.host for l in links if l.host}
    found: list[Chain] = []
    budget = [MAX_EXPANSIONS]

    def candidates(rule: Rule, e: Link) -> list[Link]:
        ls = by_role.get(rule.cause, [])
        if rule.cause not in reach:
            return ls
        ts, width, before = reach[rule.cause]
        ew = e.timing_ns()
        earliest = e.ts_ns - math.ceil(rule.window_s * 1e9) - 1 - width - (ew[1] - ew[0])
        return ls[bisect_left(ts, earliest):bisect_right(ts, ew[1] + before)]

    def causes(e: Link, on_path: set) -> list[Edge]:
        out = []
        for rule in BY_EFFECT.get(role(e), ()):
            for c in candidates(rule, e):
                if id(c) in on_path:
                    continue
                ed = _edge(rule, c, e, hosts)
                if ed is not None:
                    out.append(ed)
        best: dict[int, Edge] = {}
        for ed in out:       # one edge per cause: its strongest rule
            if id(ed.cause) not in best or ed.strength > best[id(ed.cause)].strength:
                best[id(ed.cause)] = ed
        return sorted(best.values(), key=lambda ed: (-ed.strength, ed.cause.ts_ns))[:BRANCH]

    def walk(path: list[Link], edges: list[Edge]) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            return
        cs = causes(path[0], {id(l) for l in path}) if len(edges) < MAX_DEPTH else []
        if edges:
            explained = max((ed.strength for ed in cs), default=0.0)
            gm = math.exp(sum(math.log(x.strength) for x in edges) / len(edges))
            score = ORIGIN.get(role(path[0]), 0.3) * max(UNEXPLAINED_MIN, 1 - explained) * gm
            found.append(Chain(tuple(path), tuple(edges), score))
        for ed in cs:
            walk([ed.cause] + path, [ed] + edges)

    walk([failure], [])
    found.sort(key=lambda ch: (-ch.score, ch.origin.ts_ns))
    kept: list[Chain] = []
    for ch in found:
        ids = {id(l) for l in ch.links}
        if any(ids <= {id(l) for l in k.links} for k in kept):
            continue
        if any(id(ch.origin) == id(k.origin) for k in kept):
            continue
        if kept and ch.score < ALTERNATIVE_MIN * kept[0].score:
            break
        kept.append(ch)
        if len(kept) == MAX_CHAINS:
            break
    return [_with_consequences(_causal_times(ch), nodes, hosts) for ch in kept]


def _causal_times(ch: Chain) -> Chain:
    """An effect is not before its cause: where a link's own time is before its cause's but its
    window allows later, it moves to its cause's time (at most to the end of its window). Only
    times that are uncertain move (a launcher's whole second, a time between two lines)."""
    import dataclasses
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
    return Chain(tuple(links), edges, ch.score, ch.consequences)


def _with_consequences(ch: Chain, nodes: list[Link], hosts: set) -> Chain:
    on = {id(l) for l in ch.links}
    best: dict[int, Edge] = {}
    for c in ch.links[:-1]:
        for l in nodes:
            if id(l) in on:
                continue
            for rule in BY_EFFECT.get(role(l), ()):
                if rule.cause != role(c):
                    continue
                ed = _edge(rule, c, l, hosts)
                if ed is not None and ed.strength >= CONSEQUENCE_MIN and (
                        id(l) not in best or ed.strength > best[id(l)].strength):
                    best[id(l)] = ed
    cons = sorted(best.values(), key=lambda e: (e.effect.ts_ns, -e.strength))
    return Chain(ch.links, ch.edges, ch.score, tuple(cons))


def chain_json(ch: Chain, failure_ts_ns: int | None, summary: str) -> dict:
    return {"score": round(ch.score, 3), "summary": summary,
            "origin": ch.origin.kind.value,
            "lead_s": None if failure_ts_ns is None else round((failure_ts_ns - ch.origin.ts_ns) / 1e9, 3),
            "links": [l.to_json(failure_ts_ns) for l in ch.links],
            "edges": [e.to_json() for e in ch.edges],
            "consequences": [dict(e.effect.to_json(failure_ts_ns), because=e.rule.why,
                                  caused_by=ch.links.index(e.cause), strength=round(e.strength, 3))
                             for e in ch.consequences]}
