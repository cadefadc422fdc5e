"""The finding kinds: each declared once, with everything the analysis knows of it.

A :class:`FindingKind` is the kind's value (what ``events.kind`` and the report's ``kind`` hold,
and the name of its :class:`LinkKind` member, upper-cased), what it means, whether it is a
*condition* (it lasts: it has a start and an end, and can cause what starts while it lasts, see
:mod:`.chain_rules`), whether it may be a chain's origin, its *phrase*: the few words the report
tells it in (:func:`aftertrace.analysis.narrative.phrase`), and the chain rules it brings (the
relations between it and other kinds or roles, beyond :data:`.chain_rules.RULES`).

Roles refine a kind where the data tells more (:func:`aftertrace.analysis.chain_rules.role`): a
Python exception that names a lost peer is a *peer error*, a signal the launcher sent while
tearing the job down is a *stop*. A phrase is given the finding's role with the finding.

The catalogue is open: :data:`KINDS` here holds the kinds several modules make or reason about
(the parsers' kinds, the chain's own), and a module that alone makes a kind declares it itself,
rules and all, with :func:`declare` (a detector's ``FOREIGN = declare(FindingKind(...))``, see
``detectors/foreign_memory.py``). :class:`LinkKind` is the catalogue's members: ``LinkKind.X``
and ``LinkKind("x")`` find a kind wherever it was declared, and iterating ``LinkKind`` first
imports every producer module (:func:`gather`), so that a kind declared in one is never missed.

What names a kind elsewhere: the chain rules (:func:`.chain_rules.rules`), and the producers that
make it, each declaring what it makes: a parser its ``emits`` (the kinds its events carry), a
detector (a module of :mod:`.detectors`) and each of the analysis's own producers
(:data:`PRODUCER_MODULES`) its ``EMITS``. :func:`producers` gathers them all;
``tests/analysis/test_kinds.py`` holds the rules and the producers to this catalogue (a rule that
waits for a kind nobody makes fails it, and so does a module that makes a kind it does not
declare).

Adding a kind a new detector makes: one module of :mod:`.detectors` with its
:class:`FindingKind` (phrase and rules included), ``EMITS`` and ``detect``, and its test.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from .links import Link

# The roles (see the module docstring): what :func:`.chain_rules.role` gives beyond a kind's value.
PEER_ERROR = "peer_error"        # python_exception naming a lost/closed/reset peer
SELF_ERROR = "self_error"        # any other python_exception
KILLED = "killed"                # signal_kill by SIGKILL/SIGSEGV/SIGABRT/... (not the launcher's)
STOPPED = "stopped"              # a signal the launcher sent while tearing the job down
LINEAGE = "lineage"              # the process-lineage edge (analysis/lineage.py)
ROLES = frozenset({PEER_ERROR, SELF_ERROR, KILLED, STOPPED, LINEAGE})


class Scope(str, Enum):
    """Between which findings a rule holds (see :mod:`.chain_rules`)."""
    PROCESS = "process"
    HOST = "host"
    JOB = "job"
    MEMCG = "memcg"
    RANK = "rank"


@dataclass(frozen=True)
class Rule:
    """A finding of kind (or role) ``cause`` can lead to one of kind ``effect`` (see :mod:`.chain_rules`)."""
    cause: str          # a LinkKind value or a role (see ``chain_rules.role``)
    effect: str
    scope: Scope
    prior: float
    window_s: float
    why: str
    min_lead_s: float = 0.0   # the cause must lead by this much (a build-up takes time)
    lag_s: float = 30.0       # a condition's effect may start this long after the condition ended
    cause_attr: str | None = None   # an attribute the cause must not have false for this rule to apply
    needs: str | None = None        # an attribute the cause must have true for this rule to apply


@dataclass(frozen=True)
class FindingKind:
    value: str
    about: str                                  # what a finding of this kind says happened
    phrase: Callable[["Link", str], str]        # (finding, its role) -> the report's few words (no time)
    condition: bool = False                     # it lasts (a start and an end): see chain_rules
    origin: bool = True                         # it may be a chain's origin (a clock's disagreement never is)
    rules: tuple[Rule, ...] = ()                # the chain rules it brings (each names it as cause or effect)


# -- the catalogue's members --------------------------------------------------------------------
_MEMBERS: dict[str, "LinkKind"] = {}            # value -> member, in the order declared
BY_VALUE: dict[str, FindingKind] = {}           # value -> its declaration
CONDITIONS: set[str] = set()                    # the values of the kinds that last
NOT_ORIGINS: set[str] = set()                   # the values of the kinds never a chain's origin


class _Catalogue(type):
    """What ``LinkKind`` answers as a class: its members by name, by value, in order."""

    def __iter__(cls) -> Iterator["LinkKind"]:
        gather()
        return iter(tuple(_MEMBERS.values()))

    def __len__(cls) -> int:
        gather()
        return len(_MEMBERS)

    def __getitem__(cls, name: str) -> "LinkKind":
        m = _member(name.lower()) if name.isupper() else None
        if m is None:
            raise KeyError(name)
        return m

    def __getattr__(cls, name: str) -> "LinkKind":
        # (only a member not declared yet gets here: a declared one is a class attribute)
        m = _member(name.lower()) if name.isupper() else None
        if m is None:
            raise AttributeError(f"no finding kind {name.lower()!r} is declared (kinds.declare)")
        return m

    def __call__(cls, value) -> "LinkKind":
        if type(value) is cls:
            return value
        m = _member(value) if isinstance(value, str) else None
        if m is None:
            raise ValueError(f"{value!r} is not a declared finding kind")
        return m


class LinkKind(str, metaclass=_Catalogue):
    """A finding kind as the findings carry it: its value, a string (``LinkKind.OOM_KILL ==
    "oom_kill"``), one object per declared kind."""
    __slots__ = ()

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self.value.upper()

    def __repr__(self) -> str:
        return f"<LinkKind.{self.name}: {self.value!r}>"

    def __reduce__(self):
        return LinkKind, (self.value,)


def _member(value: str) -> "LinkKind | None":
    m = _MEMBERS.get(value)
    if m is None:
        gather()
        m = _MEMBERS.get(value)
    return m


def declare(kind: FindingKind) -> LinkKind:
    """Add ``kind`` to the catalogue and give its member (``LinkKind.<VALUE>`` from now on)."""
    if kind.value in _MEMBERS:
        raise ValueError(f"the finding kind {kind.value!r} is declared twice")
    if kind.value in ROLES or not kind.value.isidentifier() or kind.value != kind.value.lower():
        raise ValueError(f"{kind.value!r} cannot be a finding kind's value (lower-case, not a role's name)")
    if not kind.about or kind.about != kind.about.strip():
        raise ValueError(f"{kind.value!r}: say what it means in 'about'")
    for r in kind.rules:
        if kind.value not in (r.cause, r.effect):
            raise ValueError(f"{kind.value!r} brings a rule that does not name it: {r}")
    m = str.__new__(LinkKind, kind.value)
    _MEMBERS[kind.value] = m
    BY_VALUE[kind.value] = kind
    type.__setattr__(LinkKind, kind.value.upper(), m)
    if kind.condition:
        CONDITIONS.add(kind.value)
    if not kind.origin:
        NOT_ORIGINS.add(kind.value)
    return m


def catalogue() -> tuple[FindingKind, ...]:
    """Every declared kind, those of :data:`KINDS` first."""
    gather()
    return tuple(BY_VALUE.values())


_GATHER = {"done": False, "running": False}


def gather() -> None:
    """Import every module that makes findings (the detectors, :data:`PRODUCER_MODULES`), so that
    the kinds they declare are in the catalogue. Once; a call made while it runs returns."""
    if _GATHER["done"] or _GATHER["running"]:
        return
    _GATHER["running"] = True
    try:
        importlib.import_module(f"{__package__}.detectors")
        for m in PRODUCER_MODULES:
            importlib.import_module(f"{__package__}.{m}")
        _GATHER["done"] = True
    finally:
        _GATHER["running"] = False


# -- the words the phrases share --------------------------------------------------------------
def who(l: Link) -> str:
    """The process a finding is about, in words ("rank 0 (pid 17988)", "the job")."""
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


def _on(l: Link) -> str:
    return f" on {l.host}" if l.host else ""


def _cg(l: Link) -> str:
    return f"cgroup {l.entity}" if l.entity and l.entity.startswith("/") else "the job's cgroup"


def _inside(l: Link) -> str:
    """Who a host finding touches, in words."""
    if l.attr("outside"):
        n = len(l.attr("members") or ())
        return f" (no job process in it{f'; {n} other process' + ('es' if n != 1 else '') if n else ''})"
    ranks = l.attr("ranks") or ()
    if ranks:
        return f" (holding rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
    return ""


def _in(l: Link) -> str:
    """' in rank 0 (pid 17988)' when the finding names a process of the job, else ''."""
    return f" in {who(l)}" if l.rank is not None or l.pid is not None else ""


def _of_cpu(l: Link) -> str:
    cpu = l.attr("cpu")
    return f" of CPU {cpu}" if isinstance(cpu, int) else ""


# -- the phrases that say more than a line ----------------------------------------------------
def _memory_growth(l: Link, r: str) -> str:
    of = f" of {_cg(l)}" if l.entity and l.entity.startswith("/") else ""
    if l.pid is not None:
        return f"memory of {who(l)} in {_cg(l)} growing toward the limit{_on(l)}"
    if l.attr("startup") and not l.attr("near_limit"):
        return f"{_cg(l)} filling up from empty (a start-up){_on(l)}{_inside(l)}"
    return f"memory{of} growing toward its limit{_on(l)}{_inside(l)}"


def _oom_kill(l: Link, r: str) -> str:
    comm = l.attr("victim_comm")
    return f"the OOM killer killing {who(l) + (f' ({comm})' if comm and l.rank is None else '')}{_on(l)}"


def _step_slowdown(l: Link, r: str) -> str:
    b, s = l.attr("baseline_s"), l.attr("slow_s")
    x = f" {s / b:.0f}x" if b and s else ""
    return f"rank {l.rank}'s training steps slowing down{x}"


def _rank_stalled(l: Link, r: str) -> str:
    st = l.attr("state")
    if l.attr("exited_ns"):
        return f"{who(l)} leaving the job (it stopped making progress and exited without reporting an error)"
    where = ""
    if l.attr("blocked_workers"):
        where = f"; its DataLoader workers blocked inside {l.attr('blocked_in')}"
        if l.attr("shm_used_bytes"):
            where += f", /dev/shm full ({l.attr('shm_used_bytes') >> 20} MiB of {l.attr('shm_size_bytes') >> 20} MiB)"
    elif l.attr("blocked_in"):
        where = f"; blocked in {l.attr('blocked_in')}" + (f", in {l.attr('waiting_in')}" if l.attr("waiting_in") else "")
    return f"{who(l)} stopping (no progress after that{'; ' + st if st else ''}{where})"


def _worker_killed(l: Link, r: str) -> str:
    w = str(l.attr("worker_pids") or "").strip()
    return f"{who(l)} losing a DataLoader worker" + (f" (pid{'s' if ',' in w else ''} {w})" if w else "")


def _rendezvous(l: Link, r: str) -> str:
    if l.rank is None and str(l.attr("exc_type") or "").endswith("RendezvousTimeoutError"):
        return f"the launcher{_on(l)} giving up waiting for the other nodes to join (rendezvous timeout)"
    return f"{who(l)} failing to join the job (rendezvous)"


def _signal_kill(l: Link, r: str) -> str:
    if r == STOPPED:
        ign = l.attr("sigterm_ignored_s")
        by = f"killed by the launcher ({l.attr('signal')}) after ignoring SIGTERM for {ign:g} s" if ign and \
            l.attr("signal") == "SIGKILL" else f"being stopped by the launcher ({l.attr('signal') or 'signal'})"
        return f"{who(l)} {by}"
    if l.attr("launcher_killed"):
        took = f" and rank {l.rank} with it" if l.rank is not None else " and its ranks with it"
        return f"the launcher{_on(l)} (pid {l.pid}){took} being killed by {l.attr('signal')} from outside"
    sig = l.attr("signal") or "a signal"
    src = " sent from outside the job (not by the launcher)" if l.attr("outside_signal") else ""
    return f"{who(l)} dying from {sig}{src}"


def _process_exit(l: Link, r: str) -> str:
    code = l.attr("exitcode")
    return f"{who(l)} exiting" + (f" with code {code}" if code is not None else "")


def _python_exception(l: Link, r: str) -> str:
    exc = l.attr("exc_type") or "an exception"
    msg = (l.attr("exc_msg") or "").strip().splitlines()[0:1]
    m = f": {msg[0][:90]}" if msg else ""
    return f"{who(l)} raising {exc}{m}{' (it lost its peer)' if r == PEER_ERROR else ''}"


def _collective_mismatch(l: Link, r: str) -> str:
    ops = l.attr("ops")
    if isinstance(ops, str) and l.attr("seq") is not None:     # (read from the Flight Recorder's dumps)
        return f"the ranks calling different collectives as collective {l.attr('seq')} ({ops})"
    return f"{who(l)} reporting mismatched collectives"


def _collective_timeout(l: Link, r: str) -> str:
    ms = l.attr("wait_ms") or l.attr("timeout_ms")
    return f"{who(l)} timing out in a collective" + (f" after waiting {ms / 1000:g} s" if ms else "")


def _gpu_xid(l: Link, r: str) -> str:
    gpu = l.attr("pci") or l.entity
    gpu = f"GPU {gpu}" if gpu else "a GPU"
    if "fallen off the bus" in (l.summary or ""):
        return f"{gpu} falling off the bus{_on(l)}"
    xid = l.attr("xid")
    return f"{gpu} reporting {'Xid ' + str(xid) if xid is not None else 'an Xid error'}{_on(l)}"


def _link_down(l: Link, r: str) -> str:
    iface = l.attr("iface")
    return f"network link {iface + ' ' if iface else ''}going down{_on(l)}"


_K = FindingKind
KINDS: tuple[FindingKind, ...] = (
    _K("cpu_throttle", "the CFS bandwidth limit of a cgroup throttled its processes",
       lambda l, r: f"CPU throttling of {_cg(l)}{_on(l)}{_inside(l)}", condition=True),
    _K("cpu_pressure", "tasks waited for a CPU (PSI)", lambda l, r: f"CPU pressure{_on(l)}", condition=True),
    _K("memory_pressure", "tasks stalled on memory (PSI)", lambda l, r: f"memory pressure{_on(l)}", condition=True),
    _K("memory_growth", "memory of a cgroup or process grew toward its limit", _memory_growth, condition=True),
    _K("oom_kill", "the kernel's OOM killer killed a process", _oom_kill),
    _K("process_exit", "a process exited with an error code", _process_exit),
    _K("signal_kill", "a process died from a signal", _signal_kill),
    _K("segfault", "a process crashed (segmentation fault or bus error)",
       lambda l, r: f"{who(l)} crashing (segmentation fault)"),
    _K("gpu_xid", "the GPU driver reported an Xid error", _gpu_xid),
    _K("hung_task", "a task blocked in the kernel past the hung-task timeout",
       lambda l, r: f"{who(l)} blocked in the kernel (hung task)"),
    _K("rt_throttling", "the kernel throttled real-time tasks",
       lambda l, r: f"the kernel throttling real-time tasks{_on(l)}"),
    _K("soft_lockup", "a CPU was stuck in the kernel (soft lockup)",
       lambda l, r: f"a soft lockup{_of_cpu(l)}{_on(l)}"),
    _K("pcie_error", "a PCIe bus error (AER)", lambda l, r: f"a PCIe bus error{_on(l)}"),
    _K("nccl_warn", "NCCL printed a warning", lambda l, r: f"an NCCL warning{_in(l)}{_on(l)}"),
    _K("nccl_init_failure", "NCCL could not set up a communicator",
       lambda l, r: f"NCCL failing to set up its communicator{_in(l)}{_on(l)}"),
    _K("collective_timeout", "a collective timed out (watchdog, blocking wait, gloo)", _collective_timeout),
    _K("collective_mismatch", "ranks called different collectives", _collective_mismatch),
    _K("rank_stalled", "a rank stopped making progress", _rank_stalled),
    _K("step_slowdown", "a rank's training steps slowed down", _step_slowdown, condition=True),
    _K("straggler", "a rank fell behind its peers",
       lambda l, r: f"{who(l)}{_on(l)} falling behind its peers (a straggler)", condition=True),
    _K("dataloader_stall", "a DataLoader stopped delivering batches",
       lambda l, r: f"the DataLoader of {who(l)} no longer delivering batches", condition=True),
    _K("python_exception", "a Python exception ended a process", _python_exception),
    _K("job_failure", "the launcher reported the job failed", lambda l, r: "the job failing"),
    _K("hang_dump", "a process's own hang watchdog (faulthandler.dump_traceback_later) found it without "
                    "progress and dumped its threads",
       lambda l, r: f"{who(l)} finding itself stuck"
                    + (f" for {l.attr('after_s')} s" if l.attr("after_s") is not None else "")
                    + " (its faulthandler watchdog"
                    + (f"; main thread in {l.attr('main_frame')})" if l.attr("main_frame") else ")")),
    _K("job_hang", "the collector's hang watchdog found the job silent (no output for a while)",
       lambda l, r: "the job hanging (no output)", origin=False),
    _K("clock_skew", "two clocks disagreed beyond their stated uncertainty",
       lambda l, r: f"the clocks{_on(l)} disagreeing beyond their stated uncertainty", origin=False),
    _K("clock_step", "a host's wall clock stepped against its boot clock",
       lambda l, r: f"the wall clock{_on(l)} stepping", origin=False),
    _K("hard_lockup", "a CPU stopped taking interrupts (hard lockup)",
       lambda l, r: f"a hard lockup{_of_cpu(l)}{_on(l)}"),
    _K("rcu_stall", "the kernel's RCU grace period stalled", lambda l, r: f"an RCU stall{_on(l)}"),
    _K("kernel_panic", "the kernel panicked", lambda l, r: f"a kernel panic{_on(l)}"),
    _K("kernel_oops", "the kernel oopsed", lambda l, r: f"a kernel oops{_in(l)}{_on(l)}"),
    _K("kernel_warning", "a WARN_ON in the kernel: a driver or subsystem hit a bad state",
       lambda l, r: f"a kernel warning{_in(l)}{_on(l)}"),
    _K("hardware_error", "the machine reported a hardware error (MCE, EDAC)",
       lambda l, r: f"a hardware error{_on(l)}"),
    _K("thermal_throttle", "a CPU or GPU was throttled for its temperature",
       lambda l, r: f"thermal throttling{_of_cpu(l)}{_on(l)}", condition=True),
    _K("link_down", "a network link went down", _link_down),
    _K("cgroup_frozen", "a freezer cgroup holding job processes was frozen",
       lambda l, r: f"the freezer cgroup{' ' + l.entity if l.entity else ''} being frozen{_inside(l)}",
       condition=True),
    _K("disk_full", "a write failed for lack of space (ENOSPC)", lambda l, r: f"{who(l)} failing to write (disk full)"),
    _K("shm_exhausted", "shared memory (/dev/shm) was too small: a bus error",
       lambda l, r: f"{who(l)} running out of shared memory (/dev/shm)"),
    _K("dataloader_worker_killed", "a DataLoader worker died", _worker_killed),
    _K("cpu_contention", "processes outside the job took the CPUs a rank needed",
       lambda l, r: f"{l.attr('hog') or 'another process'} taking the CPU {who(l)} needed", condition=True),
    _K("rendezvous_failure", "ranks or nodes could not connect to form the job", _rendezvous),
)
for _kind in KINDS:
    declare(_kind)

# The modules of the analysis that make findings of their own (beyond the parsers' and the
# detectors'), each with its ``EMITS``.
PRODUCER_MODULES = ("clocks", "contention", "findings", "flight_recorder", "progress", "stacks")


def producers() -> dict[str, frozenset[str]]:
    """Every producer of findings and the kinds it makes, by name: the parsers (``parser
    app_log``), the detectors (``detector cpu_throttle``) and :data:`PRODUCER_MODULES`
    (``analysis findings``)."""
    from aftertrace.ingest.registry import default_registry

    from .detectors import DETECTORS

    def values(emits) -> frozenset[str]:
        return frozenset(getattr(k, "value", k) for k in emits)

    out = {f"parser {p.name}": values(p.emits) for p in default_registry().parsers}
    out.update((f"detector {m.__name__.rsplit('.', 1)[-1]}", values(m.EMITS)) for m in DETECTORS)
    out.update((f"analysis {m}", values(importlib.import_module(f"{__package__}.{m}").EMITS))
               for m in PRODUCER_MODULES)
    return out
