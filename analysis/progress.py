"""Per-rank progress, and which rank stopped first (``rank_stalled``).

For every rank of the job the aligned store tells, when the data has it:

* the last training step it reported (a ``step=N`` log line, or a Kineto ``ProfilerStep#N``),
* the last line it printed itself (launcher lines about it do not count),
* the last collective it entered (Kineto collectives table),
* its last CPU sample in ``perf`` (by pid),

and how it ended (the terminal findings about it). The latest of those times is the rank's
*last sign of life*.

``rank_stalled`` (inferred): a job whose ranks failed *waiting for a peer* — a collective
timeout, or an error naming the peer (``Connection closed by peer``, ``Connection reset by
peer``) — while another rank has no failure of its own (no exception, no crash signal, no
OOM kill): that rank stopped and the others waited for it. Launchers name the first rank to
*report* a failure as the root cause (torchrun's "Root Cause (first observed failure)"),
which in a hang is the waiting peer, not the rank that stopped. The stalled rank's finding is
stamped at its last sign of life and cites the line it last printed. With several candidates
the earliest last sign of life wins, with lower confidence.

Without any waiting rank, a rank whose last sign of life is more than ``GAP_NS`` (and ten
of its own median step times) before every peer's is reported as stalled too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ingest.timeparse import fmt_hms

from .links import Evidence, Link, LinkKind, Provenance

GAP_NS = 30_000_000_000
PEER_ERROR = re.compile(r"closed by peer|reset by peer|Connection refused|remote worker|peer .*(?:died|closed)|"
                        r"Broken pipe|timed out|Timeout", re.I)
LAUNCHER_CATEGORIES = ("launcher",)
# A signal a launcher sends to the survivors once a rank failed: not a failure of its own.
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")

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
    step_time_s: float | None = None       # median of its reported step times
    ended: list[Link] = field(default_factory=list)

    @property
    def last_alive_ns(self) -> int | None:
        ts = [t for t in (self.last_step_ns, self.last_line_ns, self.last_collective_ns, self.last_cpu_ns)
              if t is not None]
        return max(ts) if ts else None

    def to_json(self) -> dict:
        from ingest.timeparse import fmt_utc
        ev = self.last_line_ev or self.last_step_ev
        return {"rank": self.rank, "host": self.host, "pid": self.pid,
                "last_step": self.last_step, "last_step_time": fmt_utc(self.last_step_ns),
                "last_line_time": fmt_utc(self.last_line_ns),
                "last_line": None if ev is None else ev.to_json(),
                "last_collective": self.last_collective,
                "last_collective_time": fmt_utc(self.last_collective_ns),
                "last_cpu_time": fmt_utc(self.last_cpu_ns),
                "last_alive_time": fmt_utc(self.last_alive_ns),
                "median_step_s": self.step_time_s,
                "ended": [{"kind": l.kind.value, "summary": l.summary, "time": fmt_utc(l.ts_ns)}
                          for l in self.ended]}


def rank_progress(store, incident_id: str, links: list[Link]) -> dict[int, RankProgress]:
    q = store.query
    ranks: dict[int, RankProgress] = {}

    def get(r) -> RankProgress:
        return ranks.setdefault(int(r), RankProgress(int(r)))

    for r in q("""SELECT COALESCE(e.rank, s.rank) AS rank, COALESCE(e.host, s.host) AS host,
                         mode(e.pid) AS pid
                  FROM events e JOIN sources s USING (incident_id, source_id)
                  WHERE e.incident_id = ? AND COALESCE(e.rank, s.rank) IS NOT NULL
                  GROUP BY ALL ORDER BY count(*) DESC""", [incident_id]):
        p = get(r["rank"])
        p.host = p.host or r["host"]
        p.pid = p.pid or r["pid"]
    for r in q("SELECT rank, host, pid FROM sources WHERE incident_id = ? AND rank IS NOT NULL", [incident_id]):
        p = get(r["rank"])
        p.host = p.host or r["host"]
        p.pid = p.pid or r["pid"]
    # Steps reported in the logs (the parser's ``step`` events) ...
    for r in q("""SELECT rank, step, ts, line, text, path, med FROM (
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
    for r in q("""SELECT TRY_CAST(regexp_extract(entity, '^rank (\\d+)$', 1) AS INTEGER) AS rank,
                         median(value) AS med
                  FROM metrics WHERE incident_id = ? AND metric = 'step_time' AND entity LIKE 'rank %'
                  GROUP BY 1""", [incident_id]):
        if r["rank"] is not None and r["rank"] in ranks:
            ranks[r["rank"]].step_time_s = r["med"]
    # ... and Kineto's ProfilerStep#N markers.
    for r in q(f"""SELECT st.rank, max(st.step) AS step, max(st.ts_raw_ns + COALESCE(st.dur_ns, 0) + c.offset_ns) AS ts
                   FROM steps st JOIN sources s USING (incident_id, source_id) {_UTC}
                   WHERE st.incident_id = ? AND st.rank IS NOT NULL AND st.name LIKE 'ProfilerStep#%'
                     AND c.offset_ns IS NOT NULL
                   GROUP BY st.rank""", [incident_id]):
        p = get(r["rank"])
        if p.last_step_ns is None or (r["ts"] or 0) > p.last_step_ns:
            p.last_step, p.last_step_ns = r["step"], r["ts"]
    # The last line each rank printed itself (launcher lines about a rank do not count).
    for r in q("""SELECT rank, ts, line, text, path FROM (
                    SELECT COALESCE(e.rank, s.rank) AS rank, e.ts_utc_ns AS ts, e.line, e.text, s.path,
                           row_number() OVER (PARTITION BY COALESCE(e.rank, s.rank)
                                              ORDER BY e.ts_utc_ns DESC, COALESCE(e.ts_interpolated, false),
                                                       e.line DESC) AS n
                    FROM events e JOIN sources s USING (incident_id, source_id)
                    WHERE e.incident_id = ? AND s.kind IN ('app_log', 'nccl_log') AND e.ts_utc_ns IS NOT NULL
                      AND NOT COALESCE(e.ts_interpolated, false)
                      AND COALESCE(e.category, '') NOT IN (SELECT unnest(?))
                      AND COALESCE(e.rank, s.rank) IS NOT NULL)
                  WHERE n = 1""", [incident_id, list(LAUNCHER_CATEGORIES)]):
        p = get(r["rank"])
        p.last_line_ns = r["ts"]
        p.last_line_ev = Evidence(r["path"], r["line"], r["text"] or "")
    for r in q(f"""SELECT rank, op, ts FROM (
                     SELECT co.rank, co.op, co.ts_raw_ns + COALESCE(co.dur_ns, 0) + c.offset_ns AS ts,
                            row_number() OVER (PARTITION BY co.rank ORDER BY co.ts_raw_ns DESC) AS n
                     FROM collectives co JOIN sources s USING (incident_id, source_id) {_UTC}
                     WHERE co.incident_id = ? AND co.rank IS NOT NULL AND c.offset_ns IS NOT NULL)
                   WHERE n = 1""", [incident_id]):
        p = get(r["rank"])
        p.last_collective, p.last_collective_ns = r["op"], r["ts"]
    pids = {p.pid: p for p in ranks.values() if p.pid is not None}
    if pids:
        for r in q("""SELECT pid, max(ts_utc_ns) AS ts FROM samples
                      WHERE incident_id = ? AND pid IN (SELECT unnest(?)) GROUP BY pid""",
                   [incident_id, list(pids)]):
            pids[r["pid"]].last_cpu_ns = r["ts"]
    for l in links:
        for p in ranks.values():
            if (l.rank == p.rank or (l.pid is not None and l.pid == p.pid)) and l.kind in TERMINAL_KINDS:
                p.ended.append(l)
    return ranks


TERMINAL_KINDS = (LinkKind.OOM_KILL, LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT, LinkKind.SEGFAULT,
                  LinkKind.PYTHON_EXCEPTION, LinkKind.COLLECTIVE_TIMEOUT, LinkKind.COLLECTIVE_MISMATCH,
                  LinkKind.NCCL_INIT_FAILURE)


def waits_for_peer(l: Link) -> bool:
    """A failure that says the rank was waiting for (or lost) a peer rather than failing itself."""
    if l.kind == LinkKind.COLLECTIVE_TIMEOUT:
        return True
    if l.kind == LinkKind.PYTHON_EXCEPTION:
        text = " ".join(str(x) for x in (l.attr("gloo_error"), l.attr("exc_msg"), l.summary) if x)
        return bool(PEER_ERROR.search(text))
    return False


def own_failure(l: Link) -> bool:
    """A failure that started in this rank (not a peer's doing, not the launcher stopping it)."""
    if l.kind in (LinkKind.OOM_KILL, LinkKind.SEGFAULT, LinkKind.COLLECTIVE_MISMATCH, LinkKind.NCCL_INIT_FAILURE):
        return True
    if l.kind == LinkKind.PYTHON_EXCEPTION:
        return not waits_for_peer(l)
    if l.kind == LinkKind.SIGNAL_KILL:
        return (l.attr("signal") or "") not in STOP_SIGNALS
    return False


def stalled_links(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    if len(ranks) < 2:
        return []
    waiting = {p.rank for p in ranks.values() if any(waits_for_peer(l) for l in p.ended)}
    failed = {p.rank for p in ranks.values() if any(own_failure(l) for l in p.ended)}
    alive = [p for p in ranks.values() if p.last_alive_ns is not None]
    if waiting:
        cands = [p for p in alive if p.rank not in waiting and p.rank not in failed]
        if not cands:
            return []
        cands.sort(key=lambda p: p.last_alive_ns)
        p = cands[0]
        conf = 0.85 if len(cands) == 1 else 0.5
        who = sorted(waiting)
        wait_l = next(l for q in who for l in ranks[q].ended if waits_for_peer(l))
        why = (f"rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))} failed waiting for a peer "
               f"({wait_l.summary.split(': ', 1)[-1][:120]}) while rank {p.rank} reported no failure of its own")
        return [_stall_link(p, why, conf)]
    # No one waited: a rank that went quiet long before all of its peers.
    alive.sort(key=lambda p: p.last_alive_ns)
    if len(alive) >= 2:
        first, nxt = alive[0], alive[1]
        gap = nxt.last_alive_ns - first.last_alive_ns
        need = max(GAP_NS, int(10 * (first.step_time_s or 0) * 1e9))
        if gap > need and first.rank not in failed:
            why = (f"its last sign of life is {gap / 1e9:.1f} s before any other rank's "
                   f"(rank {nxt.rank} until {fmt_hms(nxt.last_alive_ns)})")
            return [_stall_link(first, why, 0.6)]
    return []


def after_last_sign_of_life(ranks: dict[int, RankProgress], links: list[Link]) -> list[Link]:
    """A rank cannot have died before its last sign of life: a death the launcher reports only
    to the second (or between two of its lines) starts its window there when that falls inside."""
    import dataclasses
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


def _stall_link(p: RankProgress, why: str, conf: float) -> Link:
    bits = []
    if p.last_step is not None:
        bits.append(f"last step {p.last_step} at {fmt_hms(p.last_step_ns)}")
    if p.last_line_ns is not None:
        bits.append(f"last line at {fmt_hms(p.last_line_ns)}")
    if p.last_collective_ns is not None:
        bits.append(f"last collective {p.last_collective} at {fmt_hms(p.last_collective_ns)}")
    if p.last_cpu_ns is not None:
        bits.append(f"last CPU sample at {fmt_hms(p.last_cpu_ns)}")
    pid = f" (pid {p.pid})" if p.pid else ""
    summary = f"rank {p.rank}{pid} stopped making progress: {', '.join(bits)}; {why}"
    ev = tuple(e for e in (p.last_step_ev, p.last_line_ev) if e is not None)
    if len(ev) == 2 and ev[0] == ev[1]:
        ev = ev[:1]
    return Link(kind=LinkKind.RANK_STALLED, ts_ns=p.last_alive_ns, summary=summary,
                source=ev[-1].source if ev else "", host=p.host, rank=p.rank, pid=p.pid, evidence=ev,
                provenance=Provenance.INFERRED, confidence=conf)


def progress_json(ranks: dict[int, RankProgress]) -> list[dict]:
    return [ranks[r].to_json() for r in sorted(ranks)]
