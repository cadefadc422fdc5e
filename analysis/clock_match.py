"""The boot clock placed by processes seen on both clocks, with no anchor needed.

A bundle often holds no reading that pairs the boot clock with the wall clock (no uptime + date,
no ``perf record -k``), yet it holds the same processes on both: perf records each thread's exit
on the boot clock (``sched:sched_process_exit``), and torchrun writes, in wall time, when it
signalled each worker and when it reported the failed one. Causality orders each such pair, so
each pair bounds the offset ``wall - boot`` on one side; the bounds of all pairs intersect.

Rules (torchrun's ``_poll``/``_close``; every wall time is the line's printed millisecond, the
true instant lies in ``[printed, printed + 1 ms)``):

``signal -> exit`` (a lower bound). ``Sending process P closing signal S`` is logged after a
    ``poll()`` found P alive and right before the signal is sent, so P's exit (its main thread's
    ``sched_process_exit``) comes after the printed time: ``offset >= printed - exit_boot``
    (``SEND_SLACK_NS`` allows the microseconds between the poll and the log call). A process that
    ignores the signal, or is stopped or in D state, exits later: its bound is merely weaker.
``exit -> report`` (upper bounds). The failed worker F named by ``failed (exitcode: ...) (pid: F)``
    had exited before torchrun sent the first closing signal of that shutdown (the poll that saw
    it dead starts the shutdown), and every worker of the shutdown had exited before the
    ``failed`` line itself (``_close`` waits for them): ``offset <= printed + 1 ms - exit_boot``.
    Where perf recorded no exit, the thread's last perf sample stands in (it is no later than
    the exit, so the bound still holds).
``line -> exit`` (a lower bound). Whatever a process wrote with its own time on the wall clock
    (a log line whose prefix names it as the writer, a Kineto op) was written before its last thread
    exited: ``offset >= written - exit``. Weak (a process rarely logs in its last moments) but
    it holds for every process, also one that died on its own with no signal to pair.

``snapshot -> birth -> snapshot`` (both bounds). A cgroup snapshot series (folders named by the
    wall clock just before their files are read, by hand or by ``aftertrace collect``) lists who
    is in the group. A process or thread that perf saw forked (``sched_process_fork``, boot
    clock) by a member of the group is in it from birth (the kernel links the child into its
    parent's cgroup before the tracepoint fires): the read that did not list it yet came before
    the fork, ``offset >= previous snapshot - fork``; the read that lists it came before the
    next snapshot began, ``offset <= next snapshot + 1 ms - fork``. A series' reads are about half
    a second apart, so each birth is a window of about a second; several births narrow it, and
    the job's first births happen early, before any anchor is taken.

``snapshot -> OOM kill -> snapshot`` (both bounds). A memory cgroup counts the OOM kills of its
    tasks (``oom_kill`` in ``memory.oom_control``, v1; in ``memory.events``, v2, its subtree's
    too), and the kernel raises that count right before it prints ``Killed process``, after it
    began the report (``invoked oom-killer``). So the last snapshot with the old count was read
    before the kill line's stamp, ``offset >= snapshot - kill``, and the first with the new count
    was read after the report began and before the next snapshot began, ``offset <= next snapshot
    - report start``. The kills are matched to the count only where the kernel log holds exactly
    as many kills of the group as the count says (the n-th kill raised it to n). The stamps are
    printk's: where perf ran on CLOCK_MONOTONIC, the bounds widen by printk's allowance.
The bounds give an interval ``[L, U]`` that contains the truth whatever the latencies. Within it
the estimate uses what is typical: a worker's main thread killed by a signal ends within about a
millisecond of it (``SIGNAL_EXIT_TYPICAL_NS``) -- unless it is the last thread of its process,
which frees the address space before perf records its exit (tens of milliseconds for a few GB;
perf marks it ``group_dead=true``). So each signal->exit pair of a main thread that was not the
last suggests ``printed + 1 ms``. Where the main thread was the last, its process's other threads
were not: a fatal signal ends them all at once, so the first exit of the run of its threads' exits
just before the main thread's suggests ``printed + 1 ms`` instead (a process's threads: those its
cgroup's task list names as threads, forked by the process or its threads). A process that torchrun
signalled more than once outlived the earlier signals -- it was stopped, frozen or stuck in the
kernel -- and its exit suggests nothing. The estimate is the latest of the suggestions and L, but no
further than the middle of ``[L, U]``. Without any, births may say more: a snapshot reads its task
list right after it takes its stamp (within ``BIRTH_READ_TYPICAL_NS``, typically), so a birth that
the snapshot stamped ``s`` lists typically came before ``s + 50 ms``, far tighter than the next
snapshot's stamp that bounds it for sure; the estimate is then the middle of L and the tightest
such typical bound (no lower than L). Otherwise it is the middle of ``[L, U]``. The stated
uncertainty is the estimate's distance to the farther end, so that the window
``offset ± uncertainty`` covers ``[L, U]``.

The offset is for perf's clock: printk's own where ``perf record`` ran without ``-k`` (perf and
printk both read the kernel's ``local_clock``), CLOCK_MONOTONIC with ``-k CLOCK_MONOTONIC``.
Bounds that cannot all hold (``L > U``) leave the host unplaced by this method and are reported.

Worked example (``tests/analysis/test_clock_match.py``; a real recording, rank 2 of four raised
an exception): perf saw the failed worker 20971 exit at 22970.748091 s and the main threads of
20969, 20970 and 20972 exit at 22970.832385, 22970.832329 and 22970.834857 s. torchrun printed
``Sending process 20969/20970/20972 closing signal SIGTERM`` at 04:10:49.884, .887 and .889, and
``failed (exitcode: 1) local_rank: 2 (pid: 20971)`` at 04:10:50.161 (UTC 2026-12-02). Lower
bounds (epoch 1796184649.884 s etc. minus the exit): 1796161679.051615, 1796161679.054671 and
1796161679.054143 s, less 1 ms of slack: L = 1796161679.053671 s. Upper bounds: 20971 exited
before the first signal, 1796184649.885 - 22970.748091 = 1796161679.136909 s; the others before
the ``failed`` line, at most 1796161679.329615 s: U = 1796161679.136909 s. The three main
threads were not their processes' last (``group_dead=false``): their signals suggest the
printed times plus 1 ms, the latest 1796161679.055671 s (from 20970), which is the estimate,
± 81.238 ms (to U). (The recorder's truth, from perf's ``-k``
reference time that the example leaves aside: 1796161679.055119 s, 0.55 ms away.)

Second worked example (births; the same test file, a real recording whose wall clock stepped
later): torchrun's agent 2251 forked the workers 2272 and 2273 at 466.949580 and 466.950467 s on
perf's clock. The cgroup snapshot ``1796203675.084709`` lists only 2251; ``1796203675.584675``
lists all three; the next one is ``1796203676.085171``. Lower bounds: 1796203675.084709 -
466.949580 = 1796203208.135129 s (and ...208.134242 from 2273); upper bounds: 1796203676.085171
+ 0.001 - 466.950467 = 1796203209.135704 s (and ...209.136591): ``[L, U]`` =
[1796203208.135129, 1796203209.135704] s. The snapshot that lists them was stamped
1796203675.584675: they typically came before 1796203675.634675, so the offset is typically at most
1796203675.634675 - 466.950467 = 1796203208.684208 s, and the estimate is the middle of L and that,
1796203208.409669 s, ± 726.0 ms to cover ``[L, U]`` (the middle of ``[L, U]`` would be 393 ms off the
recorder's truth, from its clock probe: 1796203208.242108 s; this is 168 ms off).

Third worked example (an OOM kill; the same test file, the development recording
``leak-r1-wallstep`` whole): the kernel began its report at 490.259414 s (``python3 invoked
oom-killer``) and printed ``Killed process 2273`` at 490.259982 s, in ``/train_job``, whose snapshot
``1796203700.484703`` counts ``oom_kill 0``, ``1796203700.984668`` counts 1, and the next one
is ``1796203701.484676``: ``[L, U]`` = [1796203700.484703 - 490.259982, 1796203701.484676 -
490.259414] = [1796203210.224721, 1796203211.225262] s, on printk's clock, one second wide, at
the very instant of the kill. (The recorder's truth: 1796203208.242108 s before the wall clock
stepped +2.400052 s, 1796203210.642160 s after it, where the kill was.)

Fourth worked example (a main thread that was its process's last; the same test file, the
development recording ``tenant`` without its anchors): torchrun printed ``Sending process 28845
closing signal SIGTERM`` at epoch 1796163465.629 s; perf saw 28845's main thread exit at
1811.817985 s (``group_dead=true``) and its four other threads (listed as threads in the cgroup's
``tasks``, forked by 28845) at 1811.817367, .817434, .817456 and .817478 s. L = 1796163465.629 -
0.001 - 1811.817985 = 1796161653.810015 s; the first of the four suggests 1796163465.629 + 0.001 -
1811.817367 = 1796161653.812633 s, the estimate (the middle of ``[L, U]`` would be 99 ms later).
(The recorder's truth: 1796161653.812761 s, 0.13 ms away.)
"""
from __future__ import annotations

from dataclasses import dataclass

from .present import has_rows
from .sql import events_named

SEND_SLACK_NS = 1_000_000          # torchrun's poll() to its log call, allowed generously
LAUNCHER_RES_NS = 1_000_000        # torchrun prints milliseconds (padded to six digits)
# a worker's main thread, killed by a signal, ends within about this (when it is not the last
# thread: the last one frees the address space before perf records its exit, tens of ms for GBs)
SIGNAL_EXIT_TYPICAL_NS = 1_000_000
# threads of one process that a signal killed end within this of each other (the last one may
# follow later: it frees the address space first)
BURST_GAP_NS = 5_000_000
TEARDOWN_MAX_NS = 1_000_000_000    # the last thread's exit at most this after the others'
PRINTED_RES_NS = {"dmesg_ctime": 1_000_000_000, "dmesg_iso": 1_000}   # a converted kernel log's stamps
METHOD = ("the same processes on both clocks (perf's exits against torchrun's signals and reports "
          "and the processes' own last lines; perf's forks against the cgroup snapshots that list them; "
          "the kernel's OOM kills against the cgroup counts that show them)")


@dataclass(frozen=True)
class Bound:
    """One pair: ``lo <= offset`` or ``offset <= hi`` (offset = wall - boot), with its evidence."""
    host: str
    rule: str                  # "signal->exit" | "exit->first signal" | "exit->failed line" | "line->exit"
    #                            | "snapshot->birth" | "birth->snapshot" | "snapshot->oom kill" | "oom kill->snapshot"
    pid: int
    lo_ns: int | None
    hi_ns: int | None
    boot_source: str
    boot_line: int | None
    wall_source: str
    wall_line: int | None
    boot_clock: str            # perf's clockid ("" where perf used its own clock: printk's)
    typical_ns: int | None = None   # how far the effect typically follows the cause, where known (an
    #                                   upper bound: how far below it the truth typically lies)
    boot_ns: int | None = None      # the exit's time on the boot clock (where the bound holds)
    printk_stamp: bool = False      # boot_ns is a kernel record's stamp (printk's clock, whatever boot_clock says)

    def evidence(self) -> dict:
        side = f">= {self.lo_ns / 1e9:.6f}" if self.lo_ns is not None else f"<= {self.hi_ns / 1e9:.6f}"
        return {"source": self.wall_source, "line": self.wall_line, "rule": self.rule, "pid": self.pid,
                "boot_source": self.boot_source, "boot_line": self.boot_line, "offset": side,
                "offset_ns": self.lo_ns if self.lo_ns is not None else self.hi_ns}


@dataclass(frozen=True)
class Match:
    host: str
    offset_ns: int
    uncertainty_ns: int
    lo_ns: int
    hi_ns: int
    bounds: tuple[Bound, ...]
    boot_clock: str

    @property
    def printk_clock(self) -> bool:
        """perf ran on its own clock, which is printk's: the kernel log needs no drift allowance."""
        return self.boot_clock == ""


# perf's `-k` clock of the row's source, lower case ("" where perf ran on its own clock)
_PERF_CLOCK = """COALESCE((SELECT lower(split_part(f.value, ' ', 1)) FROM facts f
                           WHERE f.incident_id = s.incident_id AND f.source_id = s.source_id
                             AND f.key = 'perf_clockid'), '')"""


def _exits(store, incident_id: str) -> dict[tuple[str, int], dict]:
    """(host, tid) -> the thread's exit on perf's clock, else its last sample (``exact`` False)."""
    out: dict[tuple[str, int], dict] = {}
    if not has_rows(store, incident_id, "events"):
        return out
    for r in store.query(
            f"""SELECT COALESCE(s.host, '') AS host, e.pid AS tid, min(e.ts_raw_ns) AS ts,
                      arg_min(s.path, (e.ts_raw_ns, s.path, e.line)) AS path,
                      arg_min(e.line, (e.ts_raw_ns, s.path, e.line)) AS line,
                      arg_min(json_extract_string(e.attrs, '$.group_dead'), (e.ts_raw_ns, s.path, e.line)) AS group_dead,
                      arg_min({_PERF_CLOCK}, (e.ts_raw_ns, s.path, e.line)) AS clk
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND s.format = 'perf_script' AND s.clock_domain = 'boot'
                 AND e.name = 'sched:sched_process_exit' AND e.pid IS NOT NULL AND e.ts_raw_ns IS NOT NULL
               GROUP BY 1, 2""", [incident_id]):
        out[(r["host"], r["tid"])] = {"ts": r["ts"], "path": r["path"], "line": r["line"], "exact": True,
                                      "clk": r["clk"], "last_thread": r["group_dead"] != "false"}
    return out


def _last_samples(store, incident_id: str, want: set[tuple[str, int]]) -> dict[tuple[str, int], dict]:
    if not want:
        return {}
    tids = sorted({t for _, t in want})
    out = {}
    for r in store.query(
            f"""SELECT COALESCE(s.host, '') AS host, x.tid, max(x.ts_raw_ns) AS ts,
                       arg_max(s.path, (x.ts_raw_ns, s.path)) AS path, arg_max({_PERF_CLOCK}, (x.ts_raw_ns, s.path)) AS clk
                FROM samples x JOIN sources s USING (incident_id, source_id)
                WHERE x.incident_id = ? AND s.clock_domain = 'boot' AND x.tid IN ({','.join('?' * len(tids))})
                GROUP BY 1, 2""", [incident_id, *tids]):
        if (r["host"], r["tid"]) in want:
            out[(r["host"], r["tid"])] = {"ts": r["ts"], "path": r["path"], "line": None, "exact": False,
                                          "clk": r["clk"]}
    return out


LAUNCHER_NAMES = ("closing_signal", "worker_failed")    # the launcher lines' event names


def launcher_lines(store, incident_id: str) -> list[dict]:
    """torchrun's closing-signal and ``failed`` lines, in file order (what the rules read)."""
    if not has_rows(store, incident_id, "events"):
        return []
    return store.query(
        f"""SELECT COALESCE(s.host, '') AS host, s.path, e.pid AS launcher, e.line, e.name, e.ts_raw_ns AS wall_ns,
                  TRY_CAST(json_extract_string(e.attrs, '$.worker_pid') AS BIGINT) AS worker
           FROM {events_named(LAUNCHER_NAMES)} e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND s.clock_domain = 'wall' AND e.ts_raw_ns IS NOT NULL
           ORDER BY s.path, e.line""", [incident_id] * (len(LAUNCHER_NAMES) + 1))


def shutdowns(lines: list[dict]) -> list[list[dict]]:
    """torchrun's shutdowns: one launcher's lines of one file, in file order, each ending at its
    ``failed`` line (the closing signals before it are the ones that shutdown sent)."""
    rounds: list[list[dict]] = []
    cur: list[dict] = []
    key = None
    for ln in lines:
        k = (ln["path"], ln["launcher"])
        if k != key and cur:
            rounds.append(cur)
            cur = []
        key = k
        cur.append(ln)
        if ln["name"] == "worker_failed":
            rounds.append(cur)
            cur = []
    if cur:
        rounds.append(cur)
    return rounds


def noticed(lines: list[dict]) -> dict[tuple[str, int], int]:
    """(path, line of a ``failed`` line) -> when torchrun had noticed that worker's death: its
    first closing signal of that shutdown, else the line itself (the shutdown in between may
    have waited out a 30 s grace period)."""
    out = {}
    for rnd in shutdowns(lines):
        first = min(ln["wall_ns"] for ln in rnd)
        for ln in rnd:
            if ln["name"] == "worker_failed":
                out[(ln["path"], ln["line"])] = first
    return out


# what a process wrote on the wall clock, with the time it wrote it: a Kineto op of the traced
# process, or a line whose own prefix names its writer (torch elastic's ``E1202 04:08:46.621000
# 20168 file:line]``). Many rows carry a pid they are *about* (a launcher's or a collector's
# report of a death, written after it): they do not count.
_OWN_LINES = r"""SELECT COALESCE(s.host, '') AS host, e.pid, max(e.ts_raw_ns + COALESCE(e.dur_ns, 0)) AS last,
                       arg_max(s.path, e.ts_raw_ns + COALESCE(e.dur_ns, 0)) AS path,
                       arg_max(e.line, e.ts_raw_ns + COALESCE(e.dur_ns, 0)) AS line
                FROM events e JOIN sources s USING (incident_id, source_id)
                WHERE e.incident_id = ? AND s.clock_domain = 'wall' AND e.pid IS NOT NULL
                  AND e.ts_raw_ns IS NOT NULL AND NOT COALESCE(e.ts_interpolated, false)
                  AND (s.format = 'kineto' OR s.format = 'app_log' AND regexp_matches(e.text,
                       '^(\[default\d+\]:)?(\[rank\d+\]:)?[DIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} '
                       || CAST(e.pid AS VARCHAR) || ' '))
                GROUP BY 1, 2"""


def _own_lines(store, incident_id: str, exits: dict, only: str | None) -> list[Bound]:
    """``line -> exit`` (a lower bound): a process wrote its last timed line (or Kineto op)
    before its last thread exited: ``offset >= written - exit``. Only exits perf marked as the
    last of their process count (a line of another thread may follow the main thread's exit)."""
    out = []
    if not has_rows(store, incident_id, "events"):
        return out
    for r in store.query(_OWN_LINES, [incident_id]):
        host = r["host"] or only or ""
        ex = exits.get((host, r["pid"]))
        if ex is None or not ex["last_thread"]:
            continue
        out.append(Bound(host, "line->exit", r["pid"], r["last"] - ex["ts"], None, ex["path"], ex["line"],
                         r["path"], r["line"], ex["clk"], boot_ns=ex["ts"]))
    return out


FORK_SLACK_NS = 1_000_000          # the child's cgroup link to perf's fork record, allowed generously
BIRTH_READ_TYPICAL_NS = 50_000_000  # a snapshot's task list read after its stamp, typically within


def _forks(store, incident_id: str) -> dict[tuple[str, int], dict]:
    """(host, child id) -> its fork on perf's clock, with the forking thread; ids forked more
    than once in the recording (reused) are left out."""
    out = {}
    if not has_rows(store, incident_id, "events"):
        return out
    for r in store.query(
            f"""SELECT COALESCE(s.host, '') AS host,
                       TRY_CAST(json_extract_string(e.attrs, '$.child_pid') AS BIGINT) AS child,
                       min(e.pid) AS parent, min(e.ts_raw_ns) AS ts, arg_min(s.path, (e.ts_raw_ns, s.path)) AS path,
                       min(e.line) AS line, arg_min({_PERF_CLOCK}, (e.ts_raw_ns, s.path)) AS clk
                FROM events e JOIN sources s USING (incident_id, source_id)
                WHERE e.incident_id = ? AND s.format = 'perf_script' AND s.clock_domain = 'boot'
                  AND e.name = 'sched:sched_process_fork' AND e.ts_raw_ns IS NOT NULL
                GROUP BY 1, 2 HAVING count(*) = 1 AND child IS NOT NULL""", [incident_id]):
        out[(r["host"], r["child"])] = r
    return out


def _kill_bursts(store, incident_id: str, only: str | None, exits: dict, forks: dict) -> dict[tuple[str, int], int]:
    """(host, pid) -> where a process's main thread was its last to exit, the exit of the first of
    its other threads in the run of exits just before it (each within ``BURST_GAP_NS`` of the next,
    the last within ``TEARDOWN_MAX_NS`` of the main thread's): a signal that kills a process ends
    all its threads at once, and only the last one waits for the address space to be freed. A
    process's threads are those its cgroup's task list names as threads, not processes, forked by
    the process or by one of its threads (``forks``: :func:`_forks`)."""
    if not forks:
        return {}
    threads = {(r["host"] or only or "", r["tid"]) for r in store.query(
        """SELECT DISTINCT COALESCE(m.host, s.host, '') AS host, m.tid
           FROM members m JOIN sources s USING (incident_id, source_id)
           WHERE m.incident_id = ? AND m.basis IN ('tasks', 'cgroup.threads') AND m.pid IS NULL
             AND m.tid IS NOT NULL""", [incident_id])}
    children: dict[tuple[str, int], list[int]] = {}
    for (host, child), f in forks.items():
        if (host, child) in threads:
            children.setdefault((host, f["parent"]), []).append(child)
    out = {}
    for (host, tid), ex in exits.items():
        if not ex["last_thread"] or (host, tid) not in children:
            continue
        group, todo = set(), [tid]
        while todo:
            for c in children.get((host, todo.pop()), ()):
                if c not in group:
                    group.add(c)
                    todo.append(c)
        ends = sorted(e["ts"] for c in group if (e := exits.get((host, c))) is not None and e["ts"] <= ex["ts"])
        if not ends or ex["ts"] - ends[-1] > TEARDOWN_MAX_NS:
            continue
        k = len(ends) - 1
        while k > 0 and ends[k] - ends[k - 1] <= BURST_GAP_NS:
            k -= 1
        out[(host, tid)] = ends[k]
    return out


def _births(store, incident_id: str, only: str | None, forks: dict) -> list[Bound]:
    """``snapshot -> birth -> snapshot`` (see the module docstring): a lower and an upper bound
    for each id that joined a cgroup, forked there by a member of it (``forks``: :func:`_forks`)."""
    if not forks:
        return []
    rows = store.query(
        """SELECT COALESCE(m.host, s.host, '') AS host, m.cgroup, m.controller, m.basis, m.change,
                  COALESCE(m.tid, m.pid) AS id, m.ts_raw_ns AS ts, m.prev_read_ns AS prev, m.next_read_ns AS nxt,
                  s.path, m.line
           FROM members m JOIN sources s USING (incident_id, source_id)
           WHERE m.incident_id = ? AND s.clock_domain = 'wall' AND m.ts_raw_ns IS NOT NULL
             AND m.basis IN ('cgroup.procs', 'tasks', 'cgroup.threads')
           ORDER BY m.ts_raw_ns""", [incident_id])
    # per file series and id: the spans it was listed, [from, to] (to None: still at the last read)
    spans: dict[tuple, list] = {}
    for r in rows:
        r["host"] = r["host"] or only or ""
        k = (r["host"], r["cgroup"], r["id"], r["controller"], r["basis"])
        if r["change"] in ("first", "joined"):
            spans.setdefault(k, []).append([r["ts"], None])
        elif r["change"] == "left" and spans.get(k) and spans[k][-1][1] is None:
            spans[k][-1][1] = r["prev"]          # last listed at the read before
        elif r["change"] == "last" and spans.get(k) and spans[k][-1][1] is None:
            spans[k][-1][1] = r["ts"]
    by_id: dict[tuple, list] = {}              # (host, cgroup, id) -> its spans in any hierarchy
    for k, sp in spans.items():
        by_id.setdefault(k[:3], []).extend(sp)

    def member(host, cgroup, ident, t0, t1) -> bool:
        """``ident`` listed in ``cgroup`` (any hierarchy, processes or threads) by ``t0`` and still at ``t1``."""
        return any(a <= t0 and (b is None or b >= t1) for a, b in by_id.get((host, cgroup, ident), ()))

    # perf saw each of these ids forked once, so in the order the reads were taken it joined each
    # series at most once; a series whose names list it joining twice is out of order by its names
    # (the wall clock stepped back while it was taken), and which join was the birth is not known
    joins: dict[tuple, int] = {}
    for r in rows:
        if r["change"] == "joined":
            k = (r["host"], r["cgroup"], r["id"], r["controller"], r["basis"])
            joins[k] = joins.get(k, 0) + 1
    out = []
    for r in rows:
        if r["change"] != "joined" or r["prev"] is None:
            continue
        if joins[(r["host"], r["cgroup"], r["id"], r["controller"], r["basis"])] > 1:
            continue
        f = forks.get((r["host"], r["id"]))
        if f is None or not member(r["host"], r["cgroup"], f["parent"], r["prev"], r["ts"]):
            continue
        out.append(Bound(r["host"], "snapshot->birth", r["id"], r["prev"] - f["ts"], None, f["path"], f["line"],
                         r["path"], r["line"], f["clk"], boot_ns=f["ts"]))
        if r["nxt"] is not None:
            # typical: the listing read followed this snapshot's stamp closely, not the next one's
            typical = r["nxt"] + FORK_SLACK_NS - r["ts"] - BIRTH_READ_TYPICAL_NS
            out.append(Bound(r["host"], "birth->snapshot", r["id"], None, r["nxt"] + FORK_SLACK_NS - f["ts"],
                             f["path"], f["line"], r["path"], r["line"], f["clk"],
                             typical if typical > 0 else None, boot_ns=f["ts"]))
    return out


def _counted_kills(store, incident_id: str, domains: tuple[str, ...]):
    """Each kill of a kernel log (on one of ``domains``) that a cgroup's ``memory.oom_kill``
    counter shows, as ``(kill, prev, cur, nxt, series)``: the counter's last snapshot before it
    rose (``prev``), the first after (``cur``), the one after that (``nxt``, None at the end). A
    kernel log's kills are matched to a series only where the log holds exactly as many kills of
    the group as the count: the n-th raised it to n. Each kernel log is matched on its own (a
    bundle may hold the same records twice: raw and ``dmesg -T``)."""
    if not has_rows(store, incident_id, "events"):
        return
    kills = store.query(
        f"""SELECT COALESCE(s.host, '') AS host, s.path, e.source_id, s.clock_domain AS domain, s.format, e.line,
                  e.ts_raw_ns AS ts,
                  json_extract_string(e.attrs, '$.task_memcg') AS memcg,
                  TRY_CAST(json_extract_string(e.attrs, '$.victim_pid') AS BIGINT) AS pid,
                  (SELECT max(o.ts_raw_ns) FROM events o WHERE o.incident_id = e.incident_id
                     AND o.source_id = e.source_id AND o.name = 'oom_invoked' AND o.ts_raw_ns <= e.ts_raw_ns
                     AND o.ts_raw_ns > e.ts_raw_ns - 10000000000) AS first
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND s.clock_domain IN ({', '.join('?' * len(domains))}) AND s.kind = 'dmesg'
             AND e.kind = 'oom_kill' AND e.ts_raw_ns IS NOT NULL ORDER BY s.path, e.line""",
        [incident_id, *domains])
    kills = [k for k in kills if k["memcg"]]
    if not kills:
        return
    series: dict[tuple, list] = {}
    for r in store.query(
            """SELECT COALESCE(m.host, s.host, '') AS host, m.entity, s.path, m.source_id, m.ts_raw_ns AS ts, m.value
               FROM metrics m JOIN sources s USING (incident_id, source_id)
               WHERE m.incident_id = ? AND m.metric = 'memory.oom_kill' AND s.clock_domain = 'wall'
                 AND m.ts_raw_ns IS NOT NULL AND m.value IS NOT NULL
               ORDER BY m.source_id, m.entity, m.ts_raw_ns""", [incident_id]):
        series.setdefault((r["host"], r["entity"], r["path"]), []).append(r)
    kernel_hosts = {k["host"] for k in kills}
    for (host, entity, path), rows in series.items():
        host = host if host in kernel_hosts or len(kernel_hosts) != 1 else next(iter(kernel_hosts))
        if any(b["value"] < a["value"] for a, b in zip(rows, rows[1:])):
            # a count that never falls falls in the order of the stamps: the wall clock stepped
            # back while the series was taken, and which rise came first is not known
            continue
        total = int(rows[-1]["value"])
        for kpath in sorted({k["path"] for k in kills if k["host"] == host}):
            mine = [k for k in kills if k["host"] == host and k["path"] == kpath]
            # the counter counts the kills of the group's own tasks (cgroup v1), or of its subtree
            # (cgroup v2): it is read only where the kernel log holds exactly as many such kills
            exact = [k for k in mine if k["memcg"] == entity]
            under = [k for k in mine if k["memcg"] == entity or k["memcg"].startswith(entity.rstrip("/") + "/")]
            ks = exact if len(exact) == total else under if len(under) == total else None
            if not ks:
                continue
            for i, (prev, cur) in enumerate(zip(rows, rows[1:])):
                nxt = rows[i + 2] if i + 2 < len(rows) else None
                for k in ks[int(prev["value"]):int(cur["value"])]:
                    yield k, prev, cur, nxt, {"host": host, "entity": entity, "path": path}


def _oom_kills(store, incident_id: str, perf_clock: dict[str, str]) -> list[Bound]:
    """``snapshot -> OOM kill -> snapshot`` (see the module docstring): both bounds for each
    kill of the kernel log that a cgroup's ``memory.oom_kill`` counter shows."""
    from .clocks import _printk_allowance
    out = []
    for k, prev, _cur, nxt, sr in _counted_kills(store, incident_id, ("boot",)):
        host, path = sr["host"], sr["path"]
        clk = perf_clock.get(host, "")
        # the read of ``prev`` came before the count rose, and the count rose before the kill's
        # "Killed process" line; the read of ``cur`` came after it rose, after the OOM report began
        # ("invoked oom-killer"), and before the next snapshot began
        first = k["first"] if k["first"] is not None else k["ts"]
        w = _printk_allowance(k["ts"]) if clk else 0     # onto perf's clock where it is not printk's
        out.append(Bound(host, "snapshot->oom kill", k["pid"] or 0, prev["ts"] - k["ts"] - w, None, k["path"],
                         k["line"], path, None, clk, boot_ns=first, printk_stamp=True))
        if nxt is not None:
            out.append(Bound(host, "oom kill->snapshot", k["pid"] or 0, None, nxt["ts"] - first + w,
                             k["path"], k["line"], path, None, clk, boot_ns=first, printk_stamp=True))
    return out


def counted_kill_windows(store, incident_id: str) -> list[dict]:
    """Where on the wall clock each OOM kill of a kernel log lies by the cgroup counter that shows
    it (:func:`_counted_kills`), whatever the kernel log's own clock: after the read of the last
    snapshot with the old count, and no later than the next snapshot after the first with the new
    one plus the report's length (its "invoked oom-killer" line to its "Killed process" line; one
    second more where the log prints whole seconds). Rows: ``source_id``, ``line`` of the kill;
    ``lo_ns``, ``hi_ns`` on the snapshots' raw wall clock; their ``host``; ``snapshots`` (path)."""
    out = []
    for k, prev, _cur, nxt, sr in _counted_kills(store, incident_id, ("boot", "kernel_wall")):
        if nxt is None:
            continue
        report = k["ts"] - (k["first"] if k["first"] is not None else k["ts"])
        if k["domain"] != "boot":   # two printed stamps' difference is within their resolution of the true one
            report += PRINTED_RES_NS.get(k["format"], 1_000_000_000)
        out.append({"source_id": k["source_id"], "line": k["line"], "lo_ns": prev["ts"],
                    "hi_ns": nxt["ts"] + report, "host": sr["host"], "snapshots": sr["path"],
                    "snapshot_source_id": nxt["source_id"]})
    return out


def bounds(store, incident_id: str, lines: list[dict]) -> list[Bound]:
    """Every causal pair of the incident (see the module docstring); ``lines``:
    :func:`launcher_lines`."""
    exits = _exits(store, incident_id)
    perf_clock = {r["host"]: r["clk"] for r in store.query(
        f"""SELECT COALESCE(s.host, '') AS host, min({_PERF_CLOCK}) AS clk FROM sources s
            WHERE s.incident_id = ? AND s.format = 'perf_script' AND s.clock_domain = 'boot' GROUP BY 1""",
        [incident_id])}
    hosts = {h for h, _ in exits} or set(perf_clock)
    oom = _oom_kills(store, incident_id, perf_clock)
    if not hosts:
        return oom
    # A log without a host in a single-host bundle is that host's.
    only = next(iter(hosts)) if len(hosts) == 1 else None
    forks = _forks(store, incident_id)
    out: list[Bound] = _own_lines(store, incident_id, exits, only) + _births(store, incident_id, only, forks) + oom
    for ln in lines:
        if ln["host"] == "" and only is not None:
            ln["host"] = only
    need = {(ln["host"], ln["worker"]) for ln in lines if ln["worker"] is not None} - set(exits)
    seen = {**_last_samples(store, incident_id, need), **exits}

    def bound(rule, ln, ex, lo=None, hi=None, typical=None):
        out.append(Bound(ln["host"], rule, ln["worker"], lo, hi, ex["path"], ex["line"], ln["path"], ln["line"],
                         ex["clk"], typical, ex["ts"]))

    burst = _kill_bursts(store, incident_id, only, exits, forks) if any(
        ex["last_thread"] for ex in exits.values()) else {}
    # a process signalled more than once outlived the earlier signals: it was not running (stopped,
    # frozen, stuck in the kernel), and how soon the last one ended it is not known
    signals: dict[tuple[str, int], int] = {}
    for ln in lines:
        if ln["name"] == "closing_signal" and ln["worker"] is not None:
            k = (ln["path"], ln["host"], ln["worker"])     # (a copy of the log in another file counts apart)
            signals[k] = signals.get(k, 0) + 1
    for rnd in shutdowns(lines):
        sends = [ln for ln in rnd if ln["name"] == "closing_signal" and ln["worker"] is not None]
        failed = [ln for ln in rnd if ln["name"] == "worker_failed" and ln["worker"] is not None]
        for ln in sends:
            ex = seen.get((ln["host"], ln["worker"]))
            if ex is not None and ex["exact"]:
                first = (None if signals[(ln["path"], ln["host"], ln["worker"])] > 1 else
                         burst.get((ln["host"], ln["worker"])) if ex["last_thread"] else ex["ts"])
                bound("signal->exit", ln, ex, lo=ln["wall_ns"] - SEND_SLACK_NS - ex["ts"],
                      typical=None if first is None else SIGNAL_EXIT_TYPICAL_NS + ex["ts"] - first)
        for f in failed:
            ex = seen.get((f["host"], f["worker"]))
            if ex is not None:
                first = min([ln["wall_ns"] for ln in sends] + [f["wall_ns"]])
                rule = "exit->first signal" if sends else "exit->failed line"
                bound(rule, {**f, "wall_ns": first}, ex, hi=first + LAUNCHER_RES_NS - ex["ts"])
            for ln in sends:
                ex = seen.get((ln["host"], ln["worker"]))
                if ex is not None:
                    bound("exit->failed line", {**ln, "wall_ns": f["wall_ns"], "line": f["line"]}, ex,
                          hi=f["wall_ns"] + LAUNCHER_RES_NS - ex["ts"])
    return out


def solve(host: str, bs: list[Bound]) -> tuple[Match | None, dict | None]:
    """The offset from one host's bounds: (match, None), or (None, the contradiction), or
    (None, None) when the bounds leave one side open."""
    lows = [b for b in bs if b.lo_ns is not None]
    highs = [b for b in bs if b.hi_ns is not None]
    if not lows or not highs:
        return None, None
    lo_b = max(lows, key=lambda b: b.lo_ns)
    hi_b = min(highs, key=lambda b: b.hi_ns)
    lo, hi = lo_b.lo_ns, hi_b.hi_ns
    clocks = {b.boot_clock for b in bs}
    if lo > hi or len(clocks) > 1:
        return None, {"host": host, "lower": lo_b.evidence(), "upper": hi_b.evidence(),
                      "gap_ns": lo - hi, "clocks": sorted(clocks)}
    mid = (lo + hi) // 2
    typical = [b.lo_ns + SEND_SLACK_NS + b.typical_ns for b in lows if b.typical_ns is not None]
    # an upper bound's typical_ns: how far below it the truth typically lies (births)
    below = [b.hi_ns - b.typical_ns for b in highs if b.typical_ns is not None]
    if typical:
        off = min(max([lo] + typical), mid)
    elif below:
        off = max(lo, (lo + min(min(below), hi)) // 2)
    else:
        off = mid
    unc = max(off - lo, hi - off, 1)
    return Match(host, off, unc, lo, hi, (lo_b, hi_b) + tuple(b for b in bs if b not in (lo_b, hi_b)),
                 clocks.pop()), None


def matches(store, incident_id: str, lines: list[dict],
            by: dict[str, list[Bound]] | None = None) -> tuple[dict[str, Match], list[dict]]:
    """Per host, the offset of perf's clock from the processes seen on both clocks, and the
    hosts whose pairs contradict each other; ``by``: the bounds per host, where already read
    (:func:`bounds_by_host`)."""
    by = bounds_by_host(store, incident_id, lines) if by is None else by
    found, bad = {}, []
    for host, bs in by.items():
        m, c = solve(host, bs)
        if m is not None:
            found[host] = m
        elif c is not None:
            bad.append(c)
    return found, bad


def bounds_by_host(store, incident_id: str, lines: list[dict]) -> dict[str, list[Bound]]:
    by: dict[str, list[Bound]] = {}
    for b in bounds(store, incident_id, lines):
        by.setdefault(b.host, []).append(b)
    return by
