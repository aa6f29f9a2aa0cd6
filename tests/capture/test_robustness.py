"""Capture robustness: errors inside the model, existing folders, bad paths, clean-up, seeding, the collector."""

from __future__ import annotations

import gc
import os
import random
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.errors import CaptureError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _no_hooks_left(model: torch.nn.Module) -> bool:
    return all(
        not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._forward_hooks_with_kwargs)
        for m in model.modules()
    )


def _no_mode_left() -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return len(_get_current_function_mode_stack()) == 0


class Boom(RuntimeError):
    pass


def test_exception_in_the_model_leaves_a_partial_dump_and_removes_everything(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, ids, _ = build_tiny("float32")

    def explode(module: torch.nn.Module, args: object, output: object) -> None:
        raise Boom("kernel failed")

    handle = model.layers[1].ff2.register_forward_hook(explode)
    with pytest.raises(Boom), capture(model, tmp_path / "run", mode="tensor"):
        model(ids)
    handle.remove()
    assert _no_hooks_left(model) and _no_mode_left()
    dump = nbprec.open(tmp_path / "run")
    assert dump.meta["finished"] is False
    assert "Boom: kernel failed" in dump.meta["error"]
    assert any("ended with an error" in p for p in dump.problems["problem"])
    ops = set(dump.ops()["op"])
    assert "Module.layers.0.EncoderLayer.forward.0" in ops and "Functional.linear.11.forward" in ops
    assert dump.tensor("Functional.linear.0.forward.output.0").shape == (4, 8, 32)
    # the model still works normally afterwards, with nothing recorded
    assert model(ids).shape == (4, 3)


def test_existing_run_folder_is_refused_unless_overwrite(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, ids, _ = build_tiny("float32")
    run = tmp_path / "run"
    run.mkdir()
    (run / "precious.txt").write_text("keep me")
    with pytest.raises(CaptureError, match="refusing to overwrite"), capture(model, run):
        model(ids)
    assert (run / "precious.txt").read_text() == "keep me"
    assert _no_hooks_left(model) and _no_mode_left()
    with capture(model, run, overwrite=True):
        model(ids)
    assert nbprec.open(run).meta["finished"]


def test_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, ids, _ = build_tiny("float32")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CaptureError, match="file"), capture(model, blocker / "run"):
        model(ids)
    assert _no_hooks_left(model) and _no_mode_left()


def test_hooks_and_mode_removed_after_a_backward_error(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, ids, labels = build_tiny("float32")

    def fail(grad: torch.Tensor) -> None:
        raise Boom("in backward")

    with pytest.raises(Boom), capture(model, tmp_path / "run"):
        logits = model(ids)
        logits.register_hook(fail)
        torch.nn.functional.cross_entropy(logits, labels).backward()
    assert _no_hooks_left(model) and _no_mode_left()
    assert nbprec.open(tmp_path / "run").meta["finished"] is False


def test_bad_arguments(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, _, _ = build_tiny("float32")
    with pytest.raises(CaptureError, match="level"):
        capture(model, tmp_path / "a", level="kernels")
    with pytest.raises(CaptureError, match="mode"):
        capture(model, tmp_path / "a", mode="md5")
    with pytest.raises(CaptureError, match="not found in the model"):
        capture(model, tmp_path / "a", modules=["layers.7"])
    with pytest.raises(CaptureError, match="overflow_nums"):
        capture(model, tmp_path / "a", overflow_check=True, overflow_nums=0)
    assert not (tmp_path / "a").exists()


def test_inplace_ops_record_inputs_before_the_change(tmp_path: Path) -> None:
    from nbprec.capture import capture

    x = torch.zeros(3)
    with capture(None, tmp_path / "run", level="apis", mode="tensor"):
        y = x.clone()
        y.add_(2.0)
        z = torch.relu(y)
    dump = nbprec.open(tmp_path / "run")
    np.testing.assert_array_equal(dump.tensor("Tensor.add_.0.forward.input.0"), np.zeros(3, np.float32))
    np.testing.assert_array_equal(dump.tensor("Tensor.add_.0.forward.output.0"), np.full(3, 2, np.float32))
    edges = set(dump.edges.itertuples(index=False, name=None))
    assert ("Tensor.clone.0.forward.output.0", "Tensor.add_.0.forward", "0") in edges
    assert ("Tensor.add_.0.forward.output.0", "Torch.relu.0.forward", "0") in edges
    assert z.sum() == 6


def test_seed_all_makes_runs_repeatable() -> None:
    from nbprec.capture import seed_all

    def draw() -> tuple[float, float, list[float]]:
        return random.random(), float(np.random.rand()), torch.rand(3).tolist()  # noqa: NPY002

    seed_all(7)
    first = draw()
    seed_all(7)
    assert draw() == first
    assert os.environ["PYTHONHASHSEED"] == "7"
    assert torch.are_deterministic_algorithms_enabled()
    seed_all(7, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_the_capture_keeps_old_objects_out_of_the_collector_and_restores_it(tmp_path: Path) -> None:
    """During a capture the objects alive at its start are frozen (gc.freeze); at its end they are not."""
    from nbprec.capture import capture

    seen: list[int] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(gc.get_freeze_count())
            return x * 2

    assert gc.get_freeze_count() == 0
    with capture(Probe(), tmp_path / "run"):
        Probe()(torch.ones(2))
    assert seen and seen[0] > 0 and gc.get_freeze_count() == 0
    gc.freeze()  # a program that froze objects itself keeps them frozen, and nothing else is frozen
    try:
        frozen = gc.get_freeze_count()
        with capture(Probe(), tmp_path / "run2"):
            Probe()(torch.ones(2))
        assert seen[-1] == frozen and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_the_capture_makes_collections_rarer_and_restores_the_thresholds(tmp_path: Path) -> None:
    """During a capture the young generation's threshold is raised; at its end the program's comes back."""
    from nbprec._gc import CAPTURE_YOUNG_THRESHOLD
    from nbprec.capture import capture

    seen: list[tuple[int, int, int]] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(gc.get_threshold())
            return x * 2

    before = gc.get_threshold()
    gc.set_threshold(900, 11, 12)
    try:
        with capture(Probe(), tmp_path / "run"):
            Probe()(torch.ones(2))
        assert seen == [(CAPTURE_YOUNG_THRESHOLD, 11, 12)]
        assert gc.get_threshold() == (900, 11, 12)
    finally:
        gc.set_threshold(*before)
