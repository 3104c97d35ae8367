"""``make verify``: watched engine runs whose bottleneck begins at a drawn time, judged against
the ground truth (``verify.watch_run``): captures before the onset name no culprit, the first
capture after it was triggered by the heartbeats, names the slowed worker (a straggler) or the
input (input-bound), and its heartbeat window places the onset. Writes verify/WATCH_REPORT.md.

    python -m verify.watch_matrix --n 10 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from podscope.reference_engine.config import EngineConfig
from verify.run import RunError
from verify.watch_run import watch_scenario

#: (workload, scenario) pairs a watched run can have: the MultiWorkerMirroredStrategy loops
#: send a heartbeat per step (the parameter-server chief fetches steps ten at a time).
KINDS = (
    ("mwms-loop", "straggler"),
    ("mwms-fit", "straggler"),
    ("mwms-loop", "input-bound"),
)


@dataclass(frozen=True)
class WatchRun:
    workload: str
    scenario: str
    workers: int
    straggler_task: int
    straggler_ms: float
    input_delay_ms: float
    onset_s: float

    def config(self) -> EngineConfig:
        return EngineConfig(
            workload=self.workload,
            scenario=self.scenario,
            steps=None,
            straggler_task=self.straggler_task,
            straggler_ms=self.straggler_ms,
            input_delay_ms=self.input_delay_ms,
            onset_s=self.onset_s,
        )


def draw(n: int, seed: int) -> list[WatchRun]:
    """``n`` runs: every kind at least once, then drawn; workers 2–4, the slowed task, its
    extra time (40–120 ms), the input delay (20–60 ms) and the onset (15–40 s) drawn."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(min(n, len(KINDS)))]
    kinds += [rng.choice(KINDS) for _ in range(n - len(kinds))]
    runs = []
    for workload, scenario in kinds:
        workers = rng.randint(2, 4)
        runs.append(
            WatchRun(
                workload,
                scenario,
                workers,
                rng.randrange(workers),
                round(rng.uniform(40, 120)),
                round(rng.uniform(20, 60)),
                round(rng.uniform(15, 40), 1),
            )
        )
    return runs


def run_one(run: WatchRun, root: Path) -> dict[str, Any]:
    row: dict[str, Any] = asdict(run)
    try:
        watched = watch_scenario(run.config(), root, workers=run.workers)
    except RunError as e:
        return {**row, "ok": False, "error": str(e)[:300]}
    verdict = watched.verdict()
    return {**row, **verdict, "ok": watched.ok(), "error": ""}


def report(rows: list[dict[str, Any]], seed: int) -> str:
    ok = sum(bool(r["ok"]) for r in rows)
    lines = [
        "# Watched runs: onsets found (make verify)",
        "",
        f"Seed {seed}, {len(rows)} runs: a straggler or a slow input stage begins at a drawn "
        "time into training; a watcher (schedule every 10 min: one capture at the start, "
        "triggers: a 30 % rise for 5 steps and 2 s) captures every worker. A run is right when "
        "the captures before the onset name no culprit, the first capture after it was "
        "triggered by the heartbeats and names the slowed worker (straggler) or the input "
        "(input-bound) with no culprit, and its heartbeat window places the onset "
        "(`verify/watch_run.py`).",
        "",
        f"**Right: {ok} of {len(rows)}.**",
        "",
        "| # | workload | scenario | workers | task | extra ms | onset s | before clean | "
        "triggered | named | culprits | top | onset − window start (ms) | window ms | ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows):
        extra = r["straggler_ms"] if r["scenario"] == "straggler" else r["input_delay_ms"]
        offset, width = r.get("onset_offset_ms"), r.get("window_ms")
        lines.append(
            f"| {i} | {r['workload']} | {r['scenario']} | {r['workers']} | "
            f"{r['straggler_task'] if r['scenario'] == 'straggler' else '—'} | {extra} | "
            f"{r['onset_s']} | {r.get('before_clean', '')} | {r.get('triggered', '')} | "
            f"{r.get('right', '')} | {','.join(r.get('culprits') or []) or '—'} | "
            f"{r.get('top', '')} | {'' if offset is None else f'{offset:.1f}'} | "
            f"{'' if width is None else f'{width:.0f}'} | "
            f"{'✓' if r['ok'] else '✗ ' + str(r.get('error') or '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m verify.watch_matrix")
    p.add_argument("--n", type=int, default=9)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", type=Path, default=Path("build/verify-watch"))
    p.add_argument("--report", type=Path, default=Path("verify/WATCH_REPORT.md"))
    args = p.parse_args(argv)
    shutil.rmtree(args.keep, ignore_errors=True)
    rows = []
    for i, run in enumerate(draw(args.n, args.seed)):
        rows.append(run_one(run, args.keep / f"watch{i:02d}-{run.scenario}"))
        print(json.dumps(rows[-1], default=str), flush=True)
    args.report.write_text(report(rows, args.seed))
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
