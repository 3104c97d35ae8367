"""Helpers for tests that run engine clusters (the fixture is ``start_cluster`` in conftest)."""

from __future__ import annotations

from collections.abc import Callable

from podscope.reference_engine import cluster

StartCluster = Callable[..., cluster.Manifest]


def losses(task: cluster.TaskInfo) -> list[float]:
    return [e["loss"] for e in cluster.events(task) if e["event"] == "step"]


def decreasing(values: list[float]) -> bool:
    """Loss goes down: the mean of the last fifth is below the mean of the first fifth."""
    k = max(1, len(values) // 5)
    return sum(values[-k:]) / k < 0.9 * sum(values[:k]) / k
