"""Real TensorFlow captures parse completely, and agree with XProf where XProf has an answer."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from podscope.trace_parsers import load, validate
from podscope.trace_parsers.nesting import nest_events
from podscope.trace_parsers.xplane import parse_xplane
from tests.conftest import Capture
from tests.trace_parsers.test_xplane import assert_every_stat_kept, reference_counts

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(params=["loop_capture", "fit_capture", "xla_capture"])
def capture(request: pytest.FixtureRequest) -> Capture:
    return request.getfixturevalue(request.param)


def test_capture_parses_with_every_event_and_stat(capture: Capture) -> None:
    (path,) = capture.files
    data = path.read_bytes()
    frames = validate(parse_xplane(data, worker="w", source=str(path)))
    ref = reference_counts(data)
    assert len(frames.events) == ref["timed"] > 0
    assert_every_stat_kept(frames, ref["stat_keys"])  # type: ignore[arg-type]


def test_step_markers_found_equal_steps_run(capture: Capture) -> None:
    frames = load(capture.logdir, cache=False)
    markers = frames.events[(frames.events["name"] == "train") & frames.events["step_num"].notna()]
    assert sorted(markers["step_num"].astype(int)) == list(range(capture.steps))


def test_absolute_time_is_epoch_and_inside_the_capture(loop_capture: Capture) -> None:
    frames = load(loop_capture.logdir, cache=False)
    w = frames.workers.iloc[0]
    assert w["time_base"] == "epoch"
    ev = frames.events
    assert ev["start_ns"].min() >= w["capture_start_ns"]
    assert (ev["start_ns"] + ev["dur_ps"] // 1000).max() <= w["capture_stop_ns"]


def xprof_framework_op_stats(capture: Capture) -> pd.DataFrame:
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")
    data, _ = convert.xspace_to_tool_data([str(f) for f in capture.files], "framework_op_stats", {})
    table = json.loads(data)[0]
    cols = [c["id"] for c in table["cols"]]
    rows = pd.DataFrame([[v.get("v") for v in r["c"]] for r in table["rows"]], columns=cols)
    return rows[(rows["type"] != "IDLE") & (rows["host_or_device"] == "Host")]


@pytest.mark.parametrize("name", ["loop_capture", "fit_capture"])
def test_op_counts_and_self_time_match_xprof(name: str, request: pytest.FixtureRequest) -> None:
    capture: Capture = request.getfixturevalue(name)
    theirs = xprof_framework_op_stats(capture)
    ev = load(capture.logdir, cache=False).events
    ops = ev[ev["op_type"].notna() & ev["plane"].astype(str).str.startswith("/host")]
    ops = ops.assign(op_self_ps=nest_events(ops)["self_ps"])
    ours = (
        ops.groupby(["op_type", "op_name"], observed=True)
        .agg(
            occurrences=("dur_ps", "size"),
            total_ps=("dur_ps", "sum"),
            self_ps=("op_self_ps", "sum"),
        )
        .reset_index()
    )
    both = theirs.merge(
        ours,
        left_on=["type", "operation"],
        right_on=["op_type", "op_name"],
        how="outer",
        indicator=True,
    )
    assert (both["_merge"] == "both").all(), both[both["_merge"] != "both"][
        ["type", "operation", "op_type", "op_name"]
    ]
    assert (both["occurrences_x"] == both["occurrences_y"]).all()
    assert (
        (both["total_self_time"] - both["self_ps"] / 1e6).abs()
        <= 0.01 * both["total_self_time"] + 1e-3
    ).all()
    assert (
        (both["total_time"] - both["total_ps"] / 1e6).abs() <= 0.01 * both["total_time"] + 1e-3
    ).all()


@pytest.mark.cluster
def test_two_worker_mwms_capture_parses(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    """A real 2-worker MultiWorkerMirroredStrategy capture (engine + collector, safe plan)."""
    cap = scenario_capture("mwms-loop", "baseline")
    files = sorted(cap.session_dir.glob("*.xplane.pb"))
    assert len(files) == 2
    for path in files:
        data = path.read_bytes()
        frames = validate(parse_xplane(data, worker=path.name, source=str(path)))
        ref = reference_counts(data)
        assert len(frames.events) == ref["timed"] > 0
        assert_every_stat_kept(frames, ref["stat_keys"])  # type: ignore[arg-type]
    frames = load(cap.session_dir, cache=False)
    assert sorted(frames.workers["worker"].astype(str)) == sorted(
        p.name.removesuffix(".xplane.pb") for p in files
    )
    chief = frames.events[frames.events["worker"] == cap.label("worker:0")]
    nums = sorted(
        chief.loc[(chief["name"] == "train") & chief["step_num"].notna(), "step_num"].astype(int)
    )
    # Markers that lie fully inside the window: consecutive step numbers, none lost.
    assert len(nums) >= 5 and nums == list(range(nums[0], nums[0] + len(nums)))
