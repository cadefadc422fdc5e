"""The report as a document: Markdown (for tickets and chat) and a self-contained HTML file
(styles inlined, nothing fetched; optionally with the trace viewer on one window and the flame
graph inlined). Both render the ``aftertrace.report/1`` JSON;
nothing here computes. Strings from the bundle are escaped: HTML through Jinja2's autoescape,
Markdown by backslash-escaping the characters Markdown would interpret and fencing raw lines."""
from __future__ import annotations

import re

from .pages import STATIC_DIR, _env, script_json, static_text
from .present import group_sources, when, where

# What Markdown would interpret in running text: emphasis, code, links, HTML, tables, strike-through;
# an underscore only at a word edge (CommonMark ignores intraword ones, as in file_names).
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_escape(s) -> str:
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), str(s if s is not None else "")).replace("\n", " ")
    return ("\\" + text) if text[:1] in "#+-=" and text else text


def _fence(text: str) -> str:
    text = text or ""
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}text\n{text}\n{ticks}"


def _where(l: dict) -> str:
    bits = [f"host {l['host']}" if l.get("host") else None,
            f"rank {l['rank']}" if l.get("rank") is not None else None,
            f"pid {l['pid']}" if l.get("pid") else None]
    return ", ".join(b for b in bits if b)


def _lead(l: dict) -> str:
    return f" ({l['lead_text']})" if l.get("lead_text") else ""


def markdown(rep: dict) -> str:
    inc = rep["incident"]
    out = [f"# aftertrace report: {md_escape(inc['title'])}", "",
           f"Incident `{inc['id']}`, bundle `{md_escape(inc.get('bundle_name'))}` "
           f"(sha256 `{inc['bundle_sha256']}`), analysed {inc['created_at']}. Times are UTC.", "",
           "## What happened", "", md_escape(rep.get("summary", "")), ""]
    f = rep.get("failure")
    if f:
        out += [f"**Failure** {when(f)} — {md_escape(f['summary'])}", ""]
        out += [f"- `{md_escape(where(e))}`" for e in f["evidence"][:3]] + [""]
    lrc = rep.get("launcher_root_cause")
    if lrc and lrc.get("victim_of") is not None:
        out += [f"**Note:** the launcher named rank {lrc['rank']} as the root cause (the first failure it "
                f"observed); the chain shows it was a victim of rank {lrc['victim_of']}.", ""]
    for i, c in enumerate(rep.get("chains", [])):
        title = "Most likely chain" if i == 0 else f"Alternative {i}"
        out += [f"## {title} (score {c['score']:.2f})", ""]
        for j, l in enumerate(c["links"]):
            out.append(f"{j + 1}. **{when(l)}**{_lead(l)} `{l['kind']}` {md_escape(_where(l))} — "
                       f"{md_escape(l['summary'])} *({l['provenance']})*")
            for e in l["evidence"][:2]:
                first = (e["text"] or "").split("\n", 1)[0][:300]
                out.append(f"   - `{md_escape(where(e))}`: {md_escape(first)}")
            if j < len(c["edges"]):
                ed = c["edges"][j]
                undecided = ("; which came first is within the uncertainty of their times"
                             if ed.get("order") == "undecidable" else "")
                out.append(f"   - ↓ {md_escape(ed['because'])} ({ed['provenance']}, strength {ed['strength']:.2f}"
                           f"{undecided})")
        if c.get("consequences"):
            out += ["", "Also explained by this chain:", ""]
            out += [f"- {when(x)} `{x['kind']}` {md_escape(_where(x))} — {md_escape(x['summary'])}"
                    for x in c["consequences"]]
        if c.get("unexplained"):
            out += ["", "Not explained by this origin (unrelated, or a second problem):", ""]
            out += [f"- {when(x)} `{x['kind']}` {md_escape(_where(x))} — {md_escape(x['summary'])}"
                    for x in c["unexplained"]]
        out.append("")
    if rep.get("victims"):
        out += ["## Also affected", ""]
        out += [f"- {when(v)} `{v['kind']}` {md_escape(_where(v))} — {md_escape(v['summary'])}"
                for v in rep["victims"]] + [""]
    if rep.get("progress"):
        out += ["## Progress per rank", "", "| rank | host | pid | last step | last own line | last sign of life | ended |",
                "|---:|---|---:|---|---|---|---|"]
        for p in rep["progress"]:
            step = f"{p['last_step']} at {p['last_step_time']}" if p["last_step"] is not None else "-"
            ended = "; ".join(f"{e['kind']} {when(e)}" for e in p["ended"]) or "-"
            out.append(f"| {p['rank']} | {md_escape(p['host'] or '-')} | {p['pid'] or '-'} | {step} | "
                       f"{p['last_line_time'] or '-'} | {p['last_alive_time'] or '-'} | {md_escape(ended)} |")
        out.append("")
        dumped = [p for p in rep["progress"] if p.get("stack")]
        if dumped:
            out += ["### What each rank was doing (stack dumps)", ""]
            for p in dumped:
                st = p["stack"]
                line = (f"- rank {p['rank']} (pid {st['pid']}){' **(not where its peers are)**' if st.get('elsewhere') else ''}: "
                        f"{md_escape(st['doing'])}")
                if st.get("syscall") and st["syscall"] not in st["doing"]:
                    line += f", waiting in {md_escape(st['syscall'])}"
                if st.get("taken_time"):
                    line += f" (dumped {md_escape(st['taken_time'])})"
                out.append(line)
                for w in st.get("workers") or []:
                    out.append(f"  - worker pid {w['pid']}: {md_escape(w['doing'])}"
                               + (f", waiting in {md_escape(w['syscall'])}"
                                  if w.get("syscall") and w["syscall"] not in w["doing"] else ""))
            out.append("")
    out += [f"## Findings ({len(rep['anomalies'])})", ""]
    for a in rep["anomalies"]:
        out.append(f"- **{when(a)}**{_lead(a)} `{a['kind']}` {md_escape(_where(a))} — "
                   f"{md_escape(a['summary'])}")
    out += ["", f"## Sources ({len(rep['sources'])})", "", "| path | kind | host | rank | status | records | issues |",
            "|---|---|---|---:|---|---:|---:|"]
    for s in group_sources(rep["sources"], limit=60):
        out.append(f"| {md_escape(s['path'])} | {s['kind']} | {md_escape(s['host'] or '-')} | "
                   f"{'-' if s['rank'] is None else s['rank']} | {s['status']} | {s['records'] or 0} | {s['issues'] or 0} |")
    if rep.get("notes"):
        out += ["", "## Notes", ""] + [f"- {md_escape(n)}" for n in rep["notes"]]
    return "\n".join(out) + "\n"


def _inline_js(text: str) -> str:
    """Script text to inline in a <script> element (it may not contain "</script")."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.I)


def html(rep: dict, share: dict | None = None, timeline: dict | None = None, flame: dict | None = None) -> str:
    """The standalone report; with ``share``, as the read-only page of a share link (its note and
    window shown, and a link to its timeline view). With ``timeline`` (the timeline JSON of a window,
    with its track list) the file also carries the trace viewer drawing that window and, with ``flame`` (``{tree, title,
    subtitle}``), a flame graph: one file that works offline, to attach to a ticket."""
    css = (STATIC_DIR / "app.css").read_text(encoding="utf-8")
    from aftertrace.ingest import __version__
    embed = None
    if timeline is not None:
        embed = {"timeline_caption": f"{timeline['start']} – {timeline['end']} · {len(timeline['data'])} of "
                                     f"{len(timeline['tracks'])} tracks · {len(timeline['metrics'])} counters",
                 "flame": flame,
                 "data_json": script_json({"timeline": timeline, "flame": flame}),
                 "timeline_js": _inline_js(static_text("trace.js")),
                 "flame_js": _inline_js(static_text("flame.js"))}
    return _env.get_template("report_standalone.html").render(
        rep=rep, css=css, version=__version__, sources=group_sources(rep["sources"], limit=60), share=share,
        embed=embed)


# The export format this module writes (see server/exports.py: every module that declares one is a format)
EXPORT = {"name": "html", "suffix": ".html", "media_type": "text/html; charset=utf-8", "windowed": True,
          "what": "the report as one self-contained file: chain, findings, the trace viewer on one window and the "
                  "flame graph"}


def export(src, out, start: str | None, end: str | None, progress=None) -> dict:
    """The format's writer as server/exports.py calls it: the report with the timeline of the window
    (default: the report's window around the chain) and the flame graph of its samples (all of
    them where the window holds none)."""
    from .flamegraph import flame_subtitle
    rep = src.report()
    try:
        tl = src.timeline(start, end)
    except ValueError:
        if start is not None or end is not None:
            raise
        # nothing could be placed in time (pasted text, a lone snapshot): the report alone
        text = html(rep)
        out.write(text.encode("utf-8"))
        return {"format": "html", "bytes": len(text.encode("utf-8")), "window": None, "tracks": 0, "samples": 0}
    fg = src.flamegraph(tl["start"], tl["end"])
    whole = False
    if fg["tree"]["value"] == 0 and fg["samples_total"] > 0:    # no samples in the window: all of them
        fg, whole = src.flamegraph(None, None), True
    flame = None
    if fg["tree"]["value"]:
        sub = flame_subtitle(fg) + (" · the whole recording (none in the timeline's window)" if whole else "")
        flame = {"tree": fg["tree"], "title": "perf samples", "subtitle": sub, "diff": False}
    text = html(rep, timeline=tl, flame=flame)
    out.write(text.encode("utf-8"))
    return {"format": "html", "bytes": len(text.encode("utf-8")), "window": {"start": tl["start"], "end": tl["end"]},
            "tracks": len(tl["data"]), "samples": fg["tree"]["value"]}
