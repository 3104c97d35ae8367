"""The capture layout: one make/parse pair, and capture.json written by collectors and read
back by the loader's side."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.capture import CaptureOptions, CaptureResult, WorkerResult
from collectors.status import Status
from trace_parsers import layout
from trace_parsers.loader import resolve, sessions, worker_label


def test_make_and_parse_pair(tmp_path: Path) -> None:
    d = layout.session_dir(tmp_path, "2026_12_01_10_00_00")
    assert d == tmp_path / "plugins" / "profile" / "2026_12_01_10_00_00"
    f = d / layout.xplane_name("10.0.0.1_6009")
    assert layout.worker_label(f.name) == "10.0.0.1_6009" == worker_label(f)
    assert layout.worker_label("h_1.xplane.pb.gz") == "h_1"
    d.mkdir(parents=True)
    f.write_bytes(b"x")
    assert sessions(tmp_path) == ["2026_12_01_10_00_00"]
    assert resolve(tmp_path) == [f]
    assert layout.tf_trace_path(Path("/r"), "s", "host:6009") == Path("/r/s/host_6009.xplane.pb")


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\x00b"])
def test_names_that_leave_their_folder_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(layout.LayoutError):
        layout.session_dir(tmp_path, bad)
    with pytest.raises(layout.LayoutError):
        layout.confined(tmp_path, bad or "x", bad)


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "s").symlink_to(tmp_path)
    with pytest.raises(layout.LayoutError, match="outside"):
        layout.confined(tmp_path / "root", "s", "secret")


def test_capture_json_round_trip(tmp_path: Path) -> None:
    opts = CaptureOptions(logdir=tmp_path, token="secret")
    d = layout.session_dir(tmp_path, "s1")
    workers = [
        WorkerResult("h_1", "h:1", status=Status.OK, role="worker", index=0, bytes=12),
        WorkerResult("h_2", "h:2", status=Status.UNREACHABLE, reason="no answer"),
    ]
    CaptureResult("s1", d, opts, workers, start_timestamp_ns=42).save()
    m = layout.read_manifest(d)
    assert m is not None and m.session == "s1" and m.start_timestamp_ns == 42
    assert [(w.label, w.status, w.reason) for w in m.workers] == [
        ("h_1", "ok", ""),
        ("h_2", "unreachable", "no answer"),
    ]
    assert m.workers[0].role == "worker" and m.workers[0].bytes == 12
    assert "token" not in m.options and m.options["logdir"] == str(tmp_path)
    assert layout.read_manifest(tmp_path) is None


def test_unreadable_manifest_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / layout.MANIFEST_NAME).write_text('{"workers": [{"label": "x"}]}')
    with pytest.raises(layout.LayoutError, match=r"capture\.json"):
        layout.read_manifest(tmp_path)
    (tmp_path / layout.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(layout.LayoutError, match="unreadable"):
        layout.read_manifest(tmp_path)


def test_new_session_dirs_in_one_second_are_distinct(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from datetime import datetime, timezone

    from trace_parsers.layout import new_session_dir

    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
    first, second = new_session_dir(tmp_path, now=now), new_session_dir(tmp_path, now=now)
    assert (first.name, second.name) == ("2026_12_01_12_00_00", "2026_12_01_12_00_00_2")
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())
