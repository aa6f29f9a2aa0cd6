"""KeepFloat32, the code nbprec verifies remedies with and pastes into the fix: names, dtypes, and the snippet."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import nbprec
from nbprec.remedy import Remedy, emit_fix, kinds

from .conftest import planted, planted_setup

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
F = torch.nn.functional


def test_the_core_imports_neither_torch_nor_widgets():
    code = (
        "import sys, nbprec.remedy, nbprec.remedy.fixes, nbprec.remedy.targeted\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'ipywidgets', 'bqplot', 'ipycytoscape')]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_runtime_keeps_the_same_kinds_as_the_core():
    from nbprec.remedy import _runtime

    assert _runtime.CASTS == kinds.CASTS and _runtime.MOVES_VALUES == kinds.MOVES_VALUES
    assert {"float", "to"} <= kinds.CASTS and {"view", "cat"} <= kinds.MOVES_VALUES and kinds.promotable("gelu")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_op_names_are_the_capture_names(dtype, tmp_path):
    setup = planted_setup({1: "kernel"}, dtype)
    run = setup.run("target", capture=tmp_path / "dump")
    index = nbprec.open(tmp_path / "dump").index
    api = index[(index["direction"] == "forward") & ~index["op"].str.startswith("Module.")]
    assert list(dict.fromkeys(api.sort_values("order", kind="stable")["op"])) == run.seen
    # keeping ops in float32 changes no name: the capture of a remedied run lines up with the plain one
    kept = setup.run("target", ops=run.seen[3:9], capture=tmp_path / "kept")
    assert kept.seen == run.seen
    assert set(nbprec.open(tmp_path / "kept").index["name"]) == set(index["name"])


def test_kept_ops_compute_in_float32_and_hand_float32_to_the_next_kept_op():
    from nbprec.remedy._runtime import KeepFloat32

    model, x, _ = planted({1: "overflow"})
    model = model.half()
    seen: dict[str, torch.dtype] = {}

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", "")
            if name in ("mul", "layer_norm", "linear") and isinstance(out, torch.Tensor):
                seen.setdefault(f"{name}:{args[0].dtype}", out.dtype)
            return out

    keep = KeepFloat32(model, ops=["Tensor.mul.0.forward", "Functional.layer_norm.2.forward"])
    with Spy(), keep:  # the spy is below: it sees the calls as KeepFloat32 hands them on
        out = model(x.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert seen["mul:torch.float32"] == torch.float32  # the scale-up ran on float32 inputs
    assert seen["layer_norm:torch.float32"] == torch.float32  # and the layer norm got its float32 result
    assert seen["linear:torch.float16"] == torch.float16  # the rest stays float16
    with torch.no_grad():
        plain = model(x.half())
    assert not torch.isfinite(plain).all()  # without it the scale-up overflows


def test_keeping_nothing_changes_nothing():
    setup = planted_setup({1: "kernel"}, "bfloat16")
    a, b = setup.run("target"), setup.run("target", ops=[], modules=[])
    assert a.same_as(b)


def test_an_in_place_op_kept_in_float32_writes_back_into_its_tensor():
    from nbprec.remedy._runtime import KeepFloat32

    x = torch.full((4,), 3.0, dtype=torch.float16)
    with KeepFloat32(ops=["Tensor.mul_.0.forward"]):
        y = x.mul_(1.0 / 3.0)
    assert y is x and x.dtype == torch.float16 and torch.allclose(x.float(), torch.ones(4), atol=1e-3)


def test_a_kept_module_runs_in_float32_and_its_output_is_cast_back_where_used():
    from nbprec.remedy._runtime import KeepFloat32

    model, x, _ = planted({1: "overflow"})
    model = model.half()
    keep = KeepFloat32(model, modules=["blocks.1"])
    assert model.blocks[1].lin1.weight.dtype == torch.float32 and model.head.weight.dtype == torch.float16
    with keep:
        out = model(x.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert not keep._handles  # hooks removed on exit


@pytest.mark.parametrize(("dtype", "autocast"), [("float16", False), ("bfloat16", False), ("bfloat16", True)])
def test_the_emitted_snippet_reproduces_the_verified_run_bit_for_bit(dtype, autocast):
    setup = planted_setup({1: "overflow", 2: "kernel"}, dtype, autocast=autocast, loss_scale=64.0)
    remedy = Remedy.of({"ops": ["Tensor.mul.0.forward", "Functional.layer_norm.2.forward", "Functional.silu.2.forward"],
                        "modules": ["head"], "loss_scale": 128.0})  # fmt: skip
    fix = emit_fix(remedy, setup)
    reference = setup.run("target", ops=remedy.ops, modules=remedy.modules, loss_scale=128.0)
    model, x, y = planted({1: "overflow", 2: "kernel"})
    nbprec.seed_all(setup.seed)
    model = model.float() if autocast else model.to(getattr(torch, dtype))
    namespace: dict[str, object] = {"model": model}
    exec(fix.pytorch, namespace)
    exec(fix.loss_scale, namespace)
    with namespace["keep_float32"]:
        ctx = torch.autocast("cpu", dtype=getattr(torch, dtype)) if autocast else torch.autocast("cpu", enabled=False)
        with ctx:
            loss = F.cross_entropy(model(x if autocast else x.to(getattr(torch, dtype))).float(), y)
        if autocast:
            namespace["scaler"].scale(loss).backward()
        else:
            (loss * namespace["LOSS_SCALE"]).backward()
    grads = [p.grad.float().numpy().ravel() / np.float32(128.0) for p in model.parameters() if p.grad is not None]
    assert loss.item() == reference.loss
    np.testing.assert_array_equal(np.concatenate(grads), reference.gradients)
    if not autocast:  # the static-scale helper: backward of the scaled loss, gradients unscaled in place
        model.zero_grad()
        with namespace["keep_float32"]:
            loss = F.cross_entropy(model(x.to(getattr(torch, dtype))).float(), y)
            assert namespace["backward_scaled"](loss, model)
        unscaled = np.concatenate([p.grad.float().numpy().ravel() for p in model.parameters() if p.grad is not None])
        np.testing.assert_allclose(unscaled, reference.gradients, rtol=0, atol=1e-6)
