"""The wall clock's phase on CLOCK_MONOTONIC from c10's log stamps (ingest/formats/logs/c10phase.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ingest.formats.logs import c10phase as ph

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
