"""Undo what a seeded run changes in the process: shared by the capture and remedy tests' conftests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def restore_torch_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """seed_all switches deterministic algorithms on and sets environment variables: undo that after a test."""
    import torch

    monkeypatch.setenv("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED", "0"))
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"))
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
