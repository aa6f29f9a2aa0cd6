"""``make install`` (what ``make demo`` and ``make test`` start with) leaves bytecode for nbprec's modules, so that a
command does not compile them from source each time it starts where ``PYTHONDONTWRITEBYTECODE`` is set (CI and the
benchmark machines set it: the editable install's modules were then compiled at every start, 0.33 against
0.23 s for ``nbprec compare`` on the 413 MB ``L1`` pair of ``bench/README.md``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "msprobe"

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
    reason="needs make and the virtualenv the Makefile makes (.venv), which this interpreter is not",
)


def _loaded_modules(arguments: list[str], cwd: Path) -> tuple[list[str], list[str]]:
    """The nbprec source files a fresh ``python -v -m nbprec ARGUMENTS`` compiled, and those it took from bytecode,
    with bytecode writing off."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NBPREC_DAEMON": "off"}
    done = subprocess.run(
        [sys.executable, "-v", "-m", "nbprec", *arguments], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    package = str(REPO / "nbprec")
    compiled, from_bytecode = [], []
    for line in done.stderr.splitlines():
        if line.startswith("# code object from ") and package in line:
            where = line.removeprefix("# code object from ").strip("'")
            (from_bytecode if where.endswith(".pyc") else compiled).append(where)
    return compiled, from_bytecode


def test_make_install_byte_compiles_what_a_command_loads(tmp_path):
    source = REPO / "nbprec" / "compare" / "early.py"  # (a module `nbprec compare` loads)
    bytecode = Path(importlib.util.cache_from_source(str(source)))
    bytecode.unlink(missing_ok=True)
    made = subprocess.run(["make", "-s", "install"], cwd=REPO, capture_output=True, text=True, check=False)
    assert made.returncode == 0, (
        f"`make install` failed: fix what it says, then run the test again\n{made.stdout}{made.stderr}"
    )
    assert bytecode.exists()
    arguments = ["compare", str(FIXTURES / "bf16_tensor_mix"), str(FIXTURES / "fp32_tensor_mix")]
    compiled, from_bytecode = _loaded_modules([*arguments, "-o", str(tmp_path / "out"), "--no-progress"], tmp_path)
    assert compiled == [], f"compiled from source at the command's start, though `make install` ran: {compiled}"
    assert str(bytecode) in from_bytecode
    assert len(from_bytecode) > 30  # (the command's modules: the reader, the comparison, the output files)
