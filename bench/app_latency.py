"""The dashboard as a person waits for it, measured in headless Chromium on a >= 750 k-event
worker: the first load of every page after a server restart (the on-disk cache warm), by a
browser with nothing cached and by one that has used the dashboard before, from the
navigation's start to the page's last change (``_loaded``), the Timeline's opening, and each
W/A/S/D key on it until its bars are drawn (server time plus browser render) and until
nothing is left in flight (a refinement the browser asked for).

Printed as medians and p95 beside ``BASELINE``: the same measurements on this machine before
the canvas Timeline (commit b25a1b7, Plotly drawing every bar), recorded on 2026-12-02 on a
917 k-event CPU worker, since that code cannot run beside this one in one process.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

#: Before the canvas Timeline (b25a1b7), same machine, 917 k-event worker, seconds.
BASELINE = {
    "timeline open": [4.36, 3.55, 4.10, 3.80, 3.96, 3.38],
    "timeline key → drawn": [3.26, 2.69, 2.94, 1.55, 1.26, 1.21, 1.27, 1.14, 1.32, 1.96, 3.01],
}
#: The issue's targets, seconds.
TARGETS = {"timeline open": 2.0, "timeline key → drawn": 0.2, "first load": 1.5}
#: Who opens the page: a browser with nothing cached, and one that has used the dashboard
#: before (its HTTP cache holds the scripts: Dash's bundles and plotly.js, 5 MB).
VISITORS = ("new browser", "returning browser")
PAGES = ("/pod", "/ops", "/timeline", "/diagnostics", "/workers", "/compare")
GD = "document.querySelector('#tl-graph .js-plotly-plot')"
HOOK = """
window.__pending = 0;
const of = window.fetch;
window.fetch = function (...a) {
  window.__pending++;
  return of.apply(this, a).finally(() => { window.__pending--; });
};
document.addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true);
window.__changedAt = 0;
new MutationObserver(() => { window.__changedAt = performance.now(); })
  .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] if len(samples) >= 2 else samples[0]


class _Server:
    """``podscope serve`` on a free loopback port, in its own process."""

    def __init__(self, logdir: Path, cache: Path, port: int | None = None) -> None:
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        self.port = port
        cmd = [sys.executable, "-m", "podscope", "serve", "--logdir", str(logdir)]
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(self.port), "--cache-dir", str(cache)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            try:
                urllib.request.urlopen(self.base + "/", timeout=5).read()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the dashboard did not start")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _settled(page: Any) -> None:
    """Waits for the state, not a time: nothing in flight and no component updating, twice
    50 ms apart."""
    for _ in range(2):
        page.wait_for_function(
            "window.__pending === 0 && !document.querySelector('[data-dash-is-loading=\"true\"]')",
            timeout=120_000,
        )
        page.wait_for_timeout(50)


#: Every graph on the page plotted: plotly.js and the graph's code load when a graph first
#: mounts, after its callbacks have answered, so "nothing in flight" can come before it.
GRAPHS_DRAWN = """[...document.querySelectorAll('.dash-graph')].every(
  g => { const p = g.querySelector('.js-plotly-plot'); return p && p._fullLayout; })"""


def _loaded(page: Any, path: str) -> float:
    """Seconds from the navigation's start until the page last changed (a node or attribute,
    or the Timeline's canvas drawn), read once it is loaded: what it shows is there (the
    Timeline's bars drawn, which Plotly does after the layout is rendered, so that a quiet
    moment between the two would otherwise pass for the end), nothing in flight, and every
    graph plotted. The page's clock, not the wall's: the quiet
    spells that tell the page is done are the bench's, not what a person waits for."""
    if path.startswith("/timeline"):
        page.wait_for_function(f"{GD}?._podscopeDraws > 0", timeout=120_000)
    _settled(page)
    page.wait_for_function(GRAPHS_DRAWN, timeout=120_000)
    _settled(page)
    return float(page.evaluate(f"Math.max(window.__changedAt, {GD}?._podscopeDrawnAt || 0)")) / 1e3


def _first_load(
    browser: Any, page: Any, logdir: Path, cache: Path, port: int, url: str, visitor: str
) -> float:
    """Seconds until ``url`` is loaded (``_loaded``) as the first page of a restarted server
    (its disk cache warm), in ``page`` (a returning browser) or a new browser context."""
    server = _Server(logdir, cache, port)
    new = visitor.startswith("new")
    context = browser.new_context(viewport={"width": 1600, "height": 1000}) if new else None
    tab = context.new_page() if context else page
    if context:
        tab.add_init_script(HOOK)
    try:
        tab.goto(server.base + url)
        return _loaded(tab, url.split("?")[0])
    finally:
        if context:
            context.close()
        server.stop()


#: The shared samples (../shared/traces/xplane, when present), each a session of its own.
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "xplane"
SAMPLES = {
    "V100 ×8 TF": "gpu_tf_multiworker_v100/34.83.195.179_6003.xplane.pb",
    "TPU": "tpu_xprof/tpu_inference_2.xplane.pb",
    "ROCm JAX": "rocm_jax_tracelens/traces__mi300__jax08_attention__tw003.xplane.pb",
}
MAIN = "bench capture"


def bench_browser(
    capture: Path, keys: str = "wwwwaaddsssdawsadwswdsa", restarts: int = 3
) -> dict[str, Any]:
    """First loads (each page as the first after a restart: ``restarts`` times on
    ``capture``, once on each shared sample), Timeline opening and keys on ``capture`` (one
    worker's XPlane file)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="podscope-bench-app-") as tmp:
        logdir, cache = Path(tmp) / "logdir", Path(tmp) / "cache"
        sources = {s: capture for s in ("2026_01_01_00_00_00", "2026_01_01_00_00_01")}
        sources |= {f"2026_01_02_00_00_0{i}": SHARED / f for i, f in enumerate(SAMPLES.values())}
        for s, source in sources.items():
            if source.exists():
                (logdir / "plugins" / "profile" / s).mkdir(parents=True)
                shutil.copy(source, logdir / "plugins" / "profile" / s / source.name)
        session = "?session=2026_01_01_00_00_01&baseline=2026_01_01_00_00_00"
        queries = {MAIN: (session, restarts)} | {
            name: (f"?session=2026_01_02_00_00_0{i}", 1)
            for i, (name, f) in enumerate(SAMPLES.items())
            if (SHARED / f).exists()
        }
        out: dict[str, Any] = {"first load": {q: {k: {} for k in VISITORS} for q in queries}}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
            server = _Server(logdir, cache)
            port = server.port  # one origin throughout: a returning browser's cache holds
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.add_init_script(HOOK)
            for query, _ in queries.values():  # fills the disk cache (and the browser's)
                for path in PAGES:
                    page.goto(server.base + path + query)
                    _loaded(page, path)
            server.stop()
            for name, (query, times) in queries.items():
                for _ in range(times):  # each page the first one a restarted server shows
                    for path in PAGES:
                        for visitor in VISITORS:
                            took = _first_load(
                                browser, page, logdir, cache, port, path + query, visitor
                            )
                            out["first load"][name][visitor].setdefault(path, []).append(took)
            server = _Server(logdir, cache)
            try:
                url = server.base + "/timeline" + session
                opens = []
                for _ in range(5):
                    t = time.perf_counter()
                    page.goto(url)
                    page.wait_for_function(f"{GD}?._podscopeDraws > 0", timeout=120_000)
                    opens.append(time.perf_counter() - t)
                _settled(page)
                out["events"] = int(page.evaluate(f"{GD}.layout.meta.bars"))
                page.mouse.move(800, 600)
                drawn, settled = [], []
                for key in keys:
                    n = page.evaluate(f"{GD}._podscopeDraws")
                    t = time.perf_counter()
                    page.keyboard.press(key)
                    page.wait_for_function(f"{GD}._podscopeDraws > {n}")
                    drawn.append(page.evaluate(f"{GD}._podscopeDrawnAt - window.__keyAt") / 1e3)
                    _settled(page)
                    settled.append(time.perf_counter() - t)
                out["timeline open"] = opens
                out["timeline key → drawn"] = drawn
                out["timeline key → settled"] = settled
            finally:
                server.stop()
                browser.close()
    return out


def report(r: dict[str, Any], n_events: int) -> None:
    print(f"\n== Dashboard in Chromium, one {n_events:,}-event worker (seconds) ==")
    print(f"{'':26} {'p50':>7} {'p95':>7}   baseline p50/p95    target")
    for key in ("timeline open", "timeline key → drawn", "timeline key → settled"):
        s = r[key]
        base = BASELINE.get(key)
        was = f"{statistics.median(base):7.2f} {_p95(base):7.2f}" if base else " " * 15
        ratio = f"  ({statistics.median(base) / statistics.median(s):.0f}x faster)" if base else ""
        target = TARGETS.get(key)
        print(
            f"{key:26} {statistics.median(s):7.3f} {_p95(s):7.3f}   {was}"
            f"   {'≤ ' + str(target) if target else ''}{ratio}"
        )
    print(
        "first load, each page the first after a restart (disk cache warm), navigation start to"
        " the page's last change, target ≤ 1.5 s:"
    )
    for name, loads in r["first load"].items():
        print(f"  {name:14} " + "".join(f"{v + ' median/max':>32}" for v in VISITORS))
        for path in PAGES:
            cells = []
            for visitor in VISITORS:
                s = loads[visitor][path]
                mid = statistics.median(s)
                ok = "ok" if mid <= TARGETS["first load"] else "OVER"
                cells.append(f"{mid:6.2f}s {max(s):5.2f}s {ok:>4}")
            print(f"    {path:12} " + "".join(f"{c:>32}" for c in cells))
