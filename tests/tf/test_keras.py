"""Dump a real Keras ``model.fit`` step with ``nbprec.tf.DumpCallback`` and check it against TensorFlow itself.

Two independent witnesses: tfdbg2 (``tf.debugging.experimental.enable_dump_debug_info``, FULL_TENSOR), run in
the same fit, says which op outputs the train function computed and their values; and a plain eager run of
the model's layers, with the weights the model had before the dumped step, gives each layer's output.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

import nbprec
import nbprec.tf
from nbprec.errors import CaptureError
from nbprec.formats.tf_npy import parse_file_name

tf = pytest.importorskip("tensorflow", reason='the nbprec.tf tests need TensorFlow (pip install "nbprec[tf]")')
keras = pytest.importorskip("keras", reason="the DumpCallback tests need Keras 3 (installed with tensorflow)")

pytestmark = pytest.mark.slow
STEP = 2
TRAIN_GRAPHS = ("multi_step_on_iterator", "one_step_on_data")  # the tf.functions of Keras 3 model.fit


def _tfdbg2_step(folder: Path, step: int) -> dict[tuple[str, str, int], np.ndarray]:
    """Output values tfdbg2 recorded in Keras's train functions in training step ``step``, by (graph, op, slot)."""
    from tensorflow.python.debug.lib import debug_events_reader

    runs: dict[tuple[str, str, int], list[Any]] = {}
    first: dict[str, str] = {}  # graph name -> id of its first trace (DumpCallback retraces after the step)
    with debug_events_reader.DebugDataReader(str(folder)) as reader:
        reader.update()
        for trace in reader.graph_execution_traces():
            graph = reader.graph_by_id(trace.graph_id).name
            if graph in TRAIN_GRAPHS and first.setdefault(graph, trace.graph_id) == trace.graph_id:
                runs.setdefault((graph, trace.op_name, trace.output_slot), []).append(trace)
        assert runs and all(len(r) == step + 1 for r in runs.values())  # each op once per batch
        return {key: np.asarray(reader.graph_execution_trace_to_tensor_value(r[step])) for key, r in runs.items()}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory, models: ModuleType) -> SimpleNamespace:
    """One epoch of 4 batches with step 2 dumped by nbprec and every step by tfdbg2."""
    path = tmp_path_factory.mktemp("keras") / "dump"
    witness = tmp_path_factory.mktemp("tfdbg2")
    model = models.build_model()
    x, y = models.data()
    weights: dict[str, list[np.ndarray]] = {}

    class Witness(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            # called after DumpCallback's (list order): tfdbg2's op callback comes after nbprec's
            tf.debugging.experimental.enable_dump_debug_info(
                str(witness), tensor_debug_mode="FULL_TENSOR", circular_buffer_size=-1
            )

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if batch == STEP:
                weights["before"] = [w.copy() for w in self.model.get_weights()]

        def on_train_end(self, logs: Any = None) -> None:
            tf.debugging.experimental.disable_dump_debug_info()
            # a function tfdbg2 instrumented crashes the process (SIGSEGV) if run after this: drop it
            self.model.make_train_function(force=True)

    callback = nbprec.tf.DumpCallback(path, steps=STEP)
    model.fit(x, y, batch_size=models.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[callback, Witness()])
    index = nbprec.tf.read_index(path)
    return SimpleNamespace(
        path=path,
        model=model,
        callback=callback,
        x=x,
        y=y,
        weights=weights["before"],
        index=index,
        tensors=index["tensors"],
        witness=_tfdbg2_step(witness, STEP),
    )


def _key(graph: str, tensor: str) -> tuple[str, str, int]:
    op, slot = tensor.rsplit(":", 1)
    return graph, op, int(slot)


def test_one_file_per_op_output_of_the_step(fitted: SimpleNamespace) -> None:
    tensors = fitted.tensors
    assert set(tensors["step"]) == {STEP}  # only the chosen step, and nothing after the hook was removed
    graph = tensors[tensors["graph"].isin(TRAIN_GRAPHS)]
    ours = [_key(g, t) for g, t in zip(graph["graph"], graph["tensor"], strict=True)]
    assert len(ours) == len(set(ours)) > 60
    # exactly the op outputs TF computed in the train functions; and the nested function's arguments, which
    # tfdbg2 misses (its debug ops for them are pruned)
    assert set(fitted.witness) <= set(ours)
    extra = graph[[key not in fitted.witness for key in ours]]
    assert set(extra["op_type"]) == {"Placeholder"} and set(extra["graph"]) == {"one_step_on_data"}
    # eager ops of the step: Keras unpacking the function's result, and the witness reading the weights (a
    # callback after DumpCallback in the list runs in the dumped step)
    eager = tensors[tensors["graph"] == "eager"]
    assert set(eager["op_type"]) == {"OptionalHasValue", "OptionalGetValue", "ReadVariableOp", "Identity"}

    files = sorted(p.name for p in fitted.path.glob("*.npy"))
    assert files == sorted(tensors["file"]) and len(files) == len(tensors)
    assert all(not isinstance(parse_file_name(f), str) for f in files)  # {op_name}.{output_index}.{timestamp}.npy
    for tensor, name, file in zip(tensors["tensor"], tensors["op"], tensors["file"], strict=True):
        op, slot = tensor.rsplit(":", 1)
        assert file.startswith(f"{name}.{slot}.") and name.startswith(op.replace("/", "_"))

    dump = nbprec.open(fitted.path)
    assert dump.format == "tf_npy" and len(dump) == len(files)
    assert list(dump.index["name"]) == [f"{op}.{slot}" for op, slot in zip(tensors["op"], tensors["slot"], strict=True)]
    assert dump.problems.empty  # the reader knows the capture index: it takes the op types from it
    types = dict(zip(tensors["file"], tensors["op_type"], strict=True))
    assert [types[Path(f).name] for f in dump.index["file"]] == list(dump.index["op_type"])


def test_values_are_what_tensorflow_computed(fitted: SimpleNamespace, models: ModuleType) -> None:
    dump = nbprec.open(fitted.path)
    graph = fitted.tensors[fitted.tensors["graph"].isin(TRAIN_GRAPHS)]
    checked = 0
    for g, tensor, name, slot in zip(graph["graph"], graph["tensor"], graph["op"], graph["slot"], strict=True):
        if _key(g, tensor) in fitted.witness:
            np.testing.assert_array_equal(dump.tensor(f"{name}.{slot}"), fitted.witness[_key(g, tensor)], tensor)
            checked += 1
    assert checked == len(fitted.witness)
    arguments = graph[graph["op_type"] == "Placeholder"]  # the batch, passed to Keras's one_step_on_data
    got = sorted((dump.tensor(f"{n}.{s}") for n, s in zip(arguments["op"], arguments["slot"], strict=True)), key=len)
    expected = [models.batch(fitted.y, STEP), models.batch(fitted.x, STEP)]
    assert len(got) == 2 and all(np.array_equal(a, b) for a, b in zip(sorted(got, key=np.ndim), expected, strict=True))

    # the batch of step 2, and each layer's output from a plain eager run with the weights before step 2
    np.testing.assert_array_equal(dump.tensor("IteratorGetNext.0"), models.batch(fitted.x, STEP))
    np.testing.assert_array_equal(dump.tensor("IteratorGetNext.1"), models.batch(fitted.y, STEP))
    replay = models.build_model(seed=5)
    replay.set_weights(fitted.weights)
    h = tf.constant(models.batch(fitted.x, STEP))
    for layer in replay.layers:
        h = layer(h)
        scope = re.compile(rf"net(_\d+)?/{layer.name}(_\d+)?/")
        rows = graph[[bool(scope.match(t)) for t in graph["tensor"]]]
        last = rows.iloc[-1]  # the layer's output: the last op run in its name scope
        np.testing.assert_array_equal(dump.tensor(f"{last['op']}.{last['slot']}"), h.numpy())


def test_execution_order_and_report(fitted: SimpleNamespace) -> None:
    tensors = fitted.tensors
    assert tensors["timestamp"].is_monotonic_increasing and tensors["timestamp"].is_unique
    position = {t: i for i, t in enumerate(tensors["tensor"])}

    def first(pattern: str) -> int:
        return min(i for t, i in position.items() if re.search(pattern, t))

    chain = [r"^net\w*/conv", r"^net\w*/act1", r"^net\w*/fc1", r"^net\w*/act2", r"^net\w*/fc2", "^compile_loss"]
    chain += [r"^gradient_tape/net\w*/fc2", r"^gradient_tape/net\w*/fc1", r"^gradient_tape/net\w*/conv", "^sgd"]
    assert [first(p) for p in chain] == sorted(first(p) for p in chain)

    skipped = fitted.callback.skipped
    reasons = dict(zip(skipped["tensor"], skipped["reason"], strict=True))
    assert "resource handle" in reasons["iterator:0"]
    assert any("Identity in a tf.function" in r for r in reasons.values())
    assert any(r.startswith("variant tensor") for r in reasons.values())  # the optional Keras returns
    assert any(r.startswith("no outputs") for t, r in reasons.items() if "Assign" in t)
    text = fitted.callback.report()
    assert f"{len(tensors)} files" in text and "not dumped: resource handle" in text


def test_model_is_restored(fitted: SimpleNamespace) -> None:
    from tensorflow.python.eager import context

    assert not any(type(cb).__name__ == "OpDumpHook" for cb in context.context().op_callbacks)
    before = len(list(fitted.path.iterdir()))
    fitted.model.fit(fitted.x, fitted.y, batch_size=8, epochs=1, verbose=0)  # a clean train function
    assert len(list(fitted.path.iterdir())) == before


def test_second_fit_appends_and_jit_is_restored(tmp_path: Path, models: ModuleType) -> None:
    model = models.build_model()
    model.jit_compile = True  # XLA fuses ops: the callback turns it off while dumping
    x, y = models.data()
    callback = nbprec.tf.DumpCallback(tmp_path / "d", steps="1|5")
    for _ in range(2):
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
        assert model.jit_compile is True
    steps = nbprec.tf.read_index(tmp_path / "d")["tensors"]["step"]
    assert sorted(set(steps)) == [1, 5] and (steps == 1).sum() == (steps == 5).sum()
    every = nbprec.open(tmp_path / "d", occurrence="all")
    assert every.steps == [0, 1] and len(every) == len(steps)


def test_run_eagerly(tmp_path: Path, models: ModuleType) -> None:
    model = models.build_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", run_eagerly=True)
    x, y = models.data()
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[nbprec.tf.DumpCallback(tmp_path, 3)])
    tensors = nbprec.tf.read_index(tmp_path)["tensors"]
    assert set(tensors["graph"]) == {"eager"} and set(tensors["step"]) == {3} and len(tensors) > 40
    dump = nbprec.open(tmp_path)
    assert dump.tensor("net_act1_Relu.0").shape == (8, 4, 4, 2)


def test_errors_are_clear(tmp_path: Path, models: ModuleType) -> None:
    with pytest.raises(CaptureError, match="runs backwards"):
        nbprec.tf.DumpCallback(tmp_path, steps="5-3")
    model = models.build_model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    x, y = models.data()
    with pytest.raises(CaptureError, match="steps_per_execution=2"):
        model.fit(x, y, batch_size=8, verbose=0, callbacks=[nbprec.tf.DumpCallback(tmp_path / "a", steps=1)])
    model.compile(optimizer="sgd", loss="mse")
    (tmp_path / "b").mkdir()
    np.save(tmp_path / "b" / "x.0.1.npy", np.ones(1))
    with pytest.raises(CaptureError, match="already holds 1 dump files"):
        model.fit(x, y, batch_size=8, verbose=0, callbacks=[nbprec.tf.DumpCallback(tmp_path / "b", steps=1)])
