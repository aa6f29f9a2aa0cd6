"""Reader for CANN NPU dump files (Ascend): one binary file per op, header + payloads (FORMATS.md section 2).

A file ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` (``stream_id`` absent in old versions, up to
four more numbers in new ones) holds a little-endian ``uint64`` header length, a ``toolkit.dumpdata.DumpData``
protobuf header (read with nbprec's own schema, :mod:`nbprec.formats._dumpdata`), and the payloads of every
input, output, buffer and workspace, in that order. The tree CANN writes is
``dump/{time}/{device}/{model_name}/{model_id}/{step}/<files>``; any level of it, a flat folder of dump files,
or one file can be opened. The index rows are read without numpy (:mod:`nbprec.formats.cann_index`: the walk, the
headers, the layout plans); this module makes the dump of them and reads payloads.

Index conventions
-----------------
- ``op`` is the op's name from the header (``bert/encoder/layer_0/attention/self/MatMul``; the file name's
  sanitised one when the header has none); ``op_type`` the file name's first field; ``module`` the op's
  ``/`` scope. Tensor names are ``{op}:{input|output}:{index}``, msaccucmp's ``TensorIndex``.
- ``step`` and ``rank`` come from the ``{step}`` and ``{device}`` folders (-1 outside that tree); ``order`` is
  the execution order within a step and device, from the file names' timestamps (then the task id).
- ``shape`` is the tensor's shape *in its original layout* (``original_shape``, or the stored shape when the
  header gives none), and :meth:`Dump.tensor` returns the payload converted from its storage format
  (NC1HWC0, FRACTAL_NZ, FRACTAL_Z, ...) to that layout with the padding sliced off
  (:mod:`nbprec.formats.storage`). ``layout="storage"`` when opening keeps the stored layout instead.
- Columns of this format after the common ones: ``storage_format``, ``storage_shape``, ``origin_format``
  (the layout ``shape`` is in; ``""`` when unknown), ``origin_name`` / ``origin_index`` (the framework tensor an
  output equals, from the header's ``original_op``; ``""`` / -1 when absent), ``task_id``, ``stream_id``,
  ``timestamp``, ``model``, ``offset`` and ``nbytes`` (where the payload lies in ``file``).
- Overflow debug files (``Opdebug.Node_OpDebug.*``) are not tensors: they are listed in
  ``dump.meta["opdebug"]`` for :mod:`nbprec.overflow.npu`. GE graphs found in the tree
  (``ge_proto_*_Build.txt``) are listed in ``dump.meta["ge_graphs"]``.

Examples
--------
>>> dump = nbprec.open("dump/20240101120000/0/ge_default/1/0")   # doctest: +SKIP
>>> dump.index[["op", "role", "slot", "dtype", "shape", "storage_format"]]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nbprec.columns import Columns
from nbprec.dtypes import dtype_of
from nbprec.dump import Dump
from nbprec.dump_index import list_columns
from nbprec.errors import DumpFormatError
from nbprec.formats._payload import payload_array
from nbprec.formats.base import DumpReader
from nbprec.formats.cann_index import (
    LAYOUTS,
    MAX_HEADER,
    OCCURRENCES,
    CannHeader,
    GraphHints,
    index_rows,
    looks_like_dump,
    read_header,
    shipped_rows,
)

_EXTRA_COLUMNS = (
    "storage_format",
    "storage_shape",
    "origin_format",
    "origin_name",
    "origin_index",
    "task_id",
    "stream_id",
    "timestamp",
    "model",
    "offset",
    "nbytes",
)


def load_tensor(row: Mapping[str, Any]) -> np.ndarray:
    """The payload of an index row of a CANN dump, converted to the row's layout (see the module docstring)."""
    from nbprec.formats.cann_layout import to_row_layout

    file = str(row["file"])
    dtype = dtype_of(row["dtype"])  # (ml_dtypes imported for its own dtypes only)
    nbytes = int(row["nbytes"])
    count = nbytes // dtype.itemsize
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpFormatError(file, "not a regular file (a device, FIFO or socket): not read", row["name"])
        flat = payload_array(fd, file, dtype, int(row["offset"]), count, info.st_size)
    finally:
        os.close(fd)
    return to_row_layout(flat, row)


class CannDumpReader(DumpReader):
    """Reads CANN NPU dump files: a dump tree, any folder of it, or one file.

    Options of :meth:`open`:

    - ``step``: an int or a list of ints (the ``{step}`` folders to read; default all);
    - ``occurrence``: ``"last"`` (default, as the Ascend tools), ``"first"`` or ``"all"`` when one op was
      dumped several times in one step and device (``"all"`` names the later ones ``op#1``, ``op#2``, ...);
    - ``graph``: a GE graph (path or :class:`nbprec.graph.ge.GeModel`) whose ``origin_format`` /
      ``origin_shape`` records say each tensor's original layout (the dump's own records are used otherwise);
    - ``layout``: ``"origin"`` (default: convert storage formats back) or ``"storage"``;
    - ``run``: the run's name.
    """

    name: ClassVar[str] = "cann"
    description: ClassVar[str] = "CANN NPU dump: {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp} binary files"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """A dump file, or a folder with one within six levels, whose name and first bytes look right."""
        return looks_like_dump(Path(path))

    def open(
        self,
        path: Path,
        *,
        step: int | Sequence[int] | None = None,
        occurrence: str = "last",
        graph: Any = None,
        layout: str = "origin",
        run: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Dump:
        """Index the dump at ``path`` from file names and headers (payloads are read on demand)."""
        if occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {', '.join(OCCURRENCES)}, not {occurrence!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'origin' or 'storage', not {layout!r}")
        path = Path(path)
        steps = None if step is None else {int(step)} if isinstance(step, (int, np.integer)) else {int(s) for s in step}
        rows = shipped_rows(path, steps, occurrence, layout, graph) if progress is None else None
        if rows is None:
            hints = GraphHints(graph) if graph is not None else None
            rows = index_rows(path, steps=steps, occurrence=occurrence, hints=hints, layout=layout, progress=progress)
        index = _build_index(rows.columns, run or _run_name(path))
        meta = {
            "task": "tensor",
            "framework": "cann",
            "occurrence": occurrence,
            "layout": layout,
            "models": rows.models,
            "opdebug": rows.opdebug,
            "ge_graphs": rows.graphs,
        }
        problems = rows.problems
        return Dump(index, path=path, format=self.name, loader=load_tensor, problems=problems, meta=meta)


def _build_index(columns: dict[str, list], run: str) -> Columns:
    """The dump index: common columns from :func:`list_columns`, then this format's own, and the order."""
    index = list_columns(columns, len(columns["name"]), run=run)  # takes the common columns
    for name in _EXTRA_COLUMNS:
        values = columns[name]
        if name in _INT_EXTRAS:
            index[name] = np.array(values, dtype=np.int64)
        else:  # text, and storage shapes as tuples
            index[name] = _objects([tuple(v) for v in values] if name == "storage_shape" else values)
    # execution order within each step and device: by timestamp, then task id (ops are the files), then the
    # order their files were read
    first: dict[tuple, tuple] = {}  # (step, rank, op) -> what sorts it
    keys = list(zip(index["step"].tolist(), index["rank"].tolist(), index["op"].tolist(), strict=True))
    for key, timestamp, task in zip(keys, columns.get("timestamp", ()), columns.get("task_id", ()), strict=True):
        if key not in first:
            first[key] = (key[0], key[1], timestamp, task, len(first))
    order: dict[tuple, int] = {}
    counts: dict[tuple, int] = {}
    for key, (step, rank, *_) in sorted(first.items(), key=lambda item: item[1]):
        order[key] = counts.get((step, rank), 0)
        counts[(step, rank)] = order[key] + 1
    index["order"] = np.array([order[k] for k in keys], dtype=np.int64)
    return index


_INT_EXTRAS = frozenset({"origin_index", "task_id", "stream_id", "timestamp", "offset", "nbytes"})


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _run_name(path: Path) -> str:
    """The run's name: the dump root's folder (above the numeric tree levels), else the folder's name."""
    folder = path if path.is_dir() else path.parent
    return folder.name or str(folder)


__all__ = ["LAYOUTS", "MAX_HEADER", "OCCURRENCES", "CannDumpReader", "CannHeader", "load_tensor", "read_header"]
