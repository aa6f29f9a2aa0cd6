"""Keep named ops and modules in float32 while the rest of a PyTorch run stays in float16/bfloat16/autocast.

This file is self-contained (it imports only torch): nbprec uses it to re-run a target configuration with a
remedy, and :func:`nbprec.remedy.emit_fix` pastes its source into the snippet it writes, so the code a user
pastes is the code nbprec verified.

Ops are named as nbprec names them (``Functional.gelu.1.forward``: ``{Prefix}.{api}.{call}.forward``, the
call index counting earlier calls of the same API in the step, restarting at each ``with``); modules by
their path in the model (``"layers.1.ff1"``). Inside a ``with KeepFloat32(...)`` block:

- a kept op gets its float16/bfloat16 inputs as float32 and runs with autocast off;
- a kept module is converted to float32 once, gets float32 inputs and runs with autocast off;
- what a kept op or module returns stays float32 until an op that is not kept uses it: that op gets it
  cast back to the dtype it would have had, so a value past float16's range survives from one kept op to
  the next (a scale-up and the normalisation after it) and the rest of the model keeps its dtype. Ops that
  only move or select values (views, ``cat``, indexing) pass float32 through; an explicit cast
  (``.float()``, ``.to(...)``) ends it. Under autocast (``autocast=True``) autocast itself does these casts.
"""

import weakref
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import torch

_LOW = (torch.float16, torch.bfloat16)
_TENSOR_CLASSES = ("TensorBase", "Tensor", "_TensorBase")
_FUNCTIONAL = ("torch.nn.functional", "torch._C._nn")
#: Explicit casts: their result has the dtype the code asked for.
CASTS = frozenset({"float", "half", "bfloat16", "double", "to", "type", "type_as"})
#: Ops that move, select or copy values without computing new ones: float32 passes through them.
MOVES_VALUES = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "contiguous", "flatten", "unflatten",
        "squeeze", "unsqueeze", "detach", "clone", "t", "movedim", "swapaxes", "expand", "expand_as", "repeat",
        "index_select", "gather", "__getitem__", "cat", "concat", "concatenate", "stack", "split", "chunk",
        "unbind", "narrow", "select", "masked_fill", "where", "clamp", "clip", "max", "min", "amax", "amin",
        "maximum", "minimum", "roll", "flip", "tile", "repeat_interleave", "pad",
    }
)  # fmt: skip
_INPLACE_DUNDERS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__setitem__"}
)


def api_name(func: Any) -> Any:
    """nbprec's ``{Prefix}.{api}`` of a function seen by a torch-function mode (None: attribute access)."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name in ("__get__", "__set__", "__delete__"):
        return None
    owner = (getattr(func, "__qualname__", "") or "").rpartition(".")[0]
    objclass = getattr(func, "__objclass__", None)
    if owner in _TENSOR_CLASSES or (isinstance(objclass, type) and objclass.__name__ in _TENSOR_CLASSES):
        return f"Tensor.{name}"
    if (getattr(func, "__module__", None) or "").startswith(_FUNCTIONAL):
        return f"Functional.{name}"
    return f"Torch.{name}"


def is_inplace(name: str, kwargs: Any) -> bool:
    """Whether a call may change its first argument (``add_``, ``__iadd__``, ``out=``, ``inplace=True``)."""
    if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_DUNDERS:
        return True
    return bool(kwargs) and (kwargs.get("inplace") is True or kwargs.get("out") is not None)


def has_tensor(obj: Any, depth: int = 0) -> bool:
    """Whether ``obj`` holds a tensor (nested tuples, lists and dicts, as nbprec's capture looks)."""
    if isinstance(obj, torch.Tensor):
        return True
    if depth > 8:
        return False
    if isinstance(obj, (tuple, list)):
        return any(has_tensor(v, depth + 1) for v in obj)
    if isinstance(obj, Mapping):
        return any(has_tensor(v, depth + 1) for v in obj.values())
    return False


def _walk(fn: Any, obj: Any, depth: int = 0) -> None:
    """Call ``fn`` on every tensor in ``obj`` (tuples, lists and any mapping, e.g. a model output)."""
    if isinstance(obj, torch.Tensor):
        fn(obj)
    elif depth <= 8 and isinstance(obj, (tuple, list)):
        for v in obj:
            _walk(fn, v, depth + 1)
    elif depth <= 8 and isinstance(obj, Mapping):
        for v in obj.values():
            _walk(fn, v, depth + 1)


def _tree(fn: Any, obj: Any, depth: int = 0) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it (tuples, lists and dicts rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if depth > 8:
        return obj
    if isinstance(obj, (tuple, list)):
        items = [_tree(fn, v, depth + 1) for v in obj]
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict) and type(obj) is dict:
        return {k: _tree(fn, v, depth + 1) for k, v in obj.items()}
    return obj


class KeepFloat32(torch.overrides.TorchFunctionMode):
    """Run the named ops and modules of ``model`` in float32; use it as ``with KeepFloat32(...):`` each step.

    Parameters
    ----------
    model
        The model (needed for ``modules``; its kept modules are converted to float32 here, once).
    ops
        nbprec op names of API calls (``"Functional.gelu.1.forward"``; a ``.backward`` name means its forward).
    modules
        Module paths (``"layers.1.ff1"``).
    autocast
        The device type (``"cuda"``, ``"cpu"``, ``"npu"``) when the run uses ``torch.autocast``: kept ops
        and modules run with it disabled. ``None`` for a model cast to float16/bfloat16.

    Examples
    --------
    >>> keep = KeepFloat32(model, ops=["Functional.gelu.1.forward"], modules=["head"])  # doctest: +SKIP
    >>> with keep:                                                                      # doctest: +SKIP
    ...     loss = loss_fn(model(x), y)
    ...     loss.backward()
    """

    def __init__(self, model: Any = None, ops: Any = (), modules: Any = (), autocast: Any = None) -> None:
        super().__init__()
        self.ops = frozenset(str(o).replace(".backward", ".forward") for o in ops)
        self.autocast = autocast
        self._counts: dict[str, int] = {}
        self._apis: dict[Any, Any] = {}
        self._wide: dict[int, Any] = {}  # id -> (weakref, dtype it would have had): float32 made by kept code
        self._depth = 0
        self._exits: list[Any] = []
        self._handles: list[Any] = []
        self._modules: list[tuple[Any, Any]] = []
        for path in modules:
            module = model.get_submodule(path)
            params = [p for p in module.parameters() if p.is_floating_point()]
            low = next((p.dtype for p in params if p.dtype in _LOW), None)
            module.float()
            self._modules.append((module, low))

    # -- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> "KeepFloat32":
        self._counts.clear()
        self._wide.clear()
        self._depth = 0
        for module, low in self._modules:
            self._handles.append(module.register_forward_pre_hook(self._module_pre(low), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._module_post(low), always_call=True))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        while self._handles:
            self._handles.pop().remove()
        self._wide.clear()
        super().__exit__(*exc)

    # -- float32 tensors made by kept code -------------------------------------------------------------
    def _mark(self, t: Any, low: Any) -> None:
        if t.dtype == torch.float32 and low is not None:
            key, wide = id(t), self._wide

            def drop(ref: Any, key: int = key) -> None:
                if wide.get(key, (None,))[0] is ref:
                    del wide[key]

            wide[key] = (weakref.ref(t, drop), low)

    def _low_of(self, t: Any) -> Any:
        entry = self._wide.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _any_wide(self, args: Any, kwargs: Any) -> Any:
        found: list[Any] = []

        def look(t: Any) -> None:
            low = self._low_of(t)
            if low is not None and not found:
                found.append(low)

        _walk(look, (args, kwargs))
        return found[0] if found else None

    # -- calls ---------------------------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        try:
            api = self._apis[func]
        except KeyError:
            api = self._apis[func] = api_name(func)
        except TypeError:
            api = api_name(func)
        if api is None:
            return func(*args, **kwargs)
        n = self._counts.get(api, 0)
        out = self._call(f"{api}.{n}.forward", api.rpartition(".")[2], func, args, kwargs)
        if has_tensor(out):
            self._counts[api] = n + 1
        return out

    def _call(self, op: str, kind: str, func: Any, args: Any, kwargs: Any) -> Any:
        """Run one API call: in float32 if kept, with float32 inputs cast back if it is not."""
        if self._depth:  # inside a kept module: everything there runs in float32 already
            return func(*args, **kwargs)
        if op in self.ops and kind not in CASTS and kind not in MOVES_VALUES and kwargs.get("out") is None:
            return self._float32(func, args, kwargs, is_inplace(kind, kwargs))
        if not self._wide:
            return func(*args, **kwargs)
        low = self._any_wide(args, kwargs)
        if low is None:
            return func(*args, **kwargs)
        if kind in CASTS:  # the code asks for a dtype: the result is no longer ours to cast back
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and any(out is a for a in args):
                with torch._C.DisableTorchFunction():
                    out = out.view_as(out)
            return out
        if kind in MOVES_VALUES or (is_inplace(kind, kwargs) and args and self._low_of(args[0]) is not None):
            out = func(*args, **kwargs)
            _walk(lambda t: self._mark(t, low), out)
            return out

        def narrow(t: Any) -> Any:
            back = self._low_of(t)
            return t.to(back) if back is not None else t

        with torch._C.DisableTorchFunction():
            args, kwargs = _tree(narrow, args), _tree(narrow, kwargs)
        return func(*args, **kwargs)

    def _float32(self, func: Any, args: Any, kwargs: Any, inplace: bool) -> Any:
        lows: list[Any] = []

        def widen(t: Any) -> Any:
            if t.is_floating_point() and t.dtype in _LOW:
                lows.append(t.dtype)
                return t.float()
            low = self._low_of(t)
            if low is not None:
                lows.append(low)
            return t

        with torch._C.DisableTorchFunction():
            wide_args, wide_kwargs = _tree(widen, args), _tree(widen, kwargs)
        off = torch.autocast(self.autocast, enabled=False) if self.autocast else nullcontext()
        with off:
            out = func(*wide_args, **wide_kwargs)
        if inplace and args and isinstance(args[0], torch.Tensor) and wide_args[0] is not args[0]:
            with torch._C.DisableTorchFunction():
                args[0].copy_(wide_args[0])
            return args[0]
        if self.autocast or not lows or "dtype" in kwargs:
            return out
        if all(d == lows[0] for d in lows):
            _walk(lambda t: self._mark(t, lows[0]), out)
        return out

    # -- kept modules --------------------------------------------------------------------------------------
    def _module_pre(self, low: Any) -> Any:
        def hook(module: Any, args: Any, kwargs: Any) -> Any:
            lows: list[Any] = []

            def widen(t: Any) -> Any:
                if t.is_floating_point() and t.dtype in _LOW:
                    lows.append(t.dtype)
                    return t.float()
                return t

            with torch._C.DisableTorchFunction():
                args, kwargs = _tree(widen, args), _tree(widen, kwargs)
            off = torch.autocast(self.autocast, enabled=False) if self.autocast else nullcontext()
            off.__enter__()
            self._exits.append((off, low or (lows[0] if lows else None)))
            self._depth += 1
            return args, kwargs

        return hook

    def _module_post(self, low: Any) -> Any:
        def hook(module: Any, args: Any, output: Any) -> Any:
            if not self._exits:
                return None
            off, low = self._exits.pop()
            self._depth -= 1
            off.__exit__(None, None, None)
            if not (self._depth or self.autocast or low is None):
                _walk(lambda t: self._mark(t, low), output)
            return None

        return hook
