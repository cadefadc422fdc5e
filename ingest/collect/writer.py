"""The crash bundle: the ring's window laid out the way the ingest reads it best.

Layout (one host folder, as ``sample_traces/oom-after-throttle`` has it)::

    aftertrace-manifest.json          host, boot_id, clock anchors, time zone, ranks -> pids,
                                      what was captured and what was not (and why)
    <host>/host/hostname, uname_a, boot_id, btime, date
    <host>/host/anchors.txt           /proc/uptime + `date +%s.%N` pairs (every minute, at the
                                      start and at the trigger): boot clock <-> UTC
    <host>/dmesg.txt                  the kernel log, raw boot-relative times
    <host>/cgroup/<epoch.usec>/...    one folder per snapshot: cgroup v1/v2 files under their
                                      /sys/fs/cgroup path (cgroup.procs included), proc/pressure/*,
                                      proc/loadavg, proc/meminfo, proc/<pid>/status and
                                      proc/<pid>/cgroup of the job's processes
    <host>/logs/<command>.log         the job's stdout+stderr
    <host>/nccl/<file>                NCCL_DEBUG_FILE output
    <host>/gpu/nvidia_smi.csv         nvidia-smi --query-gpu samples
    <host>/perf/perf.<n>.script.txt.gz  perf script --header of each perf file in the window
    <host>/files/<name>               files matched by --files (profiler traces, ...)

The bundle is written to a hidden ``.partial`` folder and renamed when complete, so a half
written bundle is never mistaken for a whole one.
"""
from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from . import host as hostmod
from .kmsg import RAW_LINE
from .schema import MANIFEST_NAME, SCHEMA


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def snap_dir_name(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{(ns // 1000) % 1_000_000:06d}"


def _safe_rel(rel: str) -> str | None:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return "/".join(parts)


@dataclass
class BundleRequest:
    out_dir: str
    window_start_ns: int
    window_end_ns: int
    reasons: list = field(default_factory=list)          # trigger.Reason
    facts: dict = field(default_factory=dict)
    job: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)            # ProcTable.to_json()
    ranks: dict = field(default_factory=dict)            # rank -> {"pid", "local_rank", ...}
    missing: list = field(default_factory=list)          # [{"what", "reason"}]
    notes: list = field(default_factory=list)
    collector: dict = field(default_factory=dict)
    output_name: str = "job.log"
    extra_globs: list = field(default_factory=list)
    extra_max_bytes: int = 64 << 20
    archive: bool = False
    nvidia_header: bytes | None = None
    # the running job's captures (``live.capture``): called with (bundle folder, host) first
    live: Callable[[str, str], tuple[list, list]] | None = None


class BundleWriter:
    def __init__(self, ring, req: BundleRequest, perf=None):
        self.ring = ring
        self.req = req
        self.perf = perf
        self.captured: list[dict] = []
        self.missing: list[dict] = list(req.missing)
        self.notes: list[str] = list(req.notes)
        self.files = 0
        self.bytes = 0

    # -- helpers -------------------------------------------------------------------
    def _write(self, rel: str, data: bytes) -> None:
        p = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        self.files += 1
        self.bytes += len(data)

    def _open(self, rel: str):
        p = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        self.files += 1
        return open(p, "wb")

    def _stream(self, name: str):
        return self.ring.streams.get(name)

    # -- parts ---------------------------------------------------------------------
    def _anchors(self) -> list[dict]:
        s = self._stream("anchors")
        out = []
        if s is None:
            return out
        for data in s.read_segments():
            for line in data.splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        out.sort(key=lambda a: a["wall_ns"])
        lo, hi = self.req.window_start_ns, self.req.window_end_ns
        inside = [a for a in out if lo <= a["wall_ns"] <= hi]
        before = [a for a in out if a["wall_ns"] < lo][-1:]
        return before + inside

    def write_host(self, anchors: list[dict]) -> None:
        f = self.req.facts
        h = f["hostname"]
        for name, text in hostmod.host_files(f, anchors[-1]["wall_ns"] if anchors else None).items():
            self._write(f"{h}/host/{name}", text.encode())
        texts = hostmod.anchors_files(anchors)
        for i, text in enumerate(texts):
            self._write(f"{h}/host/anchors{'' if i == 0 else f'-{i + 1}'}.txt", text.encode())
        if texts:
            self.captured.append({"what": "clock anchors", "path": f"{h}/host/anchors.txt",
                                  "count": sum(1 for a in anchors if a.get("uptime")),
                                  "how": "/proc/uptime read between two CLOCK_REALTIME reads, written as "
                                         "uptime + `date +%s.%N` pairs; every minute, at the start and at "
                                         "the trigger",
                                  "from": iso(anchors[0]["wall_ns"]), "to": iso(anchors[-1]["wall_ns"])})
        else:
            self.missing.append({"what": "clock anchors", "reason": "/proc/uptime could not be read"})
        self.captured.append({"what": "host facts", "path": f"{h}/host/",
                              "how": "hostname, uname, boot_id, btime (/proc/stat), date"})

    def write_snapshots(self) -> None:
        h = self.req.facts["hostname"]
        s = self._stream("snap")
        lo, hi = self.req.window_start_ns, self.req.window_end_ns
        n = 0
        first = last = None
        paths: set[str] = set()
        pids: set[str] = set()
        if s is not None:
            for data in s.read_segments(lo, hi):
                for line in data.splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    t = rec.get("t")
                    if not isinstance(t, int) or t < lo or t > hi:
                        continue
                    d = snap_dir_name(t)
                    for rel, text in (rec.get("f") or {}).items():
                        r = _safe_rel(rel)
                        if r is None:
                            continue
                        self._write(f"{h}/cgroup/{d}/{r}", text.encode("utf-8"))
                        if r.startswith("proc/") and r.split("/")[1].isdigit():
                            pids.add(r.split("/")[1])
                        else:
                            paths.add(r)
                    n += 1
                    first = t if first is None else min(first, t)
                    last = t if last is None else max(last, t)
        if n:
            cg = sorted({"/".join(p.split("/")[:-1]) for p in paths if not p.startswith("proc/")})
            self.captured.append({"what": "cgroup and /proc snapshots", "path": f"{h}/cgroup/", "count": n,
                                  "from": iso(first), "to": iso(last), "cgroups": cg,
                                  "host_files": sorted(p for p in paths if p.startswith("proc/")),
                                  "process_status_pids": sorted(pids, key=int)})
        else:
            self.missing.append({"what": "cgroup and /proc snapshots", "reason": "no snapshot in the window"})

    def write_kernel(self) -> None:
        h = self.req.facts["hostname"]
        s = self._stream("kmsg")
        if s is None or not self.req.collector.get("kernel_log_method"):
            return          # not followed: the reason is under "missing"
        lo = self.req.window_start_ns
        off = self.req.collector.get("realtime_minus_monotonic_ns")
        cutoff_usec = (lo - off) // 1000 if off is not None else None
        n = 0
        rel = f"{h}/dmesg.txt"
        with self._open(rel) as out:
            for data in s.read_segments(lo):
                keep = []
                for line in data.splitlines(keepends=True):
                    if cutoff_usec is not None:
                        m = RAW_LINE.match(line.decode("utf-8", "replace"))
                        if m and int(m.group(1)) * 1_000_000 + int(m.group(2)[:6]) < cutoff_usec:
                            continue
                    keep.append(line)
                out.write(b"".join(keep))
                self.bytes += sum(len(x) for x in keep)
                n += len(keep)
        entry = {"what": "kernel log", "count": n, "how": self.req.collector.get("kernel_log_method"),
                 "clock": "printk boot-relative seconds (raw dmesg format)"}
        if n:
            entry = {"what": "kernel log", "path": rel, **{k: v for k, v in entry.items() if k != "what"}}
        else:
            os.unlink(os.path.join(self.tmp, rel))
            self.files -= 1
            entry["note"] = "the kernel printed nothing in the window (no file written)"
        self.captured.append(entry)

    def write_output(self) -> None:
        h = self.req.facts["hostname"]
        head, tail = self._stream("output.head"), self._stream("output")
        if head is None and tail is None:
            return
        lo = self.req.window_start_ns
        from .ring import read_segment
        rel = f"{h}/logs/{self.req.output_name}"
        head_n = total = 0
        tail_segs = tail.segments() if tail is not None else []
        kept = [sg for sg in tail_segs if (sg.end_ns or time.time_ns()) >= lo]
        dropped = self.ring.pruned.get("output", {})
        with self._open(rel) as out:
            for d in (head.read_segments() if head is not None else []):
                out.write(d)
                head_n += len(d)
            total = head_n
            for sg in kept:                   # one segment in memory at a time
                d = read_segment(sg)
                if d:
                    out.write(d)
                    total += len(d)
        self.bytes += total
        entry = {"what": "job stdout+stderr", "path": rel, "bytes": total,
                 "how": "one pipe for both (their order is kept); also passed through to the collector's stdout "
                        "unless --quiet-output"}
        if dropped or len(kept) < len(tail_segs):
            entry["gap"] = (f"the first {head_n} bytes are the job's start; output older than the window "
                            f"({dropped.get('bytes', 0)} bytes pruned from the ring) is not included")
        self.captured.append(entry)

    def write_tails(self) -> None:
        h = self.req.facts["hostname"]
        lo = self.req.window_start_ns
        for name, s in sorted(self.ring.streams.items()):
            if not name.startswith("nccl/"):
                continue
            rel = f"{h}/nccl/{name.split('/', 1)[1]}"
            n = 0
            with self._open(rel) as out:
                for d in s.read_segments(lo):
                    out.write(d)
                    n += len(d)
            self.bytes += n
            self.captured.append({"what": "NCCL debug file", "path": rel, "bytes": n})

    def write_gpu(self) -> None:
        h = self.req.facts["hostname"]
        s = self._stream("nvidia_smi")
        if s is None or self.req.nvidia_header is None:
            return
        rows = b"".join(s.read_segments(self.req.window_start_ns))
        self._write(f"{h}/gpu/nvidia_smi.csv", self.req.nvidia_header + rows)
        self.captured.append({"what": "nvidia-smi samples", "path": f"{h}/gpu/nvidia_smi.csv",
                              "count": rows.count(b"\n")})

    def write_perf(self) -> None:
        if self.perf is None:
            return
        h = self.req.facts["hostname"]
        # a file covers the switch period before its mtime
        files = self.perf.files(self.req.window_start_ns)
        ok = 0
        for i, src in enumerate(files):
            rel = f"{h}/perf/perf.{i + 1:03d}.script.txt.gz"
            dst = os.path.join(self.tmp, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            good, msg = self.perf.script(src, dst)
            if good:
                ok += 1
                self.files += 1
                self.bytes += os.path.getsize(dst)
            else:
                self.notes.append(f"perf: {os.path.basename(src)}: {msg}")
        if ok:
            self.captured.append({"what": "perf samples", "path": f"{h}/perf/", "count": ok,
                                  "how": " ".join(self.perf.cmdline[1:]) if self.perf.cmdline else "perf record",
                                  "note": self.perf.events_note})
        else:
            self.missing.append({"what": "perf samples", "reason": "no perf file in the window" +
                                 (f" ({self.perf.error})" if self.perf.error else "")})

    def write_extra(self) -> None:
        if not self.req.extra_globs:
            return
        import glob
        h = self.req.facts["hostname"]
        lo = self.req.window_start_ns
        budget = self.req.extra_max_bytes
        names: set[str] = set()
        n = skipped = 0
        for g in self.req.extra_globs:
            for p in sorted(glob.glob(g, recursive=True)):
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if not os.path.isfile(p) or st.st_mtime_ns < lo:
                    continue
                if st.st_size > budget:
                    skipped += 1
                    continue
                base = os.path.basename(p)
                name, i = base, 2
                while name in names:
                    name, i = f"{i}-{base}", i + 1
                names.add(name)
                dst = os.path.join(self.tmp, h, "files", name)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                try:
                    shutil.copyfile(p, dst)
                except OSError:
                    continue
                budget -= st.st_size
                n += 1
                self.files += 1
                self.bytes += st.st_size
        if n:
            self.captured.append({"what": "files (--files)", "path": f"{h}/files/", "count": n,
                                  "globs": self.req.extra_globs})
        if skipped:
            self.notes.append(f"--files: {skipped} file(s) left out: over the {self.req.extra_max_bytes} byte budget")
        if not n:
            self.missing.append({"what": "files (--files)", "reason": "no matching file modified in the window"})

    def write_live(self) -> None:
        """First, while the processes are as the trigger found them: their stacks and calls."""
        if self.req.live is None:
            return
        captured, missing = self.req.live(self.tmp, self.req.facts["hostname"])
        self.captured.extend(captured)
        self.missing.extend(missing)

    # -- manifest ------------------------------------------------------------------
    def manifest(self, anchors: list[dict]) -> dict:
        r, f = self.req, self.req.facts
        h = f["hostname"]
        clocks = [{"realtime_ns": a["realtime_ns"], "monotonic_ns": a["monotonic_ns"],
                   "boottime_ns": a["boottime_ns"]} for a in anchors]
        susp = [a["boottime_ns"] - a["monotonic_ns"] for a in anchors]
        return {
            "schema": SCHEMA,
            "job": r.job,
            "time_zone": f.get("time_zone"),
            "time_zone_from": f.get("time_zone_from"),
            "trigger": {"reasons": [x.to_json() for x in r.reasons],
                        "time": iso(r.reasons[0].ts_ns) if r.reasons else None},
            "window": {"start": iso(r.window_start_ns), "end": iso(r.window_end_ns),
                       "start_ns": r.window_start_ns, "end_ns": r.window_end_ns},
            "hosts": {h: {"boot_id": f.get("boot_id"), "kernel": f.get("kernel"), "uname": f.get("uname_a"),
                          "fqdn": f.get("fqdn"), "btime": f.get("btime"), "cpus": f.get("cpus"),
                          "anchors": clocks,
                          "boottime_minus_monotonic_ns": max(susp) if susp else None,
                          "paths": [f"{h}/"]}},
            "ranks": {str(k): dict(v, host=h) for k, v in sorted(r.ranks.items())},
            "processes": r.procs.get("procs", [])[:256],
            "captured": self.captured,
            "missing": self.missing,
            "notes": self.notes,
            "collector": r.collector,
        }

    def write(self, name: str) -> tuple[str, dict]:
        r = self.req
        final = os.path.join(r.out_dir, name)
        i = 2
        while os.path.exists(final) or os.path.exists(final + ".tar.gz"):
            final = os.path.join(r.out_dir, f"{name}-{i}")
            i += 1
        self.tmp = os.path.join(r.out_dir, "." + os.path.basename(final) + ".partial")
        if os.path.exists(self.tmp):
            shutil.rmtree(self.tmp)
        os.makedirs(self.tmp)
        anchors = self._anchors()
        steps = (("live captures", self.write_live),
                 ("host", lambda: self.write_host(anchors)), ("snapshots", self.write_snapshots),
                 ("kernel log", self.write_kernel), ("job output", self.write_output),
                 ("NCCL files", self.write_tails), ("nvidia-smi", self.write_gpu), ("perf", self.write_perf),
                 ("files", self.write_extra))
        for what, fn in steps:
            try:
                fn()
            except Exception as e:          # one part failing never loses the others
                self.missing.append({"what": what, "reason": f"the collector failed writing it: "
                                                             f"{type(e).__name__}: {e}"})
        man = self.manifest(anchors)
        data = json.dumps(man, indent=2).encode()
        self._write(MANIFEST_NAME, data)
        if r.archive:
            arc = final + ".tar.gz"
            tmp_arc = os.path.join(r.out_dir, "." + os.path.basename(arc) + ".partial")
            with tarfile.open(tmp_arc, "w:gz", compresslevel=6) as tf:
                tf.add(self.tmp, arcname=os.path.basename(final))
            os.replace(tmp_arc, arc)
            shutil.rmtree(self.tmp)
            return arc, man
        os.replace(self.tmp, final)
        return final, man
