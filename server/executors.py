"""Where the per-file parse runs: a local process pool (the default) or a Ray cluster.

The pipeline hands an :class:`Executor` a function (``ingest.parse.parse_file``) and its jobs
(:class:`ingest.parse.ParseJob`) and gets back ``(job, result)`` pairs in the order they finish,
where ``result`` is what the function returned or the exception that stopped it (a worker that
died, a task Ray could not run). Both executors run the same function on the same jobs, so the
rows, the sources and the report are the same whichever runs them.

Storage. A job reads ``job.path`` (the extracted file) and writes its Parquet parts under
``job.out_dir`` (the incident's ``work/`` folder); the result names those parts by path and the
service loads them into DuckDB. With a shared Parquet location (``--parts-dir``,
``job.parts_root``) the parts end up as partitions there instead and the store reads the heavy
tables in place (``server/store.py``). A large perf script text is several jobs, one per byte
range (``ingest.parse.split_job``), merged by the service when the last one is in. With a local
Ray (``ray.init(num_cpus=...)``) every worker is on this machine and the folders are simply
shared. On a real multi-machine cluster (``--ray-address``) the workers must see the same paths:
put ``AFTERTRACE_HOME`` (where the bundle is extracted and the parts are written) and the parts
dir on a shared file system (NFS or similar) mounted at the same path on every node, and install
aftertrace (``pip install aftertrace[ray]``) on every node. Object storage is not supported yet.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

J = TypeVar("J")

EXECUTORS = ("local", "ray")
RAY_MISSING = ("the Ray executor needs the ray package: install aftertrace[ray] "
               "(pip install 'aftertrace[ray]' or pip install 'ray>=2.9')")


class ExecutorUnavailable(RuntimeError):
    """The executor cannot run here (Ray is not installed, the cluster cannot be reached)."""


class Executor(Protocol):
    name: str

    def map_unordered(self, fn: Callable[[J], Any], jobs: Iterable[J]) -> Iterator[tuple[J, Any]]:
        """``(job, fn(job))`` as each finishes; the exception instead of the result when the
        call could not complete. Every job is yielded exactly once."""
        ...

    def start(self, warm: Callable[[Any], Any]) -> None:
        """Start the workers now (``warm(None)`` runs once in each: imports), so that they are
        ready when the first map comes; an executor without workers of its own ignores it."""
        ...

    def close(self) -> None:
        ...

    def abort(self) -> None:
        """Stop the work in progress now, from any thread (the service is stopping): the map in
        progress yields a failure for each job it did not finish."""
        ...


class LocalExecutor:
    """A pool of ``workers`` fresh (spawned) processes on this machine, started by the first map
    (no more workers than its jobs) and kept for the next maps until :meth:`close`: the detect
    stage and the parse share one pool, so its start-up is paid once."""
    name = "local"

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self._pool: ProcessPoolExecutor | None = None

    def _submit(self, n_jobs: int, fn, job):
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=min(self.workers, n_jobs), mp_context=get_context("spawn"),
                                             initializer=_watch_parent, initargs=(os.getpid(),))
            _widen_result_pipe(self._pool)
        try:
            return self._pool.submit(fn, job)
        except BrokenProcessPool:      # a worker of an earlier map died: a new pool for this one
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return self._submit(n_jobs, fn, job)

    def start(self, warm) -> None:
        # (one call per worker: the pool spawns a worker for each call that finds none idle;
        # their futures are not kept, a failure shows again in the first map)
        for _ in range(self.workers):
            self._submit(self.workers, warm, None)

    def map_unordered(self, fn, jobs):
        jobs = list(jobs)
        if not jobs:
            return
        futs = {self._submit(len(jobs), fn, job): job for job in jobs}
        try:
            for fut in as_completed(futs):
                try:
                    res = fut.result()
                except Exception as e:   # the worker itself died (BrokenProcessPool) or fn raised
                    res = e
                # (a finished future keeps its result: the caller's copy is the only one kept)
                yield futs.pop(fut), res
                del fut, res
        finally:                         # the caller stopped early (its load failed): drop the rest
            for fut in futs:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """End the workers now, busy or not (from any thread): the map in progress gets each
        unfinished job's failure (``BrokenProcessPool``) and the pool's owner closes it."""
        pool = self._pool
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _watch_parent(parent: int) -> None:
    """A worker's first step: it ends when the process that started it is gone (killed, crashed,
    stopped): a parse worker never outlives the analysis it works for, nor holds its memory."""
    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


RESULT_PIPE_BYTES = 1 << 20


def _widen_result_pipe(pool: ProcessPoolExecutor) -> None:
    """Give the pipe the workers send their results through room for a whole result (Linux;
    best effort: the pool works as it is otherwise).

    A result carries a small file's rows (``ingest.sink.INLINE_ROWS``): often more than a pipe's
    default 64 KiB. A worker writing more than the pipe holds waits until this process has read
    the rest, and while every core is busy parsing, this process's reading thread waits its turn
    for the interpreter lock: the worker sits idle meanwhile instead of parsing its next file.
    With the result in the pipe's buffer, the worker goes on at once."""
    try:
        import fcntl
        fd = pool._result_queue._reader.fileno()    # (the pool's own pipe: no public handle to it)
        limit = min(RESULT_PIPE_BYTES, int(Path("/proc/sys/fs/pipe-max-size").read_text()))
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, limit)
    except (ImportError, AttributeError, OSError, ValueError):
        pass


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise ExecutorUnavailable(RAY_MISSING) from e
    return ray


def _call(fn, job):
    """The Ray task: ``fn`` travels by reference (``ingest.parse.parse_file``), builtins too."""
    return fn(job)


def _project_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


class RayExecutor:
    """Each job is one Ray task (1 CPU) running ``fn(job)``.

    ``address``: an existing cluster (``ray://host:10001``, ``host:6379`` or ``auto``); without it
    a local Ray is started with ``num_cpus`` CPUs (default: all). When Ray is already initialised
    in this process (a test, a notebook) that connection is used as it is. ``max_in_flight``
    bounds the tasks submitted at once (default: 4 per CPU of the cluster), so that an incident of
    100,000 files does not put 100,000 tasks in the scheduler at once.
    """
    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 max_in_flight: int | None = None):
        self.ray = _import_ray()
        self.address = address
        self.started = False
        if not self.ray.is_initialized():
            kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                      configure_logging=False)
            if address:
                kw["address"] = address
            else:
                if num_cpus:
                    kw["num_cpus"] = int(num_cpus)
                # local workers import the project from this checkout, installed or not
                path = os.pathsep.join(p for p in (_project_root(), os.environ.get("PYTHONPATH")) if p)
                kw["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
            try:
                self.ray.init(**kw)
            except Exception as e:   # (ConnectionError, a cluster of another Ray version)
                where = f"the Ray cluster at {address}" if address else "a local Ray"
                raise ExecutorUnavailable(f"cannot start {where}: {type(e).__name__}: {e}") from e
            self.started = True
        cpus = int(self.ray.cluster_resources().get("CPU", 1) or 1)
        self.max_in_flight = max_in_flight or max(8, 4 * cpus)
        self._task = None

    def map_unordered(self, fn, jobs):
        ray = self.ray
        if self._task is None:
            self._task = ray.remote(num_cpus=1, max_retries=0)(_call)
        remote = self._task
        todo = list(jobs)
        todo.reverse()                     # pop() from the end keeps the caller's order
        pending: dict[Any, Any] = {}
        try:
            while todo or pending:
                while todo and len(pending) < self.max_in_flight:
                    job = todo.pop()
                    pending[remote.remote(fn, job)] = job
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    job = pending.pop(ref)
                    try:
                        res = ray.get(ref)
                    except Exception as e:     # RayTaskError (fn raised), WorkerCrashedError, ...
                        res = e
                    yield job, res
        finally:                               # the caller stopped early (its load failed)
            for ref in pending:
                try:
                    ray.cancel(ref)
                except Exception:
                    pass

    def start(self, warm) -> None:
        """Nothing to start: Ray's workers are the cluster's."""

    def close(self) -> None:
        """Leaves Ray running: connecting again costs seconds; :meth:`shutdown` stops it."""

    def abort(self) -> None:
        """The cluster's tasks finish on their own: the stopping service does not wait for them
        (it stops at the next result)."""

    def shutdown(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_executor(kind: str, workers: int, ray_address: str | None = None,
                  ray_cpus: int | None = None) -> LocalExecutor | RayExecutor:
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(address=ray_address, num_cpus=ray_cpus)
    raise ValueError(f"unknown executor {kind!r}: one of {', '.join(EXECUTORS)}")
