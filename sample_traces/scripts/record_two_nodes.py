"""Record a real incident of a two-node job on this Linux host (run as root).

    TORCH_PY=/opt/torchenv/bin/python python3 sample_traces/scripts/record_two_nodes.py \\
        SCENARIO OUT_DIR [--baseline 15] [--pg-timeout 30]

Two torchrun agents form one job through c10d rendezvous (``--nnodes=2 --nproc_per_node=1``),
each on its own "node": its own UTS namespace (hostname ``nodeA`` / ``nodeB``), its own cgroups
(``/train_nodeA``, ``/train_nodeB`` in cpu, cpuacct, memory, freezer) and its own
``aftertrace collect`` around it, as each node of a cluster would run it. The nodes share this
kernel, so a kernel message would show in both bundles: the scenarios make none.

The bundle ``OUT_DIR/`` holds the two collected bundles side by side (``bundle-nodeA/``,
``bundle-nodeB/``: each with its manifest and its host folder), as a user uploads what each node
wrote. The truth goes to ``OUT_DIR.truth.json``, never into the bundle.

Scenarios:

  node-preempt   after a quiet baseline the agent and rank of node B are SIGKILLed at once from
                 outside (a preemption or a scheduler reclaiming that node); node B's collector
                 survives and writes its bundle; node A's rank times out in gloo and its agent
                 names node A's rank as the root cause
  node-freeze    after a quiet baseline node B's job cgroup (its agent and rank) is FROZEN by the
                 freezer cgroup (a node that hangs: a stuck hypervisor, a paused VM); node A's
                 rank times out in gloo and its agent ends; 20 s after that node B is thawed,
                 its rank finds its peer gone and its agent reports the failure
  node-missing   node B never starts (its host did not come up); node A's agent waits in the c10d
                 rendezvous (join timeout 30 s) and gives up; only node A's bundle exists
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CG = "/sys/fs/cgroup"
HIERS = ("cpu", "cpuacct", "memory", "freezer")
NODES = ("nodeA", "nodeB")


def now() -> int:
    return time.time_ns()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_missing(a, out: Path, work: Path, side: Path, procs: dict, ev, events: list, torch_py: str) -> int:
    t = events[0]["ts_ns"]
    end = time.monotonic() + a.deadline
    while time.monotonic() < end and procs["nodeA"].poll() is None:
        time.sleep(0.2)
    if procs["nodeA"].poll() is None:
        ev("deadline_kill")
        os.killpg(procs["nodeA"].pid, signal.SIGKILL)
        procs["nodeA"].wait()
    ev("job_end", exit_codes={"nodeA": procs["nodeA"].returncode})
    b = sorted(glob.glob(str(work / "collect-nodeA" / "bundle-*")))
    if not b:
        raise SystemExit(f"record: the collector of nodeA wrote no bundle (see {work}/collect-nodeA.out)")
    out.mkdir(parents=True)
    shutil.copytree(b[-1], out / "bundle-nodeA")
    truth = {"origin": {"kinds": ["rendezvous_failure"], "rank": None, "pid": None,
                        "start_ns": [t, t + 3_000_000_000],
                        "what": "node B never started: node A's agent waited in the rendezvous from its start"},
             "schema": "aftertrace.corpus_truth/1", "id": out.name, "scenario": a.scenario, "via": "collect",
             "host": "nodeA", "perf": False, "fault_rank": None, "job_exit_codes": {"nodeA": procs["nodeA"].returncode},
             "events": events, "side": {p.stem: json.loads(p.read_text()) for p in side.glob("*.json")},
             "recorded_with": " ".join([f"TORCH_PY={torch_py}", "python3", "sample_traces/scripts/record_two_nodes.py"]
                                       + sys.argv[1:]),
             "versions": {"kernel": os.uname().release,
                          "torch": subprocess.run([torch_py, "-c", "import torch;print(torch.__version__)"],
                                                  capture_output=True, text=True).stdout.strip()}}
    Path(str(out) + ".truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    print(f"record: bundle {out}, truth {out}.truth.json", file=sys.stderr)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=("node-preempt", "node-freeze", "node-missing"))
    ap.add_argument("out")
    ap.add_argument("--baseline", type=float, default=15.0)
    ap.add_argument("--pg-timeout", type=float, default=30.0)
    ap.add_argument("--deadline", type=float, default=150.0)
    a = ap.parse_args()
    torch_py = os.environ.get("TORCH_PY", "/opt/torchenv/bin/python")
    torchrun = str(Path(torch_py).parent / "torchrun")
    aftertrace = os.environ.get("AFTERTRACE", str(HERE.parents[1] / ".venv" / "bin" / "aftertrace"))
    out = Path(a.out).resolve()
    if out.exists():
        raise SystemExit(f"record: {out} exists")
    work = Path(tempfile.mkdtemp(prefix="atrec2-"))
    side = work / "side"
    events: list[dict] = []

    def ev(what: str, **kw) -> int:
        t = now()
        events.append({"what": what, "ts_ns": t, **kw})
        print(f"record: {what} {kw}", file=sys.stderr)
        return t

    made: list[str] = []
    for n in NODES:
        for h in HIERS:
            d = f"{CG}/{h}/train_{n}"
            if os.path.isdir(d):
                raise SystemExit(f"record: {d} exists (left over from an earlier run?); remove it first")
            os.mkdir(d)
            made.append(d)
    port = free_port()
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    try:
        subprocess.run(["dmesg", "-C"], check=False)
        ev("job_start", port=port)
        for i, n in enumerate(NODES):
            if a.scenario == "node-missing" and n == "nodeB":
                continue
            prof = work / f"profiler-{n}"
            prof.mkdir()
            env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="INFO",
                       AFTERTRACE_SIDE_DIR=str(side), AFTERTRACE_FAULT="none",
                       AFTERTRACE_PG_TIMEOUT_S=str(a.pg_timeout), AFTERTRACE_PROFILER_DIR=str(prof),
                       AFTERTRACE_PROFILE_EVERY="40", TORCH_DISTRIBUTED_DEBUG="INFO")
            rdzv = ["--rdzv-conf", f"join_timeout={int(a.pg_timeout)}"] if a.scenario == "node-missing" else []
            job = [torchrun, "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d"] + rdzv + [
                   
f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=twonodes", "--max-restarts=0", "--local-addr=127.0.0.1",
                   "--log-dir", str(work / f"torchrun_logs-{n}"), "--tee", "3", str(HERE / "incident_job.py")]
            coll = [aftertrace, "collect", "--out", str(work / f"collect-{n}"), "--keep", "3m", "--interval", "0.5s",
                    "--files", str(prof / "*.pt.trace.json.gz"), "--quiet-output", "--"] + job
            joins = " ".join(f"{CG}/{h}/train_{n}/cgroup.procs" for h in HIERS)
            cmd = ["unshare", "-u", "sh", "-c",
                   f'hostname {n}; for f in {joins}; do echo $$ > $f; done; exec setsid "$@"', "node"] + coll
            logs[n] = open(work / f"collect-{n}.out", "wb")
            procs[n] = subprocess.Popen(cmd, stdout=logs[n], stderr=subprocess.STDOUT, env=env, cwd=work)
        if a.scenario == "node-missing":
            return _node_missing(a, out, work, side, procs, ev, events, torch_py)
        ranks: dict[int, dict] = {}
        end = time.monotonic() + 120
        while time.monotonic() < end and len(ranks) < 2:
            for r in (0, 1):
                f = side / f"rank{r}.json"
                if f.is_file():
                    ranks[r] = json.loads(f.read_text())
            if any(p.poll() is not None for p in procs.values()):
                break
            time.sleep(0.2)
        if len(ranks) < 2:
            raise SystemExit("record: the ranks never came up")
        ev("ranks_up", ranks={r: {"pid": v["pid"], "host": v["host"], "agent": v["ppid"]} for r, v in ranks.items()})
        time.sleep(a.baseline)
        victim = next(r for r, v in ranks.items() if v["host"] == "nodeB")
        v = ranks[victim]
        frozen = f"{CG}/freezer/train_nodeB/freezer.state"
        if a.scenario == "node-preempt":
            t = ev("preempt_nodeB", rank=victim, pid=v["pid"], agent=v["ppid"], signal="SIGKILL")
            for pid in (v["ppid"], v["pid"]):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            origin = {"kinds": ["signal_kill", "job_failure"], "rank": victim, "pid": v["pid"], "host": "nodeB",
                      "start_ns": [t, t],
                      "what": f"node B's agent (pid {v['ppid']}) and rank {victim} (pid {v['pid']}) SIGKILLed "
                              "from outside"}
        else:
            # the collector of node B is in that cgroup too (it started the job): it moves out
            # first, as a node's monitoring outlives a hung workload
            coll_b = procs["nodeB"].pid
            Path(f"{CG}/freezer/cgroup.procs").write_text(str(coll_b))
            time.sleep(1.0)
            t = ev("freeze_nodeB", rank=victim, pid=v["pid"], agent=v["ppid"], cgroup="/train_nodeB")
            Path(frozen).write_text("FROZEN")
            origin = {"kinds": ["cgroup_frozen", "rank_stalled"], "rank": victim, "pid": v["pid"], "host": "nodeB",
                      "entity": "/train_nodeB", "start_ns": [t, t],
                      "what": f"node B's job cgroup (agent pid {v['ppid']}, rank {victim} pid {v['pid']}) frozen"}
        truth = {"origin": origin,
                 "ranks": {str(r): {"pid": x["pid"], "host": x["host"], "agent": x["ppid"]} for r, x in ranks.items()}}
        end = time.monotonic() + a.deadline
        while time.monotonic() < end and any(p.poll() is None for p in procs.values()):
            if a.scenario == "node-freeze" and not _alive(ranks[1 - victim]["pid"]) and \
                    not any(e["what"] == "thaw_nodeB" for e in events):
                # (node A's agent then waits at its exit barrier for node B's)
                time.sleep(20.0)
                ev("thaw_nodeB")
                Path(frozen).write_text("THAWED")
            time.sleep(0.2)
        for p in procs.values():
            if p.poll() is None:
                ev("deadline_kill")
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        codes = {n: p.returncode for n, p in procs.items()}
        ev("job_end", exit_codes=codes)
        out.mkdir(parents=True)
        for n in NODES:
            b = sorted(glob.glob(str(work / f"collect-{n}" / "bundle-*")))
            if not b:
                raise SystemExit(f"record: the collector of {n} wrote no bundle (see {work}/collect-{n}.out)")
            shutil.copytree(b[-1], out / f"bundle-{n}")
        truth.update({
            "schema": "aftertrace.corpus_truth/1", "id": out.name, "scenario": a.scenario, "via": "collect",
            "host": "nodeB", "perf": False, "fault_rank": victim, "job_exit_codes": codes, "events": events,
            "side": {p.stem: json.loads(p.read_text()) for p in side.glob("*.json")},
            "recorded_with": " ".join([f"TORCH_PY={torch_py}", "python3", "sample_traces/scripts/record_two_nodes.py"]
                                      + sys.argv[1:]),
            "versions": {"kernel": os.uname().release,
                         "torch": subprocess.run([torch_py, "-c", "import torch;print(torch.__version__)"],
                                                 capture_output=True, text=True).stdout.strip()}})
        Path(str(out) + ".truth.json").write_text(json.dumps(truth, indent=2) + "\n")
        print(f"record: bundle {out}, truth {out}.truth.json", file=sys.stderr)
        return 0
    finally:
        try:
            Path(f"{CG}/freezer/train_nodeB/freezer.state").write_text("THAWED")
        except OSError:
            pass
        for p in procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for f in logs.values():
            f.close()
        time.sleep(1.0)
        for d in made:
            try:
                for pid in Path(d, "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        time.sleep(1.0)
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        print(f"record: scratch in {work}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
