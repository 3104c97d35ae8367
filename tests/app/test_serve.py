"""``podscope serve`` as an operator sees it: a production WSGI server, a quiet terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from podscope.trace_parsers import layout
from tests.app.helpers import free_port, get_when_up

pytestmark = pytest.mark.slow


def test_serve_is_quiet_and_not_flasks_development_server(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podscope", "serve", "--logdir", str(tmp_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        get_when_up(base + "/healthz", proc)
        for _ in range(20):  # a browser's page load is dozens of requests
            urllib.request.urlopen(base + "/", timeout=5).read()
            urllib.request.urlopen(base + "/_dash-layout", timeout=5).read()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines == [f"serving on http://127.0.0.1:{port}"], out
    assert proc.returncode == 0


def test_serve_on_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "podscope",
                "serve",
                "--logdir",
                str(tmp_path),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
        )
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.strip().splitlines() == [
        f"podscope: error: cannot serve on 127.0.0.1:{port}: Address already in use (another "
        "server holds the port? choose one with --port)"
    ], out.stderr


@pytest.mark.tf
@pytest.mark.cluster
def test_demo_captures_a_baseline_and_a_straggler_and_stops_their_jobs(tmp_path: Path) -> None:
    """Two sessions (Compare has a baseline), one terse line per step, the jobs stopped
    before serving and so not offered on the Capture page."""
    pytest.importorskip("tensorflow")
    port = free_port()
    logdir = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "podscope", "demo", "--logdir", str(logdir), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "PODSCOPE_CACHE_DIR": str(tmp_path / "cache"),
            "TF_CPP_MIN_LOG_LEVEL": "3",
        },
    )
    lines = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.startswith("serving on"):
                break
        assert lines and lines[-1] == f"serving on http://127.0.0.1:{port}", lines
        sessions = sorted(p.name for p in (logdir / "plugins" / "profile").iterdir())
        assert len(sessions) == 2
        labels = {
            layout.read_manifest(logdir / "plugins" / "profile" / s).label  # type: ignore[union-attr]
            for s in sessions
        }
        assert labels == {"baseline", "straggler"}  # told apart on every page
        health = get_when_up(f"http://127.0.0.1:{port}/healthz", proc)  # printed as it listens
        assert b'"sessions":2' in health.replace(b" ", b"")
        # the jobs are stopped: nothing listens on their workers' agents any more
        assert sum("[worker:" in line for line in lines) == 4  # two jobs of two workers
        pids = []
        for manifest in (logdir / "cluster").glob("*/cluster.json"):
            pids += [t["pid"] for t in json.loads(manifest.read_text())["tasks"]]
        assert len(pids) == 4 and not any(_running(pid) for pid in pids)
        assert all(line.endswith("from 2 workers") for line in lines if line.startswith("session "))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_server_stopped_mid_analysis_exits_and_leaves_no_process(tmp_path: Path) -> None:
    """SIGTERM while a pod is analysed in a pool (its rest runs after the Pod Viewer is
    shown): the server ends at once and its pool's processes with it."""
    import psutil

    from bench.synth import synth_xspace

    session = tmp_path / "logdir" / "plugins" / "profile" / "pod"
    session.mkdir(parents=True)
    data = synth_xspace(120)  # 36 k events: a 48-host pod's tasks take seconds
    for i in range(48):
        (session / f"10.0.1.{i}_6000.xplane.pb").write_bytes(data)
    port = free_port()
    cmd = [sys.executable, "-m", "podscope", "serve", "--logdir", str(session.parents[2])]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        get_when_up(base + "/healthz", proc)
        urllib.request.urlopen(base + "/pod?session=pod", timeout=30).read()  # starts the job
        deadline = time.monotonic() + 120  # the state, not a time: the pool's tasks run
        pool: list[psutil.Process] = []
        while len(pool) < 2 and time.monotonic() < deadline:
            family = psutil.Process(proc.pid).children(recursive=True)
            pool = [p for p in family if p.ppid() != proc.pid]  # forked by the fork server
            time.sleep(0.05)
        assert len(pool) >= 2, "no pool started"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    _, alive = psutil.wait_procs(pool, timeout=10)
    assert alive == []
