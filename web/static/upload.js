// Upload with a progress bar and drag and drop. Without JavaScript the plain form still works.
(function () {
  "use strict";
  const form = document.getElementById("upload-form");
  const drop = document.getElementById("drop");
  const prog = document.getElementById("upload-progress");
  if (!form || !window.FormData) return;
  const fileInput = form.querySelector("input[name=bundle]");

  function send(file) {
    const fd = new FormData();
    fd.append("bundle", file, file.name);
    const title = form.querySelector("input[name=title]").value;
    if (title) fd.append("title", title);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/incidents");
    const tok = form.querySelector("input[name=token]");
    if (tok && tok.value) xhr.setRequestHeader("Authorization", "Bearer " + tok.value);
    xhr.upload.onprogress = ev => {
      if (ev.lengthComputable) prog.textContent = `Uploading ${file.name}: ${Math.round(100 * ev.loaded / ev.total)} %`;
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

  form.addEventListener("submit", ev => {
    if (!fileInput.files.length) return;
    ev.preventDefault();
    send(fileInput.files[0]);
  });
  ["dragenter", "dragover"].forEach(t => drop.addEventListener(t, ev => { ev.preventDefault(); drop.classList.add("over"); }));
  ["dragleave", "drop"].forEach(t => drop.addEventListener(t, ev => { ev.preventDefault(); drop.classList.remove("over"); }));
  drop.addEventListener("drop", ev => {
    const f = ev.dataTransfer && ev.dataTransfer.files[0];
    if (f) send(f);
  });
})();
