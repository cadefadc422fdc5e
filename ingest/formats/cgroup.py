"""cgroup, pressure and host metric snapshots -> time series (``kind`` = ``cgroup``).

There is no standard snapshot file (reference/FORMATS.md §5.3), so four layouts that
collectors really write are read, each into the same metric rows (``_cgroup_table`` maps
every file and key to a canonical metric, unit and counter/gauge kind):

1. ``cgroup_snapshots`` — a folder per snapshot named by its time (epoch seconds with a
   fraction, or ISO 8601), holding verbatim copies, possibly nested by controller and
   cgroup path (``vm/cgroup/1795958904.409226/cpu/aftertrace_job/cpu.stat``,
   ``<time>/kubepods.slice/.../memory.events``, ``<time>/proc/pressure/cpu``). A *group*
   parser: every known file under the time-named folders of one parent folder is one
   source whose path is that parent (``vm/cgroup/``); its members are listed in
   ``attrs`` (snapshot folder names x the file paths inside them).
2. ``cgroup_concat`` — one text file of blocks headed ``==> path <==`` (``tail -n +1`` /
   ``head``), or ``### path @ time``, with a time line (``date +%s.%N``, ``date``,
   ``date --iso-8601=ns``) before each round of blocks.
3. ``cgroup_jsonl`` — JSON lines ``{"t_real_ns"|"ts", "cgroup"|"path", "file", "raw"}``.
4. ``cgroup_tree`` — a single point-in-time copy of ``/sys/fs/cgroup`` (and ``/proc``
   files) as sosreport makes it (``.../sys/fs/cgroup/<controller>/<group>/<file>``): a
   group parser; its one time comes from the bundle — a ``date`` file in the copy's root
   folder or above it (read with the host-info date grammars) — or, without one, the
   values are kept with no time and the source says so.

Clock: snapshot names and time lines are the host's CLOCK_REALTIME -> domain ``wall``.
Local times without a zone are read in the bundle's time zone.

Rows: raw metrics (units normalised: ns, bytes, counts, percent) and the derived series
of ``_cgroup_table`` (rates per second, throttled fraction, cores used, PSI stall %,
memory growth and headroom, failcnt/oom deltas); counter resets are detected and counted
(``attrs.counter_resets``). Membership, process states, freezing and settings become
``members`` rows, ``proc_state`` / ``cgroup_frozen`` ... events and facts
(``_cgroup_state``). Lines that do not fit their file's grammar are parse issues naming the
member file and its line; parsing goes on. A file of the series that no reader knows is one
``not_read`` issue per file name with the number of snapshots that hold it, never a source
of its own.

Evidence: the ``metrics`` table has no line column, so :func:`evidence` re-reads the
members: it runs the same layout iterator over the files (``attrs.disk``) restricted to
the wanted snapshot times and returns the raw lines, each with its member file and line.
"""
from __future__ import annotations

import functools
import os
import re
from collections import Counter
from typing import Callable, Iterable

from ..model import CLOCK_NONE, CLOCK_WALL
from ..reader import Head
from ..registry import Group, GroupParser, ParseContext, Parser, read_group
from ._cgroup_state import SeriesState, freezing_value
from ._cgroup_read import (TS_EPOCH, TS_ISO, Block, concat_blocks, derive, disk_root, header_time,
                           jsonl_blocks, may_give, metric_frame, parse_block, parse_time_name, read_member, resolve,
                           snapshot_blocks)

MAX_MEMBER_BYTES = 4 * 1024 * 1024       # a snapshot file larger than this is not a cgroup file
MAX_UNKNOWN_NAMES = 200                  # distinct names of unread files reported one by one
DATE_FILES = re.compile(r"^date(?:[._-].*)?$")


class _Collector:
    """Column buffers for one source; blocks in, metric rows + members/events/facts + issues out."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.ent: list = []
        self.met: list = []
        self.ts: list = []
        self.val: list = []
        self.unit: list = []
        self.files: Counter = Counter()
        self.times: set = set()
        self.blocks = 0
        self.state = SeriesState(ctx.sink)
        # freezer.frozen rows: (row index, controller, member, line, text); (entity, ts) -> cgroup.freeze
        self.frozen: list[tuple] = []
        self.freeze_req: dict[tuple, float] = {}
        # files no reader knows: name -> [copies, first path in the bundle, snapshot times]
        self.unknown: dict[str, list] = {}

    def bad(self, member: str, lineno: int | None, text: str, why: str) -> None:
        where = "" if member == self.ctx.rel else f"{member}: " if lineno is None else f"{member}:{lineno}: "
        self.ctx.sink.issue("bad_line", f"{where}{why}", line=lineno, text=text)

    def not_read(self, member: str, path: str, ts: int | None = None) -> None:
        """A file of the series that no reader knows: counted by its name, reported once."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name.isdigit():
            name = path          # (a bare number is a folder-less path part: keep the whole)
        u = self.unknown.get(name)
        if u is None:
            if len(self.unknown) >= MAX_UNKNOWN_NAMES:
                name = "(other names)"
                u = self.unknown.setdefault(name, [0, member, set()])
            else:
                u = self.unknown[name] = [0, member, set()]
        u[0] += 1
        if ts is not None and len(u[2]) < 1_000_000:
            u[2].add(ts)

    def add(self, b: Block) -> None:
        rows, bad = parse_block(b.fid, b.lines)
        self.blocks += 1
        self.files[b.fid.name] += 1
        if b.ts_ns is not None:
            self.times.add(b.ts_ns)
        for i, why in bad:
            self.bad(b.member, b.first_line + i, b.lines[i], why)
        self.state.add(b)
        for ent, met, v, u, i in rows:
            if met == "freezer.frozen":
                self.frozen.append((len(self.val), b.fid.controller, b.member, b.first_line + i, b.lines[i]))
            elif met == "freezer.freeze_requested":
                self.freeze_req[(ent, b.ts_ns)] = v
            self.ent.append(ent)
            self.met.append(met)
            self.ts.append(b.ts_ns)
            self.val.append(v)
            self.unit.append(u)

    def _freezer_rows(self) -> list[tuple]:
        out = []
        for idx, ctrl, member, line, text in self.frozen:
            ent, ts = self.ent[idx], self.ts[idx]
            v = self.val[idx] = freezing_value(self.val[idx], self.freeze_req.get((ent, ts)))
            out.append((ent, ctrl, ts, v, member, line, text))
        return out

    def _report_unknown(self) -> None:
        for name, (n, example, times) in sorted(self.unknown.items(), key=lambda kv: -kv[1][0]):
            where = f"{len(times)} snapshots hold" if len(times) > 1 else f"{n} cop{'ies' if n > 1 else 'y'} of"
            self.ctx.sink.issue("not_read", f"{where} {name!r}, not read: aftertrace has no reader for this file "
                                            f"(first: {example})", text=example)
        if self.unknown:
            self.ctx.attrs["not_read"] = {k: v[0] for k, v in sorted(self.unknown.items())}

    def close(self) -> None:
        ctx = self.ctx
        ctx.attrs.update(self.state.close(self._freezer_rows()))
        self._report_unknown()
        ctx.sink.add_frame("metrics", metric_frame({"entity": self.ent, "metric": self.met, "ts_raw_ns": self.ts,
                                                    "value": self.val, "unit": self.unit}))
        d, resets = derive(self.ent, self.met, self.ts, self.val)
        if d:
            ctx.sink.add_frame("metrics", metric_frame(d))
        ctx.clock_domain = CLOCK_WALL
        a = ctx.attrs
        a["blocks"] = self.blocks
        a["files"] = dict(sorted(self.files.items()))
        a["snapshots"] = len(self.times)
        if self.times:
            a["first_ns"], a["last_ns"] = min(self.times), max(self.times)
        a["entities"] = sorted(set(self.ent))[:200]
        a["counter_resets"] = len([r for r in resets if "more" not in r]) + sum(r.get("more", 0) for r in resets)
        if resets:
            a["counter_reset_examples"] = resets[:10]
        if self.ts and not self.times:
            ctx.truncated = "no time for these values (no time-named folder, header or date file); " \
                            "they are kept without time"


def _time_name(name: str) -> bool:
    """Whether a folder name is a snapshot time."""
    return bool(TS_EPOCH.match(name) or TS_ISO.match(name)) and parse_time_name(name) is not None


def _ts_part(parts: list[str], is_time: Callable[[str], bool] = _time_name) -> int | None:
    """Index of the snapshot-time folder in a member path (the last one that looks like a time)."""
    for i in range(len(parts) - 2, -1, -1):
        if is_time(parts[i]):
            return i
    return None


def _known(path: str) -> bool:
    """Whether the table knows the file at ``path`` (see ``resolve``)."""
    return resolve(path) is not None


class CgroupSnapshotsParser(GroupParser):
    name = "cgroup_snapshots"
    kind = "cgroup"
    priority = 60
    clock_domain = CLOCK_WALL
    description = "folders of cgroup/proc file copies named by their snapshot time (one source per series)"

    @classmethod
    def claim(cls, files: list[tuple[str, str]], detect=None) -> list[Group]:
        """Every file under the time-named folders of a parent that holds at least one file the
        table knows. A file no reader knows is claimed too (and reported once per name by the
        parse) unless it is larger than a cgroup file can be, or ``detect(rel, disk)`` says a
        per-file parser reads it (asked once per file name and series)."""
        groups: dict[str, list] = {}
        others: dict[str, list] = {}
        # (each verdict remembered for this claim: the folder names and the paths under each snapshot
        # recur in the paths of all its files, 100,000 in a bundle of 512 ranks)
        is_time, known = functools.cache(_time_name), functools.cache(_known)
        for rel, disk in files:
            parts = rel.split("/")
            i = _ts_part(parts, is_time)
            if i is None:
                continue
            key = "/".join(parts[:i]) + "/"
            (groups if known("/".join(parts[i + 1:])) else others).setdefault(key, []).append((rel, disk))
        for key, extra in others.items():
            if key not in groups:
                continue
            verdict: dict[str, bool] = {}
            for rel, disk in extra:
                name = rel.rsplit("/", 1)[-1]
                try:
                    if os.path.getsize(disk) > MAX_MEMBER_BYTES:
                        continue
                except OSError:
                    continue
                if name not in verdict:
                    verdict[name] = detect is None or not detect(rel, disk)
                if verdict[name]:
                    groups[key].append((rel, disk))
        out = []
        for key, members in sorted(groups.items()):
            members.sort()
            out.append(Group(rel=key if key != "/" else "./", members=members, root=disk_root(members, key),
                             extra={"layout": "snapshots", "prefix": len(key) if key != "/" else 0}))
        return out

    def parse(self, ctx: ParseContext) -> None:
        g = read_group(ctx)
        col = _Collector(ctx)
        prefix = g["extra"]["prefix"]
        limit = min(MAX_MEMBER_BYTES, ctx.max_bytes or MAX_MEMBER_BYTES)
        nbytes = 0
        dirs: dict[str, None] = {}
        inner: dict[str, None] = {}
        for b in snapshot_blocks(g["members"], prefix, ctx.time_zone, limit=limit,
                                 on_error=lambda rel, why: col.bad(rel, None, "", why),
                                 on_unknown=col.not_read):
            col.add(b)
            nbytes += sum(len(x) + 1 for x in b.lines)
            tname, _, path = b.member[prefix:].partition("/")
            dirs[tname] = None
            inner[path] = None
        ctx.bytes_read = nbytes
        col.close()
        # members = snapshot folders x file paths inside them (those present are the ones read)
        ctx.attrs.update({"layout": "snapshot folders", "disk": os.path.abspath(g["root"]), "members": len(g["members"]),
                          "snapshot_dirs": list(dirs), "member_paths": list(inner)})


def _date_file(root_rel: str, by_dir: dict[str, list[tuple[str, str]]]) -> tuple[str, str] | None:
    """A ``date`` file in the copy's root folder or the nearest folder above it."""
    d = root_rel.rstrip("/")
    while True:
        for rel, disk in by_dir.get(d, []):
            if DATE_FILES.match(rel.rsplit("/", 1)[-1]):
                return rel, disk
        if not d:
            return None
        d = d.rsplit("/", 1)[0] if "/" in d else ""


class CgroupTreeParser(GroupParser):
    name = "cgroup_tree"
    kind = "cgroup"
    priority = 50
    clock_domain = CLOCK_WALL
    description = "a point-in-time copy of /sys/fs/cgroup (and /proc pressure, meminfo, loadavg, status)"

    @classmethod
    def claim(cls, files: list[tuple[str, str]], detect=None) -> list[Group]:
        """Files under ``sys/fs/cgroup/`` (all of them: a file the table does not know is reported
        once per name by the parse; one larger than a cgroup file can be is left alone), and the
        files under a ``proc/`` folder that the table knows."""
        groups: dict[str, list] = {}
        by_dir: dict[str, list] = {}
        known: set[str] = set()
        resolves = functools.cache(_known)     # (the same paths recur under each copy's folder)
        for rel, disk in files:
            by_dir.setdefault(rel.rsplit("/", 1)[0] if "/" in rel else "", []).append((rel, disk))
            parts = rel.split("/")
            key = None
            for i in range(len(parts) - 3):
                if parts[i:i + 3] == ["sys", "fs", "cgroup"]:
                    key = "/".join(parts[:i + 3]) + "/"
                    break
            else:
                for i in range(len(parts) - 1):
                    if parts[i] == "proc" and resolves("/".join(parts[i:])):
                        key = "/".join(parts[:i + 1]) + "/"
                        break
            if key is None:
                continue
            if resolves(("proc/" if key.endswith("proc/") else "") + rel[len(key):]):
                known.add(key)
            elif key.endswith("proc/"):
                continue
            else:
                try:
                    if os.path.getsize(disk) > MAX_MEMBER_BYTES:
                        continue
                except OSError:
                    continue
            groups.setdefault(key, []).append((rel, disk))
        groups = {k: v for k, v in groups.items() if k in known}
        out = []
        for key, members in sorted(groups.items()):
            members.sort()
            base = key[: -len("sys/fs/cgroup/")] if key.endswith("sys/fs/cgroup/") else key[: -len("proc/")]
            date = _date_file(base, by_dir)
            out.append(Group(rel=key, members=members, root=disk_root(members, key),
                             extra={"layout": "tree", "prefix": len(key), "proc": key.endswith("proc/"),
                                    "time_file": list(date) if date else None}))
        return out

    def parse(self, ctx: ParseContext) -> None:
        g = read_group(ctx)
        ex = g["extra"]
        col = _Collector(ctx)
        ts = None
        tf = ex.get("time_file")
        if tf:
            try:
                text = read_member(tf[1], 4096)
                lines = [ln for ln in text.splitlines() if ln.strip()]
                ts = header_time(lines[0], ctx.time_zone) if len(lines) == 1 else None
            except (OSError, ValueError):
                ts = None
            ctx.attrs["time_from"] = tf[0] if ts is not None else f"{tf[0]} (not understood)"
        col_paths = []
        nbytes = 0
        for rel, disk in g["members"]:
            path = ("proc/" if ex["proc"] else "") + rel[ex["prefix"]:]
            fid = resolve(path)
            if fid is None:
                col.not_read(rel, path)
                continue
            try:
                text = read_member(disk, MAX_MEMBER_BYTES)
            except (OSError, ValueError, EOFError) as e:
                col.bad(rel, None, "", f"cannot be read: {e}")
                continue
            nbytes += len(text)
            col.add(Block(ts, rel, 1, fid, text.splitlines()))
            col_paths.append(rel[ex["prefix"]:])
        ctx.bytes_read = nbytes
        col.close()
        ctx.attrs.update({"layout": "point-in-time copy", "disk": os.path.abspath(g["root"]), "members": len(g["members"]),
                          "member_paths": col_paths, "time_ns": ts})


def _first_lines(head: Head, n: int = 40) -> list[str]:
    return [ln for ln in head.lines if ln.strip()][:n]


class CgroupConcatParser(Parser):
    name = "cgroup_concat"
    kind = "cgroup"
    priority = 45
    clock_domain = CLOCK_WALL
    description = "concatenated snapshots: '==> path <==' (tail/head) or '### path @ time' blocks"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = _first_lines(head, 200)
        known = bad = 0
        for b in concat_blocks(enumerate(lines, 1), "", None,
                               on_bad=lambda *_: None):
            rows, errs = parse_block(b.fid, b.lines)
            known += bool(rows)
            bad += len(errs)
        return known >= 1 and bad <= known

    def parse(self, ctx: ParseContext) -> None:
        col = _Collector(ctx)
        for b in concat_blocks(ctx.lines(), ctx.rel, ctx.time_zone,
                               on_bad=lambda ln, text, why: col.bad(ctx.rel, ln, text, why),
                               on_unknown=col.not_read):
            col.add(b)
        col.close()
        ctx.attrs.update({"layout": "concatenated blocks", "disk": ctx.path})


class CgroupJsonlParser(Parser):
    name = "cgroup_jsonl"
    kind = "cgroup"
    priority = 45
    clock_domain = CLOCK_WALL
    description = "JSON lines {t_real_ns|ts, cgroup|path, file, raw}"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = _first_lines(head, 20)
        if not lines or not lines[0].lstrip().startswith("{"):
            return False
        if not head.complete:
            lines = lines[:-1] or lines    # the last line of a cut head may be cut
        errs: list = []
        blocks = list(jsonl_blocks(enumerate(lines, 1), "", None, on_bad=lambda *a: errs.append(a)))
        return len(blocks) >= 1 and len(errs) <= len(blocks) // 4

    def parse(self, ctx: ParseContext) -> None:
        col = _Collector(ctx)
        for b in jsonl_blocks(ctx.lines(), ctx.rel, ctx.time_zone,
                              on_bad=lambda ln, text, why: col.bad(ctx.rel, ln, text, why),
                              on_unknown=col.not_read):
            col.add(b)
        col.close()
        ctx.attrs.update({"layout": "JSON lines", "disk": ctx.path})


PSI_NAMES = ("cpu", "io", "memory", "irq")     # /proc/pressure/<name>, copied on its own
_COMMENT = re.compile(r"\s+#.*$")               # a note a person added after a value
MAX_SINGLE_LINES = 4096


def single_file_id(path: str, lines: list[str]):
    """What one cgroup or PSI file copied on its own is, from its name (``cpu.stat``,
    ``memory.events``, ``io.pressure``; a ``/proc/pressure`` file keeps its bare name, ``io``,
    so that name counts only with the PSI grammar). None: not such a file."""
    fid = resolve(path)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if fid is None and name in PSI_NAMES and lines and lines[0].startswith("some avg10="):
        fid = resolve(f"pressure/{name}")
    return fid


class CgroupFileParser(Parser):
    """One cgroup or PSI file on its own, named as the kernel names it: the name says which file
    it is, and its contents must fit that file's grammar (every line, once notes after a ``#``
    are dropped). There is no time: the values are one untimed snapshot (clock ``none``);
    ``analysis.detectors.snapshot_counters`` reads the counters that say something without one."""
    name = "cgroup_file"
    kind = "cgroup"
    priority = 44
    clock_domain = CLOCK_NONE
    description = "one cgroup or PSI file on its own (cpu.stat, memory.events, io.pressure, /proc/pressure/io, ...)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        if not head.complete:
            return False
        lines = [_COMMENT.sub("", ln) for ln in head.lines if ln.strip()]
        if not lines or len(lines) > MAX_SINGLE_LINES:
            return False
        fid = single_file_id(head.path, lines)
        if fid is None:
            return False
        rows, bad = parse_block(fid, lines)
        # a setting (cgroup.controllers, cpuset.cpus) or a member list has no metric rows: its
        # grammar is checked by the name alone, and what it says becomes a fact
        return (bool(rows) or fid.spec.grammar in ("setting", "pids", "tids")) and not bad

    def parse(self, ctx: ParseContext) -> None:
        lines = [_COMMENT.sub("", text) for _, text in ctx.lines()][:MAX_SINGLE_LINES]
        fid = single_file_id(ctx.rel, [ln for ln in lines if ln.strip()])
        col = _Collector(ctx)
        if fid is None:
            col.bad(ctx.rel, None, "", "not a cgroup or PSI file this reader knows")
        else:
            col.add(Block(None, ctx.rel, 1, fid, lines))
        col.close()
        ctx.truncated = None
        ctx.clock_domain = CLOCK_NONE
        ctx.attrs.update({"layout": "one file", "untimed": "one copy of the file, with no time: its counters "
                                                            "say what happened since the cgroup began, not when"})


# -- evidence -------------------------------------------------------------------------
def _blocks_of(attrs: dict, source: str, want_ts: set[int], zone: str | None,
               wanted: set[tuple[str, str]] | None = None) -> Iterable[Block]:
    """The copies of the files at the times ``want_ts``; of a series of snapshot folders only
    the files that can hold one of the ``wanted`` (entity, metric) values (all: None)."""
    disk = attrs.get("disk")
    if not disk or not os.path.exists(disk):
        return []
    layout = attrs.get("layout")
    if layout == "snapshot folders":
        prefix = len(source) if source != "./" else 0
        names = [d for d in attrs.get("snapshot_dirs", []) if parse_time_name(d, zone) in want_ts]
        paths = attrs.get("member_paths", [])
        if wanted is not None:
            paths = [p for p in paths if (fid := resolve(p)) is not None and any(
                may_give(fid, ent, met) for ent, met in wanted)]
        members = [(f"{source if source != './' else ''}{d}/{p}", os.path.join(disk, d, p))
                   for d in names for p in paths if os.path.exists(os.path.join(disk, d, p))]
        return snapshot_blocks(members, prefix, zone)
    if layout == "point-in-time copy":
        proc = source.endswith("proc/")
        return [Block(attrs.get("time_ns"), source + p, 1, resolve(("proc/" if proc else "") + p),
                      read_member(os.path.join(disk, p)).splitlines())
                for p in attrs.get("member_paths", []) if os.path.exists(os.path.join(disk, p))]

    def lines():
        with open(disk, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            import gzip
            data = gzip.decompress(data)
        for i, ln in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            yield i, ln
    if layout == "concatenated blocks":
        return (b for b in concat_blocks(lines(), source, zone) if b.ts_ns in want_ts)
    if layout == "JSON lines":
        return (b for b in jsonl_blocks(lines(), source, zone) if b.ts_ns in want_ts)
    return []


def evidence(source: str, attrs: dict, wanted: list[tuple[int, str, str]],
             zone: str | None = None) -> list[tuple[str, int, str]]:
    """Raw lines behind metric values: ``wanted`` = [(ts_raw_ns, entity, metric)] ->
    [(member path in the bundle, line, text)], in the order asked, each line once.

    Works for raw metrics (the line the value was read from). JSON-lines members give the
    object's line number and the raw line inside it.
    """
    want = {}
    for ts, ent, met in wanted:
        want.setdefault(ts, set()).add((ent, met))
    found: dict[tuple[int, str, str], tuple[str, int, str]] = {}
    for b in _blocks_of(attrs, source, set(want), zone, {(ent, met) for _, ent, met in wanted}):
        keys = want.get(b.ts_ns)
        if not keys or b.fid is None:
            continue
        rows, _ = parse_block(b.fid, b.lines)
        for ent, met, _, _, i in rows:
            if (ent, met) in keys and (b.ts_ns, ent, met) not in found:
                line = b.first_line if attrs.get("layout") == "JSON lines" else b.first_line + i
                found[(b.ts_ns, ent, met)] = (b.member, line, b.lines[i])
    out, seen = [], set()
    for k in wanted:
        e = found.get(k)
        if e and e not in seen:
            seen.add(e)
            out.append(e)
    return out


PARSERS = (CgroupSnapshotsParser, CgroupTreeParser, CgroupConcatParser, CgroupJsonlParser, CgroupFileParser)
