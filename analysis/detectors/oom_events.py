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

from analysis.links import Link, LinkKind, Provenance

from ._series import by_entity, entity_name, evidence, hms, load

SLACK_NS = 2_000_000_000
RAW = {"memory.oom_kill_delta": "memory.oom_kill"}


def detect(store, incident_id: str, zone: str | None, existing: list[Link]) -> tuple[list[Link], list[Link]]:
    """Returns (new findings, existing findings with the counter evidence added)."""
    new, updated = [], list(existing)
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
                    for j, l in enumerate(updated):
                        if (l.kind == LinkKind.OOM_KILL and l.ts_ns is not None and (l.host == host or not host)
                                and lo - SLACK_NS <= l.ts_ns <= hi + SLACK_NS and l.source != s.source):
                            match = j
                            break
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
