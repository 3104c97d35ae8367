"""The ``make verify`` harness itself: the draw, the judging and the report (no engine runs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import verify.run
from podscope.reference_engine.config import EngineConfig
from podscope.reference_engine.scenarios import SCENARIOS
from verify.__main__ import correct, report
from verify.matrix import EXPECTED, SCENARIO_WEIGHTS, draw
from verify.run import RunError, capture_scenario


def test_the_draw_is_seeded_covers_every_scenario_and_fits_the_engine() -> None:
    runs = draw(40, seed=7)
    assert runs == draw(40, seed=7) and runs != draw(40, seed=8)
    counts = pd.Series([r.scenario for r in runs]).value_counts()
    assert set(counts.index) == set(SCENARIO_WEIGHTS) and counts["straggler"] >= 9
    for r in runs:
        assert r.workload in SCENARIOS[r.scenario].workloads
        assert 0 <= r.straggler_task < r.workers
        assert (10 if r.scenario == "straggler" else 20) <= r.delay_ms <= 80
        assert r.straggler_task > 0 or r.scenario != "slow-allreduce"
        assert (r.ps > 0) == (r.workload == "ps")
        cfg = r.config("/x.so")
        assert cfg.scenario == r.scenario and (cfg.preload is not None) == r.full_trace
    assert draw(40, 7)[0].config().seed != draw(40, 7)[1].config().seed


@pytest.mark.parametrize("n", [5, 40])
def test_every_workload_is_drawn_with_the_chief_and_another_task_slowed(n: int) -> None:
    """The cells a seed must not leave out: the straggler on each workload as task 0 (the
    MWMS chief) and as a task > 0, the input delay on each workload, and the small signals'
    2-worker parameter-server baseline."""
    from verify.matrix import required

    runs = draw(n, seed=31)
    assert len(runs) >= len(required())
    drawn = {(r.scenario, r.workload, r.straggler_task == 0, r.workers) for r in runs}
    for scenario, workload, chief, workers in required():
        assert any(
            d[:2] == (scenario, workload) and chief in (None, d[2]) and workers in (None, d[3])
            for d in drawn
        ), (scenario, workload, chief, workers)
    assert ("baseline", "ps", 2) in {(r.scenario, r.workload, r.workers) for r in runs}


def test_judging() -> None:
    assert correct("straggler", 2, "straggler", "worker:2") == (True, True)
    assert correct("straggler", 2, "collectives", "worker:0,worker:2") == (False, False)
    assert correct("baseline", 1, "collectives", "—") == (True, None)  # nothing injected
    assert correct("baseline", 1, "step_gaps", "worker:1") == (False, None)
    assert all(correct(s, 0, next(iter(e)), "—")[1] for s, e in EXPECTED.items())


def test_the_report_says_whether_each_target_is_met() -> None:
    rows = pd.DataFrame(
        [
            ("straggler", "mwms-fit", 3, 0, 2, 50.0, "straggler", "worker:2", ""),
            ("straggler", "mwms-loop", 2, 0, 1, 30.0, "straggler_cause", "worker:0", ""),
            ("baseline", "ps", 2, 1, 0, 20.0, "collectives", "—", ""),
            ("eager", "mwms-fit", 2, 0, 0, 20.0, "", "", "RunError: boom"),
        ],
        columns=[
            "scenario",
            "workload",
            "workers",
            "ps",
            "straggler_task",
            "delay_ms",
            "top",
            "culprits",
            "error",
        ],
    ).assign(model="mlp", seed=1, fired="", session="", seconds=10.0)
    text = report(rows, seed=7)
    assert "| straggler runs whose only culprit is the slowed task | ≥ 95% | 50% | NO |" in text
    assert "| baseline runs with no culprit | ≥ 100% | 100% | yes |" in text
    assert "(1 failed to run)" in text and "RunError: boom" in text
    assert "## Per workload, and the slowed task" in text
    assert "| straggler | mwms-fit | task > 0 | 1 | 100% | 100% |" in text
    assert "| straggler | mwms-loop | task > 0 | 1 | 0% | 100% |" in text
    assert "Not recorded in this runs.csv (`--rejudge` records it)." in text
    # the small signals: a straggler late by little, two asynchronous workers, gaps vs input
    text = report(rows.assign(late_score=[0.12, 0.9, 0.02, float("nan")], last_share=1.0), seed=7)
    section = text.split("## Small signals")[1].split("## Every run")[0]
    assert "| straggler runs whose slowed worker was late by under 0.25 of the median " in section
    assert "its culprit named | 1 of 1 |" in section  # the 0.12 one, named worker:2
    assert (
        "| 2-worker parameter-server runs with no slowed worker: no chance culprit | 1 of 1 |"
        in section
    )
    assert "| input-bound parameter-server runs: an input finding on top | 0 of 0 |" in section
    # the culprit's cause, of the runs whose culprit is right
    text = report(rows.assign(cause=["late start", "mixed", "—", ""]), seed=7)
    assert "| workload | slowed | late start |\n|---|---|---|\n| mwms-fit | task > 0 | 1 |" in text


def test_the_jax_draw_is_seeded_and_covers_every_scenario() -> None:
    from verify.jax_matrix import SCENARIOS, draw_jax

    runs = draw_jax(15, seed=7)
    assert runs == draw_jax(15, seed=7) and runs != draw_jax(15, seed=8)
    assert {r.scenario for r in runs} == set(SCENARIOS)
    assert all(0 <= r.slow_task < r.workers and 2 <= r.workers <= 4 for r in runs)
    assert any(r.markers for r in runs) and not all(r.markers for r in runs)
    assert len({(r.workers, r.slow_ms, r.width) for r in runs}) > 5  # not one run repeated
    for scenario in ("slow-host", "slow-device"):  # the coordinator and another slowed
        tasks = {r.slow_task == 0 for r in runs if r.scenario == scenario}
        assert tasks == {True, False}, scenario


def test_a_crash_under_the_full_trace_runs_again_and_only_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TF's profiler can crash a worker under the full trace (README), even with jemalloc: that
    run goes once more in a fresh cluster, with a warning; any other failure, or a crash under
    the safe plan, is reported as it is."""
    calls: list[Path] = []
    failures: list[RunError] = []

    def once(cfg: EngineConfig, root: Path, **options: object) -> str:
        calls.append(root)
        if failures:
            raise failures.pop(0)
        return f"captured under {root.name}"

    monkeypatch.setattr(verify.run, "_capture_once", once)
    cfg = EngineConfig(workload="mwms-loop", scenario="slow-allreduce")
    crash = RunError("capture incomplete: worker-1 crashed", crashed=True)
    failures[:] = [crash]
    with pytest.warns(RuntimeWarning, match="crashed under the full trace"):
        assert capture_scenario(cfg, tmp_path, full_trace=True) == "captured under again"
    assert calls == [tmp_path, tmp_path / "again"]
    for full_trace, error in ((False, crash), (True, RunError("worker-0 failed: boom"))):
        calls.clear()
        failures[:] = [error]
        with pytest.raises(RunError) as raised:
            capture_scenario(cfg, tmp_path, full_trace=full_trace)
        assert raised.value is error and calls == [tmp_path]
    calls.clear()
    failures[:] = [crash, RunError("crashed again", crashed=True)]
    with pytest.warns(RuntimeWarning), pytest.raises(RunError, match="crashed again"):
        capture_scenario(cfg, tmp_path, full_trace=True)
    assert calls == [tmp_path, tmp_path / "again"]
