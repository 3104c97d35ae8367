"""The ``podscope`` command line: one sub-command per job; errors become one line + exit code.

$ podscope parse runs/demo --out frames/ --format csv     # frames/events/<worker>.csv, …
$ podscope parse 10.0.0.1_6009.xplane.pb --json
"""

from __future__ import annotations

import json
import sys
from importlib import import_module
from pathlib import Path

import click

from podscope.app.cli_options import analysis_options
from podscope.app.terminal import say, say_session

#: Each command's module and name. A command's module is imported when the command runs (or
#: shows its help): one command does not pay for the others' imports (pandas, grpc, Dash),
#: and ``podscope ops --no-cache`` starts its workers before pandas is imported.
COMMANDS = {
    "capture": "podscope.app.cli_capture:capture_command",
    "cluster": "podscope.app.cli_cluster:cluster_cli",
    "collectives": "podscope.app.cli_workers:collectives_command",
    "compare": "podscope.app.cli_analyze:compare_command",
    "demo": "podscope.app.cli_serve:demo_command",
    "diagnose": "podscope.app.cli_analyze:diagnose_command",
    "export": "podscope.app.cli_serve:export_command",
    "gpu": "podscope.app.cli_gpu:gpu_command",
    "hash-password": "podscope.app.cli_serve:hash_password_command",
    "hlo": "podscope.app.cli_xla:hlo_command",
    "hlo-memory": "podscope.app.cli_xla:hlo_memory_command",
    "input": "podscope.app.cli_workers:input_command",
    "memory": "podscope.app.cli_analyze:memory_command",
    "ops": "podscope.app.cli_ops:ops_command",
    "ps": "podscope.app.cli_workers:ps_command",
    "roofline": "podscope.app.cli_xla:roofline_command",
    "serve": "podscope.app.cli_serve:serve_command",
    "steps": "podscope.app.cli_analyze:steps_command",
    "stragglers": "podscope.app.cli_workers:stragglers_command",
    "watch": "podscope.app.cli_watch:watch_command",
}


class _LazyGroup(click.Group):
    """A group whose ``COMMANDS`` load on first use (click's documented pattern for lazily
    loaded subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        module, name = where.split(":")
        command = getattr(import_module(module), name)
        assert isinstance(command, click.Command), where
        return command


@click.group(cls=_LazyGroup, no_args_is_help=True, context_settings={"show_default": True})
@click.version_option(package_name="podscope", message="podscope %(version)s")
def cli() -> None:
    """PodScope: capture, parse and explain TensorFlow, JAX, PyTorch and TFLite traces."""


EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> click.exceptions.Exit:
    """Prints one error line to stderr and returns the exit to raise."""
    say(f"podscope: error: {message}", err=True)
    return click.exceptions.Exit(code)


@cli.command()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write every frame as OUT/<frame>/<worker>.parquet (or .csv).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="OUT already holds exported frames: remove them first (else the export refuses).",
)
@click.option("--format", "fmt", default="parquet", help="parquet or csv")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@analysis_options
def parse(
    path: Path,
    out: Path | None,
    replace: bool,
    fmt: str,
    session: str | None,
    no_cache: bool,
    as_json: bool,
    scheduler: str | None,
) -> None:
    """Parse PATH (a .xplane.pb file, a run folder or a logdir) into typed frames; print a
    summary, optionally write the frames.

    One task per worker file (``analyzers.execution``; on Dask with ``--scheduler``): each writes its
    own frames to OUT/<frame>/<worker>.parquet (or .csv), so no process holds the session. Every
    table has a worker column, and events.event_row (the row that events.parent and
    stats.event_row name) joins across workers on (worker, event_row)."""
    import os

    from podscope.analyzers.execution import (
        ExecConfig,
        ExecutionError,
        export_file,
        merge_summaries,
        prepare_export,
        run_tasks,
    )
    from podscope.app.cli_analyze import EXIT_CLUSTER, task_progress
    from podscope.trace_parsers import TraceParseError, resolve

    if fmt not in ("parquet", "csv"):
        raise fail(f"--format must be parquet or csv, not {fmt!r}")
    config = ExecConfig.from_env(os.environ, scheduler=scheduler, cache=not no_cache)
    try:
        say_session(path, session)
        files = resolve(path, session)
        if out is not None:
            prepare_export(out, replace)
        target = str(out.resolve()) if out is not None else None
        args = (target, fmt, config.cache, config.cache_dir)
        with task_progress(0 if as_json else len(files)) as progress:
            parts, _ = run_tasks(export_file, [str(f) for f in files], config, args, progress)
        summary = merge_summaries(parts)
    except (TraceParseError, FileExistsError) as e:
        raise fail(str(e)) from None
    except ExecutionError as e:
        raise fail(str(e), EXIT_CLUSTER) from None
    if out is not None:
        summary["written"] = str(out)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        from podscope.app.cli_table import render_parse_summary as render

        render(summary)
    for failure in summary["failures"]:
        say(f"podscope: warning: {failure}", err=True)


def main() -> None:
    """Entry point of the ``podscope`` console script.

    A command that finished (any exit code) leaves without the interpreter's teardown: once
    the output is flushed and the exit handlers (Dask's, logging's) have run, unloading
    pandas, pyarrow and the rest only costs time, 0.15-0.2 s on every run here. An exception
    that escapes the command still takes the normal path, traceback included."""
    import atexit
    import os

    from podscope.trace_parsers.compiled import CompiledReadersMissing

    try:
        cli(prog_name="podscope")
    except SystemExit as e:
        code = e.code
    except CompiledReadersMissing as e:  # one line, as every other error, not a traceback
        say(f"podscope: error: {e}", err=True)
        code = EXIT_BAD_INPUT
    else:
        code = 0
    if isinstance(code, str):  # sys.exit("message"), as the interpreter would print it
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))
