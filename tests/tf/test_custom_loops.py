"""``with nbprec.tf.dump(...)`` around custom training loops: eager, ``tf.function``, and what cannot be dumped."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import nbprec
import nbprec.tf
from nbprec.errors import CaptureError

tf = pytest.importorskip("tensorflow", reason='the nbprec.tf tests need TensorFlow (pip install "nbprec[tf]")')
keras = pytest.importorskip("keras", reason="these tests use Keras 3 layers (installed with tensorflow)")


def _loop(models: ModuleType) -> tuple[Any, Any]:
    """A seeded model and an eager custom train step (GradientTape + SGD)."""
    model = models.build_model()
    optimizer = keras.optimizers.SGD(0.1)

    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return model, train_step


def test_eager_step(tmp_path: Path, models: ModuleType) -> None:
    model, train_step = _loop(models)
    x, y = models.data()
    train_step(x[:8], y[:8])  # step 0, not dumped
    weights = [w.copy() for w in model.get_weights()]
    with nbprec.tf.dump(tmp_path / "d", step=1) as dumper:
        train_step(x[8:16], y[8:16])
    assert not dumper.armed and "armed" not in repr(dumper)
    tensors = nbprec.tf.read_index(tmp_path / "d")["tensors"]
    assert set(tensors["step"]) == {1} and set(tensors["graph"]) == {"eager"}
    assert len(tensors) == dumper.files == len(list((tmp_path / "d").glob("*.npy"))) > 40
    dump = nbprec.open(tmp_path / "d")
    names = list(dump.index["name"])
    assert names[:3] == ["net_conv_ReadVariableOp.0", "net_conv_Conv2D.0", "net_conv_ReadVariableOp_1.0"]
    assert len(set(names)) == len(names)  # repeated eager op types got _1, _2, ... suffixes
    conv = tf.nn.conv2d(x[8:16], weights[0], 1, "VALID") + weights[1]
    np.testing.assert_allclose(dump.tensor("net_conv_BiasAdd.0"), conv.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(dump.tensor("net_fc1_ReadVariableOp.0"), weights[2])
    np.testing.assert_array_equal(dump.tensor("net_fc1_ReadVariableOp_1.0"), weights[3])
    assert list(dump.index.sort_values("order")["name"]) == list(dump.index["name"])  # timestamp order
    assert "no outputs" in dumper.report()  # the optimizer's variable updates


def test_tf_function_loop_with_chosen_steps(tmp_path: Path, models: ModuleType) -> None:
    _, eager_step = _loop(models)
    x, y = models.data()
    with nbprec.tf.dump(tmp_path / "d", steps="1|3") as dumper:
        train_step = tf.function(eager_step)  # traced at its first call, inside the block: instrumented
        for step in range(4):
            dumper.step(step)
            train_step(x[step * 8 : step * 8 + 8], y[step * 8 : step * 8 + 8])
    tensors = nbprec.tf.read_index(tmp_path / "d")["tensors"]
    assert sorted(set(tensors["step"])) == [1, 3]
    one, three = (tensors[tensors["step"] == s] for s in (1, 3))
    assert list(one["tensor"]) == list(three["tensor"]) and len(one) > 40  # the same ops, in the same order
    assert list(one["order"]) == list(range(len(one)))
    every = nbprec.open(tmp_path / "d", occurrence="all").index
    inputs = every[every["name"] == "x.0"]  # the function's argument x (a Placeholder), in steps 1 and 3
    assert list(inputs["step"]) == [0, 1]
    np.testing.assert_array_equal(np.load(inputs["file"].iloc[0]), x[8:16])
    np.testing.assert_array_equal(np.load(inputs["file"].iloc[1]), x[24:32])


def test_function_traced_before_is_reported(tmp_path: Path, models: ModuleType) -> None:
    _, eager_step = _loop(models)
    train_step = tf.function(eager_step)
    x, y = models.data()
    train_step(x[:8], y[:8])  # traced here, without instrumentation
    with nbprec.tf.dump(tmp_path / "d", step=1) as dumper:
        train_step(x[:8], y[:8])
    assert dumper.files == 0
    (reason,) = dumper.skipped["reason"]
    assert reason.startswith("tf.function ran but none of its ops were dumped")


def test_names_and_dtypes_that_cannot_be_dumped(tmp_path: Path) -> None:
    @tf.function
    def inner(v: Any) -> Any:
        return tf.nn.relu(v) * 2.0

    @tf.function
    def step(v: Any) -> Any:
        with tf.name_scope("blk.v2"):  # '.' is valid in a TF name but not in a dump file name
            w = v + 1.0
        with tf.name_scope("outer"):
            u = inner(w)  # a nested function: its ops get the call site's name scope
        text = tf.strings.as_string(u)  # string: no .npy form
        items = tf.TensorArray(tf.float32, size=1).write(0, u)  # variant
        half = tf.cast(u, tf.bfloat16)  # saved widened to float32
        return items.stack(), text, half

    with nbprec.tf.dump(tmp_path / "d") as dumper:
        step(tf.constant([1.0, -3.0]))
        with tf.name_scope("s" * 300):  # eager: a name too long for a file
            tf.constant([1.0]) * 2.0
    skipped = dumper.skipped.set_index("tensor")["reason"]
    assert "outside [A-Za-z0-9_-]" in skipped["blk.v2/add:0"]
    assert skipped["AsString:0"].startswith("string tensor")
    assert skipped["TensorArrayV2Write/TensorListSetItem:0"].startswith("variant tensor")
    assert "over the 255-character limit" in skipped["s" * 300 + "/Mul:0"]
    tensors = nbprec.tf.read_index(tmp_path / "d")["tensors"].set_index("tensor")
    assert tensors.loc["Cast:0", "dtype"] == "bfloat16" and tensors.loc["Cast:0", "saved_dtype"] == "float32"
    assert tensors.loc["Relu:0", "op"] == "outer_Relu" and tensors.loc["Relu:0", "graph"] == "inner"
    arguments = tensors.loc["v:0"]  # the argument v of both functions
    assert sorted(arguments["op"]) == ["outer_v", "v"] and set(arguments["op_type"]) == {"Placeholder"}
    dump = nbprec.open(tmp_path / "d")
    np.testing.assert_array_equal(dump.tensor("outer_Relu.0"), [2.0, 0.0])
    np.testing.assert_array_equal(dump.tensor("Cast.0"), [4.0, 0.0])
    report = dumper.report()
    assert "not dumped: string tensor" in report and "over the 255-character limit" in report


def test_xla_functions_are_reported(tmp_path: Path) -> None:
    @tf.function(jit_compile=True)
    def fused(v: Any) -> Any:
        return tf.nn.relu(v) * 2.0

    with nbprec.tf.dump(tmp_path / "d") as dumper:
        np.testing.assert_array_equal(fused(tf.constant([1.0, -1.0])), [2.0, 0.0])  # still runs
    assert any("XLA" in r for r in dumper.skipped["reason"])


def test_dumper_errors(tmp_path: Path) -> None:
    with nbprec.tf.dump(tmp_path / "d", step=None) as dumper, pytest.raises(CaptureError, match="no step numbers"):
        dumper.step()
    with pytest.raises(CaptureError, match="if_exists must be one of"):
        nbprec.tf.dump(tmp_path / "e", if_exists="nope").start()
    running = nbprec.tf.dump(tmp_path / "f").start()
    with pytest.raises(CaptureError, match="already running"):
        running.start()
    running.stop()
    running.stop()  # idempotent
    with pytest.raises(CaptureError, match="has finished"):
        running.start()
    with pytest.raises(ZeroDivisionError), nbprec.tf.dump(tmp_path / "g"):
        tf.constant(1.0) * 2.0
        _ = 1 / 0
    index = nbprec.tf.read_index(tmp_path / "g")
    assert len(index["tensors"]) == 1 and "ZeroDivisionError" in index["ends"][0]["error"]
