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
  const T = window.aftertraceTimeline, iso = T.iso, nsOf = T.nsOf;
  let first = null, current = null;

  function draw(d) {
    const fig = T.figure(d);
    Plotly.react(el, fig.traces, fig.layout, {responsive: true, displaylogo: false});
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
