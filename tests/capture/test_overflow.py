"""Overflow-check mode: stops at the first overflowing op, names it, and leaves its tensors in the dump."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.errors import OverflowDetectedError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LOSS_SCALE = 2.0**24


def _fp16_step(path: Path, loss_scale: float, **options: object) -> object:
    from nbprec.capture import capture, seed_all
    from nbprec.demo.tiny import build_tiny, train_step

    seed_all(0, deterministic=False)  # leave torch's global default alone
    model, ids, labels = build_tiny("float16")
    with capture(model, path, overflow_check=True, **options) as cap:
        train_step(model, ids, labels, loss_scale=loss_scale)
    return cap


def test_overflow_check_stops_the_fp16_backward_at_the_first_overflowing_op(tmp_path: Path) -> None:
    with pytest.raises(OverflowDetectedError) as info:
        _fp16_step(tmp_path / "stop", LOSS_SCALE)
    err = info.value
    # the float32 loss gradient (about 2**24 / batch) is cast back to float16 by logits.float()'s backward
    assert err.op == "Tensor.float.0.backward"
    assert err.dump_path == str(tmp_path / "stop")
    assert "Tensor.float.0.backward" in str(err) and str(tmp_path / "stop") in str(err)
    dump = nbprec.open(tmp_path / "stop")
    assert set(dump.index["op"]) == {"Tensor.float.0.backward"}
    assert dump.meta["finished"] is False and dump.meta["meta"]["task"] == "overflow_check"
    grad16 = dump.tensor("Tensor.float.0.backward.output.0")
    assert grad16.dtype == np.float16 and np.isinf(grad16).any()
    assert np.isfinite(dump.tensor("Tensor.float.0.backward.input.0")).all()  # it arrived finite, in float32

    # it really is the first: with overflow_nums=-1 the run goes on and lists every overflowing op in order
    cap = _fp16_step(tmp_path / "all", LOSS_SCALE, overflow_nums=-1)
    assert cap.overflows[0] == err.op and len(cap.overflows) > 10
    everything = nbprec.open(tmp_path / "all")
    assert everything.meta["finished"] is True
    assert set(everything.index["op"]) == set(cap.overflows)


def test_no_overflow_at_a_small_loss_scale(tmp_path: Path) -> None:
    cap = _fp16_step(tmp_path / "fine", 1.0)
    assert cap.overflows == []


@pytest.mark.parametrize(("value", "factor", "kind"), [(300.0, 300.0, "inf"), (32752.0, 2.0, "saturated")])
def test_forward_overflow_and_saturation(tmp_path: Path, value: float, factor: float, kind: str) -> None:
    from nbprec.capture import capture

    x = torch.full((4,), value, dtype=torch.float16)
    y = torch.full((4,), factor, dtype=torch.float16)
    with (
        pytest.raises(OverflowDetectedError, match=f"Tensor.mul.0.forward .*output.0: {kind}"),
        capture(None, tmp_path / "run", level="apis", overflow_check=True),
    ):
        y.sub(1.0)  # harmless: no overflow
        x * y
    dump = nbprec.open(tmp_path / "run")
    assert set(dump.index["op"]) == {"Tensor.mul.0.forward"}
    assert float(np.abs(dump.tensor("Tensor.mul.0.forward.output.0").astype(np.float32)).max()) >= 65504


@pytest.mark.slow
def test_overflow_check_stops_minilm_finetuning(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from nbprec.capture import capture, seed_all
    from nbprec.demo.minilm import build_minilm, finetune_step

    try:
        seed_all(0)
        model, inputs, labels = build_minilm("float16")
    except nbprec.MissingDependencyError as exc:
        pytest.skip(str(exc))
    expected, check = r"overflow detected in Tensor\.float\.0\.backward", {"overflow_check": True}
    with pytest.raises(OverflowDetectedError, match=expected) as info, capture(model, tmp_path / "m", **check):
        finetune_step(model, inputs, labels, loss_scale=LOSS_SCALE)
    dump = nbprec.open(tmp_path / "m")
    assert set(dump.index["op"]) == {info.value.op}
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())  # stopped in time
