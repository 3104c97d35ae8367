"""``podscope serve``, ``podscope demo``, ``podscope export`` and ``podscope hash-password``."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podscope.app.terminal import say

if TYPE_CHECKING:  # the dashboard's modules (Flask and Dash) load only for its commands
    from podscope.app.settings import AppSettings
    from podscope.app.store import SessionStore

HOST_HELP = "Interface to bind (default $PODSCOPE_HOST or 127.0.0.1: this machine only)."
PORT_HELP = "Port (default $PODSCOPE_PORT or 8050)."


host_option = click.option("--host", help=HOST_HELP)
port_option = click.option("--port", type=int, help=PORT_HELP)


@click.command("serve")
@click.option(
    "--logdir",
    type=click.Path(path_type=Path),
    help="Folder with plugins/profile/<session>/ captures ($PODSCOPE_LOGDIR).",
)
@host_option
@port_option
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path),
    help="Parsed-frame cache folder ($PODSCOPE_CACHE_DIR).",
)
@click.option(
    "--max-upload-mb", type=int, help="Largest accepted upload ($PODSCOPE_MAX_UPLOAD_MB or 512)."
)
@click.option(
    "--scheduler",
    help="Analyse sessions on this Dask scheduler (default: $PODSCOPE_DASK_SCHEDULER).",
)
@click.option(
    "--cluster-min-files",
    type=int,
    help="Sessions with this many files are analysed per worker in the background "
    "(default: $PODSCOPE_CLUSTER_MIN_FILES or 8).",
)
def serve_command(
    logdir: Path | None,
    host: str | None,
    port: int | None,
    cache_dir: Path | None,
    max_upload_mb: int | None,
    scheduler: str | None,
    cluster_min_files: int | None,
) -> None:
    """Serve the dashboard for a logdir. Binding anything but loopback needs a login
    configured (PODSCOPE_DASHBOARD_TOKEN, PODSCOPE_USERS_FILE or PODSCOPE_TRUST_PROXY_HEADER)."""
    require_extra("dashboard", "serve")
    env = settings_from_env()
    settings = dataclasses.replace(
        env,
        logdir=logdir or env.logdir,
        cache_dir=cache_dir or env.cache_dir,
        max_upload_mb=max_upload_mb or env.max_upload_mb,
        dask_scheduler=scheduler or env.dask_scheduler,
        cluster_min_files=cluster_min_files or env.cluster_min_files,
        host=host or env.host,
        port=port or env.port,
    )
    check_exposure(settings)
    serve(settings)


#: The modules each optional extra of pyproject.toml brings (import names), as far as a
#: command needs them.
EXTRAS = {
    "dashboard": ("dash", "plotly", "dash_ag_grid", "dash_bootstrap_components", "waitress"),
    "engine": ("tensorflow", "tf_keras", "jax"),
    "torch": ("torch",),
}


def require_extra(extra: str, command: str, modules: tuple[str, ...] = ()) -> None:
    """One line and exit 2 when ``podscope <command>`` needs an extra that is not installed
    (the base install is the agent, the capture client, the parsers, the analyses and the
    CLI); ``modules``: the ones of the extra the command needs (default: all)."""
    import importlib.util

    absent = [m for m in modules or EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if absent:
        say(
            f"podscope: error: podscope {command} needs the {extra} extra, and "
            f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: "
            f"pip install 'podscope[{extra}]'",
            err=True,
        )
        raise click.exceptions.Exit(2)


def settings_from_env() -> AppSettings:
    """``AppSettings`` from ``PODSCOPE_*``, read once here; a bad value is one error line."""
    from podscope.app.auth import AuthError
    from podscope.app.settings import AppSettings

    try:
        return AppSettings.from_env(os.environ)
    except (AuthError, ValueError) as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None


def check_exposure(settings: AppSettings) -> None:
    """Refuses to serve other machines with nobody asked to log in, and says how to fix it."""
    from podscope.app.auth import MIN_TOKEN_CHARS
    from podscope.collectors.agent import is_loopback

    if is_loopback(settings.host):
        return
    auth = settings.auth
    if not auth.enabled:
        say(
            f"podscope: error: --host {settings.host} serves other machines and nobody would be "
            "asked to log in. Configure a login: PODSCOPE_DASHBOARD_TOKEN=<secret> (or "
            "PODSCOPE_DASHBOARD_TOKEN_FILE=<file>), PODSCOPE_USERS_FILE=<file of name:hash lines "
            "from `podscope hash-password`>, or PODSCOPE_TRUST_PROXY_HEADER=<header> with "
            "PODSCOPE_TRUSTED_PROXIES=<its addresses> behind an authenticating reverse proxy; "
            "or bind 127.0.0.1.",
            err=True,
        )
        raise click.exceptions.Exit(2)
    if auth.token and len(auth.token) < MIN_TOKEN_CHARS:
        say(
            f"podscope: error: --host {settings.host} serves other machines and the dashboard "
            f"token has {len(auth.token)} characters: anyone who can reach the port can guess "
            f"that. Use at least {MIN_TOKEN_CHARS} (python -c 'import secrets; "
            "print(secrets.token_urlsafe(24))'), or bind 127.0.0.1.",
            err=True,
        )
        raise click.exceptions.Exit(2)


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM (``docker stop``, ``kill``) end the server through the normal exit
    path, so ``demo`` stops the cluster it started. SIGINT is re-armed explicitly because a
    process started in the background by a non-interactive shell inherits it ignored."""

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, terminate)


def serve(settings: AppSettings) -> None:
    from podscope.analyzers.execution import start_pool_server
    from podscope.app.context import EXTENSION
    from podscope.app.main import create_app

    _stop_on_signals()
    try:
        settings.logdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        say(f"podscope: error: cannot use the logdir {settings.logdir}: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    app = create_app(settings)
    # A production WSGI server (Flask's own warns it is not one), quiet per request; it binds
    # here, before anything starts or "serving on" is said, so a busy port is one line.
    import waitress

    try:
        server = waitress.create_server(
            app.server, host=settings.host, port=settings.port, threads=8, ident="PodScope"
        )
    except OSError as e:
        say(
            f"podscope: error: cannot serve on {settings.host}:{settings.port}: "
            f"{e.strerror or e} (another server holds the port? choose one with --port)",
            err=True,
        )
        raise click.exceptions.Exit(2) from None
    # A pod's analysis runs in processes forked from a fork server (the server has threads):
    # started now, where the logdir has a session for it, its imports (1-2 s) are not paid
    # by the first open of that session.
    if (
        settings.dask_scheduler is None
        and app.server.extensions[EXTENSION].store.any_in_background()
    ):
        start_pool_server()
    login = " (login required)" if settings.auth.enabled else ""
    say(f"serving on http://{settings.host}:{settings.port}{login}", err=False)
    try:
        server.run()
    finally:
        _stop_analyses(app.server.extensions[EXTENSION].store)


def _stop_analyses(store: SessionStore) -> None:
    """At exit, the background analyses end now: the interpreter's exit would wait for their
    pools' processes, and a pod's rest (computed after its Pod Viewer is shown) would hold a
    ``kill`` or a Ctrl-C for as long as it runs."""
    import multiprocessing

    store.cancel_all()
    for child in multiprocessing.active_children():
        child.terminate()


@click.command("demo")
@click.option(
    "--logdir",
    type=click.Path(path_type=Path),
    help="Where the demo runs and their captures go ($PODSCOPE_LOGDIR/demo).",
)
@click.option(
    "--scenarios",
    default="baseline,straggler",
    help="Comma-separated injected bottlenecks, one job and one captured session each "
    "(the first is Compare's baseline).",
)
@click.option("--workers", type=int, default=2, help="Worker processes of each job.")
@click.option("--duration-ms", type=int, default=2000, help="Each capture's trace window.")
@host_option
@port_option
@click.option(
    "--keep-cluster",
    is_flag=True,
    help="Keep the last job training while serving (capture again from the Capture page).",
)
def demo_command(
    logdir: Path | None,
    scenarios: str,
    workers: int,
    duration_ms: int,
    host: str | None,
    port: int | None,
    keep_cluster: bool,
) -> None:
    """Local jobs (a baseline and a straggler) → capture each over gRPC → dashboard.

    Each job is captured into its own session, so every page (Compare included) has something
    true to show; a job is stopped once captured (the last one kept with --keep-cluster, and
    only then offered on the Capture page). Ctrl-C stops everything."""
    import importlib.util

    from podscope.reference_engine import cluster

    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    if not names:
        raise click.BadParameter("name at least one scenario", param_hint="--scenarios")
    require_extra("dashboard", "demo")
    if importlib.util.find_spec("tensorflow") is None:
        say(
            "podscope: error: the demo trains TensorFlow jobs and TensorFlow is not installed: "
            "pip install 'podscope[all]', or in Docker run the engine image "
            "(docker build --build-arg EXTRAS=all -t podscope:engine .). "
            "This image serves and parses traces: podscope serve.",
            err=True,
        )
        raise click.exceptions.Exit(2)
    env = settings_from_env()
    logdir = logdir or env.logdir / "demo"
    settings = dataclasses.replace(env, logdir=logdir, host=host or env.host, port=port or env.port)
    check_exposure(settings)
    _stop_on_signals()
    kept = None
    for i, scenario in enumerate(names):
        keep = keep_cluster and i == len(names) - 1
        kept = _demo_job(logdir, scenario, workers, duration_ms, keep)
    try:
        manifest = Path(kept.run_dir) / cluster.MANIFEST if kept is not None else None
        serve(dataclasses.replace(settings, cluster_manifest=manifest))
    finally:
        if kept is not None:
            cluster.down(kept, grace_s=2)


def _demo_job(logdir: Path, scenario: str, workers: int, duration_ms: int, keep: bool) -> Any:
    """One engine job of ``scenario``, captured once; returns its manifest when ``keep``,
    else stops it and returns None."""
    from podscope.collectors.capture import CaptureOptions, Target, capture
    from podscope.reference_engine import cluster
    from podscope.reference_engine.config import EngineConfig, EngineError
    from podscope.trace_parsers import load

    say(f"starting a {workers}-worker mwms-loop job (scenario {scenario})…")
    try:
        m = cluster.up(
            EngineConfig(workload="mwms-loop", scenario=scenario, steps=None),
            workers=workers,
            run_dir=logdir / "cluster" / scenario,
        )
    except EngineError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    try:
        deadline = time.monotonic() + 120
        while (
            sum(e["event"] == "step" for e in cluster.events(m.tasks[0])) < 5
            and time.monotonic() < deadline
        ):
            time.sleep(0.3)
        say(f"capturing every worker of the {scenario} job…")
        result = capture(
            [Target(t.agent_address) for t in m.tasks],
            CaptureOptions(
                logdir=logdir,
                duration_ms=duration_ms,
                label=scenario,
                note=f"PodScope demo: a {workers}-worker mwms-loop job, scenario {scenario}",
            ),
        )
        for w in result.workers:
            say(f"  {w.label} [{w.task}] {w.status} {w.reason or w.plan_note}")
        frames = load(result.session_dir)
        say(
            f"session {result.session_dir.name} ({scenario}): {len(frames.events):,} events from "
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


@click.command("export")
@click.argument("session", type=click.Path(path_type=Path))
@click.option(
    "--chrome-json",
    type=click.Path(path_type=Path),
    required=True,
    help="Output .json or .json.gz (Perfetto UI, chrome://tracing).",
)
def export_command(session: Path, chrome_json: Path) -> None:
    """Export SESSION (a session folder, a logdir's newest session, or a file) as Chrome trace
    JSON."""
    from podscope.trace_parsers import TraceParseError, load
    from podscope.trace_parsers.chrome import write_chrome_trace

    try:
        frames = load(session)
    except TraceParseError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    n = write_chrome_trace(frames, chrome_json)
    say(f"wrote {n:,} events to {chrome_json}")


@click.command("hash-password")
@click.argument("user")
@click.option(
    "--capture",
    is_flag=True,
    help="USER may capture (calls the workers' agents); without it, USER views.",
)
def hash_password_command(user: str, capture: bool) -> None:
    """Print a PODSCOPE_USERS_FILE line (name:hash, or name:capture:hash; werkzeug's scrypt)
    for USER, the name to log in with, and a password typed twice."""
    require_extra("dashboard", "hash-password")
    from werkzeug.security import generate_password_hash

    if ":" in user or not user.strip():
        raise click.BadParameter("a user name without ':'", param_hint="USER")
    password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    from podscope.app.auth import MIN_PASSWORD_CHARS

    if len(password) < MIN_PASSWORD_CHARS:
        say(f"podscope: error: use at least {MIN_PASSWORD_CHARS} characters", err=True)
        raise click.exceptions.Exit(2)
    role = "capture:" if capture else ""
    click.echo(f"{user}:{role}{generate_password_hash(password)}")
