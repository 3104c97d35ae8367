"""Rules on why a multi-worker job is slow: who holds the others back and why, who waits in
the collectives, and which input stage cannot keep up."""

from __future__ import annotations

import pandas as pd

from podscope.analyzers.attribution import MIXED, worker_causes
from podscope.analyzers.diagnostics.base import (
    Severity,
    Thresholds,
    Verdict,
    is_torch,
    page_at,
    rule,
    severity_of,
    skip,
)
from podscope.analyzers.diagnostics.questions import input_share
from podscope.analyzers.diagnostics.speech import cause_words
from podscope.analyzers.input_pipeline import suggestion
from podscope.analyzers.pod import is_synchronous
from podscope.analyzers.session import SessionAnalysis


@rule(
    "straggler_cause",
    "Why the slow worker is slow, and what it costs the others",
    levels="straggler_wait",
)
def straggler_cause(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The culprit (late in most steps), its cause (``worker_causes``: one component ≥ 2/3 of
    its late steps' summed excess, else mixed) and the victims' wait as a share of their step
    time."""
    roles = inp.roles
    if len(roles) < 2:
        return skip("needs steps on at least two workers")
    culprits = roles[roles["role"] == "culprit"]
    victims = roles[roles["role"] == "victim"]
    value = float(victims["wait_share"].max()) if len(victims) else 0.0
    if culprits.empty:
        return Verdict(
            Severity.NONE,
            value=value,
            expression="float(prepare(frames).roles.query(\"role == 'victim'\").wait_share.max() if (prepare(frames).roles.role == 'victim').any() else 0.0)",
            evidence={"late_steps": int((inp.slow_steps["role"] == "late").sum())},
            recommendation="No worker arrives late in most steps.",
        )
    worker = str(culprits["worker"].iloc[0])
    late = inp.slow_steps[(inp.slow_steps["worker"] == worker) & (inp.slow_steps["role"] == "late")]
    named = worker_causes(late).loc[worker]
    worst = late.iloc[0]
    cause = str(named["cause"])
    said, advice = cause_words(cause, torch=is_torch(inp))
    how = (
        f"{named['share']:.0%} of its lateness"
        if cause != MIXED
        else "no component is two thirds of its lateness"
    )
    # Synchronous: what it costs is the victims' wait (none waiting: nothing held back).
    # Asynchronous: its own extra time per step, as a share of the median step.
    expression = "float(prepare(frames).roles.query(\"role == 'victim'\").wait_share.max() if (prepare(frames).roles.role == 'victim').any() else 0.0)"
    if not is_synchronous(inp.arrivals):
        value = float(late["excess_ns"].mean()) / float(inp.arrivals["step_time_ns"].median())
        expression = f"(lambda a: float(a.slow_steps.query(\"role == 'late' and worker == '{worker}'\").excess_ns.mean() / a.arrivals.step_time_ns.median()))(prepare(frames))"
    return Verdict(
        severity_of(value, t.straggler_wait),
        value=value,
        expression=expression,
        evidence={
            "culprit": worker,
            "task": inp.tasks.get(worker, ("", ""))[0],
            "late_in_steps": f"{len(late)} of {int(culprits['steps'].iloc[0])}",
            "cause": cause,
            "cause_share_of_excess": round(float(named["share"]), 3),
            "late_steps_by_cause": {
                str(k): int(v) for k, v in late["cause"].value_counts().items()
            },
            "excess_ms_per_late_step": round(float(late["excess_ns"].mean()) / 1e6, 3),
            "worst_step": {
                "step": int(worst["step"]),
                "excess_ms": round(float(worst["excess_ns"]) / 1e6, 3),
                "components": worst["components"],
                "ops": worst["ops"],
            },
            "victims_wait_ms_per_step": victims.set_index("worker")["mean_wait_ms"]
            .round(3)
            .to_dict(),
        },
        recommendation=f"{inp.named(worker)} is the culprit; the others wait for it. Cause: {said} ({how}): "
        f"{advice}",
        at_stake_ns=float(victims["mean_wait_ms"].mean()) * 1e6 if len(victims) else 0.0,
        page=page_at("/timeline", worker, int(worst["step"])),
    )


def _measured(inp: SessionAnalysis) -> pd.DataFrame | Verdict:
    """The collective summary's workers with measured instances (≥ 2 traced participants),
    or the not-applicable verdict that says why there are none."""
    s = inp.collective_summary
    if s.empty:
        calls = inp.collective_calls
        if len(calls):
            kinds = ", ".join(sorted(set(calls["kind"])))
            return skip(
                f"{len(calls)} collective calls ({kinds}) in the trace, none inside a step: "
                "they ran outside the program the steps repeat"
            )
        return skip("no collective ops or kernels in this trace")
    measured = s[s["measured"] > 0]
    if measured.empty:
        return skip(
            "each collective has one traced participant (the safe plan traces the chief's ops "
            "alone): from one side, waiting for a slow peer and a slow collective look the "
            "same; the straggler cause finding estimates waits from step starts"
        )
    return measured


def _medians(inp: SessionAnalysis) -> tuple[float, float]:
    """Median latency and arrival skew (ns) of the instances with ≥ 2 traced participants."""
    inst = inp.collectives.dropna(subset=["skew_ns"])
    return float(inst["latency_ns"].median()), float(inst["skew_ns"].median())


@rule("collective_wait", "Workers wait in collectives for a late participant", levels="collectives")
def collective_wait(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Measured where a collective has at least two traced participants: the largest share of
    a worker's step time spent waiting for the last arriver."""
    measured = _measured(inp)
    if isinstance(measured, Verdict):
        return measured
    top = measured.loc[measured["wait_share"].idxmax()]
    value = float(top["wait_share"])
    latency, skew = _medians(inp)
    last = inp.collectives["last_arriver"].value_counts(normalize=True)
    return Verdict(
        severity_of(value, t.collectives),
        value=value,
        expression="float(prepare(frames).collective_summary.query('measured > 0').wait_share.max())",
        evidence={
            "wait_share_by_worker": measured.set_index("worker")["wait_share"].round(4).to_dict(),
            "arrived_last_most": str(last.index[0]) if len(last) else "",
            "arrived_last_share": round(float(last.iloc[0]), 3) if len(last) else 0.0,
            "median_skew_ms": round(skew / 1e6, 3),
            "median_latency_ms": round(latency / 1e6, 3),
        },
        recommendation="Workers wait at the collectives for the last participant to arrive: "
        "find what delays it — a late worker (the straggler finding), or a slow link that "
        "finishes its previous collective late (the slow-collective finding, when it fires).",
        at_stake_ns=float(top["wait_ms_per_step"]) * 1e6,
        page=page_at("/pod", str(top["worker"])),
    )


@rule(
    "slow_collective",
    "The collectives themselves are slow (not a late worker)",
    levels="collective_latency",
)
def slow_collective(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Measured where a collective has at least two traced participants: the share of a
    worker's step spent in collectives *after* the last participant arrived (moving data and
    round trips, not waiting); a finding only when the step is communication-bound: that
    latency, per step, is at least ``latency_over_own_work`` (1.5) times the workers' own work
    per step. A late worker makes the others *wait* (arrival skew) but leaves the latency
    small; arrival skew itself is no yardstick, as a slow link delays the arrivals at the next
    collective too (4 workers, 56 ms per chunk: latency 1.3× the skew, 3.8× the own work; the
    2-core baseline: 0.58× its own work)."""
    measured = _measured(inp)
    if isinstance(measured, Verdict):
        return measured
    top = measured.loc[measured["transfer_share"].idxmax()]
    value = float(top["transfer_share"])
    inst = inp.collectives.dropna(subset=["skew_ns"])
    latency, skew = _medians(inp)
    per_step = float(inst.groupby("step")["latency_ns"].sum().median())
    arr = inp.arrivals
    own = float(arr.loc[~arr["estimated"], "own_ns"].median()) if len(arr) else float("nan")
    ratio = per_step / own if own > 0 else float("inf")
    # The collective itself is the problem only when the step is communication-bound (else
    # waiting for a late participant explains it: the straggler and collective_wait findings).
    dominant = ratio >= t.latency_over_own_work
    return Verdict(
        severity_of(value, t.collective_latency) if dominant else Severity.NONE,
        value=value,
        expression="float(prepare(frames).collective_summary.query('measured > 0').transfer_share.max())",
        evidence={
            "transfer_share_by_worker": measured.set_index("worker")["transfer_share"]
            .round(4)
            .to_dict(),
            "latency_ms_per_step": round(per_step / 1e6, 3),
            "own_work_ms_per_step": round(own / 1e6, 3),
            "latency_over_own_work": round(ratio, 2),
            "communication_bound_from": t.latency_over_own_work,
            "median_latency_ms": round(latency / 1e6, 3),
            "median_skew_ms": round(skew / 1e6, 3),
            "instances_per_step": round(len(inst) / max(1, inst["step"].nunique()), 2),
        },
        recommendation="Every participant arrives in time and the collective still takes long: "
        "the network path (or interconnect) is slow or the collectives are many and small. "
        "Check the link between the workers; pack gradients into fewer all-reduces "
        "(tf.distribute.experimental.CommunicationOptions(bytes_per_pack=…)), all-reduce in "
        "fp16 under mixed precision, or use NCCL on GPUs.",
        at_stake_ns=float(top["transfer_ms_per_step"]) * 1e6 * 0.5,
        page=page_at("/workers"),
    )


@rule("input_stage", "One input pipeline stage cannot keep up", levels="input_stage")
def input_stage(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Can the input pipeline keep up? The busiest stage's work per step, over the mean step
    time: at 1× it produces a step's input no faster than a step takes, and every step waits
    for it however much is prefetched — in IteratorGetNext, or, in a synchronous job, in the
    all-reduce where the workers wait for each other's late batch (then the input share stays
    low and the wait shows as collectives). Per step, not per batch the iterator hands out: a
    distributed dataset that rebatches hands out two per step. Work over the capture's steps
    (every step found, the partial first and last included, as the work is). Work, not wall
    time: a stage with N parallel calls keeps up below N×."""
    it = inp.iterators
    summary = inp.input_pipeline
    if it.empty:
        return skip("no tf.data iterator events (TF records them at host_tracer_level ≥ 2)")
    rows = summary[summary["bottleneck"] != ""]
    if rows.empty or inp.pod.empty:
        return skip("no steps on a worker with tf.data events")
    step_ms = inp.pod.groupby(inp.pod["worker"].astype(str))["step_time_ns"].mean() / 1e6
    work = it.groupby(["worker", "iterator"])["work_ps"].sum()
    steps = inp.steps.groupby(inp.steps["worker"].astype(str)).size()
    per_step = {
        r.worker: float(work[(r.worker, r.bottleneck)]) / 1e9 / max(1, int(steps.get(r.worker, 1)))
        for r in rows.itertuples()
    }
    shares = {w: ms / float(step_ms.get(w, float("nan"))) for w, ms in per_step.items()}
    worker = max(shares, key=lambda w: shares[w])
    r = rows.set_index("worker").loc[worker]
    value = shares[worker]
    label = (
        f"{r['bottleneck_stage']} ({r['user_name']})" if r["user_name"] else r["bottleneck_stage"]
    )
    severity = severity_of(value, t.input_stage)
    waits = input_share(inp)
    hidden = (
        f" The step hardly waits in IteratorGetNext ({100 * waits:.2f} % of step time): in a "
        "synchronous job the late batch shows as the other workers' wait in the all-reduce."
        if waits is not None and waits < t.input[0]
        else ""
    )
    return Verdict(
        severity,
        value=value,
        unit="of_step",
        title="One input pipeline stage cannot keep up"
        if value >= t.input_stage[1]
        else "An input pipeline stage is close to the step time"
        if severity != Severity.NONE
        else "Input pipeline stages keep up",
        expression="(lambda a, w, n: max(w[(r.worker, r.bottleneck)] / 1e9 / max(1, int(n.get(r.worker, 1))) / (a.pod[a.pod.worker.astype(str) == r.worker].step_time_ns.mean() / 1e6) for r in a.input_pipeline.query(\"bottleneck != ''\").itertuples()))(prepare(frames), prepare(frames).iterators.groupby(['worker','iterator']).work_ps.sum(), prepare(frames).steps.groupby(prepare(frames).steps.worker.astype(str)).size())",
        evidence={
            "worker": worker,
            "stage": label,
            "iterator": r["bottleneck"],
            "stage_ms_per_step": round(per_step[worker], 3),
            "step_ms": round(float(step_ms[worker]), 3),
            "share_of_pipeline_work": round(float(r["bottleneck_work_share"]), 3),
            "input_share_of_step": round(waits, 4) if waits is not None else None,
            "stage_work_of_step_by_worker": {w: round(v, 3) for w, v in shares.items()},
        },
        recommendation=f"Stage {label}: {suggestion(str(r['bottleneck_stage']))}{hidden}"
        if severity != Severity.NONE
        else f"The busiest stage, {label}, works {per_step[worker]:.1f} ms per step against "
        f"a {float(step_ms[worker]):.1f} ms step: the pipeline keeps up.",
        at_stake_ns=max(0.0, per_step[worker] - t.input_stage[0] * float(step_ms[worker])) * 1e6,
        page=page_at("/timeline", worker, None, q=str(r["bottleneck"])),
    )


@rule("memory_leak", "Memory grows step after step (a leak)")
def memory_leak(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Growth per step of the allocator whose heap rises in most steps while allocations
    outnumber deallocations (``analyzers.memory.memory_summary``)."""
    report = inp.memory_report
    if report.empty:
        return skip(
            "no allocator events (TF records them for BFC allocators: GPU hosts, or CPU with "
            "TF_CPU_ALLOCATOR_USE_BFC=true)"
        )
    if report["growth_bytes_per_step"].isna().all():
        return skip("fewer than three steps on the workers with allocator events")
    leaks = report[report["leak"]]
    worst = (
        (leaks if len(leaks) else report)
        .sort_values("growth_bytes_per_step", na_position="first")
        .iloc[-1]
    )
    value = float(worst["growth_bytes_per_step"])
    return Verdict(
        Severity.HIGH
        if len(leaks) and len(leaks) == len(report)
        else Severity.MODERATE
        if len(leaks)
        else Severity.NONE,
        value=value,
        unit="bytes_per_step",
        expression="float(prepare(frames).memory_report.growth_bytes_per_step.max())"
        if not len(leaks)
        else "float(prepare(frames).memory_report.query('leak').growth_bytes_per_step.max())",
        evidence={
            "worker": worst["worker"],
            "allocator": worst["allocator"],
            "growth_mb_per_step": round(value / 1e6, 4),
            "rising_share": round(float(worst["rising_share"]), 3),
            "net_allocation_share": round(float(worst["net_allocs_share"]), 3),
            "peak_mb": round(float(worst["peak_bytes"]) / 1e6, 3),
            "live_at_peak": worst["top_live"],
            "leaking": [f"{r.worker} {r.allocator}" for r in leaks.itertuples()],
        },
        recommendation="Something keeps tensors alive across steps: a Python list of tensors "
        "(metrics, losses kept as tensors instead of floats), a growing tf.TensorArray or "
        "cache; the live blocks at the peak name the ops that allocated them.",
        page=page_at("/ops", worst["worker"]),
    )


@rule("ps_imbalance", "One parameter server carries most of the load", levels="ps_imbalance")
def ps_imbalance(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The busiest parameter server's busy time over the mean of all parameter servers
    (1 = balanced; n = all the load on one of n)."""
    ps = inp.ps_balance
    if len(ps) < 2:
        return skip(
            "needs at least two parameter-server tasks in the capture (tasks that apply "
            "variable updates, compute no gradients and run no training steps)"
        )
    value = float(ps["busy_ms"].max() / ps["busy_ms"].mean())
    top = ps.iloc[0]
    # what the busiest PS costs beyond a fair share, per training step of the job's workers
    worker_steps = max(1, len(inp.pod))
    excess_ms = float(ps["busy_ms"].max() - ps["busy_ms"].mean()) / worker_steps
    return Verdict(
        severity_of(value, t.ps_imbalance),
        value=value,
        unit="ratio",
        expression="float(prepare(frames).ps_balance.busy_ms.max() / prepare(frames).ps_balance.busy_ms.mean())",
        evidence={
            "busiest": top["worker"],
            "load_share": round(float(top["load_share"]), 3),
            "busy_ms_by_ps": ps.set_index("worker")["busy_ms"].round(1).to_dict(),
            "variables_by_ps": ps.set_index("worker")["variables"].to_dict(),
            "excess_busy_ms_per_worker_step": round(excess_ms, 3),
        },
        at_stake_ns=excess_ms * 1e6,
        recommendation="Spread the variables: ParameterServerStrategy(variable_partitioner="
        "tf.distribute.experimental.partitioners.MinSizePartitioner(...)) shards large "
        "variables across parameter servers; big embeddings should be partitioned.",
        page=page_at("/ops", top["worker"]),
    )
