"""Plain words for the report: a short phrase per finding, a line per chain, and the
one-paragraph summary of the incident (what failed, where it started, how it spread, who
else went down with it)."""
from __future__ import annotations

from ingest.timeparse import fmt_hms

from .chain_rules import KILLED, PEER_ERROR, STOPPED, role
from .chains import Chain
from .links import Link, LinkKind as K


def _t(ts: int | None) -> str:
    return fmt_hms(ts, "an unknown time")


def _who(l: Link) -> str:
    if l.rank is not None and l.pid is not None:
        return f"rank {l.rank} (pid {l.pid})"
    if l.rank is not None:
        return f"rank {l.rank}"
    if l.pid is not None:
        return f"pid {l.pid}"
    return "the job"


def _lead(l: Link, failure: Link | None) -> str:
    if failure is None or failure.ts_ns is None or l.ts_ns is None or l is failure:
        return ""
    d = (failure.ts_ns - l.ts_ns) / 1e9
    lw, fw = l.timing_ns(), failure.timing_ns()
    if abs(d) < 0.05 or (d < 0 and lw and fw and lw[0] <= fw[1]):
        return ", at the failure (within the uncertainty of the times)" if abs(d) >= 0.05 else ", at the failure"
    return f", {d:.1f} s before the failure" if d > 0 else f", {-d:.1f} s after the failure"


def phrase(l: Link) -> str:
    """What happened, in a few words (no time)."""
    k, r = l.kind, role(l)
    host = f" on {l.host}" if l.host else ""
    if k == K.CPU_THROTTLE:
        of = f"cgroup {l.entity}" if l.entity and l.entity.startswith("/") else "the job's cgroup"
        return f"CPU throttling of {of}{host}"
    if k == K.CPU_PRESSURE:
        return f"CPU pressure{host}"
    if k == K.MEMORY_PRESSURE:
        return f"memory pressure{host}"
    if k == K.MEMORY_GROWTH:
        of = f" of cgroup {l.entity}" if l.entity and l.entity.startswith("/") else ""
        return f"memory{of} growing toward its limit{host}"
    if k == K.OOM_KILL:
        return f"the OOM killer killing {_who(l)}{host}"
    if k == K.STEP_SLOWDOWN:
        b, s = l.attr("baseline_s"), l.attr("slow_s")
        x = f" {s / b:.0f}x" if b and s else ""
        return f"rank {l.rank}'s training steps slowing down{x}"
    if k == K.RANK_STALLED:
        return f"{_who(l)} stopping (no progress after that)"
    if r == KILLED:
        sig = l.attr("signal") or "a signal"
        return f"{_who(l)} dying from {sig}"
    if r == STOPPED:
        return f"{_who(l)} being stopped by the launcher ({l.attr('signal') or 'signal'})"
    if k == K.PROCESS_EXIT:
        code = l.attr("exitcode")
        return f"{_who(l)} exiting" + (f" with code {code}" if code is not None else "")
    if k == K.PYTHON_EXCEPTION:
        exc = l.attr("exc_type") or "an exception"
        msg = (l.attr("exc_msg") or "").strip().splitlines()[0:1]
        m = f": {msg[0][:90]}" if msg else ""
        lost = " (it lost its peer)" if r == PEER_ERROR else ""
        return f"{_who(l)} raising {exc}{m}{lost}"
    if k == K.COLLECTIVE_TIMEOUT:
        return f"{_who(l)} timing out in a collective"
    if k == K.COLLECTIVE_MISMATCH:
        return f"{_who(l)} reporting mismatched collectives"
    if k == K.SEGFAULT:
        return f"{_who(l)} crashing (segmentation fault)"
    if k == K.JOB_FAILURE:
        return "the job failing"
    return f"{k.value.replace('_', ' ')} ({_who(l)}{host})"


def chain_line(ch: Chain, failure: Link | None) -> str:
    steps = [f"{phrase(l)} ({_t(l.ts_ns)}{_lead(l, failure)})" for l in ch.links]
    return " -> ".join(steps)


def failure_sentence(failure: Link | None) -> str:
    if failure is None:
        return "No terminal failure was found in the bundle (no launcher failure report, no fatal error)."
    rc = failure.attr("root_cause_rank")
    how = failure.summary.split(";")[0] if failure.kind == K.JOB_FAILURE else phrase(failure)
    s = (f"The job failed at {_t(failure.ts_ns)} UTC" if failure.ts_ns is not None else
         "The job failed at a time the bundle does not let aftertrace place (no clock anchor for its source)")
    if failure.kind == K.JOB_FAILURE and rc is not None:
        s += f": the launcher reported rank {rc} as the root cause (its first observed failure)"
    else:
        s += f": {how}"
    return s + "."


def summary(failure: Link | None, chains: list[Chain], victims: list[Link]) -> str:
    parts = [failure_sentence(failure)]
    if chains:
        ch = chains[0]
        o = ch.origin
        lead = ""
        if failure is not None and failure.ts_ns is not None and o.ts_ns is not None:
            d = (failure.ts_ns - o.ts_ns) / 1e9
            lead = f" {d:.1f} s before the failure" if d >= 0.05 else " at the failure itself"
        where = f" on host {o.host}" if o.host and f" on {o.host}" not in phrase(o) else ""
        parts.append(f"It started{lead}{where} with {phrase(o)} at {_t(o.ts_ns)}.")
        mids = [l for l in ch.links[1:] if l is not failure]
        if mids:
            parts.append("Then: " + "; ".join(f"{phrase(l)} at {_t(l.ts_ns)}" for l in mids) + ".")
        if ch.consequences:
            parts.append("Alongside: " + "; ".join(f"{phrase(e.effect)} at {_t(e.effect.ts_ns)}"
                                                   for e in ch.consequences[:4]) + ".")
        rc = failure.attr("root_cause_rank") if failure is not None else None
        if rc is not None and o.rank is not None and o.rank != rc:
            parts.append(f"The launcher's root cause, rank {rc}, was a victim: it failed because of "
                         f"rank {o.rank}.")
        if len(chains) > 1:
            parts.append(f"{len(chains) - 1} weaker alternative chain{'s' if len(chains) > 2 else ''} "
                         f"{'are' if len(chains) > 2 else 'is'} listed below.")
    elif failure is not None:
        parts.append("No earlier anomaly could be connected to it.")
    if victims:
        parts.append("Also affected: " + "; ".join(f"{phrase(v)} at {_t(v.ts_ns)}" for v in victims) + ".")
    return " ".join(parts)
