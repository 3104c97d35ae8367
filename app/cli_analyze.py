"""``podscope steps``: the per-step time breakdown of every worker and device, as CSV or a table."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
import pandas as pd

from podscope.analyzers.torch_view import TORCH_CATEGORIES
from podscope.app.cli_options import (
    analysis_options,
    no_cache_option,
    scheduler_option,
    wide_option,
)
from podscope.app.cli_table import show_table
from podscope.app.terminal import say, say_session
from podscope.app.units import fmt_number

if TYPE_CHECKING:
    from podscope.analyzers.session import SessionAnalysis

#: Exit code when the Dask cluster is unreachable or lost (as for a failed capture).
EXIT_CLUSTER = 4

STEP_CSV_COLUMNS = [
    "worker",
    "device",
    "step",
    "step_num",
    "step_time_us",
    "device_compute_us",
    "device_to_device_us",
    "device_collectives_us",
    "host_compute_us",
    "kernel_launch_us",
    "input_us",
    "output_us",
    "compilation_us",
    "all_others_us",
    "host_offload_us",
    "device_idle_us",
    "device_compute_16_us",
    "method",
]


#: A PyTorch capture's CSV: its categories (``analyzers.torch_view``).
TORCH_CSV_COLUMNS = [
    "worker",
    "device",
    "step",
    "step_time_us",
    *(f"{c}_us" for c in TORCH_CATEGORIES),
]


def steps_table(breakdown: pd.DataFrame, columns: list[str] = STEP_CSV_COLUMNS) -> pd.DataFrame:
    """The breakdown in the CLI's units: ``_ns`` integer columns → ``_us`` (3 decimals)."""
    out = breakdown.copy()
    for col in [c for c in out.columns if c.endswith("_ns") and c != "start_ns"]:
        out[col.removesuffix("_ns") + "_us"] = (out[col].astype("Float64") / 1000).round(3)
    return out[columns]


@click.command("steps")
@click.option("--csv", is_flag=True, help="CSV on stdout (one row per worker × device × step).")
@wide_option
@analysis_options
def steps_command(
    path: Path,
    csv: bool,
    wide: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Step-time breakdown per worker, device and step of PATH (a trace file, a run folder or a
    logdir): XProf's categories, or a PyTorch capture's own (GPU compute, communication wait
    and transfer, memcpy, CPU and Python, DataLoader, GPU idle)."""
    analysis = _analysis_or_exit(
        path, session, no_cache, frozenset({"steps", "breakdown", "pod_inputs"}), scheduler
    )
    torch = analysis.trace_kind == "pytorch"
    table = (
        steps_table(analysis.torch_breakdown, TORCH_CSV_COLUMNS)
        if torch
        else steps_table(analysis.breakdown)
    )
    missing = analysis.missing
    for row in analysis.methods.itertuples():
        if row.method != "marker":
            say(f"podscope: note: {row.worker}: {row.note}", err=True)
    if len(missing):
        say(
            f"podscope: note: {len(missing)} (worker, step) pairs missing on some workers were left out",
            err=True,
        )
    if analysis.partial_note:
        say(f"podscope: note: {analysis.partial_note}", err=True)
    if csv:
        table.to_csv(sys.stdout, index=False)
        return
    render_summary(table, wide, TORCH_SHORT if torch else SHORT)


#: A PyTorch capture's categories, as the terminal heads them.
TORCH_SHORT = {
    "gpu_compute_us": "gpu",
    "comm_wait_us": "wait",
    "comm_transfer_us": "comm",
    "memcpy_us": "memcpy",
    "cpu_python_us": "cpu+py",
    "dataloader_us": "loader",
    "gpu_idle_us": "idle",
}
SHORT = {
    "device_compute_us": "dev",
    "device_to_device_us": "d2d",
    "device_collectives_us": "coll",
    "host_compute_us": "host",
    "kernel_launch_us": "launch",
    "input_us": "input",
    "output_us": "out",
    "compilation_us": "compile",
    "all_others_us": "other",
    "host_offload_us": "offload",
    "device_idle_us": "idle",
}


def render_summary(
    table: pd.DataFrame, wide: bool = False, short: dict[str, str] | None = None
) -> None:
    """Per worker and device: steps, mean step time, and each category's share of it
    (``short``: the categories' columns and heads, default XProf's)."""
    short = short or SHORT
    if table.empty:
        say(
            "podscope: no steps: no step markers, no repeated training function and no XLA "
            "program executed more than once (an Android trace's steps are TFLite invokes, on "
            "the dashboard's TFLite page)",
            err=True,
        )
        return
    rows = []
    for (worker, device), g in table.groupby(["worker", "device"]):
        step = g["step_time_us"].mean()
        shares = {
            name: f"{g[c].mean() / step * 100:.0f}" if g[c].notna().any() else "n/a"
            for c, name in short.items()
        }
        rows.append(
            {
                "worker": str(worker),
                "device": str(device).removeprefix("/device:"),
                "steps": len(g),
                "step_ms": round(step / 1000, 2),
                **shares,
            }
        )
    frame = pd.DataFrame(rows)
    zero = [c for c in short.values() if not wide and frame[c].isin(["0", "n/a"]).all()]
    show_table(
        frame.drop(columns=zero),
        "mean step time and its breakdown (% of step); n/a: Python tracer only"
        + (f"; 0 everywhere, left out (--wide shows them): {', '.join(zero)}" if zero else ""),
        wide=wide,
    )


def _analysis_or_exit(
    path: Path,
    session: str | None,
    no_cache: bool,
    parts: frozenset[str],
    scheduler: str | None = None,
) -> SessionAnalysis:
    """The session's analysis, ``parts`` computed per worker by ``analyzers.execution`` (in this
    process for small sessions, else on Dask) with progress on a terminal; failed workers are
    listed and the others kept. A parse error becomes one line on stderr and exit code 2, a
    lost cluster exit code 4."""
    import os

    from podscope.analyzers.execution import ExecConfig, ExecutionError, run_session
    from podscope.trace_parsers import TraceParseError, resolve

    try:
        config = ExecConfig.from_env(os.environ, scheduler=scheduler, cache=not no_cache)
        say_session(path, session)
        files = resolve(path, session)
        with task_progress(len(files)) as progress:
            run = run_session(files, config, parts, progress)
    except TraceParseError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    except ExecutionError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(EXIT_CLUSTER) from None
    for failed in run.failures:
        say(f"podscope: warning: {failed.worker} left out: {failed.error}", err=True)
    return run.analysis


@contextmanager
def task_progress(total: int) -> Iterator[Callable[[int, int], None] | None]:
    """A per-worker task bar on an interactive terminal (nothing otherwise)."""
    if total < 2 or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("workers analysed", total=total)
        yield lambda done, _total: bar.update(task, completed=done)


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--csv", help="steps, ops or xla: that comparison as CSV on stdout.")
@wide_option
@click.option("--top", type=int, default=15, help="Op rows in the table view.")
@click.option("--base-session", help="Session of BASE's logdir.")
@click.option("--new-session", help="Session of NEW's logdir.")
@no_cache_option
@scheduler_option
def compare_command(
    base: Path,
    new: Path,
    csv: str | None,
    wide: bool,
    top: int,
    base_session: str | None,
    new_session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Two runs side by side: step time and its categories per step, and the ops that changed.
    BASE is the baseline, NEW the new run: each a trace file, a run folder or a logdir."""
    from podscope.analyzers.compare import compare_ops, compare_steps
    from podscope.analyzers.hlo_stats import compare_hlo

    if csv not in (None, "steps", "ops", "xla"):
        say("podscope: error: --csv must be steps, ops or xla", err=True)
        raise click.exceptions.Exit(2)
    parts = frozenset({"steps", "breakdown", "pod_inputs", "ops:op", "xla_ops"})
    runs = [
        _analysis_or_exit(path, session, no_cache, parts, scheduler)
        for path, session in ((base, base_session), (new, new_session))
    ]
    (base_pod, cats), (new_pod, _) = runs[0].own_pod(runs[1]), runs[1].own_pod(runs[0])
    steps = compare_steps(base_pod, new_pod, cats)
    ops = compare_ops(
        runs[0].op_table, runs[1].op_table, runs[0].capture_steps, runs[1].capture_steps
    )
    xla = compare_hlo(runs[0].hlo_table(), runs[1].hlo_table())
    if csv:
        {"steps": steps, "ops": ops, "xla": xla}[csv].to_csv(sys.stdout, index=False)
        return

    def changes(frame: pd.DataFrame, columns: dict[str, str], title: str, cut: str = "") -> None:
        """``frame``'s ``columns`` under their headers, a change with its sign (+12.3%)."""
        shown = frame[list(columns)].rename(columns=columns)
        shown["change"] = frame["change"].map(lambda v: "" if pd.isna(v) else f"{v:+.1%}")
        show_table(shown, title, wide=wide, cut=cut or None)

    changes(
        steps,
        {"metric": "metric", "base_ms": "base ms", "new_ms": "new ms", "delta": "delta ms",
         "change": "change"},
        "ms per traced worker-step (its busiest device)",
    )  # fmt: skip
    unit = "traced worker-step" if (ops["per"] == "step").all() else "worker (whole capture)"
    changes(
        ops.head(top).astype({"op_type": str, "op_name": str}),
        {"op_type": "op_type", "op_name": "op_name", "base_us": "base µs", "new_us": "new µs",
         "delta": "delta µs", "change": "change", "status": "status"},
        f"top {top} ops by change in self time (per {unit})",
        cut="op_name",
    )  # fmt: skip
    if len(xla):
        changes(
            xla.head(top).astype({"program": str, "hlo_op_name": str}),
            {"program": "program", "hlo_op_name": "XLA op", "base_avg_us": "base µs",
             "new_avg_us": "new µs", "change": "change", "status": "status"},
            f"top {top} XLA ops by change in time per occurrence",
            cut="XLA op",
        )  # fmt: skip


@click.command("memory")
@click.option(
    "--csv", is_flag=True, help="The memory timeline (or, with --summary, the report) as CSV."
)
@click.option(
    "--summary", is_flag=True, help="With --csv: the per-allocator report, not the timeline."
)
@analysis_options
def memory_command(
    path: Path,
    csv: bool,
    summary: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Per worker and allocator of PATH (a trace file, a run folder or a logdir): peak,
    fragmentation, live blocks at the peak and growth per step (a leak); --csv: every
    allocator event."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"memory", "steps"}), scheduler)
    timeline = a.memory
    if timeline.empty:
        say(
            "podscope: this capture has no allocator events (TF records them for BFC allocators: "
            "GPU hosts, or CPU with TF_CPU_ALLOCATOR_USE_BFC=true); nothing to show.",
            err=True,
        )
    report = a.memory_report
    if csv:
        (report if summary else timeline).to_csv(sys.stdout, index=False)
        return
    for row in report.itertuples():
        growth = (
            f"; grows {fmt_number(row.growth_bytes_per_step / 2**20)} MiB per step over "
            f"{row.steps} steps"
            f"{' — LEAK' if row.leak else ''}"
            if row.growth_bytes_per_step == row.growth_bytes_per_step
            else ""
        )
        say(
            f"{row.worker} {row.allocator}: peak {row.peak_bytes / 2**20:,.1f} MiB, fragmentation "
            f"{row.fragmentation_at_peak:.3f}{growth}\n  live at peak ({row.live_at_peak} blocks): "
            f"{row.top_live}"
        )


@click.command("diagnose")
@click.option(
    "--json", "as_json", is_flag=True, help="Every finding as JSON (evidence, expression)."
)
@analysis_options
def diagnose_command(
    path: Path,
    as_json: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Findings for PATH (a trace file, a run folder or a logdir), ranked, each with its
    evidence and advice in the terms of the trace's framework (TensorFlow's GPU performance
    guide, JAX's profiling docs, PyTorch's tuning guide); exit code 0 whatever they say."""
    import dataclasses
    import json

    from podscope.app.units import fmt_value

    findings = _analysis_or_exit(path, session, no_cache, frozenset({"rules"}), scheduler).findings
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(f) for f in findings], indent=2, default=str))
        return
    for f in findings:
        if not f.applies:
            say(f"  n/a       {f.rule_id}: {f.reason}")
        elif f.severity == "none":
            say(
                f"  ok        {f.title} ({fmt_value(f.value, f.unit)})"
                if f.value is not None
                else f"  ok        {f.title}"
            )
        else:
            shown = "" if f.value is None else f": {fmt_value(f.value, f.unit)}"
            say(f"{f.severity.upper():9} {f.title}{shown}\n          → {f.recommendation}")
