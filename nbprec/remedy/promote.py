"""nbprec's side of :class:`~nbprec.remedy._runtime.KeepFloat32`: the names a run called, and its cost profile.

:class:`Promoter` is the runtime a user pastes (``_runtime.KeepFloat32``) plus bookkeeping: which op names
the run called (so a remedy naming an op that never ran is refused, not silently ignored) and, for a
profiling run, each op's forward FLOPs (``torch.utils.flop_counter``; an elementwise op counts one FLOP per
output element), its time, its module path and the user's source line that called it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import AbstractContextManager
from typing import Any

import pandas as pd

from nbprec.remedy._runtime import KeepFloat32, has_tensor
from nbprec.remedy.kinds import promotable

_SETUP = os.path.join(os.path.dirname(__file__), "setup.py")
#: The source of the one op a run calls outside the user's forward: the loss times the loss scale.
LOSS_SCALING = "the loss scaling before backward: loss * scale (scaler.scale(loss) in a GradScaler step)"
PROFILE_COLUMNS = ("order", "op", "api", "op_type", "module", "flops", "seconds", "floating", "promotable", "source")


class Promoter(KeepFloat32):
    """:class:`KeepFloat32` that also records the ops it saw and, with ``profile``, their cost.

    Parameters
    ----------
    model, ops, modules, autocast
        As for :class:`KeepFloat32`.
    profile
        Record per op: forward FLOPs, seconds, module path, source line (slower; one run).
    """

    def __init__(self, model: Any, ops: Any = (), modules: Any = (), autocast: Any = None, profile: bool = False):
        super().__init__(model, ops=ops, modules=modules, autocast=autocast)
        self._model = model
        self._profile = profile
        self._seen: list[str] = []
        self._rows: list[dict[str, Any]] = []
        self._stack: list[str] = []
        self._tracking: list[Any] = []
        self._flops: Any = None
        here = os.path.dirname(__file__)
        capture = os.path.join(os.path.dirname(here), "capture")
        self._skip = (os.path.dirname(__import__("torch").__file__), here, capture)

    def __enter__(self) -> Promoter:
        self._seen.clear()
        self._rows.clear()
        if self._profile:
            for path, module in self._model.named_modules():
                self._tracking.append(module.register_forward_pre_hook(self._enter_module(path)))
                self._tracking.append(module.register_forward_hook(self._exit_module(path), always_call=True))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._tracking:
            self._tracking.pop().remove()
        super().__exit__(*exc)

    def _enter_module(self, path: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            self._stack.append(path)

        return hook

    def _exit_module(self, path: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if self._stack:
                self._stack.pop()

        return hook

    def flop_counter(self) -> AbstractContextManager[Any]:
        """A ``FlopCounterMode`` whose running total :meth:`_call` reads around each op (profiling runs)."""
        from torch.utils.flop_counter import FlopCounterMode

        self._flops = FlopCounterMode(display=False)
        return self._flops

    def _call(self, op: str, kind: str, func: Any, args: Any, kwargs: Any) -> Any:
        if not self._profile:
            out = super()._call(op, kind, func, args, kwargs)
            if has_tensor(out):
                self._seen.append(op)
            return out
        before = self._flops.get_total_flops() if self._flops is not None else 0
        start = time.perf_counter()
        out = super()._call(op, kind, func, args, kwargs)
        seconds = time.perf_counter() - start
        if not has_tensor(out):
            return out
        self._seen.append(op)
        flops = (self._flops.get_total_flops() if self._flops is not None else 0) - before
        floating = _has_floating((args, kwargs)) or _has_floating(out)
        if not flops and floating:
            flops = _numel(out)  # elementwise: one FLOP per output element
        self._rows.append(
            {
                "order": len(self._rows),
                "op": op,
                "api": op.rsplit(".", 2)[0],
                "op_type": kind,
                "module": self._stack[-1] if self._stack else None,
                "flops": int(flops),
                "seconds": seconds,
                "floating": floating,
                "promotable": floating and promotable(kind),
                "source": self._source(),
            }
        )
        return out

    def _source(self) -> str:
        """The innermost caller outside torch and nbprec: ``file:line in function: code``; for the loss scaling
        that :meth:`~nbprec.remedy.Setup.run` applies itself, :data:`LOSS_SCALING`. A function that overrides a
        torch op (it dispatches with ``handle_torch_function``, as a custom kernel posing as ``F.gelu`` does) is
        the op itself: its caller is the source."""
        import linecache

        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name == _SETUP:
                return LOSS_SCALING
            if not name.startswith(self._skip) and "<frozen" not in name:
                code = linecache.getline(name, frame.f_lineno).strip()
                if "handle_torch_function" not in code:
                    return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}: {code}"
            frame = frame.f_back
        return ""

    def seen(self) -> list[str]:
        """Op names the run called, in order."""
        return list(self._seen)

    def profile_frame(self) -> pd.DataFrame:
        """The profile (see :data:`PROFILE_COLUMNS`)."""
        return pd.DataFrame(self._rows, columns=list(PROFILE_COLUMNS))


def _has_floating(obj: Any) -> bool:
    from nbprec.remedy._runtime import _walk

    found: list[bool] = []
    _walk(lambda t: found.append(t.is_floating_point()), obj)
    return any(found)


def _numel(obj: Any) -> int:
    from nbprec.remedy._runtime import _walk

    total: list[int] = []
    _walk(lambda t: total.append(int(t.numel()) if t.is_floating_point() else 0), obj)
    return sum(total)
