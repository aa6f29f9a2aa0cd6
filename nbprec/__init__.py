"""nbprec: find where a neural network loses numerical precision.

Open a dump of any supported format with :func:`open`; everything else hangs off the objects it returns.
Optional layers (PyTorch capture, comparison, widgets) are imported when first used, so ``import nbprec``
stays light.
"""

from __future__ import annotations

from typing import Any

from nbprec._version import __version__
from nbprec.dump import INDEX_COLUMNS, Dump, Problem
from nbprec.errors import (
    CaptureError,
    ComparisonError,
    DumpFormatError,
    EmptyDumpError,
    MissingDependencyError,
    NbprecError,
    OverflowDetectedError,
    TensorDataUnavailableError,
    TensorNotFoundError,
    UnknownFormatError,
)
from nbprec.formats import guess_format
from nbprec.formats import open_dump as open

# Attributes resolved lazily from submodules that are heavier or optional.
_LAZY = {
    "capture": "nbprec.capture:capture",
    "seed_all": "nbprec.capture:seed_all",
    "compare": "nbprec.compare:compare",
    "Comparison": "nbprec.compare:Comparison",
    "rules": "nbprec.compare.rules",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'nbprec' has no attribute {name!r}")
    import importlib

    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


__all__ = [
    "INDEX_COLUMNS",
    "CaptureError",
    "ComparisonError",
    "Dump",
    "DumpFormatError",
    "EmptyDumpError",
    "MissingDependencyError",
    "NbprecError",
    "OverflowDetectedError",
    "Problem",
    "TensorDataUnavailableError",
    "TensorNotFoundError",
    "UnknownFormatError",
    "__version__",
    "guess_format",
    "open",
]
