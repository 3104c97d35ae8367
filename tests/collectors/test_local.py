"""Traces a job wrote itself become a session like a capture's (``collectors.local``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podscope.collectors.local import collect_local
from podscope.trace_parsers.layout import LayoutError, read_manifest


def _files(tmp_path: Path, n: int) -> dict[str, Path]:
    out = {}
    for i in range(n):
        p = tmp_path / "run" / f"p{i}" / "host.xplane.pb"
        p.parent.mkdir(parents=True)
        p.write_bytes(b"x" * (i + 1))
        out[f"jax-worker-{i}"] = p
    return out


def test_files_move_into_one_session_with_a_manifest(tmp_path: Path) -> None:
    files = _files(tmp_path, 2)
    session = collect_local(files, tmp_path / "logdir", {"engine": "jax"}, label="jax baseline")
    assert session.parent == tmp_path / "logdir" / "plugins" / "profile"
    assert sorted(p.name for p in session.iterdir()) == [
        "capture.json",
        "jax-worker-0.xplane.pb",
        "jax-worker-1.xplane.pb",
    ]
    assert not any(p.exists() for p in files.values())  # moved, not copied
    manifest = read_manifest(session)
    assert manifest is not None and manifest.label == "jax baseline"
    raw = json.loads((session / "capture.json").read_text())
    assert [(w["label"], w["status"], w["bytes"]) for w in raw["workers"]] == [
        ("jax-worker-0", "ok", 1),
        ("jax-worker-1", "ok", 2),
    ]
    # a second run in the same second gets its own folder
    assert collect_local(_files(tmp_path / "b", 1), tmp_path / "logdir") != session


@pytest.mark.parametrize("worker", ["../evil", "a/b", "", ".."])
def test_a_worker_label_that_is_not_a_plain_name_is_refused(tmp_path: Path, worker: str) -> None:
    files = {worker: next(iter(_files(tmp_path, 1).values()))}
    with pytest.raises(LayoutError):
        collect_local(files, tmp_path / "logdir")
    assert not (tmp_path / "logdir").exists()


def test_a_missing_file_is_named_and_nothing_is_made(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"gone\.xplane\.pb"):
        collect_local({"w": tmp_path / "gone.xplane.pb"}, tmp_path / "logdir")
    assert not (tmp_path / "logdir").exists()
