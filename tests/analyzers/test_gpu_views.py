"""``podscope gpu``'s views against Holistic Trace Analysis (``traceinsight`` 0.6.1, the test
extra) on every real PyTorch trace in ../shared/traces/kineto: times within 1 %, percentages
within 0.5 points (they agree exactly today)."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.gpu_views import gpu_view, kernel_type
from podscope.trace_parsers import load
from tests.conftest import SHARED_TRACES

FOLDERS = (
    sorted(p for p in (SHARED_TRACES / "kineto").iterdir() if p.is_dir())
    if (SHARED_TRACES / "kineto").is_dir()
    else []
)


@cache
def hta(folder: Path, tmp: Path) -> Any:
    """HTA's TraceAnalysis of the folder's ranks (copied alone into a folder of their own)."""
    ta = pytest.importorskip("hta.trace_analysis", reason="traceinsight (the test extra)")
    here = tmp / folder.name
    here.mkdir()
    for f in folder.glob("*.json.gz"):
        shutil.copy(f, here / f.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ta.TraceAnalysis(trace_dir=str(here))


@pytest.fixture(scope="module")
def hta_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hta")


def same(mine: pd.DataFrame, theirs: pd.DataFrame, times: list[str], shares: list[str]) -> None:
    assert len(mine) == len(theirs)
    for ours, hers in (pair.split("=") for pair in times):
        np.testing.assert_allclose(
            mine[ours].to_numpy(float), theirs[hers].to_numpy(float), rtol=0.01
        )
    for ours, hers in (pair.split("=") for pair in shares):
        a, b = mine[ours].to_numpy(float), theirs[hers].to_numpy(float)
        assert ((np.abs(a - b) <= 0.5) | (np.isnan(a) & np.isnan(b))).all(), (a, b)


@pytest.mark.skipif(not FOLDERS, reason="public Kineto samples not present")
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_view_equals_holistic_trace_analysis(folder: Path, hta_dir: Path) -> None:
    analysis = hta(folder, hta_dir)
    frames = load(folder, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HTA divides 0 by 0 without communication
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        types, kernels = analysis.get_gpu_kernel_breakdown(
            visualize=False, include_memory_kernels=True
        )
    mine = gpu_view(frames, "temporal")
    assert mine["rank"].tolist() == temporal["rank"].tolist()
    same(
        mine,
        temporal,
        [
            f"{c}_us={c}(us)"
            for c in ("idle_time", "compute_time", "non_compute_time", "kernel_time")
        ],
        [f"{c}_pctg={c}_pctg" for c in ("idle_time", "compute_time", "non_compute_time")],
    )
    same(
        gpu_view(frames, "overlap"), overlap, [], ["comp_comm_overlap_pctg=comp_comm_overlap_pctg"]
    )
    mine = gpu_view(frames, "kernel-types")
    assert mine["kernel_type"].tolist() == types["kernel_type"].tolist()
    same(mine, types, ["sum_us=sum"], ["percentage=percentage"])
    mine = gpu_view(frames, "kernels")
    assert mine[["kernel_type", "rank", "name"]].values.tolist() == (
        kernels[["kernel_type", "rank", "name"]].values.tolist()
    )
    same(
        mine,
        kernels,
        ["sum_us=sum (us)", "max_us=max (us)", "min_us=min (us)", "mean_us=mean (us)"],
        [],
    )
    np.testing.assert_allclose(mine["stddev"], kernels["stddev"], rtol=0.01, atol=1e-9)

    ranks = analysis.t.get_ranks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idle, _ = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
        launches = analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        queues = analysis.get_queue_length_summary(ranks=ranks)
        memory = analysis.get_memory_bw_summary(ranks=ranks)
    keys = ["rank", "stream", "idle_category"]
    mine = gpu_view(frames, "idle").sort_values(keys, ignore_index=True)
    idle = idle.sort_values(keys, ignore_index=True)
    assert mine[keys].values.tolist() == idle[keys].values.tolist()
    same(mine, idle, ["idle_time=idle_time"], [])
    np.testing.assert_allclose(mine["idle_time_ratio"], idle["idle_time_ratio"], atol=0.005)

    mine = gpu_view(frames, "launches")
    theirs = pd.concat([df.assign(rank=r) for r, df in launches.items()], ignore_index=True)
    theirs = theirs.sort_values(["rank", "correlation"], ignore_index=True, kind="stable")
    assert mine[["rank", "correlation"]].values.tolist() == (
        theirs[["rank", "correlation"]].values.tolist()
    )
    same(mine, theirs, [f"{c}={c}" for c in ("cpu_duration", "gpu_duration", "launch_delay")], [])

    for view, theirs, key in (("queues", queues, "stream"), ("memory-bw", memory, "name")):
        mine = gpu_view(frames, view)
        if theirs is None or theirs.empty:  # HTA: None (or nothing) when no rank has one
            assert mine.empty
            continue
        theirs = theirs.droplevel(0, axis=1).reset_index()
        assert mine[["rank", key]].values.tolist() == theirs[["rank", key]].values.tolist()
        stats = ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]
        for stat in stats:  # a single point has no std: NaN in both
            a, b = mine[stat].to_numpy(float), theirs[stat].to_numpy(float)
            assert (
                (np.abs(a - b) <= 0.01 * np.abs(b) + 1e-9) | (np.isnan(a) & np.isnan(b))
            ).all(), (
                view,
                stat,
                a,
                b,
            )


def test_kernel_types_by_name() -> None:
    assert kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float") == "COMMUNICATION"
    assert kernel_type("void at::native::ncclKernel_x") == "COMMUNICATION"
    assert kernel_type("Memcpy HtoD (Pageable -> Device)") == "MEMORY"
    assert kernel_type("Memset (Device)") == "MEMORY"
    assert kernel_type("volta_sgemm_128x64_nn") == "COMPUTATION"
    assert kernel_type("cudaStreamSynchronize") == "OTHER"


@pytest.mark.skipif(not FOLDERS, reason="public Kineto samples not present")
def test_the_cli_prints_the_views(tmp_path: Path) -> None:
    folder = next(f for f in FOLDERS if f.name == "gpu_sampled_2of128")
    run = [sys.executable, "-m", "podscope", "gpu", str(folder), "--no-cache"]
    out = subprocess.run([*run, "--csv", "--view", "overlap"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    expected = gpu_view(load(folder, cache=False), "overlap")
    assert table.columns.tolist() == ["rank", "comp_comm_overlap_pctg"]
    assert table.values.tolist() == expected.values.tolist()
    shown = subprocess.run(run, capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert shown.returncode == 0 and "non-comp %" in shown.stdout, shown.stderr
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    xplane = SHARED_TRACES / "xplane" / "tpu_xprof"
    if xplane.is_dir():
        other = subprocess.run(
            [sys.executable, "-m", "podscope", "gpu", str(xplane)],
            capture_output=True,
            text=True,
        )
        assert other.returncode == 2 and "no PyTorch profiler trace" in other.stderr
