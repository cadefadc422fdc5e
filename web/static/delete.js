// The incident page's delete: asked once more, then DELETE /api/incidents/{id}; the list next.
// Text from the server is set with textContent only.
(function () {
  "use strict";
  const box = document.getElementById("delete");
  if (!box) return;
  const iid = box.dataset.incident;
  const form = document.getElementById("delete-form");
  const out = document.getElementById("delete-out");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    if (!window.confirm(`Delete incident ${iid} and every file of it? This cannot be undone.`)) return;
    const h = {};
    const t = form.querySelector("input[name=token]");
    if (t && t.value) h["Authorization"] = "Bearer " + t.value;
    const r = await fetch(`/api/incidents/${encodeURIComponent(iid)}`, {method: "DELETE", headers: h});
    if (!r.ok) {
      let d = {};
      try { d = await r.json(); } catch (e) { /* not JSON */ }
      out.textContent = d.error ? d.error.message : `error ${r.status}`;
      return;
    }
    location.href = "/";
  });
})();
