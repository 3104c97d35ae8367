"""Pod view against the engine's injected bottlenecks (real clusters, captured with the safe plan)."""

from __future__ import annotations

import pandas as pd
import pytest

from podscope.analyzers.attribution import straggler_verdict
from podscope.analyzers.breakdown import step_breakdown
from podscope.analyzers.pod import CATEGORY_NAMES, anchored, pod_view
from podscope.analyzers.steps import align_steps, find_steps, step_methods
from podscope.trace_parsers import load

pytestmark = [pytest.mark.cluster, pytest.mark.tf, pytest.mark.slow]


def analyse(session_dir) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:  # type: ignore[no-untyped-def]
    frames = load(session_dir, cache=False)
    ev = frames.events
    found = find_steps(ev)
    aligned = align_steps(found)[0]
    pod = pod_view(step_breakdown(ev, aligned, frames.stats))
    verdict = straggler_verdict(pod, synchronous=anchored(aligned) or None)
    return pod, verdict, step_methods(ev, found)


def test_mwms_straggler_is_named(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    cap = scenario_capture("mwms-loop", "straggler", workers=3, straggler_task=1, straggler_ms=60.0)
    _, s, _ = analyse(cap.session_dir)
    assert s.loc[s["straggler"], "worker"].tolist() == [cap.label("worker:1")], s
    assert s.iloc[0]["score"] >= 5 * max(s.iloc[1]["score"], 0.01)


@pytest.mark.long  # a capture of its own; make verify runs it and its matrix draws the scenario
def test_ps_straggler_is_named(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    cap = scenario_capture("ps", "straggler", workers=2, ps=1, straggler_task=1)
    _, s, _ = analyse(cap.session_dir)
    assert s["mode"].iloc[0] == "asynchronous"
    assert s.loc[s["straggler"], "worker"].tolist() == [cap.label("worker:1")], s


def test_baseline_names_no_straggler(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    _, s, _ = analyse(scenario_capture("mwms-loop", "baseline").session_dir)
    assert not s["straggler"].any(), s


def test_input_bound_input_is_the_largest_category(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    """On every worker whose categories are known (the chief; the safe plan traces the other
    MWMS workers with the Python tracer, whose categories are unknown, not zero): over the
    whole window, as the Pod Viewer's per-worker table shows it, and in most single steps."""
    pod, _, _ = analyse(scenario_capture("mwms-loop", "input-bound").session_dir)
    split = pod[pod["split"]]
    assert len(split), pod
    totals = split.groupby("worker")[[f"{c}_ns" for c in CATEGORY_NAMES]].sum()
    largest = totals.idxmax(axis=1)
    assert (largest == "input_ns").all(), totals.T
    # most single steps, as the docstring says: a loaded machine (make test's two processes)
    # slowed the all-reduce of 14 of 49 steps past their input wait on a fresh clone
    assert (split["bottleneck"] == "input").mean() > 0.5, split["bottleneck"].value_counts()
    assert pod.loc[~pod["split"], "bottleneck"].isna().all()


@pytest.mark.long  # a capture of its own; make verify runs it
def test_no_step_markers_fallback_finds_steps(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    cap = scenario_capture("mwms-loop", "no-step-markers")
    pod, _, methods = analyse(cap.session_dir)
    by = methods.set_index("worker")["method"]
    assert by[cap.label("worker:0")] == "function"
    assert by[cap.label("worker:1")] == "python_call"
    assert pod["step"].nunique() >= 5
