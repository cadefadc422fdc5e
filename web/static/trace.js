// The trace viewer: an incident's tracks (host -> rank -> thread or log) drawn on canvas from the
// timeline JSON (/api/incidents/{id}/timeline, see analysis/timeline.py), with the findings as
// flags across the tracks they involve and the chain as arrows between them.
//
// Times inside are doubles of ns relative to the incident's origin (exact for days); absolute
// times are BigInt epoch ns made from the origin's decimal string. Text from the bundle is drawn
// on canvas or set with textContent: nothing from it is ever parsed as HTML.
//
// mount(root, opts): opts.fetchWindow(params) -> Promise<timeline JSON> (params: start, end as
// epoch seconds strings, tracks, px, catalog), opts.fetchDetail(track, t) -> Promise<{events}>
// or null, opts.view (the initial state, a URL fragment), opts.onView(fragment, viewer) and
// opts.onCounter(series, [t0, t1], viewer) for a click on a counter track.
(function () {
  "use strict";
  const LABEL_W = 240, ROW = 16, GROUP_H = 20, COUNTER_H = 44, AXIS_H = 40, OVERVIEW_H = 46;
  const KIND_COLOR = {oom_kill: "#b3261e", signal_kill: "#b3261e", job_failure: "#111", process_exit: "#8a1c14",
    cpu_throttle: "#d9480f", memory_growth: "#7b3fa0", step_slowdown: "#2a5db0", rank_stalled: "#c2185b",
    collective_timeout: "#c2185b", python_exception: "#8a1c14", nccl_error: "#c2185b"};
  const SEV_COLOR = {emerg: "#b3261e", alert: "#b3261e", crit: "#b3261e", error: "#c92a2a", warning: "#d9822b"};

  // -- time ---------------------------------------------------------------------------------
  function fmtDur(ns) {
    if (ns == null) return "instant";
    const a = Math.abs(ns);
    if (a >= 60e9) return (ns / 60e9).toFixed(a >= 600e9 ? 0 : 1) + " min";
    if (a >= 1e9) return (ns / 1e9).toFixed(a >= 10e9 ? 1 : 3).replace(/\.?0+$/, "") + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(a >= 10e6 ? 1 : 3).replace(/\.?0+$/, "") + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(a >= 10e3 ? 1 : 3).replace(/\.?0+$/, "") + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtValue(v, unit) {
    if (v == null) return "";
    if (unit === "bytes") {
      const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0, x = Math.abs(v);
      while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
      return (v < 0 ? "-" : "") + (x >= 100 ? x.toFixed(0) : x.toFixed(x >= 10 ? 1 : 2)) + " " + u[i];
    }
    if (unit === "percent") return v.toFixed(v >= 10 ? 0 : 1) + " %";
    if (unit === "fraction") return (v * 100).toFixed(0) + " %";
    if (unit === "s" || unit === "s/s") return v.toFixed(v >= 10 ? 1 : 3) + " " + unit;
    const a = Math.abs(v);
    const s = a >= 1e9 ? (v / 1e9).toFixed(1) + " G" : a >= 1e6 ? (v / 1e6).toFixed(1) + " M" :
      a >= 1e4 ? (v / 1e3).toFixed(1) + " k" : (Number.isInteger(v) ? String(v) : v.toFixed(3));
    return s + (unit && unit !== "-" && unit !== "count" ? " " + unit : "");
  }
  function hash(s) { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
  function spanColor(name) { const h = hash(name || ""); return `hsl(${h % 360},${45 + (h >> 9) % 25}%,${62 + (h >> 17) % 14}%)`; }

  function mount(root, opts) {
    const ov = root.querySelector(".tv-overview"), axis = root.querySelector(".tv-axis"),
      main = root.querySelector(".tv-main"), scroll = root.querySelector(".tv-scroll"),
      tip = root.querySelector(".tv-tip");
    const S = {cat: null, origin: null, t0: 0, t1: 1, data: null, loaded: null, depth: new Map(), toggled: new Set(),
      sel: null, range: null, finding: null, rows: [], seq: 0, findings: [], metrics: [], failure: null,
      overview: [], bounds: [0, 1], defaultWindow: [0, 1], busy: false, emitted: ""};
    const dpr = window.devicePixelRatio || 1;

    const absNs = rel => S.origin + BigInt(Math.round(rel));
    function epochStr(rel) {
      const a = absNs(rel), neg = a < 0n, b = neg ? -a : a;
      return (neg ? "-" : "") + (b / 1000000000n) + "." + (b % 1000000000n).toString().padStart(9, "0");
    }
    function relOf(epoch) {   // "s.nnnnnnnnn" -> rel ns
      const m = /^(-?)(\d+)(?:\.(\d{1,9}))?$/.exec(epoch || "");
      if (!m) return null;
      const a = BigInt(m[2]) * 1000000000n + BigInt((m[3] || "").padEnd(9, "0"));
      return Number((m[1] ? -a : a) - S.origin);
    }
    function utc(rel, digits) {
      const ns = absNs(rel), ms = Number(ns / 1000000n);
      const s = new Date(ms).toISOString().slice(11, 23);
      if (digits === 0) return s.slice(0, 8);
      if (digits === 6) return s + ((ns % 1000000n + 1000000n) % 1000000n).toString().padStart(6, "0").slice(0, 3);
      return s;
    }
    function relText(rel) {
      if (S.failure == null) return "";
      const d = (rel - S.failure) / 1e9, a = Math.abs(d);
      const v = a >= 100 ? a.toFixed(0) : a >= 1 ? a.toFixed(1) : a >= 0.001 ? a.toFixed(3) : a.toFixed(6);
      return a < 5e-10 ? "T" : (d < 0 ? "T−" : "T+") + v + " s";
    }

    // -- rows: host -> rank -> tracks, the host's perf threads and counters in groups ----------
    const groupOpenByDefault = new Map();
    function isOpen(key) { const d = groupOpenByDefault.has(key) ? groupOpenByDefault.get(key) : true; return S.toggled.has(key) ? !d : d; }
    function buildGroups() {
      const hosts = new Map();
      const typedRank = new Set(S.findings.map(f => `${f.host || ""}|${f.rank}`));
      for (const t of S.cat) {
        const h = t.host || "";
        if (!hosts.has(h)) hosts.set(h, {ranks: new Map(), own: [], perf: [], counters: []});
        const H = hosts.get(h);
        if (t.rank != null) {
          if (!H.ranks.has(t.rank)) H.ranks.set(t.rank, []);
          H.ranks.get(t.rank).push(t);
        } else if (t.kind === "perf_script") H.perf.push(t); else H.own.push(t);
      }
      for (const [h, H] of hosts) {
        groupOpenByDefault.set("p:" + h, H.perf.length <= 6);
        const many = H.ranks.size > 8;
        for (const r of H.ranks.keys()) groupOpenByDefault.set(`r:${h}:${r}`, !many || typedRank.has(`${h}|${r}`));
      }
      return hosts;
    }
    function layout() {
      const hosts = S.hosts, rows = [];
      let y = 0;
      const add = (row, h) => { row.y = y; row.h = h; rows.push(row); y += h; return row; };
      const trackH = t => {
        const d = S.depth.get(t.id) || 0;
        return t.spans ? Math.min(12, d + 1) * ROW + 4 : ROW + 4;
      };
      const counters = new Map();
      for (const m of S.metrics) { const h = m.host || ""; if (!counters.has(h)) counters.set(h, []); counters.get(h).push(m); }
      const hostKeys = [...new Set([...hosts.keys(), ...counters.keys()])];
      for (const h of hostKeys) {
        const H = hosts.get(h) || {ranks: new Map(), own: [], perf: []};
        const hk = "h:" + h;
        const n = [...H.ranks.values()].reduce((a, l) => a + l.length, 0) + H.own.length + H.perf.length;
        const g = add({type: "group", key: hk, level: 0, label: (h || "unknown host"), sub: `${H.ranks.size} ranks · ${n} tracks`,
          host: h, rank: null}, GROUP_H);
        if (!isOpen(hk)) { g.end = y; continue; }
        for (const [r, list] of [...H.ranks.entries()].sort((a, b) => a[0] - b[0])) {
          const rk = `r:${h}:${r}`;
          const rg = add({type: "group", key: rk, level: 1, label: `rank ${r}`, sub: `${list.length} tracks`, host: h, rank: r}, GROUP_H);
          if (isOpen(rk)) for (const t of list) add({type: "track", track: t, level: 2, host: h, rank: r}, trackH(t));
          rg.end = y;
        }
        for (const t of H.own) add({type: "track", track: t, level: 1, host: h, rank: null}, trackH(t));
        if (H.perf.length) {
          const pk = "p:" + h;
          const pg = add({type: "group", key: pk, level: 1, label: "perf threads", sub: `${H.perf.length} threads`, host: h, rank: null}, GROUP_H);
          if (isOpen(pk)) for (const t of H.perf) add({type: "track", track: t, level: 2, host: h, rank: null}, trackH(t));
          pg.end = y;
        }
        const cs = counters.get(h) || [];
        if (cs.length) {
          const ck = "c:" + h;
          const cg = add({type: "group", key: ck, level: 1, label: "counters", sub: `${cs.length} series`, host: h, rank: null}, GROUP_H);
          if (isOpen(ck)) for (const m of cs) add({type: "counter", series: m, level: 2, host: h, rank: null}, COUNTER_H);
          cg.end = y;
        }
        g.end = y;
      }
      S.rows = rows;
      S.height = Math.max(y, 60);
    }
    function visibleTracks() { return S.rows.filter(r => r.type === "track").map(r => r.track.id).slice(0, 400); }

    // -- canvas ------------------------------------------------------------------------------
    function size(c, w, h) {
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
        c.style.width = w + "px"; c.style.height = h + "px";
      }
      const g = c.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0); return g;
    }
    const width = () => Math.max(400, scroll.clientWidth);
    const xOf = t => LABEL_W + (t - S.t0) / (S.t1 - S.t0) * (width() - LABEL_W);
    const tOf = x => S.t0 + (x - LABEL_W) / (width() - LABEL_W) * (S.t1 - S.t0);

    function niceStep(span, px) {
      const target = span / Math.max(1, px / 110);
      const p = Math.pow(10, Math.floor(Math.log10(target)));
      for (const m of [1, 2, 5, 10]) if (m * p >= target) return m * p;
      return 10 * p;
    }
    function findingRows(f) {
      const host = f.host || "";
      const match = S.rows.filter(r => r.type === "group" && r.host === host &&
        (f.rank != null ? r.rank === f.rank && r.level === 1 : r.level === 0));
      const g = match[0] || S.rows.find(r => r.type === "group" && r.level === 0 && r.host === host);
      return g ? [g.y, g.end || g.y + g.h] : [0, S.height];
    }
    function chain() { return S.findings.filter(f => f.chain).sort((a, b) => a.chain - b.chain); }

    function drawAxis() {
      const W = width(), g = size(axis, W, AXIS_H);
      g.clearRect(0, 0, W, AXIS_H); g.fillStyle = "#fafbfc"; g.fillRect(0, 0, W, AXIS_H);
      const span = S.t1 - S.t0, step = niceStep(span, W - LABEL_W);
      g.font = "11px system-ui, sans-serif"; g.fillStyle = "#4a525c"; g.strokeStyle = "#c9ced6";
      const digits = step >= 1e9 ? 0 : step >= 1e6 ? 3 : 6;
      for (let t = Math.ceil(S.t0 / step) * step; t <= S.t1; t += step) {
        const x = xOf(t);
        g.beginPath(); g.moveTo(x, AXIS_H - 8); g.lineTo(x, AXIS_H); g.stroke();
        g.fillText(utc(t, digits), x + 2, 12);
        const r = relText(t); if (r) { g.fillStyle = "#8a929b"; g.fillText(r, x + 2, 25); g.fillStyle = "#4a525c"; }
      }
      g.fillStyle = "#1d232b"; g.font = "600 11px system-ui, sans-serif";
      g.fillText("UTC", 6, 12); if (S.failure != null) g.fillText("to the failure", 6, 25);
      g.font = "11px system-ui, sans-serif"; g.fillStyle = "#6b7480";
      g.fillText(fmtDur(span) + " shown", 110, 12);
      // flags: findings (numbered when on the chain)
      for (const f of S.findings) {
        const x = xOf(f.t); if (x < LABEL_W || x > W) continue;
        g.fillStyle = KIND_COLOR[f.kind] || "#555";
        g.fillRect(x, AXIS_H - 12, 1.5, 12);
        g.beginPath(); g.moveTo(x, AXIS_H - 12); g.lineTo(x + (f.chain ? 14 : 7), AXIS_H - 9); g.lineTo(x, AXIS_H - 6); g.fill();
        if (f.chain) { g.fillStyle = "#fff"; g.font = "600 9px system-ui"; g.fillText(String(f.chain), x + 2, AXIS_H - 6.5); g.font = "11px system-ui, sans-serif"; }
      }
    }

    function drawOverview() {
      const W = width(), g = size(ov, W, OVERVIEW_H), [b0, b1] = S.bounds;
      g.clearRect(0, 0, W, OVERVIEW_H); g.fillStyle = "#f4f5f7"; g.fillRect(LABEL_W, 0, W - LABEL_W, OVERVIEW_H);
      const X = t => LABEL_W + (t - b0) / Math.max(1, b1 - b0) * (W - LABEL_W);
      let max = 1; for (const o of S.overview) max = Math.max(max, o[1]);
      const bw = S.overview.length > 1 ? Math.max(1, X(S.overview[1][0]) - X(S.overview[0][0])) : 2;
      for (const [t, n, typed] of S.overview) {
        const h = Math.max(1, Math.log1p(n) / Math.log1p(max) * (OVERVIEW_H - 14));
        g.fillStyle = typed ? "#c97c7c" : "#9aa7b6"; g.fillRect(X(t), OVERVIEW_H - h, bw, h);
      }
      for (const f of chain()) {
        const x = X(f.t); g.fillStyle = KIND_COLOR[f.kind] || "#555"; g.fillRect(x - 1, 0, 2, OVERVIEW_H);
        g.font = "600 10px system-ui"; g.fillText(String(f.chain), x + 3, 10);
      }
      const a = X(S.t0), b = X(S.t1);
      g.fillStyle = "rgba(42,93,176,0.18)"; g.fillRect(a, 0, Math.max(2, b - a), OVERVIEW_H);
      g.strokeStyle = "#2a5db0"; g.lineWidth = 1.5; g.strokeRect(a, 0.75, Math.max(2, b - a), OVERVIEW_H - 1.5); g.lineWidth = 1;
      g.fillStyle = "#1d232b"; g.font = "600 11px system-ui, sans-serif"; g.fillText("whole incident", 6, 14);
      g.font = "11px system-ui, sans-serif"; g.fillStyle = "#6b7480";
      g.fillText(`${utc(b0, 0)} – ${utc(b1, 0)}`, 6, 28); g.fillText(fmtDur(b1 - b0), 6, 41);
    }

    function drawMain() {
      const W = width(), H = S.height, g = size(main, W, H);
      g.clearRect(0, 0, W, H);
      g.font = "11px system-ui, sans-serif"; g.textBaseline = "middle";
      const data = (S.data && S.data.data) || {};
      for (const r of S.rows) {
        g.fillStyle = r.type === "group" ? (r.level === 0 ? "#e6e9ee" : "#eef0f3") : (r.y / ROW) % 2 < 1 ? "#fff" : "#fbfbfc";
        g.fillRect(0, r.y, W, r.h);
        g.strokeStyle = "#eceef1"; g.beginPath(); g.moveTo(0, r.y + r.h - 0.5); g.lineTo(W, r.y + r.h - 0.5); g.stroke();
        const ind = 8 + r.level * 12;
        g.save(); g.beginPath(); g.rect(0, r.y, LABEL_W - 4, r.h); g.clip();
        if (r.type === "group") {
          g.fillStyle = "#1d232b"; g.font = "600 12px system-ui, sans-serif";
          const open = isOpen(r.key), head = (open ? "▾ " : "▸ ") + r.label, hw = g.measureText(head).width;
          g.fillText(head, ind, r.y + r.h / 2);
          g.font = "11px system-ui, sans-serif"; g.fillStyle = "#6b7480";
          g.fillText(r.sub, ind + 8 + hw, r.y + r.h / 2);
        } else if (r.type === "track") {
          g.fillStyle = "#2b323b"; g.fillText(r.track.label, ind, r.y + 9);
          g.fillStyle = "#8a929b";
          const c = r.track.clock;
          const sub = r.track.kind + (c && c.domain ? " · " + c.domain + (c.placed ? (c.uncertainty_s != null ? " ±" + fmtDur(c.uncertainty_s * 1e9) : "") : " unplaced") : "");
          if (r.h > 24) g.fillText(sub, ind, r.y + 23);
        } else {
          const m = r.series;
          g.fillStyle = "#2b323b"; g.fillText(m.metric + (m.entity ? " · " + m.entity : ""), ind, r.y + 9);
          let max = -Infinity; for (const p of m.points) if (p[1] > max) max = p[1];
          g.fillStyle = "#8a929b"; g.fillText("max " + fmtValue(max, m.unit), ind, r.y + 23);
        }
        g.restore();
        g.save(); g.beginPath(); g.rect(LABEL_W, r.y, W - LABEL_W, r.h); g.clip();
        if (r.type === "track") drawTrack(g, r, data[r.track.id]);
        else if (r.type === "counter") drawCounter(g, r);
        g.restore();
      }
      g.strokeStyle = "#c9ced6"; g.beginPath(); g.moveTo(LABEL_W - 0.5, 0); g.lineTo(LABEL_W - 0.5, H); g.stroke();
      g.save(); g.beginPath(); g.rect(LABEL_W, 0, W - LABEL_W, H); g.clip();
      drawFindings(g);
      if (S.range) {
        const a = xOf(S.range[0]), b = xOf(S.range[1]);
        g.fillStyle = "rgba(42,93,176,0.12)"; g.fillRect(a, 0, b - a, H);
        g.strokeStyle = "#2a5db0"; g.strokeRect(a + 0.5, 0.5, b - a - 1, H - 1);
      }
      g.restore();
      tip.hidden = true;
    }

    function drawTrack(g, r, d) {
      if (!d) return;
      const W = width();
      let deepest = S.depth.get(r.track.id) || 0;
      for (const b of d.bins) {
        const x = xOf(b[0]), w = Math.max(1, xOf(b[0] + b[1]) - x);
        if (x + w < LABEL_W || x > W) continue;
        const a = Math.min(0.85, 0.2 + Math.log1p(b[2]) / 12);
        g.fillStyle = b[3] ? `rgba(179,38,30,${a})` : `rgba(90,110,135,${a})`;
        g.fillRect(x, r.y + r.h - 9, w - 0.5, 6);
      }
      for (const s of d.spans) {
        const t = s[0], dur = s[1], depth = s[2];
        if (depth > deepest) deepest = depth;
        if (depth >= 12) continue;
        const x = xOf(t), y = r.y + 2 + depth * ROW;
        const sel = S.sel && S.sel.track === r.track.id && S.sel.t === t;
        if (dur) {
          const x2 = xOf(t + dur);
          if (x2 < LABEL_W || x > W) continue;
          const w = Math.max(1, x2 - x);
          g.fillStyle = s[4] ? (KIND_COLOR[s[4]] || "#b3261e") : spanColor(s[3]);
          g.fillRect(x, y, w, ROW - 2);
          if (sel) { g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(x, y, w, ROW - 2); g.lineWidth = 1; }
          if (w > 28) {
            const left = Math.max(x, LABEL_W) + 3, room = Math.min(x2, W) - left - 3;
            if (room > 12) {
              let txt = s[3] || "";
              const fit = Math.floor(room / 6.2);
              if (txt.length > fit) txt = txt.slice(0, Math.max(1, fit - 1)) + "…";
              g.fillStyle = s[4] ? "#fff" : "#1d232b"; g.fillText(txt, left, y + (ROW - 2) / 2);
            }
          }
        } else {
          if (x < LABEL_W - 5 || x > W + 5) continue;
          const typed = !!s[4];
          g.fillStyle = typed ? (KIND_COLOR[s[4]] || "#b3261e") : (SEV_COLOR[s[5]] || "#5b6b7b");
          const k = typed ? 5.5 : 3.5, cy = y + (ROW - 2) / 2;
          g.beginPath(); g.moveTo(x, cy - k); g.lineTo(x + k, cy); g.lineTo(x, cy + k); g.lineTo(x - k, cy); g.closePath(); g.fill();
          if (sel) { g.strokeStyle = "#000"; g.lineWidth = 2; g.stroke(); g.lineWidth = 1; }
        }
      }
      if (deepest !== (S.depth.get(r.track.id) || 0) && deepest > (S.depth.get(r.track.id) || 0)) {
        S.depth.set(r.track.id, deepest); S.relayout = true;
      }
    }

    function drawCounter(g, r) {
      const m = r.series, pts = m.points;
      if (!pts.length) return;
      let max = 0; for (const p of pts) if (p[1] > max) max = p[1];
      const Y = v => r.y + r.h - 4 - (max > 0 ? v / max : 0) * (r.h - 10);
      g.beginPath(); g.moveTo(xOf(pts[0][0]), r.y + r.h - 4);
      for (const p of pts) g.lineTo(xOf(p[0]), Y(p[1]));
      g.lineTo(xOf(pts[pts.length - 1][0]), r.y + r.h - 4); g.closePath();
      g.fillStyle = "rgba(42,93,176,0.18)"; g.fill();
      g.beginPath(); pts.forEach((p, i) => i ? g.lineTo(xOf(p[0]), Y(p[1])) : g.moveTo(xOf(p[0]), Y(p[1])));
      g.strokeStyle = "#2a5db0"; g.stroke();
      g.fillStyle = "#4a525c"; g.fillText(fmtValue(max, m.unit), LABEL_W + 4, r.y + 8);
    }

    function drawFindings(g) {
      for (const f of S.findings) {
        const x = xOf(f.t); const [a, b] = findingRows(f);
        g.strokeStyle = KIND_COLOR[f.kind] || "#555"; g.lineWidth = f === S.finding ? 3 : f.chain ? 2 : 1;
        g.setLineDash(f.chain ? [] : [3, 3]);
        g.beginPath(); g.moveTo(x, a); g.lineTo(x, b); g.stroke();
      }
      g.setLineDash([]); g.lineWidth = 1;
      const c = chain();
      for (let i = 0; i + 1 < c.length; i++) {   // the chain: an arrow from each link to the next
        const f = c[i], n = c[i + 1];
        const [a0] = findingRows(f), [b0] = findingRows(n);
        const x1 = xOf(f.t), y1 = a0 + GROUP_H / 2, x2 = xOf(n.t), y2 = b0 + GROUP_H / 2;
        // bow into the tracks (downwards), never out of the canvas
        const bend = Math.max(14, Math.min(50, Math.abs(x2 - x1) / 3));
        const c1x = x1 + bend, c1y = y1 + bend, c2x = x2 - bend, c2y = y2 + bend;
        g.strokeStyle = "rgba(29,35,43,0.8)"; g.lineWidth = 1.6;
        g.beginPath(); g.moveTo(x1, y1); g.bezierCurveTo(c1x, c1y, c2x, c2y, x2, y2); g.stroke();
        const ang = Math.atan2(y2 - c2y, x2 - c2x), hx = x2 - 8 * Math.cos(ang), hy = y2 - 8 * Math.sin(ang);
        g.fillStyle = "rgba(29,35,43,0.9)"; g.beginPath(); g.moveTo(x2, y2);
        g.lineTo(hx + 3.5 * Math.sin(ang), hy - 3.5 * Math.cos(ang)); g.lineTo(hx - 3.5 * Math.sin(ang), hy + 3.5 * Math.cos(ang)); g.fill();
        g.lineWidth = 1;
      }
      for (const f of c) {
        const x = xOf(f.t), [a] = findingRows(f);
        g.fillStyle = KIND_COLOR[f.kind] || "#555"; g.beginPath(); g.arc(x, a + GROUP_H / 2, 8, 0, 7); g.fill();
        g.fillStyle = "#fff"; g.font = "600 10px system-ui"; g.textAlign = "center"; g.fillText(String(f.chain), x, a + GROUP_H / 2 + 0.5);
        g.textAlign = "left"; g.font = "11px system-ui, sans-serif";
      }
    }

    function redraw() {
      if (!S.cat) return;
      layout(); drawOverview(); drawAxis(); drawMain();
      if (S.relayout) { S.relayout = false; layout(); drawMain(); }
      emit();
    }

    // -- state in the URL --------------------------------------------------------------------
    function fragment() {
      const p = new URLSearchParams();
      p.set("start", epochStr(S.t0)); p.set("end", epochStr(S.t1));
      if (S.sel) p.set("sel", S.sel.track + "@" + epochStr(S.sel.t));
      if (S.range) p.set("range", epochStr(S.range[0]) + "," + epochStr(S.range[1]));
      if (S.toggled.size) p.set("fold", [...S.toggled].join(";"));
      return p.toString();
    }
    function restore(frag) {
      const p = new URLSearchParams(frag || "");
      const a = relOf(p.get("start")), b = relOf(p.get("end"));
      if (a != null && b != null && b > a) { S.t0 = a; S.t1 = b; }
      const sel = /^(\d+)@(.+)$/.exec(p.get("sel") || "");
      if (sel) { const t = relOf(sel[2]); if (t != null) S.sel = {track: +sel[1], t: t}; }
      const rg = (p.get("range") || "").split(",");
      if (rg.length === 2) { const x = relOf(rg[0]), y = relOf(rg[1]); if (x != null && y != null && y > x) S.range = [x, y]; }
      if (p.get("fold")) for (const k of p.get("fold").split(";")) if (k) S.toggled.add(k);
    }
    function emit() {
      const f = fragment();
      if (f === S.emitted) return;
      S.emitted = f;
      if (opts.onView) opts.onView(f, api);
    }

    // -- data --------------------------------------------------------------------------------
    let timer = null;
    function schedule() {
      clearTimeout(timer);
      timer = setTimeout(load, 90);
    }
    async function load() {
      const want = visibleTracks().join(","), span = S.t1 - S.t0;
      const L = S.loaded;
      // the data loaded covers a margin around the window: panning within it, or zooming out by
      // less than the margin at the same detail, needs no request
      if (L && L.tracks === want && S.t0 >= L.a && S.t1 <= L.b && span <= L.span * 1.05 && span >= L.span / 1.6) return;
      const a = S.t0 - span * 0.5, b = S.t1 + span * 0.5;
      const seq = ++S.seq;
      S.busy = true; status("loading…");
      let d;
      try {
        d = await opts.fetchWindow({start: epochStr(a), end: epochStr(b), tracks: want,
          px: Math.round((width() - LABEL_W) * 2), catalog: false});
      } catch (e) { status(String(e.message || e)); S.busy = false; return; }
      if (seq !== S.seq) return;
      S.busy = false;
      S.data = d; S.metrics = d.metrics; S.loaded = {a: a, b: b, span: span, tracks: want};
      status(`${S.rows.filter(r => r.type === "track").length} of ${S.cat.length} tracks open · ` +
        `${d.metrics.length} counters · ${d.unplaced_events} events could not be placed in time`);
      redraw();
    }
    function status(text) { if (opts.status) opts.status(text); }

    // -- view changes --------------------------------------------------------------------------
    function setWindow(a, b) {
      const span = Math.max(1000, b - a), [b0, b1] = S.bounds, pad = (b1 - b0) * 0.1 + 1e9;
      a = Math.max(b0 - pad, a); b = Math.max(a + 1000, Math.min(b1 + pad, a + span));
      S.t0 = a; S.t1 = b; redraw(); schedule();
    }
    function zoom(factor, at) {
      const x = at == null ? (S.t0 + S.t1) / 2 : at;
      setWindow(x - (x - S.t0) * factor, x + (S.t1 - x) * factor);
    }
    function pan(frac) { const d = (S.t1 - S.t0) * frac; setWindow(S.t0 + d, S.t1 + d); }
    function reset() { S.range = null; setWindow(S.defaultWindow[0], S.defaultWindow[1]); }
    function focusFinding(f) {
      S.finding = f;
      setWindow(f.t - 5e9, f.t + 5e9);
      showFinding(f);
    }

    function hit(x, y) {
      const r = S.rows.find(r => y >= r.y && y < r.y + r.h);
      if (!r) return null;
      if (x < LABEL_W) return {row: r};
      if (r.type === "group") {
        for (const f of chain()) if (Math.abs(xOf(f.t) - x) <= 9 && Math.abs(r.y + GROUP_H / 2 - y) <= 9) return {row: r, finding: f};
        return {row: r};
      }
      if (r.type !== "track") return {row: r};
      const d = S.data && S.data.data[r.track.id];
      if (!d) return {row: r};
      const depth = Math.floor((y - r.y - 2) / ROW);
      let best = null, bestDx = 7;
      for (const s of d.spans) {
        if (s[1]) {
          if (s[2] === depth && x >= xOf(s[0]) - 1 && x <= xOf(s[0] + s[1]) + 1) best = s;   // the innermost at that depth
        } else if (s[2] === depth || depth < 0) {
          const dx = Math.abs(xOf(s[0]) - x);
          if (dx < bestDx) { bestDx = dx; best = s; }
        }
      }
      if (best) return {row: r, span: best};
      for (const b of d.bins) if (x >= xOf(b[0]) && x <= xOf(b[0] + b[1]) && y >= r.y + r.h - 11) return {row: r, bin: b};
      for (const f of S.findings) if (Math.abs(xOf(f.t) - x) <= 3) return {row: r, finding: f};
      return {row: r};
    }

    // -- the details panel -------------------------------------------------------------------
    const detail = opts.detailEl;
    function el(tag, text, cls) { const e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; }
    function trackName(t) {
      return [t.host || "unknown host", t.rank != null ? "rank " + t.rank : null, t.label].filter(Boolean).join(" / ");
    }
    function showFinding(f) {
      if (!detail) return;
      detail.textContent = ""; detail.className = "";
      detail.appendChild(el("h3", (f.chain ? `Chain link ${f.chain}: ` : "Finding: ") + f.kind));
      const dl = el("dl", null, "kv");
      const row = (k, v) => { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); };
      row("time", `${utc(f.t, 6)} UTC · ${relText(f.t)}`);
      row("where", [f.host, f.rank != null ? "rank " + f.rank : null, f.pid != null ? "pid " + f.pid : null].filter(Boolean).join(" · ") || "—");
      if (f.lead_s != null) row("lead", `${f.lead_s.toFixed(1)} s before the failure`);
      detail.appendChild(dl);
      detail.appendChild(el("p", f.summary, "summary"));
    }
    async function showSpan(track, s) {
      if (!detail) return;
      detail.textContent = ""; detail.className = "";
      detail.appendChild(el("h3", s[3] || "(no name)"));
      const dl = el("dl", null, "kv");
      const row = (k, v) => { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); };
      row("track", trackName(track));
      row("start", `${utc(s[0], 6)} UTC · ${relText(s[0])}`);
      row("duration", fmtDur(s[1]));
      if (s[1]) row("end", `${utc(s[0] + s[1], 6)} UTC`);
      if (s[4]) row("finding", s[4]);
      if (s[5]) row("severity", s[5]);
      detail.appendChild(dl);
      if (!opts.fetchDetail) return;
      let d;
      try { d = await opts.fetchDetail(track.id, Math.round(s[0])); } catch (e) { detail.appendChild(el("p", String(e.message || e), "error")); return; }
      if (!S.sel || S.sel.t !== s[0]) return;
      for (const e of d.events.slice(0, 5)) {
        const src = el("p", `${e.source}${e.line ? ":" + e.line : ""}` + (e.category ? ` · ${e.category}` : "") +
          (e.pid != null ? ` · pid ${e.pid}` : "") + (e.tid != null ? ` tid ${e.tid}` : ""), "muted");
        detail.appendChild(src);
        if (e.attrs && typeof e.attrs === "object") {
          const t = el("table", null, "grid args");
          for (const [k, v] of Object.entries(e.attrs).slice(0, 40)) {
            const tr = el("tr"); tr.appendChild(el("th", k));
            tr.appendChild(el("td", typeof v === "string" ? v : JSON.stringify(v))); t.appendChild(tr);
          }
          detail.appendChild(t);
        }
        if (e.text) detail.appendChild(el("pre", e.text, "evidence wrap"));
      }
    }

    // -- input ---------------------------------------------------------------------------------
    let drag = null;
    main.addEventListener("mousedown", ev => {
      const rect = main.getBoundingClientRect();
      drag = {x: ev.clientX, t0: S.t0, t1: S.t1, shift: ev.shiftKey, moved: false, at: tOf(ev.clientX - rect.left)};
      ev.preventDefault();                 // (no text selection while dragging; the keys still reach the viewer)
      root.focus({preventScroll: true});
    });
    window.addEventListener("mousemove", ev => {
      const rect = main.getBoundingClientRect();
      if (drag) {
        const dx = ev.clientX - drag.x;
        if (Math.abs(dx) > 3) drag.moved = true;
        if (!drag.moved) return;
        if (drag.shift) {
          const b = tOf(ev.clientX - rect.left);
          S.range = [Math.min(drag.at, b), Math.max(drag.at, b)]; drawMain(); emit();
        } else {
          const dt = dx / (width() - LABEL_W) * (drag.t1 - drag.t0);
          S.t0 = drag.t0 - dt; S.t1 = drag.t1 - dt; drawOverview(); drawAxis(); drawMain(); schedule();
        }
        return;
      }
      const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      if (x < 0 || y < 0 || x > rect.width || y > rect.height) { tip.hidden = true; return; }
      const h = hit(x, y);
      let text = null;
      if (h && h.span) text = `${h.span[3]} · ${fmtDur(h.span[1])} · ${utc(h.span[0], 6)}`;
      else if (h && h.bin) text = `${h.bin[2]} events, mostly ${h.bin[4]}` + (h.bin[3] ? ` (${h.bin[3]} findings)` : "");
      else if (h && h.finding) text = `${h.finding.chain ? h.finding.chain + ". " : ""}${h.finding.kind}: ${h.finding.summary}`;
      else if (h && h.row.type === "track" && x < LABEL_W) text = trackName(h.row.track) + (h.row.track.path ? " · " + h.row.track.path : "");
      if (!text) { tip.hidden = true; return; }
      tip.textContent = text.length > 300 ? text.slice(0, 300) + "…" : text;
      tip.hidden = false;
      const rr = root.getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - rr.left + 12, rr.width - 320) + "px";
      tip.style.top = (ev.clientY - rr.top + 14) + "px";
    });
    window.addEventListener("mouseup", ev => {
      if (!drag) return;
      const d = drag; drag = null;
      if (d.moved) { if (!d.shift) schedule(); return; }
      const rect = main.getBoundingClientRect();
      const h = hit(ev.clientX - rect.left, ev.clientY - rect.top);
      if (!h) return;
      if (h.finding) { S.finding = h.finding; S.sel = null; showFinding(h.finding); redraw(); return; }
      if (h.row.type === "group") {
        if (S.toggled.has(h.row.key)) S.toggled.delete(h.row.key); else S.toggled.add(h.row.key);
        redraw(); schedule(); return;
      }
      if (h.row.type === "counter" && opts.onCounter) { opts.onCounter(h.row.series, [S.t0, S.t1], api); return; }
      if (h.span) { S.sel = {track: h.row.track.id, t: h.span[0]}; S.finding = null; redraw(); showSpan(h.row.track, h.span); return; }
      S.sel = null; S.range = null; redraw();
    });
    main.addEventListener("dblclick", ev => { ev.preventDefault(); reset(); });
    const onWheel = ev => {
      const rect = main.getBoundingClientRect();
      if (ev.ctrlKey || ev.metaKey || ev.altKey) {
        ev.preventDefault();
        zoom(Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.004))), tOf(ev.clientX - rect.left));
      } else if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        ev.preventDefault();
        pan((ev.shiftKey ? ev.deltaY : ev.deltaX) / (width() - LABEL_W));
      }
    };
    main.addEventListener("wheel", onWheel, {passive: false});
    axis.addEventListener("wheel", ev => {   // over the axis a plain wheel zooms too
      ev.preventDefault();
      const rect = axis.getBoundingClientRect();
      zoom(Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.004))), tOf(ev.clientX - rect.left));
    }, {passive: false});
    axis.addEventListener("click", ev => {
      const rect = axis.getBoundingClientRect(), x = ev.clientX - rect.left;
      let best = null, bd = 8;
      for (const f of S.findings) { const dx = Math.abs(xOf(f.t) - x); if (dx < bd) { bd = dx; best = f; } }
      if (best) { S.finding = best; showFinding(best); redraw(); }
    });
    let ovDrag = null;
    const ovT = x => S.bounds[0] + (x - LABEL_W) / (width() - LABEL_W) * (S.bounds[1] - S.bounds[0]);
    ov.addEventListener("mousedown", ev => { const r = ov.getBoundingClientRect(); ovDrag = {x: ev.clientX - r.left}; ev.preventDefault(); });
    window.addEventListener("mouseup", ev => {
      if (!ovDrag) return;
      const r = ov.getBoundingClientRect(), x = ev.clientX - r.left, d = ovDrag; ovDrag = null;
      if (Math.max(x, d.x) < LABEL_W) return;
      if (Math.abs(x - d.x) > 4) setWindow(ovT(Math.max(LABEL_W, Math.min(x, d.x))), ovT(Math.max(x, d.x)));
      else { const c = ovT(x), h = (S.t1 - S.t0) / 2; setWindow(c - h, c + h); }
    });
    root.tabIndex = 0;
    root.addEventListener("keydown", ev => {
      if (ev.target !== root && ev.target.tagName !== "CANVAS") return;
      const k = ev.key.toLowerCase();
      if (k === "w") zoom(0.8); else if (k === "s") zoom(1.25);
      else if (k === "a") pan(-0.15); else if (k === "d") pan(0.15);
      else if (k === "0") reset();
      else if (k === "f") { if (S.range) setWindow(S.range[0], S.range[1]); else if (S.sel) { const d = S.data.data[S.sel.track]; const s = d && d.spans.find(s => s[0] === S.sel.t); if (s && s[1]) setWindow(s[0] - s[1] * 0.1, s[0] + s[1] * 1.1); } }
      else if (k === "escape") { S.sel = null; S.range = null; S.finding = null; redraw(); }
      else return;
      ev.preventDefault();
    });
    window.addEventListener("resize", () => { S.loaded = null; redraw(); schedule(); });

    // a view from a URL fragment (at start, or pasted in later): window, selection, folds
    function applyView(frag) {
      S.sel = null; S.range = null; S.toggled.clear();
      restore(frag);
      S.loaded = null;
      redraw(); load();
      if (S.sel) {
        const tr = S.cat.find(t => t.id === S.sel.track), sel = S.sel;
        const d2 = S.data.data[sel.track], s = d2 && d2.spans.find(s => Math.abs(s[0] - sel.t) < 1);
        if (tr) showSpan(tr, s || [sel.t, null, 0, "", null, null, null]);
      }
    }

    // -- start -------------------------------------------------------------------------------
    const api = {
      zoom: zoom, pan: pan, reset: reset, setWindow: setWindow, focusFinding: focusFinding, applyView: applyView,
      chain: chain, fragment: fragment, epochStr: epochStr, utc: utc, relText: relText, absNs: absNs,
      state: () => ({t0: S.t0, t1: S.t1, sel: S.sel, range: S.range, toggled: [...S.toggled], busy: S.busy,
        rows: S.rows.map(r => ({type: r.type, label: r.type === "track" ? r.track.label : r.type === "counter" ? r.series.metric : r.label,
          key: r.key, id: r.track ? r.track.id : undefined, y: r.y, h: r.h, host: r.host, rank: r.rank,
          spans: r.track && S.data && S.data.data[r.track.id] ? S.data.data[r.track.id].spans.length : 0,
          bins: r.track && S.data && S.data.data[r.track.id] ? S.data.data[r.track.id].bins.length : 0,
          maxDepth: r.track ? (S.depth.get(r.track.id) || 0) : 0})),
        bounds: S.bounds, xOf: xOf, labelWidth: LABEL_W}),
      range: () => S.range, window: () => [S.t0, S.t1],
    };
    return opts.fetchWindow({catalog: true, tracks: "", px: Math.round((width() - LABEL_W) * 2)}).then(d => {
      S.origin = BigInt(d.origin_epoch_ns);
      S.cat = d.tracks; S.findings = d.findings; S.metrics = d.metrics; S.overview = d.overview || [];
      S.failure = d.failure_rel; S.bounds = d.bounds.rel; S.defaultWindow = d.default_window;
      S.t0 = d.default_window[0]; S.t1 = d.default_window[1];
      S.hosts = buildGroups();
      S.data = d;
      applyView(opts.view);
      return api;
    });
  }

  window.aftertraceViewer = {mount: mount, fmtDur: fmtDur, fmtValue: fmtValue};
})();
