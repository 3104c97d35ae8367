"""The XLA page operated as a person would, on the public TPU and ROCm captures: every control
(worker, device, execution, filter, the op profile's grouping and colour, a click on the
treemap, on the roofline and on the grid), each checked in the URL and on the page 2 s later
and after a reload (the URL is the view), and the downloads."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.app.conftest import watched_page
from tests.app.test_browser import ARTIFACTS, serving, settle
from tests.conftest import SHARED_TRACES

pytestmark = [pytest.mark.browser, pytest.mark.slow]
XPLANE = SHARED_TRACES / "xplane"
TPU = XPLANE / "tpu_xprof" / "tpu_inference_2.xplane.pb"
ROCM = XPLANE / "rocm_jax_tracelens" / "traces__mi300__jax08_attention__tw003.xplane.pb"


@pytest.fixture(scope="module")
def xla_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not TPU.exists() or not ROCM.exists():
        pytest.skip("../shared/traces/xplane absent")
    root = tmp_path_factory.mktemp("xla")
    for session, sample in (("2026_03_01_tpu", TPU), ("2026_03_02_rocm", ROCM)):
        (root / "plugins" / "profile" / session).mkdir(parents=True)
        shutil.copy(sample, root / "plugins" / "profile" / session / sample.name)
    with serving(root, tmp_path_factory.mktemp("cache")) as base:
        yield base


@pytest.fixture
def page(browser, xla_server):  # type: ignore[no-untyped-def]
    with watched_page(browser) as pg:
        yield pg


def query(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def pick(page, dropdown: str, label: str) -> None:  # type: ignore[no-untyped-def]
    """Opens the dropdown, types to find the option (a long list shows a window of it) and
    picks it, as a person would."""
    page.click(f"#{dropdown}")
    page.fill(".dash-dropdown-search", label)
    page.get_by_role("option", name=label, exact=True).click()
    settle(page)


def per_step_points(page) -> int:  # type: ignore[no-untyped-def]
    """The roofline's per-step program points (XProf's per-step rows)."""
    return int(
        page.evaluate(
            "(document.querySelector('#xla-roofline .js-plotly-plot')._fullData"
            ".find((t) => t.name === 'program, per step') || {x: []}).x.length"
        )
    )


def title(page) -> str:  # type: ignore[no-untyped-def]
    return str(page.inner_text("h6:has-text('XLA op')"))


def test_every_control_of_the_xla_page_stays_in_the_url(page, xla_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(xla_server + "/xla?session=2026_03_01_tpu")
    settle(page)
    assert "TPU v6 Lite: peak 918.0 TFLOP/s" in page.inner_text("#xla-peaks")
    assert title(page).startswith("17 XLA ops")
    assert per_step_points(page) >= 100  # jit_f's 100 executions, each a program point

    pick(page, "xla-device", "TPU:1")
    assert query(page)["device"] == "/device:TPU:1"
    pick(page, "xla-execution", "execution 5")
    assert query(page)["execution"] == "5"
    page.wait_for_timeout(2000)  # still there, not a transient state
    assert "TPU:1" in title(page) and "execution 5" in title(page)
    assert per_step_points(page) == 0  # one execution shown: no steps to spread
    # one execution of jit_f on one core: each of its ops once
    first = page.locator("#xla-table .ag-center-cols-container .ag-row").first
    assert first.locator("[col-id='occurrences']").inner_text() == "1"

    page.fill("#xla-filter", "copy-done")
    page.press("#xla-filter", "Enter")
    settle(page)
    assert query(page)["q"] == "copy-done"
    names = page.locator("#xla-table .ag-pinned-left-cols-container [col-id='hlo_op_name']")
    assert names.count() >= 1 and all("copy-done" in n for n in names.all_inner_texts())

    page.get_by_role("radio", name="category › op", exact=True).check()
    settle(page)
    page.get_by_role("radio", name="% of peak HBM bandwidth", exact=True).check()
    settle(page)
    assert query(page)["profile"] == "category" and query(page)["color"] == "bandwidth"

    # a click on the treemap's largest category zooms there and lists what is inside it
    page.locator("#xla-profile-graph g.slice path.surface").nth(1).click(force=True)
    settle(page)
    node = query(page).get("node")
    assert node, page.url
    assert node.replace("/", " › ") in page.inner_text("#xla-node-table")

    # a click on a roofline point opens that op's HLO text and source below
    page.locator("#xla-roofline .scatterlayer .points path").first.click(force=True)
    settle(page)
    op = query(page)["op"]
    assert re.fullmatch(r"\d+/\S+", op)
    assert op.split("/", 1)[1] in page.inner_text("#xla-details")

    # the URL is the view: a reload shows every choice again
    kept = page.url
    page.reload()
    settle(page)
    assert page.url == kept
    assert "TPU:1" in page.inner_text("#xla-device") and "execution 5" in page.inner_text(
        "#xla-execution"
    )
    assert page.input_value("#xla-filter") == "copy-done"
    assert page.get_by_role("radio", name="category › op", exact=True).is_checked()
    assert page.get_by_role("radio", name="% of peak HBM bandwidth", exact=True).is_checked()
    assert op.split("/", 1)[1] in page.inner_text("#xla-details")

    with page.expect_download() as got:
        page.click("#xla-csv")
    csv = Path(got.value.path()).read_text()
    assert csv.startswith("worker,device,program_id,program,hlo_op_name") and "copy-done" in csv
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "xla_tpu.png"), full_page=True)
    assert page.errors == []


def test_a_grid_row_picks_its_op_and_a_gpu_roofline_has_its_roof(page, xla_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(xla_server + "/xla?session=2026_03_02_rocm")
    settle(page)
    peaks = page.inner_text("#xla-peaks")
    assert "AMD Instinct MI300X: peak 1,307.4 TFLOP/s, HBM 4,936.0 GiB/s" in peaks
    assert "5.3 TB/s from the AMD Instinct MI300X data sheet: the trace states 2.66" in peaks
    roof = page.evaluate("document.querySelector('#xla-roofline .js-plotly-plot').data[0].name")
    assert roof.startswith("roof: 1,307 TFLOP/s")
    page.locator("#xla-table .ag-center-cols-container .ag-row").nth(3).click()
    settle(page)
    op = query(page)["op"]
    name = op.split("/", 1)[1]
    details = page.inner_text("#xla-details")
    assert name in details and "bf16" in details and "generate_attention_trace.py" in details
    link = page.get_by_role("link", name="Its events on the Timeline")
    assert f"q=hlo%3A{name}" in (link.get_attribute("href") or "")
    # the Timeline finds the op's own events (their count equals the table's occurrences on
    # every sample: tests/analyzers/test_xla_ops.py) and says how many
    link.click()
    page.wait_for_url(re.compile(r"/timeline\?"))
    settle(page)
    page.wait_for_function(
        f"/[1-9][0-9,]* events match 'hlo:{re.escape(name)}'/.test("
        "document.querySelector('#tl-stats')?.innerText || '')",
        timeout=60_000,
    )
    assert page.errors == []


def test_each_session_offers_the_tables_and_words_its_framework_has(page, xla_server) -> None:  # type: ignore[no-untyped-def]
    """A TPU runs no GPU kernel: its Ops page offers no "per GPU kernel" table (a link asking
    for one shows the op table, and picking "per op type" stays), the ROCm GPU's does; the
    Workers page of a JAX capture says why it has no tf.data table in JAX's terms."""
    page.goto(f"{xla_server}/ops?session=2026_03_01_tpu&by=kernel")
    settle(page)
    tables = page.locator("#ops-by label").all_inner_texts()
    assert tables == ["per op", "per op type"], tables
    assert page.locator("#ops-by input:checked").get_attribute("value") == "op"
    page.get_by_text("per op type", exact=True).click()
    settle(page)
    assert query(page).get("by") == "type"
    page.reload()
    settle(page)
    assert page.locator("#ops-by input:checked").get_attribute("value") == "type"
    page.goto(f"{xla_server}/ops?session=2026_03_02_rocm")
    settle(page)
    assert "per GPU kernel (grouped by name)" in page.locator("#ops-by label").all_inner_texts()
    page.goto(f"{xla_server}/workers?session=2026_03_01_tpu")
    settle(page)
    text = page.inner_text("body")
    assert "No tf.data input pipeline: JAX feeds its programs from Python" in text
    assert "host_tracer_level" not in text and "tf.data iterator events" not in text


def test_the_memory_viewer_shows_a_programs_peak_and_its_buffers(page, xla_server) -> None:  # type: ignore[no-untyped-def]
    """XProf's memory viewer on the TPU sample (its numbers equal XProf's:
    tests/trace_parsers/test_hlo_memory.py): the largest peak first, then another program
    picked, kept in the URL and after a reload."""
    page.goto(xla_server + "/xla?session=2026_03_01_tpu")
    settle(page)
    memory = page.locator("#xla-memory")
    assert "Memory · jit_f: peak 20,480.0 MiB, 5 buffers alive there" in memory.inner_text()
    rows = page.locator("#xla-memory-table tbody tr")
    assert rows.count() == 5
    first = rows.first.inner_text()
    assert "5,120.000" in first and "f32[5,1024,1024,256]" in first
    peak = page.evaluate("document.querySelector('#xla-memory-graph .js-plotly-plot').data[1].name")
    assert peak == "peak 20,480.0 MiB"

    pick(page, "xla-memory-program", "jit__psum (9646411105960254074) · peak 10,240.0 MiB")
    assert query(page)["memory"] == "9646411105960254074"
    page.wait_for_timeout(2000)  # still there, not a transient state
    assert "jit__psum: peak 10,240.0 MiB, 2 buffers" in memory.inner_text()
    table = page.inner_text("#xla-memory-table")
    assert "all-reduce" in table and "Output" in table and "Parameter" in table
    # no temporary buffer: its peak is its parameter and output, said in words, not a flat line
    assert "No temporary buffer" in page.inner_text("#xla-memory-graph")
    page.reload()
    settle(page)
    assert "jit__psum: peak 10,240.0 MiB" in page.inner_text("#xla-memory")
    assert "jit__psum" in page.inner_text("#xla-memory-program")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pick(page, "xla-memory-program", "jit_f (12190760917235803885) · peak 20,480.0 MiB")
    memory.screenshot(path=str(ARTIFACTS / "xla_memory.png"))
    assert page.errors == []


def graph_nodes(page) -> list[str]:  # type: ignore[no-untyped-def]
    return list(page.evaluate("document.querySelector('#xla-graph .js-plotly-plot').data[0].text"))


def test_an_ops_graph_opens_its_fusions_and_its_module_text_shows_it(page, xla_server) -> None:  # type: ignore[no-untyped-def]
    """A fusion picked in the grid: the instructions two hops around it, its module's HLO text
    scrolled to its marked line; a click on it opens its fused computation (its instructions
    join the graph), another closes it; the hops and the open fusion stay in the URL."""
    page.goto(xla_server + "/xla?session=2026_03_02_rocm")
    settle(page)
    page.fill("#xla-filter", "fusion")
    page.press("#xla-filter", "Enter")
    settle(page)
    page.locator("#xla-table .ag-center-cols-container .ag-row").first.click()
    settle(page)
    name = query(page)["op"].split("/", 1)[1]
    assert "fusion" in name
    closed = graph_nodes(page)
    assert closed[0] == name and len(closed) >= 2
    mark = page.locator("#xla-module-op")
    assert f"%{name} = " in mark.inner_text()
    box = page.locator("#xla-module")
    page.wait_for_function(  # scrolled so that the marked line is in the box's view
        "() => { const m = document.getElementById('xla-module-op');"
        " const b = m.closest('pre').getBoundingClientRect(), r = m.getBoundingClientRect();"
        " return r.top >= b.top && r.bottom <= b.bottom; }"
    )
    assert box.inner_text().startswith("HloModule ")

    page.locator("#xla-graph .scatterlayer .points path").first.click(force=True)
    settle(page)
    assert query(page)["expand"] == name
    page.wait_for_timeout(2000)  # still open, not a transient state
    opened = graph_nodes(page)
    assert len(opened) > len(closed) and set(closed) <= set(opened)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#xla-details").screenshot(path=str(ARTIFACTS / "xla_graph.png"))

    page.get_by_role("radio", name="1 hop", exact=True).check()
    settle(page)
    assert query(page)["hops"] == "1"
    one_hop = graph_nodes(page)
    assert len(one_hop) <= len(opened)
    page.reload()
    settle(page)
    assert graph_nodes(page) == one_hop
    assert page.get_by_role("radio", name="1 hop", exact=True).is_checked()

    page.locator("#xla-graph .scatterlayer .points path").first.click(force=True)
    settle(page)
    assert "expand" not in query(page)  # closed again
    assert page.errors == []
