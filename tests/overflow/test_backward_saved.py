"""A backward op whose own record holds only normal gradients can still compute from NaN or inf: the tensors its
forward call saved (``pow``'s input, ``exp``'s output) are not in its record. Such an op inherited the overflow.

A held-out float16 run of issue 21 (an input that overflowed in its cast to float16, before the first recorded op)
was told "first critical op: Tensor.pow.13.backward: inputs normal, output abnormal: the op produced it", where
no recorded op produced it.
"""

from __future__ import annotations

import pytest

import nbprec
from nbprec.overflow import scan


def _run_with_an_input_that_overflowed(folder):
    torch = pytest.importorskip("torch")
    from nbprec.capture import capture

    class Square(torch.nn.Module):
        def forward(self, x):
            return (x * 2.0).pow(2)

    # float16 holds at most 65504: the cast turns the large values into inf before any recorded op
    x = (torch.randn(64, generator=torch.Generator().manual_seed(0)) * 40000).half().requires_grad_(True)
    model = Square()
    with capture(model, folder, level="apis", mode="tensor", backward=True):
        model(x).float().mean().backward()
    return nbprec.open(folder)


def test_a_backward_op_fed_inf_by_its_forward_call_did_not_produce_it(tmp_path):
    dump = _run_with_an_input_that_overflowed(tmp_path / "run")
    report = scan(dump)
    ops = report.ops.set_index("op")
    backward = ops.loc["Tensor.pow.0.backward"]
    assert backward["in_status"] == "normal" and backward["out_abnormal"]  # its record: a normal gradient in, inf out
    assert backward["level"] == "high" and "forward call" in backward["reason"]
    assert report.first_critical() is None
    summary = report.summary()
    assert summary["first_abnormal_op"] == "Tensor.mul.0.forward"  # its input came in abnormal: the cast before it
    # a backward op whose outputs are normal is not said to have absorbed anything: its own inputs were normal
    assert ops.loc["Tensor.mean.0.backward", "level"] == ""
