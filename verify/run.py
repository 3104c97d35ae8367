"""One engine run captured as a user would: a local cluster, warm-up, one capture of every task
with the default (safe) plan, the cluster stopped. Shared by ``make verify`` and the tests'
``scenario_capture`` fixture, so both measure the same thing.

    >>> cap = capture_scenario(EngineConfig(workload="mwms-fit", scenario="straggler",
    ...                                     steps=None, straggler_task=2), workers=3,
    ...                        root=Path("build/verify/run0"))
    >>> cap.label("worker:2")          # its worker label in the capture
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.collectors.capture import CaptureOptions, Target, capture
from podscope.collectors.status import Status
from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineConfig

#: Steps the trainer must have logged before the capture starts (past tracing and warm-up).
WARM_STEPS = 5


class RunError(RuntimeError):
    """An engine run that did not produce a complete capture (which task, and why).

    Attributes:
        crashed: a task's process died during the capture (its status ``crashed``).
    """

    def __init__(self, message: str, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed


@dataclass(frozen=True)
class ScenarioCapture:
    """A capture of an engine cluster running one scenario (the ground truth for analyses)."""

    workload: str
    scenario: str
    session_dir: Path
    manifest: cluster.Manifest
    config: EngineConfig

    def label(self, task: str) -> str:
        """The worker label of task ``role:index`` in the capture."""
        t = next(t for t in self.manifest.tasks if t.name == task)
        return t.agent_address.replace(":", "_")


def capture_scenario(
    cfg: EngineConfig, root: Path, *, full_trace: bool = False, **options: Any
) -> ScenarioCapture:
    """Runs ``cfg`` on ``workers`` (+ ``ps``) task processes under ``root``, waits until the
    trainer has logged ``WARM_STEPS`` steps, captures every task in one window and stops the
    cluster (always, also on failure). ``options``: those of ``_capture_once``.

    With ``full_trace`` (every MWMS worker host-traced), a run in which a task's process died
    during the capture is run once more, in a fresh cluster under ``root / "again"``, with a
    warning: TF's profiler frees memory it still reads under that plan (README), and jemalloc
    makes the crash rare, not impossible (one worker of two in a clean-clone test run on
    2026-12-03). The crashed run's files stay under ``root``.

    Raises:
        RunError: a task logged an error, the trainer never warmed up, or a task's capture
            was not ``ok`` (with ``full_trace``: twice, or not by a crash).
    """
    try:
        return _capture_once(cfg, root, full_trace=full_trace, **options)
    except RunError as e:
        if not (full_trace and e.crashed):
            raise
        warnings.warn(
            f"{cfg.workload}/{cfg.scenario}: a task crashed under the full trace ({e}); "
            "running it again",
            RuntimeWarning,
            stacklevel=2,
        )
        return _capture_once(cfg, root / "again", full_trace=full_trace, **options)


def wait_warm(m: cluster.Manifest, cfg: EngineConfig, timeout_s: float) -> None:
    """Waits until the trainer has logged ``WARM_STEPS`` steps.

    Raises:
        RunError: a task logged an error, or the trainer did not warm up in time.
    """
    trainer = next(t for t in m.tasks if t.role == "chief") if cfg.workload == "ps" else m.tasks[0]
    deadline = time.monotonic() + timeout_s
    while sum(e["event"] == "step" for e in cluster.events(trainer)) < WARM_STEPS:
        failed = [(t.name, e) for t in m.tasks for e in cluster.events(t) if e["event"] == "error"]
        if failed:
            name, event = failed[0]
            raise RunError(f"{name} failed: {str(event.get('message', '')).strip()[:200]}")
        if time.monotonic() > deadline:
            raise RunError(
                f"{trainer.name} logged fewer than {WARM_STEPS} steps in {timeout_s:.0f} s"
            )
        time.sleep(0.2)  # polling a log file for a state, not waiting a fixed time


def _capture_once(
    cfg: EngineConfig,
    root: Path,
    *,
    workers: int = 2,
    ps: int = 0,
    host_tracer_level: int = 2,
    full_trace: bool = False,
    duration_ms: int = 2500,
    delay_ms: int = 300,
    ready_timeout_s: float = 240.0,
    warm_timeout_s: float = 180.0,
) -> ScenarioCapture:
    m = cluster.up(
        cfg, workers=workers, ps=ps, run_dir=root / "run", ready_timeout_s=ready_timeout_s
    )
    try:
        wait_warm(m, cfg, warm_timeout_s)
        result = capture(
            [Target(t.agent_address) for t in m.tasks],
            CaptureOptions(
                logdir=root / "logdir",
                duration_ms=duration_ms,
                delay_ms=delay_ms,
                host_tracer_level=host_tracer_level,
                unsafe_full_trace=full_trace,
            ),
        )
        bad = [(w.label, w.status, w.reason) for w in result.workers if w.status != "ok"]
        if bad:
            crashed = any(status == Status.CRASHED for _, status, _ in bad)
            raise RunError(f"capture incomplete: {bad}", crashed=crashed)
    finally:
        cluster.down(m, grace_s=2)
    return ScenarioCapture(cfg.workload, cfg.scenario, result.session_dir, m, cfg)
