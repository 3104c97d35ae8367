"""``podscope cluster up|status|down``: the reference engine's local cluster from the shell."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from podscope.app.cli_serve import require_extra
from podscope.app.terminal import say
from podscope.reference_engine.config import EngineConfig, EngineError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from podscope.reference_engine.jax_workload import JaxConfig
    from podscope.reference_engine.processes import Job
    from podscope.reference_engine.torch_workload import TorchConfig

DEFAULT_RUN_DIR = Path("runs/cluster")
run_dir_option = click.option(
    "--run-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_RUN_DIR,
    help="The run folder (holds cluster.json, logs, model).",
)


#: Where ``cluster jax`` and ``cluster torch`` write the session they capture.
logdir_option = click.option(
    "--logdir",
    type=click.Path(path_type=Path),
    envvar="PODSCOPE_LOGDIR",
    required=True,
    help="The captured session goes to LOGDIR/plugins/profile/<session>/.",
)


@click.group("cluster", no_args_is_help=True)
def cluster_cli() -> None:
    """Run the reference training engine on a local cluster."""


def _fail(message: str) -> click.exceptions.Exit:
    say(f"podscope: error: {message}", err=True)
    return click.exceptions.Exit(2)


@cluster_cli.command("up")
@click.option("--workers", type=int, default=2, help="Worker processes.")
@click.option("--ps", type=int, default=0, help="Parameter servers (ps workload only).")
@click.option("--workload", default="mwms-loop", help="mwms-fit, mwms-loop or ps.")
@click.option("--scenario", default="baseline", help="Injected bottleneck (see README).")
@click.option("--model", default="mlp", help="mlp, cnn or transformer.")
@click.option("--steps", type=int, default=50, help="Training steps.")
@click.option("--forever", is_flag=True, help="Train until `cluster down`.")
@click.option("--batch-size", type=int, default=32, help="Per-worker batch size.")
@click.option("--mixed-precision", help="mixed_float16 or mixed_bfloat16.")
@click.option("--tf32", default="on", help="on or off.")
@click.option("--jit-compile", is_flag=True, help="Compile the step with XLA.")
@click.option(
    "--straggler-task",
    type=int,
    default=1,
    help="Worker slowed by the straggler scenario.",
)
@click.option("--straggler-ms", type=float, default=60.0, help="Its extra time per step.")
@click.option(
    "--onset-s",
    type=float,
    default=0.0,
    help="The straggler or slow input begins this long into training (for podscope watch).",
)
@run_dir_option
@click.option("--wait", is_flag=True, help="Block until training ends, then stop the cluster.")
@click.option(
    "--timeout-s",
    type=float,
    default=1800.0,
    help="With --wait: give up after this long.",
)
def cluster_up(
    workers: int,
    ps: int,
    workload: str,
    scenario: str,
    model: str,
    steps: int,
    forever: bool,
    batch_size: int,
    mixed_precision: str | None,
    tf32: str,
    jit_compile: bool,
    straggler_task: int,
    straggler_ms: float,
    onset_s: float,
    run_dir: Path,
    wait: bool,
    timeout_s: float,
) -> None:
    """Start a local cluster; returns when every task is ready (or, with --wait, when done)."""
    require_extra("engine", "cluster up", ("tensorflow", "tf_keras"))
    from podscope.reference_engine import cluster as local  # TF's launcher: only for these commands

    if tf32 not in ("on", "off"):
        raise _fail("--tf32 must be on or off")
    cfg = EngineConfig(
        workload=workload,
        scenario=scenario,
        model=model,
        steps=None if forever else steps,
        batch_size=batch_size,
        mixed_precision=mixed_precision,
        tf32=tf32 == "on",
        jit_compile=jit_compile,
        straggler_task=straggler_task,
        straggler_ms=straggler_ms,
        onset_s=onset_s,
    )
    try:
        manifest = local.up(cfg, workers=workers, ps=ps, run_dir=run_dir)
    except EngineError as e:
        raise _fail(str(e)) from None
    say(
        f"cluster ready: {len(manifest.tasks)} tasks, manifest {Path(manifest.run_dir) / local.MANIFEST}"
    )
    for t in manifest.tasks:
        say(f"  {t.name:10} pid {t.pid:<8} tf {t.address:21} agent {t.agent_address}")
    if wait:
        try:
            results = local.wait(manifest, timeout_s)
        except EngineError as e:
            local.down(manifest)
            raise _fail(str(e)) from None
        local.down(manifest)
        for name, r in sorted(results.items()):
            say(
                f"  {name}: {r['event']} steps={r.get('steps')} loss {r.get('first_loss')} -> {r.get('last_loss')}"
            )
        if any(r["event"] != "done" for r in results.values()):
            raise click.exceptions.Exit(1)


@cluster_cli.command("status")
@run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Every task as JSON.")
def cluster_status(run_dir: Path, as_json: bool) -> None:
    """Show each task: alive, last event, steps, last loss."""
    from podscope.reference_engine import cluster as local  # TF's launcher: only for these commands

    try:
        rows = local.status(local.Manifest.load(run_dir))
    except EngineError as e:
        raise _fail(str(e)) from None
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    for r in rows:
        state = "running" if r.alive else "stopped"
        say(
            f"{r.name:10} pid {r.pid:<8} {state:8} last={r.last_event} steps={r.steps} loss={r.last_loss}"
        )


@cluster_cli.command("down")
@run_dir_option
@click.option(
    "--grace-s",
    type=float,
    default=5.0,
    help="Seconds between SIGINT and SIGKILL.",
)
def cluster_down(run_dir: Path, grace_s: float) -> None:
    """Stop every process the cluster started (no orphans)."""
    from podscope.reference_engine import cluster as local  # TF's launcher: only for these commands

    try:
        manifest = local.Manifest.load(run_dir)
    except EngineError as e:
        raise _fail(str(e)) from None
    say(local.down(manifest, grace_s).summary())


@cluster_cli.command("jax")
@logdir_option
@click.option("--workers", type=int, default=2, help="JAX processes (one CPU device each).")
@click.option(
    "--steps",
    type=int,
    default=12,
    help="Steps captured (after 3 warm-up steps).",
)
@click.option("--scenario", default="baseline", help="baseline, slow-host or slow-device.")
@click.option(
    "--slow-task",
    type=int,
    default=1,
    help="The worker the scenario slows down.",
)
@click.option("--slow-ms", type=float, default=20.0, help="Its extra time per step (ms).")
@click.option("--markers", is_flag=True, help="Wrap each step in StepTraceAnnotation.")
@click.option("--label", default="", help="The session's label.")
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path),
    default=Path("runs/jax"),
    help="Where the processes run and write their traces first.",
)
def cluster_jax(
    logdir: Path,
    workers: int,
    steps: int,
    scenario: str,
    slow_task: int,
    slow_ms: float,
    markers: bool,
    label: str,
    run_dir: Path,
) -> None:
    """Run the engine's JAX loop (jax.distributed on loopback), each process with the PodScope
    agent, and capture every process through its agent in one window."""
    require_extra("engine", "cluster jax", ("jax",))
    from podscope.reference_engine.jax_workload import JaxConfig

    cfg = JaxConfig(
        workers=workers,
        steps=steps,
        scenario=scenario,
        slow_task=slow_task,
        slow_ms=slow_ms,
        markers=markers,
    )
    try:
        session = capture_jax(cfg, run_dir, logdir, label or f"jax {scenario}")
    except EngineError as e:
        raise _fail(str(e)) from None
    say(f"captured {workers} workers through their agents into {session}")


@cluster_cli.command("torch")
@logdir_option
@click.option("--workers", type=int, default=2, help="Ranks (DDP over gloo, one process each).")
@click.option("--steps", type=int, default=12, help="Steps captured (after 3 warm-up steps).")
@click.option(
    "--scenario",
    default="baseline",
    help="baseline, slow-rank, slow-dataloader or slow-allreduce.",
)
@click.option("--slow-task", type=int, default=1, help="The rank a one-rank scenario slows down.")
@click.option("--slow-ms", type=float, default=20.0, help="The extra time per step (ms).")
@click.option("--label", default="", help="The session's label.")
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path),
    default=Path("runs/torch"),
    help="Where the ranks run and write their traces first.",
)
def cluster_torch(
    logdir: Path,
    workers: int,
    steps: int,
    scenario: str,
    slow_task: int,
    slow_ms: float,
    label: str,
    run_dir: Path,
) -> None:
    """Run the engine's PyTorch job (DistributedDataParallel over gloo on loopback), each rank
    with the PodScope agent, and capture every rank through its agent in one window."""
    require_extra("torch", "cluster torch")
    from podscope.reference_engine.torch_workload import TorchConfig

    cfg = TorchConfig(
        workers=workers, steps=steps, scenario=scenario, slow_task=slow_task, slow_ms=slow_ms
    )
    try:
        session = capture_torch(cfg, run_dir, logdir, label or f"torch {scenario}")
    except EngineError as e:
        raise _fail(str(e)) from None
    say(f"captured {workers} ranks through their agents into {session}")


def capture_jax(cfg: JaxConfig, run_dir: Path, logdir: Path, label: str = "") -> Path:
    """Runs the engine's JAX loop (``reference_engine.jax_workload.launch``) and captures its
    processes through their agents in one window that holds the configured steps, as
    ``podscope capture`` would; returns the session folder.

    Raises:
        EngineError: a process failed, or a worker's capture did not succeed (each one's
            status and reason said).
    """
    from podscope.reference_engine.jax_workload import launch

    return _capture_job(launch(cfg, run_dir), "JAX", logdir, label)


def capture_torch(cfg: TorchConfig, run_dir: Path, logdir: Path, label: str = "") -> Path:
    """Runs the engine's PyTorch DDP job (``reference_engine.torch_workload.launch``) and
    captures its ranks through their agents in one window, as ``podscope capture`` would;
    returns the session folder.

    Raises:
        EngineError: a rank failed, or a rank's capture did not succeed (each one's status
            and reason said).
    """
    from podscope.reference_engine.torch_workload import launch

    return _capture_job(launch(cfg, run_dir), "PyTorch", logdir, label)


def _capture_job(
    launched: AbstractContextManager[Job], name: str, logdir: Path, label: str
) -> Path:
    from podscope.collectors.capture import CaptureOptions, Target, capture

    with launched as job:
        result = capture(
            [Target(address, label=worker) for worker, address in job.targets],
            CaptureOptions(logdir=logdir, duration_ms=job.window_ms(), delay_ms=500, label=label),
        )
    failed = [w for w in result.workers if w.status != "ok"]
    if failed:
        said = "; ".join(f"{w.label}: {w.status.value} ({w.reason})" for w in failed)
        raise EngineError(f"the {name} capture did not bring every worker home: {said}")
    return result.session_dir
