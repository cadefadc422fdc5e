"""Small, exact helpers for the time strings found in bundles.

All results are integer nanoseconds since the Unix epoch. Local-time strings
without a zone are converted with an explicit zone name (IANA, e.g.
``Europe/Berlin``, or a fixed offset like ``+02:00``); callers get the zone
from the bundle (manifest, ``date`` output) and default to UTC.
"""
from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NS = 1_000_000_000
MAX_SECONDS = 9_000_000_000   # the largest seconds count read as a time (epoch: year 2255; its ns fit Int64)
MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTH_RE = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"

# Month abbreviations as glibc's %b writes them in other locales (what syslog and journalctl print
# under LANG=de_DE, fr_FR, ...), lower-cased, without a trailing dot: month number. No
# abbreviation names two different months across these locales.
LOCALE_MONTHS: dict[str, int] = {}
for _names in (
        "jan feb mar apr may jun jul aug sep oct nov dec",                  # en (any case)
        "jan feb mär apr mai jun jul aug sep okt nov dez",                  # de
        "janv févr mars avr mai juin juil août sept oct nov déc",           # fr
        "ene feb mar abr may jun jul ago sep oct nov dic",                  # es
        "gen feb mar apr mag giu lug ago set ott nov dic",                  # it
        "jan fev mar abr mai jun jul ago set out nov dez",                  # pt
        "jan feb mrt apr mei jun jul aug sep okt nov dec",                  # nl
        "sty lut mar kwi maj cze lip sie wrz paź lis gru",                  # pl
        "янв фев мар апр мая июн июл авг сен окт ноя дек",                  # ru
        "1月 2月 3月 4月 5月 6月 7月 8月 9月 10月 11月 12月"):               # zh, ja
    for _i, _m in enumerate(_names.split(), 1):
        assert LOCALE_MONTHS.setdefault(_m, _i) == _i, _m
# any of them as a regex (case-insensitive, the dot some locales add): longest first
LOCALE_MONTH_RE = "(?i:" + "|".join(sorted(map(re.escape, LOCALE_MONTHS), key=len, reverse=True)) + r")\.?"
WEEKDAY_RE = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

# Zone abbreviations that name one offset unambiguously.
_UTC_NAMES = {"UTC", "GMT", "Z", "UCT", "Etc/UTC", "Etc/GMT", "Universal", "Zulu"}
_OFFSET_RE = re.compile(r"^([+-])(\d\d):?(\d\d)$")


def frac_to_ns(frac: str | None) -> int:
    """'123' (fraction digits after the point) -> nanoseconds."""
    if not frac:
        return 0
    return int((frac + "000000000")[:9])


def utc_ns(year, month, day, hour, minute, second, frac_ns: int = 0) -> int:
    return calendar.timegm((year, month, day, hour, minute, second)) * NS + frac_ns


@lru_cache(maxsize=256)
def tzinfo_for(zone: str | None):
    """tzinfo for an IANA name, a UTC alias or a fixed offset; None if unknown."""
    if zone is None or zone in _UTC_NAMES:
        return timezone.utc
    m = _OFFSET_RE.match(zone)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def local_ns(year, month, day, hour, minute, second, frac_ns: int = 0,
             zone: str | None = None) -> int:
    """A local wall-clock reading in ``zone`` -> UTC epoch ns."""
    tz = tzinfo_for(zone) or timezone.utc
    if tz is timezone.utc:
        return utc_ns(year, month, day, hour, minute, second, frac_ns)
    dt = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    return int(dt.timestamp()) * NS + frac_ns


def offset_to_seconds(off: str) -> int:
    """'+0200', '+02:00', '-0530', 'Z' -> seconds east of UTC."""
    if off in ("Z", "z"):
        return 0
    m = _OFFSET_RE.match(off)
    if not m:
        raise ValueError(f"not a UTC offset: {off!r}")
    s = int(m.group(2)) * 3600 + int(m.group(3)) * 60
    return -s if m.group(1) == "-" else s


def iso_to_ns(date: str, time: str, frac: str | None, off: str | None,
              zone: str | None = None) -> int:
    """ISO-8601 pieces (``2026-05-05``, ``06:16:47``, fraction, offset) -> UTC ns."""
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, s = (int(x) for x in time.split(":"))
    if off:
        return utc_ns(y, mo, d, h, mi, s, frac_to_ns(frac)) - offset_to_seconds(off) * NS
    return local_ns(y, mo, d, h, mi, s, frac_to_ns(frac), zone)


def fmt_utc(ns: int | None) -> str | None:
    """UTC epoch ns -> ISO-8601 with microseconds and a Z."""
    if ns is None:
        return None
    sec, rem = divmod(int(ns), NS)
    return datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{rem // 1000:06d}Z"


def fmt_hms(ns: int | None, unknown: str = "?") -> str:
    """``HH:MM:SS.mmm`` of a UTC epoch-ns time (the time of day in summaries), ``unknown`` for None."""
    return fmt_utc(ns)[11:23] if ns is not None else unknown
