"""Workloads (registry ``WORKLOADS``): real TF 2.4+ distributed training, run inside a task process.

Each ``run_*(cfg, task, tf, report)`` trains and returns the per-step losses it observed;
``report(event, **fields)`` writes one JSON line to the task's log (read by the launcher).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.collectors import agent
from podscope.reference_engine.config import EngineConfig, EngineError
from podscope.reference_engine.data import make_dataset
from podscope.reference_engine.models import MODELS
from podscope.reference_engine.scenarios import ONSET, SCENARIOS

Report = Callable[..., None]


@dataclass(frozen=True)
class Task:
    """This process's place in the cluster (from TF_CONFIG)."""

    role: str  # "worker", "chief" or "ps"
    index: int
    num_workers: int
    run_dir: Path

    @property
    def is_chief(self) -> bool:
        return self.role == "chief" or (
            self.role == "worker" and self.index == 0 and self.num_workers >= 1
        )

    @classmethod
    def from_tf_config(cls, run_dir: Path, tf_config: Mapping[str, Any]) -> Task:
        """The task that a parsed ``TF_CONFIG`` names."""
        t = tf_config["task"]
        return cls(t["type"], int(t["index"]), len(tf_config["cluster"].get("worker", [])), run_dir)


def _setup_precision(cfg: EngineConfig, tf: Any) -> None:
    tf.config.experimental.enable_tensor_float_32_execution(cfg.tf32)
    if cfg.mixed_precision:
        tf.keras.mixed_precision.set_global_policy(cfg.mixed_precision)


def _optimizer(cfg: EngineConfig, tf: Any) -> Any:
    """A TF 2.4-style OptimizerV2 (it has ``minimize(loss, vars, tape=tape)`` and
    ``gradient_transformers``), loss-scaled under mixed_float16."""
    transformers = []
    if cfg.clip_norm:
        clip = cfg.clip_norm
        transformers.append(
            lambda grads_and_vars: [(tf.clip_by_norm(g, clip), v) for g, v in grads_and_vars]
        )
    opt = tf.keras.optimizers.legacy.SGD(
        cfg.learning_rate, momentum=0.9, gradient_transformers=transformers
    )
    if cfg.mixed_precision == "mixed_float16":
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    return opt


def _tiny_ops(value: Any, n: int, tf: Any) -> Any:
    """n tiny dependent element-wise ops (Grappler cannot fold them: they depend on the step)."""
    t = tf.reshape(value, [1])
    for i in range(max(1, n // 2)):
        t = tf.sin(t) * (0.5 + 1e-3 * i)
    return tf.reduce_sum(t) * 0.0


def _report_model(model: Any, report: Report) -> None:
    """The model's precision, as the tests check it (mixed_float16: float16 compute, float32 variables)."""
    report(
        "model",
        dtype_policy=model.dtype_policy.name,
        compute_dtype=model.layers[0].compute_dtype,
        variable_dtype=model.trainable_variables[0].dtype.name,
    )


def _start_onset(cfg: EngineConfig, report: Report) -> None:
    """The scenario's bottleneck starts ``cfg.onset_s`` into training; the task reports when."""
    ONSET.onset_s = cfg.onset_s
    ONSET.on_start = lambda unix_ns: report("onset", unix_ns=unix_ns)


def _sleep_ms(ms: float) -> None:
    time.sleep(ms / 1000.0)


def _mwms_input(cfg: EngineConfig, strategy: Any, global_batch: int, tf: Any) -> Any:
    """The MWMS input. ``input-bound`` pulls each batch only when the step asks for it, from this
    worker's own shard: ``experimental_distribute_dataset`` always wraps a MultiDeviceIterator
    whose background thread keeps a batch in flight, so every worker's slow pipeline runs free
    and whichever worker is ahead in phase waits in the all-reduce instead of for its input
    (measured: the chief at 0.1 ms input and 18 ms collectives per 20 ms step, decided by
    chance per run); and MWMS refuses the per-replica, non-fetching input mode. Plain tensors
    given to ``strategy.run`` go to this worker's replica, as the distributed values would."""
    if not (SCENARIOS[cfg.scenario].input_delay or SCENARIOS[cfg.scenario].slow_map):
        return strategy.experimental_distribute_dataset(make_dataset(cfg, global_batch, tf))
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec()
    jobs = [j for j in ("chief", "worker") if j in spec.jobs]
    index = resolver.task_id + sum(
        spec.num_tasks(j) for j in jobs[: jobs.index(resolver.task_type)]
    )
    workers = sum(spec.num_tasks(j) for j in jobs)
    return make_dataset(cfg, global_batch // workers, tf, shard=(workers, index))


def run_mwms_loop(cfg: EngineConfig, task: Task, tf: Any, report: Report) -> list[float]:
    """MultiWorkerMirroredStrategy + custom loop: strategy.run, optimizer.minimize(tape=tape)."""
    scenario = SCENARIOS[cfg.scenario]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    report("serving")  # its TensorFlow server is bound: the cluster is up (cluster.up)
    _setup_precision(cfg, tf)
    global_batch = cfg.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = MODELS[cfg.model].build(tf.keras)
        opt = _optimizer(cfg, tf)
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    it = iter(_mwms_input(cfg, strategy, global_batch, tf))

    def step_fn(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_example = loss_obj(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            if scenario.tiny_ops:
                loss = loss + _tiny_ops(loss, cfg.tiny_ops, tf)
        opt.minimize(loss, model.trainable_variables, tape=tape)
        return loss

    if cfg.jit_compile and not scenario.eager:
        step_fn = tf.function(step_fn, jit_compile=True)

    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        return strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(x, y)), axis=None
        )

    if not scenario.eager:
        train_step = tf.function(train_step)
    _report_model(model, report)
    _start_onset(cfg, report)
    losses: list[float] = []
    kept: list[Any] = []  # the memory-leak scenario's ever-growing list
    step = 0
    while cfg.steps is None or step < cfg.steps:
        ONSET.tick()
        if scenario.memory_leak:
            kept.append(tf.random.normal([cfg.leak_kib * 256]))  # leak_kib KiB of float32
        if scenario.straggler and task.index == cfg.straggler_task and ONSET.active():
            _sleep_ms(cfg.straggler_ms)
        if scenario.step_markers:
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                loss = train_step(it)
        else:
            loss = train_step(it)
        losses.append(float(loss))
        agent.step(step)  # the heartbeat a watcher reads
        report("step", step=step, loss=losses[-1])
        if scenario.host_overhead:
            _sleep_ms(cfg.host_overhead_ms)
        step += 1
    return losses


def run_mwms_fit(cfg: EngineConfig, task: Task, tf: Any, report: Report) -> list[float]:
    """MultiWorkerMirroredStrategy + tf-keras fit, BackupAndRestore, distributed save/reload."""
    scenario = SCENARIOS[cfg.scenario]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    report("serving")  # its TensorFlow server is bound: the cluster is up (cluster.up)
    _setup_precision(cfg, tf)
    global_batch = cfg.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = MODELS[cfg.model].build(tf.keras)
        model.compile(
            optimizer=_optimizer(cfg, tf),
            loss=_fit_loss(cfg, tf),
            run_eagerly=scenario.eager,
            jit_compile=cfg.jit_compile and not scenario.eager,
        )
    _report_model(model, report)
    _start_onset(cfg, report)
    losses: list[float] = []

    class Hooks(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            ONSET.tick()
            if scenario.straggler and task.index == cfg.straggler_task and ONSET.active():
                _sleep_ms(cfg.straggler_ms)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            losses.append(float((logs or {}).get("loss", float("nan"))))
            report("step", step=batch, loss=losses[-1])
            if scenario.host_overhead:
                _sleep_ms(cfg.host_overhead_ms)

    backup = task.run_dir / "backup"
    steps = cfg.steps if cfg.steps is not None else 10**9
    model.fit(
        make_dataset(cfg, global_batch, tf),
        epochs=1,
        steps_per_epoch=steps,
        verbose=0,
        callbacks=[
            tf.keras.callbacks.BackupAndRestore(backup_dir=str(backup)),
            Hooks(),
            agent.keras_callback(tf.keras.callbacks.Callback),  # the heartbeat a watcher reads
        ],
    )
    # Distributed save: every worker saves (collectives), only the chief's copy is kept.
    target = (
        task.run_dir / "model"
        if task.is_chief
        else Path(tempfile.mkdtemp(prefix="podscope-model-"))
    )
    model.save(str(target))
    if task.is_chief:
        loss = _fit_loss(cfg, tf)  # a plain function (tiny-ops) is saved by name only
        reloaded = tf.keras.models.load_model(
            str(target), custom_objects={getattr(loss, "__name__", "loss"): loss}
        )
        x, y = next(iter(make_dataset(cfg, cfg.batch_size, tf)))
        report("reloaded", loss=float(reloaded.evaluate(x, y, verbose=0)))
    return losses


def _fit_loss(cfg: EngineConfig, tf: Any) -> Any:
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if not SCENARIOS[cfg.scenario].tiny_ops:
        return loss

    def with_tiny_ops(y_true: Any, y_pred: Any) -> Any:
        # per-example losses: Keras reduces a plain loss function itself, and refuses a loss
        # object's own AUTO reduction under a distribution strategy
        value = tf.keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        return value + _tiny_ops(tf.reduce_mean(value), cfg.tiny_ops, tf)

    return with_tiny_ops


def run_ps(cfg: EngineConfig, task: Task, tf: Any, report: Report) -> list[float]:
    """ParameterServerStrategy + ClusterCoordinator: scheduled steps, asynchronous updates.

    Workers and parameter servers run a TF server; the chief (coordinator) schedules steps on
    whichever worker is free, so a killed worker costs only its in-flight steps.
    """
    scenario = SCENARIOS[cfg.scenario]
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task.role in ("worker", "ps"):
        delay_us = (
            int(cfg.straggler_ms * 1000)
            if scenario.straggler and task.index == cfg.straggler_task
            else 0
        )
        if task.role == "worker":
            Path(os.getcwd(), "straggler_delay_us").write_text(str(delay_us))
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=task.role,
            task_index=task.index,
            protocol="grpc",
            start=True,
        )
        report("serving")
        server.join()
        return []
    _setup_precision(cfg, tf)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = MODELS[cfg.model].build(tf.keras)
        # One variable, so round-robin placement puts all of it on one parameter server.
        table = (
            tf.Variable(tf.zeros([int(cfg.table_mib * 2**20 / 4)]), name="ps_table")
            if scenario.ps_imbalance
            else None
        )
        opt = _optimizer(cfg, tf)
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    variables = model.trainable_variables + ([table] if table is not None else [])

    def dataset_fn() -> Any:
        return make_dataset(cfg, cfg.batch_size, tf, per_worker_delay=True)

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))

    # No autograph: the step has no tensor-dependent Python control flow, and with 4 workers
    # autograph's converted-function cache once handed replica_fn train_step's code
    # ("train_step() takes 1 positional argument but 2 were given"; make verify, seed 7).
    @tf.function(autograph=False)
    def train_step(iterator: Any) -> Any:
        def replica_fn(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_obj(y, model(x, training=True)))
                if scenario.tiny_ops:
                    loss = loss + _tiny_ops(loss, cfg.tiny_ops, tf)
                if table is not None:
                    with tf.name_scope("ps_table"):
                        loss = loss + 0.0 * tf.reduce_sum(table)
            opt.minimize(loss, variables, tape=tape)
            return loss

        x, y = next(iterator)
        return strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(replica_fn, args=(x, y)), axis=None
        )

    _report_model(model, report)
    losses: list[float] = []
    pending: list[Any] = []
    step = 0
    while cfg.steps is None or step < cfg.steps:
        pending.append(coordinator.schedule(train_step, args=(per_worker,)))
        step += 1
        if len(pending) >= 10 or (cfg.steps is not None and step == cfg.steps):
            coordinator.join()
            for r in pending:
                losses.append(float(r.fetch()))
                report("step", step=len(losses) - 1, loss=losses[-1])
            pending.clear()
    return losses


WORKLOADS: Mapping[str, Callable[[EngineConfig, Task, Any, Report], list[float]]] = {
    "mwms-fit": run_mwms_fit,
    "mwms-loop": run_mwms_loop,
    "ps": run_ps,
}


def validate_config(cfg: EngineConfig) -> EngineConfig:
    """Checks names against the registries and options against each other.

    Raises:
        EngineError: an unknown name (the message lists the known ones) or a bad option.
    """
    for kind, value, registry in (
        ("workload", cfg.workload, WORKLOADS),
        ("scenario", cfg.scenario, SCENARIOS),
        ("model", cfg.model, MODELS),
    ):
        if value not in registry:
            raise EngineError(f"unknown {kind} {value!r}; known: {', '.join(sorted(registry))}")
    if cfg.mixed_precision not in (None, "mixed_float16", "mixed_bfloat16"):
        raise EngineError(
            f"mixed_precision must be mixed_float16 or mixed_bfloat16, not {cfg.mixed_precision!r}"
        )
    if cfg.steps is not None and cfg.steps < 1:
        raise EngineError("steps must be >= 1 (or None for --forever)")
    scenario = SCENARIOS[cfg.scenario]
    if cfg.onset_s < 0:
        raise EngineError("onset_s must be >= 0")
    if cfg.onset_s and not (
        (scenario.straggler and cfg.workload != "ps") or scenario.input_delay or scenario.slow_map
    ):
        raise EngineError(
            "onset_s delays a straggler (mwms-loop, mwms-fit) or a slow input stage; "
            f"scenario {cfg.scenario!r} on {cfg.workload!r} has neither"
        )
    if cfg.workload not in scenario.workloads:
        raise EngineError(
            f"scenario {cfg.scenario!r} does not apply to workload {cfg.workload!r}; "
            f"it applies to: {', '.join(scenario.workloads)}"
        )
    return cfg
