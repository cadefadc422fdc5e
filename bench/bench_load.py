"""Load on a real server: N concurrent clients upload distinct small bundles for M minutes.

Each client runs a closed loop (upload, wait for its analysis, fetch the report, next), so the
numbers are the sustained rate, not a backlog of queued analyses.

Starts ``python -m aftertrace.server.cli serve`` (or, with ``--analysis-threads K``, the same app with K
background analyses) on 127.0.0.1 with a fresh AFTERTRACE_HOME, runs N client threads that
each upload a distinct small bundle (the sample's torchrun log with a unique line appended,
plus a note file, as a .tgz) in a loop for the duration, waits for each analysis and
fetches its report. Prints and (with ``--out``) writes a Markdown table: uploads per
minute, analyses per minute, p50/p95 latency of the upload request and of
``GET /api/incidents/{id}/report``, failures (must be 0).

    .venv/bin/python bench/bench_load.py --clients 4 --minutes 2 --out bench/results/load.md
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))       # (run as a script: the repository's packages)
from bench.common import LocalServer, tgz  # noqa: E402

LOG = (ROOT / "sample_traces" / "oom-after-throttle" / "vm" / "logs" / "torchrun.log").read_bytes()


def bundle(k: int) -> bytes:
    return tgz({"job/vm/logs/torchrun.log": LOG + f"[load {k}] unique line {k}\n".encode(),
                f"job/vm/notes-{k}.txt": f"bundle {k}\n".encode()})


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--analysis-threads", type=int, default=0, help="0: `aftertrace serve` as shipped")
    ap.add_argument("--out", help="write the Markdown result here")
    a = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="aftertrace-load-"))
    server = LocalServer(home / "home", a.analysis_threads)
    url = server.url

    lock = threading.Lock()
    counter = iter(range(10**9))
    up_lat: list[float] = []
    ids: list[str] = []
    failures: list[str] = []
    stop_at = time.monotonic() + a.minutes * 60

    rep_lat: list[float] = []
    done_at: list[float] = []

    def client() -> None:
        """Closed loop: upload, wait for the analysis, fetch the report, next bundle."""
        with httpx.Client(timeout=120) as c:
            while time.monotonic() < stop_at:
                with lock:
                    k = next(counter)
                data = bundle(k)
                t0 = time.perf_counter()
                try:
                    r = c.post(url + "/api/incidents", files={"bundle": (f"b{k}.tgz", data)})
                    dt = time.perf_counter() - t0
                    if r.status_code != 201:
                        raise RuntimeError(f"{r.status_code} {r.text[:200]}")
                    iid = r.json()["id"]
                    with lock:
                        up_lat.append(dt)
                        ids.append(iid)
                    while True:
                        st = c.get(f"{url}/api/incidents/{iid}").json()
                        if st["status"] in ("done", "failed"):
                            break
                        time.sleep(0.05)
                    if st["status"] == "failed":
                        raise RuntimeError(f"analysis {iid} failed: {st.get('error')}")
                    t0 = time.perf_counter()
                    r = c.get(f"{url}/api/incidents/{iid}/report")
                    dt = time.perf_counter() - t0
                    if r.status_code != 200 or not r.json().get("summary"):
                        raise RuntimeError(f"report {iid}: {r.status_code}")
                    with lock:
                        rep_lat.append(dt)
                        done_at.append(time.monotonic())
                except Exception as e:  # noqa: BLE001
                    with lock:
                        failures.append(f"bundle {k}: {e}")

    t_start = time.monotonic()
    ts = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    t_upload = stop_at - t_start
    t_all = time.monotonic() - t_start
    server.stop()
    server_log = Path(server.log.name).read_text(errors="replace")
    if "Traceback" in server_log or "Conflict" in server_log:
        failures.append("server log: " + server_log[-2000:])

    n = len(ids)
    rows = [
        ("clients", f"{a.clients}"),
        ("background analyses at once", f"{a.analysis_threads or 1}" + ("" if a.analysis_threads else " (serve default)")),
        ("upload phase (then each client's last analysis is awaited)", f"{t_upload:.0f} s"),
        ("uploads accepted", f"{n} ({len(set(ids))} distinct ids)"),
        ("uploads / minute", f"{n / t_upload * 60:.0f}"),
        ("all analysed after", f"{t_all:.0f} s ({n / t_all * 60:.0f} analyses / minute)"),
        ("upload request p50 / p95", f"{pct(up_lat, 50) * 1000:.0f} ms / {pct(up_lat, 95) * 1000:.0f} ms"),
        ("GET report p50 / p95", f"{pct(rep_lat, 50) * 1000:.0f} ms / {pct(rep_lat, 95) * 1000:.0f} ms"),
        ("failures", f"{len(failures)}"),
    ]
    table = "| measure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    print(table)
    for f in failures[:20]:
        print("FAILURE:", f)
    if a.out:
        cmdline = "PYTHONPATH=. .venv/bin/python bench/bench_load.py " + " ".join(sys.argv[1:])
        Path(a.out).write_text(
            "# Load: concurrent uploads against a real server\n\n"
            f"Command: `{cmdline}`\n\n"
            f"Machine: {os.cpu_count()} CPU cores (shared). Each bundle: the sample's torchrun log "
            f"({len(LOG)} bytes) with a unique line, plus a note file, as a .tgz "
            f"({len(bundle(0))} bytes).\n\n" + table +
            ("\nFailures:\n\n" + "\n".join(f"- {f}" for f in failures) + "\n" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
