"""dmesg: the kernel ring buffer as printed by ``dmesg`` (first cut).

Two variants are read here:

* raw ``dmesg`` — ``[ 1234.567890] text``: seconds.microseconds on the printk
  clock (``local_clock()``, ns since boot, the same clock perf samples with).
  Optional prefixes: ``<6>`` (syslog priority, as in pstore dumps) and the
  ``--decode`` form ``kern  :info  : ``. Clock domain ``boot``.
* ``dmesg -T`` — ``[Sun Nov 29 13:11:13 2026] text``: the same records
  converted to local wall time *by dmesg at collection time* (boot time
  estimated then, suspend not accounted for, 1 s resolution). Clock domain
  ``wall``; the conversion uses the bundle's time zone.

Every record becomes a ``kernel`` event. OOM-killer records are typed:
``Killed process N (comm) ...`` -> kind ``oom_kill`` with the victim and its RSS;
``... invoked oom-killer`` -> ``oom_invoked``; ``oom-kill:constraint=...`` ->
``oom_summary``. Lines that are neither records nor continuations are counted
as parse issues. (The full kernel-log parser with multi-line records and the
signature library is its own module; this one keeps the seam honest.)
"""
from __future__ import annotations

import re

from ..model import CLOCK_BOOT, CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import MONTH_RE, MONTHS, NS, WEEKDAY_RE, local_ns

_PRIO = r"(?:<(\d)>)?"
_DECODE = r"(?:(\w+)\s*:\s*(emerg|alert|crit|err|warn|notice|info|debug)\s*: )?"
RAW = re.compile(rf"^{_PRIO}{_DECODE}\[\s*(\d+)\.(\d{{6}})\] ?(.*)$")
CTIME = re.compile(
    rf"^{_DECODE}\[{WEEKDAY_RE} ({MONTH_RE}) +(\d{{1,2}}) (\d\d):(\d\d):(\d\d) (\d{{4}})\] ?(.*)$")

KILLED = re.compile(
    r"(?:(Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): )?"
    r"Killed process (\d+) \((.*?)\)"
    r"(?: total-vm:(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB(?:, shmem-rss:(\d+)kB)?)?"
    r"(?:,? UID:(\d+))?(?: pgtables:(\d+)kB)?(?: oom_score_adj:(-?\d+))?")
INVOKED = re.compile(r"^(.*?) invoked oom-killer: (?:gfp_mask=(\S+),\s+)?(?:nodemask=\S+,\s+)?"
                     r"(?:order=(-?\d+),\s+)?oom_score_adj=(-?\d+)")
SUMMARY = re.compile(r"^oom-kill:(.*)$")
SUBSYS = re.compile(r"^([A-Za-z][\w.\-/ ]{0,38}?)(?: \([^)]{1,40}\))?(?:\[\d+\])?: ")

_SEV = {"0": "emerg", "1": "alert", "2": "crit", "3": "error", "4": "warning",
        "5": "notice", "6": "info", "7": "debug",
        "emerg": "emerg", "alert": "alert", "crit": "crit", "err": "error", "warn": "warning",
        "notice": "notice", "info": "info", "debug": "debug"}


def _name(text: str) -> str:
    m = SUBSYS.match(text)
    return m.group(1) if m else "kernel"


def _typed(text: str) -> tuple[str | None, str | None, dict]:
    """(kind, name, attrs) for the OOM records this first cut knows."""
    m = KILLED.search(text)
    if m:
        scope, pid, comm, vm, anon, file_, shmem, uid, pgt, adj = m.groups()
        attrs = {"victim_pid": int(pid), "victim_comm": comm,
                 "scope": "memcg" if scope and scope.startswith("Memory cgroup") else "global"}
        for k, v in (("total_vm_kb", vm), ("anon_rss_kb", anon), ("file_rss_kb", file_),
                     ("shmem_rss_kb", shmem), ("uid", uid), ("pgtables_kb", pgt),
                     ("oom_score_adj", adj)):
            if v is not None:
                attrs[k] = int(v)
        return "oom_kill", "oom_kill", attrs
    m = INVOKED.match(text)
    if m:
        attrs = {"comm": m.group(1), "gfp_mask": m.group(2), "oom_score_adj": int(m.group(4))}
        if m.group(3) is not None:
            attrs["order"] = int(m.group(3))
        return None, "oom_invoked", attrs
    m = SUMMARY.match(text)
    if m:
        attrs = {}
        for part in m.group(1).split(","):
            k, _, v = part.partition("=")
            if k:
                attrs[k] = v
        if "pid" in attrs and attrs["pid"].strip().isdigit():
            attrs["victim_pid"] = int(attrs["pid"])
        return None, "oom_summary", attrs
    return None, None, {}


class _DmesgBase(Parser):
    kind = "dmesg"
    pattern: re.Pattern

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = head.nonblank(300)
        if len(lines) < 1:
            return False
        hits = sum(1 for ln in lines if cls.pattern.match(ln))
        # continuation lines (call traces without timestamps) are rare in dmesg
        return hits >= 1 and hits / len(lines) >= 0.6

    def _time(self, m: re.Match, ctx: ParseContext) -> int:
        raise NotImplementedError

    def _groups(self, m: re.Match) -> tuple[str | None, str]:
        raise NotImplementedError

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        last_ts = None
        last_event_line = None
        for lineno, line in ctx.lines():
            m = self.pattern.match(line)
            if not m:
                if not line.strip():
                    continue
                # An untimed line right after a record is its continuation.
                if last_event_line is not None and lineno == last_event_line + 1 and line[:1] in (" ", "\t"):
                    last_event_line = lineno
                    continue
                sink.issue("bad_line", f"not a {self.name} record", lineno, line)
                continue
            ts = self._time(m, ctx)
            sev, text = self._groups(m)
            kind, name, attrs = _typed(text)
            if last_ts is not None and ts < last_ts - 10 * NS and self.clock_domain == CLOCK_BOOT:
                attrs = dict(attrs, boot_restart=True)  # a reboot inside the log
            last_ts = ts
            last_event_line = lineno
            pid = attrs.get("victim_pid")
            sink.event(ts_raw_ns=ts, category="kernel", name=name or _name(text), kind=kind,
                       severity=_SEV.get(sev) if sev else None, line=lineno, text=line,
                       pid=pid, attrs=attrs or None)


class DmesgRawParser(_DmesgBase):
    name = "dmesg_raw"
    priority = 40
    clock_domain = CLOCK_BOOT
    description = "raw dmesg: [seconds.micros] on the kernel boot clock"
    pattern = RAW

    def _time(self, m, ctx):
        return int(m.group(4)) * NS + int(m.group(5)) * 1000

    def _groups(self, m):
        return (m.group(1) or m.group(3)), m.group(6)


class DmesgCtimeParser(_DmesgBase):
    name = "dmesg_ctime"
    priority = 40
    clock_domain = CLOCK_WALL
    description = "dmesg -T: local wall time computed by dmesg when it ran (1 s)"
    pattern = CTIME

    def _time(self, m, ctx):
        mon, day, hh, mm, ss, year = m.group(3), m.group(4), m.group(5), m.group(6), m.group(7), m.group(8)
        return local_ns(int(year), MONTHS[mon], int(day), int(hh), int(mm), int(ss), 0, ctx.time_zone)

    def _groups(self, m):
        return m.group(2), m.group(9)

    def parse(self, ctx: ParseContext) -> None:
        ctx.attrs["converted_by_dmesg"] = (
            "times were converted to local time by dmesg -T when it ran; they drift after suspend "
            "and have 1 s resolution")
        ctx.attrs["time_zone"] = ctx.time_zone or "UTC"
        super().parse(ctx)


PARSERS = (DmesgRawParser, DmesgCtimeParser)
