"""Dump a TensorFlow 2 run: the :class:`Dumper` and the ``with nbprec.tf.dump(path, step=N):`` block."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from nbprec._optional import require
from nbprec.capture.select import StepSpec, parse_steps
from nbprec.errors import CaptureError
from nbprec.tf.writer import DumpWriter


def load_tensorflow(purpose: str = "dumping a TensorFlow run") -> Any:
    """Import tensorflow, or raise :class:`~nbprec.errors.MissingDependencyError` naming ``nbprec[tf]``."""
    return require("tensorflow", purpose, extra="tf")


def default_dump_path() -> Path:
    """The running script's folder (tfdbg_ascend's default); the working folder in a notebook or REPL."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    return Path(script).resolve().parent if script else Path.cwd()


class Dumper:
    """Dumps every op output of selected steps of a TensorFlow 2 run as ``{op}.{slot}.{timestamp}.npy``.

    Use it as a context manager (or :meth:`start`/:meth:`stop`); make it with :func:`dump`. While it runs,
    every op executed in this thread is seen: eager ops when they run, ``tf.function`` ops through debug
    nodes added when the function is traced (so start dumping **before** a function's first call; a function
    traced earlier is reported, not dumped). Tensors are written only while the current step is selected.

    Parameters
    ----------
    path
        The dump folder; None: the running script's folder.
    steps
        Steps to write: ``"0|5|10"``, ``"0|3-5|10"``, an int, a list, or None for every step.
    step
        The number of the step the block starts in (None: the run has no steps).
    if_exists : {"fail", "append", "replace"}
        When the folder already holds dump files: raise, add to them, or delete them first (only
        ``{op}.{slot}.{timestamp}.npy`` files and the index).

    Attributes
    ----------
    path : pathlib.Path
        The dump folder.
    armed : bool
        Whether tensors are being written right now.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        steps: StepSpec = None,
        step: int | None = 0,
        if_exists: str = "fail",
        _is_global: bool = False,
    ) -> None:
        self._tf = load_tensorflow()
        self.path = Path(path) if path is not None else default_dump_path()
        self._selection = parse_steps(steps)
        self._step = None if step is None else int(step)
        self._if_exists = if_exists
        self.is_global = _is_global
        self.armed = False
        self._enabled = True
        self._writer: DumpWriter | None = None
        self._old_writers: list[DumpWriter] = []
        self._pending: list[tuple[str, str, str, str]] = []  # found while tracing, before a folder was open
        self._lock = threading.Lock()
        self._hook: Any = None
        self._thread: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> Dumper:
        """Install the op callback in this thread, open the folder and arm for the current step."""
        if self._hook is not None:
            raise CaptureError(f"{self.path}: this dump is already running")
        if self._writer is not None and self._writer.closed:
            raise CaptureError(f"{self.path}: this dump has finished; make a new one (if_exists='append' adds to it)")
        from tensorflow.python.framework import op_callbacks

        from nbprec.tf.hook import OpDumpHook

        if self._enabled and not self.is_global:
            self._open_writer()  # fails now if the folder holds an earlier dump (if_exists="fail")
        self._hook = OpDumpHook(self._tf, self)
        op_callbacks.add_op_callback(self._hook)
        self._thread = threading.get_ident()
        self._begin(self._step)
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """Disarm, remove the op callback and close the index (idempotent; call it in the starting thread).

        ``error``, the exception that ended the run, is recorded in the index.

        Functions traced while dumping keep their debug nodes, which do nothing once stopped; make new ones
        (for Keras: ``model.make_train_function(force=True)``) to drop them.
        """
        self._end()
        if self._hook is not None:
            if threading.get_ident() != self._thread:
                raise CaptureError(
                    f"{self.path}: stop the dump in the thread that started it (TF op callbacks are per thread)"
                )
            from tensorflow.python.framework import op_callbacks

            hook, self._hook = self._hook, None
            with contextlib.suppress(KeyError):  # already removed by other code (clear_op_callbacks)
                op_callbacks.remove_op_callback(hook)
        if self._writer is not None:
            self._writer.close(error)

    def __enter__(self) -> Dumper:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(exc)

    # -- steps -----------------------------------------------------------------------------------------
    def step(self, step: int | None = None) -> int:
        """End the current step and start the next one (or ``step``); returns its number.

        Tensors are written only in selected steps (``steps=``).
        """
        if step is None:
            if self._step is None:
                raise CaptureError("this dump has no step numbers (step=None); pass the step: dumper.step(5)")
            step = self._step + 1
        new = int(step)
        self._end()
        self._step = new
        self._begin(new)
        return new

    def pause(self) -> None:
        """Stop writing until the next :meth:`step` (e.g. between training batches)."""
        self._end()

    @property
    def current_step(self) -> int | None:
        """The step being dumped (None when the run has no steps)."""
        return self._step

    def selected(self, step: int | None) -> bool:
        """Whether tensors of ``step`` are written."""
        return self._selection is None or step in self._selection

    @property
    def last_step(self) -> int | None:
        """The last selected step (None: every step is selected)."""
        return max(self._selection) if self._selection else None

    def _begin(self, step: int | None) -> None:
        if self._hook is None or not self._enabled or not self.selected(step):
            return
        if self._writer is not None or not self.is_global:  # the switch's folder is made at its first file
            self._open_writer().begin_step(step)
        self.armed = True

    def _end(self) -> None:
        if self.armed:
            self.armed = False
            if self._writer is not None:
                self._writer.end_step()

    # -- the global on/off switch (nbprec.tf.enable / disable / set_dump_path) ---------------------------
    def set_enabled(self, enabled: bool) -> None:
        """Switch writing on or off; the op callback stays installed, so functions traced meanwhile are
        instrumented and dump once writing is on again."""
        self._enabled = bool(enabled)
        if enabled:
            if not self.armed:
                self._begin(self._step)
        else:
            self._end()

    def set_path(self, path: str | os.PathLike[str]) -> None:
        """Write into ``path`` from now on (the files written so far stay where they are)."""
        path = Path(path)
        if path == self.path:
            return
        armed = self.armed
        self._end()
        if self._writer is not None:
            self._writer.close()
            self._old_writers.append(self._writer)
            self._writer = None
        self.path = path
        if armed:
            self._begin(self._step)

    # -- what the op callback calls --------------------------------------------------------------------
    def _armed_writer(self) -> DumpWriter | None:
        """The writer while armed, opened at the first tensor for the switch (enable/disable)."""
        if not self.armed:
            return None
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._open_writer().begin_step(self._step)
        return self._writer

    def _open_writer(self) -> DumpWriter:
        if self._writer is None:
            meta = {
                "tensorflow": self._tf.__version__,
                "steps": None if self._selection is None else sorted(self._selection),
                "script": getattr(sys.modules.get("__main__"), "__file__", None),
            }
            self._writer = DumpWriter(self.path, if_exists=self._if_exists, meta=meta)
            for pending in self._pending:
                self._writer.skip(*pending, traced=True)
            self._pending = []
        return self._writer

    def write_op(
        self,
        owner: object,
        op_name: str,
        op_type: str,
        graph: str,
        outputs: Sequence[tuple[int, Any]],
        tf_name: str | None = None,
    ) -> None:
        """Write the outputs ``(slot, tensor)`` of one op run (called by the op callback); ``op_name`` names
        the files, ``tf_name`` (default ``op_name``) is the op's name in TensorFlow."""
        from nbprec.tf.hook import dtype_problem, to_numpy

        writer = self._armed_writer()
        if writer is None:
            return
        arrays = []
        for slot, tensor in outputs:
            problem = dtype_problem(tensor.dtype)
            if problem is None:
                try:
                    arrays.append((slot, to_numpy(tensor), tensor.dtype.name))
                    continue
                except Exception as exc:  # a tensor TF cannot hand over (e.g. on a lost device)
                    problem = f"could not be copied to the host: {exc!r}"
            writer.skip(f"{tf_name or op_name}:{slot}", op_type, graph, problem)
        writer.write_op(owner, op_name, op_type, graph, arrays, tf_name)

    def skip(self, tensor: str, op_type: str, graph: str, reason: str, *, traced: bool = False) -> None:
        """Record something that could not be dumped (called by the op callback)."""
        if self._writer is None and traced:
            self._pending.append((tensor, op_type, graph, reason))
            return
        writer = self._writer if traced else self._armed_writer()
        if writer is not None:
            writer.skip(tensor, op_type, graph, reason, traced=traced)

    # -- results ---------------------------------------------------------------------------------------
    @property
    def files(self) -> int:
        """``.npy`` files written so far."""
        return sum(w.files for w in [*self._old_writers, *([self._writer] if self._writer else [])])

    @property
    def skipped(self) -> Any:
        """What could not be dumped and why: a DataFrame (``tensor``, ``op_type``, ``graph``, ``reason``,
        ``step``, ``count``)."""
        import pandas as pd

        rows = [e for w in [*self._old_writers, *([self._writer] if self._writer else [])] for e in w.skipped]
        return pd.DataFrame(rows, columns=["tensor", "op_type", "graph", "reason", "step", "count"])

    def report(self, examples: int = 3) -> str:
        """A short text: files written, and what could not be dumped grouped by reason."""
        skipped = self.skipped
        lines = [f"nbprec.tf dump in {self.path}: {self.files} files"]
        if skipped.empty:
            lines.append("everything seen was dumped")
        for reason, group in skipped.groupby("reason", sort=False):
            names = ", ".join(group["tensor"].head(examples))
            more = f", ... ({len(group)} in all)" if len(group) > examples else ""
            lines.append(f"not dumped: {reason}: {names}{more}")
        return "\n".join(lines)

    def open(self, **options: Any) -> Any:
        """Open the dump written so far with :func:`nbprec.open` (``occurrence=`` chooses among steps)."""
        from nbprec.formats import open_dump

        return open_dump(self.path, **options)

    def __repr__(self) -> str:
        state = "armed" if self.armed else ("installed" if self._hook is not None else "stopped")
        return f"<nbprec.tf.Dumper {str(self.path)!r} step={self._step} files={self.files} {state}>"


def dump(
    path: str | os.PathLike[str] | None = None,
    *,
    step: int | None = 0,
    steps: StepSpec = None,
    if_exists: str = "fail",
) -> Dumper:
    """Dump every op output run inside a ``with`` block (eager ops and ``tf.function`` graphs).

    Parameters
    ----------
    path
        The dump folder (None: the running script's folder).
    step
        The number of the step the block starts in; :meth:`Dumper.step` moves to the next one.
    steps
        Steps to write (``"0|3-5|10"``); None writes every step run inside the block.
    if_exists : {"fail", "append", "replace"}
        When the folder already holds dump files: raise, add to them, or delete them first.

    Returns
    -------
    Dumper
        Use it in a ``with`` statement.

    Examples
    --------
    One step of an eager custom loop:

    >>> with nbprec.tf.dump("tf_dump", step=5):  # doctest: +SKIP
    ...     train_step(x, y)

    A ``tf.function`` loop: start dumping before the function's first call, choose the steps:

    >>> with nbprec.tf.dump("tf_dump", steps="5") as dumper:  # doctest: +SKIP
    ...     for step, (x, y) in enumerate(dataset):
    ...         dumper.step(step)
    ...         train_step(x, y)
    """
    return Dumper(path, steps=steps, step=step, if_exists=if_exists)


__all__ = ["Dumper", "default_dump_path", "dump", "load_tensorflow"]
