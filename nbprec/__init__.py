"""nbprec: find where a neural network loses numerical precision.

Open a dump of any supported format with :func:`open`; everything else hangs off the objects it returns.
Optional layers (PyTorch capture, comparison, widgets) are imported when first used, so ``import nbprec``
stays light.
"""

from __future__ import annotations

from typing import Any

from nbprec._version import __version__

# The functions `capture` and `compare` share their names with the subpackages that hold them. Importing them
# here, after their packages, binds the names to the functions for good (a lazy lookup would be shadowed by
# the submodule as soon as anything imported it). Neither package imports torch or a widget library.
from nbprec.capture import capture, seed_all
from nbprec.compare import Comparison, compare
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

# Attributes resolved lazily from optional layers.
_LAZY: dict[str, str] = {
    "explore": "nbprec.widgets:explore",
    "isolate": "nbprec.compare.isolate:isolate",
    "node_info": "nbprec.graph:node_info",
    "overflow": "nbprec.overflow",
    "graph": "nbprec.graph",
    "report": "nbprec.report",
    "config": "nbprec.config",
    "diagnose": "nbprec.diagnose",
    "tf": "nbprec.tf",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'nbprec' has no attribute {name!r}")
    import importlib

    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


# Jupyter's entry points (docs/jupyter.md); each imports its module only when called.
def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbprec``: register the ``%nbprec`` magics (:mod:`nbprec.jupyter.magics`)."""
    from nbprec.jupyter.magics import load_ipython_extension as load

    load(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the prebuilt JupyterLab extension lies in this package (its source: ``jupyterlab-nbprec/``)."""
    return [{"src": "labextension", "dest": "jupyterlab-nbprec"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension the JupyterLab extension talks to (:mod:`nbprec.jupyter.server`)."""
    return [{"module": "nbprec.jupyter.server"}]


__all__ = [
    "INDEX_COLUMNS",
    "CaptureError",
    "Comparison",
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
    "capture",
    "compare",
    "guess_format",
    "open",
    "seed_all",
]
