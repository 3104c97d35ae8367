"""Captures of real engine clusters on loopback: every task, one window, jobs never killed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from podscope.collectors.capture import (
    EXIT_OK,
    EXIT_PARTIAL,
    CaptureOptions,
    CaptureResult,
    Target,
    capture,
)
from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineConfig
from podscope.trace_parsers import TraceFrames, load
from tests.cluster_helpers import StartCluster, losses

pytestmark = [pytest.mark.cluster, pytest.mark.tf, pytest.mark.slow]


def grab(m: cluster.Manifest, logdir: Path, **kw: object) -> CaptureResult:
    opts = CaptureOptions(logdir=logdir, **{"duration_ms": 2000, "delay_ms": 300, **kw})  # type: ignore[arg-type]
    return capture([Target(t.agent_address) for t in m.tasks], opts)


def steps_seen(frames_events: pd.DataFrame) -> pd.Series:
    """Per worker: step markers, else one Python-traced tf.function call per step."""
    ev = frames_events
    name = ev["name"].astype(str)
    markers = ev[(name == "train") & ev["step_num"].notna()].groupby("worker", observed=True).size()
    calls = ev[
        name.str.contains(r"polymorphic_function\.py:\d+ __call__", regex=True) & (ev["depth"] <= 1)
    ]
    return markers.combine(calls.groupby("worker", observed=True).size(), max, fill_value=0)


def window_spread_ms(frames: TraceFrames) -> float:
    """How far apart the workers' profilers opened their windows: each XPlane's own
    ``profile_start_time`` (``capture_start_ns``), not its first event — a task idle for the
    first few ms of the window (a ps between pushes) has no event there, yet started on time.
    Every worker must also have traced something inside its window."""
    w = frames.workers.set_index("worker")
    start = w["capture_start_ns"].astype("int64")
    first = frames.events.groupby("worker", observed=True)["start_ns"].min()
    assert first.index.isin(start.index).all() and len(first) == len(start), (first, start)
    assert ((first - start.reindex(first.index)) / 1e6).between(-1, 2000).all(), (first, start)
    return float((start.max() - start.min()) / 1e6)


def wait_steps(m: cluster.Manifest, task: cluster.TaskInfo, n: int, timeout_s: float = 300) -> None:
    """Until ``task`` logged ``n`` steps. The limit only ends a stalled job (a PS chief logs its
    first 10 steps at its first ``join``: seconds on a quiet machine; CI once saw none in 120 s
    with the other test process busy, and only the chief's events were kept): a failure shows
    the end of every task's log."""
    deadline = time.monotonic() + timeout_s
    while len(losses(task)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(losses(task)) >= n, "\n".join(
        f"--- {t.name} ({'alive' if cluster.alive(t.pid) else 'exited'}):\n"
        + "\n".join(Path(t.log).read_text(errors="replace").splitlines()[-15:])
        for t in m.tasks
    )


def grab_in_one_window(
    m: cluster.Manifest, root: Path, tries: int = 5
) -> tuple[CaptureResult, TraceFrames]:
    """A capture whose workers opened their windows within 5 ms of each other.

    Every Profile request carries one start time (test_capture_fake checks that); each TF server
    sleeps until then and starts its tracers, so what is left is the OS waking that thread. On
    the 2-core CI VM with three busy trainers one worker once opened its window 5.3 ms after the
    requested start (the others 0.1 and 1.6 ms; usually all within 0.2 ms), and with make
    test's other process beside them 31 and 47 ms (then 1.0 ms): a thread that waits for a core
    waits as long as the machine makes it. So a capture over 5 ms is retaken, up to ``tries``
    times, and one of them must be within 5 ms."""
    spreads: list[float] = []
    for i in range(tries):
        result = grab(m, root / f"try{i}")
        assert result.exit_code() == EXIT_OK, [
            (w.label, w.status, w.reason) for w in result.workers
        ]
        frames = load(result.session_dir, cache=False)
        spreads.append(window_spread_ms(frames))
        if spreads[-1] < 5:
            break
    assert spreads[-1] < 5, (spreads, frames.workers)
    return result, frames


def test_mwms_three_workers_one_window(start_cluster: StartCluster, tmp_path: Path) -> None:
    m = start_cluster(EngineConfig(workload="mwms-loop", steps=None), workers=3)
    wait_steps(m, m.tasks[0], 5)
    result, frames = grab_in_one_window(m, tmp_path)
    assert [(w.role, w.index) for w in result.workers] == [
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    ]
    assert [(w.host_tracer_level, w.python_tracer_level) for w in result.workers] == [
        (2, 0),
        (0, 1),
        (0, 1),
    ]
    assert len(frames.workers) == 3 and not frames.failures
    assert (steps_seen(frames.events) >= 3).all()
    assert all(cluster.alive(t.pid) for t in m.tasks)
    for t in m.tasks:  # the agent opened no TF port: its own, on loopback, and the job's server
        # (its gRPC server, behind the front door, listens on a unix socket, not a TCP port)
        assert listening(t.pid) == {
            ("loopback", int(t.agent_address.rsplit(":", 1)[1])),
            ("any", int(t.address.rsplit(":", 1)[1])),
        }


def listening(pid: int) -> set[tuple[str, int]]:
    """The process's listening TCP sockets: (loopback | any | the address, port)."""
    out = set()
    for c in psutil.Process(pid).net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN:
            ip = c.laddr.ip.removeprefix("::ffff:")
            kind = (
                "loopback"
                if ip in ("127.0.0.1", "::1")
                else "any"
                if ip in ("0.0.0.0", "::")
                else ip
            )
            out.add((kind, c.laddr.port))
    return out


def test_ps_cluster_every_task(start_cluster: StartCluster, tmp_path: Path) -> None:
    m = start_cluster(EngineConfig(workload="ps", steps=None), workers=2, ps=1)
    wait_steps(m, next(t for t in m.tasks if t.role == "chief"), 10)
    result, frames = grab_in_one_window(m, tmp_path)
    assert sorted(f"{w.role}:{w.index}" for w in result.workers) == [
        "chief:0",
        "ps:0",
        "worker:0",
        "worker:1",
    ]
    assert len(frames.workers) == 4, frames.workers


def test_stopped_and_killed_workers_keep_the_others(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    m = start_cluster(EngineConfig(workload="ps", steps=None), workers=2, ps=1)
    wait_steps(m, next(t for t in m.tasks if t.role == "chief"), 10)
    stopped = next(t for t in m.tasks if t.name == "worker:1")
    cluster.kill_task(stopped)
    result = grab(m, tmp_path / "a", retries=1)
    by = {w.address: w for w in result.workers}
    assert by[stopped.agent_address].status == "unreachable"
    assert result.exit_code() == EXIT_PARTIAL
    assert sum(w.status == "ok" for w in result.workers) == 3
    assert len(load(result.session_dir, cache=False).workers) == 3

    victim = next(t for t in m.tasks if t.name == "worker:0")
    threading.Timer(1.5, cluster.kill_task, args=(victim,)).start()
    t0 = time.monotonic()
    result = grab(m, tmp_path / "b", duration_ms=4000, timeout_s=15)
    assert time.monotonic() - t0 < 20
    by = {w.address: w for w in result.workers}
    assert by[victim.agent_address].status in ("crashed", "timeout"), by[victim.agent_address]
    # With both workers gone the job stalls: the chief and ps answer, with or without events.
    for t in m.tasks:
        if t.role in ("chief", "ps"):
            assert by[t.agent_address].status in ("ok", "empty"), by[t.agent_address]


def test_second_concurrent_capture_is_told_busy(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    m = start_cluster(EngineConfig(workload="mwms-loop", steps=None), workers=2)
    wait_steps(m, m.tasks[0], 5)
    results: list[CaptureResult] = []
    first = threading.Thread(
        target=lambda: results.append(grab(m, tmp_path / "first", duration_ms=3000))
    )
    first.start()
    time.sleep(1.0)
    second = grab(m, tmp_path / "second", duration_ms=1000)
    first.join()
    assert results[0].exit_code() == EXIT_OK
    statuses = {w.status for w in second.workers}
    assert statuses <= {"busy", "ok"} and "busy" in statuses, [
        (w.status, w.reason) for w in second.workers
    ]


def test_eight_captures_never_kill_mwms_training(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    """The default (safe) plan on a 3-worker MWMS job: 8 consecutive 2 s captures (the full
    host trace crashed half of such jobs, most at the first captures; bench.capture_safety
    runs longer series). make test takes the first 3 (PODSCOPE_CAPTURES, 8 in make verify)."""
    m = start_cluster(EngineConfig(workload="mwms-loop", steps=None), workers=3)
    wait_steps(m, m.tasks[0], 5)
    for i in range(int(os.environ.get("PODSCOPE_CAPTURES", "3"))):
        result = grab(m, tmp_path / "logdir", session=f"s{i:02d}")
        assert result.exit_code() == EXIT_OK, (
            i,
            [(w.label, w.status, w.reason) for w in result.workers],
        )
        assert (steps_seen(load(result.session_dir, cache=False).events) >= 1).sum() == 3, i
        assert all(cluster.alive(t.pid) for t in m.tasks), f"a worker died during capture {i}"
    before = len(losses(m.tasks[0]))
    time.sleep(2)
    assert len(losses(m.tasks[0])) > before, "training stopped"
