"""The one declarative table from cgroup / /proc snapshot files to metrics.

Each :class:`FileSpec` says how a file is written (its grammar) and maps its raw keys
to canonical metric names, units and kinds. Units are normalised *here*: every time
becomes nanoseconds (cgroup v1 writes ns, v2 and PSI write microseconds, quotas are
microseconds), every size bytes (``/proc`` kB x 1024), counts stay counts. A metric is a
``counter`` (monotonic; rates are derived from it, a decrease is a counter reset) or a
``gauge``.

Sources: Documentation/admin-guide/cgroup-v2.rst, Documentation/admin-guide/cgroup-v1/
{memory,cpuacct}.rst, Documentation/scheduler/sched-bwc.rst, Documentation/accounting/psi.rst,
proc(5) — as summarised in reference/FORMATS.md §5 — and the real files in tests/data/cgroup.

Derived series (computed per entity between consecutive snapshots, stamped at the later
snapshot, i.e. the rate over ``(t_prev, t]``):

==============================  ======================================  ==========
derived metric                  from                                    unit
==============================  ======================================  ==========
cpu.throttled_periods_per_s     d cpu.nr_throttled / dt                 1/s
cpu.throttled_fraction          d cpu.nr_throttled / d cpu.nr_periods   fraction
cpu.throttled_s_per_s           d cpu.throttled_ns / dt                 s/s
cpu.cores_used                  d cpu.usage_ns / dt                     cores
cpu.quota_cores                 cpu.quota_ns / cpu.period_ns (quota>0)  cores
psi.<res>.<some|full>.stall_pct d psi...total_ns / dt x 100             percent
memory.growth_bytes_per_s       d memory.usage_bytes / dt (may be < 0)  bytes/s
memory.headroom_bytes           memory.limit_bytes - memory.usage_bytes bytes
memory.failcnt_delta            d memory.failcnt                        count
memory.oom_kill_delta           d memory.oom_kill                       count
memory.oom_delta                d memory.oom (v2 memory.events oom)     count
memory.max_hits_delta           d memory.max_hits (v2 memory.events max) count
io.rbytes_per_s / io.wbytes_per_s  d io.rbytes / dt, d io.wbytes / dt   bytes/s
proc.<n>voluntary_ctxt_switches_per_s  d ... / dt                       1/s
proc.ctxt_switches_per_s        d proc.ctxt_switches / dt (both kinds)  1/s
==============================  ======================================  ==========

Besides metrics, a series reads (``_cgroup_state``): membership (``cgroup.procs``, ``tasks``,
``cgroup.threads``, ``/proc/<pid>/cgroup`` -> the ``members`` table), process states
(``/proc/<pid>/status`` -> ``proc_state`` events), freezing (-> ``cgroup_frozen`` ...
events) and settings (:data:`SETTINGS` -> facts).

A counter that goes down between two snapshots was reset (group re-created, host
rebooted, counter wrapped): no rate is derived for that pair and the reset is counted
in the source's ``attrs.counter_resets``. A memory limit of 2**60 bytes or more is
"no limit" (cgroup v1 writes PAGE_COUNTER_MAX, v2 writes ``max``): no headroom.
"""
from __future__ import annotations

from dataclasses import dataclass, field

COUNTER, GAUGE = "counter", "gauge"
UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True)
class Field:
    metric: str
    unit: str
    kind: str = GAUGE
    scale: float = 1          # raw value x scale = value in `unit`


@dataclass(frozen=True)
class FileSpec:
    grammar: str              # flat | single | cpu_max | psi | io_stat | loadavg | colon (proc status/meminfo)
    #                           | percpu | freezer | pids | tids | proc_cgroup | setting (see _cgroup_state)
    fields: dict[str, Field] = field(default_factory=dict)
    default: Field | None = None   # for keys not listed ("{key}" in the metric name is the key)
    counters: frozenset[str] = frozenset()   # keys taken by `default` that are counters


def _f(metric, unit, kind=GAUGE, scale=1):
    return Field(metric, unit, kind, scale)


C = COUNTER
_US = 1000   # µs -> ns

CPU_STAT = FileSpec("flat", {
    # v1 (ns) and v2 (µs) share the file name; the keys tell them apart
    "nr_periods": _f("cpu.nr_periods", "count", C), "nr_throttled": _f("cpu.nr_throttled", "count", C),
    "throttled_time": _f("cpu.throttled_ns", "ns", C), "nr_bursts": _f("cpu.nr_bursts", "count", C),
    "burst_time": _f("cpu.burst_ns", "ns", C),
    "usage_usec": _f("cpu.usage_ns", "ns", C, _US), "user_usec": _f("cpu.user_ns", "ns", C, _US),
    "system_usec": _f("cpu.system_ns", "ns", C, _US), "throttled_usec": _f("cpu.throttled_ns", "ns", C, _US),
    "burst_usec": _f("cpu.burst_ns", "ns", C, _US),
    "core_sched.force_idle_usec": _f("cpu.force_idle_ns", "ns", C, _US),
    "nr_bursts_usec": _f("cpu.nr_bursts", "count", C),
})

_MEM_STAT_COUNTERS = frozenset(
    "pgpgin pgpgout pgfault pgmajfault pgrefill pgscan pgsteal pgactivate pgdeactivate pglazyfree "
    "pglazyfreed pgscan_kswapd pgscan_direct pgscan_khugepaged pgsteal_kswapd pgsteal_direct "
    "pgsteal_khugepaged pgpromote_success pgdemote_kswapd pgdemote_direct pgdemote_khugepaged "
    "workingset_refault workingset_activate workingset_restore workingset_nodereclaim "
    "workingset_refault_anon workingset_refault_file workingset_activate_anon workingset_activate_file "
    "workingset_restore_anon workingset_restore_file thp_fault_alloc thp_collapse_alloc thp_swpout "
    "thp_swpout_fallback zswpin zswpout zswpwb swpin swpout".split())
MEMORY_STAT = FileSpec(
    "flat", {}, default=_f("memory.stat.{key}", "bytes"),
    counters=_MEM_STAT_COUNTERS | frozenset("total_" + k for k in _MEM_STAT_COUNTERS))


def _psi(res: str) -> FileSpec:
    return FileSpec("psi", {"res": _f(res, "-")})


FILES: dict[str, FileSpec] = {
    # cpu
    "cpu.stat": CPU_STAT,
    "cpu.stat.local": FileSpec("flat", {"throttled_usec": _f("cpu.local_throttled_ns", "ns", C, _US)}),
    "cpu.max": FileSpec("cpu_max"),
    "cpu.weight": FileSpec("single", {"": _f("cpu.weight", "-")}),
    "cpu.shares": FileSpec("single", {"": _f("cpu.shares", "-")}),
    "cpu.cfs_quota_us": FileSpec("single", {"": _f("cpu.quota_ns", "ns", GAUGE, _US)}),
    "cpu.cfs_period_us": FileSpec("single", {"": _f("cpu.period_ns", "ns", GAUGE, _US)}),
    "cpuacct.usage": FileSpec("single", {"": _f("cpu.usage_ns", "ns", C)}),
    "cpuacct.stat": FileSpec("flat", {"user": _f("cpu.user_ticks", "USER_HZ ticks", C),
                                      "system": _f("cpu.system_ticks", "USER_HZ ticks", C)}),
    # memory v1
    "memory.usage_in_bytes": FileSpec("single", {"": _f("memory.usage_bytes", "bytes")}),
    "memory.limit_in_bytes": FileSpec("single", {"": _f("memory.limit_bytes", "bytes")}),
    "memory.max_usage_in_bytes": FileSpec("single", {"": _f("memory.max_usage_bytes", "bytes")}),
    "memory.failcnt": FileSpec("single", {"": _f("memory.failcnt", "count", C)}),
    "memory.kmem.usage_in_bytes": FileSpec("single", {"": _f("memory.kmem_usage_bytes", "bytes")}),
    "memory.memsw.usage_in_bytes": FileSpec("single", {"": _f("memory.memsw_usage_bytes", "bytes")}),
    "memory.oom_control": FileSpec("flat", {
        "oom_kill_disable": _f("memory.oom_kill_disable", "-"), "under_oom": _f("memory.under_oom", "-"),
        "oom_kill": _f("memory.oom_kill", "count", C)}),
    "memory.stat": MEMORY_STAT,
    # memory v2
    "memory.current": FileSpec("single", {"": _f("memory.usage_bytes", "bytes")}),
    "memory.max": FileSpec("single", {"": _f("memory.limit_bytes", "bytes")}),
    "memory.high": FileSpec("single", {"": _f("memory.high_bytes", "bytes")}),
    "memory.peak": FileSpec("single", {"": _f("memory.max_usage_bytes", "bytes")}),
    "memory.swap.current": FileSpec("single", {"": _f("memory.swap_bytes", "bytes")}),
    "memory.events": FileSpec("flat", {
        "low": _f("memory.low_hits", "count", C), "high": _f("memory.high_hits", "count", C),
        "max": _f("memory.max_hits", "count", C), "oom": _f("memory.oom", "count", C),
        "oom_kill": _f("memory.oom_kill", "count", C), "oom_group_kill": _f("memory.oom_group_kill", "count", C)}),
    "memory.events.local": FileSpec("flat", {
        "low": _f("memory.local.low_hits", "count", C), "high": _f("memory.local.high_hits", "count", C),
        "max": _f("memory.local.max_hits", "count", C), "oom": _f("memory.local.oom", "count", C),
        "oom_kill": _f("memory.local.oom_kill", "count", C),
        "oom_group_kill": _f("memory.local.oom_group_kill", "count", C)}),
    # pids, io
    "pids.current": FileSpec("single", {"": _f("pids.current", "count")}),
    "pids.max": FileSpec("single", {"": _f("pids.max", "count")}),
    "pids.events": FileSpec("flat", {"max": _f("pids.max_hits", "count", C)}),
    "io.stat": FileSpec("io_stat", {
        "rbytes": _f("io.rbytes", "bytes", C), "wbytes": _f("io.wbytes", "bytes", C),
        "rios": _f("io.rios", "count", C), "wios": _f("io.wios", "count", C),
        "dbytes": _f("io.dbytes", "bytes", C), "dios": _f("io.dios", "count", C)}),
    # pressure (cgroup v2 files; /proc/pressure/<res> are resolved to these)
    "cpu.pressure": _psi("cpu"), "memory.pressure": _psi("memory"), "io.pressure": _psi("io"),
    "irq.pressure": _psi("irq"),
    # per-CPU usage (v1 cpuacct: one ns counter per CPU, space-separated): entity '<cgroup> cpu=N'
    "cpuacct.usage_percpu": FileSpec("percpu", {"": _f("cpu.percpu_usage_ns", "ns", C)}),
    "cgroup.stat": FileSpec("flat", {}, default=_f("cgroup.stat.{key}", "count")),
    # freezing: v1 freezer.state THAWED/FREEZING/FROZEN -> 0/0.5/1; v2 cgroup.events frozen 0|1
    # (0.5 when cgroup.freeze asks for it and the same snapshot's cgroup.events says not yet)
    "freezer.state": FileSpec("freezer", {"": _f("freezer.frozen", "fraction")}),
    "freezer.self_freezing": FileSpec("single", {"": _f("freezer.self_freezing", "-")}),
    "freezer.parent_freezing": FileSpec("single", {"": _f("freezer.parent_freezing", "-")}),
    "cgroup.events": FileSpec("flat", {"populated": _f("cgroup.populated", "-"),
                                       "frozen": _f("freezer.frozen", "fraction")}),
    "cgroup.freeze": FileSpec("single", {"": _f("freezer.freeze_requested", "-")}),
    # membership (members table, not metrics): pids of the cgroup, tids of the cgroup
    "cgroup.procs": FileSpec("pids"), "tasks": FileSpec("tids"), "cgroup.threads": FileSpec("tids"),
}

# Settings: read as facts (key = file name, value = '<cgroup>: <text>') when first seen and when
# they change; no metric.
SETTINGS = frozenset(
    "cgroup.controllers cgroup.subtree_control cgroup.type cgroup.max.depth cgroup.max.descendants "
    "cgroup.pressure cgroup.clone_children cgroup.sane_behavior notify_on_release release_agent "
    "cpu.idle cpu.rt_period_us cpu.rt_runtime_us cpu.cfs_burst_us cpu.max.burst cpu.weight.nice "
    "cpu.uclamp.min cpu.uclamp.max cpuset.cpus cpuset.mems cpuset.cpus.effective cpuset.mems.effective "
    "cpuset.cpus.partition cpuset.cpu_exclusive cpuset.mem_exclusive memory.use_hierarchy "
    "memory.swappiness memory.oom.group memory.move_charge_at_immigrate memory.soft_limit_in_bytes "
    "memory.min memory.low memory.swap.max memory.zswap.max io.weight io.max pids.max "
    "memory.memsw.limit_in_bytes memory.kmem.limit_in_bytes memory.kmem.tcp.limit_in_bytes".split())
for _n in SETTINGS:
    FILES.setdefault(_n, FileSpec("setting"))

# Host files, by their path under /proc.
PROC_FILES: dict[str, FileSpec] = {
    "pressure/cpu": _psi("cpu"), "pressure/memory": _psi("memory"), "pressure/io": _psi("io"),
    "pressure/irq": _psi("irq"),
    "loadavg": FileSpec("loadavg"),
    "meminfo": FileSpec("colon", {k: _f(f"meminfo.{k}_bytes", "bytes", GAUGE, 1024) for k in (
        "MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree", "Dirty",
        "AnonPages", "Shmem", "Slab", "Committed_AS")}),
    "status": FileSpec("colon", {   # /proc/<pid>/status (+ proc.ctxt_switches: the two summed)
        "voluntary_ctxt_switches": _f("proc.voluntary_ctxt_switches", "count", C),
        "nonvoluntary_ctxt_switches": _f("proc.nonvoluntary_ctxt_switches", "count", C),
        "VmRSS": _f("proc.vm_rss_bytes", "bytes", GAUGE, 1024), "Threads": _f("proc.threads", "count")}),
    "cgroup": FileSpec("proc_cgroup"),   # /proc/<pid>/cgroup: members rows
}

PSI_KEYS = {"avg10": ("avg10", "percent", GAUGE, 1), "avg60": ("avg60", "percent", GAUGE, 1),
            "avg300": ("avg300", "percent", GAUGE, 1), "total": ("total_ns", "ns", COUNTER, _US)}
LOADAVG = (("host.load1", "-"), ("host.load5", "-"), ("host.load15", "-"))

# Rates: counter metric -> (derived metric, factor applied to d value / d t[s], unit)
RATES: dict[str, tuple[str, float, str]] = {
    "cpu.nr_throttled": ("cpu.throttled_periods_per_s", 1.0, "1/s"),
    "cpu.throttled_ns": ("cpu.throttled_s_per_s", 1e-9, "s/s"),
    "cpu.usage_ns": ("cpu.cores_used", 1e-9, "cores"),
    "memory.usage_bytes": ("memory.growth_bytes_per_s", 1.0, "bytes/s"),
    "io.rbytes": ("io.rbytes_per_s", 1.0, "bytes/s"),
    "io.wbytes": ("io.wbytes_per_s", 1.0, "bytes/s"),
    "proc.voluntary_ctxt_switches": ("proc.voluntary_ctxt_switches_per_s", 1.0, "1/s"),
    "proc.nonvoluntary_ctxt_switches": ("proc.nonvoluntary_ctxt_switches_per_s", 1.0, "1/s"),
    "proc.ctxt_switches": ("proc.ctxt_switches_per_s", 1.0, "1/s"),
}
for _r in ("cpu", "memory", "io", "irq"):
    for _k in ("some", "full"):
        RATES[f"psi.{_r}.{_k}.total_ns"] = (f"psi.{_r}.{_k}.stall_pct", 1e-9 * 100, "percent")
# Deltas: counter metric -> derived metric (count per interval)
DELTAS: dict[str, str] = {
    "memory.failcnt": "memory.failcnt_delta", "memory.oom_kill": "memory.oom_kill_delta",
    "memory.oom": "memory.oom_delta", "memory.max_hits": "memory.max_hits_delta",
}
# Gauges that may go down: no counter-reset logic for them.
SIGNED = frozenset({"memory.usage_bytes"})
