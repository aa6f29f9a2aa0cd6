"""Pass/fail rules: values, not code paths.

A :class:`Rule` is a small frozen object holding thresholds on metric columns. It decides, for every row of
a comparison table, whether the tensor passes. Presets reproduce the thresholds users know from the
Ascend tools; :func:`dtype_aware` (the default) scales its tolerance with the precision of the lower-precision
side, so ordinary bfloat16 rounding against a float32 benchmark is not flagged as an error.

Examples
--------
>>> rule = Rule.from_thresholds("strict", cosine=0.999, max_abs_err=1e-3)
>>> [t.describe() for t in rule.thresholds]
['cosine >= 0.999', 'max_abs_err <= 0.001']
>>> get_rule("cann").name
'cann'
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from nbprec._record import Record, replace
from nbprec.columns import Columns, factorize, group_codes, text_in
from nbprec.dtypes import EPSILON
from nbprec.errors import ComparisonError

#: A comparison table: :class:`~nbprec.columns.Columns`, or a pandas DataFrame of the same columns.
Table = Columns | Any

#: Metrics where larger is better (a threshold is a lower bound); every other metric is an upper bound.
HIGHER_IS_BETTER = frozenset({"cosine", "thousandth_ratio", "five_thousandth_ratio"})
#: Metrics a threshold may bound from above (see :func:`threshold_rule`).
_UPPER_METRICS = frozenset(
    {
        "rel_euclidean",
        "max_abs_err",
        "mean_abs_err",
        "rmse",
        "max_rel_err",
        "mean_rel_err",
        "accumulated_rel_err",
        "kl_divergence",
        "euclidean",
    }
)

STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_NA = "n/a"


class Threshold(Record):
    """One bound on one metric column: ``metric >= value`` (higher is better) or ``metric <= value``.

    ``strict`` makes the bound exclusive (``>`` / ``<``), as some tools define theirs.
    """

    metric: str
    value: float
    strict: bool = False

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def describe(self) -> str:
        op = (">" if self.strict else ">=") if self.higher_is_better else ("<" if self.strict else "<=")
        return f"{self.metric} {op} {self.value:g}"

    def passes(self, values: Any, bound: float | np.ndarray | None = None) -> np.ndarray:
        """Boolean pass array against ``bound`` (default :attr:`value`); NaN metric values give False."""
        v = np.asarray(values, dtype=np.float64)
        b = self.value if bound is None else bound
        with np.errstate(invalid="ignore"):
            if self.higher_is_better:
                return v > b if self.strict else v >= b
            return v < b if self.strict else v <= b


# Tolerance of the dtype-aware rule per lower-precision dtype: (min cosine, max relative Euclidean distance).
# Calibrated on real runs (bf16/fp16 vs fp32 of the same model); documented in docs/compare.md.
DTYPE_TOLERANCE: dict[str, tuple[float, float]] = {
    "float64": (0.999999, 1e-5),
    "float32": (0.9999, 1e-3),
    "float16": (0.999, 0.02),
    "bfloat16": (0.99, 0.08),
    "float8_e4m3fn": (0.95, 0.3),
    "float8_e5m2": (0.9, 0.45),
}
_PRECISION_RANK = ["float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "float32", "float64"]


def lower_precision(*dtypes: str) -> str:
    """The lowest-precision float dtype among ``dtypes`` ('' when none is a float nbprec knows).

    >>> lower_precision("float32", "bfloat16"), lower_precision("int64", "bool")
    ('bfloat16', '')
    """
    ranks = [_PRECISION_RANK.index(d) for d in dtypes if d in _PRECISION_RANK]
    return _PRECISION_RANK[min(ranks)] if ranks else ""


def column(table: Table, name: str, dtype: Any = None) -> np.ndarray:
    """The column ``name`` of a table (:class:`~nbprec.columns.Columns` or DataFrame) as a numpy array."""
    values = table[name]
    return values if isinstance(values, np.ndarray) and dtype is None else np.asarray(values, dtype=dtype)


#: Per row, a code into the list of distinct lower-precision dtypes, and that list (:func:`precision_codes`).
PrecisionCodes = tuple[np.ndarray, list[str]]


def precision_codes(table: Table) -> PrecisionCodes:
    """Per row, a code into the list of distinct lower-precision dtypes (:func:`lower_precision` of its
    ``target_dtype`` and ``bench_dtype``, or its ``precision`` column): computed once per distinct pair of dtypes
    (a comparison has a handful), not once per row."""
    if "precision" in table:
        codes, names = factorize(column(table, "precision", object))
        lows = [*map(str, names), ""]
        return np.where(codes < 0, len(lows) - 1, codes), lows
    target, target_names = factorize(column(table, "target_dtype", object))
    bench, bench_names = factorize(column(table, "bench_dtype", object))
    width = len(bench_names) + 1
    pairs = (target + 1) * width + (bench + 1)  # -1 (missing) becomes 0 on either side
    names_t = ["", *map(str, target_names)]
    names_b = ["", *map(str, bench_names)]
    distinct, codes = np.unique(pairs, return_inverse=True)
    lows = [lower_precision(names_t[p // width], names_b[p % width]) for p in distinct]
    return codes.reshape(-1), lows


def row_precision(table: Table) -> np.ndarray:
    """Per row, :func:`lower_precision` of its ``target_dtype`` and ``bench_dtype``."""
    codes, lows = precision_codes(table)
    return np.array(lows, dtype=object)[codes] if len(codes) else np.array([], dtype=object)


def _per_row(
    table: Table, per_dtype: Mapping[str, float], default: float, codes: PrecisionCodes | None = None
) -> np.ndarray:
    """Per row, ``per_dtype`` of its lower-precision dtype (``default`` where it has none); ``codes``: the
    table's :func:`precision_codes`, when the caller has them already."""
    codes, lows = codes or precision_codes(table)
    return np.array([per_dtype.get(low, default) for low in lows], dtype=np.float64)[codes]


def precision_rank(dtype: str) -> int:
    """Position of a float dtype from lowest (0) to highest precision; ``len(ranks)`` for non-floats."""
    return _PRECISION_RANK.index(dtype) if dtype in _PRECISION_RANK else len(_PRECISION_RANK)


def one_run(table: Table) -> bool:
    """Whether every row of the table has the same step and rank (true for an empty table)."""
    step, rank = column(table, "step"), column(table, "rank")
    return not len(step) or bool((step == step[0]).all() and (rank == rank[0]).all())


def bench_magnitude(table: Table) -> np.ndarray:
    """Per row, the benchmark's largest magnitude: max(|bench_max|, |bench_min|) (NaN only when both are)."""
    return np.fmax(np.abs(column(table, "bench_max", np.float64)), np.abs(column(table, "bench_min", np.float64)))


def running_precision(table: Table) -> np.ndarray:
    """Per row, the lowest float precision the target run has used up to that row's op (and the bench dtype).

    A float32 tensor computed from bfloat16 results carries bfloat16 rounding error; judging it by float32
    tolerances would flag inherited noise. Rows must be in execution order within each step and rank.
    """
    ranks = {d: precision_rank(d) for d in _PRECISION_RANK}
    none = len(_PRECISION_RANK)
    t_rank = np.array([ranks.get(d, none) for d in column(table, "target_dtype", object).tolist()], dtype=np.int64)
    b_rank = np.array([ranks.get(d, none) for d in column(table, "bench_dtype", object).tolist()], dtype=np.int64)
    if one_run(table):
        running = np.minimum.accumulate(t_rank) if len(t_rank) else t_rank
    else:  # per (step, rank) stream
        codes, n_groups = group_codes(column(table, "step"), column(table, "rank"))
        running = np.empty_like(t_rank)
        for group in range(n_groups):
            rows = np.flatnonzero(codes == group)
            running[rows] = np.minimum.accumulate(t_rank[rows])
    lowest = np.minimum(running, b_rank)
    names = np.array([*_PRECISION_RANK, ""], dtype=object)
    # a non-float tensor (ids, masks) keeps its own '' so that it is judged by the plain thresholds
    keep = (t_rank < none) | (b_rank < none)
    return np.where(keep, names[lowest], "").astype(object)


class Rule(Record):
    """A pass/fail rule over comparison metrics.

    Parameters
    ----------
    name
        Short name shown in tables and reports.
    thresholds
        Bounds a passing tensor meets.
    combine
        ``"all"``: a tensor passes when it meets every bound (fails when any bound is missed);
        ``"any"``: it fails only when it misses every bound (ptdbg's "cosine < 0.99 and max abs err > 0.001").
    dtype_aware
        When true, the cosine and rel_euclidean bounds come from :data:`DTYPE_TOLERANCE` for each row's
        lower-precision dtype instead of ``thresholds``.
    description
        Where the thresholds come from.
    statistics
        The relative tolerance of rows compared by statistics only (no payloads, no cosine): they pass when
        the L2 norms differ by at most this fraction and the max, min and mean by at most this fraction of
        the benchmark's magnitude. Each row's dtype tolerance (:data:`DTYPE_TOLERANCE`, RED column) is a
        floor, so low-precision rounding is never flagged. ``None``: derived from the thresholds (the
        ``rel_euclidean`` bound, else the RED a ``cosine`` bound allows, ``sqrt(2 (1 - cosine))``, else the
        ``max_rel_err`` bound, else 0.05); a dtype-aware rule uses the dtype tolerance alone.
    """

    name: str
    thresholds: tuple[Threshold, ...]
    combine: Literal["all", "any"] = "all"
    dtype_aware: bool = False
    description: str = ""
    statistics: float | None = None

    def statistics_tolerance(self) -> float:
        """The rule's own tolerance for statistics-only rows (before the dtype floor; see ``statistics``)."""
        if self.statistics is not None:
            return float(self.statistics)
        by_metric = {t.metric: t.value for t in self.thresholds}
        if "rel_euclidean" in by_metric:
            return by_metric["rel_euclidean"]
        if "cosine" in by_metric:
            return float(np.sqrt(2.0 * max(1.0 - by_metric["cosine"], 0.0)))
        return by_metric.get("max_rel_err", 0.05)

    @classmethod
    def from_thresholds(cls, name: str, combine: Literal["all", "any"] = "all", **bounds: float) -> Rule:
        """A rule from keyword bounds, e.g. ``Rule.from_thresholds("mine", cosine=0.99, max_rel_err=0.01)``."""
        return cls(name, tuple(Threshold(m, float(v)) for m, v in bounds.items()), combine=combine)

    @property
    def primary_metric(self) -> str:
        """The metric the rule leads with (used to rank ops and draw trends)."""
        return self.thresholds[0].metric if self.thresholds else "cosine"

    def with_threshold(self, metric: str, value: float) -> Rule:
        """A copy with the bound on ``metric`` set to ``value`` (added when absent)."""
        kept = [t if t.metric != metric else replace(t, value=float(value)) for t in self.thresholds]
        if all(t.metric != metric for t in self.thresholds):
            kept.append(Threshold(metric, float(value)))
        return replace(self, thresholds=tuple(kept), dtype_aware=False, name=f"{self.name}*")

    def describe(self) -> str:
        joiner = " and " if self.combine == "all" else " or "
        text = joiner.join(t.describe() for t in self.thresholds)
        if self.dtype_aware:
            text += " (bounds scale with the lower-precision dtype)"
        return f"{self.name}: {text}"

    def _bounds_for(self, table: Table, codes: PrecisionCodes) -> list[tuple[Threshold, np.ndarray]]:
        """Each threshold with the per-row bound values (constant unless the rule is dtype-aware)."""
        n = len(table)
        out = []
        for t in self.thresholds:
            if self.dtype_aware and t.metric in ("cosine", "rel_euclidean"):
                col = 0 if t.metric == "cosine" else 1
                values = _per_row(table, {d: tol[col] for d, tol in DTYPE_TOLERANCE.items()}, t.value, codes)
            else:
                values = np.full(n, t.value, dtype=np.float64)
            out.append((t, values))
        return out

    def evaluate(self, table: Table, *, precision: PrecisionCodes | None = None) -> np.ndarray:
        """Status of each row (an ``object`` array): ``"pass"``, ``"fail"`` or ``"n/a"`` (no metric this rule uses
        was computed).

        Rows compared by checksum pass or fail on the checksum. Under a dtype-aware rule, rows compared by
        statistics only are judged on the relative differences of their norms and extremes, and rows whose
        benchmark is ~0 next to the op's inputs on absolute error; other rules judge only their own metrics
        (statistics-only rows are then ``"n/a"``). A target with NaN/inf where the benchmark is finite fails.
        ``table`` is a :class:`~nbprec.columns.Columns` or a DataFrame of the comparison's columns; ``precision``
        its :func:`precision_codes`, when the caller has them (a comparison judged by several rules finds them once).
        """
        n = len(table)
        if n == 0:
            return np.array([], dtype=object)
        known = np.zeros(n, dtype=bool)
        passed = np.ones(n, dtype=bool) if self.combine == "all" else np.zeros(n, dtype=bool)
        precision = precision or precision_codes(table)
        bounds = self._bounds_for(table, precision)
        for threshold, bound in bounds:
            if threshold.metric not in table:
                continue
            values = column(table, threshold.metric, np.float64)
            has = ~np.isnan(values)
            ok = threshold.passes(values, bound)
            known |= has
            passed = (passed & (ok | ~has)) if self.combine == "all" else (passed | ok)
        status = np.where(known, np.where(passed, STATUS_PASS, STATUS_FAIL), STATUS_NA).astype(object)
        if self.dtype_aware:
            tol = _red_bounds(bounds, n)
            status = self._apply_statistics(table, status, tol)
            status = self._apply_negligible_bench(table, status, tol)
        else:  # statistics-only rows: the rule's own tolerance, floored by each row's dtype tolerance
            floor = np.fmax(self.statistics_tolerance(), _dtype_red(table, precision))
            status = self._apply_statistics(table, status, floor)
        status = _apply_nonfinite(table, status)
        return _apply_checksum(table, status).astype(object)

    def _apply_statistics(self, table: Table, status: np.ndarray, tol: np.ndarray) -> np.ndarray:
        """Rows compared by statistics only: judged by the relative difference of their L2 norms, and by the
        differences of their max, min and mean relative to the benchmark's magnitude."""
        if "norm_rel_diff" not in table or "compare_mode" not in table:
            return status
        rows = column(table, "compare_mode", object) == "statistics"
        if not rows.any():
            return status
        scale = bench_magnitude(table)
        norm_ok = column(table, "norm_rel_diff", np.float64) <= tol
        with np.errstate(invalid="ignore"):
            ext_ok = np.ones(len(table), dtype=bool)
            for name in ("max_diff", "min_diff", "mean_diff"):
                if name in table:  # NaN (a statistic not recorded on one side) does not fail by itself
                    diff = np.abs(column(table, name, np.float64))
                    ext_ok &= ~(diff > tol * scale)
        known = ~np.isnan(column(table, "norm_rel_diff", np.float64))
        judged = np.where(known, np.where(norm_ok & ext_ok, STATUS_PASS, STATUS_FAIL), STATUS_NA)
        return np.where(rows, judged, status)

    def _apply_negligible_bench(self, table: Table, status: np.ndarray, tol: np.ndarray) -> np.ndarray:
        """A benchmark tensor that is ~0 next to its op's inputs (:func:`below_noise`, at most the tolerance times
        the op's input scale) is judged by absolute error: it passes when its max abs error is within the tolerance
        times the op's input scale. Gradients that are mathematically zero (the key bias of attention, a cancelling
        sum) come out as rounding noise in both runs; their cosine and relative errors compare noise with noise.
        """
        if "op_input_scale" not in table or not ("max_abs_err" in table or "max_diff" in table):
            return status
        with np.errstate(invalid="ignore"):
            err_ok = abs_error(table) <= tol * column(table, "op_input_scale", np.float64)
        return np.where((status == STATUS_FAIL) & below_noise(table, tol) & err_ok, STATUS_PASS, status)


#: How far above its dtype's epsilon (times its op's input scale) a benchmark tensor may be and still count as
#: rounding noise (:func:`below_noise`): the noise of a sum of n rounded terms grows about as sqrt(n), and 2^12
#: covers n up to 2^24 (float32: 4.9e-4 of the input scale).
NOISE_GROWTH = 2.0**12


def below_noise(table: Table, cap: float | np.ndarray) -> np.ndarray:
    """Per row, whether its benchmark could be what rounding leaves of a mathematically zero result at its op's
    input scale (:func:`noise_floor` below that scale; False where it is unknown). A tensor merely small next to its
    op's inputs (a mean's gradient, one value of one sign: 1/n of what it got) carries their signal."""
    with np.errstate(invalid="ignore"):
        return noise_floor(table, cap) < column(table, "op_input_scale", np.float64)


def noise_floor(table: Table, cap: float | np.ndarray) -> np.ndarray:
    """Per row, the least scale its benchmark counts as rounding noise at: all zeros, or values of both signs (a
    cancelling sum's noise) whose largest magnitude is below :data:`NOISE_GROWTH` epsilons of its dtype (at most
    ``cap``) times that scale. Infinite for values of one sign and for parameters (stored values); NaN where the
    benchmark has no statistics."""
    n = len(table)
    share = np.full(n, math.inf)
    if "bench_dtype" in table:
        codes, names = factorize(column(table, "bench_dtype", object))
        per_dtype = [NOISE_GROWTH * EPSILON.get(name, math.inf) for name in names]
        share = np.array([*per_dtype, math.inf], dtype=np.float64)[codes]  # (code -1, no dtype: the last)
    low, high = column(table, "bench_min", np.float64), column(table, "bench_max", np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        noise = ((low < 0) & (high > 0)) | ((low == 0) & (high == 0)) | np.isnan(low) | np.isnan(high)
        if "role" in table:
            noise &= ~text_in(column(table, "role", object), ("parameter",))
        return np.where(noise, np.fmax(np.abs(low), np.abs(high)) / np.fmin(share, cap), math.inf)


def abs_error(table: Table) -> np.ndarray:
    """Per row, the max abs error; with statistics only, the larger difference of the extremes stands in."""
    n = len(table)
    err = column(table, "max_abs_err", np.float64) if "max_abs_err" in table else np.full(n, np.nan)
    if "max_diff" in table:
        stat_err = np.fmax(np.abs(column(table, "max_diff", np.float64)), np.abs(column(table, "min_diff", np.float64)))
        err = np.where(np.isnan(err), stat_err, err)
    return err


def _dtype_red(table: Table, codes: PrecisionCodes | None = None) -> np.ndarray:
    """Per row, the RED tolerance of its lower-precision dtype (:data:`DTYPE_TOLERANCE`); 0 for non-floats."""
    return _per_row(table, {d: tol[1] for d, tol in DTYPE_TOLERANCE.items()}, 0.0, codes)


def _red_bounds(bounds: list[tuple[Threshold, np.ndarray]], n: int) -> np.ndarray:
    """The relative-error tolerance of each row: the rule's rel_euclidean bound (0.05 if it has none)."""
    for threshold, bound in bounds:
        if threshold.metric == "rel_euclidean":
            return bound
    return np.full(n, 0.05)


def _apply_nonfinite(table: Table, status: np.ndarray) -> np.ndarray:
    """A tensor with NaN/inf where the benchmark has none fails, whatever its metrics say."""
    if "target_nonfinite" in table and "bench_nonfinite" in table:
        t = np.nan_to_num(column(table, "target_nonfinite", np.float64), nan=0.0) > 0
        b = np.nan_to_num(column(table, "bench_nonfinite", np.float64), nan=0.0) > 0
        status = np.where(t & ~b, STATUS_FAIL, status)
    return status


def _apply_checksum(table: Table, status: np.ndarray) -> np.ndarray:
    if "checksum_match" not in table or "compare_mode" not in table:
        return status
    mask = column(table, "compare_mode", object) == "checksum"
    if not mask.any():
        return status
    flags = column(table, "checksum_match", object)
    known = np.fromiter((v is not None and v == v for v in flags.tolist()), bool, len(flags))
    match = np.fromiter((bool(v) if k else False for v, k in zip(flags.tolist(), known, strict=True)), bool, len(flags))
    return np.where(mask & known, np.where(match, STATUS_PASS, STATUS_FAIL), status)


@functools.cache
def _presets() -> Mapping[str, Rule]:
    """The preset rules by name, made once (rules are frozen records; the mapping is read-only)."""
    return MappingProxyType(
        {
            "default": Rule(
                "default",
                (Threshold("cosine", 0.99), Threshold("rel_euclidean", 0.05)),
                dtype_aware=True,
                description="nbprec's dtype-aware default: bounds scale with the lower-precision dtype of each pair",
            ),
            "precision_tool": Rule(
                "precision_tool",
                (Threshold("cosine", 0.98, strict=True),),
                description="precision_tool `vcs`: flags output cosine <= 0.98",
            ),
            "cann": Rule(
                "cann",
                (
                    Threshold("cosine", 0.99, strict=True),
                    Threshold("rel_euclidean", 0.05, strict=True),
                    Threshold("kl_divergence", 0.005, strict=True),
                ),
                description="CANN recommendation: cosine > 0.99, RED < 0.05, KL < 0.005",
            ),
            "msprobe": Rule(
                "msprobe",
                (Threshold("cosine", 0.99), Threshold("max_rel_err", 0.01, strict=True)),
                description="msprobe: cosine >= 0.99 and max relative error < 0.01",
                statistics=0.01,
            ),
            "ptdbg": Rule(
                "ptdbg",
                (Threshold("cosine", 0.99), Threshold("max_abs_err", 0.001)),
                combine="any",
                description="ptdbg_ascend: not reached when cosine < 0.99 and max abs error > 0.001",
                statistics=0.05,
            ),
        }
    )


def preset_names() -> list[str]:
    """Names accepted by :func:`get_rule`."""
    return list(_presets())


def threshold_rule(metric: str, value: float) -> Rule:
    """A rule of one bound, as precision_tool's ``vcs -c 0.98``: ``metric`` at least (or at most) ``value``.

    >>> threshold_rule("cosine", 0.98).describe()
    'cosine>=0.98: cosine >= 0.98'
    """
    known = {*HIGHER_IS_BETTER, *_UPPER_METRICS}
    if metric not in known:
        raise ComparisonError(f"unknown metric {metric!r} for a threshold; use one of {', '.join(sorted(known))}")
    bound = Threshold(metric, float(value))
    name = f"{metric}{'>=' if bound.higher_is_better else '<='}{float(value):g}"
    return Rule(name, (bound,), description=f"one threshold given on the command line: {bound.describe()}")


def get_rule(rule: str | Rule | None) -> Rule:
    """A :class:`Rule` from a preset name, a threshold ``"metric=value"`` (e.g. ``"cosine=0.98"``), or the rule
    itself; ``None`` means the default rule."""
    if isinstance(rule, Rule):
        return rule
    presets = _presets()
    name = rule or "default"
    if name in presets:
        return presets[name]
    metric, sep, value = name.replace(">=", "=").replace("<=", "=").partition("=")
    if sep:
        try:
            return threshold_rule(metric.strip(), float(value))
        except ValueError:
            raise ComparisonError(f"bad threshold {name!r}: expected metric=number, e.g. cosine=0.98") from None
    raise ComparisonError(
        f"unknown rule {name!r}; presets are {', '.join(presets)}, or a threshold such as cosine=0.98 "
        "(or pass a nbprec Rule)"
    )
