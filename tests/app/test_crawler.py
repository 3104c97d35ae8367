"""A crawler that uses the dashboard as a person would, on every kind of session: a CPU
MultiWorkerMirroredStrategy capture made by the engine, the public 8× V100 GPU capture, a ROCm
(MI300X) capture, a TPU capture, an Android/TFLite trace, a Perfetto capture and a Keras
logdir (a run folder ``train/plugins/profile/…``). Every page is opened and every
control operated (each radio value, the slider, each worker and baseline, a zoom held 2 s, W/S
keys, a search, a click on an event, each download, each finding's details and link, a slow
step's timeline link); any
HTTP 5xx, callback error, page error or console error fails the test. Screenshots of each
page are kept in build/artifacts/crawl/.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from podscope.trace_parsers.loader import session_folders
from tests.app.test_browser import ARTIFACTS, GD, TL_DRAWN, serving, settle, x_range
from tests.conftest import SHARED_TRACES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

XPLANE = SHARED_TRACES / "xplane"
SAMPLES = {
    "2026_02_02_v100": XPLANE / "gpu_tf_multiworker_v100" / "34.83.195.179_6003.xplane.pb",
    "2026_02_03_rocm": XPLANE / "rocm_jax_tracelens" / "traces__mi300__jax08_gemm__tw003.xplane.pb",
    "2026_02_04_tpu": XPLANE / "tpu_xprof" / "tpu_inference_2.xplane.pb",
}
ANDROID = SHARED_TRACES / "android" / "synthetic" / "synthetic_tflite_atrace.txt"
PERFETTO = SHARED_TRACES / "android" / "ms_test_trace.perfetto-trace"
#: A Keras TensorBoard callback's layout: the run folder ``train`` holds plugins/profile.
KERAS = XPLANE / "rocm_jax_tracelens" / "traces__mi300__jax08_elementwise__tw003.xplane.pb"
CPU = "2026_02_01_cpu_mwms"
PAGES = ("/pod", "/ops", "/xla", "/timeline", "/diagnostics", "/workers", "/compare", "/android")


@pytest.fixture(scope="module")
def crawl_logdir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """One session of each kind present here (the shared samples are skipped when absent,
    the CPU capture when TensorFlow is not installed). The engine's sessions (a capture of
    a CPU job, a JAX run: 25 s) are made only where a test crawls them (make verify)."""
    root = tmp_path_factory.mktemp("crawl")
    profile = root / "plugins" / "profile"
    crawled = {
        item.callspec.params["kind"]
        for item in request.session.items
        if getattr(item, "originalname", "")
        == test_every_page_and_control_works_on_each_kind_of_session.__name__
    }
    if "cpu_mwms" in crawled:
        try:
            capture = request.getfixturevalue("scenario_capture")(
                "mwms-loop", "straggler", workers=3
            )
            shutil.copytree(capture.session_dir, profile / CPU)
        except pytest.skip.Exception:
            pass
    for session, sample in SAMPLES.items():
        if sample.exists():
            (profile / session).mkdir(parents=True)
            shutil.copy(sample, profile / session / sample.name)
    if ANDROID.exists():
        (profile / "2026_02_05_android").mkdir(parents=True)
        shutil.copy(ANDROID, profile / "2026_02_05_android" / "phone.systrace")
    if PERFETTO.exists():
        (profile / "2026_02_06_perfetto").mkdir(parents=True)
        shutil.copy(PERFETTO, profile / "2026_02_06_perfetto" / PERFETTO.name)
    if KERAS.exists():
        keras = root / "train" / "plugins" / "profile" / "2026_02_07_keras"
        keras.mkdir(parents=True)
        shutil.copy(KERAS, keras / "host.xplane.pb")
    if "jax" in crawled and importlib.util.find_spec("jax"):  # XLA program steps, a culprit
        from podscope.app.cli_cluster import capture_jax
        from podscope.reference_engine.jax_workload import JaxConfig

        jax_logdir = tmp_path_factory.mktemp("jax")
        session = capture_jax(
            JaxConfig(workers=3, scenario="slow-host"), jax_logdir / "run", jax_logdir
        )
        shutil.copytree(session, profile / "2026_02_08_jax")
    if not profile.exists():
        pytest.skip("no session of any kind: no TensorFlow and no shared samples")
    return root


@pytest.fixture(scope="module")
def crawl_server(crawl_logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(crawl_logdir, tmp_path_factory.mktemp("cache")) as base:
        yield base


class Visit:
    """A page with every failure recorded: HTTP 5xx, page errors and console errors."""

    def __init__(self, browser: object, base: str) -> None:
        self.context = browser.new_context(  # type: ignore[attr-defined]
            viewport={"width": 1400, "height": 1000}, accept_downloads=True
        )
        self.page = self.context.new_page()
        self.base = base
        self.failures: list[str] = []
        self.page.on("console", lambda m: self._fail(m.type == "error", f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.failures.append(f"page error: {e}"))
        self.page.on(
            "response",
            lambda r: self._fail(r.status >= 500, f"HTTP {r.status} {r.request.method} {r.url}"),
        )

    def _fail(self, bad: bool, what: str) -> None:
        if bad:
            self.failures.append(what)

    def open(self, path: str) -> None:
        self.page.goto(self.base + path)
        settle(self.page)

    def shot(self, name: str) -> None:
        folder = ARTIFACTS / "crawl"
        folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"))

    def download(self, button: str) -> None:
        """Clicks a download button; the file must come and not be empty."""
        locator = self.page.locator(f"#{button}")
        if not locator.count() or locator.is_disabled():
            return
        with self.page.expect_download(timeout=20_000) as dl:
            locator.click()
        path = dl.value.path()
        assert path is not None and Path(path).stat().st_size > 0, button


def _sessions(root: Path) -> list[str]:
    return sorted(session_folders(root))  # runs at any depth: "train/2026_02_07_keras"


def _radios(v: Visit, group: str) -> None:
    for label in v.page.locator(f"#{group} label").all_inner_texts():
        v.page.locator(f"#{group}").get_by_label(label, exact=True).check()
        settle(v.page)


def _dropdown(v: Visit, dropdown: str, limit: int = 3) -> None:
    """Picks each of the first ``limit`` options of a dcc.Dropdown, as a person would: opens
    it, waits for its list (Dash draws it outside the component, as ``role=option``s), clicks
    one, and requires the choice to stay shown once the page has settled."""
    box = v.page.locator(f"#{dropdown}")
    if not box.count():
        return
    for i in range(limit):
        box.click()
        options = v.page.get_by_role("option")
        options.first.wait_for(timeout=10_000)
        if options.count() <= i:
            v.page.keyboard.press("Escape")
            return
        name = options.nth(i).inner_text().strip()
        options.nth(i).click()
        if options.count():  # the value it had: the list stays open until dismissed
            v.page.keyboard.press("Escape")
        settle(v.page)
        shown = v.page.locator(f"#{dropdown}").inner_text()
        assert name in shown, (dropdown, name, shown)


def crawl_pod(v: Visit) -> None:
    if not v.page.locator("#pod-mode").count():
        return
    v.page.get_by_label("One step").check()
    settle(v.page)
    v.page.locator("#pod-step [role=slider]").focus()
    v.page.keyboard.press("ArrowRight")
    settle(v.page)
    v.page.get_by_label("All steps (mean)").check()
    settle(v.page)
    v.download("pod-csv")
    v.download("pod-parquet")


def crawl_ops(v: Visit) -> None:
    _radios(v, "ops-by")
    _dropdown(v, "ops-worker")
    _dropdown(v, "ops-device")
    first = v.page.locator("#ops-table .ag-pinned-left-cols-container .ag-row").first
    kernels = v.page.get_by_label("per GPU kernel (grouped by name)")  # GPU sessions only
    if kernels.count() and kernels.is_checked() and first.count():
        first.click()  # a kernel's ops, as children
        settle(v.page)
    v.download("ops-csv")
    v.download("ops-parquet")


def crawl_xla(v: Visit) -> None:
    """Each worker and device, the profile's groupings and colours, a treemap node, a
    roofline point and a grid row, and both downloads (on sessions without XLA ops, the note
    that says why)."""
    if not v.page.locator("#xla-table").count():
        assert v.page.locator("#xla-note").count()
        return
    _dropdown(v, "xla-worker")
    _dropdown(v, "xla-device")
    _dropdown(v, "xla-execution")
    _radios(v, "xla-profile")
    _radios(v, "xla-color")
    slices = v.page.locator("#xla-profile-graph g.slice path.surface")
    if slices.count() > 1:
        slices.nth(1).click(force=True)
        settle(v.page)
    points = v.page.locator("#xla-roofline .scatterlayer .points path")
    if points.count():
        points.first.click(force=True)
        settle(v.page)
    rows = v.page.locator("#xla-table .ag-center-cols-container .ag-row")
    if rows.count():
        rows.first.click()
        settle(v.page)
    v.download("xla-csv")
    v.download("xla-parquet")


def crawl_timeline(v: Visit) -> None:
    page = v.page
    if not page.locator("#tl-graph").count():
        return
    page.wait_for_function(TL_DRAWN)  # the bars, not the empty graph drawn before them
    full = x_range(page)
    drag = page.locator("#tl-graph .nsewdrag").first
    drag.scroll_into_view_if_needed()
    box = drag.bounding_box()
    y = box["y"] + min(box["height"] / 2, 100)  # inside the viewport on a tall chart
    page.mouse.move(box["x"] + box["width"] * 0.30, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.40, y, steps=5)
    page.mouse.up()
    settle(page)
    page.wait_for_timeout(2000)
    zoomed = x_range(page)
    assert zoomed[1] - zoomed[0] < 0.5 * (full[1] - full[0]), (full, zoomed)  # held 2 s
    page.locator("body").click(position={"x": 5, "y": 5})
    for key in "wsad":
        before = x_range(page)
        page.keyboard.press(key)
        page.wait_for_function(  # the new window, drawn in the browser or by the server
            f"b => {GD}.layout.xaxis.range[0] !== b[0] || {GD}.layout.xaxis.range[1] !== b[1]",
            arg=before,
        )
    settle(page)
    bar = page.evaluate("window.podscopeTimeline.barOnPage(null)")
    if bar:  # a click on the widest bar drawn: its details
        page.mouse.click(bar["x"], bar["y"])
        settle(page)
    page.fill("#tl-search", "a")
    page.keyboard.press("Enter")
    settle(page)
    planes = page.locator("#tl-planes input")
    if planes.count() > 1:
        planes.first.uncheck()
        settle(page)
        planes.first.check()
        settle(page)
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)
    settle(page)


def crawl_diagnostics(v: Visit) -> None:
    for summary in v.page.locator("summary").all():
        summary.click()
    links = v.page.get_by_text("show the evidence")
    if links.count():
        links.first.click()
        settle(v.page)


def crawl_workers(v: Visit) -> None:
    """Two of the tables downloaded (one per format), and a slow step's timeline link
    followed (the Workers page test downloads every table and checks the values)."""
    if not v.page.locator("#wk-table").count():
        return
    v.download("wk-csv")
    v.page.locator("#wk-table").click()
    v.page.get_by_role("option", name="tf.data iterators", exact=True).click()
    settle(v.page)
    v.download("wk-parquet")
    link = v.page.locator("#wk-slow .ag-center-cols-container .ag-row").first.get_by_text("open")
    if link.count():
        link.click()
        v.page.wait_for_url(re.compile(r"/timeline\?.*step="))
        settle(v.page)


def crawl_compare(v: Visit) -> None:
    _dropdown(v, "cmp-baseline")
    v.download("cmp-csv")
    v.download("cmp-parquet")


def crawl_android(v: Visit) -> None:
    _dropdown(v, "tfl-invoke")
    v.download("tfl-csv")
    v.download("tfl-parquet")


CRAWLERS: dict[str, Callable[[Visit], None]] = {
    "/pod": crawl_pod,
    "/ops": crawl_ops,
    "/xla": crawl_xla,
    "/timeline": crawl_timeline,
    "/diagnostics": crawl_diagnostics,
    "/workers": crawl_workers,
    "/compare": crawl_compare,
    "/android": crawl_android,
}


#: The kind make test crawls: the real V100 capture, a TF multi-worker one (40 s); the other
#: kinds' pages, the engine capture's among them (a minute with its capture), are crawled by
#: make verify (the XLA and Android pages have tests of their own).
IN_MAKE_TEST = ("v100",)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(k, marks=() if k in IN_MAKE_TEST else pytest.mark.long)
        for k in ("cpu_mwms", "v100", "rocm", "tpu", "android", "perfetto", "keras", "jax")
    ],
)
def test_every_page_and_control_works_on_each_kind_of_session(
    browser: object, crawl_server: str, crawl_logdir: Path, kind: str
) -> None:
    session = next((s for s in _sessions(crawl_logdir) if s.endswith(kind)), None)
    if session is None:
        pytest.skip(f"no {kind} session here (sample absent or TensorFlow not installed)")
    v = Visit(browser, crawl_server)
    try:
        for path in PAGES:
            v.open(f"{path}?{urlencode({'session': session})}")
            assert "PodScope" in v.page.title()
            CRAWLERS[path](v)
            v.shot(f"{kind}{path}")  # after every control was operated
            assert not v.failures, (path, v.failures)
        for path in ("/", "/capture"):
            v.open(path)
            assert not v.failures, (path, v.failures)
    finally:
        v.context.close()
