"""Makes real TensorFlow captures for the tests: ``python tests/tf_captures.py KIND LOGDIR STEPS``.

Kinds: ``loop`` (custom loop with ``Trace('train', step_num=…, _r=1)`` markers), ``fit``
(tf-keras ``model.fit``), ``xla`` (a ``jit_compile=True`` function with markers). Each writes
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


def _fit(logdir: str, steps: int) -> None:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(64, activation="relu", input_shape=(32,)),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.rand(16 * steps, 32).astype("float32")
    y = np.random.randint(0, 10, size=16 * steps)
    model.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)  # build + trace first
    tf.profiler.experimental.start(logdir)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    tf.profiler.experimental.stop()


def main() -> None:
    kind, logdir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "fit":
        _fit(logdir, steps)
    else:
        _loop(logdir, steps, jit=kind == "xla")
    print(steps)


if __name__ == "__main__":
    main()
