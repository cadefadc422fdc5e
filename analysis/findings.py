"""Findings read directly from typed events (first cut: the kernel's OOM kills).

The same kill is often in the bundle twice (raw ``dmesg`` and ``dmesg -T``, or
dmesg and journald): kills of one pid on one host within ``DEDUP_WINDOW_NS``
are one finding, timed by the copy with the best-placed clock, with every copy
kept as evidence.
"""
from __future__ import annotations

import dataclasses
import json
from bisect import bisect_left

from .clock_match import LAUNCHER_NAMES
from .clocks import row_uncertainty_sql
from .links import Evidence, Link, LinkKind, Provenance
from .present import has_rows
from .sql import events_named
from aftertrace.ingest.sink import attrs_of

# the finding kinds it makes (the catalogue: analysis/kinds.py)
EMITS = frozenset({LinkKind.OOM_KILL, LinkKind.DATALOADER_STALL, LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT})
_UNC = row_uncertainty_sql()   # a row's own stretch where its clock stepped

DEDUP_WINDOW_NS = 5_000_000_000
PIPE_SLACK_NS = 250_000_000
SAME_END_NS = 60_000_000_000      # job-failure reports this close to the last one are the same end


def _kib(n: int | None) -> str:
    if n is None:
        return "?"
    b = n * 1024
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{b} B"
        b /= 1024
    return str(n)


def oom_kills(store, incident_id: str) -> list[Link]:
    rows = store.query(
        f"""SELECT e.ts_utc_ns, e.ts_raw_ns, COALESCE(e.host, s.host) AS host, e.pid, e.line, e.text,
                  e.attrs, s.path, s.clock_domain, {_UNC} AS uncertainty_ns,
                  (SELECT b.path FROM row_times t JOIN sources b ON b.incident_id = t.incident_id
                     AND b.source_id = t.by_source_id
                   WHERE t.incident_id = e.incident_id AND t.source_id = e.source_id AND t.line = e.line
                     AND t.by_line IS NULL) AS counted_by
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                AND c.domain = s.clock_domain
           WHERE e.incident_id = ? AND e.kind = 'oom_kill'
           ORDER BY e.ts_utc_ns NULLS LAST, s.path, e.line""", [incident_id])
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    links = []
    for g in _kill_groups(rows):
        placed = [r for r in g if r["ts_utc_ns"] is not None]
        best = min(placed, key=lambda r: (r["uncertainty_ns"] is None, r["uncertainty_ns"] or 0)) if placed else g[0]
        a = best["attrs"]
        scope = "memory-cgroup OOM killer" if a.get("scope") == "memcg" else "kernel OOM killer"
        if a.get("victim_pid") is None and a.get("summary"):
            summary = a["summary"]      # a report cut before its kill line: the victim is unknown
        else:
            summary = (f"The {scope} killed pid {a.get('victim_pid')} ({a.get('victim_comm')}), "
                       f"anon-rss {_kib(a.get('anon_rss_kb'))}")
        if best["host"]:
            summary += f" on {best['host']}"
        keep = {k: a.get(k) for k in ("victim_comm", "constraint", "oom_memcg", "task_memcg", "memcg", "scope",
                                      "anon_rss_kb") if a.get(k) is not None}
        tasks = tuple((t.get("pid"), t.get("rss"), t.get("name")) for t in a.get("tasks") or ()
                      if isinstance(t, dict) and isinstance(t.get("pid"), int))
        if tasks:
            keep["tasks"] = tasks       # (pid, rss pages, name) of every task the report listed
        links.append(Link(
            kind=LinkKind.OOM_KILL, ts_ns=best["ts_utc_ns"], summary=summary, source=best["path"],
            host=best["host"], pid=a.get("victim_pid"),
            evidence=tuple(Evidence(r["path"], r["line"], r["text"]) for r in g) + (
                (Evidence(best["counted_by"], None, "its time: the cgroup's oom_kill count rose between two "
                                                    "of these snapshots"),) if best["counted_by"] else ()),
            provenance=Provenance.READ, confidence=1.0, uncertainty_ns=best["uncertainty_ns"],
            attrs=tuple(keep.items())))
    return links


def _kill_groups(rows: list[dict]) -> list[list[dict]]:
    """The copies of each kill: a row joins the first group (in the order groups were started)
    of its host and pid whose first row is within ``DEDUP_WINDOW_NS`` of it, or untimed, or
    any when the row itself is untimed; else it starts a group. Rows that name no victim group
    by host and file instead.

    Groups are looked up per (host, pid); the query's rows come in time order, so a bucket's
    timed groups start in time order and the first one in the window is found by bisection
    (rows out of order fall back to a scan of the bucket)."""
    groups: list[list[dict]] = []
    # (host, pid) -> [groups in start order, first times of its timed groups, their positions,
    #                 position of its first untimed group, timed starts still in order]
    buckets: dict[tuple, list] = {}
    for r in rows:
        t = r["ts_utc_ns"]
        # a kill whose victim is not named (a report cut before its kill line, a runner's count)
        # is the same kill as another such only within one file: nothing else ties them
        named = r["pid"] is not None or (r.get("attrs") or {}).get("victim_pid") is not None
        key = (r["host"], r["pid"]) if named else (r["host"], None, r.get("path"))
        b = buckets.get(key)
        if b is None:
            b = buckets[key] = [[], [], [], None, True]
        gl, starts, at, untimed, ordered = b
        pos = None
        if gl and t is None:
            pos = 0
        elif gl and not ordered:
            pos = next((i for i, g in enumerate(gl) if g[0]["ts_utc_ns"] is None
                        or abs(g[0]["ts_utc_ns"] - t) <= DEDUP_WINDOW_NS), None)
        elif gl:
            j = bisect_left(starts, t - DEDUP_WINDOW_NS)
            if j < len(starts) and starts[j] <= t + DEDUP_WINDOW_NS:
                pos = at[j]
            if untimed is not None and (pos is None or untimed < pos):
                pos = untimed
        if pos is not None:
            gl[pos].append(r)
            continue
        g = [r]
        groups.append(g)
        if t is None:
            if b[3] is None:
                b[3] = len(gl)
        else:
            if starts and t < starts[-1]:
                b[4] = False
            starts.append(t)
            at.append(len(gl))
        gl.append(g)
    return groups


def typed_events(store, incident_id: str, skip: tuple[str, ...] = ("oom_kill",)) -> list[Link]:
    """Every event a parser typed (``events.kind`` set) becomes a finding read from the data.

    The summary is the event's ``attrs.summary`` when the parser wrote one, else its name and
    text. Kinds outside :class:`LinkKind` are kept out (and would be a parser bug).
    """
    # A source's rank (a file of one rank's output) is not given to the unprefixed lines of a
    # launcher log whose rank output is prefixed (torchrun --tee ``[default0]:``): those are the
    # agent's own, even in a node's log that holds one rank.
    cols = store.columns(
        f"""WITH teed AS (SELECT DISTINCT source_id FROM events
                         WHERE incident_id = ? AND starts_with(text, '[default'))
           SELECT e.ts_utc_ns, COALESCE(e.host, s.host) AS host,
                  CASE WHEN e.rank IS NOT NULL THEN e.rank
                       WHEN e.source_id IN (SELECT source_id FROM teed) AND NOT starts_with(e.text, '[default')
                       THEN NULL ELSE s.rank END AS rank,
                  e.pid, e.line, e.text, e.name, e.kind, e.attrs, s.path, s.kind AS source_kind, {_UNC} AS uncertainty_ns
           FROM events e JOIN sources s USING (incident_id, source_id)
           LEFT JOIN clock_map c ON c.incident_id = e.incident_id AND c.host = COALESCE(s.host, '')
                AND c.domain = s.clock_domain
           WHERE e.incident_id = ? AND e.kind IS NOT NULL AND e.kind NOT IN (SELECT unnest(?))
           ORDER BY e.ts_utc_ns NULLS LAST, s.path, e.line""", [incident_id, incident_id, list(skip)])
    kinds = {k.value: k for k in LinkKind}
    out = []
    # (columns, not a dict per row: a log that repeats its crash has tens of thousands of these)
    for ts, host, rank, pid, line, text, name, kind, raw, path, source_kind, unc in zip(
            cols["ts_utc_ns"], cols["host"], cols["rank"], cols["pid"], cols["line"], cols["text"], cols["name"],
            cols["kind"], cols["attrs"], cols["path"], cols["source_kind"], cols["uncertainty_ns"]):
        kind = kinds.get(kind)
        if kind is None:
            continue
        attrs = attrs_of(raw)
        if source_kind in ("app_log", "nccl_log") and isinstance(attrs.get("ts_lo_ns"), int) \
                and isinstance(attrs.get("ts_hi_ns"), int):
            # an untimed line is placed between its timed neighbours in the file; in a launcher's
            # combined log those may come from another rank's pipe, delivered a little earlier or
            # later than this rank's output
            attrs["ts_lo_ns"] -= PIPE_SLACK_NS
            attrs["ts_hi_ns"] += PIPE_SLACK_NS
        summary = attrs.get("summary") or f"{name}: {(text or '')[:200]}"
        out.append(Link(kind=kind, ts_ns=ts, summary=summary, source=path, host=host, rank=rank, pid=pid,
                        evidence=(Evidence(path, line, text or ""),), provenance=Provenance.READ, confidence=1.0,
                        uncertainty_ns=unc, attrs=_scalar_attrs(attrs)))
    return local_ranks(out)


def local_ranks(links: list[Link]) -> list[Link]:
    """Give a rank to findings that only know their launcher stream's local rank (torchrun's
    ``[default1]:`` before the process printed its global rank): the launcher's failure table in
    the same file says which rank each local rank was (``rank: 1 (local_rank: 1)``, with its pid).
    A worker's own error file (``error.json``) is the one that table names as that failure's
    ``error_file``: it takes that rank and pid."""
    said: dict[tuple[str, int], tuple[int, int | None]] = {}
    owner: dict[tuple[str, ...], tuple[int, int | None]] = {}
    for l in links:
        lr = l.attr("local_rank")
        if l.rank is not None and isinstance(lr, int):
            said.setdefault((l.source, lr), (l.rank, l.pid))
        ef = l.attr("error_file")
        if l.rank is not None and isinstance(ef, str):
            owner.setdefault(_run_tail(ef), (l.rank, l.pid))
    if not said and not owner:
        return links
    out = []
    for l in links:
        lr = l.attr("local_rank")
        hit = said.get((l.source, lr)) if l.rank is None and isinstance(lr, int) else None
        if l.attr("source_form") == "error_file" and (l.rank is None or l.pid is None):
            by_file = owner.get(_run_tail(l.source))
            if by_file is not None and l.rank in (None, by_file[0]):
                hit = by_file
        out.append(l if hit is None else dataclasses.replace(l, rank=hit[0], pid=l.pid if l.pid is not None else hit[1]))
    return out


def _run_tail(path: str) -> tuple[str, ...]:
    """What names one worker's file of one run whichever machine's path it is given as: torchrun's
    ``<run id>/attempt_<n>/<local rank>/<file>`` (the run id is random per job)."""
    return tuple(path.rsplit("/", 4)[-4:])


def _scalar_attrs(attrs: dict) -> tuple[tuple[str, object], ...]:
    """The parser's attrs that a chain rule may read: scalars only, long texts left out."""
    return tuple((k, v) for k, v in attrs.items() if k != "summary" and _is_scalar(v))


# (values read from JSON are of exactly these types, or list or dict: a type lookup first, which
# is several times cheaper than isinstance over a few hundred thousand values)
_SCALAR = {bool, int, float, type(None)}
_JSON_TYPES = {bool, int, float, type(None), str, list, dict}


def _is_scalar(v) -> bool:
    t = type(v)
    if t in _SCALAR:
        return True
    if t is str:
        return len(v) <= 2000
    if t in _JSON_TYPES:
        return False
    return isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 2000)


def merge_duplicates(links: list[Link]) -> list[Link]:
    """One finding per fact: the same exception or exit is often in the bundle twice (a worker's
    ``stderr.log`` and the launcher's combined ``--tee`` capture), and one copy may carry a far
    better time than the other (a timestamped neighbour line vs. "somewhere after line N").

    Copies are the same kind, host, rank and summary with overlapping time windows
    (:meth:`Link.timing_ns`); a summary that opens with its rank (``rank 1: RuntimeError: ...``,
    as a line that said ``[rank1]:`` gives it) is the same as one that does not (a worker's own
    error file, whose rank comes from its folder). The merged finding keeps every copy's evidence, the pid where a
    copy knew it, and the time of the copy with the narrowest window; when the windows overlap
    only in part, the time becomes the middle of their intersection.
    """
    out: list[Link] = []
    merged_ev: dict[int, _Evidence] = {}      # index in out -> the evidence of its copies so far
    # Copies share (kind, host, rank, summary): each such group is searched on its own, its kept
    # findings by the order they were first kept (the order of ``out``).
    groups: dict[tuple, _Kept] = {}
    sizes: dict[tuple, int] = {}
    for l in links:
        k = _copy_key(l)
        sizes[k] = sizes.get(k, 0) + 1
    for l in links:
        if l.kind == LinkKind.OOM_KILL:     # (each kill report is its own finding: oom_kills merged them)
            out.append(l)
            continue
        k = _copy_key(l)
        g = groups.get(k)
        if g is None:
            g = groups[k] = _Kept(sizes[k])
        w = l.timing_ns()
        slot = g.first(w, l.pid or None)
        if slot is None:
            g.add(len(out), w, l.pid or None)
            out.append(l)
        else:
            ev = merged_ev.get(slot)
            if ev is not None and _adds_nothing(out[slot], l, w):
                ev.merge(l.evidence, False)
                continue
            m, b_best = _merge_head(out[slot], l)
            if ev is None:
                ev = merged_ev[slot] = _Evidence(out[slot].evidence)
            ev.merge(l.evidence, b_best)
            out[slot] = m
            g.update(slot, m.timing_ns(), m.pid or None)
    for slot, ev in merged_ev.items():
        out[slot] = dataclasses.replace(out[slot], evidence=ev.result())
    return out


def _copy_key(l: Link) -> tuple:
    """What copies of one finding share (see :func:`merge_duplicates`)."""
    said = l.summary if l.rank is None else l.summary.removeprefix(f"rank {l.rank}: ")
    return l.kind, l.host, l.rank, said


class _Evidence:
    """The evidence of a finding that copies keep merging into, for :func:`merge_duplicates`:
    what :func:`_merge_pair` gives, built in time linear in the evidence. Each (source, line)
    is kept once, with a sort key: a merge whose new copy is the better one puts that copy's
    evidence first (keys below every key so far; a line it shares moves there), else the new
    lines go last. Rebuilding the tuple at every merge cost the group's evidence each time: a
    log with thousands of copies of one report took seconds."""

    __slots__ = ("at", "front", "back")

    def __init__(self, evidence: tuple[Evidence, ...]) -> None:
        self.at: dict[tuple, tuple[int, Evidence]] = {}
        self.front, self.back = 0, 0
        self._append(evidence)

    def _append(self, evidence) -> None:
        for e in evidence:
            if (e.source, e.line) not in self.at:
                self.at[(e.source, e.line)] = (self.back, e)
                self.back += 1

    def merge(self, evidence: tuple[Evidence, ...], first: bool) -> None:
        if not first:
            self._append(evidence)
            return
        self.front -= len(evidence)
        placed = set()
        for i, e in enumerate(evidence):
            k = (e.source, e.line)
            if k not in placed:
                placed.add(k)
                self.at[k] = (self.front + i, e)

    def result(self) -> tuple[Evidence, ...]:
        return tuple(e for _, e in sorted(self.at.values(), key=lambda p: p[0]))


class _Kept:
    """The kept findings of one (kind, host, rank, summary) group, for :func:`merge_duplicates`:
    the first kept (in ``out`` order) whose pid agrees with a pid (either unknown, or equal)
    and whose time window overlaps a window (an untimed finding: that is untimed too).

    Timed ones sit in a segment tree over the order they were kept, each node holding the
    earliest start and the latest end of the windows below it, so the search enters only
    subtrees that can hold an overlap: O(log n) for the windows of real findings (short, and
    in time order), however many copies the group has. A merge changes a kept finding's window
    and may give it a pid (never another one): updated in place. Untimed findings stay untimed
    when merged; for them the first without a pid and the first with each pid are enough.
    """

    __slots__ = ("size", "lo", "hi", "slots", "pids", "leaf_of", "untimed", "pos_of", "first_none",
                 "first_with")

    def __init__(self, capacity: int) -> None:
        size = 1
        while size < capacity:
            size *= 2
        self.size = size
        self.lo = [_INF] * (2 * size)      # per node: the earliest window start below it
        self.hi = [-_INF] * (2 * size)     # per node: the latest window end below it
        self.slots: list[int] = []         # leaf -> index in ``out``
        self.pids: list[int | None] = []   # leaf -> pid of the kept finding
        self.leaf_of: dict[int, int] = {}
        self.untimed: list[list] = []      # [index in out, pid] in the order kept
        self.pos_of: dict[int, int] = {}   # index in out -> position in ``untimed``
        self.first_none = 0                # no untimed one before this position is without a pid
        self.first_with: dict[int, int] = {}   # pid -> position of the first untimed one with it

    def first(self, w: tuple[int, int] | None, pid: int | None) -> int | None:
        if w is None:
            return self._first_untimed(pid)
        a, b = w
        lo, hi, size, pids = self.lo, self.hi, self.size, self.pids
        stack = [1]
        while stack:
            node = stack.pop()
            if lo[node] > b or hi[node] < a:
                continue
            if node >= size:
                p = pids[node - size]
                if pid is None or p is None or p == pid:
                    return self.slots[node - size]
                continue
            stack.append(2 * node + 1)      # (popped after the left one: the earliest kept wins)
            stack.append(2 * node)
        return None

    def _first_untimed(self, pid: int | None) -> int | None:
        u = self.untimed
        if not u:
            return None
        if pid is None:
            return u[0][0]
        while self.first_none < len(u) and u[self.first_none][1] is not None:
            self.first_none += 1
        pos = min(self.first_none, self.first_with.get(pid, len(u)))
        return u[pos][0] if pos < len(u) else None

    def add(self, slot: int, w: tuple[int, int] | None, pid: int | None) -> None:
        if w is None:
            self.pos_of[slot] = len(self.untimed)
            self.untimed.append([slot, None])
            self._untimed_pid(len(self.untimed) - 1, pid)
            return
        leaf = len(self.slots)
        self.leaf_of[slot] = leaf
        self.slots.append(slot)
        self.pids.append(pid)
        self._set(leaf, w)

    def update(self, slot: int, w: tuple[int, int] | None, pid: int | None) -> None:
        if w is None:
            self._untimed_pid(self.pos_of[slot], pid)
            return
        leaf = self.leaf_of[slot]
        self.pids[leaf] = pid
        self._set(leaf, w)

    def _untimed_pid(self, pos: int, pid: int | None) -> None:
        self.untimed[pos][1] = pid
        if pid is not None and self.first_with.get(pid, pos + 1) > pos:
            self.first_with[pid] = pos

    def _set(self, leaf: int, w: tuple[int, int]) -> None:
        lo, hi = self.lo, self.hi
        node = leaf + self.size
        lo[node], hi[node] = w
        node //= 2
        while node:
            l, r = 2 * node, 2 * node + 1
            lo[node] = lo[l] if lo[l] < lo[r] else lo[r]
            hi[node] = hi[l] if hi[l] > hi[r] else hi[r]
            node //= 2


_INF = float("inf")


def _merge_pair(a: Link, b: Link) -> Link:
    """One finding for two copies of it: the time, attrs and fields of the copy with the
    narrower window (the intersection's middle when the windows overlap only in part), every
    copy's evidence once (the better copy's first), the pid either knew, the higher confidence."""
    m, b_best = _merge_head(a, b)
    best, other = (b, a) if b_best else (a, b)
    seen = set()
    ev = []
    for e in best.evidence + other.evidence:
        if (e.source, e.line) not in seen:
            seen.add((e.source, e.line))
            ev.append(e)
    return dataclasses.replace(m, evidence=tuple(ev))


def _adds_nothing(kept: Link, copy: Link, w: tuple[int, int] | None) -> bool:
    """Whether :func:`_merge_head` of a kept finding (already a merge: its attrs have one value
    per key) and a copy would give the kept finding again, less its evidence: the same window
    (the kept one stays the better copy, its time unmoved), the same attrs, no pid it lacks and
    no higher confidence. A log that repeats one report thousands of times merges mostly such
    copies, and this test is far cheaper than building the merged finding."""
    return (w == kept.timing_ns() and copy.attrs == kept.attrs and copy.confidence <= kept.confidence
            and (copy.pid == kept.pid or (not copy.pid and bool(kept.pid))))


def _merge_head(a: Link, b: Link) -> tuple[Link, bool]:
    """:func:`_merge_pair` less the evidence (left empty), and whether ``b`` is the better copy."""
    wa, wb = a.timing_ns(), b.timing_ns()
    best = a
    if wa is not None and (wb[1] - wb[0]) < (wa[1] - wa[0]):
        best = b
    other = b if best is a else a
    attrs = dict(other.attrs)
    attrs.update(dict(best.attrs))
    ts = best.ts_ns
    if wa is not None:
        lo, hi = max(wa[0], wb[0]), min(wa[1], wb[1])
        if (lo, hi) != (wb if best is b else wa) and lo <= hi:
            ts = (lo + hi) // 2
            attrs.update(ts_lo_ns=lo, ts_hi_ns=hi, ts_bound="between")
            attrs.pop("ts_resolution_ns", None)
    return dataclasses.replace(best, ts_ns=ts, pid=best.pid or other.pid, evidence=(),
                               attrs=tuple(attrs.items()),
                               confidence=max(a.confidence, b.confidence)), best is b


def refine_launcher_times(store, incident_id: str, links: list[Link]) -> list[Link]:
    """Sharper times for a launcher's failure report.

    torchrun's ChildFailedError block gives each failure's time in whole seconds
    (``time : 2026-11-29_13:28:56``), but the lines it logged while reacting carry
    milliseconds: ``Sending process P closing signal SIGTERM`` and ``failed (exitcode: -9)
    local_rank: 0 (pid: P)``. Within that whole second, the job failure becomes the first of
    those lines (when the launcher acted on the failure); a worker it stopped, the line that
    stopped it; the failed worker's window ends there (it died before the launcher noticed).
    """
    rows = store.query(
        f"""SELECT e.ts_utc_ns AS ts, e.name, TRY_CAST(json_extract_string(e.attrs, '$.worker_pid') AS BIGINT) AS pid,
                  COALESCE(e.host, s.host) AS host
           FROM {events_named(LAUNCHER_NAMES)} e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND e.ts_utc_ns IS NOT NULL
           ORDER BY e.ts_utc_ns, e.source_id, e.line""", [incident_id] * (len(LAUNCHER_NAMES) + 1))
    if not rows:
        return links
    near = _LauncherLines(rows)
    out = []
    for l in links:
        res = l.attr("ts_resolution_ns")
        if not isinstance(res, int) or l.ts_ns is None or l.kind not in (
                LinkKind.JOB_FAILURE, LinkKind.SIGNAL_KILL, LinkKind.PROCESS_EXIT):
            out.append(l)
            continue
        # the launcher's lines within the report's second, on its host (or on no stated host)
        first = near.first(l.ts_ns, l.ts_ns + res, l.host)
        if first is None:
            out.append(l)
            continue
        attrs = {k: v for k, v in l.attrs if k != "ts_resolution_ns"}
        ts = l.ts_ns
        if l.kind == LinkKind.JOB_FAILURE:
            ts = first["ts"]
        elif l.attr("root_cause") is False and l.pid and (
                own_stop := near.first(l.ts_ns, l.ts_ns + res, l.host, l.pid)) is not None:
            ts = own_stop["ts"]
        else:
            attrs.update(ts_lo_ns=l.ts_ns, ts_hi_ns=first["ts"], ts_bound="between")
            ts = (l.ts_ns + first["ts"]) // 2
        out.append(dataclasses.replace(l, ts_ns=ts, attrs=tuple(attrs.items())))
    return out


class _LauncherLines:
    """The launcher's ``worker_failed``/``closing_signal`` rows (in time order, as queried),
    indexed for :func:`refine_launcher_times`: the first row in a time range on a host (rows
    without a host count for every host; no host asked: every row), optionally only the
    ``closing_signal`` rows of one pid. Each index is a subsequence of the rows, so bisecting
    its times finds its first row in the range; of two indexes the row first in the query's
    order wins. O(log n) a look-up, where a scan of the rows was O(n)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.index: dict[tuple, tuple[list[int], list[int]]] = {}
        for i, r in enumerate(rows):
            h = r["host"] or None
            keys = [("any",), ("host", h)]
            if r["name"] == "closing_signal" and r["pid"]:
                keys += [("stop", r["pid"]), ("stop", r["pid"], h)]
            for k in keys:
                ts, at = self.index.setdefault(k, ([], []))
                ts.append(r["ts"])
                at.append(i)

    def _first(self, key: tuple, t0: int, t1: int) -> int | None:
        got = self.index.get(key)
        if got is None:
            return None
        ts, at = got
        j = bisect_left(ts, t0)
        return at[j] if j < len(ts) and ts[j] < t1 else None

    def first(self, t0: int, t1: int, host: str | None, pid: int | None = None) -> dict | None:
        if pid is None:
            keys = [("any",)] if not host else [("host", host), ("host", None)]
        else:
            keys = [("stop", pid)] if not host else [("stop", pid, host), ("stop", pid, None)]
        found = [i for k in keys if (i := self._first(k, t0, t1)) is not None]
        return self.rows[min(found)] if found else None


def terminal_failure(links: list[Link]) -> Link | None:
    """The job's end: the launcher's failure report (the last ``job_failure`` placed in time, or the
    report of that same end that names a root cause);
    without one, the last fatal finding (a panic, a rank killed or crashed or exiting, a
    collective timeout, an OOM kill, an uncaught exception). Which rank *started* it is the
    chain analysis's answer, not this one's: a launcher names the first rank that reported a
    failure, often a peer that timed out waiting for the one that stopped."""
    placed = [l for l in links if l.ts_ns is not None]
    failures = [l for l in placed if l.kind == LinkKind.JOB_FAILURE]
    if failures:
        # one end can be reported twice (the launcher's summary, then the collector seeing the
        # launcher exit): the report that names a root cause, else the first of that end
        last = max(failures, key=lambda l: l.ts_ns)
        end = [l for l in failures if last.ts_ns - l.ts_ns <= SAME_END_NS]
        named = [l for l in end if l.attr("root_cause_rank") is not None]
        return min(named or end, key=lambda l: l.ts_ns)
    from .chain_rules import role
    from .kinds import STOPPED
    fatal = [l for l in placed if l.kind in FATAL_KINDS and role(l) != STOPPED]
    if fatal:
        return max(fatal, key=lambda l: (l.ts_ns, FATAL_KINDS.index(l.kind)))
    # Nothing placed in time (a lone kernel log without clock anchors): the last fatal finding
    # as listed, so the report still says what ended the job, without a time or a chain.
    unplaced = [l for l in links if l.ts_ns is None and l.kind in FATAL_KINDS and role(l) != STOPPED]
    return unplaced[-1] if unplaced else None


# Kinds that end a process or a job, the most final last (ties at the same time go to it); a
# collector's hang watchdog ends what a bundle saw of a job that stopped without failing.
FATAL_KINDS = (LinkKind.JOB_HANG, LinkKind.HANG_DUMP, LinkKind.PYTHON_EXCEPTION, LinkKind.DISK_FULL, LinkKind.SHM_EXHAUSTED,
               LinkKind.DATALOADER_WORKER_KILLED, LinkKind.RENDEZVOUS_FAILURE, LinkKind.COLLECTIVE_MISMATCH,
               LinkKind.COLLECTIVE_TIMEOUT, LinkKind.NCCL_INIT_FAILURE, LinkKind.OOM_KILL, LinkKind.SEGFAULT,
               LinkKind.PROCESS_EXIT, LinkKind.SIGNAL_KILL, LinkKind.KERNEL_PANIC)


def blocked_since(links: list[Link]) -> list[Link]:
    """A hung-task report says when the blocking began, not when it was noticed: "blocked for more
    than N seconds" at t means blocked since t - N at the latest, and (the watchdog checks every
    N seconds by default) since after t - 2N. The kernel repeats the report while the task stays
    blocked; one finding per task (the first report) keeps the repeats as evidence."""
    out, first = [], {}
    for l in sorted(links, key=lambda l: (l.ts_ns is None, l.ts_ns or 0)):
        if l.kind != LinkKind.HUNG_TASK or l.ts_ns is None:
            out.append(l)
            continue
        key = (l.host, l.pid, l.attr("comm"))
        if key in first:
            i = first[key]
            out[i] = dataclasses.replace(out[i], evidence=out[i].evidence + l.evidence[:1])
            continue
        n = l.attr("blocked_s")
        if isinstance(n, str) and n.isdigit():
            n = int(n)
        if isinstance(n, int) and n > 0:
            w = l.timing_ns()
            attrs = dict(l.attrs)
            attrs.update(reported_ns=l.ts_ns, ts_lo_ns=w[0] - 2 * n * 10**9 - 10**9, ts_hi_ns=w[1] - n * 10**9,
                         ts_bound="between", blocked_s=n)
            l = dataclasses.replace(l, ts_ns=l.ts_ns - n * 10**9, attrs=tuple(attrs.items()),
                                    summary=l.summary + f" (blocked since before {_hms(l.ts_ns - n * 10**9)})")
        first[key] = len(out)
        out.append(l)
    return out


MAX_WAIT_NS = 7 * 86400 * 10**9      # a stated wait longer than this is not a time to date anything by


def starved_of_input(links: list[Link]) -> list[Link]:
    """A rank whose DataLoader raised "timed out after N seconds" at t got no batch from N seconds
    before t: its input pipeline had stopped by t - N (a condition that lasted until t). Its
    workers may have stopped a little earlier, while batches already fetched kept the rank going;
    the window reaches back another N for that (a buffer of less than N seconds of batches)."""
    out = list(links)
    # a rank raises before its process ends: an untimed traceback at the end of a log is bounded
    # by the exit the launcher reports
    ends: dict[int, int] = {}
    for e in links:
        if e.kind in (LinkKind.PROCESS_EXIT, LinkKind.SIGNAL_KILL) and e.rank is not None and e.ts_ns is not None:
            ends[e.rank] = min(ends.get(e.rank, e.timing_ns()[1]), e.timing_ns()[1])
    for l in links:
        w = l.attr("loader_wait_s")
        try:
            n = int(float(w) * 1e9) if w is not None else 0
        except (TypeError, ValueError, OverflowError):
            n = 0
        if l.kind != LinkKind.PYTHON_EXCEPTION or not 0 < n <= MAX_WAIT_NS or l.ts_ns is None:
            continue
        lo, hi = l.timing_ns()
        hi = max(lo, min(hi, ends.get(l.rank, hi)))
        who = f"rank {l.rank}" if l.rank is not None else "the process"
        out.append(Link(kind=LinkKind.DATALOADER_STALL, ts_ns=hi - n, host=l.host, rank=l.rank, pid=l.pid,
                        summary=f"{who}'s DataLoader delivered no batch for {n / 1e9:g} s: its workers had stopped "
                                f"by {_hms(hi - n)} (it raised \"DataLoader timed out\" at {_hms(l.ts_ns)})",
                        source=l.source, evidence=l.evidence, provenance=Provenance.INFERRED, confidence=0.9,
                        attrs=(("ts_lo_ns", lo - 2 * n), ("ts_hi_ns", hi - n), ("ts_bound", "between"),
                               ("until_ns", l.ts_ns), ("loader_wait_s", n / 1e9))))
    return out


PRINTED_KINDS = frozenset({LinkKind.PYTHON_EXCEPTION, LinkKind.COLLECTIVE_TIMEOUT, LinkKind.COLLECTIVE_MISMATCH,
                           LinkKind.SEGFAULT, LinkKind.DISK_FULL, LinkKind.SHM_EXHAUSTED})
DEATH_KINDS = frozenset({LinkKind.SIGNAL_KILL, LinkKind.SEGFAULT, LinkKind.PROCESS_EXIT, LinkKind.OOM_KILL})


def printed_before_death(links: list[Link]) -> list[Link]:
    """A process prints nothing once it is dead. A line of a rank's own output with no time of its
    own is placed between the timed lines around it, and in a launcher's combined log the next
    timed line can come long after the rank died (its peers go on printing): such a window is cut
    at the latest time the rank's death allows."""
    death: dict[int, int] = {}
    for d in links:
        # every death's window holds the death: the least of their latest times bounds it
        if d.kind in DEATH_KINDS and d.rank is not None and d.ts_ns is not None:
            death[d.rank] = min(death.get(d.rank, d.timing_ns()[1]), d.timing_ns()[1])
    if not death:
        return links
    out = []
    for l in links:
        lo, hi = l.attr("ts_lo_ns"), l.attr("ts_hi_ns")
        end = death.get(l.rank) if l.rank is not None else None
        printed = l.kind in PRINTED_KINDS or l.attr("self_signal") is True
        if (end is None or not printed or l.ts_ns is None or not isinstance(lo, int) or not isinstance(hi, int)
                or not lo <= end < hi):
            out.append(l)
            continue
        attrs = dict(l.attrs)
        attrs.update(ts_hi_ns=end, ts_bound="between")
        out.append(dataclasses.replace(l, ts_ns=min(l.ts_ns, (lo + end) // 2), attrs=tuple(attrs.items())))
    return out


def _hms(ts: int) -> str:
    from aftertrace.ingest.timeparse import fmt_hms
    return fmt_hms(ts)


def mismatch_deviation(store, incident_id: str, links: list[Link]) -> list[Link]:
    """Which side of a collective mismatch deviated. Every rank of a mismatch reports it, each
    naming its own op and a peer's; with two ranks the reports are mirror images. The op the
    program's earlier collective calls (its Kineto traces) never or seldom made is the deviation: the rank
    that ran it is marked ``deviates``, and the report of a rank that ran the usual op is only
    its view of the other's deviation (confidence 0.5)."""
    mm = [l for l in links if l.kind == LinkKind.COLLECTIVE_MISMATCH and l.attr("op_type") and l.attr("op_type_b")]
    if not mm:
        return links
    # the calls the program made (c10d ops), not what the backend exchanged for them: under
    # TORCH_DISTRIBUTED_DEBUG=DETAIL every call is preceded by an internal all_gather of fingerprints
    seen = {r["c"]: r["n"] for r in store.query(
        """SELECT lower(collective) AS c, count(*) AS n FROM collectives WHERE incident_id = ?
             AND (role = 'call' OR NOT EXISTS (SELECT 1 FROM collectives WHERE incident_id = ? AND role = 'call'))
           GROUP BY 1""", [incident_id, incident_id])}
    if not seen:
        return links

    def count(op: str) -> int:
        return seen.get(str(op).lower().replace("_", ""), 0)
    reports = {id(l) for l in mm}
    out = []
    for l in links:
        if id(l) in reports and l.attr("rank_a") is not None and l.rank == l.attr("rank_a"):
            mine, theirs = count(l.attr("op_type")), count(l.attr("op_type_b"))
            if mine != theirs:
                dev = mine < theirs
                attrs = dict(l.attrs, deviates=dev)
                l = dataclasses.replace(l, attrs=tuple(attrs.items()), confidence=1.0 if dev else 0.5,
                                        summary=l.summary + (f" ({l.attr('op_type')} is not what the job ran before: "
                                                             f"{count(l.attr('op_type'))} earlier, "
                                                             f"{l.attr('op_type_b')} {count(l.attr('op_type_b'))})"
                                                             if dev else ""))
        out.append(l)
    return out


def unsummarised_failures(store, incident_id: str, links: list[Link]) -> list[Link]:
    """A worker the launcher reported failed (``failed (exitcode: N) local_rank: L (pid: P)``) in
    a file with no ``ChildFailedError`` summary (a pasted excerpt, a launcher killed before it
    wrote one): the line is the failure's evidence, a ``signal_kill`` for a negative exit code
    (the signal's number) and a ``process_exit`` otherwise, unless another finding already says
    how that pid ended."""
    if not has_rows(store, incident_id, "facts"):
        return []
    rows = store.query(
        """SELECT f.value, f.line, s.path, COALESCE(e.host, s.host) AS host, e.ts_utc_ns, e.text, e.rank
           FROM facts f JOIN sources s USING (incident_id, source_id)
           LEFT JOIN events e ON e.incident_id = f.incident_id AND e.source_id = f.source_id AND e.line = f.line
                AND e.name = 'worker_failed'
           WHERE f.incident_id = ? AND f.key = 'unsummarised_worker_failure'
             AND NOT EXISTS (SELECT 1 FROM events b WHERE b.incident_id = f.incident_id
                             AND b.source_id = f.source_id AND b.kind = 'job_failure')
           ORDER BY s.path, f.line""", [incident_id])
    ended = {(l.host, l.pid) for l in links if l.kind in DEATH_KINDS and l.pid is not None}
    out = []
    for r in rows:
        a = json.loads(r["value"])
        pid, code = a.get("worker_pid"), a.get("exitcode")
        if not isinstance(pid, int) or (r["host"], pid) in ended:
            continue
        ended.add((r["host"], pid))
        kind = LinkKind.SIGNAL_KILL if isinstance(code, int) and code < 0 else LinkKind.PROCESS_EXIT
        out.append(Link(kind=kind, ts_ns=r["ts_utc_ns"], summary=a.get("summary") or f"worker pid {pid} failed",
                        source=r["path"], host=r["host"], rank=r["rank"], pid=pid,
                        evidence=(Evidence(r["path"], r["line"], r["text"] or ""),), provenance=Provenance.READ,
                        confidence=1.0, attrs=_scalar_attrs(dict(a, unsummarised=True))))
    return out


def anomalies(store, incident_id: str) -> list[Link]:
    from .detectors import run as metric_detectors
    # (an incident without events, one perf recording: their queries are not even planned)
    events = has_rows(store, incident_id, "events")
    links = oom_kills(store, incident_id) + blocked_since(typed_events(store, incident_id)) if events else []
    links += unsummarised_failures(store, incident_id, links)
    links = mismatch_deviation(store, incident_id, links)
    links = printed_before_death(starved_of_input(refine_launcher_times(store, incident_id, links) if events else links))
    links = metric_detectors(store, incident_id, links)
    return sorted(links, key=lambda l: (l.ts_ns is None, l.ts_ns or 0))
