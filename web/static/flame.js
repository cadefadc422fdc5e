// An SVG flame graph of a stack tree ({name, value, base?, children}), drawn in the page without
// any library. Used by the standalone flame graph file and by the self-contained report. Frame
// names come from the bundle: they are only ever set with textContent.
(function () {
  "use strict";
  // D = {tree, title, subtitle, diff}; ids = {fg, tip, reset, search, title, sub}
  function flame(D, ids) {
    const $ = id => document.getElementById(id);
    const ROW = 17, root = D.tree, diff = !!D.diff;
    $(ids.title).textContent = D.title;
    $(ids.sub).textContent = D.subtitle;
    const tip = $(ids.tip);
    let zoom = root, query = null;
    // parents, to show where a zoomed frame sits (the breadcrumb) and to go back up it
    const parent = new Map();
    (function link(n) { for (const c of (n.children || [])) { parent.set(c, n); link(c); } })(root);
    // rows needed: only frames at least 0.3 px wide are drawn, so deeper thin stacks take no height
    function depth(n, px) {
      if (px < 0.3) return 0;
      const per = px / Math.max(1, n.value || 0);
      return 1 + Math.max(0, ...(n.children || []).map(c => depth(c, per * (c.value || 0))));
    }
    function color(n) {
      if (diff) {
        const a = (n.value || 0) / Math.max(1, root.value), b = (n.base || 0) / Math.max(1, root.base);
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
      const pct = (100 * (zoom.value || 0) / Math.max(1, root.value)).toFixed(1);
      bar.appendChild(document.createTextNode(`  (${zoom.value} samples, ${pct} % of all)`));
      if (diff) {
        const k = document.createElement("span"); k.className = "legend";
        k.textContent = `  differential: width is this window (${root.value} samples); red: a larger share ` +
                        `than in the baseline (${root.base || 0} samples), blue: smaller, white: the same`;
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
    function draw() {
      const host = $(ids.fg); host.textContent = "";
      const re = query ? new RegExp(query) : null;
      host.appendChild(crumbBar(re));
      // root at the top (an icicle): the widest frames are on the first screen, however deep a stack goes
      const W = host.clientWidth || 1200, H = depth(zoom, W) * ROW + 4;
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
          const share = 100 * (n.value || 0) / Math.max(1, root.value);
          let text = n.name + " — " + n.value + " samples (" + share.toFixed(2) + "%)";
          if (diff) {
            // shares, not counts: the two windows need not hold the same number of samples
            const was = 100 * (n.base || 0) / Math.max(1, root.base);
            const d = share - was;
            text += "; baseline " + (n.base || 0) + " (" + was.toFixed(2) + "%): " + (d >= 0 ? "+" : "−") +
                    Math.abs(d).toFixed(2) + " points of the samples";
          }
          tip.textContent = text;
          tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
        });
        r.addEventListener("mouseleave", () => tip.style.display = "none");
        r.addEventListener("click", () => { zoom = n; draw(); });
        svg.appendChild(r);
        if (w > 40) {
          const t = document.createElementNS(NS, "text");
          t.setAttribute("x", x + 3); t.setAttribute("y", y + ROW - 5);
          const fit = Math.floor((w - 6) / 6.7); t.textContent = n.name.length > fit ? n.name.slice(0, Math.max(0, fit - 1)) + "…" : n.name;
          svg.appendChild(t);
        }
        let cx = x; for (const c of (n.children || [])) { place(c, cx, d + 1); cx += W * (c.value || 0) / total; }
      })(zoom, 0, 0);
      host.appendChild(svg);
    }
    $(ids.reset).onclick = () => { zoom = root; draw(); };
    $(ids.search).oninput = e => { try { new RegExp(e.target.value || ""); query = e.target.value || null; draw(); } catch (x) {} };
    window.addEventListener("resize", draw);
    draw();
  }
  window.aftertraceFlame = flame;
})();
