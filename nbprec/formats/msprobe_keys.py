"""msprobe's op keys (``Functional.linear.0.forward``, ``Module.enc.Linear.forward.0``): what a key says.

The keys of a ``dump.json``'s ``data`` name every op call: the API or module, the call index and the
direction. :func:`parse_op_key` splits one, and says None for a key that does not follow msprobe's naming.
"""

from __future__ import annotations

from typing import NamedTuple

_MODULE_PREFIXES = ("Module.", "Cell.")
_DIRECTIONS = ("forward", "backward")


class _OpKey(NamedTuple):
    """What an msprobe op key says: API/module, call index and direction."""

    api: str
    op_type: str
    call: int
    direction: str
    module: str | None  # module path for module calls, None for API calls
    grads: bool  # a ``parameters_grad`` entry


def parse_op_key(key: str) -> _OpKey | None:
    """Split an msprobe op key into its parts; ``None`` if it does not follow msprobe's naming.

    API calls are ``{api}.{call}.{direction}``; module calls ``Module.{path}.{Class}.{direction}.{call}``
    (``parameters_grad`` in place of the direction for parameter gradients; ``Cell`` for MindSpore).

    Examples
    --------
    >>> parse_op_key("Functional.linear.0.forward").api
    'Functional.linear'
    >>> parse_op_key("Module.enc.layers.0.linear1.Linear.forward.0").module
    'enc.layers.0.linear1'
    """
    head, dot, last = key.rpartition(".")
    if not dot:
        return None
    if last in _DIRECTIONS:  # an API call: api.call.direction
        api, dot, call = head.rpartition(".")
        if dot and _is_index(call):
            return _OpKey(api, api.partition(".")[2], int(call), last, None, False)
        return None
    if _is_index(last) and key.startswith(_MODULE_PREFIXES):  # Module.path.Class.direction.call
        rest, dot, kind = head.rpartition(".")
        if dot and (kind in _DIRECTIONS or kind == "parameters_grad"):
            prefix, dot, op_type = rest.rpartition(".")
            if dot:
                kind_of, _, module = prefix.partition(".")
                grads = kind == "parameters_grad"
                return _OpKey(f"{kind_of}.{op_type}", op_type, int(last), "backward" if grads else kind, module, grads)
    return None


def _is_index(text: str) -> bool:
    """Whether ``text`` is a call index: ASCII digits, few enough for an int64 (``"²"`` is a digit ``int``
    refuses, and 5000 digits would make ``int`` raise)."""
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()


def forward_name(op: str) -> str:
    """The forward call of an op name: ``Functional.linear.3.backward`` -> ``Functional.linear.3.forward``,
    ``Module.fc.Linear.backward.0`` -> ``Module.fc.Linear.forward.0``; any other name as it is."""
    head, sep, tail = op.rpartition(".backward")
    return f"{head}.forward{tail}" if sep and (not tail or tail.startswith(".")) else op


__all__ = ["forward_name", "parse_op_key"]
