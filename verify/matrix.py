"""The randomized scenario matrix of ``make verify``: what to run, and what each run must say.

    >>> runs = draw(40, seed=7)          # Run(scenario, workload, workers, task, delay, model)
    >>> EXPECTED["straggler"]            # rule ids acceptable as the top finding

Every scenario of the issue's list runs in proportion to ``SCENARIO_WEIGHTS`` (straggler most:
its culprit is the verdict most often acted on); workload, worker count, the slowed task, the
delay (20–80 ms) and the model are drawn, none of them the values the tests use by default.
Some cells are always drawn (``required``): the straggler on every workload with task 0 (the
chief of MWMS: a Keras chief's callbacks run inside its step) and with a task > 0, and the
input delay on every workload: before Keras fit's one-batch buffer, with nothing buffered in
a custom loop, and before ps's prefetch.
slow-map's stage cost is drawn from 90–150 ms: a stage cheaper than the step is hidden by the
prefetch and injects nothing (its right verdict is "input keeps up", which the consistency
tests check), so only stages that cannot keep up test the input verdict.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from podscope.reference_engine.config import EngineConfig
from podscope.reference_engine.scenarios import SCENARIOS

#: The scenarios of the matrix, and the share of runs each gets (straggler twice).
SCENARIO_WEIGHTS = {
    "baseline": 2,
    "straggler": 3,
    "input-bound": 1,
    "slow-map": 1,
    "host-overhead": 1,
    "tiny-ops": 1,
    "eager": 1,
    "memory-leak": 1,
    "slow-allreduce": 1,
    "ps-imbalance": 1,
}

#: Rule ids that count as "the injected cause is the top finding", per scenario. Input-bound
#: and slow-map answer the same question (input); either of its two deciding rules is right.
EXPECTED: dict[str, frozenset[str]] = {
    "straggler": frozenset({"straggler", "straggler_cause"}),
    "input-bound": frozenset({"input_bound", "input_stage"}),
    "slow-map": frozenset({"input_stage", "input_bound"}),
    "host-overhead": frozenset({"step_gaps"}),
    "tiny-ops": frozenset({"tiny_ops"}),
    "eager": frozenset({"eager"}),
    "memory-leak": frozenset({"memory_leak"}),
    "slow-allreduce": frozenset({"slow_collective"}),
    "ps-imbalance": frozenset({"ps_imbalance"}),
}


@dataclass(frozen=True)
class Run:
    """One drawn engine run."""

    scenario: str
    workload: str
    workers: int
    ps: int
    model: str
    straggler_task: int
    delay_ms: float
    seed: int

    @property
    def expected_culprit(self) -> int | None:
        """The index of the worker that must be named culprit (None: nobody)."""
        return self.straggler_task if self.scenario == "straggler" else None

    @property
    def host_tracer_level(self) -> int:
        """TF records cheap ops at level 3 only: tiny-ops is captured there (said in the report)."""
        return 3 if self.scenario == "tiny-ops" else 2

    @property
    def full_trace(self) -> bool:
        """A slow collective is told from a late worker only with every worker traced."""
        return self.scenario == "slow-allreduce"

    def config(self, preload: str | None = None) -> EngineConfig:
        """The engine configuration of this run (the delay drives the scenario's own knob;
        slow-map's stage costs 70 ms more than the drawn delay)."""
        knob = {
            "straggler": "straggler_ms",
            "input-bound": "input_delay_ms",
            "slow-map": "slow_map_ms",
            "host-overhead": "host_overhead_ms",
            "slow-allreduce": "link_delay_ms",
        }.get(self.scenario)
        delay = self.delay_ms + (70.0 if self.scenario == "slow-map" else 0.0)
        extra: dict[str, Any] = {knob: delay} if knob else {}
        return EngineConfig(
            workload=self.workload,
            scenario=self.scenario,
            model=self.model,
            steps=None,
            straggler_task=self.straggler_task,
            seed=self.seed,
            preload=preload if self.full_trace else None,
            **extra,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Cell = tuple[str, str | None, bool | None, int | None]


def required() -> list[Cell]:
    """The cells every matrix draws: (scenario, workload, slowed task is 0, workers; None:
    drawn) — the straggler on each workload with task 0 and with a task > 0, the input delay
    on each workload (on ps, its step gaps beside it), and a 2-worker parameter-server
    baseline (asynchronous: one of two workers is late in most steps by chance)."""
    cells: list[Cell] = [
        ("straggler", w, chief, None)
        for w in SCENARIOS["straggler"].workloads
        for chief in (True, False)
    ]
    return [
        *cells,
        *[("input-bound", w, None, None) for w in SCENARIOS["input-bound"].workloads],
        ("baseline", "ps", None, 2),
    ]


def draw(n: int, seed: int) -> list[Run]:
    """``n`` runs (at least the ``required`` cells), every scenario at least once, in
    proportion to ``SCENARIO_WEIGHTS``."""
    rng = random.Random(seed)
    cells = required()
    n = max(n, len(cells))
    total = sum(SCENARIO_WEIGHTS.values())
    counts = {s: max(1, n * w // total) for s, w in SCENARIO_WEIGHTS.items()}
    for scenario, *_ in cells:  # the scenario's own draw covers its required cells
        counts[scenario] = max(counts[scenario], sum(c[0] == scenario for c in cells))
    by_weight = sorted(SCENARIO_WEIGHTS, key=lambda s: -SCENARIO_WEIGHTS[s])
    for i in range(max(0, n - sum(counts.values()))):  # the remainder, heaviest first
        counts[by_weight[i % len(by_weight)]] += 1
    rest: list[Cell] = []
    for scenario, c in counts.items():
        rest += [(scenario, None, None, None)] * (c - sum(x[0] == scenario for x in cells))
    rng.shuffle(rest)
    planned = [*cells, *rest[: n - len(cells)]]
    rng.shuffle(planned)
    runs = []
    for i, (scenario, fixed_workload, chief, fixed_workers) in enumerate(planned):
        workloads = SCENARIOS[scenario].workloads
        workload = fixed_workload or rng.choice(workloads)
        # ps: the chief coordinates, the workers train, one or two parameter servers
        workers = rng.randint(2, 4)
        ps = (2 if scenario == "ps-imbalance" else rng.randint(1, 2)) if workload == "ps" else 0
        if scenario == "ps-imbalance":
            workers = rng.randint(1, 2)
        workers = fixed_workers or workers
        # MWMS's coordination service runs on task 0: with it behind the slow-link proxy (59 ms
        # per chunk, 4 workers: seed 7) the cluster did not start training in 180 s.
        if chief is None:
            task = rng.randrange(1 if scenario == "slow-allreduce" else 0, workers)
        else:
            task = 0 if chief else rng.randrange(1, workers)
        runs.append(
            Run(
                scenario=scenario,
                workload=workload,
                workers=workers,
                ps=ps,
                model=rng.choice(["mlp", "cnn"]),
                straggler_task=task,
                # a straggler from 10 ms: small against a step of a few hundred
                delay_ms=float(rng.randint(10 if scenario == "straggler" else 20, 80)),
                seed=seed * 1000 + i,
            )
        )
    return runs


def target_rows(targets: dict[str, float], measured: dict[str, float]) -> list[str]:
    """A report's targets as Markdown table rows: wanted, measured, met."""
    rows = ["| target | wanted | measured | met |", "|---|---|---|---|"]
    for name, want in targets.items():
        got = measured[name]
        rows.append(f"| {name} | ≥ {want:.0%} | {got:.0%} | {'yes' if got >= want else 'NO'} |")
    return rows


def turns(n: int, scenarios: tuple[str, ...], rng: random.Random) -> list[tuple[str, bool]]:
    """``n`` runs' scenarios, each in turn (shuffled), and whether the run is its scenario's
    first of a pair (the engines' matrices slow task 0 in one run, another task in the next)."""
    names = [scenarios[i % len(scenarios)] for i in range(n)]
    rng.shuffle(names)
    seen = dict.fromkeys(scenarios, 0)
    out = []
    for name in names:
        out.append((name, seen[name] % 2 == 0))
        seen[name] += 1
    return out
