"""``make verify``: the seeded, randomized matrix of engine runs and how often PodScope's
verdicts are right: the culprit named, and the injected cause as the top finding.

    python -m verify --runs 40 --seed 7 --report verify/REPORT.md --keep build/verify
    python -m verify --jax-only --jax-runs 15          # the JAX matrix alone (verify/JAX_REPORT.md)
    python -m verify --torch-only --torch-runs 24      # PyTorch's alone (verify/TORCH_REPORT.md)

Each run is judged by ``judge``; the report has the confusion matrices (expected vs top
finding, expected vs named culprit), the accuracy per scenario, every run's row, and the
targets. A run whose engine or capture failed is reported as such, never dropped silently.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from podscope.analyzers.attribution import worker_causes
from podscope.analyzers.diagnostics import diagnose
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import load
from verify.jax_matrix import draw_jax, run_jax
from verify.matrix import EXPECTED, Run, draw, target_rows
from verify.run import capture_scenario
from verify.torch_matrix import draw_torch, rejudge_torch, run_torch, torch_report

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
TARGETS = {
    "straggler runs whose only culprit is the slowed task": 0.95,
    "baseline runs with no culprit": 1.0,
    "runs (every scenario) whose top finding is the injected cause": 0.90,
    "the same, in the worst scenario": 0.90,
}
JAX_TARGETS = {
    "JAX slow-host/slow-device runs whose only culprit is the slowed worker": 0.95,
    "JAX baselines with no culprit": 1.0,
    "JAX slow runs whose top finding is the straggler": 0.90,
}
#: What a baseline's top-finding column means (it has no injected cause).
BASELINE_NOTE = (
    "A baseline has no injected cause: its top finding is listed (what the workload shows "
    "on this machine), not judged; baselines are left out of the third target."
)


@dataclass(frozen=True)
class Verdict:
    """What PodScope said about one run."""

    top: str
    culprits: tuple[str, ...]
    fired: tuple[str, ...]
    #: each culprit's cause, as its verdict says it (``worker_causes``)
    causes: tuple[str, ...] = ()
    #: the latest worker's mean lateness as a share of the median step, and the share of
    #: steps it arrived last in (``stragglers``): how small the signal was
    late_score: float = float("nan")
    last_share: float = float("nan")


def judge(session_dir: Path) -> Verdict:
    """The top finding (first that fires, in the report's order), the culprits, every rule
    that fired, the culprits' causes; culprits as task names (``worker:2``, from the capture's
    manifest)."""
    analysis = SessionAnalysis(load(session_dir, cache=False))
    findings = [f for f in diagnose(analysis) if f.applies and f.severity != "none"]
    manifest = json.loads((session_dir / "capture.json").read_text())
    tasks = {w["label"]: f"{w['role']}:{w['index']}" for w in manifest["workers"]}
    roles = analysis.roles
    named = sorted(
        roles.loc[roles["role"] == "culprit", "worker"].astype(str), key=lambda w: tasks.get(w, w)
    )
    causes = worker_causes(analysis.slow_steps)["cause"]
    latest = analysis.stragglers.head(1)
    return Verdict(
        findings[0].rule_id if findings else "—",
        tuple(tasks.get(w, w) for w in named),
        tuple(f.rule_id for f in findings),
        tuple(str(causes.get(w, "")) for w in named),
        *(signal_of(latest) if len(latest) else (float("nan"), float("nan"))),
    )


def signal_of(worker: pd.DataFrame) -> tuple[float, float]:
    """(late score, last share) of one row of ``stragglers``, rounded for the report."""
    return round(float(worker["score"].iloc[0]), 3), round(float(worker["last_share"].iloc[0]), 3)


def correct(
    scenario: str, straggler_task: int, top: str, culprits: str
) -> tuple[bool, bool | None]:
    """(culprit right, top finding right) for one run: the slowed task the only culprit of a
    straggler run, nobody elsewhere; the top finding one of the scenario's ``EXPECTED`` (a
    baseline has no injected cause: None, not judged)."""
    expect = f"worker:{straggler_task}" if scenario == "straggler" else "—"
    return culprits == expect, (top in EXPECTED[scenario] if scenario in EXPECTED else None)


def _run_one(run: Run, root: Path) -> dict[str, object]:
    row: dict[str, object] = run.as_dict()
    t0 = time.monotonic()
    try:
        cap = capture_scenario(
            run.config(JEMALLOC),
            root,
            workers=run.workers,
            ps=run.ps,
            host_tracer_level=run.host_tracer_level,
            full_trace=run.full_trace,
        )
        v = judge(cap.session_dir)
        culprits = ",".join(v.culprits) or "—"
        culprit_ok, top_ok = correct(run.scenario, run.straggler_task, v.top, culprits)
        row.update(
            top=v.top,
            culprits=culprits,
            fired=",".join(v.fired),
            cause=",".join(v.causes) or "—",
            late_score=v.late_score,
            last_share=v.last_share,
            culprit_ok=culprit_ok,
            top_ok=top_ok,
            session=str(cap.session_dir),
            error="",
        )
    except Exception as e:  # a run that failed is a row of the report, with its error
        row.update(
            top="", culprits="", fired="", cause="", culprit_ok=False, top_ok=False, session=""
        )
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _cell(v: object) -> str:
    if isinstance(v, float) and v != v:
        return "—"  # not judged
    return f"{v:.0%}" if isinstance(v, float) and 0 <= v <= 1 else str(v)


def markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """A frame as a Markdown table (shares as whole percents)."""
    f = frame.reset_index() if index else frame
    cells = [[_cell(v) for v in row] for row in f.itertuples(index=False)]
    head = [str(c) for c in f.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def report(rows: pd.DataFrame, seed: int, rejudged: bool = False) -> str:
    """The Markdown report: targets, per-scenario accuracy, confusion matrices, every run."""
    rows = rows.fillna({"error": ""}).copy()
    judged = [
        correct(r.scenario, int(r.straggler_task), str(r.top), str(r.culprits))
        for r in rows.itertuples()
    ]
    rows["culprit_ok"] = [c for c, _ in judged]
    rows["top_ok"] = [float("nan") if t is None else float(t) for _, t in judged]
    ok = rows[rows["error"] == ""]
    strag = ok[ok["scenario"] == "straggler"]
    base = ok[ok["scenario"] == "baseline"]
    measured = {
        "straggler runs whose only culprit is the slowed task": strag["culprit_ok"].mean(),
        "baseline runs with no culprit": base["culprit_ok"].mean(),
        "runs (every scenario) whose top finding is the injected cause": ok["top_ok"].mean(),
        "the same, in the worst scenario": ok.groupby("scenario")["top_ok"].mean().min(),
    }
    lines = [
        "# make verify: verdicts over randomized engine runs",
        "",
        f"Seed {seed}; {len(rows)} runs ({len(rows) - len(ok)} failed to run); "
        f"{rows['seconds'].sum() / 60:.0f} min on this machine. Each run: a local cluster of "
        "the drawn workload, workers and model, warm-up, one capture of every task with the "
        "default plan (tiny-ops at host_tracer_level 3, slow-allreduce with every worker "
        "traced: see verify/matrix.py), analysed as `podscope diagnose` does.",
        "",
        BASELINE_NOTE,
        "",
        *(
            [
                "The verdicts were judged again, from the kept captures, by the analysis code "
                "of the commit that holds this report (`--from-csv --rejudge`).",
                "",
            ]
            if rejudged
            else []
        ),
        *target_rows(TARGETS, measured),
    ]
    found = [
        float(bool(EXPECTED[r.scenario] & set(str(r.fired).split(","))))
        if r.scenario in EXPECTED
        else float("nan")
        for r in ok.itertuples()
    ]
    acc = (
        ok.assign(found=found)
        .groupby("scenario")
        .agg(
            runs=("top_ok", "size"),
            top_right=("top_ok", "mean"),
            cause_found=("found", "mean"),
            culprit_right=("culprit_ok", "mean"),
        )
    )
    lines += [
        "",
        "## Accuracy per scenario",
        "",
        "`top_right`: the injected cause is the top finding; `cause_found`: it fires at all "
        "(possibly ranked below a larger finding).",
        "",
        markdown(acc),
        "",
    ]
    slowed = ok["straggler_task"].map(lambda t: "task 0" if int(t) == 0 else "task > 0")
    cells = (
        ok.assign(
            slowed=slowed.where(ok["scenario"] == "straggler", "—"),
            found=found,
        )
        .groupby(["scenario", "workload", "slowed"])
        .agg(
            runs=("top_ok", "size"),
            culprit_right=("culprit_ok", "mean"),
            top_right=("top_ok", "mean"),
        )
    )
    lines += [
        "## Per workload, and the slowed task",
        "",
        "Task 0 of an MWMS job is its chief (a Keras chief runs its callbacks inside its step; "
        "the default plan traces it fully and the others with the Python tracer); of a ps job, "
        "the first worker (the chief coordinates).",
        "",
        markdown(cells),
        "",
    ]
    expected = ok["scenario"].map(
        lambda s: "/".join(sorted(EXPECTED.get(s, ()))) or "nothing injected"
    )
    lines += [
        "## Expected cause × top finding",
        "",
        markdown(pd.crosstab(expected, ok["top"])),
        "",
        "## Expected culprit × named culprits",
        "",
        markdown(
            pd.crosstab(
                ok["straggler_task"]
                .where(ok["scenario"] == "straggler")
                .map(lambda t: "—" if pd.isna(t) else f"worker:{int(t)}")
                .rename("expected culprit"),
                ok["culprits"],
            )
        ),
        "",
        *_cause_section(ok, slowed),
        *_small_signals(ok),
        "## Every run",
        "",
        markdown(
            rows.drop(columns=["session", "fired"]).assign(
                culprit_ok=rows["culprit_ok"].map({True: "yes", False: "no"}),
                top_ok=rows["top_ok"].map({1.0: "yes", 0.0: "no"}).fillna("—"),
            ),
            index=False,
        ),
        "",
    ]
    return "\n".join(lines)


#: A slowed worker late by less than this share of the median step is a small signal.
SMALL = 0.25


def _small_signals(ok: pd.DataFrame) -> list[str]:
    """The cases a verdict gets wrong when it decides on too little: a straggler late by a
    small share of the step, two asynchronous workers where chance makes one late in most
    steps, the step gaps an input-bound parameter-server job shows."""
    head = ["## Small signals", ""]
    if "late_score" not in ok:
        return [*head, "Not recorded in this runs.csv (`--rejudge` records it).", ""]
    strag = ok[ok["scenario"] == "straggler"]
    small = strag[strag["late_score"].astype(float) < SMALL]
    pairs = ok[(ok["workload"] == "ps") & (ok["workers"] == 2) & (ok["scenario"] != "straggler")]
    fed = ok[(ok["workload"] == "ps") & (ok["scenario"] == "input-bound")]
    rows = [
        (
            f"straggler runs whose slowed worker was late by under {SMALL} of the median "
            "step: its culprit named",
            small["culprit_ok"].astype(bool),
        ),
        (
            "2-worker parameter-server runs with no slowed worker: no chance culprit",
            pairs["culprit_ok"].astype(bool),
        ),
        ("input-bound parameter-server runs: an input finding on top", fed["top_ok"] == 1.0),
    ]
    table = pd.DataFrame(
        [(what, f"{int(hit.sum())} of {len(hit)}") for what, hit in rows],
        columns=["case", "right"],
    )
    return [
        *head,
        "`late_score`: the latest worker's mean lateness over the median step; `last_share`: "
        "the share of steps it arrived last in.",
        "",
        markdown(table, index=False),
        "",
    ]


def _cause_section(ok: pd.DataFrame, slowed: pd.Series) -> list[str]:
    """The straggler runs' culprit causes, per workload and slowed task (runs whose culprit is
    right): what the ``straggler_cause`` verdict tells the user to look at."""
    head = ["## The culprit's cause in straggler runs", ""]
    if "cause" not in ok:
        return [*head, "Not recorded in this runs.csv (`--rejudge` records it).", ""]
    right = (ok["scenario"] == "straggler") & ok["culprit_ok"].astype(bool)
    runs = ok[right].assign(slowed=slowed[right])
    text = (
        "Where the straggler sleeps: mwms-loop before its step; mwms-fit in its Keras "
        "`on_train_batch_begin`, inside its step, before the step function; ps in a "
        "SleepDataset of its input pipeline. An mwms-fit worker other than the chief is "
        "traced by the Python tracer only: its step's start is all the trace has of it, so its "
        "callbacks read as a late start. `mixed`: no component is two thirds of its late "
        "steps' summed excess."
    )
    if runs.empty:
        return [*head, "No straggler run named its culprit.", ""]
    table = pd.crosstab([runs["workload"], runs["slowed"]], runs["cause"].fillna("—"))
    return [*head, text, "", markdown(table), ""]


def jax_report(rows: pd.DataFrame, seed: int) -> str:
    """The JAX matrix's section: targets, accuracy per scenario, every run."""
    ok = rows[rows["error"].fillna("") == ""]
    slow = ok[ok["scenario"] != "baseline"]
    base = ok[ok["scenario"] == "baseline"]
    measured = dict(
        zip(
            JAX_TARGETS,
            [
                slow["culprit_ok"].astype(float).mean(),
                base["culprit_ok"].astype(float).mean(),
                slow["top_ok"].astype(float).mean(),
            ],
            strict=True,
        )
    )
    lines = [
        "",
        "# make verify, JAX: verdicts over randomized runs of XLA program steps",
        "",
        f"Seed {seed}; {len(rows)} runs ({len(rows) - len(ok)} failed to run); "
        f"{rows['seconds'].sum() / 60:.1f} min. Each run: the engine's JAX loop "
        "(`reference_engine.jax_workload`, jax.distributed with gloo on loopback), every "
        "process profiling itself with jax.profiler, analysed as `podscope diagnose` does.",
        "",
        *target_rows(JAX_TARGETS, measured),
    ]
    acc = ok.groupby("scenario").agg(
        runs=("culprit_ok", "size"),
        culprit_right=("culprit_ok", lambda c: c.astype(float).mean()),
        top_right=("top_ok", lambda c: c.dropna().astype(float).mean()),
    )
    small = slow[slow["late_score"].astype(float) < SMALL] if "late_score" in slow else slow[:0]
    lines += [
        "",
        markdown(acc),
        "",
        f"Small signals: {int(small['culprit_ok'].astype(bool).sum())} of {len(small)} slow "
        f"runs whose slowed worker was late by under {SMALL} of the median step named it "
        "(`late_score`: the latest worker's mean lateness over the median step).",
        "",
        "## Every JAX run",
        "",
        markdown(rows, index=False),
        "",
    ]
    return "\n".join(lines)


def _unwind_on_sigterm() -> None:
    """A SIGTERM (``kill``, a CI job's timeout) unwinds the stack as Ctrl-C does, so the run
    under way stops its cluster (``capture_scenario``'s ``finally``). Without it the engine's
    workers outlived the killed process and kept the cores busy."""

    def unwind(signum: int, frame: object) -> None:
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m verify", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--report", type=Path, default=Path("verify/REPORT.md"))
    p.add_argument("--keep", type=Path, default=Path("build/verify"), help="captures go here")
    p.add_argument("--only", default="", help="comma-separated scenarios (a partial matrix)")
    p.add_argument("--from-csv", type=Path, help="write the report of an earlier runs.csv")
    p.add_argument(
        "--rejudge", action="store_true", help="with --from-csv: judge its kept captures again"
    )
    p.add_argument("--jax-runs", type=int, default=15, help="runs of the JAX matrix (0: none)")
    p.add_argument("--jax-report", type=Path, default=Path("verify/JAX_REPORT.md"))
    p.add_argument("--jax-only", action="store_true", help="only the JAX matrix")
    p.add_argument("--torch-runs", type=int, default=24, help="runs of the PyTorch matrix")
    p.add_argument("--torch-report", type=Path, default=Path("verify/TORCH_REPORT.md"))
    p.add_argument("--torch-only", action="store_true", help="only the PyTorch matrix")
    p.add_argument(
        "--torch-from-csv",
        type=Path,
        help="judge an earlier PyTorch matrix's kept captures again (its torch_runs.csv)",
    )
    args = p.parse_args(argv)
    _unwind_on_sigterm()
    if args.torch_from_csv:
        rows = rejudge_torch(args.torch_from_csv)
        args.torch_report.write_text(torch_report(rows, args.seed, markdown, rejudged=True))
        return 0
    if args.from_csv:
        rows = pd.read_csv(args.from_csv, dtype={"error": str, "session": str})
        rows = rows.fillna({"error": "", "session": ""})
        if args.rejudge:
            for i, r in rows[rows["session"] != ""].iterrows():
                v = judge(Path(str(r["session"])))
                rows.loc[i, ["top", "culprits", "fired", "cause", "late_score", "last_share"]] = [
                    v.top,
                    ",".join(v.culprits) or "—",
                    ",".join(v.fired),
                    ",".join(v.causes) or "—",
                    v.late_score,
                    v.last_share,
                ]
        args.report.write_text(report(rows, args.seed, rejudged=args.rejudge))
        return 0
    if args.torch_only:
        args.jax_runs = 0
    runs = [] if args.jax_only or args.torch_only else draw(args.runs, args.seed)
    if args.only:
        runs = [r for r in runs if r.scenario in args.only.split(",")]
    shutil.rmtree(args.keep, ignore_errors=True)
    args.keep.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, run in enumerate(runs):
        row = _run_one(run, args.keep / f"run{i:02d}-{run.scenario}")
        rows.append(row)
        print(json.dumps(row), flush=True)
    jax_rows = []
    for i, jr in enumerate(draw_jax(args.jax_runs, args.seed)):
        jax_rows.append(run_jax(jr, args.keep / f"jax{i:02d}-{jr.scenario}"))
        print(json.dumps(jax_rows[-1]), flush=True)
    torch_rows = []
    for i, tr in enumerate(draw_torch(0 if args.jax_only else args.torch_runs, args.seed)):
        torch_rows.append(run_torch(tr, args.keep / f"torch{i:02d}-{tr.scenario}"))
        print(json.dumps(torch_rows[-1]), flush=True)
    if rows:
        frame = pd.DataFrame(rows)
        frame.to_csv(args.keep / "runs.csv", index=False)
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(report(frame, args.seed))
        print(f"report: {args.report}")
    if jax_rows:
        jax_frame = pd.DataFrame(jax_rows)
        jax_frame.to_csv(args.keep / "jax_runs.csv", index=False)
        args.jax_report.parent.mkdir(parents=True, exist_ok=True)
        args.jax_report.write_text(jax_report(jax_frame, args.seed).lstrip())
        print(f"report: {args.jax_report}")
    if torch_rows:
        torch_frame = pd.DataFrame(torch_rows)
        torch_frame.to_csv(args.keep / "torch_runs.csv", index=False)
        args.torch_report.parent.mkdir(parents=True, exist_ok=True)
        args.torch_report.write_text(torch_report(torch_frame, args.seed, markdown))
        print(f"report: {args.torch_report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
