"""``nbprec.tf.DumpCallback``: dump chosen training steps of a Keras 3 ``model.fit``.

This module imports keras (and tensorflow); ``nbprec.tf`` imports it only when ``DumpCallback`` is asked for.
"""

from __future__ import annotations

import os
from typing import Any

from nbprec.capture.select import StepSpec, parse_steps
from nbprec.errors import CaptureError
from nbprec.tf.api import Dumper, load_tensorflow

load_tensorflow("dumping a Keras run")
import keras  # noqa: E402 - after the check that names the extra to install

_FUNCTIONS = ("train_function", "test_function", "predict_function")


class DumpCallback(keras.callbacks.Callback):
    """A Keras callback that dumps every op output of chosen training steps (batches) of ``model.fit``.

    Steps count the training batches this callback has seen, from 0, across epochs (and across ``fit``
    calls with the same callback). During ``fit`` the callback installs nbprec's op callback, turns XLA off
    (``model.jit_compile = False``: XLA-compiled ops cannot be read one by one) and makes Keras trace a new
    train function, so its ops are instrumented; after the last chosen step (or at the end of ``fit``) it
    removes the instrumentation, restores ``jit_compile`` and lets Keras trace a clean function.

    Parameters
    ----------
    path
        The dump folder.
    steps
        Steps to dump: ``0``, ``"0|5|10"``, ``"0|3-5|10"`` or a list; None dumps every step (large!).
    if_exists : {"fail", "append", "replace"}
        When the folder already holds dump files: raise, add to them, or delete them first.

    Attributes
    ----------
    dumper : nbprec.tf.Dumper or None
        The dumper of the current or last ``fit`` (``report()``, ``skipped``, ``open()``).

    Examples
    --------
    >>> model.fit(x, y, batch_size=32, callbacks=[nbprec.tf.DumpCallback("tf_dump", steps="5")])  # doctest: +SKIP
    >>> nbprec.open("tf_dump")  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], steps: StepSpec = None, *, if_exists: str = "fail") -> None:
        super().__init__()
        self.path = path
        self.steps = parse_steps(steps)  # validated now, not at the first batch
        self._if_exists = if_exists
        self.dumper: Dumper | None = None
        self._running: Dumper | None = None
        self._global_step = 0
        self._saved: dict[str, Any] = {}

    # -- fit -------------------------------------------------------------------------------------------
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Install the dumper and make Keras trace an instrumented train function."""
        self.close()
        model = self.model
        if keras.backend.backend() != "tensorflow":
            raise CaptureError(f"DumpCallback dumps TensorFlow runs; Keras runs on {keras.backend.backend()!r}")
        per_call = int(getattr(model, "steps_per_execution", 1) or 1)
        if per_call != 1:
            raise CaptureError(
                f"the model runs {per_call} steps per call (steps_per_execution={per_call}); Keras reports them as "
                "one batch, so single steps cannot be chosen: compile with steps_per_execution=1 to dump"
            )
        if self.steps is not None and self._global_step > max(self.steps):
            return  # every chosen step is behind us
        if_exists = self._if_exists if self.dumper is None else "append"  # a second fit adds to the same dump
        dumper = Dumper(self.path, steps=self.steps, step=self._global_step, if_exists=if_exists).start()
        dumper.pause()
        self.dumper = self._running = dumper
        self._saved = {"jit_compile": getattr(model, "jit_compile", False)}
        self._saved.update({name: getattr(model, name, None) for name in _FUNCTIONS})
        try:
            if self._saved["jit_compile"]:
                model.jit_compile = False
            model.make_train_function(force=True)  # traced at its first call, under the op callback
        except BaseException:
            self.close()
            raise

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Arm the dumper if this step is chosen."""
        if self._running is not None:
            self._running.step(self._global_step)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Disarm; after the last chosen step, remove the instrumentation."""
        running = self._running
        self._global_step += 1
        if running is None:
            return
        running.pause()
        if self.steps is not None and self._global_step > max(self.steps):
            self.close()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Remove the instrumentation (also after an early stop)."""
        self.close()

    def close(self) -> None:
        """Stop dumping now and restore the model (``fit`` does this; call it after ``fit`` raised)."""
        running, self._running = self._running, None
        if running is None:
            return
        running.stop()
        model = self.model
        if model is not None and self._saved:
            model.jit_compile = self._saved["jit_compile"]
            model.make_train_function(force=True)  # a clean one, traced at its next call (fit may go on)
            for name in _FUNCTIONS[1:]:
                if getattr(model, name, None) is not self._saved.get(name):
                    setattr(model, name, None)  # traced during the dump (validation): instrumented too
        self._saved = {}

    def report(self) -> str:
        """What was dumped and what could not be (see :meth:`nbprec.tf.Dumper.report`)."""
        return self.dumper.report() if self.dumper is not None else f"nbprec.tf dump in {self.path}: not started"

    @property
    def skipped(self) -> Any:
        """What could not be dumped and why (a DataFrame; see :attr:`nbprec.tf.Dumper.skipped`)."""
        if self.dumper is None:
            raise CaptureError(f"{self.path}: the dump has not started (fit has not run with this callback)")
        return self.dumper.skipped


__all__ = ["DumpCallback"]
