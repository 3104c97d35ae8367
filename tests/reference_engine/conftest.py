"""Fixtures that start local clusters and always stop them (no orphan processes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_engine import cluster
from reference_engine.config import EngineConfig
from tests.conftest import require_tf

StartCluster = Callable[..., cluster.Manifest]


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[StartCluster]:
    """``start_cluster(cfg, workers=…, ps=…)`` → manifest; every cluster is stopped at teardown."""
    require_tf()
    started: list[cluster.Manifest] = []

    def start(cfg: EngineConfig, workers: int = 2, ps: int = 0) -> cluster.Manifest:
        run_dir = tmp_path / f"run{len(started)}"
        m = cluster.up(cfg, workers=workers, ps=ps, run_dir=run_dir, ready_timeout_s=240)
        started.append(m)
        return m

    yield start
    for m in started:
        cluster.down(m, grace_s=2)
        assert not [t.name for t in m.tasks if cluster.alive(t.pid)], "processes left after down"


def losses(task: cluster.TaskInfo) -> list[float]:
    return [e["loss"] for e in cluster.events(task) if e["event"] == "step"]


def decreasing(values: list[float]) -> bool:
    """Loss goes down: the mean of the last fifth is below the mean of the first fifth."""
    k = max(1, len(values) // 5)
    return sum(values[-k:]) / k < 0.9 * sum(values[:k]) / k
