// The aligned timeline: draws the JSON twin (/api/incidents/{id}/timeline) with Plotly and asks
// the server for a new window on every zoom. Text from the bundle is only ever set with
// textContent (no HTML parsing of it anywhere) and Plotly's hover text is escaped first.
(function () {
  "use strict";
  const el = document.getElementById("timeline");
  const iid = el.dataset.incident;
  const statusEl = document.getElementById("status");
  const detail = document.getElementById("detail");
  const chainBar = document.getElementById("chain");
  const flame = document.getElementById("flame");
  const KIND_COLOR = {oom_kill: "#b3261e", signal_kill: "#b3261e", job_failure: "#000", process_exit: "#8a1c14",
    cpu_throttle: "#e07b00", memory_growth: "#7b3fa0", step_slowdown: "#2a5db0", rank_stalled: "#c2185b",
    collective_timeout: "#c2185b", python_exception: "#8a1c14"};
  let first = null, current = null;

  function esc(s) {
    return String(s == null ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function iso(ns) { return new Date(ns / 1e6).toISOString(); }
  function xOf(ns) { return iso(ns).replace("T", " ").replace("Z", ""); }
  function nsOf(x) {  // Plotly gives "YYYY-MM-DD HH:MM:SS.ffffff" (UTC here) or a number
    if (typeof x === "number") return Math.round(x * 1e6);
    const s = String(x).replace(" ", "T");
    const m = s.match(/^(.*?)(\.\d+)?$/);
    const ms = Date.parse(m[1] + "Z");
    const frac = m[2] ? parseFloat("0" + m[2]) : 0;
    return ms * 1e6 + Math.round(frac * 1e9);
  }

  function draw(d) {
    const lanes = d.lanes.map(l => l.id);
    const traces = [];
    const spanX = [], spanY = [], ptX = [], ptY = [], ptText = [], ptCustom = [];
    const binX = [], binY = [], binS = [], binText = [];
    for (const l of d.lanes) {
      for (const e of (l.events || [])) {
        if (e.dur && e.dur > 0) { spanX.push(xOf(e.ts), xOf(e.ts + e.dur), null); spanY.push(l.id, l.id, null); }
        ptX.push(xOf(e.ts)); ptY.push(l.id);
        ptText.push(esc((e.kind ? "[" + e.kind + "] " : "") + e.name + (e.line ? " (line " + e.line + ")" : "")));
        ptCustom.push([e.source || l.source, e.line, e.text || "", e.kind || "", e.name]);
      }
      for (const b of (l.bins || [])) {
        binX.push(xOf(b.ts + b.dur / 2)); binY.push(l.id); binS.push(4 + Math.min(14, Math.log2(1 + b.n) * 2));
        binText.push(esc(b.n + " events, mostly " + b.name + (b.typed ? " (" + b.typed + " findings)" : "")));
      }
    }
    traces.push({type: "scattergl", mode: "lines", x: spanX, y: spanY, line: {width: 6, color: "rgba(42,93,176,0.35)"},
      hoverinfo: "skip", showlegend: false, yaxis: "y"});
    traces.push({type: "scattergl", mode: "markers", x: ptX, y: ptY, text: ptText, customdata: ptCustom,
      hovertemplate: "%{text}<br>%{x}<extra></extra>", marker: {size: 6, color: "#2a5db0"}, name: "events", yaxis: "y"});
    traces.push({type: "scattergl", mode: "markers", x: binX, y: binY, text: binText, marker: {size: binS, color: "#6b7480",
      symbol: "square"}, hovertemplate: "%{text}<br>%{x}<extra></extra>", name: "dense (aggregated)", yaxis: "y"});
    // findings: on their lane when they have one, as a marker on a "findings" lane otherwise
    const fX = [], fY = [], fT = [], fC = [], fS = [], fCustom = [];
    for (const f of d.findings) {
      if (f.ts_ns < d.start_ns || f.ts_ns > d.end_ns) continue;
      fX.push(xOf(f.ts_ns)); fY.push("findings"); fT.push(esc(f.kind + ": " + f.summary));
      fC.push(KIND_COLOR[f.kind] || "#444"); fS.push(f.on_chain ? 16 : 10);
      fCustom.push(["", null, f.summary, f.kind, f.kind]);
    }
    traces.push({type: "scatter", mode: "markers", x: fX, y: fY, text: fT, customdata: fCustom,
      marker: {size: fS, color: fC, symbol: "diamond", line: {width: 1, color: "#000"}},
      hovertemplate: "%{text}<extra></extra>", name: "findings (large: on the chain)", yaxis: "y"});
    // metrics: one axis per family (memory usage and its limit together, every pressure series together)
    const family = m => m.metric.startsWith("memory.") && m.metric.endsWith("_bytes") ? "memory (bytes)"
      : m.metric.startsWith("psi.") ? "pressure stall %" : m.metric;
    const metricNames = [...new Set(d.metrics.map(family))];
    const nM = metricNames.length;
    const laneFrac = nM ? 0.55 : 1.0;
    const layout = {height: Math.max(420, 60 + 22 * (lanes.length + 1) / laneFrac + 90 * nM), margin: {l: 330, r: 20, t: 10, b: 40},
      xaxis: {type: "date", title: "UTC"}, hovermode: "closest", dragmode: "zoom", showlegend: true,
      legend: {orientation: "h", y: 1.02, yanchor: "bottom"},
      yaxis: {domain: [1 - laneFrac, 1], type: "category", categoryarray: ["findings"].concat(lanes).reverse(),  // first = bottom
              automargin: true, tickfont: {size: 10}}};
    metricNames.forEach((name, i) => {
      const ax = "yaxis" + (i + 2);
      const h = (1 - laneFrac) / nM;
      layout[ax] = {domain: [h * (nM - 1 - i), h * (nM - i) - 0.02], title: {text: name, font: {size: 10}}, tickfont: {size: 9}};
      for (const m of d.metrics.filter(m => family(m) === name)) {
        traces.push({type: "scattergl", mode: "lines", x: m.points.map(p => xOf(p[0])), y: m.points.map(p => p[1]),
          name: esc(m.id), yaxis: "y" + (i + 2), hovertemplate: esc(m.id) + ": %{y}<br>%{x}<extra></extra>"});
      }
    });
    layout.xaxis.range = [xOf(d.start_ns), xOf(d.end_ns)];
    Plotly.react(el, traces, layout, {responsive: true, displaylogo: false});
    statusEl.textContent = `${d.start} – ${d.end} · ${d.lanes.length} of ${d.lanes_total} lanes · ` +
      `${d.metrics.length} metric series · ${d.unplaced_events} events could not be placed in time`;
    flame.textContent = "";
    const fg = `/incidents/${encodeURIComponent(iid)}/flamegraph?start=${encodeURIComponent(d.start)}&end=${encodeURIComponent(d.end)}`;
    const a = document.createElement("a");
    a.href = fg; a.textContent = "Flame graph of this window"; a.id = "flame-link";
    flame.appendChild(a);
    // differential: this window against as long a stretch at the start of the recording (its quiet period)
    if (d.bounds && d.bounds.start) {
      const b0 = nsOf(d.bounds.start.replace("Z", "")), len = d.end_ns - d.start_ns;
      if (b0 + len <= d.start_ns) {
        const diff = document.createElement("a");
        diff.href = fg + `&baseline_start=${encodeURIComponent(iso(b0))}&baseline_end=${encodeURIComponent(iso(b0 + len))}`;
        diff.textContent = "differential flame graph against the start of the recording";
        diff.id = "flame-diff-link";
        flame.appendChild(document.createTextNode(" · "));
        flame.appendChild(diff);
      }
    }
    current = d;
  }

  function drawChain(d) {
    chainBar.textContent = "";
    const chain = d.findings.filter(f => f.on_chain).sort((a, b) => a.ts_ns - b.ts_ns);
    if (!chain.length) return;
    const lbl = document.createElement("span"); lbl.textContent = "Chain: "; chainBar.appendChild(lbl);
    chain.forEach((f, i) => {
      const b = document.createElement("button");
      b.className = "chainlink"; b.dataset.ts = String(f.ts_ns);
      b.textContent = `${i + 1}. ${f.kind} ${f.time.slice(11, 23)}` + (f.lead_s != null ? ` (${f.lead_s.toFixed(1)} s before)` : "");
      b.title = f.summary;
      b.addEventListener("click", () => load(f.ts_ns - 5e9, f.ts_ns + 5e9));
      chainBar.appendChild(b);
    });
  }

  async function load(startNs, endNs) {
    statusEl.textContent = "loading…";
    let url = `/api/incidents/${encodeURIComponent(iid)}/timeline`;
    if (startNs != null) url += `?start=${encodeURIComponent(iso(startNs))}&end=${encodeURIComponent(iso(endNs))}`;
    // ISO strings from Date only keep milliseconds: good enough for windows
    const r = await fetch(url);
    const d = await r.json();
    if (!r.ok) { statusEl.textContent = d.error ? d.error.message : "error"; return; }
    if (!first) { first = d; drawChain(d); }
    draw(d);
    document.getElementById("json-link").href = url;
  }

  load(null, null).then(() => {
    el.on("plotly_relayout", ev => {
      if (ev["xaxis.autorange"]) { load(first.start_ns, first.end_ns); return; }
      const a = ev["xaxis.range[0]"], b = ev["xaxis.range[1]"];
      if (a !== undefined && b !== undefined) load(nsOf(a), nsOf(b));
    });
    // brush: box-select a stretch of time and open its flame graph
    document.getElementById("brush").addEventListener("click", () => {
      Plotly.relayout(el, {dragmode: "select", selectdirection: "h"});
      document.getElementById("brush-hint").textContent = "drag across the time you want";
    });
    el.on("plotly_selected", ev => {
      if (!ev || !ev.range || !ev.range.x) return;
      const a = iso(nsOf(ev.range.x[0])), b = iso(nsOf(ev.range.x[1]));
      location.href = `/incidents/${encodeURIComponent(iid)}/flamegraph?start=${encodeURIComponent(a)}&end=${encodeURIComponent(b)}`;
    });
    document.getElementById("share-window").addEventListener("submit", async ev => {
      ev.preventDefault();
      const out = document.getElementById("share-window-out");
      const note = ev.target.querySelector("input[name=note]").value;
      const r = await fetch(`/api/incidents/${encodeURIComponent(iid)}/shares`, {method: "POST",
        headers: {"Content-Type": "application/json"},
        body: JSON.stringify({note: note || null, start: current.start, end: current.end})});
      const d = await r.json();
      out.textContent = "";
      if (!r.ok) { out.textContent = d.error ? d.error.message : "error"; return; }
      const a = document.createElement("a");
      a.href = d.url; a.id = "share-window-url"; a.textContent = location.origin + d.url;
      out.appendChild(a);
    });
    el.on("plotly_click", ev => {
      const p = ev.points[0];
      if (!p || !p.customdata) return;
      const [src, line, text, kind, name] = p.customdata;
      detail.textContent = "";
      const h = document.createElement("div");
      h.textContent = `${p.x} UTC · ${kind ? kind + " · " : ""}${name}` + (src ? ` · ${src}${line ? ":" + line : ""}` : "");
      const pre = document.createElement("pre"); pre.className = "evidence"; pre.textContent = text;
      detail.appendChild(h); detail.appendChild(pre);
    });
  });
})();
