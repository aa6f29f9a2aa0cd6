"""Saturation mode (values clamped to 65504, no inf) and a transient overflow that a masked_fill removes."""

from __future__ import annotations

import numpy as np
import pytest

import nbprec.overflow as ov
from nbprec.formats import open_dump

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def _saturating_mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
    ).half()
    with torch.no_grad():
        model[1].weight.mul_(50000.0)  # layer 1 overflows float16 on some elements
    return model, (torch.randn(8, 16).half() * 4,)


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_saturation_mode_clamped_values_are_an_overflow(tmp_path, mode, record_saturating_fn):
    record = record_saturating_fn
    model, inputs = _saturating_mlp()
    record(model, inputs, tmp_path / "run", mode=mode)
    dump = open_dump(tmp_path / "run")
    report = ov.scan(dump)
    assert (report.tensors["inf_count"].fillna(0) == 0).all()  # saturation mode: no inf anywhere
    first = report.first_critical()
    assert first["op"] == "Module.1.Linear.forward.0"
    out = report.tensors[report.tensors["name"] == "Module.1.Linear.forward.0.output.0"].iloc[0]
    assert out["status"] == "saturated" and out["abs_max"] == 65504.0
    if mode == "tensor":
        assert out["saturated_count"] > 0
    # the tanh absorbs the saturated values: medium; its output is normal
    levels = dict(zip(report.ops["op"], report.ops["level"], strict=True))
    assert levels["Module.2.Tanh.forward.0"] == "medium"
    assert levels["Module.0.Linear.forward.0"] == ""


class _Masked(torch.nn.Module):
    """proj -> x4096 (overflows float16 on the padded rows only) -> masked_fill(pad, 0) -> /4096 -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x, pad):
        big = self.proj(x) * 4096.0
        clean = big.masked_fill(pad, 0.0)
        return self.head(clean / 4096.0)


def _masked_runs(tmp_path, *, mask_padding: bool):
    from nbprec.capture import capture, seed_all

    seed_all(0)
    model = _Masked()
    x = torch.randn(6, 8) * 0.5
    x[4:] = 400.0  # padded rows: huge activations
    pad = torch.zeros(6, 1, dtype=torch.bool)
    if mask_padding:
        pad[4:] = True
    folders = {}
    for dtype in ("float32", "float16"):
        folder = tmp_path / f"{dtype}_{mask_padding}"
        m = _Masked().to(getattr(torch, dtype))
        m.load_state_dict(model.state_dict())
        with capture(m, folder, mode="tensor", level="both", backward=False), torch.no_grad():
            m(x.to(m.proj.weight.dtype), pad)
        folders[dtype] = folder
    return folders


def test_transient_overflow_is_harmless(tmp_path):
    runs = _masked_runs(tmp_path, mask_padding=True)
    report = ov.scan(runs["float16"], bench=runs["float32"])
    first = report.first_critical()
    assert first is not None and "mul" in first["op_type"]
    fill = report.ops[report.ops["op_type"].str.contains("masked_fill")].iloc[0]
    assert fill["level"] == "medium"
    assert report.impact.verdict == "transient, harmless"
    assert report.impact.harmful is False
    assert all(f["status"] == "pass" for f in report.impact.final_ops)


def test_same_overflow_unmasked_is_harmful(tmp_path):
    runs = _masked_runs(tmp_path, mask_padding=False)
    report = ov.scan(runs["float16"], bench=runs["float32"])
    first = report.first_critical()
    assert first is not None and "mul" in first["op_type"]
    assert report.impact.verdict == "harmful"
    assert report.impact.first_divergent_op == first["op"]
    # without a benchmark the inf reaching the output is enough to call it harmful
    alone = ov.scan(runs["float16"])
    assert alone.impact.verdict == "harmful"
    assert ov.scan(_masked_runs(tmp_path / "m", mask_padding=True)["float16"]).impact.verdict == "unknown"


def test_bfloat16_run_has_no_overflow_where_float16_does(tmp_path):
    from nbprec.capture import capture

    model = _Masked().to(torch.bfloat16)
    x = torch.full((2, 8), 400.0, dtype=torch.bfloat16)
    with capture(model, tmp_path / "bf16", mode="tensor", backward=False), torch.no_grad():
        model(x, torch.zeros(2, 1, dtype=torch.bool))
    report = ov.scan(tmp_path / "bf16")
    assert report.first_critical() is None and report
    judged_as_fp16 = ov.scan(tmp_path / "bf16", dtype="float16")  # the same values would saturate float16
    assert judged_as_fp16.first_critical() is not None
    assert np.isfinite(report.tensors["abs_max"].dropna()).all()
