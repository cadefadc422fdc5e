// Share links of the incident page: make one (shown once), list them, revoke them. Text from the
// server is set with textContent only.
(function () {
  "use strict";
  const box = document.getElementById("share");
  if (!box) return;
  const iid = box.dataset.incident;
  const form = document.getElementById("share-form");
  const out = document.getElementById("share-new");
  const body = document.querySelector("#share-list tbody");

  function headers() {
    const h = {"Content-Type": "application/json"};
    const t = form.querySelector("input[name=token]");
    if (t && t.value) h["Authorization"] = "Bearer " + t.value;
    return h;
  }
  function cell(tr, text) { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; }

  async function list() {
    const r = await fetch(`/api/incidents/${encodeURIComponent(iid)}/shares`);
    const d = await r.json();
    body.textContent = "";
    for (const s of d.shares || []) {
      const tr = document.createElement("tr");
      cell(tr, s.share_id); cell(tr, s.created_at); cell(tr, s.note || "");
      cell(tr, s.revoked_at ? "revoked " + s.revoked_at : "live");
      const td = cell(tr, "");
      if (!s.revoked_at) {
        const b = document.createElement("button");
        b.textContent = "Revoke"; b.className = "revoke"; b.dataset.share = s.share_id;
        b.addEventListener("click", async () => {
          const rr = await fetch(`/api/incidents/${encodeURIComponent(iid)}/shares/${encodeURIComponent(s.share_id)}`,
                                 {method: "DELETE", headers: headers()});
          if (!rr.ok) { out.textContent = (await rr.json()).error.message; return; }
          list();
        });
        td.appendChild(b);
      }
      body.appendChild(tr);
    }
  }

  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const note = form.querySelector("input[name=note]").value;
    const r = await fetch(`/api/incidents/${encodeURIComponent(iid)}/shares`,
                          {method: "POST", headers: headers(), body: JSON.stringify({note: note || null})});
    const d = await r.json();
    out.textContent = "";
    if (!r.ok) { out.textContent = d.error ? d.error.message : "error"; return; }
    const a = document.createElement("a");
    a.href = d.url; a.id = "share-url"; a.textContent = location.origin + d.url;
    out.appendChild(document.createTextNode("New link (copy it now, it is not shown again): "));
    out.appendChild(a);
    list();
  });
  list();
})();
