"""``podscope serve``, ``podscope demo`` and ``podscope export``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer


def serve_command(
    logdir: Annotated[
        Path, typer.Option(help="Folder with plugins/profile/<session>/ captures.")
    ] = Path("runs"),
    host: Annotated[
        str, typer.Option(help="Interface to bind (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8050,
    cache_dir: Annotated[Path | None, typer.Option(help="Parsed-frame cache folder.")] = None,
    max_upload_mb: Annotated[int, typer.Option(help="Largest accepted upload.")] = 512,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help="Analyse sessions on this Dask scheduler (default: $PODSCOPE_DASK_SCHEDULER).",
        ),
    ] = None,
    cluster_min_files: Annotated[
        int | None,
        typer.Option(
            help="Sessions with this many files are analysed per worker in the background "
            "(default: $PODSCOPE_CLUSTER_MIN_FILES or 8)."
        ),
    ] = None,
) -> None:
    """Serve the dashboard for a logdir."""
    import dataclasses
    import os

    from app.settings import AppSettings

    env = AppSettings.from_env(os.environ)
    settings = dataclasses.replace(
        env,
        logdir=logdir,
        cache_dir=cache_dir or env.cache_dir,
        max_upload_mb=max_upload_mb,
        dask_scheduler=scheduler or env.dask_scheduler,
        cluster_min_files=cluster_min_files or env.cluster_min_files,
    )
    serve(settings, host, port)


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM (``docker stop``, ``kill``) end the server through the normal exit
    path, so ``demo`` stops the cluster it started. SIGINT is re-armed explicitly because a
    process started in the background by a non-interactive shell inherits it ignored."""

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, terminate)


def serve(settings: object, host: str, port: int) -> None:
    from app.main import create_app

    _stop_on_signals()

    settings.logdir.mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
    app = create_app(settings)  # type: ignore[arg-type]
    typer.echo(f"serving on http://{host}:{port}", err=False)
    # A production WSGI server (Flask's own warns it is not one), quiet per request.
    import waitress

    waitress.serve(app.server, host=host, port=port, threads=8, ident="PodScope")


def demo_command(
    logdir: Annotated[Path, typer.Option(help="Where the demo runs and their captures go.")] = Path(
        "runs/demo"
    ),
    scenarios: Annotated[
        str,
        typer.Option(
            help="Comma-separated injected bottlenecks, one job and one captured session each "
            "(the first is Compare's baseline)."
        ),
    ] = "baseline,straggler",
    workers: Annotated[int, typer.Option()] = 2,
    duration_ms: Annotated[int, typer.Option()] = 2000,
    port: Annotated[int, typer.Option()] = 8050,
    keep_cluster: Annotated[
        bool,
        typer.Option(
            "--keep-cluster",
            help="Keep the last job training while serving (capture again from the Capture page).",
        ),
    ] = False,
) -> None:
    """Local jobs (a baseline and a straggler) → capture each over gRPC → dashboard.

    Each job is captured into its own session, so every page (Compare included) has something
    true to show; a job is stopped once captured (the last one kept with --keep-cluster, and
    only then offered on the Capture page). Ctrl-C stops everything."""
    from app.settings import AppSettings
    from reference_engine import cluster

    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    if not names:
        raise typer.BadParameter("name at least one scenario", param_hint="--scenarios")
    _stop_on_signals()
    kept = None
    for i, scenario in enumerate(names):
        keep = keep_cluster and i == len(names) - 1
        kept = _demo_job(logdir, scenario, workers, duration_ms, keep)
    try:
        manifest = Path(kept.run_dir) / cluster.MANIFEST if kept is not None else None
        serve(AppSettings(logdir=logdir, cluster_manifest=manifest), "127.0.0.1", port)
    finally:
        if kept is not None:
            cluster.down(kept, grace_s=2)


def _demo_job(logdir: Path, scenario: str, workers: int, duration_ms: int, keep: bool) -> Any:
    """One engine job of ``scenario``, captured once; returns its manifest when ``keep``,
    else stops it and returns None."""
    from collectors.capture import CaptureOptions, Target, capture
    from reference_engine import cluster
    from reference_engine.config import EngineConfig, EngineError
    from trace_parsers import load

    typer.echo(f"starting a {workers}-worker mwms-loop job (scenario {scenario})…")
    try:
        m = cluster.up(
            EngineConfig(workload="mwms-loop", scenario=scenario, steps=None),
            workers=workers,
            run_dir=logdir / "cluster" / scenario,
        )
    except EngineError as e:
        typer.echo(f"podscope: error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        deadline = time.monotonic() + 120
        while (
            sum(e["event"] == "step" for e in cluster.events(m.tasks[0])) < 5
            and time.monotonic() < deadline
        ):
            time.sleep(0.3)
        typer.echo(f"capturing every worker of the {scenario} job…")
        result = capture(
            [Target(t.agent_address) for t in m.tasks],
            CaptureOptions(logdir=logdir, duration_ms=duration_ms),
        )
        for w in result.workers:
            typer.echo(f"  {w.label} [{w.role}:{w.index}] {w.status} {w.reason or w.plan_note}")
        frames = load(result.session_dir)
        typer.echo(
            f"session {result.session_dir.name}: {len(frames.events):,} events from "
            f"{len(frames.workers)} workers"
        )
    except BaseException:
        cluster.down(m, grace_s=2)
        raise
    if keep:
        return m
    cluster.down(m, grace_s=2)
    time.sleep(1.1)  # sessions are named by the second: the next capture gets its own
    return None


def export_command(
    session: Annotated[
        Path, typer.Argument(help="A session folder, a logdir (newest session) or a file.")
    ],
    chrome_json: Annotated[
        Path,
        typer.Option(
            "--chrome-json", help="Output .json or .json.gz (Perfetto UI, chrome://tracing)."
        ),
    ],
) -> None:
    """Export a session as Chrome trace JSON."""
    from trace_parsers import TraceParseError, load
    from trace_parsers.chrome import write_chrome_trace

    try:
        frames = load(session)
    except TraceParseError as e:
        typer.echo(f"podscope: error: {e}", err=True)
        raise typer.Exit(2) from None
    n = write_chrome_trace(frames, chrome_json)
    typer.echo(f"wrote {n:,} events to {chrome_json}")
