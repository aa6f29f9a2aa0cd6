"""The running sums of one pair through the compiled kernel (:mod:`nbprec.compare._fused`), without numpy.

:class:`Sums` holds the sums :func:`_fused.pair_sums <nbprec.compare._fused>` returns; :func:`direct_sums` makes
that call over two buffers read whole (the usual pair), with the parameters :func:`_pair_params` derives from the
sides' extremes. :mod:`nbprec.compare._kernels` drives the kernel over every other layout.

The small payloads of :mod:`nbprec.compare.small_pairs` (most pairs of a dump) take the same steps in C instead,
``_fused.pair_metrics`` (``nbprec/compare/_fused_metrics.c``): :func:`direct_sums`, then
:func:`sums_values`, operation for operation, with the same bits (the tests hold the two to each other).
"""

from __future__ import annotations

import math
import sys

try:  # the compiled one-pass kernel; absent when the package was installed without a C compiler
    from nbprec.compare import _fused as FUSED
except ImportError:  # pragma: no cover - depends on the build
    FUSED = None
if FUSED is not None and not hasattr(FUSED, "pair_metrics"):  # pragma: no cover - an extension built before it:
    FUSED = None  # the numpy kernel then, as without a compiler (`make install` rebuilds it)

#: Which kernel ``tensor_metrics(kernel="auto")`` uses: ``"c (avx512)"``, ``"c (avx2+fma)"``, ``"c (baseline)"`` or
#: ``"numpy"`` (:data:`nbprec.compare.metrics.KERNEL`; defined here, without numpy, for ``nbprec --version``).
KERNEL = f"c ({FUSED.ISA})" if FUSED is not None else "numpy"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Buffer

    import numpy as np

EPS = 2.0**-52  # float64's epsilon, 2.22e-16
FLOAT32_EPS = 2.0**-23
_SPAN_LIMIT = 2.0**1020  # spans at or above this take the kernel's checked KL loop
_DBL_MIN = sys.float_info.min  # smallest positive normal double

#: The kernel's element type codes: float64, float32, float16, bfloat16 (see FUSED_TYPES in _kernels.py).
KERNEL_TYPES = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}
#: The epsilon msprobe adds where the benchmark is exactly zero, by the benchmark's kernel type code (what
#: :func:`nbprec.compare.metrics._eps_bench` gives for those dtypes; a test holds the two to each other).
EPS_BENCH = {0: EPS, 1: FLOAT32_EPS, 2: 2.0**-10, 3: FLOAT32_EPS}

#: Field order of ``_fused.pair_sums``'s result tuple; each is also a :class:`Sums` attribute.
FUSED_SUMS = (
    "n", "sx", "sy", "sxx", "syy", "sxy", "sdd", "sad", "mad", "acc_rel", "max_rel",
    "pass1", "pass5", "kl_sx", "kl_sy", "kl_t", "cx", "cxx", "cy", "cyy", "min_x", "max_x", "min_y", "max_y",
)  # fmt: skip


class Sums:
    """Running sums of one comparison (a plain accumulator, local to one call).

    ``cx, cxx, cy, cyy`` are sums of ``v - shift`` and ``(v - shift)**2`` for a shift near each side's
    mean, and ``min_x`` ... ``max_y`` the extremes ignoring NaN: the compiled kernel fills them (the centred
    sums give the standard deviations without cancellation); the numpy kernel leaves them alone.
    """

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.syy = self.sxy = 0.0
        self.sdd = self.sad = self.mad = 0.0
        self.acc_rel = self.max_rel = 0.0
        self.pass1 = self.pass5 = 0
        self.kl_sx = self.kl_sy = self.kl_t = 0.0
        self.cx = self.cxx = self.cy = self.cyy = 0.0
        self.shift_x = self.shift_y = 0.0
        self.min_x = self.min_y = math.inf
        self.max_x = self.max_y = -math.inf

    @classmethod
    def from_state(cls, state: np.ndarray) -> Sums:
        """The sums of a ``_fused.pair_accumulate`` state: its totals in :data:`FUSED_SUMS` order (less the
        count, which follows them)."""
        acc = cls()
        values = state.tolist()
        acc.__dict__.update(zip(FUSED_SUMS[1:], values, strict=False))
        acc.n = int(values[len(FUSED_SUMS) - 1])
        acc.pass1, acc.pass5 = int(acc.pass1), int(acc.pass5)
        return acc

    @classmethod
    def from_sums(cls, sums: tuple) -> Sums:
        """The sums ``_fused.pair_sums`` returns (a tuple in :data:`FUSED_SUMS` order, the count first)."""
        if len(sums) != len(FUSED_SUMS):
            raise ValueError(f"pair_sums gave {len(sums)} sums, expected {len(FUSED_SUMS)}")
        acc = cls.__new__(cls)
        state = dict(zip(FUSED_SUMS, sums, strict=False))  # (lengths checked above)
        state["shift_x"] = state["shift_y"] = 0.0
        acc.__dict__ = state
        return acc

    def extremes(self) -> tuple[float, float, float, float]:
        """(min_x, max_x, min_y, max_y) as numpy's min/max give them: NaN on a side that holds a NaN (its sum
        of squares is NaN exactly then, since the squares are never negative)."""
        nan_x, nan_y = math.isnan(self.cxx), math.isnan(self.cyy)
        return (
            math.nan if nan_x else self.min_x,
            math.nan if nan_x else self.max_x,
            math.nan if nan_y else self.min_y,
            math.nan if nan_y else self.max_y,
        )


def kl_offset_floor(low: float, span: float) -> tuple[float, float]:
    """What KL subtracts from a side (its minimum, or 0 when the span is not positive) and its floor."""
    return (low, FLOAT32_EPS * span) if span > 0 else (0.0, FLOAT32_EPS)


def _pair_params(extremes: tuple[float, float, float, float], eps_b: float) -> tuple:
    """``pair_sums``'s parameters (after the buffers) from the sides' (min, max) as numpy's min/max give them."""
    lo_x, hi_x, lo_y, hi_y = extremes
    span_x, span_y = hi_x - lo_x, hi_y - lo_y
    off_x, floor_x = kl_offset_floor(lo_x, span_x)
    off_y, floor_y = kl_offset_floor(lo_y, span_y)
    shift_x, shift_y = 0.5 * lo_x + 0.5 * hi_x, 0.5 * lo_y + 0.5 * hi_y  # near the means: centred sums
    # every max(v - off, floor) is a positive normal double when the data and the spans are finite and the
    # floors normal: the kernel then skips its per-element checks (spans below 2^1020 also keep the sum of two
    # such terms, which its KL series divides by, finite). A NaN span (a side holding NaN) fails the test.
    kl_normal = all(0.0 <= span < _SPAN_LIMIT for span in (span_x, span_y)) and min(floor_x, floor_y) >= _DBL_MIN
    return (
        off_x,
        floor_x,
        off_y,
        floor_y,
        shift_x if math.isfinite(shift_x) else 0.0,
        shift_y if math.isfinite(shift_y) else 0.0,
        eps_b,
        kl_normal,
    )


def usable_side(low: float, high: float) -> bool:
    """A side's recorded ``(min, max)`` is usable: finite, the minimum at most the maximum."""
    return -math.inf < low <= high < math.inf


def usable_hints(hints: tuple | None) -> bool:
    """Finite ``(min_x, max_x, min_y, max_y)`` with each minimum at most its maximum."""
    if hints is None:
        return False
    lo_x, hi_x, lo_y, hi_y = hints
    return usable_side(lo_x, hi_x) and usable_side(lo_y, hi_y)


def _direct_pass(pair: tuple[Buffer, int, Buffer, int], params: tuple) -> Sums:
    """The sums of a pair :func:`in_place_pair` accepted: one call of the compiled kernel."""
    acc = Sums.from_sums(FUSED.pair_sums(*pair, *params))
    acc.shift_x, acc.shift_y = params[4], params[5]
    return acc


def direct_sums(
    pair: tuple[Buffer, int, Buffer, int], eps_b: float, hints: tuple | None
) -> tuple[Sums, bool | None] | None:
    """:func:`fused_sums` of a pair :func:`in_place_pair` accepted, given usable ``hints`` (None without them:
    the caller then takes :func:`fused_sums`, which finds the extremes first): one pass with the parameters the
    hints give, and a second with the extremes it found when the hints were not the pair's (whose KL offsets and
    floors they set); and whether they were."""
    if not usable_hints(hints):
        return None
    acc = _direct_pass(pair, _pair_params(hints, eps_b))
    held = (acc.min_x, acc.max_x, acc.min_y, acc.max_y) == tuple(hints)  # right, NaN aside
    found = acc.extremes()
    if found == tuple(hints):
        return acc, True
    return _direct_pass(pair, _pair_params(found, eps_b)), held


def _one_pass_std(s: float, ss: float, n: int) -> float | None:
    """Population std from the sum and sum of squares of ``v - shift``; None when they cancel (the relative
    error of the variance would be above about 1e-12), which needs :func:`_std`'s exact pass."""
    mean = s / n
    var = ss / n - mean * mean
    if not var >= 1e-4 * (ss / n) and math.isfinite(var):
        return None
    return math.sqrt(max(var, 0.0)) if not math.isnan(var) else math.nan


def _ratio(a: float, b: float) -> float:
    """a / b in IEEE terms (inf or NaN where b is 0) without numpy scalars."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _finish(acc: Sums) -> dict[str, float]:
    """Turn the running sums into the metric columns (std is filled in by the caller)."""
    n = acc.n
    norm_x, norm_y = _sqrt(acc.sxx), _sqrt(acc.syy)
    if n == 1:
        cosine = 1.0 if math.isfinite(acc.sxy) else math.nan
    elif norm_x <= EPS and norm_y <= EPS:
        cosine = 1.0
    elif norm_x <= EPS or norm_y <= EPS:
        cosine = math.nan
    else:
        cosine = min(_ratio(acc.sxy, norm_x * norm_y), 1.0) if not math.isnan(acc.sxy) else math.nan
    # 0 when the benchmark's norm is at most eps, as msaccucmp's RelativeEuclideanDistance (all-zero in effect)
    rel_euclidean = 0.0 if _sqrt(acc.syy) <= EPS else _sqrt(_ratio(acc.sdd, acc.syy))
    kl = _ratio(acc.kl_t, acc.kl_sx) + _log_of_ratio(acc.kl_sy, acc.kl_sx)
    return {
        "cosine": cosine,
        "max_abs_err": acc.mad,
        "mean_abs_err": acc.sad / n,
        "rmse": _sqrt(acc.sdd / n),
        "rel_euclidean": rel_euclidean,
        "accumulated_rel_err": acc.acc_rel,
        "max_rel_err": acc.max_rel,
        "mean_rel_err": acc.acc_rel / n,
        "kl_divergence": 0.0 if kl < EPS else kl,
        "target_mean": acc.sx / n,
        "target_std": math.nan,
        "bench_mean": acc.sy / n,
        "bench_std": math.nan,
        "thousandth_ratio": acc.pass1 / n,
        "five_thousandth_ratio": acc.pass5 / n,
        "euclidean": _sqrt(acc.sdd),
    }


def _sqrt(v: float) -> float:
    """math.sqrt that gives NaN for NaN or negative input and inf for inf, as numpy does."""
    return math.sqrt(v) if v >= 0 else math.nan


def _log_of_ratio(a: float, b: float) -> float:
    """log(a / b) as numpy gives it, but exact to the last digits when a and b are close: log1p of (a - b) / b,
    where a - b is exact. KL adds this to a term of nearly the opposite value; the rounding of a / b alone
    (1e-16 absolute) cost KL 2e-10 of itself on bf16-against-fp32 noise (KL ~ 2e-7)."""
    ratio = _ratio(a, b)
    if 0.5 < ratio < 2.0:  # close: log1p of the exact difference (far apart, (a - b) / b can round to -1)
        return math.log1p((a - b) / b)
    if ratio > 0:
        return math.log(ratio)
    return -math.inf if ratio == 0 else math.nan  # numpy's log of what is not positive


def sums_values(acc: Sums, n: int) -> tuple[dict[str, float], str] | None:
    """Every metric column of a pair of ``n`` elements from its kernel sums alone, and why cosine is missing
    ('' if it is not), as :func:`~nbprec.compare.metrics.tensor_metrics` gives them; None when the pair needs
    its arrays again: a side holding NaN or inf (counted), or a standard deviation whose one-pass sums cancel
    (an exact second pass)."""
    if not math.isfinite(acc.sxx + acc.syy):
        return None
    stds = _one_pass_std(acc.cx, acc.cxx, n), _one_pass_std(acc.cy, acc.cyy, n)
    if None in stds:
        return None
    values = _finish(acc)
    values["target_std"], values["bench_std"] = stds
    return values, zero_side_reason(acc) if math.isnan(values["cosine"]) else ""


def zero_side_reason(acc: Sums) -> str:
    """Why cosine is missing when one side is all zero and the other is not."""
    zero_side = "target" if math.sqrt(acc.sxx) <= EPS else "benchmark"
    other = "benchmark" if zero_side == "target" else "target"
    return f"{zero_side} is all zero, {other} is not: cosine undefined"
