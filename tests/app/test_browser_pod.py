"""A pod of 512 hosts in the dashboard, operated as a person does: the first screen names the
hosts that matter and why; hosts are found by name or pattern, grouped by rack or by a mapping
file, the heat map shows a chosen metric and keeps its zoom; every page stays usable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.synth import pod_host, pod_session
from tests.app.test_browser import ARTIFACTS, grid_shows, serving, settle

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.slow]

HOSTS = 512
CULPRIT, SLOWER = 7, 300  # host indexes: ops 2.5x as long (late 30 % of a step), 1.35x (7 %)
HEAT = "document.querySelector('#pod-heatmap .js-plotly-plot')"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("pods")
    session = pod_session(root, HOSTS, steps=12, ops_per_step=20, slow={CULPRIT: 50, SLOWER: 27})
    logdir = session.parents[2]
    # an earlier, healthy run of the same pod: Compare's baseline
    healthy = pod_session(root, HOSTS, steps=12, ops_per_step=20)
    healthy.rename(session.parent / "2026_12_01_00_00_00")
    with serving(logdir, tmp_path_factory.mktemp("cache")) as base:
        yield base


@pytest.fixture
def page(browser, server):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


def opened(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """Goes to ``url`` and waits for the page drawn from the analysis (the first open
    analyses the pod in the background, with progress, then the page reloads itself)."""
    page.goto(url)
    page.wait_for_function(
        "() => !document.getElementById('prep-bar') && document.querySelector('.podscope-card')",
        timeout=300_000,
    )
    settle(page)


def rows_of_heatmap(page) -> list[str]:  # type: ignore[no-untyped-def]
    return list(page.evaluate(f"{HEAT}.data[0].y"))


def query(page) -> str:  # type: ignore[no-untyped-def]
    return str(page.evaluate("window.location.search"))


def test_the_first_screen_names_the_hosts_that_matter_and_why(page, server) -> None:  # type: ignore[no-untyped-def]
    page.goto(server + "/pod?session=pod")
    page.get_by_text(f"Analysing the {HOSTS} workers of pod").wait_for(timeout=60_000)  # progress
    page.locator("#pod-badges").wait_for(timeout=300_000)
    settle(page)
    page.screenshot(path=str(ARTIFACTS / "pod_512.png"), full_page=True)
    assert f"straggler: {pod_host(CULPRIT)}" in page.inner_text("#pod-badges")
    assert page.inner_text("#pod-summary").startswith(f"{HOSTS} hosts · {HOSTS} selected")
    # the worker column is pinned: its cells are rows of their own container
    worker = page.locator("#pod-outliers .ag-pinned-left-cols-container .ag-row").first
    rest = page.locator("#pod-outliers .ag-center-cols-container .ag-row").first.inner_text()
    assert pod_host(CULPRIT) in worker.inner_text()
    assert "culprit" in rest and "host_compute" in rest
    assert pod_host(SLOWER) in page.inner_text("#pod-outliers")
    assert len(rows_of_heatmap(page)) == HOSTS
    assert "pick at most 32" in page.inner_text("#pod-bars-note")  # no 512 bar rows
    # the page is a few screens, not one row of bars per host (18,000 px before)
    assert page.evaluate("document.body.scrollHeight") < 5000
    assert page.errors == []


def test_search_group_and_metric_are_views_that_stay(page, server) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + "/pod?session=pod")
    page.fill("#pod-hosts", "s0-r00-*")
    page.press("#pod-hosts", "Enter")
    page.wait_for_function("() => window.location.search.includes('hosts=s0-r00-')")
    settle(page)
    assert "32 selected" in page.inner_text("#pod-summary")
    assert len(rows_of_heatmap(page)) == 32
    page.wait_for_timeout(2000)
    assert "32 selected" in page.inner_text("#pod-summary")  # still there seconds later
    assert page.input_value("#pod-hosts") == "s0-r00-*"
    # a rack's worth of hosts: few enough for each one's bars
    assert page.locator("#pod-bars .js-plotly-plot").count() == 1

    page.fill("#pod-hosts", "no-such-host")  # nothing matches: said, the controls kept
    page.press("#pod-hosts", "Enter")
    page.wait_for_function("() => window.location.search.includes('no-such-host')")
    settle(page)
    assert "no host matches 'no-such-host'" in page.inner_text("#pod-summary")

    page.fill("#pod-hosts", "")
    page.press("#pod-hosts", "Enter")
    page.wait_for_function("() => !window.location.search.includes('hosts=')")
    settle(page)
    page.click("#pod-group")
    page.get_by_role("option", name="s0-r00… (name level 2)").click()
    page.wait_for_function("() => window.location.search.includes('group=2')")
    settle(page)
    racks = rows_of_heatmap(page)
    assert len(racks) == HOSTS // 32 and racks[0] == "s0-r00"
    assert "16 groups" in page.inner_text("#pod-summary")
    assert page.locator("#pod-bars .js-plotly-plot").count() == 1  # one bar per rack

    page.click("#pod-metric")
    page.get_by_role("option", name="Host compute").click()
    page.wait_for_function("() => window.location.search.includes('heat=host_compute')")
    settle(page)
    assert "Host compute per group" in page.evaluate(f"{HEAT}.layout.title.text")
    page.reload()
    settle(page)
    assert len(rows_of_heatmap(page)) == HOSTS // 32  # the view is the URL
    assert page.errors == []


def test_the_host_table_sorts_and_filters_every_host_on_the_server(page, server) -> None:  # type: ignore[no-untyped-def]
    """The per-host table comes a block of rows at a time (at 1,024 hosts x 8 GPUs, all 9,216
    rows were 3.6 MB of every view): its sort and its column filter apply to every host."""
    blocks: list[int] = []

    def count_rows(response) -> None:  # type: ignore[no-untyped-def]
        if "_dash-update-component" in response.url and b"rowData" in response.body():
            blocks.append(response.body().count(b'"step_ms_mean"'))

    page.on("response", count_rows)
    opened(page, server + "/pod?session=pod")

    def shows(first: str, rows: str) -> None:
        grid_shows(page, "pod-table", "worker", first, rows)

    shows(pod_host(0), f"1 to 20 of {HOSTS}")
    assert blocks and max(blocks) <= 100  # blocks, never every host
    header = page.locator("#pod-table .ag-header-cell[col-id=straggler_score]")
    header.click()  # ascending
    header.click()  # descending: the latest host first
    shows(pod_host(CULPRIT), f"1 to 20 of {HOSTS}")
    page.locator("#pod-table .ag-header-cell[col-id=worker] .ag-header-cell-filter-button").click()
    page.locator(".ag-filter-body input").first.fill("h007")
    shows(pod_host(CULPRIT), f"1 to {HOSTS // 32} of {HOSTS // 32}")  # one per rack
    page.keyboard.press("Escape")
    assert page.errors == []


def test_a_zoom_of_the_heat_map_stays(page, server) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + "/pod?session=pod")
    box = page.locator("#pod-heatmap .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.1, box["y"] + box["height"] * 0.05)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.2, steps=5)
    page.mouse.up()
    page.wait_for_function("() => window.location.search.includes('hz=')")
    settle(page)
    page.wait_for_timeout(2000)
    kept = page.evaluate(f"{HEAT}.layout.yaxis.range")
    assert kept and abs(kept[1] - kept[0]) < HOSTS / 2  # zoomed into the rows
    page.reload()
    settle(page)
    assert page.evaluate(f"{HEAT}.layout.yaxis.range") == pytest.approx(kept, abs=0.01)


def test_a_mapping_file_groups_the_hosts(page, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + "/pod?session=pod")
    mapping = tmp_path / "hosts.csv"
    lines = ["host,group"] + [
        f"{pod_host(i).rsplit('_', 1)[0]},{'east' if i < HOSTS // 2 else 'west'}"
        for i in range(HOSTS)
    ]
    mapping.write_text("\n".join(lines))
    page.set_input_files("#pod-map-upload input[type=file]", str(mapping))
    page.wait_for_function("() => window.location.search.includes('group=map')")
    settle(page)
    assert rows_of_heatmap(page) == ["east", "west"]
    bad = tmp_path / "bad.csv"
    bad.write_text("host,group\nonly-one-field\n")
    page.set_input_files("#pod-map-upload input[type=file]", str(bad))
    page.get_by_text("bad.csv: line 2").wait_for()
    assert rows_of_heatmap(page) == ["east", "west"]  # the good mapping stays


def test_an_outlier_opens_its_own_bars(page, server) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + "/pod?session=pod")
    page.locator("#pod-outliers a", has_text=pod_host(CULPRIT)).first.click()
    page.wait_for_function(f"() => window.location.search.includes('{pod_host(CULPRIT)}')")
    settle(page)
    assert "1 selected" in page.inner_text("#pod-summary")
    bars = page.evaluate("document.querySelector('#pod-bars .js-plotly-plot').data[0].y")
    assert list(bars) == [pod_host(CULPRIT)]


@pytest.mark.parametrize("path", ["/workers", "/ops", "/compare", "/timeline", "/diagnostics"])
def test_every_page_is_usable_at_pod_size(page, server, path: str) -> None:  # type: ignore[no-untyped-def]
    opened(page, server + path + "?session=pod")
    name = path.strip("/")
    page.screenshot(path=str(ARTIFACTS / f"pod_512_{name}.png"), full_page=True)
    assert page.locator(".alert-danger").count() == 0 or name == "workers"  # the culprit alert
    assert page.evaluate("document.body.scrollHeight") < 6000, "a page as long as the pod"
    if name == "workers":
        verdict = page.inner_text(".alert-danger")
        assert f"{pod_host(CULPRIT)} is the culprit" in verdict
        assert f"{HOSTS - 2} workers wait for it" in verdict  # one line, not 510 names
        # the second slowed host is slow itself, not the culprit's victim
        assert (
            f"Slow itself too, though less (late in nearly every step, and waiting for it): {pod_host(SLOWER)}."
            in verdict
        )
        # the workers that matter first: the culprit, then the next slowest (sorted by name
        # they were rows 8 and 301 of 512)
        card = page.locator(".podscope-card", has_text="Culprits and victims").first
        roles = card.locator(".ag-root-wrapper").first  # then the slow worker-steps' grid
        first = [
            roles.locator(f".ag-pinned-left-cols-container [row-index='{i}']").inner_text()
            for i in (0, 1)
        ]
        assert [f.strip() for f in first] == [pod_host(CULPRIT), pod_host(SLOWER)], first
    if name == "ops":
        # each op once across the hosts (not 512 rows of each): its spread and slowest host
        page.get_by_text(f"ops across {HOSTS} workers by self time").wait_for()
        first = page.locator("#ops-table .ag-center-cols-container .ag-row[row-index='0']")
        assert first.locator("[col-id=workers]").inner_text() == str(HOSTS)
        labels = page.evaluate("document.querySelector('#ops-top .js-plotly-plot').data[0].y")
        assert len(labels) == 20 and len(set(labels)) == 20, labels  # 20 different ops
        assert all(f"· {HOSTS} workers" in label for label in labels), labels[:3]
        # workers compared per op by their spread, not in 512 columns; the slowest named
        heads = page.locator("#ops-compare th").all_inner_texts()
        assert heads[-6:] == ["median", "min", "max", "slowest", "spread", "ratio"], heads
        assert pod_host(CULPRIT) in page.inner_text("#ops-compare")
        # pickers search: type a host's name, pick it
        page.click("#ops-worker")
        page.locator(".dash-dropdown-search").fill(pod_host(SLOWER))
        page.locator("[role=option]", has_text=pod_host(SLOWER)).click()
        page.wait_for_function(f"() => window.location.search.includes('{pod_host(SLOWER)}')")
    if name == "timeline":  # hosts picked by the outliers, not from 512 checkboxes
        page.click("#tl-outliers")
        page.wait_for_function(f"() => window.location.search.includes('{pod_host(SLOWER)}')")
        settle(page)
        assert page.locator("input[type=checkbox]").count() < 20
    assert page.errors == []


def test_a_view_drawn_sends_no_url_writer_to_the_server(page, server) -> None:  # type: ignore[no-untyped-def]
    """Dash calls the controls' URL writers again on every view drawn (their inputs are new);
    they run in the browser, so a view costs its layout and its grid's rows, no more."""
    opened(page, server + "/pod?session=pod")
    outputs: list[str] = []

    def posted(request) -> None:  # type: ignore[no-untyped-def]
        if "_dash-update-component" in request.url:
            outputs.append(str(json.loads(request.post_data or "{}").get("output", "")))

    page.on("request", posted)
    page.fill("#pod-hosts", "s0-r01-*")
    page.press("#pod-hosts", "Enter")
    page.wait_for_function("() => window.location.search.includes('hosts=s0-r01-')")
    settle(page)
    assert "32 selected" in page.inner_text("#pod-summary")
    assert any("_pages_content" in o for o in outputs)  # the view was drawn by the server
    assert not [o for o in outputs if "shell-url.search" in o], outputs
    # the Timeline's URL writer needs the analysis' defaults and stays on the server: a view
    # drawn (a new page, a link to the outliers) asks nothing of it, a control changed does
    outputs.clear()
    opened(page, server + "/timeline?session=pod")
    page.click("#tl-outliers")
    page.wait_for_function("() => window.location.search.includes('worker=')")
    settle(page)
    assert not [o for o in outputs if "shell-url.search" in o], outputs
    page.fill("#tl-search", "MatMul")
    page.press("#tl-search", "Enter")
    page.wait_for_function("() => window.location.search.includes('q=MatMul')")
    assert [o for o in outputs if "shell-url.search" in o], outputs
    assert "worker=" in page.evaluate("window.location.search")  # the outliers kept
    assert page.errors == []


#: Per figure of the page, the margins plotly.js laid it out with against those the figure
#: asked for (``app.figures.margins.reserve``): where they differ, automargin found labels,
#: a legend or a colour bar without room and laid the figure out a second time.
GROWN = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(gd => {
  const want = gd.layout.margin || {}, got = gd._fullLayout._size;
  return ['l', 'r', 't', 'b'].filter(k => Math.round(got[k]) > Math.round(want[k] ?? 80))
    .map(k => `${gd.parentElement.id || gd.id} ${k}: ${want[k]} -> ${got[k]}`);
})"""


@pytest.mark.parametrize(
    "path",
    [
        "/pod?session=pod",
        "/pod?session=pod&group=2",
        "/pod?session=pod&hosts=s0-r00-*",
        "/ops?session=pod",
        "/timeline?session=pod",
        "/diagnostics?session=pod",
    ],
)
def test_each_figure_is_laid_out_once(page, server, path: str) -> None:  # type: ignore[no-untyped-def]
    """Every figure of the pod's views has the room for its labels, legend and colour bar
    before plotly.js draws it: none is laid out a second time with wider margins (half of
    their drawing time on a 1,024-host pod)."""
    opened(page, server + path)
    assert page.locator(".js-plotly-plot").count() >= 1
    assert page.evaluate(GROWN) == []
