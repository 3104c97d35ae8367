"""``podscope watch`` as a user runs it: against simulated agents, a capture at once, another
asked for from a second terminal, a second watcher refused, Ctrl-C (SIGTERM) keeps the
sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import click
import pytest

from podscope.app.cli_watch import seconds
from podscope.collectors.heartbeat import Beats
from podscope.collectors.watch import read_status
from tests.collectors.fake_agent import fake_agent


def test_durations() -> None:
    assert [seconds(t) for t in ("300", "90s", "5m", "1.5h", "1d")] == [300, 90, 300, 5400, 86400]
    for bad in ("", "5 minutes", "-1", "0"):
        with pytest.raises(click.BadParameter):
            seconds(bad)


def podscope(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podscope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


def wait_for(check, what: str, timeout_s: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)  # polling files for a state
    pytest.fail(f"never happened: {what}")


def cli_watcher(
    stack: ExitStack, tmp_path: Path, logdir: Path
) -> tuple[list[str], subprocess.Popen[str]]:
    """Two agents sending heartbeats, and ``podscope watch`` on them in a process of its own
    (a capture at once, then every 10 minutes; polls every 0.2 s)."""
    agents = [
        stack.enter_context(fake_agent(tmp_path / f"a{i}", index=i, beats=Beats()))[0]
        for i in range(2)
    ]
    watcher = subprocess.Popen(
        [
            *(sys.executable, "-m", "podscope", "watch", ",".join(agents)),
            *("--logdir", str(logdir), "--every", "10m", "--duration-ms", "200"),
            *("--poll-s", "0.2"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    return agents, watcher


def test_watch_asked_refused_and_stopped(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    with ExitStack() as stack:
        agents, watcher = cli_watcher(stack, tmp_path, logdir)
        try:
            history = logdir / ".podscope" / "history.jsonl"
            wait_for(lambda: history.exists() and history.read_text().count("\n") >= 1, "summary")
            again = podscope("watch", ",".join(agents), "--logdir", str(logdir))
            assert again.returncode == 2 and "already watched (pid" in again.stderr
            asked = podscope(
                "watch", "--now", "--logdir", str(logdir), "--reason", "before the refresh"
            )
            assert asked.returncode == 0 and "asked the watcher of" in asked.stdout
            wait_for(
                lambda: len((read_status(logdir) or {}).get("captures") or []) >= 2, "2nd capture"
            )
            wait_for(lambda: history.read_text().count("\n") >= 2, "second summary")
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    assert "scheduled: " in out and "requested: before the refresh" in out, out
    assert "top finding:" in out and "stopped; 2 capture(s) this run" in out, out
    sessions = sorted((logdir / "plugins" / "profile").iterdir())
    assert len(sessions) == 2
    manifests = [json.loads((s / "capture.json").read_text()) for s in sessions]
    assert [m["watch"]["reason"] for m in manifests] == ["scheduled", "requested"]
    # no watcher now: --now says so instead of pretending
    late = podscope("watch", "--now", "--logdir", str(logdir))
    assert "no watcher has written there in the last minute" in " ".join(late.stdout.split())


def test_a_dashboard_shows_and_stops_a_watcher_started_from_the_cli(tmp_path: Path) -> None:
    """The Capture page's Watch card reads a CLI watcher's status and its Stop asks that
    process to stop at its next poll (``Watching.stop``, what the card calls): it exits on its
    own, saying who asked; the sessions stay."""
    from podscope.app.history import Watching

    logdir = tmp_path / "logdir"
    with ExitStack() as stack:
        _, watcher = cli_watcher(stack, tmp_path, logdir)
        try:
            wait_for(lambda: bool((read_status(logdir) or {}).get("captures")), "a capture")
            dashboard = Watching(logdir, cache_dir=tmp_path / "cache")
            status = dashboard.status()
            assert status is not None and status["fresh"] and not status["here"]
            assert status["pid"] == watcher.pid
            assert (
                dashboard.stop("the Capture page, by alice") == f"the watcher of pid {watcher.pid}"
            )
            out, err = watcher.communicate(timeout=60)  # it stops by itself
        finally:
            watcher.kill()
    assert watcher.returncode == 0, err
    assert "stopped (the Capture page, by alice asked); 1 capture(s) this run" in out, out
    assert (read_status(logdir) or {}).get("running") is False
    assert not dashboard.status()["fresh"]  # type: ignore[index]
    assert len(list((logdir / "plugins" / "profile").iterdir())) == 1
