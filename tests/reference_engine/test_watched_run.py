"""End to end: a straggler begins 20 s into a 3-worker MultiWorkerMirroredStrategy job; the
watcher, reading the step heartbeats, captures at once after the onset and names the slowed
worker with its cause, and the capture before the onset names no one (``make verify`` draws
the onsets, workloads and tasks: ``verify.watch_run``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podscope.analyzers.history import named, what_changed
from podscope.reference_engine.config import EngineConfig
from podscope.trace_parsers import layout
from verify.watch_run import watch_scenario

# make verify's watch matrix runs nine such runs; this one is 50 s
pytestmark = [pytest.mark.cluster, pytest.mark.tf, pytest.mark.slow, pytest.mark.long]


def test_a_straggler_that_begins_mid_run_is_caught_by_its_heartbeats(tmp_path: Path) -> None:
    cfg = EngineConfig(
        workload="mwms-loop", scenario="straggler", steps=None, straggler_task=2, onset_s=20
    )
    run = watch_scenario(cfg, tmp_path, workers=3)
    v = run.verdict()
    assert v["onset_reported"] and v["before"] >= 1 and v["before_clean"], v
    assert v["triggered"] and v["right"], v
    assert v["onset_in_window"], v
    # No capture triggered itself: the watcher's own captures slow the steps in their window.
    assert [c.trigger.kind for c, _ in run.captures] == ["scheduled", "rise"], run.captures
    first_after = run.captures[-1][1]
    assert first_after is not None and first_after["causes"][run.expected_culprit]
    # capture.json holds the reason and the heartbeat window; the session opens as any other.
    watched = next(c for c, _ in run.captures if c.trigger.kind == "rise")
    manifest = json.loads(
        (layout.session_dir(run.logdir, watched.session) / "capture.json").read_text()
    )
    assert manifest["watch"]["reason"] == "rise"
    assert manifest["watch"]["trigger"]["window_start_ns"] > 0
    assert all(len(b) > 20 for b in manifest["watch"]["heartbeats"].values())
    # What changed, from the scheduled capture before the onset to the triggered one.
    before = next(s for c, s in run.captures if c.trigger.kind == "scheduled")
    changes = what_changed(before, first_after)
    culprit = named(first_after, run.expected_culprit)  # worker:2 (127.0.0.1:port)
    assert changes[0].kind == "culprit" and culprit in changes[0].title, changes[0]
    assert culprit.startswith("worker:2 (")
    assert any(c.kind == "step_time" and c.delta_ms > 0 for c in changes), changes
    # The watched logdir is TensorBoard's layout: XProf reads the triggered session's traces.
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof not installed")
    files = sorted(layout.session_dir(run.logdir, watched.session).glob("*.xplane.pb"))
    data, _ = convert.xspace_to_tool_data(
        [str(f) for f in files], "framework_op_stats", {"use_saved_result": False}
    )
    assert json.loads(data)[0]["rows"], "XProf found no ops in the watched session"
