"""The collector's manifest (``aftertrace-manifest.json``, ``"schema": "aftertrace.collect/1"``).

``aftertrace collect`` (ingest/collect/writer.py) writes one per bundle: the job it watched and
how it ended, why the bundle was written (trigger reasons), the ranks and the processes of the
job with the times it saw them, the cgroups it snapshotted, the hosts with their paths. The
service also reads it before the parse for host attribution and the time zone
(server/service.py); this parser makes what it states rows like any other source's:

* ``events`` (category ``collector``), times in UTC as the collector wrote them (``wall``):
  - ``job_failure`` (kind ``job_failure``) at ``job.ended`` when ``job.exit_code`` is not 0
    or ``job.signal`` is set; ``job_ended`` (no kind) when the job ended with code 0.
    attrs: exit_code, signal, status, pid, launcher_pid, mode, command, started, ended;
    text: the JSON of those fields; pid: the launcher's.
  - ``trigger`` per ``trigger.reasons[]`` (kind ``job_hang`` for the hang watchdog's, ``hang``:
    no output from the job for ``--hang-after``): attrs kind, detail, line (the output line that
    matched, when one did); text: that line or the detail.
  - ``capture`` per ``captured[]`` entry taken at a moment (``time_ns``: stack dumps, traces of a
    few seconds, /proc copies, df): attrs what, path, count, tool, seconds (a trace's length, its
    duration); text: what and where.
  - per rank: ``proc_seen_alive`` at ``ranks.<r>.last_seen_alive``, and ``proc_ended`` when
    ``ranks.<r>.ended`` is true, at the collector's ``processes[].ended_ns`` of that pid (null
    time when it did not record one; attrs.after then holds last_seen_alive).
    attrs: rank, pid, comm, ppid, local_rank, first_seen, last_seen_alive.
* ``facts``: ``rank_pid`` (value ``<rank>=<pid>``, host = the rank's host), per host
  ``boot_id`` and ``kernel``, ``collector_version``.
* ``members`` (basis ``manifest``): for every cgroup the collector names (``captured[].cgroups``
  and ``collector.cgroup_folders``) and every process of the job it saw (``processes[]``, and
  the ranks), a ``first`` row at the time it first saw the process and a ``last`` row at the
  time it last saw it alive. The collector snapshots the cgroups that the job's processes
  were in (or those named with ``--cgroup``); which process was in which of them it does not
  state: these rows say "a process of the job, while the job's cgroups were these".

Every field is type-checked: one of the wrong type is a parse issue naming its JSON path and
line, and the rest is read. A manifest cut or damaged in the middle keeps the top-level keys
before the damage (the collector writes job, trigger, hosts, ranks before the long lists) and is
partial, naming the line; bytes that are not UTF-8 are replaced and named. Not a JSON object,
or larger than :data:`MAX_BYTES`, fails the source with the reason. Line numbers come from a
token scan of the text (:func:`key_lines`).
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..collect.schema import MANIFEST_NAME, SCHEMA
from ..model import CLOCK_WALL
from ..reader import STREAM_ENDS, Head
from ..registry import ParseContext, Parser
from ._cgroup_read import json_time, resolve

_SCHEMA_TEXT = f'"{SCHEMA}"'      # the schema's value as a JSON string without escapes
MAX_BYTES = 32 << 20
MAX_PROCS = 4096
MAX_CGROUPS = 256
MAX_RANKS = 65536
MAX_TEXT = 2000


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def schema_of(text: str) -> str | None:
    """The top-level ``schema`` value of a JSON object text, read key by key so that a head cut in
    the middle still answers when ``schema`` comes before the cut (the collector writes it first).
    None: not a JSON object, or no ``schema`` before the end or the cut."""
    dec = json.JSONDecoder()
    i = _ws(text, 0)
    if not text.startswith("{", i):
        return None
    i += 1
    try:
        for _ in range(10_000):
            i = _ws(text, i)
            if text.startswith("}", i):
                return None
            key, i = dec.raw_decode(text, i)
            i = _ws(text, i)
            if not isinstance(key, str) or not text.startswith(":", i):
                return None
            val, i = dec.raw_decode(text, _ws(text, i + 1))
            if key == "schema":
                return val if isinstance(val, str) else None
            i = _ws(text, i)
            if text.startswith(",", i):
                i += 1
            elif not text.startswith("}", i):
                return None
    except (ValueError, RecursionError):
        return None
    return None


_TOK = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\],:]|-?\d[\d.eE+-]*|true|false|null')
MAX_DEPTH = 3


def read_object(text: str) -> tuple[dict, tuple[int, str] | None]:
    """The top-level keys of a JSON object text up to where it breaks, and where (offset, why) it
    does: a manifest cut mid-write (or damaged in its middle) keeps the keys written before the
    damage. Raises ValueError when the text is not a JSON object at all."""
    dec = json.JSONDecoder()
    out: dict = {}
    i = _ws(text, 0)
    if not text.startswith("{", i):
        raise ValueError("the manifest is not a JSON object")
    i += 1
    while True:
        i = _ws(text, i)
        if text.startswith("}", i):
            end = _ws(text, i + 1)
            return out, (None if end == len(text) else (end, "text after the object"))
        try:
            key, j = dec.raw_decode(text, i)
            if not isinstance(key, str):
                return out, (i, "expected a key")
            j = _ws(text, j)
            if not text.startswith(":", j):
                return out, (j, "expected ':'")
            val, j = dec.raw_decode(text, _ws(text, j + 1))
        except json.JSONDecodeError as e:
            return out, (e.pos, e.msg)
        except (ValueError, RecursionError) as e:
            return out, (i, f"{type(e).__name__}: {str(e)[:100]}")
        out[key] = val
        i = _ws(text, j)
        if text.startswith(",", i):
            i += 1
        elif not text.startswith("}", i):
            return out, (i, "expected ',' or '}'" if i < len(text) else "the text ends inside the object")


def key_lines(text: str, max_paths: int = 200_000) -> dict[tuple, int]:
    """1-based line of each JSON path down to :data:`MAX_DEPTH` (``("ranks", "0")``,
    ``("trigger", "reasons", 1)``): where its key, or for array items its value, starts."""
    out: dict[tuple, int] = {}
    stack: list[list] = []        # [kind '{' | '[', current key or index, expecting a key]
    line, last = 1, 0
    for m in _TOK.finditer(text):
        pos, tok = m.start(), m.group()
        line += text.count("\n", last, pos)
        last = pos
        top = stack[-1] if stack else None
        if tok == "{" or tok == "[":
            if top is not None and top[0] == "[" and len(stack) <= MAX_DEPTH:
                out.setdefault(tuple(s[1] for s in stack), line)
            stack.append([tok, 0 if tok == "[" else None, tok == "{"])
        elif tok == "}" or tok == "]":
            if stack:
                stack.pop()
        elif tok == ",":
            if top is not None:
                if top[0] == "[":
                    top[1] += 1
                else:
                    top[2] = True
        elif tok == ":":
            if top is not None:
                top[2] = False
        elif top is not None and top[0] == "{" and top[2] and tok[0] == '"':
            try:
                top[1] = json.loads(tok)
            except ValueError:
                top[1] = tok
            if len(stack) <= MAX_DEPTH:
                out.setdefault(tuple(s[1] for s in stack), line)
        elif top is not None and top[0] == "[" and len(stack) <= MAX_DEPTH:
            out.setdefault(tuple(s[1] for s in stack), line)
        if len(out) >= max_paths:
            break
    return out


class _Reader:
    """Typed access to the manifest: a wrong type is an issue with its path and line."""

    def __init__(self, ctx: ParseContext, lines: dict[tuple, int]):
        self.ctx = ctx
        self.lines = lines

    def line(self, path: tuple) -> int | None:
        for n in range(len(path), 0, -1):
            ln = self.lines.get(path[:n])
            if ln is not None:
                return ln
        return None

    def get(self, obj: dict, key: str, types, path: tuple, required: bool = False):
        v = obj.get(key)
        if v is None:
            if required:
                self.bad(path + (key,), "missing")
            return None
        if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            ok = False
        else:
            ok = isinstance(v, types)
        if not ok:
            want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            self.bad(path + (key,), f"expected {want}, found {type(v).__name__}", v)
            return None
        return v

    def bad(self, path: tuple, why: str, value: Any = None) -> None:
        name = ".".join(str(p) for p in path)
        text = None if value is None else json.dumps(value, default=str)[:200]
        self.ctx.sink.issue("bad_field", f"{name}: {why}", line=self.line(path), text=text)

    def time(self, obj: dict, key: str, path: tuple) -> int | None:
        v = self.get(obj, key, (str, int, float), path)
        if v is None:
            return None
        t = json_time(v, "UTC")
        if t is None or not 0 < t < 1 << 62:
            self.bad(path + (key,), "not a time", v)
            return None
        return t


def _fragment(d: dict, keys) -> str:
    return json.dumps({k: d[k] for k in keys if k in d}, default=str)[:MAX_TEXT]


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 62 else None


class CollectManifestParser(Parser):
    name = "collect_manifest"
    kind = "host_info"
    emits = frozenset({"job_failure", "job_hang"})
    reads_lines = False
    priority = 90
    clock_domain = CLOCK_WALL
    description = f"aftertrace collect's manifest ({MANIFEST_NAME}, schema {SCHEMA})"

    @classmethod
    def detect(cls, head: Head) -> bool:
        # Decoding a head key by key is costly for the large JSON files of a bundle (traces). The
        # schema's value is in the text as written unless a JSON escape spells it, and only ``\/``
        # and ``\uXXXX`` stand for its characters: a head with neither the value nor such an
        # escape is no manifest. (A text without any backslash is told apart fastest.)
        text = head.text
        if _SCHEMA_TEXT not in text and ("\\" not in text or ("\\u" not in text and "\\/" not in text)):
            return False
        return schema_of(text) == SCHEMA

    def parse(self, ctx: ParseContext) -> None:
        limit = min(MAX_BYTES, ctx.max_bytes or MAX_BYTES)
        stream = ctx.open()
        chunks, n = [], 0
        try:
            while n <= limit:
                c = stream.read1(min(1 << 20, limit + 1 - n))
                if not c:
                    break
                chunks.append(c)
                n += len(c)
        except STREAM_ENDS as e:        # a cut or damaged .gz: the bytes before it are read
            ctx.stream_error = e
        finally:
            stream.close()
        data = b"".join(chunks)
        ctx.bytes_read = len(data)
        if len(data) > limit:
            raise ValueError(f"the manifest is larger than {limit} bytes; not read")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            ctx.sink.issue("undecodable", "not valid UTF-8; bad bytes replaced", line=data.count(b"\n", 0, e.start) + 1,
                           text=data[max(0, e.start - 60):e.start + 60].decode("utf-8", "replace"))
            text = data.decode("utf-8", "replace")
        man, broken = read_object(text)
        if broken is not None:
            at, why = broken
            line = text.count("\n", 0, at) + 1
            ctx.sink.issue("bad_json", f"not valid JSON from here on ({why}); the keys before it are read",
                           line=line, text=text[at:at + 200])
            ctx.truncated = (f"the manifest is cut or damaged at line {line} ({why}); "
                             f"{len(man)} top-level keys before it were read")
        r = _Reader(ctx, key_lines(text))
        ctx.clock_domain = CLOCK_WALL
        ctx.format = self.name
        hosts = self._hosts(r, man)
        only = next(iter(hosts)) if len(hosts) == 1 else None
        ctx.host = only
        procs = self._processes(r, man)
        ranks = self._ranks(r, man, only, procs)
        n_job = self._job(r, man, only)
        n_trig = self._triggers(r, man, only)
        n_cap = self._captures(r, man, hosts, only)
        cgroups = self._cgroups(r, man, hosts, only)
        n_members = self._members(r, cgroups, procs, ranks)
        col = r.get(man, "collector", dict, ())
        if col and isinstance(col.get("version"), str):
            ctx.sink.fact("collector_version", col["version"][:100], line=r.line(("collector", "version")))
        ctx.attrs.update({"schema": SCHEMA, "hosts": sorted(hosts)[:100], "ranks": len(ranks),
                          "processes": len(procs), "job_events": n_job, "triggers": n_trig, "captures": n_cap,
                          "cgroups": [f"{c}:{g}" for _, c, g in cgroups][:100], "members_rows": n_members})

    # -- parts -------------------------------------------------------------------------
    def _hosts(self, r: _Reader, man: dict) -> dict[str, dict]:
        out = {}
        hosts = r.get(man, "hosts", dict, ())
        for h, v in list((hosts or {}).items())[:1000]:
            if not isinstance(v, dict):
                r.bad(("hosts", h), f"expected object, found {type(v).__name__}", v)
                continue
            out[h] = v
            for key in ("boot_id", "kernel"):
                val = r.get(v, key, str, ("hosts", h))
                if val:
                    r.ctx.sink.fact(key, val[:200], line=r.line(("hosts", h, key)), host=h)
        return out

    def _processes(self, r: _Reader, man: dict) -> dict[int, dict]:
        """pid -> {first_ns, last_ns, ended_ns, comm, line} from ``processes[]``."""
        out: dict[int, dict] = {}
        procs = r.get(man, "processes", list, ())
        for i, p in enumerate((procs or [])[:MAX_PROCS]):
            path = ("processes", i)
            if not isinstance(p, dict):
                r.bad(path, f"expected object, found {type(p).__name__}", p)
                continue
            pid = _int(r.get(p, "pid", int, path, required=True))
            if pid is None:
                continue
            out[pid] = {"first_ns": _int(r.get(p, "first_seen_ns", int, path)),
                        "last_ns": _int(r.get(p, "last_seen_ns", int, path)),
                        "ended_ns": _int(r.get(p, "ended_ns", int, path)),
                        "comm": r.get(p, "comm", str, path), "line": r.line(path)}
        if procs and len(procs) > MAX_PROCS:
            r.bad(("processes",), f"{len(procs)} processes: only the first {MAX_PROCS} are read")
        return out

    def _ranks(self, r: _Reader, man: dict, only: str | None, procs: dict[int, dict]) -> dict[int, dict]:
        out: dict[int, dict] = {}
        ranks = r.get(man, "ranks", dict, ())
        sink = r.ctx.sink
        for key, v in list((ranks or {}).items())[:MAX_RANKS]:
            path = ("ranks", key)
            if not (isinstance(key, str) and key.isdigit() and len(key) <= 9):
                r.bad(path, "a rank is a number")
                continue
            if not isinstance(v, dict):
                r.bad(path, f"expected object, found {type(v).__name__}", v)
                continue
            rank = int(key)
            pid = _int(r.get(v, "pid", int, path, required=True))
            host = r.get(v, "host", str, path) or only
            line = r.line(path)
            seen = r.time(v, "last_seen_alive", path)
            first = r.time(v, "first_seen", path)
            ended = r.get(v, "ended", bool, path)
            a = {"rank": rank, "pid": pid}
            for k, t in (("comm", str), ("ppid", int), ("local_rank", int), ("first_seen", str),
                         ("last_seen_alive", str)):
                val = r.get(v, k, t, path)
                if val is not None:
                    a[k] = val[:200] if isinstance(val, str) else val
            out[rank] = {"pid": pid, "host": host, "first_ns": first, "last_ns": seen, "line": line}
            if pid is None:
                continue
            sink.fact("rank_pid", f"{rank}={pid}", line=line, host=host)
            text = _fragment(v, ("pid", "comm", "ppid", "local_rank", "first_seen", "last_seen_alive", "ended"))
            who = f"rank {rank} (pid {pid})"
            if seen is not None:
                sink.event(host=host, rank=rank, pid=pid, ts_raw_ns=seen, category="collector",
                           name="proc_seen_alive", line=line, text=text,
                           attrs=dict(a, summary=f"{who} last seen alive by aftertrace collect"))
            if ended:
                ended_ns = procs.get(pid, {}).get("ended_ns")
                extra = {} if ended_ns is not None else {"after": a.get("last_seen_alive")}
                sink.event(host=host, rank=rank, pid=pid, ts_raw_ns=ended_ns, category="collector",
                           name="proc_ended", line=line, text=text,
                           attrs=dict(a, **extra, summary=f"{who} ended (seen by aftertrace collect)"))
        return out

    def _job(self, r: _Reader, man: dict, only: str | None) -> int:
        job = r.get(man, "job", dict, ())
        if not job:
            return 0
        path = ("job",)
        ended = r.time(job, "ended", path)
        code = r.get(job, "exit_code", int, path)
        sig = r.get(job, "signal", (int, str), path)
        status = r.get(job, "status", str, path)
        pid = _int(r.get(job, "pid", int, path))
        launcher = r.get(job, "launcher", dict, path) or {}
        lpid = _int(r.get(launcher, "pid", int, path + ("launcher",))) or pid
        cmd = r.get(job, "command", list, path)
        command = " ".join(str(c) for c in cmd)[:300] if cmd else None
        if ended is None and code is None and sig is None:
            return 0           # still running when the bundle was written
        failed = (code is not None and code != 0) or sig is not None
        how = status or (f"signal {sig}" if sig is not None else f"exit code {code}")
        what = f"the job ({command[:80] + ('…' if len(command) > 80 else '')})" if command else "the job"
        attrs = {"exit_code": code, "signal": sig, "status": status, "pid": pid, "launcher_pid": lpid,
                 "mode": r.get(job, "mode", str, path), "command": command,
                 "started": r.get(job, "started", str, path), "ended": r.get(job, "ended", str, path),
                 "summary": f"aftertrace collect: {what} ended with {how}"}
        r.ctx.sink.event(host=only, pid=lpid, ts_raw_ns=ended, category="collector",
                         name="job_failure" if failed else "job_ended", kind="job_failure" if failed else None,
                         severity="error" if failed else "info", line=r.line(path),
                         text=_fragment(job, ("pid", "started", "ended", "status", "exit_code", "signal")),
                         attrs=attrs)
        return 1

    def _triggers(self, r: _Reader, man: dict, only: str | None) -> int:
        trig = r.get(man, "trigger", dict, ())
        reasons = r.get(trig or {}, "reasons", list, ("trigger",)) or []
        n = 0
        for i, x in enumerate(reasons[:1000]):
            path = ("trigger", "reasons", i)
            if not isinstance(x, dict):
                r.bad(path, f"expected object, found {type(x).__name__}", x)
                continue
            kind = r.get(x, "kind", str, path)
            detail = r.get(x, "detail", str, path)
            line = r.get(x, "line", str, path)
            ts = r.time(x, "time_ns", path)
            attrs = {"kind": kind, "detail": detail and detail[:MAX_TEXT], "line": line and line[:MAX_TEXT],
                     "summary": f"collector trigger ({kind or 'unknown'}): {(detail or '')[:300]}"}
            # (a hang watchdog's trigger is the collector's judgement that the job stopped: the end
            # that a bundle taken during a hang has, in place of a failure report)
            r.ctx.sink.event(host=only, ts_raw_ns=ts, category="collector", name="trigger", line=r.line(path),
                             kind="job_hang" if kind == "hang" else None,
                             text=(line or detail or json.dumps(x, default=str))[:MAX_TEXT], attrs=attrs)
            n += 1
        return n

    def _captures(self, r: _Reader, man: dict, hosts: dict, only: str | None) -> int:
        """A ``capture`` event for each of ``captured[]`` taken at a moment (a dump of the live
        processes' stacks, a trace of some seconds, a copy of /proc): when the files under its path
        show the job as it was."""
        n = 0
        for i, c in enumerate((r.get(man, "captured", list, ()) or [])[:1000]):
            if not isinstance(c, dict) or "time_ns" not in c:
                continue
            path = ("captured", i)
            ts = r.time(c, "time_ns", path)
            what, where = r.get(c, "what", str, path), r.get(c, "path", str, path)
            if ts is None or not what:
                continue
            count, secs = c.get("count"), c.get("seconds")
            secs = secs if isinstance(secs, (int, float)) and not isinstance(secs, bool) and 0 <= secs < 86400 else None
            host = next((h for h, v in hosts.items() if isinstance(v.get("paths"), list) and any(
                isinstance(p, str) and p and (where or "").startswith(p) for p in v["paths"])), only)
            r.ctx.sink.event(host=host, ts_raw_ns=ts, dur_ns=int(secs * 1e9) if secs is not None else None,
                             category="collector", name="capture", line=r.line(path),
                             text=f"{what[:200]} taken ({where or '?'}"
                                  + (f", {count}" if isinstance(count, int) and not isinstance(count, bool) else "") + ")",
                             attrs={"what": what[:200], "path": where and where[:MAX_TEXT],
                                    "count": count if isinstance(count, int) and not isinstance(count, bool) else None,
                                    "tool": c.get("tool") if isinstance(c.get("tool"), str) else None,
                                    "seconds": secs})
            n += 1
        return n

    def _cgroups(self, r: _Reader, man: dict, hosts: dict, only: str | None) -> list[tuple]:
        """(host, controller, cgroup) of every cgroup the collector names, as the series names them."""
        out: dict[tuple, None] = {}

        def add(rel: str, host: str | None, path: tuple) -> None:
            fid = resolve(rel.strip("/") + "/cgroup.procs")
            if fid is None or ".." in rel.split("/"):
                r.bad(path, "not a cgroup path", rel)
                return
            if len(out) < MAX_CGROUPS:
                out[(host, fid.controller, fid.entity)] = None

        captured = r.get(man, "captured", list, ()) or []
        for i, c in enumerate(captured[:1000]):
            if not isinstance(c, dict) or "cgroups" not in c:
                continue
            path = ("captured", i)
            where = c.get("path") if isinstance(c.get("path"), str) else ""
            host = next((h for h, v in hosts.items() if isinstance(v.get("paths"), list) and any(
                isinstance(p, str) and p and where.startswith(p) for p in v["paths"])), only)
            for g in r.get(c, "cgroups", list, path) or []:
                if isinstance(g, str):
                    add(g, host, path + ("cgroups",))
                else:
                    r.bad(path + ("cgroups",), f"expected text, found {type(g).__name__}", g)
        col = r.get(man, "collector", dict, ()) or {}
        for g in r.get(col, "cgroup_folders", list, ("collector",)) or []:
            if isinstance(g, str) and "/sys/fs/cgroup/" in g + "/":
                add(g, only, ("collector", "cgroup_folders"))
        return list(out)

    def _members(self, r: _Reader, cgroups: list[tuple], procs: dict[int, dict], ranks: dict[int, dict]) -> int:
        seen: dict[int, dict] = {p: dict(v) for p, v in procs.items()}
        for v in ranks.values():
            if v["pid"] is not None and v["pid"] not in seen:
                seen[v["pid"]] = {"first_ns": v["first_ns"], "last_ns": v["last_ns"], "line": v["line"]}
        n = 0
        for host, ctrl, cg in cgroups:
            for pid, p in sorted(seen.items()):
                for change, ts in (("first", p.get("first_ns")), ("last", p.get("last_ns"))):
                    if ts is None:
                        continue
                    r.ctx.sink.add("members", host=host, cgroup=cg, controller=ctrl, ts_raw_ns=ts, pid=pid,
                                   tid=None, present=True, change=change, basis="manifest", file=r.ctx.rel,
                                   line=p.get("line"))
                    n += 1
        return n


PARSERS = (CollectManifestParser,)


# -- before the parse: where the bundle's manifests are and what they say about hosts ----------
MAX_DEPTH_FOUND = 4        # folders above a manifest in the bundle
MAX_MANIFESTS = 256


class BundleManifests:
    """The manifests of a bundle as the service uses them before the parse: hosts' path prefixes
    (made relative to the bundle: a manifest's ``hosts.<h>.paths`` are relative to its folder),
    the time zone, and notes on what was ignored."""

    def __init__(self):
        self.paths: list[str] = []                 # manifests read (JSON objects), in bundle order
        self.hosts: dict[str, list[str]] = {}      # host -> path prefixes in the bundle
        self.time_zone: str | None = None
        self.time_zone_from: str | None = None
        self.notes: list[str] = []


def _join(base: str, rel: str) -> str | None:
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if rel.startswith("/") or any(p == ".." for p in parts):
        return None
    if not parts:
        return base + "/" if base else ""     # (the whole bundle: attribution has no prefix for it)
    out = "/".join(([base] if base else []) + parts)
    return out + "/" if rel.endswith("/") else out


def find_manifests(files: list[tuple[str, str, int]]) -> BundleManifests:
    """``files``: (path in the bundle, file on disk, size) of every extracted file."""
    out = BundleManifests()
    found = sorted((rel.count("/"), rel, disk, size) for rel, disk, size in files
                   if rel.rsplit("/", 1)[-1] == MANIFEST_NAME and rel.count("/") <= MAX_DEPTH_FOUND)
    if len(found) > MAX_MANIFESTS:
        out.notes.append(f"{len(found)} {MANIFEST_NAME} files: only the first {MAX_MANIFESTS} are used")
        found = found[:MAX_MANIFESTS]
    for _, rel, disk, size in found:
        if size > MAX_BYTES:
            out.notes.append(f"{rel}: larger than {MAX_BYTES} bytes; its hosts and time zone are not used")
            continue
        try:
            with open(disk, "rb") as f:
                data = json.loads(f.read(MAX_BYTES + 1).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            out.notes.append(f"{rel}: not valid JSON ({str(e)[:200]}); its hosts and time zone are not used")
            continue
        if not isinstance(data, dict):
            out.notes.append(f"{rel}: not a JSON object; its hosts and time zone are not used")
            continue
        out.paths.append(rel)
        base = rel.rsplit("/", 1)[0] if "/" in rel else ""
        hosts = data.get("hosts")
        for h, v in (hosts.items() if isinstance(hosts, dict) else ()):
            paths = v.get("paths") if isinstance(v, dict) else None
            if not isinstance(h, str) or not h or not isinstance(paths, list):
                continue
            for p in paths:
                j = _join(base, p) if isinstance(p, str) else None
                if j == "":
                    continue
                if j is None:
                    out.notes.append(f"{rel}: hosts.{h}.paths: {str(p)[:100]!r} is not a path inside the bundle; "
                                     "ignored")
                elif j not in out.hosts.setdefault(h, []):
                    out.hosts[h].append(j)
        tz = data.get("time_zone")
        if isinstance(tz, str) and tz:
            if out.time_zone is None:
                out.time_zone, out.time_zone_from = tz, rel
            elif tz != out.time_zone:
                out.notes.append(f"{rel} states time zone {tz[:60]!r}, {out.time_zone_from} states "
                                 f"{out.time_zone!r}: the first is used")
    return out
