"""Stable names for captured ops and tensors.

The rules (documented in ``docs/capture.md``) follow msprobe, so that a float32 and a float16 run of the same
model give the same names and can be matched by name:

- an API call is ``{Prefix}.{api}.{call}.{direction}``: ``Functional.linear.3.forward``. ``Prefix`` is
  ``Functional`` (``torch.nn.functional``), ``Tensor`` (tensor methods and operators) or ``Torch`` (every
  other ``torch.*`` function); ``call`` counts earlier calls of the same ``{Prefix}.{api}`` in the step;
  the backward of a call keeps the forward's call index (``Functional.linear.3.backward``);
- a module call is ``Module.{path}.{ClassName}.{direction}.{n}`` (``Module.layers.0.ff.Linear.forward.0``),
  ``n`` counting earlier calls of that module in the step; the root module's path is empty
  (``Module.TinyEncoder.forward.0``);
- a tensor is ``{op}.{role}.{slot}`` with role ``input`` or ``output``. In a backward op, ``input`` slots are
  the gradients arriving for the forward outputs and ``output`` slots the gradients the op produced for its
  forward inputs (msprobe's convention); slots keep the forward positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_FUNCTIONAL_MODULES = ("torch.nn.functional", "torch._C._nn")
_TENSOR_CLASSES = ("TensorBase", "Tensor", "_TensorBase")


def api_identity(func: Callable[..., Any]) -> tuple[str, str] | None:
    """``(prefix, api)`` of a function seen by the torch-function mode, or None for attribute access.

    Examples
    --------
    >>> import torch                                     # doctest: +SKIP
    >>> api_identity(torch.nn.functional.linear)          # doctest: +SKIP
    ('Functional', 'linear')
    >>> api_identity(torch.Tensor.add)                    # doctest: +SKIP
    ('Tensor', 'add')
    """
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name in ("__get__", "__set__", "__delete__"):
        return None
    qualname = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", None) or ""
    owner = qualname.rpartition(".")[0]
    objclass = getattr(func, "__objclass__", None)
    if owner in _TENSOR_CLASSES or (isinstance(objclass, type) and objclass.__name__ in _TENSOR_CLASSES):
        return "Tensor", name
    if module.startswith(_FUNCTIONAL_MODULES):
        return "Functional", name
    return "Torch", name


_INPLACE_DUNDERS = frozenset(
    f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift")
) | frozenset({"__irshift__", "__imatmul__", "__setitem__"})


def is_inplace(name: str, kwargs: dict[str, Any] | None) -> bool:
    """Whether an API call may change its inputs (``add_``, ``__iadd__``, ``inplace=True``, ``out=``)."""
    if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_DUNDERS:
        return True
    return kwargs is not None and bool(kwargs) and (kwargs.get("inplace") is True or kwargs.get("out") is not None)


#: function -> what :func:`recorded_identity` says of it: the same in every capture, so kept for the process.
_IDENTITIES: dict[Any, tuple[str, str, bool] | None] = {}
_MAX_IDENTITIES = 50_000  # functions made on the fly could grow the table: it is emptied past this


def recorded_identity(func: Callable[..., Any]) -> tuple[str, str, bool] | None:
    """``(api, op_type, in-place by name)`` of a function the torch-function mode saw, or None for calls that
    are not recorded (attribute access): :func:`api_identity`, worked out once per function in a process."""
    try:
        return _IDENTITIES[func]
    except KeyError:
        pass
    except TypeError:  # unhashable callable
        return _identity(func)
    info = _identity(func)
    if len(_IDENTITIES) >= _MAX_IDENTITIES:
        _IDENTITIES.clear()
    _IDENTITIES[func] = info
    return info


def _identity(func: Callable[..., Any]) -> tuple[str, str, bool] | None:
    ident = api_identity(func)
    return None if ident is None else (f"{ident[0]}.{ident[1]}", ident[1], is_inplace(ident[1], None))


def module_api(path: str, class_name: str) -> str:
    """The ``api`` column of a module call: ``Module.{path}.{ClassName}`` (``Module.{ClassName}`` at the root)."""
    return f"Module.{path}.{class_name}" if path else f"Module.{class_name}"


class OpName:
    """The identity of one captured op call (forward); :meth:`backward` gives its backward twin.

    One is made per recorded call: a slotted class, which the compiled capture makes without a Python call (a
    named tuple's ``__new__`` is Python code).

    Attributes
    ----------
    op
        Full op name, e.g. ``"Functional.linear.0.forward"``.
    op_type
        ``"linear"`` for an API, the class name for a module.
    api
        Name without call index and direction, e.g. ``"Functional.linear"``.
    call
        The call index.
    kind
        ``"api"`` or ``"module"``.
    module
        Module path the call belongs to (the module itself for a module call).
    direction
        ``"forward"`` or ``"backward"``.
    """

    __slots__ = ("api", "call", "direction", "kind", "module", "op", "op_type")

    def __init__(
        self, op: str, op_type: str, api: str, call: int, kind: str, module: str, direction: str = "forward"
    ) -> None:
        self.op = op
        self.op_type = op_type
        self.api = api
        self.call = call
        self.kind = kind
        self.module = module
        self.direction = direction

    def __repr__(self) -> str:
        return f"OpName({self.op!r}, module={self.module!r})"

    def backward(self) -> OpName:
        """The name of this call's backward."""
        return OpName(
            op_name(self.api, self.call, "backward", self.kind),
            self.op_type,
            self.api,
            self.call,
            self.kind,
            self.module,
            "backward",
        )

    def tensor(self, role: str, slot: str) -> str:
        """The name of one of this op's tensors."""
        return f"{self.op}.{role}.{slot}"


def op_name(api: str, call: int, direction: str, kind: str) -> str:
    """``{api}.{call}.{direction}`` for API calls, ``{api}.{direction}.{call}`` for module calls."""
    return f"{api}.{direction}.{call}" if kind == "module" else f"{api}.{call}.{direction}"


def parent_backward(parent: str | None) -> str | None:
    """The backward twin of a module call name (``...Linear.forward.0`` -> ``...Linear.backward.0``)."""
    if parent is None:
        return None
    head, sep, tail = parent.rpartition(".forward.")
    return f"{head}.backward.{tail}" if sep else parent
