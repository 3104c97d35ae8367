"""PyTorch ranks in the step breakdown, the collectives and the verdicts, on a trace laid out as
torch.profiler writes a DDP rank over gloo (the engine's captures: tests/reference_engine):
the step marker on the training thread, the all-reduce call there, the all-reduce itself (the
transfer and the wait for the other ranks) on gloo's own thread, which torch.profiler links to
nothing, and the DataLoader's ``__next__``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podscope.analyzers.collectives import collective_events
from podscope.analyzers.session import SessionAnalysis
from podscope.app.figures.pod import breakdown_bars_figure
from podscope.trace_parsers import load

MS = 1000  # µs
STEPS = 6


def _rank(rank: int, compute_ms: float, loader_ms: float) -> dict[str, Any]:
    """Steps of 10 ms: the DataLoader, the forward/backward ops, the all-reduce call at the
    end of this rank's work, gloo's span from there to the last rank's arrival (9 ms)."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "args": {"name": "pt_gloo_runloop"}},
    ]
    for i in range(STEPS):
        t0 = 1_000_000 + i * 10 * MS
        arrive = t0 + (loader_ms + compute_ms) * MS
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 7,
             "tid": 1, "ts": t0, "dur": 10 * MS},
            {"ph": "X", "cat": "user_annotation", "pid": 7, "tid": 1, "ts": t0,
             "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "dur": loader_ms * MS},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1,
             "ts": t0 + loader_ms * MS, "dur": compute_ms * MS},
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 7, "tid": 1,
             "ts": arrive, "dur": 50},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 2,
             "ts": arrive + 50, "dur": t0 + 9 * MS - arrive - 50},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"},
        "traceEvents": ev,
    }


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ddp")
    # rank 1's DataLoader takes 4 ms more: it arrives at the all-reduce at 8.5 ms, rank 0 at 4.5
    for rank, loader in ((0, 0.5), (1, 4.5)):
        trace = _rank(rank, compute_ms=4.0, loader_ms=loader)
        (folder / f"rank-{rank}.pt.trace.json").write_text(json.dumps(trace))
    return folder


def test_gloo_time_is_communication_and_the_dataloader_is_input(session: Path) -> None:
    a = SessionAnalysis(load(session, cache=False))
    b = a.breakdown.set_index(["worker", "step"])
    assert sorted(a.worker_names) == ["rank-0", "rank-1"]
    assert len(b) == 2 * (STEPS - 2)  # the first and last steps left out as partial
    ms = (b.groupby("worker").mean(numeric_only=True) / 1e6).round(3)
    # gloo's span, on a thread torch.profiler links to no step, is the step's collective time;
    # the c10d call before it (50 µs) enqueues it: CPU time
    assert ms.loc["rank-0", "device_collectives_ns"] == 4.45
    assert ms.loc["rank-1", "device_collectives_ns"] == 0.45
    assert ms.loc["rank-0", "input_ns"] == 0.5 and ms.loc["rank-1", "input_ns"] == 4.5
    assert (ms["host_compute_ns"] == 4.05).all()
    assert (ms["all_others_ns"] == 1.0).all()  # 9 → 10 ms: nothing traced (Python)


def test_the_late_rank_is_found_by_its_arrival_at_gloos_all_reduce(session: Path) -> None:
    a = SessionAnalysis(load(session, cache=False))
    calls = collective_events(a.frames.events)
    assert set(calls["key"]) == {"gloo:all_reduce"} and set(calls["kind"]) == {"all-reduce"}
    inst = a.collectives
    assert (inst["last_arriver"] == "rank-1").all()
    assert inst["skew_ns"].astype(float).round(-3).eq(4_000_000).all()
    roles = a.roles.set_index("worker")["role"]
    assert roles["rank-1"] == "culprit" and roles["rank-0"] == "victim"
    findings = {f.rule_id: f for f in a.findings}
    cause = findings["straggler_cause"]
    assert cause.evidence["cause"] == "input" and "Cause: its DataLoader" in cause.recommendation
    assert findings["straggler"].title == "Straggler: rank-1 holds the others back"
    assert findings["collective_wait"].title == "Ranks wait in collectives for a late participant"
    assert findings["input_bound"].title == "DataLoader-bound: steps wait for the DataLoader"
    assert "num_workers" in findings["input_bound"].recommendation
    # a rule not yet checked on PyTorch says so, never TensorFlow's advice
    assert not findings["eager"].applies and "not yet checked" in findings["eager"].reason


def test_a_ranks_step_in_pytorchs_categories(session: Path) -> None:
    """The Pod Viewer's and ``podscope steps``' PyTorch categories partition each step: the
    waiting rank's communication is its wait for the late one, the rest the transfer."""
    from podscope.analyzers.torch_view import TORCH_COLUMNS

    a = SessionAnalysis(load(session, cache=False))
    t = a.torch_breakdown
    assert (t[TORCH_COLUMNS].sum(axis=1) == t["step_time_ns"]).all()
    ms = (t.groupby("worker")[TORCH_COLUMNS].mean() / 1e6).round(3)
    assert ms.loc["rank-0", "comm_wait_ns"] == 4.0  # rank 1 arrives 4 ms later
    assert ms.loc["rank-0", "comm_transfer_ns"] == 0.45
    assert ms.loc["rank-1", "comm_wait_ns"] == 0.0 and ms.loc["rank-1", "dataloader_ns"] == 4.5
    assert (ms["cpu_python_ns"] == 4.05 + 1.0).all()  # its ops, and Python between them
    assert (ms[["gpu_compute_ns", "memcpy_ns", "gpu_idle_ns"]] == 0).all().all()
    means = a.step_rows(None).set_index("worker")
    assert means.loc["rank-1", "dataloader_ns"] == 4_500_000
    fig = breakdown_bars_figure(a.step_rows(None), "all steps")
    names = [bar.name for bar in fig.data]
    assert names[:3] == ["GPU compute", "Communication: wait", "Communication: transfer"]
    assert "DataLoader" in names and "GPU idle" not in names  # no GPU: no GPU idle bar


def test_podscope_steps_speaks_pytorch_on_a_pytorch_capture(session: Path) -> None:
    import io
    import subprocess
    import sys

    import pandas as pd

    args = [sys.executable, "-m", "podscope", "steps", str(session), "--no-cache"]
    out = subprocess.run([*args, "--csv"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    assert list(table.columns[:4]) == ["worker", "device", "step", "step_time_us"]
    assert table.groupby("worker")["comm_wait_us"].mean().round().to_dict() == {
        "rank-0": 4000,
        "rank-1": 0,
    }
    shown = subprocess.run(args, capture_output=True, text=True).stdout
    head = next(line for line in shown.splitlines() if line.split()[:1] == ["worker"])
    assert head.split()[5:] == ["wait", "comm", "cpu+py", "loader"]  # no GPU: no gpu, idle


def test_compare_speaks_pytorch_between_two_pytorch_runs(session: Path, tmp_path: Path) -> None:
    """Compare two PyTorch runs in PyTorch's categories: rank 1's DataLoader 2 ms slower in
    the new run is 2 ms more DataLoader on it, and 2 ms more wait on rank 0."""
    from podscope.analyzers.compare import compare_steps

    for rank, loader in ((0, 0.5), (1, 6.5)):
        trace = _rank(rank, compute_ms=2.0, loader_ms=loader)
        (tmp_path / f"rank-{rank}.pt.trace.json").write_text(json.dumps(trace))
    base, new = (SessionAnalysis(load(p, cache=False)) for p in (session, tmp_path))
    (b, cats), (n, _) = base.own_pod(new), new.own_pod(base)
    table = compare_steps(b, n, cats).set_index("metric")
    assert list(table.index[3:]) == [
        "gpu_compute",
        "comm_wait",
        "comm_transfer",
        "memcpy",
        "cpu_python",
        "dataloader",
        "gpu_idle",
    ]
    # the slowest device of each rank-step, averaged over both ranks: (0.5 + 4.5) / 2 → (0.5 + 6.5) / 2
    assert table.loc["dataloader", "delta"] == pytest.approx(1.0, abs=1e-6)
    assert table.loc["comm_wait", "delta"] == pytest.approx(1.0, abs=1e-6)
    assert table.loc["cpu_python", "delta"] == pytest.approx(-2.0, abs=1e-6)
