"""OOM events read from cgroup counters: v1 ``memory.oom_control`` ``oom_kill`` and v2
``memory.events`` ``oom_kill`` going up between two snapshots (the kernel says it killed
that many processes in the cgroup within that interval).

The same kill is usually also in the kernel log (``oom_kill`` findings from dmesg, with
the victim's pid). When such a finding on the same host lies within the interval (widened
by ``SLACK_NS`` for clock uncertainty), the counter lines are added to its evidence instead
of making a second finding; otherwise a finding of its own is made, stamped at the
snapshot that first shows the new count (kind ``oom_kill``, read from the data).
"""
from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right

from aftertrace.analysis.links import Link, LinkKind, Provenance

from ._series import by_entity, entity_name, evidence, hms, load

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.OOM_KILL})

SLACK_NS = 2_000_000_000
RAW = {"memory.oom_kill_delta": "memory.oom_kill"}


class _Kills:
    """The placed ``oom_kill`` findings among ``links``, by time: the first (in the list's order)
    within [t0, t1] on a host (any, when no host is asked) from another source. Bisects the
    kills' times, where a scan of every finding per counter increase cost the findings' count.
    Adding evidence to a kill changes none of what is looked up."""

    def __init__(self, links: list[Link]) -> None:
        at = sorted((l.ts_ns, j) for j, l in enumerate(links) if l.kind == LinkKind.OOM_KILL and l.ts_ns is not None)
        self.links = links
        self.ts = [t for t, _ in at]
        self.at = [j for _, j in at]

    def first(self, t0: int, t1: int, host: str | None, source: str) -> int | None:
        i, k = bisect_left(self.ts, t0), bisect_right(self.ts, t1)
        return min((j for j in self.at[i:k] if (self.links[j].host == host or not host)
                    and self.links[j].source != source), default=None)


def merge(store, incident_id: str, zone: str | None, existing: list[Link]) -> tuple[list[Link], list[Link]]:
    """Returns (new findings, existing findings with the counter evidence added)."""
    new, updated = [], list(existing)
    kills = _Kills(updated)
    for (_, host, entity), m in by_entity(load(store, incident_id, list(RAW))).items():
        for metric, s in m.items():
            for i, v in enumerate(s.values):
                if v <= 0 or i == 0:
                    continue
                prev_raw, t_raw = s.ts_raw[i - 1], s.ts_raw[i]
                lo, hi = s.ts_utc[i - 1], s.ts_utc[i]
                ev = evidence(s, [(prev_raw, entity, RAW[metric]), (t_raw, entity, RAW[metric])], zone)
                match = None
                if lo is not None and hi is not None:
                    match = kills.first(lo - SLACK_NS, hi + SLACK_NS, host, s.source)
                if match is not None:
                    updated[match] = dataclasses.replace(updated[match],
                                                         evidence=updated[match].evidence + ev)
                    continue
                text = (f"{int(v)} process(es) in {entity_name(entity)} killed by the OOM killer between "
                        f"{hms(lo)} and {hms(hi)} ({RAW[metric]} counter)")
                new.append(Link(kind=LinkKind.OOM_KILL, ts_ns=hi, summary=text, source=s.source, host=host,
                                evidence=ev, provenance=Provenance.READ, confidence=0.9,
                                uncertainty_ns=s.uncertainty_ns))
    return new, updated
