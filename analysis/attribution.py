"""Who a host finding touches: the job's processes and ranks inside a cgroup, or nobody of the job.

A throttled or growing cgroup matters to the job only through the processes in it. The bundle
says who was where:

* ``members`` rows (``cgroup.procs``/``tasks`` copies in snapshot series, ``/proc/<pid>/cgroup``,
  the collector's manifest): the pids seen in a cgroup, in any controller, and in the groups
  below it (``/node`` holds what ``/node/etl`` holds);
* without membership rows: a bundle whose snapshots cover one cgroup per host is taken to hold
  the job's cgroup (people snapshot the group their job runs in), and the finding says it was
  assumed.

The job's processes are the ranks' pids (:mod:`analysis.progress`), the launcher's, and every
process they started, transitively: a DataLoader worker is the job's too. Who started whom is
read from perf ``sched_process_fork`` records, ``PPid`` of ``/proc/<pid>/status`` copies, and a
rank's own words: ``DataLoader worker (pid 1043) is killed by signal`` in rank 1's log names
1043 as rank 1's worker (:func:`named_children`).

:func:`annotate` adds to each cgroup finding ``members`` (the pids seen inside, sorted),
``job_pids`` and ``ranks`` (the job's among them) and ``outside`` (True: processes but none of
the job's; False: the job's processes are inside; absent: unknown), and ``membership``: how
it was known (``read``, ``assumed``).

Whose growth it was (:func:`grower`), a worked example. The job's memory cgroup grows to its
limit and the OOM report lists (pid, pages, name): the launcher 1025 (54,257), rank 0 = 1029
(95,224), rank 1 = 1030 (95,709) and four DataLoader workers 1041 (293,649), 1042 (60,756),
1043 (269,481), 1046 (60,807): 929,883 pages. No task holds half. No perf, no status copies,
but rank 1's log says ``DataLoader worker (pid 1043) is killed by signal: Killed``, so 1043 is
rank 1's. By rank, rank 1 holds 1030 + 1043 = 365,190, under half. The largest tasks that
together hold half are 1041 and 1043 (563,130); the one whose owner is known is rank 1's, and
1041 was seen in the growing cgroup: the growth is rank 1's (``owner = inferred``), and the
summary says that whose 1041 is the bundle does not show. Had 1041 been named by rank 0's log,
the holders would belong to two ranks and the growth would stay the cgroup's.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Hashable, Iterable, NamedTuple

from .links import Link, LinkKind as K
from .present import has_rows

HOST_KINDS = frozenset({K.CPU_THROTTLE, K.MEMORY_GROWTH, K.CPU_PRESSURE, K.MEMORY_PRESSURE, K.CGROUP_FROZEN})


def memberships(store, incident_id: str) -> dict[tuple[str, str], set[int]]:
    """(host, cgroup) -> pids seen in it (over every snapshot and controller). The collector's
    manifest only says "the job's processes, while its cgroups were these", not which process was
    in which group: its rows count for a group only when nothing read that group's members
    (``cgroup.procs``, ``tasks``, ``/proc/<pid>/cgroup``)."""
    read: dict[tuple[str, str], set[int]] = {}
    said: dict[tuple[str, str], set[int]] = {}
    for r in [] if not has_rows(store, incident_id, "members") else store.query(
            """SELECT COALESCE(m.host, s.host, '') AS host, m.cgroup, m.pid, m.basis = 'manifest' AS said
               FROM members m JOIN sources s USING (incident_id, source_id)
               WHERE m.incident_id = ? AND m.pid IS NOT NULL AND m.cgroup IS NOT NULL
               GROUP BY ALL""", [incident_id]):
        (said if r["said"] else read).setdefault((r["host"], _norm(r["cgroup"])), set()).add(int(r["pid"]))
    return read | {k: v for k, v in said.items() if k not in read}


def _norm(cg: str) -> str:
    cg = "/" + cg.strip().strip("/")
    return cg


def within(child: str, parent: str) -> bool:
    """Whether cgroup ``child`` is ``parent`` or below it."""
    c, p = _norm(child), _norm(parent)
    return c == p or p == "/" or c.startswith(p + "/")


def members_of(cg: str, host: str, table: dict[tuple[str, str], set[int]]) -> set[int] | None:
    """Pids in cgroup ``cg`` or below it on ``host`` (None: the bundle does not say)."""
    found = None
    for (h, g), pids in table.items():
        if (h == (host or "") or not h or not host) and within(g, cg):
            found = (found or set()) | pids
    return found


class Children(dict):
    """pid -> the processes and threads it started, as every host's records say (pids are per
    host: a merge of all of them), and :meth:`on` one host's."""

    def __init__(self):
        super().__init__()
        self.by_host: dict[str, dict[int, set[int]]] = {}

    def add(self, host: str | None, parent: int, kids) -> None:
        self.setdefault(parent, set()).update(kids)
        self.by_host.setdefault(host or "", {}).setdefault(parent, set()).update(kids)

    def on(self, host: str | None) -> dict[int, set[int]]:
        """What the records of ``host`` say, with those of unknown host (all of it, where ``host``
        is unknown)."""
        if not host:
            return self
        mine, anywhere = self.by_host.get(host, {}), self.by_host.get("", {})
        out = {p: set(k) for p, k in mine.items()}
        for p, k in anywhere.items():
            out.setdefault(p, set()).update(k)
        return out

    @classmethod
    def of(cls, children: dict[int, set[int]]) -> "Children":
        """``children`` as they are (a :class:`Children`), or a plain mapping as records of unknown host."""
        if isinstance(children, Children):
            return children
        out = cls()
        for p, kids in children.items():
            out.add(None, p, kids)
        return out


class JobPids(frozenset):
    """Every pid of the job, over all hosts (as a set), and :meth:`on` one host's: a process on
    one machine is not the job's because a pid of the job on another machine is the same number."""
    per_host: dict[str, frozenset]

    def __new__(cls, per_host: dict[str, set[int]]):
        self = super().__new__(cls, set().union(*per_host.values()) if per_host else ())
        self.per_host = {h: frozenset(v) for h, v in per_host.items()}
        return self

    def __reduce__(self):
        return JobPids, ({h: set(v) for h, v in self.per_host.items()},)

    def on(self, host: str | None) -> frozenset:
        """The job's pids on ``host``, with those of unknown host (all of them, where ``host`` is unknown)."""
        if not host:
            return self
        return self.per_host.get(host, frozenset()) | self.per_host.get("", frozenset())


def job_on(jp: set[int], host: str | None) -> set[int]:
    """The job's pids that can be on ``host`` (``jp`` a :class:`JobPids`, else the same everywhere)."""
    return jp.on(host) if isinstance(jp, JobPids) else jp


def job_pids(store, incident_id: str, rank_pids: dict[int, int], children: dict[int, set[int]],
             rank_hosts: dict[int, str | None] | None = None) -> JobPids:
    """The ranks' pids, the launcher's, and their descendants as far as the bundle tells, host by
    host (:class:`JobPids`)."""
    roots: dict[str, set[int]] = {}
    for r, p in rank_pids.items():
        roots.setdefault((rank_hosts or {}).get(r) or "", set()).add(p)
    for r in store.query(
            """SELECT COALESCE(e.host, s.host, '') AS host, e.pid FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.name = 'closing_signal'""", [incident_id]):
        if r["pid"] is not None:
            roots.setdefault(r["host"], set()).add(int(r["pid"]))       # the launcher printed it
    children = Children.of(children)
    return JobPids({h: descendants(children.on(h), pids) for h, pids in roots.items()})


def children_of(store, incident_id: str) -> Children:
    """pid -> the processes and threads it started (perf fork events, ``PPid`` of status copies), by host."""
    children = Children()
    if not has_rows(store, incident_id, "events"):
        return children
    for r in store.query(
            """SELECT COALESCE(e.host, s.host, '') AS host,
                      TRY_CAST(json_extract_string(e.attrs, '$.pid') AS BIGINT) AS parent,
                      TRY_CAST(json_extract_string(e.attrs, '$.child_pid') AS BIGINT) AS child
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.name LIKE '%sched_process_fork'""", [incident_id]):
        if r["parent"] is not None and r["child"] is not None:
            children.add(r["host"], int(r["parent"]), (int(r["child"]),))
    for r in store.query(
            """SELECT DISTINCT COALESCE(e.host, s.host, '') AS host, e.pid,
                      TRY_CAST(json_extract_string(e.attrs, '$.ppid') AS BIGINT) AS ppid
               FROM events e JOIN sources s USING (incident_id, source_id)
               WHERE e.incident_id = ? AND e.name = 'proc_state' AND e.pid IS NOT NULL""", [incident_id]):
        if r["ppid"] is not None:
            children.add(r["host"], int(r["ppid"]), (int(r["pid"]),))
    return children


def named_children(links: list[Link], rank_pids: dict[int, int], children: dict[int, set[int]],
                   rank_hosts: dict[int, str | None] | None = None) -> Children:
    """``children`` with the DataLoader workers a rank named in its own log (a rank only reports
    the death of its own workers) added under the rank's pid, on the rank's host."""
    src = Children.of(children)
    out = Children()
    for h, m in src.by_host.items():
        for p, kids in m.items():
            out.add(h, p, kids)
    for l in links:
        if l.kind != K.DATALOADER_WORKER_KILLED or l.rank not in rank_pids:
            continue
        for w in str(l.attr("worker_pids") or "").replace(",", " ").split():
            if w.isdigit() and int(w) != rank_pids[l.rank]:
                out.add((rank_hosts or {}).get(l.rank) or l.host, rank_pids[l.rank], (int(w),))
    return out


def descendants(children: dict[int, set[int]], roots: set[int]) -> set[int]:
    """``roots`` and everything they started, transitively (``children``: :func:`children_of`)."""
    out, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo += children.get(p, ())
    return out


class HostView(NamedTuple):
    """The ranks a pid on one host can be: pids are per host, and the ranks of a job on many
    machines (in containers most of all) often have the same ones."""
    rank_pids: dict[int, int]     # rank -> pid: the ranks on the host, or of unknown host
    by_pid: dict[int, int]        # pid -> rank, where the pid is one rank's
    owner: dict[int, int]         # pid -> rank: each rank's processes and what they started


def host_views(rank_pids: dict[int, int], rank_hosts: dict[int, str | None] | None,
               children: dict[int, set[int]]) -> Callable[[str | None], HostView]:
    """``view(host)``: the :class:`HostView` of the ranks that can be on ``host``, those on it and
    those whose host is unknown (every rank, where ``host`` is unknown). A pid that two of those
    ranks have (or that descends from both) names neither."""
    hosts = {r: h for r, h in (rank_hosts or {}).items() if h}
    cache: dict[str | None, HostView] = {}

    def view(host: str | None) -> HostView:
        if host not in cache:
            rp = {r: p for r, p in rank_pids.items() if not host or hosts.get(r) in (None, host)}
            kids = Children.of(children).on(host)
            cache[host] = HostView(rp, one_rank((p, r) for r, p in rp.items()),
                                   one_rank((d, r) for r, p in rp.items() for d in descendants(kids, {p})))
        return cache[host]
    return view


def owned(links: list[Link], view: Callable[[str | None], HostView]) -> list[Link]:
    """``links`` with a rank where a finding without one is about a process that descends from one
    rank only on its host (``view``: :func:`host_views`): a DataLoader worker the kernel names by
    its pid is its rank's (``started_by_rank``: the pid is not the rank's own)."""
    out = []
    for l in links:
        if l.rank is None and l.pid is not None:
            here = view(l.host)
            r = here.owner.get(l.pid)
            if r is not None:
                started = () if l.pid in here.by_pid else (("started_by_rank", True),)
                l = dataclasses.replace(l, rank=r, attrs=l.attrs + started)
        out.append(l)
    return out


def one_rank(pairs: Iterable[tuple[Hashable, int]]) -> dict:
    """pid -> rank of ``(pid, rank)`` pairs (a pid or any key of a process), without the pids of
    more than one rank."""
    out: dict = {}
    both: set = set()
    for pid, r in pairs:
        if out.setdefault(pid, r) != r:
            both.add(pid)
    for pid in both:
        del out[pid]
    return out


def annotate(store, incident_id: str, links: list[Link], rank_pids: dict[int, int], jp: set[int],
             children: dict[int, set[int]], rank_hosts: dict[int, str | None] | None = None) -> list[Link]:
    table = memberships(store, incident_id)
    view = host_views(rank_pids, rank_hosts, children)
    # hosts whose snapshots cover a single cgroup: that one is the job's
    cgs: dict[str, set[str]] = {}
    for l in links:
        if l.kind in HOST_KINDS and l.entity and l.entity.startswith("/"):
            cgs.setdefault(l.host or "", set()).add(l.entity)
    out = []
    for l in links:
        if l.kind not in HOST_KINDS or not l.entity or not l.entity.startswith("/"):
            out.append(l)
            continue
        inside = members_of(l.entity, l.host or "", table)
        attrs = dict(l.attrs)
        here = view(l.host)
        if inside:
            mine = sorted(inside & job_on(jp, l.host))
            ranks = tuple(sorted({here.by_pid[p] for p in mine if p in here.by_pid}))
            attrs.update(members=tuple(sorted(inside)), job_pids=tuple(mine), ranks=ranks,
                         outside=not mine, membership="read")
            if len(ranks) == 1 and l.rank is None and l.pid is None:
                # a group that holds one rank of the job (a per-rank cgroup): the finding is that rank's
                out.append(dataclasses.replace(l, rank=ranks[0], pid=rank_pids[ranks[0]], attrs=tuple(attrs.items())))
                continue
        elif len(cgs.get(l.host or "", ())) == 1 and here.rank_pids:
            attrs.update(job_pids=tuple(sorted(set(here.rank_pids.values()))), ranks=tuple(sorted(here.rank_pids)),
                         outside=False, membership="assumed")
        out.append(dataclasses.replace(l, attrs=tuple(attrs.items())))
    out = grower(foreign_tasks(out, jp), jp, view=view)
    return faulters(store, incident_id, out, view=view)


# the kernel's page-fault path: a process whose memory grows faults the new pages in
FAULT_FRAMES = ("handle_mm_fault", "__handle_mm_fault", "exc_page_fault", "asm_exc_page_fault",
                "do_anonymous_page", "do_huge_pmd_anonymous_page")
FAULT_MIN_SAMPLES = 10      # fewer page-fault samples in the growth say nothing about who grew


def faulters(store, incident_id: str, links: list[Link], owner: dict[int, int] | None = None,
             rank_pids: dict[int, int] | None = None,
             view: Callable[[str | None], HostView] | None = None) -> list[Link]:
    """A cgroup's growth that no OOM report names (:func:`grower`) is the rank whose processes
    perf caught faulting pages in during it: more than half of the samples of the group's job
    processes whose call chain passes through the kernel's page-fault path, between the growth's
    start and end, and at least ``FAULT_MIN_SAMPLES`` of them (``owner = sampled``). ``view``
    (:func:`host_views`) gives the ranks and owners of each finding's host, else ``owner`` and
    ``rank_pids`` hold for every host."""
    from .progress import stacks_through_sql
    todo = [l for l in links if l.kind == K.MEMORY_GROWTH and l.entity and l.pid is None
            and l.ts_ns is not None and not l.attr("outside") and l.attr("job_pids")]
    if not todo:
        return links
    out = []
    for l in links:
        if l not in todo:
            out.append(l)
            continue
        if view is not None:
            rank_pids, owner = view(l.host).rank_pids, view(l.host).owner
        if not rank_pids:
            out.append(l)
            continue
        until = l.attr("until_ns") or l.ts_ns
        rows = store.query(
            "WITH RECURSIVE " + stacks_through_sql("faulting") + """
               SELECT COALESCE(x.pid, x.tid) AS pid, count(*) AS n
               FROM samples x JOIN sources o USING (incident_id, source_id)
               WHERE x.incident_id = ? AND x.ts_utc_ns BETWEEN ? AND ?
                 AND COALESCE(x.host, o.host, '') = ? AND COALESCE(x.pid, x.tid) IN (SELECT unnest(?))
                 AND (x.source_id, x.stack_id) IN (SELECT (source_id, stack_id) FROM faulting)
               GROUP BY 1""",
            [incident_id, list(FAULT_FRAMES), incident_id, incident_id, l.ts_ns, until, l.host or "",
             list(l.attr("job_pids"))])
        by_rank: dict[int, int] = {}
        for r in rows:
            if r["pid"] in owner:
                by_rank[owner[r["pid"]]] = by_rank.get(owner[r["pid"]], 0) + r["n"]
        total = sum(r["n"] for r in rows)
        top = max(by_rank.items(), key=lambda kv: kv[1], default=None)
        if top is None or total < FAULT_MIN_SAMPLES or top[1] * 2 <= total:
            out.append(l)
            continue
        rank, n = top
        attrs = dict(l.attrs)
        attrs["owner"] = "sampled"
        out.append(dataclasses.replace(
            l, pid=rank_pids[rank], rank=rank, attrs=tuple(attrs.items()),
            summary=l.summary + f"; perf caught the processes of rank {rank} faulting pages in for {n} of "
                                f"the {total} samples of the group's job processes in the kernel's page-fault "
                                f"path while it grew"))
    return out


def foreign_tasks(links: list[Link], jp: set[int]) -> list[Link]:
    """Name the processes behind a ``foreign_memory`` finding: the tasks a later OOM report on the
    same host lists that are not the job's, largest first."""
    ooms = [l for l in links if l.kind == K.OOM_KILL and l.attr("tasks") and l.ts_ns is not None]
    out = []
    for l in links:
        if l.kind != K.FOREIGN_MEMORY or l.ts_ns is None:
            out.append(l)
            continue
        until = l.attr("until_ns") or l.ts_ns
        near = [o for o in ooms if (o.host == l.host or not o.host or not l.host)
                and _may_follow(o, l, until + 120 * 10**9)]
        if not near:
            out.append(l)
            continue
        o = near[0]
        tasks = [t for t in o.attr("tasks") if t[0] not in job_on(jp, o.host or l.host) and t[0] != o.pid]
        if not tasks:
            out.append(l)
            continue
        tasks.sort(key=lambda t: -(t[1] or 0))
        rss = sum(t[1] or 0 for t in tasks) * 4096
        names = sorted({t[2] for t in tasks if t[2]})
        attrs = dict(l.attrs)
        attrs.update(pids=tuple(t[0] for t in tasks), foreign_rss_bytes=rss)
        summary = (l.summary + f"; the OOM report lists {len(tasks)} process{'es' if len(tasks) != 1 else ''} "
                   f"outside the job ({', '.join(names[:3])}; pids {', '.join(str(t[0]) for t in tasks[:5])}"
                   f"{', ...' if len(tasks) > 5 else ''}) holding {rss / 2**30:.2f} GiB")
        out.append(dataclasses.replace(l, pid=tasks[0][0], attrs=tuple(attrs.items()), summary=summary))
    return out


def grower(links: list[Link], jp: set[int], rank_of: dict[int, int] | None = None,
           owner: dict[int, int] | None = None, rank_pids: dict[int, int] | None = None,
           view: Callable[[str | None], HostView] | None = None) -> list[Link]:
    """Which process a cgroup's growth was: when an OOM report of that cgroup (or one above it)
    right after the growth lists one job process holding more than half of what the cgroup
    holds, the growth is that process's (its rank and pid are set, the cgroup stays the entity);
    else, when the processes of one rank (the rank and what it started: ``owner`` maps each pid
    to its rank) hold more than half, the growth is that rank's. A leak in one rank, or in its
    DataLoader workers, is named, not only the group it ran in. ``view`` (:func:`host_views`)
    gives the ranks of each finding's host, else ``rank_of``, ``owner`` and ``rank_pids`` hold for
    every host."""
    ooms = [l for l in links if l.kind == K.OOM_KILL and l.attr("tasks") and l.ts_ns is not None]
    out = []
    for l in links:
        if l.kind != K.MEMORY_GROWTH or not l.entity or l.ts_ns is None or l.pid is not None:
            out.append(l)
            continue
        if view is not None:
            rank_pids, rank_of, owner = view(l.host)
        owner, rank_of = owner or {}, rank_of or {}
        until = l.attr("until_ns") or l.ts_ns
        o = next((o for o in ooms if (o.host == l.host or not o.host or not l.host)
                  and _may_follow(o, l, until + 60 * 10**9)
                  and within(l.entity, o.attr("oom_memcg") or o.attr("memcg") or "/")), None)
        if o is None:
            out.append(l)
            continue
        tasks = [t for t in o.attr("tasks") if t[1]]
        total = sum(t[1] for t in tasks)
        top = max(tasks, key=lambda t: t[1], default=None)
        if top is not None and top[1] * 2 < total and owner and rank_pids and not l.attr("outside"):
            named = _rank_of_holders(tasks, total, owner, set(l.attr("members") or ()))
            if named is not None:
                r, ts_, unknown = named
                held = sum(t[1] for t in ts_) * 4096 / 2**30
                names = ", ".join(f"{t[2]} {t[0]}" for t in sorted(ts_, key=lambda t: -t[1])[:4])
                attrs = dict(l.attrs)
                attrs["owner"] = "inferred" if unknown else "read"
                also = ""
                if unknown:
                    attrs["owner_unknown_pids"] = tuple(t[0] for t in unknown)
                    also = (f"; {', '.join(f'{t[2]} {t[0]}' for t in unknown[:4])} also held much of it, "
                            f"and whose {'they are' if len(unknown) > 1 else 'it is'} the bundle does not "
                            f"say (no fork record, no status copy)")
                out.append(dataclasses.replace(
                    l, pid=rank_pids[r], rank=r, attrs=tuple(attrs.items()),
                    summary=l.summary + f"; the OOM report at {_hms(o.ts_ns)} shows the processes of rank {r} "
                                        f"({names}) holding {held:.2f} GiB of the {total * 4096 / 2**30:.2f} GiB "
                                        f"its tasks held" + also))
                continue
        if top is None or top[0] not in job_on(jp, l.host) or top[1] * 2 < total:
            out.append(l)
            continue
        rank = rank_of.get(top[0])
        who = f"rank {rank} (pid {top[0]})" if rank is not None else f"pid {top[0]} ({top[2]})"
        out.append(dataclasses.replace(
            l, pid=top[0], rank=rank,
            summary=l.summary + f"; the OOM report at {_hms(o.ts_ns)} shows {who} holding "
                                f"{top[1] * 4096 / 2**30:.2f} GiB of the {total * 4096 / 2**30:.2f} GiB its tasks held"))
    return out


def _may_follow(report: Link, finding: Link, by_ns: int) -> bool:
    """Whether an OOM report can be the one after ``finding``: by their stated windows (a kernel
    line read from ``dmesg -T`` is only known to the second, and may print before a snapshot
    series' finding in time while being after it), it may be at or after the finding's start and
    no later than ``by_ns``."""
    r, f = report.timing_ns(), finding.timing_ns()
    return r is not None and f is not None and r[1] >= f[0] and r[0] <= by_ns


def _rank_of_holders(tasks: list, total: int, owner: dict[int, int], members: set[int]):
    """(rank, its tasks, holders of unknown owner) when the growth is one rank's: either that
    rank's processes hold half of what the OOM report lists, or, of the largest tasks that
    together hold half ("the holders"), every one whose owner the bundle shows is that rank's
    (at least one is) and the others were seen inside the growing cgroup; None otherwise."""
    by_rank: dict[int, list] = {}
    for t in tasks:
        if t[0] in owner:
            by_rank.setdefault(owner[t[0]], []).append(t)
    best = max(by_rank.items(), key=lambda kv: sum(t[1] for t in kv[1]), default=None)
    if best is not None and sum(t[1] for t in best[1]) * 2 >= total:
        return best[0], best[1], []
    holders, held = [], 0
    for t in sorted(tasks, key=lambda t: -t[1]):
        if held * 2 >= total:
            break
        holders.append(t)
        held += t[1]
    ranks = {owner[t[0]] for t in holders if t[0] in owner}
    if len(ranks) != 1:
        return None
    (r,) = ranks
    unknown = [t for t in holders if t[0] not in owner]
    if members and any(t[0] not in members for t in unknown):
        return None
    return r, by_rank[r], unknown


def _hms(ts: int) -> str:
    from aftertrace.ingest.timeparse import fmt_hms
    return fmt_hms(ts)


def touches(cause: Link, pid: int | None, rank: int | None) -> bool | None:
    """Whether a host finding touches this process (None: the bundle does not say)."""
    if cause.attr("membership") is None:
        return None
    if rank is not None and rank in (cause.attr("ranks") or ()):
        return True
    if pid is not None and pid in (cause.attr("job_pids") or ()) + (cause.attr("members") or ()):
        return True
    return False
