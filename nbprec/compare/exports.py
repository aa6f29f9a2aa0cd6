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

from nbprec.columns import Columns
from nbprec.compare.msprobe_layout import (  # noqa: F401 (re-exported: where users look for the layouts)
    MSPROBE_HEADERS,
    MSPROBE_STAT_DIFFS,
    MSPROBE_STATS,
    msprobe_mode,
    msprobe_rows,
    shape_text,
)
from nbprec.errors import ComparisonError
from nbprec.safe_text import (  # noqa: F401 (re-exported)
    FORMULA_STARTS,
    csv_cell,
    plain_cells,
    quoting,
    restore_frame,
    spreadsheet_restore,
    spreadsheet_safe,
    visible_text,
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


#: msaccucmp writes a mean or standard deviation below this as 0 (its StandardDeviation algorithm)
_STD_ZERO = 0.001


def _std_cell(r: Any) -> str:
    """msaccucmp's StandardDeviation cell: ``(target mean;target std),(bench mean;bench std)``, ``%.3f`` each."""
    values = [getattr(r, c, math.nan) for c in ("target_mean", "target_std", "bench_mean", "bench_std")]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return "NaN"
    shown = ["%.3f" % (0.0 if abs(float(v)) < _STD_ZERO else float(v)) for v in values]
    return f"({shown[0]};{shown[1]}),({shown[2]};{shown[3]})"


def _ground_truth(r: Any) -> str:
    """msaccucmp's GroundTruth: the framework ops an NPU op stands for (fusion records), else the benchmark op;
    ``*`` when it has no counterpart."""
    truth = getattr(r, "ground_truth", None)
    if isinstance(truth, str) and truth:
        return truth
    return r.bench_op or "*"


def _msaccucmp_rows(table: Columns) -> list[list[str]]:
    rows = []
    for i, r in enumerate(table.itertuples()):
        role = "output" if r.role in ("output", "gradient") else "input"
        std = _std_cell(r)
        overflow = "YES" if (r.target_nonfinite or 0) > 0 else "NO"
        rows.append(
            [
                str(i),
                str(r.order),
                r.op_type,
                r.op,
                r.target_dtype,
                _ground_truth(r),
                r.bench_dtype or "NaN",
                f"{r.op}:{role}:{r.slot}",
                shape_text(r.target_shape),
                overflow,
                _num(r.cosine),
                _num(r.max_abs_err),
                _num(r.accumulated_rel_err),
                _num(r.rel_euclidean),
                _num(r.kl_divergence),
                std,
                _num(r.mean_abs_err),
                _num(r.rmse),
                _num(r.max_rel_err),
                _num(r.mean_rel_err),
                r.reason,
            ]
        )
    return rows


# First characters of a text cell that :func:`csv_cell` may change (a formula start, or a leading quote).
_SUSPECT_STARTS = frozenset([*FORMULA_STARTS, "'"])


def _export_cells(rows: list[list[Any]]) -> tuple[list[list[Any]], int]:
    """``rows`` with every cell as :func:`csv_cell` writes it, and their :func:`quoting`: the same as
    ``[[csv_cell(c) for c in row] for row in rows]`` and ``quoting`` of that, without a call per cell (an ASCII
    text cell that does not start as a formula, or a number, is written unchanged; only other rows are mapped)."""
    if plain_cells([c for row in rows for c in row]):  # the usual case: one test over the joined text
        return rows, csv.QUOTE_MINIMAL
    suspect = _SUSPECT_STARTS
    out = [
        row
        if all(not isinstance(c, str) or (c.isascii() and c[:1] not in suspect) for c in row)
        else [csv_cell(c) for c in row]
        for row in rows
    ]
    text = "\n".join([c for row in out for c in row if isinstance(c, str)])
    return out, csv.QUOTE_ALL if "\r" in text else csv.QUOTE_MINIMAL


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
        header, rows, ending = MSACCUCMP_HEADER, _msaccucmp_rows(comparison.columns), "\r\n"
    else:
        (header, rows), ending = msprobe_rows(comparison), "\n"  # as pandas writes msprobe's
    rows, how = _export_cells(rows)
    with path.open("w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
        writer = csv.writer(fh, lineterminator=ending, quoting=how)
        writer.writerow(header)
        writer.writerows(rows)
    return path
