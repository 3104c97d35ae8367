"""Watching a job from the dashboard, operated in a real browser: Watch mode on the Capture page
against two simulated workers that send step heartbeats, a slowdown that triggers a capture,
"Capture now", the History page (its captures, what changed, a click that opens one), and a
stop that stays stopped after a reload."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from podscope.collectors.heartbeat import Beats
from podscope.collectors.watch import read_status
from tests.app.test_browser import serving, settle
from tests.collectors.fake_agent import fake_agent

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class Loop:
    """A training loop in a thread: one heartbeat every ``step_s`` until stopped."""

    def __init__(self, beats: Beats, step_s: float) -> None:
        self.beats, self.step_s = beats, step_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stop.wait(self.step_s):
            self.beats.record(n)
            n += 1


@pytest.fixture(scope="module")
def job(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[str], list[Loop], Path]]:
    root = tmp_path_factory.mktemp("watch")
    with ExitStack() as stack:
        beats = [Beats(), Beats()]
        agents = [
            stack.enter_context(fake_agent(root / f"agent{i}", index=i, beats=beats[i]))[0]
            for i in range(2)
        ]
        loops = [Loop(b, 0.02) for b in beats]
        stack.callback(lambda: [loop.stop.set() for loop in loops])
        logdir = root / "logdir"
        logdir.mkdir()
        with serving(logdir, tmp_path_factory.mktemp("cache")) as base:
            yield base, agents, loops, logdir


@pytest.fixture
def pg(browser, job):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def wait_text(pg, selector: str, text: str, timeout: float = 60_000) -> None:  # type: ignore[no-untyped-def]
    pg.wait_for_function(
        "([s, t]) => (document.querySelector(s)?.innerText || '').includes(t)",
        arg=[selector, text],
        timeout=timeout,
    )


def test_watch_trigger_history_and_stop(pg, job) -> None:  # type: ignore[no-untyped-def]
    base, agents, loops, logdir = job
    pg.goto(base + "/capture")
    settle(pg)
    assert "Not watching." in pg.inner_text("#cap-watch-status")
    pg.fill("#cap-addresses", ",".join(agents))
    pg.fill("#cap-duration", "300")
    pg.fill("#cap-delay", "100")
    pg.fill("#cap-retries", "0")
    pg.fill("#cap-watch-every", "0")  # refused, in the page's words
    pg.locator("#cap-watch-start").click()
    wait_text(pg, "#cap-watch-said", "Every (minutes): a whole number from 1 to 1,440")
    pg.fill("#cap-watch-every", "10")
    pg.fill("#cap-watch-keep", "5")
    pg.fill("#cap-watch-rise", "50")
    pg.locator("#cap-watch-start").click()
    wait_text(pg, "#cap-watch-said", "Watching: a capture now and every 10 minutes")
    # The first scheduled capture, and both workers' heartbeats at ~20 ms a step.
    wait_text(pg, "#cap-watch-status", "scheduled: ")
    wait_text(pg, "#cap-watch-status", "Next scheduled capture in")
    rows = pg.locator("#cap-watch-status tbody tr")
    assert rows.count() == 2 and all("ok" in rows.nth(i).inner_text() for i in range(2))
    # Starting twice is refused.
    pg.locator("#cap-watch-start").click()
    wait_text(pg, "#cap-watch-said", "watching already")
    # Worker 1 slows down to 80 ms a step: the heartbeats trigger a capture on their own.
    baseline_ready(logdir, steps=40)  # steps judged since the first capture settled
    loops[1].step_s = 0.08
    wait_text(pg, "#cap-watch-status", "step time +", timeout=90_000)
    # A person asks for one.
    pg.locator("#cap-watch-now").click()
    wait_text(pg, "#cap-watch-said", "Asked this dashboard's watcher")
    wait_text(pg, "#cap-watch-status", "requested: from the Capture page")
    items = pg.locator("#cap-watch-status li")
    assert items.count() == 3
    # The History page: three captures summarized, their verdicts, what changed.
    pg.goto(base + "/history")
    wait_text(pg, "#hist-status", "3 captures summarized of 3 sessions", timeout=120_000)
    wait_text(pg, "#hist-status", "Watching (this dashboard)")
    grid = pg.locator("#hist-table .ag-center-cols-container .ag-row")
    grid.first.wait_for()
    assert grid.count() == 3
    reasons = pg.inner_text("#hist-table")
    assert "scheduled" in reasons and "step time +" in reasons and "requested" in reasons
    assert "against the capture before it" in pg.inner_text("#hist-changes") or (
        "nothing changed" in pg.inner_text("#hist-changes")
    )
    points = pg.locator("#hist-graph .xy2 .scatterlayer .point")  # the captures' axis
    assert points.count() == 3
    # two axes: the loop's heartbeats and the captures' traces disagree by design
    axes = pg.evaluate(
        "() => { const l = document.querySelector('#hist-graph .js-plotly-plot').layout;"
        " return [l.yaxis.title.text, l.yaxis2.title.text]; }"
    )
    assert axes == ["heartbeat step time (ms)", "capture step time, p50 from the trace (ms)"]
    # a click on a capture's point says what changed there (the oldest: nothing before it)…
    oldest = sorted(p.name for p in (logdir / "plugins" / "profile").iterdir())[0]
    points.first.click(force=True)
    wait_text(pg, "#hist-changes", f"{oldest}: the first capture")
    # …and it stays chosen while the page refreshes (the next tick re-renders the status)
    pg.evaluate(
        "() => new Promise(done => new MutationObserver((_, o) => { o.disconnect(); done(); })"
        ".observe(document.querySelector('#hist-status'), {childList: true, subtree: true,"
        " characterData: true}))"
    )
    assert pg.inner_text("#hist-changes").startswith(f"{oldest}: the first capture")
    assert "/history" in pg.url
    # its link opens it
    pg.locator("#hist-changes a", has_text="open it in the Pod Viewer").click()
    pg.wait_for_url("**/pod?session=*")
    assert f"session={oldest}" in pg.url
    # Stop: stays stopped after a reload.
    pg.goto(base + "/capture")
    settle(pg)
    pg.locator("#cap-watch-stop").click()
    wait_text(pg, "#cap-watch-said", "Stopped watching; the sessions stay.")
    pg.reload()
    settle(pg)
    wait_text(pg, "#cap-watch-status", "Not watching.")
    assert pg.errors == []
    # What a watched logdir holds: XProf's sessions (capture.json beside the traces) and
    # PodScope's own files in a hidden folder that TensorBoard does not take for a run.
    assert sorted(p.name for p in logdir.iterdir()) == [".podscope", "plugins"]
    sessions = sorted((logdir / "plugins" / "profile").iterdir())
    assert len(sessions) == 3
    assert all(len(list(s.glob("*.xplane.pb"))) == 2 for s in sessions)
    assert {f.name for f in (logdir / ".podscope").iterdir()} >= {"watch.json", "history.jsonl"}


def baseline_ready(logdir: Path, steps: int, timeout_s: float = 60) -> None:
    """Waits until the watcher has judged ``steps`` steps of every worker (its watch.json)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = read_status(logdir) or {}
        judged = [w.get("judged_steps", 0) for w in (status.get("workers") or {}).values()]
        if judged and min(judged) >= steps:
            return
        time.sleep(0.1)  # polling a file for a state
    pytest.fail(f"the watcher never judged {steps} steps per worker: {read_status(logdir)}")
