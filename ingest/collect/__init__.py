"""``aftertrace collect``: a black-box recorder beside a training job.

::

    aftertrace collect --out DIR [--pid PID | -- CMD ARGS...] [--cgroup PATH ...] [--keep 15m]
                       [--max-mb N] [--perf] [--interval 1s] [--watchdog REGEX ...] [--files GLOB ...]
                       [--hang-after DURATION] [--strace-seconds 3s] [--no-live-capture]

It records continuously into a bounded ring under ``DIR/ring`` (``ring.py``): cgroup v1/v2
and PSI snapshots every interval (the job's cgroups from ``/proc/<pid>/cgroup`` unless
``--cgroup`` names them; ``cgroups.py``), ``/proc/<pid>/status`` of the job's processes
(``procs.py``), the kernel log followed live with raw boot-relative times (``kmsg.py``), a
clock anchor (uptime + wall time) every 5 s (``host.py``), optionally ``perf record`` in
switch-output mode (``perf.py``), the job's stdout/stderr when it wraps the command, NCCL
debug files (``NCCL_DEBUG_FILE``), nvidia-smi samples when there is a GPU, and host facts
(``sources.py``).

When the job exits non-zero or by a signal, a watchdog line appears in its output, the job
prints nothing for ``--hang-after``, the file ``DIR/trigger`` appears or the recorder gets
SIGUSR1 (``trigger.py``), it writes ``DIR/bundle-<time>/`` (or ``.tar.gz``) covering the last
``--keep`` with an ``aftertrace-manifest.json`` (``writer.py``) and prints the ``aftertrace
analyze`` command. A bundle written while the job still runs also holds what its processes were
doing then: py-spy dumps, a few seconds of strace, kernel stacks, /dev/shm usage (``live.py``).
Its exit status is the job's (128 + N for a signal N).

Also runnable without the rest of aftertrace loaded: ``python -m aftertrace.ingest.collect ...``.
Linux only; what cannot be recorded (no root, no cgroup, no perf, no GPU) is said once on
stderr and listed under ``missing`` in the manifest, never a traceback.
"""
from __future__ import annotations

import argparse
import re
import sys

__all__ = ["add_arguments", "config_from_args", "main", "parse_duration", "parse_size", "run", "run_cli"]

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """'15m' -> 900.0, '500ms' -> 0.5, '2h' -> 7200.0, '30' -> 30.0 (seconds)."""
    m = _DUR.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 1s, 15m, 2h)")
    return float(m.group(1)) * _UNITS[m.group(2).lower() if m.group(2) else None]


def parse_size(text: str) -> int:
    """Megabytes ('256') or with a unit ('2G', '512M', '800K') -> bytes."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG])?[bB]?\s*$", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (megabytes, or with K/M/G)")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, None: 1 << 20}[(m.group(2) or "").lower() or None]
    return int(float(m.group(1)) * mult)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for the ring (DIR/ring) and the bundles (DIR/bundle-<time>)")
    p.add_argument("--pid", type=int, help="attach to a running job (its process tree) instead of wrapping a command")
    p.add_argument("--cgroup", action="append", default=[], metavar="PATH",
                   help="cgroup to snapshot: a folder (/sys/fs/cgroup/memory/job) or a cgroup path (/job) "
                        "looked up in every hierarchy; repeatable (default: the job's, from /proc/<pid>/cgroup)")
    p.add_argument("--keep", type=_duration, default=900.0, metavar="DURATION",
                   help="how much history the ring keeps and a bundle covers (default 15m)")
    p.add_argument("--max-mb", type=_size, default=256 << 20, metavar="N", dest="max_bytes",
                   help="size limit of the ring in MB (default 256; K/M/G suffixes accepted)")
    p.add_argument("--interval", type=_duration, default=1.0, metavar="DURATION",
                   help="snapshot interval (default 1s)")
    p.add_argument("--perf", action="store_true",
                   help="also run perf record -a (cpu-clock call chains + process exits, -k CLOCK_MONOTONIC)")
    p.add_argument("--perf-freq", type=int, default=49, metavar="HZ", help="perf sampling frequency (default 49)")
    p.add_argument("--watchdog", action="append", default=[], metavar="REGEX",
                   help="a line of the job's output (or NCCL file) matching this triggers a bundle; repeatable; "
                        "added to the built-in timeout patterns")
    p.add_argument("--no-default-watchdog", action="store_true", help="do not use the built-in timeout patterns")
    p.add_argument("--linger", type=_duration, default=5.0, metavar="DURATION",
                   help="after a watchdog/request trigger, keep recording this long before writing (default 5s)")
    p.add_argument("--hang-after", type=_duration, default=None, metavar="DURATION",
                   help="no output line from the job for this long while it runs triggers a bundle (a hang "
                        "watchdog; default off)")
    p.add_argument("--strace-seconds", type=_duration, default=3.0, metavar="DURATION", dest="strace_s",
                   help="when a bundle is written while the job runs, strace its processes this long "
                        "(default 3s; 0: no strace)")
    p.add_argument("--no-live-capture", action="store_true",
                   help="when a bundle is written while the job runs, do not take py-spy dumps, strace, "
                        "kernel stacks and /dev/shm usage of its processes")
    p.add_argument("--files", action="append", default=[], metavar="GLOB",
                   help="also put files matching GLOB modified within --keep into the bundle (profiler traces, "
                        "launcher logs); repeatable")
    p.add_argument("--archive", action="store_true", help="write the bundle as DIR/bundle-<time>.tar.gz")
    p.add_argument("--anchor-every", type=_duration, default=5.0, metavar="DURATION",
                   help="clock anchor interval (default 5s: a step of the wall clock is placed between two)")
    p.add_argument("--kernel-log", choices=("auto", "dmesg", "off"), default="auto",
                   help="auto: follow /dev/kmsg, else poll dmesg; dmesg: poll dmesg; off")
    p.add_argument("--no-gpu", action="store_true", help="do not run nvidia-smi")
    p.add_argument("--quiet-output", action="store_true",
                   help="do not pass the job's output through to the collector's stdout")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the job to run and record (after --)")


def config_from_args(args: argparse.Namespace, argv: list[str] | None = None):
    from .recorder import Config
    cmd = list(args.command or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if bool(cmd) == (args.pid is not None):
        raise ValueError("give either --pid PID or a command after -- (not both)")
    if args.interval < 0.05:
        raise ValueError("--interval must be at least 50ms")
    if args.keep < 10:
        raise ValueError("--keep must be at least 10s")
    if args.max_bytes < 4 << 20:
        raise ValueError("--max-mb must be at least 4")
    for rx in args.watchdog:
        try:
            re.compile(rx)
        except re.error as e:
            raise ValueError(f"--watchdog {rx!r}: {e}") from None
    return Config(out=args.out, command=cmd or None, pid=args.pid, cgroups=args.cgroup, keep_s=args.keep,
                  max_bytes=args.max_bytes, interval_s=args.interval, perf=args.perf, perf_freq=args.perf_freq,
                  watchdog=args.watchdog, watchdog_defaults=not args.no_default_watchdog, linger_s=args.linger,
                  archive=args.archive, files=args.files, anchor_every_s=args.anchor_every,
                  hang_after_s=args.hang_after, strace_s=args.strace_s, live=not args.no_live_capture,
                  nvidia=not args.no_gpu, passthrough=not args.quiet_output, kernel_log=args.kernel_log,
                  argv=list(argv if argv is not None else sys.argv))


def run(args: argparse.Namespace, argv: list[str] | None = None, log=None) -> int:
    """Run the recorder from parsed arguments; returns the exit status (the job's)."""
    import platform
    if platform.system() != "Linux":
        _err(log, "the collector reads /proc and /sys: it runs on Linux only")
        return 2
    try:
        cfg = config_from_args(args, argv)
    except ValueError as e:
        _err(log, str(e))
        return 2
    from .recorder import Recorder
    rec = Recorder(cfg, log=log)
    try:
        return rec.run()
    except SystemExit as e:           # setup errors carry a one-line reason
        if isinstance(e.code, str):
            _err(log, e.code)
            return 127 if e.code.startswith("cannot start") else 2
        raise
    except OSError as e:
        _err(log, f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
        return 2


def run_cli(args: argparse.Namespace) -> int:
    """``aftertrace collect`` from the main command line.

    The ``aftertrace`` process has the analysis stack loaded (DuckDB, Polars: ~60 MB resident);
    a recorder that may live for days beside the job, often inside the job's own memory cgroup,
    should not carry it. When the arguments are the process's own (``aftertrace ... collect
    ARGS``), the process replaces itself with ``python -m aftertrace.ingest.collect ARGS`` (same pid, same
    stdio: signals and exit status are unchanged); otherwise it records in-process.
    """
    import os
    argv = sys.argv
    ours = bool(argv) and (os.path.basename(argv[0]) == "aftertrace" or
                           argv[0].endswith(os.path.join("server", "cli.py")))
    if ours and "collect" in argv[1:] and os.environ.get("AFTERTRACE_COLLECT_INPROCESS") != "1":
        rest = argv[argv.index("collect", 1) + 1:]
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable, "-m", "aftertrace.ingest.collect", *rest])
        except OSError:
            pass                       # fall back to recording in this process
    return run(args, argv=list(argv))


def _err(log, msg: str) -> None:
    if log is not None:
        log(msg)
    else:
        sys.stderr.write(f"aftertrace collect: {msg}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="aftertrace collect",
                                description="Black-box recorder beside a training job; writes a crash bundle "
                                            "when the job fails.")
    add_arguments(p)
    args = p.parse_args(argv)
    return run(args, argv=["aftertrace", "collect"] + list(argv if argv is not None else sys.argv[1:]))
