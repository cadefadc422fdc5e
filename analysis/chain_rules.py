"""How failures propagate: the typed knowledge the diagnosis uses.

Each :class:`Rule` says that a finding of kind (or role) ``cause`` can lead to one of kind
``effect``, between findings of the same ``scope``:

* ``PROCESS`` — the same process (the same pid, or the same rank: an OOM kill of pid 17988 and
  torchrun's SIGKILL report of rank 0, pid 17988);
* ``RANK`` — one rank and what it started: a DataLoader worker's segfault (the worker's pid) and
  the rank's report of a dead worker (the rank's pid);
* ``HOST`` — the same host, and for a cgroup finding a process *inside* that cgroup
  (:mod:`analysis.attribution`): a throttled cgroup slows the ranks in it, not the others;
* ``JOB`` — any two ranks (or the launcher) of the job: a rank that stopped and the peer that
  timed out waiting for it;
* ``MEMCG`` — memory growing in a cgroup and an OOM kill whose memory limit is that cgroup's or
  one above it (``oom_memcg`` in the kernel's report): another tenant's growth under a shared
  limit can get a rank killed.

``prior`` is how often the propagation happens when both are present (a judgement written down
here, 0..1); ``window_s`` how much earlier a point-in-time cause may be; ``why`` the plain-words
reason shown in the report. A *condition* (throttling, pressure, growth, slow steps, contention:
the kinds :mod:`.kinds` declares ``condition``) has a start and an end (``until_ns``): it can cause an effect that starts
while it lasts or at most ``lag_s`` after it ended, never one that began before it. ``min_lead_s``
is for build-ups that take time.

Roles (declared in :mod:`.kinds`) refine a kind where the data tells more: a Python exception
that names a peer (``Connection closed by peer``) is a *peer error*; a signal the launcher sent
while tearing the job down is a *stop*, never a cause of the failure.
"""
from __future__ import annotations

from . import kinds
from .kinds import KILLED, NOT_ORIGINS, PEER_ERROR, SELF_ERROR, STOPPED, Rule, Scope
from .lineage import is_launcher_stop
from .links import Link, LinkKind as K
from .progress import waits_for_peer


def role(l: Link) -> str:
    if l.kind == K.PYTHON_EXCEPTION:
        return PEER_ERROR if waits_for_peer(l) else SELF_ERROR
    if l.kind == K.SIGNAL_KILL:
        return STOPPED if is_launcher_stop(l) else KILLED
    return l.kind.value


P, H, J, M, R = Scope.PROCESS, Scope.HOST, Scope.JOB, Scope.MEMCG, Scope.RANK
_R = Rule

RULES: tuple[Rule, ...] = (
    # Host resources -> the training processes in them.
    _R("cpu_throttle", "step_slowdown", H, 0.9, 900, "CPU throttling of the job's cgroup slows every training step",
       lag_s=5),
    _R("cpu_throttle", "straggler", H, 0.8, 900, "a throttled rank falls behind its peers", lag_s=5),
    _R("cpu_throttle", "cpu_pressure", H, 0.7, 120,
       "throttled tasks wait for CPU time, which is what CPU pressure measures", lag_s=5),
    _R("cpu_throttle", "memory_growth", H, 0.5, 900,
       "throttled consumers fall behind and buffers fill (memory grows while the job is throttled)",
       min_lead_s=5.0, lag_s=5),
    _R("cpu_throttle", "rank_stalled", H, 0.5, 900, "a throttled rank can stop making progress", lag_s=5),
    _R("cpu_throttle", "hung_task", H, 0.3, 900, "throttled tasks blocked long enough trigger the hung-task watchdog",
       lag_s=5),
    _R("cpu_pressure", "step_slowdown", H, 0.5, 900, "tasks waiting for CPU slow the training steps", lag_s=5),
    _R("memory_pressure", "step_slowdown", H, 0.4, 900, "reclaim stalls slow the training steps", lag_s=5),
    _R("thermal_throttle", "step_slowdown", H, 0.7, 900, "a thermally throttled CPU or GPU runs the steps slower"),
    _R("cpu_contention", "rank_stalled", P, 0.95, 900, "the CPU it is bound to was taken by another process", lag_s=5,
       cause_attr="starved"),
    _R("cpu_contention", "step_slowdown", P, 0.9, 900, "the CPU it is bound to was shared with another process",
       lag_s=5),
    _R("cpu_contention", "straggler", P, 0.9, 900, "the CPU it is bound to was shared with another process", lag_s=5),
    _R("cpu_contention", "rcu_stall", H, 0.6, 900, "a CPU monopolised by a real-time task stalls RCU", lag_s=5),
    _R("cpu_contention", "rt_throttling", H, 0.7, 900, "a real-time task used up its CPU budget", lag_s=5),
    _R("cpu_contention", "soft_lockup", H, 0.4, 900, "a CPU monopolised by one task locks up the others", lag_s=5),
    _R("memory_growth", "oom_kill", M, 0.9, 900, "memory growing to the cgroup limit ends in an OOM kill"),
    _R("memory_growth", "memory_pressure", H, 0.6, 900, "memory near the limit makes the kernel reclaim"),
    _R("memory_growth", "memory_growth", M, 0.9, 900, "the growth of this cgroup is most of its parent's growth"),
    _R("memory_growth", KILLED, H, 0.5, 900, "memory at the limit: the kernel's OOM killer sends SIGKILL",
       cause_attr="near_limit"),
    _R("memory_growth", SELF_ERROR, H, 0.4, 900, "an out-of-memory error in the training process",
       cause_attr="near_limit"),
    _R("memory_growth", "process_exit", H, 0.3, 900, "an allocation failure near the limit ends the process",
       cause_attr="near_limit"),
    _R("memory_growth", "rank_stalled", H, 0.5, 900,
       "memory at the cgroup limit with nothing killed: the rank's allocations wait in reclaim",
       cause_attr="near_limit"),
    _R("memory_growth", "step_slowdown", H, 0.4, 900,
       "allocating and faulting in the growing memory (and reclaim near the limit) slows the steps"),
    _R("memory_pressure", "oom_kill", H, 0.6, 900, "reclaim that cannot keep up ends in an OOM kill"),
    _R("step_slowdown", "memory_growth", H, 0.5, 900, "slow steps let queued batches and buffers pile up",
       min_lead_s=5.0),
    _R("step_slowdown", "oom_kill", H, 0.4, 900,
       "slow steps let queued batches and buffers pile up until the OOM killer steps in (memory not observed)",
       min_lead_s=5.0),
    _R("step_slowdown", "straggler", P, 0.6, 900, "a rank whose steps slowed falls behind its peers"),
    _R("step_slowdown", "collective_timeout", J, 0.4, 1800, "peers wait for the slow rank in collectives"),
    _R("straggler", "collective_timeout", J, 0.6, 1800, "peers wait for the straggler in collectives"),
    _R("dataloader_stall", "step_slowdown", P, 0.7, 900, "the rank waited for input batches"),
    _R("dataloader_stall", "rank_stalled", P, 0.6, 900, "the rank waited for input batches"),
    _R("dataloader_stall", SELF_ERROR, P, 0.9, 900, "the DataLoader's own timeout raised in the rank"),
    # The process dies.
    _R("oom_kill", KILLED, P, 0.95, 120, "the OOM killer's SIGKILL is what the launcher saw"),
    _R("oom_kill", "process_exit", P, 0.9, 120, "the OOM-killed process exited"),
    _R("oom_kill", "rank_stalled", P, 0.8, 120, "the OOM-killed rank stopped"),
    _R("oom_kill", "dataloader_worker_killed", H, 0.7, 120, "the OOM killer chose a DataLoader worker"),
    _R("oom_kill", "job_failure", J, 0.8, 300, "a rank's OOM kill fails the job"),
    _R("oom_kill", "collective_timeout", J, 0.7, 1800, "the peers of the killed rank wait in a collective"),
    _R("oom_kill", PEER_ERROR, J, 0.7, 300, "the peers lose their connection to the killed rank"),
    _R("segfault", KILLED, P, 0.95, 120, "the crash is the signal the launcher reported"),
    _R("segfault", "process_exit", P, 0.9, 120, "the crashed process exited"),
    _R("segfault", PEER_ERROR, J, 0.7, 300, "the peers lose their connection to the crashed rank"),
    _R("segfault", "collective_timeout", J, 0.6, 1800, "the peers of the crashed rank wait in a collective"),
    _R("segfault", "job_failure", J, 0.8, 300, "a crashed rank fails the job"),
    _R("kernel_oops", "segfault", H, 0.6, 120, "a kernel oops kills the process that hit it"),
    _R("kernel_oops", "rank_stalled", H, 0.6, 900, "a kernel oops can leave the process stuck"),
    _R("kernel_panic", "job_failure", H, 0.8, 600, "the node panicked"),
    _R("kernel_panic", "rank_stalled", H, 0.8, 600, "ranks on a panicked node stop"),
    _R(SELF_ERROR, "process_exit", P, 0.9, 120, "the uncaught exception ended the process"),
    _R(SELF_ERROR, KILLED, P, 0.6, 120, "the error led to an abort of the process"),
    _R(SELF_ERROR, PEER_ERROR, J, 0.8, 300, "the failed rank's peers lost their connection to it"),
    _R(SELF_ERROR, "collective_timeout", J, 0.6, 1800, "the peers of the failed rank wait in a collective"),
    _R(SELF_ERROR, "job_failure", J, 0.8, 300, "an uncaught exception in a rank fails the job"),
    _R(KILLED, PEER_ERROR, J, 0.8, 300, "the peers lost their connection to the killed rank"),
    _R(KILLED, "collective_timeout", J, 0.6, 1800, "the peers of the killed rank wait in a collective"),
    _R(KILLED, "job_failure", J, 0.9, 300, "the launcher saw a rank die from a signal and ended the job"),
    _R(KILLED, "process_exit", P, 0.8, 120, "the killed process exited"),
    _R(KILLED, "rank_stalled", H, 0.9, 60, "the node's launcher and its ranks were killed together",
       needs="launcher_killed"),
    _R("process_exit", PEER_ERROR, J, 0.6, 300, "the peers lost their connection to the exited rank"),
    _R("process_exit", "collective_timeout", J, 0.4, 1800, "the peers of the exited rank wait in a collective"),
    _R("process_exit", "job_failure", J, 0.9, 300, "the launcher saw a rank exit with an error and ended the job"),
    _R("disk_full", SELF_ERROR, P, 0.9, 120, "the failed write surfaced as an exception"),
    _R("disk_full", "process_exit", P, 0.9, 120, "the failed write ended the process"),
    _R("disk_full", PEER_ERROR, J, 0.7, 300, "the peers lost their connection to the failed rank"),
    _R("disk_full", "collective_timeout", J, 0.6, 1800, "the peers of the failed rank wait in a collective"),
    _R("disk_full", "job_failure", J, 0.8, 300, "a rank that could not write its checkpoint failed the job"),
    _R("shm_exhausted", "dataloader_worker_killed", P, 0.9, 120, "the DataLoader worker could not get shared memory"),
    _R("segfault", "dataloader_worker_killed", R, 0.95, 120, "the DataLoader worker that crashed is the one the rank reports dead"),
    _R("shm_exhausted", SELF_ERROR, P, 0.9, 120, "the shared-memory failure surfaced as an exception"),
    _R("shm_exhausted", "process_exit", P, 0.9, 120, "the shared-memory failure ended the process"),
    _R("shm_exhausted", PEER_ERROR, J, 0.7, 300, "the peers lost their connection to the failed rank"),
    _R("shm_exhausted", "collective_timeout", J, 0.6, 1800, "the peers of the failed rank wait in a collective"),
    _R("shm_exhausted", "job_failure", J, 0.8, 300, "a rank whose input pipeline failed failed the job"),
    _R("dataloader_worker_killed", SELF_ERROR, P, 0.9, 120, "the dead worker surfaced as an exception in the rank"),
    _R("dataloader_worker_killed", "process_exit", P, 0.9, 120, "the dead worker ended the rank"),
    _R("dataloader_worker_killed", PEER_ERROR, J, 0.7, 300, "the peers lost their connection to the failed rank"),
    _R("dataloader_worker_killed", "job_failure", J, 0.8, 300, "a rank whose input pipeline failed failed the job"),
    _R("rendezvous_failure", "rendezvous_failure", J, 0.7, 900, "the other nodes waited for the one that never joined"),
    _R("rendezvous_failure", "process_exit", P, 0.9, 300, "the launcher could not form the job and exited"),
    _R("rendezvous_failure", "job_failure", J, 0.9, 900, "the job could not start"),
    # A rank stops; its peers wait; the launcher stops it.
    _R("rank_stalled", "collective_timeout", J, 0.9, 3600, "its peers waited for it in a collective until they timed out"),
    _R("rank_stalled", PEER_ERROR, J, 0.6, 3600, "its peers gave up on it"),
    _R("rank_stalled", "nccl_warn", J, 0.5, 3600, "NCCL on its peers complained while waiting"),
    _R("rank_stalled", "job_failure", J, 0.6, 3600, "the job ended while the rank was stuck"),
    _R("rank_stalled", "job_hang", J, 0.9, 3600, "the job waited for the stuck rank (its peers in a collective)"),
    _R("rank_stalled", "hang_dump", J, 0.8, 3600, "the ranks' own hang watchdogs fired while the job waited for it"),
    _R("hang_dump", "process_exit", P, 0.9, 120, "the hang watchdog ended the process (faulthandler, exit=True)"),
    _R("hang_dump", "job_failure", J, 0.7, 600, "a rank's hang watchdog ended it and with it the job"),
    _R("hang_dump", "collective_timeout", J, 0.6, 3600, "its peers waited for the stuck rank in a collective"),
    _R("dataloader_stall", "job_hang", J, 0.7, 3600, "the rank without input batches held the job up"),
    _R("rank_stalled", STOPPED, P, 0.9, 3600, "the stuck rank was stopped by the launcher"),
    _R("rank_stalled", KILLED, P, 0.6, 3600, "the stuck rank was killed"),
    _R("hung_task", "rank_stalled", P, 0.95, 900, "its main thread was blocked in the kernel"),
    _R("hung_task", "rank_stalled", H, 0.4, 900, "a task blocked in the kernel stops the rank"),
    _R("cgroup_frozen", "rank_stalled", H, 0.95, 900, "the freezer cgroup holding the rank was frozen", lag_s=5),
    _R("soft_lockup", "rank_stalled", H, 0.6, 900, "a CPU stuck in the kernel stops the rank"),
    _R("hard_lockup", "rank_stalled", H, 0.7, 900, "a locked-up CPU stops the rank"),
    _R("rcu_stall", "rank_stalled", H, 0.4, 900, "an RCU stall stops tasks on the host"),
    _R("rt_throttling", "rank_stalled", H, 0.4, 900, "real-time throttling starves the rank"),
    _R("collective_timeout", "process_exit", P, 0.9, 300, "the timed-out rank exited with the error"),
    _R("collective_timeout", KILLED, P, 0.8, 300, "the watchdog aborted the timed-out rank"),
    _R("collective_timeout", "job_failure", J, 0.9, 300, "the timeout failed the job"),
    _R(PEER_ERROR, "process_exit", P, 0.8, 120, "the rank exited after losing its peer"),
    _R(PEER_ERROR, "job_failure", J, 0.5, 300, "the rank that lost its peer failed the job"),
    _R("collective_mismatch", "collective_mismatch", J, 0.8, 120, "its peers detected the same mismatch"),
    _R("collective_mismatch", "process_exit", P, 0.9, 120, "the mismatch error ended the process"),
    _R("collective_mismatch", PEER_ERROR, J, 0.6, 300, "the peers lost their connection to the failed rank"),
    _R("collective_mismatch", "job_failure", J, 0.9, 300, "the mismatch failed the job"),
    _R("collective_mismatch", "collective_timeout", J, 0.8, 3600,
       "collectives that do not match never complete: the ranks waited in them until they timed out"),
    _R("job_failure", STOPPED, J, 0.9, 300, "the launcher stopped the remaining ranks"),
    # GPU, PCIe, network.
    _R("pcie_error", "gpu_xid", H, 0.8, 600, "a PCIe error makes the GPU fall off or fault"),
    _R("hardware_error", "gpu_xid", H, 0.7, 600, "a machine-check error hits the GPU"),
    _R("thermal_throttle", "gpu_xid", H, 0.3, 600, "an overheating GPU faults"),
    _R("gpu_xid", SELF_ERROR, H, 0.8, 600, "the GPU fault surfaces as a CUDA error in the rank"),
    _R("gpu_xid", "nccl_warn", H, 0.8, 600, "NCCL reports the failed GPU"),
    _R("gpu_xid", "collective_timeout", J, 0.7, 1800, "collectives with the failed GPU never finish"),
    _R("gpu_xid", "rank_stalled", H, 0.7, 600, "the rank on the failed GPU stops"),
    _R("gpu_xid", "job_failure", H, 0.6, 1800, "a GPU fault fails the job"),
    _R("link_down", "nccl_warn", H, 0.8, 600, "NCCL reports the lost network link"),
    _R("link_down", "collective_timeout", J, 0.6, 1800, "collectives over the lost link never finish"),
    _R("nccl_warn", "collective_timeout", J, 0.6, 1800, "the NCCL error leaves a collective unfinished"),
    _R("nccl_warn", SELF_ERROR, J, 0.6, 300, "the NCCL error surfaces as an exception"),
    _R("nccl_warn", "job_failure", J, 0.5, 600, "the NCCL error fails the job"),
    _R("nccl_init_failure", SELF_ERROR, P, 0.8, 300, "the communicator could not be created"),
    _R("nccl_init_failure", "job_failure", J, 0.8, 600, "the communicator could not be created"),
)

_BY_EFFECT: dict = {}


def rules() -> tuple[Rule, ...]:
    """Every rule: :data:`RULES`, then those the declared kinds bring (:attr:`.kinds.FindingKind.rules`)."""
    return RULES + tuple(r for k in kinds.catalogue() for r in k.rules)


def by_effect() -> dict[str, list[Rule]]:
    """:func:`rules` by their effect (kept while the catalogue does not grow)."""
    n = len(kinds.catalogue())
    if _BY_EFFECT.get("n") != n:
        got: dict[str, list[Rule]] = {}
        for r in rules():
            got.setdefault(r.effect, []).append(r)
        _BY_EFFECT.update(n=n, rules=got)
    return _BY_EFFECT["rules"]


def never_origin() -> frozenset[str]:
    """What can never be an origin: a launcher's stop, the failure report itself (unless nothing
    else is there), clock findings."""
    kinds.gather()
    return frozenset({STOPPED}) | NOT_ORIGINS
