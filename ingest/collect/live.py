"""What the job's processes are doing, taken while they still run: the captures of a hang.

When a bundle is written while the job is alive (a watchdog line, ``--hang-after``, a request,
SIGUSR1), the recorder takes what an engineer would take by hand before anyone kills the job:

* ``py-spy dump --pid P`` of every live process of the job (ranks, their DataLoader workers,
  the launcher): each thread's Python stack (``<host>/stacks/py-spy-<pid>.txt``). py-spy is
  looked for on the PATH and beside the job's interpreter (a ``pip install py-spy`` in the job's
  environment); it needs ptrace rights on the process (root, or ``kernel.yama.ptrace_scope`` 0).
* ``gdb -p P -batch -nx -ex "thread apply all bt"`` of the processes py-spy did not dump (no
  py-spy, or it was refused): their native stacks (``<host>/stacks/gdb-<pid>.txt``), one process
  at a time, within :data:`GDB_BUDGET_S` in all (gdb takes seconds per process to read symbols).
* ``strace -f -tt -T -p P`` of the same processes, all at once, for ``strace_s`` seconds
  (``<host>/strace/strace-<pid>.txt``): the calls they are blocked in. strace slows what it
  traces: it runs only this long, on a job that has stopped making progress or is failing.
* copies of ``/proc/<pid>/stack`` and ``/proc/<pid>/wchan`` (``<host>/proc/<pid>/``): where in the
  kernel each one sleeps (``stack`` needs root).
* ``df -B1 /dev/shm`` (``<host>/host/df-dev-shm.txt``): how full the shared memory a DataLoader
  passes its batches through was.

What could not be taken is said once, with why (no py-spy, no strace, ptrace refused). Bounded:
at most :data:`MAX_PROCS` processes, :data:`TOOL_TIMEOUT_S` per py-spy call, ``strace_s`` for the
traces, :data:`MAX_TRACE_BYTES` per trace file (strace stops writing there).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

MAX_PROCS = 64
TOOL_TIMEOUT_S = 10.0
GDB_TIMEOUT_S = 20.0
GDB_BUDGET_S = 60.0
MAX_TRACE_BYTES = 8 << 20


def find_tool(name: str, near: list[str] = ()) -> str | None:
    """``name`` on the PATH, else beside one of the interpreters in ``near`` (a venv's bin)."""
    found = shutil.which(name)
    if found:
        return found
    for exe in near:
        if os.path.isabs(exe):
            cand = os.path.join(os.path.dirname(exe), name)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


def _last_line(b: bytes) -> str:
    """A tool's last line of output (where it says why it failed), cut short."""
    t = b.decode("utf-8", "replace").strip().splitlines()
    return t[-1][:300] if t else ""


def _tally(captured: list, missing: list, what: str, path: str, ok: int, refused: list[str], t0: int,
           tool: str) -> None:
    """The manifest's entries for one tool run over the processes: what it took, and for which
    processes it could not, with why (the first eight said)."""
    if ok:
        captured.append({"what": what, "path": path, "count": ok, "time_ns": t0, "tool": tool})
    if refused:
        missing.append({"what": f"{what} of some processes", "reason": "; ".join(refused[:8])
                        + (f" (and {len(refused) - 8} more)" if len(refused) > 8 else "")})


def capture(procs: list, dest: str, host: str, strace_s: float = 3.0) -> tuple[list[dict], list[dict]]:
    """Take the captures of ``procs`` (``procs.Proc``, alive) into ``dest/<host>/...``; returns
    (captured, missing) entries for the manifest."""
    captured: list[dict] = []
    missing: list[dict] = []
    procs = [p for p in procs if p.ended_ns is None][:MAX_PROCS]
    if not procs:
        return captured, [{"what": "stacks of the job's processes", "reason": "no process of the job was alive"}]
    near = [p.cmdline.split("\0")[0].split(" ")[0] for p in procs if p.cmdline]
    base = os.path.join(dest, host)

    # py-spy, one process at a time (it stops each for the moment it reads it)
    pyspy = find_tool("py-spy", near)
    if pyspy is None:
        missing.append({"what": "py-spy dumps", "reason": "py-spy is not installed (pip install py-spy, on the PATH "
                                                           "or in the job's environment)"})
    else:
        os.makedirs(os.path.join(base, "stacks"), exist_ok=True)
        ok, refused = 0, []
        t0 = time.time_ns()
        for p in procs:
            out = os.path.join(base, "stacks", f"py-spy-{p.pid}.txt")
            try:
                r = subprocess.run([pyspy, "dump", "--pid", str(p.pid)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=TOOL_TIMEOUT_S)
            except (subprocess.TimeoutExpired, OSError) as e:
                refused.append(f"{p.pid}: {type(e).__name__}")
                continue
            if r.returncode == 0 and r.stdout.strip():
                with open(out, "wb") as f:
                    f.write(r.stdout)
                ok += 1
            else:
                refused.append(f"{p.pid} ({p.comm}): {_last_line(r.stderr or r.stdout)}")
        _tally(captured, missing, "py-spy dumps", f"{host}/stacks/", ok, refused, t0, pyspy)

    # gdb, for the processes py-spy did not dump: their native stacks
    rest = [p for p in procs if not os.path.exists(os.path.join(base, "stacks", f"py-spy-{p.pid}.txt"))]
    gdb = find_tool("gdb") if rest else None
    if rest and gdb is None:
        missing.append({"what": "gdb backtraces", "reason": "gdb is not installed (the native stacks of the "
                                                            f"{len(rest)} processes py-spy did not dump)"})
    elif rest:
        os.makedirs(os.path.join(base, "stacks"), exist_ok=True)
        ok, refused = 0, []
        t0 = time.time_ns()
        deadline = time.monotonic() + GDB_BUDGET_S
        for p in rest:
            if time.monotonic() > deadline:
                refused.append(f"{p.pid}: not taken, the {GDB_BUDGET_S:.0f} s for gdb were spent")
                continue
            try:
                r = subprocess.run([gdb, "-p", str(p.pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=GDB_TIMEOUT_S,
                                   stdin=subprocess.DEVNULL)
            except (subprocess.TimeoutExpired, OSError) as e:
                refused.append(f"{p.pid}: {type(e).__name__}")
                continue
            if b"\n#0 " in r.stdout:
                with open(os.path.join(base, "stacks", f"gdb-{p.pid}.txt"), "wb") as f:
                    f.write(r.stdout)
                ok += 1
            else:
                why = [ln for ln in r.stdout.decode("utf-8", "replace").splitlines() if "ptrace" in ln or "denied" in ln]
                refused.append(f"{p.pid} ({p.comm}): {(why[0] if why else _last_line(r.stdout))[:300]}")
        _tally(captured, missing, "gdb backtraces", f"{host}/stacks/", ok, refused, t0, gdb)

    # /proc/<pid>/stack and wchan
    n = 0
    for p in procs:
        for name in ("stack", "wchan"):
            try:
                with open(f"/proc/{p.pid}/{name}", "rb") as f:
                    data = f.read(1 << 16)
            except OSError:
                continue
            d = os.path.join(base, "proc", str(p.pid))
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            n += 1
    if n:
        captured.append({"what": "kernel stacks and wait channels", "path": f"{host}/proc/", "count": n,
                         "time_ns": time.time_ns()})

    # strace, all at once, for strace_s seconds
    strace = find_tool("strace")
    if strace is None:
        missing.append({"what": "strace of the job's processes", "reason": "strace is not installed"})
    elif strace_s > 0:
        os.makedirs(os.path.join(base, "strace"), exist_ok=True)
        running = []
        t0 = time.time_ns()
        for p in procs:
            out = os.path.join(base, "strace", f"strace-{p.pid}.txt")
            try:
                running.append((p, out, subprocess.Popen([strace, "-f", "-tt", "-T", "-p", str(p.pid), "-o", out],
                                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
            except OSError as e:
                missing.append({"what": "strace of the job's processes", "reason": str(e)})
                break
        deadline = time.monotonic() + strace_s
        while time.monotonic() < deadline and any(r.poll() is None for _, _, r in running):
            time.sleep(0.1)
            for _, out, r in running:
                if r.poll() is None and os.path.exists(out) and os.path.getsize(out) > MAX_TRACE_BYTES:
                    r.send_signal(signal.SIGINT)
        failed = []
        for p, out, r in running:
            if r.poll() is None:
                r.send_signal(signal.SIGINT)
            try:
                _, err = r.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                r.kill()
                _, err = r.communicate()
            if not os.path.exists(out) or os.path.getsize(out) == 0:
                failed.append(f"{p.pid} ({p.comm}): {_last_line(err or b'') or 'no output'}")
                if os.path.exists(out):
                    os.remove(out)
        ok = len(running) - len(failed)
        if ok:
            captured.append({"what": "strace of the job's processes", "path": f"{host}/strace/", "count": ok,
                             "time_ns": t0, "seconds": strace_s, "command": "strace -f -tt -T -p PID"})
        if failed:
            missing.append({"what": "strace of some processes", "reason": "; ".join(failed[:8])})

    # /dev/shm
    if os.path.isdir("/dev/shm"):
        try:
            r = subprocess.run(["df", "-B1", "/dev/shm"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=TOOL_TIMEOUT_S)
            if r.returncode == 0:
                os.makedirs(os.path.join(base, "host"), exist_ok=True)
                with open(os.path.join(base, "host", "df-dev-shm.txt"), "wb") as f:
                    f.write(r.stdout)
                captured.append({"what": "/dev/shm usage (df)", "path": f"{host}/host/df-dev-shm.txt",
                                 "time_ns": time.time_ns()})
        except (OSError, subprocess.TimeoutExpired) as e:
            missing.append({"what": "/dev/shm usage (df)", "reason": str(e)})
    return captured, missing
