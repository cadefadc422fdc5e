"""The analysis of one incident, from its raw bundle to its report: what
:meth:`aftertrace.server.service.Service.analyze` runs (the service queues incidents, keeps their
status and stops them; this module does the work)::

    raw store -> safe extraction -> group claims -> detect -> parse (host info
    first, then the rest in this process or on an executor: a local process pool or Ray, see
    server/executors.py) -> host/rank attribution -> bulk load -> clock alignment -> findings ->
    report

Group claims (``ingest.registry.GroupParser``): before per-file detection, group parsers claim
sets of files that form one source (a cgroup snapshot series under ``vm/cgroup/<time>/...``). Each
set becomes one ``sources`` row whose path is the folder, parsed by ``parse_file`` from a manifest
that lists its members; its members get no rows of their own. Every other file takes the per-file
path. Every row goes into the store in one transaction (:class:`server.loader.IncidentLoad`),
part by part while the files are parsed.
"""
from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow.parquet as pq

from aftertrace.analysis import clocks, present, report as report_mod, rootcause, timeline
from aftertrace.ingest import attribution
from aftertrace.ingest.bundle import RawBundle, disk_full, extract, is_disk_full, sniff_kind
from aftertrace.ingest.model import STATUS_FAILED, STATUS_PARSED
from aftertrace.ingest.parse import (ParseBatch, ParseJob, SourceResult, batched, detect_files, merge_ranges, parse_file,
                                     parse_task, split_job, warm_up)
from aftertrace.ingest.sink import INLINE_ROWS
from aftertrace.ingest.registry import write_group_manifest
from aftertrace.ingest.timeparse import tzinfo_for

from .executors import Executor
from .loader import KEEP_PARTS, IncidentLoad
from .settings import Settings
from .store import Store

if TYPE_CHECKING:
    from aftertrace.ingest.formats.manifest import BundleManifests

Progress = Callable[[str, int, int], None]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def no_progress(stage: str, done: int, total: int) -> None:
    pass


# The detect stage of a bundle of many files runs in batches of this many files on the executor
# (from this many batches on, where the parse is pooled too).
DETECT_BATCH = 512
DETECT_POOLED_BATCHES = 4
POOLED_HOST_FILES = 64       # host-info files parsed on the running workers from this many on

# The pipeline's stages (the ``progress`` callback's first argument), as the page says them
STAGES = {"start": "starting", "extract": "unpacking the bundle", "detect": "recognising the files",
          "parse": "parsing the files", "store": "storing the rows",
          "analyze": "aligning the clocks and finding the chain"}


def drop_extraction(folder: Path) -> None:
    """An analysis's extracted files and work files, once it ended (done, failed or handed back):
    an analysis extracts the raw bundle afresh, and a failed one must not keep holding the disk
    (a decompression bomb, a full disk that is then freed)."""
    for sub in ("files", "work"):
        shutil.rmtree(folder / sub, ignore_errors=True)


def _strip_common_root(members) -> str | None:
    """``tar czf b.tgz bundle/`` puts every member under ``bundle/``: show paths without it.

    The same folder given as a directory or as an archive then gets the same paths. The
    root is kept when it may be a host's folder: when it is named like a node, or when
    stripping it would leave files with no folder at all (``vm/dmesg.txt``).
    """
    firsts = {m.path.split("/", 1)[0] for m in members}
    if len(firsts) != 1:
        return None
    root = next(iter(firsts))
    if attribution.HOSTISH.match(root) or attribution.host_from_path(root + "/x"):
        return None
    if any(m.path.count("/") < 2 for m in members):
        return None
    for m in members:
        m.path = m.path[len(root) + 1:]
    return root


class Pipeline:
    """One analysis of one incident, built by the service from what it holds: its settings, its
    store, the parser registry, ``executors`` (a parse executor of N workers: the service keeps
    one Ray connection and ends its pools when it stops) and the folder a bundle given as a
    folder is read from in place (None: its stored copy)."""

    def __init__(self, settings: Settings, store: Store, registry, executors: Callable[[int], Executor],
                 local_dir: Path | None = None):
        self.settings = settings
        self.store = store
        self.registry = registry
        self._executor = executors
        self.local_dir = local_dir

    def run(self, inc: dict, progress: Progress) -> dict:
        """Analyse the incident of row ``inc`` (of ``incidents``): returns its report."""
        # One transaction loads the incident's rows, part by part while files are parsed.
        root = self._run_folder(inc["incident_id"])
        load = IncidentLoad(self.store, inc["incident_id"], root)
        try:
            return self._steps(inc, progress, load)
        finally:
            load.abort()      # a no-op once committed

    def _run_folder(self, incident_id: str) -> Path | None:
        """With a Parquet location (``settings.parts_dir``): this analysis's own run folder,
        ``<parts dir>/<incident>/run-<UTC time>-<random>`` (the previous run stays readable
        until the new one is committed, then it is removed)."""
        if self.settings.parts_dir is None:
            return None
        stamp = utc_now().strftime("%Y%m%dT%H%M%S")
        root = Path(self.settings.parts_dir) / incident_id / f"run-{stamp}-{os.urandom(4).hex()}"
        root.mkdir(parents=True)
        return root

    def _steps(self, inc: dict, progress: Progress, load: IncidentLoad) -> dict:
        iid = inc["incident_id"]
        folder = self.settings.incident_dir(iid)
        files_dir, work_dir = folder / "files", folder / "work"
        raw_path = Path(inc["raw_path"])
        kind, comp = sniff_kind(raw_path)    # a folder is kept as a tar
        raw = RawBundle(inc["bundle_sha256"], inc["bundle_name"], kind, raw_path, inc["bundle_bytes"], comp)
        # (a large bundle of many files: the workers start, and import, while it is extracted)
        executor = self._early_executor(inc)
        try:
            progress("extract", 0, 1)
            local = self.local_dir
            ex = extract(raw, files_dir, self.settings.limits, local if local and local.is_dir() else None)
            progress("extract", 1, 1)
            if work_dir.exists():
                shutil.rmtree(work_dir)
            work_dir.mkdir(parents=True)
            root = load.root                     # attached: the run folder of the partitions
            staging = Path(root) / "_staging" if root else None

            notes: list[str] = []
            if ex.stopped:
                notes.append(f"extraction: {ex.stopped}")
            if inc["bundle_kind"] in ("tar", "zip"):   # not for folders given as they are
                stripped = _strip_common_root(ex.members)
                if stripped:
                    notes.append(f"all files were in one folder {stripped}/; paths are shown without it")
            members = sorted(ex.members, key=lambda m: m.path)
            # The manifests (any folder: a bundle folder tarred whole, node bundles side by side):
            # hosts' paths and the time zone before the parse; each is also parsed as a source.
            from aftertrace.ingest.formats.manifest import find_manifests
            manifests = find_manifests([(m.path, m.where, m.size) for m in members if m.ok])
            notes += manifests.notes

            # Detect every extracted file (first KiBs after gunzip).
            results: dict[str, SourceResult] = {}
            jobs: list[ParseJob] = []
            host_jobs: list[ParseJob] = []
            ok = [m for m in members if m.ok]
            # Group parsers first: each set of files they claim is parsed as one source.
            groups = self.registry.claim_groups([(m.path, m.where) for m in ok])
            in_group = {rel: g.rel for _, g in groups for rel, _ in g.members}
            ok = [m for m in ok if m.path not in in_group]
            # Source ids, known before the parse so that parts load while files are parsed:
            # groups first, then every other member by path (the order of the sources rows).
            sid_of = {g.rel: n for n, (_, g) in enumerate(groups, 1)}
            for m in members:
                if m.path not in in_group:
                    sid_of[m.path] = len(sid_of) + 1

            def where(rel: str, out: Path) -> dict:
                """out_dir, and with a Parquet location the partitions the parts go to."""
                if staging is None:
                    return {"out_dir": str(out)}
                return {"out_dir": str(staging / str(sid_of[rel])), "source_id": sid_of[rel],
                        "parts_root": str(root), "host": attribution.host_from_path(rel)}

            for n, (parser, g) in enumerate(groups):
                man = write_group_manifest(g, work_dir / f"group{n:05d}.json")
                jobs.append(ParseJob(man, g.rel, max_bytes=self.settings.limits.max_member_bytes, parser=parser.name,
                                     **where(g.rel, work_dir / f"group{n:05d}")))
            dets, executor = self._detect_all(ok, progress, executor)
            for m in ok:
                det = dets[m.path]
                if isinstance(det, str):    # unreadable / damaged compression
                    results[m.path] = SourceResult(m.path, status=STATUS_FAILED,
                                                   error=f"{m.path}: cannot be read: {det}", bytes=m.size)
                    continue
                if det.reader is None or (not det.recognized and m.path in manifests.paths):
                    results[m.path] = SourceResult(m.path, error=det.reason, bytes=os.stat(m.where).st_size)
                    continue
                job = ParseJob(m.where, m.path, max_bytes=self.settings.limits.max_member_bytes,
                               parser=det.reader.name, unwrap=det.unwrap, from_line=det.from_line,
                               text_reason=None if det.recognized else det.reason,
                               **where(m.path, work_dir / f"{len(jobs) + len(host_jobs):06d}"))
                (host_jobs if det.reader.kind == "host_info" else jobs).append(job)
            # Host info first: it tells the bundle's time zone for local-time strings.
            # (hundreds of host files, when the workers are up: parsed there, side by side)
            self._parse_all(host_jobs, results, no_progress, sid_of, load, executor,
                            pooled=executor is not None and len(host_jobs) >= POOLED_HOST_FILES)
            tz, tz_from = self._time_zone(manifests, [results[j.rel] for j in host_jobs])
            tz_ok = tzinfo_for(tz) is not None
            if not tz_ok:
                notes.append(f"time zone {tz!r} ({tz_from}) is not known; local times were read as UTC")
            for job in jobs:
                job.time_zone = tz if tz_ok else "UTC"
            if root:   # the partitions' host: as attributed from paths, the manifest, host-info files
                self._partition_hosts(jobs, host_jobs, results, manifests.hosts)
            self._parse_all(jobs, results, progress, sid_of, load, executor)
        finally:
            if executor is not None:
                executor.close()
        for r in results.values():   # a full disk is not the file's fault: the analysis stops
            if r.status == STATUS_FAILED and r.error and is_disk_full(Exception(r.error)):
                raise disk_full(f"parsing {r.rel}")

        # Sources: every member, parsed or not (a group's members: its one row).
        sizes = {m.path: m.size for m in members}
        for _, g in groups:
            results[g.rel].bytes = sum(sizes[rel] for rel, _ in g.members)
        sources = [results[g.rel] for _, g in groups]
        for m in members:
            if m.path in in_group:
                continue
            if m.path in manifests.paths and m.ok and results[m.path].kind == "unrecognized" \
                    and results[m.path].status != STATUS_FAILED:
                # a manifest written by hand (no collector schema): read above for hosts and zone
                r = SourceResult(m.path, kind="host_info", format="manifest", status=STATUS_PARSED,
                                 clock_domain="none", bytes=m.size)
            elif not m.ok:
                r = SourceResult(m.path, status=STATUS_FAILED if m.status == "refused" else "unrecognized",
                                 error=m.message, bytes=m.size)
            else:
                r = results[m.path]
            sources.append(r)
        assert [sid_of[r.rel] for r in sources] == list(range(1, len(sources) + 1)), "source ids out of order"
        att = [attribution.Attributable(r.rel, r.kind, content_host=r.host, content_rank=r.rank)
               for r in sources]
        notes += attribution.resolve(att, manifests.hosts)

        progress("store", 0, 1)
        load.commit(lambda: self._finish_load(iid, sources, att, tz, tz_from))
        progress("store", 1, 1)
        shutil.rmtree(work_dir, ignore_errors=True)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)

        progress("analyze", 0, 1)
        # (the parsed rows are all in: which tables hold any is read once for the queries below)
        with present.one_analysis():
            entries = clocks.align(self.store, iid)
            if any(e.method == clocks.UPTIME_METHOD for e in entries):
                notes.append(f"clock: {clocks.UPTIME_CAVEAT}")
            # The timeline's tables (store work: DuckDB's own threads, the GIL released) are built
            # while the findings are searched; neither reads what the other writes.
            with ThreadPoolExecutor(1, thread_name_prefix="tracks") as beside:
                tracks = beside.submit(timeline.build_tracks, self.store, iid)
                rc = rootcause.analyze(self.store, iid, clocks.skew_links(entries))
                rep = report_mod.build(self.store, iid, rc,
                                       notes=notes, time_zone={"zone": tz, "from": tz_from})
                tracks.result()
        (folder / "report.json").write_text(report_mod.dumps(rep), encoding="utf-8")
        # (the findings re-read some extracted files for their evidence lines; from here on only the
        # store is read, and the raw bundle is kept to analyse it again)
        drop_extraction(folder)
        progress("analyze", 1, 1)
        return rep

    @staticmethod
    def _partition_hosts(jobs: list[ParseJob], host_jobs: list[ParseJob], results: dict,
                         hosts: dict[str, list[str]]) -> None:
        """``job.host`` of each job: its host as far as it is known before the parse (the final
        attribution also reads the files' contents; the partition's name only organises)."""
        info = {j.rel for j in host_jobs}
        att = [attribution.Attributable(j.rel, "host_info" if j.rel in info else "other",
                                        content_host=results[j.rel].host if j.rel in info else None)
               for j in host_jobs + jobs]
        attribution.resolve(att, hosts)
        host_of = {a.path: a.host for a in att}
        for j in jobs:
            j.host = host_of.get(j.rel) or j.host

    def _pooled(self, n: int, total: int) -> bool:
        """Whether ``n`` files of ``total`` bytes are worth the executor (else: this process)."""
        if total < self.settings.inline_bytes:
            return False
        return min(self.settings.parse_workers, n) > 1 if self.settings.executor == "local" else n > 1

    def _early_executor(self, inc: dict) -> Executor | None:
        """The local pool, started before the extraction when the bundle is likely to need it (an
        archive or folder of at least ``settings.inline_bytes``): its workers start and import
        the parsers on the other cores meanwhile. None otherwise (a single file never needs it)."""
        if self.settings.executor != "local" or self.settings.parse_workers < 2 \
                or inc["bundle_kind"] not in ("tar", "zip", "dir") or inc["bundle_bytes"] < self.settings.inline_bytes:
            return None
        executor = self._executor(self.settings.parse_workers)
        try:
            executor.start(warm_up)
        except BaseException:
            executor.close()
            raise
        return executor

    def _detect_all(self, members: list, progress: Progress,
                    executor: Executor | None = None) -> tuple[dict[str, Any], Executor | None]:
        """Each member's detection (:func:`ingest.parse.detect_files`), by path in the bundle.
        Many files are detected in batches on the executor (``executor`` when one was started
        already), which is returned for the parse to go on with (its workers already started);
        a few in this process."""
        files = [(m.where, m.path) for m in members]
        batches = [files[i:i + DETECT_BATCH] for i in range(0, len(files), DETECT_BATCH)]
        progress("detect", 0, len(files))
        out: dict[str, Any] = {}
        if len(batches) >= DETECT_POOLED_BATCHES and self._pooled(len(files), sum(m.size for m in members)):
            executor = executor or self._executor(min(self.settings.parse_workers, len(batches)))
            done = 0
            try:
                for batch, dets in executor.map_unordered(detect_files, batches):
                    if isinstance(dets, BaseException):   # the worker died: these files in this process
                        dets = detect_files(batch, self.registry)
                    out.update(zip((rel for _, rel in batch), dets))
                    done += len(batch)
                    progress("detect", done, len(files))
            except BaseException:
                executor.close()
                raise
        else:
            for i, batch in enumerate(batches):
                out.update(zip((rel for _, rel in batch), detect_files(batch, self.registry)))
                progress("detect", min(len(files), (i + 1) * DETECT_BATCH), len(files))
        return out, executor

    def _parse_one(self, job: ParseJob, sid: int, load: IncidentLoad) -> SourceResult:
        """Parse in this process, loading each part as soon as it is written (to partitions:
        loading the small tables once the parts are in place). A small table (at most
        INLINE_ROWS rows, most tables of most files) goes to the loader as it is, not as a part:
        a Parquet file written, read back and removed for a few dozen rows costs more than the rows."""
        streamed = not job.parts_root
        if streamed:
            job = replace(job, inline_rows=INLINE_ROWS)
        r = parse_file(job, self.registry, on_part=load.announcer(sid) if streamed else None)
        if r.status == STATUS_FAILED:
            load.drop_source(sid)
        elif not streamed:
            load.parts(sid, r.parts)
        else:
            load.tables(sid, r.inline)
            r.inline = {t: v for t, v in r.inline.items() if t in KEEP_PARTS}
        return r

    def _parse_all(self, jobs: list[ParseJob], results: dict, progress: Progress,
                   sid_of: dict[str, int], load: IncidentLoad, executor: Executor | None = None,
                   pooled: bool | None = None) -> None:
        """Small bundles and single files in this process (parts load as they are written);
        the rest on the executor of the settings: a local process pool or Ray
        (:mod:`server.executors`), each file one task (a large perf script text: one task per
        byte range of about ``settings.split_bytes``), its parts loaded as it finishes.
        ``pooled`` decides where instead of the files' number and size."""
        n = len(jobs)
        progress("parse", 0, n)
        if not n:
            return
        workers = min(self.settings.parse_workers, n)
        if pooled is None:
            pooled = self._pooled(n, sum(Path(j.path).stat().st_size for j in jobs))
        if not pooled:
            with self.store.yield_cores(1):        # (this thread parses)
                for i, job in enumerate(jobs):
                    results[job.rel] = self._parse_one(job, sid_of[job.rel], load)
                    progress("parse", i + 1, n)
            return
        # Large files whose format allows it are parsed in byte ranges, one task each; their
        # results are merged into one source when the last range is in (ingest/parse.py).
        tasks: list[ParseJob] = []
        split: dict[str, tuple[ParseJob, list[ParseJob], dict[int, object]]] = {}
        for job in jobs:
            ranges = split_job(job, self.settings.split_bytes, self.registry)
            if ranges:
                split[job.rel] = (job, ranges, {})
                tasks += ranges
            else:       # (a small file's small tables come back with its result: see INLINE_ROWS)
                tasks.append(job if job.parts_root else replace(job, inline_rows=INLINE_ROWS))
        sizes = {j.rel: Path(j.path).stat().st_size for j in tasks if not j.byte_range}
        tasks.sort(key=lambda j: -(j.byte_range[1] - j.byte_range[0] if j.byte_range else sizes[j.rel]))
        own = executor is None
        if own:
            executor = self._executor(workers)
        done = 0

        def take(task: ParseJob, r) -> None:
            nonlocal done
            job = task
            if task.byte_range:
                whole, ranges, got = split[task.rel]
                got[task.part_base] = r
                if len(got) < len(ranges):
                    return
                job = whole
                r = merge_ranges(whole, ranges, [got[rg.part_base] for rg in ranges], self.registry)
            if isinstance(r, BaseException):   # the worker itself died / the task was lost
                r = SourceResult(job.rel, status=STATUS_FAILED, error=f"{job.rel}: parser process failed: {r!r}")
            results[job.rel] = r
            load.parts(sid_of[job.rel], r.parts)   # while the other files are parsed
            load.tables(sid_of[job.rel], r.inline)
            # (the rows are the loader's now; the facts are read again after the parse, as
            # their parts are: the time zone of the host snapshots)
            r.inline = {t: v for t, v in r.inline.items() if t in KEEP_PARTS}
            if r.status == STATUS_FAILED and job.parts_root:
                load.drop_source(sid_of[job.rel])  # (a worker that died mid-way)
            done += 1
            progress("parse", done, n)

        # (local workers hold the cores: the inserts of the parts they send run beside them)
        beside = self.store.yield_cores(min(workers, len(tasks))) if executor.name == "local" else nullcontext()
        try:
            with beside:
                lost: list[ParseJob] = []
                for unit, r in executor.map_unordered(parse_task, batched(tasks, sizes)):
                    if not isinstance(unit, ParseBatch):
                        take(unit, r)
                    elif isinstance(r, BaseException):
                        # the worker died in one of the batch's files: each file again on its own,
                        # so that only the file that kills its worker fails
                        lost += unit.jobs
                    else:
                        for job, one in zip(unit.jobs, r):
                            take(job, one)
                for task, r in executor.map_unordered(parse_file, lost):
                    take(task, r)
        finally:
            if own:
                executor.close()

    def _finish_load(self, iid: str, sources: list[SourceResult], att, tz: str, tz_from: str) -> None:
        """The last writes of the load's transaction (on its thread): the sources rows and the
        incident's time zone. Every part is already inserted."""
        rows = []
        for sid, (r, a) in enumerate(zip(sources, att), 1):
            rows.append({
                "incident_id": iid, "source_id": sid, "path": r.rel, "kind": r.kind, "format": r.format,
                "host": a.host, "rank": a.rank, "pid": r.pid, "clock_domain": r.clock_domain,
                "bytes": r.bytes, "bytes_read": r.bytes_read, "compressed": r.compressed,
                "records": r.records, "issues": r.issues, "status": r.status, "error": r.error,
                "host_from": a.host_from, "rank_from": a.rank_from, "parse_s": r.parse_s,
                "attrs": json.dumps(r.attrs) if r.attrs else None})
        self.store.insert_rows("sources", rows)
        self.store.cursor().execute("UPDATE incidents SET time_zone = ?, time_zone_source = ? WHERE incident_id = ?",
                                    [tz, tz_from, iid])

    @staticmethod
    def _time_zone(manifests: "BundleManifests", host_results: list[SourceResult]) -> tuple[str, str]:
        if manifests.time_zone:
            return manifests.time_zone, "manifest"
        zones, offsets = [], []
        for r in host_results:
            facts = [pq.read_table(f, columns=["key", "value"]) for f in r.parts.get("facts", [])]
            if "facts" in r.inline:
                facts.append(r.inline["facts"].select(["key", "value"]))
            for t in facts:
                for row in t.to_pylist():
                    if row["key"] == "time_zone":
                        zones.append((row["value"], r.rel))
                    elif row["key"] == "utc_offset":
                        offsets.append((row["value"], r.rel))
        for z, rel in zones:
            if "/" in z or z.upper() in ("UTC", "GMT", "UCT"):   # IANA names and UTC are unambiguous
                return z, f"date/timedatectl output ({rel})"
        for o, rel in offsets:
            return o, f"UTC offset in date output ({rel})"
        for z, rel in zones:
            if tzinfo_for(z) is not None:
                return z, f"date output ({rel})"
        return "UTC", "default (no time zone in the bundle)"
