"""The msprobe scenario fixtures are what tests/fixtures/msprobe/scenarios/README.md says they are.

These tests check the dumps themselves (read with ``nbprec.open``), not nbprec's verdicts on them.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import nbprec

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe" / "scenarios"
RUNS = {
    "fp32_statistics": "statistics",
    "fault_statistics": "statistics",
    "fp32_tensor": "tensor",
    "fault_tensor": "tensor",
    "fp32_lossscale_statistics": "statistics",
    "fp16_overflow_statistics": "statistics",
    "bf16_statistics": "statistics",
    "dropout_tensor_a": "tensor",
    "dropout_tensor_b": "tensor",
    "other_weights_tensor": "tensor",
    "other_inputs_tensor": "tensor",
}
PAIRS = [
    ("fault_statistics", "fp32_statistics"),
    ("fault_tensor", "fp32_tensor"),
    ("fp16_overflow_statistics", "fp32_lossscale_statistics"),
    ("bf16_statistics", "fp32_statistics"),
    ("dropout_tensor_a", "dropout_tensor_b"),
    ("other_weights_tensor", "fp32_tensor"),
    ("other_inputs_tensor", "fp32_tensor"),
]
STATS = ["max", "min", "mean", "norm"]
PLANTED = "Torch.relu.1.forward"


@cache
def run(name: str) -> nbprec.Dump:
    return nbprec.open(SCENARIOS / name)


def stats_of(dump: nbprec.Dump, name: str) -> list[float]:
    return [float(v) for v in dump.row(name)[STATS]]


def differing_tensors(target: nbprec.Dump, bench: nbprec.Dump) -> list[str]:
    """Names of the tensors whose payloads differ, in dump order (both dumps hold the same names)."""
    assert list(target.index["name"]) == list(bench.index["name"])
    rows = target.index.sort_values("order", kind="stable")
    return [n for n in rows["name"] if not np.array_equal(target.tensor(n), bench.tensor(n))]


def compare_rows(target: str, bench: str) -> list[dict]:
    (path,) = (SCENARIOS / "msprobe_compare" / f"{target}_vs_{bench}").glob("compare_result_*.csv")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# -- every run -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_run_opens_as_one_msprobe_step_on_rank0(name):
    dump = run(name)
    assert dump.format == "msprobe"
    assert dump.meta["task"] == RUNS[name] and dump.meta["level"] == "mix"
    assert dump.steps == [0] and dump.ranks == [0]
    assert len(dump.problems) == 0
    assert dump.index["has_data"].all() == (RUNS[name] == "tensor")
    assert PLANTED in set(dump.index["op"])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_run_has_the_op_records_of_the_benchmark_plus_the_documented_extras(name):
    ops = list(run(name).ops()["op"])
    base = list(run("fp32_statistics").ops()["op"])
    assert len(base) == 100 and len(run("fp32_statistics").index) == 279
    extra = [op for op in ops if op not in base]
    assert [op for op in ops if op in base] == base
    if "lossscale" in name or "overflow" in name:
        assert extra == ["Tensor.__mul__.0.forward", "Tensor.__mul__.0.backward"]
    elif name.startswith("dropout"):
        assert sorted(extra) == [f"Functional.dropout.{i}.backward" for i in range(6)]
    else:
        assert extra == []


@pytest.mark.parametrize(("target", "bench"), PAIRS)
def test_msprobes_own_comparison_of_each_pair_is_kept(target, bench):
    rows = compare_rows(target, bench)
    names = {r["NPU Name"] for r in rows}
    assert set(run(target).index["name"]) <= names
    assert {r["Result"] for r in rows} <= {"pass", "warning", "error"}


# -- the planted faulty kernel ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_planted_relu_has_the_benchmarks_inputs_and_a_negative_output(mode):
    fault, bench = run(f"fault_{mode}"), run(f"fp32_{mode}")
    assert stats_of(fault, f"{PLANTED}.input.0") == stats_of(bench, f"{PLANTED}.input.0")
    assert fault.row(f"{PLANTED}.output.0")["min"] == pytest.approx(-0.6401140689849854)
    assert bench.row(f"{PLANTED}.output.0")["min"] == 0.0
    assert fault.row(f"{PLANTED}.output.0")["max"] == bench.row(f"{PLANTED}.output.0")["max"]
    assert fault.row("Torch.relu.0.forward.output.0")["min"] == 0.0  # layer 0's activation is correct


@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_everything_before_the_planted_relu_agrees_and_it_is_the_first_difference(mode):
    fault, bench = run(f"fault_{mode}"), run(f"fp32_{mode}")
    planted_order = fault.row(f"{PLANTED}.output.0")["order"]
    merged = fault.index.merge(bench.index, on="name", suffixes=("_t", "_b"))
    differs = np.zeros(len(merged), dtype=bool)
    for stat in STATS:
        t, b = merged[f"{stat}_t"].to_numpy(float), merged[f"{stat}_b"].to_numpy(float)
        differs |= ~((t == b) | (np.isnan(t) & np.isnan(b)))
    first = merged[differs].sort_values("order_t").iloc[0]
    assert first["name"] == f"{PLANTED}.output.0" and first["order_t"] == planted_order
    assert merged.loc[differs, "op_t"].nunique() == 68


def test_planted_relu_inputs_are_bit_identical_in_the_tensor_twins():
    fault, bench = run("fault_tensor"), run("fp32_tensor")
    assert differing_tensors(fault, bench)[0] == f"{PLANTED}.output.0"
    output = fault.tensor(f"{PLANTED}.output.0")
    x = bench.tensor(f"{PLANTED}.input.0")
    np.testing.assert_array_equal(fault.tensor(f"{PLANTED}.input.0"), x)
    np.testing.assert_allclose(output, np.where(x > 0, x, np.float32(0.3) * x), rtol=1e-6)


def test_statistics_and_tensor_twins_record_the_same_statistics():
    for kind in ("fp32", "fault"):
        stats, tensors = run(f"{kind}_statistics").index, run(f"{kind}_tensor").index
        assert list(stats["name"]) == list(tensors["name"])
        np.testing.assert_array_equal(stats[STATS].to_numpy(float), tensors[STATS].to_numpy(float))


def test_msprobe_passes_the_planted_relu():
    for target, bench in PAIRS[:2]:
        rows = {r["NPU Name"]: r for r in compare_rows(target, bench)}
        assert rows[f"{PLANTED}.input.0"]["Result"] == "pass"
        assert rows[f"{PLANTED}.output.0"]["Result"] == "pass"


# -- float16 overflow ------------------------------------------------------------------------------
def non_finite(dump: nbprec.Dump):
    index = dump.index.sort_values("order", kind="stable")
    mask = ~np.isfinite(index["max"].to_numpy(float)) | ~np.isfinite(index["min"].to_numpy(float))
    mask &= index["dtype"].str.startswith(("float", "bfloat")).to_numpy()
    return index[mask]


def test_overflow_run_has_non_finite_statistics_first_in_cross_entropy_backward():
    bad = non_finite(run("fp16_overflow_statistics"))
    assert bad.iloc[0]["name"] == "Functional.cross_entropy.0.backward.input.0"
    assert bad.iloc[0]["max"] == np.inf and bad.iloc[0]["min"] == np.inf
    assert bad["op"].nunique() == 53
    assert (bad["direction"] == "backward").all()
    assert len(non_finite(run("fp32_lossscale_statistics"))) == 0
    bench = run("fp32_lossscale_statistics")
    assert bench.row("Functional.cross_entropy.0.backward.input.0")["max"] == 2.0**24


def test_overflow_pair_differs_in_dtype_not_in_the_scaling():
    fp16, fp32 = run("fp16_overflow_statistics"), run("fp32_lossscale_statistics")
    assert set(fp16.index.loc[fp16.index["op"].str.startswith("Functional.linear"), "dtype"]) == {"float16"}
    assert set(fp32.index.loc[fp32.index["op"].str.startswith("Functional.linear"), "dtype"]) == {"float32"}
    scaled = "Tensor.__mul__.0.backward.output.0"  # the scaled gradient, float32 in both runs
    assert fp16.row(scaled)["dtype"] == fp32.row(scaled)["dtype"] == "float32"
    assert fp16.row(scaled)["max"] == fp32.row(scaled)["max"] == 2.0**24
    assert not non_finite(fp16)["op"].str.endswith(".forward").any()
    assert "Tensor.float.0.forward" not in set(fp16.index["op"])  # msprobe's risk_level "focus" skips casts


# -- bfloat16 noise --------------------------------------------------------------------------------
def test_bf16_run_is_finite_bfloat16_with_the_benchmarks_names():
    bf16, fp32 = run("bf16_statistics"), run("fp32_statistics")
    assert list(bf16.index["name"]) == list(fp32.index["name"])
    assert set(bf16.index["dtype"]) == {"bfloat16", "int64"}
    assert len(non_finite(bf16)) == 0


# -- dropout -----------------------------------------------------------------------------------------
def test_dropout_runs_first_differ_in_the_attention_dropout_then_every_dropout_mask_differs():
    a, b = run("dropout_tensor_a"), run("dropout_tensor_b")
    attention = "Functional.multi_head_attention_forward.0.forward"
    assert differing_tensors(a, b)[0] == f"{attention}.output.0"
    for slot in (0, 1, 2, 5, 6, 11, 12):
        np.testing.assert_array_equal(a.tensor(f"{attention}.input.{slot}"), b.tensor(f"{attention}.input.{slot}"))
    for i in range(6):
        op = f"Functional.dropout.{i}.forward"
        masks = [(d.tensor(f"{op}.output.0") == 0) & (d.tensor(f"{op}.input.0") != 0) for d in (a, b)]
        assert masks[0].any() and masks[1].any() and not np.array_equal(*masks), op


# -- setup errors ------------------------------------------------------------------------------------
def test_other_weights_first_differs_in_the_embedding_weight():
    other, bench = run("other_weights_tensor"), run("fp32_tensor")
    differing = differing_tensors(other, bench)
    assert differing[0] == "Functional.embedding.0.forward.input.1"
    assert "Functional.embedding.0.forward.input.0" not in differing  # same token ids
    params = other.index.loc[other.index["role"] == "parameter", "name"]
    changed = {n for n in params if n in differing}
    assert "Module.emb.Embedding.forward.0.parameters.weight" in changed
    assert "Module.head.Linear.forward.0.parameters.weight" in changed
    assert not any("LayerNorm" in n or n.endswith("in_proj_bias") for n in changed)


def test_other_inputs_first_differs_in_the_token_ids():
    other, bench = run("other_inputs_tensor"), run("fp32_tensor")
    differing = differing_tensors(other, bench)
    assert differing[0] == "Functional.embedding.0.forward.input.0"
    assert other.row("Functional.embedding.0.forward.input.0")["dtype"] == "int64"
    assert "Functional.embedding.0.forward.input.1" not in differing  # same weights
    labels = "Functional.cross_entropy.0.forward.input.1"
    np.testing.assert_array_equal(other.tensor(labels), [4, 0])
    np.testing.assert_array_equal(bench.tensor(labels), [4, 0])
