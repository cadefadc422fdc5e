"""host_info: small host files that anchor clocks and name the host.

Collectors (and people) save the output of a few commands next to the logs:
``cat /proc/uptime``, ``date`` in its various forms, ``/proc/stat`` (for
``btime``), ``/proc/sys/kernel/random/boot_id``, ``hostname``, ``uname -a``,
``timedatectl``. Each may be its own file or several may be concatenated in one
(``cat /proc/uptime; date +%s.%N > anchors.txt``). Every non-blank line of the
file must match one of the grammars below, otherwise the file is not ours.

What is produced
----------------
* ``anchors``: an ``uptime`` reading next to a wall reading in the same file
  becomes an ``uptime_date`` anchor (boot clock <-> wall clock); ``btime`` becomes
  a ``btime`` anchor (boot clock 0 <-> wall ``btime``, 1 s resolution).
* ``facts``: ``hostname``, ``boot_id``, ``kernel``, ``time_zone``, and the single
  readings ``reading.boottime_ns`` / ``reading.wall_ns`` (with the file's tag) so
  that analysis can pair an ``uptime.start`` file with a ``date.start`` file.

Clock notes: ``/proc/uptime`` is CLOCK_BOOTTIME (10 ms resolution); the perf and
printk clocks do not advance during suspend, so the two agree only on hosts
that never suspended (servers). ``btime`` is REALTIME - BOOTTIME at read time,
truncated to whole seconds.
"""
from __future__ import annotations

import re

from ..model import CLOCK_BOOT, CLOCK_NONE
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import (MONTH_RE, MONTHS, NS, WEEKDAY_RE, frac_to_ns, iso_to_ns,
                         local_ns, offset_to_seconds, utc_ns)

UPTIME = re.compile(r"^(\d+)\.(\d{2}) (\d+)\.(\d{2})$")
EPOCH = re.compile(r"^(\d{9,11})(?:\.(\d{1,9}))?$")
DATE_C = re.compile(  # `date` in the C locale: Sun Nov 29 13:11:13 UTC 2026
    rf"^{WEEKDAY_RE} ({MONTH_RE}) +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)(?:\.(\d{{1,9}}))? "
    r"(?:(AM|PM) )?([A-Za-z][A-Za-z0-9/_+-]{1,31}|[+-]\d{4}) (\d{4})$")
DATE_ISO = re.compile(  # date --iso-8601=ns / -Iseconds / --rfc-3339=ns
    r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[,.](\d{1,9}))?([+-]\d\d:?\d\d|Z)$")
DATE_RFC = re.compile(  # date -R: Sun, 29 Nov 2026 13:11:13 +0000
    rf"^{WEEKDAY_RE}, (\d{{1,2}}) ({MONTH_RE}) (\d{{4}}) (\d\d):(\d\d):(\d\d) ([+-]\d{{4}})$")
BTIME = re.compile(r"^btime (\d+)$")
PROC_STAT = re.compile(r"^(cpu\d*|intr|ctxt|processes|procs_running|procs_blocked|softirq|page|swap|disk_io)\b")
BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
UNAME = re.compile(r"^(Linux|Darwin|FreeBSD) (\S+) (\S+) (#.*)$")
TDC = re.compile(r"^\s*(Local time|Universal time|RTC time|Time zone|System clock synchronized|"
                 r"NTP service|RTC in local TZ|systemd-timesyncd\.service active|NTP synchronized|"
                 r"Network time on|DST active|Warning)\s*:\s*(.*)$")
TDC_ZONE = re.compile(r"^(\S+) \(([^,]+), ([+-]\d{4})\)$")
HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
HOSTNAME_FILES = {"hostname", "hostname.txt", "hostname.out", "hostname_-f", "hostname-f", "fqdn"}
_EPOCH_MIN, _EPOCH_MAX = 946_684_800, 4_102_444_800   # 2000-01-01 .. 2100-01-01

_NAME_TAG = re.compile(r"^(proc_uptime|uptime|date|btime|proc_stat|stat|anchors?|clock)(?:[._-](.+?))??(?:\.txt|\.out|\.log)?$")


def _classify(line: str, hostname_ok: bool, epoch_ok: bool) -> str | None:
    if UPTIME.match(line):
        return "uptime"
    m = EPOCH.match(line)
    if m and _EPOCH_MIN <= int(m.group(1)) <= _EPOCH_MAX and (m.group(2) or epoch_ok):
        return "epoch"
    if DATE_C.match(line):
        return "date_c"
    if DATE_ISO.match(line):
        return "date_iso"
    if DATE_RFC.match(line):
        return "date_rfc"
    if BTIME.match(line):
        return "btime"
    if PROC_STAT.match(line):
        return "proc_stat"
    if BOOT_ID.match(line):
        return "boot_id"
    if UNAME.match(line):
        return "uname"
    if TDC.match(line):
        return "timedatectl"
    if hostname_ok and HOSTNAME.match(line):
        return "hostname"
    return None


# Name parts that say how a reading was printed, not when it was taken.
_FORMAT_WORDS = {"epoch", "iso", "iso8601", "iso-8601", "rfc", "rfc3339", "rfc2822", "r", "ns", "s", "n",
                 "utc", "ctime", "default", "seconds", "nanoseconds"}


def _tag(head_name: str) -> str:
    """Pairing tag from a file name: what distinguishes the moment the reading was taken.

    ``uptime.start`` -> 'start', ``date`` -> '', ``date_epoch`` -> '' (a format, not a moment),
    ``date_iso.end`` -> 'end'.
    """
    m = _NAME_TAG.match(head_name)
    if not m:
        return head_name
    parts = [p for p in re.split(r"[._-]", m.group(2) or "") if p and p.lower() not in _FORMAT_WORDS]
    return ".".join(parts)


class HostInfoParser(Parser):
    name = "host_info"
    kind = "host_info"
    priority = 20
    clock_domain = CLOCK_NONE   # its rows are anchors and facts, not timed events
    description = "/proc/uptime, date, /proc/stat btime, boot_id, hostname, uname -a, timedatectl"

    @classmethod
    def detect(cls, head: Head) -> bool:
        if not head.complete:          # these files are tiny; a big file is something else
            return False
        lines = head.nonblank()
        if not lines or len(lines) > 400:
            return False
        name = head.name
        hostname_ok = name in HOSTNAME_FILES or name.endswith("/hostname")
        epoch_ok = "date" in name or "time" in name or "epoch" in name
        kinds = [_classify(ln.strip() if not TDC.match(ln) else ln, hostname_ok, epoch_ok) for ln in lines]
        if any(k is None for k in kinds):
            return False
        if set(kinds) == {"proc_stat"}:
            return False              # /proc/stat without btime tells us nothing
        return True

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        name = ctx.rel.rsplit("/", 1)[-1].lower()
        if name.endswith(".gz"):
            name = name[:-3]
        hostname_ok = name in HOSTNAME_FILES
        epoch_ok = "date" in name or "time" in name or "epoch" in name
        tag = _tag(name)
        # readings in file order: (lineno, kind, value_ns, resolution_ns, wall_is_utc, text)
        boot_reads: list[tuple[int, int, int, str]] = []
        wall_reads: list[tuple[int, int, int, bool, str]] = []
        zone: str | None = None
        for lineno, raw in ctx.lines():
            line = raw.strip()
            if not line:
                continue
            kind = _classify(line if not TDC.match(raw) else raw, hostname_ok, epoch_ok)
            if kind is None:
                sink.issue("bad_line", "line matches none of the host-info grammars", lineno, raw)
                continue
            if kind == "uptime":
                m = UPTIME.match(line)
                # uptime is truncated to 10 ms: the true reading is in [v, v+10ms)
                v = int(m.group(1)) * NS + int(m.group(2)) * 10_000_000
                boot_reads.append((lineno, v + 5_000_000, 5_000_000, raw))
                sink.fact("reading.boottime_ns", v + 5_000_000, lineno)
            elif kind == "epoch":
                m = EPOCH.match(line)
                v = int(m.group(1)) * NS + frac_to_ns(m.group(2))
                res = 1 if (m.group(2) and len(m.group(2)) >= 6) else NS
                wall_reads.append((lineno, v, res, True, raw))
            elif kind == "date_c":
                m = DATE_C.match(line)
                mon, day, hh, mm, ss, frac, ampm, z, year = m.groups()
                h = int(hh)
                if ampm:
                    h = h % 12 + (12 if ampm == "PM" else 0)
                is_utc = z.upper() in ("UTC", "GMT", "Z", "UCT") or z.startswith(("+", "-"))
                if z.startswith(("+", "-")):
                    v = utc_ns(int(year), MONTHS[mon], int(day), h, int(mm), int(ss),
                               frac_to_ns(frac)) - offset_to_seconds(z) * NS
                else:
                    v = local_ns(int(year), MONTHS[mon], int(day), h, int(mm), int(ss),
                                 frac_to_ns(frac), "UTC" if is_utc else ctx.time_zone)
                zone = zone or z
                sink.fact("time_zone", z, lineno)
                wall_reads.append((lineno, v, 1 if frac else NS, is_utc or ctx.time_zone is not None, raw))
            elif kind == "date_iso":
                m = DATE_ISO.match(line)
                v = iso_to_ns(m.group(1), m.group(2), m.group(3), m.group(4))
                off = m.group(4)
                sink.fact("utc_offset", "+00:00" if off == "Z" else off, lineno)
                wall_reads.append((lineno, v, 1 if m.group(3) and len(m.group(3)) >= 6 else NS, True, raw))
            elif kind == "date_rfc":
                m = DATE_RFC.match(line)
                day, mon, year, hh, mm, ss, off = m.groups()
                v = utc_ns(int(year), MONTHS[mon], int(day), int(hh), int(mm), int(ss)) - offset_to_seconds(off) * NS
                sink.fact("utc_offset", off, lineno)
                wall_reads.append((lineno, v, NS, True, raw))
            elif kind == "btime":
                b = int(BTIME.match(line).group(1))
                sink.add("anchors", name="btime", domain=CLOCK_BOOT, local_ns=0, wall_ns=b * NS,
                         wall_is_utc=True, uncertainty_ns=NS, line=lineno, text=raw)
                sink.fact("btime", b, lineno)
            elif kind == "boot_id":
                sink.fact("boot_id", line, lineno)
            elif kind == "uname":
                m = UNAME.match(line)
                sink.fact("hostname", m.group(2), lineno)
                sink.fact("kernel", m.group(3), lineno)
                ctx.host = ctx.host or m.group(2)
            elif kind == "timedatectl":
                m = TDC.match(raw)
                key, val = m.group(1), m.group(2).strip()
                if key == "Time zone":
                    z = TDC_ZONE.match(val)
                    if z:
                        sink.fact("time_zone", z.group(1), lineno)
                        sink.fact("utc_offset", z.group(3), lineno)
                        zone = z.group(1)
                elif key in ("System clock synchronized", "NTP synchronized"):
                    sink.fact("ntp_synchronized", val, lineno)
            elif kind == "hostname":
                sink.fact("hostname", line, lineno)
                ctx.host = ctx.host or line
            # proc_stat lines other than btime carry nothing we need
        for lineno, v, res, is_utc, raw in wall_reads:
            sink.fact("reading.wall_ns", v, lineno)
            sink.fact("reading.wall_res_ns", res, lineno)
        if wall_reads or boot_reads:
            sink.fact("reading.tag", tag)
        # Pair each uptime reading with the nearest wall reading in the same file.
        for lineno, b, b_unc, raw in boot_reads:
            if not wall_reads:
                break
            w = min(wall_reads, key=lambda r: abs(r[0] - lineno))
            gap_lines = abs(w[0] - lineno)
            unc = b_unc + (w[2] // 2 if w[2] > 1 else 0) + 5_000_000 * gap_lines
            sink.add("anchors", name="uptime_date", domain=CLOCK_BOOT, local_ns=b,
                     wall_ns=w[1] + (w[2] // 2 if w[2] > 1 else 0), wall_is_utc=w[3],
                     uncertainty_ns=unc, line=lineno, text=f"{raw}\n{w[4]}")
        # The file's rows are anchors (their times are in the anchors table), not timed events.
        ctx.clock_domain = CLOCK_NONE
        if zone:
            ctx.attrs["time_zone"] = zone


PARSERS = (HostInfoParser,)
