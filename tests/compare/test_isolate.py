"""Isolation re-runs ops of a real captured run on their own inputs: a faulty kernel stands out."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nbprec.cli import main  # noqa: E402
from nbprec.compare import compare  # noqa: E402
from nbprec.compare.isolate import isolate  # noqa: E402
from nbprec.demo import tiny_runs  # noqa: E402
from nbprec.errors import ComparisonError  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {run.name: run.path for run in tiny_runs(tmp_path_factory.mktemp("iso"))}


def test_the_faulty_kernel_has_a_large_own_error(runs):
    result = isolate(runs["tiny_bf16_faulty"], "Functional.gelu.1.forward")
    assert result.verdict == "kernel error"
    assert result.table["rel_euclidean"].iloc[0] > 0.1


@pytest.mark.parametrize(
    "op", ["Functional.gelu.0.forward", "Functional.linear.0.forward", "Functional.layer_norm.0.forward"]
)
def test_healthy_kernels_err_by_rounding_only(runs, op):
    result = isolate(runs["tiny_bf16_faulty"], op)
    assert result.verdict == "within rounding", str(result)
    # bfloat16 rounding: about 2^-9 relative, far below the fault
    assert result.table["rel_euclidean"].iloc[0] < 0.005


def test_float32_run_is_exact_to_float32_rounding(runs):
    result = isolate(runs["tiny_fp32"], "Functional.gelu.0.forward", dtype="float32")
    assert result.table["rel_euclidean"].iloc[0] == 0.0


def test_isolation_from_a_comparison_and_the_cli(runs, capsys):
    comp = compare(runs["tiny_bf16_faulty"], runs["tiny_fp32"])
    assert comp.isolate(comp.first_failing_op()["op"]).verdict == "kernel error"
    assert main(["isolate", str(runs["tiny_bf16_faulty"]), "Functional.gelu.1.forward"]) == 0
    assert "kernel error" in capsys.readouterr().out


def test_what_cannot_be_isolated_says_why(runs, tmp_path):
    with pytest.raises(ComparisonError, match=r"no recorded call for 'Module\.layers\.0\.ff1\.Linear\.forward\.0'"):
        isolate(runs["tiny_fp32"], "Module.layers.0.ff1.Linear.forward.0")
    stats = {run.name: run.path for run in tiny_runs(tmp_path, mode="statistics")}
    with pytest.raises(ComparisonError, match="no tensor payloads"):
        isolate(stats["tiny_fp32"], "Functional.gelu.0.forward")
    with pytest.raises(ComparisonError, match="float64 or float32"):
        isolate(runs["tiny_fp32"], "Functional.gelu.0.forward", dtype="float16")
