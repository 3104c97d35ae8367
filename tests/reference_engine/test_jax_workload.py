"""Ground truth for XLA program steps: the engine's JAX loop (several processes on loopback,
``jax.distributed`` with gloo, each captured through its PodScope agent, which traces with
``jax.profiler``) with a known step count and an
injected slow host or slow device; PodScope must count the steps, split them as the events
say and name the slowed worker, for the reason it was slowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli_cluster import capture_jax
from podscope.reference_engine.jax_workload import PREFIX, JaxConfig
from tests.analyzers.test_xla_programs import check_breakdown_against_events

pytest.importorskip("jax", reason="JAX (extra 'test' or 'engine') is not installed")
pytestmark = [pytest.mark.cluster]

STEPS, SLOW_MS = 12, 20.0


def analysed(cfg: JaxConfig, tmp_path: Path) -> SessionAnalysis:
    session = capture_jax(cfg, tmp_path / "run", tmp_path / "logdir", label=cfg.scenario)
    return SessionAnalysis.from_path(session)


def per_worker(a: SessionAnalysis, column: str) -> dict[str, float]:
    return (a.breakdown.groupby("worker")[column].mean() / 1e6).to_dict()


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(
            JaxConfig(workers=3, steps=STEPS, scenario="baseline"), marks=pytest.mark.long
        ),
        JaxConfig(workers=3, steps=STEPS, scenario="slow-host", slow_task=1, slow_ms=SLOW_MS),
        pytest.param(
            JaxConfig(workers=2, steps=STEPS, scenario="slow-device", slow_task=0, slow_ms=SLOW_MS),
            marks=pytest.mark.long,
        ),
    ],
    ids=lambda c: f"{c.scenario}-{c.workers}w",
)
def test_jax_loop_steps_breakdown_and_culprit(cfg: JaxConfig, tmp_path: Path) -> None:
    a = analysed(cfg, tmp_path)
    workers = [f"{PREFIX}{i}" for i in range(cfg.workers)]
    assert a.worker_names == workers and a.trace_kind == "jax"
    # every captured execution of the jitted step is a step, and nothing else is
    m = a.methods.set_index("worker")
    assert (m["method"] == "xla_program").all() and (m["steps"] == STEPS).all()
    assert set(a.steps["name"]) == {"jit_local_step"}
    assert a.aligned["step"].nunique() >= STEPS - 4  # steps of all workers, tied by all-reduce
    check_breakdown_against_events(a)

    s = a.stragglers.set_index("worker")
    culprit = sorted(s.index[s["straggler"]])
    fired = {f.rule_id: f for f in a.findings if f.applies and f.severity != "none"}
    for f in fired.values():  # advice in JAX's terms, never TensorFlow's
        assert "tf." not in f.recommendation and "tf.function" not in f.recommendation, f.rule_id
    if cfg.scenario == "baseline":
        assert culprit == [] and "straggler" not in fired
        return
    slow = f"{PREFIX}{cfg.slow_task}"
    assert culprit == [slow]
    cause = fired["straggler_cause"].evidence["cause"]
    others = [w for w in workers if w != slow]
    if cfg.scenario == "slow-host":  # its device waits for its host; the others, for it
        idle = per_worker(a, "device_idle_ns")
        assert cause == "device_idle"
        assert all(idle[slow] > idle[w] + SLOW_MS / 2 for w in others), idle
        coll = per_worker(a, "device_collectives_ns")
        assert all(coll[w] > coll[slow] + SLOW_MS / 2 for w in others), coll
    else:  # its device computes longer (calibrated extra work inside the jitted step)
        compute = per_worker(a, "device_compute_ns")
        assert cause == "device_compute"
        assert all(compute[slow] > compute[w] + SLOW_MS / 3 for w in others), compute
