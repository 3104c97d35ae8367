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


def random_rank(rng: Any, rank: int, world: int, steps: int) -> dict[str, Any]:
    """A PyTorch trace of one rank, drawn: ``steps`` ProfilerSteps of launches, kernels on two
    streams (computation, NCCL, copies with their bandwidth, sets), some launched before the
    window or never run, fractional or whole µs, overlaps and ties."""
    fractional = bool(rng.integers(2))
    t = 1_700_000_000_000_000.0 + rng.integers(1000)
    events: list[dict[str, Any]] = []
    corr = 1000

    def when(x: float) -> Any:
        return round(x, 3) if fractional else int(x)

    for step in range(steps):
        start = t
        t += rng.integers(1, 40)
        for _ in range(int(rng.integers(3, 12))):
            corr += 1
            kind = rng.choice(["compute", "nccl", "copy", "set"], p=[0.55, 0.2, 0.15, 0.1])
            name, cat = {
                "compute": ("volta_sgemm_128x64_nn", "kernel"),
                "nccl": ("ncclKernel_AllReduce_RING_LL_Sum_float", "kernel"),
                "copy": (
                    str(
                        rng.choice(
                            ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"]
                        )
                    ),
                    "gpu_memcpy",
                ),
                "set": ("Memset (Device)", "gpu_memset"),
            }[str(kind)]
            launch = {
                "compute": "cudaLaunchKernel",
                "nccl": "cudaLaunchKernel",
                "copy": "cudaMemcpyAsync",
                "set": "cudaMemsetAsync",
            }[str(kind)]
            call = t + rng.random() * 5
            dur = rng.random() * 8 + 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": launch,
                    "pid": 1,
                    "tid": 1,
                    "ts": when(call),
                    "dur": when(dur),
                    "args": {"correlation": corr},
                }
            )
            stream = 7 if kind != "nccl" else 13
            ks = call + rng.integers(0, 30) + rng.random()
            kd = rng.random() * 60
            args: dict[str, Any] = {"device": 0, "stream": stream, "correlation": corr}
            if kind in ("copy", "set"):
                args["memory bandwidth (GB/s)"] = round(float(rng.random() * 20), 4)
            if rng.random() > 0.05:  # some launches never ran in the window
                events.append(
                    {
                        "ph": "X",
                        "cat": cat,
                        "name": name,
                        "pid": 0,
                        "tid": stream,
                        "ts": when(ks),
                        "dur": when(kd),
                        "args": args,
                    }
                )
            t = call + dur + rng.random() * 3
        t += rng.integers(5, 200)
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": when(start),
                "dur": when(t - start),
            }
        )
    rng.shuffle(events)  # Kineto writes events in no time order
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": world},
        "traceEvents": events,
    }


@pytest.mark.parametrize("seed", range(int(os.environ.get("PODSCOPE_HTA_SEEDS", "4"))))
def test_drawn_traces_give_htas_numbers(seed: int, tmp_path: Path) -> None:
    """Traces drawn with other shapes than the shared ones (one step or several, 1-3 ranks,
    whole or fractional µs): every view equals HTA's. ``make verify`` draws more seeds."""
    import json

    ta = pytest.importorskip("hta.trace_analysis", reason="traceinsight (the test extra)")
    rng = np.random.default_rng(seed)
    world = int(rng.integers(1, 4))
    steps = int(rng.integers(1, 5))
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(world):
        (folder / f"rank-{rank}.pt.trace.json").write_text(
            json.dumps(random_rank(rng, rank, world, steps))
        )
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = ta.TraceAnalysis(trace_dir=str(folder))
        temporal = analysis.get_temporal_breakdown(visualize=False)
        types, kernels = analysis.get_gpu_kernel_breakdown(
            visualize=False, include_memory_kernels=True
        )
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        ranks = analysis.t.get_ranks()
        idle, _ = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
        launches = analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        memory = analysis.get_memory_bw_summary(ranks=ranks)
        queues = analysis.get_queue_length_summary(ranks=ranks)
    frames = load(folder, cache=False)
    mine = gpu_view(frames, "temporal")
    same(
        mine,
        temporal,
        [
            "kernel_time_us=kernel_time(us)",
            "idle_time_us=idle_time(us)",
            "compute_time_us=compute_time(us)",
        ],
        ["idle_time_pctg=idle_time_pctg"],
    )
    same(
        gpu_view(frames, "overlap"), overlap, [], ["comp_comm_overlap_pctg=comp_comm_overlap_pctg"]
    )
    mine = gpu_view(frames, "kernel-types")
    assert mine["kernel_type"].tolist() == types["kernel_type"].tolist()
    same(mine, types, ["sum_us=sum"], ["percentage=percentage"])
    assert len(gpu_view(frames, "kernels")) == len(kernels)
    keys = ["rank", "stream", "idle_category"]
    mine = gpu_view(frames, "idle").sort_values(keys, ignore_index=True)
    idle = idle.sort_values(keys, ignore_index=True)
    assert mine[keys].values.tolist() == idle[keys].values.tolist()
    same(mine, idle, ["idle_time=idle_time"], [])
    theirs = pd.concat([df.assign(rank=r) for r, df in launches.items()], ignore_index=True)
    theirs = theirs.sort_values(["rank", "correlation"], ignore_index=True, kind="stable")
    same(
        gpu_view(frames, "launches"),
        theirs,
        ["launch_delay=launch_delay", "gpu_duration=gpu_duration"],
        [],
    )
    for view, theirs in (("memory-bw", memory), ("queues", queues)):
        mine = gpu_view(frames, view)
        if theirs is None or theirs.empty:
            assert mine.empty
            continue
        theirs = theirs.droplevel(0, axis=1).reset_index()
        same(mine, theirs, ["count=count", "mean=mean", "max=max", "50%=50%"], [])


@pytest.mark.skipif(not FOLDERS, reason="public Kineto samples not present")
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_ranks_steps_are_its_profiler_steps(folder: Path) -> None:
    """Every ``ProfilerStep#N`` is a step (their names differ only by N: one marker), where the
    steps once were the one most frequent name's single marker."""
    from podscope.analyzers.session import SessionAnalysis

    frames = load(folder, cache=False)
    ev = frames.events
    markers = ev[ev["name"].astype(str).str.match(r"ProfilerStep#\d+$")]
    steps = SessionAnalysis(frames).steps
    assert (steps["method"] == "marker").all()
    for worker, mine in markers.groupby("worker", observed=True):
        found = steps[steps["worker"] == worker]
        assert found["step_num"].tolist() == sorted(mine["step_num"].astype(int))
        assert found["start_ns"].tolist() == sorted(mine["start_ns"])


def test_a_cpu_only_pytorch_capture_says_so(tmp_path: Path) -> None:
    """DDP over gloo on CPUs (the agent's PyTorch captures in tests) has no GPU events: the
    views are empty and the CLI says why, not that there is no PyTorch trace."""
    import json

    trace = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo"},
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i,
                "dur": 90,
            }
            for i in range(3)
        ]
        + [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "gloo:all_reduce",
                "pid": 1,
                "tid": 1,
                "ts": 10,
                "dur": 20,
            }
        ],
    }
    path = tmp_path / "w0.pt.trace.json"
    path.write_text(json.dumps(trace))
    frames = load(path, cache=False)
    for view in ("temporal", "kernel-types", "kernels", "idle", "launches"):
        assert gpu_view(frames, view).empty
    assert gpu_view(frames, "overlap")["comp_comm_overlap_pctg"].isna().all()  # as HTA's
    out = subprocess.run(
        [sys.executable, "-m", "podscope", "gpu", str(path), "--no-cache", "--csv"],
        capture_output=True,
        text=True,
    )
    said = " ".join(out.stderr.split())  # wrapped at 80 columns, wherever the path ends
    assert out.returncode == 0 and "without GPU events (a CPU-only run)" in said
    assert out.stdout.startswith("rank,idle_time_us")
