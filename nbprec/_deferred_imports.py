"""A third-party import that costs a second, deferred in the processes nbprec starts for its reports and pages.

jsonschema's non-GPL format checkers (the ``format-nongpl`` extra, which jupyter-events asks for, so every
Jupyter install has it) import ``rfc3987_syntax`` for the ``iri`` and ``iri-reference`` formats, and that
package compiles a lark grammar when it is imported: 0.9-1.0 s on a 2-core machine, before anything else
(``python -X importtime -c "import nbformat"``; jsonschema issue 1428). nbformat, nbclient, nbconvert and Voila
all import jsonschema, so ``nbprec report`` and ``nbprec serve`` paid it, and the Voila server paid it again.

:func:`defer_iri_grammar` puts a stand-in module in its place: ``from rfc3987_syntax import is_valid_syntax``
gets a function that imports the real package on its first call and forwards to it, as does any other
attribute. Nothing changes but when the grammar is compiled: only if an IRI format is ever checked (nbformat,
nbclient and Voila never ask). ``nbprec demo``, ``report`` and ``serve`` call it first (:func:`nbprec.cli.main`);
Voila is started through :mod:`nbprec._voila`, which calls it and then runs Voila. A user's own process is left
alone: :func:`nbprec.report.write_report` called from a notebook, or ``%nbprec report`` in a kernel.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

#: The package that compiles its grammar when imported.
SLOW_MODULE = "rfc3987_syntax"


def _stand_in(name: str) -> types.ModuleType:
    stub = types.ModuleType(name, f"stands in for {name} until it is used (nbprec._deferred_imports)")

    def real() -> types.ModuleType:
        module = sys.modules.get(name)
        if module is stub:  # first use: the real import, which replaces this module in sys.modules
            del sys.modules[name]
            module = importlib.import_module(name)
        return module

    def is_valid_syntax(*args: Any, **kwargs: Any) -> Any:
        return real().is_valid_syntax(*args, **kwargs)

    def attribute(attr: str) -> Any:  # PEP 562: any other name, from the real module
        if attr.startswith("__"):  # the import system's questions (__path__, ...): a plain module's answers
            raise AttributeError(attr)
        return getattr(real(), attr)

    stub.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    stub.__getattr__ = attribute  # type: ignore[method-assign]
    return stub


def defer_iri_grammar() -> bool:
    """Defer importing :data:`SLOW_MODULE` until it is used; True when the stand-in was installed (False: the
    package is not installed, or already imported)."""
    if SLOW_MODULE in sys.modules:
        return False
    try:
        if importlib.util.find_spec(SLOW_MODULE) is None:
            return False
    except (ImportError, ValueError):
        return False
    sys.modules[SLOW_MODULE] = _stand_in(SLOW_MODULE)
    return True
