"""The local processes of the engine's JAX and PyTorch runs: started, met when warm, captured,
finished. (TF's tasks have their own launcher, ``reference_engine.cluster``: TF_CONFIG,
parameter servers, a manifest for ``podscope cluster status/down``.)

Each process is ``python -m <module> <run_dir> <index> <port>``; it reads its run's settings
from ``<run_dir>/<name, lower case>.json``, starts the PodScope agent, warms up, and writes
``ready-<index>.json`` (its agent's address, its last warm-up step in ms); it finishes once the
launcher touches ``done`` (the trace has been brought home).

    >>> with launch("podscope.reference_engine.torch_workload", "torch", cfg, run_dir) as job:
    ...     capture([Target(a, label=w) for w, a in job.targets], ...)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from podscope.reference_engine.config import EngineError

#: The files through which the launcher and its processes meet (in the run folder).
READY, DONE = "ready-{}.json", "done"


@dataclass(frozen=True)
class Job:
    """A launched run, warm and waiting for its capture.

    Attributes:
        cfg: the run's settings (a frozen dataclass with ``workers`` and ``steps``).
        targets: (worker label, its agent's address) per process.
        step_ms: the slowest process's last warm-up step, ms.
    """

    cfg: Any
    targets: tuple[tuple[str, str], ...]
    step_ms: float

    def window_ms(self) -> int:
        """A capture window that holds the barrier and every configured step, with room for a
        busy machine (three times the warm step; the processes idle after their last step)."""
        return int(2000 + 3 * self.cfg.steps * self.step_ms)


@contextmanager
def launch(
    module: str, name: str, cfg: Any, run_dir: Path, prefix: str, timeout_s: float = 600.0
) -> Iterator[Job]:
    """Starts ``cfg.workers`` processes of ``module`` in ``run_dir`` and yields once every one
    is warm and its agent listens; on leaving, lets them finish and waits for them. ``name``
    names the settings file and the run in errors; ``prefix`` + index labels each process.

    Raises:
        EngineError: a process failed (with its last log lines), or the run timed out.
    """
    from podscope.reference_engine.cluster import free_ports

    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in [run_dir / DONE, *run_dir.glob(READY.format("*"))]:
        stale.unlink(missing_ok=True)
    (run_dir / f"{name.lower()}.json").write_text(json.dumps(asdict(cfg)))
    port = free_ports(1)[0]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)  # one CPU device per JAX process
    deadline = time.monotonic() + timeout_s
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(cfg.workers):
            with (run_dir / f"worker-{i}.log").open("wb") as log:
                cmd = [sys.executable, "-m", module, str(run_dir), str(i), str(port)]
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        ready = [_ready(run_dir, i, procs[i], deadline, name) for i in range(cfg.workers)]
        yield Job(
            cfg,
            tuple((f"{prefix}{i}", r["address"]) for i, r in enumerate(ready)),
            max(float(r["step_ms"]) for r in ready),
        )
        (run_dir / DONE).touch()
        for i, proc in enumerate(procs):
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise EngineError(f"{name} run timed out after {timeout_s:.0f} s") from None
            if code != 0:
                raise EngineError(f"{name} worker {i} failed:\n{_tail(run_dir, i)}")
    finally:  # Ctrl-C, a failure, or a capture that raised: no process outlives the run
        (run_dir / DONE).touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _tail(run_dir: Path, i: int) -> str:
    return (run_dir / f"worker-{i}.log").read_text(errors="replace")[-1500:]


def _ready(
    run_dir: Path, i: int, proc: subprocess.Popen[bytes], deadline: float, name: str
) -> dict[str, Any]:
    """Process ``i``'s ready file, once written.

    Raises:
        EngineError: it exited first, or the deadline passed.
    """
    path = run_dir / READY.format(i)
    while not path.exists():
        if proc.poll() is not None:
            raise EngineError(f"{name} worker {i} exited before it was ready:\n{_tail(run_dir, i)}")
        if time.monotonic() > deadline:
            raise EngineError(f"{name} worker {i} was not ready in time:\n{_tail(run_dir, i)}")
        time.sleep(0.05)
    return dict(json.loads(path.read_text()))


def start_worker(run_dir: Path, index: int, name: str) -> tuple[dict[str, Any], Any]:
    """From process ``index``: its run's settings (``launch``'s file) and the PodScope agent it
    starts, as a user's job would (loopback, any port; before any framework is imported)."""
    from podscope.collectors import agent

    settings = json.loads((run_dir / f"{name.lower()}.json").read_text())
    task = ("rank" if name == "PyTorch" else "process", index)  # as each framework numbers them
    return dict(settings), agent.start(repository_root=run_dir / f"agent-{index}", task=task)


def say_ready(run_dir: Path, index: int, address: str, step_ms: float) -> None:
    """From process ``index``: warm, its agent at ``address`` (written whole, then renamed)."""
    ready = run_dir / READY.format(index)
    partial = ready.with_suffix(".part")
    partial.write_text(json.dumps({"address": address, "step_ms": step_ms}))
    partial.replace(ready)


def wait_done(run_dir: Path) -> None:
    """From a process: until the launcher says its trace is home."""
    while not (run_dir / DONE).exists():
        time.sleep(0.05)


def iterations_for(once: Callable[[int], float], ms: float, repeat: int = 3) -> int:
    """How many loop iterations take ``ms``, from ``once(n)`` (seconds for ``n`` iterations):
    ``n`` doubles until ``n`` take 20 ms, each size timed ``repeat`` times and its fastest
    kept. A busy machine only ever makes a run slower: one run timed while this process
    waited for a core made the slow device's extra work 0.6 ms instead of 20 (a 2-worker
    run beside other tests), and no worker was late by what the test had injected."""
    n, spent = 8, 0.0
    while spent < 0.02:
        n *= 2
        spent = min(once(n) for _ in range(repeat))
    return max(1, int(n * (ms / 1000) / spent))
