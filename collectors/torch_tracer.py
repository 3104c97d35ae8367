"""PyTorch's profiler, for an agent in a PyTorch process: the one collectors module that imports
torch, lazily, when a trace starts.

    >>> TorchTracer()(out, start_ns, 2000, TraceLevels())   # writes <out less .xplane.pb>.pt.trace.json.gz

``torch.profiler`` records only the thread that starts it (REFERENCE §10: started from another
thread it recorded none of the training thread's ops), so the agent cannot start it from its
own thread. Like Kineto's on-demand profiling, it starts and stops it at step boundaries, in the
training thread: at the first ``podscope.agent.step()`` — or, in a loop that has never called
it, the first optimizer step (a global ``torch.optim`` post-hook) — at or after the window's
start, then marks each step (``ProfilerStep#<n>``, numbered by the loop's own step counter when it gives
one), and stops at the first step at or after the window's end. The agent's thread then writes
the Kineto JSON and gzips it, off the training thread. Nothing is hooked between captures.
"""

from __future__ import annotations

import gzip
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podscope.collectors import heartbeat
from podscope.collectors.export_service import Traced, TracerBusy, TracerError
from podscope.collectors.tf_profiler import TraceLevels
from podscope.trace_parsers import layout

#: How long past the window's end the agent waits for a step boundary before it gives up (no
#: step came: the loop is stuck, finished, or never calls a hook) or stops the profiler itself.
STEP_WAIT_S = 60.0


def torch_module() -> Any:
    """``torch`` (imported here: the seam tests replace with ``TorchTracer(torch=)``)."""
    import torch
    import torch.profiler

    return torch


class _Window:
    """One trace window, driven from the training thread's step boundaries."""

    def __init__(
        self, torch: Any, start_ns: int, duration_ms: int, clock: Callable[[], int]
    ) -> None:
        self.torch, self.clock = torch, clock
        self.start_ns, self.end_ns = start_ns, start_ns + duration_ms * 1_000_000
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.source: object = None
        self.profiler: Any = None
        self.error: BaseException | None = None

    def _make(self, next_step: int) -> Any:
        profiler = self.torch.profiler
        activities = [profiler.ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        prof = profiler.profile(
            activities=activities,
            # a schedule that always records: step() then marks ProfilerStep#<n> ranges
            schedule=lambda step: profiler.ProfilerAction.RECORD,
        )
        prof.step_num = next_step
        return prof

    def on_step(self, source: object, n: int | None) -> None:
        """A step ended in the training thread (``source``: which hook saw it)."""
        if self.done.is_set():
            return
        now = self.clock()
        with self.lock:  # the agent's thread may be giving up meanwhile
            if self.done.is_set():
                return
            if self.source is None:
                if now < self.start_ns:
                    return
                self.source = source
                try:
                    self.profiler = self._make(n + 1 if n is not None else 0)
                    self.profiler.start()
                    heartbeat.RECORDING.start(self.end_ns)
                except Exception as e:  # reported by the agent's thread, never raised here
                    self.error, self.profiler = e, None
                    self.done.set()
                return
            if source is not self.source:
                return  # one boundary per step: the hook that started the window
            try:
                if now >= self.end_ns:
                    heartbeat.RECORDING.clear()
                    self.profiler.stop()
                    self.done.set()
                else:
                    self.profiler.step()
            except Exception as e:
                self.error = e
                self.done.set()

    def give_up(self) -> None:
        """From the agent's thread: no boundary came in time; stops a running profiler."""
        with self.lock:
            if self.done.is_set():
                return
            if self.profiler is not None:
                heartbeat.RECORDING.clear()
                try:
                    self.profiler.stop()
                except Exception as e:
                    self.error = e
            self.done.set()


def _hook(on_step: Callable[[object, int | None], None]) -> Callable[[], None]:
    """Hooks ``on_step`` to ``podscope.agent.step()`` and, in a loop that has not called it,
    every optimizer step (the loop's own step numbers are better); returns the unhook."""
    handles: list[Any] = []
    try:  # torch 2.0+; ``torch.optim.optimizer`` is not an attribute of ``torch.optim``
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        pass
    else:

        def after_optimizer_step(optimizer: object, args: object, kwargs: object) -> None:
            if heartbeat.BEATS.count() == 0:
                on_step(optimizer, None)

        handles.append(register_optimizer_step_post_hook(after_optimizer_step))
    beat_source = object()
    heartbeat.set_step_hook(lambda n: on_step(beat_source, n))

    def unhook() -> None:
        heartbeat.set_step_hook(None)
        for handle in handles:
            handle.remove()

    return unhook


def _export(profiler: Any, path: Path) -> None:
    """Writes the profiler's Chrome/Kineto JSON as ``path`` (gzipped)."""
    raw = path.with_name(path.name.removesuffix(".gz") + ".part")
    try:
        profiler.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        raw.unlink(missing_ok=True)


class TorchTracer:
    """Traces this process with ``torch.profiler`` from the training thread's step boundaries."""

    def __init__(
        self,
        torch: Any = None,
        step_wait_s: float = STEP_WAIT_S,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.torch, self.step_wait_s, self.clock = torch, step_wait_s, clock

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> Traced:
        """Records from the first step boundary at or after ``start_ns`` to the first at or
        after ``start_ns + duration_ms``; writes ``<out's stem>.pt.trace.json.gz``.

        Raises:
            TracerBusy: another torch profiler is running in this process.
            TracerError: no step boundary came (the loop calls neither
                ``podscope.agent.step()`` nor an optimizer's ``step()``), or the profiler failed.
        """
        torch = self.torch if self.torch is not None else torch_module()
        window = _Window(torch, start_ns, duration_ms, self.clock)
        unhook = _hook(window.on_step)
        try:
            deadline_s = (window.end_ns - self.clock()) / 1e9 + self.step_wait_s
            if not window.done.wait(timeout=max(0.0, deadline_s)):
                window.give_up()
        finally:
            unhook()
        if window.error is not None:
            text = str(window.error)
            if "already" in text.lower() and "profil" in text.lower():
                raise TracerBusy(f"another torch profiler is running in this process ({text})")
            raise TracerError(f"torch.profiler failed: {type(window.error).__name__}: {text}")
        if window.profiler is None:
            raise TracerError(
                "torch.profiler records only the thread that starts it, so the agent starts it "
                "at a step boundary of the training loop, and none came within "
                f"{duration_ms / 1000 + self.step_wait_s:.0f} s of the window's start: call "
                "podscope.agent.step(n) after each training step (an optimizer's step() also "
                "counts)"
            )
        stem = out.name.removesuffix(layout.XPLANE_SUFFIXES[0])
        path = out.with_name(layout.trace_name(stem, layout.KINETO_SUFFIXES[0]))
        _export(window.profiler, path)
        return Traced(path, "torch")


def make_tracer() -> TorchTracer:
    """The agent's tracer for a PyTorch process (``collectors.frameworks``)."""
    return TorchTracer()
