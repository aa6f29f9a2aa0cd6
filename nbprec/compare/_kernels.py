"""Chunk kernels of :func:`nbprec.compare.metrics.tensor_metrics`: conversion and the fused sums pass.

Everything here works on preallocated float64 rows (:class:`Scratch`), so one chunk costs a fixed set of
numpy calls and no allocation.

Why float64 and not float32 elementwise work: every sum must be accumulated in float64 (METRICS.md). On
float32 data that costs a conversion per sum (``np.add.reduce(a, dtype=float64)`` costs about a float64
conversion plus a float64 sum, and a float32 product must be written out before it is summed), whereas
converting each side once to float64, taking products as BLAS dot products and plain sums with
``np.add.reduce`` (pairwise) costs the same or less and keeps every product exact. Measured per element on
the 2-core bench machine: a float64 pass 0.17-0.33 ns, a float32 pass about half that, a float32 ->
float64 sum 0.33 ns, a float64 log 0.82 ns (float32: 0.39 ns, but its rounding of ``log(Px/Py)`` near 1
costs about 6e-8 absolute per element, far more than KL itself for bf16 noise).

The float16 conversion, which numpy does without SIMD (2-4x slower than the other casts), is done here by
moving the bits into a float64 and rescaling.
"""

from __future__ import annotations

import math

import numpy as np

EPS = float(np.finfo(np.float64).eps)  # 2.22e-16
FLOAT32_EPS = float(np.finfo(np.float32).eps)
THOUSANDTH = 0.001
FIVE_THOUSANDTH = 0.005
DOT_SEGMENT = 8192  # OpenBLAS stays single-threaded for dot products of <= 10,000 elements

# float16 -> float64 by bits: sign-extended int16 << 42 puts the exponent/mantissa in place, the mask
# keeps the sign bit and clears the sign-extension copies, and 2**1008 moves the exponent bias 15 -> 1023
# (exact, denormals included). inf/NaN (exponent 31) land at magnitudes >= 2**16 and are redone by numpy.
_F16_MASK = np.int64(-(1 << 63) | ((1 << 57) - 1))
_F16_SCALE = 2.0**1008
_F16_SPECIAL = 65536.0


def to_f64(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Copy a chunk of any numeric dtype into the float64 row ``out`` (complex -> magnitude)."""
    kind = src.dtype.kind
    if kind == "c":
        np.abs(src, out=out)
    elif src.dtype == np.float16 and src.size > 64:
        bits = out.view(np.int64)
        np.copyto(bits, src.view(np.int16))
        np.left_shift(bits, 42, out=bits)
        np.bitwise_and(bits, _F16_MASK, out=bits)
        np.multiply(out, _F16_SCALE, out=out)
        if out.max() >= _F16_SPECIAL or out.min() <= -_F16_SPECIAL:
            special = np.flatnonzero(np.abs(out) >= _F16_SPECIAL)
            out[special] = src[special]
    else:
        np.copyto(out, src, casting="unsafe")
    return out


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two contiguous float64 vectors without a temporary and on the calling thread only."""
    if a.size <= DOT_SEGMENT:
        return float(np.dot(a, b))
    k = a.size // DOT_SEGMENT
    m = k * DOT_SEGMENT
    head = np.matmul(a[:m].reshape(k, 1, DOT_SEGMENT), b[:m].reshape(k, DOT_SEGMENT, 1))
    return float(np.add.reduce(head, axis=None)) + float(np.dot(a[m:], b[m:]))


def nan_max(a: float, b: float) -> float:
    """max() that propagates NaN (Python's max does not)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


class Sums:
    """Running sums of one comparison (a plain accumulator, local to one call)."""

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.syy = self.sxy = 0.0
        self.sdd = self.sad = self.mad = 0.0
        self.acc_rel = self.max_rel = 0.0
        self.pass1 = self.pass5 = 0
        self.kl_sx = self.kl_sy = self.kl_t = 0.0


class Scratch:
    """Float64 rows x, y, d, a, r, floor_x, floor_y and a bool row, each ``size`` long.

    ``floor_x``/``floor_y`` hold the KL floors (float32 eps times each side's span); set them with
    :meth:`set_floors` once the minima and maxima are known.
    """

    def __init__(self, size: int) -> None:
        self.rows = np.empty((7, size), dtype=np.float64)
        self.mask = np.empty(size, dtype=np.bool_)

    def set_floors(self, span_x: float, span_y: float) -> None:
        """Fill the KL floor rows: float32 eps times the side's span (times 1 when the span is 0)."""
        for row, span in ((5, span_x), (6, span_y)):
            self.rows[row] = FLOAT32_EPS * span if span > 0 else FLOAT32_EPS


def accumulate(x: np.ndarray, y: np.ndarray, scratch: Scratch, acc: Sums, kl: tuple, eps_b: float) -> None:
    """Feed one chunk into ``acc``: ``x`` and ``y`` are the chunk's float64 values (scratch rows 0 and 1).

    ``kl`` is ``((min_x, span_x), (min_y, span_y))`` of the whole tensors. Rows 2-4 and the bool row are
    overwritten; rows 0 and 1 are left as they were (the caller may reuse them).
    """
    n = x.size
    rows = scratch.rows
    d, a, r, floor_x, floor_y = rows[2, :n], rows[3, :n], rows[4, :n], rows[5, :n], rows[6, :n]
    mask = scratch.mask[:n]
    acc.n += n
    acc.sx += float(np.add.reduce(x))
    acc.sy += float(np.add.reduce(y))
    acc.sxx += dot(x, x)
    acc.syy += dot(y, y)
    acc.sxy += dot(x, y)
    np.subtract(x, y, out=d)
    np.abs(d, out=d)
    acc.sdd += dot(d, d)
    acc.sad += float(np.add.reduce(d))
    acc.mad = nan_max(acc.mad, float(d.max()))
    # relative error |x - y| / |y|, 0 where |y| <= eps (NaN in y is not excluded: it propagates)
    np.abs(y, out=a)
    np.less_equal(a, EPS, out=mask)
    n_excluded = int(np.count_nonzero(mask))
    np.divide(d, a, out=r)
    if n_excluded:
        np.copyto(r, 0.0, where=mask)
        idx = np.flatnonzero(mask)  # they will pass as r = 0; msprobe's convention for them is applied below
    acc.acc_rel += float(np.add.reduce(r))
    acc.max_rel = nan_max(acc.max_rel, float(r.max()))
    np.less(r, THOUSANDTH, out=mask)
    acc.pass1 += int(np.count_nonzero(mask))
    np.less(r, FIVE_THOUSANDTH, out=mask)
    acc.pass5 += int(np.count_nonzero(mask))
    if n_excluded:
        den = a[idx]
        den[den == 0] = eps_b
        err = d[idx]
        acc.pass1 -= n_excluded - int(np.count_nonzero(err < THOUSANDTH * den))
        acc.pass5 -= n_excluded - int(np.count_nonzero(err < FIVE_THOUSANDTH * den))
    # KL on u = max(v - min, feps * span), i.e. span * (the floored min-max normalised values): the
    # divergence of the normalised distributions does not depend on that scale, so no division is needed.
    (min_x, span_x), (min_y, span_y) = kl
    np.subtract(x, min_x if span_x > 0 else 0.0, out=a)
    np.maximum(a, floor_x, out=a)
    np.subtract(y, min_y if span_y > 0 else 0.0, out=r)
    np.maximum(r, floor_y, out=r)
    acc.kl_sx += float(np.add.reduce(a))
    acc.kl_sy += float(np.add.reduce(r))
    np.divide(a, r, out=d)
    np.log(d, out=d)
    acc.kl_t += dot(a, d)
