"""Input pipeline: synthetic, learnable data preprocessed with ``tf.experimental.numpy`` in tf.data.

Labels are a fixed random linear function of the features, so loss must go down. The
``input-bound`` scenario adds a sleeping ``map`` and drops ``prefetch``; ``slow-map`` adds three
named map stages of which one is expensive; the ``straggler``
scenario of the ``ps`` workload adds a ``SleepDataset`` whose delay each worker reads from a
file in its own working directory (the dataset function runs inside the worker processes).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from podscope.reference_engine.config import EngineConfig
from podscope.reference_engine.models import MODELS, NUM_CLASSES
from podscope.reference_engine.scenarios import ONSET, SCENARIOS

EXAMPLES = 2048
#: File each ``ps`` worker reads (relative to its working directory) for its per-batch delay.
STRAGGLER_DELAY_FILE = "straggler_delay_us"


def synthetic_arrays(cfg: EngineConfig) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    shape = MODELS[cfg.model].input_shape
    x = rng.normal(size=(EXAMPLES, *shape)).astype(np.float32)
    w = rng.normal(size=(int(np.prod(shape)), NUM_CLASSES)).astype(np.float32)
    y = np.argmax(x.reshape(EXAMPLES, -1) @ w, axis=1).astype(np.int32)
    return x, y


def make_dataset(
    cfg: EngineConfig,
    batch_size: int,
    tf: Any,
    per_worker_delay: bool = False,
    shard: tuple[int, int] | None = None,
) -> Any:
    """The training dataset (infinite), batched by ``batch_size``.

    Args:
        cfg: engine config (scenario knobs).
        batch_size: batch size of this dataset (global for MWMS, per worker for ps).
        tf: the TensorFlow module (imported by the caller inside the task process).
        per_worker_delay: add the ps straggler's SleepDataset (reads STRAGGLER_DELAY_FILE).
        shard: ``(num_shards, index)``: keep only this input pipeline's examples.
    """
    tnp = tf.experimental.numpy
    scenario = SCENARIOS[cfg.scenario]
    x, y = synthetic_arrays(cfg)

    def preprocess(features: Any, label: Any) -> tuple[Any, Any]:
        # tf.experimental.numpy inside tf.data: clip outliers, squash, rescale.
        f = tnp.clip(tnp.asarray(features), -3.0, 3.0)
        return tnp.tanh(f * 0.5) * 2.0, label

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shard is not None:
        ds = ds.shard(*shard)
    ds = ds.repeat().map(preprocess).batch(batch_size, drop_remainder=True)
    if scenario.slow_map:
        ds = _slow_map_stages(ds, cfg.slow_map_ms / 1000.0, tf)
    if scenario.input_delay:
        ds = ds.map(_sleeping_map(cfg.input_delay_ms / 1000.0, tf))
    if not scenario.input_delay:
        ds = ds.prefetch(2)
    if per_worker_delay:
        # Last, with no prefetch after it: every batch the step takes costs the delay. Before
        # a prefetch, the buffer fills while the coordinator gives this worker fewer steps, and
        # hides the delay (measured: 38 ms steps against the others' 34 ms).
        delay = tf.strings.to_number(tf.io.read_file(STRAGGLER_DELAY_FILE), out_type=tf.int64)
        ds = _sleep_dataset(ds, delay, tf)
    opts = tf.data.Options()
    if scenario.input_delay or per_worker_delay:
        # "No prefetch" must mean none: tf.data (2.12+) otherwise injects one after the last
        # stage.
        opts.experimental_optimization.inject_prefetch = False
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(opts)


def _sleeping_map(delay_s: float, tf: Any) -> Any:
    """A map function over (features, label) batches that takes ``delay_s`` on the host (a
    ``numpy_function``: tf.data can neither fuse nor parallelize it away)."""

    def slow(features: Any, label: Any) -> tuple[Any, Any]:
        def sleep(a: np.ndarray) -> np.ndarray:
            if ONSET.active():  # from the start, or ``onset_s`` into training
                time.sleep(delay_s)
            return a

        out = tf.numpy_function(sleep, [features], tf.float32)
        out.set_shape(features.shape)
        return out, label

    return slow


def _slow_map_stages(ds: Any, delay_s: float, tf: Any) -> Any:
    """Three named map stages over batches: cheap ``scale``, expensive ``augment`` (a host
    function that takes ``delay_s`` per batch: a stand-in for Python augmentation), cheap
    ``clip``."""
    ds = ds.map(lambda f, y: (f * 1.0, y), name="scale")
    ds = ds.map(_sleeping_map(delay_s, tf), name="augment")
    return ds.map(lambda f, y: (tf.clip_by_value(f, -10.0, 10.0), y), name="clip")


def _sleep_dataset(ds: Any, delay_us: Any, tf: Any) -> Any:
    """``tf.raw_ops.SleepDataset`` wrapped as a Dataset (TF has no public sleep transformation
    since 2.16; this op runs natively in whichever process iterates the dataset)."""
    from tensorflow.python.data.experimental.ops import testing

    return ds.apply(testing.sleep(delay_us))
