"""A real TensorFlow capture of >= 1 M events for the benchmarks (tf-keras ``fit``, graph mode).

An 8-layer MLP trained with batch 8 gives ~1,240 host events per step (executor, op, threadpool
and eager-runtime TraceMe events), so 1,000 steps give ~1.24 M events in ~4 s of training.
Run in its own process: ``python -m bench.tf_capture LOGDIR STEPS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def ensure_tf_capture(root: Path, steps: int) -> Path | None:
    """The capture file (made once), or None when TensorFlow is not installed."""
    logdir = root / f"tf-fit-{steps}"
    found = sorted(logdir.rglob("*.xplane.pb"))
    if found:
        return found[0]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run(
        [sys.executable, "-m", "bench.tf_capture", str(logdir), str(steps)], env=env, check=False
    )
    found = sorted(logdir.rglob("*.xplane.pb"))
    return found[0] if r.returncode == 0 and found else None


def main() -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        import numpy as np
        import tensorflow as tf
    except ImportError:
        sys.exit(3)
    logdir, steps = sys.argv[1], int(sys.argv[2])
    model = tf.keras.Sequential(
        [tf.keras.Input((32,))]
        + [tf.keras.layers.Dense(32, activation="relu") for _ in range(8)]
        + [tf.keras.layers.Dense(10)]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.rand(8 * steps, 32).astype("float32")
    y = np.random.randint(0, 10, 8 * steps)
    model.fit(x[:8], y[:8], batch_size=8, verbose=0)
    tf.profiler.experimental.start(logdir)
    model.fit(x, y, batch_size=8, verbose=0)
    tf.profiler.experimental.stop()


if __name__ == "__main__":
    main()
