"""The options the analysis commands share, in a module of their own: click alone, so a
command's module can be imported (and ``podscope ops --no-cache`` start its workers) before
pandas is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

#: PATH: a trace file, a run folder or a logdir (each command's help says so).
path_argument = click.argument("path", type=click.Path(path_type=Path))
session_option = click.option("--session", help="Session of a logdir (default: newest).")
no_cache_option = click.option(
    "--no-cache", is_flag=True, help="Parse again; do not use the cache."
)
scheduler_option = click.option(
    "--scheduler",
    help="Run the per-worker tasks on this Dask scheduler (tcp://HOST:8786); default: "
    "$PODSCOPE_DASK_SCHEDULER, else this machine.",
)
csv_option = click.option("--csv", is_flag=True, help="CSV on stdout.")
wide_option = click.option(
    "--wide",
    is_flag=True,
    help="Every column on one line, however wide (default: fit the terminal).",
)


def analysis_options(command: Callable[..., None]) -> Callable[..., None]:
    """PATH and the options every analysis command takes: --session, --no-cache, --scheduler."""
    for option in (scheduler_option, no_cache_option, session_option, path_argument):
        command = option(command)
    return command
