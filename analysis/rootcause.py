"""The root-cause analysis of one incident, in one call: findings -> progress, stops and stalled
ranks -> who each host finding touches -> the terminal failure -> the origin that explains the
most, and the chain from it -> victims -> the summary in plain words.

Compute only: returns a :class:`RootCause`; ``analysis.report`` turns it into the report
document and ``web`` into pages.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import attribution, contention, findings, flight_recorder, narrative, progress, stacks
from .chain_rules import role
from .chains import Chain, find_chains
from .kinds import PEER_ERROR, STOPPED
from .links import Link, LinkKind


@dataclass(frozen=True)
class RootCause:
    anomalies: tuple[Link, ...]          # every finding, time-ordered, the failure included
    failure: Link | None
    chains: tuple[Chain, ...]
    victims: tuple[Link, ...]
    ranks: dict
    summary: str
    launcher_root_cause: int | None      # the rank the launcher blamed, when it said


def _victims(links: list[Link], chain: Chain | None, failure: Link | None) -> list[Link]:
    """Ranks that went down because of the origin: one finding each (the most telling)."""
    on_chain = {id(l) for l in chain.links} if chain else set()
    origin = chain.origin if chain else None
    pref = {PEER_ERROR: 0, LinkKind.COLLECTIVE_TIMEOUT.value: 0, LinkKind.COLLECTIVE_MISMATCH.value: 1,
            LinkKind.PROCESS_EXIT.value: 2, STOPPED: 3}
    best: dict[int, Link] = {}
    for l in links:
        if l.rank is None or id(l) in on_chain or l is failure or role(l) not in pref:
            continue
        if origin is not None and origin.rank == l.rank:
            continue
        if any(c.rank == l.rank for c in (chain.links if chain else ())):
            continue
        cur = best.get(l.rank)
        if cur is None or pref[role(l)] < pref[role(cur)]:
            best[l.rank] = l
    return [best[r] for r in sorted(best)]


def analyze(store, incident_id: str, extra: list[Link] = ()) -> RootCause:
    links = findings.merge_duplicates(findings.anomalies(store, incident_id) + list(extra))
    ranks = progress.rank_progress(store, incident_id)
    links = progress.after_last_sign_of_life(ranks, links)
    links = progress.after_the_wait_began(ranks, links)
    links = progress.launcher_stops(ranks, links)
    links = progress.killed_launchers(ranks, links)
    links = progress.job_end(store, incident_id, ranks, links)
    progress.attach_ended(ranks, links)      # the ranks' terminal findings as now marked
    pids = {r: p.pid for r, p in ranks.items() if p.pid is not None}
    # (a pid that two ranks of one host have, or two ranks of unknown host, names neither)
    rank_of = attribution.one_rank(((ranks[r].host, p), r) for r, p in pids.items())
    links = [dataclasses.replace(l, rank=rank_of.get((l.host, l.pid), rank_of.get((None, l.pid))))
             if l.rank is None and l.pid is not None and ((l.host, l.pid) in rank_of or (None, l.pid) in rank_of)
             else l for l in links]
    hosts = {r: ranks[r].host for r in pids}
    children = attribution.named_children(links, pids, attribution.children_of(store, incident_id), hosts)
    links = attribution.owned(links, attribution.host_views(pids, hosts, children))
    job = attribution.job_pids(store, incident_id, pids, children, hosts)
    links = attribution.annotate(store, incident_id, links, pids, job, children, hosts)
    links = links + progress.stalled_links(ranks, links)
    links = stacks.explain_stalls(store, incident_id, ranks, links, children)
    links = flight_recorder.explain(store, incident_id, ranks, links)
    links = links + progress.observed_end(store, incident_id, ranks, links, children)
    links = links + contention.detect(store, incident_id, links, pids, job)
    links.sort(key=lambda l: (l.ts_ns is None, l.ts_ns or 0))
    failure = findings.terminal_failure(links)
    chains = find_chains(links, failure, pids, job)
    if chains and chains[0].links[-1] is not failure and chains[0].links[-1].kind == failure.kind:
        # the failure's time moved to stay after its cause (within its own uncertainty)
        moved = chains[0].links[-1]
        links = [moved if l is failure else l for l in links]
        failure = moved
    victims = _victims(links, chains[0] if chains else None, failure)
    rc = failure.attr("root_cause_rank") if failure is not None else None
    return RootCause(tuple(links), failure, tuple(chains), tuple(victims), ranks,
                     narrative.summary(failure, chains, victims), rc)
