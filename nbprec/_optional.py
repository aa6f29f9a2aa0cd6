"""Import optional dependencies with an error that says how to install them."""

from __future__ import annotations

import importlib
from types import ModuleType

from nbprec.errors import MissingDependencyError

# module name -> (extra that provides it, what it is used for)
_EXTRAS = {
    "torch": "torch",
    "networkx": "graph",
    "ipywidgets": "widgets",
    "bqplot": "widgets",
    "ipycytoscape": "widgets",
    "ipydatagrid": "widgets",
}


def require(module: str, purpose: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the pip command.

    Parameters
    ----------
    module
        The importable module name, e.g. ``"torch"``.
    purpose
        What the module is needed for, shown in the message (``"reading .pt tensors"``).
    extra
        The nbprec extra that installs it; looked up from the module name when omitted.

    Examples
    --------
    >>> np = require("numpy", "arrays")
    >>> np.__name__
    'numpy'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = extra or _EXTRAS.get(module.split(".")[0])
        hint = f'pip install "nbprec[{extra}]"' if extra else f"pip install {module}"
        raise MissingDependencyError(
            f"{purpose} needs the optional package '{module}', which is not installed. Install it with: {hint}"
        ) from exc
