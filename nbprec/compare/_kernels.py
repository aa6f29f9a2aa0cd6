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

The compiled kernel (``_fused``, built from ``_fused.c`` when the package is installed with a C compiler)
does the same sums in one pass per pair, with the GIL released; :func:`fused_sums` drives it and
:func:`tensor_metrics <nbprec.compare.metrics.tensor_metrics>` prefers it. This numpy kernel stays as the
fallback and as the reference the tests hold the compiled one to.
"""

from __future__ import annotations

import math

import numpy as np

from nbprec import dtypes
from nbprec.compare._sums import (  # (the sums of a pair read whole: without numpy, see there)
    EPS,
    FUSED,
    KERNEL_TYPES,
    Sums,
    _pair_params,
    usable_hints,
    usable_side,
)
from nbprec.formats import _payload
from nbprec.formats._payload import MappedPages

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


#: dtypes the compiled kernel reads directly (native byte order) -> its element type codes (:func:`fused_code`
#: adds bfloat16's, ml_dtypes' dtype, when it first sees an array of it: ml_dtypes is not loaded before).
FUSED_TYPES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2}


def fused_code(dtype: np.dtype) -> int | None:
    """The compiled kernel's element type code of ``dtype`` (:data:`FUSED_TYPES`), None for a dtype it does not
    read directly (integers, float8, other byte orders ...)."""
    code = FUSED_TYPES.get(dtype)
    if code is None and dtype.name == "bfloat16":  # (ml_dtypes is loaded: an array of its dtype exists)
        FUSED_TYPES[dtypes.NUMPY_DTYPES["bfloat16"]] = KERNEL_TYPES["bfloat16"]
        code = FUSED_TYPES.get(dtype)
    return code


#: Elements per call of the compiled kernel on a side read in place when a side's pages are handed back as
#: it goes (a multiple of the kernel's block, so that the parts give the bits of one call over the whole).
WINDOW = 1 << 22


class Flat:
    """One side of a pair as a flat sequence in C order, read a part at a time, never copied whole.

    A C-contiguous array is read in place (a view per part; ``code`` is its :data:`FUSED_TYPES` code when the
    compiled kernel reads its dtype directly). Any other layout (a transposed or strided view) gives each part
    as a copy of just that part, in C order. A large array mapped from a file hands its pages back as the
    parts are read (:class:`~nbprec.formats._payload.MappedPages`): call :meth:`begin` at the start of each
    pass and :meth:`done` after each part, so that resident memory stays a few windows whatever the size.
    """

    def __init__(self, array: np.ndarray) -> None:
        self.dtype = array.dtype
        self.size = int(array.size)
        contiguous = bool(array.flags.c_contiguous)
        self._array = array.reshape(-1) if contiguous else array
        self.contiguous = contiguous
        self.code = fused_code(array.dtype) if contiguous else None
        self.pages = MappedPages.of(self._array) if contiguous else None

    def part(self, start: int, stop: int) -> np.ndarray:
        """Elements ``start:stop`` in C order (a view when contiguous, else a copy of those elements only)."""
        if self.contiguous:
            return self._array[start:stop]
        return self._array.flat[start:stop]

    def whole(self) -> np.ndarray:
        """The flat array (contiguous sides only)."""
        return self._array

    def begin(self) -> None:
        """A pass starts at element 0."""
        if self.pages is not None:
            self.pages.begin()

    def done(self, stop: int) -> None:
        """The pass has read the elements before ``stop``: their pages may go."""
        if self.pages is not None:
            self.pages.release(stop * self.dtype.itemsize, final=stop >= self.size)

    def __len__(self) -> int:
        return self.size


def flat_pair(x: np.ndarray, y: np.ndarray) -> tuple[Flat, Flat]:
    """Both sides as :class:`Flat`, element ``i`` of one paired with element ``i`` of the other in C order.

    Two Fortran-ordered arrays of the same shape (a transposed weight saved as it lay in memory) are read as
    their transposes, in place: the pairs are the same, only their order differs, which no metric depends on.
    """
    if (
        x.shape == y.shape
        and x.ndim > 1
        and not (x.flags.c_contiguous and y.flags.c_contiguous)
        and x.flags.f_contiguous
        and y.flags.f_contiguous
    ):
        x, y = x.T, y.T
    return Flat(x), Flat(y)


def parts(size: int, step: int):
    """``(start, stop)`` of consecutive parts of ``step`` elements covering ``range(size)``."""
    for start in range(0, size, step):
        yield start, min(size, start + step)


class Scratch:
    """Float64 rows x, y, d, a, r, floor_x, floor_y and a bool row, each ``size`` long.

    ``floor_x``/``floor_y`` hold the KL floors (:func:`kl_offset_floor`); set them with :meth:`set_floors`
    once the minima and maxima are known.
    """

    def __init__(self, size: int) -> None:
        self.rows = np.empty((7, size), dtype=np.float64)
        self.mask = np.empty(size, dtype=np.bool_)

    def set_floors(self, floor_x: float, floor_y: float) -> None:
        """Fill the KL floor rows."""
        self.rows[5], self.rows[6] = floor_x, floor_y


def accumulate(x: np.ndarray, y: np.ndarray, scratch: Scratch, acc: Sums, kl: tuple, eps_b: float) -> None:
    """Feed one chunk into ``acc``: ``x`` and ``y`` are the chunk's float64 values (scratch rows 0 and 1).

    ``kl`` is ``(off_x, off_y)``, what KL subtracts from each side (:func:`kl_offset_floor`); the floors are
    in the scratch rows. Rows 2-4 and the bool row are overwritten; rows 0 and 1 are left as they were (the
    caller may reuse them).
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
    off_x, off_y = kl
    np.subtract(x, off_x, out=a)
    np.maximum(a, floor_x, out=a)
    np.subtract(y, off_y, out=r)
    np.maximum(r, floor_y, out=r)
    acc.kl_sx += float(np.add.reduce(a))
    acc.kl_sy += float(np.add.reduce(r))
    np.divide(a, r, out=d)
    np.log(d, out=d)
    acc.kl_t += dot(a, d)


def _fused_min_max(side: Flat, buf: np.ndarray | None, chunk: int) -> tuple[float, float]:
    """(min, max) of a side in float64 terms through the compiled kernel; NaN when it holds a NaN.

    A side read in place goes :data:`WINDOW` elements at a time; any other is converted into the float64 row
    ``buf``, ``chunk`` elements at a time.
    """
    lo, hi, nans = math.inf, -math.inf, 0
    step = WINDOW if side.code is not None else chunk
    side.begin()
    for start, stop in parts(side.size, step):
        part = side.part(start, stop)
        if side.code is not None:
            c_lo, c_hi, c_nans = FUSED.min_max(part.view(np.uint8), side.code)
        else:
            c_lo, c_hi, c_nans = FUSED.min_max(to_f64(part, buf[: stop - start]), 0)
        lo, hi, nans = min(lo, c_lo), max(hi, c_hi), nans + c_nans
        side.done(stop)
    return (math.nan, math.nan) if nans else (lo, hi)


def _fused_pass(fx: Flat, fy: Flat, params: tuple, chunk: int) -> Sums:
    """One pass of the compiled kernel over a pair, continuing one state from part to part, so that the sums
    are the bits of a single call over the whole pair (:func:`_fused.pair_accumulate`).

    Two sides read in place go in one call, or :data:`WINDOW` elements at a time when a side hands its pages
    back; otherwise ``chunk`` elements at a time (a multiple of the kernel's block), the other sides converted
    into float64 rows.
    """
    in_place = fx.code is not None and fy.code is not None
    if in_place and fx.pages is None and fy.pages is None:  # the usual pair: one call over the whole of it
        acc = Sums.from_sums(FUSED.pair_sums(fx.whole().view(np.uint8), fx.code, fy.whole().view(np.uint8), fy.code,
                                             *params))  # fmt: skip
        acc.shift_x, acc.shift_y = params[4], params[5]
        return acc
    state = np.frombuffer(FUSED.new_state(), np.float64).copy()
    if in_place:
        step = WINDOW if fx.pages is not None or fy.pages is not None else max(fx.size, 1)
        rows = None
    else:
        step = max(FUSED.BLOCK, chunk - chunk % FUSED.BLOCK)
        rows = np.empty((2, min(fx.size, step)), dtype=np.float64)
    fx.begin()
    fy.begin()
    for start, stop in parts(fx.size, step):
        part_x, part_y = fx.part(start, stop), fy.part(start, stop)
        if fx.code is None:
            part_x = to_f64(part_x, rows[0, : stop - start])
        if fy.code is None:
            part_y = to_f64(part_y, rows[1, : stop - start])
        FUSED.pair_accumulate(part_x.view(np.uint8), fx.code or 0, part_y.view(np.uint8), fy.code or 0, *params, state)
        fx.done(stop)
        fy.done(stop)
    acc = Sums.from_state(state)
    acc.shift_x, acc.shift_y = params[4], params[5]
    return acc


def in_place_pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int, np.ndarray, int] | None:
    """``(x bytes, x code, y bytes, y code)`` when the compiled kernel reads both sides whole, in place, in one
    call (C-contiguous, of a :data:`FUSED_TYPES` dtype, too small to hand pages back: the usual pair), else
    None (then :class:`Flat` sides and :func:`fused_sums` take them)."""
    x_code, y_code = fused_code(x.dtype), fused_code(y.dtype)
    if (
        x_code is None
        or y_code is None
        or not (x.flags.c_contiguous and y.flags.c_contiguous)
        or x.nbytes >= _payload.RELEASE_FROM  # (read here: tests make it small)
        or y.nbytes >= _payload.RELEASE_FROM
    ):
        return None
    return x.reshape(-1).view(np.uint8), x_code, y.reshape(-1).view(np.uint8), y_code


def _own_hints(hints: tuple | None, side: int) -> tuple[float, float] | None:
    """Side ``side``'s (0: target, 1: benchmark) recorded ``(min, max)`` among ``hints``, when usable."""
    if hints is None:
        return None
    low, high = hints[2 * side], hints[2 * side + 1]
    return (low, high) if usable_side(low, high) else None


def fused_sums(fx: Flat, fy: Flat, eps_b: float, chunk: int, hints: tuple | None = None) -> tuple[Sums, bool | None]:
    """Every running sum of one pair through the compiled kernel (requires :data:`FUSED`).

    Contiguous sides whose dtype is in :data:`FUSED_TYPES` are read in place (memory maps included); any other
    side (integers, bool, float8, complex, other byte orders, strided views) is converted into float64
    ``chunk`` elements at a time.

    KL needs each side's minimum and maximum before its pass. ``hints`` ``(min_x, max_x, min_y, max_y)`` (the
    dump's recorded statistics) let the pair be read once: the pass also finds the true extremes, and when
    they differ from the hints (or a side holds NaN, which makes numpy's extremes NaN) the pass is made again
    with them. Without usable hints (missing, not finite) a min/max pass over each side comes first, except
    over a side whose own hints are usable (a float16 run that overflowed beside its benchmark's finite
    tensors): that side takes them, and keeps them where the pass found its values all finite with those
    extremes (the pass is then the one they give); elsewhere its min/max pass follows, and the pass is made
    again. Returns the sums and whether the hints held, that is equalled the extremes ignoring NaN (``None``
    when they were not usable on both sides).
    """
    if usable_hints(hints):
        acc = _fused_pass(fx, fy, _pair_params(hints, eps_b), chunk)
        held = (acc.min_x, acc.max_x, acc.min_y, acc.max_y) == tuple(hints)  # right, NaN aside
        found = acc.extremes()
        if found == tuple(hints):
            return acc, True
        return _fused_pass(fx, fy, _pair_params(found, eps_b), chunk), held
    buf = np.empty(min(fx.size, chunk), dtype=np.float64) if None in (fx.code, fy.code) else None
    sides = (fx, fy)
    own = [_own_hints(hints, k) for k in (0, 1)]
    extremes = [own[k] if own[k] is not None else _fused_min_max(sides[k], buf, chunk) for k in (0, 1)]
    acc = _fused_pass(fx, fy, _pair_params((*extremes[0], *extremes[1]), eps_b), chunk)
    found = acc.extremes()
    wrong = [k for k in (0, 1) if own[k] is not None and found[2 * k : 2 * k + 2] != own[k]]
    if not wrong:
        return acc, None
    for k in wrong:  # (wrong recorded extremes: the side's own, as without them)
        extremes[k] = _fused_min_max(sides[k], buf, chunk)
    return _fused_pass(fx, fy, _pair_params((*extremes[0], *extremes[1]), eps_b), chunk), None
