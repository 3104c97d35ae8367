"""The engine's JAX workload: a jitted data-parallel training loop over several processes.

Each process is one JAX CPU device; ``jax.distributed`` on loopback with gloo collectives ties
them into one mesh, so the step's gradient mean is a real cross-process all-reduce, as on a pod.
Every process starts the PodScope agent, as a user's job would, and is captured through it
(``jax.profiler``, chosen by the agent): ``launch`` starts the processes and returns, warm,
with their agents' addresses; the caller captures them in one window (``podscope cluster jax``
does, with ``collectors.capture``), each process waits until its profiler records
(``podscope.agent.RECORDING``), all meet at a barrier, and they run the configured steps inside
the window. No step marker is written unless asked: the steps are the executions of the jitted
step (``analyzers.xla_programs``).

Injected bottlenecks (``JaxConfig.scenario``), each with the verdict PodScope must give:

* ``baseline``: nothing; no straggler.
* ``slow-host``: worker ``slow_task`` sleeps ``slow_ms`` in Python before each step and fetches
  each step's loss (``float(loss)``, which waits for the step), as a loop that logs every step
  does; without the fetch, asynchronous dispatch would hide any sleep shorter than a step.
  Its device idles waiting for it, the others wait in the all-reduce: it is the straggler, by
  its device's idle time.
* ``slow-device``: worker ``slow_task``'s device computes ``slow_ms`` more per step inside the
  jitted step (a loop whose trip count depends on the device's index, calibrated on the
  machine). It is the straggler, by its device compute.

Precision and memory (any scenario): ``dtype="bf16"`` computes the forward and backward pass
in ``jnp.bfloat16`` (float32 master weights and loss), ``"f32"`` in float32: PodScope reads it
from the program's HLO types. ``offload=True`` keeps a float32 momentum buffer in host memory
(``memory_kind="pinned_host"``) that the jitted step brings to the device and writes back, as
JAX's host offloading does; XLA:CPU accepts the memory kinds but moves nothing (host and
device memory are one), so the capture has no copy to name.

    >>> with launch(JaxConfig(workers=2, steps=12, scenario="slow-host"), run_dir) as job:
    ...     capture([Target(a, label=w) for w, a in job.targets],
    ...             CaptureOptions(logdir, duration_ms=job.window_ms()))
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.reference_engine import processes
from podscope.reference_engine.config import EngineError
from podscope.reference_engine.processes import Job

SCENARIOS = ("baseline", "slow-host", "slow-device")
DTYPES = ("f32", "bf16")
PREFIX = "jax-worker-"


@dataclass(frozen=True)
class JaxConfig:
    """One JAX run.

    Attributes:
        workers: processes (one CPU device each).
        steps: steps captured (after ``warmup`` uncaptured ones).
        scenario: one of ``SCENARIOS``.
        slow_task: the worker the scenario slows down.
        slow_ms: its extra time per step.
        width: hidden size of the MLP (its cost per step).
        batch: per-worker batch.
        markers: wrap each step in ``jax.profiler.StepTraceAnnotation`` (off: steps must come
            from the program's executions).
    """

    workers: int = 2
    steps: int = 12
    warmup: int = 3
    scenario: str = "baseline"
    slow_task: int = 1
    slow_ms: float = 20.0
    width: int = 256
    batch: int = 64
    markers: bool = False
    seed: int = 0
    dtype: str = "f32"
    offload: bool = False

    def check(self) -> None:
        """Raises EngineError for an impossible run."""
        if self.scenario not in SCENARIOS:
            raise EngineError(f"unknown JAX scenario {self.scenario!r}; known: {SCENARIOS}")
        if self.workers < 1 or self.steps < 2:
            raise EngineError("a JAX run needs at least 1 worker and 2 steps")
        if self.scenario != "baseline" and not 0 <= self.slow_task < self.workers:
            raise EngineError(f"slow task {self.slow_task} is not a worker (0..{self.workers - 1})")
        if self.dtype not in DTYPES:
            raise EngineError(f"unknown JAX dtype {self.dtype!r}; known: {DTYPES}")


@contextmanager
def launch(cfg: JaxConfig, run_dir: Path, timeout_s: float = 600.0) -> Iterator[Job]:
    """Starts ``cfg``'s processes in ``run_dir`` (``reference_engine.processes.launch``) and
    yields once every one is warm and its agent listens.

    Raises:
        EngineError: a process failed (with its last log lines), or the run timed out.
    """
    cfg.check()
    with processes.launch(__name__, "JAX", cfg, run_dir, PREFIX, timeout_s) as job:
        yield job


def _worker(work: Path, index: int, port: int) -> None:  # pragma: no cover (subprocess)
    settings, agent = processes.start_worker(work, index, "JAX")
    cfg = JaxConfig(**settings)
    import jax

    from podscope.collectors import agent as podscope_agent

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=cfg.workers, process_id=index
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("d",))
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))
    slow_device = cfg.scenario == "slow-device"
    # every worker times the extra work, as busy as in the steps (timed alone, the slowed
    # worker's took 32 ms in them, not 20); the log says what each found
    mine = 0
    if slow_device:
        burn_iters = _calibrate(cfg.width, cfg.batch, cfg.slow_ms)
        print(json.dumps({"event": "calibrated", "iterations": burn_iters}), flush=True)
        mine = burn_iters if index == cfg.slow_task else 0

    compute = jnp.bfloat16 if cfg.dtype == "bf16" else jnp.float32

    def local_step(params: Any, x: Any, y: Any, iters: Any) -> Any:
        def loss_fn(p: Any) -> Any:
            # float32 master weights, the pass in the configured precision, the loss in f32
            c = jax.tree_util.tree_map(lambda a: a.astype(compute), p)
            h = jnp.tanh(x.astype(compute) @ c["w1"])
            out = (h @ c["w2"]).astype(jnp.float32)
            return jnp.mean((out - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        # slow-device: this device's own trip count (0 elsewhere): a data-dependent loop
        burn = jax.lax.fori_loop(0, iters[0], lambda _, v: jnp.tanh(v @ params["w1"]), x)
        # the all-reduce every step waits for, after the extra work (XLA:CPU would otherwise
        # run the independent loop beside it, hidden in the collective's wait)
        zero = 0.0 * burn.sum()
        grads = jax.lax.pmean(jax.tree_util.tree_map(lambda g: g + zero, grads), "d")
        loss = jax.lax.pmean(loss, "d")
        new = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
        return new, loss

    sharded = jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P(), P("d"), P("d"), P("d")),
        out_specs=(P(), P()),
        check_vma=False,
    )
    host_mem = NamedSharding(mesh, P(), memory_kind="pinned_host")
    device_mem = NamedSharding(mesh, P(), memory_kind="device")

    def offloaded(state: Any, x: Any, y: Any, iters: Any) -> Any:
        params, momentum = state
        params, loss = sharded(params, x, y, iters)
        m = jax.device_put(momentum, device_mem)  # host → device inside the program
        m = jax.tree_util.tree_map(lambda a, p: 0.9 * a + p, m, params)
        return (params, jax.device_put(m, host_mem)), loss

    step = jax.jit(offloaded if cfg.offload else sharded, donate_argnums=0)
    key1, key2 = jax.random.split(jax.random.key(cfg.seed))
    init = jax.jit(
        lambda: {
            "w1": jax.random.normal(key1, (cfg.width, cfg.width)) * 0.05,
            "w2": jax.random.normal(key2, (cfg.width, 8)) * 0.05,
        },
        out_shardings=rep,
    )
    params = init()
    if cfg.offload:
        params = (params, jax.device_put(jax.tree_util.tree_map(jnp.zeros_like, params), host_mem))

    def batch(i: int) -> tuple[Any, Any]:
        local = np.random.default_rng(1000 * i + index)
        x = local.standard_normal((cfg.batch, cfg.width)).astype(np.float32)
        y = local.standard_normal((cfg.batch, 8)).astype(np.float32)
        return (
            jax.make_array_from_process_local_data(shard, x),
            jax.make_array_from_process_local_data(shard, y),
        )

    iters = jax.make_array_from_process_local_data(shard, np.array([mine], np.int32))

    def one(i: int) -> Any:
        nonlocal params
        if cfg.scenario == "slow-host" and index == cfg.slow_task:
            time.sleep(cfg.slow_ms / 1000)  # host work before the step: its device waits
        x, y = batch(i)
        if cfg.markers:
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = step(params, x, y, iters)
        else:
            params, loss = step(params, x, y, iters)
        if cfg.scenario == "slow-host" and index == cfg.slow_task:
            float(loss)  # logs every step's loss: the host waits for the device
        return loss

    for i in range(cfg.warmup):
        t = time.perf_counter()
        one(i).block_until_ready()
        step_ms = (time.perf_counter() - t) * 1000
    processes.say_ready(work, index, agent.address, step_ms)
    # the steps go inside the capture's window: each process waits for its own profiler, then
    # for every other's (a barrier), and only then steps
    if not podscope_agent.RECORDING.wait(timeout=600):
        raise SystemExit("no capture came")
    multihost_utils.sync_global_devices("podscope-capture-start")
    for i in range(cfg.warmup, cfg.warmup + cfg.steps):
        loss = one(i)
    loss.block_until_ready()
    print(json.dumps({"event": "done", "loss": float(loss)}), flush=True)
    processes.wait_done(work)  # the trace is brought home from this process
    agent.stop()
    jax.distributed.shutdown()


def _calibrate(width: int, batch: int, ms: float) -> int:  # pragma: no cover (subprocess)
    """Loop iterations of the slow device's extra work that take about ``ms`` here."""
    import jax
    import jax.numpy as jnp

    w = jnp.ones((width, width), jnp.float32) * 0.01
    f = jax.jit(lambda n, v: jax.lax.fori_loop(0, n, lambda _, a: jnp.tanh(a @ w), v))
    v = jnp.ones((batch, width), jnp.float32)
    f(2, v).block_until_ready()

    def once(n: int) -> float:
        t = time.perf_counter()
        f(n, v).block_until_ready()
        return time.perf_counter() - t

    return processes.iterations_for(once, ms)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover (subprocess)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("work", type=Path)
    ap.add_argument("index", type=int)
    ap.add_argument("port", type=int)
    a = ap.parse_args(argv)
    _worker(a.work, a.index, a.port)


if __name__ == "__main__":
    main()
