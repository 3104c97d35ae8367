"""Fixtures shared by the browser tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Debian Chromium driven by Playwright, one per test module."""
    from playwright.sync_api import sync_playwright

    from tests.app.test_browser import CHROME_ARGS, CHROMIUM

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        yield b
        b.close()


@contextmanager
def watched_page(browser: Any) -> Iterator[Any]:
    """A new page (1400 × 1200, downloads allowed) whose ``errors`` collects the browser
    console's errors and uncaught exceptions; closed with its context."""
    context = browser.new_context(viewport={"width": 1400, "height": 1200}, accept_downloads=True)
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()
