"""``nbprec demo``: captures the tiny demo runs and describes them."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbprec
from nbprec.cli import main

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_demo_command_writes_the_tiny_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    names = ("tiny_fp32", "tiny_bf16", "tiny_fp16", "tiny_bf16_faulty")
    for name in names:
        assert f"wrote {out / name}" in text
        assert nbprec.open(out / name).meta["finished"]
    assert "format      nbprec" in text
    # the main job: each target against the float32 run; the planted fault is named and confirmed by isolation
    assert "tiny_bf16_faulty" in text and "first failing op: Functional.gelu.1.forward" in text
    assert "Functional.gelu.1.forward re-run in float64 on its own inputs: kernel error" in text
    assert text.count("first failing op: none") == 2  # plain bfloat16 and float16: no false alarm
    faulty, clean = nbprec.open(out / "tiny_bf16_faulty"), nbprec.open(out / "tiny_bf16")
    assert list(faulty.names) == list(clean.names)
    gelu = "Functional.gelu.1.forward.output.0"  # layer 1's GELU is the faulty kernel
    assert (faulty.tensor(gelu).astype("float32") != clean.tensor(gelu).astype("float32")).any()
    same = "Functional.gelu.0.forward.output.0"
    assert (faulty.tensor(same).astype("float32") == clean.tensor(same).astype("float32")).all()
    # running it again replaces the earlier demo runs, but never a folder that is not a dump
    assert main(["demo", "--out", str(out)]) == 0
    (out / "tiny_fp16").rename(out / "keep")
    (out / "tiny_fp16").mkdir()
    (out / "tiny_fp16" / "notes.txt").write_text("mine")
    assert main(["demo", "--out", str(out)]) == 1
    assert (out / "tiny_fp16" / "notes.txt").read_text() == "mine"
