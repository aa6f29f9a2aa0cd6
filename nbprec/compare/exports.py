"""CSV exports of a comparison in nbprec's own layout and in the layouts of msaccucmp and msprobe.

The msaccucmp layout follows CANN's ``result_%Y%m%d%H%M%S.csv`` (its duplicated ``DataType`` header is kept,
so tools reading it by position still work); the msprobe layout follows ``msprobe compare``'s CSV columns.
Values nbprec could not compute are written as ``NaN`` with the reason in the fail-reason / message column.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from nbprec.errors import ComparisonError

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

MSPROBE_HEADER = [
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
    "Result",
    "Accuracy Reached or Not",
    "Err_message",
]


def _num(value: Any) -> str:
    if value is None:
        return "NaN"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "NaN" if math.isnan(f) else repr(f)


def _shape(value: Any) -> str:
    return "" if value is None else str(list(value))


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


def _msaccucmp_rows(table: pd.DataFrame) -> list[list[str]]:
    rows = []
    for i, r in enumerate(table.itertuples(index=False)):
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
                _shape(r.target_shape),
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


def _msprobe_rows(table: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in table.itertuples(index=False):
        result = {"pass": "pass", "fail": "error"}.get(r.status, "N/A")
        rows.append(
            [
                r.target_name,
                r.bench_name or "N/A",
                r.target_dtype,
                r.bench_dtype or "N/A",
                _shape(r.target_shape),
                _shape(r.bench_shape) or "N/A",
                _num(r.cosine),
                _num(r.euclidean),
                _num(r.max_abs_err),
                _num(r.max_rel_err),
                _num(r.thousandth_ratio),
                _num(r.five_thousandth_ratio),
                _num(r.target_max),
                _num(r.target_min),
                _num(r.target_mean),
                _num(r.target_norm),
                _num(r.bench_max),
                _num(r.bench_min),
                _num(r.bench_mean),
                _num(r.bench_norm),
                result,
                "Yes" if r.status == "pass" else ("No" if r.status == "fail" else "N/A"),
                r.reason,
            ]
        )
    return rows


def write_csv(comparison: Comparison, path: Path, layout: str = "nbprec") -> Path:
    """Write ``comparison`` to ``path`` in one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise ComparisonError(f"unknown CSV layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    table = comparison.table
    if layout == "nbprec":
        table.to_csv(path, index=False)
        return path
    header, rows = (
        (MSACCUCMP_HEADER, _msaccucmp_rows(table)) if layout == "msaccucmp" else (MSPROBE_HEADER, _msprobe_rows(table))
    )
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path
