"""CSV exports of a comparison in nbprec's own layout and in the layouts of msaccucmp and msprobe.

The msaccucmp layout follows CANN's ``result_%Y%m%d%H%M%S.csv`` (its duplicated ``DataType`` header is kept,
so tools reading it by position still work); the msprobe layout is ``msprobe compare``'s CSV in the
comparison's mode (tensor, statistics or md5), every cell computed by msprobe's formulas and rounding and every
row judged by msprobe's checks, so that it can be diffed against msprobe's own (docs/compare.md says what nbprec's
table cannot supply). In nbprec's and msaccucmp's layouts, values nbprec could not compute are written as ``NaN``
with the reason in the fail-reason column.

Every export is safe to open in a spreadsheet and is valid UTF-8 (docs/security.md, "Exports and reports"): a
text cell a spreadsheet would run as a formula gets one more leading ``'`` (:func:`spreadsheet_safe`), and a
name holding bytes that were not UTF-8 is written with visible escapes (:func:`visible_text`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec._output import rewriting
from nbprec.columns import Columns, cell_texts
from nbprec.compare.msprobe_layout import (  # noqa: F401 (re-exported: where users look for the layouts)
    MSPROBE_HEADERS,
    MSPROBE_STAT_DIFFS,
    MSPROBE_STATS,
    msprobe_columns,
    msprobe_mode,
    msprobe_rows,
    shape_text,
    shape_texts,
)
from nbprec.errors import ComparisonError
from nbprec.floattext import NumberColumn, is_number_column, number_column
from nbprec.safe_text import (  # noqa: F401 (re-exported)
    FORMULA_STARTS,
    csv_cell,
    plain_cells,
    quoting,
    restore_frame,
    spreadsheet_restore,
    spreadsheet_safe,
    visible_text,
    write_csv_columns,
    write_table_csv,
)

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

LAYOUTS = ("nbprec", "msaccucmp", "msprobe")

MSACCUCMP_HEADER = [
    "Index",
    "OpSequence",
    "OpType",
    "NPUDump",
    "DataType",
    "GroundTruth",
    "DataType",
    "TensorIndex",
    "Shape",
    "OverFlow",
    "CosineSimilarity",
    "MaxAbsoluteError",
    "AccumulatedRelativeError",
    "RelativeEuclideanDistance",
    "KullbackLeiblerDivergence",
    "StandardDeviation",
    "MeanAbsoluteError",
    "RootMeanSquareError",
    "MaxRelativeError",
    "MeanRelativeError",
    "CompareFailReason",
]


def _num(value: Any) -> str:
    if value is None:
        return "NaN"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "NaN" if math.isnan(f) else repr(f)


def _nums(values: np.ndarray) -> NumberColumn | list[str]:
    """A float column as msaccucmp writes it: ``repr``, ``NaN`` where missing (a column of numbers, formatted as
    the rows are joined)."""
    return number_column(values, "NaN")


#: msaccucmp writes a mean or standard deviation below this as 0 (its StandardDeviation algorithm)
_STD_ZERO = 0.001


def _std_cells(table: Columns) -> list[str]:
    """msaccucmp's StandardDeviation cells: ``(target mean;target std),(bench mean;bench std)``, ``%.3f`` each,
    ``NaN`` where one is missing."""
    names = ("target_mean", "target_std", "bench_mean", "bench_std")
    n = len(table)
    parts = [np.asarray(table[c], dtype=np.float64) if c in table else np.full(n, np.nan) for c in names]
    if not n:
        return []
    stacked = np.stack(parts)
    missing = np.isnan(stacked).any(axis=0)
    shown = np.where(np.abs(stacked) < _STD_ZERO, 0.0, stacked).T  # a row's four values together
    # every row's four values formatted in one call rather than a call per row
    cells = (("(%.3f;%.3f),(%.3f;%.3f)\x00" * n) % tuple(shown.reshape(-1).tolist())).split("\x00")[:n]
    for i in np.flatnonzero(missing).tolist():
        cells[i] = "NaN"
    return cells


def _msaccucmp_columns(table: Columns) -> list[list[str] | NumberColumn]:
    """msaccucmp's columns (:data:`MSACCUCMP_HEADER`), each a list of its cells."""
    n = len(table)
    if not n:
        return [[] for _ in MSACCUCMP_HEADER]
    op, role, slot = cell_texts(table["op"]), cell_texts(table["role"]), cell_texts(table["slot"])
    bench_op = cell_texts(table["bench_op"])
    truth = cell_texts(table["ground_truth"]) if "ground_truth" in table else [""] * n
    nonfinite = np.nan_to_num(np.asarray(table["target_nonfinite"], dtype=np.float64), nan=0.0) > 0
    columns = [
        number_column(np.arange(n)),
        number_column(table["order"]),
        cell_texts(table["op_type"]),
        op,
        cell_texts(table["target_dtype"]),
        [t or b or "*" for t, b in zip(truth, bench_op, strict=True)],  # the fusion records' ops, or the bench op
        [d or "NaN" for d in cell_texts(table["bench_dtype"])],
        [
            f"{o}:{'output' if r in ('output', 'gradient') else 'input'}:{s}"
            for o, r, s in zip(op, role, slot, strict=True)
        ],
        shape_texts(table["target_shape"].tolist()),
        np.where(nonfinite, "YES", "NO").tolist(),
        *(_nums(table[c]) for c in ("cosine", "max_abs_err", "accumulated_rel_err", "rel_euclidean", "kl_divergence")),
        _std_cells(table),
        *(_nums(table[c]) for c in ("mean_abs_err", "rmse", "max_rel_err", "mean_rel_err")),
        cell_texts(table["reason"]),
    ]
    return columns


#: Columns of the interop layouts that hold only numbers or words nbprec writes (never a name from a dump): no
#: spreadsheet check needed.
_NUMBER_COLUMNS = frozenset(
    {"Index", "OpSequence", "OverFlow", *MSACCUCMP_HEADER[10:15], *MSACCUCMP_HEADER[16:20]}
    | {"NPU Requires_grad", "Bench Requires_grad", *MSPROBE_STATS, *MSPROBE_STAT_DIFFS}
    | {"Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"}
    | {"Requires_grad Consistent", "Result"}
)


def _export_columns(header: list[str], columns: list[list[Any]]) -> tuple[list[list[Any]], int]:
    """``columns`` with every text cell as :func:`csv_cell` writes it, and their :func:`quoting` (every cell
    quoted when one holds a carriage return). A column of plain cells (:func:`plain_cells`: ASCII, none starting
    as a formula, the usual case) is taken as it is, after one test over its joined text; columns of numbers
    nbprec wrote (and columns of numbers, :func:`~nbprec.floattext.number_column`) are not tested."""
    out, breaks = [], False
    for name, cells in zip(header, columns, strict=True):
        if is_number_column(cells) or name in _NUMBER_COLUMNS or plain_cells(cells):
            out.append(cells)
            continue
        cells = [csv_cell(c) for c in cells]
        breaks = breaks or any(isinstance(c, str) and "\r" in c for c in cells)
        out.append(cells)
    return out, csv.QUOTE_ALL if breaks else csv.QUOTE_MINIMAL


def write_csv(comparison: Comparison, path: Path, layout: str = "nbprec") -> Path:
    """Write ``comparison`` to ``path`` in one of :data:`LAYOUTS`.

    The msprobe layout takes msprobe's columns of the comparison's mode (:func:`msprobe_mode`) and computes
    every cell as msprobe does (docs/compare.md, "CSV exports"). In every layout a text cell that a spreadsheet
    would run as a formula gets one more leading ``'`` (:func:`spreadsheet_safe`; numbers are never changed)
    and bytes of a name that were not UTF-8 are written as ``\\xNN`` (:func:`visible_text`).
    """
    if layout not in LAYOUTS:
        raise ComparisonError(f"unknown CSV layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "nbprec":
        return write_table_csv(comparison.columns.assign(status=comparison.status), path)
    if layout == "msaccucmp":
        header, columns, ending = MSACCUCMP_HEADER, _msaccucmp_columns(comparison.columns), "\r\n"
    else:
        (header, columns), ending = msprobe_columns(comparison), "\n"  # as pandas writes msprobe's
    columns, how = _export_columns(header, columns)
    with rewriting(path, newline="", encoding="utf-8", errors="backslashreplace") as fh:
        write_csv_columns(fh, header, columns, ending, how)
    return path
