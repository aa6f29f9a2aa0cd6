"""The AVX-512 build of the metric kernel runs a block's loops as one (nbprec/compare/_fused.c, pair_body): the same
sums, to the bit, as the separate loops it replaced, which ``_fused.fuse_loops(False)`` brings back."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest

from nbprec.compare._sums import FUSED, FUSED_SUMS, KERNEL_TYPES
from nbprec.compare.metrics import METRIC_COLUMNS, tensor_metrics

pytestmark = pytest.mark.skipif(
    FUSED is None or "avx512" not in FUSED.available_isas(), reason="needs the kernel's AVX-512 build and a CPU for it"
)


@pytest.fixture
def avx512():
    """The AVX-512 build in use, its loops fused again afterwards, and the build chosen at import put back."""
    chosen = FUSED.use_isa("avx512")
    yield
    FUSED.fuse_loops(True)
    FUSED.use_isa(chosen)


def _bits(values: dict[str, float]) -> dict[str, str]:
    return {k: struct.pack("<d", v).hex() for k, v in values.items()}


def _both(measure):
    """``measure()`` with the loops fused, then apart."""
    assert FUSED.fuse_loops(True) is True  # (the default)
    fused = measure()
    FUSED.fuse_loops(False)
    try:
        apart = measure()
    finally:
        FUSED.fuse_loops(True)
    return fused, apart


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(21)
    y = (rng.standard_normal(200_003) * 3 - 0.5).astype(np.float32)
    y[::41] = 0.0
    far = y.copy()
    far[::97] *= 4  # KL terms far from 1 here and there: the near series' corrections (kl_far_terms)
    nan_target = y.astype(np.float16)
    nan_target[[5, 70_000]], nan_target[900] = np.nan, np.inf
    nan_block = y.astype(np.float16)
    nan_block[512 * 3 : 512 * 6] = np.nan  # whole blocks of NaN on one side (one_side_block) between finite ones
    with np.errstate(over="ignore"):
        overflow = (y * 3e4).astype(np.float16)
    return {
        "bf16 vs fp32": (y.astype(ml_dtypes.bfloat16), y),
        "fp16 vs fp32, far terms": (far.astype(np.float16), y),
        "fp32 vs fp64": (y, y.astype(np.float64) * (1 + 1e-7)),
        "NaN and inf in the target": (nan_target, y),
        "blocks of NaN": (nan_block, y),
        "fp16 overflow": (overflow, y * 3e4),
        "a part block": (y[:300].astype(ml_dtypes.bfloat16), y[:300]),
        "benchmark all zero": (y[:5000], np.zeros(5000, np.float32)),
    }


@pytest.mark.parametrize("case", list(_cases()))
@pytest.mark.parametrize("hinted", [False, True], ids=["no extremes", "recorded extremes"])
def test_fused_loops_give_every_column_to_the_bit(case, hinted, avx512):
    x, y = _cases()[case]
    extremes = None
    if hinted:
        wide = [np.asarray(v, np.float64) for v in (x, y)]
        with np.errstate(invalid="ignore"):
            extremes = tuple(float(f(w[np.isfinite(w)])) for w in wide for f in (np.min, np.max))
    with np.errstate(all="ignore"):
        fused, apart = _both(lambda: tensor_metrics(x, y, extremes=extremes))
    assert fused.reason == apart.reason
    assert _bits({c: fused[c] for c in METRIC_COLUMNS}) == _bits({c: apart[c] for c in METRIC_COLUMNS})


_BF16, _F16, _F32, _F64 = ml_dtypes.bfloat16, np.float16, np.float32, np.float64
#: (target type, benchmark type, kind) of the usual pass's cases; their seeds are their places in the list.
_USUAL_PASS_CASES = [
    *((x, y, "near") for x, y in [(_BF16, _F32)] * 3 + [(_F16, _F32), (_F32, _F32), (_F32, _F64), (_BF16, _BF16)]),
    (_F64, _F16, "near"),
    *((x, y, "diverged") for x, y in [(_BF16, _F32), (_F16, _F32), (_F32, _F64)]),
    (_BF16, _F32, "turning"),
]


@pytest.mark.parametrize(("seed", "x_type", "y_type", "kind"), [(i, *c) for i, c in enumerate(_USUAL_PASS_CASES, 1)])
def test_fused_loops_give_every_sum_of_the_usual_pass_to_the_bit(seed, x_type, y_type, kind, avx512):
    # the fused loop of the usual block: every value a positive normal KL term (kl_normal); the raw sums of the
    # pass, not only the columns made of them. Its whole blocks take the loops written in AVX-512 intrinsics
    # (_fused_avx512.c, one for each pair of element types), the part block the C loop. "near": KL by the short
    # series, the few terms beyond its range (a few values scaled) corrected afterwards; "diverged": a target
    # unrelated to the benchmark, KL by log_ratio for every term (far_block); "turning": a pair that agrees in its
    # first half and not in its second, so that the blocks go from one way to the other.
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(512 * 40 + 5).astype(np.float32)
    x = (y * rng.uniform(0.98, 1.02, y.size)).astype(x_type)
    x[rng.integers(0, x.size, 60)] *= 3
    if kind == "diverged":
        x = rng.standard_normal(y.size).astype(x_type)
    elif kind == "turning":
        x[y.size // 2 :] = rng.standard_normal(y.size - y.size // 2).astype(x_type)
    y = y.astype(y_type)
    lo_x, lo_y = float(np.asarray(x, np.float64).min()), float(np.asarray(y, np.float64).min())
    mean_y = float(np.asarray(y, np.float64).mean())
    params = (lo_x, 1e-7, lo_y, 1e-7, mean_y, mean_y, 1e-7, True)
    codes = KERNEL_TYPES[x.dtype.name], KERNEL_TYPES[y.dtype.name]
    fused, apart = _both(lambda: FUSED.pair_sums(x.view(np.uint8), codes[0], y.view(np.uint8), codes[1], *params))
    assert len(fused) == len(FUSED_SUMS)
    assert all(math.isfinite(v) for v in fused)
    assert _bits(dict(zip(FUSED_SUMS, fused, strict=True))) == _bits(dict(zip(FUSED_SUMS, apart, strict=True)))


def test_fuse_loops_says_and_sets_the_setting(avx512):
    assert FUSED.fuse_loops(False) is True
    assert FUSED.fuse_loops(True) is False
    assert FUSED.fuse_loops(True) is True
