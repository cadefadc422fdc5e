// The timeline page: mounts the trace viewer (trace.js) on the incident's timeline API, keeps the
// view in the URL fragment (a reload or a share link restores it), and wires the chain buttons,
// the flame-graph links, share links and the hand-off to the Perfetto UI. Text from the bundle is
// only ever set with textContent.
(function () {
  "use strict";
  const root = document.getElementById("tv");
  const apiBase = root.dataset.api, iid = root.dataset.incident;
  const statusEl = document.getElementById("status"), flame = document.getElementById("flame");
  const chainBar = document.getElementById("chain"), jsonLink = document.getElementById("json-link");
  const PERFETTO = "https://ui.perfetto.dev";

  function query(params) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") p.set(k, String(v));
    return p.toString();
  }
  async function getJSON(url) {
    const r = await fetch(url);
    const d = await r.json();
    if (!r.ok) throw new Error(d.error ? d.error.message : r.statusText);
    return d;
  }
  const fetchWindow = params => {
    const url = apiBase + "?" + query(params);
    if (!params.catalog) jsonLink.href = url;
    return getJSON(url);
  };
  const fetchDetail = (track, t) => getJSON(apiBase + "/detail?" + query({track: track, t: t}));

  function links(v) {
    flame.textContent = "";
    if (root.dataset.shared) return;          // a share link reaches its report and timeline only
    const [a, b] = v.range() || v.window();
    const fg = `/incidents/${encodeURIComponent(iid)}/flamegraph?start=${v.epochStr(a)}&end=${v.epochStr(b)}`;
    const link = document.createElement("a");
    link.href = fg; link.id = "flame-link";
    link.textContent = v.range() ? "Flame graph of the selection" : "Flame graph of this window";
    flame.appendChild(link);
  }

  let viewer = null;
  const initial = location.hash.length > 1 ? location.hash.slice(1) : (root.dataset.view || "");
  window.aftertraceViewer.mount(root, {
    fetchWindow: fetchWindow, fetchDetail: fetchDetail, view: initial, detailEl: document.getElementById("detail"),
    status: t => { statusEl.textContent = t; },
    onCounter: counterChart,
    onView: (frag, v) => { history.replaceState(null, "", "#" + frag); links(v); },
  }).then(v => {
    viewer = v;
    window.aftertraceView = v;          // (for tests and the console)
    links(v);
    drawChain(v);
    document.getElementById("zoom-in").addEventListener("click", () => v.zoom(0.5));
    document.getElementById("zoom-out").addEventListener("click", () => v.zoom(2));
    document.getElementById("show-all").addEventListener("click", () => v.setWindow(...wholeIncident(v)));
    document.getElementById("show-chain").addEventListener("click", () => v.reset());
    root.focus({preventScroll: true});
    // a fragment typed or pasted into the address bar (the viewer's own updates replace it silently)
    window.addEventListener("hashchange", () => v.applyView(location.hash.slice(1)));
  }).catch(e => { statusEl.textContent = String(e.message || e); });

  // a counter track, clicked: its series in the window as a Plotly chart with axes in its unit
  function counterChart(m, win, v) {
    const detail = document.getElementById("detail");
    detail.textContent = ""; detail.className = "";
    const h = document.createElement("h3"); h.textContent = `${m.metric}${m.entity ? " · " + m.entity : ""}${m.host ? " · " + m.host : ""}`;
    const div = document.createElement("div"); div.id = "counter-chart"; div.style.height = "260px";
    detail.appendChild(h); detail.appendChild(div);
    const pts = m.points.filter(p => p[0] >= win[0] && p[0] <= win[1]);
    const x = pts.map(p => new Date(Number(v.absNs(p[0]) / 1000000n)).toISOString());
    const bytes = m.unit === "bytes";
    const y = pts.map(p => bytes ? p[1] / 1073741824 : p[1]);
    const unit = bytes ? "GiB" : (m.unit && m.unit !== "-" ? m.unit : "");
    // (Plotly reads titles and hover templates as HTML: the unit goes in escaped)
    const esc = t => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/%/g, "%%");
    Plotly.newPlot(div, [{type: "scatter", mode: "lines", x: x, y: y, line: {shape: "hv"},
      hovertemplate: "%{x|%H:%M:%S.%L} UTC<br>%{y:.4~f} " + esc(unit) + "<extra></extra>"}],
      {margin: {l: 60, r: 10, t: 10, b: 40}, xaxis: {type: "date", title: "UTC"},
       yaxis: {title: {text: esc(unit).replace(/%%/g, "%")}, rangemode: "tozero"}}, {displaylogo: false, responsive: true});
  }

  function wholeIncident(v) { const s = v.state(); return [s.bounds ? s.bounds[0] : 0, s.bounds ? s.bounds[1] : 1]; }

  function drawChain(v) {
    chainBar.textContent = "";
    const c = v.chain();
    if (!c.length) return;
    const lbl = document.createElement("span"); lbl.textContent = "Chain: "; chainBar.appendChild(lbl);
    for (const f of c) {
      const b = document.createElement("button");
      b.type = "button"; b.className = "chainlink"; b.dataset.chain = String(f.chain);
      const rel = v.relText(f.t);
      b.textContent = `${f.chain}. ${f.kind} · ${v.utc(f.t)} · ${rel === "T" ? "the failure" : rel}`;
      b.title = f.summary;
      b.addEventListener("click", () => v.focusFinding(f));
      chainBar.appendChild(b);
    }
  }

  const form = document.getElementById("share-window");
  if (form) form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const out = document.getElementById("share-window-out");
    const note = form.querySelector("input[name=note]").value;
    const [a, b] = viewer.window();
    const r = await fetch(`/api/incidents/${encodeURIComponent(iid)}/shares`, {method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({note: note || null, start: viewer.epochStr(a), end: viewer.epochStr(b), view: viewer.fragment()})});
    const d = await r.json();
    out.textContent = "";
    if (!r.ok) { out.textContent = d.error ? d.error.message : "error"; return; }
    const link = document.createElement("a");
    link.href = d.url + "/timeline"; link.id = "share-window-url"; link.textContent = location.origin + d.url + "/timeline";
    out.appendChild(link);
  });

  // Perfetto UI's documented hand-off: open it, PING until it answers PONG, then post the trace.
  const pf = document.getElementById("open-perfetto");
  if (pf) pf.addEventListener("click", async () => {
    const out = document.getElementById("share-window-out");
    const win = window.open(PERFETTO + "/#!/");
    if (!win) { out.textContent = "the browser blocked the new tab"; return; }
    out.textContent = "preparing the trace…";
    let buf;
    try {
      const r = await fetch(document.getElementById("perfetto-download").href);
      if (!r.ok) throw new Error((await r.json()).error.message);
      buf = await r.arrayBuffer();
    } catch (e) { out.textContent = String(e.message || e); return; }
    let tries = 0;
    const ping = setInterval(() => {
      if (++tries > 300) { clearInterval(ping); out.textContent = "the Perfetto UI did not answer (offline?): use the download"; return; }
      win.postMessage("PING", PERFETTO);
    }, 100);
    window.addEventListener("message", function onMsg(ev) {
      if (ev.source !== win || ev.data !== "PONG") return;
      clearInterval(ping);
      window.removeEventListener("message", onMsg);
      win.postMessage({perfetto: {buffer: buf, title: `aftertrace incident ${iid}`, fileName: `${iid}.pftrace`,
        url: location.href}}, PERFETTO);
      out.textContent = "sent to the Perfetto UI";
    });
  });
})();
