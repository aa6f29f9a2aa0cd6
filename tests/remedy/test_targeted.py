"""From an overflow to a targeted dump: only the overflowing ops, in both configurations, and did it matter."""

from __future__ import annotations

import pytest

import nbprec
from nbprec.errors import OverflowDetectedError
from nbprec.remedy import RemedyError, targeted_dump
from nbprec.remedy.targeted import folder_size, include_patterns, tensor_dump_size

from .conftest import planted, planted_setup

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _overflow_check(path):
    """The capture's overflow check on the float16 model, stopping at the first overflow (as a user runs it)."""
    from nbprec.capture import capture

    model, x, y = planted({1: "overflow"})
    model = model.half()
    with pytest.raises(OverflowDetectedError) as caught, capture(model, path, overflow_check=True) as cap:
        torch.nn.functional.cross_entropy(model(x.half()).float(), y).backward()
    return cap, caught.value


def test_the_ops_an_overflow_check_names_become_a_small_targeted_dump(tmp_path):
    setup = planted_setup({1: "overflow"}, "float16")
    run = setup.run("target", capture=tmp_path / "check", capture_options={"overflow_check": True})
    assert run.overflows == ["Tensor.mul.0.forward"]
    t = targeted_dump(setup, run.overflows, tmp_path / "targeted", full="measure")
    assert t.ops == ["Tensor.mul.0.forward"] and t.include == include_patterns(t.ops)
    for dump in (t.target, t.bench):  # only that op, forward and backward, as full tensors
        index = nbprec.open(dump).index
        assert set(index["op"]) == {"Tensor.mul.0.forward", "Tensor.mul.0.backward"}
        assert index["has_data"].all()
    assert t.comparison.ops.set_index("op").loc["Tensor.mul.0.forward", "status"] == "fail"
    assert t.mattered and t.verdict == "harmful" and "gradients" in t.judgement.failing()
    assert t.full_measured and t.size < 0.25 * t.full_size
    assert "% of a full dump" in t.size_text() and "harmful" in t.to_text() and "<table" in t._repr_html_()


def test_the_full_size_estimate_matches_a_measured_tensor_dump(tmp_path):
    setup = planted_setup({1: "overflow"}, "float16")
    setup.run("target", capture=tmp_path / "stats")
    setup.run("target", capture=tmp_path / "tensors", capture_options={"mode": "tensor"})
    estimated, measured = tensor_dump_size(tmp_path / "stats"), folder_size(tmp_path / "tensors")
    assert abs(estimated - measured) < 0.05 * measured
    assert tensor_dump_size(tmp_path / "tensors") == measured


def test_an_absorbed_overflow_did_not_matter(tmp_path):
    setup = planted_setup({1: "clamped"}, "float16")  # 1e5 * h overflows, a clamp to [-1, 1] absorbs it
    setup.run("target", capture=tmp_path / "fp16")
    t = targeted_dump(setup, tmp_path / "fp16", tmp_path / "targeted", full=(tmp_path / "fp16", tmp_path / "fp16"))
    assert t.ops == ["Tensor.mul.0.forward"] and not t.mattered and t.verdict == "transient, harmless"
    assert not t.full_measured and t.full_size > t.size


def test_an_overflow_detected_error_and_a_capture_name_the_ops(tmp_path):
    setup = planted_setup({1: "overflow"}, "float16")
    cap, error = _overflow_check(tmp_path / "check")
    assert cap.overflows == [error.op] == ["Tensor.mul.0.forward"]
    from_error = targeted_dump(setup, error, tmp_path / "a", full=None)
    from_capture = targeted_dump(setup, cap, tmp_path / "b", full=None)
    assert from_error.ops == from_capture.ops == ["Tensor.mul.0.forward"] and from_error.full_size is None
    with pytest.raises(RemedyError, match="never called"):
        targeted_dump(setup, ["Functional.gelu.9.forward"], tmp_path / "c", full=None)
