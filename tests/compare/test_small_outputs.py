"""Outputs that are small next to their op's inputs (issue 21's held-out float16 runs): a benchmark that is only
rounding noise is judged by absolute error, one that carries its inputs' signal by its relative errors, and the
verdict tells an op that took an error built up over passing ops over the rule's bounds from one fed by inputs
nbprec could not compare.

The runs are written with nbprec's own writer from float16 and float32 arithmetic done here (numpy's float16 is
IEEE binary16, as an accelerator's): a mean's gradient over 384 elements, which float16 holds as subnormal values
(precision lost: a float16 training step without loss scaling), and a difference of nearly equal tensors, which
is noise in both runs.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

import nbprec
from nbprec.formats.native import NativeDumpWriter

N = 384  # the elements a mean averages (a hidden size)


def _write(folder: Path, ops: list[tuple[str, dict[str, np.ndarray]]], direction: str = "backward") -> Path:
    with NativeDumpWriter(folder, mode="tensor") as w:
        for order, (op, tensors) in enumerate(ops):
            for key, array in tensors.items():
                role, slot = key.split(".")
                record = {"name": f"{op}.{key}", "op": op, "op_type": op.split(".")[1], "order": order}
                record.update(role=role, slot=slot, direction=direction, api=".".join(op.split(".")[:2]))
                w.write_tensor(record, array)
    return folder


def _mean_backward_runs(tmp_path: Path) -> tuple[Path, Path]:
    """A mean's backward (its input gradient divided by N over the averaged elements), then a pow's backward
    (2 x times that gradient), in float16 and in float32."""
    rng = np.random.default_rng(3)
    grad = (7.8e-5 * (0.6 + 0.4 * rng.random((256, 1)))).astype(np.float32)  # a gradient reaching a norm's mean
    x = rng.standard_normal((256, N)).astype(np.float32)
    runs = []
    for dtype in (np.float16, np.float32):
        g = grad.astype(dtype)
        spread = np.broadcast_to(g / dtype(N), (256, N)).copy()  # float16: about 2e-7, subnormal
        xs = x.astype(dtype)
        pow_grad = dtype(2) * xs * spread
        ops = [("Tensor.mean.0.backward", {"input.0": g, "output.0": spread}),
               ("Tensor.pow.0.backward", {"input.0": spread, "input.1": xs, "output.0": pow_grad})]  # fmt: skip
        runs.append(_write(tmp_path / np.dtype(dtype).name, ops))
    return runs[0], runs[1]


def test_a_small_gradient_that_lost_precision_is_blamed_on_the_op_that_made_it(tmp_path):
    target, bench = _mean_backward_runs(tmp_path)
    comp = nbprec.compare(target, bench, progress=None)
    table = comp.table.set_index("target_name")
    out = table.loc["Tensor.mean.0.backward.output.0"]
    assert out["rel_euclidean"] > 0.05 and out["status"] == "fail"  # the subnormal float16 values lost bits
    first, introduced = comp.first_failing_op(), comp.first_introduced_op()
    assert first["op"] == introduced["op"] == "Tensor.mean.0.backward"
    verdict = comp.verdict()
    assert verdict.headline.startswith("Tensor.mean.0.backward (mean) is the first op that fails")
    assert "It introduced the error" in verdict.headline and "could not compare" not in verdict.headline


def test_a_benchmark_of_rounding_noise_is_still_judged_by_absolute_error(tmp_path):
    """x - y of nearly equal tensors: float32 leaves noise an ulp wide, float16 mostly zeros and a few of its own
    ulps; relative errors of noise against noise mean nothing, and the absolute error is tiny next to x."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(4096).astype(np.float32) * 4
    toward = np.where(rng.random(4096) < 0.5, np.inf, -np.inf).astype(np.float32)
    y = np.nextafter(x, toward)  # an ulp of float32 apart
    runs = []
    for dtype in (np.float16, np.float32):
        xs, ys = x.astype(dtype), y.astype(dtype)
        ops = [("Tensor.__sub__.0.forward", {"input.0": xs, "input.1": ys, "output.0": xs - ys})]
        runs.append(_write(tmp_path / np.dtype(dtype).name, ops, direction="forward"))
    comp = nbprec.compare(runs[0], runs[1], progress=None)
    out = comp.table.set_index("target_name").loc["Tensor.__sub__.0.forward.output.0"]
    assert out["rel_euclidean"] > 0.5  # by its relative error it would fail: float16's ulps against float32's
    assert out["status"] == "pass" and comp.first_failing_op() is None


def test_an_error_built_up_over_passing_ops_is_said_to_be_one(tmp_path):
    """Twenty bfloat16 ops, each growing the target's relative error by 1.3 times (less than an op that
    introduces one): the first op over the rule's bounds did not introduce it, and its inputs were compared and
    pass."""
    rng = np.random.default_rng(6)
    bench = rng.standard_normal(20_000).astype(np.float32)
    noise = rng.standard_normal(20_000).astype(np.float32)
    ops_t, ops_b = [], []
    for k in range(20):
        error = 0.005 * 1.3**k
        previous = 0.005 * 1.3 ** (k - 1) if k else 0.0
        op = f"Tensor.add.{k}.forward"
        ops_t.append((op, {"input.0": (bench + previous * noise).astype(ml_dtypes.bfloat16),
                           "output.0": (bench + error * noise).astype(ml_dtypes.bfloat16)}))  # fmt: skip
        ops_b.append((op, {"input.0": bench, "output.0": bench.copy()}))
    target = _write(tmp_path / "target", ops_t, direction="forward")
    reference = _write(tmp_path / "bench", ops_b, direction="forward")
    comp = nbprec.compare(target, reference, progress=None)
    first = comp.first_failing_op()
    assert first is not None and first["origin"] == "inherited" and first["in_status"] == "pass"
    assert comp.first_introduced_op() is None
    headline = comp.verdict().headline
    assert headline.startswith(f"{first['op']} (add) is the first op that fails, but it did not introduce the error")
    assert "inputs, which pass, already carried most of it" in headline and "could not compare" not in headline
