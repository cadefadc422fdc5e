// The aligned timeline's figure: Plotly traces and layout from the timeline JSON
// (/api/incidents/{id}/timeline). Used by the live page (timeline.js, which asks the server for
// each new window) and by the self-contained report file (which draws the window it carries).
// Text from the bundle is escaped before Plotly sees it (hover text is HTML to Plotly).
(function () {
  "use strict";
  const KIND_COLOR = {oom_kill: "#b3261e", signal_kill: "#b3261e", job_failure: "#000", process_exit: "#8a1c14",
    cpu_throttle: "#e07b00", memory_growth: "#7b3fa0", step_slowdown: "#2a5db0", rank_stalled: "#c2185b",
    collective_timeout: "#c2185b", python_exception: "#8a1c14"};

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


  // a lane's label: its id and how its clock was placed ("boot ±82 ms"), as the sources table says
  function clockText(c) {
    if (!c || !c.domain) return "";
    if (!c.placed) return c.domain + ": unplaced";
    const u = c.uncertainty_s;
    if (u === null || u === undefined) return c.domain;
    return c.domain + " ±" + (u === 0 ? "0 ms" : u < 1 ? (u * 1000).toFixed(u < 0.001 ? 3 : 0) + " ms" : u.toFixed(1) + " s");
  }
  function laneName(l) { const c = clockText(l.clock); return esc(l.id + (c ? " · " + c : "")); }

  function figure(d) {
    const lanes = d.lanes.map(laneName);   // lane names are file paths: category labels are HTML too
    const traces = [];
    const spanX = [], spanY = [], ptX = [], ptY = [], ptText = [], ptCustom = [];
    const binX = [], binY = [], binS = [], binText = [];
    for (const l of d.lanes) {
      for (const e of (l.events || [])) {
        if (e.dur && e.dur > 0) { spanX.push(xOf(e.ts), xOf(e.ts + e.dur), null); spanY.push(laneName(l), laneName(l), null); }
        ptX.push(xOf(e.ts)); ptY.push(laneName(l));
        ptText.push(esc((e.kind ? "[" + e.kind + "] " : "") + e.name + (e.line ? " (line " + e.line + ")" : "")));
        ptCustom.push([e.source || l.source, e.line, e.text || "", e.kind || "", e.name]);
      }
      for (const b of (l.bins || [])) {
        binX.push(xOf(b.ts + b.dur / 2)); binY.push(laneName(l)); binS.push(4 + Math.min(14, Math.log2(1 + b.n) * 2));
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
      layout[ax] = {domain: [h * (nM - 1 - i), h * (nM - i) - 0.02], title: {text: esc(name), font: {size: 10}}, tickfont: {size: 9}};
      for (const m of d.metrics.filter(m => family(m) === name)) {
        traces.push({type: "scattergl", mode: "lines", x: m.points.map(p => xOf(p[0])), y: m.points.map(p => p[1]),
          name: esc(m.id), yaxis: "y" + (i + 2), hovertemplate: esc(m.id) + ": %{y}<br>%{x}<extra></extra>"});
      }
    });
    layout.xaxis.range = [xOf(d.start_ns), xOf(d.end_ns)];
    return {traces: traces, layout: layout};
  }

  window.aftertraceTimeline = {figure: figure, esc: esc, iso: iso, xOf: xOf, nsOf: nsOf};
})();
