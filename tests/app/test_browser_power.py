"""What a power user keeps the dashboard open for, operated in a real browser: runs found at
any depth (a Keras logdir), sessions labelled from the page, every view in the URL (a copied
link opens the same view; back and forward walk the views), the ops of one GPU one click from
the Pod Viewer, Android tracks on the Timeline, and the Capture page's errors in its own words.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.analyzers.test_breakdown import worker_trace
from tests.app.test_browser import (
    GD,
    TL_DRAWN,
    V100,
    bar_on_page,
    serving,
    settle,
    wait_range,
    x_range,
)
from tests.conftest import SHARED_TRACES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PERFETTO = SHARED_TRACES / "android" / "ms_test_trace.perfetto-trace"
KERAS = "train/2026_03_01_00_00_00"  # logdir/train/plugins/profile/<run>: Keras' layout
NESTED = "runA/validation/2026_03_02_00_00_00"
TWO = "2026_03_03_00_00_00"


@pytest.fixture(scope="module")
def power_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("power")
    for session, workers in ((KERAS, ["vm"]), (NESTED, ["vm"]), (TWO, ["w_a", "w_b"])):
        *run, name = session.split("/")
        folder = root.joinpath(*run, "plugins", "profile", name)
        folder.mkdir(parents=True)
        for w in workers:
            (folder / f"{w}.xplane.pb").write_bytes(worker_trace(w, 12))
    for name, sample in (("2026_03_04_v100", V100), ("2026_03_05_perfetto", PERFETTO)):
        if sample.exists():
            folder = root / "plugins" / "profile" / name
            folder.mkdir(parents=True)
            shutil.copy(sample, folder / sample.name)
    with serving(root, tmp_path_factory.mktemp("cache")) as base:
        yield base


@pytest.fixture
def pg(browser, power_server):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.base = power_server
    yield page
    context.close()


def pick(page, dropdown: str, option: str) -> None:  # type: ignore[no-untyped-def]
    """Chooses ``option`` in a dcc.Dropdown as a person does: open it, click the option."""
    page.locator(dropdown).click()
    page.get_by_role("option", name=option, exact=True).click()


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}


def test_runs_at_any_depth_are_listed_by_run_and_open(pg) -> None:  # type: ignore[no-untyped-def]
    pg.goto(pg.base + "/")
    settle(pg)
    runs = pg.locator("#sessions-table .ag-pinned-left-cols-container [col-id=run]")
    runs.first.wait_for()
    assert {"train", "runA/validation", "."} <= set(runs.all_inner_texts())
    row = pg.locator(f'#sessions-table .ag-center-cols-container .ag-row[row-id="{NESTED}"]')
    row.get_by_text("Pod Viewer").click()
    pg.wait_for_url(re.compile(r"/pod\?"))
    settle(pg)
    assert _query(pg.url)["session"] == NESTED
    assert "10 steps" in pg.inner_text("#pod-badges")  # the nested run's 12, less the partial two
    assert pg.errors == []


def test_a_label_and_note_written_on_the_page_stay(pg) -> None:  # type: ignore[no-untyped-def]
    pg.goto(pg.base + "/")
    settle(pg)
    pick(pg, "#sessions-pick", KERAS)
    pg.wait_for_function("document.querySelector('#sessions-save')?.disabled === false")
    pg.fill("#sessions-label", "baseline fp32")
    pg.fill("#sessions-note", "before mixed precision\nbatch 64")
    pg.locator("#sessions-save").click()
    pg.get_by_text(f"Saved the label and note of {KERAS}.").wait_for()
    pg.reload()  # from capture.json, not from the page's memory
    settle(pg)
    row = pg.locator("#sessions-table .ag-center-cols-container .ag-row", has_text="baseline fp32")
    row.wait_for()
    assert "before mixed precision" in row.inner_text()
    pg.locator("#shell-session").click()
    assert pg.get_by_text(f"{KERAS} · baseline fp32").count() == 1  # the picker says it too
    pg.keyboard.press("Escape")
    # too long: refused with the reason, nothing written
    pick(pg, "#sessions-pick", f"{KERAS} (baseline fp32)")
    pg.wait_for_function("document.querySelector('#sessions-label')?.value === 'baseline fp32'")
    pg.evaluate("document.querySelector('#sessions-label').removeAttribute('maxlength')")
    pg.fill("#sessions-label", "x" * 100)
    pg.locator("#sessions-save").click()
    pg.get_by_text("Not saved").wait_for()
    assert "at most 80 characters" in pg.inner_text("#sessions-saved")
    assert pg.errors == []


def test_a_copied_timeline_url_opens_the_same_view(pg) -> None:  # type: ignore[no-untyped-def]
    pg.goto(pg.base + "/timeline?" + urlencode({"session": TWO}))
    settle(pg)
    pg.wait_for_function(TL_DRAWN)
    full = x_range(pg)
    # a second worker, a search, and a zoom: all of it in the URL
    pg.locator("#tl-worker").click()
    pg.get_by_text("w_b", exact=True).last.click()
    pg.wait_for_url(re.compile(r"worker=w_"))
    settle(pg)
    pg.fill("#tl-search", "MatMul")
    pg.keyboard.press("Enter")
    pg.wait_for_url(re.compile(r"q=MatMul"))
    settle(pg)
    pg.wait_for_function(TL_DRAWN)
    box = pg.locator("#tl-graph .nsewdrag").first.bounding_box()
    y = box["y"] + 40
    pg.mouse.move(box["x"] + box["width"] * 0.40, y)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.45, y, steps=5)
    pg.mouse.up()
    zoomed = wait_range(pg, full)
    pg.wait_for_function("new URLSearchParams(location.search).has('t0')")
    copied = pg.url
    query = _query(copied)
    assert query["worker"].split(",") == ["w_a", "w_b"] and query["q"] == "MatMul"
    # the copied link, in a fresh tab: same workers, search and window
    other = pg.context.new_page()
    other.goto(copied)
    settle(other)
    other.wait_for_function(f"{GD}?.layout?.xaxis?.range !== undefined")
    reopened = x_range(other)
    assert all(abs(a - b) < 1e-3 for a, b in zip(reopened, zoomed, strict=True))
    assert other.input_value("#tl-search") == "MatMul"
    ticks = other.locator("#tl-graph .ytick text").all_text_contents()
    assert {t.split(" › ")[0] for t in ticks} == {"w_a", "w_b"}
    other.close()
    # back: the view before the search, drawn from its URL (one worker is no longer enough:
    # two were chosen before the search)
    pg.go_back()
    pg.wait_for_function("!new URLSearchParams(location.search).has('q')")
    settle(pg)
    assert pg.input_value("#tl-search") == ""
    assert pg.errors == []


def test_ops_of_one_gpu_one_click_from_the_pod_viewer(pg) -> None:  # type: ignore[no-untyped-def]
    if not V100.exists():
        pytest.skip(f"public trace samples not present: {V100}")
    pg.goto(pg.base + "/pod?session=2026_03_04_v100")
    settle(pg)
    pg.locator("#devices a", has_text="GPU:4").first.click()
    pg.wait_for_url(re.compile(r"/ops\?.*device=%2Fdevice%3AGPU%3A4"))
    settle(pg)
    pg.locator("#ops-table .ag-row").first.wait_for()
    assert "· GPU:4)" in pg.inner_text("#_pages_content")  # the table title names the GPU
    assert pg.locator("#ops-device").inner_text().strip().startswith("GPU:4")
    # grouped kernels of that GPU, then an idle GPU says it was idle
    pg.get_by_label("per GPU kernel (grouped by name)").check()
    pg.wait_for_url(re.compile(r"by=kernel"))
    settle(pg)
    assert "kernels by self time" in pg.inner_text("#_pages_content")
    assert _query(pg.url)["device"] == "/device:GPU:4"  # the view changed, the device stayed
    pick(pg, "#ops-device", "GPU:3")
    pg.wait_for_url(re.compile(r"GPU%3A3"))
    settle(pg)
    assert "GPU:3 was idle" in pg.inner_text("#ops-note")
    pg.go_back()  # back to GPU:4's kernels
    pg.wait_for_url(re.compile(r"GPU%3A4"))
    settle(pg)
    assert pg.locator("#ops-table .ag-row").count() > 0
    assert pg.get_by_label("per GPU kernel (grouped by name)").is_checked()
    assert pg.errors == []


def test_android_tracks_on_the_timeline(pg) -> None:  # type: ignore[no-untyped-def]
    if not PERFETTO.exists():
        pytest.skip(f"public trace samples not present: {PERFETTO}")
    pg.goto(pg.base + "/timeline?session=2026_03_05_perfetto")
    settle(pg)
    pg.wait_for_function(TL_DRAWN)
    ticks = pg.locator("#tl-graph .ytick text").all_text_contents()
    assert any("sched › CPU 0" in t for t in ticks), ticks
    assert any("counters › cpu_frequency cpu0" in t for t in ticks)
    stats = pg.inner_text("#tl-stats")
    assert not stats.startswith("0 events drawn"), stats
    # zoom into a busy second and click a slice: the thread and how it left the CPU
    box = pg.locator("#tl-graph .nsewdrag").first.bounding_box()
    full = x_range(pg)
    y = box["y"] + 40
    pg.mouse.move(box["x"] + box["width"] * 0.50, y)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.51, y, steps=3)  # Plotly zooms past 8 px
    pg.mouse.up()
    wait_range(pg, full)
    settle(pg)
    bar = bar_on_page(pg)  # a slice drawn on the canvas, clicked where it is seen
    pg.mouse.click(bar["x"], bar["y"])
    pg.wait_for_function("document.querySelector('#tl-details')?.innerText.includes('thread')")
    details = pg.inner_text("#tl-details")
    assert "ms since the session start" in details
    assert not re.search(r"^_", details, re.M)  # no TF internal (_r, _ct) among the fields
    # the Android plane can be collapsed like a device's
    pg.get_by_label("counters").uncheck()
    pg.wait_for_url(re.compile(r"hide="))
    settle(pg)
    pg.wait_for_function(TL_DRAWN)
    ticks = pg.locator("#tl-graph .ytick text").all_text_contents()
    assert not any("counters ›" in t for t in ticks)
    assert pg.errors == []


def test_the_capture_page_speaks_in_its_own_terms(pg) -> None:  # type: ignore[no-untyped-def]
    pg.goto(pg.base + "/capture")
    settle(pg)
    pg.fill("#cap-manifest", "")
    pg.locator("#cap-start").click()
    alert = pg.locator("#cap-result .alert")
    alert.wait_for()
    assert "Enter the workers' addresses" in alert.inner_text()
    assert "not both" not in alert.inner_text()
    pg.fill("#cap-addresses", "127.0.0.1:1")
    pg.fill("#cap-duration", "5")
    pg.locator("#cap-start").click()
    pg.wait_for_function(
        "document.querySelector('#cap-result')?.innerText.includes('Duration (ms)')"
    )
    assert "5 is outside 100–60,000" in pg.inner_text("#cap-result")
    # a capture that reaches no worker: its statuses, and why there is no session
    pg.fill("#cap-duration", "200")
    pg.fill("#cap-retries", "0")
    pg.locator("#cap-start").click()
    pg.wait_for_function(
        "document.querySelector('#cap-result')?.innerText.includes('No worker was captured')",
        timeout=60_000,
    )
    assert "127.0.0.1:1" in pg.inner_text("#cap-progress")
    # an address without a port is refused before anything is dialed, and the new answer
    # replaces the last run's table instead of sitting under it
    pg.fill("#cap-addresses", "127.0.0.1")
    pg.locator("#cap-start").click()
    pg.wait_for_function("document.querySelector('#cap-result')?.innerText.includes('no port')")
    settle(pg)
    assert "'127.0.0.1': no port" in pg.inner_text("#cap-result")
    assert pg.inner_text("#cap-progress").strip() == ""
    assert "No worker was captured" not in pg.inner_text("#cap-result")
    assert pg.errors == []


def test_a_device_row_of_the_pod_viewer_opens_its_ops(pg) -> None:  # type: ignore[no-untyped-def]
    if not V100.exists():
        pytest.skip(f"public trace samples not present: {V100}")
    pg.goto(pg.base + "/pod?session=2026_03_04_v100")
    settle(pg)
    row = pg.locator("#pod-table .ag-center-cols-container .ag-row", has_text="/device:GPU:6")
    row.get_by_text("ops", exact=True).click()
    pg.wait_for_url(re.compile(r"/ops\?.*device=%2Fdevice%3AGPU%3A6"))
    settle(pg)
    assert "· GPU:6)" in pg.inner_text("#_pages_content")
    assert pg.locator("#ops-table .ag-row").count() > 0
    assert pg.errors == []
