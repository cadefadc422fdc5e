"""Clock alignment: per host and clock domain, an offset to UTC, with its uncertainty.

Every source is on one clock domain of its host (``ingest.model``). This module
builds, per (host, domain), ``utc_ns = ts_raw_ns + offset_ns`` with an
uncertainty and the method that found it, stores it in ``clock_map`` and fills
``ts_utc_ns`` of every row whose source could be placed (for an incident whose heavy tables are
attached Parquet, ``server/store.py``: the per-source offsets its views compute it from).

Methods, best first (for the ``boot`` domain):

0. ``perf reference time``: ``perf record -k CLOCK_MONOTONIC`` writes the
   monotonic clock and the time of day read together (``# reference time``).
   Exact for perf's own samples (1 ms stated).
1. ``uptime+date``: a ``/proc/uptime`` reading next to a ``date`` reading. The
   offset is ``wall - boottime`` of each pair; with several pairs the median is
   used and the uncertainty is the larger of the best pair's own uncertainty and
   the spread of the pairs.
2. ``journald`` realtime/monotonic pairs of the boot the bundle was collected in.
3. ``btime``: ``/proc/stat`` btime (boot instant in wall time, whole seconds):
   offset = btime, uncertainty 1 s.
4. raw ``dmesg`` next to ``dmesg -T``: matching records bound the offset to the
   intersection of ``[T - raw, T + 1 s - raw)`` (see :func:`_dmesg_t_pairs`).
5. a process death seen by the kernel (OOM kill, perf's exit record) and in
   the launcher's report of the failed worker (see :func:`_pid_deaths`).
6. none: the domain stays unplaced; its rows keep ``ts_utc_ns`` null and the
   report says so.

Every one of these reads CLOCK_MONOTONIC or CLOCK_BOOTTIME, but the kernel stamps its log with
printk's clock (the oscillator's raw ``sched_clock``), which parts from them at the
oscillator's frequency error: measured on the recording VM with lines written to ``/dev/kmsg``
between two clock readings, printk ran 37.9 ms ahead of CLOCK_MONOTONIC after 6.3 h (1.7 ppm).
So the boot clock's uncertainty grows by ``PRINTK_DRIFT_PPM`` of the latest printk stamp
(:func:`solve_boot`), unless the method read printk stamps itself (a death in the kernel's log
against the launcher's report).

``kernel_wall`` (dmesg -T, dmesg --time-format iso): wall times dmesg computed from the boot
clock when it ran; placed through the same records of a raw log, else by the bounds of the
conversion (:func:`solve_kernel_wall`).

The best available method is used; every other method is compared with it, and
two that disagree by more than the sum of their stated uncertainties become a
``clock_skew`` finding (:func:`skew_links`) instead of a silent choice. Records
of earlier boots in a kernel log (its timestamps restart) are left unplaced:
the anchors belong to the boot the bundle was collected in.

``wall`` sources are taken as UTC already (the host clock is assumed
NTP-synchronised; local-time strings were converted with the bundle's time
zone when they were parsed). One host's wall clock is the reference every other clock is placed
against: ± 0 (a line's own resolution is its event's time window). With several hosts and no
collectives to match, each is the reference for its own clocks, and ``NTP_ASSUMED_NS`` is stated
for the NTP error between them, as an assumption.

A wall clock that stepped (NTP, a VM paused by its host) leaves readings that no slowly moving
offset fits: :mod:`analysis.clock_steps` finds the step, :func:`solve_stepped` solves each side on
its own readings and maps the clock piecewise (``clock_segments``; :func:`row_uncertainty_sql` is a
row's own uncertainty then).

Processes seen on both clocks (:mod:`analysis.clock_match`: perf's exits against torchrun's
signals and reports) place the boot clock with no anchor at all, replace an anchor they are more
precise than, and are otherwise checked against it like any other method.

Worked example (the one ``tests/analysis/test_clocks.py`` checks): a host-info
file holds ``1234.56 2000.00`` (uptime) and ``1764417073.250000000`` (``date
+%s.%N``). Uptime is truncated to 10 ms, so the boot reading is taken as
1234.565 s +- 5 ms. The offset is 1764417073.250 - 1234.565 = 1764415838.685 s.
A dmesg line ``[ 1200.000000] ...`` is then placed at 1764417038.685 s UTC
(2025-11-29T11:50:38.685Z), +- 34 ms: 5 ms truncation, up to 5 ms between the two
reads, and 24 ms for printk's clock parting from the one uptime reads (``PRINTK_DRIFT_PPM``,
20 ppm of the latest stamp, 1200 s).

Drift: a local clock can run at a slightly different rate from wall time (printk's clock
is not slewed by NTP; a VM's clock may be paused). When the chosen method has anchors in
two windows at least 10 s apart (a collector's readings at the start and at the end), the
rate is measured (:func:`drift_fit`) and applied when it exceeds twice its own uncertainty:
then ``utc = raw + offset + drift_ppm * 1e-6 * raw`` with ``offset`` the offset at local
time 0. Example (``test_clocks.py``): uptime+date pairs at boot times 1 000 s and 37 000 s
(10 h apart, +-10 ms each) whose offsets differ by 1.8 s give +50.0 ppm +- 0.56 ppm, applied;
a record at 19 000 s is placed 0.9 s later than the first pair alone would put it. The
sample's two pairs are 53.6 s apart: +-373 ppm, far too coarse, so nothing is applied and
the report says so.

The full method (dmesg -T pairs, perf reference time, shared pid deaths,
cross-rank collectives, skew findings) extends this module.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from aftertrace.ingest.model import CLOCK_BOOT, CLOCK_KERNEL_WALL, CLOCK_NONE, CLOCK_WALL

from .present import has_rows

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({"clock_skew", "clock_step"})
SEPARATE_FILES_GAP_NS = 50_000_000   # assumed gap between readings kept in two files
SEC_NS = 1_000_000_000
# Hosts' wall clocks against each other where nothing in the bundle measures it (no collectives
# to match): NTP keeps servers within a few ms of each other, over the internet within tens.
NTP_ASSUMED_NS = 100_000_000
# /proc/uptime is CLOCK_BOOTTIME; printk and perf use a clock that stops while the host is
# suspended (a paused or snapshotted VM too). The method says so wherever it is shown.
UPTIME_METHOD = "uptime+date"
PERF_REFERENCE_METHOD = "perf reference time (-k CLOCK_MONOTONIC)"
UPTIME_CAVEAT = ("/proc/uptime counts time suspended; dmesg and perf times do not, so this placement "
                 "is off by the host's total suspended time (0 on servers that never suspend)")


@dataclass(frozen=True)
class Anchor:
    host: str
    name: str
    local_ns: int
    wall_ns: int
    uncertainty_ns: int
    source: str
    line: int | None = None
    text: str | None = None

    @property
    def offset_ns(self) -> int:
        return self.wall_ns - self.local_ns


@dataclass(frozen=True)
class ClockEntry:
    host: str
    domain: str
    offset_ns: int | None
    uncertainty_ns: int | None
    method: str
    evidence: tuple = field(default=())
    conflicts: tuple = field(default=())      # other anchors that disagree beyond the uncertainties
    others: tuple = field(default=())         # (method, offset, uncertainty) of the methods not chosen
    drift_ppm: float | None = None            # applied: utc = raw + offset + drift_ppm * 1e-6 * raw
    drift: dict | None = None                 # the measurement, applied or not (see drift_fit)
    allowances: tuple = field(default=())     # what was added to the uncertainty beyond the anchors
    # a clock that stepped: (from_ns, to_ns, offset_ns, drift_ppm, uncertainty_ns, what) per stretch
    # of raw time (None: open end); offset_ns above is then the last stretch's
    segments: tuple = field(default=())
    steps: tuple = field(default=())          # the steps found (evidence, for the report)
    # the offsets the method allows, where they are not offset ± uncertainty (an estimate off-centre)
    window: tuple | None = None

    def segment_index(self, raw_ns: int) -> int | None:
        """Which stretch of a clock that stepped holds a raw time (None: no stretches)."""
        return next((k for k, (lo, hi, *_) in enumerate(self.segments)
                     if (lo is None or raw_ns >= lo) and (hi is None or raw_ns < hi)), None)

    def offset_at(self, raw_ns: int) -> tuple[int | None, int | None, float | None]:
        """(offset, uncertainty, drift) that place a raw time of this clock."""
        k = self.segment_index(raw_ns)
        if k is None:
            return self.offset_ns, self.uncertainty_ns, self.drift_ppm
        _, _, off, ppm, unc, _ = self.segments[k]
        return off, unc, ppm

    def segment_rows(self, incident_id: str) -> list[dict]:
        return [{"incident_id": incident_id, "host": self.host, "domain": self.domain, "from_ns": lo, "to_ns": hi,
                 "offset_ns": off, "drift_ppm": ppm, "uncertainty_ns": unc, "what": what}
                for lo, hi, off, ppm, unc, what in self.segments]

    def row(self, incident_id: str) -> dict:
        return {"incident_id": incident_id, "host": self.host, "domain": self.domain,
                "offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm,
                "uncertainty_ns": self.uncertainty_ns, "method": self.method,
                "evidence": json.dumps({"used": list(self.evidence), "other_methods": list(self.others),
                                        "conflicts": list(self.conflicts), "drift": self.drift,
                                        "allowances": list(self.allowances), "steps": list(self.steps)})}


def collect_anchors(store, incident_id: str, kernel_pairs: list[dict] | None = None,
                    launcher: list[dict] | None = None) -> list[Anchor]:
    rows = [] if not has_rows(store, incident_id, "anchors") else store.query(
        """SELECT COALESCE(a.host, s.host, '') AS host, a.name, a.local_ns, a.wall_ns,
                  a.uncertainty_ns, s.path, a.line, a.text
           FROM anchors a JOIN sources s USING (incident_id, source_id)
           WHERE a.incident_id = ? AND a.domain = 'boot'
           ORDER BY s.path, a.line, a.local_ns""", [incident_id])
    anchors = [Anchor(r["host"], r["name"], r["local_ns"], r["wall_ns"], r["uncertainty_ns"],
                      r["path"], r["line"], r["text"]) for r in rows]
    anchors += _paired_readings(store, incident_id, {a.source for a in anchors if a.name == "uptime_date"})
    anchors += _dmesg_t_pairs(_kernel_pairs(store, incident_id) if kernel_pairs is None else kernel_pairs)
    anchors += _pid_deaths(store, incident_id, launcher)
    return _current_boot_journal(store, incident_id, anchors)


# printk's clock (the raw oscillator's sched_clock) parts from the NTP-disciplined monotonic and
# wall clocks that every anchor reads at the oscillator's frequency error: on the recording VM
# 1.7 ppm (printk 37.9 ms ahead after 6.3 h of uptime, bench/eval_clocks.py), tens of ppm on
# server hardware. Placing printk stamps by those anchors allows this much of the stamp.
PRINTK_DRIFT_PPM = 20
# the same drift where the uptime is unknown (a converted log alone): half a second, 20 ppm of 7 h
KERNEL_WALL_DRIFT_NS = 500_000_000
# methods that read printk stamps themselves (the kernel's report of a death against the launcher's)
PRINTK_METHODS = ("a process death seen by the kernel",)
LAUNCHER_LATENCY_NS = 2_000_000_000   # a launcher notices a dead worker within this (torchrun polls)
# A worker that exits with an error code (not a signal) may be reported with the time its error was
# recorded (torchrun's @record error file), before the process finished exiting: allow that much.
EXIT_CLEANUP_NS = 5_000_000_000


def _pid_deaths(store, incident_id: str, launcher: list[dict] | None = None) -> list[Anchor]:
    """The same process's death on the kernel clock and in a launcher's wall-clock report.

    The kernel prints the OOM kill (or perf records the exit) at the instant of death, on the
    boot clock; torchrun reports the failed worker when its monitor loop notices, at most
    ``LAUNCHER_LATENCY_NS`` later, in wall time (ms in its log line, whole seconds in the
    ChildFailedError block; a ``failed`` line is printed after the shutdown it started, so the
    first closing signal of that shutdown stands for it, :func:`analysis.clock_match.noticed`).
    Each pair bounds the boot clock's offset to
    [report - latency - raw, report + resolution - raw]; bounds of several pairs intersect. A
    worker that exited with an error code rather than by a signal can be reported with the time
    its error was recorded, before its exit finished (``EXIT_CLEANUP_NS`` earlier at most), which
    widens that pair's upper bound; so can every row of the ChildFailedError block (torchrun
    dates a failure by its error file whatever the exit code: a rank that recorded a timeout and
    was then SIGTERMed while tearing down is dated before its death).
    """
    # (a pair needs a source on each clock: without both, the scan of every event finds none)
    domains = {r["clock_domain"] for r in store.query(
        "SELECT DISTINCT clock_domain FROM sources WHERE incident_id = ?", [incident_id])}
    if not {"boot", "wall"} <= domains:
        return []
    rows = store.query(
        r"""WITH k AS (
              SELECT COALESCE(s.host, '') AS host, e.pid, min(e.ts_raw_ns) AS raw_ns,
                     arg_min(s.path, (e.ts_raw_ns, s.path, e.line)) AS path,
                     arg_min(e.line, (e.ts_raw_ns, s.path, e.line)) AS line
              FROM events e JOIN sources s USING (incident_id, source_id)
              WHERE e.incident_id = ? AND s.clock_domain = 'boot' AND e.pid IS NOT NULL
                AND (e.kind = 'oom_kill' OR e.name = 'sched:sched_process_exit') AND e.ts_raw_ns IS NOT NULL
              GROUP BY 1, 2),
            l AS (
              SELECT COALESCE(s.host, '') AS host,
                     COALESCE(TRY_CAST(json_extract_string(e.attrs, '$.worker_pid') AS BIGINT), e.pid) AS pid,
                     e.ts_raw_ns AS wall_ns, e.name AS lname,
                     CASE WHEN e.name = 'worker_failed' THEN 1000000 ELSE 1000000000 END AS res_ns,
                     COALESCE(e.name = 'worker_failure' OR e.kind = 'process_exit'
                              OR TRY_CAST(json_extract_string(e.attrs, '$.exitcode') AS BIGINT) >= 0, false)
                       AS exited, s.path, e.line
              FROM events e JOIN sources s USING (incident_id, source_id)
              WHERE e.incident_id = ? AND s.clock_domain = 'wall' AND e.ts_raw_ns IS NOT NULL
                AND (e.name = 'worker_failed' OR e.kind IN ('signal_kill', 'process_exit')))
            SELECT k.host, k.pid, k.raw_ns, k.path AS kpath, k.line AS kline, l.wall_ns, l.res_ns,
                   l.exited, l.path AS lpath, l.line AS lline, l.lname
            FROM k JOIN l ON k.host = l.host AND k.pid = l.pid""", [incident_id, incident_id])
    from .clock_match import launcher_lines, noticed
    seen = {}
    if any(r["lname"] == "worker_failed" for r in rows):
        seen = noticed(launcher_lines(store, incident_id) if launcher is None else launcher)
    by: dict[str, list] = {}
    for r in rows:
        if r["lname"] == "worker_failed":
            r["wall_ns"] = min(r["wall_ns"], seen.get((r["lpath"], r["lline"]), r["wall_ns"]))
        by.setdefault(r["host"], []).append(r)
    out = []
    for host, pairs in by.items():
        lo = max(p["wall_ns"] - LAUNCHER_LATENCY_NS - p["raw_ns"] for p in pairs)
        hi = min(p["wall_ns"] + p["res_ns"] + (EXIT_CLEANUP_NS if p["exited"] else 0) - p["raw_ns"]
                 for p in pairs)
        if lo > hi:
            continue   # the reports contradict each other: no anchor from them
        p0 = min(pairs, key=lambda p: (p["res_ns"], p["kline"] or 0, p["lline"] or 0, p["pid"]))
        # held at the death (the earliest one paired): a clock that stepped is told by it
        at = min(p["raw_ns"] for p in pairs)
        out.append(Anchor(host, "pid_death", at, at + (lo + hi) // 2, max(1, (hi - lo) // 2),
                          f"{p0['kpath']} + {p0['lpath']} (pid {p0['pid']}, {len(pairs)} report(s))",
                          p0["kline"]))
    return out


def _current_boot_journal(store, incident_id: str, anchors: list[Anchor]) -> list[Anchor]:
    """journald anchors of the boot the bundle was collected in (host's boot_id, else the latest)."""
    rows = store.query(
        """SELECT COALESCE(a.host, s.host, '') AS host, a.boot_id, a.wall_ns, s.path, a.line
           FROM anchors a JOIN sources s USING (incident_id, source_id)
           WHERE a.incident_id = ? AND a.name = 'journal'""", [incident_id])
    if not rows:
        return anchors
    facts = store.query(
        """SELECT COALESCE(f.host, s.host, '') AS host, f.value FROM facts f JOIN sources s USING (incident_id, source_id)
           WHERE f.incident_id = ? AND f.key = 'boot_id' AND s.kind = 'host_info'""", [incident_id])
    stated = {f["host"]: f["value"].strip() for f in facts}
    latest = {r["host"]: r["boot_id"] for r in sorted(rows, key=lambda r: r["wall_ns"])}
    keep = {(r["path"], r["line"]) for r in rows
            if r["boot_id"] == stated.get(r["host"], latest[r["host"]])}
    return [a for a in anchors if a.name != "journal" or (a.source, a.line) in keep]


# How long after its printed time a record of a converted kernel log can be: util-linux 2.38 prints
# dmesg -T as floor(boot instant) + floor(stamp), up to 2 s before the record (other versions add
# the fractions first: up to 1 s); --time-format iso keeps the µs.
KERNEL_WALL_SPAN_NS = {"dmesg_ctime": 2_000_000_000, "dmesg_iso": 1_000}


# The same kernel records in a raw log and in a log dmesg converted (``tw``): matched by text and by
# their order among equal texts. dmesg converts every record of one run with one boot instant, so the
# printed minus the raw time is the same for all of them to within the conversion's truncation: a
# pair far from the median of its logs (the two logs start at different records, and a text that
# repeats pairs the wrong copies) is not the same record.
_TWINS_CTE = r"""lines AS (
             SELECT COALESCE(s.host, '') AS host, s.format, s.path, e.source_id, e.line, e.ts_raw_ns,
                    regexp_replace(split_part(e.text, chr(10), 1),
                                   '^([^\]]*\] ?|\d{4}-\d\d-\d\dT[0-9:,.]+[+-]\d\d:?\d\d ?)', '') AS msg
             FROM events e JOIN sources s USING (incident_id, source_id)
             WHERE e.incident_id = ? AND s.format IN ('dmesg_raw', 'dmesg_ctime', 'dmesg_iso') AND e.text IS NOT NULL
               AND e.ts_raw_ns IS NOT NULL),
           k AS (SELECT *, row_number() OVER (PARTITION BY host, format, path, msg ORDER BY line) AS n FROM lines),
           tw0 AS (
           SELECT r.host, r.path AS raw_path, c.path AS t_path, c.format AS t_format, r.ts_raw_ns AS raw_ns,
                  c.ts_raw_ns AS t_ns, r.line AS raw_line, r.source_id AS raw_sid, c.source_id AS t_sid,
                  c.line AS t_line,
                  median(c.ts_raw_ns - r.ts_raw_ns) OVER (PARTITION BY r.host, r.path, c.path) AS med
           FROM k r JOIN k c ON r.host = c.host AND r.msg = c.msg AND r.n = c.n
           WHERE r.format = 'dmesg_raw' AND c.format IN ('dmesg_ctime', 'dmesg_iso') AND length(r.msg) > 0),
           tw AS (SELECT * EXCLUDE (med) FROM tw0
                  WHERE abs(t_ns - raw_ns - med) <= CASE WHEN t_format = 'dmesg_iso' THEN 1000000 ELSE 2000000000 END)"""
_KERNEL_TWINS = "WITH " + _TWINS_CTE + " SELECT * FROM tw"


def _kernel_pairs(store, incident_id: str) -> list[dict]:
    """The same kernel records in a raw log (boot clock) and in a log dmesg converted to wall time
    (``kernel_wall``): matched by text and by their order among equal texts."""
    if not _has_kernel_twins(store, incident_id):
        return []
    return store.query(_KERNEL_TWINS, [incident_id])


def _has_kernel_twins(store, incident_id: str) -> bool:
    """Whether some host has both a raw kernel log and one converted to wall time: the only logs
    whose records can be twins (matching them reads every record of every kernel log)."""
    return bool(store.query(
        """SELECT 1 FROM sources WHERE incident_id = ? GROUP BY COALESCE(host, '')
           HAVING bool_or(format = 'dmesg_raw') AND bool_or(format IN ('dmesg_ctime', 'dmesg_iso'))
           LIMIT 1""", [incident_id]))


def _dmesg_t_pairs(kernel_pairs: list[dict]) -> list[Anchor]:
    """Raw dmesg next to dmesg -T: the same records on the boot clock and in wall seconds.

    dmesg -T prints either floor(boot instant + stamp) (then each pair bounds the offset to
    [T - raw, T + 1 s - raw), and the intersection narrows as the records' sub-second phases
    differ) or, as util-linux 2.38 does, floor(boot instant) + floor(stamp) (then T - floor(raw)
    is one whole second k for every pair, and the offset lies in [k, k + 1 s)). Which one printed
    the file is not written in it: where the pairs fit both, the offset is anywhere either allows.
    dmesg computed that offset itself when it ran, from the clocks of that moment: after a
    suspend, or on a clock that drifted, it is off, which the comparison with the other anchors
    shows as clock skew.
    """
    by: dict[tuple, list] = {}
    for r in kernel_pairs:
        by.setdefault((r["host"], r["raw_path"], r["t_path"]), []).append(r)
    out = []
    for (host, raw_path, t_path), pairs in by.items():
        res = 1_000 if pairs[0]["t_format"] == "dmesg_iso" else 1_000_000_000
        fits = []
        lo = max(p["t_ns"] - p["raw_ns"] for p in pairs)
        hi = min(p["t_ns"] + res - p["raw_ns"] for p in pairs)
        if lo <= hi:
            fits.append((lo, hi))
        ks = {p["t_ns"] - p["raw_ns"] // 1_000_000_000 * 1_000_000_000 for p in pairs}
        if res > 1_000 and len(ks) == 1:
            k = ks.pop()
            fits.append((k, k + 1_000_000_000))
        if fits:
            lo, hi = min(f[0] for f in fits), max(f[1] for f in fits)
            off, unc = (lo + hi) // 2, max(1, (hi - lo) // 2)
        else:   # not one constant offset (suspend, or times from different runs of dmesg)
            offs = sorted(p["t_ns"] + res - p["raw_ns"] for p in pairs)
            off = offs[len(offs) // 2]
            unc = max(abs(o - off) for o in offs) + res
        out.append(Anchor(host, "dmesg_T", 0, off, unc, f"{raw_path} + {t_path} ({len(pairs)} records)",
                          min(p["raw_line"] for p in pairs)))
    return out


def solve_kernel_wall(host: str, boot: ClockEntry | None, pairs: list[dict], formats: set[str],
                      logged: list | tuple = (), gaps: list | tuple = (), overlaps: list | tuple = ()) -> ClockEntry:
    """Place a kernel log that dmesg converted to wall time (``kernel_wall``).

    Where the same records are in a raw log whose boot clock is placed, each pair says exactly
    where its converted time lies: the offset is the middle of the pairs' range, its uncertainty
    half that range plus the boot clock's. Otherwise the conversion itself bounds it: the record
    lies from 0 to 2 s after the printed second (``KERNEL_WALL_SPAN_NS``), and dmesg took the
    boot instant from clocks that part from printk's by ``PRINTK_DRIFT_PPM`` of the uptime,
    unknown here: ``KERNEL_WALL_DRIFT_NS`` is allowed for it.

    Worked example (``tests/analysis/test_clocks.py``): dmesg -T prints ``22:14:56`` for a
    record stamped 1643.343165 s that the boot clock (offset 1796161653.812760 s, ±1 ms) places
    at 22:14:57.155925; a second record stamped 1643.912000 s, printed ``22:14:56`` too, is at
    22:14:57.724760. The offsets are 1.155925 and 1.724760 s: 1.4403425 s, ± 0.2844175 s + 1 ms.
    Without the raw log the same records get +0.75 s ± 1.25 s: from 0.5 s before the printed
    second to 2 s after it.

    A step of the wall clock that only a log's stamps show (``logged``; the boot clock's first
    stretch then has no offset, :func:`unplaced_before_log_step`) leaves the records printed before
    it unplaced: dmesg converted them with the offset of after the step.
    """
    span = max((KERNEL_WALL_SPAN_NS.get(f, 2_000_000_000) for f in formats), default=2_000_000_000)
    first_unplaced = boot is not None and bool(boot.segments) and boot.segments[0][2] is None
    if first_unplaced and pairs:
        cut = boot.segments[0][1]
        placed = [p for p in pairs if p["raw_ns"] >= cut]
        if placed:
            entry = solve_kernel_wall(host, replace(boot, segments=(), steps=()), placed, formats)
            # dmesg printed floor(raw + B): a record printed at P or later has raw >= P - B, B below
            # the smallest printed-minus-raw of the pairs plus one second
            p_cut = cut + min(p["t_ns"] - p["raw_ns"] for p in pairs) + 1_000_000_000
            return replace(entry, segments=((None, p_cut, None, None, None, LOG_STEP_WHAT),
                                            (p_cut, None, entry.offset_ns, None, entry.uncertainty_ns,
                                             boot.segments[1][5])),
                           method=entry.method + "; the records printed before the step are not placed")
    if boot is not None and boot.offset_ns is not None and pairs and not first_unplaced:
        # dmesg converted every record with one boot instant; where the wall clock stepped, the
        # records on each side of the step are on their own wall offset (stretches by the pairs)
        groups: dict[int, list] = {}
        for p in pairs:
            off, unc, ppm = boot.offset_at(p["raw_ns"])
            # (a stretch of the boot clock left unplaced: its records' pairs say nothing, None)
            groups.setdefault(boot.segment_index(p["raw_ns"]) or 0, []).append(
                (None if off is None else p["raw_ns"] + off + int((ppm or 0.0) * 1e-6 * p["raw_ns"]) - p["t_ns"],
                 unc or 0, p["t_ns"]))
        ev = ({"pairs": len(pairs), "raw": pairs[0]["raw_path"], "converted": pairs[0]["t_path"]},)
        method = (f"the same {len(pairs)} records in the raw kernel log, each at its raw copy's time (placed by "
                  f"{boot.method}); any other by the offset they give")
        spans = [(min(g[2] for g in v), max(g[2] for g in v), v, boot.segments[k][5] if boot.segments else "")
                 for k, v in sorted(groups.items())]
        whole = [g for _, _, v, _ in spans for g in v if g[0] is not None]
        unplaced = any(g[0] is None for _, _, v, _ in spans for g in v)
        if whole:
            lo, hi = min(g[0] for g in whole), max(g[0] for g in whole)
            entry = ClockEntry(host, CLOCK_KERNEL_WALL, (lo + hi) // 2, (hi - lo) // 2 + max(g[1] for g in whole),
                               method, ev)
        else:
            entry = ClockEntry(host, CLOCK_KERNEL_WALL, None, None, method + "; none of them placed", ev)
        shared = any(a[1] >= b[0] for a, b in zip(spans, spans[1:]))
        if unplaced and (shared or not whole):
            # records of a stretch that cannot be placed share printed times with placed ones
            return replace(entry, offset_ns=None, uncertainty_ns=None,
                           method=method + "; not placed: its records lie on both sides of a step of the wall "
                                           "clock that the readings do not place")
        if len(spans) < 2 or shared:
            return entry   # one stretch, or stretches that share a printed time: one wide offset
        segs = []
        for i, (t0, t1, v, what) in enumerate(spans):
            vs = [g for g in v if g[0] is not None]
            glo, ghi = (min(g[0] for g in vs), max(g[0] for g in vs)) if vs else (None, None)
            segs.append((None if i == 0 else t0, None if i == len(spans) - 1 else spans[i + 1][0],
                         None if not vs else (glo + ghi) // 2, None,
                         None if not vs else (ghi - glo) // 2 + max(g[1] for g in vs),
                         f"{what}: records {t0 // 1_000_000_000}-{t1 // 1_000_000_000} s as printed"))
        return replace(entry, offset_ns=next((g[2] for g in reversed(segs) if g[2] is not None), None),
                       uncertainty_ns=max((g[4] for g in segs if g[4] is not None), default=None), segments=tuple(segs),
                       method=method + "; each side of the wall clock's step by its own records")
    lo, hi = -KERNEL_WALL_DRIFT_NS, span
    entry = ClockEntry(host, CLOCK_KERNEL_WALL, (lo + hi) // 2, (hi - lo) // 2,
                       f"converted by dmesg when it ran: {span / 1e9:g} s of truncation and up to "
                       f"{KERNEL_WALL_DRIFT_NS / 1e9:g} s of kernel-clock drift allowed (no raw kernel log to "
                       "place it by)")
    if boot is None and logged:
        x = latest_log_step(logged)
        if x is not None:
            # printed P is the record's time on the later offset less e in [lo, hi]: from
            # P = before_wall - lo on, every record was written after the step
            p_cut = x.before_wall_ns - lo
            return replace(entry, segments=((None, p_cut, None, None, None, LOG_STEP_WHAT),
                                            (p_cut, None, entry.offset_ns, None, entry.uncertainty_ns,
                                             f"after the wall clock's step ({x.source} line {x.before_line} "
                                             "was written after it)")),
                           steps=({"log": x.source, "after_line": x.after_line, "before_line": x.before_line,
                                   "by_wall_s": x.before_wall_ns / 1e9, "method": entry.method},),
                           method=entry.method + f"; the wall clock stepped before {x.source} line "
                                                 f"{x.before_line} was written: the records printed before "
                                                 "then are not placed")
    crowded = [o for o in overlaps if o.crowded]
    if boot is None and crowded:
        # the first read after a step back is stamped by the crowded stretch's start and a period,
        # on the offset dmesg converted with: from P = that - lo on, every record came after the step
        o = max(crowded, key=lambda x: x.first_ns)
        p_cut = o.first_ns + o.period_ns - lo
        return _unplaced_before(entry, p_cut, o)
    if boot is None and gaps:
        # dmesg converted every record with the offset of when it ran, after every gap of the
        # snapshots: a record printed before one may have been written before a step of up to its
        # excess (printed P = its time + that step - e, so it lies within [P - step + lo, P + hi])
        segs, cuts = [], sorted(gaps, key=lambda g: g.after_ns)
        for k, g in enumerate(cuts):
            x = sum(h.excess_ns for h in cuts[k:])
            segs.append((None if k == 0 else cuts[k - 1].after_ns + hi, g.after_ns + hi,
                         entry.offset_ns - x // 2, None, entry.uncertainty_ns + x - x // 2,
                         f"before a gap of {g.source}'s snapshots ({g.before_ns / 1e9:.6f} -> {g.after_ns / 1e9:.6f} "
                         f"s): the wall clock may have stepped up to +{x / 1e9:.3f} s since dmesg's records were "
                         "written there"))
        segs.append((segs[-1][1], None, entry.offset_ns, None, entry.uncertainty_ns, "after the snapshots' gaps"))
        return replace(entry, uncertainty_ns=max(g[4] for g in segs), segments=tuple(segs),
                       method=entry.method + "; records printed before a gap of the snapshots more widely (the wall "
                                             "clock may have stepped there)")
    if boot is None or not boot.segments or boot.offset_ns is None:
        return entry
    # The boot clock stepped: dmesg converted every record with the boot instant of when it ran (the
    # last stretch's offset B), so a record of an earlier stretch is off by that stretch's offset
    # against B. Its printed time is its boot time + B - e, e within the conversion's window
    # [lo, hi]: a stretch's bound x on the boot clock is x + B - hi in printed time where a step's
    # window begins, x + B - lo where one ends (the window takes the printed times either side fits).
    g = boot.segments
    cuts = [x[1] + boot.offset_ns - (hi if "window" in g[k + 1][5] else lo) for k, x in enumerate(g[:-1])]
    segs = []
    last_unc = boot.segments[-1][4] or 0
    for k, (_g0, _g1, off, _ppm, unc, what) in enumerate(g):
        if off is None:
            segs.append((None if k == 0 else cuts[k - 1], None if k == len(g) - 1 else cuts[k], None, None, None,
                         what))
            continue
        shift = off - boot.offset_ns
        segs.append((None if k == 0 else cuts[k - 1], None if k == len(g) - 1 else cuts[k], entry.offset_ns + shift,
                     None, entry.uncertainty_ns + (unc or 0) + (last_unc if shift else 0), what))
    return replace(entry, offset_ns=segs[-1][2], uncertainty_ns=max(x[4] for x in segs if x[4] is not None),
                   segments=tuple(segs),
                   method=entry.method + f"; each side of the wall clock's step by its own offset ({boot.method})")


def _paired_readings(store, incident_id: str, sources_with_pairs: set[str]) -> list[Anchor]:
    """uptime.start + date.start in two files of one folder -> an anchor."""
    if not has_rows(store, incident_id, "facts"):
        return []
    rows = store.query(
        """SELECT s.source_id, s.path, COALESCE(f.host, s.host, '') AS host, f.key, f.value, f.line
           FROM facts f JOIN sources s USING (incident_id, source_id)
           WHERE f.incident_id = ? AND f.key LIKE 'reading.%'
           ORDER BY s.path, f.line, f.key, f.value""", [incident_id])   # (the first reading of a file, the first file of a tie)
    per: dict[int, dict] = {}
    for r in rows:
        d = per.setdefault(r["source_id"], {"path": r["path"], "host": r["host"], "boot": [], "wall": [],
                                            "res": [], "tag": ""})
        if r["key"] == "reading.boottime_ns":
            d["boot"].append((int(r["value"]), r["line"]))
        elif r["key"] == "reading.wall_ns":
            d["wall"].append((int(r["value"]), r["line"]))
        elif r["key"] == "reading.wall_res_ns":
            d["res"].append(int(r["value"]))
        elif r["key"] == "reading.tag":
            d["tag"] = r["value"] or ""
    out = []
    groups: dict[tuple, dict] = {}
    for d in per.values():
        if d["path"] in sources_with_pairs:
            continue
        key = (d["host"], str(PurePosixPath(d["path"]).parent), d["tag"])
        g = groups.setdefault(key, {"boot": [], "wall": []})
        if d["boot"] and not d["wall"]:
            g["boot"].append(d)
        elif d["wall"] and not d["boot"]:
            g["wall"].append(d)
    for (host, folder, tag), g in groups.items():
        if len(g["boot"]) != 1 or not g["wall"]:
            continue
        b = g["boot"][0]
        # several date formats read at the same moment: use the finest one
        w = min(g["wall"], key=lambda d: max(d["res"]) if d["res"] else 1_000_000_000)
        res = max(w["res"]) if w["res"] else 1_000_000_000
        half = res // 2 if res > 1 else 0
        out.append(Anchor(host, "uptime_date(files)", b["boot"][0][0], w["wall"][0][0] + half,
                          5_000_000 + half + SEPARATE_FILES_GAP_NS,
                          f"{b['path']} + {w['path']}", b["boot"][0][1]))
    return out


PRINTK_VS_MONOTONIC_NS = 1_000_000   # perf's reference pair itself (the drift is PRINTK_DRIFT_PPM)
CONFLICT_SLACK_NS = 1_000_000


@dataclass(frozen=True)
class Estimate:
    method: str
    rank: int                       # preference: lower is better
    offset_ns: int
    uncertainty_ns: int
    evidence: tuple = field(default=())
    anchors: tuple = field(default=())


DRIFT_MIN_SPAN_NS = 10_000_000_000   # anchors closer together than this cannot measure a rate


def drift_fit(anchors) -> dict | None:
    """The rate error of the local clock against wall time, from anchors of one method taken
    in two separated windows (the earlier and the later half, by local time).

    drift = (offset_late - offset_early) / (t_late - t_early), known to
    +- (u_early + u_late) / (t_late - t_early), where each window's offset is the median of its
    anchors and u the best stated uncertainty in it. It is applied only when it exceeds twice
    its own uncertainty; otherwise the measurement is reported and the offset stays constant.
    Returns None when the anchors span less than ``DRIFT_MIN_SPAN_NS``.
    """
    xs = sorted(anchors, key=lambda a: a.local_ns)
    if len(xs) < 2 or xs[-1].local_ns - xs[0].local_ns < DRIFT_MIN_SPAN_NS:
        return None
    mid = statistics.median(a.local_ns for a in xs)
    early = [a for a in xs if a.local_ns <= mid] or xs[:1]
    late = [a for a in xs if a.local_ns > mid] or xs[-1:]
    t1, t2 = statistics.median(a.local_ns for a in early), statistics.median(a.local_ns for a in late)
    o1, o2 = statistics.median(a.offset_ns for a in early), statistics.median(a.offset_ns for a in late)
    u1, u2 = min(a.uncertainty_ns for a in early), min(a.uncertainty_ns for a in late)
    span = t2 - t1
    if span < DRIFT_MIN_SPAN_NS:
        return None
    ppm = (o2 - o1) / span * 1e6
    unc = (u1 + u2) / span * 1e6
    applied = abs(ppm) > 2 * unc
    return {"ppm": round(ppm, 3), "uncertainty_ppm": round(unc, 3), "span_s": round(span / 1e9, 3),
            "windows": len(early) + len(late), "applied": applied,
            # offset at local time 0 with the drift, and the residual uncertainty at the anchors
            "offset0_ns": int(o1 - ppm * 1e-6 * t1), "uncertainty_ns": int(max(u1, u2))}


def _median_estimate(method: str, rank: int, anchors: list[Anchor], floor_ns: int) -> Estimate:
    offs = [a.offset_ns for a in anchors]
    med = int(statistics.median(offs))
    spread = max(abs(o - med) for o in offs)
    best = min(a.uncertainty_ns for a in anchors)
    return Estimate(method, rank, med, max(floor_ns, best, spread),
                    tuple({"source": a.source, "line": a.line, "offset_ns": a.offset_ns,
                           "uncertainty_ns": a.uncertainty_ns} for a in anchors), tuple(anchors))


def boot_estimates(anchors: list[Anchor]) -> list[Estimate]:
    """Every independent estimate of one host's boot-clock offset, best method first."""
    out = []
    groups = [
        ("perf_reference", PERF_REFERENCE_METHOD, 0, PRINTK_VS_MONOTONIC_NS),
        ("uptime_date", UPTIME_METHOD, 1, 0),
        ("journal", "journald realtime/monotonic pairs", 2, 0),
        ("btime", "btime", 3, 1_000_000_000),
        ("dmesg_T", "raw dmesg next to dmesg -T", 4, 0),
        ("pid_death", "a process death seen by the kernel and reported by the launcher", 5, 0),
    ]
    for prefix, method, rank, floor in groups:
        sel = [a for a in anchors if a.name.startswith(prefix)]
        if sel:
            out.append(_median_estimate(method, rank, sel, floor))
    return out


def solve_boot(host: str, anchors: list[Anchor], printk_ns: int = 0, match=None, phase=None) -> ClockEntry:
    """The boot clock's offset from the best method; ``printk_ns``, the latest printk stamp of the
    host's kernel logs, widens the uncertainty by ``PRINTK_DRIFT_PPM`` of it (printk's clock is
    not the one the anchors read) unless the method read printk stamps itself.

    ``match`` (:class:`analysis.clock_match.Match`), the processes seen on both clocks, places
    the clock where no anchor does, replaces an anchor it is more precise than, and is otherwise
    compared with the chosen anchor like any other method (a disagreement is clock skew); where
    they agree, whichever is chosen keeps only the offsets the other allows too.
    ``phase`` (:func:`analysis.clock_phase.phases`) then narrows the result to the offsets with
    the wall clock's phase on CLOCK_MONOTONIC."""
    entry = _solve_boot(host, anchors)
    on_printk = entry.method.startswith(PRINTK_METHODS)
    if match is not None:
        entry, on_printk = _with_match(entry, match, printk_ns, on_printk)
    if phase is not None and entry.offset_ns is not None and entry.drift_ppm is None:
        entry, on_printk = _with_phase(entry, phase, match, printk_ns, on_printk)
    if entry.offset_ns is None or not printk_ns or on_printk:
        return entry
    extra = _printk_allowance(printk_ns)
    return replace(entry, uncertainty_ns=(entry.uncertainty_ns or 0) + extra,
                   allowances=({"what": "printk clock drift", "ns": extra, "ppm": PRINTK_DRIFT_PPM,
                                "latest_stamp_s": printk_ns / 1e9},))


def _printk_allowance(printk_ns: int) -> int:
    """How far printk's clock may have parted from the monotonic clock by this stamp."""
    return PRINTK_DRIFT_PPM * printk_ns // 1_000_000


def _with_match(entry: ClockEntry, m, printk_ns: int, on_printk: bool) -> tuple[ClockEntry, bool]:
    from .clock_match import METHOD
    used = tuple(b.evidence() for b in m.bounds[:8])
    clock = "printk's clock (perf without -k)" if m.printk_clock else f"perf's -k clock ({m.boot_clock})"
    method = f"{METHOD}: {len(m.bounds)} pairs bound it to [{m.lo_ns / 1e9:.6f}, {m.hi_ns / 1e9:.6f}] s, {clock}"
    mine = ClockEntry(entry.host, CLOCK_BOOT, m.offset_ns, m.uncertainty_ns, method, used, window=(m.lo_ns, m.hi_ns))
    if entry.offset_ns is None:
        return mine, m.printk_clock
    # the match and the anchors may read different clocks (printk's against CLOCK_MONOTONIC)
    apart = 0 if m.printk_clock == on_printk else _printk_allowance(printk_ns)
    diff = m.offset_ns - entry.offset_ns
    if abs(diff) > m.uncertainty_ns + (entry.uncertainty_ns or 0) + apart + CONFLICT_SLACK_NS:
        c = {"method": METHOD, "offset_ns": m.offset_ns, "uncertainty_ns": m.uncertainty_ns,
             "difference_ns": diff, "evidence": tuple({"source": e["source"], "line": e["line"],
                                                       "offset_ns": m.offset_ns} for e in used[:3])}
        return replace(entry, conflicts=entry.conflicts + (c,)), on_printk
    # precision where it matters most, the kernel's records: the allowance for printk's clock
    # goes to whichever method did not read it
    mine_k = m.uncertainty_ns + (0 if m.printk_clock else _printk_allowance(printk_ns))
    entry_k = (entry.uncertainty_ns or 0) + (0 if on_printk else _printk_allowance(printk_ns))
    # both windows hold the truth: the one chosen keeps only what the other allows too (the other
    # widened by the allowance between their clocks)
    u = entry.uncertainty_ns or 0
    if mine_k < entry_k:
        win = _within(mine, m.lo_ns, m.hi_ns, entry.offset_ns - u - apart, entry.offset_ns + u + apart, entry.method)
        return replace(win, others=((entry.method, entry.offset_ns, entry.uncertainty_ns),) + entry.others,
                       conflicts=entry.conflicts), m.printk_clock
    win = _within(entry, entry.offset_ns - u, entry.offset_ns + u, m.lo_ns - apart, m.hi_ns + apart, METHOD)
    return replace(win, others=entry.others + ((METHOD, m.offset_ns, m.uncertainty_ns),)), on_printk


def _within(entry: ClockEntry, lo: int, hi: int, olo: int, ohi: int, other: str) -> ClockEntry:
    """``entry`` (its window ``[lo, hi]``) cut to what another method's window ``[olo, ohi]`` allows
    too: its estimate moved into the intersection where outside, its uncertainty the estimate's
    distance to the farther end. Unchanged where that cuts nothing."""
    a, b = max(lo, olo), min(hi, ohi)
    if a > b or (a, b) == (lo, hi):
        return entry
    off = min(max(entry.offset_ns, a), b)
    return replace(entry, offset_ns=off, uncertainty_ns=max(off - a, b - off, 1), window=(a, b),
                   method=f"{entry.method}; within [{a / 1e9:.6f}, {b / 1e9:.6f}] s by {other} too")


def _with_phase(entry: ClockEntry, phase: dict, m, printk_ns: int, on_printk: bool) -> tuple[ClockEntry, bool]:
    from .clock_phase import METHOD, allowed, narrow
    apart = _printk_allowance(printk_ns)
    u = entry.uncertainty_ns or 0
    lo, hi = entry.window or (entry.offset_ns - u, entry.offset_ns + u)
    lo, hi = lo - (apart if on_printk else 0), hi + (apart if on_printk else 0)
    if m is not None:
        lo = max(lo, m.lo_ns - (apart if m.printk_clock else 0))
        hi = min(hi, m.hi_ns + (apart if m.printk_clock else 0))
    span = narrow(lo, hi, phase["arcs_ns"]) if lo <= hi else None
    arcs = ", ".join(f"{a / 1e9:.4f}-{b / 1e9:.4f}" for a, b in phase["arcs_ns"][:4])
    # the estimate stays where the method put it when the phase allows it there; else it goes to the
    # middle of the allowed range nearest to it (never into a gap the phase rules out)
    off = None
    if span is not None:
        ranges = allowed(lo, hi, phase["arcs_ns"])
        near = min(ranges, key=lambda r: 0 if r[0] <= entry.offset_ns <= r[1]
                   else min(abs(r[0] - entry.offset_ns), abs(r[1] - entry.offset_ns)))
        off = entry.offset_ns if near[0] <= entry.offset_ns <= near[1] else (near[0] + near[1]) // 2
    unc = None if span is None else max(off - span[0], span[1] - off, 1)
    if span is None and lo <= hi:
        # no offset the method allows has the phase the c10 stamps show: those lines were written
        # on another offset (the wall clock stepped between them and the method's readings, by an
        # amount this cannot tell), or a reading is wrong -- said, not chosen between
        near = min(((k * SEC_NS + a, k * SEC_NS + b) for a, b in phase["arcs_ns"]
                    for k in range((lo - b) // SEC_NS - 1, (hi - a) // SEC_NS + 2)),
                   key=lambda r: 0 if r[0] <= entry.offset_ns <= r[1] else min(abs(r[0] - entry.offset_ns),
                                                                                 abs(r[1] - entry.offset_ns)))
        off = min(max(entry.offset_ns, near[0]), near[1])
        c = {"method": f"{METHOD} (phase {arcs} s from {phase['pairs']} line pairs; its lines were written "
                       "on another offset: the wall clock stepped since, or a reading is wrong)",
             "offset_ns": off, "uncertainty_ns": (near[1] - near[0]) // 2, "difference_ns": off - entry.offset_ns,
             "evidence": ({"source": phase["logs"][0], "line": None, "offset_ns": off},)}
        return replace(entry, conflicts=entry.conflicts + (c,)), on_printk
    # the offset found is CLOCK_MONOTONIC's: printk's stamps, the kernel's records, still need
    # their allowance, so it only helps them where it is narrower with that allowance added
    if span is None or unc + apart >= u + (0 if on_printk else apart):
        return entry, on_printk
    used = ({"source": phase["logs"][0], "line": None, "phase_s": arcs, "pairs": phase["pairs"],
             "window_ns": [lo, hi]},) + tuple(entry.evidence)
    method = (f"{entry.method}; narrowed by {METHOD}, phase {arcs} s from {phase['pairs']} line pairs, "
              f"to [{span[0] / 1e9:.6f}, {span[1] / 1e9:.6f}] s")
    return replace(entry, offset_ns=off, uncertainty_ns=unc, method=method, evidence=used, window=None,
                   others=entry.others + ((entry.method, entry.offset_ns, entry.uncertainty_ns),)), False


def _solve_boot(host: str, anchors: list[Anchor]) -> ClockEntry:
    ests = boot_estimates(anchors)
    if not ests:
        return ClockEntry(host, CLOCK_BOOT, None, None,
                          "none: no uptime+date pair or btime for this host; boot-clock times cannot be placed")
    best = min(ests, key=lambda e: e.rank)
    # Conflicts are judged at the anchors' own times, where every method measured.
    conflicts = tuple(
        {"method": e.method, "offset_ns": e.offset_ns, "uncertainty_ns": e.uncertainty_ns,
         "difference_ns": e.offset_ns - best.offset_ns, "evidence": e.evidence[:3]}
        for e in ests if e is not best
        and abs(e.offset_ns - best.offset_ns) > e.uncertainty_ns + best.uncertainty_ns + CONFLICT_SLACK_NS)
    others = tuple((e.method, e.offset_ns, e.uncertainty_ns) for e in ests if e is not best)
    drift = drift_fit(best.anchors)
    if drift and drift["applied"]:
        return ClockEntry(host, CLOCK_BOOT, drift["offset0_ns"], drift["uncertainty_ns"],
                          best.method + f", drift {drift['ppm']:+.1f} ppm", best.evidence,
                          conflicts=conflicts, others=others, drift_ppm=drift["ppm"], drift=drift)
    return ClockEntry(host, CLOCK_BOOT, best.offset_ns, best.uncertainty_ns, best.method, best.evidence,
                      conflicts=conflicts, others=others, drift=drift)


# anchors read at a known instant of the boot clock (the others, btime and dmesg -T's conversion,
# were computed when the bundle was collected: they belong to the last stretch of a clock that stepped)
TIMED_ANCHORS = ("perf_reference", "uptime_date", "journal", "pid_death")


def step_readings(anchors: list[Anchor], bounds: list, printk_ns: int) -> list:
    """What every timed anchor and matched pair says of the offset at its instant
    (:class:`analysis.clock_steps.Reading`). Those that read printk's clock are widened by its
    drift allowance against the monotonic clock the others read."""
    from .clock_steps import Reading
    apart = _printk_allowance(printk_ns)
    out = []
    for a in anchors:
        if not a.name.startswith(TIMED_ANCHORS):
            continue
        w = a.uncertainty_ns + (apart if a.name.startswith("pid_death") else 0)
        out.append(Reading(a.local_ns, a.offset_ns - w, a.offset_ns + w, a.name, a.source, a.line,
                           a.name.startswith("pid_death")))
    for b in bounds:
        if b.boot_ns is None:
            continue
        w = apart if b.boot_clock == "" else 0
        out.append(Reading(b.boot_ns, None if b.lo_ns is None else b.lo_ns - w,
                           None if b.hi_ns is None else b.hi_ns + w, b.rule, b.wall_source, b.wall_line,
                           b.boot_clock == "" or b.printk_stamp))
    return out


def solve_stepped(host: str, anchors: list[Anchor], bounds: list, printk_ns: int, steps: list,
                  logged: list | None = None, whole: dict | None = None, gaps: list | tuple = (),
                  overlaps: list | tuple = ()) -> ClockEntry | None:
    """The boot clock of a host whose wall clock stepped (:mod:`analysis.clock_steps`): each
    stretch between steps solved on its own anchors and pairs, the records inside a step's window
    placed between the two sides with an uncertainty that covers both. None where a stretch
    cannot be placed on its own.

    ``logged`` (:func:`analysis.clock_phase.log_steps`): where one log's stamps show as many steps
    as the readings, each side takes the phase of its stretch of the log, and each step's window
    shrinks to the lines around it: the step came after a line written at ``after_wall_ns`` on the
    earlier offset (boot ``after_wall_ns - offset``, at least that less the side's largest offset)
    and before one written by ``before_wall_ns`` on the later one.

    ``whole`` (:func:`analysis.clock_phase.phases`): a phase that one order fits for every log of
    the host. Where such logs were written across every step (their lines begin before the step's
    window and end after it), each step was a whole number of seconds to within the phase's arcs --
    a step by a fraction of a second leaves a log's lines in no single order -- so the phase holds on
    every side.

    ``gaps`` (:func:`analysis.clock_steps.sampler_gaps`): where exactly one gap of a snapshot series
    inside a forward step's window is long enough to hold the step, the step came after the snapshot
    before the gap was taken and before the one after it: the window shrinks to those two (each on
    its side's offset).

    ``overlaps`` (:func:`analysis.clock_steps.sampler_overlaps`): a backward step leaves a stretch
    of a series stamped twice over, by reads before and after it. Where exactly one such stretch
    inside the step's window is no longer than the step (and a period) allows, the last read
    before the step is stamped within a period of the stretch's end on the earlier offset and the
    first read after it within a period of its start on the later one: the window shrinks to
    those two reads."""
    from .clock_match import solve
    from .clock_steps import Overlap
    from .clock_phase import METHOD as PHASE_METHOD
    log = _one_log(logged or [], len(steps))
    if log:
        side_phase = [{"arcs_ns": list(log[0].arcs_before), "logs": [log[0].source], "pairs": log[0].pairs}
                      if log[0].arcs_before else None]
        side_phase += [{"arcs_ns": list(x.arcs_after), "logs": [x.source], "pairs": x.pairs} if x.arcs_after
                       else None for x in log]
    else:
        side_phase = [None] * (len(steps) + 1)

    def stretch(local_ns: int) -> int:
        return sum(local_ns >= st.by_ns for st in steps)

    n = len(steps) + 1
    parts: list[list[Anchor]] = [[] for _ in range(n)]
    for a in anchors:
        parts[stretch(a.local_ns) if a.name.startswith(TIMED_ANCHORS) else n - 1].append(a)
    bparts: list[list] = [[] for _ in range(n)]
    for b in bounds:
        bparts[n - 1 if b.boot_ns is None else stretch(b.boot_ns)].append(b)
    def sides(phase_of: list) -> list[ClockEntry] | None:
        out = []
        for k in range(n):
            m = solve(host, bparts[k])[0] if bparts[k] else None
            e = solve_boot(host, parts[k], printk_ns, m, phase_of[k])
            if e.offset_ns is None:
                return None
            out.append(e)
        return out

    entries = sides(side_phase)
    if entries is None:
        return None

    def windows(entries: list[ClockEntry]) -> list[tuple[int, int, object]]:
        out = []
        for st, a, b in zip(steps, entries, entries[1:]):
            delta = b.offset_ns - a.offset_ns
            fit = [g for g in gaps if delta > 0 and g.excess_ns + a.uncertainty_ns + b.uncertainty_ns >= delta
                   and g.before_ns - (a.offset_ns + a.uncertainty_ns) < st.by_ns
                   and g.after_ns - (b.offset_ns - b.uncertainty_ns) > st.after_ns]
            if len(fit) == 1:
                g = fit[0]
                w0 = max(st.after_ns, g.before_ns - (a.offset_ns + a.uncertainty_ns))
                w1 = min(st.by_ns, g.after_ns - (b.offset_ns - b.uncertainty_ns))
                if w0 < w1:
                    out.append((w0, w1, g))
                    continue
            # a backward step: the last read before it is stamped within a period of the crowded
            # stretch's end (on the earlier offset), the first after it within a period of its start
            # (on the later one)
            cand = []
            for o in overlaps if delta < 0 else ():
                if o.last_ns - o.first_ns > -delta + o.period_ns + a.uncertainty_ns + b.uncertainty_ns:
                    continue
                w0 = max(st.after_ns, o.last_ns - o.period_ns - (a.offset_ns + a.uncertainty_ns))
                w1 = min(st.by_ns, o.first_ns + o.period_ns - (b.offset_ns - b.uncertainty_ns))
                if w0 < w1:
                    cand.append((w0, w1, o))
            if len(cand) > 1:      # a late read and its catch-up look short too; a crowded stretch is the step
                cand = [c for c in cand if c[2].crowded]
            out.append(cand[0] if len(cand) == 1 else (st.after_ns, st.by_ns, None))
        return out

    span = (whole or {}).get("span_ns")
    win = windows(entries)
    if not log and span and all(
            span[0] < w0 + a.offset_ns - a.uncertainty_ns and span[1] > w1 + b.offset_ns + b.uncertainty_ns
            for (w0, w1, _), a, b in zip(win, entries, entries[1:])):
        entries = sides([whole] * n) or entries
        win = windows(entries)
    apart = _printk_allowance(printk_ns)   # the steps are on the anchors' clock, the kernel's records on printk's
    segs = []
    lo = None
    narrowed = []
    for k, st in enumerate(steps):
        a, b = entries[k], entries[k + 1]
        after, by = win[k][0], win[k][1]
        if log:
            x = log[k]
            la = None if x.after_wall_ns is None else x.after_wall_ns - (a.offset_ns + a.uncertainty_ns)
            lb = None if x.before_wall_ns is None else x.before_wall_ns - (b.offset_ns - b.uncertainty_ns)
            na, nb = max(after, la if la is not None else after), min(by, lb if lb is not None else by)
            if na < nb and (na, nb) != (after, by):
                after, by = na, nb
                narrowed.append((k, x, after, by))
        # a reading on printk's clock is on the kernel records' own: no allowance between them
        w0 = after + 1 - (0 if st.before.printk and after == st.after_ns else apart)
        w1 = by + (0 if st.after.printk and by == st.by_ns else apart)
        segs.append((lo, w0, a.offset_ns, a.drift_ppm, a.uncertainty_ns, "before the step" if n == 2 else
                     f"before step {k + 1}"))
        segs.append((w0, w1, (a.offset_ns + b.offset_ns) // 2, None,
                     abs(b.offset_ns - a.offset_ns) // 2 + max(a.uncertainty_ns, b.uncertainty_ns),
                     "the step's window" if n == 2 else f"step {k + 1}'s window"))
        lo = w1
    last = entries[-1]
    segs.append((lo, None, last.offset_ns, last.drift_ppm, last.uncertainty_ns,
                 "after the step" if n == 2 else f"after step {n - 1}"))
    told = []
    for k, (st, a, b) in enumerate(zip(steps, entries, entries[1:])):
        t = {"after_boot_s": st.after_ns / 1e9, "by_boot_s": st.by_ns / 1e9, "delta_ns": b.offset_ns - a.offset_ns,
             "last_before": {"method": st.before.what, "source": st.before.source, "line": st.before.line},
             "first_after": {"method": st.after.what, "source": st.after.source, "line": st.after.line},
             "before_method": a.method, "after_method": b.method}
        g = win[k][2]
        if isinstance(g, Overlap):
            t["after_boot_s"], t["by_boot_s"] = win[k][0] / 1e9, win[k][1] / 1e9
            crowd = (f"the snapshots of its series crowd from {g.first_ns / 1e9:.6f} to {g.last_ns / 1e9:.6f} s "
                     "(reads from both sides of the step share those stamps)")
            if win[k][0] > st.after_ns:
                t["last_before"] = {"method": f"the last read before the step, stamped by {g.last_ns / 1e9:.6f} s: "
                                              + crowd, "source": g.source, "line": None}
            if win[k][1] < st.by_ns:
                t["first_after"] = {"method": f"the first read after the step, stamped by "
                                              f"{(g.first_ns + g.period_ns) / 1e9:.6f} s: " + crowd,
                                    "source": g.source, "line": None}
        elif g is not None:
            t["after_boot_s"], t["by_boot_s"] = win[k][0] / 1e9, win[k][1] / 1e9
            if win[k][0] > st.after_ns:
                t["last_before"] = {"method": f"the snapshot at {g.before_ns / 1e9:.6f} s, before the only gap of its "
                                              "series that can hold the step", "source": g.source, "line": None}
            if win[k][1] < st.by_ns:
                t["first_after"] = {"method": f"the snapshot at {g.after_ns / 1e9:.6f} s, after that gap",
                                    "source": g.source, "line": None}
        x = next((y for y in narrowed if y[0] == k), None)
        if x is not None:
            # the window as the log's lines narrow it (boot times of the step's earliest and latest instant)
            _, x, after, by = x
            t["after_boot_s"], t["by_boot_s"] = after / 1e9, by / 1e9
            if x.after_wall_ns is not None and t["after_boot_s"] > st.after_ns / 1e9:
                t["last_before"] = {"method": PHASE_METHOD, "source": x.source, "line": x.after_line}
            if x.before_wall_ns is not None and t["by_boot_s"] < st.by_ns / 1e9:
                t["first_after"] = {"method": PHASE_METHOD, "source": x.source, "line": x.before_line}
        told.append(t)
    told = tuple(told)
    desc = "; ".join(f"the wall clock stepped {t['delta_ns'] / 1e9:+.3f} s between boot {t['after_boot_s']:.3f} "
                     f"and {t['by_boot_s']:.3f} s" for t in told)
    return replace(last, uncertainty_ns=max(g[4] for g in segs), segments=tuple(segs), steps=told,
                   method=f"{last.method} ({desc}; earlier records placed by {entries[0].method})")


LOG_STEP_WHAT = "before the wall clock's step that the log's stamps show: not placed"


def latest_log_step(logged: list):
    """Of each log's last step with a line written after it, the one with the latest such line
    (the step the collection-time anchors are after), or None."""
    last = {x.source: x for x in logged if x.before_wall_ns is not None}
    return max(last.values(), key=lambda x: x.before_wall_ns) if last else None


def unplaced_before_log_step(entry: ClockEntry, logged: list, readings: list, printk_ns: int) -> ClockEntry:
    """A boot clock placed by readings all taken after a step that only a log's stamps show
    (``logged``, :func:`analysis.clock_phase.log_steps`; no reading sees the step): its offset
    holds after that step, and nothing in the bundle says by how much the clock stepped, so the
    records before it are left unplaced rather than placed on the later offset.

    The step came before the log's line written by ``before_wall_ns`` on the later offset, at boot
    ``before_wall_ns - offset``: a record from the latest such instant on (the lowest offset the
    entry allows, and printk's allowance for the kernel's records) was written after it. Where a
    reading lies before the step's earliest instant (the line written before it, at the highest
    offset the entry allows) the readings span the step and agree within their uncertainties: the
    entry stands as it is. A reading taken after the step, and before that line, moves the cut to
    it: the offset holds from the first reading on.

    Worked example (``tests/analysis/test_clock_steps.py``; the log step of the development
    recording ``leak-r1-wallstep``'s torchrun log): its line 85 was written at 09:27:59 (UTC
    1796203679 s) before the step, its line 498 by 1796203701.152 s after it. An entry of
    1796203210.700 s ± 100 ms read after the step, printk stamps up to 500 s (10 ms of allowance):
    the step came before boot 1796203701.152 - 1796203210.600 + 0.010 = 490.562 s, and the
    records before that instant are not placed. A reading at boot 480 s moves the cut to 480.010 s;
    one at 460 s, before the step's earliest instant (1796203679 - 1796203210.800 = 468.2 s),
    leaves the entry as it is."""
    if entry.offset_ns is None or entry.segments or not logged:
        return entry
    x = latest_log_step(logged)
    if x is None:
        return entry
    cut = x.before_wall_ns - (entry.offset_ns - (entry.uncertainty_ns or 0)) + _printk_allowance(printk_ns)
    if x.after_wall_ns is not None and any(
            r.local_ns < x.after_wall_ns - (entry.offset_ns + (entry.uncertainty_ns or 0)) for r in readings):
        return entry
    # the readings hold from the first of them on, whichever side of it the step was
    first = min(readings, key=lambda r: r.local_ns, default=None)
    if first is not None:
        cut = min(cut, first.local_ns + (0 if first.printk else _printk_allowance(printk_ns)))
    what = f"after the wall clock's step ({x.source} line {x.before_line} was written after it)"
    step = {"log": x.source, "after_line": x.after_line, "before_line": x.before_line, "by_boot_s": cut / 1e9,
            "phase_before_s": [[a / 1e9, b / 1e9] for a, b in x.arcs_before],
            "phase_after_s": [[a / 1e9, b / 1e9] for a, b in x.arcs_after], "method": entry.method}
    return replace(entry, segments=((None, cut, None, None, None, LOG_STEP_WHAT),
                                    (cut, None, entry.offset_ns, entry.drift_ppm, entry.uncertainty_ns, what)),
                   steps=(step,),
                   method=f"{entry.method} (the wall clock stepped before boot {cut / 1e9:.3f} s, as the stamps of "
                          f"{x.source} show; the records before it are not placed)")


UNPLACED_SIDE_WHAT = "a side of a step of the wall clock that no reading places: not placed"


def unplaced_beyond_steps(entry: ClockEntry, steps: list, readings: list, printk_ns: int,
                          late: ClockEntry | None = None) -> ClockEntry:
    """The readings show steps of the wall clock (:func:`analysis.clock_steps.runs`) but some stretch
    between them cannot be placed on its own (its pairs bound the offset on one side only): the
    stretch before the first step keeps the offset found where its readings all allow it (or the
    one after the last step does), the others -- and the steps' windows beside them -- are left
    unplaced, never placed by another stretch's offset. ``late``: the offset of the anchors read
    when the bundle was collected (dmesg -T's conversion), after every step: where the earlier
    stretch keeps the offset found and the last stretch's readings allow ``late``, that stretch
    takes it. Unchanged where no stretch fits the offset."""
    if entry.offset_ns is None or not steps:
        return entry
    off, unc = entry.offset_ns, entry.uncertainty_ns or 0
    n = len(steps) + 1
    fits = [True] * n
    for r in readings:
        k = sum(r.local_ns >= st.by_ns for st in steps)
        if r.lo() > off + unc or r.hi() < off - unc:
            fits[k] = False
    if not any(fits) or all(fits):
        return entry
    apart = _printk_allowance(printk_ns)
    # only the stretch before the first step or after the last one keeps the offset (the readings of
    # the stretches between, one-sided, need not even put the steps' windows in order)
    if fits[0]:
        cut = steps[0].after_ns + 1 - apart
        merged = [(None, cut, off, entry.drift_ppm, unc, "before the wall clock's first step, where the readings "
                                                        "fit the offset"),
                  (cut, None, None, None, None, UNPLACED_SIDE_WHAT)]
        if late is not None and late.offset_ns is not None and not late.segments and all(
                r.lo() <= late.offset_ns + late.uncertainty_ns and r.hi() >= late.offset_ns - late.uncertainty_ns
                for r in readings if r.local_ns >= steps[-1].by_ns):
            cut2 = max(cut, steps[-1].by_ns + apart)
            merged[1:] = [(cut, cut2, None, None, None, UNPLACED_SIDE_WHAT),
                          (cut2, None, late.offset_ns, late.drift_ppm, late.uncertainty_ns,
                           f"after the wall clock's last step, by {late.method}")]
    elif fits[-1]:
        cut = steps[-1].by_ns + apart
        merged = [(None, cut, None, None, None, UNPLACED_SIDE_WHAT),
                  (cut, None, off, entry.drift_ppm, unc, "after the wall clock's last step, where the readings "
                                                         "fit the offset")]
    else:
        return entry
    told = tuple({"unplaced_side": True, "after_boot_s": st.after_ns / 1e9, "by_boot_s": st.by_ns / 1e9,
                  "before": st.before.what, "after": st.after.what, "method": entry.method} for st in steps)
    return replace(entry, segments=tuple(merged), steps=told,
                   method=entry.method + " (the wall clock stepped where the readings show; the stretches they "
                                         "cannot place are not placed)")


def widen_for_gaps(entry: ClockEntry, gaps: list, readings: list) -> ClockEntry:
    """A placed clock with no step, where a snapshot series shows a gap that a step of the wall
    clock may explain (:func:`analysis.clock_steps.sampler_gaps`) and every reading lies on one side
    of it: the records on the other side may be up to the gap's excess off the readings' offset (a
    forward step puts the earlier records lower, the later ones higher), so their stretch of the clock
    gets an offset window that covers it. The cut is the far edge of where the snapshot beside the gap
    can lie on this clock, so that a record near the gap is widened too. Readings with no instant on
    this clock (a conversion done when the bundle was collected) count as after every gap.

    Worked example (``tests/analysis/test_clock_steps.py``): a boot clock placed at 1796203210.642 s
    ± 10 ms by readings at boot 491 s and later, with a gap of the snapshots from 1796203684.584640
    to 1796203687.484659 s, excess 2.401594 s: the snapshot after the gap is at boot 476.852659 s
    or earlier (1796203687.484659 - 1796203210.632), and records before then are placed at
    1796203209.441203 s ± 1.210797 s, which covers both 1796203208.240 s and the readings' offset."""
    if entry.offset_ns is None or entry.segments or entry.drift_ppm is not None or not gaps:
        return entry
    off, unc = entry.offset_ns, entry.uncertainty_ns or 0
    times = [r.local_ns for r in readings]
    first, last = min(times, default=None), max(times, default=None)
    before = [g for g in gaps if first is None or g.after_ns - (off - unc) <= first]
    after = [g for g in gaps if last is not None and g.before_ns - (off + unc) >= last
             and g.after_ns - (off - unc) > last] if times else []
    if not before and not after:
        return entry
    segs, told = [], []
    # earlier stretches, farthest first: each is off by up to the excess of every gap between it and
    # the readings
    cuts = sorted(before, key=lambda g: g.after_ns)
    for k, g in enumerate(cuts):
        x = sum(h.excess_ns for h in cuts[k:])
        segs.append((None if k == 0 else cuts[k - 1].after_ns - (off - unc), g.after_ns - (off - unc),
                     off - x // 2, None, unc + x - x // 2,
                     f"before a gap of {g.source}'s snapshots ({g.before_ns / 1e9:.6f} -> {g.after_ns / 1e9:.6f} s): "
                     f"the wall clock may have stepped up to +{x / 1e9:.3f} s since, and no reading is before it"))
        told.append({"gap": g.source, "before_s": g.before_ns / 1e9, "after_s": g.after_ns / 1e9,
                     "excess_s": g.excess_ns / 1e9, "side": "before", "method": entry.method})
    lo = segs[-1][1] if segs else None
    cuts = sorted(after, key=lambda g: g.before_ns)
    mid_to = cuts[0].before_ns - (off + unc) if cuts else None
    segs.append((lo, mid_to, off, None, unc, "where the readings are"))
    for k, g in enumerate(cuts):
        x = sum(h.excess_ns for h in cuts[:k + 1])
        segs.append((g.before_ns - (off + unc), None if k == len(cuts) - 1 else cuts[k + 1].before_ns - (off + unc),
                     off + x // 2, None, unc + x - x // 2,
                     f"after a gap of {g.source}'s snapshots ({g.before_ns / 1e9:.6f} -> {g.after_ns / 1e9:.6f} s): "
                     f"the wall clock may have stepped up to +{x / 1e9:.3f} s there, and no reading is after it"))
        told.append({"gap": g.source, "before_s": g.before_ns / 1e9, "after_s": g.after_ns / 1e9,
                     "excess_s": g.excess_ns / 1e9, "side": "after", "method": entry.method})
    return replace(entry, uncertainty_ns=max(g[4] for g in segs), segments=tuple(segs), steps=tuple(told))


OVERLAP_WHAT = "before the wall clock's step back that the snapshots show: not placed"


def unplaced_before_overlap(entry: ClockEntry, overlaps: list, readings: list, printk_ns: int) -> ClockEntry:
    """A placed clock with no step, every reading taken after a crowded stretch of a snapshot series
    (:class:`analysis.clock_steps.Overlap`: the wall clock stepped back while the series was taken):
    its offset holds after that step, and how far the clock stepped is not known (a series that
    stalled at the step makes the step larger than the stretch), so the records before the step are
    left unplaced rather than placed on the later offset. Readings with no instant on this clock (a
    conversion done when the bundle was collected) count as after it.

    The first read after the step is stamped by the stretch's start and a period, on the later
    offset: at boot ``first + period - offset`` at the latest (the lowest offset the entry allows,
    and printk's allowance for the kernel's records). Every record from then on was written after
    the step; a reading before that instant may be on either side, and the entry then stands.

    Worked example (``tests/analysis/test_clock_steps.py``, the series of the module docstring of
    :mod:`analysis.clock_steps`): placed at 998.7 s ± 10 ms by readings at boot 130 s and later,
    the stretch from 1104.5 to 1105.7 s: the first read after the step is at boot
    1104.5 + 0.5 - 998.69 = 106.31 s or earlier, and the records before then are not placed."""
    if entry.offset_ns is None or entry.segments or entry.drift_ppm is not None:
        return entry
    off, unc = entry.offset_ns, entry.uncertainty_ns or 0
    apart = _printk_allowance(printk_ns)
    times = [r.local_ns for r in readings]
    cut, o = max(((x.first_ns + x.period_ns - (off - unc), x) for x in overlaps if x.crowded
                  and all(t >= x.first_ns + x.period_ns - (off - unc) for t in times)),
                 key=lambda c: c[0], default=(None, None))
    if o is None:
        return entry
    return _unplaced_before(entry, cut + apart, o)


def _unplaced_before(entry: ClockEntry, cut: int, o) -> ClockEntry:
    """``entry`` from ``cut`` on, nothing before it: a step back that the crowded stretch ``o``
    shows came before ``cut``, by an amount nothing in the bundle measures."""
    return replace(entry, segments=((None, cut, None, None, None, OVERLAP_WHAT),
                                    (cut, None, entry.offset_ns, None, entry.uncertainty_ns,
                                     f"after the wall clock's step back ({o.source}'s snapshots crowd from "
                                     f"{o.first_ns / 1e9:.6f} to {o.last_ns / 1e9:.6f} s)")),
                   steps=({"overlap": o.source, "first_s": o.first_ns / 1e9, "last_s": o.last_ns / 1e9,
                           "method": entry.method},),
                   method=entry.method + f"; the wall clock stepped back where {o.source}'s snapshots crowd "
                                         f"({o.first_ns / 1e9:.6f}-{o.last_ns / 1e9:.6f} s): the records before "
                                         "then are not placed")


def _one_log(logged: list, steps: int) -> list:
    """The log steps of the one log (the first by path) that shows ``steps`` steps, in order."""
    by: dict[str, list] = {}
    for x in logged:
        by.setdefault(x.source, []).append(x)
    return next((v for _, v in sorted(by.items()) if len(v) == steps), [])


def _step_link(host: str, source: str, summary: str, evidence: tuple, confidence: float):
    """A ``clock_step`` finding about a step that one source shows."""
    from .links import Link, LinkKind, Provenance
    return Link(kind=LinkKind.CLOCK_STEP, ts_ns=None, source=source, host=host or None, summary=summary,
                evidence=evidence, provenance=Provenance.INFERRED, confidence=confidence)


def _gap_told(e: ClockEntry, st: dict) -> tuple:
    from .links import Evidence
    return ((f"The snapshots of {st['gap']} on host {e.host or '?'} skip from {st['before_s']:.3f} to "
             f"{st['after_s']:.3f} s: the wall clock may have stepped forward there by up to {st['excess_s']:.3f} s, "
             f"or the snapshots stalled, which their stamps cannot tell apart; no reading of the clocks lies "
             f"{st['side']} it, so the {e.domain} records {st['side']} it are placed by {st['method']} with that much "
             f"more uncertainty"),
            (Evidence(st["gap"], None, f"snapshot at {st['before_s']:.6f} s"),
             Evidence(st["gap"], None, f"next snapshot at {st['after_s']:.6f} s")), 0.5)


def _overlap_told(e: ClockEntry, st: dict) -> tuple:
    from .links import Evidence
    first, last = (Evidence(st["overlap"], None, f"snapshot at {st[k]:.6f} s") for k in ("first_s", "last_s"))
    return ((f"The wall clock of host {e.host or '?'} stepped back while {st['overlap']} was taken: its snapshots "
             f"crowd from {st['first_s']:.3f} to {st['last_s']:.3f} s, stamped twice over by reads from before and "
             f"after the step; nothing in the bundle pairs the clocks before it, so the {e.domain} records before it "
             f"are not placed and those after it are placed as before ({st['method']})"), (first, last), 0.8)


def _log_told(e: ClockEntry, st: dict) -> tuple:
    from .links import Evidence
    return ((f"The wall clock of host {e.host or '?'} stepped while {st['log']} was written (its c10 stamps fit one "
             f"phase on CLOCK_MONOTONIC up to line {st['after_line']} and another from line {st['before_line']} on: an "
             f"NTP step, or a VM paused by its host); nothing in the bundle pairs the clocks before it, so the "
             f"{e.domain} records before it are not placed and those after it are placed as before ({st['method']})"),
            (Evidence(st["log"], st["after_line"], "last line written before the step"),
             Evidence(st["log"], st["before_line"], "first line written after the step")), 0.9)


# a step one source shows, by the key its entry's ``steps`` names the source under: summary, evidence, confidence
_ONE_SOURCE_STEPS = {"gap": _gap_told, "overlap": _overlap_told, "log": _log_told}


def skew_links(entries: list[ClockEntry]) -> list:
    """Anchors that disagree beyond their stated uncertainties become clock_skew findings; a wall
    clock that stepped, a clock_step finding."""
    from .links import Evidence, Link, LinkKind, Provenance
    out = []
    for e in entries:
        for c in e.conflicts:
            d = c["difference_ns"] / 1e9
            ev = tuple(Evidence(x["source"], x.get("line"), f"offset {x['offset_ns'] / 1e9:.6f} s"
                                if x.get("offset_ns") is not None else f"phase {x.get('phase_s')} s")
                       for x in (c["evidence"] + e.evidence[:2]))
            out.append(Link(
                kind=LinkKind.CLOCK_SKEW, ts_ns=None, source=c["evidence"][0]["source"] if c["evidence"] else "",
                host=e.host or None,
                summary=(f"Clock anchors of host {e.host or '?'} disagree: {c['method']} places the {e.domain} clock "
                         f"{d:+.3f} s from {e.method} (stated uncertainties ±{c['uncertainty_ns'] / 1e9:.3f} s and "
                         f"±{e.uncertainty_ns / 1e9:.3f} s); times use {e.method}"),
                evidence=ev, provenance=Provenance.INFERRED, confidence=0.9))
        for st in e.steps:
            if st.get("unplaced_side"):
                out.append(Link(
                    kind=LinkKind.CLOCK_STEP, ts_ns=None, source="", host=e.host or None,
                    summary=(f"The wall clock of host {e.host or '?'} stepped against its {e.domain} clock between boot "
                             f"{st['after_boot_s']:.3f} s and {st['by_boot_s']:.3f} s (the readings before and after "
                             f"disagree: {st['before']}; {st['after']}), and the readings on one side bound the offset "
                             f"on one side only: the {e.domain} records there are not placed; the others are placed "
                             f"by {st['method']}"),
                    evidence=(), provenance=Provenance.INFERRED, confidence=0.9))
                continue
            told = next((k for k in _ONE_SOURCE_STEPS if k in st), None)
            if told is not None:
                out.append(_step_link(e.host, st[told], *_ONE_SOURCE_STEPS[told](e, st)))
                continue
            a, b = st["last_before"], st["first_after"]
            win = next((g for g in e.segments if g[5].endswith("window")), None)
            out.append(Link(
                kind=LinkKind.CLOCK_STEP, ts_ns=None, source=b["source"] or "", host=e.host or None,
                summary=(f"The wall clock of host {e.host or '?'} stepped {st['delta_ns'] / 1e9:+.3f} s against its "
                         f"boot clock between boot {st['after_boot_s']:.3f} s and {st['by_boot_s']:.3f} s (an NTP "
                         f"step, or a VM paused by its host): kernel and perf times before it are placed by "
                         f"{st['before_method']}, after it by {st['after_method']}"
                         + (f"; those in between may be on either side and are placed ±{win[4] / 1e9:.3f} s"
                            if win else "")),
                evidence=(Evidence(a["source"] or "", a["line"], f"last reading before: {a['method']}"),
                          Evidence(b["source"] or "", b["line"], f"first reading after: {b['method']}")),
                provenance=Provenance.INFERRED, confidence=0.9))
    return out


def align(store, incident_id: str) -> list[ClockEntry]:
    """Compute clock_map for the incident and fill ts_utc_ns. Returns the entries."""
    doms = store.query(
        """SELECT DISTINCT COALESCE(host, '') AS host, clock_domain AS domain FROM sources
           WHERE incident_id = ? AND clock_domain IS NOT NULL""", [incident_id])
    from .clock_match import bounds_by_host, counted_kill_windows, launcher_lines, matches
    from .clock_steps import runs, sampler_gaps, sampler_overlaps, sampler_series
    pairs = _kernel_pairs(store, incident_id)
    launcher = launcher_lines(store, incident_id)
    anchors = collect_anchors(store, incident_id, pairs, launcher)
    by_host: dict[str, list[Anchor]] = {}
    for a in anchors:
        by_host.setdefault(a.host, []).append(a)
    # A single-host bundle whose anchors carry no host still anchors that host.
    hosts = {d["host"] for d in doms}
    if "" in by_host and len(hosts - {""}) == 1:
        only = next(iter(hosts - {""}))
        by_host.setdefault(only, []).extend(by_host[""])
    from .clock_collectives import host_offsets
    pair_bounds = bounds_by_host(store, incident_id, launcher)
    matched, _contradictions = matches(store, incident_id, launcher, pair_bounds)
    from .clock_phase import log_steps, phases
    phase_of = phases(store, incident_id, {d["host"] for d in doms})
    logged = log_steps(store, incident_id, {d["host"] for d in doms})
    series = sampler_series(store, incident_id)
    gaps, overlaps = sampler_gaps(store, incident_id, series), sampler_overlaps(store, incident_id, series)
    for per_host in (gaps, overlaps):
        if "" in per_host and len({d["host"] for d in doms} - {""}) == 1:
            per_host.setdefault(next(iter({d["host"] for d in doms} - {""})), per_host.pop(""))
    cross = {h.host: h for h in host_offsets(store, incident_id)}
    refs = {h.reference for h in cross.values()}
    printk = {r["host"]: r["last"] for r in store.query(
        """SELECT COALESCE(s.host, '') AS host, max(e.ts_raw_ns) AS last
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND s.clock_domain = 'boot' AND s.kind = 'dmesg' GROUP BY 1""", [incident_id])}
    kpairs: dict[str, list] = {}
    for p in pairs:
        kpairs.setdefault(p["host"], []).append(p)
    kformats = {}
    for r in store.query("""SELECT COALESCE(host, '') AS host, format FROM sources
                            WHERE incident_id = ? AND clock_domain = ?""", [incident_id, CLOCK_KERNEL_WALL]):
        kformats.setdefault(r["host"], set()).add(r["format"])
    wall_hosts = {d["host"] for d in doms if d["domain"] == CLOCK_WALL}
    entries = []
    boot_of: dict[str, ClockEntry] = {}
    for d in sorted(doms, key=lambda d: (d["host"], d["domain"])):
        host, dom = d["host"], d["domain"]
        if dom == CLOCK_BOOT:
            mine, pk = by_host.get(host, []), printk.get(host) or 0
            readings = step_readings(mine, pair_bounds.get(host, []), pk)
            steps = runs(readings)
            stepped = (solve_stepped(host, mine, pair_bounds.get(host, []), pk, steps, logged.get(host),
                                     phase_of.get(host), gaps.get(host, ()), overlaps.get(host, ()))
                       if steps else None)
            boot_of[host] = stepped or unplaced_before_log_step(
                solve_boot(host, mine, pk, matched.get(host), phase_of.get(host)),
                [] if steps else logged.get(host, []), readings, pk)
            if steps and not stepped:
                late = [a for a in mine if not a.name.startswith(TIMED_ANCHORS)]
                x = latest_log_step(logged.get(host, []))     # the phase of the log's last stretch, if one
                ph = ({"arcs_ns": list(x.arcs_after), "logs": [x.source], "pairs": x.pairs}
                      if x is not None and x.arcs_after else None)
                boot_of[host] = unplaced_beyond_steps(boot_of[host], steps, readings, pk,
                                                      solve_boot(host, late, pk, None, ph) if late else None)
            elif not stepped:
                boot_of[host] = unplaced_before_overlap(
                    widen_for_gaps(boot_of[host], gaps.get(host, []), readings), overlaps.get(host, []), readings, pk)
            entries.append(boot_of[host])
        elif dom == CLOCK_KERNEL_WALL:
            entries.append(solve_kernel_wall(host, boot_of.get(host), kpairs.get(host, []),
                                             kformats.get(host, set()), logged.get(host, []), gaps.get(host, []),
                                             overlaps.get(host, [])))
        elif dom == CLOCK_WALL and host in cross:
            h = cross[host]
            entries.append(ClockEntry(
                host, dom, h.offset_ns, h.uncertainty_ns,
                f"collectives: {h.pairs} matched with the ranks on {h.reference} (the reference host)",
                ({"reference": h.reference, "pairs": h.pairs, "causality_bounds_ns": list(h.bounds)},)))
        elif dom == CLOCK_WALL:
            # The reference: every other clock of the host is placed against this one, so it is
            # exact by definition; against UTC, or against another host, its NTP error is not in
            # the bundle and is assumed (a host that is not the reference gets NTP_ASSUMED_NS).
            ref = host in refs or len(wall_hosts) <= 1
            note = (" (the reference host for cross-host alignment)" if host in refs else
                    "" if ref else f"; NTP error against the other hosts assumed within "
                                   f"{NTP_ASSUMED_NS / 1e6:g} ms")
            entries.append(ClockEntry(host, dom, 0, 0 if ref else NTP_ASSUMED_NS,
                                      "host wall clock taken as UTC (NTP assumed; local times converted "
                                      "with the bundle's time zone)" + note,
                                      allowances=() if ref else ({"what": "NTP error between hosts (assumed)",
                                                                  "ns": NTP_ASSUMED_NS},)))
        elif dom == CLOCK_NONE:
            continue
        else:
            entries.append(ClockEntry(host, dom, None, None, f"none: no anchor for the {dom} clock yet"))
    cur = store.cursor()
    cur.execute("DELETE FROM clock_map WHERE incident_id = ?", [incident_id])
    store.insert_rows("clock_map", [e.row(incident_id) for e in entries])
    cur.execute("DELETE FROM clock_segments WHERE incident_id = ?", [incident_id])
    store.insert_rows("clock_segments", [r for e in entries for r in e.segment_rows(incident_id)])
    # members is a small table, always in the database (also for attached incidents); a table
    # without the incident's rows has none to place
    if has_rows(store, incident_id, "members"):
        _place(cur, "members", incident_id)
    attached = getattr(store, "attached_root", None)
    if attached is not None and attached(incident_id):
        # Heavy tables read from Parquet (server/store.py): their views compute ts_utc_ns from
        # a per-source offset (the same expression as below) and the last boot of a kernel log
        # with reboots (events of earlier boots stay unplaced, as below).
        cur.execute("DELETE FROM source_offsets WHERE incident_id = ?", [incident_id])
        cur.execute(
            """INSERT INTO source_offsets (incident_id, source_id, offset_ns, drift_ppm, boot, from_ns, to_ns)
               SELECT s.incident_id, s.source_id, CASE WHEN g.incident_id IS NULL THEN c.offset_ns ELSE g.offset_ns END,
                      CASE WHEN g.incident_id IS NULL THEN c.drift_ppm ELSE g.drift_ppm END,
                      CASE WHEN s.clock_domain = 'boot' THEN
                        (SELECT max(TRY_CAST(f.value AS INTEGER)) - 1 FROM facts f
                         WHERE f.incident_id = s.incident_id AND f.source_id = s.source_id AND f.key = 'boots'
                           AND TRY_CAST(f.value AS INTEGER) > 1) END,
                      g.from_ns, g.to_ns
               FROM sources s JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
                    AND c.domain = s.clock_domain
               LEFT JOIN clock_segments g ON g.incident_id = c.incident_id AND g.host = c.host AND g.domain = c.domain
               WHERE s.incident_id = ? AND c.offset_ns IS NOT NULL""", [incident_id])
        _place_rows(store, incident_id, counted_kill_windows(store, incident_id), native=False)
        return entries
    for table in ("events", "samples", "metrics", "collectives", "steps"):
        if has_rows(store, incident_id, table):
            _place(cur, table, incident_id)
    # A kernel log with reboots in it: the anchors were read in the last boot, so the records
    # of earlier boots (their own boot clock) stay unplaced rather than being placed wrongly.
    cur.execute(
        """UPDATE main.events AS e SET ts_utc_ns = NULL
           FROM sources s, facts f
           WHERE e.incident_id = ? AND s.incident_id = e.incident_id AND s.source_id = e.source_id
             AND s.clock_domain = 'boot' AND f.incident_id = e.incident_id AND f.source_id = e.source_id
             AND f.key = 'boots' AND TRY_CAST(f.value AS INTEGER) > 1
             AND COALESCE(TRY_CAST(json_extract_string(e.attrs, '$.boot') AS INTEGER), 0)
                 <> TRY_CAST(f.value AS INTEGER) - 1""", [incident_id])
    _place_rows(store, incident_id, counted_kill_windows(store, incident_id), native=True)
    return entries


_KERNEL_PLACED = """SELECT e.source_id, e.line, e.ts_utc_ns, {unc} AS unc
              FROM events e JOIN sources s USING (incident_id, source_id)
              LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                   AND c.domain = s.clock_domain
              WHERE e.incident_id = ? AND s.format IN ('dmesg_raw', 'dmesg_ctime', 'dmesg_iso')"""


def _place_rows(store, incident_id: str, counted: list[dict], native: bool) -> None:
    """``row_times``: kernel records placed by other evidence of the same instant than their log's
    clock, where it is narrower (``native``: copy the times into the events table; an attached
    incident's events view reads them from ``row_times``).

    First an OOM kill that a cgroup's counter shows (``counted``,
    :func:`analysis.clock_match.counted_kill_windows`): the counter's snapshots are on the host's wall
    clock, so they place the kill also where its kernel log's clock is not placed (records printed
    before a step of the wall clock) or is placed more loosely; where the kill is placed, the two
    windows intersect. Then the records of the files the collector captured that carry no time of
    their own (:func:`_captured_rows`). Then each record of a log dmesg converted to wall time that is also in the raw
    log takes the placed time of its raw copy, and that copy's uncertainty, where narrower: the
    converted second says only that the record lies somewhere in a window of up to two seconds, the
    raw stamp where. A copy is taken only where its window and the converted record's own window
    overlap, so a pair matched wrongly (a raw log and a converted one that start at different
    records, with texts that repeat) leaves the record where its own clock puts it. Where several
    raw logs hold the record, the copy with the narrowest window is taken.
    """
    cur = store.cursor()
    cur.execute("DELETE FROM row_times WHERE incident_id = ?", [incident_id])
    update = """UPDATE main.events AS e SET ts_utc_ns = r.ts_utc_ns FROM row_times r
                WHERE e.incident_id = ? AND r.incident_id = e.incident_id AND r.source_id = e.source_id
                  AND r.line = e.line"""
    if counted:
        walls = {r["host"]: r for r in store.query(
            "SELECT host, offset_ns, uncertainty_ns FROM clock_map WHERE incident_id = ? AND domain = ?",
            [incident_id, CLOCK_WALL])}
        placed = {(r["source_id"], r["line"]): r for r in store.query(
            _KERNEL_PLACED.format(unc=row_uncertainty_sql()) + " AND e.kind = 'oom_kill'", [incident_id])}
        rows = []
        for k in counted:
            w = walls.get(k["host"]) or (next(iter(walls.values())) if len(walls) == 1 else None)
            if w is None or w["offset_ns"] is None:
                continue
            lo = k["lo_ns"] + w["offset_ns"] - (w["uncertainty_ns"] or 0)
            hi = k["hi_ns"] + w["offset_ns"] + (w["uncertainty_ns"] or 0)
            own = placed.get((k["source_id"], k["line"]))
            if own is not None and own["ts_utc_ns"] is not None and own["unc"] is not None:
                olo, ohi = own["ts_utc_ns"] - own["unc"], own["ts_utc_ns"] + own["unc"]
                if olo > hi or ohi < lo or ohi - olo <= hi - lo:
                    continue      # its own window is narrower (or they disagree: left as its clock says)
                lo, hi = max(lo, olo), min(hi, ohi)
            rows.append({"incident_id": incident_id, "source_id": k["source_id"], "line": k["line"],
                         "ts_utc_ns": (lo + hi) // 2, "uncertainty_ns": max(1, (hi - lo + 1) // 2),
                         "by_source_id": k["snapshot_source_id"], "by_line": None})
        if rows:
            store.insert_rows("row_times", list({(r["source_id"], r["line"]): r for r in rows}.values()))
            if native:
                cur.execute(update, [incident_id])
    if _captured_rows(store, incident_id) and native:
        cur.execute(update, [incident_id])
    if not _has_kernel_twins(store, incident_id):
        return
    unc = row_uncertainty_sql()
    cur.execute(
        f"""INSERT OR REPLACE INTO row_times (incident_id, source_id, line, ts_utc_ns, uncertainty_ns,
                                              by_source_id, by_line)
            WITH {_TWINS_CTE}, placed AS ({_KERNEL_PLACED.format(unc=unc)})
            SELECT ?, t.source_id, t.line, r.ts_utc_ns, r.unc, r.source_id, r.line
            FROM tw JOIN placed r ON r.source_id = tw.raw_sid AND r.line = tw.raw_line
                    JOIN placed t ON t.source_id = tw.t_sid AND t.line = tw.t_line
            WHERE r.ts_utc_ns IS NOT NULL AND r.unc IS NOT NULL
              AND (t.ts_utc_ns IS NULL OR t.unc IS NOT NULL AND abs(r.ts_utc_ns - t.ts_utc_ns) <= r.unc + t.unc
                                          AND r.unc < t.unc)
            QUALIFY row_number() OVER (PARTITION BY t.source_id, t.line ORDER BY r.unc, r.source_id, r.line) = 1""",
        [incident_id, incident_id, incident_id])
    if native:
        cur.execute(update, [incident_id])


def _captured_rows(store, incident_id: str) -> int:
    """``row_times`` of the records that carry no time of their own (a stack dump, a ``df``) in a
    file the collector captured: its manifest dates each capture (``capture`` events, naming the
    folder or file it wrote), so they are placed at that time, with that clock's uncertainty.
    Returns the number of records placed."""
    if not store.query("""SELECT 1 FROM events WHERE incident_id = ? AND category = 'collector' AND name = 'capture'
                          AND ts_utc_ns IS NOT NULL LIMIT 1""", [incident_id]):
        return 0
    cur = store.cursor()
    before = cur.execute("SELECT count(*) FROM row_times WHERE incident_id = ?", [incident_id]).fetchone()[0]
    cur.execute(
        f"""INSERT OR IGNORE INTO row_times (incident_id, source_id, line, ts_utc_ns, uncertainty_ns, by_source_id,
                                             by_line)
            WITH cap AS (
                SELECT e.source_id AS by_sid, e.line AS by_line, COALESCE(e.host, s.host, '') AS host,
                       e.ts_utc_ns AS ts, {row_uncertainty_sql()} AS unc,
                       -- (named from the manifest's folder: node bundles side by side each have one)
                       regexp_extract(s.path, '^(.*/)', 1) || json_extract_string(e.attrs, '$.path') AS path
                FROM events e JOIN sources s USING (incident_id, source_id)
                LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                     AND c.domain = s.clock_domain
                WHERE e.incident_id = ? AND e.category = 'collector' AND e.name = 'capture'
                  AND e.ts_utc_ns IS NOT NULL AND COALESCE(json_extract_string(e.attrs, '$.path'), '') <> '')
            SELECT ?, e.source_id, e.line, cap.ts, COALESCE(cap.unc, 0), cap.by_sid, cap.by_line
            FROM events e JOIN sources s USING (incident_id, source_id)
                 JOIN cap ON cap.path IS NOT NULL AND starts_with(s.path, cap.path)
                      AND (cap.host = '' OR s.host IS NULL OR s.host = cap.host)
            WHERE e.incident_id = ? AND e.ts_utc_ns IS NULL AND e.line IS NOT NULL AND e.source_id <> cap.by_sid
            QUALIFY row_number() OVER (PARTITION BY e.source_id, e.line ORDER BY cap.ts, cap.by_sid, cap.by_line) = 1""",
        [incident_id, incident_id, incident_id])
    return cur.execute("SELECT count(*) FROM row_times WHERE incident_id = ?", [incident_id]).fetchone()[0] - before


def _place(cur, table: str, incident_id: str) -> None:
    """ts_utc_ns of a table's rows from their source's clock_map entry (host and domain), or
    from the stretch of ``clock_segments`` a row's raw time is in, for a clock that stepped; null
    for the rows of a source that neither places (the loader wrote the raw time there, see
    :func:`server.store._loaded_columns`: the rows of the usual clock, placed at offset 0, then
    keep their value, which costs the update a fraction of writing it)."""
    cur.execute(
        f"""UPDATE main.{table} AS t SET ts_utc_ns = NULL
            WHERE t.incident_id = ? AND t.ts_utc_ns IS NOT NULL AND t.source_id NOT IN (
                SELECT s.source_id FROM sources s JOIN clock_map c ON c.incident_id = s.incident_id
                       AND c.host = COALESCE(s.host, '') AND c.domain = s.clock_domain
                WHERE s.incident_id = ? AND c.offset_ns IS NOT NULL)""", [incident_id, incident_id])
    # the clock's one offset first, then each stretch of a clock that stepped over its raw times
    for mapping, where in (("clock_map", "c.offset_ns IS NOT NULL"),
                           ("clock_segments", "(c.from_ns IS NULL OR t.ts_raw_ns >= c.from_ns) "
                                              "AND (c.to_ns IS NULL OR t.ts_raw_ns < c.to_ns)")):
        cur.execute(
            f"""UPDATE main.{table} AS t SET ts_utc_ns = t.ts_raw_ns + c.offset_ns
                                         + CAST(COALESCE(c.drift_ppm, 0) * 1e-6 * t.ts_raw_ns AS BIGINT)
                FROM sources s, {mapping} c
                WHERE t.incident_id = ? AND s.incident_id = t.incident_id AND s.source_id = t.source_id
                  AND c.incident_id = t.incident_id AND c.host = COALESCE(s.host, '')
                  AND c.domain = s.clock_domain AND {where}""", [incident_id])


def row_uncertainty_sql(row: str = "e", clock: str = "c") -> str:
    """SQL for the uncertainty of one row's UTC time: its copy's where ``row_times`` placed it by one,
    else the stretch's where its clock stepped, else its clock's (``row``: the alias of the row's
    table, which has a ``line``; ``clock``: of its clock_map row)."""
    return (f"COALESCE((SELECT max(t.uncertainty_ns) FROM row_times t WHERE t.incident_id = {row}.incident_id "
            f"AND t.source_id = {row}.source_id AND t.line = {row}.line), "
            f"(SELECT max(g.uncertainty_ns) FROM clock_segments g WHERE g.incident_id = {clock}.incident_id "
            f"AND g.host = {clock}.host AND g.domain = {clock}.domain AND (g.from_ns IS NULL OR "
            f"{row}.ts_raw_ns >= g.from_ns) AND (g.to_ns IS NULL OR {row}.ts_raw_ns < g.to_ns)), "
            f"{clock}.uncertainty_ns)")
