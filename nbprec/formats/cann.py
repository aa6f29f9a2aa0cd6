"""Reader for CANN NPU dump files (Ascend): one binary file per op, header + payloads (FORMATS.md section 2).

A file ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` (``stream_id`` absent in old versions, up to
four more numbers in new ones) holds a little-endian ``uint64`` header length, a ``toolkit.dumpdata.DumpData``
protobuf header (read with nbprec's own schema, :mod:`nbprec.formats._dumpdata`), and the payloads of every
input, output, buffer and workspace, in that order. The tree CANN writes is
``dump/{time}/{device}/{model_name}/{model_id}/{step}/<files>``; any level of it, a flat folder of dump files,
or one file can be opened.

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

import math
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nbprec.columns import Columns
from nbprec.dtypes import DTYPE_NAMES, ITEMSIZES, dtype_of
from nbprec.dump import Dump, Problem
from nbprec.dump_index import list_columns
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats._dumpdata import CANN_DTYPES, parse_header
from nbprec.formats._files import open_regular
from nbprec.formats._payload import payload_array
from nbprec.formats._probe import find_first_file
from nbprec.formats.base import DumpReader
from nbprec.formats.cann_layout import TensorLayout, plan_key, plan_layout
from nbprec.formats.cann_tree import DumpFile, safe_name, walk_dump_tree

#: Header length above which a file is refused: real headers are a few KiB (a malicious one could ask for GiBs).
MAX_HEADER = 64 << 20
#: Bytes read at once from the start of a file: the length and, nearly always, the whole header.
_HEAD_READ = 8192
OCCURRENCES = ("last", "first", "all")
LAYOUTS = ("origin", "storage")
_SCOPE = re.compile(r"^(.*)/[^/]*$")


@dataclass(frozen=True)
class CannHeader:
    """A parsed dump file: its header message, where the payloads start, and the file's size."""

    message: Any
    payload_start: int
    file_size: int


def read_header(path: str | Path) -> CannHeader:
    """Read and check the header of the dump file ``path`` (payloads are not read).

    Raises :class:`~nbprec.errors.DumpFormatError` naming the file when it is not a regular file, is too
    short, declares a header past its end, holds no valid ``DumpData`` message, or declares payloads that
    add up past its end (a truncated file).
    """
    file = str(path)
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DumpFormatError(file, f"cannot open the file: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpFormatError(file, "not a regular file (a device, FIFO or socket): not read")
        size = info.st_size
        head = os.pread(fd, _HEAD_READ, 0)
        if size <= 8 or len(head) < 8:
            raise DumpFormatError(file, f"too short for a CANN dump file ({size} bytes; the header length alone is 8)")
        header_len = int.from_bytes(head[:8], "little")
        if header_len > size - 8:
            raise DumpFormatError(
                file,
                f"header length {header_len} runs past the end of the file ({size} bytes): truncated or not a dump",
            )
        if header_len > MAX_HEADER:
            raise DumpFormatError(file, f"header length {header_len} is implausibly large (over {MAX_HEADER} bytes)")
        raw = head[8 : 8 + header_len]
        if len(raw) < header_len:
            raw += os.pread(fd, header_len - len(raw), 8 + len(raw))
    finally:
        os.close(fd)
    message = parse_header(raw, file)
    header = CannHeader(message, 8 + header_len, size)
    declared = sum(int(t.size) for group in (message.input, message.output, message.buffer) for t in group)
    if header.payload_start + declared > size:
        raise DumpFormatError(
            file,
            f"the header declares {declared} payload bytes after byte {header.payload_start}, but the file has "
            f"{size} bytes: the file was cut short",
        )
    return header


def _scope(name: str) -> str:
    m = _SCOPE.match(name)
    return m[1] if m else ""


#: The index columns the reader collects, one list each: the common ones, then this format's own.
_COLUMNS = (
    "name", "step", "rank", "op", "op_type", "module", "role", "slot", "dtype", "shape", "numel", "file", "has_data",
    "storage_format", "storage_shape", "origin_format", "origin_name", "origin_index", "task_id", "stream_id",
    "timestamp", "model", "offset", "nbytes",
)  # fmt: skip


def _add_tensors(
    found: DumpFile,
    header: CannHeader,
    layout: str,
    hints: _GraphHints | None,
    problems: list[Problem],
    plans: dict[tuple, TensorLayout],
    columns: dict[str, list],
) -> None:
    """The index values of one dump file's inputs and outputs, appended to ``columns`` (one list per name of
    :data:`_COLUMNS`: a dict per tensor would be transposed at the end, at a cost of its own). ``plans`` holds the
    layout plans made so far, by :func:`~nbprec.formats.cann_layout.plan_key`."""
    message = header.message
    op = message.op_name or (hints.real_name(found.op_name) if hints is not None else found.op_name)
    op += found.suffix
    offset = header.payload_start
    file, module = str(found.path), _scope(op)  # the same for every tensor of the file
    tensors = [("input", i, t) for i, t in enumerate(message.input)]
    tensors += [("output", i, t) for i, t in enumerate(message.output)]
    for role, slot, tensor in tensors:
        nbytes = int(tensor.size)
        start, offset = offset, offset + nbytes
        dtype = CANN_DTYPES.get(int(tensor.data_type), f"cann_dtype_{int(tensor.data_type)}")
        name = f"{op}:{role}:{slot}"
        origin = tensor.original_op if role == "output" else None
        hint = hints.layout(op, role, slot) if hints is not None else None
        key = plan_key(tensor, dtype, origin, hint, layout == "storage")
        plan: TensorLayout | None = plans.get(key)
        if plan is None:
            plan = plans[key] = plan_layout(tensor, dtype, origin, hint, keep_storage=layout == "storage")
        has_data = dtype in DTYPE_NAMES
        note = plan.problem
        if not has_data:
            note = f"dtype {dtype} has no numpy equivalent: indexed, payload not loadable"
        elif plan.storage_numel is not None and plan.storage_numel * ITEMSIZES[dtype] != nbytes:
            note = (
                f"declared size {nbytes} bytes does not match shape {list(plan.storage_shape)} x {dtype} "
                f"({plan.storage_numel * ITEMSIZES[dtype]} bytes): payload not loadable"
            )
            has_data = False
        if note:
            problems.append(Problem(file, note, name))
        named = origin is not None and origin.name
        values = (
            name, found.step, found.rank, op, found.op_type, module, role, str(slot), dtype, plan.shape,
            math.prod(plan.shape), file, has_data, plan.storage_format, plan.storage_shape, plan.origin_format,
            origin.name if origin is not None else "", int(origin.output_index) if named else -1, found.task_id,
            found.stream_id, found.timestamp, found.model, start, nbytes,
        )  # fmt: skip
        for column, value in zip(columns.values(), values, strict=True):
            column.append(value)


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
        from nbprec.formats.cann_tree import parse_file_name, read_name_mapping

        try:
            if Path(path).is_file():
                return not isinstance(parse_file_name(Path(path).name), str) and _plausible(Path(path))
            first = find_first_file(Path(path), _dump_or_mapping, max_depth=6)
            if first is not None and first.name == "mapping.csv":  # long names were replaced by short ones
                mapped = read_name_mapping(first.parent, [])
                first = first.parent / next(iter(mapped)) if mapped else None
            return first is not None and _plausible(first)
        except OSError:
            return False

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
        problems: list[Problem] = []
        steps = None if step is None else {int(step)} if isinstance(step, (int, np.integer)) else {int(s) for s in step}
        tree = walk_dump_tree(path, problems, steps=steps)
        if path.is_file() and not tree.files and not tree.opdebug:
            raise DumpFormatError(
                path, "not a CANN dump file: the name does not follow {op_type}.{op_name}.{task_id}..."
            )
        hints = _GraphHints(graph) if graph is not None else None
        files = _select_occurrences(tree.files, occurrence, problems)
        columns: dict[str, list] = {name: [] for name in _COLUMNS}
        plans: dict[tuple, TensorLayout] = {}
        for done, found in enumerate(files, 1):
            try:
                header = read_header(found.path)
            except DumpFormatError as exc:
                if path.is_file():
                    raise
                problems.append(Problem(str(found.path), exc.problem))
                continue
            _add_tensors(found, header, layout, hints, problems, plans, columns)
            if progress is not None:
                progress(done, len(files))
        if not columns["name"] and not tree.opdebug:
            raise EmptyDumpError(
                path, f"no readable CANN dump file ({len(problems)} files or folders could not be used)"
            )
        index = _build_index(columns, run or _run_name(path))
        meta = {
            "task": "tensor",
            "framework": "cann",
            "occurrence": occurrence,
            "layout": layout,
            "models": sorted({f.model for f in files if f.model}),
            "opdebug": [f.as_record() for f in tree.opdebug],
            "ge_graphs": [str(g) for g in tree.graphs],
        }
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


def _select_occurrences(files: list[DumpFile], occurrence: str, problems: list[Problem]) -> list[DumpFile]:
    """One file per op, step and device (the last or first in time), or all of them renamed ``op#k``."""
    groups: dict[tuple, list[DumpFile]] = {}
    for f in files:
        groups.setdefault((f.step, f.rank, f.model, f.op_key), []).append(f)
    chosen: list[DumpFile] = []
    repeated = 0
    for group in groups.values():
        group.sort(key=lambda f: (f.timestamp, f.task_id))
        if len(group) == 1:
            chosen.append(group[0])
        elif occurrence == "all":
            chosen.extend(f if k == 0 else f.renamed(k) for k, f in enumerate(group))
        else:
            repeated += len(group) - 1
            chosen.append(group[-1] if occurrence == "last" else group[0])
    if repeated:
        problems.append(
            Problem(
                "",
                f"{repeated} dump files repeat an op already dumped in the same step and device; the {occurrence} "
                "of each was kept (open with occurrence='all' to keep every one)",
            )
        )
    return chosen


class _GraphHints:
    """What a GE graph tells the reader: each op's real name (a dump file without ``op_name`` in its header has
    only the sanitised one of its file name) and each tensor's original layout."""

    def __init__(self, graph: Any) -> None:
        from nbprec.graph.ge import GeModel, read_ge_model

        model = graph if isinstance(graph, GeModel) else read_ge_model(graph)
        self.ops = model.by_name
        sanitised: dict[str, list[str]] = {}
        for name in self.ops:
            sanitised.setdefault(safe_name(name), []).append(name)
        self.names = {safe: names[0] for safe, names in sanitised.items() if len(names) == 1}

    def real_name(self, op: str) -> str:
        """The graph's name of ``op`` (itself when the graph has it, or cannot tell)."""
        return op if op in self.ops else self.names.get(op, op)

    def layout(self, op: str, role: str, slot: int) -> tuple[str, tuple[int, ...] | None] | None:
        """(origin format, origin shape) of a tensor from the graph's descriptor, None when unknown."""
        ge_op = self.ops.get(op)
        if ge_op is None:
            return None
        descs = ge_op.input_descs if role == "input" else ge_op.output_descs
        if slot >= len(descs):
            return None
        desc = descs[slot]
        fmt = desc.attrs.get("_datadump_origin_format") or desc.origin_format or ""
        return str(fmt), desc.origin_shape


def _dump_or_mapping(name: str) -> bool:
    if name == "mapping.csv":
        return True
    if not name.rstrip("\n")[-1:].isdigit():  # (the naming rule ends with a number: a folder of other files,
        return False  # a TensorFlow dump's .npy files say, is looked through without the parser)
    from nbprec.formats.cann_tree import parse_file_name

    return not isinstance(parse_file_name(name), str)  # Opdebug files are dump files too


def _plausible(file: Path) -> bool:
    """Whether ``file`` starts with a header length that fits in it (8 bytes read)."""
    try:
        fd, size = open_regular(file)  # never blocks on a FIFO, never reads a device
    except (OSError, DumpFormatError):
        return False
    try:
        head = os.pread(fd, 8, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(head) == 8 and 0 < int.from_bytes(head, "little") <= min(size - 8, MAX_HEADER)


def _run_name(path: Path) -> str:
    """The run's name: the dump root's folder (above the numeric tree levels), else the folder's name."""
    folder = path if path.is_dir() else path.parent
    return folder.name or str(folder)


__all__ = ["LAYOUTS", "MAX_HEADER", "OCCURRENCES", "CannDumpReader", "CannHeader", "load_tensor", "read_header"]
