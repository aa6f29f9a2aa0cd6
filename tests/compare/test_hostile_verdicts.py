"""Broken inputs must not give a wrong verdict or a silent drop (issue 16): the comparison says what it could not
use, and NaN/inf, different models and lying statistics are judged for what they are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.cli import main
from nbprec.formats.native import NativeDumpWriter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
T0 = 1675157077176648


def _tf_dump(folder: Path, outputs: dict[str, np.ndarray]) -> Path:
    folder.mkdir()
    for k, (name, value) in enumerate(outputs.items()):
        np.save(folder / f"{name}.0.{T0 + 10 * k}.npy", value)
    return folder


def _mlp(width: int, *, nan_at: str = "") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w1 = rng.standard_normal((8, width)).astype(np.float32)
    w2 = rng.standard_normal((width, 3)).astype(np.float32)
    h = x @ w1
    out = {"dense_MatMul": h, "dense_Relu": np.maximum(h, 0), "logits_MatMul": np.maximum(h, 0) @ w2}
    if nan_at:
        out[nan_at] = np.full_like(out[nan_at], np.nan)
    return out


def test_target_full_of_nan_in_a_tensorflow_dump_fails(tmp_path: Path) -> None:
    """No statistics in the dump: the payload's own NaN count makes the row fail, with its reason."""
    target = _tf_dump(tmp_path / "t", _mlp(16, nan_at="dense_Relu"))
    bench = _tf_dump(tmp_path / "b", _mlp(16))
    comp = nbprec.compare(target, bench, progress=None)
    row = comp.table.set_index("target_name").loc["dense_Relu.0"]
    assert row["status"] == "fail" and row["target_nonfinite"] == 64
    assert row["reason"].startswith("target has non-finite values") and "target has 64 NaN" in row["reason"]
    assert comp.first_failing_op()["op"] == "dense_Relu" and comp.summary()["failing_ops"] >= 1


def _native(folder: Path, width: int) -> Path:
    """An nbprec dump of a 2-layer MLP of hidden ``width``: same op names whatever the width."""
    writer = NativeDumpWriter(folder, mode="tensor")
    for order, (name, value) in enumerate(_mlp(width).items()):
        op = f"Functional.{name}.0.forward"
        writer.write_tensor(
            {"name": f"{op}.output.0", "step": 0, "rank": 0, "order": order, "op": op, "op_type": name,
             "api": f"Functional.{name}", "call": 0, "direction": "forward", "role": "output", "slot": "0"},
            value,
        )  # fmt: skip
    writer.close()
    return folder


def test_two_different_models_are_not_compared_op_by_op(tmp_path: Path) -> None:
    comp = nbprec.compare(_native(tmp_path / "a", 16), _native(tmp_path / "b", 24), progress=None)
    verdict = comp.verdict()
    assert verdict.kind == "not comparable" and "two different models" in verdict.headline
    assert [f.code for f in verdict.findings if f.blocking] == ["different_models"]


def test_lying_statistics_do_not_fail_clean_payloads(tmp_path: Path) -> None:
    """dump.json edited to say NaN/Infinity while the payloads are those of the benchmark."""
    target = tmp_path / "t"
    shutil.copytree(FIXTURES / "fp32_tensor_mix", target)
    path = target / "step0" / "rank0" / "dump.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    edited = 0
    for entry in doc["data"].values():
        for arg in entry.get("output", []) or []:
            if isinstance(arg, dict) and arg.get("type") == "torch.Tensor" and str(arg.get("dtype")).endswith("32"):
                arg["Max"], arg["Min"] = float("nan"), float("inf")
                edited += 1
    path.write_text(json.dumps(doc), encoding="utf-8")  # bare NaN / Infinity, as msprobe writes them
    comp = nbprec.compare(target, FIXTURES / "fp32_tensor_mix", progress=None)
    lied = comp.table[comp.table["reason"].str.contains("records non-finite statistics but its payload is finite")]
    assert len(lied) == edited > 50
    assert (lied["status"] == "pass").all() and comp.first_failing_op() is None


def test_unreadable_files_are_said_in_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _tf_dump(tmp_path / "b", _mlp(16))
    target = _tf_dump(tmp_path / "t", _mlp(16))
    broken = next(target.glob("dense_Relu.0.*.npy"))
    broken.write_bytes(broken.read_bytes()[:90])  # a truncated header
    comp = nbprec.compare(target, bench, progress=None)
    codes = [f.code for f in comp.verdict().findings]
    assert "unreadable" in codes and comp.meta["problems"]["target"]["count"] == 1
    assert broken.name in comp.verdict().text
    assert main(["compare", str(target), str(bench), "--no-progress"]) == 0
    assert "The target dump has 1 problem(s)" in capsys.readouterr().out


def test_an_input_without_counterpart_makes_the_blame_unknown(tmp_path: Path) -> None:
    """The benchmark file of an op's input is gone: the op after it may not be blamed for introducing it."""
    from nbprec.demo.npu import make_npu_demo

    case = make_npu_demo(tmp_path / "case")
    next(case.tf.glob("fc1_Gelu.0.*.npy")).unlink()
    comp = nbprec.compare(case.npu, case.tf, graph=case.graph, progress=None)
    first = comp.first_failing_op()
    assert first["op"] == "fc2/MatMul" and first["origin"] == "unknown"
    assert comp.first_introduced_op() is None
    assert "whether it introduced the error" in comp.verdict().headline
