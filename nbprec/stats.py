"""Tensor statistics computed in float64, the same way for every format and for the capture."""

from __future__ import annotations

import numpy as np

STAT_COLUMNS = (
    "min",
    "max",
    "mean",
    "std",
    "norm",
    "abs_max",
    "nan_count",
    "inf_count",
    "zero_count",
)


def as_float64(array: np.ndarray) -> np.ndarray:
    """A float64 (or complex128 -> magnitude) view of any numeric/bool array, for statistics and metrics."""
    if array.dtype.kind == "c":
        return np.abs(array).astype(np.float64)
    return np.asarray(array).astype(np.float64, copy=False)


def tensor_stats(array: np.ndarray) -> dict[str, float | int | None]:
    """Statistics of one tensor, in float64, ignoring nothing.

    ``min``/``max``/``mean``/``std``/``norm``/``abs_max`` are over the finite values only (so that one
    inf does not hide the rest); ``nan_count`` and ``inf_count`` say how many values were left out.
    An empty tensor gives ``None`` for the value statistics and zeros for the counts.

    Examples
    --------
    >>> s = tensor_stats(np.array([1.0, -3.0, np.inf, 0.0], dtype=np.float16))
    >>> s["min"], s["max"], s["inf_count"], s["zero_count"]
    (-3.0, 1.0, 1, 1)
    """
    x = as_float64(np.asarray(array)).ravel()
    n = x.size
    finite_mask = np.isfinite(x)
    n_finite = int(finite_mask.sum())
    nan_count = int(np.isnan(x).sum())
    inf_count = n - n_finite - nan_count
    zero_count = int(np.count_nonzero(x == 0))
    if n_finite == 0:
        empty: dict[str, float | int | None] = dict.fromkeys(STAT_COLUMNS[:6])
        empty.update(nan_count=nan_count, inf_count=inf_count, zero_count=zero_count)
        return empty
    f = x if n_finite == n else x[finite_mask]
    mn, mx = float(f.min()), float(f.max())
    return {
        "min": mn,
        "max": mx,
        "mean": float(f.mean()),
        "std": float(f.std()),
        "norm": float(np.sqrt(np.dot(f, f))),
        "abs_max": max(abs(mn), abs(mx)),
        "nan_count": nan_count,
        "inf_count": inf_count,
        "zero_count": zero_count,
    }
