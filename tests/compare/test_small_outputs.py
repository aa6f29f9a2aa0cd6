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
import pytest

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


def _mean_backward_runs(tmp_path: Path, n: int = N, size: float = 7.8e-5) -> tuple[Path, Path]:
    """A mean's backward (its input gradient, about ``size``, divided by the ``n`` elements averaged), then a pow's
    backward (2 x times that gradient), in float16 and in float32."""
    rng = np.random.default_rng(3)
    grad = (size * (0.6 + 0.4 * rng.random((256, 1)))).astype(np.float32)  # a gradient reaching a norm's mean
    x = rng.standard_normal((256, n)).astype(np.float32)
    runs = []
    for dtype in (np.float16, np.float32):
        g = grad.astype(dtype)
        spread = np.broadcast_to(g / dtype(n), (256, n)).copy()  # float16: 2e-7 to 5e-7, subnormal
        xs = x.astype(dtype)
        pow_grad = dtype(2) * xs * spread
        ops = [("Tensor.mean.0.backward", {"input.0": g, "output.0": spread}),
               ("Tensor.pow.0.backward", {"input.0": spread, "input.1": xs, "output.0": pow_grad})]  # fmt: skip
        runs.append(_write(tmp_path / np.dtype(dtype).name, ops))
    return runs[0], runs[1]


@pytest.mark.parametrize(("n", "size"), [(N, 7.8e-5), (4096, 1e-3)], ids=["1/384", "1/4096"])
def test_a_small_gradient_that_lost_precision_is_blamed_on_the_op_that_made_it(tmp_path, n, size):
    """The mean's gradient is small next to its input (1/384, 1/4096 of it) but one value of one sign, not the
    noise of a cancelling sum: its relative errors judge it (at 1/4096 it was taken for noise, and passed)."""
    target, bench = _mean_backward_runs(tmp_path, n, size)
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


def _torch():
    return pytest.importorskip("torch")


def _attention_key_gradients(dtype: str, loss_scale: float = 1.0) -> dict[str, np.ndarray]:
    """The gradients of a single-head attention's key projection (torch, in ``dtype``): its bias gradient is
    mathematically zero (softmax ignores a constant added to every key), so both runs hold rounding noise there."""
    torch = _torch()
    torch.manual_seed(0)
    query, key, value = (torch.nn.Linear(64, 64) for _ in range(3))
    x = torch.randn(4, 16, 64, generator=torch.Generator().manual_seed(1))
    kind = getattr(torch, dtype)
    for layer in (query, key, value):
        layer.to(kind)
    h = x.to(kind)
    attention = (query(h) @ key(h).transpose(-1, -2) / 8).softmax(-1) @ value(h)
    (attention.float().pow(2).mean() * loss_scale).backward()
    return {"gradient.weight": key.weight.grad.float().numpy(), "gradient.bias": key.bias.grad.float().numpy()}


def _key_gradient_runs(tmp_path: Path, loss_scale: float = 1.0) -> tuple[Path, Path]:
    runs = []
    for dtype, np_dtype in (("float16", np.float16), ("float32", np.float32)):
        grads = _attention_key_gradients(dtype, loss_scale)
        tensors = {k: v.astype(np_dtype) for k, v in grads.items()}
        runs.append(_write(tmp_path / dtype, [("Module.attn.key.Linear.parameters_grad.0", tensors)]))
    return runs[0], runs[1]


def test_a_mathematically_zero_parameter_gradient_passes_as_noise(tmp_path):
    """A parameter-gradient record has no inputs: its largest gradient (the weight's) sets the scale its bias
    gradient's noise is judged at, the reason says why its cosine means nothing, and the op's roll-up leaves it
    out (it was the comparison's worst op, at a cosine near 0, and failed with "inputs nbprec could not
    compare": the float16 MiniLM run of issue 21)."""
    comp = nbprec.compare(*_key_gradient_runs(tmp_path), progress=None)
    bias = comp.table.set_index("target_name").loc["Module.attn.key.Linear.parameters_grad.0.gradient.bias"]
    assert bias["cosine"] < 0.9 and bias["rel_euclidean"] > 1  # noise against noise
    assert bias["status"] == "pass" and "rounding noise" in bias["reason"]
    op = comp.ops.set_index("op").loc["Module.attn.key.Linear.parameters_grad.0"]
    assert op["out_cosine"] > 0.999  # the weight gradient's
    assert comp.first_failing_op() is None and comp.verdict().headline.startswith("No op fails")


def test_a_parameter_gradient_that_fails_first_is_told_as_one(tmp_path):
    """Gradients scaled down until float16 holds them as subnormal values: the parameter-gradient record is the
    first op that fails, and the verdict sends the user to the module's backward pass, not to inputs it lacks."""
    comp = nbprec.compare(*_key_gradient_runs(tmp_path, loss_scale=2.0**-22), progress=None)
    first = comp.first_failing_op()
    assert first is not None and first["op"] == "Module.attn.key.Linear.parameters_grad.0"
    verdict = comp.verdict()
    assert "It records the gradients of its module's parameters" in verdict.headline
    assert "could not compare" not in verdict.headline and "its inputs" not in verdict.headline.split(":")[1]
    assert verdict.next_step.startswith("nbprec ni Module.attn.key.Linear.backward.0")


def test_token_ids_do_not_set_the_scale_an_embedding_is_judged_at(tmp_path):
    """An embedding looked up with ids one off (a tokenizer mismatch): the ids, integers up to 30,000, are not
    the scale its output's rounding lives at, so the output fails (it passed as "benchmark ~ 0" at 0.05 of 30,000)."""
    torch = _torch()
    weight = torch.randn(30_000, 32, generator=torch.Generator().manual_seed(2)) * 0.05
    ids = torch.randint(0, 29_999, (4, 16), generator=torch.Generator().manual_seed(3))
    runs = []
    for name, shift in (("target", 1), ("bench", 0)):
        out = torch.nn.functional.embedding(ids + shift, weight)
        tensors = {"input.0": ids.numpy(), "input.1": weight.numpy(), "output.0": out.numpy()}
        runs.append(_write(tmp_path / name, [("Functional.embedding.0.forward", tensors)], direction="forward"))
    comp = nbprec.compare(*runs, progress=None)
    table = comp.table.set_index("target_name")
    assert table.loc["Functional.embedding.0.forward.input.0", "status"] == "pass"  # the same ids
    assert table.loc["Functional.embedding.0.forward.output.0", "status"] == "fail"
    assert comp.first_introduced_op()["op"] == "Functional.embedding.0.forward"
