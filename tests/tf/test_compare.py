"""End to end: nbprec compares two TensorFlow dumps written by ``nbprec.tf.DumpCallback``."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import nbprec
import nbprec.tf

tf = pytest.importorskip("tensorflow", reason='the nbprec.tf tests need TensorFlow (pip install "nbprec[tf]")')

pytestmark = pytest.mark.slow


def _dump(models: ModuleType, path: Path, change_fc1: bool = False) -> Path:
    model = models.build_model()
    if change_fc1:  # a different fc1 kernel, as a wrong checkpoint or a broken kernel would give
        weights = model.get_weights()
        weights[2] = weights[2] + np.random.default_rng(1).normal(0, 0.3, weights[2].shape).astype(np.float32)
        model.set_weights(weights)
    x, y = models.data()
    # step 0: the first update already spreads fc1's change to conv's weights through the gradients
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[nbprec.tf.DumpCallback(path, 0)])
    return path


def test_same_model_twice_passes_and_a_changed_layer_is_found(tmp_path: Path, models: ModuleType) -> None:
    bench = _dump(models, tmp_path / "bench")
    again = _dump(models, tmp_path / "again")
    same = nbprec.compare(again, bench)
    assert bool(same) and same.first_failing_op() is None
    summary = same.summary()
    assert summary["tensors"] == len(nbprec.open(bench)) > 60  # every tensor matched and compared
    table = same.table
    assert set(table["status"]) == {"pass", "n/a"}
    assert set(table.loc[table["status"] == "n/a", "numel"]) == {0}  # empty tensors have nothing to compare

    changed = nbprec.compare(_dump(models, tmp_path / "changed", change_fc1=True), bench)
    assert not changed
    first = changed.first_failing_op()
    assert first is not None and "_fc1_" in first["op"], first["op"]
    upstream = nbprec.open(bench).index
    position = {n: i for i, n in enumerate(upstream["op"])}
    conv_ops = [op for op in upstream["op"] if "_conv_" in op and not op.startswith("gradient")]
    assert all(position[op] < position[first["op"]] for op in conv_ops)  # conv ran before and still passes
