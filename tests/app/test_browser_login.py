"""A colleague logs in to a dashboard that asks for a login, uses every page, logs out and is
refused (headless Chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.test_browser import make_logdir, serving, settle, tflite_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = "team-token-123"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = make_logdir(tmp_path_factory.mktemp("logdir"))
    env = {"PODSCOPE_DASHBOARD_TOKEN": TOKEN}
    with serving(root, tmp_path_factory.mktemp("cache"), env) as base:
        yield base


def test_log_in_use_every_page_log_out(browser, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/ops")
    assert page.url.startswith(server + "/login")  # a stranger sees the login, not the app
    page.fill("input[name=secret]", "a guess")
    page.click("button[type=submit]")
    page.wait_for_selector("text=Wrong user, password or token.")
    page.fill("input[name=secret]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(server + "/ops")
    settle(page)
    cookie = next(c for c in context.cookies() if c["name"] == "podscope_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    links = page.locator(".podscope-nav a")
    names = [links.nth(i).inner_text() for i in range(links.count())]
    assert len(names) >= 8
    for name in names:  # every page, from the navbar, as a person goes
        page.locator(".podscope-nav a", has_text=name).first.click()
        settle(page)
        assert "log in first" not in page.inner_text("body"), name
        assert page.locator("#_pages_content").inner_text().strip(), name
    upload = tmp_path / "phone.systrace"
    upload.write_bytes(tflite_trace())
    page.goto(server + "/")
    settle(page)
    page.set_input_files("#sessions-upload input[type=file]", str(upload))
    page.wait_for_selector("text=1 worker(s)")

    page.click("text=Log out")
    page.wait_for_url(server + "/login")
    page.goto(server + "/pod")
    assert page.url.startswith(server + "/login")
    status = page.evaluate("fetch('/_dash-layout').then(r => r.status)")
    assert status == 401
    assert errors == []
    context.close()
