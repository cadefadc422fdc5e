"""Helpers shared by the benchmarks: scaled inputs, timing, peak memory of a child process."""
from __future__ import annotations

import gzip
import io
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
ROOT = Path(__file__).resolve().parents[1]


def read_text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def scaled(name: str, sources: list[Path], target_bytes: int) -> Path:
    """Concatenate real files until ``target_bytes``; cached under bench/out/."""
    OUT.mkdir(parents=True, exist_ok=True)
    dest = OUT / name
    if dest.exists() and dest.stat().st_size >= target_bytes:
        return dest
    blobs = [read_text(p) for p in sources]
    with open(dest, "wb") as f:
        n = 0
        while n < target_bytes:
            for b in blobs:
                if not b.endswith(b"\n"):
                    b += b"\n"
                f.write(b)
                n += len(b)
    return dest


def run_child(code: str, cwd: Path | None = None) -> dict:
    """Run Python code in a fresh process; it prints one JSON line. Adds peak RSS (MiB).
    ``cwd``: the checkout whose code it imports (default: this one)."""
    wrapper = code + "\nimport resource, json, sys\n" \
        "print(json.dumps(dict(RESULT, peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))\n"
    r = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True,
                       cwd=cwd or Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


REFERENCE = """
import time
t = time.perf_counter()
x = 0
for i in range(10_000_000):
    x += i
loop = time.perf_counter() - t
b = bytearray(256 << 20)
t = time.perf_counter()
for _ in range(4):
    bytes(b)
copy = (time.perf_counter() - t) / 4
RESULT = dict(loop=loop, copy=copy)
"""


def machine_reference() -> str:
    """How fast this machine is right now, for rows that have no baseline of their own in the same
    run (this machine's speed varies from day to day): a 10 M-step Python loop and a 256 MB copy,
    in a fresh process."""
    r = run_child(REFERENCE)
    return f"machine reference: a 10 M-step Python loop {r['loop']:.2f} s, a 256 MB copy {r['copy'] * 1000:.0f} ms"


def cpu_model() -> str:
    """The processor's model and widest vector extension (from /proc/cpuinfo; machines of one name
    differ here, and Polars' and the C library's string scans run faster with AVX-512)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        return model
    vec = "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    return f"{model}, {vec}"


def machine() -> str:
    return f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}"


def compare(prefix: str, suffix: str, sources: dict[str, list[Path]], codes: list[str], mb: int,
            row_keys: tuple[str, ...], **fmt) -> list[dict]:
    """Run each code snippet on each scaled input; print the results and a Markdown table."""
    rows = []
    for label, srcs in sources.items():
        path = scaled(f"{prefix}-{label}-{mb}MB{suffix}", srcs, mb * 1_000_000)
        size = path.stat().st_size
        for code in codes:
            r = run_child(code.format(path=str(path), **fmt))
            r["MB/s"] = round(size / 1e6 / r["seconds"], 1)
            r["input"] = f"{label} {size / 1e6:.0f} MB"
            rows.append(r)
            print(r, flush=True)
    print(f"\n{machine()}\n")
    print("| input | tool | MB/s | seconds | peak RSS MiB | rows |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        extra = ", ".join(f"{k}={r[k]}" for k in row_keys if r.get(k) is not None)
        print(f"| {r['input']} | {r['tool']} | {r['MB/s']} | {r['seconds']:.2f} | {r['peak_rss_mib']:.0f} | {extra} |")
    return rows


def corpus_cli(doc: str, title: str, command: str, run, table, passed) -> int:
    """The command line the corpus evaluations share: --half/--only/--out/--json, the halves
    reported apart (a table each), the Markdown written with the command and the script's
    docstring, every judged row as JSON. ``passed(rows)`` gives the exit status."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--half", choices=("dev", "heldout", "both"), default="both")
    ap.add_argument("--only", help="only cases whose id contains this")
    ap.add_argument("--out", help="also write the Markdown tables here")
    ap.add_argument("--json", help="also write every judged row here")
    a = ap.parse_args()
    halves = ("dev", "heldout") if a.half == "both" else (a.half,)
    rows = run(halves, a.only)
    parts = []
    for h in halves:
        hr = [r for r in rows if r["half"] == h]
        if hr:
            parts.append(f"## {'Development' if h == 'dev' else 'Held-out'} half\n\n{table(hr)}")
    text = "\n\n".join(parts) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(f"# {title}\n\nCommand (from the repository root):\n\n    {command}\n\n"
                               + (doc.split("\n", 4)[4]).strip() + "\n\n" + text)
    sys.stdout.flush()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if passed(rows) else 1


def tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 1700000000
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class LocalServer:
    """``aftertrace serve`` (or, with ``analysis_threads``, the same app with that many background
    analyses) on a free port of 127.0.0.1 with ``home`` as its AFTERTRACE_HOME, started and answering;
    its output in ``home``'s parent folder."""

    def __init__(self, home: Path, analysis_threads: int = 0):
        import httpx
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if analysis_threads:
            cmd = [sys.executable, "-c", "import uvicorn; from aftertrace.server.app import create_app; "
                   "from aftertrace.server.settings import Settings; "
                   f"uvicorn.run(create_app(Settings.from_env(analysis_threads={analysis_threads})), "
                   f"host='127.0.0.1', port={self.port}, log_level='warning')"]
        else:
            cmd = [sys.executable, "-m", "aftertrace.server.cli", "serve", "--port", str(self.port)]
        env = dict(os.environ, AFTERTRACE_HOME=str(home), PYTHONPATH=str(ROOT))
        env.pop("AFTERTRACE_TOKEN", None)
        home.mkdir(parents=True, exist_ok=True)
        self.log = open(home.parent / f"server-{self.port}.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise SystemExit("the server did not start")

    def children(self) -> list[int]:
        """Every process below the server (workers, the resource tracker, their children)."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            kids = [int(k) for k in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                                   text=True).stdout.split()]
            out += kids
            todo += kids
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
        self.log.close()
