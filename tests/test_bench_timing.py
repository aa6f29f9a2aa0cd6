"""bench/timing.py's import costs (what importing a command's heavy dependencies costs a fresh interpreter, printed
by bench/compare.py beside its figures; no timing is asserted), and the byte-compiling of a tree before it is
timed."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from bench_support import bench_module

timing = bench_module("timing")


def test_import_costs_name_each_module_its_version_and_milliseconds():
    text = timing.import_costs(["numpy", "ml_dtypes", "nbprec.cli"], runs=2)
    parts = text.split(", ")
    assert len(parts) == 3, text
    assert re.fullmatch(rf"numpy {re.escape(np.__version__)} \d+ ms", parts[0]), text
    assert re.fullmatch(rf"ml_dtypes {re.escape(ml_dtypes.__version__)} \d+ ms", parts[1]), text
    assert re.fullmatch(r"nbprec\.cli \d+ ms", parts[2]), text  # (no __version__: no version shown)


def test_import_costs_fail_on_a_module_that_does_not_import():
    with pytest.raises(SystemExit, match="ModuleNotFoundError"):
        timing.import_costs(["numpy", "no_such_module_nbprec"], runs=1)


def test_compile_tree_writes_the_bytecode_of_a_trees_nbprec_package(tmp_path):
    import importlib.util

    package = tmp_path / "nbprec"
    (package / "sub").mkdir(parents=True)
    sources = [package / "__init__.py", package / "sub" / "__init__.py", package / "sub" / "mod.py"]
    for source in sources:
        source.write_text("VALUE = 1\n")
    (tmp_path / "outside.py").write_text("VALUE = 2\n")  # (not the package's: left alone)
    timing.compile_tree(tmp_path)
    for source in sources:
        assert Path(importlib.util.cache_from_source(str(source))).exists(), source
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "outside.py"))).exists()
