"""One side's recorded extremes: a float16 run that overflowed records NaN or inf statistics for most of its
tensors beside its benchmark's usable ones. The kernel then takes the usable side's extremes from the dump and
finds only the other side's in a pass of their own (nbprec/compare/_fused_metrics.c's measure_pair and
_kernels.fused_sums), with the same result as without any hints, right or wrong ones alike.
"""

from __future__ import annotations

import importlib
import math
import struct
import warnings

import ml_dtypes
import numpy as np
import pytest

from nbprec.compare._sums import EPS_BENCH, FUSED
from nbprec.compare.metrics import METRIC_COLUMNS, tensor_metrics
from nbprec.compare.small_pairs import RECENT, small_pair
from nbprec.compare.tasks import ExtremeHints

needs_fused = pytest.mark.skipif(FUSED is None, reason="the compiled kernel is not built")
kernels = importlib.import_module("nbprec.compare._kernels")

#: kernel type code of each numpy dtype used here
CODES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2, np.dtype(ml_dtypes.bfloat16): 3}


def _pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(21)
    y = (rng.standard_normal(70_001) * 2 - 0.25).astype(np.float32)
    with np.errstate(over="ignore"):
        overflowed = (y * 4e4).astype(np.float16)  # inf where |y| > 1.6
    with_nan = overflowed.copy()
    with_nan[::101] = np.nan
    bench_nan = y.copy()
    bench_nan[5] = np.nan
    return {
        "target overflowed": (overflowed, y * 4e4),
        "target with NaN": (with_nan, y * 4e4),
        "target all NaN": (np.full(y.size, np.nan, np.float16), y),
        "benchmark with NaN": (y.astype(ml_dtypes.bfloat16), bench_nan),
        "both finite": (y.astype(ml_dtypes.bfloat16), y),
    }


def _sides(x: np.ndarray, y: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """Each side's extremes ignoring NaN (what nbprec records), as float64."""
    xs, ys = x.astype(np.float64), y.astype(np.float64)
    with warnings.catch_warnings():  # (a side of nothing but NaN: NaN extremes)
        warnings.simplefilter("ignore", RuntimeWarning)
        return (float(np.nanmin(xs)), float(np.nanmax(xs))), (float(np.nanmin(ys)), float(np.nanmax(ys)))


def _one_sided(x: np.ndarray, y: np.ndarray) -> dict[str, tuple[float, float, float, float]]:
    """Hints with one side usable (right or wrong) and the other not (NaN, inf, or the minimum above the maximum)."""
    (lo_x, hi_x), (lo_y, hi_y) = _sides(x, y)
    return {
        "the benchmark's": (math.nan, math.nan, lo_y, hi_y),
        "the benchmark's, beside inf": (-math.inf, math.inf, lo_y, hi_y),
        "the benchmark's, wrong": (math.nan, math.nan, lo_y - 1.0, hi_y),
        "the benchmark's, too narrow": (math.nan, math.nan, lo_y, hi_y * 0.5 if hi_y > 0 else hi_y - 1),
        "the target's": (lo_x, hi_x, math.nan, math.nan),
        "the target's, wrong": (lo_x, hi_x + 0.5, 1.0, -1.0),
    }


def _bits(values: dict[str, float]) -> dict[str, bytes]:
    """The columns' bits, every NaN as one (the sign of a NaN is not held: see _fused_metrics.c)."""
    return {k: struct.pack("<d", math.nan if v != v else v) for k, v in values.items()}


@needs_fused
@pytest.mark.parametrize("case", list(_pairs()))
def test_one_sides_extremes_change_no_result(case):
    """The compiled pair_metrics and tensor_metrics (its Python driver) give, with any one side's hints, right or
    wrong, what they give without hints: the same columns to the bit, the same reason, the same NaN/inf counts;
    and say the hints neither held nor failed (they were not usable as a whole)."""
    x, y = _pairs()[case]
    xt, yt = CODES[x.dtype], CODES[y.dtype]
    plain = FUSED.pair_metrics(x.view(np.uint8), xt, y.view(np.uint8), yt, None, EPS_BENCH[yt])
    with np.errstate(all="ignore"):
        plain_py = tensor_metrics(x, y)
    assert plain is not None and plain[2] is None
    for label, hints in _one_sided(x, y).items():
        got = FUSED.pair_metrics(x.view(np.uint8), xt, y.view(np.uint8), yt, hints, EPS_BENCH[yt])
        assert _bits(got[0]) == _bits(plain[0]), label
        assert (got[1], got[2], got[3]) == (plain[1], None, plain[3]), label
        with np.errstate(all="ignore"):
            got_py = tensor_metrics(x, y, extremes=hints)
        assert _bits(got_py.values) == _bits(plain_py.values), label
        assert (got_py.reason, got_py.extremes_held, got_py.nonfinite) == (plain_py.reason, None, plain_py.nonfinite)
        assert _bits({c: got[0][c] for c in METRIC_COLUMNS}) == _bits({c: got_py[c] for c in METRIC_COLUMNS}), label


@needs_fused
def test_a_side_with_usable_extremes_is_not_scanned_first(monkeypatch):
    """Without hints both sides get a min/max pass before the pair's pass; with the benchmark's usable extremes
    only the target does, unless the pass finds them wrong (then the benchmark's own pass follows, and the pair's
    again). Counted on the Python driver, which takes the same steps as the compiled pair_metrics (which
    tensor_metrics takes for such pairs in memory: not here)."""
    scanned: list[int] = []
    monkeypatch.setattr(importlib.import_module("nbprec.compare.metrics"), "in_place_pair", lambda x, y: None)
    find = kernels._fused_min_max
    monkeypatch.setattr(
        kernels, "_fused_min_max", lambda side, buf, chunk: (scanned.append(side.code), find(side, buf, chunk))[1]
    )

    def sides_scanned(pair: str, label: str | None) -> list[int]:
        x, y = _pairs()[pair]
        scanned.clear()
        with np.errstate(all="ignore"):
            tensor_metrics(x, y, extremes=None if label is None else _one_sided(x, y)[label])
        return list(scanned)

    target, bench = 2, 1  # (float16 and float32 sides)
    assert sides_scanned("target overflowed", None) == [target, bench]
    assert sides_scanned("target overflowed", "the benchmark's") == [target]
    assert sides_scanned("target overflowed", "the benchmark's, beside inf") == [target]
    assert sides_scanned("target overflowed", "the benchmark's, wrong") == [target, bench]
    assert sides_scanned("target overflowed", "the benchmark's, too narrow") == [target, bench]
    target = 3  # (a bfloat16 target beside a float32 benchmark holding a NaN)
    assert sides_scanned("benchmark with NaN", "the target's") == [bench]
    assert sides_scanned("benchmark with NaN", "the target's, wrong") == [bench, target]
    # the benchmark's recorded extremes ignore its NaN: usable, but the pass finds the NaN
    assert sides_scanned("benchmark with NaN", "the benchmark's") == [target, bench]


def test_the_engine_gives_one_sides_hints():
    """A pair whose target recorded NaN or inf statistics gets its benchmark's as hints, beside a NaN pair for
    the target, and the other way round; none when neither side's are usable; both sides' when both are."""
    hints = ExtremeHints()

    def row(low: float, high: float) -> dict[str, float]:
        return {"min": low, "max": high}

    given = hints.extremes(row(-math.inf, math.inf), row(-1.5, 2.0))
    assert given[2:] == (-1.5, 2.0) and all(math.isnan(v) for v in given[:2])
    given = hints.extremes(row(math.nan, math.nan), row(-1.5, 2.0))
    assert given[2:] == (-1.5, 2.0) and all(math.isnan(v) for v in given[:2])
    given = hints.extremes(row(0.0, 3.0), row(math.nan, 1.0))
    assert given[:2] == (0.0, 3.0) and all(math.isnan(v) for v in given[2:])
    assert hints.extremes(row(2.0, 1.0), row(math.nan, math.inf)) is None  # (a minimum above its maximum: unusable)
    assert hints.extremes(row(0.0, 3.0), row(-1.5, 2.0)) == (0.0, 3.0, -1.5, 2.0)


@needs_fused
def test_pairs_with_one_sides_hints_are_measured_but_not_kept(tmp_path):
    """``small_pair`` measures a pair with one side's hints as tensor_metrics does, and does not keep its bytes for
    repeats (keeping them cost the float16 pair of bench/README.md more than the repeats saved)."""
    RECENT.clear()
    RECENT.reused = 0
    x, y = _pairs()["target overflowed"]
    x, y = x[:50_000], y[:50_000]  # (payloads read whole: under 1 MiB a side)
    hints = (math.nan, math.nan, *_sides(x, y)[1])
    for n in range(2):  # the same bytes twice, in other files
        t_file, b_file = tmp_path / f"t{n}.npy", tmp_path / f"b{n}.npy"
        np.save(t_file, x)
        np.save(b_file, y)
        values, reason, held, counts = small_pair(str(t_file), "float16", str(b_file), "float32", x.shape, hints, "npy")
        with np.errstate(all="ignore"):
            expected = tensor_metrics(x, y)
        assert _bits(values) == _bits(expected.values) and reason == expected.reason
        assert held is None and counts == expected.nonfinite
    assert RECENT.reused == 0 and not RECENT.by_key and RECENT.nbytes == 0
