"""Plain words for the report: a short phrase per finding, a line per chain, and the summary of
the incident an SRE would sign: where it started (who, when, the evidence in brief), how it
spread, when and how the job failed, whether the launcher's "root cause" was a victim, and what
was found but is unrelated. Times of day as people read them; offsets counted from the origin,
never negative."""
from __future__ import annotations

from aftertrace.ingest.timeparse import fmt_hms

from .chain_rules import KILLED, PEER_ERROR, STOPPED, role
from .chains import Chain
from .links import Link, LinkKind as K, Provenance


def _t(ts: int | None) -> str:
    return fmt_hms(ts, "an unknown time")


WIDE_NS = 5_000_000_000     # an origin known to less than this is told as a point in time


def _who(l: Link) -> str:
    if l.rank is not None and l.pid is not None and l.attr("started_by_rank"):
        comm = l.attr("comm")
        return f"a process of rank {l.rank} (pid {l.pid}{', ' + comm if comm else ''})"
    if l.rank is not None and l.pid is not None:
        return f"rank {l.rank} (pid {l.pid})"
    if l.rank is not None:
        return f"rank {l.rank}"
    if l.pid is not None:
        return f"pid {l.pid}"
    return "the job"


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


def _cg(l: Link) -> str:
    return f"cgroup {l.entity}" if l.entity and l.entity.startswith("/") else "the job's cgroup"


def _inside(l: Link) -> str:
    """Who the host finding touches, in words."""
    if l.attr("outside"):
        n = len(l.attr("members") or ())
        return f" (no job process in it{f'; {n} other process' + ('es' if n != 1 else '') if n else ''})"
    ranks = l.attr("ranks") or ()
    if ranks:
        return f" (holding rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
    return ""


def phrase(l: Link) -> str:
    """What happened, in a few words (no time)."""
    k, r = l.kind, role(l)
    host = f" on {l.host}" if l.host else ""
    if k == K.CPU_THROTTLE:
        return f"CPU throttling of {_cg(l)}{host}{_inside(l)}"
    if k == K.CPU_PRESSURE:
        return f"CPU pressure{host}"
    if k == K.MEMORY_PRESSURE:
        return f"memory pressure{host}"
    if k == K.MEMORY_GROWTH:
        of = f" of {_cg(l)}" if l.entity and l.entity.startswith("/") else ""
        if l.pid is not None:
            return f"memory of {_who(l)} in {_cg(l)} growing toward the limit{host}"
        if l.attr("startup") and not l.attr("near_limit"):
            return f"{_cg(l)} filling up from empty (a start-up){host}{_inside(l)}"
        return f"memory{of} growing toward its limit{host}{_inside(l)}"
    if k == K.OOM_KILL:
        comm = l.attr("victim_comm")
        who = _who(l) + (f" ({comm})" if comm and l.rank is None else "")
        return f"the OOM killer killing {who}{host}"
    if k == K.STEP_SLOWDOWN:
        b, s = l.attr("baseline_s"), l.attr("slow_s")
        x = f" {s / b:.0f}x" if b and s else ""
        return f"rank {l.rank}'s training steps slowing down{x}"
    if k == K.RANK_STALLED:
        st = l.attr("state")
        if l.attr("exited_ns"):
            return f"{_who(l)} leaving the job (it stopped making progress and exited without reporting an error)"
        return f"{_who(l)} stopping (no progress after that{'; ' + st if st else ''})"
    if k == K.FOREIGN_MEMORY:
        return f"memory on {l.host or 'the host'} taken by processes outside the job's cgroups"
    if k == K.CPU_CONTENTION:
        return f"{l.attr('hog') or 'another process'} taking the CPU {_who(l)} needed"
    if k == K.CGROUP_FROZEN:
        return f"the freezer cgroup{' ' + l.entity if l.entity else ''} being frozen{_inside(l)}"
    if k == K.PROCESS_STOPPED:
        return f"{_who(l)} being stopped"
    if k == K.PROCESS_BLOCKED:
        return f"{_who(l)} blocked in uninterruptible sleep"
    if k == K.HUNG_TASK:
        return f"{_who(l)} blocked in the kernel (hung task)"
    if k == K.DISK_FULL:
        return f"{_who(l)} failing to write (disk full)"
    if k == K.SHM_EXHAUSTED:
        return f"{_who(l)} running out of shared memory (/dev/shm)"
    if k == K.DATALOADER_STALL:
        return f"the DataLoader of {_who(l)} no longer delivering batches"
    if k == K.DATALOADER_WORKER_KILLED:
        w = str(l.attr("worker_pids") or "").strip()
        return f"{_who(l)} losing a DataLoader worker" + (f" (pid{'s' if ',' in w else ''} {w})" if w else "")
    if k == K.RENDEZVOUS_FAILURE:
        if l.rank is None and str(l.attr("exc_type") or "").endswith("RendezvousTimeoutError"):
            where = f" on {l.host}" if l.host else ""
            return f"the launcher{where} giving up waiting for the other nodes to join (rendezvous timeout)"
        return f"{_who(l)} failing to join the job (rendezvous)"
    if r == KILLED and l.attr("launcher_killed"):
        where = f" on {l.host}" if l.host else ""
        took = f" and rank {l.rank} with it" if l.rank is not None else " and its ranks with it"
        return f"the launcher{where} (pid {l.pid}){took} being killed by {l.attr('signal')} from outside"
    if r == KILLED:
        sig = l.attr("signal") or "a signal"
        src = " sent from outside the job (not by the launcher)" if l.attr("outside_signal") else ""
        return f"{_who(l)} dying from {sig}{src}"
    if r == STOPPED:
        ign = l.attr("sigterm_ignored_s")
        by = f"killed by the launcher ({l.attr('signal')}) after ignoring SIGTERM for {ign:g} s" if ign and \
            l.attr("signal") == "SIGKILL" else f"being stopped by the launcher ({l.attr('signal') or 'signal'})"
        return f"{_who(l)} {by}"
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
        ms = l.attr("wait_ms") or l.attr("timeout_ms")
        return f"{_who(l)} timing out in a collective" + (f" after waiting {ms / 1000:g} s" if ms else "")
    if k == K.COLLECTIVE_MISMATCH:
        return f"{_who(l)} reporting mismatched collectives"
    if k == K.SEGFAULT:
        return f"{_who(l)} crashing (segmentation fault)"
    if k == K.JOB_FAILURE:
        return "the job failing"
    return _device_phrase(l, host) or f"{k.value.replace('_', ' ')} ({_who(l)}{host})"


def _in(l: Link) -> str:
    """' in rank 0 (pid 17988)' when the finding names a process of the job, else ''."""
    return f" in {_who(l)}" if l.rank is not None or l.pid is not None else ""


def _device_phrase(l: Link, host: str) -> str | None:
    """The phrases of the kernel's, the devices', NCCL's and the clocks' findings."""
    k = l.kind
    cpu = l.attr("cpu")
    on_cpu = f" of CPU {cpu}" if isinstance(cpu, int) else ""
    if k == K.GPU_XID:
        gpu = l.attr("pci") or l.entity
        gpu = f"GPU {gpu}" if gpu else "a GPU"
        if "fallen off the bus" in (l.summary or ""):
            return f"{gpu} falling off the bus{host}"
        xid = l.attr("xid")
        return f"{gpu} reporting {'Xid ' + str(xid) if xid is not None else 'an Xid error'}{host}"
    if k == K.NCCL_WARN:
        return f"an NCCL warning{_in(l)}{host}"
    if k == K.NCCL_INIT_FAILURE:
        return f"NCCL failing to set up its communicator{_in(l)}{host}"
    if k == K.STRAGGLER:
        return f"{_who(l)}{host} falling behind its peers (a straggler)"
    if k == K.RT_THROTTLING:
        return f"the kernel throttling real-time tasks{host}"
    if k == K.SOFT_LOCKUP:
        return f"a soft lockup{on_cpu}{host}"
    if k == K.HARD_LOCKUP:
        return f"a hard lockup{on_cpu}{host}"
    if k == K.RCU_STALL:
        return f"an RCU stall{host}"
    if k == K.KERNEL_PANIC:
        return f"a kernel panic{host}"
    if k == K.KERNEL_OOPS:
        return f"a kernel oops{_in(l)}{host}"
    if k == K.KERNEL_WARNING:
        return f"a kernel warning{_in(l)}{host}"
    if k == K.HARDWARE_ERROR:
        return f"a hardware error{host}"
    if k == K.PCIE_ERROR:
        return f"a PCIe bus error{host}"
    if k == K.THERMAL_THROTTLE:
        return f"thermal throttling{on_cpu}{host}"
    if k == K.LINK_DOWN:
        iface = l.attr("iface")
        return f"network link {iface + ' ' if iface else ''}going down{host}"
    if k == K.CLOCK_SKEW:
        return f"the clocks{host} disagreeing beyond their stated uncertainty"
    if k == K.CLOCK_STEP:
        return f"the wall clock{host} stepping"
    return None


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
