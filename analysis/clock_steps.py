"""A wall clock that stepped against the boot clock: where, by how much, and each side's offset.

An NTP daemon that finds the clock too far off steps it instead of slewing; a VM paused,
snapshotted or migrated by its host resumes with a wall clock that jumps to catch up while its
boot clock does not. Every reading that pairs the two clocks then says one offset
``wall - boot`` before the step and another after it. A clock that merely runs fast or slow moves
its offset slowly (NTP slews at most 500 ppm), so readings that no single slowly moving offset
fits are a step, not a disagreement to average away.

Readings (:class:`Reading`): each says the offset lay in ``[lo, hi]`` at one instant of the boot
clock -- an uptime + date pair, perf's reference time, a journal entry, a death seen by the
kernel and reported by the launcher (at the death), and the one-sided bounds of processes seen on
both clocks (:mod:`analysis.clock_match`, at the exit). Readings whose time on the boot clock is
not known (btime, dmesg -T's conversion) were taken when the bundle was collected: they belong to
the last stretch and take no part here.

Sweep (:func:`runs`): in boot-clock order, keep the intersection of the stretch's intervals,
each widened by ``MAX_SLEW_PPM`` of its distance from the stretch's first reading; a reading that
misses it by more than ``STEP_MIN_NS`` opens a new stretch. Sweeping forwards puts each boundary
as late as the readings allow, sweeping backwards as early: the step happened after the last
reading only the earlier stretch fits and no later than the first reading only the later stretch
fits. Where the two sweeps find a different number of stretches the readings are not two clean
stretches and nothing is split (the disagreement is then reported as it was before).

Records of the boot clock before that window take the earlier stretch's offset, records after it
the later one's; a record inside the window may be on either side, so it gets the middle of the
two offsets and an uncertainty that covers both.

Worked example (``tests/analysis/test_clock_steps.py``; the times of a real recording,
``sample_traces/corpus/dev/leak-r1-wallstep``, the wall clock stepped +2.4 s at boot 476.432 s):
perf's reference time at boot 455.000 s says 1796203208.242 s ± 1 ms; uptime + date at 457.000 s
says 1796203208.240 s ± 5 ms; torchrun's closing signal for a worker that exited at 491.000 s
says the offset is at least 1796203210.637 s; uptime + date at 495.000 s says 1796203210.642 s
± 5 ms. Forwards: the third reading misses [1796203208.241, 1796203208.243] by 2.394 s, far more
than the 27 ms allowed (500 ppm of 36 s, and 10 ms), a new stretch. Backwards: the stretch of the
readings at 495 and 491 s is [1796203210.637, 1796203210.647]; the reading at 457 s misses it.
One step, after 457.000 s and no later than 491.000 s, +2.400 s (1796203208.242 ->
1796203210.642 s, the middle of each stretch's intersection).

A step where no reading is on one side of it (:func:`sampler_gaps`): a series of snapshots that
a loop takes every so often (cgroup snapshots every 0.5 s) is stamped with the wall clock but
paced by the monotonic one, so its intervals are the loop's period; a forward step of the wall
clock lengthens one interval by the step. An interval far longer than the period is therefore a
step of up to its excess over the shortest period -- or a stall of the loop, which the stamps
cannot tell apart. Where readings lie on both sides of such a gap and agree, it was a stall;
where they lie on one side only, the records on the other side may be up to the excess away from
the offset the readings give, and are placed with that in their window. Worked example (the
development recording ``leak-r1-wallstep``): 59 snapshots, intervals 0.498425-0.500948 s but one,
1796203684.584640 -> 1796203687.484659 s, 2.900019 s: a step of at most 2.401594 s there (the
recorder's truth: +2.400052 s, between those two snapshots).

A backward step leaves the opposite trace (:func:`sampler_overlaps`): the reads after it are
stamped with times the reads before it already used, so a stretch of the series, ordered by its
stamps, holds reads of both sides and its intervals are shorter than the period. The last read
before the step is stamped within a period of the stretch's end (on the earlier offset), the
first read after it within a period of its start (on the later offset), and that is the step's
window. Ordered by their stamps the series is out of order there, and so is anything read from
that order: a thread that perf saw forked once appears to join the group twice, a count that
never falls falls. Worked example (``tests/analysis/test_clock_steps.py``): reads every 0.5 s
from boot 100.0 s to 111.5 s, offset 1000.0 s until the wall clock steps back 1.3 s at boot
105.8 s. The stamps 1104.7 and 1105.2 s (boot 106.0 and 106.5 s) fall among 1104.5, 1105.0 and
1105.5 s: intervals 0.2 and 0.3 s from 1104.5 to 1105.7 s in a series whose period is 0.5 s. The
step lies after boot 1105.7 - 0.5 - 1000.0 = 105.2 s and before 1104.5 + 0.5 - 998.7 = 106.3 s.
The stretch holds 6 reads in 1.2 s, more than a 0.5 s pace allows (1.2 / 0.5 + 2 = 4.4): crowded,
which a late read and the one that caught up after it never are.
"""
from __future__ import annotations

from dataclasses import dataclass

from .present import has_rows

MAX_SLEW_PPM = 500               # the fastest a disciplined clock is slewed (NTP's limit)
STEP_MIN_NS = 10_000_000         # a smaller miss is left to the methods' own disagreement report
_INF = 1 << 62


@dataclass(frozen=True)
class Reading:
    """The offset ``wall - boot`` lay in ``[lo_ns, hi_ns]`` (either side may be open) at boot time
    ``local_ns``."""
    local_ns: int
    lo_ns: int | None
    hi_ns: int | None
    what: str                    # the method, for the report
    source: str | None = None
    line: int | None = None
    printk: bool = False         # read on printk's clock, the kernel records' own (no allowance between them)

    def lo(self) -> int:
        return -_INF if self.lo_ns is None else self.lo_ns

    def hi(self) -> int:
        return _INF if self.hi_ns is None else self.hi_ns


@dataclass(frozen=True)
class Step:
    """The wall clock stepped by ``delta_ns`` somewhere in ``(after_ns, by_ns]`` of the boot clock."""
    after_ns: int
    by_ns: int
    delta_ns: int
    before: Reading               # the last reading only the earlier stretch fits
    after: Reading                # the first reading only the later stretch fits


def _sweep(rs: list[Reading]) -> list[int]:
    """Indices (into ``rs``, in the order given) where a new stretch begins."""
    starts: list[int] = []
    lo = hi = first = None
    for i, r in enumerate(rs):
        if lo is None:
            lo, hi, first = r.lo(), r.hi(), r.local_ns
            continue
        slack = abs(r.local_ns - first) * MAX_SLEW_PPM // 1_000_000 + STEP_MIN_NS
        nlo, nhi = max(lo, r.lo()), min(hi, r.hi())
        if nlo > nhi + slack:
            starts.append(i)
            lo, hi, first = r.lo(), r.hi(), r.local_ns
        elif nlo <= nhi:
            lo, hi = nlo, nhi
        else:   # within the slew allowance: keep the narrower side's reading
            lo = hi = (nlo + nhi) // 2
    return starts


def _middle(rs: list[Reading]) -> int | None:
    lo, hi = max(r.lo() for r in rs), min(r.hi() for r in rs)
    if lo <= -_INF or hi >= _INF:
        return None
    return (lo + hi) // 2


def runs(readings: list[Reading]) -> list[Step]:
    """The steps the readings show, in boot-clock order (see the module docstring)."""
    rs = sorted(readings, key=lambda r: r.local_ns)
    if len(rs) < 2:
        return []
    fwd = _sweep(rs)
    if not fwd:
        return []
    back = [len(rs) - i for i in _sweep(rs[::-1])][::-1]
    if len(back) != len(fwd):
        return []
    steps = []
    bounds = [0] + fwd + [len(rs)]
    for k, (b, f) in enumerate(zip(back, fwd)):
        # rs[b - 1]: last reading only the earlier stretch fits; rs[f]: first only the later fits
        if b < 1 or b > f:
            return []
        early = rs[bounds[k]:f]
        late = rs[f:bounds[k + 2]]
        m0, m1 = _middle(early), _middle(late)
        if m0 is None or m1 is None:
            return []   # a stretch bounded on one side only: how far the clock stepped is not known
        steps.append(Step(rs[b - 1].local_ns, rs[f].local_ns, m1 - m0, rs[b - 1], rs[f]))
    return steps


SAMPLER_MIN = 8               # intervals before a series' period is known
SAMPLER_GAP_NS = 100_000_000  # an interval this much (or half the period) over the period is a gap


@dataclass(frozen=True)
class Gap:
    """An interval of a snapshot series that a forward step of the wall clock of up to
    ``excess_ns`` may explain: between the snapshots stamped ``before_ns`` and ``after_ns`` (the
    host's wall clock, raw)."""
    host: str
    source: str
    before_ns: int
    after_ns: int
    excess_ns: int


def gaps_in(times: list[int]) -> list[tuple[int, int, int]]:
    """(before, after, excess) for each gap of one series' snapshot times (see the module
    docstring); none until the series has ``SAMPLER_MIN`` intervals."""
    ts = sorted(set(times))
    iv = [b - a for a, b in zip(ts, ts[1:])]
    if len(iv) < SAMPLER_MIN:
        return []
    period = sorted(iv)[len(iv) // 2]
    regular = [x for x in iv if abs(x - period) <= max(period // 5, 20_000_000)]
    shortest = min(regular, default=period)
    return [(a, b, (b - a) - shortest) for a, b in zip(ts, ts[1:])
            if (b - a) > period + max(period // 2, SAMPLER_GAP_NS)]


def sampler_series(store, incident_id: str) -> list[dict]:
    """Each cgroup snapshot series' stamps: host, series (its folder or file), times."""
    if not has_rows(store, incident_id, "metrics"):
        return []
    return store.query(
        r"""SELECT COALESCE(s.host, '') AS host,
                  regexp_replace(s.path, '/[0-9]{9,}(\.[0-9]+)?(/.*)?$', '') AS series,
                  list(DISTINCT m.ts_raw_ns) AS times
           FROM metrics m JOIN sources s USING (incident_id, source_id)
           WHERE m.incident_id = ? AND s.kind = 'cgroup' AND s.clock_domain = 'wall' AND m.ts_raw_ns IS NOT NULL
           GROUP BY 1, 2""", [incident_id])


def sampler_gaps(store, incident_id: str, series: list[dict] | None = None) -> dict[str, list[Gap]]:
    """Per host, the gaps of its cgroup snapshot series (one series per folder of snapshot folders,
    or per file that holds many snapshots); ``series``: the series' times where already read."""
    out: dict[str, list[Gap]] = {}
    for r in sampler_series(store, incident_id) if series is None else series:
        for a, b, x in gaps_in(r["times"]):
            out.setdefault(r["host"], []).append(Gap(r["host"], r["series"], a, b, x))
    return out


@dataclass(frozen=True)
class Overlap:
    """A stretch of a snapshot series whose stamps crowd closer than its period, from ``first_ns``
    to ``last_ns`` (the host's wall clock, raw): the wall clock stepped back while the series was
    taken, and reads from both sides of the step share these stamps. ``period_ns``: the series'
    longest regular interval. ``crowded``: the stretch is at least a period long and holds more
    reads than any pace of the series allows (its length over the shortest regular interval, and
    two): a read that came late and the one that caught up after it are close too, but not that
    many, and a burst of reads at once is not a period long."""
    host: str
    source: str
    first_ns: int
    last_ns: int
    period_ns: int
    crowded: bool = False


def overlaps_in(times: list[int]) -> list[tuple[int, int, int, bool]]:
    """(first, last, period, crowded) for each stretch of one series' snapshot times where an
    interval is clearly shorter than the period (see the module docstring and :class:`Overlap`);
    intervals that short no more than two apart belong to one stretch (the reads of two sides
    alternate there)."""
    ts = sorted(set(times))
    iv = [b - a for a, b in zip(ts, ts[1:])]
    if len(iv) < SAMPLER_MIN:
        return []
    period = sorted(iv)[len(iv) // 2]
    allow = max(period // 5, 20_000_000)
    regular = [x for x in iv if abs(x - period) <= allow]
    longest, shortest = max(regular, default=period), min(regular, default=period)
    short = [i for i, x in enumerate(iv) if x < period - allow]
    out: list[tuple[int, int, int, bool]] = []

    def stretch(a: int, b: int) -> tuple[int, int, int, bool]:
        span = ts[b] - ts[a]
        return ts[a], ts[b], longest, span >= longest and (b - a + 1) > span / shortest + 2

    run: list[int] = []
    for i in short:
        if run and i - run[-1] > 2:
            out.append(stretch(run[0], run[-1] + 1))
            run = []
        run.append(i)
    if run:
        out.append(stretch(run[0], run[-1] + 1))
    return out


def sampler_overlaps(store, incident_id: str, series: list[dict] | None = None) -> dict[str, list[Overlap]]:
    """Per host, the stretches of its cgroup snapshot series stamped closer than their period
    (:func:`overlaps_in`); ``series``: as for :func:`sampler_gaps`."""
    out: dict[str, list[Overlap]] = {}
    for r in sampler_series(store, incident_id) if series is None else series:
        for a, b, p, crowded in overlaps_in(r["times"]):
            out.setdefault(r["host"], []).append(Overlap(r["host"], r["series"], a, b, p, crowded))
    return out
