"""The ``aftertrace`` command line (DESIGN.md "Command line").

Importing this module and parsing the arguments stays cheap: ``--help``, ``--version``, bad
arguments and a path that does not exist are answered before duckdb, polars or pyarrow are
loaded, and each command imports the service (and rich's widgets) inside its function. The
parse workers of the local executor are spawned processes that import the main module again,
so what is imported here at the top is paid once more in every worker.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from aftertrace.ingest import __version__

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from .settings import Settings

STAGES = {"extract": "Extracting", "detect": "Detecting formats", "parse": "Parsing",
          "store": "Storing", "analyze": "Analysing"}


def escape(text: str) -> str:
    """rich's markup escape, imported when the first line is printed rather than at start."""
    from rich.markup import escape as rich_escape
    return rich_escape(text)


class _DelayedProgress:
    """A progress bar that appears only when the work takes more than ``delay`` seconds."""

    def __init__(self, console: Console, delay: float = 1.0):
        self.console = console
        self.delay = delay
        self.t0 = time.monotonic()
        self.bar: Progress | None = None
        self.tasks: dict[str, int] = {}
        self.state: dict[str, tuple[int, int]] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.state[stage] = (done, total)
        if self.bar is None:
            if time.monotonic() - self.t0 < self.delay or not self.console.is_terminal:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description:<18}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                console=self.console, transient=True)
            self.bar.start()
            for s, (d, t) in self.state.items():
                self.tasks[s] = self.bar.add_task(STAGES.get(s, s), total=max(t, 1), completed=d)
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(STAGES.get(stage, stage), total=max(total, 1))
        self.bar.update(self.tasks[stage], completed=done, total=max(total, 1))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


MAX_SOURCE_ROWS = 60     # more rows than this (after grouping alike files): one row per kind and status
MAX_FINDINGS = 40        # findings listed in the terminal (in time order; the chains follow them)


def _sources_by_kind(srcs: list[dict], title: str, colors: dict):
    """The sources table of a large bundle: files, hosts, ranks, records and issues per kind and status."""
    from rich.table import Table
    t = Table(title=f"{title}, per kind", title_justify="left", show_lines=False,
              caption="(each file: in the report, --json, and on the incident's page)", caption_justify="left")
    for col, just in (("kind", "left"), ("status", "left"), ("files", "right"), ("hosts", "right"),
                      ("ranks", "right"), ("records", "right"), ("issues", "right")):
        t.add_column(col, justify=just, overflow="fold")
    groups: dict[tuple, list[dict]] = {}
    for s in srcs:
        groups.setdefault((s["kind"], s["status"]), []).append(s)
    for (kind, status), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        t.add_row(escape(kind), f"[{colors.get(status, 'white')}]{status}[/]", f"{len(items):,}",
                  f"{len({s['host'] for s in items if s['host']}):,}",
                  f"{len({s['rank'] for s in items if s['rank'] is not None}):,}",
                  f"{sum(s['records'] or 0 for s in items):,}", f"{sum(s['issues'] or 0 for s in items):,}")
    return t


def print_summary(console: Console, rep: dict, elapsed: float | None = None) -> None:
    from rich.table import Table

    from aftertrace.web.present import clock_text, group_sources, when, where as evidence_at
    inc = rep["incident"]
    console.print(f"[bold]aftertrace[/bold] incident [bold]{escape(inc['id'])}[/bold] "
                  f"“{escape(str(inc['title']))}”"
                  + (f" — analysed in {elapsed:.1f} s" if elapsed is not None else ""))
    tz = rep.get("time_zone") or {}
    console.print(f"Local times read as [bold]{escape(str(tz.get('zone')))}[/bold] "
                  f"({escape(str(tz.get('from')))})")
    srcs = rep["sources"]
    st = Counter(s["status"] for s in srcs)
    console.print()
    t = Table(title=f"Sources: {len(srcs)} files — " + ", ".join(f"{n} {k}" for k, n in st.most_common()),
              title_justify="left", show_lines=False)
    for col, just in (("path", "left"), ("kind", "left"), ("host", "left"), ("rank", "right"),
                      ("status", "left"), ("records", "right"), ("issues", "right"), ("clock", "left")):
        t.add_column(col, justify=just, overflow="fold")
    colors = {"parsed": "green", "partial": "yellow", "text": "cyan", "unrecognized": "dim", "failed": "red"}
    rows = group_sources(srcs)
    if len(rows) > MAX_SOURCE_ROWS:
        # (a bundle of hundreds of ranks: a row per folder would be thousands of lines above the
        # findings; one row per kind and status, the files themselves in the report and the UI)
        t = _sources_by_kind(srcs, t.title, colors)
    else:
        for s in rows:
            t.add_row(escape(s["path"]), s["kind"], escape(s["host"] or "-"),
                      "-" if s["rank"] is None else str(s["rank"]),
                      f"[{colors.get(s['status'], 'white')}]{s['status']}[/]",
                      str(s["records"] or 0), str(s["issues"] or 0), clock_text(s["clock"]))
    console.print(t)

    console.print()
    if rep["failure"]:
        f = rep["failure"]
        console.print(f"[bold red]Failure[/bold red] {when(f)}  {escape(f['summary'])}")
    anomalies = rep["anomalies"]
    console.print(f"[bold]Findings[/bold] ({len(anomalies)}):" if anomalies else "[bold]Findings[/bold]: none")
    for a in anomalies[:MAX_FINDINGS]:
        who = " ".join(x for x in (a["host"] and f"host {a['host']}",
                                      a["rank"] is not None and f"rank {a['rank']}",
                                      a["pid"] and f"pid {a['pid']}") if x)
        lead = f" ({a['lead_text']})" if a.get("lead_text") else ""
        console.print(f"  {when(a)}  [bold]{a['kind']}[/bold]  {escape(who)}{lead}")
        console.print(f"      {escape(a['summary'])}")
        for e in a["evidence"][:2]:
            first = (e["text"] or "").split("\n", 1)[0]
            console.print(f"      [dim]{escape(evidence_at(e))}: {escape(first[:160])}[/dim]")
    if len(anomalies) > MAX_FINDINGS:
        console.print(f"  … and {len(anomalies) - MAX_FINDINGS} more findings (every one is in the report, "
                      "--json, and on the incident's page)")
    console.print()
    console.print(f"[bold]What happened[/bold]: {escape(rep.get('summary') or '')}")
    for i, c in enumerate(rep["chains"]):
        console.print()
        console.print(f"[bold]{'Most likely chain' if i == 0 else f'Alternative {i}'}[/bold] "
                      f"(score {c['score']:.2f})")
        for j, l in enumerate(c["links"]):
            where = " ".join(x for x in (l["host"] and f"host {l['host']}",
                                          l["rank"] is not None and f"rank {l['rank']}",
                                          l["pid"] and f"pid {l['pid']}") if x)
            lead = f" ({l['lead_text']})" if l.get("lead_text") and j < len(c["links"]) - 1 else ""
            console.print(f"  {j + 1}. {when(l)}{lead}  [bold]{l['kind']}[/bold]  {escape(where)}")
            console.print(f"       {escape(l['summary'])}")
            if j < len(c["edges"]):
                undecided = (" [yellow](which came first is within the uncertainty of their times)[/yellow]"
                             if c["edges"][j].get("order") == "undecidable" else "")
                console.print(f"       [blue]↓ {escape(c['edges'][j]['because'])}[/blue]{undecided}")
    for n in rep.get("notes", []):
        console.print(f"[dim]note: {escape(n)}[/dim]")

    bad = [s for s in srcs if s["status"] != "parsed"]
    if bad:
        console.print()
        console.print(f"[bold]Not fully parsed[/bold] ({len(bad)} files):")
        shown = group_sources(bad, limit=15)
        for s in shown[:30]:
            console.print(f"  [{colors.get(s['status'], 'white')}]{s['status']:<12}[/] {escape(s['path'])}: "
                          f"{escape(str(s['error'] or ''))}")
        if len(shown) > 30:
            console.print(f"  … and {len(shown) - 30} more")


def _settings(args, **kw) -> Settings:
    """Settings from the environment and the command's options (--executor, --ray-address and
    --parts-dir where the command has them)."""
    from .settings import Settings
    ray_address = getattr(args, "ray_address", None)    # (analyze only)
    executor = getattr(args, "executor", None) or ("ray" if ray_address else None)
    return Settings.from_env(db=args.db, home=args.home, executor=executor, ray_address=ray_address,
                             parts_dir=getattr(args, "parts_dir", None), **kw)


def _checked_settings(args, err: Console) -> Settings:
    try:
        return _settings(args)
    except ValueError as e:      # (a --parts-dir it cannot use)
        err.print(f"aftertrace: {escape(str(e))}")
        raise SystemExit(2)


def _service(args, err: Console, settings: Settings | None = None):
    """(settings, service) or (settings, None) after printing why the store cannot be opened."""
    settings = settings or _checked_settings(args, err)
    from .service import Service
    from .store import StoreError
    try:
        return settings, Service(settings)
    except StoreError as e:   # includes StoreBusy
        err.print(f"aftertrace: {escape(str(e))}")
        return settings, None


def cmd_analyze(args, console: Console, err: Console) -> int:
    # The usual mistake is answered before the store and the parsers are loaded; the intake
    # checks everything else (and says the same for a path that vanishes in between).
    if not Path(args.path).exists():
        err.print(f"aftertrace: cannot read {escape(str(Path(args.path)))}: no such file or directory")
        return 2
    from aftertrace.ingest.bundle import IntakeError, store_raw
    settings = _checked_settings(args, err)
    # The input is stored (read, hashed, copied) on another thread while the service's modules
    # load and its store opens: on a large file each takes a few tenths of a second, and the
    # copy mostly waits on the disk and the hash, neither of which holds the GIL.
    t0 = time.monotonic()
    with ThreadPoolExecutor(1, thread_name_prefix="intake") as intake:
        stored = intake.submit(store_raw, args.path, settings.bundles_dir)
        settings, svc = _service(args, err, settings)
        if svc is not None:
            svc.registry    # (the parsers' modules: loaded now, while the input is still being stored)
    if svc is None:         # (the store could not be opened: what this intake added goes again)
        if stored.exception() is None and stored.result().created:
            stored.result().raw_path.unlink(missing_ok=True)
        return 3
    try:
        sub = svc.submit_stored(stored.result(), args.path, title=args.title)
    except IntakeError as e:
        err.print(f"aftertrace: cannot read {escape(str(e))}")
        return 2
    except OSError as e:
        err.print(f"aftertrace: cannot read {escape(str(args.path))}: {escape(e.strerror or str(e))}")
        return 2
    prog = _DelayedProgress(err)
    stopped = _stop_on_signals(svc)
    try:
        rep = svc.analyze(sub.incident_id, progress=prog)
    except KeyboardInterrupt:
        prog.stop()
        err.print(f"aftertrace: analysis of {escape(str(args.path))} stopped; its incident {sub.incident_id} is "
                  "marked failed (analyse again to finish it)")
        return 130
    except Exception as e:
        prog.stop()
        err.print(f"aftertrace: analysis of {escape(str(args.path))} failed: {escape(type(e).__name__)}: "
                  f"{escape(str(e))} (details in {settings.incident_dir(sub.incident_id)}/error.txt)")
        return 1
    finally:
        prog.stop()
        stopped()
    print_summary(console, rep, time.monotonic() - t0)
    if args.json:
        from aftertrace.analysis.report import dumps as report_dumps
        text = report_dumps(rep)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            console.print(f"\nReport JSON written to {escape(args.json)}")
    console.print(f"\nStored in {escape(str(settings.db_path))}. To browse it: "
                  f"[bold]aftertrace serve[/bold] then open "
                  f"http://{settings.host}:{settings.port}/incidents/{sub.incident_id}")
    return 0


def _stop_on_signals(svc) -> Callable[[], None]:
    """Ctrl-C or SIGTERM stops an analysis on the command line at its next step (the incident is
    marked failed, stopped, rather than left running for a later process to take up); a second
    one stops it where it is. Returns the undo.

    (The first does not raise where the signal finds the analysis: a KeyboardInterrupt raised
    inside a library's callback is reported and dropped there, and the analysis would go on.)"""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        if svc.cancelled():
            raise KeyboardInterrupt
        svc.cancel()
        os.write(2, b"aftertrace: stopping at the next step (again to stop at once)\n")
    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(sig, h) for sig, h in before.items()]


def cmd_serve(args, console: Console, err: Console) -> int:
    import uvicorn
    from .app import create_app
    from .store import StoreError
    try:
        settings = _settings(args, host=args.host, port=args.port)
        app = create_app(settings)
    except ValueError as e:
        err.print(f"aftertrace: {escape(str(e))}")
        return 2
    except StoreError as e:
        err.print(f"aftertrace: {e}")
        return 3
    console.print(f"aftertrace UI and API on http://{args.host}:{args.port}/ (API docs at /docs)")
    # (the service's own lines, an analysis queued again or handed back, beside uvicorn's)
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"]["aftertrace"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", log_config=log_config)
    return 0


def cmd_incidents(args, console: Console, err: Console) -> int:
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    from rich.table import Table
    t = Table(title="Incidents", title_justify="left")
    for c in ("id", "title", "status", "sources", "created"):
        t.add_column(c)
    for r in svc.list_incidents():
        t.add_row(r["id"], escape(str(r["title"])), r["status"], str(r["sources"]), str(r["created_at"]))
    console.print(t)
    return 0


def cmd_flamegraph(args, console: Console, err: Console) -> int:
    from aftertrace.web.flamegraph import flame_subtitle, standalone_html
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    fg = svc.flamegraph(svc.complete_id(args.incident), start=args.start, end=args.end, host=args.host, pid=args.pid,
                        comm=args.comm, event=args.event, weight=args.weight,
                        baseline_start=args.baseline_start, baseline_end=args.baseline_end, rank=args.rank)
    out = args.output
    diff = fg["baseline"] is not None
    if out.endswith(".html"):
        text = standalone_html(fg["tree"], f"aftertrace flame graph — incident {fg['incident']}",
                               flame_subtitle(fg), diff)
    elif out.endswith(".json"):
        text = json.dumps(fg, indent=1)
    else:
        text = "\n".join(fg["folded"]) + "\n"
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    console.print(f"{fg['tree']['value']} samples in the window"
                  + (f" ({fg['tree'].get('base', 0)} in the baseline)" if diff else "")
                  + f" of {fg['samples_total']} ({fg['samples_unplaced']} could not be placed in time); "
                  f"written to {escape(out)}")
    return 0


def cmd_export(args, console: Console, err: Console) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from .exports import format_of, formats, normalize
    if not (args.format or format_of(args.output)):
        known = formats().values()
        err.print(f"aftertrace: cannot tell the export format from the file name {escape(repr(args.output))}: "
                  f"give --format ({', '.join(f.name for f in known)}) or a file ending in "
                  f"{', '.join(sorted(f.suffix for f in known))}")
        return 2
    try:
        fmt = normalize(args.format or format_of(args.output))
    except ValueError as e:
        err.print(f"aftertrace: {escape(str(e))}")
        return 2
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    iid = svc.complete_id(args.incident)
    out = Path(args.output)
    tmp = out.with_name(out.name + ".part")
    t0 = time.monotonic()
    try:
        with Progress(TextColumn("exporting {task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
            task = bar.add_task(fmt, total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total or None)

            with open(tmp, "wb") as fh:
                stats = svc.export(iid, fmt, fh, args.start, args.end, progress)
        os.replace(tmp, out)
    except OSError as e:
        err.print(f"aftertrace: cannot write {escape(str(out))}: {escape(e.strerror or str(e))}")
        return 2
    finally:
        tmp.unlink(missing_ok=True)
    size = out.stat().st_size
    console.print(f"{fmt} export of incident {escape(iid)} written to "
                  f"{escape(str(out))} ({size / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s)")
    shown = {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
             and not k.endswith("_ns") and k != "bytes"}
    counts = stats.get("packets") or stats.get("events")      # per kind of packet / event phase
    if isinstance(counts, dict):
        shown.update(counts)
    if shown:
        console.print("  " + ", ".join(f"{k} {v}" for k, v in shown.items()))
    return 0


def cmd_report(args, console: Console, err: Console) -> int:
    from aftertrace.analysis.report import dumps as report_dumps
    from aftertrace.web import report_render
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    rep = svc.get_report(svc.complete_id(args.incident))
    fmt = args.format or {"md": "md", "html": "html", "htm": "html"}.get(
        (args.output or "").rsplit(".", 1)[-1].lower(), "json")
    text = (report_dumps(rep) + "\n" if fmt == "json" else
            report_render.markdown(rep) if fmt == "md" else report_render.html(rep))
    if not args.output or args.output == "-":
        sys.stdout.write(text)
        return 0
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    console.print(f"{fmt} report of incident {rep['incident']['id']} written to {escape(args.output)}")
    return 0


def cmd_delete(args, console: Console, err: Console) -> int:
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    out = svc.delete_incident(args.incident)
    console.print(f"incident {out['deleted']} deleted: its rows, share links, files and raw bundle "
                  f"({out['bytes_freed'] / 1e6:.1f} MB freed)")
    return 0


def cmd_clocks(args, console: Console, err: Console) -> int:
    settings, svc = _service(args, err)
    if svc is None:
        return 3
    iid = svc.complete_id(args.incident)
    rows = svc.clock_table(iid)
    from rich.table import Table
    t = Table(title=f"Clocks of incident {iid}: utc = raw + offset", title_justify="left")
    for c in ("host", "domain", "offset", "uncertainty", "sources", "method"):
        t.add_column(c, overflow="fold")
    from aftertrace.ingest.timeparse import fmt_utc
    for r in rows:
        off = r["offset_ns"]
        off_s = "unplaced" if off is None else (f"{off / 1e9:+.6f} s" + (f" (boot at {fmt_utc(off)})"
                                                                         if r["domain"] == "boot" else ""))
        unc = r["uncertainty_ns"]
        t.add_row(escape(r["host"] or "-"), r["domain"], off_s,
                  "unknown" if unc is None else f"±{unc / 1e6:.3f} ms", str(r["sources"]), escape(r["method"] or ""))
    console.print(t)
    for r in rows:
        for g in r.get("segments") or []:
            lo = "start" if g["from_ns"] is None else f"{g['from_ns'] / 1e9:.3f} s"
            hi = "end" if g["to_ns"] is None else f"{g['to_ns'] / 1e9:.3f} s"
            where = ("not placed" if g["offset_ns"] is None else
                     f"offset {g['offset_ns'] / 1e9:+.6f} s ±{g['uncertainty_ns'] / 1e6:.3f} ms")
            console.print(f"  {escape(r['host'] or '-')}/{r['domain']}: {escape(g['what'])}, raw {lo} to {hi}: {where}")
    for r in rows:
        try:
            ev = json.loads(r["evidence"] or "{}")
        except ValueError:
            continue
        d = ev.get("drift") if isinstance(ev, dict) else None
        if d:
            verdict = "applied" if d["applied"] else "not applied (not larger than twice its uncertainty)"
            console.print(f"  {escape(r['host'] or '-')}/{r['domain']}: drift {d['ppm']:+.3f} ppm "
                          f"±{d['uncertainty_ppm']:.3f} ppm, measured over {d['span_s']:.1f} s — {verdict}")
        others = ev.get("other_methods", []) if isinstance(ev, dict) else []
        bad = {c["method"] for c in ev.get("conflicts", [])} if isinstance(ev, dict) else set()
        for method, off, unc in others:
            verdict = "[red]disagrees[/red]" if method in bad else "agrees"
            console.print(f"  {escape(r['host'] or '-')}/{r['domain']}: also {escape(method)}: "
                          f"{(off - r['offset_ns']) / 1e9:+.6f} s from the one used, ±{unc / 1e9:.3f} s — {verdict}")
    return 0


def cmd_pack_recorder(args, console: Console, err: Console) -> int:
    from aftertrace.ingest.collect.pyz import write_pyz
    try:
        out = write_pyz(args.output)
    except OSError as e:
        err.print(f"aftertrace: cannot write {escape(str(args.output))}: {escape(e.strerror or str(e))}")
        return 2
    console.print(f"wrote {escape(str(out))} ({out.stat().st_size // 1024} KiB): on a node, "
                  f"python3 {escape(out.name)} --out DIR -- CMD ARGS...")
    return 0


def cmd_collect(args, console: Console, err: Console) -> int:
    from aftertrace.ingest import collect
    return collect.run_cli(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aftertrace",
                                description="Post-mortem trace correlation for distributed ML training incidents.")
    p.add_argument("--version", action="version", version=f"aftertrace {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    def common(sp):
        sp.add_argument("--db", help="DuckDB store file (default: $AFTERTRACE_HOME/aftertrace.duckdb)")
        sp.add_argument("--home", help=argparse.SUPPRESS)

    PARTS_HELP = ("shared location (local path or NFS mount, the same path on every Ray node) where parse "
                  "tasks write Parquet partitions; incidents analysed with it keep their heavy tables there "
                  "and the store reads them in place (default $AFTERTRACE_PARTS; without it rows are "
                  "copied into the store)")
    a = sub.add_parser("analyze", help="ingest and analyse a crash bundle (folder, archive or file)")
    a.add_argument("path", help="directory, .tar/.tar.gz/.tgz/.tar.xz/.zip archive, or a single file")
    a.add_argument("--json", metavar="FILE", help="write the aftertrace.report/1 JSON here ('-' for stdout)")
    a.add_argument("--title", help="incident title (default: the bundle's name)")
    a.add_argument("--executor", choices=("local", "ray"),
                   help="where files are parsed: local process pool (default; $AFTERTRACE_EXECUTOR) or a "
                        "Ray cluster (needs aftertrace[ray]; on several machines $AFTERTRACE_HOME must be "
                        "a shared path such as NFS)")
    a.add_argument("--ray-address", metavar="ADDR",
                   help="Ray cluster to use with --executor ray (ray://host:10001, host:6379 or auto; "
                        "default $AFTERTRACE_RAY_ADDRESS, else a local Ray on this machine)")
    a.add_argument("--parts-dir", metavar="PATH", help=PARTS_HELP)
    common(a)
    a.set_defaults(func=cmd_analyze)

    s = sub.add_parser("serve", help="run the web UI and HTTP API")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--parts-dir", metavar="PATH", help=PARTS_HELP + "; applies to bundles uploaded to the server")
    common(s)
    s.set_defaults(func=cmd_serve)

    fgp = sub.add_parser("flamegraph", help="flame graph of the perf samples in a window (.folded, .html, .json)")
    fgp.add_argument("incident", help="incident id (or a unique prefix)")
    fgp.add_argument("-o", "--output", required=True,
                     help="FILE.folded (collapsed stacks), FILE.html (self-contained flame graph) or FILE.json")
    fgp.add_argument("--start", help="window start: ISO-8601 UTC (2026-11-29T13:28:50Z) or epoch seconds")
    fgp.add_argument("--end", help="window end (exclusive)")
    fgp.add_argument("--host")
    fgp.add_argument("--pid", type=int, help="process id (matches thread ids where perf printed only those)")
    fgp.add_argument("--comm", help="command name")
    fgp.add_argument("--rank", type=int, help="a training rank: its process (host and pid, from the report)")
    fgp.add_argument("--event", help="sampled event, e.g. cpu-clock")
    fgp.add_argument("--weight", default="samples", choices=("samples", "period"))
    fgp.add_argument("--baseline-start", help="differential flame graph: baseline window start")
    fgp.add_argument("--baseline-end", help="differential flame graph: baseline window end")
    common(fgp)
    fgp.set_defaults(func=cmd_flamegraph)

    rp = sub.add_parser("report", help="the root-cause report of an incident (json, md or html)")
    rp.add_argument("incident", help="incident id (or a unique prefix)")
    rp.add_argument("--format", choices=("json", "md", "html"),
                    help="default: from the output file's extension, else json")
    rp.add_argument("-o", "--output", help="file to write (default: stdout)")
    common(rp)
    rp.set_defaults(func=cmd_report)

    ex = sub.add_parser("export", help="the incident as a file for other tools (Perfetto and Chrome traces, "
                                       "collapsed stacks, speedscope, a self-contained HTML report)")
    ex.add_argument("incident", help="incident id (or a unique prefix)")
    ex.add_argument("-o", "--output", required=True,
                    help="file to write; its ending names the format when --format does not "
                         "(.pftrace: Perfetto, .folded: collapsed stacks, .html: the report...)")
    ex.add_argument("--format", help="the export format (an unknown name is answered with the list)")
    ex.add_argument("--start", help="window start for folded/speedscope/html: ISO-8601 UTC or epoch seconds "
                                    "(html default: the report's window around the chain)")
    ex.add_argument("--end", help="window end (exclusive)")
    common(ex)
    ex.set_defaults(func=cmd_export)

    dl = sub.add_parser("delete", help="delete an incident and every byte of it (rows, share links, files, "
                                       "raw bundle)")
    dl.add_argument("incident", help="the incident's whole id")
    common(dl)
    dl.set_defaults(func=cmd_delete)

    ck = sub.add_parser("clocks", help="per host and clock domain: offset to UTC, uncertainty, method")
    ck.add_argument("incident", help="incident id (or a unique prefix)")
    common(ck)
    ck.set_defaults(func=cmd_clocks)

    co = sub.add_parser("collect", help="record beside a training job; write a crash bundle when it fails",
                        description="Black-box recorder: runs CMD (or watches --pid), keeps the last --keep of "
                                    "cgroup/PSI snapshots, kernel log, clock anchors, output (and perf, NCCL files, "
                                    "nvidia-smi) in a bounded ring under --out, and writes --out/bundle-<time> when "
                                    "the job fails. Exit status: the job's.")
    from aftertrace.ingest.collect import add_arguments as add_collect_arguments
    add_collect_arguments(co)
    co.set_defaults(func=cmd_collect)

    pk = sub.add_parser("pack-recorder", help="write the recorder (aftertrace collect) as one file that runs "
                                              "with Python's standard library alone, for training nodes",
                        description="Writes a zip application: copy it to a node and run it with python3 in place "
                                    "of 'aftertrace collect' (same arguments); nothing else to install there.")
    pk.add_argument("output", nargs="?", default="aftertrace-collect.pyz",
                    help="the file to write (default: aftertrace-collect.pyz)")
    pk.set_defaults(func=cmd_pack_recorder)

    ls = sub.add_parser("incidents", help="list stored incidents")
    common(ls)
    ls.set_defaults(func=cmd_incidents)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rich.console import Console
    console = Console(highlight=False, emoji=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160, emoji=False)   # piped output: do not wrap at 80
    err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)   # one-line errors stay one line
    from .errors import ServiceError
    try:
        return args.func(args, console, err)
    except ServiceError as e:       # (no such incident, an argument it cannot read, nothing to show yet)
        err.print(f"aftertrace: {escape(str(e))}")
        return 2


def run() -> None:
    """The console script: :func:`main`, then the process ends without tearing its modules down.

    By then the command has done everything it will: its stores are closed here (DuckDB's
    checkpoint), the interpreter's exit handlers run (temporary folders, worker processes,
    logging), and standard output is flushed. What a normal exit would add is the interpreter
    freeing the objects of every module one by one (Polars', pyarrow's and DuckDB's among them),
    which changes nothing on disk and adds a noticeable share to a short command. Where another
    thread still runs, or ``main`` raised, the exit is Python's usual one."""
    code = main()
    import atexit
    import threading
    store = sys.modules.get(f"{__package__}.store")      # (a command that opened none never loads it)
    if store is not None:
        store.close_open_stores()
    if threading.active_count() > 1:        # (a thread still at work: Python's exit waits for it)
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):       # (a reader that went away): Python's exit says so as usual
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
