"""The dump index: its columns, and how a reader's records or columns become them.

Readers describe the tensors of a dump as records (one mapping per tensor), a DataFrame, or columns they typed
themselves; :func:`index_columns` turns any of those into the index every dump has (the columns of
:data:`INDEX_COLUMNS`, defaults filled in, types fixed, dtype names canonical) as numpy columns, and
:func:`make_index` into the pandas DataFrame :attr:`nbprec.dump.Dump.index` shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np

from nbprec.columns import Columns, missing_mask
from nbprec.dtypes import canonical_dtype
from nbprec.formats._files import shown
from nbprec.stats import STAT_COLUMNS

#: Columns of every dump index, in order, with their meaning.
INDEX_COLUMNS: dict[str, str] = {
    "name": "unique tensor name within the dump, e.g. 'Functional.linear.0.forward.output.0'",
    "run": "name of the run (the dump folder's name unless given)",
    "step": "training step (iteration) the tensor belongs to; -1 when the format has none",
    "rank": "device rank; -1 when the format has none",
    "order": "execution order of the op within its step and rank, from 0",
    "op": "the op call the tensor belongs to, e.g. 'Functional.linear.0.forward'",
    "op_type": "the op's type or API, e.g. 'linear', 'MatMul'",
    "api": "normalised API name without call index or direction, e.g. 'Functional.linear'",
    "call": "how many earlier calls of the same API and direction there were (-1 if unknown)",
    "module": "module path (e.g. 'enc.layers.0.linear1'), '' when unknown",
    "direction": "'forward', 'backward' or '' when the format does not say",
    "role": "'input', 'output', 'parameter' or 'gradient'",
    "slot": "position of the tensor among the op's tensors of that role, e.g. '0', '1.0', 'weight'",
    "dtype": "original dtype, canonical name ('bfloat16', 'float16', 'float8_e4m3fn', ...)",
    "shape": "shape as a tuple of ints",
    "numel": "number of elements",
    **{c: f"{c.replace('_', ' ')} of the tensor (float64), NaN when unknown" for c in STAT_COLUMNS},
    "checksum": "checksum string recorded by the format ('' when none)",
    "file": "payload file, '' when the dump holds none for this tensor",
    "has_data": "whether a payload can be loaded",
}

_DEFAULTS: dict[str, Any] = {
    "run": "",
    "step": -1,
    "rank": -1,
    "order": -1,
    "op": "",
    "op_type": "",
    "api": "",
    "call": -1,
    "module": "",
    "direction": "",
    "role": "output",
    "slot": "0",
    "dtype": "",
    "shape": (),
    "numel": -1,
    "checksum": "",
    "file": "",
    "has_data": False,
}
_INT_COLUMNS = ("step", "rank", "order", "call", "numel")
_COUNT_COLUMNS = ("nan_count", "inf_count", "zero_count")


def make_index(
    records: Iterable[Mapping[str, Any]] | Any | Mapping[str, Any], run: str = "", *, typed: bool = False
) -> Any:
    """Build a dump index (a pandas DataFrame) from reader records, filling defaults and fixing column types.

    Records need at least ``name``; every other column of :data:`INDEX_COLUMNS` is optional. ``records``
    may also be a DataFrame of such columns (faster for column-wise formats). With ``typed``, ``records`` is a
    mapping (or DataFrame) of columns that already have their index type and no missing value (a reader that
    builds its columns itself, as the msprobe reader does): they are taken as they are, without a copy, and only
    the columns it lacks are filled (an index of 10^6 tensors costs no pass over each column).

    :func:`index_columns` builds the same index as numpy columns, without pandas (what readers hand to
    :class:`Dump`).
    """
    return index_frame(index_columns(records, run, typed=typed))


def index_frame(columns: Columns) -> Any:
    """A dump index's columns as the pandas DataFrame :attr:`Dump.index` is (tensor names in pandas' string
    dtype, other text ``object``)."""
    return columns.to_frame(text=_TEXT_INFERRED)


#: Called with (column, record position, value) for each integer a record holds that no int64 holds (text, an
#: integer beyond 64 bits, an infinity), which the index reads as the column's default (unknown, -1).
Unreadable = Callable[[str, int, Any], None]


def index_columns(
    records: Iterable[Mapping[str, Any]] | Any | Mapping[str, Any],
    run: str = "",
    *,
    typed: bool = False,
    unreadable: Unreadable | None = None,
) -> Columns:
    """:func:`make_index` as :class:`~nbprec.columns.Columns` (no pandas): records, a DataFrame, or with
    ``typed`` a mapping of typed columns (see :func:`make_index`). ``unreadable`` hears of each integer read as
    unknown (a reader records it as a problem)."""
    if typed:
        return _typed_columns(records, run)
    if hasattr(records, "columns") and hasattr(records, "iloc"):  # a pandas DataFrame of index columns
        return _fix_columns(Columns.from_frame(records), run)
    rows = list(records)
    by_column = _transpose(rows)
    if by_column or not rows:
        return list_columns(by_column, len(rows), run, unreadable)
    return _index_of(lambda column: [row.get(column) for row in rows], len(rows), run, unreadable)


def list_columns(values: Mapping[str, list], n: int, run: str = "", unreadable: Unreadable | None = None) -> Columns:
    """:func:`index_columns` of records a reader collected column by column: ``values`` maps a column to the
    list of its ``n`` values, as raw as records hold them (a column it lacks is all missing). A reader of many
    small records does better so: a dict per record, transposed at the end, reads each record's memory once a
    column (about a third of a 100,000-tensor CANN dump's open went there)."""
    missing = [None] * n
    return _index_of(lambda column: values.get(column, missing), n, run, unreadable)


def _index_of(values_of: Callable[[str], list], n: int, run: str, unreadable: Unreadable | None = None) -> Columns:
    """The index columns of ``n`` records, ``values_of(column)`` giving the list of a column's raw values."""
    columns = Columns(n=n)
    for column in INDEX_COLUMNS:
        values = values_of(column)
        default = _DEFAULTS.get(column)
        if column == "name":
            columns[column] = _object_array(values)
        elif column == "shape":
            columns[column] = _object_array(
                [tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else () for v in values]
            )
        elif column == "run":
            columns[column] = _object_array([v if v is not None and v == v and v != "" else run for v in values])
        elif column in _INT_COLUMNS:
            columns[column] = ints(values, default, None if unreadable is None else partial(unreadable, column))
        elif column in STAT_COLUMNS:
            columns[column] = _floats(values)
        elif column == "has_data":
            columns[column] = np.array([bool(v) if v is not None and v == v else False for v in values], dtype=bool)
        else:  # text columns
            columns[column] = _object_array([default if v is None or v != v else v for v in values])
    return _finish_index(columns)


#: index columns whose DataFrame takes pandas' inferred string dtype (as readers have always given them)
_TEXT_INFERRED = ("name",)


def _transpose(rows: list[Mapping[str, Any]]) -> dict[str, list]:
    """Column -> values of rows that all hold the same keys in the same order (a reader's records usually
    come from one dict literal), transposed in one pass; ``{}`` when they do not (the caller then takes each
    column row by row)."""
    if not rows or not all(type(row) is dict for row in rows):
        return {}
    keys = tuple(rows[0])
    if any(tuple(row) != keys for row in rows):
        return {}
    return dict(zip(keys, map(list, zip(*map(dict.values, rows), strict=True)), strict=True))


def _object_array(values: list) -> np.ndarray:
    """An object column of exactly these values (tuples stay elements)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _number(value: Any) -> float:
    """``float(value)``, NaN for None and for text that is not a number (as ``pd.to_numeric(errors="coerce")``)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def ints(values: list, default: int, bad: Callable[[int, Any], None] | None = None) -> np.ndarray:
    """int64 values, as ``np.array`` makes them; None and NaN ``default``, and so is anything no int64 holds (text
    that is not an integer, an integer beyond 64 bits, an infinity: a damaged or hostile record), of which ``bad``
    hears (its position, its value)."""
    cells = [default if v is None or v != v else v for v in values]
    try:
        return np.array(cells, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = []
    for position, value in enumerate(cells):
        number = _int64(value)
        if number is None:
            number = default
            if bad is not None:
                bad(position, value)
        out.append(number)
    return np.array(out, dtype=np.int64)


def _int64(value: Any) -> int | None:
    """``int(value)`` when an int64 holds it, else None."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(1 << 63) <= number < (1 << 63) else None


def unreadable_integer(column: str, value: Any) -> str:
    """Why ``value``, read from the index's integer ``column``, was read as unknown: no int64 holds it."""
    return f"{column} {shown(value, 60)}: not a 64-bit integer, read as unknown ({_DEFAULTS[column]})"


def _floats(values: Any) -> np.ndarray:
    """float64 values; None, and text that is not a number, become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_number(v) for v in values], dtype=np.float64)


def _fix_columns(columns: Columns, run: str) -> Columns:
    """Defaults and column types for a column-wise index (readers that build a DataFrame themselves)."""
    n = len(columns)
    out = Columns(n=n)
    for column in INDEX_COLUMNS:
        default = _DEFAULTS.get(column)
        values = columns.get(column)
        if values is None:
            values = np.full(n, np.nan) if column in STAT_COLUMNS else _object_array([None] * n)
        if column == "shape":
            out[column] = _object_array([tuple(s) if isinstance(s, (list, tuple, np.ndarray)) else () for s in values])
        elif column in STAT_COLUMNS:
            out[column] = _floats(values)
        elif column in _INT_COLUMNS:
            numbers = _floats(values) if values.dtype == object else values
            if numbers.dtype.kind == "f":
                numbers = np.where(np.isnan(numbers), default, numbers)
            out[column] = numbers.astype(np.int64)
        elif column == "has_data":
            out[column] = np.array([bool(v) if v is not None and v == v else False for v in values.tolist()], bool)
        elif column == "name":
            out[column] = values.astype(object)
        else:
            text = values.astype(object)
            missing = missing_mask(text)
            if column == "run" and run:
                missing |= text == ""
                fill = run
            else:
                fill = default
            if missing.any():
                text = text.copy()
                text[missing] = fill
            out[column] = text
    return _finish_index(out)


def _typed_columns(columns: Mapping[str, Any], run: str) -> Columns:
    """The index of columns that have their types already (see :func:`make_index`); missing ones are filled."""
    given = Columns.from_frame(columns) if hasattr(columns, "iloc") else None
    n = len(given) if given is not None else len(columns["name"])
    out = Columns(n=n)
    for column in INDEX_COLUMNS:
        if column in columns:
            values = given[column] if given is not None else columns[column]
            out[column] = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
        elif column == "run" or (column in _DEFAULTS and isinstance(_DEFAULTS[column], str)):
            out[column] = np.full(n, run if column == "run" else _DEFAULTS[column], dtype=object)
        elif column in STAT_COLUMNS:
            out[column] = np.full(n, np.nan)
        elif column == "shape":
            out[column] = _object_array([()] * n)
        elif column == "has_data":
            out[column] = np.zeros(n, dtype=bool)
        else:
            out[column] = np.full(n, _DEFAULTS[column], dtype=np.int64)
    if run and "run" in columns:
        values = out["run"].astype(object)
        out["run"] = np.where((values == "") | missing_mask(values), run, values)
    return _finish_index(out)


def _finish_index(columns: Columns) -> Columns:
    """Canonical dtype names, and element counts from shapes where a reader gave none."""
    dtypes = columns["dtype"]
    values = dtypes.tolist()
    canonical = {d: canonical_dtype(d) if d else "" for d in set(values)}  # once per distinct dtype
    if dtypes.dtype != object or any(k != v for k, v in canonical.items()):
        columns["dtype"] = _object_array([canonical[d] for d in values])
    numel = columns["numel"]
    missing_numel = numel < 0
    if missing_numel.any():
        numel = numel.copy()
        shapes = columns["shape"]
        numel[missing_numel] = [int(np.prod(s)) if s else 1 for s in shapes[missing_numel].tolist()]
        columns["numel"] = numel
    return columns


def execution_order(columns: Columns) -> np.ndarray | None:
    """Positions that sort an index by step, rank and order (stably), or None when it is sorted already."""
    if len(columns) < 2:
        return None
    step, rank, order = columns["step"], columns["rank"], columns["order"]
    ahead = (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & (
        (rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (order[1:] >= order[:-1]))))  # fmt: skip
    return None if ahead.all() else np.lexsort((order, rank, step))
