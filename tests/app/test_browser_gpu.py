"""The GPU (PyTorch) page operated as a person does, on two real ranks of a 128-rank job and
on a TensorFlow session: every view, the state that stays (URL, reload), the download, and the
numbers against the CLI's."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pandas as pd
import pytest

from podscope.analyzers.gpu_views import gpu_view
from podscope.trace_parsers import load
from tests.app.conftest import watched_page
from tests.app.test_browser import ARTIFACTS, serving, settle
from tests.conftest import SHARED_TRACES

pytestmark = [pytest.mark.browser, pytest.mark.slow]
#: The views as the page offers them (its radio labels), in order.
VIEWS = {
    "temporal": "Temporal breakdown",
    "overlap": "Communication overlap",
    "kernel-types": "Kernel types",
    "kernels": "Top kernels",
    "idle": "Idle time",
    "launches": "Kernel launches",
    "queues": "Queue length",
    "memory-bw": "Memory bandwidth",
}
RANKS = SHARED_TRACES / "kineto" / "gpu_sampled_2of128"
TF = SHARED_TRACES / "xplane" / "gpu_tf_multiworker_v100"


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not RANKS.is_dir() or not TF.is_dir():
        pytest.skip("../shared/traces absent")
    root = tmp_path_factory.mktemp("gpu")
    for session, sample in (("2026_04_01_ddp", RANKS), ("2026_04_02_tf", TF)):
        folder = root / "plugins" / "profile" / session
        folder.mkdir(parents=True)
        for f in sorted(sample.iterdir()):
            if f.name.endswith((".json.gz", ".xplane.pb")):
                shutil.copy(f, folder / f.name)
                if session.endswith("tf"):
                    break  # one TF worker is enough
    with serving(root, tmp_path_factory.mktemp("cache")) as base:
        yield base


@pytest.fixture
def page(browser, gpu_server):  # type: ignore[no-untyped-def]
    with watched_page(browser) as pg:
        yield pg


def query(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def grid(page) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    """The grid's rows as shown: {column id: text}."""
    rows = []
    for row in page.locator("#gpu-table .ag-center-cols-container .ag-row").all():
        cells = row.locator(".ag-cell").all()
        rows.append({c.get_attribute("col-id"): c.inner_text() for c in cells})
    return rows


def test_every_view_of_the_gpu_page_shows_htas_numbers_and_stays(page, gpu_server) -> None:  # type: ignore[no-untyped-def]
    frames = load(RANKS, cache=False)
    expected = {view: gpu_view(frames, view) for view in VIEWS}
    page.goto(gpu_server + "/gpu?session=2026_04_01_ddp")
    settle(page)
    assert page.get_by_role("radio", name="Temporal breakdown", exact=True).is_checked()
    rows = grid(page)
    assert [r["rank"] for r in rows] == ["0", "1"]
    want = expected["temporal"]
    shown = [float(r["idle_time_pctg"].replace(",", "").rstrip(" %")) for r in rows]
    assert shown == pytest.approx(want["idle_time_pctg"].tolist(), abs=0.01)
    bars = page.locator("#gpu-graph .barlayer .trace")
    assert bars.count() == 3  # compute, non-compute, idle

    for view, label in list(VIEWS.items())[1:]:
        page.get_by_role("radio", name=label, exact=True).check()
        settle(page)
        assert query(page)["view"] == view
        page.wait_for_timeout(1000)  # still there, not a transient state
        assert page.get_by_role("radio", name=label, exact=True).is_checked()
        summary = page.inner_text("#gpu-table .ag-paging-row-summary-panel")
        assert summary.replace("\n", " ").replace(",", "").endswith(f"of {len(expected[view])}")
        if view == "kernels":
            kinds = {r["kernel_type"] for r in grid(page)}
            assert kinds <= {"COMPUTATION", "COMMUNICATION", "MEMORY"}
            assert "COMMUNICATION" in kinds
        if view == "idle":  # the causes, stacked per rank and stream
            assert page.locator("#gpu-graph .barlayer .trace").count() == 3

    # the URL is the view: a reload shows it again; Back returns to the one before
    kept = page.url
    page.reload()
    settle(page)
    assert page.url == kept and page.get_by_role("radio", name="Memory bandwidth").is_checked()
    page.go_back()
    settle(page)
    assert query(page)["view"] == "queues"
    assert page.get_by_role("radio", name="Queue length", exact=True).is_checked()
    page.get_by_role("radio", name="Kernel types", exact=True).check()
    settle(page)

    with page.expect_download() as got:
        page.click("#gpu-csv")
    table = pd.read_csv(io.StringIO(Path(got.value.path()).read_text()))
    assert table["kernel_type"].tolist() == expected["kernel-types"]["kernel_type"].tolist()
    assert table["sum_us"].tolist() == expected["kernel-types"]["sum_us"].tolist()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "gpu_ranks.png"), full_page=True)
    assert page.errors == []


def test_a_link_without_a_session_keeps_its_view(page, gpu_server) -> None:  # type: ignore[no-untyped-def]
    """The newest session is shown and named in the URL, and the view the link asked for is
    kept (the shell once wrote ?session=… alone)."""
    page.goto(gpu_server + "/gpu?view=idle")
    settle(page)
    kept = query(page)
    assert kept["view"] == "idle" and kept["session"] in ("2026_04_01_ddp", "2026_04_02_tf")
    page.goto(gpu_server + "/gpu?view=idle&session=2026_04_01_ddp")
    settle(page)
    assert page.get_by_role("radio", name="Idle time", exact=True).is_checked()


def test_a_session_without_pytorch_ranks_says_where_to_look(page, gpu_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(gpu_server + "/gpu?session=2026_04_02_tf")
    settle(page)
    note = page.inner_text("#gpu-note")
    assert "holds no PyTorch profiler trace" in note and "Pod Viewer" in note
    assert page.errors == []


def test_the_pod_viewer_shows_pytorch_ranks_in_pytorchs_categories(page, gpu_server) -> None:  # type: ignore[no-untyped-def]
    """The two ranks' bars are PyTorch's categories with the analysis' numbers, for all steps
    and, after the slider moves to the next step, for that step, which the URL keeps."""
    from podscope.analyzers.session import SessionAnalysis

    analysis = SessionAnalysis(load(RANKS, cache=False))
    bars = "document.querySelector('#pod-bars .js-plotly-plot')"
    page.goto(gpu_server + "/pod?session=2026_04_01_ddp")
    settle(page)
    shown = page.evaluate(f"{bars}._fullData.map(t => [t.name, Array.from(t.y), Array.from(t.x)])")
    names = [name for name, _, _ in shown]
    assert names[:3] == ["GPU compute", "Communication: wait", "Communication: transfer"]
    assert "GPU idle" in names and "Device collectives" not in names
    want = analysis.step_rows(None).set_index("worker")
    for name, ranks, ms in shown:
        column = {"Communication: wait": "comm_wait_ns", "GPU compute": "gpu_compute_ns"}.get(name)
        if column:
            for rank, value in zip(ranks, ms, strict=True):
                assert value == pytest.approx(want.loc[rank, column] / 1e6, abs=1e-3)
    page.goto(gpu_server + "/pod?session=2026_04_01_ddp&step=0")
    settle(page)
    assert (page.locator("#pod-bars .gtitle").text_content() or "").startswith("Step 0")
    page.locator("#pod-step [role=slider]").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "document.querySelector('#pod-bars .gtitle')?.textContent.startsWith('Step 1')"
    )
    page.wait_for_function("location.search.includes('step=1')")
    page.reload()
    settle(page)
    assert (page.locator("#pod-bars .gtitle").text_content() or "").startswith("Step 1")
    step1 = analysis.step_rows(1).set_index("worker")
    shown = dict(
        (n, (y, x))
        for n, y, x in page.evaluate(
            f"{bars}._fullData.map(t => [t.name, Array.from(t.y), Array.from(t.x)])"
        )
    )
    ranks, ms = shown["Communication: transfer"]
    for rank, value in zip(ranks, ms, strict=True):
        assert value == pytest.approx(step1.loc[rank, "comm_transfer_ns"] / 1e6, abs=1e-3)
    assert page.errors == []
