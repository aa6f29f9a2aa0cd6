"""Dump a TensorFlow 2 benchmark run the way Ascend's tools expect: ``{op_name}.{output_index}.{timestamp}.npy``.

A pure-Python replacement for tfdbg_ascend, built on TensorFlow's op callbacks (the mechanism of tfdbg2):
every op output of the chosen steps, in eager mode and inside ``tf.function`` graphs (Keras ``model.fit``),
written into one folder that :func:`nbprec.open` reads, with an index and a list of what could not be dumped.

>>> model.fit(x, y, callbacks=[nbprec.tf.DumpCallback("tf_dump", steps="5")])  # doctest: +SKIP
>>> with nbprec.tf.dump("tf_dump", step=5):  # doctest: +SKIP
...     train_step(x, y)
>>> nbprec.tf.enable("tf_dump"); train_step(x, y); nbprec.tf.disable()  # doctest: +SKIP

Importing this package imports neither tensorflow nor keras and switches nothing on; tensorflow is imported
by the first call that needs it (``pip install "nbprec[tf]"``). ``import nbprec.tf.autodump`` switches
dumping on at import, like ``import tfdbg_ascend``. See ``docs/tensorflow.md``.
"""

from __future__ import annotations

from typing import Any

from nbprec.capture.select import parse_steps
from nbprec.tf.api import Dumper, default_dump_path, dump
from nbprec.tf.naming import INDEX_FILE, dump_file_name, name_problem
from nbprec.tf.switch import current, disable, enable, is_enabled, set_dump_path, uninstall
from nbprec.tf.writer import read_index


def __getattr__(name: str) -> Any:
    if name == "DumpCallback":  # subclasses keras.callbacks.Callback: keras is imported on first use
        from nbprec.tf.keras_callback import DumpCallback

        return DumpCallback
    raise AttributeError(f"module 'nbprec.tf' has no attribute {name!r}")


__all__ = [
    "INDEX_FILE",
    "DumpCallback",  # resolved lazily by __getattr__
    "Dumper",
    "current",
    "default_dump_path",
    "disable",
    "dump",
    "dump_file_name",
    "enable",
    "is_enabled",
    "name_problem",
    "parse_steps",
    "read_index",
    "set_dump_path",
    "uninstall",
]
