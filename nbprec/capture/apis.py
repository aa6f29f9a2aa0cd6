"""API-level interception with a torch-function mode.

A :class:`torch.overrides.TorchFunctionMode` sees every call that goes through PyTorch's
``__torch_function__`` protocol: ``torch.nn.functional`` functions, tensor methods and operators, and
``torch.*`` functions, however they were imported (``from torch import relu`` included, which the
function-wrapping approach of msprobe/ptdbg misses). While the mode handles a call it is switched off, so
only the outermost API call is recorded (``F.layer_norm`` and not the ``torch.layer_norm`` inside it).
"""

from __future__ import annotations

from typing import Any

from nbprec.capture.recorder import Recorder


def make_api_mode(torch: Any, recorder: Recorder) -> Any:
    """A torch-function mode object that records every API call through ``recorder``.

    Enter it with ``mode.__enter__()`` and leave it with ``mode.__exit__(None, None, None)``.
    """

    class NbprecCaptureMode(torch.overrides.TorchFunctionMode):
        """Records API calls into an nbprec dump (one instance per capture)."""

        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            return recorder.api_call(func, args, kwargs)

    return NbprecCaptureMode()


def active_capture_modes(torch: Any) -> list[Any]:
    """The nbprec capture modes currently on the torch-function mode stack (for tests and sanity checks)."""
    from torch.overrides import _get_current_function_mode_stack

    return [m for m in _get_current_function_mode_stack() if type(m).__name__ == "NbprecCaptureMode"]
