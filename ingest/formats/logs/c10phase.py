"""Where the wall clock's second begins on CLOCK_MONOTONIC, read from c10's log stamps.

PyTorch's C++ log lines (``[I1201 22:13:53.830261322 TCPStoreLibUvBackend.cpp:1364] ...``) take
their date and second from ``time()`` (the wall clock) but their nine fraction digits from
``steady_clock`` (CLOCK_MONOTONIC's ``tv_nsec``). Parsing drops those digits (the line's wall
time is only known to the second), but together with the second they say something about the
clocks: at the instant of the line, ``floor(wall) = S`` while ``frac(monotonic) = f``. With the
unknown phase ``g = frac(wall - monotonic)`` the line's true wall time is
``S + frac(f + g)``; only the right ``g`` puts a stream's lines in the order they were written.

Each pair of consecutive lines of one stream (one process's output: a ``[defaultN]:`` tee, or
the file when unwrapped) therefore rules out the phases under which the later line would come
first. A line with a true sub-second wall time (torch elastic's ``W1201 22:13:09.862000``,
Python logging's ``,332``) takes part with that time. ``time()`` reads the coarse clock, whose
second may lag by up to a tick, so a c10 line whose reconstructed fraction is within
``TICK_NS`` of its second may also belong to the next second. The phases are counted on a
circle of ``BINS`` bins; a bin counts a pair against it only when the pair rules out all of it.
The phase is the bins with the fewest such pairs (none, in an orderly log), as arcs in ns; when
more than one pair in a hundred rules out even the best bins, the lines disagree (the wall clock
stepped, or writes were reordered) and there is no phase for the whole file.

Such a file is then cut into *stretches*: the longest run of pairs from the start that fits one
phase, then the longest run after its lines, and so on (at most ``MAX_STRETCHES``). A pair whose
earlier line lies in one stretch and later line in the next spans the cut and counts for
neither. Each stretch has its own phase (or none, when too few lines cross a second). Where
two neighbouring stretches meet, the wall clock stepped (or writes were reordered), and their
pairs say where among the lines: two lines written after the step keep the later phase's order,
so a pair that rules out all of the later phase had its first line written before the step
(``after_line``); likewise a pair that rules out all of the earlier phase had its second line
written after it (``before_line``). Their times (the earliest the first can have, the latest
for the second) are given in this module's own reckoning of month, day and time.

Worked example (``tests/ingest/test_c10phase.py``; lines of a real torchrun log on one stream):

    [I1201 22:13:53.830172951 TCPStoreLibUvBackend.cpp:1253] [c10d - debug] Store exit requested
    E1201 22:13:53.539000 23297 torch/distributed/elastic/multiprocessing/api.py:1002] failed ...

The c10 line's second is 22:13:53 and its fraction 0.830172951 s; the elastic line says
22:13:53.539 (+1 ms). If the c10 line came first, ``53 + frac(0.830172951 + g)`` may not
exceed ``53.540`` (plus ``ORDER_SLACK_NS``): phases ``g`` in ``[0.169827049 + 0.541, ...)``
and so on are ruled out. In the real log (hungio-r1, 56 pairs on three streams) the phases left
are 0.8090-0.8177 s (and 0.8194-0.8196 s); the recorder measured ``wall - monotonic`` =
...653.812761 s, phase 0.812761 s, inside.

A long log's lines are read, paired and counted by the compiled engine (:mod:`ingest.native`,
``at_phase_*`` in scan.c), which reads the stamps as ``reading``'s regexes do on ASCII text and
leaves any other line to them; ``reading`` and ``forbidden`` are the rules one line and one pair
at a time.
"""
from __future__ import annotations

import functools
import re
from array import array
from datetime import datetime, timezone

import polars as pl
import pyarrow as pa

from ... import native

SEC = 1_000_000_000
BINS = 10_000                  # 0.1 ms
BIN_NS = SEC // BINS
TICK_NS = 10_000_000           # time()'s coarse second may lag the true one by a tick (HZ=100 at worst)
ORDER_SLACK_NS = 1_000_000     # threads of one process may write their lines out of order by this much
MAX_PAIRS = 20_000             # enough for the phase (the corpus logs pin it with 56); the rest adds nothing
MAX_STRETCHES = 8

C10 = re.compile(r"^(?:\[rank\d+\]:)?\[[FEWIV](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{9}) ")
ELASTIC = re.compile(r"^(?:\[rank\d+\]:)?[DIWEC](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) \d+ ")
DATED = re.compile(r"^\[?\d{4}-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)[.,](\d{3,9})(?![\d:]|\s*(?:Z|[+-]\d\d))")


@functools.lru_cache(maxsize=4096)      # (a log's lines share their seconds: one datetime per second)
def _local_s(mo: str, d: str, hh: str, mm: str, ss: str) -> int | None:
    """Seconds of a local month-day-time on one fixed leap year: only differences within a file
    matter, and every stamp of the file is read the same way."""
    try:
        return int(datetime(2000, int(mo), int(d), int(hh), int(mm), int(ss), tzinfo=timezone.utc).timestamp())
    except ValueError:
        return None


def reading(body: str) -> tuple | None:
    """``("c", S_ns, f_ns)`` for a c10 line, ``("x", t_ns, res_ns)`` for a line with a true
    sub-second wall time, else None."""
    m = C10.match(body)
    if m:
        s = _local_s(*m.groups()[:5])
        return None if s is None else ("c", s * SEC, int(m.group(6)))
    m = ELASTIC.match(body) or DATED.match(body)
    if m:
        s = _local_s(*m.groups()[:5])
        if s is None:
            return None
        frac = m.group(6)
        # (torch elastic prints milliseconds padded to six digits)
        res = 1_000_000 if m.re is ELASTIC else 10 ** (9 - len(frac))
        return ("x", s * SEC + int(frac.ljust(9, "0")), res)
    return None


def forbidden(a, b) -> list[tuple[int, int]]:
    """Phases (ns ranges of [0, 1 s)) under which ``b``, written after ``a``, would be earlier.

    Under phase ``g`` the latest wall time ``b`` can have, less the earliest ``a`` can have (plus
    ``ORDER_SLACK_NS``), is linear in ``g`` between the points where a c10 line's fraction wraps
    (and a tick after, where its coarse second may lag): the phases where it is below zero are
    found piece by piece (``at_phase_forbidden`` in :mod:`ingest.native`'s scan.c)."""
    return native.phase_forbidden([(a, b)])[0]


_KIND = {None: native.PH_NONE, "c": native.PH_C10, "x": native.PH_EXACT}    # a reading's letter -> the engine's code
_LETTER = {v: k for k, v in _KIND.items()}
_NO_READING = (None, 0, 0)


def _array(typecode: str, a: pa.Array) -> array:
    """A fixed-width Arrow array without nulls as an ``array.array`` (a copy of its values)."""
    out = array(typecode)
    w = out.itemsize
    out.frombytes(a.buffers()[1].to_pybytes()[a.offset * w:(a.offset + len(a)) * w])
    return out


class Phase:
    """Feed one file's lines in order (``feed``); ``result`` is the phase, or None."""

    def __init__(self):
        self._sid: dict = {}     # stream -> its number; the streams' last readings (kind, t1, t2, line):
        self._last = (array("B"), array("q"), array("q"), array("q"))
        self.c10 = 0
        self.upto = 0           # line numbers up to this one were fed (chunks re-read some rows)
        # the kept pairs as columns: the earlier line's number and reading (the engine's kind code,
        # t1, t2), the later line's; and their bins, flat: pair k rules out [lo[j], hi[j]) for j in
        # [off[k], off[k + 1])
        self._a_line, self._a_kind, self._a1, self._a2 = array("q"), array("B"), array("q"), array("q")
        self._b_line, self._b_kind, self._b1, self._b2 = array("q"), array("B"), array("q"), array("q")
        self._off, self._lo, self._hi = array("q", [0]), array("i"), array("i")

    def feed(self, lineno: int, stream: str, body: str) -> None:
        self.feed_readings([(lineno, stream, reading(body))])

    def feed_lines(self, linenos, streams, bodies: pa.Array) -> None:
        """Lines in order: their numbers (a list or an integer Polars column), streams (a list or a
        text column; a null stream is the empty one) and texts (an Arrow text array as
        :func:`ingest.native.texts` gives it, read at once)."""
        if self.pairs >= MAX_PAIRS:
            return
        r = native.phase_readings(bodies)
        kind, t1, t2 = (_array(c, a) for c, a in (("B", r.code), ("q", r.t1), ("q", r.t2)))
        if r.unsure:        # (the lines the compiled reader leaves: read by the regexes)
            texts = bodies.to_pylist()
            for i, k in enumerate(kind):
                if k == native.UNSURE:
                    it = reading(texts[i]) or _NO_READING
                    kind[i], t1[i], t2[i] = _KIND[it[0]], it[1], it[2]
        lines = _array("q", linenos.cast(pl.Int64).to_arrow()) if isinstance(linenos, pl.Series) else array("q", linenos)
        self._pairs(lines, self._sids(streams), kind, t1, t2)

    def feed_readings(self, rows) -> None:
        """(line, stream, :func:`reading` of the line) in order."""
        rows = list(rows)
        its = [r[2] or _NO_READING for r in rows]
        self._pairs(array("q", (r[0] for r in rows)), self._sids([r[1] for r in rows]),
                    array("B", (_KIND[it[0]] for it in its)), array("q", (it[1] for it in its)),
                    array("q", (it[2] for it in its)))

    def _sids(self, streams) -> array:
        """The streams' numbers (a new stream is given the next), as ``array('i')``."""
        s = (streams if isinstance(streams, pl.Series) else pl.Series(streams, dtype=pl.String)).fill_null("")
        seen = s.unique(maintain_order=True).to_list()       # (few: the rows are mapped in one step)
        sid = self._sid
        for x in seen:
            sid.setdefault(x, len(sid))
        return _array("i", s.replace_strict(seen, [sid[x] for x in seen], return_dtype=pl.Int32).to_arrow())

    def _pairs(self, linenos: array, sids: array, kind: array, t1: array, t2: array) -> None:
        """Each line paired with the last reading of its stream (``at_phase_pairs`` in
        :mod:`ingest.native`'s scan.c: unless both are exact, or an hour or more apart)."""
        grow = len(self._sid) - len(self._last[0])
        if grow > 0:
            for a in self._last:
                a.extend(bytes(grow) if a.typecode == "B" else [0] * grow)
        p = native.phase_pairs(linenos, sids, kind, t1, t2, self._last, self.upto, self.c10,
                               MAX_PAIRS - self.pairs, BIN_NS, len(self._lo))
        self.upto, self.c10 = p.upto, p.c10
        for mine, got in ((self._a_line, p.a_line), (self._a_kind, p.a_kind), (self._a1, p.a1), (self._a2, p.a2),
                          (self._b_line, p.b_line), (self._b_kind, p.b_kind), (self._b1, p.b1), (self._b2, p.b2),
                          (self._off, p.bin_end), (self._lo, p.bin_lo), (self._hi, p.bin_hi)):
            mine.extend(got)

    def _counts(self, start: int, stop: int, values: bool = True) -> tuple[list[int] | None, int]:
        """How many of the pairs ``kept[start:stop]`` rule out each bin (a difference array,
        summed up), and the least count."""
        return native.phase_counts(self._off, self._lo, self._hi, start, stop, BINS, values)

    @property
    def pairs(self) -> int:
        return len(self._b_line)

    def result(self) -> dict | None:
        if self.c10 < 2 or self.pairs == 0:
            return None
        counts, least = self._counts(0, self.pairs)
        if least > self.pairs // 100:
            # the lines disagree (a wall clock stepped, or writes reordered): said, so that the phase
            # other logs of the host show is not taken for the whole incident, with the stretches
            # that each fit one phase
            return {"refused": True, "pairs": self.pairs, "c10_lines": self.c10, "against": least,
                    "stretches": self.stretches()}
        arcs = _arcs(counts, least)
        if arcs is None:
            return None             # too few crossings of a second to say anything
        return {"arcs_ns": arcs[:16], "pairs": self.pairs, "c10_lines": self.c10, "against": least}

    def stretches(self) -> list[dict]:
        """The file cut into runs of pairs that each fit one phase (see the module docstring)."""
        n, a_line, b_line = self.pairs, self._a_line, self._b_line
        out, parts, start = [], [], 0      # parts: (first pair, end of the stretch's pairs, end of those spanning the cut)
        while start < n and len(out) < MAX_STRETCHES:
            lo, hi = start + 1, n          # the longest consistent run from ``start``
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._counts(start, mid, values=False)[1] <= (mid - start) // 100:
                    lo = mid
                else:
                    hi = mid - 1
            c, least = self._counts(start, lo)
            arcs = _arcs(c, least)
            last = max(b_line[start:lo])
            out.append({"from_line": min(a_line[start:lo]), "to_line": last, "pairs": lo - start,
                        "against": least, "arcs_ns": None if arcs is None else arcs[:16]})
            first, start = start, lo
            while start < n and a_line[start] <= last:
                start += 1                  # (spans the cut)
            parts.append((first, lo, start))
        for k in range(1, len(out)):
            a, b = out[k - 1]["arcs_ns"], out[k]["arcs_ns"]
            # where the step lies among the lines: a pair that rules out the later phase had its first
            # line written before the step (two lines written after it keep the later phase's order),
            # and a pair that rules out the earlier phase had its second line written after it (a
            # stretch with too few crossings of a second for a phase of its own says neither)
            (p0, p1, p2), (_, q1, _) = parts[k - 1], parts[k]
            before = [] if b is None else [(a_line[i], self._reading(i, 0)) for i in range(p0, p2)
                                           if _rules_out(self._bins(i), b)]
            after = [] if a is None else [(b_line[i], self._reading(i, 1)) for i in range(p1, q1)
                                          if _rules_out(self._bins(i), a)]
            la, ia = max(before, key=lambda x: x[0]) if before else (None, None)
            lb, ib = min(after, key=lambda x: x[0]) if after else (None, None)
            # the lines' times in this module's local reckoning (``_local_s``): the earliest line a
            # can have been written, the latest for line b; a reader maps them to UTC by any timed line
            out[k]["step"] = {"after_line": la, "after_local_ns": None if ia is None else _lo_any(ia),
                              "before_line": lb, "before_local_ns": None if ib is None else _hi_any(ib)}
        return out

    def _bins(self, k: int) -> list[tuple[int, int]]:
        """The bins pair ``k`` rules out, as ``(first, end)``."""
        j0, j1 = self._off[k], self._off[k + 1]
        return list(zip(self._lo[j0:j1], self._hi[j0:j1]))

    def _reading(self, k: int, later: int) -> tuple:
        """Pair ``k``'s earlier line's :func:`reading` (``later`` 0), or its later line's (1)."""
        if later:
            return _LETTER[self._b_kind[k]], self._b1[k], self._b2[k]
        return _LETTER[self._a_kind[k]], self._a1[k], self._a2[k]

    @property
    def kept(self) -> list[tuple]:
        """The pairs kept, in order: (earlier line, line, the bins it rules out as ``(first,
        end)``, the earlier line's :func:`reading`, the line's)."""
        return [(self._a_line[k], self._b_line[k], self._bins(k), self._reading(k, 0), self._reading(k, 1))
                for k in range(self.pairs)]


def _lo_any(it) -> int:
    """The earliest wall time a line can have, whatever the phase (ns, local reckoning)."""
    return it[1]


def _hi_any(it) -> int:
    """The latest wall time a line can have, whatever the phase (a c10 second may lag by a tick)."""
    return it[1] + (SEC + TICK_NS if it[0] == "c" else it[2])


def _bin_ranges(arcs) -> list[tuple[int, int]]:
    """Arcs (ns, one may start below 0) as ranges of bins within [0, BINS)."""
    out = []
    for a, b in arcs:
        if a < 0:
            out += [((a + SEC) // BIN_NS, BINS), (0, -(-b // BIN_NS))]
        else:
            out.append((a // BIN_NS, -(-b // BIN_NS)))
    return out


def _rules_out(bins, arcs) -> bool:
    """Whether a pair's ruled-out bins cover every bin of a phase's arcs."""
    merged: list[list[int]] = []
    for i, j in sorted(bins):
        if merged and i <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], j)
        else:
            merged.append([i, j])
    return bool(merged) and all(any(i <= a and b <= j for i, j in merged) for a, b in _bin_ranges(arcs))


def _arcs(counts: list[int], least: int) -> list[list[int]] | None:
    """The bins with the fewest pairs against them, as arcs in ns; None when they cover more than
    half a second (too few crossings of a second to say anything)."""
    arcs, k = [], 0
    while k < BINS:
        if counts[k] != least:
            k += 1
            continue
        j = k
        while j + 1 < BINS and counts[j + 1] == least:
            j += 1
        arcs.append([k * BIN_NS, (j + 1) * BIN_NS])
        k = j + 1
    if len(arcs) > 1 and arcs[0][0] == 0 and arcs[-1][1] == SEC:     # (one arc across 0)
        arcs[0] = [arcs[-1][0] - SEC, arcs[0][1]]
        arcs.pop()
    if sum(b - a for a, b in arcs) > SEC // 2:
        return None
    return arcs
