"""cgroup_frozen: a freezer cgroup found FROZEN in the snapshots.

Series: ``freezer.frozen`` per cgroup (v1 ``freezer.state``: THAWED 0, FREEZING 0.5, FROZEN 1;
v2 ``cgroup.freeze``/``cgroup.events``). A run of snapshots at 1 (FROZEN) is one finding: the
freeze happened after the last snapshot that did not show it and by the first that does; it
lasted until the last frozen snapshot (``until_ns``). Everything in the group stops: who was
in it is :mod:`analysis.attribution`'s part. Evidence: the state lines of the snapshot before
and of the first frozen one.
"""
from __future__ import annotations

from aftertrace.analysis.links import Link, LinkKind, Provenance

from ._series import by_entity, entity_name, evidence, hms, load, onset_window

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.CGROUP_FROZEN})

SERIES = "freezer.frozen"


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    out = []
    for (_, host, entity), m in by_entity(load(store, incident_id, [SERIES])).items():
        s = m[SERIES]
        i = 0
        while i < len(s.values):
            if s.values[i] < 1.0:
                i += 1
                continue
            a = i
            while i < len(s.values) and s.values[i] >= 1.0:
                i += 1
            b = i - 1
            before = f"between {hms(s.ts_utc[a - 1])} and {hms(s.ts_utc[a])}" if a > 0 else \
                "before the first snapshot"
            ends = f"; thawed by {hms(s.ts_utc[i])}" if i < len(s.values) else "; still frozen at the last snapshot"
            text = f"The freezer {entity_name(entity)} was frozen {before}{ends}"
            wanted = [(t, entity, SERIES) for t in ([s.ts_raw[a - 1]] if a > 0 else []) + [s.ts_raw[a]]]
            out.append(Link(kind=LinkKind.CGROUP_FROZEN, ts_ns=s.ts_utc[a], summary=text, source=s.source, host=host,
                            evidence=evidence(s, wanted, zone), provenance=Provenance.READ, confidence=1.0,
                            uncertainty_ns=s.uncertainty_ns, entity=entity,
                            attrs=onset_window(s, a) + (("until_ns", s.ts_utc[b]),)))
    return out
