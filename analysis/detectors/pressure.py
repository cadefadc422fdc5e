"""cpu_pressure and memory_pressure: PSI stall time rising above the incident's quiet level.

Series: ``psi.<cpu|memory>.some.stall_pct`` — the share of wall time in which at least one
task was stalled on the resource, from the ``total=`` stall counter (µs) of consecutive
snapshots (more exact than the kernel's avg10, which lags). Per entity (``host`` for
/proc/pressure, a cgroup for its <res>.pressure). High when above
``max(ABS_MIN, median + max(6 sigma, 10 percentage points))``; ABS_MIN is 20 % for cpu (a
busy shared host sits at 10-20 %) and 5 % for memory (memory stalls are rare on a healthy
host). An episode needs 2 high snapshots. Evidence: the pressure lines of the snapshot
before and of the onset.
"""
from __future__ import annotations

import statistics

from aftertrace.analysis.links import Link, LinkKind, Provenance

from ._series import by_entity, entity_name, episodes, evidence, first_rise, hms, load, onset_window, threshold

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.CPU_PRESSURE, LinkKind.MEMORY_PRESSURE})

RULES = {  # resource -> (kind, abs_min percent)
    "cpu": (LinkKind.CPU_PRESSURE, 20.0),
    "memory": (LinkKind.MEMORY_PRESSURE, 5.0),
}
K, MIN_RISE = 6.0, 10.0


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    names = {f"psi.{r}.some.stall_pct": r for r in RULES}
    out = []
    for (_, host, entity), m in by_entity(load(store, incident_id, list(names))).items():
        for metric, s in m.items():
            res = names[metric]
            kind, abs_min = RULES[res]
            if len(s.values) < 3:
                continue
            thr, med, sigma = threshold(s.values, K, abs_min, MIN_RISE)
            for a, b in episodes(s.values, thr):
                t0 = s.ts_raw[a]
                prev = s.ts_raw[a - 1] if a > 0 else None
                peak = max(s.values[a:b + 1])
                text = (f"{res.upper() if res == 'cpu' else res.capitalize()} pressure on {entity_name(entity)}: "
                        f"tasks stalled {statistics.median(s.values[a:b + 1]):.0f}% of the time "
                        f"(peak {peak:.0f}%) for {(s.ts_raw[b] - t0) / 1e9:.1f} s from {hms(s.ts_utc[a])}, "
                        f"quiet level {med:.1f}%")
                raw = f"psi.{res}.some.total_ns"
                wanted = [(t, entity, raw) for t in ([prev] if prev else []) + [t0]]
                out.append(Link(kind=kind, ts_ns=s.ts_utc[a], summary=text, source=s.source, host=host,
                                evidence=evidence(s, wanted, zone), provenance=Provenance.INFERRED,
                                confidence=0.8, uncertainty_ns=s.uncertainty_ns,
                            attrs=onset_window(s, first_rise(s.values, a, med, sigma, abs_min / 4), a)
                            + (("until_ns", s.ts_utc[b]),), entity=entity))
    return out
