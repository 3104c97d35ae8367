"""Rules on the step-time breakdown and the pod view: where step time goes, who is slow."""

from __future__ import annotations

import pandas as pd

from podscope.analyzers.diagnostics.base import (
    DEVICE,
    GUIDE,
    JAX_GUIDE,
    SPLIT,
    Severity,
    Thresholds,
    Verdict,
    is_jax,
    page_at,
    rule,
    severity_of,
    skip,
    step_at,
    worst_step,
)
from podscope.analyzers.pod import device_imbalance, is_synchronous
from podscope.analyzers.session import SessionAnalysis


def _category(
    rule_id: str,
    title: str,
    cat: str,
    levels: str,
    advice: str,
    *,
    device_only: bool = False,
    anchor: str = "",
    jax: str = "",
) -> None:
    """A rule on one breakdown category's share of step time; ``jax``: the advice in JAX terms
    (for captures whose steps are XLA program executions or whose programs are JAX's)."""

    @rule(rule_id, title, needs=(DEVICE, SPLIT) if device_only else (SPLIT,), levels=levels)
    def check(inp: SessionAnalysis, t: Thresholds) -> Verdict:
        b = inp.split
        in_jax = is_jax(inp)
        if in_jax and not jax:
            return skip("a TensorFlow-only check; this capture runs XLA programs (JAX)")
        if not in_jax and not advice:
            return skip("only XLA program steps (JAX) have device idle time")
        value = float(b[f"{cat}_ns"].astype(float).sum() / b["step_time_ns"].sum())
        per_worker = (
            b.groupby("worker")[f"{cat}_ns"].sum().astype(float)
            / b.groupby("worker")["step_time_ns"].sum()
        )
        return Verdict(
            severity_of(value, getattr(t, levels)),
            value=value,
            expression=f"(lambda b: b.{cat}_ns.sum() / b.step_time_ns.sum())(prepare(frames).split)",
            evidence={
                "share_by_worker": per_worker.round(4).to_dict(),
                "steps": int(b["step"].nunique()),
                "mean_ms_per_step": round(float(b[f"{cat}_ns"].astype(float).mean()) / 1e6, 3),
            },
            recommendation=jax if in_jax else advice,
            doc=JAX_GUIDE if in_jax else f"{GUIDE}#{anchor}" if anchor else GUIDE,
            at_stake_ns=value * inp.step_time_ns,
            page=page_at("/pod", *worst_step(b, f"{cat}_ns")),
        )


_category(
    "input_bound",
    "Input-bound: steps wait for the input pipeline",
    "input",
    "input",
    "Make the tf.data pipeline faster: parallel map (num_parallel_calls=tf.data.AUTOTUNE), prefetch, cache; "
    "move preprocessing off the step; check the Ops page for slow Iterator::* ops.",
    anchor="debug_the_input_pipeline",
    jax="Each step copies its input from the host: put the next batch on the device while the "
    "current step runs (jax.device_put ahead of the call, a prefetching iterator such as "
    "flax.jax_utils.prefetch_to_device or grain's), and keep the model state on the device.",
)
_category(
    "output_bound",
    "Output-bound: steps wait for device-to-host copies",
    "output",
    "output",
    "Avoid fetching tensors to the host every step (metrics, summaries, .numpy()); fetch less often.",
    jax="Results are copied to the host every step: avoid float(loss), np.asarray(x) or "
    "jax.device_get in the loop; accumulate metrics on the device and fetch them every N steps.",
)
_category(
    "kernel_launch",
    "Kernel launch overhead",
    "kernel_launch",
    "kernel_launch",
    "Too many small kernels: compile the step with XLA (jit_compile=True), use bigger batches; when tf.data "
    "runs on the same host, set TF_GPU_THREAD_MODE=gpu_private.",
    device_only=True,
)
_category(
    "all_others",
    "Unattributed time in steps (often Python overhead)",
    "all_others",
    "all_others",
    "Time inside steps that no op, input wait or copy explains: usually Python between ops. Put the step in "
    "tf.function, avoid Python-side work per step, run several steps per call (steps_per_execution).",
)
_category(
    "collectives",
    "Time in collective communication (all-reduce)",
    "device_collectives",
    "collectives",
    "On fast workers this is mostly waiting for the slowest one (see the straggler finding); otherwise "
    "fewer, larger all-reduces (gradient packing), faster interconnect, or mixed precision to halve bytes.",
    jax="On fast devices this is mostly waiting for the slowest one (see the straggler finding); "
    "otherwise shard so less is communicated (jax.sharding / shard_map: replicate only what must be), "
    "keep collectives in bfloat16, and let XLA overlap them with compute (one jit around the "
    "whole step, not several).",
)
_category(
    "device_idle",
    "Devices idle between XLA executions (the host holds the loop back)",
    "device_idle",
    "device_idle",
    "",
    jax="The device waits for the host between steps: Python, input preparation or a blocking "
    "fetch runs between two executions of the step's program. Do more per jit call (several "
    "steps in one with jax.lax.scan or fori_loop), keep dispatch asynchronous (no "
    ".block_until_ready() or float(loss) per step), prefetch batches to the device, donate the "
    "state (jax.jit(step, donate_argnums=0)) so no copies are made, and move host callbacks "
    "(jax.debug.print, pure_callback) out of the step.",
)


@rule(
    "step_gaps",
    "Gaps between steps (work outside the step: callbacks, metrics, Python)",
    levels="step_gaps",
)
def step_gaps(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    s = inp.steps
    if s["worker"].nunique() == 0 or len(s) < 2:
        return skip("fewer than two steps")
    if (s["method"] == "group_id").all():
        return skip("steps come from group_id spans, which are not step boundaries")
    s = s.sort_values(["worker", "start_ns"])
    gap = (s.groupby("worker")["start_ns"].shift(-1) - s["end_ns"]).clip(lower=0)
    span = s.groupby("worker")["end_ns"].max() - s.groupby("worker")["start_ns"].min()
    per_worker = gap.groupby(s["worker"]).sum() / span
    worst = str(per_worker.idxmax())
    value = float(per_worker.max())
    # an asynchronous job's worker whose steps are whole tf.function executions: PS closures
    dispatched = not inp.synchronous and (
        s.loc[s["worker"] == worst, "method"].eq("function").all()
    )
    several = per_worker.size > 1
    return Verdict(
        severity_of(value, t.step_gaps),
        value=value,
        title=f"Gaps between steps on {inp.named(worst)} (work outside the step: callbacks, metrics, Python)"
        if several
        else None,
        expression="float(prepare(frames).steps.sort_values(['worker','start_ns']).groupby('worker').apply(lambda s: (s.start_ns.shift(-1) - s.end_ns).clip(lower=0).sum() / (s.end_ns.max() - s.start_ns.min())).max())",
        evidence={
            "worker": worst,
            "gap_share_by_worker": per_worker.round(4).to_dict(),
            "median_gap_ms": round(float(gap.dropna().median()) / 1e6, 3),
        },
        recommendation=(
            "This worker's steps are closures the ParameterServerStrategy coordinator sends it: "
            "between them it waits for the next one. Run several steps per scheduled function "
            "(a loop over the iterator inside the tf.function), so dispatch overlaps work, or "
            "fewer workers per coordinator."
            if dispatched
            else "Move per-step Python work (callbacks, metric logging, data conversion) into "
            "tf.function or do it every N steps; with Keras, raise steps_per_execution."
        ),
        at_stake_ns=value * inp.step_time_ns / max(1e-9, 1 - value),
        page=_widest_gap(inp, s[s["worker"] == worst], gap[s["worker"] == worst]),
    )


@rule("no_step_markers", "Step markers missing")
def no_step_markers(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    planes = inp.meta.planes["plane"].astype(str)
    if not planes.str.startswith("/").any():  # no XPlane: an Android / Chrome trace
        return skip(
            "not a training capture (Android or Chrome trace): its steps are TFLite "
            "invokes, on the TFLite page"
        )
    m, by_design = _marker_methods(inp)
    missing = markers_missing(inp)
    none = missing[missing["method"] == "none"]
    severity = Severity.HIGH if len(none) else Severity.MODERATE if len(missing) else Severity.NONE
    xla = missing[missing["method"] == "xla_program"]
    if len(xla) and len(xla) == len(missing):
        severity = Severity.MODERATE
        advice = (
            "Steps here are the executions of the program the loop repeats "
            f"({', '.join(sorted(set(inp.steps['name'].astype(str))))}); XProf finds none. Wrap "
            "each step in `with jax.profiler.StepTraceAnnotation('train', step_num=step):` for "
            "step numbers both tools read and steps that include the host's work."
        )
    elif is_jax(inp) and not len(missing) and (inp.methods["method"] == "xla_program").any():
        advice = (
            "Every worker's steps are known: the executions of the program the loop repeats, "
            "numbered by the StepTraceAnnotation markers that dispatched them."
        )
    elif is_jax(inp):
        advice = (
            "Wrap each training step in `with jax.profiler.StepTraceAnnotation('train', "
            "step_num=step):`. Without markers, neither PodScope nor XProf can tell the steps apart."
        )
    elif len(missing):
        advice = (
            "Wrap each training step in `with tf.profiler.experimental.Trace('train', "
            "step_num=step, _r=1):` (Keras fit does this for you). Without markers, PodScope "
            "falls back on repeated tf.function calls or the Python tracer, and XProf finds no "
            "step on these workers."
        )
    elif by_design.any():
        advice = (
            "A ParameterServerStrategy job: its workers' steps are the closures the coordinator "
            "sends (one tf.function execution each, found as such); parameter servers and the "
            "coordinator run no steps. Nothing to mark."
        )
    else:
        advice = "Every worker's steps are known: from markers, or from XProf's own grouping."
    return Verdict(
        severity,
        value=float(len(missing)),
        unit="workers",  # "Step markers missing: 1 worker", not a bare 1
        expression="len(__import__('podscope.analyzers.diagnostics.rules_steps', fromlist=['x']).markers_missing(prepare(frames)))",
        evidence={
            "workers": {r.worker: r.method for r in missing.itertuples()},
            "notes": {r.worker: r.note for r in missing.itertuples()},
            "grouped_by_xprof": m.loc[m["method"] == "group_id", "worker"].tolist(),
            "parameter_server_job_tasks": m.loc[by_design, "worker"].tolist(),
        },
        recommendation=advice,
    )


def _marker_methods(inp: SessionAnalysis) -> tuple[pd.DataFrame, pd.Series]:
    """The step methods with ``python_only`` (Python tracer only: it cannot record markers),
    and which workers have no markers by design: in a ParameterServerStrategy job the workers
    run closures the coordinator sends (their steps are the tf.function executions; no Python
    step to mark), and parameter servers and the coordinator run no steps."""
    m = inp.methods
    python_only = inp.worker_events.set_index("worker")["traced"] == 0
    m = m.assign(python_only=m["worker"].map(python_only).fillna(False).astype(bool))
    closures = not inp.synchronous and bool((m["method"] == "function").any())
    return m, m["method"].isin(["function", "none", "parameter_server", "coordinator"]) & closures


def markers_missing(inp: SessionAnalysis) -> pd.DataFrame:
    """The workers whose steps lack markers where markers could be: neither markers nor
    XProf's own grouping (``group_id``: steps in both tools), not a Python-traced worker of a
    job whose traced workers show markers, not a ParameterServerStrategy task."""
    m, by_design = _marker_methods(inp)
    has_markers = bool((m["method"] == "marker").any())
    # XLA program steps numbered by the JAX markers that dispatched them: marked
    s = inp.steps
    numbered = s["step_num"].notna().groupby(s["worker"]).mean() >= 0.5
    marked = m["worker"].map(numbered).eq(True)  # a worker without steps: not marked
    return m[
        ~m["method"].isin(["marker", "group_id"])
        & ~(m["python_only"] & has_markers)
        & ~by_design
        & ~marked
    ]


@rule("straggler", "Straggler: one worker holds the others back", levels="straggler_score")
def straggler(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The one straggler decision (``analyzers.attribution.stragglers``: the culprit of
    ``roles``, late by its own doing in ≥ 2/3 of its steps and in ≥ 2× as many as any other
    worker) and its mean lateness as a multiple of the median step.
    Not a share: ``0.6× the median step`` means it arrives 60 % of a step late on average."""
    s = inp.stragglers
    if len(s) < 2:
        return skip("needs steps on at least two comparable workers")
    named = s[s["straggler"]]
    top = named.iloc[0] if len(named) else s.iloc[0]
    value = max(0.0, float(top["score"]))
    severity = (
        max(Severity.MODERATE, severity_of(value, t.straggler_score), key=lambda v: v.rank)
        if len(named)
        else Severity.NONE
    )
    return Verdict(
        severity,
        value=value,
        unit="of_step",
        title=f"Straggler: {inp.named(str(top['worker']))} holds the others back"
        if len(named)
        else "Straggler: no worker holds the others back",
        expression="(lambda s: max(0.0, float(s[s.straggler].score.iloc[0] if s.straggler.any() else s.score.iloc[0])))(prepare(frames).stragglers)",
        evidence={
            "mode": s["mode"].iloc[0],
            "straggler": named["worker"].tolist(),
            "tasks": {w: inp.tasks[w][0] for w in named["worker"].astype(str) if w in inp.tasks},
            "late_ms_by_worker": s.set_index("worker")["late_ms"].round(3).to_dict(),
            "late_in_steps_share": round(
                float(
                    inp.roles.set_index("worker")["late_steps"]
                    .div(inp.roles.set_index("worker")["steps"])
                    .get(str(top["worker"]), 0.0)
                ),
                3,
            ),
            "arrived_last_share": s.set_index("worker")["last_share"].round(3).to_dict(),
            "decided_by": "late by ≥ 10 % of the median step in ≥ 2/3 of its steps, and in ≥ 2× "
            "as many steps as any other worker (attribution.roles)",
        },
        recommendation="Find what is different on that worker: its input pipeline, host load (other processes), "
        "a slower device or network; compare its ops with the others on the Ops page."
        if len(named)
        else "No worker arrives late in most steps." + _blind_spot(inp),
        at_stake_ns=value * inp.step_time_ns if len(named) else 0.0,
        page=_straggler_page(inp, named["worker"].tolist()),
    )


def _blind_spot(inp: SessionAnalysis) -> str:
    """What this capture cannot see of a straggler, and which capture would: a worker traced
    with the Python tracer only (the safe plan's non-chief MWMS workers) shows when it calls
    its step function, not how long its work inside takes."""
    arr = inp.arrivals
    if arr.empty or not is_synchronous(arr):
        return ""
    blind = sorted(arr.loc[arr["estimated"].astype(bool), "worker"].astype(str).unique())
    if not blind:
        return ""
    return (
        f" This capture traced {', '.join(blind)} with the Python tracer only: a worker slowed "
        "before its step function (callbacks, Python) would show here, one slowed inside it "
        "would not (its work there is estimated from the traced workers). A capture with "
        "every worker's host trace tells (podscope capture --unsafe-full-trace, with jemalloc "
        "on the workers: see the README)."
    )


def _straggler_page(inp: SessionAnalysis, named: list[str]) -> str:
    """The Pod Viewer at the named straggler's worst step (its longest step)."""
    if not named:
        return "/pod"
    pod = inp.pod[inp.pod["worker"].astype(str) == str(named[0])]
    if pod.empty:
        return page_at("/pod", named[0])
    return page_at(
        "/pod", named[0], int(pod.loc[pod["step_time_ns"].astype(float).idxmax(), "step"])
    )


@rule(
    "device_imbalance",
    "Imbalance between the GPUs of one worker",
    needs=(DEVICE,),
    levels="device_imbalance",
)
def imbalance(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    im = device_imbalance(inp.breakdown)
    if im.empty:
        return skip("no worker has several busy devices in its steps")
    value = float(im["imbalance"].max())
    return Verdict(
        severity_of(value, t.device_imbalance),
        value=value,
        expression="float(__import__('podscope.analyzers.pod', fromlist=['x']).device_imbalance(prepare(frames).breakdown).imbalance.max())",
        evidence={"by_worker": im.set_index("worker")["imbalance"].round(3).to_dict()},
        recommendation="Replicas should do the same work: check per-replica batch sizes and data sharding, and "
        "host-thread contention when launching (see the launch skew finding).",
    )


def _widest_gap(inp: SessionAnalysis, steps: pd.DataFrame, gap: pd.Series) -> str:
    """The timeline at the step that ends with the widest gap after it, on its worker."""
    if gap.dropna().empty:
        return "/timeline"
    row = steps.loc[gap.idxmax()]
    step = step_at(inp.aligned, row["worker"], int(row["end_ns"]) - 1)
    return page_at("/timeline", row["worker"], step)
