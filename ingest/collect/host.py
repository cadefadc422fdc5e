"""Host facts and clock anchors, written in the forms ``ingest/formats/host_info.py`` reads.

An anchor is one reading of ``/proc/uptime`` (CLOCK_BOOTTIME, 10 ms) next to the wall clock
(``date +%s.%N`` form: epoch seconds with 9 decimals), taken by one process back to back:
REALTIME is read just before and just after the uptime read and the midpoint is written, so
the pair is as close as two reads can be (tens of µs). The three kernel clocks
(REALTIME, MONOTONIC, BOOTTIME) are read at the same moment for the manifest: printk and
perf use a clock that stops during suspend (≈ MONOTONIC) while uptime is BOOTTIME, and
``boottime - monotonic`` tells whether the two differ on this host.

The anchors file holds pairs separated by a blank line (``uptime`` line, then the epoch
line): the host-info parser pairs each uptime line with the nearest wall line, so each pair
must be nearer to its own epoch line (1 line) than to the previous pair's (2 lines).
"""
from __future__ import annotations

import os
import socket
import time

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
PAIRS_PER_FILE = 120          # the host-info parser reads files of at most 400 non-blank lines


def read_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def anchor() -> dict:
    """One uptime/wall pair and the three kernel clocks, read back to back."""
    r1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    up = read_text("/proc/uptime")
    r2 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    r3 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    wall = (r1 + r2) // 2
    return {"uptime": (up or "").strip() or None, "wall_ns": wall, "read_ns": r2 - r1,
            # the clocks at one instant (REALTIME midway between the two reads around them)
            "realtime_ns": (r2 + r3) // 2, "monotonic_ns": mono, "boottime_ns": boot}


def epoch_text(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def anchors_files(anchors: list[dict]) -> list[str]:
    """The text of ``host/anchors*.txt``: pairs of ``/proc/uptime`` and ``date +%s.%N``."""
    pairs = [f"{a['uptime']}\n{epoch_text(a['wall_ns'])}\n" for a in anchors if a.get("uptime")]
    return ["\n".join(pairs[i:i + PAIRS_PER_FILE]) for i in range(0, len(pairs), PAIRS_PER_FILE)]


def date_c(ns: int | None = None, zone: str | None = None) -> str:
    """``date`` in the C locale (``Sun Nov 29 13:28:06 UTC 2026``), in the host's local time."""
    t = (ns if ns is not None else time.time_ns()) / 1e9
    lt = time.localtime(t)
    abbr = zone or time.strftime("%Z", lt) or "UTC"
    return (f"{WEEKDAYS[lt.tm_wday]} {MONTHS[lt.tm_mon - 1]} {lt.tm_mday:2d} "
            f"{lt.tm_hour:02d}:{lt.tm_min:02d}:{lt.tm_sec:02d} {abbr} {lt.tm_year}")


def time_zone() -> tuple[str, str]:
    """(IANA zone or UTC, where it came from)."""
    tz = os.environ.get("TZ")
    if tz:
        z = tz.lstrip(":")
        if z.startswith("/"):
            z = z.split("zoneinfo/", 1)[-1]
        return _norm(z), "TZ environment variable"
    t = read_text("/etc/timezone")
    if t and t.strip():
        return _norm(t.strip().splitlines()[0]), "/etc/timezone"
    try:
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            return _norm(link.split("zoneinfo/", 1)[1]), "/etc/localtime"
    except OSError:
        pass
    if time.timezone == 0 and not time.daylight:
        return "UTC", "the C library's zone (UTC offset 0)"
    return time.tzname[0] or "UTC", "the C library's zone name"


def _norm(z: str) -> str:
    return "UTC" if z in ("Etc/UTC", "Etc/UCT", "UCT", "Etc/Zulu", "Zulu", "Etc/Universal", "Universal",
                          "Etc/GMT", "GMT", "Etc/GMT0", "GMT0", "Etc/Greenwich") else z


def btime() -> int | None:
    t = read_text("/proc/stat")
    for line in (t or "").splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def facts() -> dict:
    u = os.uname()
    zone, zone_from = time_zone()
    host = socket.gethostname() or u.nodename
    short = host.split(".")[0] or "host"
    boot_id = (read_text("/proc/sys/kernel/random/boot_id") or "").strip() or None
    return {
        "hostname": short, "fqdn": host, "boot_id": boot_id, "kernel": u.release,
        "uname_a": f"{u.sysname} {u.nodename} {u.release} {u.version} {u.machine}",
        "time_zone": zone, "time_zone_from": zone_from, "btime": btime(),
        "cpus": os.cpu_count(), "page_size": os.sysconf("SC_PAGE_SIZE"),
    }


def host_files(f: dict, last_anchor_ns: int | None = None) -> dict[str, str]:
    """``host/*`` files of the bundle (relative name -> text)."""
    out = {"hostname": f["hostname"] + "\n", "uname_a": f["uname_a"] + "\n"}
    if f.get("boot_id"):
        out["boot_id"] = f["boot_id"] + "\n"
    if f.get("btime") is not None:
        out["btime"] = f"btime {f['btime']}\n"
    # `date` names the zone for local-time strings (1 s: never used as a clock anchor here)
    out["date"] = date_c(last_anchor_ns) + "\n"
    return out
