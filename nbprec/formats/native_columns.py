"""The column cache of nbprec's dump format (``index.columns.json``), read into typed arrays.

The cache (``docs/dump-format.md``) holds the index's values column by column. :func:`read_columns` reads a cache
below :data:`SCAN_BELOW` bytes whole with the C scanner (``nbprec/formats/_columnscan.c``), which puts numbers
straight into float64 and int64 buffers and makes one str of each repeated value (an op type, a dtype); it reads
the cache as nbprec writes it and steps aside for anything else (an escaped name, a damaged file). Then, and
without the scanner, the cache is streamed (:class:`~nbprec.formats._jsonstream.JsonObjectStream`): one column's
JSON array is decoded at a time and turned into its index type at once, so memory holds one column of Python values
beside the finished ones, never the whole cache as Python objects; this reader words every problem. Both give the
same columns (``tests/formats/test_column_scan.py``), which go to ``make_index(typed=True)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nbprec.columns import missing_mask
from nbprec.dump import Problem
from nbprec.dump_index import _DEFAULTS, _INT_COLUMNS, INDEX_COLUMNS, _floats, ints, unreadable_integer
from nbprec.errors import DumpFormatError
from nbprec.formats._files import MAX_SIDE_FILE, read_regular
from nbprec.formats._jsonstream import JsonObjectStream
from nbprec.stats import STAT_COLUMNS

try:
    from nbprec.formats._columnscan import scan as _scan
except ImportError:  # built without a C compiler: every cache is streamed
    _scan = None

COLUMNS_FILE = "index.columns.json"
INDEX_FILE = "index.jsonl"
#: Column caches the C scanner reads, whole (about 10^6 tensors); larger ones are streamed, in bounded memory.
SCAN_BELOW = 1 << 28
#: Text columns holding few distinct values: each distinct value is kept once.
_REPEATED = ("op", "op_type", "api", "module", "direction", "role", "slot", "dtype", "checksum", "run")


def _scan_kind(column: str) -> tuple[str, Any]:
    """How the C scanner reads the index column ``column``: (kind, default), as ``_columnscan.c`` describes."""
    default = _DEFAULTS.get(column)
    if column in STAT_COLUMNS:
        return "f", None
    if column in _INT_COLUMNS:
        return "i", default
    if column == "shape":
        return "s", None
    if column == "has_data":
        return "b", None
    return ("r" if column in _REPEATED else "t"), default


#: column -> (kind, default) for the C scanner: every index column.
SCAN_KINDS: dict[str, tuple[str, Any]] = {column: _scan_kind(column) for column in INDEX_COLUMNS}


def read_columns(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    """The typed columns of the column cache ``index.columns.json`` of the run folder ``path`` (for
    ``make_index(typed=True)``), or None when it is absent, stale or unreadable (then ``index.jsonl`` is read).

    The cache is used only if it describes exactly the bytes of ``index.jsonl`` (same size), which it says
    before its columns: a stale one is not decoded at all.
    """
    file = path / COLUMNS_FILE
    try:
        index_bytes = (path / INDEX_FILE).stat().st_size
        if not file.is_file():
            return None
        # the cache holds the index's values without its keys: much larger than index.jsonl means damage
        size = file.stat().st_size
        if size > min(2 * index_bytes + (1 << 20), 4 * MAX_SIDE_FILE):
            raise DumpFormatError(file, "larger than its index.jsonl could make it (damaged?)")
        if _scan is not None and size < SCAN_BELOW:
            scanned = _scan(read_regular(file, limit=SCAN_BELOW, what="column cache"), SCAN_KINDS)
            if scanned is not None:
                return _typed_scan(file, scanned, index_bytes, problems)
        return _read(file, index_bytes, problems)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, TypeError, OverflowError, RecursionError, DumpFormatError) as exc:
        why = exc.problem if isinstance(exc, DumpFormatError) else exc
        problems.append(Problem(str(file), f"unreadable column cache ignored, {INDEX_FILE} read instead: {why}"))
        return None


def _read(file: Path, index_bytes: int, problems: list[Problem]) -> dict[str, Any] | None:
    head: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    with JsonObjectStream(file) as stream:
        if stream.first_type() != "dict":
            raise DumpFormatError(file, "not a JSON object")
        stream.begin_object()
        while (key := stream.next_key()) is not None:
            if key == "columns" and stream.peek() == "{":
                if head.get("index_bytes") != index_bytes:
                    why = f"stale column cache ignored ({INDEX_FILE} changed after the run)"
                    problems.append(Problem(str(file), why))
                    return None
                stream.begin_object()
                for column, values in stream.members():
                    if not isinstance(values, list) or len(values) != head.get("rows"):
                        return _malformed(file, problems)
                    if column in INDEX_COLUMNS:
                        columns[column] = typed_column(column, values, _unreadable(file, column, problems))
                    del values
                continue
            head[key] = stream.value()
        stream.end()
    if "name" not in columns:
        return _malformed(file, problems)
    return columns


def _typed_scan(
    file: Path, scanned: tuple[int, int, dict[str, Any]], index_bytes: int, problems: list[Problem]
) -> dict[str, Any] | None:
    """The typed columns of what the C scanner read (as :func:`_read` makes them from the same file)."""
    _rows, cached_bytes, found = scanned
    if cached_bytes != index_bytes:
        problems.append(Problem(str(file), f"stale column cache ignored ({INDEX_FILE} changed after the run)"))
        return None
    if "name" not in found:
        return _malformed(file, problems)
    columns: dict[str, Any] = {}
    for column, values in found.items():
        kind = SCAN_KINDS[column][0]
        if kind in "fib":
            columns[column] = np.frombuffer(values, {"f": np.float64, "i": np.int64, "b": np.bool_}[kind])
        else:
            columns[column] = np.fromiter(values, dtype=object, count=len(values))
    return columns


def _malformed(file: Path, problems: list[Problem]) -> None:
    problems.append(Problem(str(file), f"malformed column cache ignored, {INDEX_FILE} read instead"))


def _unreadable(file: Path, column: str, problems: list[Problem]) -> Any:
    """What records an integer of the cache's ``column`` that no int64 holds, read as unknown, as a problem."""

    def bad(position: int, value: Any) -> None:
        problems.append(Problem(str(file), unreadable_integer(column, value), f"row {position}"))

    return bad


def typed_column(column: str, values: list, bad: Any = None) -> np.ndarray:
    """One index column from its cached JSON values, with the index's type and defaults (as ``make_index``
    fills them): integers as int64, statistics as float64 (``"NaN"``/``"Infinity"`` and null included), shapes
    as tuples, text as objects with each repeated value held once. ``bad(position, value)`` hears of each integer
    no int64 holds, read as unknown."""
    default = _DEFAULTS.get(column)
    if column in STAT_COLUMNS:
        try:
            return np.array(values, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return _floats(values)
    if column in _INT_COLUMNS:
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return ints(values, default, bad)
    if column == "shape":  # tuples, each distinct shape held once; anything but a list: ()
        shapes = [tuple(v) if type(v) is list else () for v in values]
        held_shapes: dict[tuple, tuple] = {}
        return np.fromiter(map(held_shapes.setdefault, shapes, shapes), object, len(shapes))
    if column == "has_data":
        return np.array([bool(v) if v is not None else False for v in values], dtype=bool)
    if column in _REPEATED:  # one object per distinct value; missing ones (None, NaN) the default
        held: dict[Any, Any] = {}
        cells = list(map(held.setdefault, values, values))  # (a loop in C: a few distinct values in many rows)
        if any(v is None or v != v for v in held):
            cells = [default if v is None or v != v else v for v in cells]
        return np.fromiter(cells, dtype=object, count=len(cells))
    out = np.fromiter(values, dtype=object, count=len(values))  # element by element: a list stays one value
    if column != "name" and default is not None:
        missing = missing_mask(out)
        if missing.any():
            out[missing] = default
    return out


__all__ = ["SCAN_BELOW", "SCAN_KINDS", "read_columns", "typed_column"]
