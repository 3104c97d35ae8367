"""Step finding, alignment and the priority breakdown on constructed traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.attribution import straggler_verdict
from podscope.analyzers.breakdown import CATEGORY_COLUMNS, step_breakdown
from podscope.analyzers.pod import pod_view
from podscope.analyzers.steps import align_steps, find_steps, step_methods
from podscope.trace_parsers.loader import merge
from podscope.trace_parsers.xplane import parse_xplane
from tests.xspace_builder import SpaceBuilder

US = 1_000_000  # ps per µs


def worker_trace(
    label: str,
    steps: int,
    *,
    offset_us: int = 0,
    input_us: int = 0,
    python_only: bool = False,
    gpu: bool = False,
    step_us: int = 1000,
) -> bytes:
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line(1, "python")
    ops = host.line(2, "tf_Compute")
    gpu_plane = b.plane("/device:GPU:0", plane_id=1) if gpu else None
    stream = gpu_plane.line(7, "Stream #7") if gpu_plane else None
    for i in range(steps):
        t0 = (offset_us + i * step_us) * US
        if python_only:
            host.event(py, "$polymorphic_function.py:805 __call__", t0, (step_us - 100) * US)
            continue
        host.event(py, "train", t0, (step_us - 100) * US, step_num=i, _r=1)
        if input_us:
            host.event(ops, "IteratorGetNextOp::DoCompute", t0 + 10 * US, input_us * US)
        host.event(ops, "dense/MatMul:MatMul", t0 + (20 + input_us) * US, 300 * US)
        # A collective overlapping the MatMul: collectives outrank host compute.
        host.event(
            ops,
            "allreduce/CollectiveReduceV2:CollectiveReduceV2",
            t0 + (200 + input_us) * US,
            200 * US,
        )
        if stream is not None and gpu_plane is not None:
            gpu_plane.event(stream, "volta_h884gemm_64x64", t0 + 50 * US, 100 * US)
            gpu_plane.event(
                stream, "MemcpyHtoD", t0 + 160 * US, 20 * US, memcpy_details="kind:HtoD size:64"
            )
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def frames_of(*workers: tuple[str, bytes]) -> pd.DataFrame:
    return merge([parse_xplane(data, worker=label) for label, data in workers]).events


def test_breakdown_partitions_step_by_priority() -> None:
    ev = frames_of(("w_1", worker_trace("w_1", 3, input_us=100)))
    aligned, missing = align_steps(find_steps(ev))
    b = step_breakdown(ev, aligned)
    assert missing.empty and list(b["step"]) == [0, 1, 2]
    row = b.iloc[0]
    assert row["step_time_ns"] == 900_000
    assert sum(int(row[c]) for c in CATEGORY_COLUMNS) == row["step_time_ns"]
    assert row["input_ns"] == 100_000
    assert row["device_collectives_ns"] == 200_000
    assert row["host_compute_ns"] == 300_000 - 120_000  # MatMul minus the collective's overlap
    assert row["all_others_ns"] == 900_000 - 100_000 - 200_000 - 180_000


def test_grouped_event_counts_only_in_its_own_step() -> None:
    """A step's callback that runs on into the next step (linked to its step by a
    producer/consumer context) is not the next step's host compute, as in XProf."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, pool = host.line(1, "python"), host.line(2, "tf_Compute")
    for i in range(2):
        t0 = i * 1000 * US
        host.event(py, "train", t0, 900 * US, step_num=i, _r=1)
        host.event(py, "TFE_Py_ExecuteCancelable", t0 + 100 * US, 100 * US, _pt=1, _p=10 + i)
    # step 0's callback, linked to step 0's launch, runs from 700 µs to 1,300 µs
    host.event(pool, "ExecutorDoneCallback", 700 * US, 600 * US, _ct=1, _c=10)
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    frames = parse_xplane(b.bytes(), worker="w_1")
    steps = align_steps(find_steps(frames.events))[0]
    out = step_breakdown(frames.events, steps, frames.stats).set_index("step")
    assert out.loc[0, "host_compute_ns"] == (100 + 200) * 1000  # launch + callback up to 900
    assert out.loc[1, "host_compute_ns"] == 100 * 1000  # only step 1's own launch


def test_context_ids_link_events_within_one_worker_only() -> None:
    """Workers reuse context ids (a collective's instance key is the same on every
    participant): a link across workers put one worker's collective in another worker's step,
    and its own step then counted that time as host compute (slow-allreduce, make verify)."""

    def worker(late_us: int) -> bytes:
        b = SpaceBuilder()
        host = b.plane("/host:CPU")
        py, pool = host.line(1, "python"), host.line(2, "collective_ops/7")
        for i in range(2):
            t0 = (i * 1000 + late_us) * US
            host.event(py, "train", t0, 900 * US, step_num=i, _r=1)
            host.event(py, "TFE_Py_ExecuteCancelable", t0 + 10 * US, 800 * US, _pt=1, _p=10 + i)
            host.event(
                pool,
                "allreduce/CollectiveReduceV2:CollectiveReduceV2",
                t0 + 100 * US,
                700 * US,
                _ct=1,
                _c=10 + i,
            )
        b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
        return b.bytes()

    f = merge([parse_xplane(worker(late), worker=w) for w, late in (("w_1", 0), ("w_2", 300))])
    out = step_breakdown(f.events, align_steps(find_steps(f.events))[0], f.stats)
    assert (out["device_collectives_ns"] == 700 * 1000).all(), out
    assert (out["host_compute_ns"] == 100 * 1000).all(), out


def test_gpu_rows_per_device_with_16_bit_compute_and_h2d() -> None:
    ev = frames_of(("w_1", worker_trace("w_1", 2, gpu=True)))
    b = step_breakdown(ev, align_steps(find_steps(ev))[0])
    assert set(b["device"]) == {"/device:GPU:0"}
    row = b.iloc[0]
    assert row["device_compute_ns"] == row["device_compute_16_ns"] == 100_000
    assert row["input_ns"] == 20_000  # HtoD copy


def test_python_only_worker_has_step_times_not_zero_categories() -> None:
    ev = frames_of(
        ("w_1", worker_trace("w_1", 4)), ("w_2", worker_trace("w_2", 4, python_only=True))
    )
    found = find_steps(ev)
    methods = step_methods(ev, found).set_index("worker")["method"].to_dict()
    assert methods == {"w_1": "marker", "w_2": "python_call"}
    aligned, _ = align_steps(found)
    b = step_breakdown(ev, aligned)
    py = b[b["worker"] == "w_2"]
    assert len(py) == 4 and not py["split"].any() and py["input_ns"].isna().all()
    assert (py["step_time_ns"] > 0).all()
    assert sorted(py["step_num"].astype(int)) == [0, 1, 2, 3]  # numbered from the chief's markers


def test_steps_missing_on_a_worker_are_reported() -> None:
    ev = frames_of(("w_1", worker_trace("w_1", 5)), ("w_2", worker_trace("w_2", 3)))
    aligned, missing = align_steps(find_steps(ev))
    assert sorted(aligned["step"].unique()) == [0, 1, 2]
    assert missing.values.tolist() == [["w_2", 3], ["w_2", 4]]


def test_no_steps_found_explains_why() -> None:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.event(p.line(1, "t"), "dense/MatMul:MatMul", 0, 100)
    ev = parse_xplane(b.bytes(), worker="w").events
    found = find_steps(ev)
    assert found.empty
    note = step_methods(ev, found).iloc[0]
    # why, in the note; what to do depends on what wrote the trace (the Pod Viewer's hint)
    assert note["method"] == "none" and "no step marker" in note["note"]
    from podscope.app.pages._common import NO_STEPS_HINT

    assert "step_num=step" in NO_STEPS_HINT["tensorflow"]
    assert "StepTraceAnnotation" in NO_STEPS_HINT["jax"] and "TFLite" in NO_STEPS_HINT["android"]


def test_function_steps_survive_a_call_cut_by_the_capture_start() -> None:
    """The first call began before the capture: its parents are gone, so it sits at another
    depth than its siblings — every call is still a step (a real no-step-markers capture)."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    fn = "EagerLocalExecute: __inference_train_step_620"
    p.event(line, fn, 0, 800 * US)
    for i in range(1, 4):
        t0 = i * 1000 * US
        p.event(line, "train_step", t0, 900 * US)
        p.event(line, fn, t0 + 10 * US, 800 * US)
    ev = parse_xplane(b.bytes(), worker="w").events
    assert sorted(ev.loc[ev["name"] == fn, "depth"]) == [0, 1, 1, 1]
    found = find_steps(ev)
    assert list(found["method"].unique()) == ["function"] and len(found) == 4


@pytest.mark.parametrize(("late_worker", "expect"), [(None, None), ("w_3", "w_3")])
def test_synchronous_straggler_is_the_last_to_arrive(
    late_worker: str | None, expect: str | None
) -> None:
    traces = []
    for w in ("w_1", "w_2", "w_3"):
        late = 400 if w == late_worker else 0
        # Everyone ends together (synchronous all-reduce); the late one starts later.
        b = SpaceBuilder()
        host = b.plane("/host:CPU")
        py = host.line(1, "python")
        for i in range(6):
            t0 = i * 2000
            host.event(py, "train", (t0 + late) * US, (1500 - late) * US, step_num=i)
        traces.append((w, b.bytes()))
    ev = frames_of(*traces)
    pod = pod_view(step_breakdown(ev, align_steps(find_steps(ev))[0]))
    s = straggler_verdict(pod)
    named = s.loc[s["straggler"], "worker"].tolist()
    assert named == ([expect] if expect else [])
    assert s["mode"].iloc[0] == "synchronous"
    if expect:
        assert s.iloc[0]["score"] > 5 * max(s.iloc[1]["score"], 1e-9)


def test_breakdown_scales_to_eight_workers_thousand_steps() -> None:
    """Correctness at size (the speed target lives in make bench)."""
    ev = frames_of(*[(f"w_{i}", worker_trace(f"w_{i}", 1000, input_us=50)) for i in range(8)])
    b = step_breakdown(ev, align_steps(find_steps(ev), drop_partial=False)[0])
    assert len(b) == 8000
    assert np.array_equal(
        b[CATEGORY_COLUMNS].astype("int64").sum(axis=1).to_numpy(), b["step_time_ns"].to_numpy()
    )


def _sweep_by_instant(start, end, prio, step_start, step_end):  # type: ignore[no-untyped-def]
    """The breakdown's definition, one nanosecond at a time: the top type active at each."""
    from podscope.analyzers.breakdown import PRIORITY

    out = np.zeros((len(step_start), len(PRIORITY)), dtype=np.int64)
    for k, (lo, hi) in enumerate(zip(step_start, step_end, strict=True)):
        for t in range(int(lo), int(hi)):
            active = prio[(start <= t) & (t < end)]
            out[k, active.max() if len(active) else 0] += 1
    return out


@pytest.mark.parametrize("seed", range(40))
def test_sweep_gives_each_instant_to_the_top_active_type(seed: int) -> None:
    """The C sweep against the per-instant definition: random events (zero-length, nested,
    tied bounds, outside every step) and non-overlapping steps with gaps between them."""
    from podscope.analyzers.breakdown import _sweep

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 60)), int(rng.integers(1, 6))
    start = rng.integers(1_000, 1_200, n).astype(np.int64)
    end = start + rng.integers(0, 40, n)
    prio = rng.integers(0, 18, n).astype(np.int8)
    bounds = np.sort(rng.choice(np.arange(980, 1_260), 2 * m, replace=False)).astype(np.int64)
    step_start, step_end = bounds[0::2], bounds[1::2]
    want = _sweep_by_instant(start, end, prio, step_start, step_end)
    epoch = 1_700_000_000_000_000_000  # epoch ns, as captures have them
    got = _sweep(start + epoch, end + epoch, prio, step_start + epoch, step_end + epoch)
    np.testing.assert_array_equal(got, want)
