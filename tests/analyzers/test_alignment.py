"""Steps aligned by time, never by order: workers traced with the Python tracer (no step
numbers) are matched to the marker worker's steps through the all-reduce each step contains,
so where the capture window starts on a worker never changes who the culprit is."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.session import SessionAnalysis
from podscope.analyzers.steps import align_steps, match_by_time, own_steps
from podscope.trace_parsers.loader import merge
from podscope.trace_parsers.xplane import parse_xplane
from tests.xspace_builder import SpaceBuilder

US = 1_000_000  # ps per µs
PERIOD_US = 10_000
CALL = "$polymorphic_function.py:805 __call__"


def chief(steps: int, *, cut_us: int = 0) -> bytes:
    """A host-traced chief: a ``train`` marker per step, its own work, then the all-reduce in
    which it waits for the straggler (it arrives at 5 ms, everyone completes at 8.5 ms)."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    line = host.line(2, "tf_Compute")
    for i in range(steps):
        t0 = i * PERIOD_US
        if t0 + PERIOD_US <= cut_us:
            continue
        host.event(line, "train", t0 * US, (PERIOD_US - 300) * US, step_num=100 + i, _r=1)
        host.event(line, "dense/MatMul:MatMul", t0 * US, 5000 * US)
        host.event(
            line, "allreduce/CollectiveReduceV2:CollectiveReduceV2", (t0 + 5000) * US, 3500 * US
        )
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def python_worker(steps: int, *, start_us: int, end_lag_us: list[int], cut_us: int = 0) -> bytes:
    """A worker traced with the Python tracer only: one ``__call__`` per step, from
    ``start_us`` into the period to the all-reduce's completion plus that step's lag (its
    post-step work, stretched by CPU contention). A window cut at ``cut_us`` records a call in
    progress from the cut, as the Python tracer does."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    line = host.line(1, "python")
    for i in range(steps):
        t0 = i * PERIOD_US
        start, end = t0 + start_us, t0 + 8500 + end_lag_us[i]
        if end <= cut_us:
            continue
        start = max(start, cut_us)
        host.event(line, CALL, start * US, (end - start) * US)
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def session(cuts: dict[str, int], lags: list[int], steps: int = 12) -> SessionAnalysis:
    """w_0 the chief; w_1 a victim (on time); w_2 the straggler, entering its step 7 ms late
    with a short step whose end lags the chief's by ``lags``."""
    workers = [
        ("w_0", chief(steps, cut_us=cuts.get("w_0", 0))),
        (
            "w_1",
            python_worker(steps, start_us=150, end_lag_us=[200] * steps, cut_us=cuts.get("w_1", 0)),
        ),
        ("w_2", python_worker(steps, start_us=7000, end_lag_us=lags, cut_us=cuts.get("w_2", 0))),
    ]
    return SessionAnalysis(merge([parse_xplane(data, worker=w) for w, data in workers]))


def culprits(a: SessionAnalysis) -> list[str]:
    return a.roles.loc[a.roles["role"] == "culprit", "worker"].tolist()


def test_a_straggler_whose_step_ends_late_is_matched_to_its_own_step() -> None:
    # its call ends 4.5 ms after the all-reduce: its middle (9.75 ms) lies past the chief's
    # step (9.7 ms), yet it overlaps only its own step's all-reduce
    a = session({}, lags=[4500] * 12)
    aligned = a.aligned  # 12 steps; the first and last left out as partial (XProf's rule)
    assert aligned.groupby("worker").size().to_dict() == {"w_0": 10, "w_1": 10, "w_2": 10}
    mine = aligned[aligned["worker"] == "w_2"].sort_values("step")
    chief_steps = aligned[aligned["worker"] == "w_0"].sort_values("step")
    # step k of the straggler starts 7 ms into the chief's step k, not 7 ms before its end
    assert np.array_equal(
        mine["start_ns"].to_numpy() - chief_steps["start_ns"].to_numpy(), [7_000_000] * 10
    )
    assert culprits(a) == ["w_2"]


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=pytest.mark.long if s >= 2 else ()) for s in range(6)]
)
def test_shifting_a_workers_window_never_changes_the_culprit(seed: int) -> None:
    rng = random.Random(seed)
    lags = [rng.randint(0, 6000) for _ in range(12)]
    assert culprits(session({}, lags)) == ["w_2"]
    for worker in ("w_0", "w_1", "w_2"):
        for part in (0.25, 0.5, 0.75, 1.3, 2.6):
            a = session({worker: int(part * PERIOD_US)}, lags)
            assert culprits(a) == ["w_2"], (worker, part, a.roles)
            # at most the steps the window cut are left out, and the partial first and last
            assert len(a.aligned) >= 3 * 7


def test_an_unprovable_match_is_left_out_not_guessed() -> None:
    ref = pd.DataFrame(
        {
            "start_ns": [0, 100, 200],
            "end_ns": [90, 190, 290],
            "anchor_start_ns": pd.array([40, 140, 240], dtype="Int64"),
            "anchor_end_ns": pd.array([80, 180, 280], dtype="Int64"),
        }
    )
    steps = pd.DataFrame(
        {
            # one step, two claiming the same reference step, one claiming none
            "start_ns": [50, 230, 250, 300],
            "end_ns": [95, 260, 262, 310],
        }
    )
    assert match_by_time(steps, ref).tolist() == [0, -1, -1, -1]
    # touching two anchors: the reference step it spans wins only with a 2× margin
    clear = pd.DataFrame({"start_ns": [75], "end_ns": [170]})  # 15 vs 70 ns of overlap
    unclear = pd.DataFrame({"start_ns": [60], "end_ns": [150]})  # 30 vs 50 ns
    assert match_by_time(clear, ref).tolist() == [1]
    assert match_by_time(unclear, ref).tolist() == [-1]


def test_workers_without_step_numbers_are_matched_by_time_not_by_count() -> None:
    """No worker has numbers: the reference is the worker with the most steps; one that
    starts its trace a step later still pairs each step with the one it ran beside."""
    rows = []
    for w, first in (("a", 0), ("b", 1)):
        for i in range(first, 6):
            rows.append((w, pd.NA, i * 100, i * 100 + 90))
    steps = pd.DataFrame(rows, columns=["worker", "step_num", "start_ns", "end_ns"])
    steps["step_num"] = steps["step_num"].astype("Int64")
    aligned, missing = align_steps(steps)
    pairs = aligned.pivot(index="step", columns="worker", values="start_ns")
    assert (pairs["a"] == pairs["b"]).all() and len(pairs) == 5
    assert missing.to_dict("records") == [{"worker": "b", "step_num": 0}]


def test_a_worker_half_a_step_out_of_phase_is_paired_through_its_proven_neighbours() -> None:
    """Steps of 16 ns whose collective (anchor) sits at 5–11 ns; the other worker runs half a
    step later, so every other one of its steps touches two anchors without a clear margin.
    Its proven neighbours, both at offset 0, pair the ones between them; nothing outside."""
    ref = pd.DataFrame(
        {
            "start_ns": [16 * k for k in range(6)],
            "end_ns": [16 * k + 11 for k in range(6)],
            "anchor_start_ns": pd.array([16 * k + 5 for k in range(6)], dtype="Int64"),
            "anchor_end_ns": pd.array([16 * k + 11 for k in range(6)], dtype="Int64"),
        }
    )
    # proven (one anchor) at 0, 2, 4; at 1 and 3 the step reaches into the next anchor
    starts = [2, 18, 34, 50, 66]
    ends = [12, 37, 44, 69, 76]
    steps = pd.DataFrame({"start_ns": starts, "end_ns": ends})
    assert match_by_time(steps, ref).tolist() == [0, 1, 2, 3, 4]
    alone = pd.DataFrame({"start_ns": [18, 34], "end_ns": [37, 44]})  # no proven neighbour
    assert match_by_time(alone, ref).tolist() == [-1, 2]


@pytest.mark.parametrize("seed", range(8))
def test_own_steps_number_each_worker_as_its_alignment_alone_does(seed: int) -> None:
    """``own_steps`` numbers every worker at once as ``align_steps`` numbers each alone:
    numbered workers (with repeated numbers), unnumbered ones, and both kinds of steps in one
    worker; rows in any order, workers interleaved."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(int(rng.integers(1, 7))):
        n = int(rng.integers(1, 30))
        start = rng.choice(10**6, size=n, replace=False).astype(np.int64) * 1000
        kind = rng.integers(0, 3)  # numbered, unnumbered, some numbered
        nums: list[object] = list(rng.integers(0, max(2, n - 3), size=n))  # repeats
        if kind == 1:
            nums = [pd.NA] * n
        elif kind == 2:
            nums = [x if rng.random() < 0.5 else pd.NA for x in nums]
        for s, k in zip(start, nums, strict=True):
            rows.append((f"w{w}", k, s, s + 500, "marker", int(rng.integers(0, 10**6))))
    steps = pd.DataFrame(
        rows, columns=["worker", "step_num", "start_ns", "end_ns", "method", "event_row"]
    ).sample(frac=1, random_state=seed)
    steps["step_num"] = steps["step_num"].astype("Int64")
    steps["worker"] = steps["worker"].astype("category")
    expected = pd.concat(
        [
            align_steps(s, drop_partial=False)[0]
            for _, s in steps.groupby("worker", sort=False, observed=True)
        ],
        ignore_index=True,
    )
    pd.testing.assert_frame_equal(own_steps(steps), expected)


def _marked_worker(kind: str) -> bytes:
    """A worker whose steps come from its markers one way or another (``kind``), with
    collectives and step-function calls inside its steps."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    line = host.line(2, "tf_Compute")
    names = {"train": ["train", "eval"], "tie": ["b", "a"], "python": [], "xla": ["train"]}.get(
        kind, ["train"]
    )
    for i in range(6):
        t0 = (i * PERIOD_US + (300 if kind == "tie" else 0)) * US
        for j, name in enumerate(names):  # "train" wins; else the first of the most frequent
            host.event(line, name, t0 + j * 4000 * US, 3000 * US, step_num=i)
            host.event(line, "inner", t0 + j * 4000 * US + US, 10 * US, step_num=50 + i)
        if kind == "python":
            host.event(line, CALL, t0, 3000 * US)
        if kind == "alone":  # neither a collective nor a call: none is another worker's
            continue
        host.event(line, "train_function", t0 + 100 * US, 500 * US, tf_function_call=1)
        host.event(
            line, "allreduce/CollectiveReduceV2:CollectiveReduceV2", t0 + 2000 * US, 900 * US
        )
    if kind == "xla":
        xla = host.line(3, "XLA Modules")
        for i in range(6):  # an XLA line: this worker's steps are looked at alone
            host.event(xla, "jit_step(1)", (i * PERIOD_US + 200) * US, 2000 * US)
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def test_steps_of_workers_side_by_side_equal_each_workers_own() -> None:
    """The marker workers of a batch are found at once, the others one by one: the steps,
    their collectives and their calls equal each worker's found alone."""
    kinds = ["train", "tie", "alone", "python", "xla", "train"]
    each = [parse_xplane(_marked_worker(k), worker=f"w{i}_{k}") for i, k in enumerate(kinds)]
    alone = []
    offset = 0
    for f in each:
        st = SessionAnalysis(f).steps
        alone.append(st.assign(event_row=st["event_row"] + offset))
        offset += len(f.events)
    together = SessionAnalysis(merge(each)).steps
    expected = pd.concat(alone, ignore_index=True)
    pd.testing.assert_frame_equal(together, expected)
    assert set(together["method"]) == {"marker", "python_call"}
    by = together.groupby("worker")["name"].agg(set)
    assert by["w0_train"] == {"train"} and by["w1_tie"] == {"a"}
    train = together[together["worker"] == "w0_train"]
    assert train["anchor_end_ns"].notna().all() and train["call_ns"].notna().all()
    alone_ = together[together["worker"] == "w2_alone"]
    assert alone_["anchor_end_ns"].isna().all() and alone_["call_ns"].isna().all()
