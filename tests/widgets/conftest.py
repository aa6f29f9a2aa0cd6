"""Shared fixtures: a real comparison (msprobe bf16 vs fp32 dumps) and the torch demo comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"


@pytest.fixture(scope="session")
def msprobe_comparison():
    """bf16 vs fp32 msprobe dumps of a real PyTorch encoder (tensor payloads on both sides)."""
    import nbprec

    return nbprec.compare(FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix")


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    """The tiny encoder captured in float32 and in bfloat16 with the planted faulty GELU (needs torch)."""
    pytest.importorskip("torch")
    from nbprec.demo import tiny_runs

    runs = {r.name: r.path for r in tiny_runs(tmp_path_factory.mktemp("demo"))}
    return runs["tiny_bf16_faulty"], runs["tiny_fp32"]
