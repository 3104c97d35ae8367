"""A big session in the dashboard: analysed per worker on a LocalCluster in the background,
with progress in the page, a Cancel that sticks, and a corrupt worker listed, not fatal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.synth import synth_xspace
from tests.analyzers.test_breakdown import worker_trace
from tests.app.helpers import free_port
from tests.app.test_browser import ARTIFACTS, CHROME_ARGS, CHROMIUM, settle

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.slow]


def make_logdir(root: Path) -> Path:
    small = root / "plugins" / "profile" / "2026_02_01_big"
    small.mkdir(parents=True)
    for i in range(4):
        w = f"10.0.0.{i}_6000"
        (small / f"{w}.xplane.pb").write_bytes(worker_trace(w, 10, input_us=20 * i))
    (small / "10.0.0.9_6000.xplane.pb").write_bytes(b"\x0a\x05trunc")
    slow = root / "plugins" / "profile" / "2026_02_02_slow"
    slow.mkdir(parents=True)
    data = synth_xspace(2000)
    for i in range(24):
        (slow / f"10.0.1.{i}_6000.xplane.pb").write_bytes(data)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make test installs it)")
    pytest.importorskip("playwright")
    pytest.importorskip("distributed")
    root = make_logdir(tmp_path_factory.mktemp("logdir"))
    port = free_port()
    env = {
        **os.environ,
        "PODSCOPE_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
        "PODSCOPE_DASK_PROCESSES": "2",
    }
    cmd = [sys.executable, "-m", "podscope", "serve", "--logdir", str(root), "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--cluster-min-files", "3"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def page(server):  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        context = b.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        pg.errors = []
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        yield pg
        b.close()


# what the page went through, noted in the page as it happens (the progress can show for less
# than a second when the workers are quick, too briefly to be waited for from here): the layout
# requests (Dash posts them with fetch), their count when the progress first showed, and the
# page's loads in this tab (a reload would count two)
PROGRESS_SEEN = """
sessionStorage.podscopeLoads = String(Number(sessionStorage.podscopeLoads || 0) + 1);
window.podscopeRenders = 0;
window.podscopeRendersAtProgress = null;
const podscopeFetch = window.fetch;
window.fetch = function (url, opts) {
  if (opts && typeof opts.body === "string" && opts.body.includes("_pages_content")) {
    window.podscopeRenders += 1;
  }
  return podscopeFetch.apply(this, arguments);
};
new MutationObserver(() => {
  if (window.podscopeRendersAtProgress === null &&
      (document.body?.textContent || "").includes("Analysing the 5 workers of 2026_02_01_big")) {
    window.podscopeRendersAtProgress = window.podscopeRenders;
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_a_big_session_shows_progress_then_the_pod_viewer(page, server) -> None:  # type: ignore[no-untyped-def]
    # requests for the page's layout (Dash pages' router), counted from the start
    renders: list[str] = []
    page.on(
        "request",
        lambda r: renders.append(r.url) if "_pages_content" in (r.post_data or "") else None,
    )
    page.add_init_script(PROGRESS_SEEN)
    page.goto(server + "/pod?session=2026_02_01_big")
    # the page renders itself again when the workers are done, in place (no reload), once; on
    # CI's busy cores the first render once took over 20 s (the page, its scripts and the Dask
    # workers' start share 2 cores with the other tests)
    page.locator("#pod-badges").wait_for(timeout=120_000)
    settle(page)
    page.wait_for_timeout(1500)  # no more renders come (progress ticks asked for one each)
    # the first render said the analysis started
    assert page.evaluate("window.podscopeRendersAtProgress") == 1, renders
    assert page.evaluate("sessionStorage.podscopeLoads") == "1"
    assert len(renders) == 2, renders
    assert "4 workers" in page.inner_text("#pod-badges")
    notes = page.inner_text("#pod-notes")
    assert "left out: 10.0.0.9_6000" in notes
    page.goto(server + "/ops?session=2026_02_01_big")  # the other pages use the same analysis
    settle(page)
    page.locator("#ops-table .ag-row").first.wait_for(timeout=20_000)
    assert page.errors == []


def test_cancel_stops_the_analysis_and_says_so(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_02_02_slow")
    page.get_by_text("Analysing the 24 workers of 2026_02_02_slow").wait_for(timeout=20_000)
    page.click("#prep-cancel")
    page.get_by_text("Cancelling").wait_for(timeout=5_000)
    # after the running tasks finish, the page renders again and says why there is nothing
    page.get_by_text("analysis of 2026_02_02_slow cancelled").wait_for(timeout=120_000)
    page.wait_for_timeout(2000)
    assert page.get_by_text("analysis of 2026_02_02_slow cancelled").is_visible()  # it stays
    page.screenshot(path=str(ARTIFACTS / "big_session_cancelled.png"), full_page=True)
