"""Findings that agree with each other, and machine-readable outputs that work, on every public
sample in ``../shared/traces`` (the engine scenarios get the same contradiction check in
``test_diagnostics.py::test_scenarios_confusion_matrix``)."""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from podscope.analyzers.diagnostics import RULES, diagnose, prepare
from podscope.analyzers.diagnostics.base import UNITS
from podscope.analyzers.diagnostics.questions import CONFLICTS, QUESTIONS, contradictions
from podscope.app.cli import cli
from podscope.trace_parsers import load
from tests.conftest import SHARED_TRACES

pytestmark = pytest.mark.slow


#: The ROCm capture whose outputs make test writes; make verify writes every capture's, and
#: the folder's as one session (six more JAX-on-MI300 runs: a minute and a half).
ROCM_IN_MAKE_TEST = "traces__mi300__jax08_attention__tw003.xplane.pb"


def _samples(every: bool = True) -> list[object]:
    """Each sample folder of several captures as one session (a folder of one is that
    capture), and each capture on its own; with ``every`` false, the ROCm folder and its
    captures but one are marked long."""
    xplane = SHARED_TRACES / "xplane"
    android = SHARED_TRACES / "android"
    found: list[Path] = []
    if xplane.is_dir():
        found += sorted(p for p in xplane.iterdir() if len(list(p.glob("*.xplane.pb"))) > 1)
        found += sorted(xplane.rglob("*.xplane.pb"))
    if android.is_dir():
        found += [
            android / "ms_test_trace.perfetto-trace",
            android / "catapult_android_systrace_legacy.html",
            android / "catapult_big_trace.json",
        ]
    found = [p for p in found if p.exists()]
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces absent"))]
    return [
        pytest.param(
            p,
            id=str(p.relative_to(SHARED_TRACES)),
            marks=() if every or not _more_rocm(p) else pytest.mark.long,
        )
        for p in found
    ]


def _more_rocm(path: Path) -> bool:
    return "rocm" in str(path) and path.name != ROCM_IN_MAKE_TEST


SAMPLES = _samples()


def test_the_tables_name_real_rules() -> None:
    for q in QUESTIONS.values():
        assert q.owner in RULES and all(f in RULES for f in q.followers), q
    for c in CONFLICTS:
        assert c.a in RULES and c.b in RULES, c


@pytest.mark.parametrize("path", SAMPLES)
def test_findings_do_not_contradict_each_other(path: Path, tmp_path: Path) -> None:
    findings = diagnose(prepare(load(path, cache_dir=tmp_path)))
    assert not contradictions(findings)
    for f in findings:
        json.dumps(asdict(f))  # evidence is JSON-ready: no tuple keys, no numpy scalars
        assert f.unit in UNITS
        if f.applies and f.unit == "share" and f.value is not None:
            assert 0.0 <= f.value <= 1.0 + 1e-9, (f.rule_id, f.value)
        if not f.applies:
            assert f.reason, f.rule_id


def test_a_follower_that_would_fire_is_quiet_when_its_owner_is() -> None:
    """The V100 sample: IteratorGetNext averages 756 µs, but input is 0.11 % of its step."""
    v100 = SHARED_TRACES / "xplane" / "gpu_tf_multiworker_v100"
    if not v100.is_dir():
        pytest.skip(f"public trace samples not present: {v100}")
    by = {f.rule_id: f for f in diagnose(prepare(load(v100, cache=False)))}
    assert by["input_bound"].severity == "none" and by["input_bound"].value < 0.01
    it = by["slow_iterator"]
    assert it.value > 500 and it.severity == "none", it
    assert it.evidence["input_share_of_step"] == round(by["input_bound"].value, 4)
    assert "nothing to gain" in it.recommendation
    assert by["input_stage"].severity == "none"
    # the two busy GPUs started the step ~190 ms apart: no launch skew, and no 100 %
    assert not by["launch_skew"].applies and "apart" in by["launch_skew"].reason
    assert by["no_step_markers"].severity == "none"  # XProf groups this trace into a step
    assert by["cpu_only"].title == "GPUs: 2 busy, 6 idle"  # GPU:1 ran 34 µs, none in the step


@pytest.mark.parametrize(
    "path,title",
    [
        ("tpu_xprof", "TPUs: 4 busy, 0 idle"),
        ("rocm_jax_tracelens/traces__mi300__jax08_gemm__tw003.xplane.pb", "GPUs: 1 busy, 7 idle"),
    ],
)
def test_devices_are_busy_by_their_events_not_by_steps(
    path: str, title: str, tmp_path: Path
) -> None:
    p = SHARED_TRACES / "xplane" / path
    if not p.exists():
        pytest.skip(f"public trace samples not present: {p}")
    by = {f.rule_id: f for f in diagnose(prepare(load(p, cache_dir=tmp_path)))}
    assert by["cpu_only"].title == title
    copies = by["host_device_copies"]
    if path == "tpu_xprof":
        # steps are the XLA program's executions (no markers): rules that count per step
        # count per execution, and nothing the sample does not do fires (the TPU's 12
        # all-reduces ran in a separate jit__psum program, outside the 100 executions of jit_f)
        assert by["allreduce_count"].evidence["steps"] == 100  # 98 whole, 2 partial
        assert by["allreduce_count"].severity == "none"
        # its 2,400 copies are host offload, HIGH there: not an "ok" count beside it
        assert by["host_offload"].severity == "high"
        assert not copies.applies and "host-offload finding" in copies.reason
    else:  # six GEMM shapes run three times each: a benchmark sweep, no steps to count in
        assert not copies.applies and by["no_step_markers"].value == 1


MACHINE_OUTPUTS = [
    ["steps", "--csv"],
    ["ops", "--csv"],
    ["memory", "--csv"],
    ["memory", "--csv", "--summary"],
    ["diagnose", "--json"],
    ["collectives", "--csv"],
    ["collectives", "--csv", "--instances"],
    ["stragglers", "--csv"],
    ["stragglers", "--csv", "--steps"],
    ["input", "--csv"],
    ["input", "--csv", "--iterators"],
    ["ps", "--csv"],
    ["parse", "--json"],
]


@pytest.mark.parametrize("path", _samples(every=False))
def test_every_csv_and_json_output_works(path: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"PODSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    for args in MACHINE_OUTPUTS:
        result = runner.invoke(cli, [*args[:1], str(path), *args[1:]], env=env)
        assert result.exit_code == 0, (args, result.output[-2000:], result.exception)
        if "--json" in args:
            json.loads(result.stdout)
        elif result.stdout.strip():
            pd.read_csv(io.StringIO(result.stdout))


def test_symptoms_follow_all_their_causes_even_through_chains() -> None:
    from podscope.analyzers.diagnostics.base import Finding, Severity
    from podscope.analyzers.diagnostics.questions import rank

    def f(rule_id: str) -> Finding:
        return Finding(rule_id, rule_id, severity=Severity.HIGH)

    # slow_iterator is a symptom of input_bound, itself a symptom of input_stage
    ranked = rank([f("slow_iterator"), f("collectives"), f("input_bound"), f("input_stage")])
    order = [x.rule_id for x in ranked]
    assert order.index("input_stage") < order.index("input_bound") < order.index("slow_iterator")
    assert order.index("input_stage") < order.index("collectives")
    assert ranked[order.index("input_bound")].evidence["explained_by"] == ["input_stage"]


def test_a_cause_ranks_with_the_symptom_it_explains() -> None:
    """make verify, seed 7035 (an input-bound 3-worker PS job): the HIGH input-bound finding
    (60 ms a step at stake) followed its MODERATE stage, and so fell under HIGH step gaps
    (25 ms). The cause moves up to its symptom instead: the chain keeps its highest rank."""
    from podscope.analyzers.diagnostics.base import Finding, Severity
    from podscope.analyzers.diagnostics.questions import rank

    def f(rule_id: str, severity: Severity, ms: float) -> Finding:
        return Finding(rule_id, rule_id, severity=severity, at_stake_ns=ms * 1e6)

    ranked = [
        f("input_bound", Severity.HIGH, 60.5),
        f("step_gaps", Severity.HIGH, 24.9),
        f("slow_iterator", Severity.HIGH, 0.0),
        f("input_stage", Severity.MODERATE, 3.4),
        f("eager", Severity.MODERATE, 1.1),
    ]
    order = [x.rule_id for x in rank(ranked)]
    assert order == ["input_stage", "input_bound", "step_gaps", "slow_iterator", "eager"]


def test_a_leak_ranks_first_among_findings_of_its_severity() -> None:
    """make verify, seed 11: a HIGH leak (262 KB a step) ranked under HIGH step gaps of
    2.9 ms a step: a leak has no time at stake, and it ends the job."""
    from podscope.analyzers.diagnostics.base import Finding, Severity, rank_key

    found = [
        Finding("step_gaps", "g", severity=Severity.HIGH, at_stake_ns=2.9e6),
        Finding("eager", "e", severity=Severity.MODERATE, at_stake_ns=0.9e6),
        Finding("memory_leak", "m", severity=Severity.HIGH, at_stake_ns=0.0),
        Finding("collectives", "c", severity=Severity.HIGH, at_stake_ns=6.9e6),
    ]
    order = [f.rule_id for f in sorted(found, key=rank_key)]
    assert order == ["memory_leak", "collectives", "step_gaps", "eager"]
    moderate = [Finding("memory_leak", "m", severity=Severity.MODERATE), found[0]]
    assert [f.rule_id for f in sorted(moderate, key=rank_key)] == ["step_gaps", "memory_leak"]


@pytest.mark.parametrize("mode", ["asynchronous", "synchronous"])
def test_the_others_gaps_follow_an_asynchronous_straggler(mode: str) -> None:
    """make verify, seed 11: a PS straggler (29 ms) and HIGH gaps of 64-68 % on the other
    three workers, ranked first. The coordinator joins its scheduled steps, so the others
    idle while the culprit finishes: their gaps are its symptom. In a synchronous job gaps on
    another worker are a problem of their own."""
    from podscope.analyzers.diagnostics.base import Finding, Severity
    from podscope.analyzers.diagnostics.questions import rank

    gaps = Finding(
        "step_gaps", "g", severity=Severity.HIGH, at_stake_ns=41e6, evidence={"worker": "w0"}
    )
    straggler = Finding(
        "straggler",
        "s",
        severity=Severity.HIGH,
        at_stake_ns=40e6,
        evidence={"straggler": ["w2"], "mode": mode},
    )
    order = [f.rule_id for f in rank([gaps, straggler])]
    assert order == (
        ["straggler", "step_gaps"] if mode == "asynchronous" else ["step_gaps", "straggler"]
    )


@pytest.mark.parametrize(
    ("shares", "follows"),
    [
        ({"h0": 0.0, "h1": 0.167, "h2": 0.167, "h3": 0.16}, True),  # the others' wait for h0
        ({"h0": 0.22, "h1": 0.22, "h2": 0.22, "h3": 0.22}, False),  # every host's own
        ({"h0": 0.0, "h1": 0.4, "h2": 0.4, "h3": 0.4}, False),  # more than its lateness
    ],
)
def test_unattributed_time_that_is_the_wait_for_a_straggler_follows_it(
    shares: dict[str, float], follows: bool
) -> None:
    """At pod size, HIGH "unattributed 16.7 %" ranked above the MODERATE straggler late by
    0.167 of a step: the others waited for it outside any op. When they hold the unattributed
    time, as much of their step as the culprit is late, it is the straggler's symptom; an
    unattributed share every host has alike (the 16-host synthetic pod's 22 %) is not."""
    from podscope.analyzers.diagnostics.base import Finding, Severity
    from podscope.analyzers.diagnostics.questions import rank

    straggler = Finding(
        "straggler",
        "s",
        severity=Severity.MODERATE,
        value=0.167,
        evidence={"straggler": ["h0"], "mode": "synchronous"},
    )
    others = Finding(
        "all_others", "a", severity=Severity.HIGH, evidence={"share_by_worker": shares}
    )
    order = [f.rule_id for f in rank([others, straggler])]
    assert order == (["straggler", "all_others"] if follows else ["all_others", "straggler"])


@pytest.mark.parametrize("most", ["w0", "w1"])
def test_unattributed_time_follows_the_straggler_whose_own_it_mostly_is(most: str) -> None:
    """A chief slowed in its Keras callbacks: the callback time is unattributed time on it, so
    the all_others finding is its symptom, ranked after the straggler (make verify, seed 44:
    all_others ranked first on an mwms-fit chief slowed 27 ms). Unattributed time held mostly
    by another worker is a problem of its own."""
    from podscope.analyzers.diagnostics.base import Finding, Severity
    from podscope.analyzers.diagnostics.questions import rank

    straggler = Finding(
        "straggler", "s", severity=Severity.MODERATE, evidence={"straggler": ["w0"]}
    )
    shares = {"w0": 0.3, "w1": 0.05} if most == "w0" else {"w0": 0.05, "w1": 0.3}
    others = Finding(
        "all_others", "a", severity=Severity.HIGH, evidence={"share_by_worker": shares}
    )
    order = [f.rule_id for f in rank([others, straggler])]
    assert order == (["straggler", "all_others"] if most == "w0" else ["all_others", "straggler"])
