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
from tests.app.test_browser import ARTIFACTS, serving, settle
from tests.conftest import SHARED_TRACES

pytestmark = [pytest.mark.browser, pytest.mark.slow]
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
    context = browser.new_context(viewport={"width": 1400, "height": 1200}, accept_downloads=True)
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


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
    expected = {
        view: gpu_view(load(RANKS, cache=False), view)
        for view in ("temporal", "overlap", "kernel-types", "kernels")
    }
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

    for label, view in (
        ("Communication overlap", "overlap"),
        ("Kernel types", "kernel-types"),
        ("Top kernels", "kernels"),
    ):
        page.get_by_role("radio", name=label, exact=True).check()
        settle(page)
        assert query(page)["view"] == view
        page.wait_for_timeout(1000)  # still there, not a transient state
        assert page.get_by_role("radio", name=label, exact=True).is_checked()
        summary = page.inner_text("#gpu-table .ag-paging-row-summary-panel")
        assert summary.replace("\n", " ").endswith(f"of {len(expected[view])}"), summary
    kinds = {r["kernel_type"] for r in grid(page)}
    assert kinds <= {"COMPUTATION", "COMMUNICATION", "MEMORY"} and "COMMUNICATION" in kinds

    # the URL is the view: a reload shows it again; Back returns to the one before
    kept = page.url
    page.reload()
    settle(page)
    assert page.url == kept and page.get_by_role("radio", name="Top kernels").is_checked()
    page.go_back()
    settle(page)
    assert query(page)["view"] == "kernel-types"
    assert page.get_by_role("radio", name="Kernel types", exact=True).is_checked()

    with page.expect_download() as got:
        page.click("#gpu-csv")
    table = pd.read_csv(io.StringIO(Path(got.value.path()).read_text()))
    assert table["kernel_type"].tolist() == expected["kernel-types"]["kernel_type"].tolist()
    assert table["sum_us"].tolist() == expected["kernel-types"]["sum_us"].tolist()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "gpu_ranks.png"), full_page=True)
    assert page.errors == []


def test_a_session_without_pytorch_ranks_says_where_to_look(page, gpu_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(gpu_server + "/gpu?session=2026_04_02_tf")
    settle(page)
    note = page.inner_text("#gpu-note")
    assert "holds no PyTorch profiler trace" in note and "Pod Viewer" in note
    assert page.errors == []
