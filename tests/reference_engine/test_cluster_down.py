"""``cluster down`` signals only processes it can prove it started (no TensorFlow needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineError


def _manifest(run_dir: Path, pids: list[int], started: list[int] | None = None) -> cluster.Manifest:
    """A manifest of ``pids``, each with its process's start time (or ``started``'s)."""
    starts = started or [cluster.process_start(pid) or 0 for pid in pids]
    tasks = tuple(
        cluster.TaskInfo(
            "worker", i, pid, "127.0.0.1:1", "127.0.0.1:2", str(run_dir / "log"), started=t
        )
        for i, (pid, t) in enumerate(zip(pids, starts, strict=True))
    )
    m = cluster.Manifest(str(run_dir.resolve()), "mwms-loop", "baseline", tasks, time.time())
    m.save()
    return m


def _sleeper(*argv: str) -> subprocess.Popen[bytes]:
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, *argv], start_new_session=True)


def test_down_stops_its_tasks_and_nothing_else(tmp_path: Path) -> None:
    config = str((tmp_path / "engine.json").resolve())
    ours = _sleeper("podscope.reference_engine.worker", "--config", config)  # what up() starts
    other_run = _sleeper("podscope.reference_engine.worker", "--config", "/elsewhere/engine.json")
    stranger = _sleeper()  # an unrelated process whose pid landed in the manifest
    try:
        m = _manifest(tmp_path, [0, 1, -1, ours.pid, other_run.pid, stranger.pid])
        done = cluster.down(cluster.Manifest.load(tmp_path), grace_s=2)
        assert ours.wait(timeout=10) is not None
        assert other_run.poll() is None and stranger.poll() is None  # left alone
        assert [t.pid for t in m.tasks if cluster.started_by(m, t)] == []  # ours has ended
        assert done.stopped == ("worker:3",) and len(done.left) == 5
        said = done.summary()
        assert said.startswith("stopped 1 of 6 tasks") and "worker:4 (pid" in said
        # a second down stops nothing, and says so
        again = cluster.down(cluster.Manifest.load(tmp_path), grace_s=2).summary()
        assert again.startswith("stopped 0 of 6 tasks")
    finally:
        for p in (ours, other_run, stranger):
            p.kill()
            p.wait()


#: A task as the engine's worker starts (``stop_on_signals`` first), then stuck as a TF task is
#: on its way out: a thread that never ends and an exit handler that waits (TF's coordination
#: service's shutdown barrier), with its main thread in a step.
STUCK_ON_EXIT = """
import atexit, sys, threading, time
from podscope.reference_engine.worker import stop_on_signals
if sys.argv[1] == "handled":
    stop_on_signals()
threading.Thread(target=lambda: time.sleep(600)).start()
atexit.register(lambda: time.sleep(600))
print("training", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("signals", ["handled", "default"])
def test_down_stops_a_task_in_its_step_without_sigkill(tmp_path: Path, signals: str) -> None:
    config = str((tmp_path / "engine.json").resolve())
    task = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STUCK_ON_EXIT,
            signals,
            "podscope.reference_engine.worker",
            "--config",
            config,
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert task.stdout is not None and task.stdout.readline() == "training\n"
        _manifest(tmp_path, [task.pid])
        t = time.monotonic()
        done = cluster.down(cluster.Manifest.load(tmp_path), grace_s=5)
        assert done.stopped == ("worker:0",)
        if signals == "handled":  # the engine's worker: SIGINT ends it, within the grace
            assert done.killed == () and time.monotonic() - t < 5
            last = json.loads(task.stdout.read().strip().splitlines()[-1])
            assert (last["event"], last["signal"]) == ("stopped", "SIGINT")
        else:  # what a task without it did: it outlived the grace, and only SIGKILL ended it
            assert done.killed == ("worker:0",)
    finally:
        task.kill()
        task.wait()


def test_a_pid_reused_by_a_later_run_of_the_same_folder_is_left_alone(tmp_path: Path) -> None:
    """The same command line (another ``up`` of this folder) but not the process the manifest
    recorded: its start time differs."""
    config = str((tmp_path / "engine.json").resolve())
    later = _sleeper("podscope.reference_engine.worker", "--config", config)
    try:
        started = cluster.process_start(later.pid)
        assert started
        _manifest(tmp_path, [later.pid], started=[started - 1])  # an earlier process's pid
        done = cluster.down(cluster.Manifest.load(tmp_path), grace_s=1)
        assert done.stopped == () and later.poll() is None
        assert "another process now" in done.summary()
    finally:
        later.kill()
        later.wait()


NESTED = '{"tasks": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"tasks": 3}', "missing"),
        ('{"run_dir": "x"}', "missing"),
        ('{"tasks": [{"pid": "1"}]}', "missing"),
        ("[]", "not a JSON object"),
        ("not json", "Expecting value"),
        (NESTED, "nested too deep"),
        (
            '{"run_dir": "x", "workload": "w", "scenario": "s", "started_at": 1, "tasks": '
            '[{"role": "worker", "index": 0, "pid": true, "address": "a", '
            '"agent_address": "b", "log": "l"}]}',
            "pid is not an integer",
        ),
        (
            '{"run_dir": ["x"], "workload": "w", "scenario": "s", "started_at": 1, "tasks": []}',
            "run_dir is not a string",
        ),
    ],
)
def test_a_malformed_manifest_is_one_clear_error(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / cluster.MANIFEST).write_text(text)
    with pytest.raises(EngineError, match="not a cluster manifest") as err:
        cluster.Manifest.load(tmp_path)
    assert why in str(err.value)


def test_cluster_down_on_a_bad_manifest_prints_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from podscope.app.cli import cli

    (tmp_path / cluster.MANIFEST).write_text(NESTED)
    r = CliRunner().invoke(cli, ["cluster", "down", "--run-dir", str(tmp_path)])
    assert r.exit_code == 2 and "nested too deep" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


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
    from podscope.reference_engine.config import EngineConfig

    started: list[int] = []

    def interrupted(manifest: cluster.Manifest, timeout_s: float) -> None:
        started.extend(t.pid for t in manifest.tasks)
        raise KeyboardInterrupt

    monkeypatch.setattr(cluster, "_wait_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cluster.up(EngineConfig(steps=5), workers=2, run_dir=tmp_path / "run")
    assert len(started) == 2
    assert not [pid for pid in started if cluster.alive(pid)]


def test_ports_are_picked_outside_the_ephemeral_range() -> None:
    """Outgoing connections draw their ports from the ephemeral range: a port picked there
    can be gone by the time TensorFlow binds it."""
    lo, _ = cluster._ephemeral_range()
    ports = cluster.free_ports(9)
    assert len(set(ports)) == 9
    if lo - cluster.LOW_PORTS > 100:
        assert all(cluster.LOW_PORTS <= p < lo for p in ports), ports


def test_a_start_whose_port_was_taken_runs_again_on_fresh_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podscope.reference_engine.config import EngineConfig

    picks: list[list[int]] = []
    real_free = cluster.free_ports
    monkeypatch.setattr(cluster, "free_ports", lambda n: picks.append(real_free(n)) or picks[-1])
    first: list[int] = []

    def wait(manifest: cluster.Manifest, timeout_s: float) -> None:
        if not first:
            first.extend(t.pid for t in manifest.tasks)
            raise EngineError(
                "task worker:1 exited before it was ready:\n... Could not start gRPC server "
                "... UNKNOWN: Failed to add port to server"
            )

    monkeypatch.setattr(cluster, "_wait_ready", wait)
    run = tmp_path / "run"
    m = cluster.up(EngineConfig(steps=5), workers=2, run_dir=run)
    try:
        assert len(picks) == 2 and picks[0] != picks[1]
        assert m.tasks[0].address == f"127.0.0.1:{picks[1][0]}"  # the second attempt's
        assert not [pid for pid in first if cluster.alive(pid)]  # the first attempt stopped
        assert (run / "worker-0" / "task.attempt1.log").exists()
    finally:
        cluster.down(m)


def test_a_start_that_fails_otherwise_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podscope.reference_engine.config import EngineConfig

    calls: list[int] = []

    def wait(manifest: cluster.Manifest, timeout_s: float) -> None:
        calls.append(1)
        raise EngineError("task worker:0 exited before it was ready:\nImportError: no module")

    monkeypatch.setattr(cluster, "_wait_ready", wait)
    with pytest.raises(EngineError, match="ImportError"):
        cluster.up(EngineConfig(steps=5), workers=2, run_dir=tmp_path / "run")
    assert calls == [1]


@pytest.mark.cluster
@pytest.mark.long  # two engine starts (35 s)
def test_a_taken_tensorflow_port_costs_a_retry_not_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real thing: another process listens on the port picked for worker 1's TensorFlow
    server; TF fails to bind it, and the cluster comes up on fresh ports."""
    import socket

    from podscope.reference_engine.config import EngineConfig

    thief = socket.socket()
    thief.bind(("127.0.0.1", 0))
    thief.listen()
    real_free = cluster.free_ports
    picks: list[list[int]] = []

    def free(n: int) -> list[int]:
        ports = real_free(n)
        if not picks:
            ports[1] = thief.getsockname()[1]  # worker 1's TF port, already taken
        picks.append(ports)
        return ports

    monkeypatch.setattr(cluster, "free_ports", free)
    run = tmp_path / "run"
    m = cluster.up(EngineConfig(steps=None), workers=2, run_dir=run)
    try:
        assert len(picks) == 2
        assert "port" in (run / "worker-1" / "task.attempt1.log").read_text()
        assert all(cluster.alive(t.pid) for t in m.tasks)
    finally:
        cluster.down(m)
        thief.close()
