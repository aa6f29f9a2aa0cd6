"""A package's public names imported on first use (PEP 562's module ``__getattr__``), so that importing one module
of the package does not import the others."""

from __future__ import annotations

TYPE_CHECKING = False  # (without importing typing: packages of the command's start-up use this)
if TYPE_CHECKING:
    from collections.abc import Callable


def lazy_names(package: str, sources: dict[str, str], namespace: dict[str, object]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package`` whose names are each in the module ``sources[name]``: it imports that
    module when the name is first asked for and keeps the value in ``namespace`` (the package's globals), so it is
    found there afterwards.

    >>> __getattr__ = lazy_names(__name__, {"Comparison": "nbprec.compare.comparison"}, globals())  # doctest: +SKIP
    """

    def __getattr__(name: str) -> object:
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # found once
        return value

    return __getattr__
