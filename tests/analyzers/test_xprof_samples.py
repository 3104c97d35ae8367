"""Every public GPU / ROCm / TPU capture in ``../shared/traces/xplane`` against XProf's own
tools on the same file: framework_op_stats (device and host rows), kernel_stats,
pod_viewer steps and memory_profile. Skipped with a reason when the folder or XProf is absent.

Differences on purpose, stated where they are checked:

* device work that belongs to no op (ROCm copy kernels without stats) is one ``(device)``
  row per device; XProf leaves it out of framework_op_stats;
* an XLA instruction without a framework op is typed by its opcode (``copy``), XProf says
  ``Unknown``;
* XProf counts the allocator's zero-length ``MemoryAllocation`` / ``MemoryDeallocation``
  events that carry an op's ``tf_op`` as more occurrences of that op; we count executions;
* one breakdown row per GPU (each timed by its own span of the step); XProf merges them into
  one row, which is the busiest GPU's when the GPUs ran the step at different times.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.breakdown import CATEGORIES, step_breakdown
from podscope.analyzers.memory import memory_summary
from podscope.analyzers.ops import memory_timeline, op_stats
from podscope.analyzers.steps import align_steps, find_steps
from podscope.trace_parsers import load
from podscope.trace_parsers.schema import TraceFrames
from tests.conftest import real_xplanes

pytestmark = pytest.mark.slow
SAMPLES = real_xplanes()
if not SAMPLES:
    SAMPLES = [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces/xplane absent"))]
XPROF_CATEGORY = {
    "1": "device_compute",
    "2": "device_to_device",
    "3": "device_collectives",
    "4": "host_compute",
    "5": "kernel_launch",
    "6": "input",
    "7": "output",
    "8": "compilation",
    "9": "all_others",
}


def xprof(path: Path, tool: str) -> Any:
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")
    data, _ = convert.xspace_to_tool_data([str(path)], tool, {"use_saved_result": False})
    return json.loads(data)


def table(raw: Any) -> pd.DataFrame:
    """A Google-charts DataTable (XProf's table tools) as a frame."""
    t = raw[0] if isinstance(raw, list) else raw
    cols = [c["id"] for c in t["cols"]]
    return pd.DataFrame([[v.get("v") for v in r["c"]] for r in t["rows"]], columns=cols)


_FRAMES: dict[Path, TraceFrames] = {}


def frames_of(path: Path, tmp_path_factory: pytest.TempPathFactory) -> TraceFrames:
    if path not in _FRAMES:
        run = tmp_path_factory.mktemp("run")
        shutil.copy(path, run / "w.xplane.pb")
        _FRAMES[path] = load(run, cache=False)
    return _FRAMES[path]


def ids(p: Any) -> str:
    return p.name.split(".xplane")[0][-28:] if isinstance(p, Path) else "absent"


@pytest.mark.parametrize("path", SAMPLES, ids=ids)
def test_device_ops_equal_framework_op_stats(
    path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    theirs = table(xprof(path, "framework_op_stats"))
    theirs = theirs[(theirs["type"] != "IDLE") & (theirs["host_or_device"] == "Device")]
    f = frames_of(path, tmp_path_factory)
    ops = op_stats(f.events, stats=f.stats, hlo_ops=f.hlo_ops)
    device = ops[ops["device"].str.startswith("/device:")]
    no_op = device["op_name"] == ""  # device work of no op: ours only (stated above)
    ours = (
        device[~no_op]
        .groupby("op_name", as_index=False)
        .agg(occ=("occurrences", "sum"), self_ps=("self_ps", "sum"), op_type=("op_type", "first"))
    )
    if theirs.empty:
        # The 2020 TF capture: its kernels carry no tf_op stat, so XProf has no device op;
        # ours ties them to the launching op through correlation ids.
        assert "gpu_tf_multiworker" in str(path)
        assert device.loc[~no_op, "self_ps"].sum() > 0.95 * device["self_ps"].sum()
        return
    both = theirs.merge(ours, left_on="operation", right_on="op_name", how="outer", indicator=True)
    assert (both["_merge"] == "both").all(), both.loc[
        both["_merge"] != "both", ["operation", "op_name"]
    ]
    assert (both["occurrences"] == both["occ"]).all(), both[["operation", "occurrences", "occ"]]
    self_us = both["self_ps"] / 1e6
    assert (
        (self_us - both["total_self_time"]).abs() <= 0.01 * both["total_self_time"] + 1e-3
    ).all()
    typed = both["type"] != "Unknown"  # ours: the HLO opcode where XProf says Unknown
    assert (both.loc[typed, "type"] == both.loc[typed, "op_type"]).all()


@pytest.mark.parametrize("path", SAMPLES, ids=ids)
def test_host_ops_equal_framework_op_stats(
    path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    theirs = table(xprof(path, "framework_op_stats"))
    theirs = theirs[(theirs["host_or_device"] == "Host") & (theirs["total_self_time"] > 0)]
    theirs = theirs[theirs["type"] != "IDLE"]
    f = frames_of(path, tmp_path_factory)
    ops = op_stats(f.events, stats=f.stats, hlo_ops=f.hlo_ops)
    host = ops[~ops["device"].str.startswith("/device:")]
    both = theirs.merge(host, left_on="operation", right_on="op_name", how="left")
    assert both["op_name"].notna().all(), both.loc[both["op_name"].isna(), "operation"]
    self_us = both["self_ps"] / 1e6
    assert (
        (self_us - both["total_self_time"]).abs() <= 0.01 * both["total_self_time"] + 1e-3
    ).all()
    # XProf also counts the zero-length allocator events that name the op (stated above).
    ev = f.events
    alloc = ev[ev["name"].isin(["MemoryAllocation", "MemoryDeallocation"]) & ev["tf_op"].notna()]
    extra = alloc.groupby(alloc["tf_op"].astype(str)).size()
    expected = both["occurrences_y"] + both["op_name"].map(extra).fillna(0).astype(int)
    assert (both["occurrences_x"] == expected).all(), both.loc[
        both["occurrences_x"] != expected, ["operation", "occurrences_x", "occurrences_y"]
    ]


@pytest.mark.parametrize("path", SAMPLES, ids=ids)
def test_kernels_equal_kernel_stats(path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    theirs = table(xprof(path, "kernel_stats"))
    f = frames_of(path, tmp_path_factory)
    ours = op_stats(f.events, by="kernel", stats=f.stats, hlo_ops=f.hlo_ops)
    if theirs.empty:
        assert "tpu" in str(path) and ours.empty  # a TPU runs no kernels
        return
    mine = ours.groupby("kernel").agg(n=("occurrences", "sum"), total_ps=("total_ps", "sum"))
    per = theirs.groupby("kernel_name").agg(
        occ=("occurrences", "sum"), total_us=("total_duration_us", "sum")
    )
    both = per.join(mine, how="left")
    assert both["n"].notna().all(), both.index[both["n"].isna()].tolist()[:5]
    assert (both["occ"] == both["n"]).all()
    assert np.allclose(both["total_ps"] / 1e6, both["total_us"], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("path", SAMPLES, ids=ids)
def test_steps_equal_pod_viewer(path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    pod = xprof(path, "pod_viewer")["podStatsSequence"].get("podStatsMap", [])
    f = frames_of(path, tmp_path_factory)
    aligned, _ = align_steps(find_steps(f.events))
    assert len(aligned) == len(pod)
    if not pod:  # JAX and TPU samples: no step marker, no grouped step; neither finds steps
        return
    b = step_breakdown(f.events, aligned, f.stats)
    # One row per GPU that ran the step, none for an idle GPU.
    devices = set(b["device"])
    busy = set(f.events.loc[f.events["group_id"].notna(), "plane"].astype(str))
    assert devices == {d for d in busy if d.startswith("/device:")}
    for step in pod:
        (core,) = step["podStatsPerCore"].values()
        mine = b[b["step"] == step["stepNum"]]
        busiest = mine.loc[mine["step_time_ns"].idxmax()]
        total = core["totalDurationUs"]
        assert abs(busiest["step_time_ns"] / 1e3 - total) <= 0.02 * total
        for key, cat in XPROF_CATEGORY.items():
            assert abs(float(busiest[f"{cat}_ns"]) / 1e3 - core["stepBreakdownUs"][key]) <= (
                0.02 * total
            ), cat
        parts = mine[[f"{c}_ns" for c in CATEGORIES]].sum(axis=1)
        assert (parts == mine["step_time_ns"]).all()  # each GPU's row partitions its step


@pytest.mark.parametrize("path", SAMPLES, ids=ids)
def test_memory_peaks_and_fragmentation_equal_memory_profile(
    path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    f = frames_of(path, tmp_path_factory)
    timeline = memory_timeline(f.events, f.stats)
    peaks = memory_summary(timeline, pd.DataFrame(columns=["worker"])).set_index("allocator")
    if peaks.empty:
        pytest.skip("no allocator events in this capture")
    theirs = xprof(path, "memory_profile")["memoryProfilePerAllocator"]
    assert set(theirs) == set(peaks.index)
    for allocator, profile in theirs.items():
        stats = profile["profileSummary"]["peakStats"]
        assert peaks.loc[allocator, "peak_bytes"] == int(stats["peakBytesInUse"]), allocator
        if "fragmentation" in stats:  # absent when 0 (proto3 JSON leaves defaults out)
            assert peaks.loc[allocator, "fragmentation_at_peak"] == pytest.approx(
                stats["fragmentation"], abs=1e-6
            ), allocator
        else:
            assert peaks.loc[allocator, "fragmentation_at_peak"] in (0.0, None) or pd.isna(
                peaks.loc[allocator, "fragmentation_at_peak"]
            ), allocator
