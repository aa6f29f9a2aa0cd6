"""The capture API: ``with nbprec.capture(model, "runs/fp16"):`` records every op of a PyTorch model."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from types import TracebackType
from typing import Any

from nbprec._gc import frozen_heap, rarer_collections
from nbprec._optional import require
from nbprec.capture.apis import make_api_mode
from nbprec.capture.hooks import install_module_hooks, remove_hooks
from nbprec.capture.overflow import OverflowCheck
from nbprec.capture.recorder import Recorder, RecorderOptions
from nbprec.capture.select import PatternSpec, Selection, StepSpec
from nbprec.capture.stacks import StackCollector
from nbprec.errors import CaptureError

LEVELS = ("modules", "apis", "both")
MODES = ("statistics", "tensor")


class Capture:
    """A capture of one PyTorch run into an nbprec dump folder; use it as a context manager.

    Create it with :func:`capture`. Inside the ``with`` block every selected module call and API call
    (forward and, through autograd hooks, backward) is written to the dump as it happens. On exit (also
    after an exception) the torch-function mode and every hook are removed and the dump is closed; a run
    that ended with an exception is marked unfinished but stays readable.

    Attributes
    ----------
    path : pathlib.Path
        The dump folder.
    overflows : list of str
        Ops found overflowing so far (overflow-check mode).
    """

    def __init__(
        self,
        model: Any,
        path: str | os.PathLike[str],
        *,
        level: str = "both",
        mode: str = "statistics",
        backward: bool = True,
        steps: StepSpec = None,
        include: PatternSpec = None,
        exclude: PatternSpec = None,
        modules: str | list[str] | None = None,
        step: int = 0,
        rank: int = 0,
        run: str | None = None,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
        stacks: bool = True,
        overflow_check: bool = False,
        overflow_nums: int = 1,
        links: bool = True,
    ) -> None:
        if level not in LEVELS:
            raise CaptureError(f"level must be one of {LEVELS}, not {level!r}")
        if mode not in MODES:
            raise CaptureError(f"mode must be one of {MODES}, not {mode!r}")
        if level != "apis" and model is None:
            raise CaptureError(f"level {level!r} needs a model (an nn.Module); pass level='apis' to capture without")
        self._torch = require("torch", "capturing a PyTorch run")
        if model is not None and not isinstance(model, self._torch.nn.Module):
            raise CaptureError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        self.path = Path(path)
        self._model = model
        self._selection = Selection.build(steps=steps, include=include, exclude=exclude, modules=modules)
        if model is not None and self._selection.modules:
            self._selection.check_modules(name for name, _ in model.named_modules())
        self._overflow = OverflowCheck(overflow_nums, str(self.path)) if overflow_check else None
        self._level = level
        self._mode = "tensor" if overflow_check else mode
        self._backward = backward
        self._step = int(step)
        self._rank = int(rank)
        self._run = run
        self._meta = dict(meta or {})
        self._overwrite = overwrite
        self._stacks = stacks
        self._links = bool(links)
        self._writer: Any = None
        self._recorder: Recorder | None = None
        self._mode_obj: Any = None
        self._handles: list[Any] = []
        self._gc = contextlib.ExitStack()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> Capture:
        """Open the dump and install the mode and hooks (``__enter__`` does this)."""
        if self._writer is not None:
            raise CaptureError(f"{self.path}: this capture is already running (or finished); make a new one")
        from nbprec.capture.writer import CaptureWriter

        torch = self._torch
        meta = {
            "task": "overflow_check" if self._overflow else self._mode,
            "level": self._level,
            "backward": self._backward,
            "model": type(self._model).__name__ if self._model is not None else "",
            **self._meta,
        }
        if self._overflow:
            meta["overflow_nums"] = self._overflow.limit
        self._writer = CaptureWriter(
            self.path, run=self._run, mode=self._mode, meta=meta, overwrite=self._overwrite, links=self._links
        )
        skip = [os.path.dirname(torch.__file__), os.path.dirname(__file__)]
        options = RecorderOptions(
            mode=self._mode,
            level=self._level,
            backward=self._backward,
            rank=self._rank,
            selection=self._selection,
            stacks=StackCollector.shared(skip) if self._stacks else None,
            overflow=self._overflow,
        )
        self._recorder = Recorder(torch, self._writer, options, self._step)
        self._gc.enter_context(frozen_heap())  # the program's objects out of the collections the capture causes
        self._gc.enter_context(rarer_collections())  # ... and fewer of those (it makes no garbage cycles)
        try:
            if self._model is not None:
                self._handles = install_module_hooks(torch, self._model, self._recorder)
            if self._level in ("apis", "both"):
                self._mode_obj = make_api_mode(torch, self._recorder)
                self._mode_obj.__enter__()
        except BaseException as exc:
            self.stop(exc)
            raise
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """Remove the mode and hooks, report pending gradients and close the dump (``__exit__`` does this).

        Every clean-up step runs even if an earlier one fails; the dump is marked unfinished when ``error``
        is given.
        """
        first: BaseException | None = None
        if self._mode_obj is not None:
            mode, self._mode_obj = self._mode_obj, None
            try:
                mode.__exit__(None, None, None)
            except BaseException as exc:  # the mode stack was disturbed by other code
                first = first or exc
        remove_hooks(self._handles)
        if self._recorder is not None:
            self._recorder.module_stack.clear()  # left by an error: drop its frames (they hold locals)
            try:
                if error is None:
                    with self._torch._C.DisableTorchFunction():
                        self._recorder.watches.flush()
                else:
                    self._recorder.watches.discard()
            except BaseException as exc:
                first = first or exc
                self._recorder.watches.discard()
        if self._writer is not None:
            try:
                self._writer.close(error=error or first)
            except BaseException as exc:
                first = first or exc
        self._gc.close()
        if first is not None and error is None:
            raise first

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(exc)

    # -- during the run --------------------------------------------------------------------------------
    def step(self, step: int | None = None) -> int:
        """End the current step and start the next one (or ``step``); returns the new step number.

        Call counters and execution order restart, so names repeat per step as in msprobe's
        ``step{N}`` folders; only steps selected by ``steps=`` are recorded.
        """
        new = self._step + 1 if step is None else int(step)
        self._step = new
        if self._recorder is not None:
            with self._torch._C.DisableTorchFunction():
                self._recorder.set_step(new)
        return new

    @property
    def current_step(self) -> int:
        """The step being captured."""
        return self._step

    @property
    def overflows(self) -> list[str]:
        """Overflowing ops found so far (overflow-check mode)."""
        return list(self._overflow.found) if self._overflow else []

    def open(self) -> Any:
        """Open the dump written so far with :func:`nbprec.open`."""
        from nbprec.formats import open_dump

        return open_dump(self.path)

    def __repr__(self) -> str:
        state = "running" if self._mode_obj is not None or self._handles else "idle"
        return f"<nbprec.Capture {str(self.path)!r} level={self._level} mode={self._mode} step={self._step} {state}>"


def capture(model: Any, path: str | os.PathLike[str], **options: Any) -> Capture:
    """Capture a PyTorch run into an nbprec dump folder.

    Parameters
    ----------
    model
        The ``torch.nn.Module`` whose module calls are recorded (None with ``level="apis"``).
    path
        The dump folder; it must not exist or be empty unless ``overwrite=True``.
    level : {"both", "modules", "apis"}
        Record module calls, framework API calls (functional, tensor methods, ``torch.*``), or both.
    mode : {"statistics", "tensor"}
        Statistics only (min/max/mean/std/norm and NaN/inf/zero counts, in float64) or full tensors too.
    backward : bool
        Also record gradients (the backward of every recorded call), through autograd hooks.
    steps
        Steps to record: ``0``, ``"0|5|10"``, ``"0-4"`` or a list; None records every step.
    include, exclude
        Regular expressions on op names (``re.search``), e.g. ``include=r"linear|matmul"``.
    modules
        Module paths whose subtrees are recorded (``["encoder.layer.0"]``); API calls outside them are not.
    step
        Number of the first step; advance with :meth:`Capture.step`.
    rank, run, meta
        Recorded in the dump (device rank, run name, free-form JSON facts).
    overwrite
        Allow writing into an existing non-empty folder.
    stacks
        Record each op's user call stack (torch's and nbprec's frames left out).
    overflow_check, overflow_nums
        Overflow-check mode: record only ops whose outputs or gradients hold NaN/inf or hit the float16/
        bfloat16 maximum (full tensors), and raise :class:`~nbprec.errors.OverflowDetectedError` after
        ``overflow_nums`` of them (-1: never).
    links
        Tensor mode: a tensor recorded again with unchanged values (one op's output, the next op's input) has
        its values saved once, the later records' files being hard links of the first (where the file system
        has them). False gives every record a file of its own, for tools that change payload files in place.

    Returns
    -------
    Capture
        Use it in a ``with`` statement (or call ``start()``/``stop()``).

    Examples
    --------
    >>> with nbprec.capture(model, "runs/fp16", mode="statistics", steps="0|5") as cap:  # doctest: +SKIP
    ...     for batch in loader:
    ...         loss = model(batch).loss
    ...         loss.backward()
    ...         cap.step()
    """
    return Capture(model, path, **options)


def seed_all(seed: int = 1234, *, deterministic: bool = True) -> None:
    """Fix every random source a precision comparison depends on.

    Seeds Python's ``random``, numpy and torch (CPU and every accelerator), sets ``PYTHONHASHSEED`` (for
    child processes) and, with ``deterministic``, asks torch for deterministic algorithms
    (``torch.use_deterministic_algorithms(True, warn_only=True)``, cuDNN deterministic, no cuDNN benchmark,
    and ``CUBLAS_WORKSPACE_CONFIG``).

    Examples
    --------
    >>> seed_all(0)  # doctest: +SKIP
    """
    import numpy as np

    torch = require("torch", "seeding PyTorch")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeding the legacy global generator is the point
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        if hasattr(torch.backends, "cudnn"):
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
    else:
        torch.use_deterministic_algorithms(False)
