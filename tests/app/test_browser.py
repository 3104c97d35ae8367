"""The dashboard in a real browser (headless Debian Chromium driven by Playwright).

Screenshots of every page are saved in build/artifacts/ as test artifacts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs_version

from podscope.app.main import plotly_bundle_fits
from podscope.trace_parsers import layout
from tests.analyzers.test_breakdown import worker_trace
from tests.analyzers.test_ops import gpu_space
from tests.analyzers.test_why_slow import sync_worker
from tests.android.test_tflite import line, trace
from tests.app.helpers import free_port, get_when_up
from tests.conftest import SHARED_TRACES
from tests.xspace_builder import SpaceBuilder

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "artifacts"
CHROME_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


V100 = SHARED_TRACES / "xplane" / "gpu_tf_multiworker_v100" / "34.83.195.179_6003.xplane.pb"
V100_SESSION = "2025_12_31_v100"
CULPRIT_SESSION = "2025_12_30_culprit"
MANY_OPS_SESSION = "2025_12_29_many_ops"
#: The many-ops session's ops: more than the op table's blocks of 100 rows.
MANY_OPS = 260


def many_ops_trace() -> bytes:
    """One worker, 3 steps, ``MANY_OPS`` ops each of its own cost (op i: 1 + i µs per step)."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, ops = host.line(1, "python"), host.line(2, "tf_Compute")
    step_us = 40_000
    for step in range(3):
        t0 = step * step_us * 1_000_000
        host.event(py, "train", t0, (step_us - 100) * 1_000_000, step_num=step, _r=1)
        t = t0
        for i in range(MANY_OPS):
            kind = ("MatMul", "Conv2D", "Relu")[i % 3]
            host.event(ops, f"layer_{i:03d}/{kind}:{kind}", t, (1 + i) * 1_000_000)
            t += (2 + i) * 1_000_000
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def make_logdir(root: Path) -> Path:
    for session, late in (("2026_01_01_00_00_00", None), ("2026_01_02_00_00_00", "10.0.0.2_6000")):
        run = root / "plugins" / "profile" / session
        run.mkdir(parents=True)
        for w in ("10.0.0.1_6000", "10.0.0.2_6000"):
            (run / f"{w}.xplane.pb").write_bytes(
                worker_trace(w, 30, input_us=200 if w == late else 50)
            )
    gpu = root / "plugins" / "profile" / "2026_01_03_gpu"
    gpu.mkdir(parents=True)
    (gpu / "10.0.0.9_6000.xplane.pb").write_bytes(gpu_space())
    if V100.exists():  # the public 8× V100 capture (older name: not the default session)
        real = root / "plugins" / "profile" / V100_SESSION
        real.mkdir(parents=True)
        shutil.copy(V100, real / V100.name)
    python = root / "plugins" / "profile" / "2026_01_06_python"
    python.mkdir(parents=True)
    for w, kw in (("10.0.0.1_6000", {}), ("10.0.0.4_6000", {"python_only": True})):
        (python / f"{w}.xplane.pb").write_bytes(worker_trace(w, 10, **kw))  # type: ignore[arg-type]
    one = root / "plugins" / "profile" / "2026_01_07_one_worker"
    one.mkdir(parents=True)
    (one / "10.0.0.1_6000.xplane.pb").write_bytes(worker_trace("10.0.0.1_6000", 10))
    many = root / "plugins" / "profile" / MANY_OPS_SESSION  # older: not the default session
    many.mkdir(parents=True)
    (many / "10.0.0.1_6000.xplane.pb").write_bytes(many_ops_trace())
    # older than the others (not the default session): w_3 starts every step 400 µs late
    culprit = root / "plugins" / "profile" / CULPRIT_SESSION
    culprit.mkdir(parents=True)
    for w, late in (("w_1", 0), ("w_2", 0), ("w_3", 400)):
        (culprit / f"{w}.xplane.pb").write_bytes(sync_worker(late_us=late))
    # captured: the manifest names each worker's task (w_3 is worker:2 of the job)
    layout.write_manifest(
        culprit,
        CULPRIT_SESSION,
        0,
        {},
        [
            {"label": f"w_{i + 1}", "address": f"10.0.0.{i + 1}:6000", "status": "ok"}
            | {"role": "worker", "index": i}
            for i in range(3)
        ],
    )
    phone = root / "plugins" / "profile" / "2026_01_04_phone"
    phone.mkdir(parents=True)
    (phone / "pixel.systrace").write_bytes(tflite_trace())
    return root


def tflite_trace() -> bytes:
    rows = [line(0, "B|2000|runInference")]
    for i in range(5):
        t = 100 + i * 1000
        rows += [
            line(t, "B|2000|invoke@-1/0"),
            line(t + 5, "B|2000|CONV_2D@0/0"),
            line(t + 300, "E|2000"),
            line(t + 305, "B|2000|SOFTMAX@1/0"),
            line(t + 400, "E|2000"),
            line(t + 410, "E|2000"),
        ]
    sched = "  <idle>-0 [001] d..3 0.000050: sched_switch: prev_comm=swapper prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=infer next_pid=2001 next_prio=120\n"
    return trace(*rows, line(6000, "E|2000")) + sched.encode()


@contextmanager
def serving(root: Path, cache: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``podscope serve`` of ``root`` on a free loopback port (``env`` added to the
    environment); yields its base URL."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make test installs it)")
    pytest.importorskip("playwright")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "podscope",
        "serve",
        "--logdir",
        str(root),
        "--port",
        str(port),
    ]
    err = cache.parent / f"serve-{port}.err"  # a file: a full pipe would stop the server
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*command, "--max-upload-mb", "5"],
            env={**os.environ, "PODSCOPE_CACHE_DIR": str(cache), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        get_when_up(base + "/healthz", proc, err)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = make_logdir(tmp_path_factory.mktemp("logdir"))
    with serving(root, tmp_path_factory.mktemp("cache")) as base:
        yield base


@pytest.fixture
def page(browser, server):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.requests = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    yield pg
    context.close()


#: Dash idle for ``QUIET_FRAMES`` frames in a row: no callback requested, running or waiting
#: (its store's ``isLoading``) and no component marked as updating. One idle frame is not
#: enough: a callback's output can start another one a frame or two later (a URL written by
#: a control, then the page drawn from it), and that gap once passed for the end.
DASH_QUIET = """() => {
  const s = (window.dash_stores || []).at(-1)?.getState();
  const idle = !!s && !s.isLoading && !!document.querySelector('#_pages_content') &&
    !document.querySelector('[data-dash-is-loading="true"]');
  window.__podscopeQuiet = idle ? (window.__podscopeQuiet || 0) + 1 : 0;
  return window.__podscopeQuiet >= QUIET_FRAMES;
}"""
QUIET_FRAMES = 5


#: What Dash is still doing (for a settle that times out): its callback queues, and the
#: components marked as updating.
DASH_BUSY = """() => {
  const s = (window.dash_stores || []).at(-1)?.getState();
  if (!s) return 'no Dash store';
  const c = s.callbacks, out = cb => cb.callback.output;
  return JSON.stringify({isLoading: s.isLoading,
    queues: Object.fromEntries(Object.entries(c).filter(([, v]) => Array.isArray(v) && v.length)
      .map(([k, v]) => [k, v.map(out)])),
    updating: [...document.querySelectorAll('[data-dash-is-loading="true"]')].map(e => e.id)});
}"""


def settle(pg) -> None:  # type: ignore[no-untyped-def]
    """Waits until the page is loaded and Dash has stayed idle (``DASH_QUIET``)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    pg.wait_for_load_state("networkidle")
    pg.evaluate("window.__podscopeQuiet = 0")
    try:
        pg.wait_for_function(DASH_QUIET.replace("QUIET_FRAMES", str(QUIET_FRAMES)), polling="raf")
    except PlaywrightTimeout as e:
        raise AssertionError(f"Dash never settled: {pg.evaluate(DASH_BUSY)}") from e


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/pod",
        "/ops",
        "/timeline",
        "/timeline?session=2026_01_03_gpu&q=MatMul",
        "/timeline?session=2026_01_04_phone",
        # not ASCII digits ("²".isdigit() is True, int("²") raises): ignored, no HTTP 500
        "/pod?session=2026_01_01_00_00_00&step=%C2%B2",
        "/timeline?session=2026_01_01_00_00_00&step=%C2%B2",
        "/android?session=2026_01_04_phone&invoke=%C2%B2",
        "/capture",
        "/ops?session=2026_01_03_gpu&by=kernel",
        "/diagnostics",
        "/diagnostics?session=2026_01_03_gpu",
        "/android?session=2026_01_04_phone",
        "/compare?session=2026_01_02_00_00_00",
    ],
)
def test_every_page_loads_without_console_errors(page, server, path: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + path)
    settle(page)
    # every graph plotted, by the dashboard's own plotly.js build: Dash's full one (4.8 MB,
    # half a second of every first load) is never fetched
    page.wait_for_function(
        "[...document.querySelectorAll('.dash-graph')].every("
        "g => { const p = g.querySelector('.js-plotly-plot'); return p && p._fullLayout; })"
    )
    full = [u for u in page.requests if urlparse(u).path.endswith("/plotly.min.js")]
    assert not full or not plotly_bundle_fits()
    major = page.evaluate("window.Plotly.version").split(".")[0]
    assert major == get_plotlyjs_version().split(".")[0]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", path) or "_"
    page.screenshot(path=str(ARTIFACTS / f"page{name}.png"), full_page=True)
    assert page.errors == []
    assert "PodScope" in page.title()


def test_compare_shows_what_changed_between_two_sessions(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/compare?session=2026_01_02_00_00_00&baseline=2026_01_01_00_00_00")
    settle(page)
    page.get_by_text("Ops by change in self time").wait_for(timeout=10_000)
    # one of two workers waits 200 µs for input instead of 50: the mean input per step +150 %
    row = page.locator("tr", has_text="input")
    assert "+150.0%" in row.inner_text()
    with page.expect_download() as dl:
        page.click("#cmp-csv")
    header = Path(dl.value.path()).read_text().splitlines()[0]
    assert header.startswith("op_type,op_name,base_us,new_us,delta,change")
    with page.expect_download() as dl:
        page.click("#cmp-parquet")
    assert dl.value.suggested_filename.endswith(".parquet")
    assert list(pd.read_parquet(dl.value.path()).columns)[:3] == ["op_type", "op_name", "base_us"]
    assert page.errors == []


def test_compare_proposes_the_previous_session_of_its_kind_and_never_swaps(page, server) -> None:  # type: ignore[no-untyped-def]
    # the newest session is an Android upload: never the baseline of a TensorFlow capture
    page.goto(server + "/compare?session=2026_01_02_00_00_00")
    settle(page)
    assert "2026_01_01_00_00_00" in page.inner_text("#cmp-baseline")
    assert "the session before this one" in page.inner_text("#cmp-why")
    assert "+150.0%" in page.locator("tr", has_text="input").inner_text()
    # a link whose baseline is the session itself says so, and shows no comparison
    page.goto(server + "/compare?session=2026_01_02_00_00_00&baseline=2026_01_02_00_00_00")
    settle(page)
    assert "is the session itself" in page.inner_text("#cmp-body")
    assert page.get_by_text("Ops by change in self time").count() == 0
    assert "baseline=2026_01_02_00_00_00" in page.url  # the URL is what the page shows
    # picking a baseline puts it in the URL, and the comparison stays
    page.click("#cmp-baseline")
    page.get_by_text("2026_01_01_00_00_00", exact=True).click()
    page.wait_for_url("**baseline=2026_01_01_00_00_00**")
    settle(page)
    page.get_by_text("Ops by change in self time").wait_for(timeout=10_000)
    page.reload()
    settle(page)
    assert "+150.0%" in page.locator("tr", has_text="input").inner_text()
    # the oldest capture has no earlier one of its kind: nothing is proposed
    page.goto(server + "/compare?session=2026_01_01_00_00_00")
    settle(page)
    assert "No earlier xplane session" in page.inner_text("#cmp-body")
    page.click("#cmp-baseline")  # a person picks one, and the comparison is there to download
    page.get_by_text("2026_01_02_00_00_00", exact=True).click()
    page.wait_for_url("**baseline=2026_01_02_00_00_00**")
    settle(page)
    page.get_by_text("Ops by change in self time").wait_for(timeout=10_000)
    with page.expect_download() as dl:
        page.click("#cmp-csv")
    assert Path(dl.value.path()).read_text().startswith("op_type,op_name,base_us")
    assert page.errors == []


def test_a_cpu_capture_offers_no_gpu_kernel_table(page, server) -> None:  # type: ignore[no-untyped-def]
    """No GPU ran: the table choices are the op tables only, and a link asking for the
    kernel table shows the op table (it showed an empty kernel table)."""
    page.goto(server + "/ops?session=2026_01_01_00_00_00&by=kernel")
    settle(page)
    assert page.locator("#ops-by label").all_inner_texts() == ["per op", "per op type"]
    assert page.locator("#ops-by input:checked").get_attribute("value") == "op"
    page.locator("#ops-table .ag-row").first.wait_for(timeout=10_000)
    assert page.errors == []


def test_picking_a_session_updates_the_page(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_01_01_00_00_00")
    settle(page)
    assert "Session 2026_01_01_00_00_00" in page.inner_text("#pod-badges")
    page.click("#shell-session")
    page.get_by_text("2026_01_02_00_00_00", exact=True).click()
    page.wait_for_function(
        "document.querySelector('#pod-badges')?.innerText.includes('2026_01_02_00_00_00')"
    )
    assert "session=2026_01_02_00_00_00" in page.url


#: Dash's callback requests.
CALLBACKS = re.compile(r"/_dash-update-component")


def hold_answers(page, output: str) -> list[object]:  # type: ignore[no-untyped-def]
    """Holds the page's callback requests whose outputs include ``output`` (their routes, in
    the order sent, for the test to let go); the others pass. ``page.unroute(CALLBACKS)``
    ends it."""
    held: list[object] = []

    def hold(route) -> None:  # type: ignore[no-untyped-def]
        body = route.request.post_data or ""
        (held.append(route) if output in body else route.continue_())

    page.route(CALLBACKS, hold)
    return held


def test_a_session_picked_while_a_control_is_answered_opens(page, server) -> None:  # type: ignore[no-untyped-def]
    """A session picked while the server answers a control's change (both write the URL):
    the picked session opens, the navbar's links carry it, and Dash settles (nothing left
    waiting)."""
    page.goto(server + "/timeline?session=2026_01_01_00_00_00")
    settle(page)
    held = hold_answers(page, "shell-url.search@")
    page.fill("#tl-search", "MatMul")
    page.keyboard.press("Enter")
    deadline = time.monotonic() + 60
    while not held:  # the search's URL on its way
        assert time.monotonic() < deadline
        page.wait_for_timeout(50)
    page.click("#shell-session")
    page.get_by_text("2026_01_02_00_00_00", exact=True).click()
    for route in held:
        route.continue_()  # type: ignore[attr-defined]
    page.unroute(CALLBACKS)
    page.wait_for_function("location.search.includes('session=2026_01_02_00_00_00')")
    settle(page)
    assert "2026_01_02_00_00_00" in page.inner_text("#shell-session")
    nav = page.locator(".podscope-nav a[href*='session=']").first.get_attribute("href") or ""
    assert "session=2026_01_02_00_00_00" in nav, nav
    assert page.errors == []


def test_step_slider_changes_the_bars(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_01_01_00_00_00&step=0")
    settle(page)
    title = page.locator("#pod-bars .gtitle")
    assert (title.text_content() or "").startswith("Step 0")
    page.locator("#pod-step [role=slider]").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 1')"
    )
    page.screenshot(path=str(ARTIFACTS / "pod_step1.png"), full_page=True)


def test_csv_download(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_01_01_00_00_00")
    settle(page)
    with page.expect_download() as dl:
        page.click("#pod-csv")
    text = Path(dl.value.path()).read_text()
    assert text.splitlines()[0].startswith("worker,device,step,step_num")
    assert len(text.splitlines()) == 1 + 2 * 28  # 30 steps, the partial first and last left out


GD = "document.querySelector('#tl-graph .js-plotly-plot')"


#: The Timeline's bars are on its canvas (assets/timeline_canvas.js): drawn at least once.
TL_DRAWN = f"{GD}?._podscopeDraws > 0"


def drag_across(page, a: float, b: float) -> tuple[dict[str, float], float]:  # type: ignore[no-untyped-def]
    """Drags across the Timeline's plot at mid-height from ``a`` to ``b`` (shares of its
    width), as a person zooms with the mouse; the plot's box and the height dragged at."""
    box = page.locator("#tl-graph .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * a, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * b, y, steps=5)
    page.mouse.up()
    return box, y


def x_range(page) -> list[float]:  # type: ignore[no-untyped-def]
    return [float(v) for v in page.evaluate(f"{GD}.layout.xaxis.range")]


def bar_on_page(page, hit: bool = False) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Where the widest bar drawn on the Timeline's canvas is (its centre, page pixels), of the
    search hits with ``hit``; the test clicks there, as a person clicks what they see."""
    bar = page.evaluate("h => window.podscopeTimeline.barOnPage(b => !h || b.hit)", hit)
    assert bar, "no bar drawn"
    return dict(bar)


def wait_range(page, before: list[float]) -> list[float]:  # type: ignore[no-untyped-def]
    """Waits until the server has redrawn with another window, then 2 s more, and returns the
    window that stays (a snap-back would show here)."""
    page.wait_for_function(
        f"b => {{ const r = {GD}?.layout?.xaxis?.range; return r && "
        "(Math.abs(r[0] - b[0]) > 1e-9 || Math.abs(r[1] - b[1]) > 1e-9) }",
        arg=before,
    )
    settle(page)
    page.wait_for_timeout(2000)
    return x_range(page)


def test_zooms_keys_and_hovers_while_bars_are_on_their_way_leave_the_users_window(
    page, server
) -> None:  # type: ignore[no-untyped-def]
    """Zooms, keys and a hover faster than the server answers (its answers held, then let go in the
    reverse order, as a busy server's threads can answer): nothing fails, and once the answers
    are in, the chart stays at the window the user last put it at, the URL's, with bars for it."""
    page.goto(server + "/timeline?session=2026_01_01_00_00_00")
    settle(page)
    page.wait_for_function(TL_DRAWN)
    full = x_range(page)
    held = hold_answers(page, "tl-graph.figure")
    box, y = drag_across(page, 0.10, 0.12)  # deep: finer bars asked for
    page.wait_for_function(f"b => {GD}.layout.xaxis.range[0] !== b[0]", arg=full)
    page.locator("body").click(position={"x": 5, "y": 5})
    for key in "sssdsssa":  # back out past the bars it has, each key a new window
        page.keyboard.press(key)
    # a hover (a click this soon after the drag would be Plotly's double click)
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    last = x_range(page)  # (Plotly sets the range as it takes the key)
    deadline = time.monotonic() + 60
    while len(held) < 2:  # asks for windows the user has left, their answers to come
        assert time.monotonic() < deadline, len(held)
        page.wait_for_timeout(50)  # Playwright hands over the routed requests meanwhile
    for route in reversed(held):
        route.continue_()  # type: ignore[attr-defined]
    page.unroute(CALLBACKS)
    page.wait_for_function(  # the answer for the last window is in
        f"r => {GD}.layout.uirevision.split(':').length === 2 && "
        f"Math.abs({GD}.layout.xaxis.range[0] - r[0]) < 1e-6",
        arg=last,
    )
    settle(page)
    page.wait_for_timeout(2000)  # what stays once every answer is in
    shown = x_range(page)
    assert all(abs(p - q) < 1e-6 for p, q in zip(shown, last, strict=True)), (shown, last)
    base = int(page.evaluate(f"{GD}.layout.meta.base_ns"))
    t0, t1 = (int(re.search(rf"{k}=(\d+)", page.url).group(1)) for k in ("t0", "t1"))  # type: ignore[union-attr]
    assert abs((t0 - base) / 1e6 - last[0]) < 1e-5 and abs((t1 - base) / 1e6 - last[1]) < 1e-5
    fetched = page.evaluate(f"{GD}.layout.meta.tl.fetched")
    assert fetched[0] <= last[0] and last[1] <= fetched[1]  # bars for the window shown
    before = x_range(page)
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("w")
    page.wait_for_function(f"b => {GD}.layout.xaxis.range[0] !== b[0]", arg=before)
    assert page.errors == []


def test_timeline_zoom_and_keys_stay_where_the_user_put_them(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/timeline?session=2026_01_01_00_00_00")
    settle(page)
    page.wait_for_function(TL_DRAWN)
    full = x_range(page)
    assert full[1] - full[0] > 25  # a 30-step session of about 1 ms steps
    # short track labels: worker › thread, no plane paths or long ids
    ticks = page.locator("#tl-graph .ytick text").all_text_contents()
    assert ticks and all(t.startswith("10.0.0.1_6000 › ") for t in ticks), ticks
    assert not any("/" in t.split(" › ", 1)[1] for t in ticks)
    # drag a zoom over 2 % of the width: it stays 2 s later
    box, y = drag_across(page, 0.10, 0.12)
    zoomed = wait_range(page, full)
    width = zoomed[1] - zoomed[0]
    assert width < 0.05 * (full[1] - full[0])
    assert "window" in page.inner_text("#tl-stats")
    page.wait_for_function(f"{GD}._podscopeLabels > 0")  # names drawn on the bars that fit
    page.screenshot(path=str(ARTIFACTS / "timeline_zoomed.png"), full_page=True)
    # W zooms in around the middle, D pans right, S zooms out, A pans left; each stays
    page.locator("body").click(position={"x": 5, "y": 5})
    sent = page.evaluate(f"{GD}.layout.uirevision")  # the window the server drew bars for
    page.keyboard.press("w")
    w = wait_range(page, zoomed)
    assert abs((w[1] - w[0]) - 0.6 * width) < 0.01 * width
    assert abs((w[0] + w[1]) - (zoomed[0] + zoomed[1])) < 0.01 * width
    # redrawn in the browser from the bars it had: the server was not asked
    assert page.evaluate(f"{GD}.layout.uirevision") == sent
    assert re.search(r"t0=\d+&t1=\d+", page.url)  # the URL has the window shown
    page.keyboard.press("d")
    d = wait_range(page, w)
    assert d[0] > w[0] and abs((d[1] - d[0]) - (w[1] - w[0])) < 0.01 * width
    page.keyboard.press("s")
    s_ = wait_range(page, d)
    assert (s_[1] - s_[0]) > (d[1] - d[0]) * 1.5
    page.keyboard.press("a")
    a = wait_range(page, s_)
    assert a[0] < s_[0]
    # search: hits drawn yellow, the count in the status line; the window does not move
    page.fill("#tl-search", "MatMul")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('#tl-stats')?.innerText.includes('match')")
    page.wait_for_function(f"{GD}?.layout?.meta?.tl?.hit?.includes(1)")  # the chart drawn
    settle(page)
    hits = page.evaluate(f"{GD}.layout.meta.tl.hit")
    assert 1 in hits and 0 in hits  # hits in yellow, the others dimmed
    assert all(abs(p - q) < 1e-6 for p, q in zip(x_range(page), a, strict=True)), (
        x_range(page),
        a,
        page.url,
    )
    # a click on an event: its details with units
    bar = bar_on_page(page, hit=True)
    page.mouse.move(bar["x"], bar["y"])  # its card on hover
    page.wait_for_function("document.querySelector('.podscope-tl-tip')?.style.display === 'block'")
    assert "MatMul" in page.inner_text(".podscope-tl-tip")
    page.mouse.click(bar["x"], bar["y"])  # a real click on a yellow bar
    page.wait_for_function("document.querySelector('#tl-details')?.innerText.includes('duration')")
    details = page.inner_text("#tl-details")
    assert re.search(r"duration\s+[\d.]+ (ns|µs|ms)", details), details
    assert "dur_ps" not in details and "MatMul" in details
    at = re.search(r"starts at\s+([\d,.]+) ms", details)  # where the bar is on the axis
    assert at and abs(float(at.group(1).replace(",", "")) - bar["start"]) < 2e-3, (details, bar)
    # double click: the whole capture again
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)
    back = wait_range(page, a)
    assert abs(back[0] - full[0]) < 1e-6 and abs(back[1] - full[1]) < 1e-6
    assert page.errors == []


def test_timeline_goes_to_a_step_and_marks_it(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/timeline?session=2026_01_01_00_00_00&step=3")
    settle(page)
    page.wait_for_function(f"{GD}?.layout?.shapes?.some(s => s.type === 'rect')")
    full = x_range(page)
    page.locator("#tl-step").click()
    page.get_by_text("step 7", exact=True).click()
    step7 = wait_range(page, full)
    assert step7[1] - step7[0] < 3  # about one 1 ms step and its margins
    rects = page.evaluate(f"{GD}.layout.shapes.filter(s => s.type === 'rect')")
    assert len(rects) == 1 and step7[0] < rects[0]["x0"] < rects[0]["x1"] < step7[1]
    # a second worker: its own rows, its own step marks
    page.locator("#tl-worker").click()
    page.get_by_text("10.0.0.2_6000", exact=True).last.click()
    # the page is drawn again from the URL: wait for the new chart, not the old one
    page.wait_for_url(re.compile(r"worker=10\.0\.0\.1_6000%2C10\.0\.0\.2_6000"))
    settle(page)
    page.wait_for_function(f"{GD}?.layout?.shapes?.filter(s => s.type === 'rect').length === 2")
    page.wait_for_function(
        "[...document.querySelectorAll('#tl-graph .ytick text')].some(t => "
        "t.textContent.startsWith('10.0.0.2_6000'))"
    )
    ticks = page.locator("#tl-graph .ytick text").all_text_contents()
    assert {t.split(" › ")[0] for t in ticks} == {"10.0.0.1_6000", "10.0.0.2_6000"}
    assert x_range(page) == step7  # choosing workers keeps the window
    # collapse the CPU plane: no rows left
    page.get_by_label("CPU").uncheck()
    page.wait_for_function(f"{GD}?.layout?.meta?.rows === 0")
    page.wait_for_timeout(1000)
    assert page.evaluate(f"{GD}.layout.meta.rows") == 0
    assert page.errors == []


def test_corrupt_upload_shows_an_error_and_the_app_keeps_serving(
    page, server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "broken.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\x01 not a trace")
    page.goto(server + "/")
    settle(page)
    page.set_input_files("#sessions-upload input[type=file]", str(bad))
    page.wait_for_selector("text=Not a readable trace")
    assert "broken.xplane.pb" in page.inner_text("#sessions-upload-result")
    assert urllib.request.urlopen(server + "/healthz", timeout=5).status == 200


@pytest.mark.parametrize("session", ["..", "../../etc", "%2Fetc"])
def test_session_outside_the_logdir_is_refused(page, server, session: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + f"/pod?session={session}")
    settle(page)
    text = page.inner_text("body")
    assert "not a session name" in text or "outside the logdir" in text


def test_upload_of_an_android_trace_becomes_a_session(page, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "phone.systrace"
    good.write_bytes(tflite_trace())
    page.goto(server + "/")
    settle(page)
    page.set_input_files("#sessions-upload input[type=file]", str(good))
    page.wait_for_selector("text=1 worker(s)")
    link = page.locator("#sessions-upload-result a").first
    session = link.inner_text()
    page.goto(server + f"/android?session={session}")
    settle(page)
    assert "5 invokes" in page.inner_text("body")
    assert page.errors == []
    page.screenshot(path=str(ARTIFACTS / "android_uploaded.png"), full_page=True)


@pytest.mark.parametrize("path", ["/pod", "/ops", "/diagnostics"])
def test_gpu_pages_put_busy_gpus_first_and_collapse_idle_ones(page, server, path: str) -> None:  # type: ignore[no-untyped-def]
    if not V100.exists():
        pytest.skip(f"public trace samples not present: {V100}")
    page.goto(f"{server}{path}?session={V100_SESSION}")
    settle(page)
    devices = page.locator("#devices")
    devices.wait_for(timeout=30_000)
    text = devices.inner_text()
    # GPU:6 and GPU:4 ran the step (GPU:6 a little longer); GPU:1 only copied 19 buffers,
    # outside the step: idle in the steps (one rule of busy), its work said; five ran nothing
    assert text.startswith("2 busy"), text
    assert text.index(
        "GPU:6 · 15.050 ms busy (1.6 %) · 14.865 ms compute/step · 1/1 step"
    ) < text.index("GPU:4 · 14.984 ms busy")
    assert "6 idle (no work on the device in any step" in text
    idle = devices.locator("li")
    assert not idle.first.is_visible()  # collapsed until asked for
    devices.locator("summary").click()
    page.wait_for_timeout(1000)  # still open a second later, not a transient state
    assert idle.first.is_visible()
    assert idle.all_inner_texts() == [
        "GPU:1 (19 events, 34 µs, outside the steps)",
        *(f"GPU:{i}" for i in (0, 2, 3, 5, 7)),
    ]
    if path == "/pod":
        rows = page.locator("#pod-table .ag-center-cols-container .ag-row")
        rows.first.wait_for()
        cells = page.locator("#pod-table .ag-center-cols-container [col-id=device]")
        assert cells.all_inner_texts() == ["/device:GPU:6", "/device:GPU:4"]  # no idle GPU row
        assert "1 step ·" in page.inner_text("#pod-badges")  # not "1 steps"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"v100{path.replace('/', '_')}.png"), full_page=True)
    assert page.errors == []


@pytest.mark.parametrize("how", ["click", "url"])
def test_ops_per_op_type_shows_the_type_table(page, server, how: str) -> None:  # type: ignore[no-untyped-def]
    if how == "url":
        page.goto(server + "/ops?session=2026_01_01_00_00_00&by=type")
    else:
        page.goto(server + "/ops?session=2026_01_01_00_00_00")
        settle(page)
        page.locator("#ops-table .ag-row").first.wait_for(timeout=20_000)
        page.get_by_label("per op type").check()
    page.wait_for_function(
        "document.querySelector('#ops-table .ag-header-cell[col-id=op_type]') && "
        "!document.querySelector('#ops-table .ag-header-cell[col-id=op_name]')",
        timeout=20_000,
    )
    page.wait_for_timeout(1500)  # what stays, not a transient state
    types = page.locator("#ops-table .ag-row [col-id=op_type]").all_inner_texts()
    assert {"MatMul", "CollectiveReduceV2"} <= set(types)
    assert page.get_by_label("per op type").is_checked()
    assert page.errors == []


def grid_shows(page, grid: str, column: str, first: str, rows: str) -> None:  # type: ignore[no-untyped-def]
    """Waits until the paged grid ``grid`` (its id) shows ``first`` in its first row's pinned
    ``column`` and ``rows`` in its paging summary (``1 to 25 of 300``), and checks that it
    still does a second later (what stays, not a transient state)."""
    names = f"#{grid} .ag-pinned-left-cols-container [col-id={column}]"
    summary = f"#{grid} .ag-paging-row-summary-panel"
    page.wait_for_function(
        f"document.querySelector('{names}')?.innerText === '{first}' && "
        f"document.querySelector('{summary}')?.innerText.replace(/\\s+/g, ' ').trim() "
        f"=== '{rows}'",
        timeout=30_000,
    )
    page.wait_for_timeout(1000)
    assert page.locator(names).first.inner_text() == first


def test_ops_table_sorts_filters_and_pages_on_the_server(page, server) -> None:  # type: ignore[no-untyped-def]
    """The op table comes a block of rows at a time; its sort, its column filter, the filter
    box and its pages apply to every row of the table, not to the rows in the browser."""
    blocks: list[int] = []

    def count_rows(response) -> None:  # type: ignore[no-untyped-def]
        if "_dash-update-component" in response.url and b"rowData" in response.body():
            blocks.append(response.body().count(b'"op_name"'))

    page.on("response", count_rows)
    page.goto(server + f"/ops?session={MANY_OPS_SESSION}")
    settle(page)

    def shows(first: str, rows: str) -> None:
        grid_shows(page, "ops-table", "op_name", first, rows)

    kinds = ("MatMul", "Conv2D", "Relu")
    top = MANY_OPS - 1
    shows(f"layer_{top}/{kinds[top % 3]}", f"1 to 25 of {MANY_OPS}")  # most expensive first
    assert blocks and max(blocks) <= 100  # blocks, never the whole table
    page.locator("#ops-table .ag-header-cell[col-id=self_ms]").click()  # ascending
    shows("layer_000/MatMul", f"1 to 25 of {MANY_OPS}")
    page.locator("#ops-table .ag-paging-button[aria-label='Last Page']").click()
    shows(f"layer_250/{kinds[250 % 3]}", f"251 to {MANY_OPS} of {MANY_OPS}")
    # a column filter: the type column's filter, as its header button opens it
    page.locator("#ops-table .ag-header-cell[col-id=op_type] .ag-header-cell-filter-button").click()
    page.locator(".ag-filter-body input").first.fill("conv")
    convs = len(range(1, MANY_OPS, 3))
    shows("layer_001/Conv2D", f"1 to 25 of {convs}")  # still ascending, first page again
    page.keyboard.press("Escape")
    # the filter box: into the URL, and every row of the table searched
    page.fill("#ops-filter", "relu")
    page.press("#ops-filter", "Enter")
    page.wait_for_url(re.compile(r"q=relu"))
    settle(page)
    shows("layer_257/Relu", f"1 to 25 of {len(range(2, MANY_OPS, 3))}")  # drawn anew: by cost
    assert page.errors == []


def test_navbar_links_keep_the_session(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_01_01_00_00_00")
    settle(page)
    page.locator(".podscope-nav a", has_text="Ops").click()
    page.wait_for_url("**/ops?session=2026_01_01_00_00_00", timeout=10_000)
    settle(page)
    page.wait_for_timeout(1000)
    assert "2026_01_01_00_00_00" in page.inner_text("#shell-session")  # not the newest session
    page.locator(".podscope-nav a", has_text="Diagnostics").click()
    page.wait_for_url("**/diagnostics?session=2026_01_01_00_00_00", timeout=10_000)
    page.locator(".podscope-nav a", has_text="Sessions").click()  # every session: no query
    page.wait_for_url(server + "/", timeout=10_000)
    # the worker and step go along too: the Timeline opens on that worker at that step
    page.goto(server + "/pod?session=2026_01_01_00_00_00&worker=10.0.0.2_6000&step=4")
    settle(page)
    page.locator(".podscope-nav a", has_text="Timeline").click()
    page.wait_for_url("**/timeline?session=2026_01_01_00_00_00&worker=10.0.0.2_6000&step=4")
    settle(page)
    page.wait_for_function(f"{GD}?.layout?.shapes?.some(s => s.type === 'rect')")
    ticks = page.locator("#tl-graph .ytick text").all_text_contents()
    assert ticks and all(t.startswith("10.0.0.2_6000 › ") for t in ticks)
    assert x_range(page)[1] - x_range(page)[0] < 3  # one ~1 ms step and its margins
    assert page.errors == []


def test_ops_grid_leads_with_the_name_and_its_cost_most_expensive_first(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/ops?session=2026_01_03_gpu&by=kernel")
    settle(page)
    page.locator("#ops-table .ag-row").first.wait_for(timeout=20_000)
    page.wait_for_timeout(1000)
    headers = page.locator("#ops-table .ag-header-cell").evaluate_all(
        "els => els.map(e => e.getAttribute('col-id'))"
    )
    assert headers[:3] == ["kernel", "ops", "self_ms"], headers  # kernels grouped by name
    assert "op_name" not in headers
    assert "worker" not in headers[:6] and "timeline" not in headers[:6]  # costs in view first
    cells = page.locator("#ops-table .ag-center-cols-container [col-id=self_ms]").all_inner_texts()
    selfs = [float(c.replace(",", "")) for c in cells]
    assert selfs == sorted(selfs, reverse=True) and len(selfs) >= 2  # by cost, not by device
    titles = page.locator("#ops-table .ag-header-cell-text").all_inner_texts()
    assert titles[:3] == ["kernel", "ops", "self time (ms)"], titles
    shares = page.locator("#ops-table .ag-center-cols-container [col-id=self_share]")
    assert all(re.fullmatch(r"\d+\.\d%", t) for t in shares.all_inner_texts())
    # a kernel's ops are its children: one click shows them, and the URL keeps the choice
    first = page.locator("#ops-table .ag-pinned-left-cols-container [col-id=kernel]").first
    kernel = first.inner_text()
    first.click()
    page.wait_for_url(re.compile(r"kernel="))
    children = page.locator("#ops-children .ag-pinned-left-cols-container [col-id=op_name]")
    children.first.wait_for()
    assert kernel[:20] in page.inner_text("#ops-children h6") or "launched" in page.inner_text(
        "#ops-children h6"
    )
    ops_cell = "#ops-table .ag-center-cols-container [col-id=ops]"
    page.wait_for_function(f"document.querySelector('{ops_cell}')?.innerText.trim()")
    ops_listed = int(page.locator(ops_cell).first.inner_text())  # the table's rows come again
    assert children.count() == ops_listed  # every op that launched it, nothing else
    page.reload()
    settle(page)
    children.first.wait_for()
    assert children.count() == ops_listed  # the link reopens it
    assert page.errors == []


def test_diagnostics_numbers_have_units(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/diagnostics?session=2026_01_03_gpu")
    settle(page)
    page.get_by_text("Checked, nothing to fix").wait_for()  # the findings are drawn
    text = page.inner_text("#_pages_content")
    titles = page.locator("strong").all_inner_texts()
    assert any(" — " in t for t in titles)
    for t in titles:
        value = t.split(" — ")[-1] if " — " in t else ""
        assert not re.search(r"\d\.\d{4,}|e[+-]\d", value), t  # no 0.76843 nor 2.09e+04
    assert re.search(r"— \d+(\.\d)? %", text) or re.search(r"per step", text)
    page.get_by_text("details: evidence and how to reproduce the number").first.click()
    page.wait_for_timeout(1000)
    assert not re.search(r"\d\.\d{6,}", page.inner_text("#_pages_content"))  # evidence rounded
    assert (
        "Checked, nothing to fix" in text
        and "Mixed precision off" not in text.split("Checked, nothing to fix")[1]
    )
    assert page.errors == []


def test_step_slider_is_off_while_all_steps_are_shown(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=2026_01_01_00_00_00")
    settle(page)
    title = page.locator("#pod-bars .gtitle")
    handle = page.locator("#pod-step [role=slider]")
    assert (title.text_content() or "").startswith("All 28 steps")  # 30, less the partial two
    assert handle.get_attribute("aria-disabled") == "true" or handle.is_disabled()
    page.get_by_label("One step").check()
    page.wait_for_url(re.compile(r"step=0"))  # the page is drawn again from the URL
    page.wait_for_function(
        "(h => h && h.getAttribute('aria-disabled') !== 'true')"
        "(document.querySelector('#pod-step [role=slider]'))"
    )
    settle(page)
    handle.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(r"step=1"))
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 1')"
    )
    page.get_by_label("All steps (mean)").check()
    page.wait_for_url(lambda url: "step=" not in url)
    settle(page)
    page.wait_for_timeout(1000)
    assert handle.get_attribute("aria-disabled") == "true" or handle.is_disabled()
    assert (title.text_content() or "").startswith("All 28 steps")  # 30, less the partial two
    # back and forward walk the steps chosen, each drawn from its URL
    page.go_back()
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 1')"
    )
    page.go_back()
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 0')"
    )
    page.go_forward()
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 1')"
    )
    page.wait_for_timeout(1000)  # stays
    assert page.url.endswith("step=1")
    assert (title.text_content() or "").startswith("Step 1")


def test_navbar_marks_the_page_and_the_tab_title_says_page_and_session(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/ops?session=2026_01_02_00_00_00")
    settle(page)
    page.wait_for_function("document.title.startsWith('Ops · 2026_01_02_00_00_00')")
    active = page.locator(".podscope-nav .nav-link.active").all_inner_texts()
    assert active == ["Ops"]
    page.locator(".podscope-nav .nav-link", has_text="Timeline").click()
    page.wait_for_url("**/timeline?session=2026_01_02_00_00_00")
    page.wait_for_function("document.title.startsWith('Timeline · 2026_01_02_00_00_00')")
    page.wait_for_timeout(1000)
    assert page.locator(".podscope-nav .nav-link.active").all_inner_texts() == ["Timeline"]
    assert page.title() == "Timeline · 2026_01_02_00_00_00 · PodScope"
    assert page.errors == []


def test_a_finding_opens_the_page_at_its_worker_and_step(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/diagnostics?session=2026_01_02_00_00_00")
    settle(page)
    card = page.locator(".podscope-card", has_text="Input-bound")
    card.get_by_text("show the evidence").click()
    page.wait_for_url("**/pod?**")
    settle(page)
    query = dict(p.split("=") for p in page.url.split("?")[1].split("&"))
    assert query["worker"] == "10.0.0.2_6000" and query["session"] == "2026_01_02_00_00_00"
    title = page.locator("#pod-bars .gtitle").text_content() or ""
    assert title.startswith(f"Step {query['step']}"), title
    page.wait_for_timeout(1000)
    assert (page.locator("#pod-bars .gtitle").text_content() or "").startswith(
        f"Step {query['step']}"
    )
    assert page.errors == []


def test_empty_states_say_why_where_the_data_would_be(page, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a Python-traced worker's ops: the reason above the (empty) table
    page.goto(server + "/ops?session=2026_01_06_python&worker=10.0.0.4_6000")
    settle(page)
    page.wait_for_function(
        "document.querySelector('#ops-note')?.innerText.includes('Python tracer')"
    )
    note = page.locator("#ops-note").bounding_box()
    grid = page.locator("#ops-table").bounding_box()
    assert note["y"] < grid["y"]  # said above the table, not at the bottom of the page
    # one worker: no lateness heat map, a sentence instead
    page.goto(server + "/pod?session=2026_01_07_one_worker")
    settle(page)
    assert "one, so there is no heat map" in page.inner_text("#pod-heatmap")
    assert page.locator("#pod-heatmap .js-plotly-plot").count() == 0
    # the TFLite CPU panels of a trace without sched/freq data explain themselves
    page.goto(server + "/android?session=2026_01_04_phone")
    settle(page)
    page.wait_for_function("document.querySelector('#tfl-cpu .annotation-text') !== null")
    texts = page.locator("#tfl-cpu .annotation-text").all_text_contents()
    assert any("CPU frequency" in t for t in texts), texts
    assert page.errors == []


def test_workers_page_names_the_culprit_links_its_step_and_downloads_every_table(
    page, server
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + f"/workers?session={CULPRIT_SESSION}")
    settle(page)
    # each worker named by its task, the address beside it
    verdict = page.locator(".alert-danger").first.inner_text()
    assert "worker:2 (10.0.0.3:6000) is the culprit" in verdict
    assert "worker:0 (10.0.0.1:6000) waits 400" in verdict
    roles = page.locator(
        ".podscope-card", has=page.get_by_role("heading", name="Culprits and victims")
    )
    first = roles.locator(".ag-center-cols-container").first.locator(".ag-row[row-index='0']")
    assert first.locator("[col-id=task]").inner_text() == "worker:2"
    assert first.locator("[col-id=role]").inner_text() == "culprit"
    page.goto(server + f"/pod?session={CULPRIT_SESSION}")
    settle(page)
    assert (
        page.locator(".badge.bg-danger")
        .first.inner_text()
        .startswith("straggler: worker:2 (10.0.0.3:6000)")
    )
    assert page.locator("#pod-table [col-id=task]").all_inner_texts()[1:] == [
        "worker:0",
        "worker:1",
        "worker:2",
    ]
    page.goto(server + f"/workers?session={CULPRIT_SESSION}")
    settle(page)
    # sections without data say why, where the data would be
    assert page.get_by_text("No tf.data iterator events").count() == 1
    assert page.get_by_text("No parameter-server task").count() == 1
    # every table of the dropdown, as CSV and as Parquet
    tables = {
        "slow_steps": "Slow worker-steps",
        "roles": "Culprits and victims",
        "collective_summary": "Collectives per worker",
        "collectives": "Collective instances",
        "input_pipeline": "Input pipeline per worker",
        "iterators": "tf.data iterators",
        "memory_report": "Memory per allocator",
        "ps_balance": "Parameter servers",
    }
    for value, label in tables.items():
        page.locator("#wk-table").click()
        page.get_by_role("option", name=label, exact=True).click()
        settle(page)
        with page.expect_download() as dl:
            page.click("#wk-csv")
        assert dl.value.suggested_filename == f"{value}_{CULPRIT_SESSION}.csv"
        header = Path(dl.value.path()).read_text().splitlines()[0]
        assert header.startswith(("worker", "key")) or header == "", (value, header)
        with page.expect_download() as dl:
            page.click("#wk-parquet")
        frame = pd.read_parquet(dl.value.path())
        if value == "slow_steps":
            assert set(frame["worker"]) == {"w_3"} and (frame["cause"] == "late start").all()
        if value == "roles":
            assert dict(zip(frame["worker"], frame["role"], strict=True)) == {
                "w_1": "victim",
                "w_2": "victim",
                "w_3": "culprit",
            }
    # the slow steps come a block at a time: the header's sort is the server's, and stays
    steps = page.locator("#wk-slow .ag-center-cols-container [col-id=step]")
    steps.first.wait_for()
    for order in ("ascending", "descending"):
        page.locator("#wk-slow .ag-header-cell[col-id=step]").click()
        page.wait_for_function(
            "(() => { const s = [...document.querySelectorAll("
            "'#wk-slow .ag-center-cols-container [col-id=step]')].map(e => +e.innerText);"
            f" return s.length > 1 && s.every((x, i) => !i || (x - s[i - 1]) * "
            f"{1 if order == 'ascending' else -1} >= 0); }})()"
        )
        page.wait_for_timeout(1000)
        shown = [int(t) for t in steps.all_inner_texts()]
        assert shown == sorted(shown, reverse=order == "descending"), (order, shown)
    # a slow step's link opens the timeline at that worker and step, and stays there
    first = page.locator("#wk-slow .ag-center-cols-container .ag-row").first
    step = first.locator("[col-id=step]").inner_text()
    first.get_by_text("open").click()
    page.wait_for_url(re.compile(r"/timeline\?"))
    settle(page)
    assert "worker=w_3" in page.url and f"step={step}" in page.url
    page.wait_for_function(f"{GD}?.layout?.shapes?.some(s => s.type === 'rect')")
    page.wait_for_timeout(2000)
    assert page.locator("#tl-step").inner_text().strip() == f"step {step}"
    ticks = page.locator("#tl-graph .ytick text").all_text_contents()
    assert {t.split(" › ")[0] for t in ticks} == {"w_3"}
    assert page.errors == []


def test_the_step_time_is_the_same_number_on_every_page(page, server) -> None:  # type: ignore[no-untyped-def]
    """The V100 sample's step as XProf counts it (the busiest GPU's span: 21.31 ms) in the
    Pod Viewer's header and in Compare's step-time row; the Ops page has the per-step column."""
    if not V100.exists():
        pytest.skip(f"public trace samples not present: {V100}")
    page.goto(f"{server}/pod?session={V100_SESSION}")
    settle(page)
    assert "mean step 21.310 ms" in page.inner_text("#pod-badges")
    page.goto(f"{server}/compare?session={V100_SESSION}&baseline=2026_01_01_00_00_00")
    settle(page)
    row = page.locator("tr", has_text="step time (mean)").first
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == "step time (mean)" and cells[2] == "21.31", cells
    page.goto(f"{server}/ops?session={V100_SESSION}")
    settle(page)
    headers = page.locator("#ops-table .ag-header-cell-text").all_inner_texts()
    assert "self time per step (ms)" in headers, headers
    assert page.errors == []
