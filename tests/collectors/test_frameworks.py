"""One agent for every framework (``collectors.frameworks``): starting it imports none, and each
capture uses the profiler of the framework the process runs — TensorFlow, JAX or PyTorch — or
says in the capture's status why there is none.

The jobs are real processes of ``tests.collectors.framework_job``, captured over loopback by
``collectors.capture`` as ``podscope capture`` does."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from podscope.collectors import frameworks, heartbeat
from podscope.collectors.agent import AgentError, start
from podscope.collectors.capture import CaptureOptions, Target, capture
from podscope.collectors.export_service import Traced, TracerError
from podscope.collectors.tf_profiler import TraceLevels
from podscope.trace_parsers import layout

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def jobs(
    tmp_path: Path, framework: str, *extra: str, world: int = 1
) -> Iterator[list[dict[str, Any]]]:
    """Runs ``world`` processes of the framework's job; yields their first JSON lines (with
    ``address``); on leaving, stops them and adds each one's last line under ``"end"``."""
    store = tmp_path / "ddp-store"
    procs, logs = [], []
    for rank in range(world):
        args = [framework, str(tmp_path / f"agent{rank}"), *extra]
        if world > 1:
            args += ["--rank", str(rank), "--world", str(world), "--store", str(store)]
        logs.append(tmp_path / f"job{rank}.log")
        with logs[-1].open("w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.collectors.framework_job", *args],
                    cwd=REPO,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    # as torchrun starts a rank (the agent names its task from it)
                    env={**os.environ, "RANK": str(rank)} if world > 1 else None,
                )
            )
    try:
        started = []
        for proc, log in zip(procs, logs, strict=True):
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the job's first word, once its agent listens
            assert line, log.read_text()[-3000:]
            started.append(json.loads(line))
        yield started
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc, info, log in zip(procs, started, logs, strict=True):
            assert proc.stdout is not None
            out = proc.stdout.read()
            assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
            info["end"] = json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            proc.kill()


def _capture(tmp_path: Path, started: list[dict[str, Any]], duration_ms: int = 1500) -> Any:
    targets = [Target(s["address"], f"rank{i}") for i, s in enumerate(started)]
    opts = CaptureOptions(logdir=tmp_path / "logdir", duration_ms=duration_ms, delay_ms=500)
    return capture(targets, opts)


def _manifest(result: Any) -> dict[str, Any]:
    return json.loads((result.session_dir / layout.MANIFEST_NAME).read_text())


def test_a_process_without_a_framework_starts_the_agent_and_fails_each_capture_in_one_line(
    tmp_path: Path,
) -> None:
    with jobs(tmp_path, "none") as started:
        assert started[0]["modules"] == []
        result = _capture(tmp_path, started, duration_ms=300)
    assert started[0]["end"]["modules"] == []  # the capture imported none either
    (worker,) = _manifest(result)["workers"]
    assert worker["status"] == "failed", worker
    assert worker["reason"] == f"FAILED_PRECONDITION: {frameworks.NO_FRAMEWORK}"
    assert result.exit_code() == 4


@pytest.mark.slow
def test_a_jax_job_is_traced_with_jax_profiler_and_loads_no_other_framework(
    tmp_path: Path,
) -> None:
    from podscope.trace_parsers import load

    with jobs(tmp_path, "jax") as started:
        assert started[0]["modules"] == ["jax"]
        result = _capture(tmp_path, started)
    assert started[0]["end"]["modules"] == ["jax"]  # no TensorFlow, no torch, after a capture
    (worker,) = _manifest(result)["workers"]
    assert (worker["status"], worker["framework"]) == ("ok", "jax"), worker
    assert Path(worker["file"]).name == "rank0.xplane.pb"
    frames = load(worker["file"])
    names = set(frames.events["name"].astype(str))
    assert any("train_step" in n for n in names), sorted(names)[:40]


@pytest.mark.slow
@pytest.mark.parametrize("step_hook", ["podscope.agent.step", "optimizer.step"])
def test_pytorch_ranks_are_traced_in_one_window_from_their_training_threads(
    tmp_path: Path, step_hook: str
) -> None:
    extra = ("--no-step",) if step_hook == "optimizer.step" else ()
    with jobs(tmp_path, "torch", *extra, world=2) as started:
        assert all(s["modules"] == ["torch"] for s in started)
        result = _capture(tmp_path, started)
    assert all(s["end"]["modules"] == ["torch"] for s in started)
    workers = _manifest(result)["workers"]
    assert [(w["status"], w["framework"]) for w in workers] == [("ok", "torch")] * 2, workers
    assert [(w["role"], w["index"]) for w in workers] == [("rank", 0), ("rank", 1)]  # RANK
    windows = []
    for rank, w in enumerate(workers):
        path = Path(w["file"])
        assert path.name == f"rank{rank}.pt.trace.json.gz"
        trace = json.loads(gzip.decompress(path.read_bytes()))
        events = trace["traceEvents"]
        steps = [e for e in events if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))]
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        assert len(steps) >= 3, f"rank {rank}: {len(steps)} steps"
        # the training thread's own ops were recorded (the profiler was started there)
        assert any(e["name"] in ("aten::addmm", "aten::mm") for e in ops), {e["name"] for e in ops}
        assert any("allreduce" in str(e["name"]).lower() for e in events), "no DDP all-reduce"
        starts = [float(e["ts"]) for e in steps]
        windows.append((min(starts), max(starts)))
        if step_hook == "podscope.agent.step":  # numbered by the loop's own counter
            numbers = [int(e["name"].split("#")[1]) for e in steps]
            assert min(numbers) > 0 and numbers == sorted(numbers)
    # one window: each rank's traced steps overlap the other's
    assert max(w[0] for w in windows) < min(w[1] for w in windows), windows


@pytest.mark.slow
@pytest.mark.tf
def test_a_tensorflow_job_is_traced_with_its_profiler_without_being_told(tmp_path: Path) -> None:
    with jobs(tmp_path, "tensorflow") as started:
        result = _capture(tmp_path, started)
    (worker,) = _manifest(result)["workers"]
    assert (worker["status"], worker["framework"]) == ("ok", "tensorflow"), worker
    assert Path(worker["file"]).name == "rank0.xplane.pb"
    assert "torch" not in started[0]["end"]["modules"]


# --- the choice itself, without a framework's cost ---------------------------------------------


#: Module state that says a framework runs (``frameworks.IN_USE``).
RUNNING = {
    "jax": {"jax._src.xla_bridge": SimpleNamespace(_backends={"cpu": object()})},
    "tensorflow": {
        "tensorflow.python.eager.context": SimpleNamespace(
            _context=SimpleNamespace(_initialized=True)
        )
    },
    "torch": {"torch.distributed": SimpleNamespace(is_initialized=lambda: True)},
}


@pytest.mark.parametrize(
    ("imported", "running", "chosen"),
    [
        ((), (), None),
        (("tensorflow",), (), "tensorflow"),
        (("jax",), ("jax",), "jax"),
        # TF 2.21 imports JAX when it is installed: a TF job is traced by TF's profiler
        (("tensorflow", "jax"), ("tensorflow",), "tensorflow"),
        # JAX with tf.data: both run, and TF's profiler would miss JAX's device work
        (("tensorflow", "jax"), ("tensorflow", "jax"), "jax"),
        # a JAX job with torch's DataLoader
        (("torch", "jax"), ("jax",), "jax"),
        (("tensorflow", "torch"), (), "torch"),
        (("jax", "torch", "tensorflow"), ("torch", "jax"), "torch"),
    ],
)
def test_the_framework_is_the_one_the_process_runs(
    imported: tuple[str, ...], running: tuple[str, ...], chosen: str | None
) -> None:
    modules: dict[str, Any] = {m: sys for m in imported}
    for name in running:
        modules.update(RUNNING[name])
    assert frameworks.detect(modules) == chosen


def test_framework_overrides_the_choice_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    calls: list[str] = []

    def fake(name: str) -> Any:
        def tracer(out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
            calls.append(name)

        return lambda: tracer

    make = {name: fake(name) for name in frameworks.FRAMEWORKS}
    forced = frameworks.FrameworkTracer("jax", make=make)
    assert forced.framework()[0] == "jax"
    traced = forced(tmp_path / "w.xplane.pb", 0, 1, TraceLevels())
    assert traced == Traced(tmp_path / "w.xplane.pb", "jax") and calls == ["jax"]
    with pytest.raises(frameworks.UnknownFramework, match="one of torch, jax, tensorflow"):
        frameworks.FrameworkTracer("mxnet")
    with pytest.raises(AgentError, match="unknown framework 'mxnet'"):
        start(repository_root=tmp_path, framework="mxnet")


def test_the_agent_names_its_task_as_the_launcher_set_it() -> None:
    """``PODSCOPE_TASK`` first (a job's own name), then TF_CONFIG, then torchrun's RANK."""
    from podscope.collectors.agent import task_from_env

    tf = '{"cluster": {}, "task": {"type": "ps", "index": 1}}'
    assert task_from_env({}) == ("", 0)
    assert task_from_env({"TF_CONFIG": tf, "RANK": "3"}) == ("ps", 1)
    assert task_from_env({"RANK": "3"}) == ("rank", 3)
    assert task_from_env({"PODSCOPE_TASK": "worker:2", "TF_CONFIG": tf}) == ("worker", 2)
    assert task_from_env({"PODSCOPE_TASK": "process 4"}) == ("process", 4)
    for bad in ("worker", "worker:-1", "Worker:1", "a:b"):
        with pytest.raises(AgentError, match="PODSCOPE_TASK"):
            task_from_env({"PODSCOPE_TASK": bad})


def test_starting_the_agent_imports_no_framework() -> None:
    code = (
        "import sys, podscope\n"
        "a = podscope.agent.start()\n"
        "a.stop()\n"
        "print(sorted(m for m in ('tensorflow', 'jax', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- PyTorch's window, in process ----------------------------------------------------------------


def test_a_pytorch_trace_without_step_boundaries_fails_with_what_to_add(tmp_path: Path) -> None:
    torch_tracer = pytest.importorskip("podscope.collectors.torch_tracer")
    pytest.importorskip("torch")
    tracer = torch_tracer.TorchTracer(step_wait_s=0.3)
    with pytest.raises(TracerError, match=r"call podscope\.agent\.step\(n\)"):
        tracer(tmp_path / "w.xplane.pb", time.time_ns(), 100, TraceLevels())
    assert heartbeat._step_hook is None  # nothing stays hooked after a capture


def test_a_pytorch_window_starts_and_stops_at_the_loops_steps(tmp_path: Path) -> None:
    torch_tracer = pytest.importorskip("podscope.collectors.torch_tracer")
    torch = pytest.importorskip("torch")
    tracer = torch_tracer.TorchTracer(step_wait_s=30)
    result: dict[str, Any] = {}
    start_ns = time.time_ns() + 200_000_000

    def trace() -> None:
        result["traced"] = tracer(tmp_path / "w.xplane.pb", start_ns, 300, TraceLevels())

    t = threading.Thread(target=trace)
    t.start()
    a = torch.randn(64, 64)
    n = 100
    while t.is_alive():  # this thread is the training loop
        a = torch.tanh(a @ a)
        heartbeat.step(n)
        n += 1
    t.join()
    traced = result["traced"]
    assert traced.path.name == "w.pt.trace.json.gz" and traced.framework == "torch"
    events = json.loads(gzip.decompress(traced.path.read_bytes()))["traceEvents"]
    numbers = sorted(
        int(e["name"].split("#")[1])
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    assert numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and numbers[0] > 100
    assert heartbeat._step_hook is None


@pytest.mark.slow
def test_a_pytorch_ddp_job_is_watched_from_its_ranks_steps(tmp_path: Path) -> None:
    """``podscope watch`` on two DDP ranks: their ``podscope.agent.step(n)`` beats reach the
    watcher, its scheduled capture brings both ranks' traces home, and the History summary of
    it speaks PyTorch's categories and names the analysis' culprit, if any."""
    from podscope.analyzers.history import summarize
    from podscope.analyzers.session import SessionAnalysis
    from podscope.collectors import watch

    logdir = tmp_path / "logdir"
    with jobs(tmp_path, "torch", world=2) as started:
        targets = [Target(s["address"], f"rank{i}") for i, s in enumerate(started)]
        opts = watch.WatchOptions(
            CaptureOptions(logdir=logdir, duration_ms=1500, delay_ms=500),
            every_s=600.0,
            keep=3,
            poll_s=0.05,
        )
        watcher = watch.Watcher(lambda: targets, opts)
        first = watcher.step(time.time())
        assert first is not None and first.trigger.kind == "scheduled"
        assert first.statuses == {"rank0": "ok", "rank1": "ok"}
        deadline = time.monotonic() + 60  # the beats after the capture: a new baseline
        while not all(len(w.beats) >= 5 for w in watcher.workers.values()):
            assert time.monotonic() < deadline, {
                k: len(w.beats) for k, w in watcher.workers.items()
            }
            watcher.step(time.time())
            time.sleep(0.1)
        assert sorted(watcher.workers) == ["rank0", "rank1"]
        steps = [b.step for b in watcher.workers["rank0"].beats]
        assert steps == sorted(steps)  # the loop's own step numbers
    session = layout.session_dir(logdir, first.session)
    assert sorted(p.name for p in session.glob("*.pt.trace.json.gz")) == [
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    analysis = SessionAnalysis.from_path(session)
    summary = summarize(analysis, first.session)
    # Nobody slowed a rank, but on a busy machine (CI's two test processes on two cores) one
    # rank can be starved for the whole capture and is then late in most steps: the summary
    # names what the analysis found, and the verdict on healthy jobs is make verify's (24
    # PyTorch runs, alone on the machine).
    named = analysis.stragglers.loc[analysis.stragglers["straggler"], "worker"]
    assert summary["culprits"] == sorted(named.astype(str))
    assert set(summary["step_ms"]) == {"rank0", "rank1"}
    assert {"comm_wait", "dataloader", "cpu_python"} <= set(summary["metrics"])
