// Timeline keys as in Perfetto: W/S zoom in/out around the middle, A/D pan left/right.
// The new x range goes through Plotly.relayout, so the server redraws that window and keeps it.
(function () {
  const ZOOM = 0.6; // W keeps 60 % of the window; S widens it by 1/0.6
  const PAN = 0.25; // A/D move a quarter of the window
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "TEXTAREA" || (e.target && e.target.isContentEditable)) return;
    const key = e.key.toLowerCase();
    if (!"wasd".includes(key) || key.length !== 1) return;
    const gd = document.querySelector("#tl-graph .js-plotly-plot");
    if (!gd || !gd.layout || !gd.layout.xaxis || !window.Plotly) return;
    const [a, b] = gd.layout.xaxis.range.map(Number);
    const mid = (a + b) / 2;
    const half = (b - a) / 2;
    let range;
    if (key === "w") range = [mid - half * ZOOM, mid + half * ZOOM];
    else if (key === "s") range = [mid - half / ZOOM, mid + half / ZOOM];
    else if (key === "a") range = [a - (b - a) * PAN, b - (b - a) * PAN];
    else range = [a + (b - a) * PAN, b + (b - a) * PAN];
    e.preventDefault();
    window.Plotly.relayout(gd, { "xaxis.range[0]": range[0], "xaxis.range[1]": range[1] });
  });
})();
