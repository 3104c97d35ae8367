// The shell's controls (navbar and session picker) follow the URL in the browser: they are a
// function of the URL and the session list the layout brought, so a page's first load waits
// for no request of theirs (each had cost a round trip and a render after the page's own).
(function () {
  // What the navbar carries from page to page; pages about every session carry nothing.
  const KEPT = ["session", "worker", "step", "device"];
  const NOT_PER_SESSION = ["/", "/capture", "/history"];
  const noUpdate = () => window.dash_clientside.no_update;
  // ``app.pages._common.with_query`` in the browser: the URL query ``search`` with ``changes``
  // applied (null or "" removes a key), or no update when that changes nothing, or when the
  // callback fired because its page was drawn (more than one input reported at once). A
  // control's URL writer here costs no request: on the server, the Pod Viewer's four were
  // called again each time a view was drawn (0.4 s of a small view).
  function withQuery(search, changes) {
    const ctx = window.dash_clientside.callback_context;
    if (ctx && ctx.triggered && ctx.triggered.length > 1) return noUpdate();
    const query = new URLSearchParams(search || "");
    const old = query.toString();
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === undefined || value === "") query.delete(key);
      else query.set(key, String(value));
    }
    const now = query.toString();
    return now === old ? noUpdate() : "?" + now;
  }
  const ZOOM = ["xaxis.range[0]", "xaxis.range[1]", "yaxis.range[0]", "yaxis.range[1]"];
  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    podscopePod: {
      // The step chosen goes into the URL; the page is drawn from it.
      step: (step, mode, search) =>
        withQuery(search, { step: mode === "step" ? Math.trunc(Number(step || 0)) : null }),
      // The hosts, grouping and metric chosen (the default metric stays out of the URL): a new
      // view, its zoom reset.
      hosts: (hosts, group, metric, search, defaultMetric) =>
        withQuery(search, {
          hosts: (hosts || "").trim(),
          group: group,
          heat: metric === defaultMetric ? null : metric,
          hz: null,
        }),
      // A zoom of the heat map goes into the URL; a double-click back to the whole map
      // removes it.
      zoom: function (relayout, search) {
        if (!relayout) return noUpdate();
        if (relayout["xaxis.autorange"] || relayout["yaxis.autorange"]) return withQuery(search, { hz: null });
        if (!ZOOM.every((k) => k in relayout)) return noUpdate();
        return withQuery(search, { hz: ZOOM.map((k) => Number(relayout[k]).toFixed(2)).join(",") });
      },
      // An uploaded mapping's key (``map:<digest>``), once the server holds the mapping.
      mapping: (key, search) => (key ? withQuery(search, { group: key, hz: null }) : noUpdate()),
    },
    podscopeOps: {
      // The op table's controls go into the URL (the defaults stay out of it): a new view; a
      // row picked in the kernel table names its kernel.
      choose: function (worker, device, by, q, selected, search) {
        const ctx = window.dash_clientside.callback_context;
        const one = ctx && ctx.triggered && ctx.triggered.length === 1 ? ctx.triggered[0].prop_id : "";
        if (one.startsWith("ops-table.")) {
          const kernel = by === "kernel" ? ((selected || [])[0] || {}).kernel : null;
          if (!kernel || kernel === new URLSearchParams(search || "").get("kernel")) return noUpdate();
          return withQuery(search, { kernel: kernel });
        }
        return withQuery(search, {
          worker: worker === "all" ? null : worker,
          device: device === "all" ? null : device,
          by: by === "op" ? null : by,
          q: q,
          kernel: null,
        });
      },
    },
    podscopeTimeline: {
      // The Timeline's controls' values (workers, search, step, planes) when they differ from
      // those the view was drawn with (Dash reports them back on every view drawn): only a
      // change goes to the server's URL writer.
      changed: function (workers, q, step, planes, drawn) {
        const as = (v) => [v[0] || [], v[1] || "", v[2] === undefined ? null : v[2], v[3] || []];
        const now = as([workers, q, step, planes]);
        return JSON.stringify(now) === JSON.stringify(as(drawn || [])) ? noUpdate() : now;
      },
    },
    podscopeShell: {
      // Moving between pages keeps the session, worker, step and device the user is looking
      // at (what each page's own view means stays with that page); the page shown is marked.
      nav: function (pathname, search, links) {
        const query = new URLSearchParams(search || "");
        const kept = new URLSearchParams();
        for (const key of KEPT) if (query.get(key)) kept.set(key, query.get(key));
        const carried = kept.toString();
        return [
          links.map((l) => (!carried || NOT_PER_SESSION.includes(l.path) ? l.path : l.path + "?" + carried)),
          links.map((l) => l.path === (pathname || "/")),
        ];
      },
      // The URL's session, else the newest; a session that is not in the list stays
      // unselected and the page explains why (never a silent switch to another session).
      // Unchanged: no update, so that pickerToUrl runs only when the session changes.
      session: function (search, options, shown) {
        const names = (options || []).map((o) => o.value);
        const wanted = new URLSearchParams(search || "").get("session");
        const value = !wanted ? (names.length ? names[0] : null) : names.includes(wanted) ? wanted : null;
        return value === shown ? window.dash_clientside.no_update : value;
      },
      // Picking a session opens it, without the old session's step or worker. A page about
      // every session keeps its URL when the picker only shows the newest: writing it would
      // make Dash render the page a second time (a logdir of 1,000 sessions: 0.8 s more).
      // The module text opens at its marked line (the op the XLA page shows).
      showMark: function (children) {
        const mark = document.getElementById("xla-module-op");
        const box = mark && mark.closest("pre");
        if (box) box.scrollTop = Math.max(0, mark.offsetTop - box.offsetTop - box.clientHeight / 3);
        return window.dash_clientside.no_update;
      },
      pickerToUrl: function (session, search, pathname) {
        const current = new URLSearchParams(search || "").get("session");
        if (!session || current === session) return window.dash_clientside.no_update;
        if (!current && NOT_PER_SESSION.includes(pathname || "/")) return window.dash_clientside.no_update;
        if (!current) {
          // A link without a session (the newest is shown): name it, and keep the view the
          // link asked for (/gpu?view=idle stays the idle view).
          const kept = new URLSearchParams(search || "");
          kept.set("session", session);
          return "?" + kept.toString();
        }
        return "?" + new URLSearchParams({ session: session }).toString();
      },
    },
  });
})();
