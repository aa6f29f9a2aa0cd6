"""The capture's per-record modules run compiled (setup.py: mypyc), and never older than their source."""

from __future__ import annotations

import importlib
import importlib.machinery
import os

import pytest

#: setup.py's COMPILED_CAPTURE
MODULES = (
    "backward",
    "gradients",
    "lines",
    "memo",
    "naming",
    "recorder",
    "signature",
    "stacks",
    "statistics",
    "tensors",
)


@pytest.mark.parametrize("name", MODULES)
def test_the_capture_module_is_compiled_and_current(name: str) -> None:
    # `make install` compiles them (setup.py); a silent fall-back to the .py files would make every capture slower
    module = importlib.import_module(f"nbprec.capture.{name}")
    path = module.__file__ or ""
    assert path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"nbprec.capture.{name} runs from {path}: reinstall with mypy and a C compiler (make install)"
    )
    source = os.path.join(os.path.dirname(path), f"{name}.py")
    assert os.path.getmtime(path) >= os.path.getmtime(source), (
        f"{path} is older than {source}: the edit does not run until reinstalled (make install)"
    )
