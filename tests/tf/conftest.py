"""Shared pieces of the TensorFlow dump tests: quiet TF logs, no nbprec hook left behind by a test, and
small seeded Keras models (the ``models`` fixture; no global seed is touched)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before tensorflow is first imported


@pytest.fixture(autouse=True)
def _no_hook_left_behind() -> Iterator[None]:
    """Fail a test that leaves an nbprec op callback installed (it would dump into later tests)."""
    yield
    if "tensorflow" not in sys.modules:
        return
    from tensorflow.python.eager import context
    from tensorflow.python.framework import op_callbacks

    from nbprec.tf.hook import OpDumpHook

    left = [cb for cb in context.context().op_callbacks if isinstance(cb, OpDumpHook)]
    for callback in left:
        op_callbacks.remove_op_callback(callback)
    assert not left, f"op callbacks left installed: {left}"


@pytest.fixture(scope="session")
def models() -> ModuleType:
    """This module: ``build_model``, ``data``, ``batch``, ``BATCH``."""
    return sys.modules[__name__]


BATCH = 8
SAMPLES = 32  # 4 training batches per epoch


def build_model(seed: int = 0) -> Any:
    """Conv2D -> ReLU -> Flatten -> Dense -> tanh -> Dense, named ``net``, weights drawn from ``seed``."""
    import keras

    def init(k: int) -> Any:
        return keras.initializers.GlorotUniform(seed=seed * 10 + k)

    model = keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            keras.layers.Conv2D(2, 3, name="conv", kernel_initializer=init(1), bias_initializer="ones"),
            keras.layers.Activation("relu", name="act1"),
            keras.layers.Flatten(name="flat"),
            keras.layers.Dense(8, name="fc1", kernel_initializer=init(2), bias_initializer="ones"),
            keras.layers.Activation("tanh", name="act2"),
            keras.layers.Dense(3, name="fc2", kernel_initializer=init(3)),
        ],
        name="net",
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``SAMPLES`` inputs and targets."""
    rng = np.random.default_rng(seed)
    return rng.random((SAMPLES, 6, 6, 1), dtype=np.float32), rng.random((SAMPLES, 3), dtype=np.float32)


def batch(x: np.ndarray, step: int) -> np.ndarray:
    """The batch ``model.fit(..., batch_size=BATCH, shuffle=False)`` trains on at ``step`` (first epoch)."""
    return x[step * BATCH : (step + 1) * BATCH]
