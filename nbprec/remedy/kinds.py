"""Op kinds that keeping in float32 cannot change, read without importing torch.

The two sets are defined once, in :mod:`nbprec.remedy._runtime` (the file pasted into users' code, which imports
only torch); the core reads them from its source, so that it never imports torch to know them.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _runtime_sets(*names: str) -> list[frozenset[str]]:
    """The ``NAME = frozenset({...})`` literals of ``_runtime.py``, parsed, not imported."""
    tree = ast.parse(Path(__file__).with_name("_runtime.py").read_text(encoding="utf-8"))
    found: dict[str, frozenset[str]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in names and isinstance(node.value, ast.Call):
            found[target.id] = frozenset(ast.literal_eval(node.value.args[0]))
    return [found[name] for name in names]


#: Explicit casts (their result has the dtype the code asked for), and ops that move, select or copy values
#: without computing new ones (float32 passes through them).
CASTS, MOVES_VALUES = _runtime_sets("CASTS", "MOVES_VALUES")


def promotable(op_type: str) -> bool:
    """Whether keeping an op of this type in float32 can change anything (not a cast, view or copy).

    >>> promotable("gelu"), promotable("view"), promotable("float")
    (True, False, False)
    """
    return op_type not in CASTS and op_type not in MOVES_VALUES
