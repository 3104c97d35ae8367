"""``cluster down`` signals only processes it can prove it started (no TensorFlow needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reference_engine import cluster
from reference_engine.config import EngineError


def _manifest(run_dir: Path, pids: list[int]) -> cluster.Manifest:
    tasks = tuple(
        cluster.TaskInfo("worker", i, pid, "127.0.0.1:1", "127.0.0.1:2", str(run_dir / "log"))
        for i, pid in enumerate(pids)
    )
    m = cluster.Manifest(str(run_dir.resolve()), "mwms-loop", "baseline", tasks, time.time())
    m.save()
    return m


def _sleeper(*argv: str) -> subprocess.Popen[bytes]:
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, *argv], start_new_session=True)


def test_down_stops_its_tasks_and_nothing_else(tmp_path: Path) -> None:
    config = str((tmp_path / "engine.json").resolve())
    ours = _sleeper("reference_engine.worker", "--config", config)  # what up() starts
    other_run = _sleeper("reference_engine.worker", "--config", "/elsewhere/engine.json")
    stranger = _sleeper()  # an unrelated process whose pid landed in the manifest
    try:
        m = _manifest(tmp_path, [0, 1, ours.pid, other_run.pid, stranger.pid])
        cluster.down(cluster.Manifest.load(tmp_path), grace_s=2)
        assert ours.wait(timeout=10) is not None
        time.sleep(0.2)
        assert other_run.poll() is None and stranger.poll() is None  # left alone
        assert [t.pid for t in m.tasks if cluster.started_by(m, t)] == []  # ours has ended
    finally:
        for p in (ours, other_run, stranger):
            p.kill()
            p.wait()


@pytest.mark.parametrize(
    "text",
    ['{"tasks": 3}', '{"run_dir": "x"}', '{"tasks": [{"pid": "1"}]}', "[]", "not json"],
)
def test_a_malformed_manifest_is_one_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / cluster.MANIFEST).write_text(text)
    with pytest.raises(EngineError, match="manifest"):
        cluster.Manifest.load(tmp_path)


def test_a_manifest_with_a_string_pid_is_refused(tmp_path: Path) -> None:
    m = _manifest(tmp_path, [123])
    data = json.loads((tmp_path / cluster.MANIFEST).read_text())
    data["tasks"][0]["pid"] = "123"
    (tmp_path / cluster.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(EngineError, match="pid is not an integer"):
        cluster.Manifest.load(Path(m.run_dir))


def test_up_interrupted_leaves_no_task_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM turned into an exception, as ``python -m verify`` does) while ``up``
    waits for its tasks stops every task it started: they run in their own sessions, so
    nothing else would."""
    from reference_engine.config import EngineConfig

    started: list[int] = []

    def interrupted(manifest: cluster.Manifest, timeout_s: float) -> None:
        started.extend(t.pid for t in manifest.tasks)
        raise KeyboardInterrupt

    monkeypatch.setattr(cluster, "_wait_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cluster.up(EngineConfig(steps=5), workers=2, run_dir=tmp_path / "run")
    assert len(started) == 2
    assert not [pid for pid in started if cluster.alive(pid)]
