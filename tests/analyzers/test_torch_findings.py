"""The findings on the real PyTorch traces (../shared/traces/kineto): only the rules checked on
PyTorch judge them, in PyTorch's words, and every one that fires is checked against the
trace's own events, as the XLA findings are."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.diagnostics.speech import PYTORCH_NOT_YET, PYTORCH_RULES
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import load
from tests.analyzers.test_gpu_views import FOLDERS

pytestmark = pytest.mark.skipif(not FOLDERS, reason="public Kineto samples not present")
#: Another framework's words: none belongs in a PyTorch capture's finding.
FOREIGN = re.compile(
    r"tf\.|tf_|TF_|Keras|keras|jax|JAX|XLA|jit_compile|LossScale|host_tracer_level|"
    r"(?<![\w-])worker(?![\w-])"
)


@cache
def analysed(folder: Path) -> SessionAnalysis:
    return SessionAnalysis(load(folder, cache=False))


def _nccl_busy_share(a: SessionAnalysis) -> float:
    """The time an NCCL kernel runs on each rank's GPU inside its steps (their union), over
    the steps' time: what the communication category can at most be."""
    ev = a.frames.events
    nccl = ev[
        ev["plane"].astype(str).str.startswith("/device:")
        & ev["name"].astype(str).str.match(r"(?i)nccl")
    ]
    busy = 0
    for worker, steps in a.aligned.groupby("worker", observed=True):
        mine = nccl[nccl["worker"] == worker]
        start = mine["start_ns"].to_numpy(np.int64)
        end = start + mine["dur_ps"].to_numpy(np.int64) // 1000
        order = np.argsort(start)
        for s0, s1 in zip(steps["start_ns"], steps["end_ns"], strict=True):
            reach = s0
            for x, y in zip(
                np.clip(start[order], s0, s1), np.clip(end[order], s0, s1), strict=True
            ):
                x = max(x, reach)
                if y > x:
                    busy, reach = busy + (y - x), y
    b = a.split
    return busy / float(b["step_time_ns"].sum())


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_only_the_rules_checked_on_pytorch_judge_it_in_its_words(folder: Path) -> None:
    a = analysed(folder)
    assert a.trace_kind == "pytorch"
    for f in a.findings:
        if f.rule_id not in PYTORCH_RULES:
            assert not f.applies and f.reason == PYTORCH_NOT_YET, f.rule_id
        elif f.applies:
            text = f"{f.title} {f.recommendation}"
            assert not FOREIGN.search(text), (f.rule_id, FOREIGN.search(text))
    # no rank was injected anything, and none is accused
    assert "culprit" not in set(a.roles["role"])


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_communication_finding_is_nccl_time_the_compute_does_not_hide(folder: Path) -> None:
    """``collectives``: the share of step time in NCCL kernels with no compute or copy over
    them; at most the NCCL kernels' own busy time in the steps, and none without them."""
    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "collectives")
    nccl = _nccl_busy_share(a)
    assert f.applies and f.value is not None
    assert f.value <= nccl + 1e-9, (f.value, nccl)
    assert (f.value > 0) == (nccl > 0)
    if f.severity != "none":
        assert nccl >= 0.03 and "all-reduce" in f.recommendation


def test_ranks_wait_for_the_rank_that_starts_its_nccl_kernels_later() -> None:
    """``collective_wait`` fires on the two sampled ranks of a 128-rank job: the rank it says
    waits most starts the matched NCCL kernels before the other rank does, in most of them."""
    folder = next((p for p in FOLDERS if p.name == "gpu_sampled_2of128"), None)
    if folder is None:
        pytest.skip("gpu_sampled_2of128 not present")
    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "collective_wait")
    assert f.applies and f.severity != "none"
    waits = pd.Series(f.evidence["wait_share_by_worker"])
    waiter = str(waits.idxmax())
    other = next(w for w in a.worker_names if w != waiter)
    ev = a.frames.events
    nccl = ev[
        ev["name"].astype(str).str.match(r"(?i)nccl")
        & ev["plane"].astype(str).str.startswith("/device:")
    ]
    firsts = {}
    for w in (waiter, other):
        mine = nccl[nccl["worker"] == w].sort_values("start_ns")
        mine = mine.assign(k=mine.groupby("name", observed=True).cumcount())
        firsts[w] = mine.set_index(["name", "k"])["start_ns"]
    both = pd.concat(firsts, axis=1, join="inner").dropna()
    assert len(both) >= 10
    earlier = (both[waiter] < both[other]).mean()
    assert earlier > 0.5, earlier


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_matmuls_in_32_bit_are_the_traces_gemm_kernels(folder: Path) -> None:
    """``torch_matmul_precision`` fires where the trace's GEMM and convolution kernels
    (cuBLAS, CUTLASS and cuDNN names; fbgemm's own kernels aside) are all 32-bit by name
    (``sgemm``, ``tensorop_s1688gemm``: TF32), and its largest are the trace's, with their
    time."""
    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "torch_matmul_precision")
    ev = a.frames.events
    kernels = ev[ev["plane"].astype(str).str.startswith("/device:")]
    names = kernels["name"].astype(str)
    gemm = kernels[
        names.str.contains("gemm|conv|winograd|grad", case=False) & ~names.str.contains("fbgemm")
    ]
    if not f.applies:  # the ROCm sample: no launch dimensions, no kernel table
        assert folder.name == "mi250_rocm" and "launch dimensions" in f.reason
        return
    half = gemm["name"].astype(str).str.contains(r"h884|h1688|h16816|hgemm|bf16|f16", case=False)
    assert len(gemm) and not half.any()
    assert f.severity == "moderate" and f.value == 0.0
    assert "torch.autocast" in f.recommendation
    by_name = (gemm.groupby(gemm["name"].astype(str))["dur_ps"].sum() / 1e9).round(3)
    for kernel, ms in f.evidence["largest_32_bit_matmul_kernels_ms"].items():
        full = next(n for n in by_name.index if n.startswith(kernel))
        assert ms <= by_name[full] + 1e-3  # self time: at most the kernel's own total


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_host_syncs_idle_the_gpu_as_its_events_say(folder: Path) -> None:
    """``host_sync``: after each host call that waits for the GPU inside a step, the GPU's
    time with nothing running until its next event, re-measured here from the events, and
    within HTA's own idle time of the rank (``temporal``, equal to HTA's)."""
    from podscope.analyzers.gpu_views import gpu_view

    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "host_sync")
    assert f.applies
    ev = a.frames.events
    on_gpu = ev["plane"].astype(str).str.startswith("/device:") & ~ev["line"].astype(
        str
    ).str.endswith("annotations")
    gpu = ev[on_gpu]
    names = ev["name"].astype(str)
    syncs = ev[
        ~on_gpu
        & ~ev["plane"].astype(str).str.startswith("/device:")
        & names.str.fullmatch(
            r"aten::_local_scalar_dense|(?:cuda|hip)(?:Stream|Device|Event)Synchronize|(?:cuda|hip)Memcpy"
        )
    ]
    idle = 0
    for row in syncs.itertuples():
        steps = a.aligned[a.aligned["worker"] == row.worker]
        if not ((steps["start_ns"] <= row.start_ns) & (row.start_ns < steps["end_ns"])).any():
            continue
        end = row.start_ns + row.dur_ps // 1000
        mine = gpu[gpu["worker"] == row.worker]
        ends = mine["start_ns"] + mine["dur_ps"] // 1000
        if ((mine["start_ns"] < end) & (ends > end)).any():
            continue  # the GPU still ran something
        later = mine.loc[mine["start_ns"] >= end, "start_ns"]
        if len(later):
            idle += int(later.min()) - end
    total = float((a.aligned["end_ns"] - a.aligned["start_ns"]).sum())
    assert f.value == pytest.approx(idle / total, abs=1e-9)
    hta_idle_ns = float(gpu_view(a.frames, "temporal")["idle_time_us"].sum()) * 1000
    assert idle <= hta_idle_ns
    if f.severity != "none":
        assert folder.name == "a100_nccl_2ranks_r0"  # 8 cudaEventSynchronize a step
        assert f.evidence["calls_by_name"] == {"cudaEventSynchronize": 24}
        assert ".item()" in f.recommendation


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_launch_bound_is_htas_idle_host_wait_and_short_kernels(
    folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``launch_bound`` from HTA's own numbers (``traceinsight``): the worst rank's temporal
    idle share × host wait's share of its streams' idle time, and how many of its kernels ran
    shorter than their launch calls; it fires on the A100 sample alone (78 % idle, 1,347 of
    2,516 kernels shorter than their launch)."""
    import warnings

    from tests.analyzers.test_gpu_views import hta

    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "launch_bound")
    analysis = hta(folder, tmp_path_factory.mktemp("hta"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
        idle, _ = analysis.get_idle_time_breakdown(ranks=analysis.t.get_ranks(), visualize=False)
        launches = analysis.get_cuda_kernel_launch_stats(
            ranks=analysis.t.get_ranks(), visualize=False
        )
    if not any(len(df) for df in launches.values()):
        assert not f.applies and "no kernel launch" in f.reason
        return
    values = {}
    for rank, df in launches.items():
        waits = idle[idle["rank"] == rank].groupby("idle_category")["idle_time"].sum()
        share = float(temporal.loc[rank, "idle_time_pctg"]) / 100
        values[rank] = (
            share * float(waits.get("host_wait", 0.0) / waits.sum()),
            int((df["gpu_duration"] < df["cpu_duration"]).sum()),
            len(df),
        )
    value, short, n = max(values.values())
    assert f.value == pytest.approx(value, abs=1e-3)
    assert f.evidence["kernels_shorter_than_their_launch"] == f"{short} of {n}"
    fires = short / n >= 0.5 and value >= 0.1
    assert (f.severity != "none") == fires == (folder.name == "a100_nccl_2ranks_r0")
    if fires:
        assert "torch.compile" in f.recommendation and "CUDA graph" in f.recommendation


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_blocking_copies_are_the_traces_pageable_host_to_device_copies(folder: Path) -> None:
    """``blocking_copies`` counts the trace's ``Memcpy HtoD (Pageable -> Device)`` events of
    the worst rank (those HTA keeps: whole iterations), and the host's time in their calls."""
    a = analysed(folder)
    f = next(f for f in a.findings if f.rule_id == "blocking_copies")
    assert f.applies and f.severity == "none"  # none of the samples copies much from pageable
    ev = a.frames.events
    rank = ev[ev["worker"] == f.evidence["rank"]]
    pageable = rank[rank["name"].astype(str).str.startswith("Memcpy HtoD (Pageable")]
    assert f.evidence["pageable_copies"] <= len(pageable)
    calls = rank[
        ~rank["plane"].astype(str).str.startswith("/device:")
        & rank["correlation_id"].isin(pageable["correlation_id"])
    ]
    assert f.evidence["host_ms_in_them"] <= calls["dur_ps"].sum() / 1e9 + 1e-3
    assert (f.evidence["pageable_copies"] > 0) == (folder.name == "gpu_sampled_2of128")


def test_a_rank_that_copies_from_pageable_memory_is_told_to_pin_it(tmp_path: Path) -> None:
    import json

    ev: list[dict[str, object]] = []
    for i in range(4):  # 10 ms steps: a 3 ms copy from pageable memory, then a 5 ms kernel
        t0 = 1_000_000 + 10_000 * i
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
             "tid": 1, "ts": t0, "dur": 10_000},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
             "ts": t0 + 100, "dur": 3_000, "args": {"correlation": 10 * i + 1}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": t0 + 150, "dur": 2_900,
             "args": {"device": 0, "stream": 7, "correlation": 10 * i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t0 + 3_200, "dur": 10, "args": {"correlation": 10 * i + 2}},
            {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7,
             "ts": t0 + 3_300, "dur": 5_000,
             "args": {"device": 0, "stream": 7, "correlation": 10 * i + 2}},
        ]  # fmt: skip
    path = tmp_path / "rank-0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    a = SessionAnalysis(load(path, cache=False))
    f = next(f for f in a.findings if f.rule_id == "blocking_copies")
    assert f.severity == "high" and f.evidence["pageable_copies"] == 3  # HTA: before the last step
    assert f.evidence["host_ms_in_them"] == 9.0
    assert "pin_memory=True" in f.recommendation and "non_blocking=True" in f.recommendation
