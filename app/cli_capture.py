"""``podscope capture``: every worker in one window, traces brought home, one line per worker.

Exit codes: 0 every worker captured; 3 partial (the good traces are kept); 4 nothing
captured; 2 bad usage.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from podscope.app.terminal import say

if TYPE_CHECKING:  # gRPC and the capture client load only when a capture runs
    from podscope.collectors.capture import CaptureOptions, CaptureResult, Target, WorkerResult

#: Rich colour per ``Status.tone``.
STATUS_STYLE = {"ok": "green", "lost": "red", "retry": "yellow", "running": "cyan"}


def _table(workers: list[WorkerResult]) -> object:
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("worker", "role", "status", "tracers h/py", "MB", "reason"):
        table.add_column(col)
    for w in workers:
        style = STATUS_STYLE[w.status.tone]
        role = w.task
        levels = (
            f"{w.host_tracer_level}/{w.python_tracer_level}"
            if w.host_tracer_level is not None
            else ""
        )
        table.add_row(
            w.label,
            role,
            f"[{style}]{w.status}[/]",
            levels,
            f"{w.bytes / 1e6:.1f}" if w.bytes else "",
            w.reason,
        )
    return table


def run_capture(targets: list[Target], opts: CaptureOptions, live: bool) -> CaptureResult:
    """Runs the capture, redrawing a per-worker table while it goes when ``live``."""
    from podscope.collectors.capture import WorkerResult, capture

    if not live:
        return capture(targets, opts)
    from rich.live import Live

    shown = [WorkerResult(t.worker_label, t.address) for t in targets]
    lock = threading.Lock()
    with Live(_table(shown), refresh_per_second=8, transient=True) as screen:  # type: ignore[arg-type]

        def update(r: WorkerResult) -> None:
            with lock:
                shown[[w.label for w in shown].index(r.label)] = r
                screen.update(_table(shown))  # type: ignore[arg-type]

        return capture(targets, opts, on_update=update)


@click.command("capture")
@click.argument("addresses", required=False)
@click.option(
    "--cluster",
    type=click.Path(path_type=Path),
    help="An engine cluster manifest (cluster.json) instead of addresses.",
)
@click.option(
    "--logdir",
    type=click.Path(path_type=Path),
    default=Path("runs/captures"),
    envvar="PODSCOPE_LOGDIR",
    help="Traces go to LOGDIR/plugins/profile/<session>/ (default: $PODSCOPE_LOGDIR, "
    "the folder the dashboard serves, else runs/captures).",
)
@click.option("--duration-ms", type=int, default=2000, help="Trace window.")
@click.option(
    "--delay-ms",
    type=int,
    default=500,
    help="Common start: this long after the requests go out.",
)
@click.option(
    "--host-tracer-level",
    type=int,
    default=2,
    help="0 off, 1 user, 2 default, 3 verbose.",
)
@click.option("--python-tracer-level", type=int, default=0, help="1 traces Python calls.")
@click.option("--device-tracer-level", type=int, default=1, help="1 traces GPUs.")
@click.option(
    "--retries",
    type=int,
    default=2,
    help="Extra attempts for a worker that does not answer (backoff).",
)
@click.option("--timeout-s", type=float, help="Per-worker deadline (default delay+duration+30 s).")
@click.option("--token", envvar="PODSCOPE_TOKEN", help="The agents' shared token.")
@click.option("--session", help="Session folder name (default: UTC time).")
@click.option(
    "--label", default="", help="What this session is (e.g. baseline); shown on every page."
)
@click.option("--note", default="", help="A free-text note kept with the session.")
@click.option("--shared-storage", is_flag=True, help="Workers write into LOGDIR directly.")
@click.option(
    "--unsafe-full-trace",
    is_flag=True,
    help="Host-trace non-chief MWMS workers too. WARNING: TF 2.20/2.21 crash them (and the job).",
)
def capture_command(
    addresses: str | None,
    cluster: Path | None,
    logdir: Path,
    duration_ms: int,
    delay_ms: int,
    host_tracer_level: int,
    python_tracer_level: int,
    device_tracer_level: int,
    retries: int,
    timeout_s: float | None,
    token: str | None,
    session: str | None,
    label: str,
    note: str,
    shared_storage: bool,
    unsafe_full_trace: bool,
) -> None:
    """Capture every worker of a job in one window and bring the traces home. ADDRESSES:
    host:port[,host:port…] of the workers' PodScope agents (or --cluster)."""
    from podscope.app.targets import targets_from
    from podscope.collectors.capture import CaptureOptions
    from podscope.collectors.errors import CaptureError

    try:
        targets = targets_from(addresses, cluster)
        opts = CaptureOptions(
            logdir=logdir,
            duration_ms=duration_ms,
            delay_ms=delay_ms,
            host_tracer_level=host_tracer_level,
            python_tracer_level=python_tracer_level,
            device_tracer_level=device_tracer_level,
            retries=retries,
            timeout_s=timeout_s,
            token=token,
            session=session,
            label=label,
            note=note,
            shared_storage=shared_storage,
            unsafe_full_trace=unsafe_full_trace,
        )
        if unsafe_full_trace:
            say(
                "podscope: warning: --unsafe-full-trace host-traces non-chief MultiWorkerMirroredStrategy "
                "workers; TF 2.20/2.21 crash them (use-after-free in TraceMeRecorder::Consume).",
                err=True,
            )
        result = run_capture(targets, opts, live=sys.stdout.isatty())
    except CaptureError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    for w in result.workers:
        detail = f" {w.bytes / 1e6:.1f} MB -> {w.file}" if w.status == "ok" else f": {w.reason}"
        note = f" ({w.plan_note})" if w.plan_note else ""
        role = f" [{w.task}]" if w.task else ""
        say(f"{w.label}{role} {w.status}{detail}{note}")
    say(f"session {result.session}: {result.session_dir / 'capture.json'}")
    raise click.exceptions.Exit(result.exit_code())
