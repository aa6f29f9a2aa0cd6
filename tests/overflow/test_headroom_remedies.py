"""Headroom prediction from a float32 run, checked against the same model actually run in float16; remedies."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nbprec.overflow as ov
from nbprec.formats import open_dump

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
nn = torch.nn
FP16_MAX = 65504.0


class Branchy(nn.Module):
    """Two branches that overflow float16 (absorbed later by tanh / clamp), one close call, one underflow."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.big, self.l2 = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.near, self.l3 = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        a = self.l1(x)
        b = torch.tanh(self.big(a))
        d = torch.clamp(self.l2(a) * 300.0, -1000.0, 1000.0)
        n = torch.tanh(self.near(a))
        t = a * 1e-10
        return self.l3(b + d + n + t)


def _calibrated_model():
    """Weights scaled so that, in float32, max abs of big(a), l2(a) x 300 and near(a) is 4, 3 and 0.5 x 65504."""
    torch.manual_seed(0)
    model = Branchy()
    x = torch.randn(32, 16)
    with torch.no_grad():
        a = model.l1(x)
        for layer, target in (
            (model.big, 4 * FP16_MAX),
            (model.l2, 3 * FP16_MAX / 300.0),
            (model.near, 0.5 * FP16_MAX),
        ):
            scale = target / layer(a).abs().max()
            layer.weight.mul_(scale)
            layer.bias.mul_(scale)
    return model, x


@pytest.fixture(scope="module")
def branchy_runs(tmp_path_factory):
    from nbprec.capture import capture

    root = tmp_path_factory.mktemp("branchy")
    model, x = _calibrated_model()
    with capture(model, root / "fp32", mode="tensor", backward=False), torch.no_grad():
        model(x)
    half = _calibrated_model()[0].half()
    with capture(half, root / "fp16", mode="tensor", backward=False), torch.no_grad():
        half(x.half())
    return root


def test_predicted_ops_are_the_ones_that_overflow_in_float16(branchy_runs):
    hr = ov.headroom(branchy_runs / "fp32")
    predicted = set(hr.would_overflow("float16")["op"])
    actual = ov.scan(branchy_runs / "fp16")
    # the module enclosing the big linear overflows too, but only inherits it from the op inside (issue 15)
    enclosing = set(actual.ops.loc[actual.ops["inherited"], "op"])
    assert "Module.big.Linear.forward.0" in enclosing & predicted
    assert set(actual.by_level("critical")["op"]) == predicted - enclosing
    assert len(predicted) >= 3  # the big linear (API and module) and the x300 multiply
    assert hr.first_overflow("float16")["op"] == actual.first_critical()["op"]
    # ops predicted to fit really do not overflow
    fits = hr.ops[~hr.ops["overflow_fp16"]]
    bad_in_fp16 = set(actual.ops.loc[actual.ops["out_abnormal"], "op"])
    assert not (set(fits["op"]) - set(actual.ops.loc[actual.ops["level"] != "", "op"])) & bad_in_fp16
    near = hr.ops[hr.ops["op"] == "Module.near.Linear.forward.0"].iloc[0]
    assert 0.9 < near["headroom_fp16"] < 1.1  # half the maximum: one bit of headroom
    assert not near["overflow_fp16"]
    # bfloat16 has room for all of it
    assert hr.would_overflow("bfloat16").empty
    assert hr.summary()["dtypes"]["float16"]["overflowing_ops"] == len(predicted)


def test_predicted_underflow_matches_the_float16_run(branchy_runs):
    hr = ov.headroom(branchy_runs / "fp32")
    tiny = hr.ops[hr.ops["op"] == "Tensor.mul.1.forward"].iloc[0]
    assert tiny["verdict_fp16"] == "precision loss"
    fp32, fp16 = open_dump(branchy_runs / "fp32"), open_dump(branchy_runs / "fp16")
    name = "Tensor.mul.1.forward.output.0"
    ref = fp32.tensor(name).astype(np.float64)
    got = fp16.tensor(name).astype(np.float64)
    really_zero = np.count_nonzero((got == 0) & (ref != 0)) / np.count_nonzero(ref)
    assert tiny["underflow_fp16"] == pytest.approx(really_zero, abs=0.05)
    assert tiny["subnormal_fp16"] >= tiny["underflow_fp16"]
    assert math.isclose(hr.ops.loc[hr.ops["op"] == "Tensor.mul.1.forward", "underflow_bf16"].iloc[0], 0.0)


def test_headroom_from_statistics_only(branchy_runs, tmp_path):
    dump = open_dump(branchy_runs / "fp32")
    hr = ov.headroom(dump, payload=False)
    assert set(hr.would_overflow("float16")["op"]) == set(ov.headroom(dump).would_overflow("float16")["op"])
    assert hr.ops["underflow_fp16"].isna().all()  # shares need payloads
    back = ov.HeadroomReport.load(hr.save(tmp_path / "hr"))
    assert set(back.would_overflow("float16")["op"]) == set(hr.would_overflow("float16")["op"])
    assert "nbprec headroom" in hr._repr_html_()


def test_remedy_snippet_keeps_the_blamed_module_in_float32(branchy_runs):
    hr = ov.headroom(branchy_runs / "fp32")
    fix = ov.remedies(hr, device_type="cpu")
    assert "big" in fix.modules
    assert fix.mixlist == {"black-list": {"to-add": fix.keep_dtype}}
    assert "MatMulV2" in fix.keep_dtype and "Mul" in fix.keep_dtype
    model, x = _calibrated_model()
    with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.float16):
        a = model.l1(x)
        assert torch.isinf(model.big(a)).any()  # the overflow under autocast
    namespace = {"model": model}
    exec(compile(fix.pytorch, "<remedy>", "exec"), namespace)  # the snippet is what a user pastes
    with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.float16):
        a = model.l1(x)
        out = model.big(a)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_loss_scale_bound_and_mixlist_file(tmp_path):
    assert ov.loss_scale_bound(1.0) == 32768.0
    assert ov.loss_scale_bound(65504.0) == 0.5
    assert ov.loss_scale_bound(float("nan")) is None
    assert ov.loss_scale_bound(1e-3) == 2.0**25  # 1e-3 * 2**26 = 67108.864 > 65504
    x = np.ones(4, np.float16)
    from nbprec.formats.native import NativeDumpWriter

    with NativeDumpWriter(tmp_path / "npu") as w:  # an NPU-style dump: op types are Ascend IR types
        base = {"op": "SoftmaxV2.softmax_1", "op_type": "SoftmaxV2", "order": 0, "direction": "forward"}
        w.write_tensor({**base, "name": "SoftmaxV2.softmax_1.input.0", "role": "input"}, x)
        w.write_tensor({**base, "name": "SoftmaxV2.softmax_1.output.0", "role": "output"}, x * np.float16(np.inf))
    fix = ov.remedies(ov.scan(tmp_path / "npu"))
    assert fix.keep_dtype == ["SoftmaxV2"] and not fix.unmapped
    path = fix.write_mixlist(tmp_path / "ops_info.json")
    assert path.read_text().strip() == fix.mixlist_json()
    assert "SoftmaxV2" in fix.to_text()
    with pytest.raises(ov.report.NbprecError):
        ov.remedies(object())
