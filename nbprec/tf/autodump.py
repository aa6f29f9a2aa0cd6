"""Importing this module switches TensorFlow dumping on, like ``import tfdbg_ascend``.

>>> import nbprec.tf.autodump as dbg  # doctest: +SKIP
>>> dbg.set_dump_path("/data/gpu_dump")  # doctest: +SKIP
>>> dbg.disable()  # doctest: +SKIP

On first import it calls :func:`nbprec.tf.enable` in the importing thread: every op run from then on is
dumped into the running script's folder until :func:`disable` (or into the folder given to
:func:`set_dump_path`). ``tf.function`` graphs are instrumented when traced, so import it before the first
training step. Python imports a module once: importing it again (a re-run notebook cell) changes nothing;
call :func:`enable` to switch dumping back on.
"""

from __future__ import annotations

from nbprec.tf.switch import current, disable, enable, is_enabled, set_dump_path, uninstall

enable()

__all__ = ["current", "disable", "enable", "is_enabled", "set_dump_path", "uninstall"]
