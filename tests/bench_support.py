"""The bench scripts as modules for the tests: loaded by path, so that bench/ stays off sys.path."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/NAME.py``, loaded as the module ``nbprec_bench_NAME``."""
    spec = importlib.util.spec_from_file_location(f"nbprec_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
