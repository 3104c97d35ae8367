"""Why a multi-worker job is slow, on the command line: ``podscope collectives``,
``podscope stragglers`` and ``podscope input``, each a table (or ``--csv``) per worker or
per instance, from the same ``SessionAnalysis`` attributes as the dashboard's sections."""

from __future__ import annotations

import sys
from typing import Annotated

import pandas as pd
import typer

from app.cli_analyze import (
    NoCacheOpt,
    PathArg,
    SchedulerOpt,
    SessionOpt,
    _analysis_or_exit,
)
from app.cli_table import WideOpt, show_table
from app.units import in_ms

CsvOpt = Annotated[bool, typer.Option("--csv", help="CSV on stdout.")]
TopOpt = Annotated[int, typer.Option(help="Rows in the table view.")]


def _show(frame: pd.DataFrame, title: str, csv: bool, top: int = 30, wide: bool = False) -> None:
    """The frame as CSV on stdout, or its first ``top`` rows as a table that fits the
    terminal (``app.cli_table``)."""
    if csv:
        frame.to_csv(sys.stdout, index=False)
        return
    show_table(frame.head(top), title, wide=wide)


def collectives_command(
    path: PathArg,
    csv: CsvOpt = False,
    wide: WideOpt = False,
    instances: Annotated[
        bool, typer.Option("--instances", help="One row per collective instance.")
    ] = False,
    top: TopOpt = 30,
    session: SessionOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Collectives matched across workers: per worker the time in them, its wait and how often
    it arrived last; with --instances, each instance's skew, last arriver and latency."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    if a.collective_calls.empty:
        typer.echo("podscope: no collective ops or kernels in this capture.", err=True)
    if instances:
        table = in_ms(a.collectives, a.start_ns)
        _show(
            table,
            "collective instances (skew/last arriver need ≥ 2 traced participants)",
            csv,
            top,
            wide,
        )
        return
    _show(a.collective_summary, "collectives per worker", csv, top, wide)
    if not csv and len(a.collective_summary) and not (a.collective_summary["measured"] > 0).any():
        typer.echo(
            "Each collective has one traced participant (safe plan: the chief's ops only): waits "
            "are estimated from step starts in `podscope stragglers`."
        )


def stragglers_command(
    path: PathArg,
    csv: CsvOpt = False,
    wide: WideOpt = False,
    steps: Annotated[
        bool, typer.Option("--steps", help="One row per slow worker-step instead of per worker.")
    ] = False,
    top: TopOpt = 30,
    session: SessionOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Culprits and victims: per worker its late steps and its wait for the others; with
    --steps, each slow worker-step's excess split into components and ops, and its cause."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    if steps:
        _show(
            in_ms(a.slow_steps, a.start_ns),
            "slow worker-steps (cause: one component ≥ 80 % of the excess)",
            csv,
            top,
            wide,
        )
    else:
        _show(a.roles, "culprits and victims", csv, top, wide)


def input_command(
    path: PathArg,
    csv: CsvOpt = False,
    wide: WideOpt = False,
    iterators: Annotated[
        bool, typer.Option("--iterators", help="One row per worker and iterator (the tree).")
    ] = False,
    top: TopOpt = 30,
    session: SessionOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """The tf.data input pipeline per worker: input wait, blocking calls, the bottleneck stage
    and what to change; with --iterators, every iterator's calls, self time, work and wait."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
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
        _show(summary, "", csv)
        return
    _show(
        summary.drop(columns=["slowest_call_start_ns", "bottleneck", "suggestion"]),
        "input pipeline per worker (input: time the step waited; empty: Python tracer only)",
        csv,
        top,
        wide,
    )
    for r in summary[summary["bottleneck"] != ""].itertuples():
        typer.echo(f"{r.worker}: bottleneck {r.bottleneck} ({r.user_name}) → {r.suggestion}")


def ps_command(
    path: PathArg,
    csv: CsvOpt = False,
    wide: WideOpt = False,
    session: SessionOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """ParameterServerStrategy balance: per PS task its variables, reads, updates, sends and
    busy time, and its share of the parameter servers' load."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler)
    if a.ps_balance.empty and not csv:
        typer.echo(
            "podscope: no parameter-server task in this capture (a task that applies variable "
            "updates, computes no gradients and runs no training steps).",
            err=True,
        )
        return
    _show(
        a.ps_balance, "parameter servers (bytes are not in TF's trace: load is time)", csv, 30, wide
    )
