"""End to end on real PyTorch runs: the tiny encoder captured in float32, bfloat16, float16 and with a
planted faulty GELU. The comparison must name the faulty op and raise no false alarm on plain noise."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from nbprec.compare import compare
from nbprec.demo import tiny_runs
from nbprec.demo.tiny import FAULTY_LAYER


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return {run.name: run.path for run in tiny_runs(out)}


def test_planted_faulty_kernel_is_the_first_failing_op(runs):
    comp = compare(runs["tiny_bf16_faulty"], runs["tiny_fp32"])
    first = comp.first_failing_op()
    assert first is not None
    assert first["op"] == "Functional.gelu.1.forward"
    assert first["module"].startswith(f"layers.{FAULTY_LAYER}")
    assert first["origin"] == "introduced"
    assert comp.first_introduced_op()["op"] == first["op"]
    # everything failing before it in execution order: nothing
    ops = comp.ops
    assert not ((ops["order"] < first["order"]) & (ops["status"] == "fail") & ~ops["explained"]).any()


@pytest.mark.parametrize("target", ["tiny_bf16", "tiny_fp16"])
def test_plain_low_precision_noise_raises_no_alarm(runs, target):
    comp = compare(runs[target], runs["tiny_fp32"])
    assert comp.first_failing_op() is None, comp.failing_ops()[["op", "origin", "out_rel_euclidean"]]
    assert bool(comp)
    assert (comp.table["match"] == "exact").all()


def test_statistics_only_runs_compare_by_statistics(tmp_path):
    runs = {run.name: run.path for run in tiny_runs(tmp_path, mode="statistics")}
    comp = compare(runs["tiny_bf16_faulty"], runs["tiny_fp32"])
    assert set(comp.table["compare_mode"]) == {"statistics"}
    assert comp.first_failing_op()["op"] == "Functional.gelu.1.forward"
    assert compare(runs["tiny_bf16"], runs["tiny_fp32"]).first_failing_op() is None
