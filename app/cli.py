"""The ``podscope`` command line: one sub-command per job; errors become one line + exit code.

$ podscope parse runs/demo --out frames/ --format csv     # frames/events/<worker>.csv, …
$ podscope parse 10.0.0.1_6009.xplane.pb --json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from podscope.app.cli_analyze import (
    analysis_options,
    compare_command,
    diagnose_command,
    memory_command,
    ops_command,
    steps_command,
)
from podscope.app.cli_capture import capture_command
from podscope.app.cli_cluster import cluster_cli
from podscope.app.cli_gpu import gpu_command
from podscope.app.cli_serve import (
    demo_command,
    export_command,
    hash_password_command,
    serve_command,
)
from podscope.app.cli_watch import watch_command
from podscope.app.cli_workers import (
    collectives_command,
    input_command,
    ps_command,
    stragglers_command,
)
from podscope.app.cli_xla import hlo_command, hlo_memory_command, roofline_command
from podscope.app.terminal import say, say_session


@click.group(no_args_is_help=True, context_settings={"show_default": True})
@click.version_option(package_name="podscope", message="podscope %(version)s")
def cli() -> None:
    """PodScope: capture, parse and explain TensorFlow, JAX, PyTorch and TFLite traces."""


for command in (
    cluster_cli,
    capture_command,
    watch_command,
    steps_command,
    ops_command,
    hlo_command,
    hlo_memory_command,
    roofline_command,
    gpu_command,
    memory_command,
    diagnose_command,
    compare_command,
    collectives_command,
    stragglers_command,
    input_command,
    ps_command,
    serve_command,
    demo_command,
    export_command,
    hash_password_command,
):
    cli.add_command(command)


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
