"""Rules on host-side execution: eager ops, tiny ops, the input pipeline, recompilation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers._match import matches
from podscope.analyzers.diagnostics.base import (
    Severity,
    Thresholds,
    Verdict,
    page_at,
    rule,
    severity_of,
    skip,
    step_at,
)
from podscope.analyzers.diagnostics.questions import input_gate, quiet_because_input
from podscope.analyzers.rule_inputs import COMPILE, EAGER_OP
from podscope.analyzers.session import SessionAnalysis


@rule("eager", "Ops run eagerly (outside tf.function)", levels="eager")
def eager(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Eager op time: ops with ``is_eager`` (XProf), or TF 2.21's ``EagerLocalExecute: <Op>``
    events (CPU), as a share of all op time."""
    ev = inp.rule_events
    ops = inp.op_summary
    if ops.empty:
        return skip("no TF op events in this trace")
    eager_ev = ev[matches(ev["name"], EAGER_OP, how="match")]
    eager_ps = float(eager_ev["dur_ps"].sum() + ops.loc[ops["eager"], "dur_ps"].sum())
    value = eager_ps / float(ops["dur_ps"].sum() + eager_ev["dur_ps"].sum())
    top = (
        eager_ev["name"].astype(str).str.removeprefix("EagerLocalExecute: ").value_counts().head(5)
    )
    return Verdict(
        severity_of(value, t.eager),
        value=value,
        expression="(lambda i: (lambda e: (e.dur_ps.sum() + i.ops.dur_ps[i.ops.is_eager.fillna(False).astype(bool)].sum()) / (i.ops.dur_ps.sum() + e.dur_ps.sum()))(i.frames.events[i.frames.events.name.astype(str).str.match(r'EagerLocalExecute: (?!__inference)')]))(prepare(frames))",
        evidence={"eager_ops": top.to_dict(), "eager_ms": round(eager_ps / 1e9, 3)},
        recommendation="Wrap the training step in tf.function (Keras: do not set run_eagerly=True); eager "
        "dispatch costs tens of µs per op.",
        at_stake_ns=value * inp.step_time_ns * 0.5,
        page="/ops",
    )


@rule("tiny_ops", "Many tiny ops per step", levels="tiny_ops_per_step")
def tiny_ops(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    note = (
        "TF's host tracer records cheap ops only at host_tracer_level 3; at the default level 2 most "
        "tiny ops are invisible, so this count is a lower bound."
    )
    per = inp.ops_per_step
    if per.empty:
        return skip("no steps with op events")
    ops = inp.op_summary
    per_worker = per.groupby("worker")["per_step"].sum()
    value = float(per_worker.max())
    short = float(ops["n_tiny"].sum() / max(1, ops["n"].sum()))
    severity = severity_of(value, t.tiny_ops_per_step) if short >= 0.5 else Severity.NONE
    top = per[per["worker"] == per_worker.idxmax()].head(5)
    return Verdict(
        severity,
        value=value,
        unit="per_step",
        expression="float(prepare(frames).ops_per_step.groupby('worker').per_step.sum().max())",
        evidence={
            "ops_per_step_by_worker": per_worker.round(1).to_dict(),
            "short_op_share": round(short, 3),
            "top_types_per_step": dict(zip(top["op_type"], top["per_step"].round(1), strict=True)),
            "note": note,
        },
        recommendation="Fuse small ops: compile the step with XLA (tf.function(jit_compile=True)), vectorize loops "
        "over tensors, use bigger batches; each op costs dispatch (and on GPU ~20–40 µs launch).",
        at_stake_ns=value * 5_000.0,
        page="/ops",
    )


@rule(
    "slow_iterator",
    "IteratorGetNext is slow (tf.data is a bottleneck)",
    levels="iterator_get_next_us",
)
def slow_iterator(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Mean IteratorGetNext time; a finding only where input matters (``input_gate``): a
    slow call that prefetching hides costs the step nothing."""
    ev = inp.rule_events
    it = ev[matches(ev["name"], "IteratorGetNext", how="startswith")]
    if it.empty:
        return skip("no IteratorGetNext events (no tf.data input in the trace)")
    gate = input_gate(inp, t)
    if isinstance(gate, Verdict):
        return gate
    matters, share = gate
    value = float(it["dur_ps"].mean() / 1e6)
    severity = (
        Severity.NONE
        if value <= t.iterator_get_next_us or not matters
        else (Severity.HIGH if value >= 10 * t.iterator_get_next_us else Severity.MODERATE)
    )
    return Verdict(
        severity,
        value=value,
        unit="us",
        title=None if matters else "IteratorGetNext: input keeps up",
        expression="float(frames.events[frames.events.name.astype(str).str.startswith('IteratorGetNext')].dur_ps.mean() / 1e6)",
        evidence={
            "calls": len(it),
            "mean_us": round(value, 1),
            "p95_us": round(float(np.percentile(it["dur_ps"], 95)) / 1e6, 1),
            **share,
        },
        recommendation="More than 50 µs per IteratorGetNext means the step waits for data: parallelize map, "
        "add prefetch, cache, or move preprocessing offline."
        if matters
        else quiet_because_input(share),
        page=_slowest(inp, it, "IteratorGetNext"),
    )


@rule("no_prefetch", "Input pipeline without prefetch")
def no_prefetch(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    ev = inp.rule_events
    iters = ev[matches(ev["name"], "Iterator::", how="startswith")]
    if iters.empty:
        return skip("no tf.data iterator events in the trace")
    gate = input_gate(inp, t)
    if isinstance(gate, Verdict):
        return gate
    matters, share = gate
    has = bool(matches(iters["name"], "Prefetch").any())
    return Verdict(
        Severity.NONE if has or not matters else Severity.MODERATE,
        value=float(not has),
        unit="flag",
        expression="float(not frames.events[frames.events.name.astype(str).str.startswith('Iterator::')].name.astype(str).str.contains('Prefetch').any())",
        evidence={
            "pipelines": iters["name"]
            .astype(str)
            .str.split("::")
            .str[:4]
            .str.join("::")
            .value_counts()
            .head(3)
            .to_dict(),
            **share,
        },
        recommendation="End the input pipeline with .prefetch(tf.data.AUTOTUNE) so input overlaps the step."
        if matters or has
        else quiet_because_input(share),
        page="/timeline?q=Iterator",
    )


@rule("xla_recompilation", "Compilations after warm-up")
def recompilation(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    ev = inp.rule_events
    steps = inp.steps
    comp = ev[matches(ev["name"], COMPILE) & ~matches(ev["name"], "$", how="startswith")]
    if steps.empty:
        return skip("no steps: cannot tell warm-up from steady state")
    first_end = steps.groupby("worker")["end_ns"].min()
    late = comp[
        comp["start_ns"].to_numpy()
        > comp["worker"].astype(str).map(first_end).astype(float).fillna(np.inf).to_numpy()
    ]
    value = float(len(late))
    return Verdict(
        Severity.MODERATE if value else Severity.NONE,
        value=value,
        unit="count",
        expression="float(len((lambda i: i.frames.events[i.frames.events.name.astype(str).str.contains('(?i)(?:xlacompile|compile_ondemand|compilation|__inference.*compile)') & ~i.frames.events.name.astype(str).str.startswith('$') & (i.frames.events.start_ns.to_numpy() > i.frames.events.worker.astype(str).map(i.steps.groupby('worker').end_ns.min()).astype(float).fillna(float('inf')).to_numpy())])(prepare(frames))))",
        evidence={
            "compiles_after_first_step": int(value),
            "names": late["name"].astype(str).value_counts().head(5).to_dict(),
        },
        recommendation="Recompiling every few steps usually means changing shapes or Python values passed to a "
        "tf.function: pad to fixed shapes, pass tensors not Python scalars, set input_signature.",
        page=_slowest(inp, late, "ompil") if len(late) else "/timeline?q=ompil",
    )


@rule("cpu_only", "CPU-only trace")
def cpu_only(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Whether the trace has accelerators, and which of them ran anything (device events,
    ``SessionAnalysis.devices``): a fact, never a problem."""
    if not inp.has_device:
        return Verdict(
            value=1.0,
            unit="flag",
            expression="float(not frames.planes.plane.astype(str).str.match('/device:(?:GPU|TPU)').any())",
            evidence={"planes": sorted(inp.meta.planes["plane"].astype(str).unique())},
            recommendation="No accelerator planes in this trace: the rules about devices are "
            "listed as not applicable, each with its reason.",
        )
    d = inp.devices
    busy, idle = d[~d["idle"]], d[d["idle"]]
    kind = "TPU" if d["device"].str.contains("TPU").any() else "GPU"
    return Verdict(
        title=f"{kind}s: {len(busy)} busy, {len(idle)} idle",
        value=float(len(busy)),
        unit="count",
        expression="int((~prepare(frames).devices.idle).sum())",
        evidence={
            "busy_ms_by_device": {f"{r.worker} {r.device}": r.busy_ms for r in busy.itertuples()},
            "idle": [f"{r.worker} {r.device}" for r in idle.itertuples()],
        },
    )


def _slowest(inp: SessionAnalysis, events: pd.DataFrame, q: str) -> str:
    """The timeline at the longest of ``events`` in a whole step (its worker and that step),
    else at the longest of all (a partial first or last step, or between steps)."""
    longest = events.nlargest(64, "dur_ps")
    for e in longest.itertuples():
        step = step_at(inp.aligned, e.worker, int(e.start_ns))
        if step is not None:
            return page_at("/timeline", e.worker, step, q=q)
    return page_at("/timeline", longest["worker"].iloc[0], None, q=q)
