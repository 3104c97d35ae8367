"""Findings, thresholds, the rule registry and the inputs every rule reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from analyzers._match import matches
from analyzers.breakdown import step_breakdown
from analyzers.ops import op_events, op_stats, ops_per_step
from analyzers.pod import pod_view, stragglers
from analyzers.steps import align_steps, find_steps, step_methods
from trace_parsers.schema import TraceFrames

GUIDE = "https://www.tensorflow.org/guide/gpu_performance_analysis"
SEVERITIES = ("none", "moderate", "high")


@dataclass(frozen=True)
class Thresholds:
    """Rule thresholds; shares of step time unless named otherwise. Defaults are XProf's where
    XProf has one (input/output 5 % / 20 %, launch / all others / collectives 3 % / 15 %,
    16-bit share 10 %, eager 10 %, IteratorGetNext 50 µs)."""

    input: tuple[float, float] = (0.05, 0.20)
    output: tuple[float, float] = (0.05, 0.20)
    kernel_launch: tuple[float, float] = (0.03, 0.15)
    all_others: tuple[float, float] = (0.03, 0.15)
    collectives: tuple[float, float] = (0.03, 0.15)
    step_gaps: tuple[float, float] = (0.05, 0.20)
    eager: tuple[float, float] = (0.10, 0.50)
    half_precision_share: float = 0.10
    iterator_get_next_us: float = 50.0
    tiny_op_us: float = 20.0
    tiny_ops_per_step: tuple[float, float] = (200.0, 1000.0)
    copies_per_step: tuple[float, float] = (10.0, 100.0)
    straggler_score: tuple[float, float] = (0.25, 0.5)
    device_imbalance: tuple[float, float] = (0.2, 0.5)
    launch_skew: tuple[float, float] = (0.05, 0.2)
    memory_use: tuple[float, float] = (0.8, 0.9)
    allreduce_per_step: float = 1.0


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
    """

    rule_id: str
    title: str
    severity: str = "none"
    applies: bool = True
    reason: str = ""
    value: float | None = None
    expression: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""
    doc: str = GUIDE
    at_stake_ns: float = 0.0
    page: str = "/pod"


def severity_of(value: float | None, levels: tuple[float, float]) -> str:
    if value is None or np.isnan(value):
        return "none"
    return "high" if value >= levels[1] else "moderate" if value >= levels[0] else "none"


class Inputs:
    """Frames and the derived frames the rules read, each computed once on first use."""

    def __init__(self, frames: TraceFrames) -> None:
        self.frames = frames

    @cached_property
    def steps(self) -> pd.DataFrame:
        return find_steps(self.frames.events)

    @cached_property
    def _alignment(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return align_steps(self.steps)

    @property
    def aligned(self) -> pd.DataFrame:
        """Steps every worker has, numbered 0..N-1 (``analyzers.steps.align_steps``)."""
        return self._alignment[0]

    @property
    def missing(self) -> pd.DataFrame:
        """(worker, step_num) pairs that some workers lack."""
        return self._alignment[1]

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        return step_breakdown(self.frames.events, self.aligned, self.frames.stats)

    @cached_property
    def split(self) -> pd.DataFrame:
        """Breakdown rows whose categories are known."""
        return self.breakdown[self.breakdown["split"].astype(bool)]

    @cached_property
    def pod(self) -> pd.DataFrame:
        return pod_view(self.breakdown)

    @cached_property
    def stragglers(self) -> pd.DataFrame:
        return stragglers(self.pod)

    @cached_property
    def methods(self) -> pd.DataFrame:
        return step_methods(self.frames.events, self.steps)

    @cached_property
    def ops(self) -> pd.DataFrame:
        return op_events(self.frames.events, stats=self.frames.stats)

    @cached_property
    def op_table(self) -> pd.DataFrame:
        return op_stats(self.frames.events, stats=self.frames.stats)

    @cached_property
    def kernels(self) -> pd.DataFrame:
        return op_stats(self.frames.events, by="kernel", stats=self.frames.stats)

    @cached_property
    def ops_per_step(self) -> pd.DataFrame:
        return ops_per_step(self.frames.events, self.aligned)

    @cached_property
    def has_device(self) -> bool:
        return bool(matches(self.frames.events["plane"], "/device:(?:GPU|TPU)", how="match").any())

    @cached_property
    def step_time_ns(self) -> float:
        """Mean step time over workers and steps (ns), 0 when no steps."""
        return float(self.pod["step_time_ns"].mean()) if len(self.pod) else 0.0


def prepare(frames: TraceFrames) -> Inputs:
    """The inputs of every rule for these frames."""
    return Inputs(frames)


Rule = Callable[[Inputs, Thresholds], Finding]
#: Rules by id, in the order they are reported.
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    """Registers a rule under ``rule_id``."""

    def register(fn: Rule) -> Rule:
        if rule_id in RULES:
            raise ValueError(f"duplicate rule id {rule_id}")
        RULES[rule_id] = fn
        return fn

    return register


def not_applicable(rule_id: str, title: str, reason: str, page: str = "/pod") -> Finding:
    return Finding(rule_id, title, applies=False, reason=reason, page=page)


def diagnose(
    inputs: Inputs, thresholds: Thresholds | None = None, only: list[str] | None = None
) -> list[Finding]:
    """Runs the rules (all, or ``only``) and ranks findings: severity, then time at stake.

    Raises:
        KeyError: an unknown rule id in ``only`` (the message lists the known ones).
    """
    t = thresholds or Thresholds()
    ids = only or list(RULES)
    unknown = [r for r in ids if r not in RULES]
    if unknown:
        raise KeyError(f"unknown rules {unknown}; known: {', '.join(RULES)}")
    findings = [RULES[r](inputs, t) for r in ids]
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-rank[f.severity], -f.at_stake_ns, not f.applies))
