"""nbprec.inspect: the numpy data behind the tensor inspector (no widget involved)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from nbprec.inspect import (
    MAX_SCATTER_POINTS,
    bit_fields,
    error_by_magnitude,
    error_by_position,
    histograms,
    inspect_pair,
    scatter_sample,
    stats_side_by_side,
    top_k_errors,
)


@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    bench = rng.standard_normal((64, 300)).astype(np.float32)
    return bench.astype(ml_dtypes.bfloat16), bench


def test_top_k_finds_planted_errors_with_nd_indices(pair):
    target, bench = pair
    target = target.copy()
    target[3, 7] = 100
    target[10, 299] = np.nan
    top = top_k_errors(target, bench, k=3)
    assert top.index[0] == (10, 299)  # NaN on one side ranks first
    assert top.index[1] == (3, 7)
    assert top["abs_err"].iloc[1] == pytest.approx(abs(100 - float(bench[3, 7])))
    assert list(top["position"][:2]) == [10 * 300 + 299, 3 * 300 + 7]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn"])
def test_bit_fields_reassemble_the_value(dtype):
    from nbprec.dtypes import NUMPY_DTYPES

    values = np.array([1.5, -2.0, 0.0, 3.140625, np.inf, 1e-40 if dtype == "bfloat16" else 0.0001], dtype=np.float32)
    typed = values.astype(NUMPY_DTYPES[dtype])
    bits = bit_fields(typed)
    from nbprec.inspect import BIT_LAYOUTS

    exp_bits, man_bits = BIT_LAYOUTS[dtype]
    for row, value in zip(bits.itertuples(), typed.astype(np.float64), strict=True):
        assert len(row.exponent) == exp_bits and len(row.mantissa) == man_bits
        if row.kind == "normal":
            rebuilt = (-1) ** int(row.sign) * (1 + int(row.mantissa, 2) / 2**man_bits) * 2.0**row.unbiased_exponent
            assert rebuilt == value
    assert bits.loc[0, ["sign", "exponent"]].tolist()[0] == "0"
    assert bits.loc[1, "sign"] == "1"
    assert bits.loc[2, "kind"] == "zero"


def test_bit_fields_rounds_float_values_into_the_named_format():
    bits = bit_fields(np.array([1.0 + 2**-9]), "bfloat16")  # below bf16 resolution: rounds to 1.0
    assert bits.loc[0, "mantissa"] == "0000000" and bits.loc[0, "value"] == 1.0
    with pytest.raises(ValueError, match="no bit layout"):
        bit_fields(np.array([1], dtype=np.int32))


def test_scatter_is_subsampled_and_keeps_the_worst(pair):
    target, bench = pair
    big_t = np.tile(target.ravel(), 4)
    big_b = np.tile(bench.ravel(), 4)
    big_t[12345] = 50
    sample = scatter_sample(big_t, big_b)
    assert len(sample) <= MAX_SCATTER_POINTS
    assert 12345 in set(sample["position"])
    assert (np.diff(sample["position"]) > 0).all()


def test_histograms_share_bins_and_count_every_finite_value(pair):
    target, bench = pair
    hist = histograms(target, bench, bins=30)
    assert len(hist) == 30
    assert hist["target"].sum() == target.size and hist["bench"].sum() == bench.size
    assert (hist["right"] > hist["left"]).all()


def test_error_profiles(pair):
    target, bench = pair
    target = target.copy()
    target[-1, -1] = 9.0
    by_pos = error_by_position(target, bench, buckets=100)
    assert len(by_pos) == 100 and by_pos["max_abs_err"].idxmax() == 99
    by_mag = error_by_magnitude(target, bench)
    assert by_mag["count"].sum() == target.size
    # bf16 rounding error grows with magnitude
    assert by_mag["mean_abs_err"].iloc[-1] > by_mag["mean_abs_err"].iloc[len(by_mag) // 2]


def test_inspect_pair_and_stats(pair):
    target, bench = pair
    ins = inspect_pair(target, bench, name="t", k=5)
    assert ins.problem == ""
    assert len(ins.top_k) == 5
    assert set(ins.bits["side"]) == {"target", "bench as bfloat16"}
    stats = stats_side_by_side(target, bench)
    assert stats.loc["max", "target"] == pytest.approx(float(bench.max()), rel=1e-2)
    assert stats.loc["dtype", "target"] == "bfloat16"
    mismatch = inspect_pair(target, bench[:2], name="t")
    assert "element counts differ" in mismatch.problem
    assert isinstance(mismatch.stats, pd.DataFrame)
