"""``podscope gpu``: Holistic Trace Analysis' numbers for a session's PyTorch ranks, as a table
or ``--csv`` (``analyzers.gpu_views``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pandas as pd

from podscope.app.cli_options import no_cache_option, path_argument, session_option, wide_option
from podscope.app.cli_table import show_table
from podscope.app.terminal import say, say_session

#: What each view shows, for the table's title.
TITLES = {
    "temporal": "GPU µs per rank (HTA's temporal breakdown; non-comp: non-compute kernels)",
    "overlap": "communication overlapped by computation",
    "kernel-types": "GPU time by kernel type, over every rank",
    "kernels": "top kernels per rank and type",
    "idle": "GPU idle µs per rank and stream, by cause",
    "launches": "kernel launches per rank, µs (every launch: --csv)",
    "queues": "operations queued per stream",
    "memory-bw": "memory bandwidth in use (GB/s) per copy kind",
}


#: Shorter headers for the terminal's table (the CSV keeps HTA's names).
SHORT = {
    "idle_time_us": "idle",
    "compute_time_us": "compute",
    "non_compute_time_us": "non-comp",
    "kernel_time_us": "kernel",
    "idle_time_pctg": "idle %",
    "compute_time_pctg": "compute %",
    "non_compute_time_pctg": "non-comp %",
    "comp_comm_overlap_pctg": "overlapped %",
    "kernel_type": "type",
    "percentage": "%",
}


def launch_summary(launches: pd.DataFrame) -> pd.DataFrame:
    """Per rank: launches, and the mean and largest CPU duration, GPU duration and delay."""
    grouped = launches.groupby("rank")
    out = grouped.size().rename("launches").to_frame()
    for column, short in (
        ("cpu_duration", "cpu"),
        ("gpu_duration", "gpu"),
        ("launch_delay", "delay"),
    ):
        out[f"{short} mean"] = grouped[column].mean().round(1)
        out[f"{short} max"] = grouped[column].max()
    return out.reset_index()


@click.command("gpu")
@click.option("--csv", is_flag=True, help="CSV on stdout, columns named as HTA names them.")
@wide_option
@click.option(
    "--view",
    type=click.Choice(list(TITLES)),
    default="temporal",
    show_default=True,
    help="Which of Holistic Trace Analysis' views.",
)
@no_cache_option
@session_option
@path_argument
def gpu_command(
    path: Path, csv: bool, wide: bool, view: str, no_cache: bool, session: str | None
) -> None:
    """Holistic Trace Analysis' numbers for the PyTorch ranks of PATH (a torch.profiler
    trace, a folder of them or a logdir), by HTA's definitions: temporal (idle, compute and
    non-compute GPU time), overlap (communication overlapped by computation), kernel-types,
    kernels, idle (host wait, kernel wait, other), launches (CPU and GPU duration and launch
    delay of each launch), queues (CUDA queue length per stream) and memory-bw (copy
    bandwidth)."""
    from podscope.analyzers.gpu_views import gpu_view, pytorch_workers
    from podscope.trace_parsers import TraceParseError, load

    try:
        say_session(path, session)
        frames = load(path, session=session, cache=not no_cache)
    except TraceParseError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    for failure in frames.failures:
        say(f"podscope: warning: left out: {failure}", err=True)
    if not pytorch_workers(frames):
        say(f"podscope: error: {path} holds no PyTorch profiler trace", err=True)
        raise click.exceptions.Exit(2)
    table = gpu_view(frames, view)
    if gpu_view(frames, "temporal").empty:  # every view is about GPU events
        say(
            f"podscope: {path} is a PyTorch capture without GPU events (a CPU-only run): HTA's "
            "views are about GPU time; `podscope ops` and the Timeline show its CPU ops",
            err=True,
        )
    if csv:
        table.to_csv(sys.stdout, index=False)
        return
    if view == "launches":  # one row per launch: the terminal gets each rank's summary
        table = launch_summary(table)
    whole = {  # µs are whole numbers but in traces with fractional durations: no ".000"
        c: "int64"
        for c in table.columns
        if c.endswith("_us") and table[c].notna().all() and (table[c] % 1 == 0).all()
    }
    shown = table.astype(whole).rename(columns=lambda c: SHORT.get(c, c.replace("_", " ")))
    show_table(shown, TITLES[view], wide=wide, cut="name" if view == "kernels" else None)
