"""Step, name and module-subtree selection."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbprec
from nbprec.capture.select import Selection, parse_steps
from nbprec.errors import CaptureError

from .conftest import capture_tiny

torch = pytest.importorskip("torch")


def test_parse_steps() -> None:
    assert parse_steps(None) is None
    assert parse_steps(3) == {3}
    assert parse_steps("0|5|10") == {0, 5, 10}
    assert parse_steps("0-4") == {0, 1, 2, 3, 4}
    assert parse_steps("1-2|7") == {1, 2, 7}
    assert parse_steps([2, 4]) == {2, 4}
    for bad in ("4-1", "a", "|", True):
        with pytest.raises(CaptureError):
            parse_steps(bad)


def test_selection_filters() -> None:
    sel = Selection.build(include=r"linear|gelu", exclude=r"backward", modules="layers.0")
    assert sel.op_selected("Functional.linear.0.forward")
    assert not sel.op_selected("Functional.linear.0.backward")
    assert not sel.op_selected("Torch.relu.0.forward")
    assert sel.module_selected("layers.0") and sel.module_selected("layers.0.attn.query")
    assert not sel.module_selected("layers.00") and not sel.module_selected("head1")
    with pytest.raises(CaptureError, match="regular expression"):
        Selection.build(include="(")


@pytest.mark.torch
def test_step_selection_and_per_step_call_indices(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny, train_step

    model, ids, labels = build_tiny("float32")
    with capture(model, tmp_path / "run", steps="0|2", backward=True) as cap:
        for _ in range(3):
            train_step(model, ids, labels)
            cap.step()
        assert cap.current_step == 3
    dump = nbprec.open(tmp_path / "run")
    assert dump.steps == [0, 2]
    names = [set(dump.select(step=s).names) for s in (0, 2)]
    assert names[0] == names[1]
    assert "Functional.linear.0.forward.output.0" in names[0]


@pytest.mark.torch
def test_explicit_step_argument(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny

    model, ids, _ = build_tiny("float32")
    with capture(model, tmp_path / "run", step=5, steps="5-6") as cap:
        model(ids)
        cap.step(9)
        model(ids)
    assert nbprec.open(tmp_path / "run").steps == [5]


@pytest.mark.torch
def test_name_filters_and_levels(tmp_path: Path) -> None:
    only_linear = nbprec.open(capture_tiny(tmp_path / "lin", include=r"^Functional\.linear\."))
    assert set(only_linear.index["op_type"]) == {"linear"}
    assert set(only_linear.index["direction"]) == {"forward", "backward"}
    modules = nbprec.open(capture_tiny(tmp_path / "mod", level="modules"))
    assert modules.index["op"].str.startswith("Module.").all()
    apis = nbprec.open(capture_tiny(tmp_path / "api", level="apis", backward=False))
    assert not apis.index["op"].str.startswith("Module.").any()
    assert set(apis.index["direction"]) == {"forward"}
    assert apis.hierarchy["Functional.gelu.0.forward"] == "Module.layers.0.EncoderLayer.forward.0"


@pytest.mark.torch
def test_module_subtree(tmp_path: Path) -> None:
    dump = nbprec.open(capture_tiny(tmp_path / "sub", modules=["layers.1"]))
    assert dump.index["module"].str.startswith("layers.1").all()
    assert "Module.layers.1.EncoderLayer.forward.0" in set(dump.index["op"])
    full = nbprec.open(capture_tiny(tmp_path / "full", level="apis"))
    # names do not depend on the selection: layer 1's GELU is the second GELU call either way
    assert "Functional.gelu.1.forward" in set(dump.index["op"])
    assert set(dump.index.query("op_type != 'EncoderLayer' and not op.str.startswith('Module')")["name"]) <= set(
        full.names
    )
