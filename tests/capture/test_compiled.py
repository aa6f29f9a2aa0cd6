"""The capture's per-record modules run compiled (setup.py: mypyc), and never older than their source."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
from pathlib import Path

import pytest


def _compiled_capture() -> tuple[str, ...]:
    """The module names of setup.py's COMPILED_CAPTURE, read from its source (running setup.py would build)."""
    tree = ast.parse(Path(__file__).resolve().parents[2].joinpath("setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMPILED_CAPTURE" for t in node.targets):
            names = next(n for n in ast.walk(node) if isinstance(n, ast.Tuple))
            return tuple(ast.literal_eval(names))
    raise AssertionError("setup.py has no COMPILED_CAPTURE")


MODULES = _compiled_capture()


def test_the_list_is_read() -> None:
    assert {"recorder", "lines", "statistics"} <= set(MODULES)


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
