"""profile_array: the overflow scan's counts over a payload, from the compiled one-pass kernel
(``nbprec/overflow/_profile.c``) and from numpy's passes, held to each other and to counts made element by element
in Python, on every dtype the kernel reads, with NaN, infinities, signed zeros, subnormals and values on the
thresholds."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from nbprec.dtypes import ELEMENT_TYPE_CODES
from nbprec.errors import NbprecError
from nbprec.overflow import numerics
from nbprec.overflow.numerics import SUSPICIOUS_FP16, profile_array

pytestmark = pytest.mark.skipif(numerics.PROFILE is None, reason="the compiled profile kernel is not built")

#: Thresholds as the scan and the headroom prediction pass them, and a few more on the values themselves.
THRESHOLDS = {
    "upper": [65504.0, 1.0, 100.0, 0.0],
    "lower": [6.103515625e-05, 1e-3, math.inf],
    "lower_inclusive": [2.98023223876953125e-08, 0.5],
    "exact": [*SUSPICIOUS_FP16, 1.0, 0.0],
}
FLOATS = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]
INTEGERS = [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]


def _values(dtype: type, n: int = 5000, seed: int = 0) -> np.ndarray:
    """Random values of ``dtype`` with the special ones mixed in (floats: NaN, infinities, signed zeros,
    subnormals, the float16 maximum and the suspicious values; integers: their extremes and zero)."""
    rng = np.random.default_rng(seed)
    if dtype in INTEGERS:
        info = np.iinfo(dtype) if dtype is not np.bool_ else None
        low, high = (0, 2) if info is None else (info.min, info.max)
        values = rng.integers(low, high, size=n, endpoint=True).astype(dtype)
        values[:3] = [low, high, 0]
        return values
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, -65504.0, 65500.0, 38400.0, 1e-7, 6e-8, 5.96e-8, 1e-40]
    values = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.integers(-8, 5, size=n), special * 3])
    rng.shuffle(values)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def _by_hand(array: np.ndarray) -> dict:
    """The counts element by element, in Python floats (what the profile's fields mean)."""
    mags = [abs(float(v)) for v in np.asarray(array).reshape(-1).tolist()]
    finite = [x for x in mags if math.isfinite(x)]
    return {
        "nan_count": sum(x != x for x in mags),
        "inf_count": sum(x == math.inf for x in mags),
        "nonzero": sum(x > 0 for x in finite),
        "abs_max": max(finite) if finite else math.nan,
        "at_least": tuple(sum(x >= t for x in finite) for t in THRESHOLDS["upper"]),
        "below": tuple(sum(0 < x < t for x in finite) for t in THRESHOLDS["lower"]),
        "at_most": tuple(sum(0 < x <= t for x in finite) for t in THRESHOLDS["lower_inclusive"]),
        "equal": tuple(sum(x == t for x in finite) for t in THRESHOLDS["exact"]),
    }


def _same(got: numerics.ArrayProfile, expected: dict) -> None:
    for field, value in expected.items():
        mine = getattr(got, field)
        assert mine == value or (mine != mine and value != value), (field, mine, value)


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=lambda d: np.dtype(d).name)
def test_the_compiled_pass_counts_what_numpy_and_python_count(dtype):
    array = _values(dtype)
    compiled = profile_array(array, **THRESHOLDS)
    passes = profile_array(array, kernel="numpy", chunk=1000, **THRESHOLDS)  # several chunks
    expected = _by_hand(array)
    _same(compiled, expected)
    _same(passes, expected)
    assert compiled.numel == passes.numel == array.size
    squares = math.fsum(float(x) ** 2 for x in np.abs(array.astype(np.float64)) if math.isfinite(x))
    assert compiled.norm == pytest.approx(math.sqrt(squares), rel=1e-12)
    assert passes.norm == pytest.approx(math.sqrt(squares), rel=1e-12)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_nothing_finite_and_nothing_at_all(dtype):
    for array in (np.array([np.nan, np.inf, -np.inf, np.nan]).astype(dtype), np.zeros(0, dtype=dtype)):
        for kernel in ("auto", "numpy"):
            p = profile_array(array, kernel=kernel, **THRESHOLDS)
            assert math.isnan(p.abs_max) and p.norm == 0.0 and p.nonzero == 0
            assert (p.nan_count, p.inf_count) == ((2, 2) if array.size else (0, 0))
            assert p.at_least == (0, 0, 0, 0) and p.equal == (0,) * len(THRESHOLDS["exact"])


def test_strided_float8_and_many_thresholds_take_numpys_passes_with_the_same_counts():
    """What the kernel does not read (a strided view, float8, more thresholds than it holds) is counted by numpy's
    passes, with the same results as the kernel gives on a contiguous copy."""
    base = _values(np.float32, n=4000, seed=3)
    strided = base[::3]
    assert not strided.flags.c_contiguous
    _same(profile_array(strided, **THRESHOLDS), _by_hand(strided))
    fp8 = base.astype(ml_dtypes.float8_e5m2)
    assert fp8.dtype.name not in ELEMENT_TYPE_CODES
    _same(profile_array(fp8, **THRESHOLDS), _by_hand(fp8))
    many = [float(t) for t in np.geomspace(1e-6, 1e6, numerics.PROFILE.MAX_THRESHOLDS + 5)]
    wide = profile_array(base, upper=many)
    mags = np.abs(base.astype(np.float64))
    assert wide.at_least == tuple(int(np.count_nonzero(np.isfinite(mags) & (mags >= t))) for t in many)


def test_the_kernel_refuses_what_it_cannot_read_with_a_reason():
    with pytest.raises(NbprecError, match="kernel must be 'auto' or 'numpy', not 'c'"):
        profile_array(np.zeros(3), kernel="c")
    kernel = numerics.PROFILE
    with pytest.raises(ValueError, match="not whole elements of 4 bytes"):
        kernel.profile(bytes(6), 1, [], [], [], [])
    with pytest.raises(ValueError, match="unknown element type 12"):
        kernel.profile(bytes(8), 12, [], [], [], [])
    with pytest.raises(ValueError, match="at most"):
        kernel.profile(bytes(8), 0, [1.0] * (kernel.MAX_THRESHOLDS + 1), [], [], [])
    with pytest.raises(TypeError):
        kernel.profile(bytes(8), 0, ["a"], [], [], [])
