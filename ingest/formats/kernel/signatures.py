"""The kernel-message signature library: data, not code.

Each :class:`Signature` names one kind of kernel message that means something
for a crashed training job, with

* ``needle``: a literal substring every matching message contains. The
  parsers test all needles at once over whole Polars columns (Aho-Corasick,
  ``str.contains_any``); only the few lines that contain one reach the
  Python regexes, so typing costs nothing on the millions of ordinary lines.
* ``pattern``: the regex (Python ``re``, ``search`` semantics) over the message
  text (the line without its timestamp/priority/host prefix). Named groups
  become attributes; groups listed in ``ints`` are converted to ``int``.
* ``kind``: the finding kind (``analysis.links.LinkKind`` values) or ``None``
  when the message is named but is not a finding by itself (the parts of an
  OOM report, informational NVRM lines). ``proposed`` is the kind this
  signature should have once ``LinkKind`` grows it; until then ``kind`` is the
  closest existing one and the summary says exactly what happened.
* ``summary``: a ``str.format`` template over the attributes (missing ones
  print as ``?``): the human sentence shown in the report.
* ``report``: ``"stack"`` when the message is followed by a call trace that
  belongs to it (hung task, lockups, Oops, panic, and ``invoked oom-killer``,
  whose trace goes to the OOM kill it leads to), else ``None``.
* ``dedup``: attribute names; repeats of the same signature with the same values
  within ``FLOOD_WINDOW_NS`` are kept as events but not as new findings (an Xid
  13 flood is one finding with a repeat count, not 600).
* ``example``: a real message and where it was seen; ``tests/ingest/
  test_kernel_signatures.py`` checks that every example matches its own
  signature and no earlier one.

Order matters: the first signature whose needle and pattern match wins.
Bump ``VERSION`` whenever a signature is added, removed or changes meaning;
every typed event records the version it was typed with.

NVIDIA Xid meanings come from ``XID`` (reference/FORMATS.md 4.3: nverror.h
mnemonics and NVIDIA's Xid catalog); an Xid code not in the table is typed
with meaning ``"unknown Xid (not in aftertrace's table)"`` — never guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

VERSION = "kernel-signatures/3"
FLOOD_WINDOW_NS = 60_000_000_000

# Xid code -> (mnemonic, meaning, immediate action); FORMATS.md 4.3.
XID: dict[int, tuple[str, str, str]] = {
    8: ("ROBUST_CHANNEL_GPU_TIMEOUT", "GPU stopped processing (idle timeout)", "RESTART_APP"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception (typically an application bug: "
         "out-of-range access, illegal instruction)", "RESTART_APP"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (application or driver)",
         "RESTART_APP"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (user application fault, "
         "channel reset)", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after earlier errors or an "
         "application being killed", "follow the accompanying Xid"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error", "RESET_GPU / reboot"),
    61: ("PMU_BREAKPOINT", "internal micro-controller breakpoint/warning", "contact support"),
    62: ("PMU_HALT_ERROR", "internal micro-controller halt", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "ECC page retirement / row remapping recorded", "IGNORE (watch the rate)"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "ECC page retirement / row remapping failure", "RESET_GPU"),
    74: ("NVLINK_ERROR", "NVLink error", "check the NVLink (WORKFLOW_NVLINK_ERR)"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the PCIe bus", "reboot the node"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE / contact support"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error (only the affected application "
         "is killed)", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error", "RESET_GPU"),
    109: ("CTXSW_TIMEOUT", "context-switch timeout", "RESTART_APP"),
    119: ("GSP_RPC_TIMEOUT", "timeout waiting for an RPC response from the GPU System Processor",
          "RESET_GPU"),
    120: ("GSP_ERROR", "GPU System Processor error", "RESET_GPU"),
    140: ("ECC_UNRECOVERED_ESCAPE", "unrecovered ECC error escaped", "RESET_GPU"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "the driver changed the GPU's recovery action", "act on the "
          "new action"),
    155: ("NVLINK_SW_DEFINED", "NVLink software-defined error", "check the NVLink"),
}
XID_UNKNOWN = ("UNKNOWN", "unknown Xid (not in aftertrace's table)", "see NVIDIA's Xid catalog")


@dataclass(frozen=True)
class Signature:
    id: str
    name: str
    kind: str | None
    needle: str
    pattern: str
    summary: str
    example: str
    source: str
    ints: tuple[str, ...] = ()
    report: str | None = None
    dedup: tuple[str, ...] = ()
    proposed: str | None = None
    regex: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "regex", re.compile(self.pattern))

    def match(self, text: str) -> dict | None:
        if self.needle not in text:
            return None
        m = self.regex.search(text)
        if not m:
            return None
        out = {}
        for k, v in m.groupdict().items():
            if v is None:
                continue
            out[k] = int(v) if k in self.ints else v
        return out


_PCI = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

SIGNATURES: tuple[Signature, ...] = (
    # -- memory: OOM killer (mm/oom_kill.c; FORMATS.md 4.2) -----------------------------------
    Signature(
        "oom.kill", "oom_kill", "oom_kill", "Killed process",
        r"(?:(?P<scope_text>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): )?"
        r"Killed process (?P<victim_pid>\d+)(?:, UID (?P<uid_old>\d+),)? \((?P<victim_comm>.*?)\)"
        r"(?:,? UID:? ?(?P<uid2>\d+))?"
        r"(?:,? total-vm:(?P<total_vm_kb>\d+)kB, anon-rss:(?P<anon_rss_kb>\d+)kB, file-rss:(?P<file_rss_kb>\d+)kB"
        r"(?:, shmem-rss:(?P<shmem_rss_kb>\d+)kB)?)?(?:,? UID:(?P<uid>\d+))?(?: pgtables:(?P<pgtables_kb>\d+)kB)?"
        r"(?: oom_score_adj:(?P<oom_score_adj>-?\d+))?",
        "The {scope_name} killed pid {victim_pid} ({victim_comm}), anon-rss {anon_rss_kb} kB",
        "Memory cgroup out of memory: Killed process 29133 (python3) total-vm:78072kB, anon-rss:65280kB, "
        "file-rss:6640kB, shmem-rss:0kB, UID:0 pgtables:184kB oom_score_adj:0",
        "this machine, a memory-cgroup OOM kill caused for the tests (tests/data/kernel/vm_dmesg.txt)",
        ints=("victim_pid", "uid_old", "uid2", "uid", "total_vm_kb", "anon_rss_kb", "file_rss_kb",
              "shmem_rss_kb", "pgtables_kb", "oom_score_adj"),
        dedup=("victim_pid",)),
    Signature(
        "oom.invoked", "oom_invoked", None, "invoked oom-killer",
        r"^(?P<comm>.*?) invoked oom-killer: (?:gfp_mask=(?P<gfp_mask>\S+?),\s+)?(?:nodemask=\S+?,\s+)?"
        r"(?:order=(?P<order>-?\d+),\s+)?oom_score_adj=(?P<oom_score_adj>-?\d+)",
        "{comm} invoked the OOM killer (order {order})",
        "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "this machine (tests/data/kernel/vm_dmesg.txt)",
        ints=("order", "oom_score_adj"), report="stack"),
    Signature(
        "oom.summary", "oom_summary", None, "oom-kill:",
        r"^oom-kill:(?P<fields>.*)$",
        "OOM kill summary",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/aftertrace_issue6,"
        "task_memcg=/aftertrace_issue6,task=python3,pid=29133,uid=0",
        "this machine (tests/data/kernel/vm_dmesg.txt)"),
    Signature(
        "oom.select", "oom_select", None, "Kill process",
        r"(?P<scope_text>Memory cgroup out of memory|Out of memory): Kill process (?P<victim_pid>\d+) "
        r"\((?P<victim_comm>.*?)\) score (?P<score>\d+) or sacrifice child",
        "The OOM killer selected pid {victim_pid} ({victim_comm})",
        "Memory cgroup out of memory: Kill process 42424 (memcg_test_1) score 0 or sacrifice child",
        "linux-test-project/ltp#1080 (tests/data/kernel/issue_ltp-1080_syslog_memcg_oom_rhel7.log)",
        ints=("victim_pid", "score")),
    Signature(
        "oom.reaper", "oom_reaper", None, "oom_reaper:",
        r"^oom_reaper: reaped process (?P<victim_pid>\d+) \((?P<victim_comm>.*?)\)",
        "oom_reaper reaped pid {victim_pid} ({victim_comm})",
        "oom_reaper: reaped process 63214 (uwsgi), now anon-rss:0kB, file-rss:0kB, shmem-rss:92kB",
        "reportportal/kubernetes#203 (tests/data/dmesg/issue_reportportal-k8s-203_memcg_oom_raw.log)",
        ints=("victim_pid",)),
    # -- NVIDIA GPU (open-gpu-kernel-modules kernel_rc.c; FORMATS.md 4.3) ----------------------
    Signature(
        "nvidia.xid", "gpu_xid", "gpu_xid", "NVRM: Xid",
        r"NVRM: Xid \(PCI:(?P<pci>" + _PCI + r")[^)]*\): (?P<xid>\d+),\s*"
        r"(?:pid=(?:'<unknown>'|(?P<pid>\d+)),\s*(?:name=(?:<unknown>|(?P<process>.*?)),\s*)?)?(?P<detail>.*)$",
        "NVIDIA Xid {xid} on GPU {pci}: {xid_meaning}",
        "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
        "(DBE) has been detected on GPU in the framebuffer at physAddr 0x12bac1c3e0 partition 2, subpartition 1.",
        "leptonai/gpud pkg/dmesg/testdata/dmesg-time-format-iso.log (tests/data/negative/gpud__dmesg-iso_peermem.log)",
        ints=("xid", "pid"), dedup=("pci", "xid")),
    Signature(
        "nvidia.fallen_off_bus", "gpu_fallen_off_bus", "gpu_xid", "fallen off the bus",
        r"NVRM: (?:GPU (?P<pci>" + _PCI + r"): )?GPU has fallen off the bus",
        "GPU {pci} has fallen off the bus",
        "NVRM: GPU 0000:09:00.0: GPU has fallen off the bus.",
        "a dmesg pasted in a public issue (code index id 18583932922)",
        dedup=("pci",)),
    Signature(
        "nvidia.gpu_at", "nvrm_gpu", None, "NVRM: GPU at PCI:",
        r"NVRM: GPU at PCI:(?P<pci>" + _PCI + r"): (?P<gpu_uuid>GPU-[0-9a-f-]+)",
        "GPU {pci} is {gpu_uuid}",
        "NVRM: GPU at PCI:0000:5d:00: GPU-f1906b9b-557a-e961-045c-9fe4be3ce012",
        "a dmesg pasted in a public write-up (code index id 9867179830)"),
    Signature(
        "nvidia.peermem", "nvidia_peermem_error", None, "nvidia-peermem",
        r"nvidia-peermem (?P<function>\S+?):\d+ ERROR (?P<detail>.*)$",
        "nvidia-peermem (GPUDirect RDMA) error: {detail}",
        "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
        "leptonai/gpud (tests/data/kernel/gpud__dmesg-decode-iso_peermem_err.log)",
        dedup=("function",)),
    Signature(
        "nvidia.nvrm", "nvrm", None, "NVRM: ",
        r"NVRM: (?P<detail>.*)$",
        "NVIDIA driver: {detail}",
        "NVRM: No NVIDIA GPU found.",
        "nvidia-bug-report.log pasted in a public issue (tests/data/kernel/nvidia-bug-report_excerpt.log)"),
    # -- hangs and lockups ----------------------------------------------------------------------
    Signature(
        "hung_task", "hung_task", "hung_task", "blocked for more than",
        r"INFO: task (?P<comm>.+):(?P<pid>\d+) blocked for more than (?P<blocked_s>\d+) seconds",
        "Task {comm} (pid {pid}) blocked for more than {blocked_s} s (hung task)",
        "INFO: task kworker/2:1:5747 blocked for more than 120 seconds.",
        "sonic-net/sonic-buildimage#4822 (tests/data/dmesg/issue_sonic-buildimage-4822_raw_multi_hung_tasks.log)",
        ints=("pid", "blocked_s"), report="stack", dedup=("pid",)),
    Signature(
        "rt_throttling", "rt_throttling", "rt_throttling", "RT throttling activated",
        r"sched: RT throttling activated",
        "The scheduler throttled real-time tasks (RT throttling activated)",
        "sched: RT throttling activated",
        "this machine, a SCHED_FIFO busy loop (tests/data/kernel/vm_dmesg.txt)"),
    Signature(
        "soft_lockup", "soft_lockup", "soft_lockup", "soft lockup",
        r"BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<stuck_s>\d+)s?(?: seconds)?! \[(?P<comm>.+):(?P<pid>\d+)\]",
        "Soft lockup: CPU#{cpu} stuck for {stuck_s} s in {comm} (pid {pid})",
        "watchdog: BUG: soft lockup - CPU#3 stuck for 21s! [grep:4749]",
        "a syzbot report (code index id 30497164050)",
        ints=("cpu", "stuck_s", "pid"), report="stack", dedup=("cpu",)),
    Signature(
        "hard_lockup", "hard_lockup", "soft_lockup", "hard LOCKUP",
        r"Watchdog detected hard LOCKUP on cpu (?P<cpu>\d+)",
        "Hard lockup detected on CPU {cpu}",
        "watchdog: Watchdog detected hard LOCKUP on cpu 6",
        "an LKML thread (code index id 12065331617)",
        ints=("cpu",), report="stack", dedup=("cpu",), proposed="hard_lockup"),
    Signature(
        "rcu_stall", "rcu_stall", "soft_lockup", "detected stalls on CPUs/tasks",
        r"INFO: (?P<rcu_flavor>rcu_\w+) detected stalls on CPUs/tasks",
        "RCU stall ({rcu_flavor} detected stalls on CPUs/tasks)",
        "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
        "an LKML thread (code index id 40841593225)",
        report="stack", dedup=("rcu_flavor",), proposed="rcu_stall"),
    # -- faults ----------------------------------------------------------------------------------
    Signature(
        "segfault", "segfault", "segfault", "segfault at",
        r"(?P<comm>[^\s\[]+?)\[(?P<pid>\d+)\]: segfault at (?P<address>[0-9a-f]+) ip (?P<ip>[0-9a-f]+) "
        r"sp (?P<sp>[0-9a-f]+) error (?P<error>[0-9a-f]+)(?: in (?P<object>[^\[\s]+)\[)?",
        "{comm} (pid {pid}) segfaulted at {address} in {object}",
        "python3[29195]: segfault at 0 ip 00007fe366785ad8 sp 00007ffdaa439518 error 4 in "
        "libc.so.6[167ad8,7fe366644000+156000] likely on CPU 0 (core 0, socket 0)",
        "this machine, ctypes.string_at(0) (tests/data/kernel/vm_dmesg.txt)",
        ints=("pid",), dedup=("pid",)),
    Signature(
        "gp_fault", "general_protection_fault", "segfault", "general protection fault ip:",
        r"traps: (?P<comm>.+?)\[(?P<pid>\d+)\] general protection fault ip:(?P<ip>[0-9a-f]+)"
        r"(?: sp:(?P<sp>[0-9a-f]+))?(?: error:(?P<error>[0-9a-f]+))?(?: in (?P<object>[^\[\s]+)\[)?",
        "{comm} (pid {pid}) hit a general protection fault in {object}",
        "traps: syz-executor229[3615] general protection fault ip:7feb96eb56a1 sp:20000fd0 error:0 in "
        "syz-executor2295634012[7feb96e75000+84000]",
        "a syzbot report (code index id 49638718888)",
        ints=("pid",), dedup=("pid",)),
    Signature(
        "panic", "kernel_panic", "segfault", "Kernel panic - not syncing",
        r"Kernel panic - not syncing: (?P<reason>.*)$",
        "Kernel panic: {reason}",
        "Kernel panic - not syncing: Out of memory and no killable processes...",
        "an LKML report (code index id 2765482584)",
        report="stack", proposed="kernel_panic"),
    Signature(
        "oops.null", "kernel_bug", "segfault", "BUG: unable to handle",
        r"BUG: unable to handle (?P<reason>.*)$",
        "Kernel BUG: unable to handle {reason}",
        "BUG: unable to handle kernel NULL pointer dereference at           (null)",
        "leptonai/gpud pstore dump (tests/data/dmesg/gpud__pstore-erst_null-deref.txt)",
        report="stack", proposed="kernel_oops"),
    Signature(
        "oops", "kernel_oops", "segfault", "Oops:",
        r"^Oops: (?:(?P<what>[^:\[]+): )?(?P<code>[0-9a-f]+) \[#(?P<count>\d+)\]",
        "Kernel Oops {code} [#{count}]",
        "Oops: 0002 [#1] SMP",
        "leptonai/gpud pstore dump (tests/data/dmesg/gpud__pstore-erst_null-deref.txt)",
        ints=("count",), report="stack", proposed="kernel_oops"),
    Signature(
        "kernel_bug", "kernel_bug", "segfault", "kernel BUG at",
        r"kernel BUG at (?P<location>[^\s!]+)",
        "Kernel BUG at {location}",
        "kernel BUG at mm/slub.c:294!",
        "a kernel patch description quoting dmesg (code index id 44708752388)",
        report="stack", proposed="kernel_oops"),
    Signature(
        "warn", "kernel_warning", None, "WARNING: CPU:",
        r"WARNING: CPU: (?P<cpu>\d+) PID: (?P<pid>\d+) at (?P<location>\S+)(?: (?P<function>[^\s+]+))?",
        "Kernel warning at {location} in {function} (CPU {cpu}, pid {pid})",
        "WARNING: CPU: 3 PID: 98 at backports-4.19.98-1/net/mac80211/util.c:2040 ieee80211_reconfig+0x98/0xb64 "
        "[mac80211]",
        "a linux-wireless report (tests/data/realworld/dev/linux-wireless-ath10k-lockup_*.log)",
        ints=("cpu", "pid"), report="stack", dedup=("location",), proposed="kernel_warning"),
    # -- hardware ----------------------------------------------------------------------------------
    Signature(
        "pcie.aer", "pcie_aer", "pcie_error", "PCIe Bus Error",
        r"(?:(?P<driver>\S+) (?P<device>" + _PCI + r"): )?(?:AER: )?PCIe Bus Error: severity=(?P<aer_severity>[^,]+), "
        r"type=(?P<aer_type>[^,]+),",
        "PCIe AER {aer_severity} error ({aer_type}) on {device}",
        "PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e8(Receiver ID)",
        "geerlingguy/raspberry-pi-pcie-devices#64 (tests/data/kernel/"
        "issue_geerlingguy-rpi-pcie-64_aer_receiver_error_flood.log)",
        dedup=("device", "aer_severity", "aer_type")),
    Signature(
        "mce", "machine_check", "pcie_error", "Machine check events logged",
        r"mce: \[Hardware Error\]: Machine check events logged",
        "Machine check (hardware error) events logged",
        "mce: [Hardware Error]: Machine check events logged",
        "an LKML thread (code index id 44439886940)",
        proposed="hardware_error"),
    Signature(
        "edac.ue", "memory_error", "hardware_error", "EDAC MC",
        r"EDAC MC(?P<mc>\d+): (?P<count>\d+) UE (?:(?P<what>.*?) )?on (?P<dimm>[^\s(]+)",
        "{count} uncorrected memory error(s) on {dimm} (EDAC MC{mc}): data in RAM was lost",
        "EDAC MC3: 1 UE memory read error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 (channel:0 slot:0 page:0x7e025e "
        "offset:0x400 grain:32 -  err_code:0x00a0:0x0090  SystemAddress:0x7e025e400",
        "a dmesg quoted in a public repository file (code index id 25229554565; the line's start)",
        ints=("mc", "count"), dedup=("mc", "dimm")),
    Signature(
        "edac.ce", "memory_error", "hardware_error", "EDAC MC",
        r"EDAC MC(?P<mc>\d+): (?P<count>\d+) CE (?:(?P<what>.*?) )?on (?P<dimm>[^\s(]+)",
        "{count} corrected memory error(s) on {dimm} (EDAC MC{mc}): corrected, but the memory is reporting errors",
        "EDAC MC1: 262 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x2031c14 "
        "offset:0x940 grain:32 syndrome:0x0 -  OVERFLOW area:DRAM err_code:0001:0091 socket:0 ha:0 channel_mask:2 "
        "rank:1)",
        "illinois-scicomp/machine-shop-maintenance#66 (tests/data/realworld/dev/machine-shop-maintenance-66_*.log); "
        "the format is edac_mc.c's edac_ce_error",
        ints=("mc", "count"), dedup=("mc", "dimm")),
    Signature(
        "mlx5.health", "nic_health", "hardware_error", "health compromised",
        r"(?:(?P<driver>\S+) (?P<pci>" + _PCI + r"): )?device's health compromised - reached miss count",
        "The network adapter {pci} stopped answering its health checks (its firmware is not responding)",
        "mlx5_core 0000:5e:00.0: device's health compromised - reached miss count",
        "charmplusplus/charm#2635 (tests/data/realworld/dev/charm-2635_*.log); mlx5 core/health.c",
        dedup=("pci",)),
    Signature(
        "thermal", "thermal_throttle", "cpu_throttle", "temperature above threshold, cpu clock throttled",
        r"CPU(?P<cpu>\d+): (?P<level>Core|Package) temperature above threshold, cpu clock throttled"
        r"(?: \(total events = (?P<events>\d+)\))?",
        "CPU{cpu} {level} temperature above threshold: clock throttled (thermal)",
        "CPU1: Core temperature above threshold, cpu clock throttled (total events = 1)",
        "a blog post quoting dmesg (code index id 24133043752)",
        ints=("cpu", "events"), dedup=("cpu", "level"), proposed="thermal_throttle"),
    Signature(
        "net.nic_down", "link_down", "pcie_error", "NIC Link is Down",
        r"(?:(?P<driver>\S+) (?P<pci>" + _PCI + r") )?(?P<iface>\S+?):? NIC Link is Down",
        "Network link down on {iface}",
        "igc 0000:03:00.0 enp3s0: NIC Link is Down",
        "an LKML thread (code index id 48395660035)",
        dedup=("iface",), proposed="link_down"),
    Signature(
        "net.ib_down", "link_down", "pcie_error", "Link DOWN",
        r"(?:(?P<driver>\S+) (?P<pci>" + _PCI + r") )?(?P<iface>\S+): Port: (?P<port>\d+) Link DOWN",
        "InfiniBand/RDMA port {port} of {iface} is down",
        "mlx5_core 0000:0a:00.0 mlx5_0: Port: 1 Link DOWN",
        "an LKML patch (code index id 31974936594)",
        ints=("port",), dedup=("iface", "port"), proposed="link_down"),
)

NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(s.needle for s in SIGNATURES))
BY_ID = {s.id: s for s in SIGNATURES}


class Unknown(dict):
    """Fields for ``str.format_map``: one the message did not have prints as "?"."""

    def __missing__(self, key):
        return "?"


def classify(text: str) -> tuple[Signature, dict] | None:
    """The first signature that matches ``text`` and its attributes, or None."""
    for sig in SIGNATURES:
        if sig.needle in text:       # (Signature.match's own first test, without a call per signature)
            attrs = sig.match(text)
            if attrs is not None:
                return sig, attrs
    return None


def xid_info(code: int) -> tuple[str, str, str]:
    return XID.get(code, XID_UNKNOWN)


def summarize(sig: Signature, attrs: dict) -> str:
    return sig.summary.format_map(Unknown(attrs))
