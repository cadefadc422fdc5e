"""memory_growth: a cgroup's memory heading for its limit, with the projected time to hit it.

Series: ``memory.growth_bytes_per_s`` (d usage / dt between snapshots; usage is v1
``memory.usage_in_bytes`` or v2 ``memory.current``) per cgroup. A snapshot is *rising* when
growth exceeds ``max(8 MiB/s, median + 4 sigma)`` of the cgroup's own series. Rising
snapshots at most 2 apart form an episode, and episodes with no release of memory between them
(usage never fell more than 1 % below its running peak — a leak that allocates in steps) are one
episode, except after a start-up episode (one that began in a cgroup holding under 64 MiB: a job
filling an empty cgroup is starting, and its later growth is judged on its own). An episode is a finding when it is heading for
the limit: it gained at least 10 % of the limit AND ended within 20 % of the limit, or was
followed (within 2 snapshots) by an OOM or limit hit in the cgroup's counters. Without a
known limit, an episode must gain 256 MiB and at least double the usage; no projection is
made then.

Acceleration: within an episode, where growth sped up at least 2.5-fold (the best single split
of its rates into two levels, 3 snapshots each at least), the finding is stamped where the
faster growth began (the split is known to one snapshot: its window starts a snapshot
earlier) and says since when the slower growth had been going on.

Projection: the slope is the Theil-Sen line through (time, usage) of the episode; the limit
is reached at ``t_onset + (limit - usage at onset) / slope``. The finding is stamped at the
first rising snapshot (the growth started within the interval that ends there). Evidence:
the usage lines before and at onset and at the episode's end, and the limit line.
"""
from __future__ import annotations

from aftertrace.analysis.links import Link, LinkKind, Provenance

from ._series import (between, by_entity, entity_name, episodes, evidence, first_rise, fmt_bytes,
                      hms, load, onset_window, theil_sen, threshold, value_at)

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.MEMORY_GROWTH})

K, ABS_MIN = 4.0, 8 * 1024 * 1024
MIN_GAIN_OF_LIMIT, NEAR_LIMIT = 0.10, 0.80
NO_LIMIT_GAIN = 256 * 1024 * 1024
SPEEDUP, MIN_PART = 2.5, 3
EMPTY_BYTES = 64 * 1024 * 1024       # a cgroup holding less than this has no job running in it yet
EVENTS = ("memory.oom_kill_delta", "memory.oom_delta", "memory.failcnt_delta", "memory.max_hits_delta")


def _no_release(u, g, end: int, start: int) -> bool:
    """Usage never fell more than 1 % below its running peak between two rising runs."""
    peak = 0.0
    for v in between(u, g.ts_raw[end], g.ts_raw[start])[1]:
        peak = max(peak, v)
        if v < 0.99 * peak:
            return False
    return True


def _startup(u, uidx: dict, t_first_rising: int) -> bool:
    """An episode that filled a (nearly) empty cgroup: a job starting, not a leak. Later
    growth is a new episode even with no release in between."""
    i = uidx.get(t_first_rising)
    return i is not None and i > 0 and u.values[i - 1] < EMPTY_BYTES


def _acceleration(rates: list[float], a: int, b: int) -> tuple[int, tuple[int, float] | None]:
    """Where growth within an episode sped up: the one split of its rates into an early and a
    late part that leaves the least squared error (two constant levels), taken when the late
    part grows at least ``SPEEDUP`` times as fast as the early one and both have
    ``MIN_PART`` snapshots. Returns (the onset to report, (early onset, early mean rate) or None).
    A job that grows a little (caches, a profiler cycle) and then starts to leak is stamped
    where the leak began."""
    xs = rates[a:b + 1]
    n = len(xs)
    if n < 2 * MIN_PART:
        return a, None

    def sse(v):
        m = sum(v) / len(v)
        return sum((x - m) ** 2 for x in v)
    best = min(range(MIN_PART, n - MIN_PART + 1), key=lambda k: sse(xs[:k]) + sse(xs[k:]))
    early, late = xs[:best], xs[best:]
    me, ml = sum(early) / len(early), sum(late) / len(late)
    if ml >= SPEEDUP * max(me, 1.0):
        return a + best, (a, me)
    return a, None


def detect(store, incident_id: str, zone: str | None) -> list[Link]:
    groups = by_entity(load(store, incident_id, ["memory.growth_bytes_per_s", "memory.usage_bytes",
                                                 "memory.limit_bytes", *EVENTS]))
    out = []
    for (_, host, entity), m in groups.items():
        g, u = m.get("memory.growth_bytes_per_s"), m.get("memory.usage_bytes")
        if g is None or u is None or len(g.values) < 3:
            continue
        thr, med, sigma = threshold(g.values, K, ABS_MIN)
        lim_s = m.get("memory.limit_bytes")
        uidx = {t: i for i, t in enumerate(u.ts_raw)}
        eps: list[tuple[int, int]] = []
        for a, b in episodes(g.values, thr, gap=2, min_points=1):
            if eps and _no_release(u, g, eps[-1][1], a) and not _startup(u, uidx, g.ts_raw[eps[-1][0]]):
                eps[-1] = (eps[-1][0], b)
            else:
                eps.append((a, b))
        for a, b in eps:
            if a == b and b != len(g.values) - 1:
                continue
            a, early = _acceleration(g.values, a, b)
            t0, t1 = g.ts_raw[a], g.ts_raw[b]
            i0, i1 = uidx.get(t0), uidx.get(t1)
            if i0 is None or i1 is None or i0 == 0:
                continue
            start_usage, onset_usage, end_usage = u.values[i0 - 1], u.values[i0], u.values[i1]
            gain = end_usage - start_usage
            limit = value_at(lim_s, t0)
            if limit is not None and limit >= 1 << 60:
                limit = None
            after = [t for t in u.ts_raw[i1:i1 + 3]]
            event = any((value_at(m.get(e), t) or 0) > 0 for e in EVENTS for t in after)
            # a job filling an empty cgroup is starting, not leaking: kept (another tenant's
            # growth starts from nothing too) but said, and weaker
            startup = start_usage < EMPTY_BYTES
            if limit:
                if not (gain >= MIN_GAIN_OF_LIMIT * limit and (end_usage >= NEAR_LIMIT * limit or event)):
                    continue
            elif not (gain >= NO_LIMIT_GAIN and end_usage >= 2 * max(start_usage, 1)):
                continue
            xs = [(t - t0) / 1e9 for t in u.ts_raw[i0 - 1:i1 + 1]]
            slope = theil_sen(xs, u.values[i0 - 1:i1 + 1])
            text = (f"Memory of {entity_name(entity)} grew from {fmt_bytes(start_usage)} to {fmt_bytes(end_usage)} "
                    f"in {(t1 - u.ts_raw[i0 - 1]) / 1e9:.1f} s from {hms(g.ts_utc[a])} "
                    f"({fmt_bytes(slope)}/s, Theil-Sen)")
            if limit and slope > 0:
                eta = (limit - onset_usage) / slope
                hit = g.ts_utc[a] + int(eta * 1e9) if g.ts_utc[a] is not None else None
                text += (f", heading for its {fmt_bytes(limit)} limit: at that rate the limit is reached "
                         f"{eta:.1f} s after onset (~{hms(hit)}); headroom at onset {fmt_bytes(limit - onset_usage)}")
            if event:
                text += "; the cgroup's counters show the limit hit / an OOM right after"
            if early is not None:
                text += (f"; it had been growing more slowly ({fmt_bytes(early[1])}/s) since "
                         f"{hms(g.ts_utc[early[0]])}")
            wanted = [(u.ts_raw[i0 - 1], entity, "memory.usage_bytes"), (t0, entity, "memory.usage_bytes"),
                      (t1, entity, "memory.usage_bytes"), (t0, entity, "memory.limit_bytes")]
            if startup:
                text += "; the cgroup was empty before (a start-up, or a new tenant)"
            near = bool(limit and (end_usage >= NEAR_LIMIT * limit or event)) or event
            lo = a - 1 if early is not None else first_rise(g.values, a, med, sigma, ABS_MIN / 4)
            out.append(Link(kind=LinkKind.MEMORY_GROWTH, ts_ns=g.ts_utc[a], summary=text, source=g.source,
                            host=host, evidence=evidence(g, wanted, zone), provenance=Provenance.INFERRED,
                            confidence=(0.9 if limit else 0.6) * (0.7 if startup else 1.0),
                            uncertainty_ns=g.uncertainty_ns,
                            attrs=onset_window(g, lo, a) + (
                                ("until_ns", g.ts_utc[b]), ("gain_bytes", gain), ("near_limit", near),
                                ("startup", startup)),
                            entity=entity))
    return out
