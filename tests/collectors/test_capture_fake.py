"""The capture client against simulated agents: statuses, plan, common start, exit codes."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

from podscope.collectors.capture import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    MWMS,
    CaptureOptions,
    Target,
    capture,
)
from podscope.trace_parsers import load
from tests.collectors.fake_agent import fake_agent


def opts(tmp_path: Path, **kw: object) -> CaptureOptions:
    base = {
        "logdir": tmp_path / "logdir",
        "duration_ms": 100,
        "delay_ms": 50,
        "retries": 0,
        "timeout_s": 5.0,
    }
    return CaptureOptions(**{**base, **kw})  # type: ignore[arg-type]


def test_all_workers_ok_same_start_and_manifest(tmp_path: Path) -> None:
    with ExitStack() as stack:
        agents = [stack.enter_context(fake_agent(tmp_path / f"w{i}", index=i)) for i in range(3)]
        result = capture([Target(a) for a, _ in agents], opts(tmp_path))
    assert result.exit_code() == EXIT_OK
    starts = {t.start_ns for _, traced in agents for t in traced}
    assert len(starts) == 1 and all(t.duration_ms == 100 for _, traced in agents for t in traced)
    assert all(
        t.out.parent.parent == tmp_path / f"w{i}" for i, (_, ts) in enumerate(agents) for t in ts
    )
    frames = load(result.session_dir, cache=False)
    assert sorted(frames.workers["worker"].astype(str)) == sorted(w.label for w in result.workers)
    manifest = json.loads((result.session_dir / "capture.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["ok"] * 3
    assert manifest["options"]["duration_ms"] == 100 and "token" not in manifest["options"]


def test_safe_plan_for_multi_worker_mirrored(tmp_path: Path) -> None:
    with ExitStack() as stack:
        agents = [
            stack.enter_context(fake_agent(tmp_path / f"w{i}", index=i, strategy=MWMS))
            for i in range(3)
        ]
        result = capture([Target(a) for a, _ in agents], opts(tmp_path))
        unsafe = capture([Target(a) for a, _ in agents], opts(tmp_path, unsafe_full_trace=True))
    levels = [(t.levels.host, t.levels.python) for _, traced in agents for t in traced[:1]]
    assert levels == [(2, 0), (0, 1), (0, 1)]
    assert result.workers[1].plan_note.startswith("safe plan")
    assert [(w.host_tracer_level, w.python_tracer_level) for w in unsafe.workers] == [(2, 0)] * 3


def test_partial_capture_keeps_good_traces(tmp_path: Path) -> None:
    with (
        fake_agent(tmp_path / "a") as (good, _),
        fake_agent(tmp_path / "b", behavior="empty") as (empty, _),
    ):
        result = capture([Target(good), Target("127.0.0.1:1"), Target(empty)], opts(tmp_path))
    by = {w.address: w for w in result.workers}
    assert by[good].status == "ok" and Path(by[good].file or "").exists()
    assert by["127.0.0.1:1"].status == "unreachable"
    assert by[empty].status == "empty" and "no events" in by[empty].reason
    assert result.exit_code() == EXIT_PARTIAL


def test_timeout_busy_and_crash_each_have_their_reason(tmp_path: Path) -> None:
    with (
        fake_agent(tmp_path / "s", behavior="slow") as (slow, _),
        fake_agent(tmp_path / "b", behavior="busy") as (busy, _),
        fake_agent(tmp_path / "d", behavior="die") as (dying, _),
    ):
        t = time.monotonic()
        result = capture([Target(slow), Target(busy), Target(dying)], opts(tmp_path, timeout_s=2.0))
        elapsed = time.monotonic() - t
    by = {w.address: w for w in result.workers}
    assert by[slow].status == "timeout" and "deadline" in by[slow].reason
    assert by[busy].status == "busy" and "another profiling session" in by[busy].reason
    assert by[dying].status == "crashed" and "went away" in by[dying].reason
    assert result.exit_code() == EXIT_FAILED
    assert elapsed < 10, "a dead or hung worker must not hold the capture past its deadline"


def test_wrong_token_is_reported(tmp_path: Path) -> None:
    with fake_agent(tmp_path / "a", token="right") as (addr, _):
        result = capture([Target(addr)], opts(tmp_path, token="wrong"))
    assert result.workers[0].status == "failed" and "token" in result.workers[0].reason


def test_retries_back_off_then_unreachable(tmp_path: Path) -> None:
    t = time.monotonic()
    result = capture([Target("127.0.0.1:1")], opts(tmp_path, retries=2))
    assert result.workers[0].status == "unreachable" and result.workers[0].attempts == 3
    assert time.monotonic() - t >= 1.5  # 0.5 s + 1 s of backoff


def test_a_capture_from_inside_a_running_event_loop(tmp_path: Path) -> None:
    """A notebook runs an event loop: a capture called there runs on a loop of its own, in a
    thread, and returns as a plain call does."""
    import asyncio

    with fake_agent(tmp_path / "w0") as (address, traced):

        async def in_a_notebook() -> object:
            return capture([Target(address)], opts(tmp_path))

        result = asyncio.run(in_a_notebook())
    assert result.exit_code() == EXIT_OK and len(traced) == 1  # type: ignore[attr-defined]
