"""The wall clock's phase on CLOCK_MONOTONIC from c10's log stamps (ingest/formats/logs/c10phase.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from aftertrace.ingest.formats.logs import c10phase as ph

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_nccl_log import facts, parse  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "c10phase"
TRUE_PHASE_NS = 812_760_987      # PROVENANCE.md: the recorder's wall - monotonic, modulo 1 s


def test_worked_example_pair():
    a = ph.reading("E1201 22:13:53.539000 23297 torch/distributed/elastic/multiprocessing/api.py:1002] failed")
    b = ph.reading("[I1201 22:13:53.830172951 TCPStoreLibUvBackend.cpp:1253] [c10d - debug] Store exit requested")
    assert a[0] == "x" and a[1] % ph.SEC == 539_000_000 and a[2] == 1_000_000
    assert b[0] == "c" and b[1] % ph.SEC == 0 and b[2] == 830_172_951
    # b written after a may not read before 53.538 s: frac(0.830172951 + g) >= 0.538, or below
    # the coarse second's tick (it may belong to the next second)
    assert ph.forbidden(a, b) == [(179_827_049, 707_827_049)]
    # the other way round nothing is ruled out that the order would allow
    assert ph.forbidden(b, b) == []


def test_the_real_log_pins_the_phase_around_the_truth(tmp_path):
    res = parse(DATA / "torchrun.log", tmp_path)
    got = [json.loads(f["value"]) for f in facts(res) if f["key"] == "wall_monotonic_phase"]
    assert len(got) == 1
    p = got[0]
    assert p["arcs_ns"] == [[809_900_000, 818_700_000]] and p["pairs"] == 56 and p["against"] == 0
    lo, hi = p["arcs_ns"][0]
    assert lo <= TRUE_PHASE_NS < hi


def test_lines_that_never_cross_a_second_say_nothing():
    # two c10 lines in one second with no second crossing: every phase keeps them in order
    p = ph.Phase()
    p.feed(1, "", "[I1201 22:13:53.100000000 a.cpp:1] x")
    p.feed(2, "", "[I1201 22:13:53.200000000 a.cpp:1] y")
    assert p.result() is None


def test_lines_read_again_after_a_chunk_end_count_once():
    p = ph.Phase()
    for n, s in ((1, "[I1201 22:13:53.900000000 a.cpp:1] x"), (2, "E1201 22:13:54.050000 1 b.py:1] y"),
                 (2, "E1201 22:13:54.050000 1 b.py:1] y"), (1, "[I1201 22:13:53.900000000 a.cpp:1] x")):
        p.feed(n, "", s)
    assert p.pairs == 1


def test_a_log_written_across_a_step_of_the_wall_clock_is_refused(tmp_path):
    """The recorder stepped the wall clock +2.4 s between the ranks' start-up and their failure:
    no phase keeps both sides' lines in order, and the log says so instead of giving one; cut
    where the lines stop fitting, each side has its own phase, and the recorder's truth lies in
    each (PROVENANCE.md): 0.2421 s before the step, 0.2421 + 2.400 = 0.6421 s (mod 1 s) after."""
    res = parse(DATA / "torchrun-wallstep.log", tmp_path)
    (p,) = [json.loads(f["value"]) for f in facts(res) if f["key"] == "wall_monotonic_phase"]
    st = p.pop("stretches")
    assert p == {"refused": True, "pairs": 56, "c10_lines": 51, "against": 3}
    assert [(s["from_line"], s["to_line"], s["pairs"], s["against"]) for s in st] == [(1, 497, 35, 0),
                                                                                      (498, 590, 20, 0)]
    assert st[0]["arcs_ns"] == [[239_100_000, 247_100_000]]
    assert st[1]["arcs_ns"] == [[604_800_000, 844_900_000]]
    # where the step lies: after line 85 (a pair there rules out the later phase: its first line was
    # written before the step) and before line 498 (torch elastic's 09:28:21.151, in a pair that
    # rules out the earlier phase); the recorder stepped the clock between them. Times in the
    # reader's own reckoning: line 85's second 09:27:59 at the earliest, 498's .151 + 1 ms at the latest
    assert "step" not in st[0]
    day = ph._local_s("12", "02", "00", "00", "00") * ph.SEC
    assert st[1]["step"] == {"after_line": 85, "after_local_ns": day + (9 * 3600 + 27 * 60 + 59) * ph.SEC,
                             "before_line": 498,
                             "before_local_ns": day + (9 * 3600 + 28 * 60 + 21) * ph.SEC + 152_000_000}


# Stamps of the three forms the phase is read from, as pieces: a generated line is one of them with
# some pieces dropped, doubled or replaced (by another form's pieces or odd ones).
_STAMPS = [
    ["[rank3]:", "[", "I", "1201", " ", "22:13:53", ".", "830172951", " ", "TCPStore.cpp:1253] x"],
    ["[", "E", "129", " ", "03:08:08", ".", "000000001", " ", "a.cpp:1] y"],
    ["[rank12]:", "W", "1201", " ", "22:13:53", ".", "539000", " ", "23297", " ", "api.py:1002] failed"],
    ["E", "0229", " ", "23:59:59", ".", "999999", " ", "1", " ", "b.py:1] z"],
    ["[", "2026", "-", "12-01", " ", "22:13:53", ",", "332", "]", " INFO x"],
    ["2026", "-", "02-29", "T", "00:00:00", ".", "123456789", " ", "Z", " m"],
    ["2026", "-", "12-01", "_", "22:13:53", ".", "1234", "+05:30", " m"],
]
_STAMP_PIECES = sorted({p for s in _STAMPS for p in s}) + [
    "", " ", "\t", "\x1c", "\x1f", "\x0b", "[", "]", ":", ".", ",", "-", "+", "Z", "T", "0", "00", "13", "32", "1232",
    "12345", "11201", "101", "24:00:00", "23:60:00", "0000", "1234567890", "99999999999999999999", "[rank",
    "[rank]:", "é",
    "\u0663", "\u00a0", "\u2003", "\x85", "+0", "-08", ":"]


def test_compiled_stamp_reader_equals_reading():
    # the compiled reader of the stamps (ingest.native.phase_readings) reads what ``reading``'s
    # regexes read on each stamp whole, with pieces edited (hypothesis, a fixed number of
    # examples) and with each piece replaced by each odd one; the lines it leaves, the regexes read
    import polars as pl
    from heads import each_piece_replaced, holds_on_edited_heads
    from aftertrace.ingest import native

    def same(lines):
        r = native.phase_readings(native.texts(pl.Series(lines, dtype=pl.String)))
        for line, k, a, b in zip(lines, r.code.to_pylist(), r.t1.to_pylist(), r.t2.to_pylist()):
            if k == native.UNSURE:
                assert not line.isascii(), line
                continue
            got = None if k == native.PH_NONE else ("c" if k == native.PH_C10 else "x", a, b)
            assert got == ph.reading(line), line

    holds_on_edited_heads(_STAMPS, _STAMP_PIECES, same, examples=400)
    same(each_piece_replaced(_STAMPS, _STAMP_PIECES))
    assert ph.reading("".join(_STAMPS[0]))[0] == "c" and ph.reading("".join(_STAMPS[4]))[0] == "x"


def test_forbidden_phases_are_those_where_the_later_line_would_read_earlier():
    # The definition, phase by phase: under phase g the latest time b can have (a c10 second may
    # lag by a tick) less the earliest a can have, plus the slack, is below zero exactly inside
    # the ranges forbidden() gives; pairs of each form near a second's edge, one call for them all
    import random
    from aftertrace.ingest import native
    rnd = random.Random(7)
    base = ph._local_s("12", "01", "22", "13", "53") * ph.SEC

    def one():
        if rnd.random() < 0.5:
            return ("c", base + rnd.choice((0, 1, -1)) * ph.SEC, rnd.randrange(ph.SEC))
        return ("x", base + rnd.randrange(-ph.SEC, 2 * ph.SEC), rnd.choice((1_000, 1_000_000)))

    def earlier(a, b, g):
        if b[0] == "c":
            r = (b[2] + g) % ph.SEC
            hi_b = b[1] + r + (ph.SEC if r < ph.TICK_NS else 0)
        else:
            hi_b = b[1] + b[2]
        lo_a = a[1] + (a[2] + g) % ph.SEC if a[0] == "c" else a[1]
        return hi_b - lo_a + ph.ORDER_SLACK_NS < 0

    pairs = [(one(), one()) for _ in range(300)]
    got = native.phase_forbidden(pairs)
    assert got[:3] == [ph.forbidden(*p) for p in pairs[:3]]
    probes = range(0, ph.SEC, 997_001)
    for (a, b), ranges in zip(pairs, got):
        edges = [e + d for lo, hi in ranges for e in (lo, hi) for d in (-1, 0)]
        for g in [*probes, *(e for e in edges if 0 <= e < ph.SEC)]:
            assert earlier(a, b, g) == any(lo <= g < hi for lo, hi in ranges), (a, b, g, ranges)
    assert any(got) and not all(got)


def test_pairs_follow_the_rules_across_streams_chunks_and_the_cap(monkeypatch):
    # Lines of three streams fed in chunks that re-read a few lines (as the engine does), with c10
    # and exact stamps, lines without one, an hour's gap and a cap on the pairs: Phase keeps what
    # the rules below say, line by line (a line pairs with its stream's last reading unless both
    # are exact or they are an hour or more apart; lines at or before the last fed line are not
    # fed again; after the cap nothing more is fed)
    import random
    import polars as pl
    from aftertrace.ingest import native
    monkeypatch.setattr(ph, "MAX_PAIRS", 150)
    rnd = random.Random(3)
    lines, t = [], 0.0
    for n in range(1, 400):
        t += rnd.choice((0.01, 0.3, 0.9, 1.7)) + (4000 if n == 200 else 0)
        s = int(t)
        hms = f"{22 + s // 3600 % 2:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
        frac = int((t % 1) * 1e9)
        forms = (f"[I1201 {hms}.{frac:09d} a.cpp:1] x", f"E1201 {hms}.{frac // 1000:06d} 7 b.py:2] y",
                 f"2026-12-01 {hms},{frac // 1_000_000:03d} INFO z", "no stamp here")
        # (the last line of each chunk a c10 one: read again with the next, it must not pair with itself)
        lines.append((n, rnd.choice(("a", "b", "")), forms[0] if n % 50 == 0 else rnd.choice(forms)))
    p = ph.Phase()
    at = 0
    while at < len(lines):
        part = lines[max(0, at - 3):at + 50]        # (three lines read again)
        texts = native.texts(pl.Series([r[2] for r in part], dtype=pl.String))
        linenos, streams = [r[0] for r in part], [r[1] for r in part]
        if at % 100:        # (as the engine feeds them: columns; the others as lists)
            linenos, streams = pl.Series(linenos, dtype=pl.Int64), pl.Series(streams, dtype=pl.String)
        p.feed_lines(linenos, streams, texts)
        at += 50
    want, last, upto, c10 = [], {}, 0, 0
    for n, s, body in lines:
        if len(want) >= 150:
            break
        upto = n
        it = ph.reading(body)
        if it is None:
            continue
        c10 += it[0] == "c"
        prev, last[s] = last.get(s), (it, n)
        if prev is None or (prev[0][0] == "x" and it[0] == "x") or abs(it[1] - prev[0][1]) > 3600 * ph.SEC:
            continue
        bins = [(-(-lo // ph.BIN_NS), hi // ph.BIN_NS) for lo, hi in ph.forbidden(prev[0], it)]
        want.append((prev[1], n, [(i, j) for i, j in bins if j > i], prev[0], it))
    assert p.kept == want and p.upto == upto and p.c10 == c10
    assert len(want) == 150 and any(w[2] for w in want) and any(w[3][0] == "x" for w in want)
