"""Module hooks: forward pre/post hooks on every submodule, removed by handle.

Modules are never replaced or wrapped, so code that checks ``type(submodule)`` or ``isinstance`` keeps
working. The hooks run with torch-function handling switched off, so the capture's own tensor arithmetic
(statistics, gradient edges) is never recorded as the model's. Each module's path, class name and ``api``
column are worked out once, when the hooks are installed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from nbprec.capture.recorder import ModuleInfo, Recorder


def _pre_hook(torch: Any, recorder: Recorder, info: ModuleInfo) -> Callable[..., None]:
    enter = recorder.module_enter
    disabled = torch._C.DisableTorchFunction
    caller = sys._getframe

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        with disabled():
            enter(info, args, kwargs, caller(1))

    return hook


def _post_hook(torch: Any, recorder: Recorder, path: str) -> Callable[..., None]:
    leave = recorder.module_exit
    disabled = torch._C.DisableTorchFunction

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        with disabled():
            leave(path, output)

    return hook


def install_module_hooks(torch: Any, model: Any, recorder: Recorder) -> list[Any]:
    """Register pre and post forward hooks on ``model`` and all its submodules; returns the handles.

    The post hook is registered with ``always_call=True`` so that the module stack stays right when a
    module raises.
    """
    handles: list[Any] = []
    try:
        for path, module in model.named_modules():
            info = ModuleInfo(path, type(module).__name__)
            handles.append(module.register_forward_pre_hook(_pre_hook(torch, recorder, info), with_kwargs=True))
            handles.append(
                module.register_forward_hook(_post_hook(torch, recorder, path), with_kwargs=True, always_call=True)
            )
    except BaseException:
        remove_hooks(handles)
        raise
    return handles


def remove_hooks(handles: list[Any]) -> None:
    """Remove hooks by handle (each at most once)."""
    while handles:
        handles.pop().remove()
