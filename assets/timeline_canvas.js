// The Timeline's bars on a canvas over the Plotly plot (app/figures/timeline.py sends them as
// numbers in layout.meta.tl). Plotly keeps the axes, zoom box, scroll zoom and the W/A/S/D
// relayouts; every redraw of the axes redraws the canvas from the data already here, so a
// zoom or pan inside what the server sent never waits for it. The server is asked for finer
// bars (the tl-window store) only when the view leaves that range or zooms in more than
// REFINE times past it. Hover shows an event; a click on a bar asks for its details.
(function () {
  "use strict";
  const REFINE = 4;
  const CHAR_PX = 6.2;
  const GD = "#tl-graph .js-plotly-plot";

  function fmtDuration(ms) {
    if (ms >= 1000) return (ms / 1000).toFixed(3) + " s";
    if (ms >= 1) return ms.toFixed(3) + " ms";
    if (ms >= 0.001) return (ms * 1000).toFixed(3) + " µs";
    return (ms * 1e6).toFixed(0) + " ns";
  }

  function fit(text, px) {
    const n = Math.floor((px - 6) / CHAR_PX);
    if (text.length <= n) return text;
    return n >= 4 ? text.slice(0, n - 1) + "…" : "";
  }

  // Per row: the bars' indices sorted by start, for hover and click (built once per data;
  // kept beside it, since Plotly may carry a property of its meta over to the next figure).
  const rowCache = new WeakMap();
  function rowIndex(tl) {
    const cached = rowCache.get(tl);
    if (cached && cached.x0 === tl.x0) return cached.rows;
    const rows = new Map();
    for (let i = 0; i < tl.y.length; i++) {
      if (!rows.has(tl.y[i])) rows.set(tl.y[i], []);
      rows.get(tl.y[i]).push(i);
    }
    for (const list of rows.values()) list.sort((a, b) => tl.x0[a] - tl.x0[b]);
    rowCache.set(tl, { x0: tl.x0, rows: rows });
    return rows;
  }

  // The bars the server sent, or null on a graph without them (the page comes with its
  // chart, but a key, drag or hover must not fail on a graph Plotly has not drawn it on yet).
  function dataOf(gd) {
    const fl = gd._fullLayout;
    return (fl && fl.meta && fl.meta.tl) || null;
  }

  function canvasOf(gd) {
    let cv = gd.querySelector("canvas.podscope-tl");
    if (!cv) {
      cv = document.createElement("canvas");
      cv.className = "podscope-tl";
      cv.style.position = "absolute";
      cv.style.pointerEvents = "none";
      const container = gd.querySelector(".svg-container");
      const svgs = container.querySelectorAll(":scope > svg.main-svg");
      container.insertBefore(cv, svgs.length > 1 ? svgs[1] : null);
    }
    return cv;
  }

  function draw(gd) {
    const fl = gd._fullLayout;
    const tl = dataOf(gd);
    if (!tl || !fl.xaxis || !fl.yaxis) return;
    const size = fl._size;
    const xa = fl.xaxis;
    const ya = fl.yaxis;
    const cv = canvasOf(gd);
    const dpr = window.devicePixelRatio || 1;
    cv.style.left = size.l + "px";
    cv.style.top = size.t + "px";
    cv.style.width = size.w + "px";
    cv.style.height = size.h + "px";
    cv.width = Math.round(size.w * dpr);
    cv.height = Math.round(size.h * dpr);
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, size.w, size.h);
    const rowH = Math.abs(ya.l2p(1) - ya.l2p(0));
    const barH = Math.max(1, rowH * 0.9);
    // density cells of the events too narrow to draw one by one
    const d = tl.dense;
    ctx.fillStyle = d.color || "#9ecae1";
    for (let i = 0; i < d.y.length; i++) {
      const a = xa.l2p(d.x0[i]);
      const b = xa.l2p(d.x0[i] + d.dx);
      if (b < 0 || a > size.w) continue;
      ctx.globalAlpha = d.a[i];
      ctx.fillRect(a, ya.l2p(d.y[i]) - barH / 2, Math.max(1, b - a), barH);
    }
    ctx.globalAlpha = 1;
    ctx.font = "10px sans-serif";
    ctx.textBaseline = "middle";
    let labels = 0;
    for (let i = 0; i < tl.x0.length; i++) {
      const a = xa.l2p(tl.x0[i]);
      const b = xa.l2p(tl.x0[i] + tl.dx[i]);
      if (b < 0 || a > size.w) continue;
      const y = ya.l2p(tl.y[i]);
      const w = Math.max(1, b - a);
      const hit = tl.hit[i] === 1;
      ctx.globalAlpha = tl.dim && !hit ? 0.35 : 1;
      ctx.fillStyle = hit ? tl.hit_color : tl.colors[tl.c[i]];
      ctx.fillRect(a, y - barH / 2, w, barH);
      if (hit) {
        ctx.strokeStyle = "#000";
        ctx.strokeRect(a, y - barH / 2, w, barH);
      }
      const left = Math.max(a, 0);
      const text = fit(tl.names[tl.n[i]], Math.min(b, size.w) - left);
      if (text && barH >= 9) {
        ctx.fillStyle = hit ? "#000" : "#fff";
        ctx.fillText(text, left + 3, y);
        labels++;
      }
    }
    ctx.globalAlpha = 1;
    ctx.strokeStyle = "rgba(80, 80, 80, 0.6)";
    ctx.setLineDash([2, 3]);
    for (const band of tl.steps) {
      const top = ya.l2p(band.y0);
      const bottom = ya.l2p(band.y1);
      for (const x of band.x) {
        const p = xa.l2p(x);
        if (p < 0 || p > size.w) continue;
        ctx.beginPath();
        ctx.moveTo(p, top);
        ctx.lineTo(p, bottom);
        ctx.stroke();
      }
    }
    ctx.setLineDash([]);
    gd._podscopeLabels = labels;
    gd._podscopeDraws = (gd._podscopeDraws || 0) + 1;
    gd._podscopeDrawnAt = performance.now();
  }

  // The bar under a point of the plot area (px from its top left), or -1.
  function barAt(gd, px, py) {
    const fl = gd._fullLayout;
    const tl = dataOf(gd);
    if (!tl) return -1;
    const row = Math.round(fl.yaxis.p2l(py));
    const list = rowIndex(tl).get(row);
    if (!list) return -1;
    const x = fl.xaxis.p2l(px);
    const slack = Math.abs(fl.xaxis.p2l(1) - fl.xaxis.p2l(0)); // a bar is at least a pixel
    let best = -1;
    for (const i of list) {
      if (tl.x0[i] > x + slack) break;
      if (x <= tl.x0[i] + Math.max(tl.dx[i], slack)) best = i; // the innermost one started last
    }
    return best;
  }

  function plotPoint(gd, e) {
    const size = gd._fullLayout._size;
    const box = gd.getBoundingClientRect();
    return [e.clientX - box.left - size.l, e.clientY - box.top - size.t];
  }

  function tipOf(gd) {
    let tip = gd.parentElement.querySelector(".podscope-tl-tip");
    if (!tip) {
      tip = document.createElement("div");
      tip.className = "podscope-tl-tip";
      gd.parentElement.style.position = "relative";
      gd.parentElement.appendChild(tip);
    }
    return tip;
  }

  function hover(gd, e) {
    const tip = tipOf(gd);
    const [px, py] = plotPoint(gd, e);
    const i = barAt(gd, px, py);
    if (i < 0) {
      tip.style.display = "none";
      return;
    }
    const tl = dataOf(gd);
    tip.textContent = "";
    const name = document.createElement("b");
    name.textContent = tl.names[tl.n[i]];
    tip.append(
      name,
      document.createElement("br"),
      `${tl.cats[tl.k[i]]} · ${fmtDuration(tl.dx[i])}`,
      document.createElement("br"),
      `starts at ${fmtDuration(tl.x0[i])} · ${tl.workers[tl.w[i]]}`
    );
    const box = gd.parentElement.getBoundingClientRect();
    tip.style.left = e.clientX - box.left + 12 + "px";
    tip.style.top = e.clientY - box.top + 12 + "px";
    tip.style.display = "block";
  }

  // Epoch ns as text: 1.8e18 is past a double's exact integers (2^53), so BigInt sums them.
  function epochNs(gd, ms) {
    return (BigInt(gd._fullLayout.meta.base_ns) + BigInt(Math.round(ms * 1e6))).toString();
  }

  // Answers can come out of order (the server answers in threads), so asks for bars are
  // numbered and the server sends the number back (meta.asked). The axes stay at the window
  // the user last had (``view``, ms on the axis; null: the whole capture), whatever answer
  // comes: the last one's chart can be for a window the user has since left (without a new
  // ask, the bars covering it), and an older one's for a window left, or after a control
  // changed, for the page before. An older answer's bars are asked for again if the last
  // answer was already drawn over.
  let view = null;
  let asked = 0;
  let answered = 0;
  let restoring = null; // the range put back: its relayout asks for nothing
  function ask(range) {
    asked += 1;
    const gd = document.querySelector(GD);
    const data = range
      ? { t0: epochNs(gd, range[0]), t1: epochNs(gd, Math.max(range[1], range[0] + 0.001)) }
      : {}; // the whole capture
    window.dash_clientside.set_props("tl-window", { data: Object.assign(data, { n: asked }) });
  }

  function took(gd) {
    // the figure's own meta: a relayout keeps it, where _fullLayout's is made anew each time
    const meta = (gd.layout && gd.layout.meta) || {};
    if (!meta.tl || meta === gd._podscopeTaken) return;
    gd._podscopeTaken = meta;
    const range = gd._fullLayout.xaxis.range;
    if (meta.asked === undefined) asked += 1; // the page's own chart: earlier asks are old
    const latest = meta.asked === undefined || meta.asked === asked;
    const again = !latest && answered === asked;
    if (latest) answered = asked;
    if (meta.asked === undefined || (latest && !view)) {
      view = range.slice(); // the page's chart, or the whole capture asked for
      return;
    }
    if (!view) {
      if (again) ask(null); // an older answer while the whole capture is on its way
      return;
    }
    const off = Math.abs(view[0] - range[0]) + Math.abs(view[1] - range[1]);
    if (off > 1e-3 * (view[1] - view[0])) {
      // the last answer: its bars decide whether to ask (onRelayout); an older one: not
      restoring = latest ? null : view.slice();
      window.Plotly.relayout(gd, { "xaxis.range": view.slice() });
    }
    if (again) ask(view);
  }

  // The window shown goes into the URL in place (no history entry per zoom), and into
  // tl-view, which the controls keep when they write the URL. The shell's Location is not
  // told: nothing it drives depends on the window (the navbar carries session, worker, step
  // and device), and telling it (once the view rested, 500 ms after the last key) could land
  // while a control's URL drew the page again, and left Dash's shell callbacks requested
  // and never run (3 times in 14 ROCm crawls).
  function remember(gd, range) {
    view = range ? [range[0], range[1]] : null;
    const q = new URLSearchParams(window.location.search);
    if (range) {
      q.set("t0", epochNs(gd, range[0]));
      q.set("t1", epochNs(gd, Math.max(range[1], range[0] + 0.001)));
    } else {
      q.delete("t0");
      q.delete("t1");
    }
    const url = window.location.pathname + "?" + q.toString();
    if (url !== window.location.pathname + window.location.search) {
      window.history.replaceState(window.history.state, "", url);
    }
    const kept = range ? { t0: q.get("t0"), t1: q.get("t1") } : null;
    window.dash_clientside.set_props("tl-view", { data: kept });
  }

  function onRelayout(gd, ev) {
    if (ev["xaxis.autorange"]) return; // a double click: handled below
    const range = ev["xaxis.range"] || (
      "xaxis.range[0]" in ev ? [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] : null
    );
    if (!range) return; // autosize and the like: not the user's doing
    const tl = dataOf(gd);
    if (!tl) return; // a graph with no bars yet: nothing to zoom
    const a = Number(range[0]);
    const b = Number(range[1]);
    remember(gd, [a, b]);
    if (restoring && a === restoring[0] && b === restoring[1]) {
      restoring = null;
      return;
    }
    const width = (tl.fetched[1] - tl.fetched[0]) / 3;
    if (a < tl.fetched[0] || b > tl.fetched[1] || (b - a) * REFINE < width) ask([a, b]);
  }

  function attach(gd) {
    if (gd._podscopeCanvas) return;
    gd._podscopeCanvas = true;
    gd.on("plotly_afterplot", function () {
      took(gd);
      draw(gd);
    });
    gd.on("plotly_relayout", function (ev) { onRelayout(gd, ev || {}); });
    gd.on("plotly_doubleclick", function () {
      remember(gd, null);
      ask(null);
    });
    gd.addEventListener("mousemove", function (e) { hover(gd, e); });
    gd.addEventListener("mouseleave", function () { tipOf(gd).style.display = "none"; });
    let down = null;
    gd.addEventListener("mousedown", function (e) { down = [e.clientX, e.clientY]; }, true);
    gd.addEventListener("click", function (e) {
      if (!down || Math.abs(e.clientX - down[0]) + Math.abs(e.clientY - down[1]) > 3) return;
      const [px, py] = plotPoint(gd, e);
      const i = barAt(gd, px, py);
      if (i < 0) return;
      const tl = dataOf(gd);
      window.dash_clientside.set_props("tl-click", {
        // base_ns: where the axis counts from, for the event's start as the chart reads it
        data: {
          worker: tl.workers[tl.w[i]],
          row: tl.row[i],
          base_ns: gd.layout.meta.base_ns,
          at: Date.now(),
        },
      });
    }, true);
    draw(gd);
  }

  // For tests and people alike: where a drawn bar is on the page (its centre, in the
  // viewport: the page scrolls to it), chosen by a predicate over {name, hit, width}; the
  // widest match.
  window.podscopeTimeline = {
    // The bar at a point of the page (viewport pixels): its name, worker and row, or null.
    barAtPage: function (x, y) {
      const gd = document.querySelector(GD);
      const [px, py] = plotPoint(gd, { clientX: x, clientY: y });
      const i = barAt(gd, px, py);
      const tl = dataOf(gd);
      return i < 0 ? null : { name: tl.names[tl.n[i]], worker: tl.workers[tl.w[i]], row: tl.row[i] };
    },
    barOnPage: function (pred) {
      const gd = document.querySelector(GD);
      const fl = gd._fullLayout;
      const tl = dataOf(gd);
      if (!tl) return null;
      const size = fl._size;
      const box = gd.getBoundingClientRect();
      let best = null;
      for (let i = 0; i < tl.x0.length; i++) {
        const a = Math.max(0, fl.xaxis.l2p(tl.x0[i]));
        const b = Math.min(size.w, fl.xaxis.l2p(tl.x0[i] + tl.dx[i]));
        const info = { name: tl.names[tl.n[i]], hit: tl.hit[i] === 1, width: b - a };
        if (b - a < 4 || (pred && !pred(info))) continue;
        if (!best || b - a > best.width) {
          best = {
            x: box.left + size.l + (a + b) / 2,
            y: box.top + size.t + fl.yaxis.l2p(tl.y[i]),
            width: b - a,
            name: info.name,
            start: tl.x0[i], // ms on the axis
          };
        }
      }
      if (best && (best.y < 0 || best.y > window.innerHeight)) {
        const by = best.y - window.innerHeight / 2; // bring it into view, as one scrolls to it
        window.scrollBy(0, by);
        best.y -= by;
      }
      return best;
    },
  };

  const seen = new MutationObserver(function () {
    const gd = document.querySelector(GD);
    if (gd && gd.on) attach(gd);
  });
  seen.observe(document.documentElement, { childList: true, subtree: true });
})();
