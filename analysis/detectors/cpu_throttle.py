"""cpu_throttle: the onset of CFS bandwidth throttling of a cgroup.

Series: ``cpu.throttled_s_per_s`` (throttled time per second, from cpu.stat
``throttled_time`` ns (v1) / ``throttled_usec`` (v2)) per cgroup. High when above
``max(0.02 s/s, median + 8 sigma)`` of the cgroup's own series (0.02 s/s = 2 % of one CPU
spent throttled: below that, throttling is routine noise). An episode needs 2 high
snapshots (or runs to the end). The finding is stamped at the first snapshot that shows
it; the change happened after the snapshot before it. Magnitude: median throttled s/s
and median fraction of periods throttled over the episode, and the quota (cores) in force.
Evidence: the quota, cpu.stat and period lines of the snapshot before and of the onset
(quota lines first: a quota change in that interval is the most telling line).
"""
from __future__ import annotations

import statistics

from analysis.links import Link, LinkKind, Provenance

from ._series import (between, by_entity, entity_name, episodes, evidence, first_rise, hms, load, onset_window,
                      threshold, value_at)

SERIES = "cpu.throttled_s_per_s"
K, ABS_MIN = 8.0, 0.02
RAW = ("cpu.quota_ns", "cpu.nr_throttled", "cpu.throttled_ns", "cpu.nr_periods", "cpu.period_ns")  # most telling first


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    groups = by_entity(load(store, incident_id, [SERIES, "cpu.throttled_fraction", "cpu.quota_cores",
                                                 "cpu.quota_ns"]))
    out = []
    for (_, host, entity), m in groups.items():
        s = m.get(SERIES)
        if s is None or len(s.values) < 3:
            continue
        thr, med, sigma = threshold(s.values, K, ABS_MIN)
        for a, b in episodes(s.values, thr):
            t0 = s.ts_raw[a]
            prev = s.ts_raw[a - 1] if a > 0 else None
            mag = statistics.median(s.values[a:b + 1])
            frac = m.get("cpu.throttled_fraction")
            fr = between(frac, t0, s.ts_raw[b])[1] if frac else []
            quota = value_at(m.get("cpu.quota_cores"), t0)
            qn = m.get("cpu.quota_ns")
            qprev = value_at(qn, prev) if prev else None
            qnow = value_at(qn, t0)
            text = f"CPU throttling of {entity_name(entity)} "
            text += (f"began between {hms(s.ts_utc[a - 1])} and {hms(s.ts_utc[a])}" if a > 0 else
                     "was already on at the first snapshot")
            text += f": {mag:.2f} s throttled per second"
            if fr:
                text += f", {statistics.median(fr) * 100:.0f}% of periods throttled"
            text += f" (median over {(s.ts_raw[b] - t0) / 1e9:.1f} s; quiet level {med:.3f} s/s)"
            if quota is not None:
                text += f"; quota {quota:.2f} CPUs"
            if qprev is not None and qnow is not None and qprev != qnow:
                old = "unlimited" if qprev < 0 else f"{qprev / 1000:.0f} us"
                text += f" (quota changed from {old} to {qnow / 1000:.0f} us in that interval)"
            wanted = [(t, entity, r) for r in RAW for t in ([prev] if prev else []) + [t0]]
            out.append(Link(kind=LinkKind.CPU_THROTTLE, ts_ns=s.ts_utc[a], summary=text, source=s.source,
                            host=host, evidence=evidence(s, wanted, zone), provenance=Provenance.INFERRED,
                            confidence=0.9, uncertainty_ns=s.uncertainty_ns,
                            attrs=onset_window(s, first_rise(s.values, a, med, sigma, ABS_MIN / 4), a)
                            + (("until_ns", s.ts_utc[b]),), entity=entity))
    return out
