"""Run a Python snippet in a fresh interpreter (no module of this test process loaded there)."""

from __future__ import annotations

import subprocess
import sys


def run_python(script: str, timeout: float = 120) -> str:
    """``script`` run by this interpreter's executable in a process of its own; its stdout, stripped. A failure
    (non-zero exit) fails the calling test with the snippet's stderr."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
