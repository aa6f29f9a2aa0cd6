"""A sum whose terms cancel magnifies its inputs' error without introducing one (:mod:`nbprec.compare.conditioning`),
and what the verdict says around it.

Found on a held-out pair (the transformer of ``bench/msprobe_dump.py --readout``): its loss, the mean of 16,384
products of both signs, came out 1e-4 in float32, and the bfloat16 run's inputs to it (cosine 0.9991, RED 0.04)
gave -4e-4. The verdict said the mean, computed in float32 in both runs, "introduced the error ... keep it in
float32". The runs here are real: a PyTorch layer run in bfloat16 and float32, captured by nbprec.
"""

from __future__ import annotations

import numpy as np
import pytest
from fresh_python import command_in_fresh_python

import nbprec
from nbprec.capture import capture

torch = pytest.importorskip("torch")


class _Readout(torch.nn.Module):
    """A linear layer, a loss that weighs its output (``weights`` chosen to cancel or not), then a planted scale
    on a later op of the target (``later``: 1.0 in the benchmark)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)
        gen = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)

    def forward(self, x, weights, later: float):
        out = self.lin(x).float()
        loss = (out * weights).mean()
        return loss, torch.tanh(out * later)


def _inputs():
    return torch.randn(64, 256, generator=torch.Generator().manual_seed(6))


def _output() -> torch.Tensor:
    """The float32 run's layer output."""
    with torch.no_grad():
        return _Readout().lin(_inputs()).double()


def _weights(cancel: float) -> torch.Tensor:
    """Random weights whose products with the float32 output sum to ``cancel`` times what they would (0.001: the
    loss is a thousandth of its typical size; 1: no cancellation)."""
    o = _output()
    r = torch.randn(o.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    return (r - (1 - cancel) * (r * o).sum() / (o * o).sum() * o).float()


def _compare(tmp_path, weights, later: float = 1.0, mode: str = "tensor") -> nbprec.Comparison:
    folders = []
    for dtype, scale in ((torch.bfloat16, later), (torch.float32, 1.0)):
        model = _Readout().to(dtype)
        folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
        with capture(model, folders[-1], level="apis", mode=mode), torch.no_grad():
            model(_inputs().to(dtype), weights, scale)
    return nbprec.compare(folders[0], folders[1], progress=None)


def _mean(comp: nbprec.Comparison):
    ops = comp.ops
    return ops[ops["op_type"] == "mean"].iloc[0]


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_a_mean_that_cancels_passes_its_inputs_error_on(tmp_path, mode):
    comp = _compare(tmp_path, _weights(0.001), mode=mode)
    mean = _mean(comp)
    assert mean["status"] == "fail" and mean["in_status"] == "pass"
    assert mean["out_error"] > 10 * mean["in_error"]  # (the inherit factor alone, 4, called it introduced)
    assert mean["origin"] == "inherited"
    verdict = comp.verdict()
    assert verdict.headline.startswith(f"{mean['op']} (mean) is the first op that fails, but it did not introduce")
    assert "a sum whose terms cancel" in verdict.headline and "keep it in float32" not in verdict.text
    assert "nothing to fix in it" in verdict.next_step and "comes later" not in verdict.headline


def test_the_bound_is_the_inputs_rms_over_the_result(tmp_path):
    """For a mean, by Cauchy-Schwarz: RED(out) <= RED(in) * rms(in) / |out| (the benchmark's tensors)."""
    comp = _compare(tmp_path, _weights(0.001))
    table, index = comp.table, comp.op_index
    mean = _mean(comp)
    rows = table[table["op"] == mean["op"]]
    product, result = rows[rows["role"] == "input"].iloc[0], rows[rows["role"] == "output"].iloc[0]
    rms = product["bench_norm"] / np.sqrt(product["numel"])
    position = int(np.flatnonzero(index.ops["op"] == mean["op"])[0])
    assert index.condition[position] == pytest.approx(rms / abs(result["bench_mean"]), rel=1e-6)
    assert index.condition[position] > 1000
    # the bound holds: the error the mean shows is within what its inputs' error allows
    assert mean["out_rel_euclidean"] <= index.condition[position] * mean["in_rel_euclidean"]


def test_a_sum_that_does_not_cancel_keeps_a_factor_near_one(tmp_path):
    """Weights of the output's signs: the products are all positive, their mean does not cancel (its factor is
    rms / mean of their magnitudes, about 1.3), and every op that is not a sum keeps 1."""
    comp = _compare(tmp_path, torch.sign(_output()).float())
    index = comp.op_index
    is_mean = np.asarray(index.ops["op_type"] == "mean", dtype=bool)
    assert 1 < index.condition[is_mean].max() < 2
    assert (index.condition[~is_mean] == 1).all()


def test_the_op_that_introduces_an_error_later_is_named(tmp_path):
    """The first failing op inherited its error; a later op introduces one of its own (a planted scale of 1.1:
    its output keeps cosine 1 but is off in scale). The verdict names it and the next step looks at it."""
    comp = _compare(tmp_path, _weights(0.001), later=1.1)
    later = comp.first_introduced_op()
    assert later is not None and later["op_type"] == "mul" and later["order"] > _mean(comp)["order"]
    verdict = comp.verdict()
    assert f"The first op to introduce an error of its own comes later: {later['op']} (mul)" in verdict.headline
    assert "kept cosine 1.0000 but is off in scale (RED 0.1)" in verdict.headline
    assert verdict.next_step.startswith(f"nbprec ni {later['op']} --target ")
    # the command says the same without pandas (a DataFrame row for the later op cost it 145 ms until 2026-12-07)
    argv = ["compare", str(comp.meta["target"]), str(comp.meta["bench"]), "-o", str(tmp_path / "out"), "--no-progress"]
    text, loaded = command_in_fresh_python(argv, ("pandas",))
    assert loaded == {"pandas": False} and f"comes later: {later['op']} (mul)" in text


def test_a_scalar_result_is_told_by_its_values(tmp_path):
    """A scalar's cosine is 1 whatever its value (the metric's convention): the verdict gives both values."""
    folders = []
    for dtype, scale in ((torch.bfloat16, 1.25), (torch.float32, 1.0)):
        model = _Readout().to(dtype)
        folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
        with capture(model, folders[-1], level="apis", mode="tensor"), torch.no_grad():
            model.lin(_inputs().to(dtype)).float().pow(2).mean().mul(scale)
    verdict = nbprec.compare(folders[0], folders[1], progress=None).verdict()
    assert verdict.headline.startswith("Tensor.mul.0.forward (mul) is the first op that fails"), verdict.text
    assert "its output (one value) is " in verdict.headline and "cosine 1.0000" not in verdict.headline
