"""Data for looking at one target/benchmark tensor pair: statistics, histograms, samples, worst elements, bits.

Everything here is plain numpy and returns plain values, so notebook widgets, static HTML and reports only
display what these functions prepare. Big tensors are subsampled here (never in a view): a scatter never
holds more than ``max_points`` points.

Examples
--------
>>> t = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float16)
>>> b = np.array([1.0, 2.0, 3.5, 4.0], dtype=np.float32)
>>> worst = top_k_errors(t, b, k=1)
>>> worst.index.tolist(), worst["abs_err"].tolist()
([(2,)], [0.5])
>>> bit_fields(np.array([1.5], dtype=np.float16)).loc[0, ["sign", "exponent", "mantissa"]].tolist()
['0', '01111', '1000000000']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nbprec.dtypes import canonical_dtype
from nbprec.stats import as_float64, tensor_stats

#: Most points a scatter of one tensor pair holds (bqplot's SVG scatter stays responsive up to ~1e4).
MAX_SCATTER_POINTS = 10_000

#: Bit layout (exponent bits, mantissa bits) of the low-precision floats the bit view decomposes.
BIT_LAYOUTS: dict[str, tuple[int, int]] = {
    "float16": (5, 10),
    "bfloat16": (8, 7),
    "float32": (8, 23),
    "float8_e4m3fn": (4, 3),
    "float8_e5m2": (5, 2),
}


def sample_indices(n: int, max_points: int = MAX_SCATTER_POINTS, seed: int = 0) -> np.ndarray:
    """Sorted positions of at most ``max_points`` of ``n`` elements, drawn without replacement (reproducible).

    Examples
    --------
    >>> sample_indices(5, 10).tolist()
    [0, 1, 2, 3, 4]
    >>> len(sample_indices(1_000_000, 100))
    100
    """
    if n <= max_points:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=max_points, replace=False))


def _flat_pair(target: np.ndarray, bench: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = as_float64(np.asarray(target)).ravel()
    b = as_float64(np.asarray(bench)).ravel()
    if t.size != b.size:
        raise ValueError(f"target has {t.size} elements and benchmark {b.size}: element-wise views need equal sizes")
    return t, b


def stats_side_by_side(target: np.ndarray, bench: np.ndarray) -> pd.DataFrame:
    """Statistics of both tensors (rows: statistic; columns ``target``, ``bench``, ``diff``)."""
    ts, bs = tensor_stats(np.asarray(target)), tensor_stats(np.asarray(bench))
    rows = []
    for key in ts:
        tv = np.nan if ts[key] is None else float(ts[key])
        bv = np.nan if bs[key] is None else float(bs[key])
        rows.append((key, tv, bv, tv - bv))
    rows.append(("dtype", str(np.asarray(target).dtype), str(np.asarray(bench).dtype), np.nan))
    rows.append(("shape", str(np.shape(target)), str(np.shape(bench)), np.nan))
    return (
        pd.DataFrame(rows, columns=["statistic", "target", "bench", "diff"])
        .astype({"target": object, "bench": object})
        .set_index("statistic")
    )


def histograms(target: np.ndarray, bench: np.ndarray, bins: int = 50) -> pd.DataFrame:
    """Counts of both tensors' finite values over shared bins (columns ``left``, ``right``, ``target``, ``bench``)."""
    t, b = as_float64(np.asarray(target)).ravel(), as_float64(np.asarray(bench)).ravel()
    t, b = t[np.isfinite(t)], b[np.isfinite(b)]
    both = np.concatenate([t, b])
    if both.size == 0:
        return pd.DataFrame(columns=["left", "right", "target", "bench"])
    lo, hi = float(both.min()), float(both.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    tc, _ = np.histogram(t, bins=edges)
    bc, _ = np.histogram(b, bins=edges)
    return pd.DataFrame({"left": edges[:-1], "right": edges[1:], "target": tc, "bench": bc})


def scatter_sample(
    target: np.ndarray, bench: np.ndarray, max_points: int = MAX_SCATTER_POINTS, seed: int = 0
) -> pd.DataFrame:
    """Element pairs for a target-vs-benchmark scatter, subsampled to ``max_points``.

    Columns: ``position`` (flat index), ``target``, ``bench``, ``abs_err``, ``magnitude`` (``|bench|``).
    The worst elements (largest absolute error) are always kept, so a subsample never hides the outliers.
    """
    t, b = _flat_pair(target, bench)
    keep = sample_indices(t.size, max_points, seed)
    if t.size > max_points:
        with np.errstate(invalid="ignore"):
            err = np.abs(t - b)
        n_worst = min(max_points // 10, t.size)
        worst = np.argpartition(np.nan_to_num(err, nan=np.inf), -n_worst)[-n_worst:]
        keep = np.unique(np.concatenate([keep[: max_points - n_worst], worst]))
    with np.errstate(invalid="ignore"):
        err = np.abs(t[keep] - b[keep])
    return pd.DataFrame(
        {"position": keep, "target": t[keep], "bench": b[keep], "abs_err": err, "magnitude": np.abs(b[keep])}
    )


def error_by_position(target: np.ndarray, bench: np.ndarray, buckets: int = 512) -> pd.DataFrame:
    """Absolute error along the flat element order, as at most ``buckets`` buckets (max and mean per bucket)."""
    t, b = _flat_pair(target, bench)
    if t.size == 0:
        return pd.DataFrame(columns=["start", "stop", "max_abs_err", "mean_abs_err"])
    with np.errstate(invalid="ignore"):
        err = np.abs(t - b)
    err = np.where(np.isnan(err), np.inf, err)
    n = min(buckets, t.size)
    starts = np.linspace(0, t.size, n + 1).astype(np.int64)[:-1]
    starts = np.unique(starts)
    stops = np.append(starts[1:], t.size)
    with np.errstate(invalid="ignore"):
        maxes = np.maximum.reduceat(err, starts)
        means = np.add.reduceat(err, starts) / (stops - starts)
    return pd.DataFrame({"start": starts, "stop": stops, "max_abs_err": maxes, "mean_abs_err": means})


def error_by_magnitude(target: np.ndarray, bench: np.ndarray, bins: int = 40) -> pd.DataFrame:
    """Absolute and relative error against the benchmark magnitude, over log-spaced magnitude bins.

    Columns: ``lo``, ``hi`` (bin edges of ``|bench|``), ``count``, ``max_abs_err``, ``mean_abs_err``,
    ``mean_rel_err``. Zeros of the benchmark fall into the first bin.
    """
    t, b = _flat_pair(target, bench)
    mag = np.abs(b)
    ok = np.isfinite(t) & np.isfinite(b)
    t, b, mag = t[ok], b[ok], mag[ok]
    cols = ["lo", "hi", "count", "max_abs_err", "mean_abs_err", "mean_rel_err"]
    if t.size == 0:
        return pd.DataFrame(columns=cols)
    positive = mag[mag > 0]
    lo = float(positive.min()) if positive.size else 1e-12
    hi = float(mag.max()) if mag.max() > lo else lo * 10
    edges = np.geomspace(lo, hi, bins + 1)
    which = np.clip(np.searchsorted(edges, mag, side="right") - 1, 0, bins - 1)
    err = np.abs(t - b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mag > 0, err / mag, np.nan)
    count = np.bincount(which, minlength=bins)
    max_err = np.full(bins, np.nan)
    np.fmax.at(max_err, which, err)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_err = np.bincount(which, weights=err, minlength=bins) / count
        rel_ok = ~np.isnan(rel)
        mean_rel = np.bincount(which[rel_ok], weights=rel[rel_ok], minlength=bins) / np.bincount(
            which[rel_ok], minlength=bins
        )
    frame = pd.DataFrame(
        {
            "lo": edges[:-1],
            "hi": edges[1:],
            "count": count,
            "max_abs_err": max_err,
            "mean_abs_err": mean_err,
            "mean_rel_err": mean_rel,
        }
    )
    return frame[frame["count"] > 0].reset_index(drop=True)


def top_k_errors(target: np.ndarray, bench: np.ndarray, k: int = 20) -> pd.DataFrame:
    """The ``k`` elements with the largest absolute error, worst first, indexed by their n-d index.

    NaN/inf on one side only counts as the largest error. Columns: ``position`` (flat index), ``target``,
    ``bench``, ``abs_err``, ``rel_err``.
    """
    shape = np.shape(target)
    t, b = _flat_pair(target, bench)
    if t.size == 0:
        return pd.DataFrame(columns=["position", "target", "bench", "abs_err", "rel_err"])
    with np.errstate(invalid="ignore"):
        err = np.abs(t - b)
    both_nan = np.isnan(t) & np.isnan(b)
    key = np.where(both_nan, -1.0, np.where(np.isnan(err), np.inf, err))
    k = min(k, t.size)
    part = np.argpartition(key, -k)[-k:]
    order = part[np.lexsort((part, -key[part]))]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(b[order] != 0, err[order] / np.abs(b[order]), np.inf)
    index = [tuple(int(i) for i in np.unravel_index(p, shape)) for p in order] if shape else [()] * len(order)
    return pd.DataFrame(
        {"position": order, "target": t[order], "bench": b[order], "abs_err": err[order], "rel_err": rel},
        index=pd.Index(index, name="index", tupleize_cols=False),
    )


def bit_fields(values: np.ndarray, dtype: str | None = None) -> pd.DataFrame:
    """Sign, exponent and mantissa bits of float16/bfloat16/float32/float8 values.

    Parameters
    ----------
    values
        Values in their original dtype (ml_dtypes arrays for bfloat16/float8), or float values together with
        ``dtype`` naming the format to round them into first.
    dtype
        Canonical dtype name; defaults to the array's own.

    Returns
    -------
    pandas.DataFrame
        ``value``, ``sign``, ``exponent`` and ``mantissa`` (bit strings), ``unbiased_exponent`` and ``kind``
        (``normal``, ``subnormal``, ``zero``, ``inf``, ``nan``).
    """
    from nbprec.dtypes import NUMPY_DTYPES

    arr = np.asarray(values)
    name = canonical_dtype(dtype) if dtype else canonical_dtype(arr.dtype)
    if name not in BIT_LAYOUTS:
        raise ValueError(f"no bit layout for dtype {name!r}; known: {', '.join(BIT_LAYOUTS)}")
    exp_bits, man_bits = BIT_LAYOUTS[name]
    width = 1 + exp_bits + man_bits
    typed = arr.astype(NUMPY_DTYPES[name]).ravel()
    raw = typed.view({8: np.uint8, 16: np.uint16, 32: np.uint32}[width]).astype(np.uint64)
    sign = (raw >> np.uint64(width - 1)) & np.uint64(1)
    exponent = (raw >> np.uint64(man_bits)) & np.uint64((1 << exp_bits) - 1)
    mantissa = raw & np.uint64((1 << man_bits) - 1)
    bias = (1 << (exp_bits - 1)) - 1
    as_float = typed.astype(np.float64)
    kind = np.where(
        np.isnan(as_float),
        "nan",
        np.where(
            np.isinf(as_float),
            "inf",
            np.where(as_float == 0, "zero", np.where(exponent == 0, "subnormal", "normal")),
        ),
    )
    return pd.DataFrame(
        {
            "value": as_float,
            "sign": [format(int(s), "b") for s in sign],
            "exponent": [format(int(e), f"0{exp_bits}b") for e in exponent],
            "mantissa": [format(int(m), f"0{man_bits}b") for m in mantissa],
            "unbiased_exponent": np.where(exponent == 0, 1 - bias, exponent.astype(np.int64) - bias),
            "kind": kind,
        }
    )


@dataclass
class PairInspection:
    """Everything the tensor inspector shows for one target/benchmark pair, prepared in numpy.

    Attributes
    ----------
    name : str
        The target tensor's name.
    stats : pandas.DataFrame
        :func:`stats_side_by_side`.
    histogram : pandas.DataFrame
        :func:`histograms`.
    scatter : pandas.DataFrame
        :func:`scatter_sample` (at most ``max_points`` rows).
    by_magnitude, by_position : pandas.DataFrame
        :func:`error_by_magnitude`, :func:`error_by_position`.
    top_k : pandas.DataFrame
        :func:`top_k_errors`.
    bits : pandas.DataFrame
        :func:`bit_fields` of the target's worst elements and the benchmark values rounded to the target
        dtype (``side`` column), empty unless the target is a float format with a known bit layout.
    problem : str
        Why element-wise views are missing ('' when they are all there).
    """

    name: str
    stats: pd.DataFrame
    histogram: pd.DataFrame = field(default_factory=pd.DataFrame)
    scatter: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_magnitude: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_position: pd.DataFrame = field(default_factory=pd.DataFrame)
    top_k: pd.DataFrame = field(default_factory=pd.DataFrame)
    bits: pd.DataFrame = field(default_factory=pd.DataFrame)
    problem: str = ""


def inspect_pair(
    target: np.ndarray,
    bench: np.ndarray,
    *,
    name: str = "",
    k: int = 10,
    bins: int = 50,
    max_points: int = MAX_SCATTER_POINTS,
) -> PairInspection:
    """Prepare every inspector view of one tensor pair (see :class:`PairInspection`)."""
    stats = stats_side_by_side(target, bench)
    if np.size(target) != np.size(bench):
        return PairInspection(name, stats, problem=f"element counts differ ({np.size(target)} vs {np.size(bench)})")
    if np.asarray(target).dtype.kind in "biu" and np.asarray(bench).dtype.kind in "biu" and np.size(target) == 0:
        return PairInspection(name, stats, problem="empty tensors")
    top = top_k_errors(target, bench, k)
    bits = pd.DataFrame()
    t_name = canonical_dtype(np.asarray(target).dtype)
    if t_name in BIT_LAYOUTS and t_name != "float32" and len(top):
        flat_t = np.asarray(target).ravel()[top["position"].to_numpy()]
        flat_b = as_float64(np.asarray(bench)).ravel()[top["position"].to_numpy()]
        tb = bit_fields(flat_t).assign(side="target", position=top["position"].to_numpy())
        bb = bit_fields(flat_b, t_name).assign(side=f"bench as {t_name}", position=top["position"].to_numpy())
        bits = pd.concat([tb, bb]).sort_values(["position", "side"], kind="stable", ascending=[True, False])
        bits = bits.reset_index(drop=True)
    return PairInspection(
        name=name,
        stats=stats,
        histogram=histograms(target, bench, bins),
        scatter=scatter_sample(target, bench, max_points),
        by_magnitude=error_by_magnitude(target, bench),
        by_position=error_by_position(target, bench),
        top_k=top,
        bits=bits,
    )


def op_tensor_rows(table: pd.DataFrame, op: str) -> pd.DataFrame:
    """The comparison rows of one op's tensors (inputs and parameters first, then outputs), as a DataFrame."""
    rows = table[table["op"] == op]
    roles = {"input": 0, "parameter": 1, "output": 2, "gradient": 3}
    return rows.sort_values(by="role", key=lambda s: s.map(roles).fillna(9), kind="stable")


def describe_value(value: Any) -> str:
    """A short text form of a statistic for tables (6 significant digits, '' for NaN)."""
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else f"{float(value):.6g}"
    return str(value)
