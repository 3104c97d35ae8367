"""Two runs compared: step metrics and per-step op deltas, runs of different lengths."""

from __future__ import annotations

import pandas as pd
import pytest

from podscope.analyzers.breakdown import step_breakdown
from podscope.analyzers.compare import STEP_METRICS, compare_ops, compare_steps
from podscope.analyzers.ops import op_stats
from podscope.analyzers.steps import align_steps, find_steps
from podscope.trace_parsers.xplane import parse_xplane
from tests.xspace_builder import SpaceBuilder

US = 1_000_000  # ps per µs


def run(steps: int, ops: list[tuple[str, int]], *, step_us: int = 1000) -> tuple[pd.DataFrame, ...]:
    """One worker: ``steps`` train steps, each running ``ops`` (name, µs) back to back."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, pool = host.line(1, "python"), host.line(2, "tf_Compute")
    for i in range(steps):
        t0 = i * step_us * US
        host.event(py, "train", t0, (step_us - 100) * US, step_num=i, _r=1)
        at = t0 + 10 * US
        for name, us in ops:
            host.event(pool, name, at, us * US)
            at += us * US
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    frames = parse_xplane(b.bytes(), worker="w_1")
    # every step, as SessionAnalysis.capture_steps gives Compare (whole and partial)
    steps = align_steps(find_steps(frames.events), drop_partial=False)[0]
    breakdown = step_breakdown(frames.events, steps)
    return breakdown, op_stats(frames.events)


def test_steps_and_ops_per_step_across_runs_of_different_lengths() -> None:
    base_steps, base_ops = run(3, [("dense/MatMul:MatMul", 300)])
    new_steps, new_ops = run(6, [("dense/MatMul:MatMul", 300), ("conv/Conv2D:Conv2D", 200)])
    steps = compare_steps(base_steps, new_steps).set_index("metric")
    assert list(steps.index) == list(STEP_METRICS)
    assert steps.loc["step_time (mean)", "delta"] == 0  # same step length (900 µs)
    assert steps.loc["host_compute", "base_ms"] == pytest.approx(0.3)
    assert steps.loc["host_compute", "new_ms"] == pytest.approx(0.5)
    assert steps.loc["host_compute", "change"] == pytest.approx(0.5 / 0.3 - 1)
    ops = compare_ops(base_ops, new_ops, base_steps, new_steps)
    assert ops["op_type"].tolist() == ["Conv2D", "MatMul"]  # largest change first
    conv, matmul = ops.iloc[0], ops.iloc[1]
    assert (conv["status"], conv["base_us"], conv["new_us"]) == ("new", 0, 200)
    assert conv["new_per"] == 1 and pd.isna(conv["change"])
    assert (matmul["delta"], matmul["status"], matmul["per"]) == (0, "", "step")


def test_a_run_without_steps_compares_per_capture() -> None:
    base_steps, base_ops = run(2, [("dense/MatMul:MatMul", 300)])
    empty = base_steps.iloc[0:0]
    ops = compare_ops(base_ops, base_ops, base_steps, empty)
    assert ops["per"].tolist() == ["capture"] and ops["base_us"].tolist() == [600]
    steps = compare_steps(base_steps, empty).set_index("metric")
    assert steps["new_ms"].isna().all() and steps["delta"].isna().all()


def test_step_time_and_categories_average_over_the_same_rows() -> None:
    """A Python-traced worker (categories unknown) must not pull the step time away from
    the categories it is shown beside."""
    from podscope.analyzers.breakdown import CATEGORIES
    from podscope.analyzers.session import SessionAnalysis
    from podscope.trace_parsers.loader import merge
    from tests.analyzers.test_breakdown import worker_trace

    frames = merge(
        [
            parse_xplane(worker_trace("w1", 6, input_us=300, step_us=5000), worker="w1"),
            parse_xplane(worker_trace("w2", 6, python_only=True, step_us=1000), worker="w2"),
        ]
    )
    b = SessionAnalysis(frames).breakdown
    assert set(b.loc[~b["split"].astype(bool), "worker"]) == {"w2"}
    table = compare_steps(b, b).set_index("metric")
    cats = table.loc[list(CATEGORIES), "base_ms"].sum()
    assert abs(cats - table.loc["step_time (mean)", "base_ms"]) < 1e-6
