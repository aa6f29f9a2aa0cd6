"""tfdbg_ascend's on/off switch: ``enable()``, ``disable()``, ``set_dump_path(path)``.

One dumper per thread dumps everything that runs while it is enabled, into one folder (default: the running
script's folder), with no step numbers: tfdbg_ascend's model, where a script switches dumping on before the
step it wants and off after it. The dumper is not kept in a module variable: it *is* the op callback
installed in TensorFlow's (per-thread) context, and these functions find it there. So re-running a notebook
cell finds the same dumper instead of stacking a second one, and :func:`uninstall` leaves nothing behind.

``import nbprec.tf`` switches nothing on; ``import nbprec.tf.autodump`` (the drop-in for
``import tfdbg_ascend``) calls :func:`enable` once, when first imported.
"""

from __future__ import annotations

import os
from typing import Any

from nbprec.tf.api import Dumper, load_tensorflow


def current() -> Dumper | None:
    """The dumper :func:`enable` / :func:`set_dump_path` installed in this thread, or None."""
    load_tensorflow()
    from tensorflow.python.eager import context

    from nbprec.tf.hook import OpDumpHook

    for callback in context.context().op_callbacks:
        if isinstance(callback, OpDumpHook) and getattr(callback.sink, "is_global", False):
            sink: Any = callback.sink
            return sink
    return None


def _install(path: str | os.PathLike[str] | None, enabled: bool) -> Dumper:
    dumper = Dumper(path, steps=None, step=None, if_exists="append", _is_global=True)
    dumper.set_enabled(enabled)
    return dumper.start()


def enable(path: str | os.PathLike[str] | None = None) -> Dumper:
    """Dump every op run from now on in this thread (eager ops and ``tf.function`` graphs traced from now on).

    Parameters
    ----------
    path
        The dump folder; None keeps the one set before (:func:`set_dump_path`), at first the running
        script's folder. Files are added to the folder (tfdbg_ascend's behaviour).

    Returns
    -------
    Dumper
        The thread's dumper (for :meth:`~Dumper.report` and :meth:`~Dumper.open`).

    Examples
    --------
    >>> nbprec.tf.enable("gpu_dump")  # doctest: +SKIP
    >>> train_step(x, y)              # doctest: +SKIP
    >>> nbprec.tf.disable()           # doctest: +SKIP
    """
    dumper = current()
    if dumper is None:
        return _install(path, enabled=True)
    if path is not None:
        dumper.set_path(path)
    dumper.set_enabled(True)
    return dumper


def disable() -> None:
    """Stop writing tensors. Graphs traced while disabled are still instrumented, so :func:`enable` later
    dumps them too; :func:`uninstall` removes the dumper altogether."""
    dumper = current()
    if dumper is not None:
        dumper.set_enabled(False)


def set_dump_path(path: str | os.PathLike[str]) -> None:
    """Write into ``path`` from now on. Before :func:`enable`, this installs the dumper switched off, so
    functions traced from now on are instrumented."""
    dumper = current()
    if dumper is None:
        _install(path, enabled=False)
    else:
        dumper.set_path(path)


def is_enabled() -> bool:
    """Whether this thread's dumper is installed and writing."""
    dumper = current()
    return dumper is not None and dumper.armed


def uninstall() -> None:
    """Remove this thread's dumper (its op callback) and close its index."""
    dumper = current()
    if dumper is not None:
        dumper.stop()


__all__ = ["current", "disable", "enable", "is_enabled", "set_dump_path", "uninstall"]
