"""Makes real TensorFlow captures for the tests: ``python tests/tf_captures.py KIND LOGDIR STEPS``.

Kinds: ``loop`` (custom loop with ``Trace('train', step_num=…, _r=1)`` markers), ``fit``
(tf-keras ``model.fit``), ``fit1`` (``model.fit`` profiled as ``TensorBoard(profile_batch=(3,
5))`` does: the window holds one whole ``train`` marker, batch 4's, and parts of batches 3 and
5), ``xla`` (a ``jit_compile=True`` function
with markers). Each writes
``LOGDIR/plugins/profile/<session>/<host>.xplane.pb`` and prints the number of steps run.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf


def _loop(logdir: str, steps: int, jit: bool) -> None:
    w1 = tf.Variable(tf.random.normal([64, 128]) * 0.1)
    w2 = tf.Variable(tf.random.normal([128, 10]) * 0.1)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function(jit_compile=jit)
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        opt.minimize(loss, [w1, w2], tape=tape)
        return loss

    x = tf.random.normal([32, 64])
    y = tf.random.uniform([32], maxval=10, dtype=tf.int32)
    step(x, y)  # trace + compile outside the capture
    tf.profiler.experimental.start(logdir)
    for i in range(steps):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            step(x, y)
    tf.profiler.experimental.stop()


def _keras(steps: int) -> tuple[tf.keras.Model, np.ndarray, np.ndarray]:
    """A compiled two-layer tf-keras model and ``steps`` batches of 16 random examples."""
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(64, activation="relu", input_shape=(32,)),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.rand(16 * steps, 32).astype("float32")
    y = np.random.randint(0, 10, size=16 * steps)
    return model, x, y


def _fit(logdir: str, steps: int) -> None:
    model, x, y = _keras(steps)
    model.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)  # build + trace first
    tf.profiler.experimental.start(logdir)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    tf.profiler.experimental.stop()


def _fit_one_batch(logdir: str, steps: int) -> None:
    """``profile_batch=(3, 5)``: the profiler starts in batch 3's ``on_train_batch_begin`` and
    stops in batch 5's ``on_train_batch_end``, both inside their ``train`` markers, so only
    batch 4's marker is whole: one step, as XProf counts it."""
    model, x, y = _keras(steps)
    board = _ProfileBatch(os.path.join(logdir, "train"), 3, 5)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[board])


class _ProfileBatch(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """What ``TensorBoard(profile_batch=(start, stop))`` does to profile (tf-keras
    callbacks.py: ``_global_train_batch`` counts from 1 in ``on_train_batch_begin``; the
    profiler starts there at ``start`` and stops in ``on_train_batch_end`` once the count
    reaches ``stop``); without the summaries, which need the tensorboard package."""

    def __init__(self, logdir: str, start: int, stop: int) -> None:
        super().__init__()
        self.logdir, self.start, self.stop, self.seen = logdir, start, stop, 0

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        self.seen += 1
        if self.seen == self.start:
            tf.profiler.experimental.start(self.logdir)

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if self.seen == self.stop:
            tf.profiler.experimental.stop()


def main() -> None:
    kind, logdir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "fit":
        _fit(logdir, steps)
    elif kind == "fit1":
        _fit_one_batch(logdir, steps)
    else:
        _loop(logdir, steps, jit=kind == "xla")
    print(steps)


if __name__ == "__main__":
    main()
