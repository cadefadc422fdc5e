"""Which rank its peers waited for, as PyTorch's Flight Recorder says: the collective a rank never
entered.

Each rank's dump (``ingest.formats.flight_recorder``) says, per process group, the sequence
number of the last collective the rank enqueued (``pg_status``; without it, its last entry's), and
which of its entries had not completed. Collectives are numbered alike on every rank of a group,
so within a group the ranks whose last enqueued number is below the highest one never entered
the collectives their peers did: they are behind, and the peers wait in the first collective the
laggard did not enter. (``fr_trace``, PyTorch's own analyzer, reads the same numbers.) A rank
whose dump is missing is not judged.

Worked example (``sample_traces/fr-gloo-stall``, recorded here): rank 0's dump says process group
0 enqueued collective 14 (``gloo:all_reduce``, at 19:43:01.669, not completed), rank 1's that its
last was 13 (19:43:01.565). Rank 1 is behind: "the Flight Recorder dumps say rank 0 enqueued
collective 14 (gloo:all_reduce) of process group 0 at 19:43:01.669 and it did not complete; rank 1's
last was 13: rank 1 never entered it". That sentence is added to the ``rank_stalled`` finding of
rank 1 (the logs made one: rank 0 timed out waiting for it), with both dumps as evidence; where
no finding says rank 1 stalled (dumps taken during a hang, no timeout yet), one is made, dated at
its last sign of life.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aftertrace.ingest.sink import attrs_of
from aftertrace.ingest.timeparse import fmt_hms

from .links import Evidence, Link, LinkKind
from .present import has_rows
from .progress import stall_link

# the finding kinds it makes (the catalogue: analysis/kinds.py): a stall only the dumps show, and
# ranks that called different collectives under one sequence number (a desync)
EMITS = frozenset({LinkKind.RANK_STALLED, LinkKind.COLLECTIVE_MISMATCH})


@dataclass(frozen=True)
class Standing:
    """One rank's process group as its dump says: the last collective it enqueued."""
    rank: int
    pg: str
    last: int
    evidence: Evidence
    pending: tuple[str, int, int | None] | None = None     # (op, seq, created ns) of its first unfinished entry


def standings(store, incident_id: str) -> dict[str, dict[int, Standing]]:
    """pg id -> rank -> its standing, from the incident's Flight Recorder dumps."""
    if not has_rows(store, incident_id, "events"):
        return {}
    rows = store.query(
        """SELECT COALESCE(e.rank, s.rank) AS rank, e.name, e.text, e.attrs, e.ts_utc_ns AS ts, s.path
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.category = 'collective' AND e.name IN ('fr_pg_status', 'fr_pending')
             AND COALESCE(e.rank, s.rank) IS NOT NULL
           ORDER BY s.path, e.ts_raw_ns NULLS LAST""", [incident_id])
    out: dict[str, dict[int, Standing]] = {}
    pending: dict[tuple[str, int], tuple[str, int, int | None]] = {}
    for r in rows:
        a = attrs_of(r["attrs"])
        if r["name"] == "fr_pending" and isinstance(a.get("seq"), int):
            key = (str(a.get("pg_id") or a.get("pg")), int(r["rank"]))
            if key not in pending or a["seq"] < pending[key][1]:
                pending[key] = (str(a.get("op")), a["seq"], r["ts"])
    for r in rows:
        a = attrs_of(r["attrs"])
        if r["name"] != "fr_pg_status" or not isinstance(a.get("last_enqueued"), int) or a["last_enqueued"] < 0:
            continue
        pg, rank = str(a.get("pg_id")), int(r["rank"])
        out.setdefault(pg, {})[rank] = Standing(rank, pg, a["last_enqueued"], Evidence(r["path"], None, r["text"] or ""),
                                                pending.get((pg, rank)))
    return out


def behind(groups: dict[str, dict[int, Standing]]) -> dict[int, tuple[Standing, Standing]]:
    """rank -> (its standing, the standing of a peer that went furthest) for each rank that never
    entered a collective a peer of its group entered (the group where it is furthest behind)."""
    out: dict[int, tuple[Standing, Standing]] = {}
    for pg in sorted(groups):
        ranks = groups[pg]
        if len(ranks) < 2:
            continue
        ahead = max(ranks.values(), key=lambda s: (s.last, -s.rank))
        for s in ranks.values():
            if s.last < ahead.last and (s.rank not in out or ahead.last - s.last > out[s.rank][1].last - out[s.rank][0].last):
                out[s.rank] = (s, ahead)
    return out


def _words(s: Standing, ahead: Standing) -> str:
    nxt = s.last + 1
    if ahead.pending is not None and ahead.pending[1] == nxt:
        op, _, at = ahead.pending
        entered = f"enqueued collective {nxt} ({op}) of process group {s.pg}" + (f" at {fmt_hms(at)}" if at else "") \
            + " and it did not complete"
    else:
        entered = f"enqueued collectives up to {ahead.last} of process group {s.pg}"
    return (f"the Flight Recorder dumps say rank {ahead.rank} {entered}; rank {s.rank}'s last was {s.last}: "
            f"rank {s.rank} never entered collective {nxt}")


def mismatch(store, incident_id: str) -> Link | None:
    """The first collective (by process group and sequence number) the dumps show ranks calling
    differently (``gloo:all_reduce`` on one, ``gloo:all_gather`` on another): a desync, read from
    the dumps. Its rank is the one whose call differs from all the others' (none where no call is
    the majority's)."""
    if not has_rows(store, incident_id, "collectives"):
        return None
    # (the first such collective found in SQL: a job's dumps hold ranks x their ring buffer of entries)
    calls = """SELECT COALESCE(c.rank, s.rank) AS rank, c.pg, c.seq, c.op, c.ts_utc_ns AS ts, s.path
               FROM collectives c JOIN sources s USING (incident_id, source_id)
               WHERE c.incident_id = ? AND s.kind = 'flight_recorder' AND c.seq IS NOT NULL
                 AND COALESCE(c.rank, s.rank) IS NOT NULL"""
    found = store.query(f"""SELECT pg, seq FROM ({calls}) GROUP BY pg, seq
                            HAVING count(DISTINCT op) > 1 AND count(DISTINCT rank) > 1
                            ORDER BY seq, pg LIMIT 1""", [incident_id])
    for f in found:
        by_rank: dict[int, dict] = {}
        for r in store.query(f"SELECT * FROM ({calls}) WHERE pg IS NOT DISTINCT FROM ? AND seq = ? ORDER BY rank, path",
                             [incident_id, f["pg"], f["seq"]]):
            by_rank.setdefault(int(r["rank"]), r)
        pg, seq = str(f["pg"]), int(f["seq"])
        ops = {r["op"] for r in by_rank.values()}
        count = {op: sum(1 for r in by_rank.values() if r["op"] == op) for op in ops}
        odd = [rk for rk, r in by_rank.items() if count[r["op"]] == 1 and max(count.values()) > 1]
        who = ", ".join(f"rank {rk} {r['op']}" for rk, r in sorted(by_rank.items()))
        first = min((r for r in by_rank.values() if r["ts"] is not None), key=lambda r: r["ts"], default=None)
        return Link(kind=LinkKind.COLLECTIVE_MISMATCH, ts_ns=first["ts"] if first else None,
                    summary=f"ranks called different collectives as collective {seq} of process group {pg}: {who} "
                            "(Flight Recorder dumps)",
                    source=(first or next(iter(by_rank.values())))["path"],
                    rank=odd[0] if len(odd) == 1 else None,
                    evidence=tuple(Evidence(r["path"], None, f"collective {seq} of process group {pg}: {r['op']}")
                                   for _, r in sorted(by_rank.items())),
                    attrs=(("pg", pg), ("seq", seq), ("ops", who)))
    return None


def explain(store, incident_id: str, ranks: dict, links: list[Link]) -> list[Link]:
    """``links`` with the dumps' desync (:func:`mismatch`) where no finding says the ranks called
    different collectives; each ``rank_stalled`` finding of a rank the dumps show behind told so
    (both dumps as evidence), and a ``rank_stalled`` made for such a rank where none says it stalled."""
    # (most incidents hold no dump: one question instead of the readings' queries)
    if not store.query("SELECT 1 AS x FROM sources WHERE incident_id = ? AND kind = 'flight_recorder' LIMIT 1",
                       [incident_id]):
        return links
    desync = mismatch(store, incident_id)
    if desync is not None and not any(l.kind == LinkKind.COLLECTIVE_MISMATCH for l in links):
        links = links + [desync]
    late = behind(standings(store, incident_id))
    if not late:
        return links
    out, told = [], set()
    for l in links:
        got = late.get(l.rank) if l.kind == LinkKind.RANK_STALLED else None
        if got is None:
            out.append(l)
            continue
        s, ahead = got
        told.add(l.rank)
        out.append(dataclasses.replace(l, summary=f"{l.summary}; {_words(s, ahead)}",
                                       evidence=l.evidence + (ahead.evidence, s.evidence),
                                       attrs=l.attrs + (("fr_last_enqueued", s.last), ("fr_peer_enqueued", ahead.last))))
    for rank, (s, ahead) in sorted(late.items()):
        if rank in told or rank not in ranks:
            continue
        why = _words(s, ahead)
        l = stall_link(ranks[rank], why, 0.7 if len(late) == 1 else 0.5, [])
        out.append(dataclasses.replace(l, evidence=l.evidence + (ahead.evidence, s.evidence)))
    return out
