"""Kernel-log ingest throughput on logs scaled up from real samples, next to the obvious baselines.

    .venv/bin/python bench/bench_kernel.py [--mb 200] [--out bench/out]

Input: a real GPU server's boot log (``dmesg --decode --time-format iso``, leptonai/gpud test data)
followed by this project's own real OOM-kill report, repeated to the target size; and the same
records re-printed as raw ``[ s.us]`` dmesg (plus a real hung-task burst per copy). Measured,
single process:

* ``aftertrace``: ``ingest.parse.parse_file`` end to end (detection, parsing, typing, Parquet
  spill) -- what the pipeline runs per file;
* ``python loop``: ``for line in f: RAW.match(line)`` -- the least a Python parser would do;
* ``grep -c``: counting the OOM kills with grep (no parsing at all).

Prints a Markdown table; the scaled inputs are deleted afterwards unless ``--keep``. ``--stages``
also prints the CPU seconds of each stage on the first 32 MB chunk of each input (best of 3, CPU
time of the whole process, so it is meaningful on a shared machine): line split (``ingest.lines``),
the format's ``records``, the engine (``KernelEngine.feed``: candidates, boots, state machine,
events frame) and the Parquet write of the chunk's events (``RowSink.add_frame``), which the parser
runs on a worker thread while the next chunk is parsed.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest.parse import ParseJob, parse_file  # noqa: E402

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


def run_parse(path: Path, work: Path) -> tuple[float, object]:
    out = work / "parts"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    res = parse_file(ParseJob(str(path), path.name, str(out)))
    dt = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return dt, res


def stages(path: Path, work: Path) -> str:
    """CPU seconds per stage on the first chunk of ``path`` (see the module doc)."""
    import io

    from ingest.formats import kernel as K
    from ingest.lines import CHUNK_BYTES, line_frames
    from ingest.reader import Head
    from ingest.registry import ParseContext, default_registry
    from ingest.sink import RowSink

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
        sink = RowSink(work / f"stage-parts-{i}")
        ctx = ParseContext(str(path), path.name, sink)
        parser = parser_cls()
        parser.prepare(ctx)
        rec = timed("records", lambda: parser.records(df, ctx))
        engine = K.KernelEngine(ctx, parser)
        frames = []
        engine._write_events = frames.append       # time the write on its own
        timed("engine", lambda: engine.feed(rec))
        timed("write", lambda: [sink.add_frame("events", fr) for fr in frames])
        shutil.rmtree(work / f"stage-parts-{i}", ignore_errors=True)
    total = sum(best.values())
    return (f"| {path.name} | {len(data) / 1e6:.0f} | " + " | ".join(f"{best[k]:.3f}" for k in
            ("lines", "records", "engine", "write")) + f" | {total:.3f} | {len(data) / 1e6 / total:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--stages", action="store_true", help="CPU seconds per stage on one 32 MB chunk")
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-kernel-"))
    work.mkdir(parents=True, exist_ok=True)
    rows, stage_rows = [], []
    try:
        raw, iso = scaled_logs(work, args.mb)
        if args.stages:
            stage_rows = [stages(p, work) for p in (raw, iso)]
        for path in (raw, iso):
            size = path.stat().st_size / 1e6
            dt, res = run_parse(path, work)
            rows.append((path.name, res.format, f"{size:.0f}", "aftertrace parse_file", f"{dt:.2f}",
                         f"{size / dt:.0f}", f"{res.records:,} events, {res.issues} issues, "
                         f"findings {res.attrs.get('findings')}"))
            if path is raw:
                dt = python_loop(path)
                rows.append((path.name, "", f"{size:.0f}", "python line loop + regex match", f"{dt:.2f}",
                             f"{size / dt:.0f}", "no events written"))
            dt = grep_count(path)
            rows.append((path.name, "", f"{size:.0f}", "grep -c 'Killed process'", f"{dt:.2f}",
                         f"{size / dt:.0f}", "counts lines only"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("| input | parser | MB | what | seconds | MB/s | result |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if stage_rows:
        print("\nCPU seconds per stage, first chunk (best of 3):\n")
        print("| input | MB | lines | records | engine | write | sum | MB/s of CPU |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(stage_rows))
    print(f"\nmachine: {os.cpu_count()} CPUs (shared with other sessions), python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
