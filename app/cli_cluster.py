"""``podscope cluster up|status|down``: the reference engine's local cluster from the shell."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from reference_engine.config import EngineConfig, EngineError

cluster_cli = typer.Typer(
    no_args_is_help=True, help="Run the reference training engine on a local cluster."
)
DEFAULT_RUN_DIR = Path("runs/cluster")
RunDir = Annotated[Path, typer.Option(help="The run folder (holds cluster.json, logs, model).")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"podscope: error: {message}", err=True)
    return typer.Exit(2)


@cluster_cli.command("up")
def cluster_up(
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    ps: Annotated[int, typer.Option(help="Parameter servers (ps workload only).")] = 0,
    workload: Annotated[str, typer.Option(help="mwms-fit, mwms-loop or ps.")] = "mwms-loop",
    scenario: Annotated[str, typer.Option(help="Injected bottleneck (see README).")] = "baseline",
    model: Annotated[str, typer.Option(help="mlp, cnn or transformer.")] = "mlp",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 50,
    forever: Annotated[bool, typer.Option("--forever", help="Train until `cluster down`.")] = False,
    batch_size: Annotated[int, typer.Option(help="Per-worker batch size.")] = 32,
    mixed_precision: Annotated[
        str | None, typer.Option(help="mixed_float16 or mixed_bfloat16.")
    ] = None,
    tf32: Annotated[str, typer.Option(help="on or off.")] = "on",
    jit_compile: Annotated[
        bool, typer.Option("--jit-compile", help="Compile the step with XLA.")
    ] = False,
    straggler_task: Annotated[
        int, typer.Option(help="Worker slowed by the straggler scenario.")
    ] = 1,
    straggler_ms: Annotated[float, typer.Option(help="Its extra time per step.")] = 60.0,
    run_dir: RunDir = DEFAULT_RUN_DIR,
    wait: Annotated[
        bool, typer.Option("--wait", help="Block until training ends, then stop the cluster.")
    ] = False,
    timeout_s: Annotated[
        float, typer.Option(help="With --wait: give up after this long.")
    ] = 1800.0,
) -> None:
    """Start a local cluster; returns when every task is ready (or, with --wait, when done)."""
    from reference_engine import cluster as local  # TF's launcher: only for these commands

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
    )
    try:
        manifest = local.up(cfg, workers=workers, ps=ps, run_dir=run_dir)
    except EngineError as e:
        raise _fail(str(e)) from None
    typer.echo(
        f"cluster ready: {len(manifest.tasks)} tasks, manifest {Path(manifest.run_dir) / local.MANIFEST}"
    )
    for t in manifest.tasks:
        typer.echo(f"  {t.name:10} pid {t.pid:<8} tf {t.address:21} agent {t.agent_address}")
    if wait:
        try:
            results = local.wait(manifest, timeout_s)
        except EngineError as e:
            local.down(manifest)
            raise _fail(str(e)) from None
        local.down(manifest)
        for name, r in sorted(results.items()):
            typer.echo(
                f"  {name}: {r['event']} steps={r.get('steps')} loss {r.get('first_loss')} -> {r.get('last_loss')}"
            )
        if any(r["event"] != "done" for r in results.values()):
            raise typer.Exit(1)


@cluster_cli.command("status")
def cluster_status(
    run_dir: RunDir = DEFAULT_RUN_DIR,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show each task: alive, last event, steps, last loss."""
    from reference_engine import cluster as local  # TF's launcher: only for these commands

    try:
        rows = local.status(local.Manifest.load(run_dir))
    except EngineError as e:
        raise _fail(str(e)) from None
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    for r in rows:
        state = "running" if r.alive else "stopped"
        typer.echo(
            f"{r.name:10} pid {r.pid:<8} {state:8} last={r.last_event} steps={r.steps} loss={r.last_loss}"
        )


@cluster_cli.command("down")
def cluster_down(
    run_dir: RunDir = DEFAULT_RUN_DIR,
    grace_s: Annotated[float, typer.Option(help="Seconds between SIGINT and SIGKILL.")] = 5.0,
) -> None:
    """Stop every process the cluster started (no orphans)."""
    from reference_engine import cluster as local  # TF's launcher: only for these commands

    try:
        manifest = local.Manifest.load(run_dir)
    except EngineError as e:
        raise _fail(str(e)) from None
    killed = local.down(manifest, grace_s)
    typer.echo(
        f"stopped {len(manifest.tasks)} tasks"
        + (f" (SIGKILL: {', '.join(killed)})" if killed else "")
    )


@cluster_cli.command("jax")
def cluster_jax(
    logdir: Annotated[
        Path,
        typer.Option(
            envvar="PODSCOPE_LOGDIR",
            help="The captured session goes to LOGDIR/plugins/profile/<session>/.",
        ),
    ],
    workers: Annotated[int, typer.Option(help="JAX processes (one CPU device each).")] = 2,
    steps: Annotated[int, typer.Option(help="Steps captured (after 3 warm-up steps).")] = 12,
    scenario: Annotated[str, typer.Option(help="baseline, slow-host or slow-device.")] = "baseline",
    slow_task: Annotated[int, typer.Option(help="The worker the scenario slows down.")] = 1,
    slow_ms: Annotated[float, typer.Option(help="Its extra time per step (ms).")] = 20.0,
    markers: Annotated[
        bool, typer.Option("--markers", help="Wrap each step in StepTraceAnnotation.")
    ] = False,
    label: Annotated[str, typer.Option(help="The session's label.")] = "",
    run_dir: Annotated[
        Path, typer.Option(help="Where the processes run and write their traces first.")
    ] = Path("runs/jax"),
) -> None:
    """Run the engine's JAX loop (jax.distributed on loopback), each process profiling itself
    with jax.profiler, and bring the traces into one session."""
    from collectors.local import collect_local
    from reference_engine.jax_workload import JaxConfig, run

    cfg = JaxConfig(
        workers=workers,
        steps=steps,
        scenario=scenario,
        slow_task=slow_task,
        slow_ms=slow_ms,
        markers=markers,
    )
    try:
        files = run(cfg, run_dir)
    except EngineError as e:
        raise _fail(str(e)) from None
    session = collect_local(files, logdir, asdict(cfg), label=label or f"jax {scenario}")
    typer.echo(f"captured {len(files)} workers into {session}")
