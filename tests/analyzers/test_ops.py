"""Op statistics: self time rules, GPU kernels and Tensor Cores, XProf cross-check, tiny ops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.memory import memory_summary
from podscope.analyzers.ops import (
    BY,
    OP_STATS_KEYS,
    memory_timeline,
    op_comparison,
    op_stats,
    ops_per_step,
)
from podscope.analyzers.steps import find_steps
from podscope.trace_parsers import load
from podscope.trace_parsers.xplane import parse_xplane
from tests.conftest import Capture, real_xplanes, shared_trace
from tests.xspace_builder import SpaceBuilder


def union_ps(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals."""
    order = np.argsort(start)
    total, cur_s, cur_e = 0, None, None
    for s, e in zip(start[order], end[order], strict=True):
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return int(total + ((cur_e - cur_s) if cur_e is not None else 0))


def assert_self_time_rules(events: pd.DataFrame) -> None:
    assert (events["self_ps"] <= events["dur_ps"]).all() and (events["self_ps"] >= 0).all()
    for _, line in events.groupby(["worker", "plane", "line_id"], observed=True):
        start = (line["start_ns"].to_numpy() - line["start_ns"].min()) * 1000
        end = start + line["dur_ps"].to_numpy()
        # Per line, self times partition the busy time: their sum is the union of all events.
        assert line["self_ps"].sum() == union_ps(start, end)


def gpu_space() -> bytes:
    """Host launches (correlation ids, tf_op) and GPU kernels / memcpy / nccl, modelled on the
    real V100 capture's stat formats."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    t = host.line(1, "tf_gpu_private")
    gpu = b.plane("/device:GPU:0", plane_id=1)
    s = gpu.line(7, "Stream #7")
    kernels = [
        (
            "model/dense/MatMul:MatMul",
            "volta_h1688gemm_128x128_ldg8_nn",
            "regs:128 shm:32768 grid:64,1,1 block:256,1,1",
        ),
        (
            "model/dense_1/MatMul:MatMul",
            "volta_sgemm_128x64_nn",
            "regs:96 shm:16384 grid:32,1,1 block:128,1,1",
        ),
        (
            "model/conv/Conv2D:Conv2D",
            "implicit_convolve_sgemm",
            "regs:64 shm:8192 grid:128,2,1 block:256,1,1",
        ),
        (
            "model/relu:Relu",
            "void Eigen::internal::EigenMetaKernel",
            "regs:16 shm:0 grid:160,1,1 block:1024,1,1",
        ),
        (
            "allreduce:NcclAllReduce",
            "ncclAllReduceRingLLKernel_sum_f32",
            "regs:72 shm:0 grid:2,1,1 block:256,1,1",
        ),
    ]
    for step in range(3):
        t0 = step * 1_000_000_000
        for i, (op, kernel, details) in enumerate(kernels):
            cid = step * 100 + i
            host.event(t, op, t0 + i * 20_000_000, 10_000_000)
            host.event(
                t,
                "cudaLaunchKernel",
                t0 + i * 20_000_000 + 1_000_000,
                5_000_000,
                correlation_id=cid,
            )
            gpu.event(
                s,
                kernel,
                t0 + i * 20_000_000 + 8_000_000,
                30_000_000,
                correlation_id=cid,
                kernel_details=("ref", details),
            )
        gpu.event(
            s,
            "MemcpyHtoD",
            t0 + 200_000_000,
            4_000_000,
            memcpy_details="kind:HtoD size:4096 dest:0 async:1",
        )
    return b.bytes()


def test_gpu_kernel_table_attributes_ops_and_tensor_cores() -> None:
    ev = parse_xplane(gpu_space(), worker="g_1").events
    k = op_stats(ev, by="kernel").set_index("kernel")
    assert k.loc["volta_h1688gemm_128x128_ldg8_nn", "op_type"] == "MatMul"
    assert bool(k.loc["volta_h1688gemm_128x128_ldg8_nn", "tensor_core"]) and bool(
        k.loc["volta_h1688gemm_128x128_ldg8_nn", "tc_eligible"]
    )
    assert (
        not k.loc["volta_sgemm_128x64_nn", "tensor_core"]
        and k.loc["volta_sgemm_128x64_nn", "tc_eligible"]
    )
    assert not k.loc["void Eigen::internal::EigenMetaKernel", "tc_eligible"]
    assert k.loc["ncclAllReduceRingLLKernel_sum_f32", "op_type"] == "NcclAllReduce"
    assert k.loc[
        "implicit_convolve_sgemm", ["regs", "shm", "grid_x", "grid_y", "block_x"]
    ].tolist() == [64, 8192, 128, 2, 256]
    assert k.loc["volta_h1688gemm_128x128_ldg8_nn", "occurrences"] == 3
    assert "MemcpyHtoD" not in k.index  # a copy is not a kernel (XProf's kernel_stats too)


def test_tables_without_matching_events_are_empty_not_errors() -> None:
    """A CPU-only capture has no kernels; keys stay plain strings in every table."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.events(p.line(1, "tf_Compute"), [("dense/MatMul:MatMul", 0, 500), ("relu:Relu", 600, 100)])
    ev = parse_xplane(b.bytes(), worker="c_1").events
    kernels = op_stats(ev, by="kernel")
    assert kernels.empty and {"kernel", "occurrences", "self_ps", "tensor_core"} <= set(
        kernels.columns
    )
    ops = op_stats(ev)
    assert ops["op_type"].tolist() == ["MatMul", "Relu"]
    assert all(str(ops[c].dtype) == "str" for c in ("worker", "device", "op_type", "op_name"))


def test_real_gpu_capture_kernels() -> None:
    f = load(
        shared_trace("xplane", "gpu_tf_multiworker_v100", "34.83.195.179_6003.xplane.pb"),
        cache=False,
    )
    k = op_stats(f.events, by="kernel")
    gpu4 = k[k["device"] == "/device:GPU:4"]
    assert (
        gpu4["op_type"] != "(device)"
    ).mean() > 0.95  # kernels tied to their ops via correlation ids
    assert gpu4["regs"].notna().mean() > 0.8 and gpu4["grid_x"].max() >= 160
    assert_self_time_rules(f.events)
    mem = memory_timeline(f.events, f.stats)
    peak = memory_summary(mem, pd.DataFrame(columns=["worker"])).set_index("allocator")
    assert peak.loc["GPU_4_bfc", "peak_bytes"] > 5 * 2**30


@pytest.mark.parametrize("path", real_xplanes(), ids=lambda p: p.name[:40])
def test_op_tables_read_only_the_stats_they_name(path: Path) -> None:
    """``podscope ops`` parses only ``OP_STATS_KEYS`` of the stats frame: every table is the
    same as from the whole parse, on real GPU, ROCm and TPU captures."""
    full = load(path, cache=False)
    some = load(path, cache=False, stats_keys=OP_STATS_KEYS)
    assert set(some.stats["key"].astype(str)) <= OP_STATS_KEYS
    for by in BY:
        pd.testing.assert_frame_equal(
            op_stats(full.events, by=by, stats=full.stats, hlo_ops=full.hlo_ops),
            op_stats(some.events, by=by, stats=some.stats, hlo_ops=some.hlo_ops),
        )


def tpu_table(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    src = shared_trace("xplane", "tpu_xprof", "tpu_inference_2.xplane.pb")
    run = tmp_path / "plugins" / "profile" / "s"
    run.mkdir(parents=True)
    shutil.copy(src, run / "tpu_1.xplane.pb")
    frames = load(run, cache=False)
    return run / "tpu_1.xplane.pb", op_stats(frames.events, stats=frames.stats)


def test_tpu_ops_come_from_the_xla_ops_line(tmp_path: Path) -> None:
    _, table = tpu_table(tmp_path)
    tpu0 = table[table["device"] == "/device:TPU:0"].set_index("op_name")
    assert tpu0.loc["copy-done.4", "op_type"] == "copy-done"
    assert tpu0.loc["jit(f)/jit(main)/add", "op_type"] == "add"
    assert tpu0.loc["jit(f)/jit(main)/add", "flops"] > 0  # from the HLO ops' metadata
    # device time (device_duration_ps), not the stretched timeline event (299 ms)
    assert tpu0.loc["copy-done.2", "max_ps"] < 250e9
    assert (table["self_ps"] == table["total_ps"]).all()  # XLA ops run one after another
    assert set(table["device"]) == {f"/device:TPU:{i}" for i in range(4)}  # JAX: no host TF ops


def test_tpu_ops_match_xprof_framework_op_stats(tmp_path: Path) -> None:
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")
    path, table = tpu_table(tmp_path)
    data, _ = convert.xspace_to_tool_data(
        [str(path)], "framework_op_stats", {"use_saved_result": False}
    )
    raw = json.loads(data)[0]
    cols = [c["id"] for c in raw["cols"]]
    theirs = pd.DataFrame([[v.get("v") for v in r["c"]] for r in raw["rows"]], columns=cols)
    theirs = theirs[(theirs["type"] != "IDLE") & (theirs["host_or_device"] == "Device")]
    device = table[table["device"].str.startswith("/device:")]
    ours = device.groupby("op_name", as_index=False)[["occurrences", "total_ps", "self_ps"]].sum()
    both = theirs.merge(ours, left_on="operation", right_on="op_name", how="outer", indicator=True)
    assert (both["_merge"] == "both").all(), both[["operation", "op_name", "_merge"]]
    assert len(both) == 15
    for col_x, col_ps in (("total_time", "total_ps"), ("total_self_time", "self_ps")):
        assert ((both[col_x] - both[col_ps] / 1e6).abs() <= 1e-3 + 1e-6 * both[col_x]).all()
    # A framework op split into several HLO ops (three fusions of jit(f)/jit(main)/add) runs
    # as often as its most frequent HLO op, as XProf counts it.
    assert (both["occurrences_x"] == both["occurrences_y"]).all()


def test_self_time_rules_on_constructed_nesting() -> None:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "t")
    ns = 1000  # offsets in ns (ps would be truncated in start_ns)
    p.events(
        line,
        [
            (n, o * ns, d * ns)
            for n, o, d in [
                ("a:A", 0, 100),
                ("b:B", 10, 30),
                ("c:C", 20, 5),
                ("d:D", 50, 80),
                ("e:E", 300, 10),
            ]
        ],
    )
    ev = parse_xplane(b.bytes(), worker="w").events
    assert_self_time_rules(ev)
    ops = op_stats(ev).set_index("op_type")
    assert (ops["self_ps"] <= ops["total_ps"]).all()
    assert ops.loc["A", "self_ps"] == (100 - 30 - 50) * ns  # d is clipped to a's end
    assert (
        ops["self_ps"].sum() == union_ps(np.array([0, 300]), np.array([130, 310])) * ns
    )  # d outlasts a


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize("name", ["loop_capture", "fit_capture"])
def test_matches_xprof_framework_op_stats(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    capture: Capture = request.getfixturevalue(name)
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")
    data, _ = convert.xspace_to_tool_data([str(f) for f in capture.files], "framework_op_stats", {})
    table = json.loads(data)[0]
    cols = [c["id"] for c in table["cols"]]
    theirs = pd.DataFrame([[v.get("v") for v in r["c"]] for r in table["rows"]], columns=cols)
    theirs = theirs[(theirs["type"] != "IDLE") & (theirs["host_or_device"] == "Host")]
    ours = op_stats(load(capture.logdir, cache=False).events)
    ours = ours[ours["device"] == "/host:CPU"]
    both = theirs.merge(
        ours,
        left_on=["type", "operation"],
        right_on=["op_type", "op_name"],
        how="outer",
        indicator=True,
    )
    assert (both["_merge"] == "both").all(), both.loc[
        both["_merge"] != "both", ["type", "operation", "op_type", "op_name"]
    ]
    assert (both["occurrences_x"] == both["occurrences_y"]).all()
    assert (
        (both["total_time"] - both["total_ps"] / 1e6).abs() <= 0.01 * both["total_time"] + 1e-3
    ).all()
    assert (
        (both["total_self_time"] - both["self_ps"] / 1e6).abs()
        <= 0.01 * both["total_self_time"] + 1e-3
    ).all()


@pytest.mark.tf
@pytest.mark.slow
def test_two_hosts_per_host_match_and_comparison(
    loop_capture: Capture, xla_capture: Capture, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(loop_capture.files[0], run / "host_1.xplane.pb")
    shutil.copy(loop_capture.files[0], run / "host_2.xplane.pb")
    table = op_stats(load(run, cache=False).events)
    single = op_stats(load(loop_capture.files[0], cache=False).events)
    for host in ("host_1", "host_2"):
        mine = table[table["worker"] == host].drop(columns="worker").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, single.drop(columns="worker").reset_index(drop=True))
    comp = op_comparison(table)
    assert (comp["spread_ps"] == 0).all() and set(comp.columns) >= {"host_1", "host_2", "ratio"}


@pytest.mark.cluster
@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.long  # two captures of their own (host tracer level 3); make verify runs it
def test_tiny_ops_dominate_and_are_counted_per_step(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    def chief(cap):  # type: ignore[no-untyped-def]
        frames = load(cap.session_dir, cache=False)
        ev = frames.events[frames.events["worker"] == cap.label("worker:0")]
        return ev, find_steps(ev)

    # TF's host tracer records cheap ops only at level 3 (at level 2, whether an op is traced
    # depends on TF's running cost estimate, so counts vary from run to run).
    ev, steps = chief(scenario_capture("mwms-loop", "tiny-ops", host_tracer_level=3, tiny_ops=300))
    base_ev, base_steps = chief(scenario_capture("mwms-loop", "baseline", host_tracer_level=3))
    per_step = ops_per_step(ev, steps)
    # tiny_ops // 2 sin(x) * c pairs per step, and their gradients (cos, mul) in the backward pass.
    assert set(per_step["op_type"].head(3)) == {"Sin", "Cos", "Mul"}, per_step.head()
    tiny = per_step.set_index("op_type")["per_step"]
    assert tiny["Sin"] >= 0.9 * 150 and tiny["Mul"] >= 0.9 * 300
    extra = per_step["per_step"].sum() - ops_per_step(base_ev, base_steps)["per_step"].sum()
    assert extra >= 0.9 * 300
    by_count = op_stats(ev, by="type").sort_values("occurrences", ascending=False)
    assert {"Sin", "Cos", "Mul"} <= set(by_count["op_type"].head(4))  # level 3 also shows _Arg


@pytest.mark.parametrize("seed", range(10))
def test_aggregate_equals_pandas_groupby(seed: int) -> None:
    """The op table's reduction against pandas' groupby on the same columns: sums, extremes,
    shares and linearly interpolated percentiles, including groups of one row, and durations
    that repeat (odd seeds: a handful of distinct values, as a kernel that always takes the
    same time)."""
    from podscope.analyzers.ops import _aggregate

    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 30_000)), int(rng.integers(1, 50))
    gid = np.concatenate([np.arange(groups), rng.integers(0, groups, n)])
    frame = pd.DataFrame(
        {
            "dur_ps": rng.integers(0, 10**12 if seed % 2 == 0 else 5, len(gid)),
            "op_self_ps": rng.integers(0, 10**12, len(gid)),
            "eager": rng.random(len(gid)) < 0.3,
            "flops_f": rng.integers(0, 10**6, len(gid)).astype(np.float64),
            "bytes_f": rng.integers(0, 10**6, len(gid)).astype(np.float64),
        }
    )
    got = _aggregate(frame, gid, groups)
    g = frame.groupby(gid)
    assert got["occurrences"].tolist() == g.size().tolist()
    for col, src, how in [
        ("total_ps", "dur_ps", "sum"),
        ("self_ps", "op_self_ps", "sum"),
        ("min_ps", "dur_ps", "min"),
        ("max_ps", "dur_ps", "max"),
        ("flops", "flops_f", "sum"),
        ("bytes_accessed", "bytes_f", "sum"),
    ]:
        assert got[col].tolist() == g[src].agg(how).tolist(), col
    np.testing.assert_allclose(got["eager_share"], g["eager"].mean(), rtol=1e-12)
    for q, col in ((0.5, "p50_ps"), (0.95, "p95_ps")):
        assert got[col].tolist() == g["dur_ps"].quantile(q).round().astype("int64").tolist()


@pytest.mark.parametrize("pattern", ["sorted", "reversed", "equal", "two", "organ", "saw"])
def test_aggregate_percentiles_of_structured_durations(pattern: str) -> None:
    """The percentile ranks are found by selection, whose pivots ordered or repeated inputs
    can defeat: every such shape, in one big group and in several interleaved groups, gives
    pandas' quantiles."""
    from podscope.analyzers.ops import _aggregate

    n = 50_001
    dur = {
        "sorted": np.arange(n),
        "reversed": np.arange(n)[::-1],
        "equal": np.full(n, 7),
        "two": np.arange(n) % 2,
        "organ": np.r_[np.arange(n // 2), np.arange(n - n // 2)[::-1]],
        "saw": np.arange(n) % 1000,
    }[pattern].astype(np.int64)
    frame = pd.DataFrame(
        {
            "dur_ps": dur,
            "op_self_ps": dur,
            "eager": np.zeros(n, dtype=bool),
            "flops_f": np.zeros(n),
            "bytes_f": np.zeros(n),
        }
    )
    for gid in (np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64) % 3):
        got = _aggregate(frame, gid, int(gid.max()) + 1)
        g = frame.groupby(gid)["dur_ps"]
        for q, col in ((0.5, "p50_ps"), (0.95, "p95_ps")):
            assert got[col].tolist() == g.quantile(q).round().astype("int64").tolist(), col
        assert got["min_ps"].tolist() == g.min().tolist()
        assert got["max_ps"].tolist() == g.max().tolist()


def test_a_peak_reached_several_times_is_the_last_xprof_reads(tmp_path: Path) -> None:
    """Several allocator events at the same highest bytes in use, on two threads: XProf keeps
    the last it reads (line by line), which is neither the first nor the last in time. Its
    fragmentation and time are the peak's, and so are the blocks live then."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    one, two = p.line(1, "tf_Compute/1"), p.line(2, "tf_Compute/2")
    for line, at_ns, frag, addr in (
        (one, 10, 0.1, 4096),
        (one, 100, 0.5, 8192),
        (two, 50, 0.25, 12288),
    ):
        p.event(
            line,
            "MemoryAllocation",
            at_ns * 1000,
            0,
            allocator_name="GPU_0_bfc",
            bytes_allocated=1000,
            bytes_reserved=0,
            bytes_available=500,
            peak_bytes_in_use=1000,
            fragmentation=frag,
            requested_bytes=100,
            allocation_bytes=256,
            addr=addr,
        )
    path = tmp_path / "w.xplane.pb"
    path.write_bytes(b.bytes())
    f = parse_xplane(path.read_bytes(), worker="w")
    peak = memory_summary(memory_timeline(f.events, f.stats), pd.DataFrame(columns=["worker"]))
    row = peak.set_index("allocator").loc["GPU_0_bfc"]
    assert row["peak_bytes"] == 1000 and row["fragmentation_at_peak"] == 0.25
    assert row["peak_t_ns"] == 50 and row["live_at_peak"] == 2  # allocated at 10 and at 50 ns
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")
    data, _ = convert.xspace_to_tool_data(
        [str(path)], "memory_profile", {"use_saved_result": False}
    )
    theirs = json.loads(data)["memoryProfilePerAllocator"]["GPU_0_bfc"]["profileSummary"]
    assert theirs["peakStats"]["fragmentation"] == pytest.approx(0.25)


@pytest.mark.parametrize("by", ["op", "type", "kernel"])
@pytest.mark.parametrize("path", real_xplanes() or [None])
def test_op_tables_state_one_unit_never_an_average_above_the_maximum(path: object, by: str) -> None:
    """Average, extremes and percentiles are over one unit (an op's executions, whose
    kernels add up): on the ROCm samples the average of jit(matmul)/dot_general was 157.5 µs
    beside a 142.4 µs maximum when extremes were taken per kernel."""
    if path is None:
        pytest.skip("../shared/traces/xplane absent")
    f = load(path, cache=False)
    t = op_stats(f.events, by=by, stats=f.stats, hlo_ops=f.hlo_ops)
    assert len(t) or by == "kernel"
    for lo, hi in (
        ("min_ps", "avg_ps"),
        ("avg_ps", "max_ps"),
        ("min_ps", "p50_ps"),
        ("p50_ps", "p95_ps"),
        ("p95_ps", "max_ps"),
    ):
        bad = t[t[lo] > t[hi] + 1]  # + 1 ps: the average is rounded
        assert bad.empty, (lo, hi, bad[["op_name", lo, hi]].head())
    assert (t["occurrences"] * t["avg_ps"] - t["total_ps"]).abs().le(t["occurrences"]).all()


def test_a_pods_ops_are_each_op_once_with_its_spread_across_workers() -> None:
    """512 hosts made 51,712 rows (a row per host and op) whose names looked alike: across
    the workers, each op is one row with its sums, its median and slowest worker."""
    from podscope.analyzers.ops import ACROSS_COLUMNS, across_workers

    rows = [
        {"worker": w, "device": "/host:CPU", "op_type": t, "op_name": n, "occurrences": 10}
        | {"total_ps": ps, "self_ps": ps, "self_per_step_ps": ps / 10}
        for w, t, n, ps in [
            ("h0", "MatMul", "dense/MatMul", 100),
            ("h1", "MatMul", "dense/MatMul", 100),
            ("h2", "MatMul", "dense/MatMul", 300),  # the slow host
            ("h0", "AllReduce", "allreduce", 500),
            ("h1", "AllReduce", "allreduce", 500),
        ]
    ]
    across = across_workers(pd.DataFrame(rows))
    assert list(across.columns) == ACROSS_COLUMNS
    out = across.set_index("op_name")
    assert list(out.index) == ["allreduce", "dense/MatMul"]  # most self time first
    mm = out.loc["dense/MatMul"]
    assert (mm["workers"], mm["occurrences"], mm["self_ps"]) == (3, 30, 500)
    assert mm["median_worker_ps"] == 100 and mm["max_worker_ps"] == 300 and mm["spread"] == 3
    assert mm["slowest_worker"] == "h2" and mm["self_per_worker_ps"] == pytest.approx(500 / 3)
    assert mm["avg_ps"] == pytest.approx(500 / 30)
    assert out["self_share"].sum() == pytest.approx(1.0)
    assert across_workers(pd.DataFrame(rows).head(0)).empty
