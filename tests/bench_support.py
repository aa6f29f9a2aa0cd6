"""The bench scripts as modules for the tests: loaded by path, so that bench/ stays off sys.path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/NAME.py``, loaded as the module ``nbprec_bench_NAME``. The scripts import the helpers they share
    as ``timing`` (bench/timing.py): bench/ is on ``sys.path`` while the script loads, and a ``timing`` module
    the load brought in is dropped again afterwards."""
    spec = importlib.util.spec_from_file_location(f"nbprec_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    had_timing = "timing" in sys.modules
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
        if not had_timing:
            sys.modules.pop("timing", None)
    return module
