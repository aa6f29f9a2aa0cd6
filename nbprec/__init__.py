"""nbprec: find where a neural network loses numerical precision.

Open a dump of any supported format with :func:`open`; everything else hangs off the objects it returns.
Everything is imported when first used (the dump model and readers, PyTorch capture, comparison, widgets), so
``import nbprec`` stays light (the ``nbprec`` command imports what its subcommand needs, nothing more).
"""

from __future__ import annotations

import sys
import types

from nbprec._version import __version__
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

TYPE_CHECKING = False  # (typing's own flag, without importing typing: the command line starts without it)
if TYPE_CHECKING:
    from typing import Any

# Attributes resolved on first use ("module:attribute", or a module): the dump model and the readers (numpy), and
# the optional layers. ``import nbprec`` itself loads nothing heavy, so that the command line can set up the
# process (nbprec.cli.run) before numpy is loaded.
_LAZY: dict[str, str] = {
    "Dump": "nbprec.dump:Dump",
    "INDEX_COLUMNS": "nbprec.dump_index:INDEX_COLUMNS",
    "Problem": "nbprec.dump:Problem",
    "guess_format": "nbprec.formats:guess_format",
    "open": "nbprec.formats:open_dump",
    "capture": "nbprec.capture:capture",
    "seed_all": "nbprec.capture:seed_all",
    "compare": "nbprec.compare:compare",
    "Comparison": "nbprec.compare:Comparison",
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

# The functions `capture` and `compare` share their names with the subpackages that hold them: importing a
# subpackage sets it as an attribute of this module, which would shadow the function. These names always
# mean the functions (as `from nbprec.capture import capture` at import time used to make them), and each
# function answers for its package too (`nbprec.compare.rules`, `import nbprec.compare.engine as engine`,
# `nbprec.compare.Rule`): :func:`_answer_for_package`.
_FUNCTIONS_NAMED_AS_PACKAGES = frozenset({"capture", "compare"})


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'nbprec' has no attribute {name!r}")
    import importlib

    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    if name in _FUNCTIONS_NAMED_AS_PACKAGES:
        _answer_for_package(value, sys.modules[module_name])
    setattr(sys.modules[__name__], name, value)  # found once
    return value


class _FunctionsPackage(types.ModuleType):
    """The module type of ``nbprec.compare`` and ``nbprec.capture`` once their function is bound to ``nbprec``:
    what the import system sets on the package (a submodule imported later) is set on the function too."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        function = self.__dict__.get("__function__")
        if function is not None:
            setattr(function, name, value)


def _answer_for_package(function: Any, package: types.ModuleType) -> None:
    """Give ``function`` (``nbprec.compare``, bound where its package would be) the package's attributes: its
    public names and its submodules imported so far, then each one imported later. Python's ``import a.b.c as
    x`` and ``a.b.c`` look ``b`` up on ``a`` and then ``c`` on what they find: the function. It stays the
    function itself (its identity, signature and pickling unchanged); its ``__dict__`` holds the package's
    names, as a function's attributes."""
    if package.__dict__.get("__function__") is function:
        return
    for name in getattr(package, "__all__", ()):
        if name != function.__name__:
            setattr(function, name, getattr(package, name))
    prefix = package.__name__ + "."
    for name, value in list(vars(package).items()):
        if isinstance(value, types.ModuleType) and value.__name__ == prefix + name:
            setattr(function, name, value)
    package.__dict__["__function__"] = function
    package.__class__ = _FunctionsPackage


class _Package(types.ModuleType):
    """This package's module type: keeps ``nbprec.capture`` and ``nbprec.compare`` bound to the functions."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS_NAMED_AS_PACKAGES and isinstance(value, types.ModuleType):
            return  # the import system binding the subpackage: the function stays (resolved by __getattr__)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
