"""Diagnostics: each GPU rule positive and negative on constructed traces, expressions that
reproduce the numbers, and the ground-truth confusion matrix on the engine's scenarios."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.diagnostics import RULES, Finding, diagnose, prepare
from podscope.analyzers.diagnostics.questions import contradictions
from podscope.trace_parsers import TraceFrames, load
from podscope.trace_parsers.xplane import parse_xplane
from tests.conftest import shared_trace
from tests.xspace_builder import SpaceBuilder

US = 1_000_000  # ps


def gpu_trace(
    *,
    kernel: str = "volta_h1688gemm_128x128_nn",
    op: str = "dense/MatMul:MatMul",
    copies: int = 1,
    allreduces: int = 1,
    skew_us: int = 0,
    gpus: int = 2,
    cc_major: int = 7,
    steps: int = 6,
) -> TraceFrames:
    """Host step markers launching, on each GPU, one op kernel, ``copies`` HtoD copies and
    ``allreduces`` nccl kernels per step; GPU g starts ``g * skew_us`` late."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, launch = host.line(1, "python"), host.line(2, "tf_gpu_private")
    planes = [
        b.plane(
            f"/device:GPU:{g}", plane_id=g + 1, compute_cap_major=cc_major, memory_size=16 * 2**30
        )
        for g in range(gpus)
    ]
    cid = 0
    for i in range(steps):
        t0 = i * 2000 * US
        host.event(py, "train", t0, 1500 * US, step_num=i, _r=1)
        for g, plane in enumerate(planes):
            stream = plane.line(7, "Stream #7") if i == 0 else plane.plane.lines[0]
            t = t0 + (50 + g * skew_us) * US
            cid += 1
            host.event(launch, op, t0 + 10 * US, 30 * US)
            host.event(launch, "cudaLaunchKernel", t0 + 12 * US, 5 * US, correlation_id=cid)
            plane.event(
                stream,
                kernel,
                t,
                400 * US,
                correlation_id=cid,
                kernel_details=("ref", "regs:64 grid:80,1,1 block:256,1,1"),
            )
            for c in range(copies):
                plane.event(
                    stream,
                    "MemcpyHtoD",
                    t + (400 + c * 2) * US,
                    1 * US,
                    memcpy_details="kind:HtoD size:256",
                )
            for a in range(allreduces):
                plane.event(
                    stream, "ncclAllReduceRingLLKernel_sum_f32", t + (600 + a * 20) * US, 10 * US
                )
    return parse_xplane(b.bytes(), worker="gpu_1")


def finding(frames: TraceFrames, rule_id: str) -> Finding:
    return next(f for f in diagnose(prepare(frames), only=[rule_id]))


@pytest.mark.parametrize(
    ("rule_id", "bad", "good"),
    [
        (
            "tensor_cores",
            {"kernel": "volta_sgemm_128x64_nn"},
            {"kernel": "volta_h1688gemm_128x128_nn"},
        ),
        (
            "mixed_precision",
            {"kernel": "volta_sgemm_128x64_nn"},
            {"kernel": "volta_h1688gemm_128x128_nn"},
        ),
        ("host_device_copies", {"copies": 20}, {"copies": 1}),
        ("allreduce_count", {"allreduces": 4}, {"allreduces": 1}),
        ("launch_skew", {"skew_us": 300}, {"skew_us": 0}),
        (
            "tf32",
            {"kernel": "ampere_sgemm_128x64_nn", "cc_major": 8},
            {"kernel": "ampere_tf32_s1688gemm_tf32_128x128", "cc_major": 8},
        ),
    ],
)
def test_gpu_rule_positive_and_negative(
    rule_id: str, bad: dict[str, object], good: dict[str, object]
) -> None:
    positive = finding(gpu_trace(**bad), rule_id)  # type: ignore[arg-type]
    negative = finding(gpu_trace(**good), rule_id)  # type: ignore[arg-type]
    assert positive.applies and positive.severity in ("moderate", "high"), positive
    assert negative.applies and negative.severity == "none", negative


def test_passing_mixed_precision_says_it_is_on() -> None:
    """Listed among the passed checks, the finding must not read "Mixed precision off"."""
    on = finding(gpu_trace(kernel="volta_h1688gemm_128x128_nn"), "mixed_precision")
    off = finding(gpu_trace(kernel="volta_sgemm_128x64_nn"), "mixed_precision")
    assert on.severity == "none" and on.title.startswith("Mixed precision on: ")
    assert f"{on.value:.0%}" in on.title and "off" not in on.title
    assert off.severity != "none" and off.title.startswith("Mixed precision off")


def test_tf32_needs_ampere() -> None:
    f = finding(gpu_trace(kernel="volta_sgemm_128x64_nn", cc_major=7), "tf32")
    assert not f.applies and "Ampere" in f.reason


def test_tf32_does_not_apply_to_an_amd_gpu() -> None:
    """The ROCm MI300X sample reports compute capability 9 (gfx94x), not an NVIDIA Ampere."""
    path = shared_trace(
        "xplane", "rocm_jax_tracelens", "traces__mi300__jax08_gemm__tw003.xplane.pb"
    )
    f = finding(load(path, cache=False), "tf32")
    assert not f.applies and "these are AMD GPUs" in f.reason


def test_step_marker_advice_fits_the_framework() -> None:
    jax = load(
        shared_trace("xplane", "rocm_jax_tracelens", "traces__mi300__jax08_gemm__tw003.xplane.pb"),
        cache=False,
    )
    f = finding(jax, "no_step_markers")
    assert f.applies and "jax.profiler.StepTraceAnnotation" in f.recommendation
    assert "tf.profiler" not in f.recommendation
    android = load(shared_trace("android", "perfetto_small", "bad_print.systrace"), cache=False)
    f = finding(android, "no_step_markers")
    assert not f.applies and "TFLite" in f.reason
    tf = finding(gpu_trace(kernel="volta_sgemm_128x64_nn"), "no_step_markers")
    assert "tf.profiler.experimental.Trace" in tf.recommendation or tf.severity == "none"


def test_cpu_only_trace_says_gpu_rules_do_not_apply() -> None:
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    line = host.line(1, "python")
    for i in range(4):
        host.event(line, "train", i * 1000 * US, 900 * US, step_num=i, _r=1)
    findings = {f.rule_id: f for f in diagnose(prepare(parse_xplane(b.bytes(), worker="w")))}
    for rule_id in (
        "tensor_cores",
        "mixed_precision",
        "tf32",
        "host_device_copies",
        "launch_skew",
        "memory",
    ):
        assert not findings[rule_id].applies and "CPU-only" in findings[rule_id].reason
    assert (
        findings["cpu_only"].value == 1.0
        and "not applicable" in findings["cpu_only"].recommendation
    )


def assert_expressions_reproduce(frames: TraceFrames) -> int:
    checked = 0
    for f in diagnose(prepare(frames)):
        if not f.applies or f.value is None or f.expression.startswith("(see"):
            continue
        got = eval(f.expression, {"frames": frames, "prepare": prepare, "np": np, "pd": pd})
        assert np.isclose(float(got), f.value, rtol=1e-9, equal_nan=True), (f.rule_id, got, f.value)
        checked += 1
    return checked


def test_expressions_reproduce_every_number() -> None:
    assert (
        assert_expressions_reproduce(
            gpu_trace(kernel="volta_sgemm_128x64_nn", copies=20, allreduces=3, skew_us=100)
        )
        >= 10
    )
    real = load(
        shared_trace("xplane", "gpu_tf_multiworker_v100", "34.83.195.179_6003.xplane.pb"),
        cache=False,
    )
    assert assert_expressions_reproduce(real) >= 8


def test_every_rule_has_an_id_title_and_recommendation() -> None:
    for f in diagnose(
        prepare(gpu_trace(kernel="volta_sgemm_128x64_nn", copies=20, allreduces=3, skew_us=300))
    ):
        assert f.rule_id in RULES and f.title
        if f.severity != "none":
            assert f.recommendation and f.doc.startswith("https://")


# ------------------------------------------------------------------------- ground truth

SCENARIO_RULE = {
    "input-bound": "input_bound",
    "straggler": "straggler",
    "host-overhead": "step_gaps",
    "tiny-ops": "tiny_ops",
    "eager": "eager",
    "no-step-markers": "no_step_markers",
    "slow-map": "input_stage",
    "memory-leak": "memory_leak",
}
#: Moderate/high findings that every CPU MultiWorkerMirroredStrategy run on this 2-core machine
#: shows, baseline included; they are true, not false alarms (measured on the baseline run):
#: the chief waits in CollectiveReduceV2 for the other worker (collectives ~0.6-0.7 of step
#: time: two training processes share two cores), Python time between ops is unattributed
#: (all_others ~0.15-0.25), and IteratorGetNext averages ~200 µs (> XProf's 50 µs) because
#: the prefetch thread competes for the same cores, while input stays below 5 % of the step.
EXPECTED_ON_CPU_MWMS = {"collectives", "all_others", "slow_iterator"}
#: The scenarios built to wait for input (the rest do nothing to the input pipeline).
INPUT_SCENARIOS = {"input-bound", "slow-map", "eager"}


def stalled_input(finding: Finding) -> bool:
    """An input-bound finding at XProf's 5 % line, not a pipeline's: moderate, every worker's
    input share under 10 %. Two training processes share two cores, and one IteratorGetNext
    that waited for a core (68 ms in a host-overhead run, 105 ms in a memory-leak run; median
    0.1 ms) put a mean of 6.3-6.4 % over the line in scenarios that do nothing to the input. It
    is what the trace says; a finding of the scenario it is not."""
    shares = finding.evidence.get("share_by_worker") or {}
    return finding.severity == "moderate" and bool(shares) and max(shares.values()) < 0.10


#: Off-diagonal findings that follow from how a scenario is built (explained per scenario).
EXPLAINED = {
    # The straggler sleeps on the host before each step, i.e. between its steps; the others
    # wait for it, which is what straggler_cause explains (asserted high below).
    "straggler": {"step_gaps", "straggler_cause"},
    # Eagerly, the distributed iterator's get_next is not overlapped with the step: the step
    # waits for input (measured input share ~0.2-0.3).
    "eager": {"input_bound"},
    # The slow map is what makes IteratorGetNext slow, and the scenario drops prefetch (its
    # pipeline has none, tf.data's injected one included); that map is a stage that cannot
    # keep up (input_stage names it).
    "input-bound": {"slow_iterator", "no_prefetch", "input_stage"},
    # The leaked tensor is made by eager ops (random_normal) between steps, outside the
    # step marker: eager op time and a gap between steps, as a user's own leak would show.
    "memory-leak": {"eager", "step_gaps"},
    # An input stage slower than the step makes the step wait for input however much is
    # prefetched: input-bound and a slow IteratorGetNext follow from it.
    "slow-map": {"input_bound", "slow_iterator"},
    # Without markers the steps are the tf.function calls, so the loop's Python work between
    # calls (fetching the loss, logging) shows as gaps (~5 % of the time here, at the threshold).
    "no-step-markers": {"step_gaps"},
}


@pytest.mark.cluster
@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.long  # 12 engine captures (3 min); make verify runs it
def test_scenarios_confusion_matrix(scenario_capture, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    kwargs = {
        "straggler": {"workers": 3, "straggler_task": 1, "straggler_ms": 60.0},
        "tiny-ops": {"tiny_ops": 300},
        "host-overhead": {"host_overhead_ms": 20.0},
    }
    rules = sorted(set(SCENARIO_RULE.values()))
    matrix, flagged = {}, {}
    for scenario in ["baseline", *SCENARIO_RULE]:
        level = 3 if scenario == "tiny-ops" else 2  # cheap ops are traced at level 3 only
        cap = scenario_capture(
            "mwms-loop", scenario, host_tracer_level=level, **kwargs.get(scenario, {})
        )
        found = diagnose(prepare(load(cap.session_dir, cache=False)))
        assert not contradictions(found), (scenario, contradictions(found))
        findings = {f.rule_id: f for f in found}
        matrix[scenario] = {
            r: findings[r].severity
            for r in sorted(set(rules) | EXPECTED_ON_CPU_MWMS | {"straggler_cause"})
        }
        flagged[scenario] = {
            r
            for r, f in findings.items()
            if f.severity in ("moderate", "high")
            and not (r == "input_bound" and scenario not in INPUT_SCENARIOS and stalled_input(f))
        }
    with capsys.disabled():
        print("\n" + pd.DataFrame(matrix).T.to_string())
    for scenario, rule_id in SCENARIO_RULE.items():
        assert matrix[scenario][rule_id] in ("moderate", "high"), (
            scenario,
            rule_id,
            matrix[scenario],
        )
    assert flagged["baseline"] <= EXPECTED_ON_CPU_MWMS, flagged["baseline"]
    assert matrix["straggler"]["straggler_cause"] in ("moderate", "high"), matrix["straggler"]
    # The baseline prefetches (no finding, by the line above); input-bound has no prefetch.
    assert "no_prefetch" in flagged["input-bound"], matrix["input-bound"]
    for scenario, rule_id in SCENARIO_RULE.items():
        off_diagonal = (
            flagged[scenario] - {rule_id} - EXPECTED_ON_CPU_MWMS - EXPLAINED.get(scenario, set())
        )
        assert not off_diagonal, (scenario, off_diagonal)


@pytest.mark.cluster
@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.long  # two captures of their own; make verify runs it
def test_mixed_precision_rule_on_cpu_runs_says_why_not(scenario_capture) -> None:  # type: ignore[no-untyped-def]
    for precision in (None, "mixed_float16"):
        cap = (
            scenario_capture("mwms-loop", "baseline", mixed_precision=precision)
            if precision
            else scenario_capture("mwms-loop", "baseline")
        )
        f = finding(load(cap.session_dir, cache=False), "mixed_precision")
        assert not f.applies and "CPU" in f.reason


def test_findings_link_to_the_worker_and_step_that_show_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from urllib.parse import parse_qs, urlparse

    from tests.analyzers.test_breakdown import worker_trace

    for w, kw in (("w1_6000", {"input_us": 50}), ("w2_6000", {"input_us": 400, "offset_us": 300})):
        (tmp_path / f"{w}.xplane.pb").write_bytes(worker_trace(w, 12, **kw))  # type: ignore[arg-type]
    a = prepare(load(tmp_path, cache=False))
    found = {f.rule_id: f for f in diagnose(a)}
    link = urlparse(found["input_bound"].page)
    q = parse_qs(link.query)
    assert link.path == "/pod" and q["worker"] == ["w2_6000"]
    step = int(q["step"][0])
    worst = a.split[a.split["worker"] == "w2_6000"]
    share = worst["input_ns"] / worst["step_time_ns"]
    assert step == int(worst.loc[share.idxmax(), "step"])
    slow = urlparse(found["slow_iterator"].page)
    assert slow.path == "/timeline" and parse_qs(slow.query)["worker"] == ["w2_6000"]
    assert parse_qs(slow.query)["q"] == ["IteratorGetNext"] and "step" in parse_qs(slow.query)
