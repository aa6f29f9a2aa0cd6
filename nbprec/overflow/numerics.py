"""Limits of the floating formats, and one bounded-memory pass over a tensor payload.

:func:`dtype_limits` gives, for float16 / bfloat16 / float8, the largest finite value (the saturation point),
the value from which a round-to-nearest cast overflows, and the smallest subnormal and normal magnitudes.
:func:`profile_array` counts NaN, inf, values at or beyond thresholds, and tiny values of a payload, in one pass of
the compiled ``nbprec.overflow._profile`` (``nbprec/overflow/_profile.c``) over the payload's own dtype, or without
it (or for float8) in numpy's passes over float64 chunks; a memory-mapped array is never read whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from nbprec.dtypes import ELEMENT_TYPE_CODES, FINITE_MAX, NUMPY_DTYPES, canonical_dtype
from nbprec.errors import NbprecError

#: float16 values Ascend's overflow detection names as "abnormally large" (a saturated or near-saturated result).
SUSPICIOUS_FP16 = (65500.0, 38400.0, 51200.0)

#: Elements per chunk when streaming a payload through numpy (8 MiB of float64 per chunk).
CHUNK_ELEMENTS = 1 << 20

try:  # the one-pass counts in C; absent when the package was installed without a C compiler
    from nbprec.overflow import _profile as PROFILE
except ImportError:  # pragma: no cover - depends on the build
    PROFILE = None

#: The compiled pass's element type codes by numpy dtype: the native byte order only (a byte-swapped array, as
#: ``np.load`` gives a ``>f4`` file, has the same dtype name but its bytes would be read as garbage: numpy's passes
#: count it); keyed by the dtype itself, a hash look-up (``dtype.name`` is a Python property: 4 us a call).
_KERNEL_CODES = {NUMPY_DTYPES[name]: code for name, code in ELEMENT_TYPE_CODES.items()}

#: Low-precision formats that headroom prediction looks at by default.
HEADROOM_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class DtypeLimits:
    """The numeric limits of one floating format.

    Attributes
    ----------
    name
        Canonical dtype name.
    max_finite
        Largest finite value (65504 for float16); saturation mode clamps here.
    overflow_at
        Smallest magnitude that a round-to-nearest-even cast takes out of range: ``max_finite`` plus half a
        unit in the last place (65520 for float16), or just above it when the tie rounds down to the maximum
        (float8_e4m3fn, which has no inf: ml_dtypes gives NaN there, torch saturates to 448).
    smallest_subnormal
        Smallest positive value; magnitudes at or below half of it round to zero.
    smallest_normal
        Smallest positive normal value; below it precision is lost bit by bit (subnormals).
    """

    name: str
    max_finite: float
    overflow_at: float
    smallest_subnormal: float
    smallest_normal: float

    @property
    def flush_to_zero_below(self) -> float:
        """Magnitudes at or below this round to zero (half the smallest subnormal, ties to even)."""
        return self.smallest_subnormal / 2


def dtype_limits(dtype: str) -> DtypeLimits:
    """Limits of a floating dtype by name.

    Examples
    --------
    >>> lim = dtype_limits("float16")
    >>> lim.max_finite, lim.overflow_at, lim.smallest_normal
    (65504.0, 65520.0, 6.103515625e-05)
    """
    name = canonical_dtype(dtype)
    if name not in FINITE_MAX or name not in NUMPY_DTYPES:
        raise NbprecError(f"no floating limits for dtype {dtype!r}; known: {', '.join(sorted(FINITE_MAX))}")
    np_dtype = NUMPY_DTYPES[name]
    info = np.finfo(np_dtype) if name in ("float16", "float32", "float64") else ml_dtypes.finfo(np_dtype)
    max_finite = float(FINITE_MAX[name])
    ulp = 2.0 ** (math.floor(math.log2(max_finite)) - int(info.nmant))
    tie = max_finite + ulp / 2
    # a tie rounds to even: up (to inf) when the maximum's last mantissa bit is odd, down to it when even (e4m3fn)
    overflow_at = tie if int(max_finite / ulp) % 2 else math.nextafter(tie, math.inf)
    return DtypeLimits(
        name=name,
        max_finite=max_finite,
        overflow_at=overflow_at,
        smallest_subnormal=float(info.smallest_subnormal),
        smallest_normal=float(info.smallest_normal),
    )


@dataclass(frozen=True)
class ArrayProfile:
    """What one pass over a payload found (all magnitudes over finite values).

    ``at_least[i]`` counts finite ``|x| >= upper[i]``; ``below[i]`` counts ``0 < |x| < lower[i]``;
    ``at_most[i]`` counts ``0 < |x| <= lower_inclusive[i]``; ``equal[i]`` counts ``|x| == exact[i]``.
    """

    numel: int
    nan_count: int
    inf_count: int
    nonzero: int
    abs_max: float
    norm: float
    at_least: tuple[int, ...]
    below: tuple[int, ...]
    at_most: tuple[int, ...]
    equal: tuple[int, ...]


def profile_array(
    array: np.ndarray,
    *,
    upper: Sequence[float] = (),
    lower: Sequence[float] = (),
    lower_inclusive: Sequence[float] = (),
    exact: Sequence[float] = (),
    chunk: int = CHUNK_ELEMENTS,
    kernel: str = "auto",
) -> ArrayProfile:
    """Count non-finite, large and tiny values of ``array``, in one pass of the compiled kernel where it reads the
    dtype (the floats but float8, the signed integers, uint8, bool) of a contiguous array, else in numpy's passes
    over chunks of ``chunk`` elements (``kernel="numpy"`` forces those). The counts are the same either way; the
    norm may differ in its last bits (the sums of squares are added in another order).

    Memory stays bounded by one float64 chunk, whatever the tensor's size; a memory-mapped payload is read
    chunk by chunk.

    Examples
    --------
    >>> p = profile_array(np.array([1.0, np.inf, 65504.0, 1e-9], np.float32), upper=[65504.0], lower=[1e-8])
    >>> p.inf_count, p.at_least, p.below, p.abs_max
    (1, (1,), (1,), 65504.0)
    """
    if kernel not in ("auto", "numpy"):
        raise NbprecError(f"profile_array: kernel must be 'auto' or 'numpy', not {kernel!r}")
    flat = np.asarray(array).reshape(-1)
    lists = [[float(t) for t in thresholds] for thresholds in (upper, lower, lower_inclusive, exact)]
    code = _KERNEL_CODES.get(flat.dtype) if PROFILE is not None and kernel != "numpy" else None
    if code is not None and flat.flags.c_contiguous and max(map(len, lists)) <= PROFILE.MAX_THRESHOLDS:
        nan, inf, nonzero, abs_max, sumsq, *counts = PROFILE.profile(flat.view(np.uint8), code, *lists)
    else:
        nan, inf, nonzero, abs_max, sumsq, *counts = _numpy_profile(flat, *lists, chunk=chunk)
    return ArrayProfile(
        numel=int(flat.size),
        nan_count=nan,
        inf_count=inf,
        nonzero=nonzero,
        abs_max=abs_max if abs_max > -math.inf else math.nan,
        norm=math.sqrt(sumsq) if math.isfinite(sumsq) else math.inf,
        at_least=tuple(counts[0]),
        below=tuple(counts[1]),
        at_most=tuple(counts[2]),
        equal=tuple(counts[3]),
    )


def _numpy_profile(
    flat: np.ndarray,
    upper: list[float],
    lower: list[float],
    lower_inclusive: list[float],
    exact: list[float],
    *,
    chunk: int,
) -> tuple:
    """What the compiled ``profile`` returns, from numpy's passes over float64 chunks of ``flat``."""
    n = int(flat.size)
    nan = inf = nonzero = 0
    abs_max = -math.inf
    sumsq = 0.0
    at_least = [0] * len(upper)
    below = [0] * len(lower)
    at_most = [0] * len(lower_inclusive)
    equal = [0] * len(exact)
    for start in range(0, n, max(1, chunk)):
        part = flat[start : start + chunk]
        x = np.abs(part.astype(np.float64))
        finite = np.isfinite(x)
        n_finite = int(finite.sum())
        n_nan = int(np.isnan(x).sum())
        nan += n_nan
        inf += len(x) - n_finite - n_nan
        f = x if n_finite == len(x) else x[finite]
        if not f.size:
            continue
        abs_max = max(abs_max, float(f.max()))
        with np.errstate(over="ignore"):  # squares past float64's range: an infinite norm, as the compiled pass says
            sumsq += float(np.dot(f, f))
        nz = f > 0
        nonzero += int(nz.sum())
        for i, t in enumerate(upper):
            at_least[i] += int(np.count_nonzero(f >= t))
        for i, t in enumerate(lower):
            below[i] += int(np.count_nonzero(nz & (f < t)))
        for i, t in enumerate(lower_inclusive):
            at_most[i] += int(np.count_nonzero(nz & (f <= t)))
        for i, v in enumerate(exact):
            equal[i] += int(np.count_nonzero(f == v))
    return nan, inf, nonzero, abs_max, sumsq, at_least, below, at_most, equal
