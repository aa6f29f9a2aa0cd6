"""Per-tensor comparison metrics: the numbers of METRICS.md, computed in float64, in bounded memory.

:func:`tensor_metrics` compares a target tensor ``x`` (NPU / low precision) with a benchmark tensor
``y`` (fp32) and returns every column of :data:`METRIC_COLUMNS` plus a reason wherever a metric could
not be computed. Large tensors are processed in chunks (one cheap min/max pass, then one pass that
feeds every sum), so peak memory is a few chunk buffers whatever the tensor size.

Conventions (METRICS.md, checked against msprobe's own compare CSV in the tests):

- Every value is converted to float64 before any arithmetic; complex tensors are compared by magnitude
  (``abs``, as :func:`nbprec.stats.as_float64` does), and the reason says so.
- NaN/inf propagate: sums, maxima, cosine and KL become NaN/inf, the error ratios become NaN, and the
  reason counts the non-finite values. (msprobe instead zeroes NaN/inf found at the same positions on
  both sides, and gives up when the positions differ.)
- ``cosine``: a tensor whose L2 norm is <= eps (2.22e-16) counts as all zero, like msprobe. Both all
  zero -> 1.0; one all zero -> NaN with a reason; one element (0-d or size 1) -> 1.0 (msprobe writes
  "unsupported" there). Capped at 1.0. msprobe rounds cosine above 0.9999 to 6 decimals; nbprec does not.
- ``accumulated_rel_err``/``max_rel_err``/``mean_rel_err`` use ``abs(x - y) / abs(y)`` over
  ``abs(y) > eps`` only (0 elsewhere; the mean divides by all elements). msprobe's ``MaxRelativeErr``
  differs where ``y == 0`` and ``x != 0``: it adds the bench dtype's eps to both sides there, which gives
  ``abs(x) / eps`` (e.g. 7072.0 for x = 8.4e-4 against an fp32 zero).
- ``thousandth_ratio``/``five_thousandth_ratio`` follow msprobe exactly: the share of *all* elements
  with ``abs(x - y) / abs(y)`` strictly below 0.001 / 0.005, where an element with ``y == 0`` uses
  ``abs(x) / eps_bench`` (so 0 vs 0 passes and a nonzero against 0 fails unless it is below
  ``threshold * eps_bench``). ``eps_bench`` is the machine epsilon of the benchmark dtype as msprobe sees
  it: float16 and float64 keep theirs, integer/bool data is promoted to float64, anything else (float32,
  bfloat16, float8) is float32.
- ``kl_divergence``: min-max normalise each side (unchanged when max == min), floor at float32 eps,
  divide by the sum, ``sum(Px * log(Px / Py))``; results below eps are 0. Computed in one pass as
  ``T / Sx + log(Sy / Sx)`` with ``T = sum(ax * log(ax / ay))`` over the floored values ``ax``, ``ay``.
- ``target_std``/``bench_std`` are population standard deviations (ddof=0) from the sum and the sum of
  squares; when those cancel (``var < 1e-4 * mean(v**2)``, e.g. a layer-norm weight near 1) an exact
  second pass over ``(v - mean)**2`` is made instead.
- Sums of products use BLAS dot products over segments of 8,192 elements (batched through ``matmul``):
  OpenBLAS runs a dot product of more than 10,000 elements on all its threads, which collapses when the
  comparison engine already runs one worker per core. Plain sums use ``np.add.reduce`` (pairwise).
"""

from __future__ import annotations

import math

import numpy as np

from nbprec._record import Factory, Record
from nbprec.compare._kernels import Flat, Scratch, accumulate, dot, flat_pair, fused_sums, in_place_pair, parts, to_f64
from nbprec.compare._sums import (
    EPS,
    FLOAT32_EPS,
    FUSED,
    KERNEL,
    Sums,
    _finish,
    _one_pass_std,
    direct_sums,
    kl_offset_floor,
    sums_values,
    zero_side_reason,
)
from nbprec.errors import ComparisonError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EPS",
    "KERNEL",
    "METRIC_COLUMNS",
    "STAT_METRIC_COLUMNS",
    "MetricResult",
    "checksum_equal",
    "statistics_columns",
    "statistics_metrics",
    "tensor_metrics",
]

METRIC_COLUMNS: tuple[str, ...] = (
    "cosine",
    "max_abs_err",
    "mean_abs_err",
    "rmse",
    "rel_euclidean",
    "accumulated_rel_err",
    "max_rel_err",
    "mean_rel_err",
    "kl_divergence",
    "target_mean",
    "target_std",
    "bench_mean",
    "bench_std",
    "thousandth_ratio",
    "five_thousandth_ratio",
    "euclidean",
)

STAT_METRIC_COLUMNS: tuple[str, ...] = (
    "max_diff",
    "min_diff",
    "mean_diff",
    "norm_diff",
    "max_rel_diff",
    "min_rel_diff",
    "mean_rel_diff",
    "norm_rel_diff",
)


DEFAULT_CHUNK_SIZE = 1 << 16  # elements per chunk: 512 KiB per float64 buffer (cache-sized)
_BOOL_METRICS = ("cosine", "rel_euclidean")


class MetricResult(Record):
    """Metric values of one comparison and why any of them is missing.

    Parameters
    ----------
    values
        Column name -> float; NaN where the metric was not computed.
    reason
        ``''`` when everything was computed; otherwise a short reason a user can read.
    extremes_held
        Whether the ``extremes`` given to :func:`tensor_metrics` were the tensors' minima and maxima (NaN
        aside: a tensor holding NaN is read twice either way); ``None`` when none were given, they were not
        usable (not finite) or the numpy kernel ran.
    nonfinite
        How many NaN/inf values (target, benchmark) the payloads hold, when :func:`tensor_metrics` read them;
        ``None`` otherwise.

    Examples
    --------
    >>> r = tensor_metrics(np.ones(3, np.float32), np.ones(3, np.float32))
    >>> r["cosine"], r.reason, bool(r)
    (1.0, '', True)
    """

    values: dict[str, float] = Factory(dict)
    reason: str = ""
    extremes_held: bool | None = None
    nonfinite: tuple[int, int] | None = None

    def __getitem__(self, column: str) -> float:
        return self.values[column]

    def __bool__(self) -> bool:
        """True when no reason was given (every metric was computed)."""
        return not self.reason


#: the benchmark epsilon of the dtypes that do not take FLOAT32_EPS (see :func:`_eps_bench`)
_EPS_BENCH = {np.dtype(np.float16): float(np.finfo(np.float16).eps), np.dtype(np.float64): EPS}


def _eps_bench(dtype: np.dtype) -> float:
    """The epsilon msprobe adds where the benchmark is exactly zero (see the module docstring)."""
    eps = _EPS_BENCH.get(dtype)
    if eps is not None:
        return eps
    return EPS if dtype.kind in "biu" else FLOAT32_EPS


def _min_max(side: Flat, buf: np.ndarray, chunk: int) -> tuple[float, float]:
    """Minimum and maximum (in float64 terms, NaN propagating) of one side, chunk by chunk."""
    # numpy's float16 min/max has no SIMD loop: converting to float64 first is ~14x faster, same values
    native = side.dtype.isbuiltin == 1 and side.dtype.kind in "fiu" and side.dtype != np.float16
    lows, highs = [], []
    side.begin()
    for start, stop in parts(side.size, chunk):
        part = side.part(start, stop)
        if not native:
            part = to_f64(part, buf[: stop - start])
        lows.append(part.min())
        highs.append(part.max())
        side.done(stop)
    return float(np.min(np.array(lows, dtype=np.float64))), float(np.max(np.array(highs, dtype=np.float64)))


def _central_m2(side: Flat, mean: float, buf: np.ndarray, chunk: int) -> float:
    """sum((v - mean)**2) in a second pass: the exact variance when sxx/n - mean**2 would cancel."""
    total = 0.0
    side.begin()
    for start, stop in parts(side.size, chunk):
        part = to_f64(side.part(start, stop), buf[: stop - start])
        np.subtract(part, mean, out=part)
        total += dot(part, part)
        side.done(stop)
    return total


def _std(side: Flat, s: float, ss: float, n: int, chunk: int, shift: float = 0.0) -> float:
    """Population std from the sum and sum of squares of ``v - shift``, with an exact pass when they cancel."""
    std = _one_pass_std(s, ss, n)
    if std is not None:
        return std
    var = _central_m2(side, shift + s / n, np.empty(min(n, chunk)), chunk) / n
    return math.sqrt(max(var, 0.0)) if not math.isnan(var) else math.nan


def _nonfinite_reason(fx: Flat, fy: Flat, chunk: int) -> tuple[str, int, int]:
    """('target has 2 NaN, 1 inf; ...' for the sides holding non-finite values, and each side's count): by the
    compiled kernel's count of their bit patterns where it reads the side's dtype (a tenth of the time of numpy's
    conversion, isnan and isinf on a float16 side, 2026-12-01), else with numpy on the values as float64."""
    parts_, counts = [], []
    for label, side in (("target", fx), ("benchmark", fy)):
        n_nan = n_inf = 0
        if side.code is not None and FUSED is not None:
            side.begin()
            for start, stop in parts(side.size, chunk):
                found = FUSED.nonfinite_counts(side.part(start, stop), side.code)
                n_nan, n_inf = n_nan + found[0], n_inf + found[1]
                side.done(stop)
        elif side.dtype.kind in "fc" or side.dtype.isbuiltin != 1:
            buf = np.empty(min(side.size, chunk), dtype=np.float64)
            side.begin()
            for start, stop in parts(side.size, chunk):
                part = to_f64(side.part(start, stop), buf[: stop - start])
                n_nan += int(np.count_nonzero(np.isnan(part)))
                n_inf += int(np.count_nonzero(np.isinf(part)))
                side.done(stop)
        if n_nan or n_inf:
            parts_.append(f"{label} has {n_nan} NaN, {n_inf} inf")
        counts.append(n_nan + n_inf)
    return ("non-finite values: " + "; ".join(parts_) if parts_ else ""), counts[0], counts[1]


def _numpy_sums(fx: Flat, fy: Flat, eps_b: float, chunk: int) -> Sums:
    """Every running sum of one pair with numpy, chunk by chunk (the fallback of the compiled kernel)."""
    n = fx.size
    scratch = Scratch(min(n, chunk))
    rows = scratch.rows
    acc = Sums()
    if n <= chunk:  # one chunk: convert once, take the minima and maxima from the float64 rows
        xs, ys = to_f64(fx.part(0, n), rows[0]), to_f64(fy.part(0, n), rows[1])
        kl = ((float(xs.min()), float(xs.max())), (float(ys.min()), float(ys.max())))
    else:
        kl = (_min_max(fx, rows[0], chunk), _min_max(fy, rows[0], chunk))
    (off_x, floor_x), (off_y, floor_y) = (kl_offset_floor(lo, hi - lo) for lo, hi in kl)
    scratch.set_floors(floor_x, floor_y)
    kl = (off_x, off_y)
    fx.begin()
    fy.begin()
    for start, stop in parts(n, chunk):
        size = stop - start
        if n > chunk:
            xs = to_f64(fx.part(start, stop), rows[0, :size])
            ys = to_f64(fy.part(start, stop), rows[1, :size])
        accumulate(xs, ys, scratch, acc, kl, eps_b)
        fx.done(stop)
        fy.done(stop)
    return acc


def tensor_metrics(
    target: np.ndarray,
    bench: np.ndarray,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    kernel: str = "auto",
    extremes: tuple[float, float, float, float] | None = None,
) -> MetricResult:
    """Every metric of :data:`METRIC_COLUMNS` for one target/benchmark tensor pair.

    Parameters
    ----------
    target
        The tensor under test (``x``): any numeric, bool or complex numpy array, including ml_dtypes
        bfloat16/float8. Memory-mapped arrays are read chunk by chunk.
    bench
        The benchmark tensor (``y``), same element count as ``target``.
    chunk_size
        Elements processed at once; peak extra memory is about ``9 * 8 * chunk_size`` bytes.
    kernel
        ``"auto"`` (default) uses the compiled one-pass kernel when the package was built with it
        (:data:`KERNEL` says which is in use), else numpy; ``"c"`` or ``"numpy"`` force one.
    extremes
        ``(target min, target max, bench min, bench max)`` as recorded in the dumps' statistics, if known.
        KL needs them before its pass; with them the compiled kernel reads the pair once and checks them
        (wrong or missing ones cost one more pass, never a wrong result). A side whose pair is not usable (NaN,
        inf) has its extremes found first, the other side's are used as given.

    Returns
    -------
    MetricResult
        ``values`` holds every column (NaN where not computed), ``reason`` says why ('' if none).

    Examples
    --------
    >>> r = tensor_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0], dtype=np.float32))
    >>> r["max_abs_err"], r["max_rel_err"], r["thousandth_ratio"]
    (1.0, 0.25, 0.6666666666666666)
    >>> tensor_metrics(np.zeros(6), np.zeros(8)).reason
    'element count differs: 6 vs 8'
    """
    if kernel not in ("auto", "c", "numpy"):
        raise ComparisonError(f"unknown kernel {kernel!r}; use auto, c or numpy")
    if kernel == "c" and FUSED is None:
        raise ComparisonError(
            "the compiled kernel nbprec.compare._fused is not built: install a C compiler (gcc or clang) and "
            "reinstall nbprec (`make install`, or `pip install --force-reinstall --no-deps nbprec`); "
            'kernel="auto" uses the numpy kernel meanwhile'
        )
    x, y = np.asarray(target), np.asarray(bench)
    if x.size != y.size:
        return MetricResult(dict.fromkeys(METRIC_COLUMNS, math.nan), f"element count differs: {x.size} vs {y.size}")
    if x.size == 0:
        return MetricResult(dict.fromkeys(METRIC_COLUMNS, math.nan), "empty tensors")
    reasons = []
    if x.shape != y.shape:
        reasons.append(f"shape mismatch {x.shape} vs {y.shape}: compared flattened")
    if x.dtype.kind == "c" or y.dtype.kind == "c":
        reasons.append("complex tensors: compared magnitudes")
    n, chunk = x.size, max(1, int(chunk_size))
    eps_b = _eps_bench(y.dtype)
    fast = None  # the usual pair (contiguous, in memory or mapped, extremes known): one kernel call, no Flat
    pair = in_place_pair(x, y) if kernel != "numpy" and FUSED is not None else None
    if pair is not None and extremes is not None:
        fast = direct_sums(pair, eps_b, extremes)
    if fast is not None:
        done = sums_result(*fast, n, reasons)
        if done is not None:
            return done  # (no bool here: the kernel reads floats only)
    elif pair is not None and not reasons:  # no usable extremes (a dump that records none: CANN, TensorFlow)
        measured = FUSED.pair_metrics(*pair, extremes, eps_b)  # each side's extremes found first, as fused_sums does
        if measured is not None:
            return MetricResult(*measured)
    fx, fy = flat_pair(x, y)  # the general way; no copy of either side, whatever its layout
    with np.errstate(all="ignore"):
        held = None
        if kernel == "numpy" or FUSED is None:
            acc = _numpy_sums(fx, fy, eps_b, chunk)
            values = _finish(acc)
            values["target_std"] = _std(fx, acc.sx, acc.sxx, n, chunk)
            values["bench_std"] = _std(fy, acc.sy, acc.syy, n, chunk)
        else:
            acc, held = fused_sums(fx, fy, eps_b, chunk, extremes) if fast is None else fast
            values = _finish(acc)
            values["target_std"] = _std(fx, acc.cx, acc.cxx, n, chunk, acc.shift_x)
            values["bench_std"] = _std(fy, acc.cy, acc.cyy, n, chunk, acc.shift_y)
    counts = (0, 0)  # NaN/inf counted from the payloads (only when the sums say there are some)
    if not math.isfinite(acc.sxx + acc.syy):
        nonfinite, n_x, n_y = _nonfinite_reason(fx, fy, chunk)
        counts = (n_x, n_y)
        if nonfinite:
            values["thousandth_ratio"] = values["five_thousandth_ratio"] = math.nan
            reasons.append(nonfinite)
    elif math.isnan(values["cosine"]):
        reasons.append(zero_side_reason(acc))
    if x.dtype.kind == "b" or y.dtype.kind == "b":  # numpy bool (comparing dtypes with np.bool_ is slower)
        values = {k: (v if k in _BOOL_METRICS else math.nan) for k, v in values.items()}
        reasons.append("bool tensors: only cosine and RED")
    return MetricResult(values, "; ".join(reasons), held, counts)


def sums_result(acc: Sums, held: bool | None, n: int, reasons: list[str] | tuple[str, ...] = ()) -> MetricResult | None:
    """The metrics of a pair from the compiled kernel's sums of it alone, as :func:`tensor_metrics` gives them,
    with ``reasons`` found before (:func:`~nbprec.compare._sums.sums_values`); None when the pair needs its arrays
    again."""
    found = sums_values(acc, n)
    if found is None:
        return None
    values, reason = found
    return MetricResult(values, "; ".join([*reasons, reason] if reason else reasons), held, (0, 0))


#: The statistics a statistics-only pair is compared by (index columns of the same names).
STAT_KEYS = ("max", "min", "mean", "norm")


def _stat_value(stats: dict, key: str) -> float:
    """A statistic as float, NaN when absent or unreadable (accepts msprobe's capitalised keys)."""
    value = stats.get(key, stats.get(key.capitalize()))
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def statistics_metrics(target_stats: dict, bench_stats: dict) -> MetricResult:
    """Differences of max/min/mean/norm when only statistics were dumped (no tensor payloads).

    ``<stat>_diff`` is ``target - bench`` (signed, as msprobe's "Max diff"); ``<stat>_rel_diff`` is
    ``abs(target - bench) / abs(bench)`` as a fraction (msprobe prints the same in percent). A relative
    difference against a benchmark of exactly 0 is 0 when the target is 0 too, otherwise NaN with a reason.
    This is :func:`statistics_columns` on one pair (about 0.1 ms a call, numpy's overhead); for many pairs, call
    that instead, as the comparison does.

    Parameters
    ----------
    target_stats, bench_stats
        Mappings with keys ``max``, ``min``, ``mean``, ``norm`` (or ``Max``, ...); missing or None
        values give NaN and a reason.

    Returns
    -------
    MetricResult
        ``values`` keyed by :data:`STAT_METRIC_COLUMNS`.

    Examples
    --------
    >>> r = statistics_metrics({"max": 2.0, "min": -1.0, "mean": 0.5, "norm": 3.0},
    ...                        {"max": 2.5, "min": -1.0, "mean": 0.0, "norm": 3.0})
    >>> r["max_diff"], r["max_rel_diff"], r["min_rel_diff"], r.reason
    (-0.5, 0.2, 0.0, 'mean: benchmark is 0, relative difference undefined')
    """
    columns, reasons = statistics_columns(
        {key: np.array([_stat_value(target_stats, key)]) for key in STAT_KEYS},
        {key: np.array([_stat_value(bench_stats, key)]) for key in STAT_KEYS},
    )
    return MetricResult({c: float(v[0]) for c, v in columns.items()}, reasons[0])


def statistics_columns(
    target_stats: dict[str, np.ndarray], bench_stats: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """:func:`statistics_metrics` of many pairs at once: ``target_stats`` and ``bench_stats`` hold a float64 array
    per statistic (``max``, ``min``, ``mean``, ``norm``: an index's columns, NaN where unknown), one element per
    pair. Returns the metric columns (keyed by :data:`STAT_METRIC_COLUMNS`) and each pair's reason text, without a
    Python call per pair (msprobe's default dump task records statistics only: thousands of pairs). The rules are
    :func:`statistics_metrics`'s, which is this function on one-element arrays."""
    values: dict[str, np.ndarray] = {}
    missing, zero_bench = [], []
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for key in STAT_KEYS:
            t, b = (np.asarray(stats[key], dtype=np.float64) for stats in (target_stats, bench_stats))
            missing.append(np.isnan(t) | np.isnan(b))
            diff = t - b
            undefined = (diff != 0) & (b == 0)  # (NaN != 0: a NaN difference is not "equal")
            zero_bench.append(undefined)
            values[f"{key}_diff"] = diff
            values[f"{key}_rel_diff"] = np.where(diff == 0, 0.0, np.where(undefined, np.nan, np.abs(diff) / np.abs(b)))
    reasons = [""] * len(values["max_diff"])
    for i in np.flatnonzero(np.logical_or.reduce([*missing, *zero_bench])).tolist():
        gone = [k for k, flags in zip(STAT_KEYS, missing, strict=True) if flags[i]]
        parts = [f"statistics missing or NaN: {', '.join(gone)}"] if gone else []
        parts += [
            f"{k}: benchmark is 0, relative difference undefined"
            for k, f in zip(STAT_KEYS, zero_bench, strict=True)
            if f[i]
        ]
        reasons[i] = "; ".join(parts)
    return {c: values[c] for c in STAT_METRIC_COLUMNS}, reasons


def checksum_equal(a: str | None, b: str | None) -> bool | None:
    """Whether two checksums (md5/crc32 hex strings) are equal; None when either is absent.

    Examples
    --------
    >>> checksum_equal("ABCD1234", "abcd1234"), checksum_equal("abcd", "abce"), checksum_equal("", "abcd")
    (True, False, None)
    """
    texts = [str(v).strip().lower() if v is not None else "" for v in (a, b)]
    if any(text in ("", "nan", "none", "n/a", "-1") for text in texts):
        return None
    return texts[0] == texts[1]
