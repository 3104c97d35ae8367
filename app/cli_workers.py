"""Why a multi-worker job is slow, on the command line: ``podscope collectives``,
``podscope stragglers`` and ``podscope input``, each a table (or ``--csv``) per worker or
per instance, from the same ``SessionAnalysis`` attributes as the dashboard's sections."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np
import pandas as pd

from podscope.app.cli_analyze import _analysis_or_exit
from podscope.app.cli_options import analysis_options, csv_option, wide_option
from podscope.app.cli_table import show_table
from podscope.app.terminal import say
from podscope.app.units import in_ms

if TYPE_CHECKING:
    from podscope.analyzers.session import SessionAnalysis

top_option = click.option("--top", type=int, default=30, help="Rows in the table view.")


def _show(
    frame: pd.DataFrame,
    title: str,
    csv: bool,
    top: int = 30,
    wide: bool = False,
    why: str = "",
    a: SessionAnalysis | None = None,
) -> None:
    """The frame as CSV on stdout, or its first ``top`` rows as a table that fits the
    terminal (``app.cli_table``); an empty one says ``why`` instead. With the analysis ``a``
    whose capture names its workers' tasks, a ``task`` column comes before ``worker``."""
    if a is not None:
        frame = a.with_task(frame)
    if csv:
        frame.to_csv(sys.stdout, index=False)
        return
    if len(frame):
        show_table(frame.head(top), title, wide=wide)
        if len(frame) > top:
            say(
                f"podscope: {top} of {len(frame):,} rows shown (--top N for more, --csv for all)",
                err=True,
            )
    elif why:
        say(f"podscope: {title.split(';')[0]}: none ({why})", err=True)


def _calls_in_steps(a: SessionAnalysis) -> pd.DataFrame:
    """Every collective call (``collective_calls``) with ``in_step``: whether it started inside
    one of its worker's steps."""
    calls = a.collective_calls.reset_index(drop=True)
    inside = np.zeros(len(calls), dtype=bool)
    steps = a.steps
    for worker, rows in calls.groupby(calls["worker"].astype(str), sort=False):
        mine = steps[steps["worker"].astype(str) == worker].sort_values("start_ns")
        if mine.empty:
            continue
        start = rows["start_ns"].to_numpy("int64")
        at = np.searchsorted(mine["start_ns"].to_numpy("int64"), start, side="right") - 1
        ends = np.maximum.accumulate(mine["end_ns"].to_numpy("int64"))  # steps may overlap
        inside[rows.index] = (at >= 0) & (start < ends[np.maximum(at, 0)])
    return calls.assign(in_step=inside)


def _no_comparison(a: SessionAnalysis) -> str:
    """Why a session has no culprits and victims to show, or "" when it has."""
    if len(a.roles):
        return ""
    with_steps = int((a.methods["steps"] > 0).sum())
    if with_steps < 2:
        return f"stragglers need steps on two workers or more; {with_steps} here has steps"
    return "the workers' steps do not compare (different kinds of step, or no common step)"


@click.command("collectives")
@csv_option
@wide_option
@click.option("--instances", is_flag=True, help="One row per collective instance.")
@click.option(
    "--calls",
    is_flag=True,
    help="One row per collective call, matched or not, with whether it ran inside a step.",
)
@top_option
@analysis_options
def collectives_command(
    path: Path,
    csv: bool,
    wide: bool,
    instances: bool,
    calls: bool,
    top: int,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Collectives matched across workers of PATH (a trace file, a run folder or a logdir): per worker the time in them, its wait and how often
    it arrived last; with --instances, each instance's skew, last arriver and latency; with
    --calls, every call with whether it ran inside a step."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    every = _calls_in_steps(a)
    if every.empty:
        say("podscope: no collective ops or kernels in this capture.", err=True)
    elif a.collective_summary.empty:
        say(
            f"podscope: {len(every)} collective calls ({', '.join(sorted(set(every['kind'])))}) "
            f"in this capture, {int(every['in_step'].sum())} inside a step (the others ran "
            "outside the program the steps repeat): nothing to match across steps; "
            "--calls lists them.",
            err=True,
        )
    if calls:
        _show(in_ms(every, a.start_ns), "collective calls", csv, top, wide, a=a)
        return
    if instances:
        table = in_ms(a.collectives, a.start_ns)
        _show(
            table,
            "collective instances (skew/last arriver need ≥ 2 traced participants)",
            csv,
            top,
            wide,
            a=a,
        )
        return
    _show(a.collective_summary, "collectives per worker", csv, top, wide, a=a)
    if not csv and len(a.collective_summary) and not (a.collective_summary["measured"] > 0).any():
        say(
            "Each collective has one traced participant (safe plan: the chief's ops only): waits "
            "are estimated from step starts in `podscope stragglers`."
        )


@click.command("stragglers")
@csv_option
@wide_option
@click.option("--steps", is_flag=True, help="One row per slow worker-step instead of per worker.")
@top_option
@analysis_options
def stragglers_command(
    path: Path,
    csv: bool,
    wide: bool,
    steps: bool,
    top: int,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Culprits and victims in PATH (a trace file, a run folder or a logdir): per worker its late steps, its mean lateness (the Pod Viewer heat map row's mean) and its wait for the others; with
    --steps, each slow worker-step's excess split into components and ops, and its cause."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    if steps:
        _show(
            in_ms(a.slow_steps, a.start_ns),
            "slow worker-steps (cause: one component ≥ 80 % of the excess)",
            csv,
            top,
            wide,
            why=_no_comparison(a) or "no worker-step late by 10 % of the median step or more",
            a=a,
        )
    else:
        from podscope.analyzers.attribution import ranked_roles

        _show(
            ranked_roles(a.roles, a.stragglers),
            "culprits and victims; late ms: mean arrival after the others' median",
            csv,
            top,
            wide,
            why=_no_comparison(a),
            a=a,
        )


@click.command("input")
@csv_option
@wide_option
@click.option("--iterators", is_flag=True, help="One row per worker and iterator (the tree).")
@top_option
@analysis_options
def input_command(
    path: Path,
    csv: bool,
    wide: bool,
    iterators: bool,
    top: int,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """The tf.data input pipeline per worker of PATH (a trace file, a run folder or a logdir): input wait, blocking calls, the bottleneck stage
    and what to change; with --iterators, every iterator's calls, self time, work and wait."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    from podscope.analyzers.diagnostics.speech import audience, no_input_pipeline

    if a.iterators.empty and audience(a) != "tensorflow":
        # no table of zeros where no tf.data pipeline can be: why, in the framework's terms
        if csv:
            (a.iterators if iterators else a.input_pipeline).head(0).to_csv(sys.stdout, index=False)
        say(f"podscope: {no_input_pipeline(a)}.", err=True)
        return
    if iterators:
        _show(
            in_ms(a.iterators, a.start_ns),
            "tf.data iterators (self time as XProf's input op table)",
            csv,
            top,
            wide,
        )
        return
    summary = a.input_pipeline
    if csv:
        _show(summary, "", csv, a=a)
        return
    _show(
        summary.drop(columns=["slowest_call_start_ns", "bottleneck", "suggestion"]),
        "input pipeline per worker (input: time the step waited; empty: Python tracer only)",
        csv,
        top,
        wide,
        a=a,
    )
    for r in summary[summary["bottleneck"] != ""].itertuples():
        named = f" ({r.user_name})" if r.user_name else ""
        say(f"{a.named(r.worker)}: bottleneck {r.bottleneck}{named}\n  → {r.suggestion}")


@click.command("ps")
@csv_option
@wide_option
@analysis_options
def ps_command(
    path: Path,
    csv: bool,
    wide: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """ParameterServerStrategy balance in PATH (a trace file, a run folder or a logdir): per PS
    task its variables, reads, updates, sends and
    busy time, and its share of the parameter servers' load."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    if a.ps_balance.empty and not csv:
        say(
            "podscope: no parameter-server task in this capture (a task that applies variable "
            "updates, computes no gradients and runs no training steps).",
            err=True,
        )
        return
    _show(
        a.ps_balance, "parameter servers (bytes are not in TF's trace: load is time)", csv, 30, wide
    )
