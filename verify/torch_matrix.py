"""The PyTorch part of ``make verify``: seeded, randomized runs of the engine's DDP job (gloo on
loopback, every rank captured through its agent with torch.profiler), judged as users read
them: the slowed rank the only culprit, its cause the injected one, nobody named where no rank
was slowed, and the injected cause the top finding.

Drawn per run: the scenario (baseline, slow-rank, slow-dataloader, slow-allreduce, in turn,
shuffled), 2–4 ranks (at most one more than this machine's cores), the slowed rank, its extra
time (8–40 ms), the model's width and batch, and the steps captured (8–20) — none of them the
values the tests use.

Each rank computes on one thread, as a GPU rank's host does: with twice as many ranks as
cores, ranks take turns on the cores and gloo's waiting ranks spin beside them, so which rank
is late is the scheduler's draw as much as the injection's (seed 11 on 2 cores: 4 ranks, 8 ms
injected into 27 ms steps, two unslowed ranks arrived last in 43 % and 57 % of the
all-reduces, and no culprit was named). A real job has cores (and a GPU) per rank.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from podscope.analyzers.attribution import worker_causes
from podscope.analyzers.diagnostics import diagnose
from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli_cluster import capture_torch
from podscope.reference_engine.torch_workload import ONE_RANK, PREFIX, SCENARIOS, TorchConfig
from verify.matrix import target_rows, turns

#: Per scenario: the findings that name the injected cause when on top, and the culprit's
#: cause (``worker_causes``) that names it (None: no culprit is wanted).
EXPECTED: dict[str, tuple[frozenset[str], str | None]] = {
    "baseline": (frozenset(), None),
    "slow-rank": (frozenset({"straggler", "straggler_cause"}), "host_compute"),
    "slow-dataloader": (frozenset({"straggler", "straggler_cause", "input_bound"}), "input"),
    "slow-allreduce": (frozenset({"slow_collective", "collectives"}), None),
}
TARGETS = {
    "PyTorch slow-rank/slow-dataloader runs whose only culprit is the slowed rank": 0.95,
    "PyTorch runs without a slowed rank (baseline, slow-allreduce) with no culprit": 1.0,
    "PyTorch slowed runs whose top finding is the injected cause, worst scenario": 0.90,
}


@dataclass(frozen=True)
class TorchRun:
    """One drawn PyTorch run."""

    scenario: str
    workers: int
    slow_task: int
    slow_ms: float
    width: int
    batch: int
    steps: int

    def config(self) -> TorchConfig:
        return TorchConfig(
            workers=self.workers,
            steps=self.steps,
            scenario=self.scenario,
            slow_task=self.slow_task,
            slow_ms=self.slow_ms,
            width=self.width,
            batch=self.batch,
        )


def draw_torch(n: int, seed: int, cores: int | None = None) -> list[TorchRun]:
    """``n`` runs, the scenarios in turn (shuffled), the rest drawn; each one-rank scenario's
    runs slow rank 0 (the store's host) and another in turn; ``cores`` (default: this
    machine's) bounds the ranks."""
    most = max(2, min(4, (cores or os.cpu_count() or 2) + 1))
    rng = random.Random(seed)
    runs = []
    for scenario, first in turns(n, SCENARIOS, rng):
        workers = rng.randint(2, most)
        runs.append(
            TorchRun(
                scenario=scenario,
                workers=workers,
                slow_task=0 if first else rng.randrange(1, workers),
                slow_ms=float(rng.randint(8, 40)),
                width=rng.choice([128, 256, 384]),
                batch=rng.choice([32, 64, 128]),
                steps=rng.randint(8, 20),
            )
        )
    return runs


def run_torch(r: TorchRun, root: Path) -> dict[str, Any]:
    """One run, captured and judged; a failed run is a row with its error."""
    row: dict[str, Any] = asdict(r)
    t0 = time.monotonic()
    try:
        session = capture_torch(r.config(), root / "run", root / "logdir", label=r.scenario)
        row.update(judge_torch(r.scenario, r.slow_task, session))
    except Exception as e:  # a failed run is reported, never dropped
        row.update(steps_found=0, top="", culprits="", cause="", culprit_ok=False)
        row.update(cause_ok=False, top_ok=False, error=f"{type(e).__name__}: {e}"[:300])
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def judge_torch(scenario: str, slow_task: int, session: Path) -> dict[str, Any]:
    """A run's verdict columns from its capture (a session, or a logdir: its newest)."""
    tops, cause_wanted = EXPECTED[scenario]
    analysis = SessionAnalysis.from_path(session)
    fired = [f.rule_id for f in diagnose(analysis) if f.applies and f.severity != "none"]
    roles = analysis.roles
    named = sorted(roles.loc[roles["role"] == "culprit", "worker"].astype(str))
    slow = analysis.slow_steps
    late = slow[slow["role"] == "late"]
    causes = worker_causes(late[late["worker"].isin(named)]) if named else None
    cause = ",".join(str(causes.loc[w, "cause"]) for w in named) if causes is not None else ""
    expect = f"{PREFIX}{slow_task}" if scenario in ONE_RANK else "—"
    top = fired[0] if fired else "—"
    return {
        "steps_found": int(analysis.aligned["step"].nunique()),
        "top": top,
        "culprits": ",".join(named) or "—",
        "cause": cause or "—",
        "culprit_ok": (",".join(named) or "—") == expect,
        "cause_ok": None if cause_wanted is None else cause == cause_wanted,
        "top_ok": None if scenario == "baseline" else top in tops,
        "error": "",
    }


def rejudge_torch(runs_csv: Path) -> pd.DataFrame:
    """An earlier PyTorch matrix's rows (``torch_runs.csv``), each judged again from the
    capture kept beside it (``torchNN-<scenario>/logdir``); a run that failed stays as it was."""
    rows = pd.read_csv(runs_csv, dtype={"error": str}).fillna({"error": ""})
    for i, r in rows.iterrows():
        logdir = runs_csv.parent / f"torch{int(str(i)):02d}-{r['scenario']}" / "logdir"
        if r["error"] == "" and logdir.is_dir():
            for key, value in judge_torch(str(r["scenario"]), int(r["slow_task"]), logdir).items():
                rows.at[i, key] = value
    return rows


def torch_report(rows: pd.DataFrame, seed: int, markdown: Any, rejudged: bool = False) -> str:
    """The PyTorch matrix's report: targets, accuracy per scenario, every run (``rejudged``:
    the verdicts made again from the kept captures by today's code)."""
    ok = rows[rows["error"].fillna("") == ""]
    # a failed run is a wrong verdict in its subset (its row says False everywhere)
    one = rows[rows["scenario"].isin(ONE_RANK)]
    none = rows[~rows["scenario"].isin(ONE_RANK)]
    slowed = rows[rows["scenario"] != "baseline"]
    per = slowed.groupby("scenario")["top_ok"].apply(lambda c: c.astype(float).mean())
    measured = dict(
        zip(
            TARGETS,
            [
                one["culprit_ok"].astype(float).mean() if len(one) else 0.0,
                none["culprit_ok"].astype(float).mean() if len(none) else 0.0,
                float(per.min()) if len(per) else 0.0,
            ],
            strict=True,
        )
    )
    lines = [
        "# make verify, PyTorch: verdicts over randomized DDP runs",
        "",
        f"Seed {seed}; {len(rows)} runs ({len(rows) - len(ok)} failed to run); "
        f"{rows['seconds'].sum() / 60:.1f} min. Each run: the engine's PyTorch job "
        "(`reference_engine.torch_workload`: DistributedDataParallel over gloo on loopback), "
        "every rank traced by its PodScope agent with torch.profiler in one window, analysed "
        "as `podscope diagnose` does. A failed run counts against every target it is in."
        + (
            " The verdicts were made again from the kept captures by the current code "
            "(`python -m verify --torch-from-csv`); the seconds are the original runs'."
            if rejudged
            else ""
        ),
        "",
        *target_rows(TARGETS, measured),
    ]
    acc = ok.groupby("scenario").agg(
        runs=("culprit_ok", "size"),
        culprit_right=("culprit_ok", lambda c: c.astype(float).mean()),
        cause_right=("cause_ok", lambda c: c.dropna().astype(float).mean()),
        top_right=("top_ok", lambda c: c.dropna().astype(float).mean()),
    )
    lines += [
        "",
        "A baseline has no injected cause: its top finding is listed, not judged. The cause is "
        "the culprit's, from its late steps' summed excess (`attribution.worker_causes`): "
        "`host_compute` is its CPU ops, `input` its DataLoader.",
        "",
        markdown(acc),
        "",
        "## Every PyTorch run",
        "",
        markdown(rows, index=False),
        "",
    ]
    return "\n".join(lines)
