"""bench/timing.py's import costs: what importing a command's heavy dependencies costs a fresh interpreter, printed
by bench/compare.py beside its figures (no timing is asserted)."""

from __future__ import annotations

import re

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
