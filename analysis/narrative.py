"""Plain words for the report: a short phrase per finding, a line per chain, and the summary of
the incident an SRE would sign: where it started (who, when, the evidence in brief), how it
spread, when and how the job failed, whether the launcher's "root cause" was a victim, and what
was found but is unrelated. Times of day as people read them; offsets counted from the origin,
never negative."""
from __future__ import annotations

from aftertrace.ingest.timeparse import fmt_hms

from .chain_rules import role
from .chains import Chain
from .kinds import BY_VALUE
from .links import Link, LinkKind as K, Provenance


def _t(ts: int | None) -> str:
    return fmt_hms(ts, "an unknown time")


WIDE_NS = 5_000_000_000     # an origin known to less than this is told as a point in time


def _mid_when(l: Link, origin: Link) -> str:
    """When a step of the chain happened: a line with no time of its own, placed between timed
    lines far apart, is told as that interval, not as a point in it."""
    w = l.timing_ns()
    if (w is not None and w[1] - w[0] > WIDE_NS and l.provenance == Provenance.READ
            and l.attr("ts_bound") == "between"):
        return f"between {_t(w[0])} and {_t(w[1])} (its line has no time of its own)"
    return f"at {_t(l.ts_ns)}{_after(l, origin)}"


def _after(l: Link, origin: Link | None) -> str:
    if origin is None or l is origin or l.ts_ns is None or origin.ts_ns is None:
        return ""
    d = (l.ts_ns - origin.ts_ns) / 1e9
    return " (at about the same time)" if d < 0.05 else f" ({_dur(d)} later)"


def _dur(s: float) -> str:
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def phrase(l: Link) -> str:
    """What happened, in a few words (no time): the kind's phrase (:data:`.kinds.KINDS`)."""
    return BY_VALUE[l.kind.value].phrase(l, role(l))


def launcher_victim_of(ch: Chain, failure: Link) -> int | None:
    """The rank that really started it, when the launcher's "root cause" rank only reacted to it:
    a link of another rank comes before the named rank's first link on the chain."""
    rc = failure.attr("root_cause_rank")
    if rc is None:
        return None
    for l in ch.links:
        if l.rank == rc:
            return None
        if l.rank is not None:
            return l.rank
    return None


def chain_line(ch: Chain, failure: Link | None) -> str:
    o = ch.origin
    steps = [f"{phrase(l)} ({_t(l.ts_ns)}{_after(l, o)})" for l in ch.links]
    return " -> ".join(steps)


def failure_sentence(failure: Link | None, after: str = "") -> str:
    if failure is None:
        return "No terminal failure was found in the bundle (no launcher failure report, no fatal error)."
    rc = failure.attr("root_cause_rank")
    if failure.kind == K.JOB_HANG:      # (no failure: the collector found the job silent and took the bundle)
        return (f"The job was found hanging at {_t(failure.ts_ns)} UTC{after}: {failure.attr('detail') or phrase(failure)}"
                f"; the bundle was taken while it hung.")
    how = failure.summary.split(";")[0] if failure.kind == K.JOB_FAILURE else phrase(failure)
    s = (f"The job failed at {_t(failure.ts_ns)} UTC{after}" if failure.ts_ns is not None else
         "The job failed at a time the bundle does not let aftertrace place (no clock anchor for its source)")
    if failure.kind == K.JOB_FAILURE and rc is not None:
        s += f": the launcher reported rank {rc} as the root cause (its first observed failure)"
    else:
        s += f": {how}"
    return s + "."


def summary(failure: Link | None, chains: list[Chain], victims: list[Link]) -> str:
    if not chains:
        parts = [failure_sentence(failure)]
        if failure is not None:
            parts.append("No earlier anomaly could be connected to it.")
        if victims:
            parts.append("Also affected: " + "; ".join(f"{phrase(v)} at {_t(v.ts_ns)}" for v in victims) + ".")
        return " ".join(parts)
    ch = chains[0]
    o = ch.origin
    where = f" on host {o.host}" if o.host and f" on {o.host}" not in phrase(o) else ""
    first = phrase(o)
    w = o.timing_ns()
    if o.kind != K.RANK_STALLED and w is not None and w[1] - w[0] > WIDE_NS:
        # a line without its own time (placed between its timed neighbours): say so, not a midpoint
        untimed = " (its line has no time of its own)" if o.provenance == Provenance.READ else ""
        when = f"between {_t(w[0])} and {_t(w[1])} UTC{untimed}" if \
            o.attr("ts_bound") == "between" else f"at {_t(o.ts_ns)} UTC (to within {_dur((w[1] - w[0]) / 2e9)})"
    else:
        when = f"at {_t(o.ts_ns)} UTC"
    parts = [f"It started with {first}{where} {when}."]
    mids = [l for l in ch.links[1:] if l is not failure and l.kind != K.JOB_FAILURE]
    if mids:
        parts.append("Then: " + "; ".join(f"{phrase(l)} {_mid_when(l, o)}" for l in mids) + ".")
    if failure is not None:
        after = ""
        if o is not failure and o.ts_ns is not None and failure.ts_ns is not None:
            d = (failure.ts_ns - o.ts_ns) / 1e9
            after = f", {_dur(d)} after it started" if d >= 0.05 else ", right after it started"
        fs = failure_sentence(failure, after).rstrip(".")
        victim_of = launcher_victim_of(ch, failure)
        if victim_of is not None:
            fs += f"; rank {failure.attr('root_cause_rank')} is a victim: it failed because of rank {victim_of}"
        parts.append(fs + ".")
    if ch.consequences:
        parts.append("Also explained: " + "; ".join(f"{phrase(e.effect)} at {_t(e.effect.ts_ns)}"
                                                    for e in ch.consequences[:4]) + ".")
    if ch.unexplained:
        parts.append("Unrelated (not explained by this origin): " + "; ".join(
            f"{phrase(l)} at {_t(l.ts_ns)}" for l in ch.unexplained[:4]) + ".")
    if len(chains) > 1:
        parts.append(f"{len(chains) - 1} weaker alternative explanation{'s' if len(chains) > 2 else ''} "
                     f"{'are' if len(chains) > 2 else 'is'} listed below.")
    told = {id(e.effect) for e in ch.consequences[:4]}
    victims = [v for v in victims if id(v) not in told]
    if victims:
        parts.append("Also affected: " + "; ".join(f"{phrase(v)} at {_t(v.ts_ns)}" for v in victims) + ".")
    return " ".join(parts)
