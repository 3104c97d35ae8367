"""Ground truth for PyTorch ranks: the engine's DDP job (gloo on loopback, every rank captured
through its PodScope agent with torch.profiler in one window) with an injected slow rank, slow
DataLoader or slow all-reduce; PodScope must find the steps, split them as the events say, and
name the slowed rank for the reason it was slowed (or no rank, where every rank was slowed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli_cluster import capture_torch
from podscope.reference_engine.config import EngineError
from podscope.reference_engine.torch_workload import PREFIX, TorchConfig

pytest.importorskip("torch", reason="PyTorch (extra 'test' or 'torch') is not installed")
pytestmark = [pytest.mark.cluster]

STEPS, SLOW_MS = 10, 20.0


def per_rank(a: SessionAnalysis, column: str) -> dict[str, float]:
    return (a.breakdown.groupby("worker")[column].mean() / 1e6).to_dict()


@pytest.mark.parametrize(
    "cfg",
    [
        TorchConfig(workers=2, steps=STEPS, scenario="slow-rank", slow_task=1, slow_ms=SLOW_MS),
        pytest.param(
            TorchConfig(workers=3, steps=STEPS, scenario="slow-dataloader", slow_task=0),
            marks=pytest.mark.long,
        ),
        pytest.param(
            TorchConfig(workers=2, steps=STEPS, scenario="slow-allreduce"), marks=pytest.mark.long
        ),
        pytest.param(TorchConfig(workers=2, steps=STEPS), marks=pytest.mark.long),
    ],
    ids=lambda c: f"{c.scenario}-{c.workers}r",
)
def test_ddp_ranks_steps_breakdown_and_culprit(cfg: TorchConfig, tmp_path: Path) -> None:
    session = capture_torch(cfg, tmp_path / "run", tmp_path / "logdir", label=cfg.scenario)
    ranks = [f"{PREFIX}{i}" for i in range(cfg.workers)]
    assert sorted(p.name for p in session.glob("*.pt.trace.json.gz")) == [
        f"{r}.pt.trace.json.gz" for r in ranks
    ]
    a = SessionAnalysis.from_path(session)
    assert a.worker_names == ranks and a.trace_kind == "pytorch"
    # the configured steps, the first (ranks agreeing to start) and the last (the idle wait
    # to the window's end) left out as partial
    assert a.aligned["step"].nunique() == STEPS
    b = a.breakdown
    assert b["split"].all() and (b["device"] == "/host:CPU").all()
    # every rank's all-reduce is its gloo thread's span: collectives in every step
    assert (b["device_collectives_ns"] > 0).all()
    coll = per_rank(a, "device_collectives_ns")
    fired = {f.rule_id: f for f in a.findings if f.applies and f.severity != "none"}
    for f in (f for f in a.findings if f.applies):  # PyTorch's words: no other framework's
        text = f"{f.title} {f.reason} {f.recommendation}"
        for word in ("tf.", "Keras", "jax", "XLA", " worker "):
            assert word not in text, (f.rule_id, word, text)
    culprits = sorted(a.roles.loc[a.roles["role"] == "culprit", "worker"])
    if cfg.scenario in ("baseline", "slow-allreduce"):
        assert culprits == [] and "straggler" not in fired
        if cfg.scenario == "slow-allreduce":  # every rank moves the padded buckets
            top = next(iter(fired))
            assert top == "slow_collective", list(fired)
            assert min(coll.values()) > SLOW_MS * 0.6, coll
        return
    slow = f"{PREFIX}{cfg.slow_task}"
    others = [r for r in ranks if r != slow]
    assert culprits == [slow]
    assert next(iter(fired)) in ("straggler", "straggler_cause")
    cause = fired["straggler_cause"].evidence["cause"]
    # the others wait for it in the all-reduce; it does not
    assert all(coll[r] > coll[slow] + SLOW_MS / 2 for r in others), coll
    if cfg.scenario == "slow-rank":  # its CPU ops: the calibrated matmuls before its forward
        host = per_rank(a, "host_compute_ns")
        assert cause == "host_compute"
        assert all(host[slow] > host[r] + SLOW_MS / 2 for r in others), host
        assert "Cause: its CPU ops" in fired["straggler_cause"].recommendation
    else:  # its DataLoader's batches come late
        loader = per_rank(a, "input_ns")
        assert cause == "input"
        assert all(loader[slow] > loader[r] + SLOW_MS / 2 for r in others), loader
        assert "Cause: its DataLoader" in fired["straggler_cause"].recommendation
    out = subprocess.run(
        [sys.executable, "-m", "podscope", "stragglers", str(session)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    # the rank named by its task (the engine's ranks say "rank N"), its label beside it
    row = next(line for line in out.stdout.splitlines() if slow in line.split())
    assert row.split()[:3] == ["rank", str(cfg.slow_task), slow] and "culprit" in row.split()


def test_an_impossible_pytorch_run_is_refused_before_it_starts(tmp_path: Path) -> None:
    for bad, said in [
        (TorchConfig(scenario="slow-gpu"), "unknown PyTorch scenario"),
        (TorchConfig(workers=1), "at least 2 ranks"),
        (TorchConfig(scenario="slow-rank", slow_task=2), "not a rank"),
    ]:
        with pytest.raises(EngineError, match=said):
            capture_torch(bad, tmp_path / "run", tmp_path / "logdir")
    assert not (tmp_path / "run").exists()  # nothing started
