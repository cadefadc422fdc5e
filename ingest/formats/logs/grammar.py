"""The log engine's grammar (:mod:`.engine`): what it reads in a line, as data.

1. The wrappers launchers put before a process's lines (``WRAP``; read by
   :func:`ingest.native.wraps` on ASCII text, by the regex on other text).
2. The line families (``FAMILIES``: a line is in the first family whose test matches; its header
   fields by an anchored prefix regex; read by :func:`ingest.native.log_heads` on ASCII text).
3. The messages (``MESSAGES``: name, kind, a literal that must occur, the regex of its fields),
   the step lines' numbers (``STEP``, ``LOSS``, ``STEP_TIME``) and the rank a message states.
4. The blocks (tracebacks, faulthandler dumps, ChildFailedError summaries) that
   :mod:`.blocks` groups.

The NCCL line grammar is :mod:`.nccl_grammar`.
"""
from __future__ import annotations

import re
import signal as _signal
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# 1. wrapper prefixes
WRAP_START = r"^(?:> |\(\w[\w.]* pid=\d|\[default\d|\d{1,6}: |\[\d+,\d+\]<|\[rank\d+\]: )"
WRAP = (r"^(?:> )*(?:\((?P<ray_actor>\w[\w.]*) pid=(?P<ray_pid>\d+)(?:, ip=[\d.]+)?\) )?"
        r"(?:\[(?P<mpi_job>\d+),(?P<mpi_rank>\d+)\]<std(?:out|err)>:)?"
        r"(?:\[default(?P<tee>\d+)\]:)?(?:(?P<srun>\d{1,6}): )?(?:\[rank(?P<wrank>\d+)\]: )?")
RAY_REPEAT = r" \[repeated (\d+)x across cluster\]$"
TEE = r"^\[default(\d+)\]:"                    # (WRAP's tee group alone)
TEE_MORE = r"^(?:\d{1,6}: |\[rank\d+\]: )"    # (what WRAP may take after a tee prefix)

# ---------------------------------------------------------------------------------------------
# 2. line families
class Family(NamedTuple):
    """A line family: a line belongs to the first family whose ``test`` matches its body, and
    ``extract`` (an anchored prefix regex, see :func:`extract_prefix`) reads its header fields."""
    test: str
    extract: str


_MD = r"(?P<mo_d>\d{3,4})"
FAMILIES: dict[str, Family] = {
    "c10": Family(r"^(?:\[rank\d+\]:)?\[[FEWIV](?:\d{3,4} \d\d:| \w)",
            r"^(?:\[rank(?P<rank>\d+)\]:)?\[(?P<sev>[FEWIV])(?:" + _MD +
            r" (?P<hms>\d\d:\d\d:\d\d)\.(?P<mono>\d{6,9}))? (?P<file>[^\s:\]]+):(?P<fline>\d+)\] ?"),
    "elastic": Family(r"^(?:\[rank\d+\]:)?[DIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ",
                r"^(?:\[rank(?P<rank>\d+)\]:)?(?P<sev>[DIWEC])" + _MD +
                r" (?P<hms>\d\d:\d\d:\d\d)\.(?P<us>\d{6}) (?P<pid>\d+) (?P<file>\S+?):(?P<fline>\d+)\] ?"),
    "usdt": Family(r"^USDT:\d{4}-",
             r"^USDT:(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d) (?P<pid>\d+):(?P<tid>\d+) "
             r"(?P<file>[^\s:\]]+):(?P<fline>\d+)\] ?"),
    "dated": Family(r"^\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d",
              r"^\[?(?P<date>\d{4}-\d\d-\d\d)[ T_](?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?"
              r"(?P<off>Z|[+-]\d\d:?\d\d)?\]?[ :|-]*(?:\[?(?P<sev>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|NOTICE)\]?)?"
              r"[ :|-]*"),
    "syslog": Family(r"^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d \S+ ",
               r"^(?P<mon>\w{3}) (?P<day>[ \d]\d) (?P<hms>\d\d:\d\d:\d\d) (?P<host>\S+) "
               r"(?P<prog>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?: ?"),
    "pylog": Family(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:",
              r"^(?P<sev>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]*):"),
}
SEVERITY = {"F": "crit", "E": "error", "W": "warning", "I": "info", "V": "debug", "D": "debug", "C": "crit",
            "DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning", "ERROR": "error",
            "CRITICAL": "crit", "FATAL": "crit", "NOTICE": "notice",
            "TRACE": "debug", "CALL": "debug", "ABORT": "error"}

# ---------------------------------------------------------------------------------------------
# 3. message grammar: (name, kind, literal prefilter, regex with named groups, integer fields)
_WORK = (r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op_type>\w+)(?:, NumelIn=(?P<numel_in>-?\d+), "
         r"NumelOut=(?P<numel_out>-?\d+))?, Timeout\(ms\)=(?P<timeout_ms>\d+)\)")
# a pod's row in `kubectl get pods`: NAME READY STATUS RESTARTS AGE (RESTARTS may say "3 (2m ago)")
# (after a NAMESPACE column with -A; "pod/" with `kubectl get all`)
_POD_ROW = (r"^\s*(?:[a-z0-9][\w.\-]*\s+)?(?:pod/)?(?P<pod>[a-z0-9][\w.\-]*)\s+(?P<ready>\d+/\d+)\s+"
            r"(?P<pod_status>{})\s+(?P<restarts>\d+)")
# a row of `sacct`: the job or step id first; its State, then its ExitCode "status:signal" as a field
_SACCT_ROW = (r"^\s*(?P<job_id>\d+(?:_(?:\d+|\[[^\]]*\]))?(?:\.[\w+\-]+)?)(?:\s|\|).*?(?:\s|\|)"
              r"(?P<sacct_state>{})(?: by (?:\d+|\+))?\+?(?:\s+|\|)(?P<exit_status>\d+):(?P<exit_signal>\d+)(?:\s|\||$)")

# Open MPI: "mpirun noticed that process rank 14 with PID 4257 on node n1 exited on signal 11 (Segmentation fault)."
_MPI_SIGNAL = (r"(?P<mpi_launcher>mpirun|mpiexec|prterun) noticed that process rank (?P<mpi_rank>\d+)"
               r"(?: with PID \d+)?(?: on node (?P<node>\S+))?\s+exited\s+on signal (?P<signal_no>{}) \((?P<signal>[^)]+)\)")

class Message(NamedTuple):
    """A message the engine recognises in a line's text: lines that contain ``literal`` are
    matched against ``regex`` (named groups: the event's fields, ``ints`` of them integers); the
    first entry that matches names the event ``name`` and types it ``kind`` (None: an event that
    is no finding by itself)."""
    name: str
    kind: str | None
    literal: str
    regex: str
    ints: tuple[str, ...]


MESSAGES: tuple[Message, ...] = (
    Message("watchdog_timeout", "collective_timeout", "Watchdog caught collective operation timeout",
     r"Watchdog caught collective operation timeout: " + _WORK + r" ran for (?P<ran_ms>\d+) milliseconds",
     ("seq", "numel_in", "numel_out", "timeout_ms", "ran_ms")),
    Message("blocking_wait_timeout", "collective_timeout", "timed out in blocking wait",
     r"Work " + _WORK + r" timed out in blocking wait", ("seq", "numel_in", "numel_out", "timeout_ms")),
    Message("watchdog_exception", None, "detected by watchdog at work",
     r"detected by watchdog at work: (?P<seq>-?\d+), last enqueued NCCL work: (?P<last_enqueued>-?\d+), "
     r"last completed NCCL work: (?P<last_completed>-?\d+)", ("seq", "last_enqueued", "last_completed")),
    Message("async_exception", None, "raised the following async exception",
     r"Collective " + _WORK + r" raised the following async exception: (?P<error>.*)$",
     ("seq", "numel_in", "numel_out", "timeout_ms")),
    Message("nccl_ops_failed", None, "Some NCCL operations have failed or timed out",
     r"(?P<what>Some NCCL operations have failed or timed out)", ()),
    Message("heartbeat_timeout", "collective_timeout", "Heartbeat monitor timed out",
     r"Heartbeat monitor timed out!.*?(?:workMetaList_\.size\(\)\s*=\s*(?P<pending_works>\d+))?",
     ("pending_works",)),
    Message("watchdog_stuck", "collective_timeout", "watchdog got stuck for",
     r"watchdog got stuck for (?P<stuck_s>\d+) seconds", ("stuck_s",)),
    Message("desync_not_joined", "collective_mismatch", "but didn't join collective",
     r"(?P<ranks>\[[\d, ]*\]) finished collective #(?P<seq>\d+), but didn't join collective #(?P<next_seq>\d+)",
     ("seq", "next_seq")),
    Message("desync_not_finished", "collective_mismatch", "joined but didn't finish collective",
     r"(?P<ranks>\[[\d, ]*\]) joined but didn't finish collective #(?P<seq>\d+)", ("seq",)),
    Message("desync_lagging", "collective_mismatch", "are the lagging ranks",
     r"ranks (?P<ranks>\[[\d, ]*\]) are the lagging ranks", ()),
    Message("collective_mismatch", "collective_mismatch", "Detected mismatch between collectives",
     r"Detected mismatch between collectives on ranks\. Rank (?P<rank_a>\d+) is running collective: "
     r"CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d+), OpType=(?P<op_type>\w+)"
     r"(?:.*?Rank (?P<rank_b>\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(?P<seq_b>\d+), "
     r"OpType=(?P<op_type_b>\w+))?", ("rank_a", "seq", "rank_b", "seq_b")),
    Message("flight_recorder", None, "Flight Recorder",
     r"(?P<fr_msg>(?:Finished writing|Writing|Error \w+) [^:]*Flight Recorder[^:]*?)(?: to (?P<fr_path>\S+))?$", ()),
    Message("flight_recorder", None, "FlightRecorder is disabled", r"(?P<fr_msg>FlightRecorder is disabled)", ()),
    Message("gloo_timeout", "collective_timeout", "Timed out waiting ",
     r"(?:\[(?P<gloo_src>[^\]]*gloo[^\]]*)\] )?Timed out waiting (?P<wait_ms>\d+)ms for (?P<gloo_op>\w+) operation",
     ("wait_ms",)),
    # c10d's TCPStore: a rank waited for keys its peers never wrote (at start: a peer that never
    # joined), or could not reach the store at all
    Message("store_wait_timeout", None, "timeout after",
     r"wait timeout after (?P<wait_ms>\d+)ms, keys: (?P<store_keys>\S+(?:, \S+)*)", ("wait_ms",)),
    Message("store_connect_timeout", None, "has timed out after",
     r"The client socket has timed out after (?P<wait_ms>\d+)ms while trying to connect to "
     r"\((?P<store_host>[^,()]+), (?P<store_port>\d+)\)", ("wait_ms", "store_port")),
    Message("gloo_peer_closed", None, "by peer",
     r"(?:\[(?P<gloo_src>[^\]]*gloo[^\]]*)\] )?(?P<gloo_error>Connection closed by peer|Read error|"
     r"Connection reset by peer)(?: \[(?P<peer>[^\]]+)\]:?(?P<peer_port>\d+)?)?", ()),
    Message("worker_failed", None, "failed (exitcode:",
     r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+) \(pid: (?P<worker_pid>\d+)\)"
     r"(?: of binary: (?P<binary>.*))?", ("exitcode", "local_rank", "worker_pid")),
    Message("closing_signal", None, "closing signal",
     r"Sending process (?P<worker_pid>\d+) closing signal (?P<signal>SIG\w+)", ("worker_pid",)),
    # the grace period ran out: torchrun sends the kill signal (numbers, as `via 15 ... via 9`)
    Message("closing_signal", None, "forcefully exiting via",
     r"Unable to shutdown process (?P<worker_pid>\d+) via (?P<ignored_signal>\S+), forcefully exiting via "
     r"(?P<signal>\S+)", ("worker_pid",)),
    # what a rank's input pipeline or checkpoint writer says when it runs out of room
    Message("shm_exhausted", "shm_exhausted", "shared memory",
     r"(?P<io_error>unable to allocate shared memory\(shm\)[^\n]*|Unexpected bus error encountered in worker[^\n]*"
     r"insufficient shared memory[^\n]*)", ()),
    Message("dataloader_worker_killed", "dataloader_worker_killed", "DataLoader worker (pid",
     r"DataLoader worker \(pid\(?s?\)? ?(?P<worker_pids>[\d, ]+)\) (?:is killed by signal: (?P<worker_signal>[^.\n]+)|"
     r"exited unexpectedly)", ()),
    Message("dataloader_timeout", None, "DataLoader timed out after",
     r"DataLoader timed out after (?P<loader_wait_s>\d+(?:\.\d+)?) seconds", ()),
    # Slurm: srun reports each task that ended badly; slurmstepd the OOM kills its cgroup counted
    Message("srun_task_exit", "process_exit", "srun: error:",
     r"srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[\d,\-\[\] ]+): Exited with exit code (?P<exitcode>\d+)",
     ("exitcode",)),
    Message("srun_task_killed", "signal_kill", "srun: error:",
     r"srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[\d,\-\[\] ]+): (?P<signal>Killed|Terminated|Aborted|"
     r"Out Of Memory)", ()),
    Message("srun_task_segfault", "segfault", "srun: error:",
     r"srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[\d,\-\[\] ]+): Segmentation fault", ()),
    Message("slurm_oom_kill", "oom_kill", "kill event",
     r"Detected (?P<oom_kills>\d+) oom[_-]kill events?(?:\(s\))? in (?P<step>\S+?)\.?(?:\s|$)", ("oom_kills",)),
    Message("slurm_cancelled", "job_failure", "CANCELLED AT",
     r"\*\*\* (?P<slurm_unit>STEP|JOB) (?P<step>\S+) ON (?P<node>\S+) CANCELLED AT (?P<cancelled_at>\S+)"
     r"(?: DUE TO (?P<reason>[^*]+?))? \*\*\*", ()),
    # PBS/Torque: the server's or the MOM's account of a job it ended (job e-mail, the job's .e/.o file)
    Message("pbs_killed", "job_failure", "PBS: job killed:",
     r"PBS: job killed: (?P<pbs_limit>\w+) (?P<pbs_used>\d+\S*) exceeded limit (?P<pbs_max>\d+\S*)", ()),
    Message("pbs_aborted", "job_failure", "Aborted by PBS Server", r"(?P<pbs_msg>Aborted by PBS Server)", ()),
    Message("pbs_exit_status", "job_failure", "Exit_status=", r"(?:^|\s)Exit_status=(?P<exitcode>-?[1-9]\d*)\b", ("exitcode",)),
    # a child process a launcher or script waited for, as Python's subprocess reports it
    Message("child_died_segfault", "segfault", "died with <Signals.SIG",
     r"died with <Signals\.(?P<signal>SIGSEGV|SIGBUS): \d+>", ()),
    Message("child_died_signal", "signal_kill", "died with <Signals.SIG",
     r"died with <Signals\.(?P<signal>SIG\w+): \d+>", ()),
    Message("child_exit_status", "process_exit", "returned non-zero exit status",
     r"returned non-zero exit status (?P<exitcode>\d+)", ("exitcode",)),
    Message("watchdog_terminated", "nccl_warn", "watchdog thread terminated with exception",
     r"NCCL watchdog thread terminated with exception: (?P<error>.*)$", ()),
    # a Kubeflow training operator's account of a replica's end
    Message("pod_exit", "process_exit", "exited with code",
     r"Pod: (?P<pod>\S+?) exited with code (?P<exitcode>\d+)", ("exitcode",)),
    # an uncaught C++ exception ends the process in abort() (SIGABRT)
    Message("cpp_terminate", "signal_kill", "terminate called after throwing",
     r"terminate called after throwing an instance of '(?P<cpp_exception>[^']+)'", ()),
    # a container runtime's account of how the container ended (docker inspect, kubectl describe)
    Message("container_oom_killed", "oom_kill", "OOMKilled", r"(?P<container_state>Reason:\s+OOMKilled|\"OOMKilled\":\s*true)",
     ()),
    Message("container_exit_signal", "signal_kill", '"ExitCode":',
     r"\"ExitCode\":\s*(?P<exitcode>129|1[3-5]\d)\b", ("exitcode",)),
    Message("container_exit_signal", "signal_kill", "Exit Code:", r"Exit Code:\s+(?P<exitcode>129|1[3-5]\d)\b",
     ("exitcode",)),
    Message("container_exit", "process_exit", "Exit Code:", r"Exit Code:\s+(?P<exitcode>[1-9]\d*)\b", ("exitcode",)),
    # Kubernetes: the kubelet restarting a container that keeps exiting (an event), a pod's row in
    # `kubectl get pods`, and what `kubectl describe pod` says of a pod that failed
    Message("k8s_backoff", "process_exit", "Back-off restarting failed container",
     r"(?P<k8s_event>Back-off restarting failed container)(?: (?P<container>[\w.\-]+) in pod (?P<pod>[\w.\-]+))?",
     ()),
    Message("k8s_pod_status", "process_exit", "CrashLoopBackOff", _POD_ROW.format("(?:Init:)?CrashLoopBackOff"),
     ("restarts",)),
    Message("k8s_pod_status", "process_exit", "Error", _POD_ROW.format("(?:Init:)?Error"), ("restarts",)),
    Message("k8s_pod_status", "oom_kill", "OOMKilled", _POD_ROW.format("OOMKilled"), ("restarts",)),
    Message("k8s_pod_status", "job_failure", "Evicted", _POD_ROW.format("Evicted"), ("restarts",)),
    Message("k8s_pod_failed", "job_failure", "Status:", r"^\s*Status:\s+(?P<pod_phase>Failed)\s*$", ()),
    Message("k8s_pod_evicted", "job_failure", "Reason:", r"^\s*Reason:\s+(?P<pod_reason>Evicted)\s*$", ()),
    Message("k8s_node_pressure", "memory_pressure", "The node was low on resource",
     r"The node was low on resource: (?P<resource>memory)", ()),
    Message("k8s_node_pressure", "disk_full", "The node was low on resource",
     r"The node was low on resource: (?P<resource>ephemeral-storage)", ()),
    # Slurm's accounting (`sacct`, fixed width or --parsable): a job or step's State, then its
    # ExitCode "status:signal"
    Message("sacct_state", "oom_kill", "OUT_OF_ME", _SACCT_ROW.format("OUT_OF_ME(?:MORY)?"), ("exit_status", "exit_signal")),
    Message("sacct_state", "job_failure", "FAILED", _SACCT_ROW.format("FAILED"), ("exit_status", "exit_signal")),
    Message("sacct_state", "job_failure", "TIMEOUT", _SACCT_ROW.format("TIMEOUT"), ("exit_status", "exit_signal")),
    Message("sacct_state", "job_failure", "NODE_FAIL", _SACCT_ROW.format("NODE_FAIL"), ("exit_status", "exit_signal")),
    Message("sacct_state", "job_failure", "CANCELLED", _SACCT_ROW.format("CANCELLED"), ("exit_status", "exit_signal")),
    # IBM LSF's job report: why it killed the job, and how the job ended (exit code 128 + N: signal N)
    Message("lsf_term", "oom_kill", "TERM_MEMLIMIT",
     r"(?P<lsf_term>TERM_MEMLIMIT): job killed after reaching LSF memory usage limit", ()),
    Message("lsf_term", "job_failure", "TERM_", r"^(?P<lsf_term>TERM_[A-Z_]+): (?P<lsf_why>job killed[^.]*)", ()),
    Message("lsf_exit", "signal_kill", "Exited with exit code", r"^Exited with exit code (?P<exitcode>129|1[3-5]\d)\.",
     ("exitcode",)),
    Message("lsf_exit", "process_exit", "Exited with exit code", r"^Exited with exit code (?P<exitcode>[1-9]\d*)\.",
     ("exitcode",)),
    # DeepSpeed's launcher, when a worker ended badly: it kills the others and exits with that code
    # (negative: the worker was killed by that signal)
    Message("deepspeed_exit", "signal_kill", "exits with return code =", r"exits with return code = (?P<exitcode>-\d+)",
     ("exitcode",)),
    Message("deepspeed_exit", "process_exit", "exits with return code =",
     r"exits with return code = (?P<exitcode>[1-9]\d*)", ("exitcode",)),
    # Open MPI's mpirun/mpiexec: a rank that ended badly ends the job
    Message("mpi_job_aborted", "job_failure", "terminated normally, but",
     r"Primary job\s+terminated normally, but (?P<mpi_failed>\d+) process(?:es)? returned", ("mpi_failed",)),
    Message("mpi_job_aborted", "job_failure", "exited with non-zero status",
     r"(?P<mpi_launcher>mpirun|mpiexec|prterun) detected that one or more processes exited with non-zero status", ()),
    Message("mpi_rank_signal", "segfault", "noticed that process rank", _MPI_SIGNAL.format("11|7"), ("mpi_rank", "signal_no")),
    Message("mpi_rank_signal", "signal_kill", "noticed that process rank", _MPI_SIGNAL.format(r"\d+"), ("mpi_rank", "signal_no")),
    Message("mpi_exit_code", "process_exit", "Exit code:", r"^\s*Exit code:\s+(?P<exitcode>[1-9]\d*)\s*$", ("exitcode",)),
    # Ray Jobs: the job's end as `ray job submit` reports it, and the entrypoint's exit code
    Message("ray_job_failed", "job_failure", "' failed", r"Job '(?P<ray_job>[^']+)' failed", ()),
    Message("ray_entrypoint_exit", "process_exit", "Job entrypoint command failed",
     r"Job entrypoint command failed with exit code (?P<exitcode>\d+)", ("exitcode",)),
    Message("disk_full", "disk_full", "No space left on device", r"(?P<io_error>No space left on device)", ()),
    Message("checkpoint_write_failed", "disk_full", "inline_container.cc",
     r"(?P<io_error>\[enforce fail at inline_container\.cc:\d+\] \. (?:unexpected pos \d+ vs \d+|"
     r"PytorchStreamWriter failed writing[^\n]*))", ()),
    Message("nccl_error", None, "NCCL error",
     r"NCCL error(?: in: (?P<where>[^,]*))?, (?P<nccl_error>[^,]+?)(?:, NCCL version (?P<nccl_version>[\w.+\-]+))?(?:$|\n|\s{2})",
     ()),
)
# What the runner's own words mean, for the messages whose fields say it all (``{field}`` from the
# message's groups; a field the line did not have prints as "?")
SAID = {
    "srun_task_exit": "srun: task(s) {tasks} on {node} exited with code {exitcode}",
    "srun_task_killed": "srun: task(s) {tasks} on {node} ended: {signal}",
    "srun_task_segfault": "srun: task(s) {tasks} on {node} ended: segmentation fault",
    "slurm_oom_kill": "Slurm counted {oom_kills} OOM kill(s) by the cgroup OOM killer in {step}",
    "slurm_cancelled": "Slurm cancelled {slurm_unit} {step} on {node} at {cancelled_at}",
    "pbs_killed": "PBS killed the job: its {pbs_limit} {pbs_used} exceeded the limit {pbs_max}",
    "pbs_aborted": "the PBS server aborted the job",
    "pbs_exit_status": "PBS: the job ended with Exit_status={exitcode}",
    "child_died_segfault": "a child process died of {signal}",
    "child_died_signal": "a child process died of {signal}",
    "child_exit_status": "a child process exited with status {exitcode}",
    "cpp_terminate": "the process aborted (SIGABRT) on an uncaught C++ exception {cpp_exception}",
    "container_oom_killed": "the container runtime says it was OOM-killed ({container_state})",
    "container_exit_signal": "the container exited with code {exitcode}: killed by a signal (code - 128)",
    "watchdog_terminated": "the NCCL watchdog thread ended on an error: {error}",
    "pod_exit": "the training operator saw pod {pod} exit with code {exitcode}",
    "container_exit": "the container exited with code {exitcode}",
    "k8s_backoff": "Kubernetes keeps restarting a container that exits (back-off)",
    "k8s_pod_status": "Kubernetes: pod {pod} is {pod_status} ({restarts} restart(s))",
    "k8s_pod_failed": "Kubernetes: the pod's phase is Failed",
    "k8s_pod_evicted": "Kubernetes evicted the pod",
    "k8s_node_pressure": "Kubernetes: the node was low on {resource}",
    "sacct_state": "Slurm accounting: job {job_id} ended {sacct_state} (ExitCode {exit_status}:{exit_signal})",
    "lsf_term": "LSF killed the job ({lsf_term})",
    "lsf_exit": "LSF: the job exited with exit code {exitcode}",
    "deepspeed_exit": "DeepSpeed's launcher saw a worker end with return code {exitcode} and stopped the job",
    "mpi_job_aborted": "Open MPI aborted the job: a process exited with a non-zero code",
    "mpi_rank_signal": "{mpi_launcher}: rank {mpi_rank} exited on signal {signal_no} ({signal})",
    "mpi_exit_code": "Open MPI: the first process to fail exited with code {exitcode}",
    "ray_job_failed": "Ray: job {ray_job} failed",
    "ray_entrypoint_exit": "Ray: the job's entrypoint command failed with exit code {exitcode}",
}

# Faults a message names beneath the error it reports: the hardware or the link under a CUDA error
# or an NCCL warning. Each is a finding of its own on the same line (the error stays one too), so a
# chain can run from the fault to the error it caused: (name, kind, literal, summary).
UNDERLYING = (
    ("gpu_ecc_error", "hardware_error", "uncorrectable ECC error",
     "the GPU reported an uncorrectable ECC error (a memory fault in the GPU)"),
    ("ib_catastrophic_error", "hardware_error", "local catastrophic error",
     "the InfiniBand adapter reported a local catastrophic error (a fault in the adapter)"),
    ("ib_port_error", "link_down", "Got async event : port error",
     "the InfiniBand port reported a port error (its link went down)"),
)


STEP = (r"(?i)(?:\b(?:global_step|step)\s*[=:]\s*(?P<step>\d+)|\biteration\s+(?P<iter>\d+)\s*/\s*(?P<total>\d+)"
        r"|\bstep\s+(?P<step2>\d+)\s*/\s*(?P<total2>\d+))")
STEP_FIELDS = (r"(?i)(?:\bloss\b\s*[=:]?\s*(?P<loss>[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?))?", )
LOSS = r"(?i)\b(?:lm )?loss\b\s*[=:]?\s*(?P<loss>[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?)"
STEP_TIME = (r"(?i)(?:step_time\s*[=:]\s*(?P<step_time_s>[\d.]+)\s*s|elapsed time per iteration \(ms\):\s*"
             r"(?P<iter_ms>[\d.]+))")
LOWER = {rx: rx.removeprefix("(?i)") for rx in (STEP, LOSS, STEP_TIME)}


def nocap(rx: str) -> str:
    """``rx`` with its named groups made non-capturing (see :data:`NOCAP`)."""
    return re.sub(r"\(\?P<\w+>", "(?:", rx)


# Numbers read from a message without a capture regex (the step lines the compiled reader leaves:
# ingest.native.step_values reads the ASCII ones, exactly as these do). Polars runs an unanchored regex with
# capture groups several times slower per line than one without (a DFA finds the match; the
# groups need a second engine on every line): the step-line patterns below take the whole match
# (group 0, no captures) and then the numbers inside it, which these patterns place without
# ambiguity: the text before each number group holds no digit (STEP: the first and second digit
# runs are step and total; STEP_TIME: the first run of digits and dots is the value; LOSS: the
# value is the match's tail, and nothing before it is a sign or digit).
NOCAP = {rx: nocap(LOWER[rx]) for rx in (STEP, STEP_TIME)}
LOSS_NOCAP = nocap(LOWER[LOSS])
LOSS_VALUE = r"[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?$"
RANK_IN_TEXT = r"(?i)\[rank:? ?(\d+)\]|\brank[=:](\d+)\b"
PG_RANK = r"^\[(?:PG[^\]]*? )?Rank (\d+)\]"       # c10d's process-group prefix of a message
# (Ray names a remote error with its cause: ``ray.exceptions.RayTaskError(RuntimeError): ...``)
# (TensorFlow 1.x names the error raised out of a session "AbortedError (see above for traceback): ...")
EXC_LINE = (r"^(?P<exc>(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?:\([\w.]+\))?)"
            r"(?: \(see above for traceback\))?(?:: ?(?P<exc_msg>.*))?$")
MESSAGE_LITERALS = list(dict.fromkeys(m.literal for m in MESSAGES))
MESSAGE_ANY = "|".join(re.escape(lit) for lit in MESSAGE_LITERALS)
PLAIN_HINTS = ("step", "STEP", "Step", "iteration", "Error", "Exception", "collective", "Timed out waiting",
               "by peer", "NCCL error", "Flight Recorder", "FlightRecorder", "closing signal", "failed (exitcode")
# (an untimed line that holds any message of the grammar says something too)
PLAIN_HINTS = tuple(dict.fromkeys(PLAIN_HINTS + tuple(m.literal for m in MESSAGES)))

# INFO_GRAMMAR literal -> entry number (the first entry whose literal occurs in a line wins)

# ---------------------------------------------------------------------------------------------
# 4. blocks
MAX_BLOCK_LINES = 400            # how far a ChildFailedError summary's closing border is looked for
TB_START = "Traceback (most recent call last):"
TB_CHAIN = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
FATAL_START = "Fatal Python error: "
# faulthandler.dump_traceback_later's watchdog: "Timeout (0:00:10)!", then every thread's stack as
# in a fatal error's dump (the process made no progress for that long; with exit=True it then exits)
TIMEOUT_START = "Timeout ("
TIMEOUT_DUMP = re.compile(r"^Timeout \((\d+):(\d\d):(\d\d)\)!$")
# faulthandler's words for the fatal signals it catches (Modules/faulthandler.c), and the kind of
# each; any other "Fatal Python error" is the interpreter's own (Py_FatalError), which ends the
# process with abort()
FATAL_SIGNALS = {"Segmentation fault": ("SIGSEGV", "segfault"), "Bus error": ("SIGBUS", "segfault"),
                 "Aborted": ("SIGABRT", "signal_kill"), "Floating-point exception": ("SIGFPE", "signal_kill"),
                 "Illegal instruction": ("SIGILL", "signal_kill")}
CFE_HEAD = r"^(?:[a-z_]\w*\.)*ChildFailedError:?\s*$"
BLOCK_ROW = (r"^(?:$|\s|Traceback \(|Fatal Python error|Timeout \(\d|Current thread|Thread 0x|Extension modules|Stack \(most"
             r"|During handling|The above exception|=+$|-+$|Failures:|Root Cause|\[\d+\]:$"
             r"|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)\b)")
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in | in )(?P<func>.*)$')
EXC = re.compile(EXC_LINE)
CFE_KV = re.compile(r"^\s{2}(?P<key>\w+)\s*: ?(?P<val>.*)$")
CFE_ENTRY = re.compile(r"^\[(?P<idx>\d+)\]:$")
CFE_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)$")
CFE_RANK = re.compile(r"^(?P<rank>-?\d+) \(local_rank: (?P<local_rank>-?\d+)\)")
CFE_EXIT = re.compile(r"^(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)(?:\s+\((?P<sig>SIG\w+)\))?")
LOCAL_HOSTS = {"localhost", "localhost.localdomain", "127.0.0.1", "::1"}


def signame(code: int) -> str | None:
    if code >= 0:
        return None
    try:
        return _signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# ---------------------------------------------------------------------------------------------
# the messages, read in Python (a block's exception message, a typed row's summary)
MESSAGES_PY = [(n, k, lit, re.compile(rx), ints) for n, k, lit, rx, ints in MESSAGES]


def message_in(text: str) -> tuple[str, str | None, dict] | None:
    """(name, kind, fields) of the first MESSAGES entry found in a text (Python side, for blocks)."""
    for name, kind, lit, rx, ints in MESSAGES_PY:
        if lit in text:
            m = rx.search(text)
            if m:
                fields = {k: (int(v) if k in ints else v) for k, v in m.groupdict().items() if v is not None}
                return name, kind, fields
    return None


def timeout_summary(name: str, a: dict, who: str, msg: str) -> str:
    """The summary of a timeout message ``name`` with fields ``a``, said of ``who``."""
    if name in ("watchdog_timeout", "blocking_wait_timeout"):
        s = (f"collective {a.get('op_type')} (SeqNum {a.get('seq')}) timed out{who}"
             f" after {a.get('ran_ms', a.get('timeout_ms'))} ms (timeout {a.get('timeout_ms')} ms)")
        return s
    if name == "gloo_timeout":
        return f"gloo {a.get('gloo_op')} timed out after {a.get('wait_ms')} ms{who}"
    return f"{name.replace('_', ' ')}{who}: {msg[:200]}"
