"""Small models with different op mixes (registry ``MODELS``): dense, convolution, attention.

Built with tf-keras (``TF_USE_LEGACY_KERAS=1``): Keras 3 cannot ``fit`` under
MultiWorkerMirroredStrategy / ParameterServerStrategy and has no ``minimize``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NUM_CLASSES = 10


@dataclass(frozen=True)
class ModelSpec:
    """A model family: its input shape and builder ``build(keras) -> keras.Model``."""

    input_shape: tuple[int, ...]
    build: Callable[[Any], Any]


def _mlp(keras: Any) -> Any:
    return keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
            keras.layers.Activation(
                "linear", dtype="float32"
            ),  # logits in float32 under mixed precision
        ]
    )


def _cnn(keras: Any) -> Any:
    return keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(NUM_CLASSES),
            keras.layers.Activation("linear", dtype="float32"),
        ]
    )


def _transformer(keras: Any) -> Any:
    inputs = keras.Input((16, 32))
    attn = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(inputs, inputs)
    x = keras.layers.LayerNormalization()(inputs + attn)
    ffn = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(32)(ffn))
    x = keras.layers.GlobalAveragePooling1D()(x)
    logits = keras.layers.Dense(NUM_CLASSES)(x)
    return keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(logits))


MODELS: Mapping[str, ModelSpec] = {
    "mlp": ModelSpec((32,), _mlp),
    "cnn": ModelSpec((16, 16, 3), _cnn),
    "transformer": ModelSpec((16, 32), _transformer),
}
