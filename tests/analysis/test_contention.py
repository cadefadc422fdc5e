"""cpu_contention: the worked example of ``analysis/contention.py`` exactly, on a store holding
just the perf samples it describes."""
import duckdb

from aftertrace.analysis import contention
from aftertrace.analysis.links import Link, LinkKind as K

S = 1_000_000_000
T0 = 1796119200 * S        # 2026-12-01 10:00:00 UTC
PERIOD = S // 29           # perf at 29 Hz


class Store:
    def __init__(self):
        self.db = duckdb.connect()
        self.db.execute("CREATE TABLE sources (incident_id VARCHAR, source_id INTEGER, path VARCHAR, host VARCHAR)")
        self.db.execute("""CREATE TABLE samples (incident_id VARCHAR, source_id INTEGER, host VARCHAR, pid BIGINT,
                           tid BIGINT, cpu INTEGER, comm VARCHAR, ts_utc_ns BIGINT, stack_id BIGINT)""")
        self.db.execute("INSERT INTO sources VALUES ('i', 1, 'vm/perf/perf.script.txt.gz', 'vm')")

    def add(self, tid, comm, cpu, times):
        self.db.executemany("INSERT INTO samples VALUES ('i', 1, NULL, NULL, ?, ?, ?, ?, NULL)",
                            [(tid, cpu, comm, t) for t in times])

    def query(self, sql, params=()):
        cur = self.db.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]


def spread(n, start, end):
    return [start + (end - start) * k // n for k in range(n)]


def test_worked_example():
    st = Store()
    # before 10:00:20: rank 1 has 58 of the 60 samples of CPU 1 (and it runs nowhere else)
    st.add(101, "python3", 1, spread(58, T0, T0 + 20 * S))
    st.add(77, "kworker/1:1", 1, spread(2, T0, T0 + 20 * S))
    # from 10:00:19.98: a newcomer takes 95 of the 100 samples of CPU 1 in the next 20 s
    hog0 = T0 + 19_980_000_000
    st.add(555, "python3", 1, [hog0 + k * PERIOD for k in range(96)])     # 95 of them from 10:00:20
    st.add(101, "python3", 1, spread(5, T0 + 20 * S, T0 + 40 * S))
    slow = Link(kind=K.STEP_SLOWDOWN, ts_ns=T0 + 20 * S, summary="steps 14x slower", source="log", host="vm", rank=1)
    (c,) = contention.detect(st, "i", [slow], {0: 100, 1: 101}, {100, 101, 99})
    assert (c.kind, c.rank, c.pid, c.attr("hog_pid"), c.attr("cpus")) == (K.CPU_CONTENTION, 1, 101, 555, (1,))
    assert c.attr("share") == 0.95 and c.attr("starved") is True
    assert c.ts_ns == hog0 and c.timing_ns() == (hog0 - PERIOD, hog0)
    assert "python3 (pid 555), not a process of the job, took 95%" in c.summary


def test_shares_are_read_from_the_newcomers_arrival_when_the_stall_is_bounded_earlier():
    # A rank stalls: its last progress at 10:00:20 is only the stall's lower bound. A real-time task
    # comes at 10:00:22.3 and the kernel leaves the rank 5 % of the CPU from then on. Over the 20 s
    # from 10:00:20 the rank still has 16 % (its 2.3 s alone first), over the 20 s from the
    # arrival 5 %: a tenfold slowdown and more, starved.
    st = Store()
    st.add(101, "python3", 1, spread(58, T0, T0 + 20 * S))
    st.add(77, "kworker/1:1", 1, spread(2, T0, T0 + 20 * S))
    st.add(101, "python3", 1, spread(66, T0 + 20 * S, T0 + 22_300_000_000))
    hog0 = T0 + 22_300_000_000
    st.add(555, "python3", 1, [hog0 + k * PERIOD for k in range(551)])     # 19 s at 29 Hz, 95 %
    st.add(101, "python3", 1, spread(29, hog0, hog0 + 20 * S))
    stall = Link(kind=K.RANK_STALLED, ts_ns=T0 + 20 * S, summary="stopped", source="log", host="vm", rank=1,
                 attrs=(("ts_lo_ns", T0 + 20 * S), ("ts_hi_ns", T0 + 44 * S), ("ts_bound", "between")))
    (c,) = contention.detect(st, "i", [stall], {1: 101}, {101})
    assert c.ts_ns == hog0 and c.attr("starved") is True and c.attr("share") == 0.95
    assert "took 95%" in c.summary and "97% of its samples before, 5% after" in c.summary
    # a task that leaves the rank a third of what it had only slowed it
    c2 = _after_change(K.STEP_SLOWDOWN, (555, "python3", 120), (101, "python3", 20))
    assert c2.attr("starved") is False and c2.attr("share") == 0.857
    # a rank that stopped on its own: its CPU idles or goes to whatever runs; a task that takes 60 %
    # of it came after, not before
    c3 = _after_change(K.RANK_STALLED, (555, "python", 60), (77, "kworker/1:1", 40))
    assert c3.attr("starved") is False and c3.attr("share") == 0.6


def _after_change(kind, *after):
    """The contention found when rank 1 (pid 101) had CPU 1 alone for 20 s, a finding of ``kind``
    came at 10:00:20, and ``after`` ((tid, comm, samples) spread over the next 20 s) ran there."""
    st = Store()
    st.add(101, "python3", 1, spread(60, T0, T0 + 20 * S))
    for tid, comm, n in after:
        st.add(tid, comm, 1, spread(n, T0 + 20 * S, T0 + 40 * S))
    found = Link(kind=kind, ts_ns=T0 + 20 * S, summary="x", source="log", host="vm", rank=1)
    (c,) = contention.detect(st, "i", [found], {1: 101}, {101})
    return c


def test_a_process_that_was_there_before_or_of_the_job_is_no_newcomer():
    st = Store()
    st.add(101, "python3", 1, spread(30, T0, T0 + 20 * S))
    st.add(555, "python3", 1, spread(30, T0, T0 + 20 * S))         # already sharing the CPU
    st.add(555, "python3", 1, spread(95, T0 + 20 * S, T0 + 40 * S))
    st.add(101, "python3", 1, spread(5, T0 + 20 * S, T0 + 40 * S))
    slow = Link(kind=K.STEP_SLOWDOWN, ts_ns=T0 + 20 * S, summary="slow", source="log", host="vm", rank=1)
    assert contention.detect(st, "i", [slow], {1: 101}, {101}) == []
    st2 = Store()
    st2.add(101, "python3", 1, spread(58, T0, T0 + 20 * S))
    st2.add(556, "pt_data_worker", 1, spread(95, T0 + 20 * S, T0 + 40 * S))
    st2.add(101, "python3", 1, spread(5, T0 + 20 * S, T0 + 40 * S))
    assert contention.detect(st2, "i", [slow], {1: 101}, {101, 556}) == []       # the rank's own worker
