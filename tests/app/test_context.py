"""The app's context lives on its Flask server: two apps in one process keep their own."""

from __future__ import annotations

import os
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


def test_the_newest_session_is_the_newest_capture_not_the_last_name(tmp_path: Path) -> None:
    from app.store import SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    root = tmp_path / "plugins" / "profile"
    for name, age_s in [("upload_2025_01_01_00_00_00", 86_400), ("2026_01_05_capture", 0)]:
        (root / name).mkdir(parents=True)
        f = root / name / "h_1.xplane.pb"
        f.write_bytes(worker_trace("h_1", 3))
        os.utime(f, (f.stat().st_atime, f.stat().st_mtime - age_s))
    assert SessionStore(tmp_path).names() == ["2026_01_05_capture", "upload_2025_01_01_00_00_00"]
