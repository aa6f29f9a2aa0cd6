"""``nbprec demo`` ends with the remedy of its faulty run: bisected, verified with captures, and written out."""

from __future__ import annotations

import json

import pytest

from nbprec.cli import main

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_the_demo_prints_the_verified_remedy_and_writes_the_fix(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    remedy = text[text.index("verifying the remedy of tiny_bf16_faulty (bfloat16") :]
    assert "keep Functional.gelu.1.forward in float32 (1-minimal;" in remedy  # layer 1's GELU, the planted fault
    assert "first failing op Functional.gelu.1.forward" in remedy and "after:  0 failing ops of 168" in remedy
    assert "Verified: with the remedy (keep in float32: op Functional.gelu.1.forward) the bfloat16 run passes" in remedy
    fix = out / "remedy" / "fix"
    assert json.loads((fix / "ops_info.json").read_text()) == {"black-list": {"to-add": ["Gelu"]}}
    assert 'KeepFloat32(model, ops=["Functional.gelu.1.forward"]' in (fix / "remedy.txt").read_text()
    compile((fix / "keep_float32.py").read_text(), "keep_float32.py", "exec")
