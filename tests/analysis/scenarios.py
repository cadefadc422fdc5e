"""The chain-evaluation scenarios: real recorded incidents, and variants of them with sources
missing, clock anchors missing, and decoy anomalies, each with what really happened.

Used by ``tests/analysis/test_scenarios.py`` (every scenario must pass) and by
``bench/eval_chains.py`` (top-1 accuracy and origin-time error over the suite, for the README).

Truth comes from the recordings, not from aftertrace: the recorder's own clock for the
oom-after-throttle sample (``sample_traces/oom-after-throttle.truth.json``: the moment it cut
the CPU quota), and the job's own ``injecting fault ... at step 5`` line, written right before
the fault, for the ``logs-*`` samples (``sample_traces/LOGS.md``). A variant is built in a
temporary folder: files dropped by glob, and real files from ``tests/data`` added with their
ISO timestamps moved by a stated amount (the only edit ever made to them).
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
XID_ISO = "tests/data/kernel/gpud__dmesg-decode-iso_xid13_short.log"   # real, 2025-01-21T04:41:44


@dataclass(frozen=True)
class Add:
    src: str            # repository path of a real file
    dest: str           # path inside the bundle
    first_at: str       # move its ISO-8601 timestamps so that the first one is this UTC time


@dataclass(frozen=True)
class Scenario:
    name: str
    bundle: str
    what: str                                    # what happened, in words
    origin_kinds: tuple[str, ...]                # acceptable kinds of the best chain's first link
    origin_rank: int | None = None               # its rank, when the origin is a rank's
    origin_host: str | None = None
    true_origin_utc: str | None = None           # when the fault really began (None: not recorded)
    failure_kind: str = "job_failure"
    must_include: tuple[str, ...] = ()           # kinds the best chain must pass through
    must_not_include_hosts: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    add: tuple[Add, ...] = field(default=())


OOM = "sample_traces/oom-after-throttle"
QUOTA_CUT = "2026-11-29T13:28:24.177572Z"   # truth.json events.throttle_applied

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("oom-after-throttle", OOM,
             "CPU quota cut to 0.3 CPUs, then a leak on rank 0 until the memory cgroup OOM-killed it",
             ("cpu_throttle",), None, "vm", QUOTA_CUT, must_include=("memory_growth", "oom_kill")),
    Scenario("oom-after-throttle/no-cgroup", OOM, "the same, without the cgroup snapshots",
             ("step_slowdown", "cpu_throttle"), None, "vm", QUOTA_CUT, must_include=("oom_kill",),
             drop=("vm/cgroup",)),
    Scenario("oom-after-throttle/no-dmesg", OOM, "the same, without the kernel log (the cgroup counters "
             "still say an OOM kill happened)",
             ("cpu_throttle",), None, "vm", QUOTA_CUT, must_include=("memory_growth",),
             drop=("vm/dmesg.txt", "vm/dmesg_T.txt")),
    Scenario("oom-after-throttle/no-launcher-log", OOM, "the same, without torchrun's logs: the failure is "
             "the OOM kill itself", ("cpu_throttle",), None, "vm", QUOTA_CUT, failure_kind="oom_kill",
             must_include=("memory_growth",), drop=("vm/logs",)),
    Scenario("oom-after-throttle/no-clock-anchors", OOM, "the same, without uptime/date/btime: the kernel "
             "log is placed by perf's reference time and the dmesg -T pairs",
             ("cpu_throttle",), None, "vm", QUOTA_CUT, must_include=("oom_kill",), drop=("vm/host",)),
    Scenario("oom-after-throttle/dmesg-T-only", OOM, "only the human-readable kernel log (dmesg -T, whole "
             "seconds, local time) places the OOM kill", ("cpu_throttle",), None, "vm", QUOTA_CUT,
             must_include=("oom_kill",), drop=("vm/dmesg.txt", "vm/perf", "vm/host")),
    Scenario("oom-after-throttle/decoy-xid-other-host", OOM,
             "the same, plus a real GPU Xid 13 burst on another host (node-b) 20 s before the failure",
             ("cpu_throttle",), None, "vm", QUOTA_CUT, must_include=("oom_kill",),
             must_not_include_hosts=("node-b",),
             add=(Add(XID_ISO, "node-b/dmesg_iso.txt", "2026-11-29T13:28:36Z"),)),
    Scenario("oom-after-throttle/decoy-xid-hours-before", OOM,
             "the same, plus a real GPU Xid 13 burst on the same host two hours earlier",
             ("cpu_throttle",), None, "vm", QUOTA_CUT, must_include=("oom_kill",),
             add=(Add(XID_ISO, "vm/dmesg_iso_old.txt", "2026-11-29T11:28:00Z"),)),
    Scenario("oom-leak-only", "sample_traces/oom-leak-only",
             "rank 0 leaked 256 MiB per step until the memory cgroup OOM-killed it; no throttling",
             ("memory_growth",), None, "vm", "2026-11-29T15:39:01.254387Z", must_include=("oom_kill",)),
    Scenario("logs-exception", "sample_traces/logs-exception", "rank 1 raised RuntimeError at step 5",
             ("python_exception",), 1, "vm", "2026-11-29T13:40:38.060Z"),
    Scenario("logs-hang", "sample_traces/logs-hang",
             "rank 1 hung at step 5; rank 0 timed out in gloo recv and torchrun blamed rank 0",
             ("rank_stalled",), 1, "vm", "2026-11-29T13:40:48.707Z", must_include=("collective_timeout",)),
    Scenario("logs-sigkill", "sample_traces/logs-sigkill", "rank 1 was killed with SIGKILL at step 5",
             ("signal_kill", "rank_stalled"), 1, "vm", "2026-11-29T13:41:06.825Z"),
    Scenario("logs-mismatch", "sample_traces/logs-mismatch",
             "rank 1 ran ALLGATHER where rank 0 ran ALLREDUCE (sequence 20)",
             ("collective_mismatch", "python_exception"), 1, "vm", "2026-11-29T13:41:14.805Z"),
    Scenario("hang-dataloader-lock", "sample_traces/hang-dataloader-lock",
             "rank 1's DataLoader workers deadlocked on a lock they inherited held; rank 0 timed out in all_reduce",
             ("rank_stalled",), 1, None, None, must_include=("collective_timeout",)),
    Scenario("collected-hang-dataloader-lock", "sample_traces/collected-hang-dataloader-lock",
             "the same deadlock recorded by aftertrace collect --hang-after 8s, while the job hung",
             ("rank_stalled",), 1, "vm", None, failure_kind="job_hang"),
    Scenario("hang-gdb-dataloader-lock", "sample_traces/hang-gdb-dataloader-lock",
             "the DataLoader lock deadlock again, its stacks taken with gdb (native frames only) instead of py-spy",
             ("rank_stalled",), 1, None, None, must_include=("collective_timeout",)),
    Scenario("hang-gdb-fifo", "sample_traces/hang-gdb-fifo",
             "rank 1's main thread blocked opening a FIFO nobody writes; stacks taken with gdb",
             ("rank_stalled",), 1, None, None, must_include=("collective_timeout",)),
    Scenario("fr-gloo-stall", "sample_traces/fr-gloo-stall",
             "rank 1 stopped before a collective its peer entered; both ranks' Flight Recorders dumped as JSON (and "
             "pickled) by a hang handler; rank 0 timed out",
             ("rank_stalled",), 1, None, None, must_include=("collective_timeout",)),
    Scenario("fr-gloo-mismatch", "sample_traces/fr-gloo-mismatch",
             "rank 1 called all_gather where rank 0 called all_reduce; both timed out; the Flight Recorders show it",
             ("collective_mismatch",), None, None, None),
    Scenario("fr-gloo-stall-3rank", "sample_traces/fr-gloo-stall-3rank",
             "rank 2 of 3 stopped before its 11th collective (recorded after the Flight Recorder reading was "
             "written; right at first sight)", ("rank_stalled",), 2, None, None, must_include=("collective_timeout",)),
    Scenario("fr-gloo-mismatch-3rank", "sample_traces/fr-gloo-mismatch-3rank",
             "rank 1 of 3 called all_gather as the 8th collective where ranks 0 and 2 called all_reduce (recorded "
             "after the desync reading was written; right at first sight)", ("collective_mismatch",), 1, None, None),
    Scenario("collected-hang-fifo", "sample_traces/collected-hang-fifo",
             "rank 1's main thread blocked opening a FIFO nobody writes (a hung file system), recorded by "
             "aftertrace collect --hang-after 8s while the job hung",
             ("rank_stalled",), 1, "vm", None, failure_kind="job_hang"),
    Scenario("logs-faulthandler-watchdog", "sample_traces/logs-faulthandler-watchdog",
             "rank 1's DataLoader deadlocked; both ranks' faulthandler watchdogs dumped their threads and exited; "
             "torchrun blamed rank 0",
             ("rank_stalled", "hang_dump"), 1, None, None),
    Scenario("logs-dataloader-shm", "sample_traces/logs-dataloader-shm",
             "a DataLoader worker could not allocate its batch in a full /dev/shm; the main process re-raised it",
             ("shm_exhausted",), 0, None, None, failure_kind="shm_exhausted"),
    Scenario("logs-ddp-detail-segv", "sample_traces/logs-ddp-detail-segv",
             "both ranks segfaulted in DDP's constructor; torchrun saw rank 0 first",
             ("segfault", "signal_kill"), 0, "vm", None),
)

_ISO = re.compile(rb"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}),(\d{6})([+-]\d{2}:\d{2})")


def shift_iso(data: bytes, first_at: str) -> bytes:
    """Move every ``YYYY-MM-DDTHH:MM:SS,ffffff+zz:zz`` stamp by one delta so the first lands at ``first_at``."""
    m = _ISO.search(data)
    if m is None:
        raise ValueError("no ISO-8601 timestamps to move")

    def parse(mm) -> datetime:
        return datetime.fromisoformat(f"{mm.group(1).decode()}.{mm.group(2).decode()}{mm.group(3).decode()}")

    target = datetime.fromisoformat(first_at.replace("Z", "+00:00"))
    delta: timedelta = target - parse(m)

    def sub(mm) -> bytes:
        t = (parse(mm) + delta).astimezone(parse(mm).tzinfo)
        return (t.strftime("%Y-%m-%dT%H:%M:%S") + "," + f"{t.microsecond:06d}" + mm.group(3).decode()).encode()
    return _ISO.sub(sub, data)


def build(s: Scenario, dest: Path) -> Path:
    """The scenario's bundle as a folder under ``dest``."""
    src = ROOT / s.bundle
    out = dest / s.name.replace("/", "__")
    shutil.copytree(src, out)
    for d in s.drop:
        p = out / d
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    for a in s.add:
        p = out / a.dest
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(shift_iso((ROOT / a.src).read_bytes(), a.first_at))
    return out


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def judge(s: Scenario, rep: dict) -> dict:
    """What the report got right: failure kind, top-1 origin, chain contents, origin-time error."""
    chains = rep.get("chains") or []
    best = chains[0] if chains else None
    o = best["links"][0] if best else None
    res = {"scenario": s.name, "failure": (rep.get("failure") or {}).get("kind"),
           "failure_ok": (rep.get("failure") or {}).get("kind") == s.failure_kind,
           "origin": None if o is None else f"{o['kind']} rank {o['rank']} host {o['host']}",
           "top1": False, "ends_at_failure": False, "includes_ok": False, "hosts_ok": False,
           "origin_err_s": None, "origin_window_s": None, "lead_s": None if best is None else best["lead_s"]}
    if best is None:
        return res
    res["ends_at_failure"] = best["links"][-1]["kind"] == s.failure_kind
    kinds = [l["kind"] for l in best["links"]]
    res["includes_ok"] = all(k in kinds for k in s.must_include)
    res["hosts_ok"] = not any(l["host"] in s.must_not_include_hosts for l in best["links"])
    res["top1"] = (o["kind"] in s.origin_kinds and (s.origin_rank is None or o["rank"] == s.origin_rank)
                   and (s.origin_host is None or o["host"] == s.origin_host))
    if s.true_origin_utc and o["ts"] is not None:
        res["origin_err_s"] = round(o["ts"] - _ts(s.true_origin_utc), 3)
        lo, hi = o.get("time_window") or (o["ts"], o["ts"])
        # how far the truth is outside the finding's stated time window (0: inside)
        t = _ts(s.true_origin_utc)
        res["origin_window_s"] = round(max(0.0, lo - t, t - hi), 3)
    return res
