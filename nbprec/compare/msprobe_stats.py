"""The statistics cells of msprobe's compare CSV: each side's max, min, mean and L2 norm as msprobe holds them,
and (statistics mode) the difference and relative error of each, as msprobe computes and writes them.

:mod:`nbprec.compare.msprobe_layout` builds the rest of the layout from these columns.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nbprec.columns import Columns, once_per_object
from nbprec.dtypes import FLOAT_DTYPES
from nbprec.floattext import float_texts

#: msprobe's cells for a value it has not got, and for NaN
NA, NAN = "N/A", "Nan"


def _is_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _stat_cell(value: float, i: int, dtype: str, floating: bool, finite_extremes: bool) -> Any:
    """One statistic (``i``: 0 max, 1 min, 2 mean, 3 norm) as msprobe holds it (see :func:`stats_cells`)."""
    if value != value:
        return NAN if floating and (i < 2 or not finite_extremes) else "None"
    if dtype == "bool":
        return str(bool(value))
    if dtype.startswith(("int", "uint")) and float(value).is_integer():
        return int(value)
    return float(value)


def _numel(shape: Any) -> int:
    return math.prod(shape) if shape is not None else 1


def stats_cells(table: Columns, side: str) -> list[list[Any]]:
    """One side's max, min, mean and L2 norm of every row, as msprobe holds them: ints for integer tensors,
    ``'True'`` / ``'False'`` for bool, ``'None'`` where the dump records none (an empty tensor; mean and norm of
    integer tensors, or of a float tensor whose extremes are finite), ``'Nan'`` for NaN. Four lists, a value a
    row; the common case (a float tensor's finite statistic) takes no call per value."""
    dtypes = [d if isinstance(d, str) else "" for d in table[f"{side}_dtype"].tolist()]
    values = [np.asarray(table[f"{side}_{key}"], dtype=np.float64) for key in ("max", "min", "mean", "norm")]
    if f"{side}_recorded_mean" in table:  # the dump's own Mean, as msprobe shows it
        values[2] = np.asarray(table[f"{side}_recorded_mean"], dtype=np.float64)
    numel = np.array(once_per_object(table[f"{side}_shape"].tolist(), _numel), dtype=np.float64)
    kinds = {d: (d in FLOAT_DTYPES and "float8" not in d, d in FLOAT_DTYPES) for d in set(dtypes)}  # (a few)
    floating = np.fromiter((kinds[d][0] for d in dtypes), dtype=bool, count=len(dtypes)) & (numel > 0)
    finite_extremes = np.isfinite(values[0]) & np.isfinite(values[1])
    plain_dtype = np.fromiter((kinds[d][1] for d in dtypes), dtype=bool, count=len(dtypes))  # not bool nor int
    out = []
    for i, column in enumerate(values):
        cells = column.tolist()
        special = np.flatnonzero(np.isnan(column) | ~plain_dtype)
        for r in special.tolist():
            cells[r] = _stat_cell(cells[r], i, dtypes[r], bool(floating[r]), bool(finite_extremes[r]))
        out.append(cells)
    return out


def _kind(value: Any) -> str:
    """msprobe's class of a statistic: nan, inf, -inf, num, device, na or other."""
    text = str(value)
    low = text.lower()
    if _is_nan(value) or low == "nan":
        return "nan"
    if low in ("inf", "-inf"):
        return low
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "num"
    if any(device in low for device in ("npu", "cpu", "cuda")):
        return "device"
    return "na" if text == NA else "other"


def _stat_diff(npu: Any, bench: Any) -> tuple[str, str]:
    """msprobe's ``<stat> diff`` (NPU - bench) and relative error (``|diff / bench * 100|%``) of one statistic."""
    if str(npu) == str(bench):
        return "0", "0"
    kinds = (_kind(npu), _kind(bench))
    if kinds == ("num", "num"):
        diff = float(npu) - float(bench)
        return str(diff), "inf" if float(bench) == 0 else f"{abs(diff / float(bench) * 100)}%"
    if "na" in kinds:
        text = NA
    elif {"device", "other"} & set(kinds):
        text = NA if kinds == ("device", "device") else "Diff"
    elif "nan" in kinds:
        text = NAN
    elif kinds[0] == "inf" or kinds[1] == "-inf":
        text = "inf"
    else:
        text = "-inf"
    return text, text


def _floats(cells: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The cells as float64 (NaN for a cell that is not a float) and which of them are floats; a column of floats
    only, the usual one, is taken whole."""
    if set(map(type, cells)) <= {float}:
        return np.array(cells, dtype=np.float64), np.ones(len(cells), dtype=bool)
    floats = np.fromiter((type(v) is float for v in cells), dtype=bool, count=len(cells))
    return np.array([v if type(v) is float else np.nan for v in cells], dtype=np.float64), floats


def _texts_at(values: np.ndarray, rows: np.ndarray, other: str, suffix: str = "") -> list[str]:
    """repr's text of ``values`` (plus ``suffix``) at ``rows`` (a mask), ``other`` elsewhere."""
    at = np.flatnonzero(rows)
    every = len(at) == len(values)
    texts = float_texts(values if every else values[at])
    if suffix and texts:
        texts = (f"{suffix}\n".join(texts) + suffix).split("\n")  # (in C: a number's text holds no line break)
    if every:
        return texts
    out = np.full(len(values), other, dtype=object)
    out[at] = texts
    return out.tolist()


def percent(value: Any) -> float:
    """A cell as msprobe reads a percentage back: ``'12.5%'`` is 0.125; text that is not a number is 0."""
    try:
        return float(str(value).strip("%")) / 100
    except ValueError:
        return 0.0


def stat_diffs(npu: list[Any], bench: list[Any]) -> tuple[list[str], list[str], np.ndarray]:
    """:func:`_stat_diff` of every row of one statistic, as two columns (diffs, relative errors), and the
    relative errors as msprobe's checks read them back: :func:`percent` of the cells that are percentages, NaN
    for the others. The usual rows, two finite floats, are computed and written at once (the same float64
    operations, and ``repr``'s text, which reads back as the same number); every other row goes through
    :func:`_stat_diff`."""
    n = len(npu)
    if len(bench) != n:
        raise ValueError(f"stat_diffs: {n} NPU cells against {len(bench)} bench cells")
    a, a_float = _floats(npu)
    b, b_float = _floats(bench)
    with np.errstate(all="ignore"):
        diff = a - b
        relative = np.abs(diff / b * 100)
    zero = b == 0
    fast = a_float & b_float & np.isfinite(a) & np.isfinite(b)  # an overflow is "inf" either way
    same = fast & (a == b) & (np.signbit(a) == np.signbit(b))  # equal texts: equal values of one sign
    differ = fast & ~same
    diffs = _texts_at(diff, differ, "0")
    relatives = _texts_at(relative, differ & ~zero, "0", "%")
    for row in np.flatnonzero(differ & zero).tolist():
        relatives[row] = "inf"
    read_back = np.where(differ & ~zero, relative / 100, np.nan)
    for row in np.flatnonzero(~fast).tolist():
        diffs[row], relatives[row] = _stat_diff(npu[row], bench[row])
        if relatives[row].endswith("%"):
            read_back[row] = percent(relatives[row])
    return diffs, relatives, read_back


__all__ = ["NA", "NAN", "percent", "stat_diffs", "stats_cells"]
