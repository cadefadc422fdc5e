"""How failures propagate: the typed knowledge the chain search uses.

Each :class:`Rule` says that an anomaly of kind ``cause`` can lead to one of kind ``effect``
within ``window_s`` seconds, between findings of the same ``scope``:

* ``PROCESS`` — the same rank or pid (an OOM kill of pid 17988 and torchrun's SIGKILL report of it);
* ``HOST`` — the same host (throttling of a host's cgroup and a rank on that host slowing down);
* ``JOB`` — any two ranks or hosts of the job (a rank that stopped and the peer that timed out
  waiting for it).

``min_lead_s`` is for build-ups that take time (slow steps piling up buffers): a cause
that leads by less cannot have built it up. ``prior`` is how often the propagation happens when both are present (a judgement written
down here, 0..1); ``why`` is the plain-words reason shown in the report. ``ORIGIN`` says how
plausible each kind is as the *first* cause — high for things that happen to a job from outside
(throttling, a GPU Xid, a signal from outside), low for symptoms that are usually caused by
something else (a peer's collective timeout).

Roles refine a kind where the data tells more: a Python exception that names a peer
(``Connection closed by peer``) is a *peer error* (the peer failed first); a SIGTERM that the
launcher sent after another rank failed is a *stop*, never a cause.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .links import Link, LinkKind as K
from .progress import STOP_SIGNALS, waits_for_peer


class Scope(str, Enum):
    PROCESS = "process"
    HOST = "host"
    JOB = "job"


@dataclass(frozen=True)
class Rule:
    cause: str          # a LinkKind value or a role (see ``role``)
    effect: str
    scope: Scope
    prior: float
    window_s: float
    why: str
    min_lead_s: float = 0.0   # the cause must lead by this much (a build-up takes time)


# Roles beyond the kind: see role().
PEER_ERROR = "peer_error"        # python_exception naming a lost/closed/reset peer
SELF_ERROR = "self_error"        # any other python_exception
KILLED = "killed"                # signal_kill by SIGKILL/SIGSEGV/SIGABRT/... (not a launcher's stop)
STOPPED = "stopped"              # signal_kill by SIGTERM/SIGINT after the root-cause failure


def role(l: Link) -> str:
    if l.kind == K.PYTHON_EXCEPTION:
        return PEER_ERROR if waits_for_peer(l) else SELF_ERROR
    if l.kind == K.SIGNAL_KILL:
        return STOPPED if (l.attr("signal") or "") in STOP_SIGNALS else KILLED
    return l.kind.value


P, H, J = Scope.PROCESS, Scope.HOST, Scope.JOB
_R = Rule

RULES: tuple[Rule, ...] = (
    # Host resources -> the training process.
    _R("cpu_throttle", "step_slowdown", H, 0.9, 900, "CPU throttling of the job's cgroup slows every training step"),
    _R("cpu_pressure", "step_slowdown", H, 0.7, 900, "tasks waiting for CPU slow the training steps"),
    _R("thermal_throttle", "step_slowdown", H, 0.7, 900, "a thermally throttled CPU or GPU runs the steps slower"),
    _R("memory_pressure", "step_slowdown", H, 0.5, 900, "reclaim stalls slow the training steps"),
    _R("cpu_throttle", "cpu_pressure", H, 0.7, 120, "throttled tasks wait for CPU time, which is what CPU pressure measures"),
    _R("cpu_throttle", "memory_growth", H, 0.5, 900,
       "throttled consumers fall behind and buffers fill (memory grows while the job is throttled)"),
    _R("step_slowdown", "memory_growth", H, 0.5, 900, "slow steps let queued batches and buffers pile up",
       min_lead_s=5.0),
    _R("memory_growth", "step_slowdown", H, 0.5, 900,
       "allocating and faulting in the growing memory (and reclaim near the limit) slows the steps"),
    _R("cpu_pressure", "memory_growth", H, 0.3, 900, "starved consumers let buffers pile up"),
    _R("cpu_throttle", "rank_stalled", H, 0.5, 900, "a throttled rank can stop making progress"),
    _R("cpu_throttle", "hung_task", H, 0.5, 900, "throttled tasks blocked long enough trigger the hung-task watchdog"),
    _R("cpu_throttle", "straggler", H, 0.8, 900, "a throttled rank falls behind its peers"),
    _R("step_slowdown", "straggler", P, 0.6, 900, "a rank whose steps slowed falls behind its peers"),
    _R("straggler", "collective_timeout", J, 0.6, 1800, "peers wait for the straggler in collectives"),
    _R("step_slowdown", "collective_timeout", J, 0.4, 1800, "peers wait for the slow rank in collectives"),
    _R("step_slowdown", "oom_kill", H, 0.4, 900,
       "slow steps let queued batches and buffers pile up until the OOM killer steps in (memory not observed)",
       min_lead_s=5.0),
    _R("memory_growth", "memory_pressure", H, 0.6, 900, "memory near the limit makes the kernel reclaim"),
    _R("memory_growth", "oom_kill", H, 0.9, 900, "memory growing to the cgroup limit ends in an OOM kill"),
    _R("memory_pressure", "oom_kill", H, 0.7, 900, "reclaim that cannot keep up ends in an OOM kill"),
    _R("memory_growth", KILLED, H, 0.5, 900, "memory at the limit: the kernel's OOM killer sends SIGKILL"),
    _R("memory_growth", "process_exit", H, 0.3, 900, "an allocation failure near the limit ends the process"),
    _R("memory_growth", SELF_ERROR, H, 0.4, 900, "an out-of-memory error in the training process"),
    # The process dies.
    _R("oom_kill", KILLED, P, 0.95, 120, "the OOM killer's SIGKILL is what the launcher saw"),
    _R("oom_kill", "process_exit", P, 0.9, 120, "the OOM-killed process exited"),
    _R("oom_kill", "rank_stalled", P, 0.8, 120, "the OOM-killed rank stopped"),
    _R("oom_kill", "job_failure", H, 0.8, 300, "a rank's OOM kill fails the job"),
    _R("oom_kill", "collective_timeout", J, 0.7, 1800, "the peers of the killed rank wait in a collective"),
    _R("oom_kill", PEER_ERROR, J, 0.7, 300, "the peers lose their connection to the killed rank"),
    _R("segfault", KILLED, P, 0.95, 120, "the crash is the signal the launcher reported"),
    _R("segfault", "process_exit", P, 0.9, 120, "the crashed process exited"),
    _R("segfault", PEER_ERROR, J, 0.7, 300, "the peers lose their connection to the crashed rank"),
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
    _R("process_exit", PEER_ERROR, J, 0.6, 300, "the peers lost their connection to the exited rank"),
    _R("process_exit", "job_failure", J, 0.9, 300, "the launcher saw a rank exit with an error and ended the job"),
    # A rank stops; its peers wait.
    _R("rank_stalled", "collective_timeout", J, 0.9, 3600, "its peers waited for it in a collective until they timed out"),
    _R("rank_stalled", PEER_ERROR, J, 0.6, 3600, "its peers gave up on it"),
    _R("rank_stalled", "nccl_warn", J, 0.5, 3600, "NCCL on its peers complained while waiting"),
    _R("rank_stalled", "job_failure", J, 0.6, 3600, "the job ended while the rank was stuck"),
    _R("hung_task", "rank_stalled", H, 0.7, 900, "a task blocked in the kernel stops the rank"),
    _R("soft_lockup", "rank_stalled", H, 0.6, 900, "a CPU stuck in the kernel stops the rank"),
    _R("hard_lockup", "rank_stalled", H, 0.7, 900, "a locked-up CPU stops the rank"),
    _R("rcu_stall", "rank_stalled", H, 0.5, 900, "an RCU stall stops tasks on the host"),
    _R("rt_throttling", "rank_stalled", H, 0.4, 900, "real-time throttling starves the rank"),
    _R("dataloader_stall", "step_slowdown", P, 0.7, 900, "the rank waited for input batches"),
    _R("dataloader_stall", "rank_stalled", P, 0.6, 900, "the rank waited for input batches"),
    _R("collective_timeout", "process_exit", P, 0.9, 300, "the timed-out rank exited with the error"),
    _R("collective_timeout", KILLED, P, 0.8, 300, "the watchdog aborted the timed-out rank"),
    _R("collective_timeout", "job_failure", J, 0.9, 300, "the timeout failed the job"),
    _R(PEER_ERROR, "process_exit", P, 0.8, 120, "the rank exited after losing its peer"),
    _R(PEER_ERROR, "job_failure", J, 0.5, 300, "the rank that lost its peer failed the job"),
    _R("collective_mismatch", "process_exit", P, 0.9, 120, "the mismatch error ended the process"),
    _R("collective_mismatch", "job_failure", J, 0.9, 300, "the mismatch failed the job"),
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

# How plausible each kind (or role) is as the first cause of a chain.
ORIGIN: dict[str, float] = {
    "cpu_throttle": 0.9, "cpu_pressure": 0.6, "memory_pressure": 0.5, "memory_growth": 0.7, "oom_kill": 0.5,
    KILLED: 0.7, STOPPED: 0.0, "process_exit": 0.3, "segfault": 0.85, "gpu_xid": 0.95, "hung_task": 0.6,
    "rt_throttling": 0.6, "soft_lockup": 0.6, "hard_lockup": 0.7, "rcu_stall": 0.5, "pcie_error": 0.95,
    "hardware_error": 0.95, "thermal_throttle": 0.8, "link_down": 0.9, "kernel_panic": 0.9,
    "kernel_oops": 0.8, "nccl_warn": 0.5, "nccl_init_failure": 0.8, "collective_timeout": 0.15,
    "collective_mismatch": 0.8, "rank_stalled": 0.75, "step_slowdown": 0.6, "straggler": 0.5,
    "dataloader_stall": 0.7, SELF_ERROR: 0.85, PEER_ERROR: 0.1, "job_failure": 0.0, "clock_skew": 0.0,
}

BY_EFFECT: dict[str, list[Rule]] = {}
for _rule in RULES:
    BY_EFFECT.setdefault(_rule.effect, []).append(_rule)
