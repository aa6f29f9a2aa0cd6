"""tfdbg_ascend's switch: ``enable()``, ``disable()``, ``set_dump_path()`` and ``import nbprec.tf.autodump``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nbprec
import nbprec.tf

tf = pytest.importorskip("tensorflow", reason='the nbprec.tf tests need TensorFlow (pip install "nbprec[tf]")')


def _hooks() -> int:
    from tensorflow.python.eager import context

    from nbprec.tf.hook import OpDumpHook

    return sum(isinstance(cb, OpDumpHook) for cb in context.context().op_callbacks)


def test_enable_disable_set_dump_path(tmp_path: Path) -> None:
    assert nbprec.tf.current() is None and not nbprec.tf.is_enabled()
    nbprec.tf.set_dump_path(tmp_path / "a")  # installed, switched off: nothing written yet
    assert _hooks() == 1 and not nbprec.tf.is_enabled() and not (tmp_path / "a").exists()

    @tf.function
    def double(v: Any) -> Any:
        return v * 2.0

    double(tf.constant([1.0]))  # traced while switched off: instrumented all the same
    dumper = nbprec.tf.enable()
    assert nbprec.tf.enable() is dumper and _hooks() == 1  # enabling again (a re-run cell) adds nothing
    double(tf.constant([3.0]))
    nbprec.tf.disable()
    double(tf.constant([5.0]))  # not written
    nbprec.tf.enable(tmp_path / "c")
    nbprec.tf.disable()
    assert not (tmp_path / "c").exists()  # a folder is made at its first file, not before
    nbprec.tf.enable(tmp_path / "b")
    tf.constant([2.0]) + 1.0  # eager
    nbprec.tf.disable()
    nbprec.tf.uninstall()
    assert nbprec.tf.current() is None and _hooks() == 0

    a = nbprec.tf.read_index(tmp_path / "a")["tensors"]
    assert list(a["tensor"]) == ["v:0", "mul/y:0", "mul:0"] and set(a["step"].isna()) == {True}
    np.testing.assert_array_equal(nbprec.open(tmp_path / "a").tensor("mul.0"), [6.0])
    b = nbprec.open(tmp_path / "b")
    assert list(b.index["name"]) == ["AddV2.0"]
    np.testing.assert_array_equal(b.tensor("AddV2.0"), [3.0])
    assert dumper.files == 4 and "4 files" in dumper.report()


@pytest.mark.slow
def test_path_defaults_to_the_script_folder(tmp_path: Path) -> None:
    """``import nbprec.tf.autodump`` switches dumping on into the script's folder, like tfdbg_ascend."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
            import nbprec.tf.autodump as dbg
            import tensorflow as tf
            tf.constant([1.0, 2.0]) * 3.0
            dbg.disable()
            tf.constant([1.0]) - 1.0
            dbg.set_dump_path(sys.argv[1])
            dbg.enable()
            tf.nn.relu(tf.constant([-1.0, 1.0]))
            print(dbg.current().report())
            """
        )
    )
    other = tmp_path / "elsewhere"
    done = subprocess.run(
        [sys.executable, str(script), str(other)], cwd=Path.home(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    here = nbprec.open(tmp_path)
    assert list(here.index["name"]) == ["Mul.0"]
    np.testing.assert_array_equal(here.tensor("Mul.0"), [3.0, 6.0])
    assert list(nbprec.open(other).index["name"]) == ["Relu.0"]
    assert "2 files" in done.stdout  # the report counts both folders
