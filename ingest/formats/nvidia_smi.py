"""nvidia-smi ``--query-gpu=... --format=csv [-l N | -lms N]`` logs -> GPU metric series.

The first line is the header nvidia-smi prints: the queried field names, each with its unit in
brackets when the field has one (``utilization.gpu [%]``, ``memory.used [MiB]``,
``power.draw [W]``, ``clocks.current.sm [MHz]``; ``temperature.gpu`` has none). Rows repeat one
per GPU per sample: ``0, 2020/11/12 13:48:11.412, 99 %, 52 %, 32480 MiB, ...``. With
``nounits`` the values lose their unit (the header keeps it); a log appended by several runs
repeats the header. Values nvidia-smi cannot read are ``[N/A]``, ``N/A``, ``[Not Supported]``
(skipped, not counted as bad). ``clocks_throttle_reasons.active`` (renamed
``clocks_event_reasons.active`` by newer drivers) is a hex bit mask, kept as a number.

``timestamp`` is local time ``YYYY/MM/DD HH:MM:SS.mmm`` (read in the bundle's zone). A file
without its header (``noheader``) names no columns: it is not claimed (unknown, never guessed).
Entity: ``gpu<index>``, else the PCI bus id, else the UUID, else ``gpu``.

Real samples: tests/data/cgroup/nvidia_smi/ (PROVENANCE.md).
"""
from __future__ import annotations

import re

from ..model import CLOCK_WALL
from ..reader import Head
from ..registry import ParseContext, Parser
from ..timeparse import local_ns
from ._cgroup_read import metric_frame

TS = re.compile(r"^(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")
COL = re.compile(r"^([a-z][a-z0-9_.]*)(?: \[([^\]]+)\])?$")
UNITS = {"MiB": ("bytes", 1024 * 1024), "W": ("W", 1), "%": ("percent", 1), "MHz": ("MHz", 1), "C": ("C", 1)}
IDENT = ("index", "pci.bus_id", "uuid", "name", "driver_version", "pstate", "timestamp", "gpu_name",
         "gpu_bus_id", "gpu_uuid", "serial", "vbios_version")
MISSING = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}


def _header(line: str) -> list[tuple[str, str | None]] | None:
    cols = [c.strip() for c in line.split(",")]
    out = []
    for c in cols:
        m = COL.match(c)
        if not m:
            return None
        out.append((m.group(1), m.group(2)))
    names = [n for n, _ in out]
    if "timestamp" not in names or len(out) < 2:
        return None
    return out


class NvidiaSmiCsvParser(Parser):
    name = "nvidia_smi_csv"
    kind = "cgroup"              # metric snapshots (DESIGN.md has no separate GPU-metrics kind yet)
    priority = 45
    clock_domain = CLOCK_WALL
    description = "nvidia-smi --query-gpu CSV logs (-l / -lms), with their header"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln for ln in head.lines if ln.strip()][:20]
        if not lines or _header(lines[0]) is None:
            return False
        hdr = _header(lines[0])
        ti = [n for n, _ in hdr].index("timestamp")
        rows = [ln for ln in lines[1:] if _header(ln) is None]
        if not head.complete:
            rows = rows[:-1]
        ok = sum(1 for r in rows if len(r.split(",")) == len(hdr) and TS.match(r.split(",")[ti].strip()))
        return ok >= 1 and ok >= len(rows) - 1

    def parse(self, ctx: ParseContext) -> None:
        sink = ctx.sink
        hdr = None
        ent, met, ts, val, unit = [], [], [], [], []
        for lineno, raw in ctx.lines():
            if not raw.strip():
                continue
            h = _header(raw)
            if h is not None:
                hdr = h
                names = [n for n, _ in hdr]
                continue
            if hdr is None:
                sink.issue("bad_line", "row before any nvidia-smi header", lineno, raw)
                continue
            vals = [v.strip() for v in raw.split(",")]
            if len(vals) != len(hdr):
                sink.issue("bad_line", f"expected {len(hdr)} columns, found {len(vals)}", lineno, raw)
                continue
            row = dict(zip(names, vals))
            m = TS.match(row["timestamp"])
            if not m:
                sink.issue("bad_line", "timestamp is not YYYY/MM/DD HH:MM:SS.mmm", lineno, raw)
                continue
            y, mo, d, hh, mi, ss, frac = m.groups()
            t = local_ns(int(y), int(mo), int(d), int(hh), int(mi), int(ss),
                         int(((frac or "") + "000000000")[:9]), ctx.time_zone)
            e = (f"gpu{row['index']}" if row.get("index", "").isdigit() else
                 row.get("pci.bus_id") or row.get("uuid") or "gpu")
            for (name, u), v in zip(hdr, vals):
                if name in IDENT or v in MISSING:
                    continue
                num = v.split(" ")[0]
                try:
                    x = float(int(num, 16)) if num.startswith("0x") else float(num)
                except ValueError:
                    sink.issue("bad_line", f"{name}: {v!r} is not a number", lineno, raw)
                    continue
                un, scale = UNITS.get(u or "", (u or ("bitmask" if num.startswith("0x") else "-"), 1))
                ent.append(e)
                met.append(f"gpu.{name}" + ("_bytes" if un == "bytes" else ""))
                ts.append(t)
                val.append(x * scale)
                unit.append(un)
        sink.add_frame("metrics", metric_frame({"entity": ent, "metric": met, "ts_raw_ns": ts, "value": val,
                                                "unit": unit}))
        ctx.attrs["gpus"] = sorted(set(ent))
        ctx.attrs["columns"] = [n for n, _ in hdr] if hdr else []


PARSERS = (NvidiaSmiCsvParser,)
