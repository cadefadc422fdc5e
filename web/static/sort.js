// Tables with class "sortable": a click on a header sorts the rows by that column (again: reversed).
// A cell's data-key, when it has one, is what is compared (numbers as numbers where the header says so).
(function () {
  "use strict";
  document.querySelectorAll("table.sortable").forEach(table => {
    const heads = Array.from(table.tHead.rows[0].cells);
    heads.forEach((th, col) => {
      th.style.cursor = "pointer";
      th.title = "sort by " + th.textContent;
      th.addEventListener("click", () => {
        const asc = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(h => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const num = th.dataset.sort === "num";
        const key = row => {
          const cell = row.cells[col];
          const k = cell.dataset.key !== undefined ? cell.dataset.key : cell.textContent.trim();
          return num ? parseFloat(k) || 0 : k.toLowerCase();
        };
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(r => body.appendChild(r));
      });
    });
  });
})();
