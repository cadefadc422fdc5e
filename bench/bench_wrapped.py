"""What reading past wrappers costs: a kernel log as it is, wrapped, and text no parser claims.

    .venv/bin/python bench/bench_wrapped.py [--mb 10,100] [--out bench/results/wrapped.md]

Inputs, each scaled up from the same real kernel log (``tests/data/kernel/vm_dmesg.txt``, this
project's VM: an OOM kill and a segfault among ordinary records) to each size:

* ``raw``: the log as it is (``dmesg_raw``);
* ``docker_json``: every line inside docker's json-file wrapper (``{"log":"...\\n",...}``),
  peeled by ``ingest.unwrap`` before the same parser reads it;
* ``quoted``: every line behind ``> `` (an e-mail or Markdown quote);
* ``text``: every line behind a word that changes from line to line (no wrapper, no parser
  claims it): the plain-text reader (both signature passes, every line stored);
* ``cut``: the log as an 80-column terminal shows it (every longer line in 80-character pieces),
  joined back by the ``cut:80`` layer before the same parser reads it.

Each parse runs in a fresh process (``ingest.parse.parse_file``, detection included): wall
seconds, MB/s of the file's bytes, peak RSS. Cost must stay linear: compare the rows at 1x and 10x.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import OUT, machine, run_child  # noqa: E402

SOURCE = ROOT / "tests" / "data" / "kernel" / "vm_dmesg.txt"


def build(kind: str, mb: int) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    dest = OUT / f"wrapped-{kind}-{mb}MB.log"
    if dest.exists():
        return dest
    lines = SOURCE.read_text().splitlines()
    target = mb * 1_000_000
    n = 0
    with open(dest, "w") as f:
        i = 0
        while n < target:
            for ln in lines:
                if kind == "docker_json":
                    out = json.dumps({"log": ln + "\n", "stream": "stdout", "time": "2026-12-02T10:00:00.000000000Z"})
                elif kind == "quoted":
                    out = "> " + ln
                elif kind == "text":
                    out = f"note{i % 997} said: {ln}"
                elif kind == "cut":
                    out = "\n".join(ln[k:k + 80] for k in range(0, len(ln), 80)) or ln
                else:
                    out = ln
                f.write(out + "\n")
                n += len(out) + 1
                i += 1
    return dest


CODE = """
import time, tempfile, sys
sys.path.insert(0, {root!r})
from aftertrace.ingest.parse import ParseJob, parse_file
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as d:
    r = parse_file(ParseJob({path!r}, {rel!r}, d))
RESULT = dict(seconds=time.perf_counter() - t0, status=r.status, format=r.format, records=r.records,
              unwrapped=r.attrs.get("unwrapped"))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", default="10,100")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for mb in [int(x) for x in a.mb.split(",")]:
        for kind in ("raw", "docker_json", "quoted", "text", "cut"):
            p = build(kind, mb)
            r = run_child(CODE.format(root=str(ROOT), path=str(p), rel=p.name))
            size = p.stat().st_size / 1e6
            rows.append(dict(r, kind=kind, mb=round(size, 1), mbps=round(size / r["seconds"], 1)))
            print(rows[-1], file=sys.stderr)
    t = ["| input | MB | read as | records | seconds | MB/s | peak RSS MiB |", "|---|--:|---|--:|--:|--:|--:|"]
    for r in rows:
        t.append(f"| {r['kind']} | {r['mb']} | {r['format']}{' (' + '+'.join(r['unwrapped']) + ')' if r['unwrapped'] else ''}"
                 f" {r['status']} | {r['records']} | {r['seconds']:.2f} | {r['mbps']} | {r['peak_rss_mib']:.0f} |")
    text = "\n".join(t)
    print(text)
    if a.out:
        Path(a.out).write_text(f"# Reading past wrappers\n\n{machine()}\n\nCommand:\n\n    .venv/bin/python bench/bench_wrapped.py "
                               f"--mb {a.mb}\n\n" + __doc__.split("\n", 4)[4].strip() + "\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
