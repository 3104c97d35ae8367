"""The JAX half of ``make verify``: seeded, randomized runs of the engine's JAX loop (XLA
program steps), judged like the TF matrix: the slowed worker the only culprit, nobody in a
baseline, and the straggler (or its cause) the top finding.

Drawn per run: the scenario (baseline, slow-host, slow-device), 2–4 processes, the slowed
worker, its extra time (8–40 ms), the model's width and batch, the steps captured (8–20) and
whether the loop writes ``StepTraceAnnotation`` markers (one run in three) — none of them the
values the tests use.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from podscope.analyzers.diagnostics import diagnose
from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli_cluster import capture_jax
from podscope.reference_engine.jax_workload import PREFIX, JaxConfig
from verify.matrix import turns

SCENARIOS = ("baseline", "slow-host", "slow-device")
#: Rule ids that count as the injected cause being the top finding.
EXPECTED = frozenset({"straggler", "straggler_cause"})


@dataclass(frozen=True)
class JaxRun:
    """One drawn JAX run."""

    scenario: str
    workers: int
    slow_task: int
    slow_ms: float
    width: int
    batch: int
    steps: int
    markers: bool

    def config(self) -> JaxConfig:
        return JaxConfig(
            workers=self.workers,
            steps=self.steps,
            scenario=self.scenario,
            slow_task=self.slow_task,
            slow_ms=self.slow_ms,
            width=self.width,
            batch=self.batch,
            markers=self.markers,
        )


def draw_jax(n: int, seed: int) -> list[JaxRun]:
    """``n`` runs, the three scenarios in turn (shuffled), the rest drawn; each slow
    scenario's runs slow process 0 (the coordinator of jax.distributed) and another in turn."""
    rng = random.Random(seed)
    runs = []
    for scenario, first in turns(n, SCENARIOS, rng):
        workers = rng.randint(2, 4)
        runs.append(
            JaxRun(
                scenario=scenario,
                workers=workers,
                slow_task=0 if first else rng.randrange(1, workers),
                slow_ms=float(rng.randint(8, 40)),
                width=rng.choice([128, 256, 384]),
                batch=rng.choice([32, 64, 128]),
                steps=rng.randint(8, 20),
                markers=rng.random() < 1 / 3,
            )
        )
    return runs


def run_jax(r: JaxRun, root: Path) -> dict[str, Any]:
    """One run, captured and judged; a failed run is a row with its error."""
    row: dict[str, Any] = asdict(r)
    t0 = time.monotonic()
    try:
        session = capture_jax(r.config(), root / "run", root / "logdir", label=r.scenario)
        analysis = SessionAnalysis.from_path(session)
        fired = [f.rule_id for f in diagnose(analysis) if f.applies and f.severity != "none"]
        roles = analysis.roles
        culprits = ",".join(sorted(roles.loc[roles["role"] == "culprit", "worker"])) or "—"
        expect = "—" if r.scenario == "baseline" else f"{PREFIX}{r.slow_task}"
        top = fired[0] if fired else "—"
        latest = analysis.stragglers.head(1)
        row.update(
            late_score=round(float(latest["score"].sum()), 3),
            last_share=round(float(latest["last_share"].sum()), 3),
            steps_found=int(analysis.aligned["step"].nunique()),
            top=top,
            culprits=culprits,
            culprit_ok=culprits == expect,
            top_ok=None if r.scenario == "baseline" else top in EXPECTED,
            error="",
        )
    except Exception as e:  # a failed run is reported, never dropped
        row.update(steps_found=0, top="", culprits="", culprit_ok=False, top_ok=False)
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row
