"""Each scenario shows its symptom in raw numbers on the parsed capture (engine ground truth).

These are deliberately plain pandas over ``events`` (not PodScope's analyzers), so that the
analyzers can later be tested against the same captures independently.
"""

from __future__ import annotations

import pandas as pd
import pytest

from podscope.trace_parsers import load
from tests.conftest import ScenarioCapture

pytestmark = [pytest.mark.cluster, pytest.mark.tf, pytest.mark.slow]


def chief_events(cap: ScenarioCapture) -> pd.DataFrame:
    ev = load(cap.session_dir, cache=False).events
    return ev[ev["worker"] == cap.label("worker:0")]


def steps(ev: pd.DataFrame) -> pd.DataFrame:
    s = ev[(ev["name"] == "train") & ev["step_num"].notna()].sort_values("start_ns")
    return s.assign(end_ns=s["start_ns"] + s["dur_ps"] // 1000)


def time_in_steps(ev: pd.DataFrame, mask: pd.Series) -> float:
    """Total duration (ns) of the ``mask`` events that start inside a step marker."""
    st = steps(ev)
    sel = ev[mask]
    idx = st["start_ns"].searchsorted(sel["start_ns"], side="right") - 1
    inside = (idx >= 0) & (sel["start_ns"].to_numpy() < st["end_ns"].to_numpy()[idx.clip(0)])
    return float(sel["dur_ps"][inside].sum() / 1000)


def input_share(ev: pd.DataFrame) -> float:
    waits = ev["name"].astype(str).str.startswith("IteratorGetNextOp::DoCompute")
    return time_in_steps(ev, waits) / float((steps(ev)["dur_ps"] // 1000).sum())


def test_baseline_has_no_input_wait(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    ev = chief_events(scenario_capture("mwms-loop", "baseline"))
    assert len(steps(ev)) >= 5
    assert input_share(ev) < 0.05


def test_input_bound_waits_for_input(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    ev = chief_events(scenario_capture("mwms-loop", "input-bound"))
    assert len(steps(ev)) >= 5
    assert input_share(ev) >= 0.20


@pytest.mark.long  # a capture of its own; make verify runs it and its matrix draws the scenario
def test_ps_straggler_step_time(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    cap = scenario_capture("ps", "straggler", workers=2, ps=1, straggler_task=1)
    ev = load(cap.session_dir, cache=False).events
    fn = ev[ev["name"].astype(str).str.startswith("EagerLocalExecute: __inference_train_step")]
    per_worker = fn.groupby("worker", observed=True)["dur_ps"].median()
    slow, fast = per_worker[cap.label("worker:1")], per_worker[cap.label("worker:0")]
    assert slow >= 1.5 * fast, per_worker


def test_mwms_straggler_makes_others_wait_in_collectives(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    base = chief_events(scenario_capture("mwms-loop", "baseline"))
    cap = scenario_capture("mwms-loop", "straggler", workers=3, straggler_task=1, straggler_ms=60.0)
    ev = chief_events(cap)

    def collective_ms_per_step(e: pd.DataFrame) -> float:
        coll = e["op_type"].astype(str).str.startswith("CollectiveReduce")
        return time_in_steps(e, coll) / 1e6 / len(steps(e))

    assert collective_ms_per_step(ev) - collective_ms_per_step(base) >= 0.6 * 60.0


@pytest.mark.long  # a capture of its own; make verify runs it and its matrix draws the scenario
def test_host_overhead_leaves_gaps_between_steps(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    st = steps(chief_events(scenario_capture("mwms-loop", "host-overhead", host_overhead_ms=20.0)))
    gaps_ms = (st["start_ns"].iloc[1:].to_numpy() - st["end_ns"].iloc[:-1].to_numpy()) / 1e6
    assert pd.Series(gaps_ms).median() >= 0.8 * 20.0


@pytest.mark.long  # a capture of its own; make verify runs it and its matrix draws the scenario
def test_tiny_ops_adds_ops_per_step(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    def ops_per_step(e: pd.DataFrame) -> float:
        return time_in_steps_count(e, e["op_type"].notna()) / len(steps(e))

    # Level 3: TF times each kernel and, once it has measured one as cheap, traces it only at
    # host_tracer_level 3; at level 2 the tiny ops vanished from 2 of 8 captures (~200 ops per
    # step, as the baseline) depending on when the estimates flipped.
    base = ops_per_step(
        chief_events(scenario_capture("mwms-loop", "baseline", host_tracer_level=3))
    )
    tiny = ops_per_step(
        chief_events(scenario_capture("mwms-loop", "tiny-ops", host_tracer_level=3, tiny_ops=300))
    )
    assert tiny - base >= 0.5 * 300, (base, tiny)


def time_in_steps_count(ev: pd.DataFrame, mask: pd.Series) -> int:
    st = steps(ev)
    sel = ev[mask]
    idx = st["start_ns"].searchsorted(sel["start_ns"], side="right") - 1
    return int(
        ((idx >= 0) & (sel["start_ns"].to_numpy() < st["end_ns"].to_numpy()[idx.clip(0)])).sum()
    )


@pytest.mark.long  # a capture of its own; make verify runs it and its matrix draws the scenario
def test_eager_runs_ops_eagerly(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    """TF 2.21 on CPU records eager ops as ``EagerLocalExecute: <OpType>`` (no is_eager stat,
    no ``name:Type`` kernel event); functions are ``EagerLocalExecute: __inference_…``."""

    def eager_share(e: pd.DataFrame) -> float:
        name = e["name"].astype(str)
        eager_ops = name.str.match(r"EagerLocalExecute: (?!__inference)")
        return time_in_steps(e, eager_ops) / float((steps(e)["dur_ps"] // 1000).sum())

    assert eager_share(chief_events(scenario_capture("mwms-loop", "eager"))) > 0.10
    assert eager_share(chief_events(scenario_capture("mwms-loop", "baseline"))) < 0.02


@pytest.mark.long  # a capture of its own; make verify runs it
def test_no_step_markers_but_one_function_call_per_step(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    ev = chief_events(scenario_capture("mwms-loop", "no-step-markers"))
    assert steps(ev).empty
    calls = ev[ev["name"].astype(str).str.match(r"EagerLocalExecute: __inference_train_step")]
    assert len(calls) >= 5
