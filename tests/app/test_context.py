"""The app's context lives on its Flask server: two apps in one process keep their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.context import current
from app.main import create_app
from app.settings import AppSettings


def test_two_apps_keep_their_own_context(tmp_path: Path) -> None:
    a = create_app(AppSettings(logdir=tmp_path / "a"))
    b = create_app(AppSettings(logdir=tmp_path / "b"))
    with a.server.test_request_context("/"):
        assert current().settings.logdir == tmp_path / "a"
    with b.server.test_request_context("/"):
        assert current().settings.logdir == tmp_path / "b"
        assert current().store.logdir == tmp_path / "b"
    assert a.server.test_client().get("/healthz").json["logdir"] == str(tmp_path / "a")


def test_outside_a_request_there_is_no_context() -> None:
    with pytest.raises(RuntimeError, match="no PodScope app context"):
        current()
