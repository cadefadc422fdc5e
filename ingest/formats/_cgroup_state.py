"""What a snapshot series says besides counters: membership, process states, freezing, settings.

Fed with the same blocks as the metrics (any layout), in any order; everything is written at
``close`` in time order:

* **members** (``cgroup.procs``, ``tasks``, ``cgroup.threads``, ``/proc/<pid>/cgroup``): the
  ``members`` table with the rule documented there (ingest/model.py): per file series a row at
  its first read, when a pid/tid joins, when it leaves (present false), and at its last read.
  A file series is one cgroup's file in one hierarchy, or one pid's ``/proc/<pid>/cgroup``.
  ``tasks`` rows get the pid when the series lists the tid as a process anywhere (in a
  ``cgroup.procs``, a ``/proc/<pid>/cgroup`` or ``/proc/<pid>/status``): a main thread. ``/proc/<pid>/cgroup`` names the v2 hierarchy ``0::<path>``; on a host
  that also lists v1 hierarchies that is the hybrid ``unified`` mount, whose groups the metrics
  call ``/unified/<path>``, and so do these rows.
* **process states** (``/proc/<pid>/status``): an event (category ``proc``, name
  ``proc_state``) at the pid's first copy and whenever its ``State`` letter changes, with the
  status fields in ``attrs``.
* **freezing** (``freezer.frozen`` metric rows): an event ``cgroup_frozen`` /
  ``cgroup_freezing`` / ``cgroup_thawed`` (category ``cgroup``) when a cgroup's value changes,
  and at its first copy when it is not thawed. A v2 cgroup whose ``cgroup.freeze`` is 1 while
  the same snapshot's ``cgroup.events`` says ``frozen 0`` is freezing: its value becomes 0.5.
* **settings** (``_cgroup_table.SETTINGS``): a fact (key = file name, value = ``<cgroup>:
  <text>``) at the first copy and whenever the text changes.

Bounds: at most :data:`MAX_ITEMS` listed pids/tids are kept for the whole series (the rest is
one ``limit`` issue), at most :data:`MAX_ROWS` members rows and :data:`MAX_EVENTS` events.
"""
from __future__ import annotations

import re
from typing import Any

from ._cgroup_read import FREEZER_STATES, PROC_CGROUP_LINE, Block

MAX_ITEMS = 2_000_000
MAX_ROWS = 500_000
MAX_EVENTS = 200_000
MAX_SETTING = 300          # chars of a setting's text kept in its fact
_FREEZER_WORDS = {v: k for k, v in FREEZER_STATES.items()}
_STATE = re.compile(r"^([A-Za-z])(?:\s+\((.*)\))?\s*$")
_KB = re.compile(r"^(\d+)\s*kB$")
STATUS_INT = {"PPid": "ppid", "Tgid": "tgid", "Threads": "threads",
              "voluntary_ctxt_switches": "voluntary_ctxt_switches",
              "nonvoluntary_ctxt_switches": "nonvoluntary_ctxt_switches"}


class SeriesState:
    def __init__(self, sink):
        self.sink = sink
        # (basis, key...) -> {ts: (member, {item: line})}; item = (cgroup, controller, pid, tid)
        self.series: dict[tuple, dict[Any, tuple[str, dict]]] = {}
        self.items = 0
        self.limited = False
        self.status: dict[int, list[tuple]] = {}          # pid -> [(ts, member, line, text, attrs)]
        self.settings: dict[tuple[str, str], list[tuple]] = {}   # (entity, file) -> [(ts, member, line, text)]

    # -- in -------------------------------------------------------------------------
    def add(self, b: Block) -> None:
        g = b.fid.spec.grammar
        if g in ("pids", "tids"):
            self._listing(b, g)
        elif g == "proc_cgroup":
            self._proc_cgroup(b)
        elif b.fid.name == "status" and b.fid.controller == "proc":
            self._status(b)
        elif g == "setting":
            text = " ".join(x.strip() for x in b.lines if x.strip())
            self.settings.setdefault((b.fid.entity, b.fid.name), []).append(
                (b.ts_ns, b.member, b.first_line, text[:MAX_SETTING]))

    def _room(self, n: int) -> bool:
        if self.items + n > MAX_ITEMS:
            if not self.limited:
                self.limited = True
                self.sink.issue("limit", f"more than {MAX_ITEMS} listed pids/tids in the series: membership "
                                         "after that point is not read")
            return False
        self.items += n
        return True

    def _observe(self, key: tuple, ts, member: str, items: dict) -> None:
        if self._room(len(items)):
            self.series.setdefault(key, {})[ts] = (member, items)

    def _listing(self, b: Block, g: str) -> None:
        fid = b.fid
        items = {}
        for i, raw in enumerate(b.lines):
            s = raw.strip()
            if s.isdigit() and len(s) <= 10:
                n = int(s)
                items[(fid.entity, fid.controller, n, None) if g == "pids"
                      else (fid.entity, fid.controller, None, n)] = b.first_line + i
        self._observe((fid.name, fid.controller, fid.entity), b.ts_ns, b.member, items)

    def _proc_cgroup(self, b: Block) -> None:
        pid = int(b.fid.entity.split()[1])
        lines = [(i, PROC_CGROUP_LINE.match(raw.strip())) for i, raw in enumerate(b.lines)]
        lines = [(i, m) for i, m in lines if m]
        hybrid = any(m.group(1) != "0" for _, m in lines)
        items = {}
        for i, m in lines:
            hid, ctrl, path = m.groups()
            if hid == "0" and ctrl == "":
                ctrl = "unified"
                if hybrid:
                    path = "/unified" + (path if path != "/" else "")
            items[(path, ctrl, pid, None)] = b.first_line + i
        self._observe(("proc_cgroup", pid), b.ts_ns, b.member, items)

    def _status(self, b: Block) -> None:
        pid = int(b.fid.entity.split()[1])
        attrs: dict[str, Any] = {}
        state = line = text = None
        for i, raw in enumerate(b.lines):
            k, sep, v = raw.partition(":")
            if not sep:
                continue
            v = v.strip()
            if k == "State":
                m = _STATE.match(v)
                if m:
                    state, line, text = m.group(1), b.first_line + i, raw.rstrip()
                    attrs["state"], attrs["state_word"] = m.group(1), m.group(2)
            elif k == "Name":
                attrs["name"] = v[:64]
            elif k in STATUS_INT and v.isdigit() and len(v) <= 18:
                attrs[STATUS_INT[k]] = int(v)
            elif k == "VmRSS":
                m = _KB.match(v)
                if m and len(m.group(1)) <= 15:
                    attrs["vm_rss_bytes"] = int(m.group(1)) * 1024
        if state is None:
            return            # (the block's bad lines are already issues: no State, no event)
        self.status.setdefault(pid, []).append((b.ts_ns, b.member, line, text, attrs))

    # -- out ------------------------------------------------------------------------
    def close(self, freezer: list[tuple]) -> dict[str, Any]:
        """Write members rows, events and facts. ``freezer``: the series' ``freezer.frozen`` rows as
        (entity, controller, ts, value, member, line, text). Returns counts for the source's attrs."""
        n_members = self._members()
        n_state = self._states()
        n_freeze = self._freezer(freezer)
        n_set = self._settings()
        return {"members_rows": n_members, "proc_state_events": n_state, "freezer_events": n_freeze,
                "setting_facts": n_set}

    def _members(self) -> int:
        # ids the series lists as processes anywhere: a tid among them is that process's main thread
        procs: set[int] = set(self.status)
        for key, obs in self.series.items():
            if key[0] in ("cgroup.procs", "proc_cgroup"):
                for _, items in obs.values():
                    procs.update(it[2] for it in items)
        rows = 0
        add = self.sink.add
        for key, obs in sorted(self.series.items(), key=lambda kv: kv[0]):
            basis = key[0]
            times = sorted(obs, key=lambda t: (t is not None, t or 0))
            prev: dict | None = None
            for n, ts in enumerate(times):
                member, items = obs[ts]
                out = []
                for it, line in items.items():
                    if prev is None:
                        out.append((it, True, "first", line))
                    elif it not in prev:
                        out.append((it, True, "joined", line))
                if prev is not None:
                    out += [(it, False, "left", None) for it in prev if it not in items]
                if n == len(times) - 1 and n > 0:
                    out += [(it, True, "last", line) for it, line in items.items() if it in prev]
                # the reads around a change bound when it happened (clock matching reads them)
                before = times[n - 1] if n > 0 else None
                after = times[n + 1] if n + 1 < len(times) else None
                for (cg, ctrl, pid, tid), present, change, line in out:
                    if rows >= MAX_ROWS:
                        self.sink.issue("limit", f"more than {MAX_ROWS} membership changes: the rest are not kept")
                        return rows
                    if tid is not None and pid is None and tid in procs:
                        pid = tid
                    add("members", host=None, cgroup=cg, controller=ctrl, ts_raw_ns=ts, pid=pid, tid=tid,
                        present=present, change=change, basis=basis, file=member, line=line,
                        prev_read_ns=before if change in ("joined", "left") else None,
                        next_read_ns=after if change in ("joined", "left") else None)
                    rows += 1
                prev = items
        return rows

    def _event(self, **row) -> bool:
        if self.sink.counts["events"] >= MAX_EVENTS:
            return False
        self.sink.event(**row)
        return True

    def _states(self) -> int:
        n = 0
        for pid, seen in sorted(self.status.items()):
            prev = None
            for ts, member, line, text, attrs in sorted(seen, key=lambda r: (r[0] is not None, r[0] or 0)):
                if prev is not None and attrs["state"] == prev["state"]:
                    continue
                a = dict(attrs, file=member, first=prev is None)
                if prev is not None:
                    a["prev_state"], a["prev_state_word"] = prev["state"], prev.get("state_word")
                word = attrs.get("state_word") or attrs["state"]
                a["summary"] = (f"pid {pid}" + (f" ({attrs['name']})" if attrs.get("name") else "") + f" {word}"
                                + (f" (was {prev.get('state_word') or prev['state']})" if prev else ""))
                if not self._event(pid=pid, ts_raw_ns=ts, category="proc", name="proc_state", line=line,
                                   text=text, attrs=a):
                    return n
                n += 1
                prev = attrs
        return n

    def _freezer(self, rows: list[tuple]) -> int:
        by: dict[tuple, list] = {}
        for ent, ctrl, ts, v, member, line, text in rows:
            by.setdefault((ent, ctrl), []).append((ts, v, member, line, text))
        n = 0
        for (ent, ctrl), seen in sorted(by.items()):
            prev = None
            for ts, v, member, line, text in sorted(seen, key=lambda r: (r[0] is not None, r[0] or 0)):
                if v == prev or (prev is None and v == 0.0):
                    prev = v
                    continue
                name = {1.0: "cgroup_frozen", 0.5: "cgroup_freezing", 0.0: "cgroup_thawed"}[v]
                a = {"cgroup": ent, "controller": ctrl, "state": _FREEZER_WORDS[v], "file": member,
                     "first": prev is None, "summary": f"cgroup {ent} {_FREEZER_WORDS[v].lower()}"}
                if prev is not None:
                    a["prev_state"] = _FREEZER_WORDS[prev]
                if not self._event(ts_raw_ns=ts, category="cgroup", name=name, line=line, text=text, attrs=a):
                    return n
                n += 1
                prev = v
        return n

    def _settings(self) -> int:
        n = 0
        for (ent, name), seen in sorted(self.settings.items()):
            prev = None
            for ts, member, line, text in sorted(seen, key=lambda r: (r[0] is not None, r[0] or 0)):
                if text == prev:
                    continue
                self.sink.fact(name, f"{ent}: {text}", line=line)
                n += 1
                prev = text
        return n


def freezing_value(frozen: float, requested: float | None) -> float:
    """A v2 cgroup's freezer value: asked to freeze (cgroup.freeze 1) but not frozen yet is 0.5."""
    return 0.5 if frozen == 0.0 and requested == 1.0 else frozen
