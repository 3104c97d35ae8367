// The tab's title says the page and the session: "Ops · 2026_01_02_straggler · PodScope".
// Dash's page router sets the title to "PodScope" on every navigation; this adds the rest.
(function () {
  function pageName() {
    for (const a of document.querySelectorAll(".podscope-nav .nav-link")) {
      if (new URL(a.href, location.href).pathname === location.pathname) return a.textContent.trim();
    }
    return "";
  }
  function name() {
    if (document.title.includes(" · ")) return;
    const session = new URLSearchParams(location.search).get("session")
      || (document.querySelector("#shell-session .Select-value-label") || {}).textContent;
    const parts = [pageName(), location.pathname === "/" || location.pathname === "/capture" ? "" : session, "PodScope"];
    const title = parts.filter(Boolean).join(" · ");
    if (title !== document.title) document.title = title; // an equal write would loop the observer
  }
  function watch() {
    const title = document.querySelector("title");
    if (!title) return setTimeout(watch, 100);
    new MutationObserver(name).observe(title, { childList: true, characterData: true, subtree: true });
    name();
  }
  watch();
})();
