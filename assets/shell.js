// The shell's controls (navbar and session picker) follow the URL in the browser: they are a
// function of the URL and the session list the layout brought, so a page's first load waits
// for no request of theirs (each had cost a round trip and a render after the page's own).
(function () {
  // What the navbar carries from page to page; pages about every session carry nothing.
  const KEPT = ["session", "worker", "step", "device"];
  const NOT_PER_SESSION = ["/", "/capture", "/history"];
  window.dash_clientside = Object.assign({}, window.dash_clientside, {
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
      pickerToUrl: function (session, search, pathname) {
        const current = new URLSearchParams(search || "").get("session");
        if (!session || current === session) return window.dash_clientside.no_update;
        if (!current && NOT_PER_SESSION.includes(pathname || "/")) return window.dash_clientside.no_update;
        return "?" + new URLSearchParams({ session: session }).toString();
      },
    },
  });
})();
