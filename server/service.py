"""The service layer: what the CLI, the HTTP routes and the tests call.

No FastAPI here. One :class:`Service` is built from explicit :class:`Settings` and a
:class:`Store`; it receives bundles (one incident per bundle), queues their analyses, runs each
(:class:`server.pipeline.Pipeline`: extraction, detection, parse, load, clocks, findings,
report), keeps their status, stops them, and answers queries about incidents
(:class:`server.queries.Queries`, :class:`server.shares.Shares`, :class:`server.exports.Exports`).
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path

from aftertrace.analysis import report as report_mod
from aftertrace.ingest.bundle import DiskFull, RawBundle, disk_full, is_disk_full, store_raw, store_stream
from aftertrace.ingest.issues import ISSUE_KINDS
from aftertrace.ingest.registry import default_registry

from .errors import BadRequest, NotFound, NotReady
from .executors import Executor, make_executor
from .exports import Exports
from .pipeline import STAGES, Pipeline, Progress, drop_extraction, no_progress, utc_now
from .queries import Queries
from .settings import Settings
from .shares import Shares
from .store import Store

INTERRUPTED = ("interrupted: the aftertrace process died during the analysis twice (killed, crashed or out of "
               "memory); not tried again: analyse it again")
STOPPED_BY_USER = "stopped: the analysis was interrupted (Ctrl-C, or SIGTERM on the command line); analyse again"
# An analysis its process's death cut short is queued again this many times (a second death may
# be the analysis's own doing: it would then kill every process that takes it up).
RETRIES_AFTER_DEATH = 1
log = logging.getLogger("aftertrace")


class HandedBack(Exception):
    """An analysis stopped because its service is stopping: the incident is queued again, to run
    when aftertrace next starts."""


@dataclass
class Submitted:
    incident_id: str
    status: str                 # the incident's status after the submission
    existed: bool               # the bundle was sent before
    queued: bool = True         # this submission queued it for analysis (else it joined the incident)


class Service:
    """The service: its intake, queue and analyses here; what analysed incidents answer in its parts,
    plain objects over its store (:attr:`queries`, :attr:`shares`, :attr:`exports`), whose calls
    it answers as its own (``svc.timeline(...)`` is ``svc.queries.timeline(...)``)."""


    @property
    def registry(self):
        """The parser registry (every format module: loaded on first use, so that the commands
        that only read the store do not pay for the parsers)."""
        if self._registry is None:
            self._registry = default_registry()
        return self._registry

    @registry.setter
    def registry(self, registry) -> None:
        self._registry = registry

    def __init__(self, settings: Settings, store: Store | None = None):
        self.settings = settings
        own_store = store is None
        self.store = store or Store(settings.db_path)
        self.queries = q = Queries(self.store)
        self.shares = sh = Shares(self.store, q, self.get_incident)
        self.exports = ex = Exports(settings, q)
        # (their calls as the service's: bound methods, with their own signatures)
        self.resolve_incident, self.complete_id, self.analysed_incident = \
            q.resolve_incident, q.complete_id, q.analysed_incident
        self.get_report, self.clock_table, self.flamegraph = q.get_report, q.clock_table, q.flamegraph
        self.default_window, self.timeline, self.timeline_detail = q.default_window, q.timeline, q.timeline_detail
        self.create_share, self.list_shares, self.revoke_share = sh.create_share, sh.list_shares, sh.revoke_share
        self.shared, self.shared_incident = sh.shared, sh.shared_incident
        self.export, self.export_file = ex.export, ex.export_file
        self._registry = None            # the parsers, loaded when a bundle is first analysed
        self._local_dirs: dict[str, Path] = {}
        self._ray = None                 # the RayExecutor, once connected
        # what each running analysis of this process is doing: incident -> stage, done, total, start
        self._running: dict[str, dict] = {}
        self._intake = threading.Lock()
        self._stopping = threading.Event()
        self._cancelled = threading.Event()
        self._executors: weakref.WeakSet = weakref.WeakSet()     # the parse pools of running analyses
        if own_store:
            self.recover_interrupted()

    def recover_interrupted(self) -> list[str]:
        """Queue again what a process that died left 'running'; returns every queued incident.

        Only one process can open the store for writing (DuckDB locks the file), and a new
        Service has no analysis of its own yet: a 'running' incident belongs to a process that
        died (killed, crashed, out of memory) and a 'queued' one to a process that stopped before
        it came to it. Their rows were never committed (one transaction per load), so the old
        rows, if any, are intact. A running one is queued again once; one that was running when
        its process died a second time fails (:data:`INTERRUPTED`): the analysis itself may be
        what kills the process. The server runs the queued ones when it starts
        (:meth:`pending`); the command line leaves them queued.
        """
        cur = self.store.cursor()
        cur.execute(
            "UPDATE incidents SET interrupted = COALESCE(interrupted, 0) + 1, "
            "status = CASE WHEN COALESCE(interrupted, 0) < ? THEN 'queued' ELSE 'failed' END, "
            "error = CASE WHEN COALESCE(interrupted, 0) < ? THEN NULL ELSE ? END WHERE status = 'running'",
            [RETRIES_AFTER_DEATH, RETRIES_AFTER_DEATH, INTERRUPTED])
        return self.pending()

    def pending(self) -> list[str]:
        """The queued incidents that no analysis of this process has taken up, oldest first."""
        rows = self.store.query(
            "SELECT incident_id FROM incidents WHERE status = 'queued' ORDER BY created_at, incident_id")
        return [r["incident_id"] for r in rows if r["incident_id"] not in self._running]

    def cancel(self) -> None:
        """Stop this service's analyses at the next step of each, as Ctrl-C does (failed,
        :data:`STOPPED_BY_USER`): for a signal handler (an exception raised from a handler may
        land in a library's callback, which drops it)."""
        self._cancelled.set()

    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def stop(self, grace_s: float) -> list[str]:
        """Stop this service's analyses for the process to end: each running one stops at its next
        step (its parse workers are ended at once), its transaction is rolled back and it is
        queued again (:class:`HandedBack`), to run when aftertrace next starts. Waits up to
        ``grace_s`` seconds; returns the incidents still running then (they are queued again when
        the store is next opened, counted as interrupted)."""
        self._stopping.set()
        for ex in list(self._executors):
            ex.abort()
        end = time.monotonic() + grace_s
        while self._running and time.monotonic() < end:
            time.sleep(0.05)
        return sorted(self._running)

    # -- intake ------------------------------------------------------------------
    def submit_path(self, path: str | os.PathLike, title: str | None = None) -> Submitted:
        return self.submit_stored(store_raw(path, self.settings.bundles_dir), path, title)

    def submit_stored(self, raw: RawBundle, path: str | os.PathLike, title: str | None = None) -> Submitted:
        """Register what :func:`ingest.bundle.store_raw` stored of ``path`` into this service's
        ``settings.bundles_dir`` (the CLI stores it while the service is being opened)."""
        sub = self._register(raw, title)
        if raw.from_dir:   # read the folder in place when it is analysed by this process
            self._local_dirs[sub.incident_id] = Path(path).resolve()
        return sub

    def submit_upload(self, stream, filename: str, title: str | None = None) -> Submitted:
        name = Path(filename or "upload").name or "upload"
        raw = store_stream(stream, name, self.settings.bundles_dir, self.settings.limits.max_upload_bytes)
        return self._register(raw, title)

    def _register(self, raw: RawBundle, title: str | None) -> Submitted:
        """The incident of a stored bundle: one per bundle, however often and however many at once
        send it. A new one is queued. A bundle sent again joins its incident as it stands (queued,
        being analysed or done: never a second analysis of it beside the first), except one whose
        analysis failed, which is queued again (the retry after a full disk or a crash).
        ``Submitted.queued``: whether this call queued it (the caller then has it analysed)."""
        iid = raw.sha256[:12]
        with self._intake:      # (the look and the write as one step: two uploads of one bundle at once)
            rows = self.store.query("SELECT status FROM incidents WHERE incident_id = ?", [iid])
            if rows and rows[0]["status"] != "failed":
                return Submitted(iid, rows[0]["status"], True, queued=False)
            if rows:
                self.store.cursor().execute(
                    "UPDATE incidents SET status = 'queued', error = NULL, interrupted = 0, raw_path = ?, "
                    "title = COALESCE(?, title) WHERE incident_id = ?", [str(raw.raw_path), title, iid])
            else:
                self.store.insert_rows("incidents", [{
                    "incident_id": iid, "title": title or raw.name, "bundle_sha256": raw.sha256,
                    "bundle_name": raw.name, "bundle_kind": raw.origin, "bundle_bytes": raw.bytes,
                    "raw_path": str(raw.raw_path),
                    "folder": str(self.settings.incident_dir(iid)), "created_at": utc_now(),
                    "status": "queued", "interrupted": 0}])
        return Submitted(iid, "queued", bool(rows), queued=True)

    # -- queries ---------------------------------------------------------------------
    def list_incidents(self) -> list[dict]:
        rows = self.store.query(
            """SELECT i.incident_id AS id, i.title, i.status, i.error, i.bundle_name, i.bundle_bytes,
                      i.created_at, i.analyzed_at, i.duration_s,
                      (SELECT count(*) FROM sources s WHERE s.incident_id = i.incident_id) AS sources,
                      json_extract_string(i.report, '$.failure.time') AS failure_time,
                      json_extract_string(i.report, '$.failure.kind') AS failure_kind,
                      json_extract_string(i.report, '$.origin.kind') AS origin_kind,
                      json_extract_string(i.report, '$.origin.summary') AS origin_summary,
                      TRY_CAST(json_extract(i.report, '$.origin.lead_s') AS DOUBLE) AS origin_lead_s
               FROM incidents i ORDER BY i.created_at DESC""")
        for r in rows:
            for k in ("created_at", "analyzed_at"):
                r[k] = report_mod.iso_utc(r[k])
        return rows

    def get_incident(self, incident_id: str) -> dict:
        rows = self.store.query(
            """SELECT incident_id AS id, title, status, error, bundle_name, bundle_bytes, bundle_sha256,
                      created_at, analyzed_at, duration_s, time_zone, time_zone_source
               FROM incidents WHERE incident_id = ?""", [incident_id])
        if not rows:
            raise NotFound(f"no incident {incident_id!r}")
        r = rows[0]
        for k in ("created_at", "analyzed_at"):
            r[k] = report_mod.iso_utc(r[k])
        counts = self.store.query(
            "SELECT status, count(*) AS n FROM sources WHERE incident_id = ? GROUP BY status", [incident_id])
        r["sources"] = {c["status"]: c["n"] for c in counts}
        run = self._running.get(incident_id) if r["status"] == "running" else None
        if run is not None:
            r["progress"] = {"stage": run["stage"], "what": STAGES.get(run["stage"], run["stage"]),
                             "done": run["done"], "total": run["total"],
                             "elapsed_s": round(time.monotonic() - run["t0"], 1)}
        return r

    def delete_incident(self, ref: str) -> dict:
        """Remove an incident and every byte of it: its rows in every table and its share links (one
        transaction), then its folder (the extracted files, exports, report) and its raw bundle.
        One that is queued or being analysed is kept (:class:`NotReady`); so is one whose heavy
        tables live in a shared Parquet location (other stores may read them)."""
        iid = self.complete_id(ref)
        if iid != ref:          # (what is gone cannot come back: no prefix names it)
            raise NotFound(f"no incident {ref!r}: give the whole id to delete one ({iid})")
        with self._intake:      # (an upload of the same bundle waits: it then makes a new incident)
            row = self.store.query("SELECT status, raw_path FROM incidents WHERE incident_id = ?", [iid])[0]
            if row["status"] in ("queued", "running") or iid in self._running:
                raise NotReady(f"incident {iid} is {row['status']}: it can be deleted once its analysis ends")
            attached = self.store.attached()
            if iid in attached:
                raise BadRequest(f"incident {iid} keeps its rows in the shared Parquet location "
                                 f"({attached[iid][0]}): deleting it is not supported")
            cur = self.store.cursor()
            cur.execute("BEGIN TRANSACTION")
            try:
                self.store.delete_incident_rows(iid)
                cur.execute("DELETE FROM shares WHERE incident_id = ?", [iid])
                cur.execute("DELETE FROM incidents WHERE incident_id = ?", [iid])
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self._local_dirs.pop(iid, None)
            freed = 0
            folder = self.settings.incident_dir(iid)
            if folder.is_dir():
                freed += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
                shutil.rmtree(folder)
            raw = Path(row["raw_path"]) if row["raw_path"] else None
            # (only a file of the raw store itself; a bundle is one incident's alone: named by its hash)
            if raw is not None and raw.parent == self.settings.bundles_dir and raw.is_file():
                freed += raw.stat().st_size
                raw.unlink()
        return {"deleted": iid, "bytes_freed": freed}

    def parse_issues(self, incident_id: str, limit: int = 200) -> list[dict]:
        """The first ``limit`` issues the parsers stored, each with its kind's severity and meaning
        (:mod:`ingest.issues`)."""
        incident_id = self.analysed_incident(incident_id)
        rows = self.store.query(
            """SELECT s.path, p.line, p.kind, p.message, p.text FROM parse_issues p
               JOIN sources s USING (incident_id, source_id) WHERE p.incident_id = ?
               ORDER BY s.path, p.line LIMIT ?""", [incident_id, limit])
        for r in rows:
            k = ISSUE_KINDS.get(r["kind"])
            r["severity"], r["about"] = (k.severity, k.about) if k else (None, None)
        return rows

    # -- the pipeline ----------------------------------------------------------------
    def analyze(self, incident_id: str, progress: Progress | None = None) -> dict:
        told = progress or no_progress
        t0 = time.perf_counter()
        run = {"stage": "start", "done": 0, "total": 1, "t0": time.monotonic()}

        def progress(stage: str, done: int, total: int) -> None:
            if self._cancelled.is_set():
                raise KeyboardInterrupt
            # (once its rows are being committed an analysis is a few seconds from its end: it ends)
            if self._stopping.is_set() and stage not in ("store", "analyze"):
                raise HandedBack(f"incident {incident_id}: aftertrace is stopping")
            run.update(stage=stage, done=done, total=total)
            told(stage, done, total)
        cur = self.store.cursor()
        row = self.store.query("SELECT * FROM incidents WHERE incident_id = ?", [incident_id])
        if not row:
            raise NotFound(f"no incident {incident_id!r}")
        inc = row[0]
        if self._stopping.is_set():
            raise HandedBack(f"incident {incident_id}: aftertrace is stopping")
        cur.execute("UPDATE incidents SET status = 'running', error = NULL WHERE incident_id = ?", [incident_id])
        self._running[incident_id] = run
        # (it leaves ``_running`` only once its status is written: a stopping service waits for that)
        try:
            try:
                rep = Pipeline(self.settings, self.store, self.registry, self._executor,
                               self._local_dirs.pop(incident_id, None)).run(inc, progress)
            except KeyboardInterrupt:
                drop_extraction(self.settings.incident_dir(incident_id))
                cur.execute("UPDATE incidents SET status = 'failed', error = ? WHERE incident_id = ?",
                            [STOPPED_BY_USER, incident_id])
                raise
            except Exception as e:
                if self._stopping.is_set():     # (whatever the stop made it raise: a parse worker ended, ...)
                    drop_extraction(self.settings.incident_dir(incident_id))
                    cur.execute("UPDATE incidents SET status = 'queued', error = NULL WHERE incident_id = ?",
                                [incident_id])
                    log.info("analysis of %s stopped with aftertrace: queued for its next start", incident_id)
                    if isinstance(e, HandedBack):
                        raise
                    raise HandedBack(f"incident {incident_id}: aftertrace is stopping") from e
                self._failed(incident_id, e)
                raise
            dur = time.perf_counter() - t0
            cur.execute("UPDATE incidents SET status = 'done', analyzed_at = ?, duration_s = ?, report = ?, "
                        "interrupted = 0 WHERE incident_id = ?",
                        [utc_now(), dur, report_mod.dumps(rep, indent=False), incident_id])
            return rep
        finally:
            self._running.pop(incident_id, None)

    def _failed(self, incident_id: str, e: Exception) -> None:
        """An analysis that raised: its status and one-line reason, the traceback in its folder."""
        if isinstance(e, DiskFull):
            msg = str(e)
        elif is_disk_full(e):   # (DuckDB, pyarrow): their text names the server's paths
            msg = str(disk_full("analysis stopped"))
        else:
            msg = f"{type(e).__name__}: {e}"
        self.store.cursor().execute("UPDATE incidents SET status = 'failed', error = ? WHERE incident_id = ?",
                                    [msg, incident_id])
        tb = traceback.format_exc()
        folder = self.settings.incident_dir(incident_id)
        drop_extraction(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "error.txt").write_text(tb)
        except OSError:      # (a full disk): the status and error above still tell
            pass

    def _executor(self, workers: int) -> Executor:
        if self.settings.executor == "ray":    # one connection per Service: starting Ray costs seconds
            if self._ray is None:
                self._ray = make_executor("ray", workers, self.settings.ray_address,
                                          self.settings.workers or None)
            return self._ray
        executor = make_executor(self.settings.executor, workers)
        self._executors.add(executor)       # (ended at once by :meth:`stop`)
        return executor
