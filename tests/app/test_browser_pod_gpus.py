"""A GPU pod in the dashboard: 64 hosts of 8 GPUs each (512 devices), operated as a person
does. The first screen stays a pod's: hosts in the heat map, the devices said by their spread
and the least busy, not one badge each; a host opened shows its GPUs' bars; every page stays a
few screens. (``make bench`` opens 1,024 hosts x 8 GPUs: ``bench.pod_dashboard``.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.synth import pod_host, pod_session
from tests.app import test_browser_pod
from tests.app.test_browser import ARTIFACTS, serving, settle
from tests.app.test_browser_pod import GROWN, opened, rows_of_heatmap

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.slow]

HOSTS, GPUS = 64, 8
CULPRIT = 7
page = test_browser_pod.page  # the same page fixture, with this module's server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("gpu-pods")
    session = pod_session(root, HOSTS, steps=12, ops_per_step=20, slow={CULPRIT: 50}, devices=GPUS)
    with serving(session.parents[2], tmp_path_factory.mktemp("cache")) as base:
        yield base


def test_a_gpu_pod_is_said_by_its_hosts_and_its_devices_spread(page, server) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + "/pod?session=pod")
    page.screenshot(path=str(ARTIFACTS / f"pod_{HOSTS}x{GPUS}.png"), full_page=True)
    assert f"straggler: {pod_host(CULPRIT)}" in page.inner_text("#pod-badges")
    assert len(rows_of_heatmap(page)) == HOSTS  # hosts, not their 512 devices
    devices = page.inner_text("#devices")
    assert devices.startswith(f"{HOSTS * GPUS} busy on {HOSTS} hosts")
    assert "least busy" in devices
    assert page.locator("#devices .badge").count() == 5  # not 512 badges
    assert page.evaluate("document.body.scrollHeight") < 5000
    # a host opened: each of its GPUs' bars
    page.locator("#pod-outliers a", has_text=pod_host(CULPRIT)).first.click()
    page.wait_for_function(f"() => window.location.search.includes('{pod_host(CULPRIT)}')")
    settle(page)
    page.wait_for_timeout(1000)
    bars = page.evaluate("document.querySelector('#pod-bars .js-plotly-plot').data")
    names = {str(y) for trace in bars for y in trace["y"]}
    assert sum(f"GPU:{d}" in " ".join(names) for d in range(GPUS)) == GPUS, names
    assert page.evaluate(GROWN) == []  # a host's GPU rows have their room: drawn once
    # a rack of 32 hosts: 256 rows of bars were 10,390 px and over a second to draw; each
    # host's GPUs are one bar now, their mean
    page.fill("#pod-hosts", "s0-r00-*")
    page.press("#pod-hosts", "Enter")
    page.wait_for_function("() => window.location.search.includes('hosts=s0-r00-')")
    settle(page)
    page.wait_for_timeout(1000)  # what stays
    bars = page.evaluate("document.querySelector('#pod-bars .js-plotly-plot').data")
    rows = {str(y) for trace in bars for y in trace["y"]}
    assert rows == {pod_host(i) for i in range(32)}, rows
    assert "accelerators: their mean" in page.evaluate(
        "document.querySelector('#pod-bars .js-plotly-plot').layout.title.text"
    )
    assert page.errors == []


@pytest.mark.parametrize("path", ["/workers", "/ops", "/timeline", "/diagnostics"])
def test_every_page_is_usable_on_a_gpu_pod(page, server, path: str) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + path + "?session=pod")
    page.screenshot(
        path=str(ARTIFACTS / f"pod_{HOSTS}x{GPUS}_{path.strip('/')}.png"), full_page=True
    )
    assert page.evaluate("document.body.scrollHeight") < 6000, "a page as long as the pod"
    if page.locator("#devices").count():
        assert page.locator("#devices .badge").count() <= 5
    assert page.errors == []
