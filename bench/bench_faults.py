"""Faults against a real server, counted: concurrent uploads with duplicates, and SIGKILL at each
moment of an analysis.

1. Uploads: 10 distinct small bundles, each sent twice, all 20 at once (one barrier) to
   ``python -m aftertrace.server.cli serve``; counts the 201 answers, the incidents (one per bundle), those
   analysed to ``done``, and the bundles lost (no done incident).
2. ``kill -9`` of the server at each moment of one upload of the 64-rank bundle (built by
   ``bench/suite.py`` under ``bench/out/``): half-way through the upload's body, queued, and in
   each stage the incident's progress names (extract, detect, parse, store, analyze), then a
   restart on the same home. Counts the server's child processes (parse workers, the resource
   tracker) still alive 2 s after the kill, whether the incident was analysed to ``done`` after the
   restart (a death during its analysis queues it again once), and partial uploads left behind.
   Then SIGTERM during the parse (a stop: the analysis is handed back), with the time to exit.

    .venv/bin/python bench/bench_faults.py --out bench/results/faults.md
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import signal
import socket
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))       # (run as a script: the repository's packages)
from bench.common import LocalServer, tgz  # noqa: E402

LOG = (ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "logs" / "torchrun.log").read_bytes()
MOMENTS = ("upload", "queued", "extract", "detect", "parse", "store", "analyze", "term:parse")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def tgz_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        tf.add(folder, arcname=folder.name)
    return buf.getvalue()


def wait_done(url: str, iid: str, timeout: float = 600) -> str:
    t0 = time.monotonic()
    status = "?"
    while time.monotonic() - t0 < timeout:
        status = httpx.get(f"{url}/api/incidents/{iid}", timeout=30).json().get("status", "?")
        if status in ("done", "failed"):
            break
        time.sleep(0.2)
    return status


def uploads(base: Path) -> str:
    srv = LocalServer(base / "uploads")
    bundles = [tgz({"job/vm/logs/torchrun.log": LOG + f"[fault bench {k}] unique line\n".encode(),
                    f"job/vm/notes-{k}.txt": b"x\n"}) for k in range(10)]
    sends = [bundles[i % 10] for i in range(20)]
    answers: dict[int, object] = {}
    barrier = threading.Barrier(len(sends))

    def up(i: int) -> None:
        barrier.wait(10)
        try:
            answers[i] = httpx.post(srv.url + "/api/incidents", files={"bundle": (f"b{i}.tgz", sends[i])}, timeout=120)
        except Exception as e:  # noqa: BLE001
            answers[i] = e
    threads = [threading.Thread(target=up, args=(i,)) for i in range(len(sends))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [a for a in answers.values() if isinstance(a, httpx.Response) and a.status_code == 201]
    ids = {a.json()["id"] for a in ok}
    done = {i for i in ids if wait_done(srv.url, i) == "done"}
    srv.stop()
    want = {hashlib.sha256(b).hexdigest()[:12] for b in bundles}
    return (f"| 20 uploads at once: 10 bundles, each sent twice | {len(ok)} of 20 answered 201 | "
            f"{len(ids)} incidents for {len(want)} bundles{'' if ids == want else ' (not the same set)'} | "
            f"{len(done)} done | {len(want - done)} lost |")


def kill_at(base: Path, moment: str, bundle: bytes) -> str:
    """``moment``: one of :data:`MOMENTS`, or ``term:<stage>`` for SIGTERM (a stop) in place of SIGKILL."""
    sig, moment = (signal.SIGTERM, moment[5:]) if moment.startswith("term:") else (signal.SIGKILL, moment)
    home = base / f"kill-{sig.name}-{moment}"
    srv = LocalServer(home)
    iid = hashlib.sha256(bundle).hexdigest()[:12]
    seen = moment
    if moment == "upload":
        sock = socket.create_connection(("127.0.0.1", srv.port))
        head = (b'--bench\r\nContent-Disposition: form-data; name="bundle"; filename="b.tgz"\r\n'
                b"Content-Type: application/octet-stream\r\n\r\n")
        body = head + bundle + b"\r\n--bench--\r\n"
        sock.sendall(f"POST /api/incidents HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
                     f"Content-Type: multipart/form-data; boundary=bench\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body[:len(body) // 2])
        time.sleep(0.5)
    else:
        r = httpx.post(srv.url + "/api/incidents", files={"bundle": ("b.tgz", bundle)}, timeout=120)
        assert r.status_code == 201, r.text
        if moment != "queued":
            seen = "not seen"
            t0 = time.monotonic()
            while time.monotonic() - t0 < 300:
                st = httpx.get(f"{srv.url}/api/incidents/{iid}", timeout=30).json()
                if (st.get("progress") or {}).get("stage") == moment:
                    seen = moment
                    break
                if st["status"] in ("done", "failed"):
                    break
                time.sleep(0.005)
    kids = srv.children()
    t0 = time.monotonic()
    srv.proc.send_signal(sig)
    srv.proc.wait(60)
    took = time.monotonic() - t0
    srv.log.close()
    time.sleep(2)
    orphans = [k for k in kids if alive(k)]
    for k in orphans:
        os.kill(k, signal.SIGKILL)
    again = LocalServer(home)
    after = wait_done(again.url, iid) if moment != "upload" else "(never received)"
    listed = len(httpx.get(again.url + "/api/incidents").json()["incidents"])
    partial = len(list((home / "bundles").glob(".upload-*")))
    again.stop()
    return (f"| {sig.name} | {moment} | {seen} | {took:.1f} s | {len(kids)} | {len(orphans)} | {after} | {listed} | "
            f"{partial} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write the Markdown result here")
    ap.add_argument("--moments", default=",".join(MOMENTS))
    args = ap.parse_args()
    folder = ROOT / "bench" / "out" / "bundle-64-ranks"
    if not folder.is_dir():
        from bench.suite import build_rank_bundle
        build_rank_bundle(64, folder)
    bundle = tgz_folder(folder)
    t0 = time.monotonic()
    lines = [f"Measured by `.venv/bin/python bench/bench_faults.py` at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"the killed server analysed the 64-rank bundle ({len(bundle) / 1e6:.1f} MB as a .tgz).", "",
             "| uploads | answered | incidents | analysed | lost |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as d:
        lines.append(uploads(Path(d)))
        lines += ["", "| signal | at | stage seen | exit after | server's child processes | alive 2 s after | "
                      "after a restart | incidents listed | partial uploads left |",
                  "|---|---|---|---:|---:|---:|---|---:|---:|"]
        for m in args.moments.split(","):
            lines.append(kill_at(Path(d), m, bundle))
            print(lines[-1], flush=True)
    lines += ["", f"({time.monotonic() - t0:.0f} s in all)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text("# Faults against a real server\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
