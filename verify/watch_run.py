"""A watched engine run: a bottleneck begins T seconds into training, and the watcher must find
it. Shared by ``make verify`` (drawn onsets, ``python -m verify --watch``) and the end-to-end
test, so both judge the same thing.

    >>> run = watch_scenario(EngineConfig(workload="mwms-loop", scenario="straggler",
    ...                                   steps=None, straggler_task=2, onset_s=20),
    ...                      Path("build/verify/watch0"), workers=3)
    >>> run.verdict()        # before the onset: no culprit; first capture after: right culprit…

The watcher runs as ``podscope watch`` does (schedule, heartbeat triggers, the default safe
capture plan), polled from this thread; the run ends after its first triggered capture after
the onset, or at ``timeout_s``. The onset's ground truth is the task's own ``onset`` event
(``reference_engine.scenarios.Onset``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podscope.app.history import Historian
from podscope.collectors.capture import CaptureOptions, Target
from podscope.collectors.watch import Triggers, WatchedCapture, Watcher, WatchOptions
from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineConfig
from verify.matrix import EXPECTED
from verify.run import RunError, wait_warm

#: A capture's window and its delay, generously: a capture started this long before the onset
#: ended before it.
CAPTURE_NS = 5e9
#: What the engine's watched runs use: a rise of 30 % over 5 steps against a 50-step median.
TRIGGERS = Triggers(rise_pct=30, rise_steps=5, baseline_steps=50, min_baseline=20, cooldown_s=30)


@dataclass
class WatchedRun:
    """What a watched run left: its captures (with their history summaries) and the onset."""

    config: EngineConfig
    logdir: Path
    onset_ns: int | None
    expected_culprit: str | None  # the slowed task's worker label (straggler scenarios)
    captures: list[tuple[WatchedCapture, dict[str, Any] | None]] = field(default_factory=list)

    def verdict(self) -> dict[str, Any]:
        """The ground-truth checks: captures before the onset name no culprit; the first one
        after it names the slowed worker (a straggler) or the input stage (input-bound) and
        was triggered; its heartbeat window places the onset within one window."""
        onset = self.onset_ns or 0
        before = [
            (c, s) for c, s in self.captures if s and s["start_unix_s"] * 1e9 + CAPTURE_NS < onset
        ]
        after = [(c, s) for c, s in self.captures if s and s["start_unix_s"] * 1e9 >= onset]
        first = after[0] if after else None
        out: dict[str, Any] = {
            "onset_reported": self.onset_ns is not None,
            "before": len(before),
            "before_clean": all(not s["culprits"] for _, s in before),
            "after": len(after),
        }
        if first is None:
            return {**out, "triggered": False, "right": False, "onset_in_window": False}
        watched, summary = first
        top = (summary.get("top") or {}).get("rule_id", "")
        right = (
            summary["culprits"] == [self.expected_culprit]
            if self.expected_culprit
            else top in EXPECTED[self.config.scenario] and not summary["culprits"]
        )
        trig = watched.trigger
        width = max(trig.window_end_ns - trig.window_start_ns, 1)
        return {
            **out,
            "triggered": trig.kind in ("rise", "spread"),
            "right": right,
            "culprits": summary["culprits"],
            "cause": summary["causes"],
            "top": top,
            "detail": trig.detail,
            "onset_offset_ms": (onset - trig.window_start_ns) / 1e6,
            "window_ms": width / 1e6,
            "onset_in_window": trig.window_start_ns - width <= onset <= trig.window_end_ns,
        }

    def ok(self) -> bool:
        v = self.verdict()
        keys = ("onset_reported", "before_clean", "triggered", "right", "onset_in_window")
        return all(v[k] for k in keys)


def watch_scenario(
    cfg: EngineConfig,
    root: Path,
    *,
    workers: int = 3,
    every_s: float = 600.0,
    poll_s: float = 1.0,
    timeout_s: float = 240.0,
    triggers: Triggers = TRIGGERS,
) -> WatchedRun:
    """Runs ``cfg`` (``steps=None``, an ``onset_s``) on a local cluster, watches it from the
    warm-up on (a scheduled capture at once: before the onset) until the first triggered
    capture after the onset, stops the cluster and summarizes each capture.

    Raises:
        RunError: a task failed or the trainer never warmed up.
    """
    logdir = root / "logdir"
    m = cluster.up(cfg, workers=workers, run_dir=root / "run")
    labels = {t.name: t.agent_address.replace(":", "_") for t in m.tasks}
    taken: list[WatchedCapture] = []
    onset_ns: int | None = None
    try:
        wait_warm(m, cfg, 180)
        watcher = Watcher(
            lambda: [Target(t.agent_address) for t in m.tasks],
            WatchOptions(
                CaptureOptions(logdir=logdir, duration_ms=2500, delay_ms=300),
                every_s=every_s,
                keep=50,
                poll_s=poll_s,
                triggers=triggers,
            ),
        )
        tick = threading.Event()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            watched = watcher.step()
            onset_ns = onset_ns or _onset(m)
            if watched is not None:
                taken.append(watched)
                if watched.trigger.kind in ("rise", "spread") and onset_ns:
                    break
            tick.wait(poll_s)  # the watcher's own poll interval
        watcher.close()
    finally:
        cluster.down(m, grace_s=2)
    historian = Historian(logdir)
    run = WatchedRun(
        cfg,
        logdir,
        onset_ns,
        labels.get(f"worker:{cfg.straggler_task}") if "straggler" in cfg.scenario else None,
    )
    for watched in taken:
        summary = historian.summarize_now(watched.session) if watched.session else None
        run.captures.append((watched, summary))
    if not taken:
        raise RunError(f"{cfg.scenario}: the watcher took no capture in {timeout_s:.0f} s")
    return run


def _onset(m: cluster.Manifest) -> int | None:
    """The earliest ``onset`` a task reported (wall clock ns), None before any."""
    found = [int(e["unix_ns"]) for t in m.tasks for e in cluster.events(t) if e["event"] == "onset"]
    return min(found) if found else None
