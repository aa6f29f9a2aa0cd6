"""Real runs for the overflow tests: captured torch models, and a hook recorder that emulates saturation mode."""

from __future__ import annotations

from pathlib import Path

import pytest

FP16_MAX = 65504.0


def _capture_tiny(folder: Path, dtype: str, **options):
    from nbprec.capture import capture, seed_all
    from nbprec.demo.tiny import build_tiny, train_step

    seed_all(0)
    model, ids, labels = build_tiny(dtype)
    with capture(model, folder, meta={"loss_scale": 2.0**24}, **options):
        train_step(model, ids, labels, loss_scale=2.0**24)


@pytest.fixture(scope="session")
def finetune_runs(tmp_path_factory):
    """The tiny encoder's fine-tuning step at loss scale 2**24: float16 (full tensors), float32, the overflow check.

    Returns the three folders and the op the capture's overflow check stopped on.
    """
    pytest.importorskip("torch")
    from nbprec.errors import OverflowDetectedError

    root = tmp_path_factory.mktemp("finetune")
    _capture_tiny(root / "fp16", "float16", mode="tensor")
    _capture_tiny(root / "fp32", "float32", mode="tensor")
    _capture_tiny(root / "fp16_stats", "float16", mode="statistics")
    with pytest.raises(OverflowDetectedError) as stopped:
        _capture_tiny(root / "check", "float16", overflow_check=True)
    return {
        "fp16": root / "fp16",
        "fp32": root / "fp32",
        "fp16_stats": root / "fp16_stats",
        "check": root / "check",
        "stopped_on": stopped.value.op,
    }


def record_saturating(model, inputs, folder: Path, *, mode: str = "tensor", saturate: bool = True) -> None:
    """Run ``model`` recording every leaf module's inputs and output with NativeDumpWriter (forward hooks).

    With ``saturate`` each output's inf is replaced by +-65504 before the next module sees it: the float16
    saturation mode of older Ascend training chips, where an overflow clamps instead of giving inf.
    """
    import torch

    from nbprec.formats.native import NativeDumpWriter

    writer = NativeDumpWriter(folder, mode=mode, meta={"saturation_mode": saturate})
    state = {"order": 0}

    def hook(name):
        def run(module, args, output):
            if saturate:
                output = torch.where(torch.isinf(output), torch.sign(output) * FP16_MAX, output).to(output.dtype)
            op = f"Module.{name}.{type(module).__name__}.forward.0"
            base = {"op": op, "op_type": type(module).__name__, "module": name, "direction": "forward"}
            base.update(order=state["order"], api=f"Module.{type(module).__name__}")
            for i, a in enumerate(args):
                rec = {**base, "name": f"{op}.input.{i}", "role": "input", "slot": str(i)}
                writer.write_tensor(rec, a.detach().numpy())
            writer.write_tensor({**base, "name": f"{op}.output.0", "role": "output"}, output.detach().numpy())
            state["order"] += 1
            return output

        return run

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n and not list(m.children())]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
        writer.close()


@pytest.fixture
def record_saturating_fn():
    """:func:`record_saturating`, as a fixture (test modules cannot import conftest)."""
    pytest.importorskip("torch")
    return record_saturating
