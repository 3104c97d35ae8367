"""One session's step time and one op's time per step read from every place that shows them —
the Pod Viewer, the Ops page, Compare, the Workers page and the CLI — are the same numbers (the
Pod Viewer's and XProf's definitions: a step lasts as long as its busiest device's span;
per-step op time is per *traced* worker-step)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from podscope.analyzers.compare import compare_ops, compare_steps, with_per_step
from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli import cli
from podscope.trace_parsers import load
from tests.analyzers.test_why_slow import sync_worker
from tests.conftest import SHARED_TRACES
from tests.xspace_builder import SpaceBuilder

V100 = SHARED_TRACES / "xplane" / "gpu_tf_multiworker_v100"


def python_only(steps: int = 8, step_us: int = 3000) -> bytes:
    """A worker traced with the Python tracer only: one ``__call__`` per step, ending with the
    all-reduce of ``sync_worker``'s steps."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    line = host.line(1, "python")
    for i in range(steps):
        t0 = i * step_us * 1_000_000
        host.event(line, "$polymorphic_function.py:805 __call__", t0 + 50_000_000, 1_360_000_000)
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def python_session(root: Path) -> Path:
    """A traced worker (8 steps of 1.4 ms, a 500 µs MatMul each: ``sync_worker``) and a
    worker traced with the Python tracer only."""
    run = root / "run"
    run.mkdir(parents=True)
    (run / "10.0.0.1_6000.xplane.pb").write_bytes(sync_worker())
    (run / "10.0.0.2_6000.xplane.pb").write_bytes(python_only())
    return run


def cli_csv(*args: str, cache: Path) -> pd.DataFrame:
    result = CliRunner().invoke(cli, list(args), env={"PODSCOPE_CACHE_DIR": str(cache)})
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout))


@pytest.mark.parametrize(
    "make,op,step_ms",
    [
        (python_session, "dense/MatMul", 1.4),
        (lambda root: shutil.copytree(V100, root / "v100"), None, 21.31),
    ],
    ids=["python-traced worker", "v100"],
)
def test_step_time_and_op_per_step_agree_everywhere(make, op, step_ms, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if op is None and not V100.is_dir():
        pytest.skip(f"public trace samples not present: {V100}")
    path = make(tmp_path)
    a = SessionAnalysis(load(path, cache=False))
    # Pod Viewer: the header's mean step (and XProf's pod_viewer on the V100: 21.31 ms)
    pod_ms = a.step_time_ns / 1e6
    assert pod_ms == pytest.approx(step_ms, abs=0.005)
    # Compare (page and CLI): the step time row, the session against itself
    page = compare_steps(a.pod, a.pod).set_index("metric")
    cli_steps = cli_csv("compare", str(path), str(path), "--csv", "steps", cache=tmp_path / "c")
    cli_steps = cli_steps.set_index("metric")
    for table in (page, cli_steps):
        assert table.loc["step_time (mean)", "base_ms"] == pytest.approx(pod_ms, rel=1e-9)
    # Workers page: the traced worker's mean step time
    traced = a.stragglers[a.stragglers["worker"] == "10.0.0.1_6000"] if op else None
    if traced is not None:
        assert float(traced["mean_step_time_ns"].iloc[0]) / 1e6 == pytest.approx(pod_ms)
    # the CLI's steps table: the busiest device of each traced worker-step
    steps = cli_csv("steps", str(path), "--csv", cache=tmp_path / "c")
    steps = steps[steps["host_compute_us"].notna()]  # a Python-traced worker's are n/a
    busiest = steps.groupby(["worker", "step"])["step_time_us"].max()
    assert busiest.mean() / 1000 == pytest.approx(pod_ms, rel=1e-6)
    if op is None:
        return
    # one op: the Ops page's per-step column, Compare's page and CLI row
    ops_page = with_per_step(a.op_table_for("op", None), a.capture_steps)
    row = ops_page[ops_page["op_name"] == op]
    per_step_us = float(row["self_per_step_ps"].iloc[0]) / 1e6
    assert per_step_us == pytest.approx(500.0)
    cmp = compare_ops(
        a.op_table_for("op", None), a.op_table_for("op", None), a.capture_steps, a.capture_steps
    )
    cli_ops = cli_csv("compare", str(path), str(path), "--csv", "ops", cache=tmp_path / "c")
    for table in (cmp, cli_ops):
        assert table.loc[table["op_name"] == op, "base_us"].iloc[0] == pytest.approx(per_step_us)
