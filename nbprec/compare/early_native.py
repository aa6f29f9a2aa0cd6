"""The early worker's pairs of nbprec's own dumps (see :mod:`nbprec.compare.early`, which measures them).

A native dump's index comes whole from its column cache, ``index.columns.json`` (``docs/dump-format.md``): the
worker reads it when the native reader would (it describes exactly the bytes of ``index.jsonl``), with the C
scanner of ``nbprec/formats/_columnscan.c`` (or the ``json`` module where it is not built or steps aside), before
numpy is imported. Tensors of the same (step, rank, name) on both sides, of one shape and
a dtype the compiled kernel reads, are candidates, in the target's order; their payloads are read with
:func:`nbprec.formats._npyfile.small_npy` (small plain ``.npy`` files), the other pairs are left to the engine. The
worker steps aside (no candidates) when either side's cache is missing, stale, larger than :data:`_CACHE_LIMIT` or
not the columns it expects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from math import isfinite

#: The native format's files (``nbprec.formats.native_read.HEADER_FILE`` and the others, whose module imports
#: numpy; a test holds the two to each other).
HEADER_FILE, COLUMNS_FILE, INDEX_FILE, TENSOR_DIR = "nbprec-dump.json", "index.columns.json", "index.jsonl", "tensors"
#: A column cache larger than this (about 65,000 tensors) is not read by the worker: it decodes the whole file at
#: once (the reader streams it a column at a time), which would take longer than its window and, on a hostile
#: file, up to about ten times the file's size in memory.
_CACHE_LIMIT = 16 << 20
_NEEDED = ("name", "file", "dtype", "shape", "min", "max")
#: How the C scanner reads the columns the worker needs (``nbprec/formats/_columnscan.c``).
_KINDS = {
    "name": ("t", None),
    "file": ("t", ""),
    "dtype": ("r", ""),
    "shape": ("s", None),
    "min": ("f", None),
    "max": ("f", None),
    "step": ("i", 0),
    "rank": ("i", 0),
}

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nbprec.compare.early import Candidate


def is_native(root: str) -> bool:
    """Whether ``root`` is a native dump's run folder (its header file is there)."""
    return os.path.isfile(os.path.join(root, HEADER_FILE))


def candidates(roots: tuple[str, str]) -> Iterator[Candidate]:
    """``(target file, bench file, target dtype, bench dtype, shape, hints)`` of each pair the worker may measure,
    in the target's order: the files as the native reader names them (the run folder, a separator, the index's
    relative path), the hints being both sides' recorded (min, max)."""
    target, bench = _index(roots[0]), _index(roots[1])
    if target is None or bench is None:
        return
    prefix_t, prefix_b = roots[0] + os.sep, roots[1] + os.sep
    for key, (t_file, t_dtype, shape, t_hints) in target.items():
        found = bench.get(key)
        if found is None or found[2] != shape:
            continue
        b_file, b_dtype, _shape, b_hints = found
        yield prefix_t + t_file, prefix_b + b_file, t_dtype, b_dtype, shape, (*t_hints, *b_hints)


def _index(root: str) -> dict[tuple, tuple[str, str, tuple[int, ...], tuple[float, float]]] | None:
    """(step, rank, name) -> (payload path relative to ``root``, dtype, shape, (min, max)) of the tensors of the
    native dump ``root`` with a payload in its ``tensors/`` folder, first record of a key only; None when its
    column cache cannot be used (see the module docstring)."""
    from nbprec.formats._files import read_regular

    file = os.path.join(root, COLUMNS_FILE)
    try:
        index_bytes = os.stat(os.path.join(root, INDEX_FILE)).st_size
        data = read_regular(file, limit=min(_CACHE_LIMIT, 2 * index_bytes + (1 << 20)), what="cache")
        found = _scanned(data) or _decoded(data)
        if found is None or found[0] != index_bytes:
            return None
        _index_bytes, rows, columns = found
        needed = [columns[name] for name in _NEEDED]
        if not all(isinstance(values, list | tuple) and len(values) == rows for values in needed):
            return None
        steps, ranks = (columns.get(name, [0] * rows) for name in ("step", "rank"))
        if not (isinstance(steps, list) and isinstance(ranks, list) and len(steps) == len(ranks) == rows):
            return None
    except Exception:  # (any damage: the reader says what it is)
        return None
    index: dict[tuple, tuple[str, str, tuple[int, ...], tuple[float, float]]] = {}
    folder = TENSOR_DIR + "/"
    cut = len(folder)
    for name, file, dtype, shape, low, high, step, rank in zip(*needed, steps, ranks, strict=True):
        if not (
            type(file) is str
            and file.startswith(folder)
            and file.find("/", cut) < 0
            and type(low) is float
            and type(high) is float
            and isfinite(low)
            and isfinite(high)
        ):
            continue  # no payload, not one of tensors/, or no recorded extremes: the reader's
        if type(shape) is not tuple:  # (the scanner's shapes are tuples of ints; the json module's, lists of anything)
            if type(shape) is not list or not all(type(d) is int for d in shape):
                continue
            shape = tuple(shape)
        key = (step, rank, name)
        if key not in index:
            index[key] = (file, dtype, shape, (low, high))
    return index


def _scanned(data: bytes) -> tuple[int, int, dict[str, list]] | None:
    """(index_bytes, rows, columns) of the column cache ``data`` as the C scanner reads it (the columns the worker
    needs, as lists), or None when it is not built or steps aside."""
    try:
        from nbprec.formats._columnscan import scan
    except ImportError:
        return None
    found = scan(data, _KINDS)
    if found is None:
        return None
    rows, index_bytes, columns = found
    for name in ("min", "max", "step", "rank"):
        if name in columns:
            columns[name] = memoryview(columns[name]).cast("d" if name in ("min", "max") else "q").tolist()
    return index_bytes, rows, columns


def _decoded(data: bytes) -> tuple[int, int, dict[str, list]] | None:
    """(index_bytes, rows, columns) of the column cache ``data`` decoded by the json module."""
    import json

    cache = json.loads(data)
    return cache.get("index_bytes"), cache["rows"], cache["columns"]


__all__ = ["HEADER_FILE", "candidates", "is_native"]
