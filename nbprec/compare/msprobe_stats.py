"""The statistics cells of msprobe's compare CSV: each side's max, min, mean and L2 norm as msprobe holds them,
and (statistics mode) the difference and relative error of each, as msprobe computes and writes them.

:mod:`nbprec.compare.msprobe_layout` builds the rest of the layout from these columns.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nbprec.columns import Columns
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


def stats_cells(table: Columns, side: str) -> list[list[Any]]:
    """One side's max, min, mean and L2 norm of every row, as msprobe holds them: ints for integer tensors,
    ``'True'`` / ``'False'`` for bool, ``'None'`` where the dump records none (an empty tensor; mean and norm of
    integer tensors, or of a float tensor whose extremes are finite), ``'Nan'`` for NaN. Four lists, a value a
    row; the common case (a float tensor's finite statistic) takes no call per value."""
    dtypes = [d if isinstance(d, str) else "" for d in table[f"{side}_dtype"].tolist()]
    values = [np.asarray(table[f"{side}_{key}"], dtype=np.float64) for key in ("max", "min", "mean", "norm")]
    if f"{side}_recorded_mean" in table:  # the dump's own Mean, as msprobe shows it
        values[2] = np.asarray(table[f"{side}_recorded_mean"], dtype=np.float64)
    numel = np.array([math.prod(s) if s is not None else 1 for s in table[f"{side}_shape"].tolist()], dtype=np.float64)
    floating = np.array([d in FLOAT_DTYPES and "float8" not in d for d in dtypes], dtype=bool) & (numel > 0)
    finite_extremes = np.isfinite(values[0]) & np.isfinite(values[1])
    plain_dtype = np.array([d in FLOAT_DTYPES for d in dtypes], dtype=bool)  # not bool, not an integer type
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


def stat_diffs(npu: list[Any], bench: list[Any]) -> tuple[list[str], list[str]]:
    """:func:`_stat_diff` of every row of one statistic, as two columns (diffs, relative errors). The usual
    rows, two finite floats, are computed and written at once (the same float64 operations, and ``repr``'s
    text); every other row goes through :func:`_stat_diff`."""
    n = len(npu)
    plain = np.fromiter(
        (type(a) is float and type(b) is float for a, b in zip(npu, bench, strict=True)), dtype=bool, count=n
    )
    a = np.array([v if type(v) is float else np.nan for v in npu], dtype=np.float64)
    b = np.array([v if type(v) is float else np.nan for v in bench], dtype=np.float64)
    with np.errstate(all="ignore"):
        diff = a - b
        relative = np.abs(diff / b * 100)
    zero = b == 0
    fast = plain & np.isfinite(a) & np.isfinite(b)  # an overflow is "inf" either way
    same = fast & (a == b) & (np.signbit(a) == np.signbit(b))  # equal texts: equal values of one sign
    differ = fast & ~same
    diffs, relatives = ["0"] * n, ["0"] * n
    rows = np.flatnonzero(differ)
    for row, text in zip(rows.tolist(), float_texts(diff[rows]), strict=True):
        diffs[row] = text
    rows = np.flatnonzero(differ & ~zero)
    for row, text in zip(rows.tolist(), float_texts(relative[rows]), strict=True):
        relatives[row] = text + "%"
    for row in np.flatnonzero(differ & zero).tolist():
        relatives[row] = "inf"
    for row in np.flatnonzero(~fast).tolist():
        diffs[row], relatives[row] = _stat_diff(npu[row], bench[row])
    return diffs, relatives


__all__ = ["NA", "NAN", "stat_diffs", "stats_cells"]
