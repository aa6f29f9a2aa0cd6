"""The compiled one-pass kernel (nbprec/compare/_fused.c) against the numpy kernel it replaces, case by case.

The numpy kernel is itself held to the METRICS.md formulas written out (test_fast_paths.py); here the two
must agree to the last few digits on every dtype, layout and edge case, and the dumps' recorded extremes
(which let the compiled kernel read a pair once) must never change a result, right or wrong.
"""

from __future__ import annotations

import importlib
import math
import struct

import ml_dtypes
import numpy as np
import pytest
from threads_support import ticks_inside

from nbprec.compare._sums import EPS_BENCH, FUSED, FUSED_SUMS, direct_sums, sums_values
from nbprec.compare.metrics import KERNEL, METRIC_COLUMNS, tensor_metrics
from nbprec.errors import ComparisonError

needs_fused = pytest.mark.skipif(FUSED is None, reason="the compiled kernel is not built")


def test_the_compiled_kernel_is_built_and_used():
    # `make install` compiles it (setup.py); a silent fall-back to numpy would make every comparison slower
    assert FUSED is not None, "nbprec.compare._fused was not built: reinstall with a C compiler (make install)"
    assert KERNEL.startswith("c (")


def _agree(a: float, b: float, column: str) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if column == "kl_divergence":  # a difference of nearly equal sums: compare on the sums' scale
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-14)
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    y = (rng.standard_normal(150_001) * 3 - 0.5).astype(np.float32)
    y[::37] = 0.0
    nonfinite = y.astype(np.float16)
    nonfinite[3], nonfinite[4000], nonfinite[9] = np.nan, np.inf, -np.inf
    with_nan_bench = y.copy()
    with_nan_bench[77] = np.nan
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        cases = {
            "bf16 vs fp32": (y.astype(ml_dtypes.bfloat16), y),
            "fp16 vs fp32": (y.astype(np.float16), y),
            "fp32 vs fp64": (y, y.astype(np.float64) * (1 + 1e-7)),
            "fp64 vs fp32": (y.astype(np.float64) + 1e-3, y),
            "fp16 vs fp16": (y.astype(np.float16), y.astype(np.float16)),
            "every float16 bit pattern": (every_half, every_half.astype(np.float32) * 1.001),
            "fp16 overflow": ((y * 3e4).astype(np.float16), y * 3e4),
            "nan and inf in the target": (nonfinite, y),
            "nan in the benchmark": (y.astype(ml_dtypes.bfloat16), with_nan_bench),
            "all zero": (np.zeros(5000, np.float16), np.zeros(5000, np.float32)),
            "target all zero": (np.zeros(5000, np.float32), y[:5000]),
            "benchmark all zero": (y[:5000], np.zeros(5000, np.float32)),
            "constant": (np.full(70_000, 3.0, np.float32), np.full(70_000, 3.0, ml_dtypes.bfloat16)),
            "large mean, small spread": (y.astype(np.float64) * 1e-6 + 1e3, y.astype(np.float64) * 1e-6 + 1e3),
            "huge magnitudes": ((y * 1e37).astype(np.float32), (y * 1.01e37).astype(np.float32)),
            "one element": (np.array([2.5], np.float16), np.array([2.0], np.float32)),
            "0-d": (np.float32(1.5), np.float32(1.25)),
            # sides the kernel cannot read in place: converted chunk by chunk
            "int32 vs fp32": (np.round(y * 10).astype(np.int32), y * 10),
            "bool": (y > 0, y > 0.1),
            "float8": (y.astype(ml_dtypes.float8_e4m3fn), y),
            "complex": ((y + 1j * y[::-1]).astype(np.complex64), (y + 1j * y[::-1]).astype(np.complex128)),
            "big-endian": (y.astype(">f4") * 1.01, y),
            "strided": (y[::3].astype(np.float16), y[::3]),
            "2-d, shapes differ": (y[:150_000].reshape(300, 500), y[:150_000].reshape(500, 300)),
        }
    return cases


@needs_fused
@pytest.mark.parametrize("case", list(_cases()))
@pytest.mark.parametrize("chunk", [1000, 1 << 16])
def test_compiled_and_numpy_kernels_agree(case, chunk):
    x, y = _cases()[case]
    with np.errstate(all="ignore"):
        want = tensor_metrics(x, y, kernel="numpy", chunk_size=chunk)
        got = tensor_metrics(x, y, kernel="c", chunk_size=chunk)
    assert got.reason == want.reason
    bad = {c: (got[c], want[c]) for c in METRIC_COLUMNS if not _agree(got[c], want[c], c)}
    assert not bad, bad


_BUILDS = FUSED.available_isas() if FUSED is not None else ()


@pytest.fixture
def build_in_use():
    """Runs the test under one kernel build (``use_isa``) and puts back the one chosen at import."""
    chosen, used = FUSED.ISA, []

    def use(build: str) -> None:
        assert FUSED.use_isa(build) == chosen
        used.append(build)

    yield use
    assert FUSED.use_isa(chosen) == used[-1]


def test_the_fastest_build_the_cpu_runs_is_chosen():
    if FUSED is None:
        pytest.skip("the compiled kernel is not built")
    assert _BUILDS[-1] == "baseline"
    assert _BUILDS[0] == FUSED.ISA
    with pytest.raises(ValueError, match="not a build this CPU runs"):
        FUSED.use_isa("sse9")


_BUILD_CASES = ("bf16 vs fp32", "fp16 vs fp32", "every float16 bit pattern", "nan and inf in the target")


@needs_fused
@pytest.mark.parametrize("build", _BUILDS)
@pytest.mark.parametrize("case", _BUILD_CASES)
def test_every_build_the_cpu_runs_agrees_with_numpy(case, build, build_in_use):
    # the build chosen at import is checked on every case above; the others (baseline, AVX2 under AVX-512) here
    x, y = _cases()[case]
    build_in_use(build)
    with np.errstate(all="ignore"):
        want = tensor_metrics(x, y, kernel="numpy")
        got = tensor_metrics(x, y, kernel="c")
    bad = {c: (got[c], want[c]) for c in METRIC_COLUMNS if not _agree(got[c], want[c], c)}
    assert not bad, bad


@needs_fused
@pytest.mark.parametrize("build", _BUILDS)
def test_every_build_finds_the_far_kl_terms_wherever_they_are(build, build_in_use):
    # KL's terms far from 1 are found with a different compare in each build (far_bits_*): blocks with one far
    # term at each position of a 64-term word, blocks of many far terms, and a last part block of 77 terms
    rng = np.random.default_rng(11)
    n = 512 * 70 + 77
    y = rng.standard_normal(n).astype(np.float32)
    x = y.copy()
    x[np.arange(0, 512 * 64, 513)] *= 3  # one far term in each of 64 blocks, at position (block number)
    x[512 * 64 :] *= rng.uniform(0.5, 1.5, n - 512 * 64).astype(np.float32)
    x = x.astype(ml_dtypes.bfloat16)
    build_in_use(build)
    got, want = (tensor_metrics(x, y, kernel=kernel)["kl_divergence"] for kernel in ("c", "numpy"))
    assert _agree(got, want, "kl_divergence"), (got, want)
    got, want = (tensor_metrics(x[: 512 * 64], y[: 512 * 64], kernel=k)["kl_divergence"] for k in ("c", "numpy"))
    assert _agree(got, want, "kl_divergence"), (got, want)  # the blocks of one far term alone


@pytest.mark.parametrize("build", _BUILDS)
@pytest.mark.parametrize("n", [512 * 3 + 13, 512 * 3 + 7, 5])
def test_every_build_corrects_far_kl_terms_in_a_blocks_last_terms(build, n, build_in_use):
    # a few far terms among the last terms of the last block (those after its last whole vector of 8 or 4, or a
    # tensor shorter than a vector), with the near-series path still on: each term's correction is found there
    # too. Far from 1 by far: x at its maximum where y is at its minimum (its floored shifted value, a KL term of
    # about kx log(kx / eps)); the extremes stay those of the other terms, which stay near.
    rng = np.random.default_rng(n)
    y = (rng.standard_normal(n) + 4).astype(np.float32)
    x = (y * rng.uniform(0.999, 1.001, n)).astype(np.float32)
    for k in (n - 1, n - 3):
        y[k], x[k] = y[: n - 3].min(), x[: n - 3].max()
    build_in_use(build)
    got, want = (tensor_metrics(x, y, kernel=kernel)["kl_divergence"] for kernel in ("c", "numpy"))
    assert _agree(got, want, "kl_divergence"), (got, want)


@needs_fused
@pytest.mark.parametrize("build", _BUILDS)
@pytest.mark.parametrize("side", ["target", "benchmark"])
@pytest.mark.parametrize("where", ["first element", "a middle block", "last element", "every element"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float64])
def test_a_side_holding_nan_gives_every_column_as_before(build, side, where, dtype, build_in_use):
    """Once KL's running sum is NaN the kernel stops computing KL terms (NaN plus any term is NaN), and takes a
    block where one side is nothing but NaN on the other side's values alone: a float16 run that overflowed is
    mostly NaN. Wherever the NaN is (before or after blocks whose KL terms are far from 1, and whose float64
    terms take the C library's log), in one pass or in parts, every column is the numpy kernel's, KL NaN among
    them."""
    rng = np.random.default_rng(17)
    n = FUSED.BLOCK * 9 + 77
    y = rng.standard_normal(n).astype(np.float32)
    x = (y * rng.uniform(0.2, 5.0, n)).astype(np.float32)  # many KL terms far from 1: the general loop
    spot = {"first element": [0], "a middle block": [FUSED.BLOCK * 4 + 3], "last element": [n - 1]}.get(where)
    nan_side = x if side == "target" else y
    nan_side[slice(None) if spot is None else spot] = np.nan
    x = x.astype(dtype)
    build_in_use(build)
    for chunk in (1 << 20, FUSED.BLOCK * 2):  # (in parts: pair_accumulate, the state carried between them)
        with np.errstate(all="ignore"):
            got = tensor_metrics(x, y, kernel="c", chunk_size=chunk)
            want = tensor_metrics(x, y, kernel="numpy", chunk_size=chunk)
        assert math.isnan(got["kl_divergence"])
        assert got.reason == want.reason
        bad = {c: (got[c], want[c]) for c in METRIC_COLUMNS if not _agree(got[c], want[c], c)}
        assert not bad, (chunk, bad)


@needs_fused
@pytest.mark.parametrize("build", _BUILDS)
@pytest.mark.parametrize(
    "case", ["target of NaN, benchmark of zeros", "target of NaN, tiny benchmark", "target of zeros, benchmark of NaN"]
)
def test_a_side_of_nothing_but_nan_gives_the_relative_errors_as_before(build, case, build_in_use):
    """The kernel takes the blocks where one side is nothing but NaN apart (once KL's sum is NaN): a benchmark
    whose every |y| is at most EPS makes each relative-error term 0, not NaN, even beside a target of NaN."""
    n = FUSED.BLOCK * 5 + 3
    nan, zeros = np.full(n, np.nan, np.float32), np.zeros(n, np.float32)
    x, y = {
        "target of NaN, benchmark of zeros": (nan, zeros),
        "target of NaN, tiny benchmark": (nan.astype(ml_dtypes.bfloat16), np.full(n, 1e-30, np.float32)),
        "target of zeros, benchmark of NaN": (zeros, nan),
    }[case]
    build_in_use(build)
    for chunk in (1 << 20, FUSED.BLOCK * 2):
        with np.errstate(all="ignore"):
            got = tensor_metrics(x, y, kernel="c", chunk_size=chunk)
            want = tensor_metrics(x, y, kernel="numpy", chunk_size=chunk)
        bad = {c: (got[c], want[c]) for c in METRIC_COLUMNS if not _agree(got[c], want[c], c)}
        assert not bad, (chunk, bad)
        if case != "target of zeros, benchmark of NaN":
            assert got["accumulated_rel_err"] == got["max_rel_err"] == 0.0


def _min_max_cases() -> dict[str, np.ndarray]:
    """Arrays for min_max: every bit pattern of the 16-bit types, edge values, sizes across its 16,384-value
    parts, NaN alone."""
    rng = np.random.default_rng(7)
    every16 = np.arange(1 << 16, dtype=np.uint16)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 6e-8, -6e-8, 65504.0, -65504.0, 3.4e38, -3.4e38]
    wide = rng.standard_normal(40_000) * 1e3
    wide[[5, 16_383, 16_384, 39_999]] = [np.nan, -np.inf, 7e3, np.nan]
    return {
        "every float16 pattern": every16.view(np.float16),
        "every bfloat16 pattern": every16.view(ml_dtypes.bfloat16),
        "float32 edges": np.array(edges * 3, dtype=np.float32),
        "float16 edges": np.array([v for v in edges if abs(v) < 7e4] * 3, dtype=np.float16),
        "float32 across parts": wide.astype(np.float32),
        "bfloat16 across parts": wide.astype(ml_dtypes.bfloat16),
        "float64 across parts": wide,
        "negative only": -np.abs(wide[:20_000]).astype(np.float16) - 1,
        "nan only": np.full(33_000, np.nan, dtype=np.float32),
        "empty": np.zeros(0, dtype=np.float16),
    }


_TYPE_CODES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2,
               np.dtype(ml_dtypes.bfloat16): 3}  # fmt: skip


@needs_fused
@pytest.mark.parametrize("build", _BUILDS)
@pytest.mark.parametrize("case", list(_min_max_cases()))
def test_min_max_gives_numpys_extremes_ignoring_nan_and_counts_nan(case, build, build_in_use):
    x = _min_max_cases()[case]
    build_in_use(build)
    lo, hi, nans = FUSED.min_max(x.view(np.uint8), _TYPE_CODES[x.dtype])
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float64)
    finite = wide[~np.isnan(wide)]
    assert nans == int(np.isnan(wide).sum())
    if finite.size:
        assert (lo, hi) == (finite.min(), finite.max())
    else:
        assert (lo, hi) == (math.inf, -math.inf)


def _extremes(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    with np.errstate(invalid="ignore"):
        xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(xs.min()), float(xs.max()), float(ys.min()), float(ys.max())


@needs_fused
@pytest.mark.parametrize("case", ["bf16 vs fp32", "fp16 overflow", "nan and inf in the target", "constant"])
def test_recorded_extremes_never_change_a_result(case):
    x, y = _cases()[case]
    plain = tensor_metrics(x, y)
    true = _extremes(x, y)
    lo_x, hi_x, lo_y, hi_y = true
    hints = {
        "true": true,
        "min too low": (lo_x - 1.0, hi_x, lo_y, hi_y),
        "max too high": (lo_x, hi_x, lo_y, hi_y + 0.5),
        "rounded": tuple(float(np.float16(v)) if abs(v) < 6e4 else v for v in true),
        "swapped sides": (lo_y, hi_y, lo_x, hi_x),
        "not numbers": (math.nan, math.nan, lo_y, hi_y),
        "min above max": (1.0, -1.0, lo_y, hi_y),
    }
    for label, extremes in hints.items():
        with np.errstate(all="ignore"):
            got = tensor_metrics(x, y, extremes=extremes)
        assert got.reason == plain.reason, label
        for column in METRIC_COLUMNS:  # the same passes with the same parameters: bit for bit
            a, b = got[column], plain[column]
            assert a == b or (math.isnan(a) and math.isnan(b)), (label, column, a, b)
        usable = all(math.isfinite(v) for v in extremes) and extremes[0] <= extremes[1] and extremes[2] <= extremes[3]
        expected = (tuple(extremes) == true) if usable else None  # unusable ones are not used, right or wrong
        assert got.extremes_held == expected, label
    assert plain.extremes_held is None


@needs_fused
def test_the_kernel_reports_each_sides_extremes():
    x, y = _cases()["bf16 vs fp32"]
    lo_x, _, lo_y, _ = _extremes(x, y)
    sums = FUSED.pair_sums(x.view(np.uint8), 3, y.view(np.uint8), 1, lo_x, 1e-6, lo_y, 1e-6, 0.0, 0.0, 1e-7, True)
    assert len(sums) == len(FUSED_SUMS)
    found = dict(zip(FUSED_SUMS, sums, strict=True))
    assert (found["min_x"], found["max_x"], found["min_y"], found["max_y"]) == _extremes(x, y)
    assert found["n"] == x.size


@needs_fused
def test_kernel_log_is_accurate_over_the_whole_double_range():
    rng = np.random.default_rng(2)
    near_one = 1 + rng.uniform(-1e-3, 1e-3, 2000)
    wide = np.exp(rng.uniform(-700, 700, 2000))
    for a in near_one:  # log(a / 1): the exact reference; ratios near 1 are where KL's cancellation is
        assert math.isclose(FUSED.log_ratio(a, 1.0), math.log(a), rel_tol=3e-15), a
    extremes = [2.2250738585072014e-308, 1.7976931348623157e308]
    for a, b in [*zip(wide, wide[::-1], strict=True), (extremes[0], extremes[1]), (extremes[1], extremes[0])]:
        assert math.isclose(FUSED.log_ratio(a, b), math.log(a) - math.log(b), rel_tol=3e-15, abs_tol=1e-12), (a, b)
    with pytest.raises(ValueError, match="positive normal"):
        FUSED.log_ratio(0.0, 1.0)


_KL_KINDS = ["bf16 noise", "fp16 noise", "diverged", "diverging half-way", "a few outliers"]


def _kl_case(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    y = rng.standard_normal(6000).astype(np.float32)
    x = {
        "bf16 noise": y.astype(ml_dtypes.bfloat16),  # nearly every ratio within 1/32 of 1: the short series
        "fp16 noise": y.astype(np.float16),
        "diverged": (y + rng.standard_normal(y.size).astype(np.float32)),  # most far from 1: log_ratio throughout
        "diverging half-way": np.concatenate([y[:3000], y[3000:] * rng.uniform(0.2, 3, 3000).astype(np.float32)]),
        "a few outliers": np.where(rng.random(y.size) < 0.01, -y, y),  # the series, then a few corrections
    }[kind]
    return x, y


@needs_fused
@pytest.mark.parametrize("kind", _KL_KINDS)
def test_each_kl_term_is_exact_whichever_path_its_block_takes(kind):
    """The kernel's KL sum, sum kx log(kx / ky), against the same sum in 40-digit decimals: the short series
    (terms near 1), the corrections (terms far from 1) and log_ratio (blocks of far terms) each keep every
    term to a few ulp, so the sum is off by no more than rounding allows (1e-13 of the sum of |terms|)."""
    from decimal import Decimal, localcontext

    from nbprec.compare._sums import _pair_params

    x, y = _kl_case(kind)
    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    params = _pair_params((xs.min(), xs.max(), ys.min(), ys.max()), 1e-7)
    assert params[-1]  # kl_normal: the kernel's fast KL loops
    off_x, floor_x, off_y, floor_y = params[:4]
    found = dict(zip(FUSED_SUMS, FUSED.pair_sums(xs.view(np.uint8), 0, ys.view(np.uint8), 0, *params), strict=True))
    kx, ky = np.maximum(xs - off_x, floor_x), np.maximum(ys - off_y, floor_y)  # exact: as the kernel forms them
    with localcontext() as ctx:
        ctx.prec = 40
        terms = [Decimal(a) * (Decimal(a) / Decimal(b)).ln() for a, b in zip(kx.tolist(), ky.tolist(), strict=True)]
        exact, scale = float(sum(terms)), float(sum(abs(t) for t in terms))
    assert abs(found["kl_t"] - exact) <= 1e-13 * scale, (found["kl_t"], exact, scale)


def _kl_exact(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """KL as METRICS.md defines it, in 40-digit decimal arithmetic (each side min-max normalised, floored at
    float32 eps, divided by its sum; sum P log(P / Q)), and the sum of |P log(P / Q)|, the scale its rounding
    errors in double precision live at."""
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 40
        sides = []
        for v in (x, y):
            values = [Decimal(float(a)) for a in np.asarray(v, np.float64)]
            low, span = min(values), max(values) - min(values)
            floor = Decimal(float(np.finfo(np.float32).eps))
            k = [max((a - low) / span, floor) for a in values]
            total = sum(k)
            sides.append([a / total for a in k])
        terms = [p * (p / q).ln() for p, q in zip(*sides, strict=True)]
        return float(sum(terms)), float(sum(abs(t) for t in terms))


@needs_fused
@pytest.mark.parametrize("kind", _KL_KINDS)
def test_kl_matches_its_definition_computed_exactly(kind):
    """KL itself, from the sums, against its definition in 40-digit decimals. The sums are taken before the
    normalisation (one pass), so KL = kt / sum kx + log(sum ky / sum kx) is a small difference: the rounding of
    the two sums (1e-16 of each) stays in it as an absolute error, below float64 eps, the level under which
    METRICS.md reports KL as 0. Beyond that it is exact to rounding at the scale of its terms."""
    eps = float(np.finfo(np.float64).eps)
    x, y = _kl_case(kind)
    want, scale = _kl_exact(x, y)
    for chunk in (1000, 1 << 16):
        got = tensor_metrics(x, y, kernel="c", chunk_size=chunk)["kl_divergence"]
        assert abs(got - want) <= 1e-13 * scale + eps, (chunk, got, want, scale)
    assert abs(tensor_metrics(x, y, kernel="numpy")["kl_divergence"] - want) <= 1e-13 * scale + eps


def test_only_sides_of_numbers_take_the_unchecked_kl_loops():
    """``kl_normal`` promises the kernel that every KL term is a positive normal double: a side holding NaN
    or inf (its span NaN or inf) or a span near the top of the double range must not make that promise."""
    from nbprec.compare._sums import _pair_params

    assert _pair_params((0.0, 1.0, -2.0, 3.0), 1e-7)[-1]
    for extremes in [(0.0, 1.0, math.nan, math.nan), (math.nan, math.nan, 0.0, 1.0), (0.0, math.inf, 0.0, 1.0),
                     (-1e308, 1e308, 0.0, 1.0)]:  # fmt: skip
        assert not _pair_params(extremes, 1e-7)[-1], extremes


@needs_fused
def test_bad_buffers_are_errors_not_crashes():
    x = np.ones(10, np.float32)
    with pytest.raises(ValueError, match="element counts differ"):
        FUSED.pair_sums(x.view(np.uint8), 1, x[:5].view(np.uint8), 1, 0, 1, 0, 1, 0, 0, 1e-7, True)
    with pytest.raises(ValueError, match="not a whole number"):
        FUSED.min_max(x.view(np.uint8)[:7], 1)
    with pytest.raises(ValueError, match="unknown element type"):
        FUSED.min_max(x.view(np.uint8), 9)
    with pytest.raises(BufferError):
        FUSED.min_max(memoryview(x.view(np.uint8))[::2], 1)  # not contiguous


@needs_fused
def test_the_kernel_lets_other_threads_run():
    """The GIL is released inside the kernel: this thread runs Python code while another thread is inside a
    long ``pair_sums`` call."""
    x = np.random.default_rng(0).standard_normal(16_000_000).astype(np.float32)
    inside, seconds = ticks_inside(
        lambda: FUSED.pair_sums(x.view(np.uint8), 1, x.view(np.uint8), 1, 0, 1e-6, 0, 1e-6, 0, 0, 1e-7, False)
    )
    assert inside, f"no tick of this thread during the {1e3 * seconds:.0f} ms kernel call"


def _metric_cases(labelled: bool = False) -> list[tuple]:
    """pair_metrics calls (``labelled``: (label, call)): every element type, one element, all-zero sides, a
    constant, a large mean with a small spread, one element apart from 10^5 zeros (its one-pass standard deviation
    cancels, even centred), values whose squares overflow float64, NaN, inf, and right, wrong, unusable and missing
    extremes."""
    rng = np.random.default_rng(11)
    calls = []
    y64 = rng.standard_normal(4000) * 3 - 0.5
    sides = {
        "noise": (y64 + rng.standard_normal(4000) * 1e-3, y64),
        "one element": (np.array([2.5]), np.array([2.0])),
        "target zero": (np.zeros(600), y64[:600]),
        "benchmark zero": (y64[:600], np.zeros(600)),
        "both zero": (np.zeros(600), np.zeros(600)),
        "constant": (np.full(700, 3.0), np.full(700, 3.0)),
        "large mean": (y64 * 1e-6 + 1e3, y64 * 1.0001e-6 + 1e3),
        "nan": (np.where(np.arange(4000) == 9, np.nan, y64), y64),
        "inf": (y64, np.where(np.arange(4000) == 9, np.inf, y64)),
        "outlier": (np.where(np.arange(100_000) == 7, 1.0, 0.0), np.where(np.arange(100_000) == 7, 1.0, 0.0)),
        "huge": (y64 * 1e300, y64 * 1e300),  # (squares beyond float64: inf in the narrower types)
    }
    for label, (x64, y) in sides.items():
        for (xt, xdt), (yt, ydt) in [((0, np.float64), (0, np.float64)), ((2, np.float16), (1, np.float32)),
                                     ((3, ml_dtypes.bfloat16), (1, np.float32))]:  # fmt: skip
            with np.errstate(over="ignore", invalid="ignore"):
                x, yy = x64.astype(xdt), y.astype(ydt)
            with np.errstate(invalid="ignore"):
                right = tuple(float(v) for v in (np.nanmin(x), np.nanmax(x), np.nanmin(yy), np.nanmax(yy)))
            wrong = (right[0] - 1.0, right[1], right[2], right[3] * 2 + 1)
            for hints in (right, wrong, (1.0, 0.0, 0.0, 1.0), (math.nan, 1.0, 0.0, 1.0), None):
                call = (x.view(np.uint8), xt, yy.view(np.uint8), yt, hints, EPS_BENCH[yt])
                calls.append((label, call) if labelled else call)
    return calls


def _python_metrics(call: tuple):
    """What small_pair gave before pair_metrics: the Python finish of _sums.py around one pair_sums call."""
    x, xt, y, yt, hints, eps_b = call
    checked = direct_sums((x, xt, y, yt), eps_b, hints)
    found = None if checked is None else sums_values(checked[0], checked[0].n)
    return None if found is None else (*found, checked[1])


#: numpy's dtype of each kernel type code
KERNEL_DTYPES = {0: np.float64, 1: np.float32, 2: np.float16, 3: ml_dtypes.bfloat16}


def _array_metrics(call: tuple):
    """What tensor_metrics gives on the arrays of a pair_metrics call, as pair_metrics gives it."""
    x, xt, y, yt, hints, _eps_b = call
    with np.errstate(all="ignore"):
        found = tensor_metrics(x.view(KERNEL_DTYPES[xt]), y.view(KERNEL_DTYPES[yt]), extremes=hints)
    return found.values, found.reason, found.extremes_held, found.nonfinite


def _bits(measured, nan_signs: bool = True):
    """The columns' bits (``nan_signs=False``: every NaN as one: Python's sum of two NaN takes the sign of either,
    depending on how its interpreter has specialised the addition by then)."""
    if measured is None:
        return None
    columns = {k: struct.pack("<d", math.nan if not nan_signs and v != v else v) for k, v in measured[0].items()}
    return (columns, *measured[1:])


@needs_fused
def test_pair_metrics_is_tensor_metrics_to_the_bit():
    """pair_metrics (C) gives what tensor_metrics gives on the pair's arrays: the same columns in the same order
    and bits, the same reason, the same verdict on the extremes and the same NaN/inf counts; None only where a
    standard deviation needs the arrays' exact second pass or squares overflow float64. Where _sums.py's Python
    finish (direct_sums and sums_values around pair_sums) measures a pair, it agrees too."""
    outcomes = set()
    for label, call in _metric_cases(labelled=True):
        got, want = FUSED.pair_metrics(*call), _array_metrics(call)
        if got is None:
            assert label in ("outlier", "huge"), (label, call[1], call[3], call[4])
        else:
            assert _bits(got, False) == _bits(want, False), (label, call[1], call[3], call[4], got, want)
            assert list(got[0]) == list(want[0])
        python = _python_metrics(call)
        if python is not None:
            assert _bits(got[:3], False) == _bits(python, False), (label, call[4])
        outcomes.add("none" if got is None else (got[1][:10], got[2]))
    # every branch was taken: measured with right, wrong and no usable extremes, a zero side's reason, NaN and inf
    # counted with and without usable extremes, and no result
    assert {
        "none",
        ("", True),
        ("", False),
        ("", None),
        ("target is ", True),
        ("non-finite", True),
        ("non-finite", None),
    } <= outcomes, outcomes


@needs_fused
def test_pair_metrics_finds_extremes_as_tensor_metrics_does():
    """Without usable extremes, pair_metrics finds each side's minimum and maximum in one pass where
    tensor_metrics goes window by window (_kernels.WINDOW elements): the same columns on a pair longer than two
    windows, with zeros of both signs as windows' minima, and NaN and inf beyond the first window."""
    from nbprec.compare._kernels import WINDOW

    n = 2 * WINDOW + 1000
    rng = np.random.default_rng(5)
    y = np.abs(rng.standard_normal(n)).astype(np.float32)
    for cut in (0, WINDOW, 2 * WINDOW):  # a window's minimum: +0 in the first, -0 in the others
        y[cut + 3] = 0.0 if cut == 0 else -0.0
    x = (y * 1.001).astype(np.float32)
    x[WINDOW + 7], x[2 * WINDOW + 9] = np.inf, np.nan
    for hints in (None, (math.nan,) * 4):
        call = (x.view(np.uint8), 1, y.view(np.uint8), 1, hints, EPS_BENCH[1])
        got, want = FUSED.pair_metrics(*call), _array_metrics(call)
        assert _bits(got, False) == _bits(want, False)
        assert got[3] == (2, 0) and got[2] is None
    x[WINDOW + 7] = x[2 * WINDOW + 9] = 1.0
    finite = (x.view(np.uint8), 1, y.view(np.uint8), 1, None, EPS_BENCH[1])
    assert _bits(FUSED.pair_metrics(*finite)) == _bits(_array_metrics(finite))


@needs_fused
def test_pair_metrics_many_is_pair_metrics_of_each_call():
    calls = _metric_cases()
    many = FUSED.pair_metrics_many(calls)
    assert len(many) == len(calls) and FUSED.pair_metrics_many([]) == []
    assert [_bits(m) for m in many] == [_bits(FUSED.pair_metrics(*call)) for call in calls]


@needs_fused
def test_pair_metrics_refuses_bad_calls_whole():
    x = np.ones(10, np.float32).view(np.uint8)
    good = (x, 1, x, 1, (1.0, 1.0, 1.0, 1.0), 1e-7)
    with pytest.raises(ValueError, match="element counts differ"):
        FUSED.pair_metrics_many([good, (x, 1, x[:20], 1, *good[4:])])
    with pytest.raises(TypeError, match="6 arguments"):
        FUSED.pair_metrics_many([good, good[:5]])
    with pytest.raises(TypeError, match="list of argument tuples"):
        FUSED.pair_metrics_many(5)
    with pytest.raises(ValueError, match="unknown element type"):
        FUSED.pair_metrics_many([(x, 7, x, 1, *good[4:])])
    with pytest.raises(TypeError, match="tuple of 4 floats"):
        FUSED.pair_metrics(x, 1, x, 1, (1.0, 2.0), 1e-7)
    with pytest.raises(TypeError, match="6 arguments"):
        FUSED.pair_metrics(*good[:5])
    assert FUSED.pair_metrics(x[:0], 1, x[:0], 1, good[4], 1e-7) is None  # empty: no metrics from sums
    assert _bits(FUSED.pair_metrics_many([good, good])[1]) == _bits(FUSED.pair_metrics(*good))  # (released: usable)


@needs_fused
def test_pair_metrics_many_lets_other_threads_run():
    x = np.random.default_rng(0).standard_normal(4_000_000).astype(np.float32)
    call = (x.view(np.uint8), 1, x.view(np.uint8), 1, (float(x.min()), float(x.max())) * 2, 1e-7)
    inside, seconds = ticks_inside(lambda: FUSED.pair_metrics_many([call] * 4))
    assert inside, f"no tick of this thread during the {1e3 * seconds:.0f} ms kernel call"


_STALE_BUILD = """
import importlib, sys, types
import nbprec.compare
sys.modules["nbprec.compare._fused"] = types.ModuleType("nbprec.compare._fused")  # built before pair_metrics
import numpy as np
metrics = importlib.import_module("nbprec.compare.metrics")
small_pair = importlib.import_module("nbprec.compare.small_pairs").small_pair
assert metrics.KERNEL == "numpy", metrics.KERNEL
assert small_pair("a.pt", "float32", "b.pt", "float32", (3,), (0.0, 1.0, 0.0, 1.0)) is None
print(metrics.tensor_metrics(np.arange(5.0), np.arange(5.0) + 1e-3).values["cosine"])
"""


def test_an_extension_built_before_pair_metrics_counts_as_no_kernel():
    """A compiled kernel left from an older build (a pull without ``make install``) lacks ``pair_metrics``: the
    comparison then runs on the numpy kernel (``KERNEL`` says so), as without a compiler, rather than failing."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _STALE_BUILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0.999


def test_unknown_or_missing_kernels_are_errors(monkeypatch):
    with pytest.raises(ComparisonError, match="unknown kernel"):
        tensor_metrics(np.ones(3), np.ones(3), kernel="gpu")
    from nbprec.compare import metrics

    monkeypatch.setattr(metrics, "FUSED", None)
    with pytest.raises(ComparisonError, match="not built"):
        tensor_metrics(np.ones(3), np.ones(3), kernel="c")
    assert tensor_metrics(np.ones(3), np.ones(3))["cosine"] == 1.0  # auto falls back to numpy


def test_wrong_recorded_extremes_change_nothing_and_stop_being_used(tmp_path, monkeypatch):
    """A dump whose statistics do not hold the true minima and maxima (a format that rounds them) gives the
    same table as one whose statistics are right; after a few wrong ones the engine stops handing them over."""
    from nbprec.compare import compare, engine
    from nbprec.formats.native import NativeDumpWriter
    from nbprec.stats import tensor_stats

    rng = np.random.default_rng(4)
    bench_arrays = [rng.standard_normal(3000).astype(np.float32) for _ in range(30)]

    def write(name: str, arrays, shift: float = 0.0) -> None:
        with NativeDumpWriter(tmp_path / name) as writer:
            for i, array in enumerate(arrays):
                stats = tensor_stats(array)
                stats["min"], stats["max"] = stats["min"] - shift, stats["max"] + shift
                writer.write_tensor({"name": f"op{i}.output.0", "op": f"op{i}", "order": i}, array, stats=stats)

    write("bench", bench_arrays)
    write("right", [a.astype(ml_dtypes.bfloat16) for a in bench_arrays])
    write("wrong", [a.astype(ml_dtypes.bfloat16) for a in bench_arrays], shift=0.25)
    outcomes: list[bool | None] = []
    record = engine._ExtremeHints.record
    monkeypatch.setattr(engine._ExtremeHints, "record", lambda self, held: (outcomes.append(held), record(self, held)))

    with_nan = [np.where(np.arange(a.size) == 7, np.nan, a).astype(ml_dtypes.bfloat16) for a in bench_arrays]
    write("with_nan", with_nan)  # statistics that ignore NaN, as nbprec records them: right, not wrong
    compare(tmp_path / "with_nan", tmp_path / "bench", workers=1)
    assert outcomes == [True] * 30
    outcomes.clear()
    write("nan_stats", with_nan, shift=math.nan)  # NaN extremes, as torch's max records them: not usable
    compare(tmp_path / "nan_stats", tmp_path / "bench", workers=1)
    assert outcomes == [None] * 30  # neither counted as wrong nor as right
    outcomes.clear()
    right = compare(tmp_path / "right", tmp_path / "bench", workers=1).table
    assert outcomes == [True] * 30  # exact statistics: every pair read once
    outcomes.clear()
    wrong = compare(tmp_path / "wrong", tmp_path / "bench", workers=1).table
    assert outcomes[:5] == [False] * 5 and all(held is None for held in outcomes[5:])  # no longer given
    for column in METRIC_COLUMNS:
        np.testing.assert_array_equal(wrong[column].to_numpy(), right[column].to_numpy(), err_msg=column)


def test_hints_on_sides_that_are_converted_and_on_a_side_with_nan():
    """Extremes help every layout (an int target is converted chunk by chunk), and a NaN found by the pass
    costs one more pass, with the same result as without hints."""
    x, y = _cases()["int32 vs fp32"]
    got = tensor_metrics(x, y, chunk_size=1000, extremes=_extremes(x, y))
    assert got.extremes_held is True
    plain = tensor_metrics(x, y, chunk_size=1000)
    assert all(got[c] == plain[c] or (math.isnan(got[c]) and math.isnan(plain[c])) for c in METRIC_COLUMNS)
    x, y = _cases()["nan in the benchmark"]
    finite_y = y[~np.isnan(y)]
    hints = (*_extremes(x, y)[:2], float(finite_y.min()), float(finite_y.max()))  # recorded ignoring the NaN
    got, plain = tensor_metrics(x, y, extremes=hints), tensor_metrics(x, y)
    assert got.extremes_held is True and got.reason == plain.reason  # right NaN aside; read twice all the same
    assert all(got[c] == plain[c] or (math.isnan(got[c]) and math.isnan(plain[c])) for c in METRIC_COLUMNS)


@needs_fused
def test_the_direct_path_of_the_usual_pair_gives_the_general_paths_bits(monkeypatch):
    """A contiguous pair with its extremes known goes to the kernel in one call without the general path's
    machinery (:func:`nbprec.compare._kernels.in_place_pair`); with that path switched off, every case (NaN,
    inf, zeros, a layer-norm-like side whose variance cancels, wrong extremes) gives the same result, bit for
    bit, reason and held flag included."""
    metrics = importlib.import_module("nbprec.compare.metrics")
    floats = {"float16", "float32", "float64", "bfloat16"}
    cases = {k: (x, y) for k, (x, y) in _cases().items() if {x.dtype.name, y.dtype.name} <= floats}
    rng = np.random.default_rng(9)
    ln = (1.0 + rng.standard_normal(4096) * 1e-6).astype(np.float32)
    cases["variance cancels"] = (ln.astype(ml_dtypes.bfloat16), ln)
    taken = []
    original = metrics.in_place_pair
    monkeypatch.setattr(metrics, "in_place_pair", lambda x, y: taken.append(1) or original(x, y))
    for label, (x, y) in cases.items():
        for extremes in (_extremes(x, y), (-1.0, 1.0, -1.0, 1.0)):
            with np.errstate(all="ignore"):
                direct = tensor_metrics(x, y, extremes=extremes)
                monkeypatch.setattr(metrics, "in_place_pair", lambda x, y: None)
                general = tensor_metrics(x, y, extremes=extremes)
                monkeypatch.setattr(metrics, "in_place_pair", lambda x, y: taken.append(1) or original(x, y))
            assert (direct.reason, direct.extremes_held, direct.nonfinite) == (
                general.reason, general.extremes_held, general.nonfinite,
            ), label  # fmt: skip
            for column in METRIC_COLUMNS:
                a, b = direct[column], general[column]
                assert a == b or (math.isnan(a) and math.isnan(b)), (label, column, a, b)
    assert taken and original(*cases["bf16 vs fp32"]) is not None


def _kl_sum_block_by_block(x: np.ndarray, y: np.ndarray, params: tuple) -> tuple[float, float]:
    """sum kx log(kx / ky) as the kernel's C-library loop adds it (``kl_block_libm``): term by term in order, in
    blocks of 512 whose sums are added in order, every operation a float64 one; and the sum of |terms|."""
    off_x, floor_x, off_y, floor_y = params[:4]
    total = scale = 0.0
    with np.errstate(all="ignore"):
        kx = np.maximum(np.asarray(x, np.float64) - off_x, floor_x)  # (NaN stays NaN, as in the kernel)
        ky = np.maximum(np.asarray(y, np.float64) - off_y, floor_y)
        for start in range(0, len(kx), 512):
            block = 0.0
            for a, b in zip(kx[start : start + 512].tolist(), ky[start : start + 512].tolist(), strict=True):
                ratio = a / b if b != 0.0 else math.copysign(math.inf, a)
                term = a * (float(np.log(np.float64(ratio))) if ratio == ratio else ratio)
                block += term
                scale += abs(term)
            total += block
    return total, scale


@needs_fused
@pytest.mark.parametrize("target", ["float16", "bfloat16", "float32", "float64"])
def test_kl_of_sides_holding_nan_or_inf_is_the_c_librarys_sum(target):
    """A side holding NaN or inf (a float16 overflow) makes some KL terms infinite or NaN: the kernel decides those
    blocks without the C library's log of every term, and its sum is still the one that log gives (+inf, -inf or
    NaN, and the finite sum where the odd terms are finite), on blocks holding either kind, both signs or both."""
    from nbprec.compare._sums import _pair_params

    rng = np.random.default_rng(5)
    dtype = {"bfloat16": ml_dtypes.bfloat16}.get(target, np.dtype(target))
    code = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}[target]
    seen = set()
    for trial in range(120):
        n = int(rng.integers(1, 2500))
        y = (rng.standard_normal(n) * 3).astype(np.float32)
        x = (y + rng.standard_normal(n).astype(np.float32) * 0.01).astype(np.float32)
        for side in (x, y):
            if rng.random() < 0.7:
                spots = rng.integers(0, n, size=int(rng.integers(1, 2 + n // int(rng.choice([1, 8, 200])))))
                side[spots] = rng.choice([np.nan, np.inf, -np.inf], size=len(spots), p=[0.2, 0.5, 0.3])
        xs, ys = x.astype(dtype), y
        xd, yd = xs.astype(np.float64), ys.astype(np.float64)
        extremes = []
        for v in (xd, yd):  # (min, max) ignoring NaN, as the dumps record them
            numbers = v[~np.isnan(v)]
            extremes += [float(numbers.min()), float(numbers.max())] if numbers.size else [math.nan, math.nan]
        with np.errstate(all="ignore"):
            recorded = _pair_params(tuple(extremes), 1e-7)  # (a side holding inf has an infinite floor)
        fixed = (0.0, 1e-7, 0.0, 1e-7, 0.0, 0.0, 1e-7, False)  # (finite floors: inf terms of both signs in a block)
        for params in (recorded, fixed):
            found = dict(zip(FUSED_SUMS, FUSED.pair_sums(xs, code, ys, 1, *params), strict=True))["kl_t"]
            want, scale = _kl_sum_block_by_block(xd, yd, params)
            if math.isfinite(want):  # (no odd term: the kernel's own logarithms, exact to a few ulp)
                assert abs(found - want) <= 1e-12 * scale, (trial, params, found, want)
            else:
                assert found == want or (math.isnan(found) and math.isnan(want)), (trial, params, found, want)
            seen.add("nan" if want != want else "+inf" if want == math.inf else "-inf" if want == -math.inf else "x")
    assert {"nan", "+inf", "-inf", "x"} <= seen, seen  # (every outcome was met)


@needs_fused
@pytest.mark.parametrize("target", ["float16", "bfloat16", "float32", "float64"])
def test_nonfinite_counts_are_numpys_isnan_and_isinf(target):
    """The kernel's count of NaN and infinities by bit patterns: every float16 pattern, and random patterns of
    the wider types (NaN of every payload and sign among them)."""
    rng = np.random.default_rng(3)
    width = {"float64": np.uint64, "float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}[target]
    if target == "float16":
        bits = np.arange(1 << 16, dtype=np.uint16)
    else:
        bits = rng.integers(0, np.iinfo(width).max, size=70_000, dtype=width, endpoint=True)
        exponent = {"float64": 0x7FF0000000000000, "float32": 0x7F800000, "bfloat16": 0x7F80}[target]
        bits[::7] |= width(exponent)  # (many infinities and NaN)
        bits[::11] &= width(exponent) | width(1 << (bits.itemsize * 8 - 1))  # (infinities of both signs)
    values = bits.view({"bfloat16": ml_dtypes.bfloat16}.get(target, np.dtype(target)))
    code = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}[target]
    with np.errstate(invalid="ignore"):  # (signalling NaN patterns among them)
        as_f64 = values.astype(np.float64)
    assert FUSED.nonfinite_counts(values, code) == (int(np.isnan(as_f64).sum()), int(np.isinf(as_f64).sum()))
    assert FUSED.nonfinite_counts(values[:0], code) == (0, 0)


@needs_fused
@pytest.mark.parametrize("target", ["float16", "bfloat16", "float32", "float64"])
def test_a_pair_without_recorded_extremes_counts_nan_and_inf_in_its_extremes_pass(target):
    """A pair without usable recorded extremes (the usual pair holding NaN or inf) takes each side's extremes in a
    first pass, which also counts its NaN and infinities (no third pass over the sides for them): the counts in
    the reason and the result are numpy's isnan and isinf, whatever the patterns, either side."""
    rng = np.random.default_rng(5)
    width = {"float64": np.uint64, "float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}[target]
    dtype = {"bfloat16": ml_dtypes.bfloat16}.get(target, np.dtype(target))
    code = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}[target]
    exponent = {"float64": 0x7FF0000000000000, "float32": 0x7F800000, "float16": 0x7C00, "bfloat16": 0x7F80}[target]
    finite = rng.standard_normal(40_000).astype(np.float32).astype(dtype)
    bits = finite.view(width).copy()
    bits[::97] |= width(exponent)  # NaN of many payloads, and infinities where the mantissa was 0
    bits[::211] &= width(exponent) | width(1 << (bits.itemsize * 8 - 1))  # infinities of both signs
    odd = bits.view(dtype)
    with np.errstate(invalid="ignore"):
        as_f64 = odd.astype(np.float64)
    nans, infs = int(np.isnan(as_f64).sum()), int(np.isinf(as_f64).sum())
    assert nans and infs
    for x, y, side in ((odd, finite, "target"), (finite, odd, "benchmark")):
        found = FUSED.pair_metrics(x, code, y, code, None, 1e-7)
        assert found is not None
        _values, reason, _held, counts = found
        assert f"{side} has {nans} NaN, {infs} inf" in reason, reason
        assert counts == ((nans + infs, 0) if side == "target" else (0, nans + infs))
