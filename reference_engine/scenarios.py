"""Scenarios: known bottlenecks the engine injects, each with the symptom it must produce.

A scenario only sets knobs; the workloads read them (``Scenario`` fields). The ``symptom`` text
is what PodScope's Pod Viewer and diagnostics are tested to report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

ALL = ("mwms-fit", "mwms-loop", "ps")


@dataclass(frozen=True)
class Scenario:
    """One injected bottleneck.

    Attributes:
        description: what the engine does.
        symptom: what a trace must show.
        input_delay: the input pipeline's ``map`` sleeps ``input_delay_ms`` per batch, no prefetch.
        straggler: worker ``straggler_task`` spends ``straggler_ms`` more per step.
        host_overhead: ``host_overhead_ms`` of Python work between steps (outside the step).
        tiny_ops: ``tiny_ops`` extra tiny element-wise ops inside each step.
        eager: the step runs eagerly (no ``tf.function``; Keras ``run_eagerly=True``).
        step_markers: custom loops wrap each step in ``Trace('train', step_num=…, _r=1)``.
        slow_link: the other workers reach worker ``straggler_task`` through a proxy that
            delays every chunk ``link_delay_ms`` (a slow network path).
        ps_imbalance: one parameter server holds a large extra variable (``table_mib``) that
            every step reads and updates.
        memory_leak: every step appends a ``leak_kib`` tensor to a list that is never cleared.
        slow_map: one expensive ``map`` stage (``slow_map_ms`` per batch, named ``augment``)
            between two cheap ones, prefetch kept.
        workloads: workloads the scenario applies to.
    """

    description: str
    symptom: str
    input_delay: bool = False
    straggler: bool = False
    host_overhead: bool = False
    tiny_ops: bool = False
    eager: bool = False
    step_markers: bool = True
    slow_map: bool = False
    memory_leak: bool = False
    ps_imbalance: bool = False
    slow_link: bool = False
    workloads: tuple[str, ...] = ALL


SCENARIOS: Mapping[str, Scenario] = {
    "baseline": Scenario(
        "Plain training: prefetching tnp input pipeline, compiled step.",
        "No bottleneck: no straggler, Input below 5 % of step time.",
    ),
    "input-bound": Scenario(
        "The tf.data map sleeps input_delay_ms per batch and nothing prefetches (mwms-loop pulls "
        "each batch from its worker's own shard when the step asks; Keras fit keeps its "
        "distributed iterator's one-batch buffer).",
        "IteratorGetNext (waiting for input) >= 20 % of step time on every worker; Input is the largest category.",
        input_delay=True,
    ),
    "straggler": Scenario(
        "Worker straggler_task spends straggler_ms more per step (host sleep before the step; "
        "for ps, a SleepDataset in its input pipeline).",
        "ps: that worker's step time >= 1.5x the others'. MWMS: the others wait for it in the "
        "all-reduce (collective time ~ straggler_ms per step on the fast workers).",
        straggler=True,
    ),
    "host-overhead": Scenario(
        "host_overhead_ms of Python work between steps (a Keras callback / loop code outside the step).",
        "Gaps between steps: time between consecutive step markers ~ host_overhead_ms.",
        host_overhead=True,
        workloads=("mwms-fit", "mwms-loop"),
    ),
    "tiny-ops": Scenario(
        "tiny_ops extra tiny element-wise ops in every step.",
        "Op table dominated by many short ops; ~tiny_ops more op executions per step.",
        tiny_ops=True,
    ),
    "eager": Scenario(
        "The step runs eagerly (no tf.function; Keras run_eagerly=True).",
        "Ops carry is_eager; eager op time > 10 % of op time.",
        eager=True,
        workloads=("mwms-fit", "mwms-loop"),
    ),
    "slow-map": Scenario(
        "The input pipeline maps each batch through three named stages, scale -> augment -> "
        "clip; augment sleeps slow_map_ms per batch (longer than a step), the others are cheap; "
        "prefetch stays (mwms-loop pulls from its worker's own shard, as in input-bound).",
        "The input analysis names the Map stage 'augment' as the bottleneck (most work, its "
        "work per step above the step time); the step waits for input despite the prefetch. "
        "A stage cheaper than the step is hidden by the prefetch: then input keeps up and no "
        "input finding fires.",
        slow_map=True,
        workloads=("mwms-loop",),
    ),
    "memory-leak": Scenario(
        "Every step appends a new leak_kib tensor to a Python list that is never cleared (a "
        "metrics history kept as tensors); the CPU allocator runs as BFC so TF records it.",
        "The heap in use rises step after step by ~leak_kib while allocations outnumber "
        "deallocations; the memory analysis calls it a leak, the baseline's heap is flat.",
        memory_leak=True,
        workloads=("mwms-loop",),
    ),
    "slow-allreduce": Scenario(
        "The other workers reach worker straggler_task through a TCP proxy that delays every "
        "chunk link_delay_ms each way (a slow network path); compute is unchanged.",
        "With every worker traced: the all-reduce's latency (its shortest duration among "
        "workers) is >= 2x the baseline's and >= 2x the arrival skew: the collective, not a "
        "worker, is slow.",
        slow_link=True,
        workloads=("mwms-loop",),
    ),
    "ps-imbalance": Scenario(
        "A table_mib variable 'ps_table' lands on one parameter server (round-robin "
        "placement); every step reads it into the loss and updates it.",
        "One PS carries >= 80 % of the parameter servers' busy time (the one holding ps_table); "
        "the PS balance finding names it.",
        ps_imbalance=True,
        workloads=("ps",),
    ),
    "no-step-markers": Scenario(
        "The custom loop runs without Trace('train', step_num=...) markers.",
        "No step markers: steps must be found from the repeated tf.function calls.",
        step_markers=False,
        workloads=("mwms-loop",),
    ),
}


@dataclass
class Onset:
    """When a run's bottleneck begins: ``onset_s`` after the task's first step (``tick``).

    ``active()`` is what a knob asks before it slows anything down; the first True calls
    ``on_start`` with the wall clock in ns (the task reports it: the ground truth).
    """

    onset_s: float = 0.0
    on_start: Callable[[int], None] = lambda unix_ns: None
    _first_step: float | None = None
    _started: bool = False
    _clock: Callable[[], float] = field(default=time.monotonic)

    def tick(self) -> None:
        """A training step ran (the first one starts the clock)."""
        if self._first_step is None:
            self._first_step = self._clock()

    def active(self) -> bool:
        """Whether the bottleneck is on now."""
        if self._started:
            return True
        if self.onset_s > 0 and (
            self._first_step is None or self._clock() - self._first_step < self.onset_s
        ):
            return False
        self._started = True
        if self.onset_s > 0:
            self.on_start(time.time_ns())
        return True


#: This task's onset (a task is one process): the workload sets it up, the knobs ask it.
ONSET = Onset()
