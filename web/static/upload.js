// Upload with a progress bar and drag and drop. A folder (chosen or dropped) is packed here into a
// tar archive, which the server reads like any other. Without JavaScript the plain form still works.
(function () {
  "use strict";
  const form = document.getElementById("upload-form");
  const drop = document.getElementById("drop");
  const prog = document.getElementById("upload-progress");
  if (!form || !window.FormData) return;
  const fileInput = form.querySelector("input[name=bundle]");
  const folderInput = form.querySelector("input[name=folder]");
  const enc = new TextEncoder();

  function put(buf, at, len, text) {
    const b = enc.encode(text);
    buf.set(b.subarray(0, len), at);
  }
  function octal(n, width) { return n.toString(8).padStart(width - 1, "0") + "\0"; }

  // ustar names: up to 100 bytes, or a prefix of up to 155 before the last part, split at a "/"
  function splitName(path) {
    if (enc.encode(path).length <= 100) return ["", path];
    for (let i = path.indexOf("/"); i > 0; i = path.indexOf("/", i + 1)) {
      const pre = path.slice(0, i), name = path.slice(i + 1);
      if (enc.encode(pre).length <= 155 && enc.encode(name).length <= 100) return [pre, name];
    }
    return null;
  }

  // a tar archive (POSIX ustar) of {path, file} entries, as a Blob that reads the files lazily
  function tarBlob(entries) {
    const parts = [], skipped = [];
    const now = Math.floor(Date.now() / 1000);
    for (const { path, file } of entries) {
      const split = splitName(path);
      if (!split || file.size >= 8 ** 11) { skipped.push(path); continue; }
      const h = new Uint8Array(512);
      put(h, 0, 100, split[1]);
      put(h, 100, 8, "0000644\0"); put(h, 108, 8, "0000000\0"); put(h, 116, 8, "0000000\0");
      put(h, 124, 12, octal(file.size, 12));
      put(h, 136, 12, octal(Math.floor((file.lastModified || now * 1000) / 1000), 12));
      put(h, 148, 8, "        ");
      put(h, 156, 1, "0");
      put(h, 257, 6, "ustar\0"); put(h, 263, 2, "00");
      put(h, 345, 155, split[0]);
      let sum = 0;
      for (const b of h) sum += b;
      put(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
      parts.push(h, file);
      const pad = (512 - (file.size % 512)) % 512;
      if (pad) parts.push(new Uint8Array(pad));
    }
    parts.push(new Uint8Array(1024));
    return { blob: new Blob(parts, { type: "application/x-tar" }), skipped };
  }

  function send(file, name) {
    const fd = new FormData();
    fd.append("bundle", file, name || file.name);
    const title = form.querySelector("input[name=title]").value;
    if (title) fd.append("title", title);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/incidents");
    const tok = form.querySelector("input[name=token]");
    if (tok && tok.value) xhr.setRequestHeader("Authorization", "Bearer " + tok.value);
    const shown = name || file.name;
    xhr.upload.onprogress = ev => {
      if (ev.lengthComputable) prog.textContent = `Uploading ${shown}: ${Math.round(100 * ev.loaded / ev.total)} %`;
    };
    xhr.onload = () => {
      let d = {};
      try { d = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status === 201 && d.url) { prog.textContent = "Uploaded; analysing…"; location.href = d.url; }
      else prog.textContent = "Upload failed: " + (d.error ? d.error.message : xhr.status);
    };
    xhr.onerror = () => { prog.textContent = "Upload failed: the server could not be reached"; };
    xhr.send(fd);
  }

  function sendFolder(entries) {
    if (!entries.length) { prog.textContent = "The folder is empty"; return; }
    const top = entries[0].path.split("/")[0] || "folder";
    const { blob, skipped } = tarBlob(entries);
    if (skipped.length) prog.textContent = `Left out (name too long or file too large): ${skipped.join(", ")}`;
    send(blob, top + ".tar");
  }

  form.addEventListener("submit", ev => {
    if (folderInput && folderInput.files.length) {
      ev.preventDefault();
      sendFolder(Array.from(folderInput.files, f => ({ path: f.webkitRelativePath || f.name, file: f })));
      return;
    }
    if (!fileInput.files.length) { ev.preventDefault(); prog.textContent = "Choose a bundle or a folder"; return; }
    ev.preventDefault();
    send(fileInput.files[0]);
  });

  // a dropped folder: walk it (FileSystem entries), then pack it like a chosen one
  function walk(entry, prefix, out) {
    return new Promise(resolve => {
      if (entry.isFile) {
        entry.file(f => { out.push({ path: prefix + entry.name, file: f }); resolve(); }, () => resolve());
      } else if (entry.isDirectory) {
        const reader = entry.createReader();
        const all = [];
        const more = () => reader.readEntries(batch => {
          if (!batch.length) {
            Promise.all(all.map(e => walk(e, prefix + entry.name + "/", out))).then(resolve);
          } else { all.push(...batch); more(); }
        }, () => resolve());
        more();
      } else resolve();
    });
  }

  ["dragenter", "dragover"].forEach(t => drop.addEventListener(t, ev => { ev.preventDefault(); drop.classList.add("over"); }));
  ["dragleave", "drop"].forEach(t => drop.addEventListener(t, ev => { ev.preventDefault(); drop.classList.remove("over"); }));
  drop.addEventListener("drop", ev => {
    const item = ev.dataTransfer && ev.dataTransfer.items && ev.dataTransfer.items[0];
    const entry = item && item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
    if (entry && entry.isDirectory) {
      const out = [];
      walk(entry, "", out).then(() => sendFolder(out));
      return;
    }
    const f = ev.dataTransfer && ev.dataTransfer.files[0];
    if (f) send(f);
  });
})();
