"""Findings, thresholds, severities and the rule registry.

A rule is a function (analysis, thresholds) → ``Verdict``, registered with what it needs::

    @rule("tensor_cores", "Tensor Cores unused by eligible ops", needs=(DEVICE,))
    def tensor_cores(a: SessionAnalysis, t: Thresholds) -> Verdict:
        ...
        return Verdict(severity_of(value, t.tensor_cores), value=value, ...)

The registry turns the verdict into a ``Finding`` with the rule's id and title, and writes the
not-applicable finding itself when a requirement (``DEVICE``, ``SPLIT``…) does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

import numpy as np

from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers.schema import TraceFrames

GUIDE = "https://www.tensorflow.org/guide/gpu_performance_analysis"


class Severity(str, Enum):
    """How bad a finding is; compares equal to its value (``Severity.HIGH == "high"``)."""

    NONE = "none"
    MODERATE = "moderate"
    HIGH = "high"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 for none, 1 moderate, 2 high."""
        return list(Severity).index(self)


@dataclass(frozen=True)
class Thresholds:
    """Rule thresholds; shares of step time unless named otherwise. Defaults are XProf's where
    XProf has one (input/output 5 % / 20 %, launch / all others / collectives 3 % / 15 %,
    16-bit share 10 %, eager 10 %, IteratorGetNext 50 µs). A tiny op is one under 20 µs
    (``analyzers.rule_inputs.TINY_OP_PS``: op summaries are counted per worker with it)."""

    input: tuple[float, float] = (0.05, 0.20)
    output: tuple[float, float] = (0.05, 0.20)
    kernel_launch: tuple[float, float] = (0.03, 0.15)
    all_others: tuple[float, float] = (0.03, 0.15)
    collectives: tuple[float, float] = (0.03, 0.15)
    step_gaps: tuple[float, float] = (0.05, 0.20)
    #: an XLA program step's device time with no op running (JAX: the host between calls)
    device_idle: tuple[float, float] = (0.10, 0.30)
    #: XLA copies between host memory and the device (host offload), share of step time
    host_offload: tuple[float, float] = (0.05, 0.20)
    eager: tuple[float, float] = (0.10, 0.50)
    half_precision_share: float = 0.10
    iterator_get_next_us: float = 50.0
    tiny_ops_per_step: tuple[float, float] = (200.0, 1000.0)
    copies_per_step: tuple[float, float] = (10.0, 100.0)
    straggler_score: tuple[float, float] = (0.25, 0.5)
    device_imbalance: tuple[float, float] = (0.2, 0.5)
    launch_skew: tuple[float, float] = (0.05, 0.2)
    memory_use: tuple[float, float] = (0.8, 0.9)
    #: the busiest input stage's work per batch over the step time: close to it, and at or
    #: above it (the pipeline cannot keep up; high from 0.95 for measurement noise)
    input_stage: tuple[float, float] = (0.8, 0.95)
    #: a GPU's idle time right after the host waited for it (``.item()``, a synchronize),
    #: share of step time
    host_sync: tuple[float, float] = (0.05, 0.20)
    #: a GPU's span with no event, waiting for its host's launches (HTA's idle and host wait),
    #: where most kernels run shorter than their launch call
    launch_bound: tuple[float, float] = (0.10, 0.30)
    #: the host's time in host-to-device copies from pageable memory, share of the GPU's span
    blocking_copies: tuple[float, float] = (0.02, 0.10)
    #: busiest parameter server's busy time / the mean over parameter servers
    ps_imbalance: tuple[float, float] = (1.6, 1.8)
    #: time in collectives after every participant arrived, share of step time
    collective_latency: tuple[float, float] = (0.15, 0.30)
    #: ... when the collectives' latency per step is at least this many times the workers' own
    #: work per step (communication-bound)
    latency_over_own_work: float = 1.5
    #: a victim's wait for the culprit, share of its step time
    straggler_wait: tuple[float, float] = (0.1, 0.3)
    allreduce_per_step: float = 1.0
    #: share of Tensor-Core-eligible kernel time without Tensor Cores
    tensor_cores: tuple[float, float] = (0.10, 0.50)
    #: share of GEMM/conv kernel time in plain fp32 on an Ampere-or-newer GPU (moderate)
    tf32_fp32_share: float = 0.50
    #: share of op self time in compute-heavy ops placed on the host of a GPU worker (moderate)
    ops_on_host: float = 0.05


@dataclass
class Finding:
    """One rule's verdict.

    Attributes:
        rule_id, title: what was checked.
        severity: none, moderate or high.
        applies: False when the rule cannot judge this trace (``reason`` says why).
        value: the main number (a share, a count, µs…), reproduced by ``expression``.
        evidence: further numbers and the steps / workers / ops involved.
        recommendation: what to do, in plain words.
        doc: the guide section.
        at_stake_ns: estimated time per step that fixing it could save (for ranking).
        page: where the evidence is shown (``/pod``, ``/ops``, ``/timeline?q=…``).
        unit: what ``value`` counts (``UNITS``): a share of something (0–1), a count (of
            workers: ``workers``), µs, or a count per step and device; front ends format it
            with it.
    """

    rule_id: str
    title: str
    severity: Severity = Severity.NONE
    applies: bool = True
    reason: str = ""
    value: float | None = None
    expression: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""
    doc: str = GUIDE
    at_stake_ns: float = 0.0
    page: str = "/pod"
    unit: str = "share"


#: What a finding's ``value`` can be: a share (0–1), a count, microseconds, a count per step
#: (per device where the rule says so), a yes/no (1/0), a ratio (×), bytes per step, or a
#: multiple of the median step time (``1.14× the median step``: a score, not a share).
UNITS = (
    "share",
    "count",
    "workers",
    "us",
    "per_step",
    "flag",
    "ratio",
    "bytes_per_step",
    "of_step",
)


def page_at(path: str, worker: object = None, step: object = None, **query: object) -> str:
    """A page link at a worker and step (``/pod?worker=w1&step=3``): where the evidence is."""
    from urllib.parse import urlencode

    args = {"worker": worker, "step": step, **query}
    shown = {k: str(v) for k, v in args.items() if v is not None}
    return f"{path}?{urlencode(shown)}" if shown else path


def worst_step(b: Any, column: str) -> tuple[object, object]:
    """(worker, aligned step) of the breakdown row where ``column`` takes the largest share of
    the step; (None, None) without rows."""
    if b is None or not len(b):
        return None, None
    share = b[column].astype(float) / b["step_time_ns"].astype(float).where(b["step_time_ns"] > 0)
    if share.isna().all():
        return None, None
    row = b.loc[share.idxmax()]
    return str(row["worker"]), int(row["step"])


def step_at(aligned: Any, worker: object, t_ns: int) -> int | None:
    """The aligned step of ``worker`` that holds time ``t_ns`` (None when none does)."""
    mine = aligned[aligned["worker"].astype(str) == str(worker)]
    hit = mine[(mine["start_ns"] <= t_ns) & (mine["end_ns"] > t_ns)]
    return int(hit["step"].iloc[0]) if len(hit) else None


def severity_of(value: float | None, levels: tuple[float, float]) -> Severity:
    """``HIGH`` at or above ``levels[1]``, ``MODERATE`` at or above ``levels[0]``, else
    ``NONE`` (also for a missing value)."""
    if value is None or np.isnan(value):
        return Severity.NONE
    if value >= levels[1]:
        return Severity.HIGH
    return Severity.MODERATE if value >= levels[0] else Severity.NONE


@dataclass(frozen=True)
class Verdict:
    """What a rule found; the registry adds the rule's id and title (see ``Finding``)."""

    severity: Severity = Severity.NONE
    value: float | None = None
    expression: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""
    doc: str = GUIDE
    at_stake_ns: float = 0.0
    page: str = "/pod"
    unit: str = "share"
    applies: bool = True
    reason: str = ""
    #: replaces the rule's title when the title depends on what was found
    title: str | None = None


def skip(reason: str) -> Verdict:
    """The verdict of a rule that cannot judge this trace, for a reason found while judging
    (requirements known up front belong in the rule's ``needs``)."""
    return Verdict(applies=False, reason=reason)


@dataclass(frozen=True)
class Need:
    """A precondition of a rule, and the reason a finding gives when it does not hold."""

    holds: Callable[[SessionAnalysis], bool]
    reason: str

    def because(self, reason: str) -> Need:
        """The same precondition with another reason."""
        return Need(self.holds, reason)


#: Device (GPU/TPU) planes in the trace.
DEVICE = Need(lambda a: a.has_device, "CPU-only trace: a rule for accelerator devices")
#: Steps found and aligned on every worker (the breakdown may still be unknown).
STEPS = Need(lambda a: not a.aligned.empty, "no steps found in this trace")
#: At least one step with a known breakdown.
SPLIT = Need(
    lambda a: not a.split.empty,
    "no step with a known breakdown (no steps found, or only Python-tracer workers)",
)

RuleFn = Callable[[SessionAnalysis, Thresholds], Verdict]


@dataclass(frozen=True)
class Rule:
    """A registered rule: its id, title, requirements and the function that judges."""

    rule_id: str
    title: str
    needs: tuple[Need, ...]
    judge: RuleFn
    #: the ``Thresholds`` field that decides its severity (shown with every finding of it)
    levels: str | None = None

    def __call__(self, analysis: SessionAnalysis, thresholds: Thresholds) -> Finding:
        """The finding, in the capture's terms (``speech``): not applicable where the rule is
        about another framework's or vendor's feature, or for the first unmet requirement;
        else the verdict."""
        from podscope.analyzers.diagnostics.speech import in_its_terms, scope_reason

        reason = scope_reason(analysis, self.rule_id)
        for need in self.needs:
            if reason is not None:
                break
            if not need.holds(analysis):
                reason = need.reason
        if reason is not None:
            texts = in_its_terms(
                analysis, {"rule_id": self.rule_id, "title": self.title, "reason": reason}
            )
            return Finding(self.rule_id, texts["title"], applies=False, reason=texts["reason"])
        judged = self.judge(analysis, thresholds)
        # a shallow copy: ``plain`` rebuilds the evidence (``asdict``'s deep copy of a pod's
        # evidence, 45,000 objects, took 0.3 s at 2,048 hosts)
        verdict = {f.name: getattr(judged, f.name) for f in fields(judged)}
        verdict["evidence"] = dict(verdict["evidence"])
        verdict["title"] = verdict["title"] or self.title
        if self.levels and verdict["applies"]:
            limit = getattr(thresholds, self.levels)
            verdict["evidence"]["thresholds"] = list(limit) if isinstance(limit, tuple) else [limit]
        verdict["evidence"] = plain(verdict["evidence"])
        if verdict["recommendation"] and self.rule_id in JAX_ADVICE and is_jax(analysis):
            verdict["recommendation"] = JAX_ADVICE[self.rule_id]
            verdict["doc"] = JAX_GUIDE
        elif verdict["recommendation"] and self.rule_id in PYTORCH_ADVICE and is_torch(analysis):
            verdict["recommendation"] = PYTORCH_ADVICE[self.rule_id]
            verdict["doc"] = PYTORCH_GUIDE
        if verdict["doc"] == GUIDE:  # TensorFlow's guide only for TensorFlow captures
            verdict["doc"] = guide_for(analysis)
        if verdict["value"] is not None:
            verdict["value"] = float(verdict["value"])
        verdict = in_its_terms(analysis, {"rule_id": self.rule_id, **verdict})
        verdict.pop("rule_id")
        return Finding(self.rule_id, verdict.pop("title"), **verdict)


def plain(value: Any) -> Any:
    """Evidence as JSON-ready Python: mapping keys as text (a ``(worker, allocator)`` pair of a
    grouped frame becomes ``"worker · allocator"``), numpy scalars as Python numbers, tuples
    and arrays as lists; every writer of findings (CLI ``--json``, pages, CSV) reads this."""
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, dict):
        return {
            " · ".join(map(str, k)) if isinstance(k, tuple) else str(k): plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | np.ndarray):
        return [plain(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def is_jax(inp: SessionAnalysis) -> bool:
    """Whether advice should be in JAX terms: a JAX capture, or steps found as XLA program
    executions (``analyzers.xla_programs``)."""
    return inp.trace_kind == "jax" or bool((inp.methods["method"] == "xla_program").any())


def is_torch(inp: SessionAnalysis) -> bool:
    """Whether advice should be in PyTorch terms: a capture of torch.profiler traces."""
    return inp.trace_kind == "pytorch"


def guide_for(inp: SessionAnalysis) -> str:
    """The performance guide of what wrote the capture: JAX's, PyTorch's, Android's (system
    traces) or TensorFlow's."""
    if inp.trace_kind == "android":
        return ANDROID_GUIDE
    return JAX_GUIDE if is_jax(inp) else PYTORCH_GUIDE if is_torch(inp) else GUIDE


#: Android's guide to system tracing (systrace, Perfetto): what an Android capture is.
ANDROID_GUIDE = "https://developer.android.com/topic/performance/tracing"


#: JAX's guide to profiling and performance.
JAX_GUIDE = "https://docs.jax.dev/en/latest/profiling.html"

#: Advice in JAX terms for the rules whose own advice names TensorFlow APIs; a JAX capture's
#: finding shows this instead (``is_jax``).
JAX_ADVICE = {
    "mixed_precision": "Compute in bfloat16 and keep float32 master weights: cast parameters "
    "and activations to jnp.bfloat16 inside the jitted step (jmp policies, flax modules' "
    "dtype=jnp.bfloat16 with param_dtype=jnp.float32), and for float32 matmuls set "
    "jax.default_matmul_precision('bfloat16').",
    "tensor_cores": "Matrix units need 16-bit inputs and dimensions in multiples of 8 (TPU: 128): "
    "compute in bfloat16 and pad feature sizes.",
    "tf32": "Matmuls run in full float32: jax.config.update('jax_default_matmul_precision', "
    "'tensorfloat32') (or precision= on the dot) lets them use TF32.",
    "launch_skew": "The devices start the step's program at different times: one process "
    "dispatches to its devices one after another. Use one jit over sharded arrays "
    "(jax.sharding.NamedSharding) rather than a Python loop over devices, and keep the host "
    "thread free (no blocking fetch) while it dispatches.",
    "host_device_copies": "Arrays cross between host and device every step: keep the model state "
    "on the device between steps, donate it (jax.jit(step, donate_argnums=0)), put batches on the "
    "device ahead (jax.device_put), and fetch results every N steps, not every step.",
    "allreduce_count": "Many small collectives per step: let XLA combine them (one jit around the "
    "whole step; gradients of one pytree reduce together) or shard parameters so fewer are needed "
    "(jax.sharding / shard_map).",
    "memory": "Device memory is close to full: donate buffers that the step replaces "
    "(donate_argnums), use jax.checkpoint (remat) on large activations, a smaller batch or "
    "bfloat16.",
    "xla_recompilation": "jax.jit compiles again when an argument's shape, dtype or a static "
    "argument changes: pad batches to fixed shapes, keep Python scalars out of static_argnums, "
    "and watch jax.log_compiles for the culprit.",
    "step_gaps": "Per-step Python work between the steps (logging, metrics, data conversion): "
    "do it every N steps, fetch results without blocking (no float(loss) each step), and run "
    "several steps per jit call (jax.lax.scan over a stacked batch).",
    "tiny_ops": "Many small ops per step: put the whole step under one jax.jit so XLA fuses "
    "them, and loop inside it (jax.lax.scan) rather than in Python.",
    "memory_leak": "Device memory grows each step: something keeps references to arrays the "
    "step returns (a Python list of losses, metrics kept on the device); fetch and drop them, "
    "or donate the state (donate_argnums).",
}

#: PyTorch's performance tuning guide.
PYTORCH_GUIDE = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"

#: Advice in PyTorch's terms for the rules checked on PyTorch captures
#: (``speech.PYTORCH_RULES``) whose own advice names TensorFlow or JAX APIs; a PyTorch
#: capture's finding shows this instead.
PYTORCH_ADVICE = {
    "input_bound": "The loop waits for its DataLoader each step: load in background processes "
    "(DataLoader(num_workers=N), N up to the cores per rank, with persistent_workers=True and a "
    "prefetch_factor of 2 or more), pin_memory=True with .to(device, non_blocking=True) for "
    "the copies, and move heavy transforms to the GPU or ahead of training; check the storage "
    "a slow rank reads from.",
    "collectives": "On fast ranks this is mostly waiting for the slowest one (see the straggler "
    "finding); otherwise let DDP overlap the all-reduce with the backward pass (buckets ready "
    "early: bucket_cap_mb, gradient_as_bucket_view=True; FSDP: backward_prefetch and "
    "forward_prefetch), all-reduce fewer bytes (a bf16 or fp16 compression hook: "
    "model.register_comm_hook(None, default_hooks.bf16_compress_hook)) or less often "
    "(model.no_sync() over gradient-accumulation steps).",
    "slow_collective": "Every rank arrives in time and the all-reduce still takes long: the "
    "link between the ranks is slow or the collectives are many and small. Check the network "
    "(NCCL_DEBUG=INFO names the transport; gloo is for CPUs: NCCL on GPUs), use larger DDP "
    "buckets (bucket_cap_mb) for fewer all-reduces, compress gradients (bf16_compress_hook), "
    "or all-reduce less often (no_sync() over gradient-accumulation steps).",
    "collective_wait": "Ranks wait in the collectives for the last one to arrive: find what "
    "delays it — a late rank (the straggler finding), or a slow link that finishes its "
    "previous collective late (the slow-collective finding, when it fires).",
}


#: Rules by id, in the order they are reported.
RULES: dict[str, Rule] = {}


def rule(
    rule_id: str, title: str, *, needs: tuple[Need, ...] = (), levels: str | None = None
) -> Callable[[RuleFn], Rule]:
    """Registers a rule under ``rule_id``; ``levels`` names the ``Thresholds`` field that
    decides its severity, added to each of its findings' evidence as ``thresholds`` (moderate,
    high; in the finding's unit).

    Raises:
        ValueError: the id is taken.
    """

    def register(fn: RuleFn) -> Rule:
        if rule_id in RULES:
            raise ValueError(f"duplicate rule id {rule_id}")
        if levels is not None and not hasattr(Thresholds, levels):
            raise ValueError(f"rule {rule_id}: no threshold {levels!r}")
        RULES[rule_id] = Rule(rule_id, title, needs, fn, levels)
        return RULES[rule_id]

    return register


def prepare(frames: TraceFrames) -> SessionAnalysis:
    """The analysis every rule reads, for these frames (used by findings' expressions)."""
    return SessionAnalysis(frames)


#: Findings whose course ends the job (a leak runs out of memory): first among findings of
#: their severity, whatever the others' time at stake, which they have none of (make verify,
#: seed 11: a HIGH leak of 262 KB a step ranked under HIGH step gaps of 2.9 ms, the leak's
#: own eager allocation between the steps).
ENDS_THE_JOB = frozenset({"memory_leak"})


def rank_key(f: Finding) -> tuple[int, bool, float, bool]:
    """Findings' order before ``questions.rank`` puts symptoms after causes: severity, then
    what ends the job (``ENDS_THE_JOB``), then time at stake, the applicable first."""
    return (-f.severity.rank, f.rule_id not in ENDS_THE_JOB, -f.at_stake_ns, not f.applies)


def diagnose(
    analysis: SessionAnalysis, thresholds: Thresholds | None = None, only: list[str] | None = None
) -> list[Finding]:
    """Runs the rules (all, or ``only``) and ranks findings: severity, then time at stake, then
    symptoms after their causes (``questions.rank``).

    Raises:
        KeyError: an unknown rule id in ``only`` (the message lists the known ones).
    """
    t = thresholds or Thresholds()
    ids = only or list(RULES)
    unknown = [r for r in ids if r not in RULES]
    if unknown:
        raise KeyError(f"unknown rules {unknown}; known: {', '.join(RULES)}")
    findings = [RULES[r](analysis, t) for r in ids]
    ranked = sorted(findings, key=rank_key)
    from podscope.analyzers.diagnostics.questions import (
        rank,  # the tables beside the rules import this
    )

    return rank(ranked)
