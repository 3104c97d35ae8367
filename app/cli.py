"""The ``podscope`` command line: one sub-command per job; errors become one line + exit code.

$ podscope parse runs/demo --out frames/ --format csv
$ podscope parse 10.0.0.1_6009.xplane.pb --json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli_analyze import (
    compare_command,
    diagnose_command,
    memory_command,
    ops_command,
    steps_command,
)
from app.cli_capture import capture_command
from app.cli_cluster import cluster_cli
from app.cli_serve import demo_command, export_command, serve_command
from app.summary import summarize

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="PodScope: capture, parse and explain TF traces.",
)
cli.add_typer(cluster_cli, name="cluster")
cli.command("capture")(capture_command)
cli.command("steps")(steps_command)
cli.command("ops")(ops_command)
cli.command("memory")(memory_command)
cli.command("diagnose")(diagnose_command)
cli.command("compare")(compare_command)
cli.command("serve")(serve_command)
cli.command("demo")(demo_command)
cli.command("export")(export_command)


@cli.callback()
def _root() -> None:
    """PodScope: capture, parse and explain TensorFlow and TFLite traces."""


EXIT_BAD_INPUT = 2
#: Above this many input bytes, parsing shows a progress bar.
PROGRESS_MIN_BYTES = 50 << 20


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Prints one error line to stderr and returns the exit to raise."""
    typer.echo(f"podscope: error: {message}", err=True)
    return typer.Exit(code)


@cli.command()
def parse(
    path: Annotated[Path, typer.Argument(help="A .xplane.pb file, a run folder or a logdir.")],
    out: Annotated[Path | None, typer.Option(help="Write every frame into this folder.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet or csv")] = "parquet",
    session: Annotated[
        str | None, typer.Option(help="Session of a logdir (default: newest).")
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse again; do not use the cache.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Parse a trace into typed frames; print a summary, optionally write the frames."""
    from trace_parsers import TraceParseError, load, resolve

    if fmt not in ("parquet", "csv"):
        raise fail(f"--format must be parquet or csv, not {fmt!r}")
    try:
        files = resolve(path, session)
        total = sum(f.stat().st_size for f in files)
        if total >= PROGRESS_MIN_BYTES and not as_json and sys.stderr.isatty():
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("parsing", total=len(files))
                frames = load(
                    path, session=session, cache=not no_cache, on_file=lambda f: bar.advance(task)
                )
        else:
            frames = load(path, session=session, cache=not no_cache)
    except TraceParseError as e:
        raise fail(str(e)) from None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, frame in frames.frames():
            if fmt == "csv":
                frame.to_csv(out / f"{name}.csv", index=False)
            else:
                frame.to_parquet(out / f"{name}.parquet", index=False)
    summary = summarize(frames)
    if out is not None:
        summary["written"] = str(out)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        from app.summary import render

        render(summary)
    for failure in frames.failures:
        typer.echo(f"podscope: warning: {failure}", err=True)


def main() -> None:
    """Entry point of the ``podscope`` console script."""
    cli()
