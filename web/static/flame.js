// An SVG flame graph of a stack tree ({name, value, base?, children}), drawn in the page without
// any library. Used by the standalone flame graph file and by the self-contained report. Frame
// names come from the bundle: they are only ever set with textContent.
(function () {
  "use strict";
  // D = {tree, title, subtitle, diff}; ids = {fg, tip, reset, search, title, sub}
  function flame(D, ids) {
    const $ = id => document.getElementById(id);
    const ROW = 17, all = D.tree, diff = !!D.diff;
    let root = all, view = "tree", fn = null;
    $(ids.title).textContent = D.title;
    $(ids.sub).textContent = D.subtitle;
    const tip = $(ids.tip);
    let zoom = root, query = null;
    // parents, to show where a zoomed frame sits (the breadcrumb) and to go back up it
    const parent = new Map();
    const link = n => { for (const c of (n.children || [])) { parent.set(c, n); link(c); } };
    link(root);

    // -- other views of the same samples (built here from the tree) -------------------------------
    function node(name) { return {name: name, value: 0, base: 0, kids: new Map()}; }
    function add(n, path, v, b) {      // path: names from n down; v, b: samples here and in the baseline
      n.value += v; n.base += b;
      for (const name of path) {
        if (!n.kids.has(name)) n.kids.set(name, node(name));
        n = n.kids.get(name); n.value += v; n.base += b;
      }
    }
    function finish(n) {          // Map children -> arrays, widest first
      n.children = [...n.kids.values()].sort((a, b) => b.value - a.value).map(finish);
      delete n.kids; if (!diff) delete n.base;
      return n;
    }
    const self = n => (n.value || 0) - (n.children || []).reduce((a, c) => a + (c.value || 0), 0);
    const selfBase = n => (n.base || 0) - (n.children || []).reduce((a, c) => a + (c.base || 0), 0);
    // inverted: the functions the samples were taken in at the top, their callers below
    function inverted() {
      const top = node(all.name);
      (function walk(n, path) {
        const v = self(n), b = selfBase(n);
        if ((v > 0 || b > 0) && path.length) add(top, path.slice().reverse(), v, b);
        for (const c of (n.children || [])) walk(c, path.concat([c.name]));
      })(all, []);
      return finish(top);
    }
    // sandwich of one function: who called it (callers, inverted) and what it called (callees),
    // each occurrence counted once (an occurrence inside another, by recursion, is not re-counted)
    function sandwich(name) {
      const callers = node(name), callees = node(name);
      (function walk(n, path) {
        if (n.name === name && path.length) {
          add(callers, path.slice(0, -1).reverse(), n.value || 0, n.base || 0);
          (function merge(m, into) {
            for (const c of (m.children || [])) {
              if (!into.kids.has(c.name)) into.kids.set(c.name, node(c.name));
              const k = into.kids.get(c.name); k.value += c.value || 0; k.base += c.base || 0; merge(c, k);
            }
          })(n, callees);
          callees.value += n.value || 0; callees.base += n.base || 0;
          return;
        }
        for (const c of (n.children || [])) walk(c, path.concat([c.name]));
      })(all, []);
      return [finish(callers), finish(callees)];
    }
    function setView(v) {
      view = v;
      if (v === "sandwich") { fn = zoom !== root ? zoom.name : fn; if (!fn) { view = "tree"; } }
      root = view === "inverted" ? inverted() : all;
      zoom = root; parent.clear(); link(root);
      draw();
    }
    // rows needed: only frames at least 0.3 px wide are drawn, so deeper thin stacks take no height
    function depth(n, px) {
      if (px < 0.3) return 0;
      const per = px / Math.max(1, n.value || 0);
      return 1 + Math.max(0, ...(n.children || []).map(c => depth(c, per * (c.value || 0))));
    }
    function color(n) {
      if (diff) {
        const a = (n.value || 0) / Math.max(1, all.value), b = (n.base || 0) / Math.max(1, all.base);
        const d = Math.max(-1, Math.min(1, (a - b) / Math.max(a, b, 1e-9)));
        const c = Math.round(255 - 160 * Math.abs(d));
        return d >= 0 ? `rgb(255,${c},${c})` : `rgb(${c},${c},255)`;
      }
      let h = 0; for (const ch of n.name) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
      return `hsl(${10 + h % 40},${70 + h % 25}%,${55 + h % 15}%)`;
    }
    // samples under frames whose name matches (a match inside a match is not counted twice)
    function matched(n, re) {
      if (re.test(n.name)) return n.value || 0;
      let s = 0; for (const c of (n.children || [])) s += matched(c, re); return s;
    }
    function crumbBar(re) {
      const bar = document.createElement("div"); bar.className = "crumb";
      const path = []; for (let n = zoom; n; n = parent.get(n)) path.unshift(n);
      path.forEach((n, i) => {
        if (i) bar.appendChild(document.createTextNode(" › "));
        const a = document.createElement(i === path.length - 1 ? "strong" : "a");
        a.textContent = n.name;
        if (i < path.length - 1) { a.href = "#"; a.onclick = ev => { ev.preventDefault(); zoom = n; draw(); }; }
        bar.appendChild(a);
      });
      const pct = (100 * (zoom.value || 0) / Math.max(1, all.value)).toFixed(1);
      bar.appendChild(document.createTextNode(`  (${zoom.value} samples, ${pct} % of all)`));
      if (diff) {
        const k = document.createElement("span"); k.className = "legend";
        k.textContent = `  differential: width is this window (${all.value} samples); red: a larger share ` +
                        `than in the baseline (${all.base || 0} samples), blue: smaller, white: the same`;
        bar.appendChild(k);
      }
      if (re) {
        const m = matched(zoom, re);
        const s = document.createElement("span"); s.className = "match";
        s.textContent = `  search matches ${m} samples: ${(100 * m / Math.max(1, zoom.value)).toFixed(1)} % of this view`;
        bar.appendChild(s);
      }
      return bar;
    }
    function viewBar() {
      const bar = document.createElement("div"); bar.className = "views";
      for (const [v, label] of [["tree", "call tree"], ["inverted", "inverted (where the time was spent)"],
                                ["sandwich", "sandwich of the zoomed function"]]) {
        const b = document.createElement("button"); b.type = "button"; b.textContent = label; b.dataset.view = v;
        if (v === view) b.className = "on";
        if (v === "sandwich" && zoom === root && !fn) { b.disabled = true; b.title = "click a frame first"; }
        b.onclick = () => setView(v);
        bar.appendChild(b);
      }
      return bar;
    }
    function draw() {
      const host = $(ids.fg); host.textContent = "";
      const re = query ? new RegExp(query) : null;
      host.appendChild(viewBar());
      if (view === "sandwich") {
        const [callers, callees] = sandwich(fn);
        const pct = (100 * callees.value / Math.max(1, all.value)).toFixed(1);
        for (const [t, caption] of [[callers, `callers of ${fn} (${callers.value} samples, ${pct} % of all), nearest first`],
                                    [callees, `what ${fn} called`]]) {
          const h = document.createElement("div"); h.className = "crumb"; h.textContent = caption; host.appendChild(h);
          host.appendChild(icicle(t, re, host.clientWidth || 1200, n => { fn = n.name; draw(); }));
        }
        return;
      }
      host.appendChild(crumbBar(re));
      host.appendChild(icicle(zoom, re, host.clientWidth || 1200, n => { zoom = n; draw(); }));
    }
    // root at the top (an icicle): the widest frames are on the first screen, however deep a stack goes
    function icicle(zoom, re, W, onClick) {
      const H = depth(zoom, W) * ROW + 4;
      const NS = "http://www.w3.org/2000/svg", svg = document.createElementNS(NS, "svg");
      svg.setAttribute("width", W); svg.setAttribute("height", H);
      const total = Math.max(1, zoom.value);
      (function place(n, x, d) {
        const w = W * (n.value || 0) / total; if (w < 0.3) return;
        const y = d * ROW;
        const r = document.createElementNS(NS, "rect");
        r.setAttribute("x", x); r.setAttribute("y", y); r.setAttribute("width", w); r.setAttribute("height", ROW - 1);
        r.setAttribute("fill", color(n)); if (re && re.test(n.name)) r.classList.add("hit");
        r.addEventListener("mousemove", e => {
          const share = 100 * (n.value || 0) / Math.max(1, all.value);
          let text = n.name + " — " + n.value + " samples (" + share.toFixed(2) + "%)";
          if (diff) {
            // shares, not counts: the two windows need not hold the same number of samples
            const was = 100 * (n.base || 0) / Math.max(1, all.base);
            const d = share - was;
            text += "; baseline " + (n.base || 0) + " (" + was.toFixed(2) + "%): " + (d >= 0 ? "+" : "−") +
                    Math.abs(d).toFixed(2) + " points of the samples";
          }
          tip.textContent = text;
          tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
        });
        r.addEventListener("mouseleave", () => tip.style.display = "none");
        r.addEventListener("click", () => onClick(n));
        svg.appendChild(r);
        if (w > 40) {
          const t = document.createElementNS(NS, "text");
          t.setAttribute("x", x + 3); t.setAttribute("y", y + ROW - 5);
          const fit = Math.floor((w - 6) / 6.7); t.textContent = n.name.length > fit ? n.name.slice(0, Math.max(0, fit - 1)) + "…" : n.name;
          svg.appendChild(t);
        }
        let cx = x; for (const c of (n.children || [])) { place(c, cx, d + 1); cx += W * (c.value || 0) / total; }
      })(zoom, 0, 0);
      return svg;
    }
    $(ids.reset).onclick = () => { zoom = root; draw(); };
    $(ids.search).oninput = e => { try { new RegExp(e.target.value || ""); query = e.target.value || null; draw(); } catch (x) {} };
    window.addEventListener("resize", draw);
    draw();
  }
  window.aftertraceFlame = flame;
})();
