"""Which host and rank a file belongs to.

Evidence, strongest first:

1. the bundle manifest (``aftertrace-manifest.json``: ``hosts.<h>.paths``);
2. the path: ``host=NAME`` anywhere, a folder named like a node
   (``node-3``, ``worker07``, ``gpu-node-12``, ``nid001234``),
   ``sosreport-<host>-...``; ranks from ``rank7``, ``rank-7``, ``rank_7``,
   ``rank=7``, ``*.rank7.*``;
3. the contents, as stated by the parser (``uname -a``, perf ``# hostname``,
   Kineto ``distributedInfo``, ...);
4. the folder: files under a top-level folder inherit the host that the
   host-info files inside that folder name (``vm/host/hostname`` says ``vm`` ->
   ``vm/dmesg.txt`` is from ``vm``); a bundle whose host-info files sit at the
   root is a single-host bundle, and so is one in which every host named
   anywhere is the one host its host-info files name. A top-level folder whose
   name equals a host named anywhere in the contents is that host's folder;
5. a torchrun worker's folder (``<log_dir>/<run>/attempt_<n>/<local rank>/``: one process's
   ``stdout.log``, ``stderr.log`` and ``error.json``): a file in it with no rank of its own takes
   the rank its siblings state, where they agree (``rank_from`` = ``worker folder``). The folder's
   name is the *local* rank: on more than one node it is not the rank.

What stays unknown is left null and shown as such; it is never guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

HOST_KV = re.compile(r"(?:^|[/_.-])host(?:name)?=([A-Za-z0-9][A-Za-z0-9._-]*)")
HOSTISH = re.compile(
    r"^(?:[a-z][a-z0-9]*[-_])*(?:node|host|worker|nid|compute|gpu|server|trainer)[-_]?\d+[a-z0-9-]*$",
    re.IGNORECASE)
SOSREPORT = re.compile(r"^sosreport-([A-Za-z0-9][A-Za-z0-9.]*?)(?:-[^/]*)?$")
RANK = re.compile(r"(?<!local)(?:^|[^a-z])rank[-_=]?(\d{1,6})(?!\d)", re.IGNORECASE)
WORKER_DIR = re.compile(r"(?:^|/)attempt_(\d+)/(\d+)/[^/]+$")     # (groups: the attempt, the local rank)


def host_from_path(rel: str) -> str | None:
    m = HOST_KV.search(rel)
    if m:
        return m.group(1)
    parts = rel.split("/")[:-1]
    for p in parts:
        m = SOSREPORT.match(p)
        if m:
            return m.group(1)
    for p in parts:
        if HOSTISH.match(p):
            return p
    return None


def rank_from_path(rel: str) -> int | None:
    m = None
    for m in RANK.finditer(rel):
        pass  # the last mention (the file name) wins over folders
    return int(m.group(1)) if m else None


@dataclass
class Attributable:
    """The slice of a source that attribution reads and writes."""
    path: str
    kind: str
    host: str | None = None
    host_from: str | None = None
    rank: int | None = None
    rank_from: str | None = None
    content_host: str | None = None
    content_rank: int | None = None


def _top(path: str) -> str | None:
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else None


def resolve(sources: list[Attributable], manifest_hosts: dict[str, list[str]] | None = None) -> list[str]:
    """Fill host/rank of every source in place. Returns notes on contradictions."""
    notes: list[str] = []
    manifest_hosts = manifest_hosts or {}
    for s in sources:
        mh = None
        for h, prefixes in manifest_hosts.items():
            if any(s.path == p.rstrip("/") or s.path.startswith(p.rstrip("/") + "/") for p in prefixes):
                mh = h
                break
        ph = host_from_path(s.path)
        if mh:
            s.host, s.host_from = mh, "manifest"
            if s.content_host and _short(s.content_host) != _short(mh):
                notes.append(f"{s.path}: the manifest places it on {mh}, its contents say {s.content_host}")
        elif ph:
            s.host, s.host_from = ph, "path"
        elif s.content_host:
            s.host, s.host_from = s.content_host, "contents"
        pr = rank_from_path(s.path)
        if s.content_rank is not None:
            s.rank, s.rank_from = s.content_rank, "contents"
            if pr is not None and pr != s.content_rank:
                notes.append(f"{s.path}: the file name says rank {pr}, its contents say rank {s.content_rank}")
        elif pr is not None:
            s.rank, s.rank_from = pr, "path"

    # One torchrun worker's folder is one process.
    stated: dict[str, set[int]] = {}
    for s in sources:
        if s.rank is not None and WORKER_DIR.search(s.path):
            stated.setdefault(s.path.rsplit("/", 1)[0], set()).add(s.rank)
    for s in sources:
        if s.rank is None and WORKER_DIR.search(s.path):
            ranks = stated.get(s.path.rsplit("/", 1)[0], set())
            if len(ranks) == 1:
                s.rank, s.rank_from = next(iter(ranks)), "worker folder"

    # Folder inheritance from host-info files.
    named_hosts = {s.content_host for s in sources if s.content_host}
    by_top: dict[str | None, set[str]] = {}
    for s in sources:
        if s.kind == "host_info" and s.host:
            by_top.setdefault(_top(s.path), set()).add(s.host)
    for s in sources:
        if s.host:
            continue
        top = _top(s.path)
        hosts = by_top.get(top)
        if hosts and len(hosts) == 1:
            s.host, s.host_from = next(iter(hosts)), "folder"
            continue
        if top is None or top not in by_top:
            root_hosts = by_top.get(None)
            if root_hosts and len(root_hosts) == 1 and len(by_top) == 1:
                s.host, s.host_from = next(iter(root_hosts)), "bundle"
                continue
        if top and top in named_hosts:
            s.host, s.host_from = top, "folder"
    # A bundle in which host-info files name exactly one host, and nothing names
    # another, is that host's bundle.
    info_hosts = {s.host for s in sources if s.kind == "host_info" and s.host}
    all_hosts = {s.host for s in sources if s.host}
    if not manifest_hosts and len(info_hosts) == 1 and all_hosts == info_hosts:
        only = next(iter(info_hosts))
        for s in sources:
            if not s.host:
                s.host, s.host_from = only, "bundle"
    for top, hosts in by_top.items():
        if len(hosts) > 1:
            where = f"folder {top}/" if top else "the bundle root"
            notes.append(f"host-info files in {where} name several hosts: {', '.join(sorted(hosts))}")
    return notes


def _short(h: str) -> str:
    return h.split(".")[0].lower()
