"""The engine's configuration: one frozen dataclass, written as JSON for every task process."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


class EngineError(Exception):
    """A bad engine request (unknown workload, scenario or model, impossible option)."""


@dataclass(frozen=True)
class EngineConfig:
    """What every task of a run trains, and how.

    Attributes:
        workload: a key of ``reference_engine.workloads.WORKLOADS``.
        scenario: a key of ``reference_engine.scenarios.SCENARIOS``.
        model: a key of ``reference_engine.models.MODELS``.
        steps: training steps (per worker for MWMS; scheduled steps for ``ps``); None = forever.
        batch_size: per-worker batch size.
        mixed_precision: None, ``mixed_float16`` or ``mixed_bfloat16``.
        tf32: TensorFloat-32 on Ampere+ GPUs (TF's default is on).
        jit_compile: compile the step with XLA.
        clip_norm: if set, a gradient transformer clips gradients to this global norm.
        straggler_task: index of the worker that the ``straggler`` (or ``slow-allreduce``)
            scenario slows down.
        straggler_ms: its extra time per step.
        input_delay_ms: per-batch delay of the ``input-bound`` scenario.
        host_overhead_ms: per-step host work of the ``host-overhead`` scenario.
        tiny_ops: small ops added per step by the ``tiny-ops`` scenario.
        slow_map_ms: per-batch cost of the ``slow-map`` scenario's expensive stage (longer
            than a step of the engine's models on CPU, so prefetching cannot hide it).
        table_mib: size of the ``ps-imbalance`` scenario's extra variable. 32 MiB: that PS
            carried 87–95 % of the PS busy time, idle or beside two busy loops; 8 MiB gave
            79–84 %, astride the scenario's 80 % (1 worker, 2 PS, 2 cores, 2026-12-03).
        leak_kib: what the ``memory-leak`` scenario keeps alive per step.
        link_delay_ms: latency the ``slow-allreduce`` scenario adds to every chunk sent to or
            from that worker.
        preload: a shared library for every task's ``LD_PRELOAD`` (jemalloc keeps TF
            2.20/2.21's host tracer from crashing non-chief MWMS workers; see the README).
        memory_events: run TF's CPU allocator as a BFC allocator, which records allocator
            events (always on for ``memory-leak``).
        seed: random seed of data and weights.
        onset_s: the scenario's bottleneck (a straggler's sleep, the input stage's delay)
            begins this many seconds after the task's first step, as a host degrading hours
            into a job (0: from the start). The task reports ``onset`` with the wall clock
            when it does (the ground truth of ``podscope watch``'s triggers).
    """

    workload: str = "mwms-loop"
    scenario: str = "baseline"
    model: str = "mlp"
    steps: int | None = 50
    batch_size: int = 32
    mixed_precision: str | None = None
    tf32: bool = True
    jit_compile: bool = False
    clip_norm: float | None = None
    straggler_task: int = 1
    straggler_ms: float = 60.0
    input_delay_ms: float = 20.0
    host_overhead_ms: float = 20.0
    tiny_ops: int = 300
    slow_map_ms: float = 80.0
    leak_kib: int = 256
    table_mib: float = 32.0
    memory_events: bool = False
    link_delay_ms: float = 20.0
    preload: str | None = None
    learning_rate: float = 0.05
    seed: int = 7
    onset_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> EngineConfig:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise EngineError(f"unknown engine config keys: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: Path) -> EngineConfig:
        return cls.from_json(path.read_text())
