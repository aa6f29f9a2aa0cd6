"""Shared captures of the tiny demo encoder (real PyTorch runs written to real folders)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from torch_state import restore_torch_state

torch = pytest.importorskip("torch")


def capture_tiny(path: Path, dtype: str = "float32", **options: object) -> Path:
    """Capture one training step of the seeded tiny encoder into ``path``."""
    from nbprec.capture import capture, seed_all
    from nbprec.demo.tiny import build_tiny, train_step

    seed_all(0, deterministic=False)  # leave torch's global default alone
    model, ids, labels = build_tiny(dtype)
    with capture(model, path, **options):
        train_step(model, ids, labels)
    return path


@pytest.fixture(scope="session")
def tiny_dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tensor-mode captures of the tiny encoder in float32 and float16."""
    root = tmp_path_factory.mktemp("tiny")
    return {dtype: capture_tiny(root / dtype, dtype, mode="tensor") for dtype in ("float32", "float16")}


@pytest.fixture(autouse=True)
def _restore_global_torch_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """seed_all switches deterministic algorithms on and sets environment variables: undo that per test."""
    yield from restore_torch_state(monkeypatch)
