"""Kernel-log ingest throughput on logs scaled up from real samples, next to the obvious baselines.

    .venv/bin/python bench/bench_kernel.py [--mb 200] [--out bench/out] [--inputs dense,realistic[,other]] [--repeat N]

Inputs (all built from real files in ``tests/data``, repeated to the target size):

* ``dense``: a real GPU server's boot log (``dmesg --decode --time-format iso``, leptonai/gpud test
  data) followed by this project's own real OOM-kill report; and the same records re-printed as raw
  ``[ s.us]`` dmesg plus a real hung-task burst per copy. Crash-dense: about 4 % of the lines are
  signature candidates, every 300 kB holds an OOM report and hung-task stacks.
* ``realistic``: the real boot log alone, as it is (``--decode --time-format iso``) and re-printed as
  raw dmesg: what a healthy node's kernel log looks like (a few candidates per copy).
* ``other`` (not in the default): the other kernel-log formats, realistic content: the boot log's
  records re-printed as ``journalctl -k -o short-precise`` and as a syslog ``kern.log`` (whole
  seconds, ``-o short``'s layout), and a real ``journalctl -k -o json`` tail (this project's own VM)
  repeated with its clocks moved on per copy.

Measured, single process:

* ``aftertrace``: ``ingest.parse.parse_file`` end to end (detection, parsing, typing, Parquet
  spill) -- what the pipeline runs per file; wall seconds and the CPU seconds of the whole process
  (all threads), since on a shared machine wall time says more about the neighbours; with
  ``--repeat N`` each input is parsed N times, the inputs interleaved, and the best wall time (with
  the median) and the minimum / median CPU seconds are printed;
* ``python loop``: ``for line in f: RAW.match(line)`` -- the least a Python parser would do;
* ``grep -c``: counting the OOM kills with grep (no parsing at all).

Prints a Markdown table and the load average before and after; the scaled inputs are deleted
afterwards unless ``--keep``. ``--stages`` also prints the CPU seconds of each stage on the first
32 MB chunk of each input (best of 3, CPU time of the whole process, so it is meaningful on a shared
machine): line split (``ingest.lines``) and the format's ``records`` (both on the reading thread),
the engine (``KernelEngine.feed``: candidate tests, boots, state machine and the subsystem names) and the writer thread's work (the chunk's events frame and its Parquet
write, ``RowSink.add_frame``), which the parser runs while the next chunk is parsed.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aftertrace.ingest.parse import ParseJob, parse_file  # noqa: E402

DATA = ROOT / "tests" / "data"
BOOT_LOG = DATA / "kernel" / "gpud__dmesg-decode-iso_boot.log.gz"     # a real GPU server's boot log
CRASH = DATA / "kernel" / "vm_dmesg_decode_iso.txt"                  # our own OOM kill + segfault
HUNG = DATA / "dmesg" / "issue_sonic-buildimage-4822_raw_multi_hung_tasks.log"
DECODE_ISO = re.compile(rb"^(\w+\s*:\w+\s*: )(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{6})\+00:00 ")


def _iso_to_raw(data: bytes) -> list[tuple[float, bytes]]:
    """(seconds, message) of each decode+iso record, seconds relative to the first record."""
    out, t0 = [], None
    for line in data.split(b"\n"):
        m = DECODE_ISO.match(line)
        if not m:
            continue
        t = time.mktime(time.strptime(m.group(2).decode(), "%Y-%m-%dT%H:%M:%S")) + int(m.group(3)) / 1e6
        t0 = t if t0 is None else t0
        out.append((t - t0, line[m.end():]))
    return out


def scaled_logs(work: Path, mb: int) -> tuple[Path, Path]:
    """The real boot log + our real OOM report (+ a real hung-task burst), repeated to ``mb``.

    ``--decode --time-format iso`` is the boot log's own format (copies as they are). The raw
    ``[ s.us]`` variant re-prints the same records with printk seconds, each copy later than
    the previous one so the file stays one boot.
    """
    boot = gzip.decompress(BOOT_LOG.read_bytes())
    crash = CRASH.read_bytes()
    iso_block = boot + crash
    iso = work / "dmesg_decode_iso_scaled.txt"
    with open(iso, "wb") as f:
        for _ in range(max(1, mb * 1_000_000 // len(iso_block))):
            f.write(iso_block)
    recs = _iso_to_raw(boot) + _iso_to_raw(crash)
    hung = HUNG.read_bytes().split(b"\n")
    raw = work / "dmesg_raw_scaled.txt"
    offset, written = 10.0, 0
    with open(raw, "wb") as f:
        while written < mb * 1_000_000:
            block = b"".join(b"[%12.6f] %s\n" % (offset + min(t, 3000.0), msg) for t, msg in recs)
            block += b"".join(b"[%12.6f]%s\n" % (offset + 3000.5, ln[14:]) for ln in hung if ln)
            f.write(block)
            written += len(block)
            offset += 3001.0
    return raw, iso


def realistic_logs(work: Path, mb: int) -> tuple[Path, Path]:
    """The real boot log alone, repeated to ``mb``: as it is (iso) and re-printed as raw dmesg."""
    boot = gzip.decompress(BOOT_LOG.read_bytes())
    iso = work / "boot_decode_iso_scaled.txt"
    with open(iso, "wb") as f:
        for _ in range(max(1, mb * 1_000_000 // len(boot))):
            f.write(boot)
    recs = _iso_to_raw(boot)
    raw = work / "boot_raw_scaled.txt"
    offset, written = 10.0, 0
    with open(raw, "wb") as f:
        while written < mb * 1_000_000:
            block = b"".join(b"[%12.6f] %s\n" % (offset + min(t, 3000.0), msg) for t, msg in recs)
            f.write(block)
            written += len(block)
            offset += 3001.0
    return raw, iso


JOURNAL_JSON = DATA / "kernel" / "vm_journalctl_k_json_tail.txt.gz"    # a real `journalctl -k -o json` tail
HOST = b"gpu-node-17"


def other_logs(work: Path, mb: int) -> tuple[Path, Path, Path]:
    """The other kernel-log formats at ``mb``: the real boot log's records re-printed as
    ``journalctl -k -o short-precise`` and as a syslog ``kern.log`` (``-o short``'s layout, whole
    seconds), each copy later than the previous one, and the real ``journalctl -k -o json`` tail
    repeated with its three clocks moved on per copy (one boot, its own field order kept)."""
    import json

    recs = _iso_to_raw(gzip.decompress(BOOT_LOG.read_bytes()))
    t0 = time.mktime((2026, 11, 29, 13, 0, 0, 0, 0, -1))
    outs = []
    for name, precise in (("journal_short_precise_scaled.txt", True), ("kern_log_scaled.txt", False)):
        path = work / name
        offset, written = 0.0, 0
        with open(path, "wb") as f:
            while written < mb * 1_000_000:
                parts = []
                for t, msg in recs:
                    w = t0 + offset + min(t, 3000.0)
                    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(w)).encode()
                    if precise:
                        stamp += b".%06d" % round((w % 1) * 1e6 % 1e6)
                    parts.append(b"%s %s kernel: %s\n" % (stamp, HOST, msg))
                block = b"".join(parts)
                f.write(block)
                written += len(block)
                offset += 3001.0
        outs.append(path)
    lines = [json.loads(ln) for ln in gzip.decompress(JOURNAL_JSON.read_bytes()).splitlines() if ln.strip()]
    span = max(int(r["__REALTIME_TIMESTAMP"]) for r in lines) - min(int(r["__REALTIME_TIMESTAMP"]) for r in lines)
    step = span + 1_000_000
    path = work / "journal_json_scaled.txt"
    k, written = 0, 0
    with open(path, "wb") as f:
        while written < mb * 1_000_000:
            parts = []
            for r in lines:
                r = dict(r)
                for key in ("__REALTIME_TIMESTAMP", "_SOURCE_MONOTONIC_TIMESTAMP", "__MONOTONIC_TIMESTAMP"):
                    if key in r:
                        r[key] = str(int(r[key]) + k * step)
                parts.append(json.dumps(r, separators=(",", ":")).encode() + b"\n")
            block = b"".join(parts)
            f.write(block)
            written += len(block)
            k += 1
    outs.append(path)
    return tuple(outs)


# The least any kernel-log parser that keeps every line as an event does (``python -m bench``'s floor
# row): read and split the lines, write one events row per line (its number, text, a time and two
# constant names) through the same sink, on one thread, with no parsing at all.
FLOOR = """
import time, tempfile, shutil
import polars as pl
from aftertrace.ingest.lines import line_frames
from aftertrace.ingest.sink import RowSink
out = tempfile.mkdtemp()
sink = RowSink(out, compression="none")
t, c = time.perf_counter(), time.process_time()
lines = 0
cat = pl.Categorical
with open({path!r}, "rb") as f:
    for df in line_frames(f):       # every line an event, as the parser keeps unknown lines
        lines += df.height
        sink.add_frame("events", df.select(
            pl.col("lineno").alias("line"), pl.col("lineno").alias("ts_raw_ns"), pl.lit("kernel", cat).alias("category"),
            pl.lit("kernel", cat).alias("name"), pl.col("line").str.slice(0, 4000).alias("text")))
sink.close()
dt, cpu = time.perf_counter() - t, time.process_time() - c
shutil.rmtree(out)
RESULT = dict(seconds=dt, cpu_s=round(cpu, 2), lines=lines)
"""


def python_loop(path: Path) -> float:
    rx = re.compile(r"^(?:<(\d)>)?\[\s*(\d+)\.(\d{6})\] ?(.*)$")
    t0 = time.perf_counter()
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if rx.match(line):
                n += 1
    return time.perf_counter() - t0


def grep_count(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["grep", "-c", "Killed process", str(path)], stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_parse(path: Path, work: Path) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of the process, result) of one ``parse_file``."""
    out = work / "parts"
    shutil.rmtree(out, ignore_errors=True)
    c0, t0 = _cpu(), time.perf_counter()
    res = parse_file(ParseJob(str(path), path.name, str(out)))
    dt, cpu = time.perf_counter() - t0, _cpu() - c0
    shutil.rmtree(out, ignore_errors=True)
    return dt, cpu, res


def stages(path: Path, work: Path) -> str:
    """CPU seconds per stage on the first chunk of ``path`` (see the module doc)."""
    import io

    from aftertrace.ingest.formats.kernel import engine as K
    from aftertrace.ingest.lines import CHUNK_BYTES, line_frames
    from aftertrace.ingest.reader import Head
    from aftertrace.ingest.registry import ParseContext, default_registry
    from aftertrace.ingest.sink import TEMP_COMPRESSION, RowSink

    parser_cls = default_registry().detect(Head.read(path, path.name)).parser
    with open(path, "rb") as f:
        data = f.read(CHUNK_BYTES)
    data = data[:data.rfind(b"\n") + 1]
    best: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.process_time()
        out = fn()
        best[name] = min(best.get(name, 1e9), time.process_time() - t0)
        return out

    for i in range(3):
        df = timed("lines", lambda: next(line_frames(io.BytesIO(data), len(data) + 1)))
        # (the codec parse_file's own parts use: uncompressed; lz4, the default, cost ~2x in this column)
        sink = RowSink(work / f"stage-parts-{i}", compression=TEMP_COMPRESSION)
        ctx = ParseContext(str(path), path.name, sink)
        parser = parser_cls()
        parser.prepare(ctx)
        rec = timed("records", lambda: parser.records(df, ctx))
        engine = K.KernelEngine(ctx, parser)
        jobs = []
        engine._write_events = jobs.append       # time the writer thread's work on its own
        engine._after_writes = jobs.append       # (the boot facts queued behind it, since the fifth pass)
        timed("engine", lambda: engine.feed(rec))
        # the writer's job: a function (events frame and add_frame), or in older revisions the frame
        # itself (the same script times both)
        timed("write", lambda: [j() if callable(j) else sink.add_frame("events", j) for j in jobs])
        shutil.rmtree(work / f"stage-parts-{i}", ignore_errors=True)
    total = sum(best.values())
    return (f"| {path.name} | {len(data) / 1e6:.0f} | " + " | ".join(f"{best[k]:.3f}" for k in
            ("lines", "records", "engine", "write")) + f" | {total:.3f} | {len(data) / 1e6 / total:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--inputs", default="dense,realistic", help="dense, realistic, other (journalctl "
                    "-k -o short-precise / -o json, syslog kern.log) or several, comma-separated")
    ap.add_argument("--stages", action="store_true", help="CPU seconds per stage on one 32 MB chunk")
    ap.add_argument("--repeat", type=int, default=1, help="parse each input this many times, interleaved: best "
                    "wall (and its median), CPU min / median")
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-kernel-"))
    work.mkdir(parents=True, exist_ok=True)
    rows, stage_rows = [], []
    load0 = os.getloadavg()
    try:
        paths: list[Path] = []
        kinds = args.inputs.split(",")
        if "dense" in kinds:
            paths += scaled_logs(work, args.mb)
        if "realistic" in kinds:
            paths += realistic_logs(work, args.mb)
        if "other" in kinds:
            paths += other_logs(work, args.mb)
        if args.stages:
            stage_rows = [stages(p, work) for p in paths]
        runs: dict[Path, list[tuple[float, float, object]]] = {p: [] for p in paths}
        for _ in range(args.repeat):      # interleaved: each input once per round
            for path in paths:
                runs[path].append(run_parse(path, work))
        for path in paths:
            size = path.stat().st_size / 1e6
            walls, cpus = sorted(r[0] for r in runs[path]), sorted(r[1] for r in runs[path])
            res = runs[path][0][2]
            dt, cpu = walls[0], cpus[len(cpus) // 2]
            many = len(walls) > 1
            rows.append((path.name, res.format, f"{size:.0f}", "aftertrace parse_file",
                         f"{dt:.2f}" + (f" (median {walls[len(walls) // 2]:.2f})" if many else ""),
                         f"{size / dt:.0f}", (f"{cpus[0]:.2f} / " if many else "") + f"{cpu:.2f}", f"{size / cpu:.0f}",
                         f"{res.records:,} events, {res.issues} issues, findings {res.attrs.get('findings')}"))
            if path.name == "dmesg_raw_scaled.txt":
                dt = python_loop(path)
                rows.append((path.name, "", f"{size:.0f}", "python line loop + regex match", f"{dt:.2f}",
                             f"{size / dt:.0f}", "", "", "no events written"))
            if path.name.startswith("dmesg_"):
                dt = grep_count(path)
                rows.append((path.name, "", f"{size:.0f}", "grep -c 'Killed process'", f"{dt:.2f}",
                             f"{size / dt:.0f}", "", "", "counts lines only"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    print("| input | parser | MB | what | wall s | MB/s (best wall) | CPU s | MB per CPU-s (median CPU) | result |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if stage_rows:
        print("\nCPU seconds per stage, first chunk (best of 3):\n")
        print("| input | MB | lines | records | engine | events frame + write | sum | MB per CPU-s |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(stage_rows))
    print(f"\nmachine: {os.cpu_count()} CPUs (shared with other sessions), python {sys.version.split()[0]}, "
          f"load average (1, 5, 15 min) before {', '.join(f'{x:.2f}' for x in load0)}, "
          f"after {', '.join(f'{x:.2f}' for x in load1)}")


if __name__ == "__main__":
    main()
