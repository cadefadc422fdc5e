"""Per-rank progress, and which rank stopped (``rank_stalled``): absence is evidence.

For every rank of the job the aligned store tells, when the data has it, its *signs of life*:

* the last training step it reported (a ``step=N`` log line, or a Kineto ``ProfilerStep#N``),
* the last line it printed itself (launcher lines about it do not count),
* the end of the last event of its Kineto trace, and the last collective it entered,
* the last CPU sample of its main thread in ``perf`` (tid = pid; samples in the last seconds
  before the process's exit after a long silence are its death, not its progress),
* ``/proc/<pid>/status`` copies: the first snapshot that shows it stopped (T), traced (t) or
  in uninterruptible sleep (D), and the last one in which it still ran;

and how it ended (the terminal findings about it). The latest sign of life is ``last_alive``.

``rank_stalled`` (inferred): ranks that failed *waiting for a peer* — a collective timeout, or
an error naming the peer (``Connection closed by peer``) — while another rank had no failure
of its own: that rank stopped and the others waited for it. A launcher names the first rank to
*report* a failure as the root cause (torchrun's "Root Cause (first observed failure)"), which
in a hang is the waiting peer. A signal the launcher sent while tearing the job down (SIGTERM,
and the SIGKILL at the end of its grace period) is not a failure of the rank's own; a rank
that outlives the SIGTERM by seconds ignored it, which a stopped, frozen or blocked process
does. With several candidates the earliest last sign of life wins, with lower confidence.
Without any waiting rank, a rank whose last sign of life is more than ``GAP_NS`` (and ten of
its own step times) before every peer's is reported as stalled too.

When did it stop? Never before its last sign of progress (``lo``): a step, a collective, the end
of its trace, a line it printed. Upper bounds (``hi``), the tightest that applies:

* a waiting peer's timeout names its wait: that peer entered the collective at its timeout time
  minus the wait, and the stalled rank would have arrived within about two of its own step
  times had it been running;
* the first status snapshot showing it stopped or blocked; a hung-task report of its pid
  ("blocked for more than N seconds" at t: blocked since t - N at the latest);
* failing those, four step times (at least 2 s) after its last sign of life.

Worked example (``tests/analysis/test_progress.py``): rank 1 logs step 90 at 10:00:00.000 (steps
every 0.035 s) and never again; rank 0 raises "Timed out waiting 30000ms for recv" at
10:00:30.200 (window 10:00:30.1-10:00:30.3). Rank 0 entered the collective by 10:00:00.300; rank 1
would have arrived by 10:00:00.370. ``rank_stalled`` for rank 1: window [10:00:00.000,
10:00:00.370], stamped at its last sign of life.

A line is progress only until such a bound: had rank 1 also printed "no progress for 6 s" (its own
watchdog) at 10:00:06.000, it was alive then, yet it had not arrived where rank 0 had waited since
10:00:00.300, as a running rank would have by 10:00:00.370; the window stays [10:00:00.000,
10:00:00.370] (its last step, not its last line), and the summary says that line was not progress.
Its last step, collective and trace event always are (a bound before them is no bound).

The waiting rank's own timeout is no earlier than its wait's start plus the wait: had rank 0's
timeout line no time of its own (placed between its neighbours, 10:00:05.000-10:00:31.000), and
its last step been 10:00:00.030, it entered the collective after that and timed out at
10:00:30.030 at the earliest: its window becomes [10:00:30.030, 10:00:31.000]
(:func:`after_the_wait_began`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from aftertrace.ingest.timeparse import fmt_hms

from .findings import MAX_WAIT_NS
from .links import Evidence, Link, LinkKind, Provenance
from .present import with_rows

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.RANK_STALLED, LinkKind.JOB_FAILURE, LinkKind.SIGNAL_KILL})
GAP_NS = 30_000_000_000
PEER_ERROR = re.compile(r"closed by peer|reset by peer|Connection refused|remote worker|peer .*(?:died|closed)|"
                        r"Broken pipe|timed out|Timeout", re.I)
LAUNCHER_CATEGORIES = ("launcher",)
# A signal a launcher sends to the survivors once a rank failed: not a failure of its own.
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
IGNORED_SIGTERM_NS = 5_000_000_000     # outliving a SIGTERM by this much means it was not acted on
LATE_WAIT_NS = 5_000_000_000           # a peer error this long after the first wait failed: aftermath
DEATH_SILENCE_NS = 5_000_000_000       # samples after a silence this long, right before exit: dying
EXIT_FRAMES = ("do_exit", "do_group_exit", "exit_mmap")
STUCK_STATES = {"T": "stopped (T)", "t": "stopped by a tracer (t)", "D": "in uninterruptible sleep (D)"}

_UTC = """LEFT JOIN clock_map c ON c.incident_id = s.incident_id AND c.host = COALESCE(s.host, '')
          AND c.domain = s.clock_domain"""


@dataclass
class RankProgress:
    rank: int
    host: str | None = None
    pid: int | None = None
    last_step: int | None = None
    last_step_ns: int | None = None
    last_step_ev: Evidence | None = None
    last_line_ns: int | None = None
    last_line_ev: Evidence | None = None
    last_collective: str | None = None
    last_collective_ns: int | None = None
    last_cpu_ns: int | None = None
    last_cpu_unc_ns: int = 0                # how far the placed time of that sample may be off (its clock's)
    last_trace_ns: int | None = None
    step_time_s: float | None = None       # median of its reported step times
    stuck_ns: int | None = None            # first status snapshot showing it stopped/blocked
    stuck_state: str | None = None
    stuck_ev: Evidence | None = None
    running_ns: int | None = None          # last status snapshot in which it still ran
    sigterm_ns: int | None = None          # when the launcher sent it SIGTERM
    exit_ns: int | None = None             # when perf saw its main thread exit
    ended: list[Link] = field(default_factory=list)
    stack: dict | None = None              # what its main thread (and workers) were doing in a dump (stacks.py)

    @property
    def last_progress_ns(self) -> int | None:
        """Its last sign of progress: a step, a log line, a collective, a Kineto event. CPU
        samples and a running state say it was alive, not that it got anywhere (a teardown, a
        spin on a lock and a rank's last step all burn CPU)."""
        ts = [t for t in (self.last_step_ns, self.last_line_ns, self.last_collective_ns, self.last_trace_ns)
              if t is not None]
        return max(ts) if ts else None

    @property
    def last_alive_ns(self) -> int | None:
        ts = [t for t in (self.last_step_ns, self.last_line_ns, self.last_collective_ns, self.last_cpu_ns,
                          self.last_trace_ns, self.running_ns) if t is not None]
        return max(ts) if ts else None

    def to_json(self) -> dict:
        from aftertrace.ingest.timeparse import fmt_utc
        ev = self.last_line_ev or self.last_step_ev
        return {"rank": self.rank, "host": self.host, "pid": self.pid,
                "last_step": self.last_step, "last_step_time": fmt_utc(self.last_step_ns),
                "last_line_time": fmt_utc(self.last_line_ns),
                "last_line": None if ev is None else ev.to_json(),
                "last_collective": self.last_collective,
                "last_collective_time": fmt_utc(self.last_collective_ns),
                "last_cpu_time": fmt_utc(self.last_cpu_ns),
                "last_trace_time": fmt_utc(self.last_trace_ns),
                "stuck_state": self.stuck_state, "stuck_time": fmt_utc(self.stuck_ns),
                "last_alive_time": fmt_utc(self.last_alive_ns),
                "median_step_s": self.step_time_s,
                "ended": [{"kind": l.kind.value, "summary": l.summary, "time": fmt_utc(l.ts_ns)}
                          for l in self.ended],
                "stack": self.stack}


def rank_progress(store, incident_id: str) -> dict[int, RankProgress]:
    rows_in = with_rows(store, incident_id)

    def q(table: str, sql: str, params: list) -> list[dict]:
        """``store.query`` of a query whose rows all come from ``table``: not planned where the
        incident has no rows there."""
        return store.query(sql, params) if table in rows_in else []

    ranks: dict[int, RankProgress] = {}

    def get(r) -> RankProgress:
        return ranks.setdefault(int(r), RankProgress(int(r)))

    for r in q("events", """SELECT COALESCE(e.rank, s.rank) AS rank, COALESCE(e.host, s.host) AS host,
                         mode(e.pid) AS pid
                  FROM events e JOIN sources s USING (incident_id, source_id)
                  WHERE e.incident_id = ? AND COALESCE(e.rank, s.rank) IS NOT NULL
                    AND COALESCE(e.category, '') NOT IN ('launcher', 'collector')
                  GROUP BY ALL ORDER BY count(*) DESC""", [incident_id]):
        p = get(r["rank"])
        p.host = p.host or r["host"]
        p.pid = p.pid or r["pid"]
    for r in store.query("SELECT rank, host, pid FROM sources WHERE incident_id = ? AND rank IS NOT NULL",
                         [incident_id]):
        p = get(r["rank"])
        p.host = p.host or r["host"]
        p.pid = p.pid or r["pid"]
    # What the launcher (or the collector) says of each rank's pid: the most direct statement.
    for r in q("events", """SELECT rank, pid FROM events WHERE incident_id = ? AND rank IS NOT NULL AND pid IS NOT NULL
                    AND category IN ('launcher', 'collector') GROUP BY ALL""", [incident_id]):
        get(r["rank"]).pid = int(r["pid"])
    # Steps reported in the logs (the parser's ``step`` events) ...
    for r in q("events", """SELECT rank, step, ts, line, text, path, med FROM (
                     SELECT COALESCE(e.rank, s.rank) AS rank,
                            TRY_CAST(json_extract_string(e.attrs, '$.step') AS BIGINT) AS step,
                            e.ts_utc_ns AS ts, e.line, e.text, s.path,
                            row_number() OVER (PARTITION BY COALESCE(e.rank, s.rank)
                                               ORDER BY e.ts_utc_ns DESC, e.line DESC) AS n,
                            median(TRY_CAST(json_extract_string(e.attrs, '$.step_time_s') AS DOUBLE))
                                OVER (PARTITION BY COALESCE(e.rank, s.rank)) AS med
                     FROM events e JOIN sources s USING (incident_id, source_id)
                     WHERE e.incident_id = ? AND e.name = 'step' AND e.ts_utc_ns IS NOT NULL
                       AND COALESCE(e.rank, s.rank) IS NOT NULL)
                   WHERE n = 1""", [incident_id]):
        p = get(r["rank"])
        p.last_step, p.last_step_ns = r["step"], r["ts"]
        p.last_step_ev = Evidence(r["path"], r["line"], r["text"] or "")
        p.step_time_s = r["med"]
    # Step times from the text logs' metrics (every step line; the events keep only the last).
    for r in q("metrics", """SELECT TRY_CAST(regexp_extract(entity, '^rank (\\d+)$', 1) AS INTEGER) AS rank,
                         median(value) AS med
                  FROM metrics WHERE incident_id = ? AND metric = 'step_time' AND entity LIKE 'rank %'
                  GROUP BY 1""", [incident_id]):
        if r["rank"] is not None and r["rank"] in ranks:
            ranks[r["rank"]].step_time_s = r["med"]
    # ... and Kineto's ProfilerStep#N markers.
    for r in q("steps", f"""SELECT st.rank, max(st.step) AS step, max(st.ts_raw_ns + COALESCE(st.dur_ns, 0) + c.offset_ns) AS ts
                   FROM steps st JOIN sources s USING (incident_id, source_id) {_UTC}
                   WHERE st.incident_id = ? AND st.rank IS NOT NULL AND st.name LIKE 'ProfilerStep#%'
                     AND c.offset_ns IS NOT NULL
                   GROUP BY st.rank""", [incident_id]):
        p = get(r["rank"])
        if p.last_step_ns is None or (r["ts"] or 0) > p.last_step_ns:
            p.last_step, p.last_step_ns = r["step"], r["ts"]
    # The end of the last event of each rank's Kineto trace.
    for r in q("events", """SELECT COALESCE(e.rank, s.rank) AS rank, max(e.ts_utc_ns + COALESCE(e.dur_ns, 0)) AS ts
                  FROM events e JOIN sources s USING (incident_id, source_id)
                  WHERE e.incident_id = ? AND s.kind = 'torch_trace' AND e.ts_utc_ns IS NOT NULL
                    AND COALESCE(e.rank, s.rank) IS NOT NULL
                  GROUP BY 1""", [incident_id]):
        get(r["rank"]).last_trace_ns = r["ts"]
    # The last line each rank printed itself. Launcher lines about a rank do not count, nor lines
    # that name another process, nor, in a launcher's log whose rank output is prefixed
    # (torchrun --tee: ``[default0]:``), the unprefixed lines: those are the agent's own, even
    # when the file holds one rank (a node of a multi-node job).
    rank_pids = sorted({p.pid for p in ranks.values() if p.pid is not None})
    for r in q("events", """SELECT rank, ts, line, text, path FROM (
                    SELECT rank, ts, line, text, path,
                           row_number() OVER (PARTITION BY rank ORDER BY ts DESC, line DESC) AS n
                    FROM (SELECT COALESCE(e.rank, s.rank) AS rank, e.ts_utc_ns AS ts, e.line, e.text, s.path,
                                 e.pid, e.category, e.ts_interpolated,
                                 starts_with(e.text, '[default') AS prefixed,
                                 bool_or(starts_with(e.text, '[default')) OVER (PARTITION BY e.source_id) AS teed
                          FROM events e JOIN sources s USING (incident_id, source_id)
                          WHERE e.incident_id = ? AND s.kind IN ('app_log', 'nccl_log') AND e.ts_utc_ns IS NOT NULL)
                    WHERE NOT COALESCE(ts_interpolated, false)
                      AND COALESCE(category, '') NOT IN (SELECT unnest(?))
                      AND (pid IS NULL OR len(?) = 0 OR pid IN (SELECT unnest(?)))
                      AND (prefixed OR NOT teed)
                      AND rank IS NOT NULL)
                  WHERE n = 1""", [incident_id, list(LAUNCHER_CATEGORIES), rank_pids, rank_pids]):
        p = get(r["rank"])
        p.last_line_ns = r["ts"]
        p.last_line_ev = Evidence(r["path"], r["line"], r["text"] or "")
    for r in q("collectives", f"""SELECT rank, op, seq, ts FROM (
                     SELECT co.rank, co.op, co.seq, co.ts_raw_ns + COALESCE(co.dur_ns, 0) + c.offset_ns AS ts,
                            row_number() OVER (PARTITION BY co.rank ORDER BY co.ts_raw_ns DESC) AS n
                     FROM collectives co JOIN sources s USING (incident_id, source_id) {_UTC}
                     WHERE co.incident_id = ? AND co.rank IS NOT NULL AND c.offset_ns IS NOT NULL)
                   WHERE n = 1""", [incident_id]):
        p = get(r["rank"])
        # (its sequence number, where the trace gives one, shows which rank is behind its peers)
        p.last_collective = r["op"] if r["seq"] is None else f"{r['op']} #{r['seq']}"
        p.last_collective_ns = r["ts"]
    pids = {p.pid: p for p in ranks.values() if p.pid is not None}
    if pids:
        _perf_life(store, incident_id, pids)
        _status_life(store, incident_id, pids)
        for r in q("events", """SELECT TRY_CAST(json_extract_string(attrs, '$.worker_pid') AS BIGINT) AS pid,
                             min(ts_utc_ns) AS ts
                      FROM events WHERE incident_id = ? AND name = 'closing_signal' AND ts_utc_ns IS NOT NULL
                        AND json_extract_string(attrs, '$.signal') = 'SIGTERM'
                      GROUP BY 1""", [incident_id]):
            if r["pid"] in pids:
                pids[r["pid"]].sigterm_ns = r["ts"]
    return ranks


def attach_ended(ranks: dict[int, RankProgress], links: list[Link]) -> None:
    """Each rank's terminal findings (its ``ended``): those naming its rank or its pid."""
    by_pid = {p.pid: p for p in ranks.values() if p.pid is not None}
    for p in ranks.values():
        p.ended = []
    for l in links:
        if l.kind not in TERMINAL_KINDS:
            continue
        hit = {id(p): p for p in (ranks.get(l.rank), by_pid.get(l.pid)) if p is not None}
        for p in hit.values():
            p.ended.append(l)


def stacks_through_sql(name: str) -> str:
    """A recursive CTE ``name(source_id, stack_id)``: every stack node at or below a frame of a list
    (its parameters, in order: the incident, the frames, the incident)."""
    return f"""{name}(source_id, stack_id) AS (
                   SELECT source_id, stack_id FROM stacks
                   WHERE incident_id = ? AND frame IN (SELECT unnest(?))
                   UNION
                   SELECT s.source_id, s.stack_id FROM stacks s
                   JOIN {name} d ON s.source_id = d.source_id AND s.parent_id = d.stack_id
                   WHERE s.incident_id = ?)"""


def _perf_life(store, incident_id: str, pids: dict[int, RankProgress]) -> None:
    """Last CPU sample of each rank's main thread, its dying moments left out."""
    exits = {r["tid"]: r["ts"] for r in store.query(
        """SELECT tid, min(ts_utc_ns) AS ts FROM events WHERE incident_id = ? AND name LIKE '%sched_process_exit'
             AND tid IN (SELECT unnest(?)) AND ts_utc_ns IS NOT NULL GROUP BY tid""", [incident_id, list(pids)])}
    # samples whose call chain passes through the kernel's exit path are the process being torn
    # down (a SIGKILLed process spends its last tenths of a second in exit_mmap), not its progress
    for r in store.query(
            "WITH RECURSIVE " + stacks_through_sql("dying") + """
               SELECT COALESCE(x.pid, x.tid) AS pid, list(x.ts_utc_ns ORDER BY x.ts_utc_ns) AS ts,
                      max(COALESCE(c.uncertainty_ns, 0)) AS unc
               FROM samples x JOIN sources s USING (incident_id, source_id)
               LEFT JOIN clock_map c ON c.incident_id = x.incident_id AND c.host = COALESCE(s.host, '')
                    AND c.domain = s.clock_domain
               WHERE x.incident_id = ? AND x.tid IN (SELECT unnest(?)) AND x.ts_utc_ns IS NOT NULL
                 AND (x.pid IS NULL OR x.pid = x.tid)
                 AND (x.source_id, x.stack_id) NOT IN (SELECT (source_id, stack_id) FROM dying)
               GROUP BY 1""", [incident_id, list(EXIT_FRAMES), incident_id, incident_id, list(pids)]):
        ts = r["ts"]
        pids[r["pid"]].last_cpu_unc_ns = int(r["unc"] or 0)
        end = exits.get(r["pid"])
        pids[r["pid"]].exit_ns = end
        if end is not None and ts:
            # samples after a long silence that end at the exit: the process being killed
            i = len(ts) - 1
            while i > 0 and ts[i] >= end - 2 * DEATH_SILENCE_NS // 5:
                i -= 1
            if i < len(ts) - 1 and ts[i + 1] - ts[i] >= DEATH_SILENCE_NS:
                ts = ts[:i + 1]
        if ts:
            pids[r["pid"]].last_cpu_ns = ts[-1]


def _status_life(store, incident_id: str, pids: dict[int, RankProgress]) -> None:
    """Process states from ``/proc/<pid>/status`` copies (``proc_state`` events at each change)."""
    rows = store.query(
        """SELECT e.pid, e.ts_utc_ns AS ts, json_extract_string(e.attrs, '$.state') AS state, e.line, e.text,
                  s.path
           FROM events e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.name = 'proc_state' AND e.pid IN (SELECT unnest(?))
             AND e.ts_utc_ns IS NOT NULL ORDER BY e.ts_utc_ns""", [incident_id, list(pids)])
    for r in rows:
        p = pids[r["pid"]]
        st = (r["state"] or "")[:1]
        if st in STUCK_STATES and p.stuck_ns is None:
            p.stuck_ns, p.stuck_state = r["ts"], STUCK_STATES[st]
            p.stuck_ev = Evidence(r["path"], r["line"], r["text"] or "")
        elif st in ("R",) and p.stuck_ns is None:
            p.running_ns = r["ts"]


TERMINAL_KINDS = (LinkKind.OOM_KILL, LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT, LinkKind.SEGFAULT,
                  LinkKind.PYTHON_EXCEPTION, LinkKind.COLLECTIVE_TIMEOUT, LinkKind.COLLECTIVE_MISMATCH,
                  LinkKind.NCCL_INIT_FAILURE, LinkKind.DISK_FULL, LinkKind.SHM_EXHAUSTED,
                  LinkKind.DATALOADER_WORKER_KILLED, LinkKind.RENDEZVOUS_FAILURE)


def waits_for_peer(l: Link) -> bool:
    """A failure that says the rank was waiting for (or lost) a peer rather than failing itself."""
    if l.kind == LinkKind.COLLECTIVE_TIMEOUT:
        return True
    if l.kind == LinkKind.PYTHON_EXCEPTION:
        if l.attr("loader_wait_s") is not None:
            return False       # it timed out waiting for its own DataLoader workers, not for a peer
        text = " ".join(str(x) for x in (l.attr("gloo_error"), l.attr("exc_msg"), l.summary) if x)
        return bool(PEER_ERROR.search(text))
    return False


def own_failure(l: Link) -> bool:
    """A failure that started in this rank (not a peer's doing, not the launcher stopping it)."""
    if l.kind in (LinkKind.OOM_KILL, LinkKind.SEGFAULT, LinkKind.COLLECTIVE_MISMATCH, LinkKind.NCCL_INIT_FAILURE,
                  LinkKind.DISK_FULL, LinkKind.SHM_EXHAUSTED, LinkKind.DATALOADER_WORKER_KILLED):
        return True
    if l.kind == LinkKind.PYTHON_EXCEPTION:
        return not waits_for_peer(l)
    if l.kind == LinkKind.PROCESS_EXIT:
        # leaving with an error code is a failure of the rank's own unless it was waiting for a
        # peer (the callers leave waiting ranks out)
        code = l.attr("exitcode")
        return isinstance(code, int) and code != 0
    if l.kind == LinkKind.SIGNAL_KILL:
        if l.attr("outside_signal") is True:
            return True
        return (l.attr("signal") or "") not in STOP_SIGNALS and l.attr("sent_by_launcher") is not True
    return False


def launcher_stops(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """Which signals the launcher sent. A SIGKILL at the end of its grace period is the launcher's
    doing: a rank that died of SIGKILL after the root-cause failure, seconds after the launcher's
    SIGTERM, ignored the SIGTERM (marked ``sent_by_launcher`` with ``sigterm_ignored_s``). A
    SIGTERM (or SIGINT, SIGHUP) that killed the rank the launcher names as the first failure,
    with no line of the launcher sending it, came from outside (``outside_signal``)."""
    out = []
    for l in links:
        p = ranks.get(l.rank) if l.rank is not None else None
        if (p is not None and l.kind == LinkKind.SIGNAL_KILL and l.attr("signal") in STOP_SIGNALS
                and l.attr("root_cause") is True and (p.sigterm_ns is None or p.sigterm_ns > l.timing_ns()[1])):
            # the launcher names it the first failure and never said it sent that signal: it came
            # from outside (a preemption, a user, a scheduler), and it is the rank's own failure
            attrs = dict(l.attrs, outside_signal=True)
            out.append(dataclasses.replace(l, attrs=tuple(attrs.items())))
            continue
        if (p is not None and l.kind in (LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT) and p.sigterm_ns is not None
                and l.ts_ns is not None and l.attr("root_cause") is False):
            w = l.timing_ns()
            late = w[1] - p.sigterm_ns
            attrs = dict(l.attrs)
            if late >= IGNORED_SIGTERM_NS:
                attrs["sigterm_ignored_s"] = round(late / 1e9, 1)
            if l.attr("signal") == "SIGKILL":
                attrs["sent_by_launcher"] = True
            if attrs != dict(l.attrs):
                l = dataclasses.replace(l, attrs=tuple(attrs.items()))
        out.append(l)
    return out


def killed_launchers(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """A launcher killed by a signal, as the collector that waited for it saw (its manifest's job
    outcome): a launcher never signals itself, so the signal came from outside (a preemption, a
    scheduler, a person) and took that node's ranks with it. On a job of several nodes that is
    the cause of what the other nodes' ranks then saw; the launcher's job outcome stays the
    failure of its own node. The kill happened after that node's ranks were last seen alive and
    by the time the collector saw the launcher end."""
    out = []
    for l in links:
        sig = l.attr("signal")
        lp = l.attr("launcher_pid")
        if l.kind != LinkKind.JOB_FAILURE or not sig or lp is None or l.ts_ns is None or l.attr("root_cause_rank") is not None:
            continue
        mine = [p for p in ranks.values() if p.host == l.host or not p.host or not l.host]
        lo = max((p.last_alive_ns for p in mine if p.last_alive_ns is not None and p.last_alive_ns <= l.ts_ns),
                 default=l.ts_ns)
        one = mine[0] if len(mine) == 1 else None
        took = (f", and with it rank {one.rank}" + (f" (pid {one.pid})" if one.pid else "")) if one else (
            f", and with it ranks {', '.join(str(p.rank) for p in sorted(mine, key=lambda p: p.rank))}" if mine else "")
        where = f" on {l.host}" if l.host else ""
        out.append(Link(kind=LinkKind.SIGNAL_KILL, ts_ns=lo,
                        summary=f"the launcher{where} (pid {lp}) was killed by {sig} from outside{took}: its "
                                f"collector saw it end at {fmt_hms(l.ts_ns)}",
                        source=l.source, host=l.host, rank=one.rank if one else None, pid=lp, evidence=l.evidence,
                        provenance=Provenance.READ, confidence=0.9,
                        attrs=(("signal", sig), ("outside_signal", True), ("launcher_killed", True),
                               ("ts_lo_ns", lo), ("ts_hi_ns", l.ts_ns), ("ts_bound", "between"))))
    return links + out


def job_end(store, incident_id: str, ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """When a job reported ended by whoever waited for it (the collector's manifest) really ended:
    after every rank's last sign of life, and — when perf saw the launcher exit — right then."""
    out = []
    for l in links:
        lp = l.attr("launcher_pid")
        if l.kind != LinkKind.JOB_FAILURE or l.ts_ns is None or lp is None or l.attr("root_cause_rank") is not None:
            out.append(l)
            continue
        ex = store.query("""SELECT min(ts_utc_ns) AS t FROM events WHERE incident_id = ? AND tid = ?
                              AND name LIKE '%sched_process_exit' AND ts_utc_ns <= ?""", [incident_id, lp, l.ts_ns])
        # perf's exit event is the end of the kernel's exit path (tearing down memory takes tens
        # of milliseconds): the end began after the ranks were last seen alive
        hi = ex[0]["t"] if ex and ex[0]["t"] is not None else l.ts_ns
        lo = max((p.last_alive_ns for p in ranks.values() if p.last_alive_ns and p.last_alive_ns <= hi),
                 default=None)
        if lo is None or lo >= hi:
            out.append(l)
            continue
        attrs = dict(l.attrs)
        attrs.update(ts_lo_ns=lo, ts_hi_ns=hi, ts_bound="between", ts_after="the ranks' last signs of life")
        out.append(dataclasses.replace(l, ts_ns=hi, attrs=tuple(attrs.items())))
    return out


def observed_end(store, incident_id: str, ranks: dict[int, RankProgress], links: list[Link],
                 children: dict[int, set[int]]) -> list[Link]:
    """The end of a job that nobody reported: no launcher summary, no manifest, no error of any
    rank — the processes simply ended (a scheduler's SIGKILL, a node going away). Their deaths are
    still in the bundle: perf's ``sched_process_exit`` of each rank's main thread, and the snapshot
    at which ``cgroup.procs`` stops listing it. When every rank's process is seen ending, the job's
    end is a finding: between the ranks' last signs of life and the first death seen, with the
    launcher's pid when the cgroup that held the ranks names it (its other member)."""
    if len(ranks) < 1 or any(l.kind == LinkKind.JOB_FAILURE for l in links):
        return []
    if any(own_failure(l) or waits_for_peer(l) for p in ranks.values() for l in p.ended):
        return []
    pids = {p.pid: p for p in ranks.values() if p.pid is not None}
    if len(pids) < len(ranks):
        return []
    deaths: dict[int, tuple[int, str]] = {}
    for r in store.query("""SELECT tid, min(ts_utc_ns) AS t FROM events WHERE incident_id = ? AND tid IN (SELECT unnest(?))
                              AND name LIKE '%sched_process_exit' AND ts_utc_ns IS NOT NULL GROUP BY tid""",
                         [incident_id, list(pids)]):
        deaths[r["tid"]] = (r["t"], "perf saw it exit")
    for r in store.query("""SELECT pid, min(ts_utc_ns) AS t FROM members WHERE incident_id = ? AND change = 'left'
                              AND pid IN (SELECT unnest(?)) AND ts_utc_ns IS NOT NULL GROUP BY pid""",
                         [incident_id, list(pids)]):
        if r["pid"] not in deaths:
            deaths[r["pid"]] = (r["t"], "its cgroup no longer listed it")
    if set(deaths) != set(pids):
        return []
    first = min(t for t, _ in deaths.values())
    lo = max((p.last_alive_ns for p in ranks.values() if p.last_alive_ns and p.last_alive_ns <= first), default=None)
    if lo is None:
        return []
    rows = store.query("""SELECT DISTINCT m2.pid FROM members m1 JOIN members m2
                            ON m1.incident_id = m2.incident_id AND m1.cgroup = m2.cgroup
                          WHERE m1.incident_id = ? AND m1.pid IN (SELECT unnest(?)) AND m2.pid IS NOT NULL
                            AND m2.pid NOT IN (SELECT unnest(?))""", [incident_id, list(pids), list(pids)])
    from .attribution import descendants
    below = descendants(children, set(pids))
    others = [r["pid"] for r in rows if r["pid"] not in below]
    launcher = others[0] if len(others) == 1 else None
    how = "; ".join(f"rank {pids[pid].rank} (pid {pid}): {why} at {fmt_hms(t)}" for pid, (t, why) in sorted(deaths.items()))
    spread = max(t for t, _ in deaths.values()) - first
    together = f"within {spread / 1e6:.0f} ms of each other" if spread < 5 * 10**9 else "one after the other"
    summary = (f"The job's processes ended {together} with no error of their own and no report of a failure "
               f"({how}): the job was stopped from outside (a signal nobody logged, or the node)")
    if launcher is not None:
        summary += f"; the launcher was pid {launcher}"
    any_p = next(iter(ranks.values()))
    return [Link(kind=LinkKind.JOB_FAILURE, ts_ns=first, summary=summary, source="", host=any_p.host, pid=launcher,
                 evidence=tuple(e for p in ranks.values() for e in (p.last_line_ev or p.last_step_ev,) if e)[:2],
                 provenance=Provenance.INFERRED, confidence=0.8,
                 attrs=(("ts_lo_ns", lo), ("ts_hi_ns", first), ("ts_bound", "between"),
                        ("ts_after", "the ranks' last signs of life"), ("observed", True)))]


def _cadence_ns(p: RankProgress) -> int:
    return int(max(p.step_time_s or 0.25, 0.02) * 1e9)


def stalled_links(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    if len(ranks) < 2:
        return []
    # ranks that failed waiting for a peer; a peer error that began well after the first rank
    # failed waiting is the aftermath of that failure (the rank found its peer gone, perhaps
    # once it could run again), not a wait
    waited = {p.rank: [l for l in p.ended if waits_for_peer(l) and l.ts_ns is not None] for p in ranks.values()}
    ends = [min(l.timing_ns()[1] for l in ls) for ls in waited.values() if ls]
    horizon = min(ends) + LATE_WAIT_NS if ends else None
    waiting = {r for r, ls in waited.items() if ls and min(l.timing_ns()[0] for l in ls) <= horizon}
    alive = [p for p in ranks.values() if p.last_alive_ns is not None]
    if waiting:
        # a failure of its own before the peers gave up: that rank failed, it did not stop
        first_wait = min((l.timing_ns()[1] for q in waiting for l in waited[q]), default=None)
        failed = {p.rank for p in ranks.values()
                  if any(own_failure(l) and (first_wait is None or l.timing_ns()[0] <= first_wait)
                         for l in p.ended)}
        cands = [p for p in alive if p.rank not in waiting and p.rank not in failed]
        if not cands:
            return []
        cands.sort(key=lambda p: p.last_alive_ns)
        p = cands[0]
        conf = 0.85 if len(cands) == 1 else 0.5
        who = sorted(waiting)
        waits = [l for q in who for l in waited[q]]
        wait_l = min(waits, key=lambda l: l.timing_ns()[0])
        why = (f"rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))} failed waiting for a peer "
               f"({wait_l.summary.split(': ', 1)[-1][:120]}) while rank {p.rank} reported no failure of its own"
               + (" by then" if any(l.ts_ns is not None and l.ts_ns > horizon for l in p.ended) else ""))
        hung = [l for l in links if l.kind == LinkKind.HUNG_TASK and l.pid is not None and l.pid == p.pid]
        return [stall_link(p, why, conf, waits, hung, min(l.ts_ns for l in waits))]
    # No one waited: a rank that went quiet long before all of its peers.
    alive.sort(key=lambda p: p.last_alive_ns)
    failed = {p.rank for p in ranks.values() if any(own_failure(l) for l in p.ended)}
    if len(alive) >= 2:
        first, nxt = alive[0], alive[1]
        gap = nxt.last_alive_ns - first.last_alive_ns
        need = max(GAP_NS, int(10 * (first.step_time_s or 0) * 1e9))
        if gap > need and first.rank not in failed:
            why = (f"its last sign of life is {gap / 1e9:.1f} s before any other rank's "
                   f"(rank {nxt.rank} until {fmt_hms(nxt.last_alive_ns)})")
            return [stall_link(first, why, 0.6, [])]
    return []


def after_last_sign_of_life(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """A rank cannot have died before its last sign of life: a death the launcher reports only
    to the second (or between two of its lines) starts its window there when that falls inside."""
    out = []
    for l in links:
        p = ranks.get(l.rank) if l.rank is not None else None
        w = l.timing_ns()
        if (p is None or w is None or p.last_alive_ns is None
                or l.kind not in (LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT)
                or (l.attr("signal") or "") in STOP_SIGNALS
                or l.attr("ts_resolution_ns") is None and l.attr("ts_bound") != "between"
                or not (w[0] < p.last_alive_ns < w[1])):
            out.append(l)
            continue
        lo, hi = p.last_alive_ns, w[1] - (l.uncertainty_ns or 0)
        attrs = {k: v for k, v in l.attrs if k != "ts_resolution_ns"}
        attrs.update(ts_lo_ns=lo, ts_hi_ns=hi, ts_bound="between", ts_after="its last sign of life")
        out.append(dataclasses.replace(l, ts_ns=(lo + hi) // 2, attrs=tuple(attrs.items())))
    return out


def after_the_wait_began(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """A rank that gave up after waiting W for a peer entered that wait after its own last step and
    its last completed collective: its failure is no earlier than that time plus W. A timeout read
    from a line without a time of its own (placed between two lines) starts its window there when
    that falls inside (see the module's worked example)."""
    out = []
    for l in links:
        p = ranks.get(l.rank) if l.rank is not None else None
        w = l.timing_ns()
        ms = l.attr("wait_ms") or l.attr("timeout_ms")
        entered = None if p is None else max(
            (t for t in (p.last_step_ns, p.last_collective_ns) if t is not None), default=None)
        if (entered is None or w is None or l.attr("ts_bound") != "between" or not waits_for_peer(l)
                or not isinstance(ms, (int, float)) or not 0 < ms * 1e6 <= MAX_WAIT_NS
                or not w[0] < entered + int(ms * 1e6) < w[1]):
            out.append(l)
            continue
        lo, hi = entered + int(ms * 1e6), w[1] - (l.uncertainty_ns or 0)
        attrs = dict(l.attrs)
        attrs.update(ts_lo_ns=lo, ts_hi_ns=hi, ts_bound="between",
                     ts_after=f"its own last step or collective and the {ms / 1000:g} s it waited")
        out.append(dataclasses.replace(l, ts_ns=(lo + hi) // 2, attrs=tuple(attrs.items())))
    return out


def _stall_window(p: RankProgress, waits: list[Link], hung: list[Link]) -> tuple[int, int, list[str]]:
    """It stopped after its last sign of progress (or of life, when it left none) and before the
    first bound the bundle gives: a peer's stated wait, a stuck status, the hung-task watchdog;
    without one, a few steps after it was last seen alive. A line it printed after such a bound
    was not progress (see the module's worked example): its last step, collective or trace
    event is then where it stopped."""
    lo = p.last_progress_ns or p.last_alive_ns
    if p.last_progress_ns is None and lo is not None and lo == p.last_cpu_ns:
        # the last CPU sample is only placed on the wall clock within its clock's uncertainty:
        # it ran until at least the earliest time that sample can have, not its middle
        lo = max(lo - p.last_cpu_unc_ns, p.running_ns or 0)
    cad = _cadence_ns(p)
    bounds: list[tuple[int, str]] = []
    for l in waits:
        ms = l.attr("wait_ms") or l.attr("timeout_ms")
        if isinstance(ms, (int, float)) and 0 < ms * 1e6 <= MAX_WAIT_NS and l.timing_ns() is not None:
            entered = l.timing_ns()[1] - int(ms * 1e6)
            what = "began waiting for its peers' keys in the store" if l.attr("store_keys") else "entered the collective"
            bounds.append((entered + 2 * cad, f"rank {l.rank} {what} by {fmt_hms(entered)} and "
                                              f"waited {ms / 1000:g} s"))
    if p.stuck_ns is not None:
        bounds.append((p.stuck_ns, f"its status showed it {p.stuck_state} at {fmt_hms(p.stuck_ns)}"))
    for h in hung:
        s = h.attr("blocked_s")
        if isinstance(s, (int, float)) and h.timing_ns() is not None:   # (an unplaced report bounds nothing)
            bounds.append((h.timing_ns()[1] - int(s * 1e9),
                           f"the kernel reported it blocked for more than {s:g} s at {fmt_hms(h.ts_ns)}"))
    valid = [(b, why) for b, why in bounds if b >= lo]
    hard = max((t for t in (p.last_step_ns, p.last_collective_ns, p.last_trace_ns) if t is not None), default=None)
    if bounds and lo == p.last_line_ns and hard is not None and hard < lo:
        # A bound before its last line that its last step, collective or trace event respects:
        # by then it would have arrived where its peers waited, had it been getting anywhere, so
        # what it printed afterwards (a watchdog of its own, a "still waiting") was not progress.
        early = [(b, why) for b, why in bounds if hard <= b < lo]
        if early:
            hi, why = min(early)
            return hard, hi, [why, f"its last line, at {fmt_hms(lo)}, came after that: not progress"]
    if valid:
        hi, why = min(valid)
        return lo, hi, [why]
    return lo, max(lo, p.last_alive_ns or lo) + max(4 * cad, 2_000_000_000), []


def stall_link(p: RankProgress, why: str, conf: float, waits: list[Link], hung: list[Link] = (),
                peers_failed_ns: int | None = None) -> Link:
    bits = []
    if p.last_step is not None:
        bits.append(f"last step {p.last_step} at {fmt_hms(p.last_step_ns)}")
    if p.last_line_ns is not None:
        bits.append(f"last line at {fmt_hms(p.last_line_ns)}")
    if p.last_trace_ns is not None:
        bits.append(f"its Kineto trace ends at {fmt_hms(p.last_trace_ns)}")
    if p.last_collective_ns is not None:
        bits.append(f"last collective {p.last_collective} at {fmt_hms(p.last_collective_ns)}")
    prog = p.last_progress_ns
    if p.last_cpu_ns is not None:
        after = prog is not None and p.last_cpu_ns - prog > 4 * _cadence_ns(p)
        bits.append(f"last CPU sample at {fmt_hms(p.last_cpu_ns)}"
                    + (" (it still ran after its last progress)" if after else ""))
    # an exit nobody asked for (no launcher signal before it) and no error of its own: it left
    left = (p.exit_ns is not None and (p.sigterm_ns is None or p.exit_ns < p.sigterm_ns)
            and not any(own_failure(l) for l in p.ended))
    if left:
        before = peers_failed_ns is not None and p.exit_ns < peers_failed_ns
        bits.append(f"its process exited at {fmt_hms(p.exit_ns)}{', before any peer failed,' if before else ''} "
                    f"with no error reported (perf saw the exit)")
    if p.stuck_state:
        bits.append(f"seen {p.stuck_state} at {fmt_hms(p.stuck_ns)}")
    ignored = [l.attr("sigterm_ignored_s") for l in p.ended if l.attr("sigterm_ignored_s")]
    if ignored:
        bits.append(f"it outlived the launcher's SIGTERM by {ignored[0]:g} s")
    lo, hi, bound = _stall_window(p, waits, list(hung))
    pid = f" (pid {p.pid})" if p.pid else ""
    summary = f"rank {p.rank}{pid} stopped making progress: {', '.join(bits)}; {why}"
    if bound:
        summary += f"; it stopped before {fmt_hms(hi)} ({bound[0]})" + "".join(f"; {b}" for b in bound[1:])
    ev = tuple(e for e in (p.last_step_ev, p.last_line_ev, p.stuck_ev) if e is not None)
    ev = tuple(dict.fromkeys(ev))
    prov = Provenance.READ if p.stuck_state else Provenance.INFERRED
    return Link(kind=LinkKind.RANK_STALLED, ts_ns=lo, summary=summary,
                source=ev[-1].source if ev else "", host=p.host, rank=p.rank, pid=p.pid, evidence=ev,
                provenance=prov, confidence=conf,
                attrs=(("ts_lo_ns", lo), ("ts_hi_ns", hi), ("ts_bound", "between"),
                       ("state", p.stuck_state), ("sigterm_ignored_s", ignored[0] if ignored else None),
                       ("exited_ns", p.exit_ns if left else None)))


def progress_json(ranks: dict[int, RankProgress]) -> list[dict]:
    return [ranks[r].to_json() for r in sorted(ranks)]
