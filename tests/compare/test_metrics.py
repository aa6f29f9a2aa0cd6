"""Metric layer: hand-computed values for every column, edge cases, chunking, and agreement with msprobe."""

from __future__ import annotations

import ast
import math
from decimal import Decimal
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from nbprec.compare.metrics import (
    METRIC_COLUMNS,
    STAT_METRIC_COLUMNS,
    checksum_equal,
    statistics_columns,
    statistics_metrics,
    tensor_metrics,
)

F32_EPS = 1.1920928955078125e-07  # 2**-23
MSPROBE = Path(__file__).parents[1] / "fixtures" / "msprobe"


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


def test_columns_in_order():
    r = tensor_metrics(np.ones(2), np.ones(2))
    assert tuple(r.values) == METRIC_COLUMNS
    assert len(METRIC_COLUMNS) == 16
    assert METRIC_COLUMNS[:3] == ("cosine", "max_abs_err", "mean_abs_err")
    assert METRIC_COLUMNS[-1] == "euclidean"


def test_every_metric_by_hand():
    # x = [1, 2, 3, 4], y = [1, 2, 2, 5]: d = [0, 0, 1, -1]
    r = tensor_metrics(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 2.0, 5.0]))
    v = r.values
    assert r.reason == "" and r
    assert close(v["cosine"], 31 / math.sqrt(30 * 34))  # x.y = 31, |x|^2 = 30, |y|^2 = 34
    assert v["max_abs_err"] == 1.0
    assert v["mean_abs_err"] == 0.5
    assert close(v["rmse"], math.sqrt(0.5))
    assert close(v["rel_euclidean"], math.sqrt(2 / 34))
    assert close(v["euclidean"], math.sqrt(2))
    # |d| / |y| = [0, 0, 1/2, 1/5]
    assert close(v["accumulated_rel_err"], 0.7)
    assert v["max_rel_err"] == 0.5
    assert close(v["mean_rel_err"], 0.175)
    assert v["thousandth_ratio"] == 0.5 and v["five_thousandth_ratio"] == 0.5
    assert v["target_mean"] == 2.5 and close(v["target_std"], math.sqrt(1.25))
    assert v["bench_mean"] == 2.5 and close(v["bench_std"], 1.5)  # deviations -1.5 -.5 -.5 2.5 -> var 9/4


def test_kl_divergence_by_hand():
    # x -> [0, .5, 1], y -> [0, 1, .5]; floored at f: sums are both 1.5 + f. The first terms cancel (P = Q).
    r = tensor_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0]))
    s = 1.5 + F32_EPS
    expected = (0.5 / s) * math.log(0.5 / 1.0) + (1.0 / s) * math.log(1.0 / 0.5)
    assert close(r["kl_divergence"], expected, 1e-10)
    assert close(r["kl_divergence"], math.log(2) / (3 + 2 * F32_EPS), 1e-10)


def test_kl_divergence_floor_dominated():
    # x -> [0, 1] -> [f, 1]; y -> [1, 0] -> [1, f]: KL = (1 - f) / (1 + f) * log(1 / f)
    r = tensor_metrics(np.array([0.0, 1.0]), np.array([1.0, 0.0]))
    assert close(r["kl_divergence"], (1 - F32_EPS) / (1 + F32_EPS) * math.log(1 / F32_EPS), 1e-10)


def test_kl_constant_sides_and_identical_tensors_are_zero():
    assert tensor_metrics(np.full(5, 3.0), np.full(5, 3.0))["kl_divergence"] == 0.0
    x = np.random.default_rng(0).standard_normal(100)
    assert tensor_metrics(x, x.copy())["kl_divergence"] == 0.0  # below eps -> 0


def test_error_ratio_boundaries_and_zero_benchmark_float64():
    # relative errors 5e-4, 1e-3 (boundary), 4e-3, 5e-3 (boundary), 0 vs 0, 1e-12 vs 0
    x = np.array([1000.5, 1001.0, 1004.0, 1005.0, 0.0, 1e-12])
    y = np.array([1000.0, 1000.0, 1000.0, 1000.0, 0.0, 0.0])
    r = tensor_metrics(x, y)
    # strict "<", as msprobe: 1e-3 fails the thousandth ratio; y == 0 uses |x| / eps(float64) = 4504 -> fails
    assert r["thousandth_ratio"] == 2 / 6
    assert r["five_thousandth_ratio"] == 4 / 6
    # relative-error terms only over |y| > eps: the two zeros of y contribute 0
    assert r["max_rel_err"] == 0.005
    assert close(r["accumulated_rel_err"], 0.0005 + 0.001 + 0.004 + 0.005)
    assert close(r["mean_rel_err"], 0.0105 / 6)


def test_error_ratio_zero_benchmark_uses_float32_eps_for_float32_bench():
    # msprobe adds the bench dtype's eps where y == 0: 1e-12 / 2**-23 = 8.4e-6 passes both ratios
    x = np.array([1000.5, 1001.0, 1004.0, 1005.0, 0.0, 1e-12])
    y = np.array([1000.0, 1000.0, 1000.0, 1000.0, 0.0, 0.0], dtype=np.float32)
    r = tensor_metrics(x, y)
    assert r["thousandth_ratio"] == 3 / 6
    assert r["five_thousandth_ratio"] == 5 / 6


def test_tiny_nonzero_benchmark_is_excluded_from_relative_terms():
    r = tensor_metrics(np.array([1.0, 1e-17]), np.array([1.0, 1e-18]))
    assert r["max_rel_err"] == 0.0 and r["accumulated_rel_err"] == 0.0  # |y| = 1e-18 <= eps
    assert r["thousandth_ratio"] == 0.5  # but msprobe's ratio still sees 9e-18 / 1e-18 = 9


def test_nan_propagates():
    r = tensor_metrics(np.array([1.0, np.nan, 3.0]), np.array([1.0, 2.0, 3.0]))
    for col in ("cosine", "max_abs_err", "mean_abs_err", "rmse", "max_rel_err", "kl_divergence", "euclidean"):
        assert math.isnan(r[col]), col
    assert math.isnan(r["thousandth_ratio"]) and math.isnan(r["five_thousandth_ratio"])
    assert math.isnan(r["target_mean"])
    assert r["bench_mean"] == 2.0 and close(r["bench_std"], math.sqrt(2 / 3))
    assert r.reason == "non-finite values: target has 1 NaN, 0 inf"


def test_nan_in_benchmark_reaches_relative_error():
    r = tensor_metrics(np.array([1.0, 2.0]), np.array([1.0, np.nan], dtype=np.float32))
    assert math.isnan(r["max_rel_err"]) and math.isnan(r["accumulated_rel_err"])
    assert "benchmark has 1 NaN" in r.reason


def test_inf_propagates():
    r = tensor_metrics(np.array([1.0, np.inf, 3.0], dtype=np.float16), np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert r["max_abs_err"] == math.inf and r["mean_abs_err"] == math.inf
    assert r["euclidean"] == math.inf and r["max_rel_err"] == math.inf
    assert math.isnan(r["cosine"])  # inf / inf
    assert r.reason == "non-finite values: target has 0 NaN, 1 inf"


def test_both_all_zero():
    r = tensor_metrics(np.zeros(4, dtype=np.float16), np.zeros(4, dtype=np.float32))
    assert r.reason == ""
    assert r["cosine"] == 1.0
    assert r["rel_euclidean"] == 0.0 and r["max_abs_err"] == 0.0 and r["kl_divergence"] == 0.0
    assert r["thousandth_ratio"] == 1.0 and r["five_thousandth_ratio"] == 1.0  # 0 vs 0 passes, as msprobe


def test_target_all_zero():
    r = tensor_metrics(np.zeros(2), np.array([1.0, 2.0]))
    assert math.isnan(r["cosine"])
    assert r.reason == "target is all zero, benchmark is not: cosine undefined"
    assert r["rel_euclidean"] == 1.0  # sqrt(5 / 5)
    assert r["max_rel_err"] == 1.0


def test_benchmark_all_zero():
    r = tensor_metrics(np.array([1.0, 2.0]), np.zeros(2, dtype=np.float32))
    assert math.isnan(r["cosine"])
    assert r.reason == "benchmark is all zero, target is not: cosine undefined"
    assert r["rel_euclidean"] == 0.0  # METRICS.md: 0 when y is all zero
    assert r["max_rel_err"] == 0.0 and r["mean_rel_err"] == 0.0  # no |y| > eps
    assert r["thousandth_ratio"] == 0.0  # |x| / eps is huge
    assert r["max_abs_err"] == 2.0


def test_empty():
    r = tensor_metrics(np.zeros((0, 3), dtype=np.float32), np.zeros((3, 0), dtype=np.float32))
    assert r.reason == "empty tensors" and not r
    assert all(math.isnan(v) for v in r.values.values())


def test_bool_tensors_give_cosine_and_red_only():
    r = tensor_metrics(np.array([True, False, True, True]), np.array([True, True, True, False]))
    assert r.reason == "bool tensors: only cosine and RED"
    assert close(r["cosine"], 2 / 3)  # x.y = 2, |x|^2 = |y|^2 = 3
    assert close(r["rel_euclidean"], math.sqrt(2 / 3))  # d = [0, -1, 0, 1]
    others = [c for c in METRIC_COLUMNS if c not in ("cosine", "rel_euclidean")]
    assert all(math.isnan(r[c]) for c in others)


def test_scalar_zero_d():
    r = tensor_metrics(np.array(2.5, dtype=np.float16), np.array(2.0, dtype=np.float32))
    assert r.reason == ""
    assert r["cosine"] == 1.0  # METRICS.md: scalars -> 1.0 (msprobe writes "unsupported")
    assert r["max_abs_err"] == 0.5 and r["max_rel_err"] == 0.25 and r["rel_euclidean"] == 0.25
    assert r["thousandth_ratio"] == 0.0 and r["target_std"] == 0.0 and r["kl_divergence"] == 0.0
    assert tensor_metrics(np.array([-3.0]), np.array([3.0]))["cosine"] == 1.0


def test_shape_mismatch_same_count_compares_flattened():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.arange(6, dtype=np.float64).reshape(3, 2) + np.array([0, 0, 0, 0, 0, 1.0]).reshape(3, 2)
    r = tensor_metrics(x, y)
    assert r.reason == "shape mismatch (2, 3) vs (3, 2): compared flattened"
    assert r["max_abs_err"] == 1.0 and r["mean_abs_err"] == 1 / 6 and r["max_rel_err"] == 1 / 6


def test_element_count_differs():
    r = tensor_metrics(np.ones((2, 3)), np.ones((2, 4)))
    assert r.reason == "element count differs: 6 vs 8"
    assert all(math.isnan(v) for v in r.values.values())


def test_bf16_vs_fp32_uses_exact_bf16_values():
    bench = np.array([1.001, 2.0, -3.3], dtype=np.float32)
    target = bench.astype(ml_dtypes.bfloat16)  # [1.0, 2.0, -3.296875]: bf16 spacing 2**-7 at 1, 2**-6 at 2
    assert target.astype(np.float64).tolist() == [1.0, 2.0, -3.296875]
    r = tensor_metrics(target, bench)
    d1 = float(np.float32(1.001)) - 1.0
    d3 = float(np.float32(3.3)) - 3.296875
    assert close(r["max_abs_err"], d3)
    assert close(r["mean_abs_err"], (d1 + d3) / 3)
    assert close(r["max_rel_err"], d1 / float(np.float32(1.001)))
    assert r.reason == ""


def test_fp16_vs_fp32():
    r = tensor_metrics(np.array([0.1, 1.0], dtype=np.float16), np.array([0.1, 1.0], dtype=np.float32))
    d = float(np.float32(0.1)) - 0.0999755859375  # float16(0.1)
    assert close(r["max_abs_err"], d)
    assert close(r["max_rel_err"], d / float(np.float32(0.1)))
    assert r["thousandth_ratio"] == 1.0  # float16 rounding is at most 2**-11 = 4.9e-4 relative


def test_int_vs_float():
    r = tensor_metrics(np.array([1, 2, 3], dtype=np.int32), np.array([1.5, 2.0, 2.0]))
    assert r["max_abs_err"] == 1.0 and r["mean_abs_err"] == 0.5
    assert close(r["accumulated_rel_err"], 1 / 3 + 0.5)
    assert r["target_mean"] == 2.0


def test_complex_compared_by_magnitude():
    r = tensor_metrics(np.array([3 + 4j, 0j]), np.array([5.0, 1.0]))
    assert r.reason == "complex tensors: compared magnitudes"
    assert r["max_abs_err"] == 1.0 and r["target_mean"] == 2.5


def test_inputs_are_not_modified():
    x, y = np.array([1.0, np.nan, 0.0]), np.array([0.0, 2.0, np.inf])
    x0, y0 = x.copy(), y.copy()
    tensor_metrics(x, y)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_chunking_matches_one_chunk(chunk):
    rng = np.random.default_rng(3)
    bench = (rng.standard_normal(10_001) * 3 + 0.5).astype(np.float32)
    bench[::97] = 0.0
    target = bench.astype(ml_dtypes.bfloat16)
    target[5] = 0.0
    whole = tensor_metrics(target, bench, chunk_size=1 << 20)
    parts = tensor_metrics(target, bench, chunk_size=chunk)
    assert whole.reason == parts.reason == ""
    for col in METRIC_COLUMNS:
        if col == "kl_divergence":  # a difference of nearly equal sums: precise to ~1e-16 absolute, not relative
            assert math.isclose(parts[col], whole[col], rel_tol=1e-12, abs_tol=1e-15)
        else:
            assert close(parts[col], whole[col]), col


def test_kl_matches_the_spec_formula_written_out():
    rng = np.random.default_rng(5)
    bench = rng.standard_normal(5000).astype(np.float32)
    target = bench.astype(ml_dtypes.bfloat16)

    def normalised(v: np.ndarray) -> np.ndarray:
        v = (v - v.min()) / (v.max() - v.min())
        v = np.maximum(v, F32_EPS)
        return v / v.sum()

    p, q = normalised(target.astype(np.float64)), normalised(bench.astype(np.float64))
    expected = float(np.sum(p * np.log(p / q)))
    assert expected > 1e-9
    assert math.isclose(tensor_metrics(target, bench, chunk_size=999)["kl_divergence"], expected, abs_tol=1e-15)


def test_chunked_std_with_large_offset_is_exact():
    x = 1024.0 + np.arange(3) / 1024  # exactly representable; sum of squares cancels badly
    r = tensor_metrics(np.tile(x, 50_000), np.tile(x, 50_000), chunk_size=1000)
    assert close(r["target_std"], math.sqrt(2 / 3) / 1024)
    assert close(r["target_mean"], 1024 + 1 / 1024)


def _csv_tolerance(text: str) -> float:
    """Half a unit in the last place the CSV carries, at least 1e-6 relative."""
    value = Decimal(text)
    return max(0.5 * 10.0 ** value.as_tuple().exponent, 1e-6 * abs(float(value)))


@pytest.mark.torch
def test_agrees_with_msprobe_compare_csv():
    torch = pytest.importorskip("torch")
    csv = next((MSPROBE / "msprobe_compare_bf16_vs_fp32").glob("compare_result_*.csv"))
    table = pd.read_csv(csv, dtype=str, keep_default_na=False)

    def load(run: str, name: str) -> np.ndarray:
        tensor = torch.load(MSPROBE / run / "step0" / "rank0" / "dump_tensor_data" / name, weights_only=True)
        return tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()

    columns = {
        "Cosine": "cosine",
        "EucDist": "euclidean",
        "MaxAbsErr": "max_abs_err",
        "MaxRelativeErr": "max_rel_err",
        "One Thousandth Err Ratio": "thousandth_ratio",
        "Five Thousandths Err Ratio": "five_thousandth_ratio",
    }
    compared, checked, zero_bench_rows = 0, 0, 0
    for _, row in table.iterrows():
        names = ast.literal_eval(row["Data_name"])
        if names[0] == "-1" or row["MaxAbsErr"] in ("unsupported", "N/A"):
            continue
        target, bench = load("bf16_tensor_mix", names[0]), load("fp32_tensor_mix", names[1])
        result = tensor_metrics(target, bench)
        compared += 1
        x, y = target.astype(np.float64).ravel(), bench.astype(np.float64).ravel()
        nonzero_vs_zero = (y == 0) & (x != 0)
        for csv_col, col in columns.items():
            text = row[csv_col]
            if text in ("unsupported", "N/A"):  # msprobe: 0-d tensors have no cosine or ratios
                assert target.size == 1
                continue
            if col == "max_rel_err" and nonzero_vs_zero.any():
                # msprobe's MaxRelativeErr takes |x| / eps(float32) where y == 0 and x != 0; nbprec follows
                # METRICS.md and leaves |y| <= eps out, so it is smaller when those elements dominate.
                zero_term = np.abs(x[nonzero_vs_zero]).max() / F32_EPS
                if zero_term > result[col]:
                    assert math.isclose(float(text), zero_term, rel_tol=1e-6), row["NPU Name"]
                    zero_bench_rows += 1
                    continue
            assert abs(result[col] - float(text)) <= _csv_tolerance(text), (row["NPU Name"], csv_col)
            checked += 1
    print(
        f"msprobe rows compared {compared}, values checked {checked}, zero-bench MaxRelativeErr rows {zero_bench_rows}"
    )
    assert compared >= 270, compared
    assert checked >= 1500, checked
    assert zero_bench_rows >= 10  # the fixture does exercise the convention


def test_statistics_metrics_by_hand():
    r = statistics_metrics(
        {"max": 2.0, "min": -1.0, "mean": 0.25, "norm": 3.0},
        {"max": 2.5, "min": -1.0, "mean": 0.5, "norm": 4.0},
    )
    assert tuple(r.values) == STAT_METRIC_COLUMNS
    assert r.reason == ""
    assert r["max_diff"] == -0.5 and r["max_rel_diff"] == 0.2
    assert r["min_diff"] == 0.0 and r["min_rel_diff"] == 0.0
    assert r["mean_diff"] == -0.25 and r["mean_rel_diff"] == 0.5
    assert r["norm_diff"] == -1.0 and r["norm_rel_diff"] == 0.25


def test_statistics_metrics_zero_bench_missing_and_msprobe_keys():
    r = statistics_metrics({"Max": 1.0, "Min": 0.0, "Mean": None, "Norm": "2.0"}, {"max": 0.0, "min": 0.0, "norm": 2})
    assert math.isnan(r["max_rel_diff"]) and r["max_diff"] == 1.0
    assert r["min_rel_diff"] == 0.0  # 0 vs 0
    assert math.isnan(r["mean_diff"]) and r["norm_rel_diff"] == 0.0
    assert r.reason == "statistics missing or NaN: mean; max: benchmark is 0, relative difference undefined"


def _statistics_by_hand(target: dict, bench: dict) -> tuple[dict, str]:
    """The rules of METRICS.md for statistics-only pairs, written out for one pair in plain Python floats."""
    values, missing, zero_bench = {}, [], []
    for key in ("max", "min", "mean", "norm"):
        t, b = float(target[key]), float(bench[key])
        if math.isnan(t) or math.isnan(b):
            missing.append(key)
        diff = t - b
        if diff == 0:
            rel = 0.0
        elif b == 0:
            zero_bench.append(key)
            rel = math.nan
        else:
            rel = abs(diff) / abs(b)
        values[f"{key}_diff"], values[f"{key}_rel_diff"] = diff, rel
    reasons = [f"statistics missing or NaN: {', '.join(missing)}"] if missing else []
    reasons += [f"{key}: benchmark is 0, relative difference undefined" for key in zero_bench]
    return values, "; ".join(reasons)


def test_statistics_columns_are_the_rules_pair_by_pair():
    """Every pairing of special values (0, -0, NaN, inf, equal, tiny, huge) and random ones: the column version (and
    the per-pair function built on it) gives the rules' values to the bit (NaN where they are NaN) and reason texts."""
    special = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.0, 5e-324, 1e308, 0.1 + 0.2, 0.3]
    rng = np.random.default_rng(7)
    grid = np.array([(a, b) for a in special for b in special] + rng.standard_normal((400, 2)).tolist())
    keys = ("max", "min", "mean", "norm")
    # each statistic takes its own shuffle of the pairs, so rows mix reasons across statistics
    target = {k: grid[rng.permutation(len(grid))] for k in keys}
    target, bench = {k: v[:, 0] for k, v in target.items()}, {k: v[:, 1] for k, v in target.items()}
    columns, reasons = statistics_columns(target, bench)
    assert tuple(columns) == STAT_METRIC_COLUMNS
    assert sum(bool(r) for r in reasons) > 100 and sum(";" in r for r in reasons) > 10
    for i in range(len(grid)):
        pair = {k: target[k][i] for k in keys}, {k: bench[k][i] for k in keys}
        want, reason = _statistics_by_hand(*pair)
        one = statistics_metrics(*pair)
        assert reasons[i] == one.reason == reason
        for name in STAT_METRIC_COLUMNS:
            for got in (columns[name][i], one[name]):
                same = np.float64(got).tobytes() == np.float64(want[name]).tobytes()
                assert same or (math.isnan(got) and math.isnan(want[name])), (i, name, got, want[name])


def test_checksum_equal():
    assert checksum_equal("9A3F", "9a3f ") is True
    assert checksum_equal("9a3f", "9a40") is False
    assert checksum_equal("", "9a3f") is None
    assert checksum_equal("nan", "9a3f") is None
    assert checksum_equal(None, None) is None
