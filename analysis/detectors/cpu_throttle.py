"""cpu_throttle: the onset of CFS bandwidth throttling of a cgroup.

Series: ``cpu.throttled_s_per_s`` (throttled time per second, from cpu.stat
``throttled_time`` ns (v1) / ``throttled_usec`` (v2)) per cgroup. High when above
``max(0.02 s/s, median + 8 sigma)`` of the cgroup's own series (0.02 s/s = 2 % of one CPU
spent throttled: below that, throttling is routine noise). An episode needs 2 high
snapshots (or runs to the end). The finding is stamped at the first snapshot that shows
it; the change happened after the snapshot before it.

A group throttled in most of its periods for its whole life has no quiet level of its own to
compare with: its threshold is the noise floor, and its episode starts at its first snapshot.
A group that first appears in the middle of a series (a per-rank or per-container group made
during the incident) began after the series' snapshot before that one, which did not list it. Magnitude: median throttled s/s
and median fraction of periods throttled over the episode, and the quota (cores) in force.
Evidence: the quota, cpu.stat and period lines of the snapshot before and of the onset
(quota lines first: a quota change in that interval is the most telling line).
"""
from __future__ import annotations

import statistics

from aftertrace.analysis.links import Link, LinkKind, Provenance

from ._series import (between, by_entity, entity_name, episodes, evidence, first_rise, hms, load, onset_window,
                      threshold, value_at)

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.CPU_THROTTLE})

SERIES = "cpu.throttled_s_per_s"
K, ABS_MIN = 8.0, 0.02
FRAC_MIN = 0.5      # throttled in half the periods: never routine
RAW = ("cpu.quota_ns", "cpu.nr_throttled", "cpu.throttled_ns", "cpu.nr_periods", "cpu.period_ns")  # most telling first


def _episodes(s, frac) -> list[tuple]:
    """(series, first, last, quiet median, sigma, floor) of each episode: on throttled seconds per
    second, else on the fraction of periods throttled. With a long CFS period (a quota of 1 ms
    per 1 s) the kernel adds throttled time in bursts, once per period or less, and a snapshot
    every 0.5 s sees single spikes between zeros; the fraction of periods is steady."""
    thr, med, sigma = threshold(s.values, K, ABS_MIN)
    eps = episodes(s.values, thr)
    if eps:
        return [(s, a, b, med, sigma, ABS_MIN) for a, b in eps]
    if frac is None or len(frac.values) < 3:
        return []
    thr, med, sigma = threshold(frac.values, K, FRAC_MIN)
    if med >= FRAC_MIN:
        thr = FRAC_MIN      # saturated all along: no quiet level of its own
    return [(frac, a, b, med, sigma, FRAC_MIN) for a, b in episodes(frac.values, thr)]


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    groups = by_entity(load(store, incident_id, [SERIES, "cpu.throttled_fraction", "cpu.quota_cores",
                                                 "cpu.quota_ns"]))
    times: dict[int, list[int]] = {}        # source -> every snapshot time of its series
    for (sid, _, _), m in groups.items():
        times.setdefault(sid, []).extend(t for x in m.values() for t in x.ts_utc if t is not None)
    times = {k: sorted(set(v)) for k, v in times.items()}
    out = []
    for (sid, host, entity), m in groups.items():
        s = m.get(SERIES)
        if s is None or len(s.values) < 3:
            continue
        frac = m.get("cpu.throttled_fraction")
        found = _episodes(s, frac)
        for x, a, b, med, sigma, floor in found:
            t0 = x.ts_raw[a]
            prev = x.ts_raw[a - 1] if a > 0 else None
            born = None            # (snapshot without the group, its first snapshot)
            first = min((t for y in m.values() for t in y.ts_utc if t is not None), default=None)
            if a == 0 and first is not None:
                before = [t for t in times.get(sid, ()) if t < first]
                if before:
                    born = (before[-1], first)
            vals = between(s, t0, x.ts_raw[b])[1] or [s.values[min(a, len(s.values) - 1)]]
            # throttled time is counted in bursts when the period is long: the episode's mean, not median
            mag = statistics.fmean(vals) if x is frac else statistics.median(vals)
            fr = between(frac, t0, x.ts_raw[b])[1] if frac else []
            quota = value_at(m.get("cpu.quota_cores"), t0)
            qn = m.get("cpu.quota_ns")
            qprev = value_at(qn, prev) if prev else None
            qnow = value_at(qn, t0)
            text = f"CPU throttling of {entity_name(entity)} "
            text += (f"began between {hms(x.ts_utc[a - 1])} and {hms(x.ts_utc[a])}" if a > 0 else
                     f"was on from its first snapshot at {hms(born[1])} (the group was not in the snapshot "
                     f"at {hms(born[0])})" if born else "was already on at the first snapshot")
            text += f": {mag:.2f} s throttled per second"
            if fr:
                text += f", {statistics.median(fr) * 100:.0f}% of periods throttled"
            quiet = ("never quiet" if x is frac and med >= floor else
                     f"quiet level {med * 100:.0f}% of periods" if x is frac else f"quiet level {med:.3f} s/s")
            text += f" (over {(x.ts_raw[b] - t0) / 1e9:.1f} s; {quiet})"
            if quota is not None:
                text += f"; quota {quota:.3f} CPUs" if quota < 0.1 else f"; quota {quota:.2f} CPUs"
            if qprev is not None and qnow is not None and qprev != qnow:
                old = "unlimited" if qprev < 0 else f"{qprev / 1000:.0f} us"
                text += f" (quota changed from {old} to {qnow / 1000:.0f} us in that interval)"
            wanted = [(t, entity, r) for r in RAW for t in ([prev] if prev else []) + [t0]]
            out.append(Link(kind=LinkKind.CPU_THROTTLE, ts_ns=born[1] if born else x.ts_utc[a], summary=text, source=s.source,
                            host=host, evidence=evidence(s, wanted, zone), provenance=Provenance.INFERRED,
                            confidence=0.9, uncertainty_ns=s.uncertainty_ns,
                            attrs=(onset_window(x, first_rise(x.values, a, med, sigma, floor / 4), a) if not born
                                   else (("ts_lo_ns", born[0]), ("ts_hi_ns", born[1]), ("ts_bound", "between")))
                            + (("until_ns", x.ts_utc[b]),), entity=entity))
    return out
