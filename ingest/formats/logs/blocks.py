"""Multi-line blocks of a log, grouped per output stream: Python tracebacks (chained ones
included), faulthandler dumps (``Fatal Python error: ...``) and torchrun's ChildFailedError
summaries, walked line by line from each block's first line; and the event rows they become
(one per block, and one per failure a summary lists). See :mod:`.engine`, step 4.

The walk is compiled (``native.BlockWalker``, ``at_blocks`` in scan.c): it returns each block's
extent, the rows of its exception line, frames and summary fields, and Python reads only those
rows. A block where the walk would have to know what a character that is not ASCII is (a
Unicode space before a frame, a digit in a ``[i]:`` line) is walked by the Python walkers below,
which are the grammar's reference: a test holds the two to the same blocks."""
from __future__ import annotations

import os
import re

import polars as pl

from ... import native
from ...timeparse import NS
from .grammar import (BLOCK_ROW, CFE_ENTRY, CFE_EXIT, CFE_HEAD, CFE_KV, CFE_RANK, CFE_TIME, EXC, FATAL_SIGNALS,
                      FATAL_START, FRAME, LOCAL_HOSTS, MAX_BLOCK_LINES, TB_CHAIN, TB_START, TIMEOUT_DUMP,
                      TIMEOUT_START, message_in, signame,
                      timeout_summary)


def group_blocks(base: pl.DataFrame, final: bool) -> tuple[list[dict], set[int], int | None]:
    """Group tracebacks / faulthandler dumps / ChildFailedError summaries per stream.

    Returns (block dicts, consumed linenos, lineno of a block still open at the chunk's end).
    """
    # (a ChildFailedError summary pasted without the launcher's traceback starts at its exception line)
    # (a logger's message may lead into the traceback on the header's line: "... hit an exception: Traceback
    # ..."; not a DataLoader's "Original Traceback ...", which is the message of the exception above it)
    is_start = (pl.col("body") == TB_START) | pl.col("body").str.ends_with(": " + TB_START) | \
        pl.col("body").str.starts_with(FATAL_START) | pl.col("body").str.contains(CFE_HEAD) | \
        pl.col("body").str.contains(TIMEOUT_DUMP.pattern)
    starts = base.filter(is_start)
    if starts.is_empty():
        return [], set(), None
    blocks, consumed, open_at = [], set(), None
    # only rows that can belong to a block are walked (tracebacks are contiguous in their stream)
    first = int(starts["lineno"].min())
    # (lines ending in " FAILED" or a traceback's header are tested apart: a ".* FAILED$" branch scans
    # every line to its end)
    # (on the five columns the walk reads: a filter copies every column it is given)
    maybe = base.lazy().select("lineno", "line", "body", "wrank", "stream").filter(
        (pl.col("lineno") >= first) & (pl.col("body").str.contains(BLOCK_ROW)
                                       | pl.col("body").str.ends_with(" FAILED")
                                       | pl.col("body").str.ends_with(": " + TB_START))).collect()
    for stream in starts["stream"].unique().to_list():
        rows = maybe.filter(pl.col("stream") == stream).select("lineno", "line", "body", "wrank")
        linenos, bodies = rows["lineno"].to_list(), rows["body"].to_list()
        lines, wranks = rows["line"].to_list(), rows["wrank"].to_list()
        # only the block starts are visited (not every row in Python)
        body = pl.col("body")
        heads = rows.with_row_index("_i").filter(is_start).select("_i", pl.when(body.str.ends_with(TB_START)).then(
            native.BT_TRACEBACK).when(body.str.starts_with(FATAL_START) | body.str.starts_with(TIMEOUT_START)).then(
            native.BT_FATAL).otherwise(
            native.BT_CFE_ALONE).alias("_k"))
        at, kinds = heads["_i"].to_list(), heads["_k"].to_list()
        kind_at = dict(zip(at, kinds))
        cfe_exc = bytearray(len(bodies))    # (the rows that, read as a traceback's last line, name a ChildFailedError)
        for r in rows.with_row_index("_i").filter(body.str.contains("ChildFailedError", literal=True))["_i"].to_list():
            cfe_exc[r] = _exc_of(bodies[r])[0].endswith("ChildFailedError")
        walker = native.BlockWalker(native.texts(rows["body"]), at, kinds, cfe_exc, MAX_BLOCK_LINES)
        n = len(bodies)
        any_wrank = any(wranks)     # (most streams have no [rankN]: prefix: no block needs a search)
        i, stop = 0, False
        while not stop:
            walk = walker.walk(i)
            stop = True
            for k in range(walk.count):
                rec = walk.blocks[k * _NB:(k + 1) * _NB]
                i = rec[_START]
                if rec[_TYPE] == native.BT_UNSURE:      # (a row the compiled walk does not read: Python's walkers)
                    j, blk = _WALKERS[kind_at[i]](bodies, i)
                    stop = False
                else:
                    j, blk = (None if rec[_END] < 0 else rec[_END]), _block_of(rec, bodies, walk)
                if j is None:           # ran off the chunk: wait for more lines (at the end: the block as it is)
                    if not final:
                        open_at = linenos[i] if open_at is None else min(open_at, linenos[i])
                        stop = True
                        break
                    j = n
                blk.update(lineno=linenos[i], text="\n".join(lines[i:j]), stream=stream, lines=lines[i:j],
                           linenos=linenos[i:j],
                           wrank=next(filter(None, wranks[i:j]), None) if any_wrank else None, nlines=j - i)
                blocks.append(blk)
                consumed.update(linenos[i:j])
                i = j
    return blocks, consumed, open_at


# the fields of the compiled walk's records (native.BLOCK_FIELDS, native.FAILURE_FIELDS)
_NB, _NF = len(native.BLOCK_FIELDS), len(native.FAILURE_FIELDS)
_START, _END, _TYPE, _EXC, _FR_LO, _FR_HI, _HAS_CFE, _TITLE, _FL_LO, _FL_HI = range(_NB)
_F_ENTRY, _F_ROOT, _F_END, _F_KEYS = range(4)
_F_TB_LO, _F_TB_HI = _NF - 2, _NF - 1
_CUT = "traceback cut off (the file ends inside it)"


def _exc_of(line: str) -> tuple[str, str]:
    """A traceback's last line as (exception type, message)."""
    m = EXC.match(line)
    return (m["exc"], m["exc_msg"] or "") if m else (line.split(":", 1)[0], line)


def _frame(line: str) -> tuple[str, int, str]:
    f = FRAME.match(line)
    return f["file"], int(f["line"]), f["func"]


def _shown(frames: list[tuple], fatal: bool) -> dict:
    """A block's frames as its row tells them: how many, and the innermost (a traceback lists it
    last; faulthandler, "most recent call first", first)."""
    return {"nframes": len(frames), "frame": (frames[0] if fatal else frames[-1]) if frames else None}


def _block_of(rec, bodies: list[str], walk) -> dict:
    """The block dict of a record of the compiled walk (what the walkers below return)."""
    i, kind = rec[_START], rec[_TYPE]
    lo, hi = rec[_FR_LO], rec[_FR_HI]
    fatal = kind == native.BT_FATAL
    frames = {"nframes": hi - lo, "frame": _frame(bodies[walk.frames[lo if fatal else hi - 1]]) if hi > lo else None}
    if fatal:
        return _fatal(bodies, i, None if rec[_END] < 0 else rec[_END], frames)
    if kind == native.BT_CFE_ALONE:
        m = EXC.match(bodies[i])
        blk = {"type": "traceback", "exc": m["exc"] if m else "ChildFailedError",
               "exc_msg": (m["exc_msg"] or "") if m else "", "nframes": 0, "frame": None}
    elif rec[_EXC] < 0:
        return {"type": "traceback", "exc": None, "exc_msg": _CUT, **frames}
    else:
        exc, msg = _exc_of(bodies[rec[_EXC]])
        blk = {"type": "traceback", "exc": exc, "exc_msg": msg, **frames}
    if rec[_HAS_CFE] == 1:
        failures = []
        for f in range(rec[_FL_LO], rec[_FL_HI]):
            r = walk.fails[f * _NF:(f + 1) * _NF]
            pieces = walk.tb[3 * r[_F_TB_LO]:3 * r[_F_TB_HI]]
            cur = {"index": int(bodies[r[_F_ENTRY]][1:-2]), "root_cause": bool(r[_F_ROOT]), "traceback_lines": [
                bodies[row][at:].strip() if strip else bodies[row][at:]
                for row, at, strip in zip(pieces[0::3], pieces[1::3], pieces[2::3])],
                "rel": r[_F_ENTRY] - i, "rel_end": r[_F_END] - i}
            for q, key in enumerate(native.FAILURE_KEYS):
                row = r[_F_KEYS + 2 * q]
                if row >= 0:
                    cur[key] = bodies[row][r[_F_KEYS + 2 * q + 1]:].strip()
            failures.append(cur)
        title = bodies[rec[_TITLE]][:-len(" FAILED")] if rec[_TITLE] >= 0 else None
        blk["cfe"] = _cfe_result(title, failures)
    return blk


def _walk_traceback(bodies: list[str], i: int):
    """Index after the block (None if it may continue past the chunk) and the parsed block."""
    n = len(bodies)
    frames, j = [], i + 1
    while True:
        while j < n and (bodies[j].startswith((" ", "\t")) or bodies[j] == TB_START):
            # (FRAME only where it can match: whitespace, then 'File "'; most indented lines are code)
            if 'File "' in bodies[j] and bodies[j].lstrip().startswith('File "'):
                f = FRAME.match(bodies[j])
                if f:
                    frames.append((f["file"], int(f["line"]), f["func"]))
            j += 1
        if j >= n:      # (at the end of the file: the traceback was cut off before its exception line)
            return None, {"type": "traceback", "exc": None, "exc_msg": _CUT, **_shown(frames, False)}
        exc, msg = _exc_of(bodies[j])
        j += 1
        # chained: blank, "During handling ...", blank, Traceback ...
        k = j
        while k < n and bodies[k].strip() == "":
            k += 1
        if k < n and bodies[k] in TB_CHAIN:
            k += 1
            while k < n and bodies[k].strip() == "":
                k += 1
            if k < n and bodies[k] == TB_START:
                j = k + 1
                continue
        break
    blk = {"type": "traceback", "exc": exc, "exc_msg": msg, **_shown(frames, False)}
    if exc.endswith("ChildFailedError"):
        end = _walk_cfe(bodies, j)
        if end is None:
            return None, blk
        blk["cfe"] = _parse_cfe(bodies[j:end], j - i)
        j = end
    return j, blk


def _walk_cfe_alone(bodies: list[str], i: int):
    """A ChildFailedError summary whose traceback is not in the file: its exception line, then the block."""
    m = EXC.match(bodies[i])
    blk = {"type": "traceback", "exc": m["exc"] if m else "ChildFailedError",
           "exc_msg": (m["exc_msg"] or "") if m else "", "nframes": 0, "frame": None}
    end = _walk_cfe(bodies, i + 1)
    if end is None:
        return None, blk
    if end > i + 1:
        blk["cfe"] = _parse_cfe(bodies[i + 1:end], 1)
    return end, blk


def _walk_cfe(bodies: list[str], j: int):
    n = len(bodies)
    if j < n and not bodies[j].startswith("==="):
        return j
    borders = 0
    k = j
    while k < n and k - j < MAX_BLOCK_LINES:
        if bodies[k].startswith("===") and set(bodies[k]) == {"="}:
            borders += 1
            if borders == 2:
                return k + 1
        k += 1
    return None if k >= n else k


def _parse_cfe(lines: list[str], rel0: int = 0) -> dict:
    """The ChildFailedError summary; ``rel`` of each failure = its ``[i]:`` line's offset in the block."""
    title, failures, cur, root, key = None, [], None, False, None
    # (the regexes run only on lines that can match them: CFE_ENTRY on "[...]:", CFE_KV on two
    # whitespace characters and a word character)
    for pos, ln in enumerate(lines):
        if ln.startswith("   ") and cur is not None and title is not None:
            # (the common line, inside a failure's traceback: what the tests below do with it)
            cur["rel_end"] = rel0 + pos + 1
            if key == "traceback":
                cur["traceback_lines"].append(ln[2:])
            continue
        if title is None and ln.endswith(" FAILED"):
            title = ln[: -len(" FAILED")]
            continue
        if ln.startswith("Root Cause"):
            root = True
            continue
        m = CFE_ENTRY.match(ln) if ln.startswith("[") else None
        if m:
            cur = {"index": int(m["idx"]), "root_cause": root, "traceback_lines": [], "rel": rel0 + pos,
                   "rel_end": rel0 + pos + 1}
            failures.append(cur)
            key = None
            continue
        if cur is None:
            continue
        if not ln.startswith(("---", "===")):
            cur["rel_end"] = rel0 + pos + 1
        kv = CFE_KV.match(ln) if ln[:2].isspace() and ln[2:3] and not ln[2].isspace() else None
        if kv and kv["key"] in ("time", "host", "rank", "exitcode", "error_file", "traceback"):
            key = kv["key"]
            val = kv["val"].strip()
            if key == "traceback":
                cur["traceback_lines"].append(val)
            else:
                cur[key] = val
            continue
        if key == "traceback" and ln.startswith("  ") and not ln.startswith("---"):
            cur["traceback_lines"].append(ln[2:])
    return _cfe_result(title, failures)


def _cfe_result(title: str | None, failures: list[dict]) -> dict:
    """The summary from its failures as read (each failure's fields as the summary wrote them)."""
    out = []
    for f in failures:
        d = {"index": f["index"], "root_cause": f["root_cause"], "rel": f["rel"], "rel_end": f["rel_end"]}
        t = CFE_TIME.match(f.get("time", ""))
        if t:
            d["time_parts"] = tuple(map(int, t.groups()))
        d["time"] = f.get("time")
        d["host"] = f.get("host")
        r = CFE_RANK.match(f.get("rank", ""))
        if r:
            d["rank"], d["local_rank"] = int(r["rank"]), int(r["local_rank"])
        e = CFE_EXIT.match(f.get("exitcode", ""))
        if e:
            d["exitcode"], d["pid"] = int(e["code"]), int(e["pid"])
            d["signal"] = e["sig"] or signame(d["exitcode"])
        ef = f.get("error_file")
        d["error_file"] = None if ef in (None, "<N/A>") else ef
        tb = list(f["traceback_lines"])
        while tb and not tb[-1].strip():
            tb.pop()
        d["traceback"] = "\n".join(tb) or None
        last = tb[-1].strip() if tb else ""       # (the last line that is not blank)
        m = EXC.match(last)
        if m:
            d["exc"], d["exc_msg"] = m["exc"], m["exc_msg"]
        out.append(d)
    return {"title": title, "failures": out}


def _walk_fatal(bodies: list[str], i: int):
    n = len(bodies)
    frames, j = [], i + 1
    while j < n:
        b = bodies[j]
        if b.strip() == "" or b.startswith(("Current thread", "Thread 0x", "Extension modules:",
                                            "Stack (most recent call first)", "  File", "  <no Python frame>")):
            f = FRAME.match(b)
            if f:
                frames.append((f["file"], int(f["line"]), f["func"]))
            j += 1
            if b.startswith("Extension modules:"):
                break
            continue
        break
    else:
        return None, _fatal(bodies, i, None, _shown(frames, True))
    return j, _fatal(bodies, i, j, _shown(frames, True))


def _fatal(bodies: list[str], i: int, end: int | None, frames: dict) -> dict:
    """A faulthandler dump's block: a fatal error's (``Fatal Python error: ...``), or its
    watchdog's (``Timeout (0:00:10)!``, :func:`faulthandler.dump_traceback_later`) with every
    thread's stack: ``threads``, (offset in the block of its header, header, frames innermost
    first)."""
    t = TIMEOUT_DUMP.match(bodies[i])
    if t is None:
        return {"type": "fatal", "what": bodies[i][len(FATAL_START):].strip(), **frames}
    threads, cur = [], None
    for k in range(i + 1, len(bodies) if end is None else end):
        b = bodies[k]
        if b.startswith(("Thread 0x", "Current thread 0x")):
            cur = (k - i, b.strip(), [])
            threads.append(cur)
        elif cur is not None:
            f = FRAME.match(b)
            if f:
                cur[2].append((f["file"], int(f["line"]), f["func"]))
    h, m, s = map(int, t.groups())
    return {"type": "timeout_dump", "after_s": h * 3600 + m * 60 + s, "threads": threads, **frames}


_WALKERS = {native.BT_TRACEBACK: _walk_traceback, native.BT_FATAL: _walk_fatal, native.BT_CFE_ALONE: _walk_cfe_alone}


# ---------------------------------------------------------------------------------------------
def block_rows(blocks: list[dict], block_pids: set, zone: str | None) -> list[dict]:
    """Event dicts for the grouped blocks (ChildFailedError entries included)."""
    from ...timeparse import local_ns
    rows = []
    for b in blocks:
        rank = int(b["wrank"]) if b.get("wrank") is not None else None
        common = dict(line=b["lineno"], text=b["text"], stream=b["stream"], rank=rank)
        where = ""
        if b["frame"]:
            f = b["frame"]
            where = f" at {os.path.basename(f[0])}:{f[1]} in {f[2]}"
        if b["type"] == "timeout_dump":
            rows.extend(_timeout_rows(b, common, rank, where))
            continue
        if b["type"] == "fatal":
            what = b["what"]
            sig, kind = next((v for k, v in FATAL_SIGNALS.items() if what.startswith(k)), ("SIGABRT", "signal_kill"))
            attrs = {"error": what, "frames": b["nframes"], "last_frame": where.strip() or None,
                     "signal": sig, "self_signal": True}
            attrs["summary"] = f"Python fatal error: {what}{where}" + (f" (rank {rank})" if rank is not None else "")
            rows.append(dict(common, category="traceback", name="fatal_error", kind=kind, severity="crit",
                             attrs=attrs))
            continue
        cfe = b.get("cfe")
        attrs = {"exc_type": b["exc"], "exc_msg": b["exc_msg"], "frames": b["nframes"],
                 "last_frame": where.strip() or None}
        if cfe is None:
            summary = f"{b['exc'] or 'Python traceback'}: {b['exc_msg']}".strip().rstrip(":")[:300] + where
            kind, name = "python_exception", "traceback"
            again = REPOSTED.match(b["exc_msg"] or "")
            if again:       # another process's error raised again here: its own lines follow in the message
                attrs["reraised_from"] = again.group(1)
            said = message_in(b["exc_msg"] or "")
            if said and said[1]:      # e.g. a gloo timeout or a collective mismatch raised as an exception
                name, kind, fields = said
                attrs.update(fields)
                summary = (timeout_summary(name, fields, "", b["exc_msg"]) if kind == "collective_timeout" else
                           f"collective mismatch: {b['exc_msg'][:240]}" if kind == "collective_mismatch" else
                           f"{KIND_WORDS.get(name, name)}: {b['exc_msg'][:240]}")
                summary += f" ({b['exc']}{where})"
            elif said:
                attrs.update(said[2])
            by_type = EXC_KINDS.get((b["exc"] or "").rsplit(".", 1)[-1])
            if by_type and kind == "python_exception":
                name, kind = by_type[0], by_type[1]
                summary = f"{by_type[2]} ({b['exc']}{where})"
            if rank is not None:
                summary = f"rank {rank}: " + summary
            rows.append(dict(common, category="traceback", name=name, kind=kind,
                             severity="error", attrs=dict(attrs, summary=summary)))
            continue
        fails = cfe["failures"]
        root = next((f for f in fails if f["root_cause"]), fails[0] if fails else None)
        jsum = f"torchrun: {cfe['title'] or 'job'} FAILED"
        if root:
            jsum += "; root cause " + _failure_text(root)
        others = [f for f in fails if f is not root]
        if others:
            jsum += "; then " + "; ".join(_failure_text(f, short=True) for f in others)
        ts = None
        if root and root.get("time_parts"):
            ts = local_ns(*root["time_parts"], 0, zone)
        rows.append(dict(common, category="launcher", name="child_failed", kind="job_failure", severity="error",
                         ts=ts, res=NS if ts is not None else None,
                         attrs=dict(attrs, summary=jsum, title=cfe["title"], failures=len(fails),
                                    root_cause_rank=root.get("rank") if root else None,
                                    root_cause_pid=root.get("pid") if root else None)))
        for f in fails:
            code = f.get("exitcode")
            kind = "signal_kill" if code is not None and code < 0 else "process_exit"
            fts = local_ns(*f["time_parts"], 0, zone) if f.get("time_parts") else None
            host = f.get("host")
            fline = b["linenos"][f["rel"]]
            ftext = "\n".join(b["lines"][f["rel"]:f["rel_end"]])
            fa = {k: f.get(k) for k in ("index", "root_cause", "time", "host", "rank", "local_rank", "exitcode",
                                        "signal", "pid", "error_file", "exc", "exc_msg", "traceback")}
            fa["summary"] = ("torchrun: " + _failure_text(f) +
                             (" (root cause)" if f["root_cause"] else " (after the root-cause failure)"))
            if f.get("pid") is not None:
                block_pids.add(f["pid"])
            rows.append(dict(line=fline, text=ftext, stream="", category="launcher",
                             name="worker_failure", kind=kind, severity="error", ts=fts,
                             res=NS if fts is not None else None,
                             host=None if (host or "").lower() in LOCAL_HOSTS else host,
                             rank=f.get("rank"), pid=f.get("pid"), attrs=fa))
    return rows


def _timeout_rows(b: dict, common: dict, rank: int | None, where: str) -> list[dict]:
    """A faulthandler watchdog's dump: the finding (``hang_dump``: the process saw itself make no
    progress for ``after_s``) and one ``thread_stack`` row per thread, as a py-spy dump's
    (frames ``function (file:line)``, innermost first), at its header's line. Which thread is
    the main one the dump does not say: the one whose outermost frame is a ``<module>``."""
    threads = b["threads"]
    stacks = [[f"{fn} ({file}:{ln})" for file, ln, fn in fr] for _, _, fr in threads]
    main = next((k for k, fr in enumerate(stacks) if fr and fr[-1].startswith("<module> (")), None)
    at = stacks[main][0] if main is not None and stacks[main] else None
    who = f"rank {rank}: " if rank is not None else ""
    summary = (f"{who}Python's hang watchdog (faulthandler) found no progress for {b['after_s']} s and dumped "
               f"{len(threads)} thread(s)" + (f"; the main thread was in {at}" if at else ""))
    rows = [dict(common, category="traceback", name="faulthandler_timeout", kind="hang_dump", severity="error",
                 attrs={"after_s": b["after_s"], "threads": len(threads), "main_frame": at, "summary": summary})]
    for k, (off, head, _fr) in enumerate(threads):
        end = threads[k + 1][0] if k + 1 < len(threads) else b["nlines"]
        rows.append(dict(line=b["linenos"][off], text="\n".join(b["lines"][off:end]).rstrip(), stream=b["stream"],
                         rank=rank, category="stack", name="thread_stack", kind=None, severity=None,
                         attrs={"thread": "MainThread" if k == main else None, "thread_id": head.split()[1]
                                if head.startswith("Thread") else head.split()[2],
                                "state": None, "idle": None, "gil": None, "frames": stacks[k][:64],
                                "depth": len(stacks[k]), "process": None, "python": None, "from": "faulthandler"}))
    return rows


# An exception that raises again an error of another process, whose own traceback follows in its
# message: torch's DataLoader ("Caught RuntimeError in DataLoader worker process 2.", then "Original
# Traceback (most recent call last):" and the worker's lines).
REPOSTED = re.compile(r"^Caught \w[\w.]* in (DataLoader worker process \d+)")

# How a typed exception is named in its summary.
# Exceptions whose class says what happened, message or not: (event name, kind, summary).
EXC_KINDS = {
    "RendezvousTimeoutError": ("rendezvous_timeout", "rendezvous_failure",
                               "the launcher gave up waiting for the other nodes to join the rendezvous"),
}
KIND_WORDS = {"shm_exhausted": "out of shared memory (/dev/shm)", "dataloader_worker_killed": "a DataLoader worker died",
              "disk_full": "no space left on the device", "checkpoint_write_failed": "writing a checkpoint failed "
              "(torch.save could not write: the file system is full or failing)"}



def _failure_text(f: dict, short: bool = False) -> str:
    who = f"rank {f.get('rank')}"
    if not short:
        who += f" (local_rank {f.get('local_rank')}, pid {f.get('pid')})"
    code = f.get("exitcode")
    how = f"exitcode {code}" + (f" ({f['signal']})" if f.get("signal") else "")
    if f.get("exc") and not short:
        how += f": {f['exc']}: {(f.get('exc_msg') or '')[:200]}"
    if short:
        return f"{who} {how}"
    return f"{who} {how} at {f.get('time')} on {f.get('host')}"
