"""bench/commands.py refuses a baseline variable it cannot set, saying what it takes (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_a_baseline_variable_without_a_value_is_refused_with_the_form_it_takes():
    for bad in ("NBPREC_EARLY", "=off"):
        cmd = [sys.executable, str(BENCH / "commands.py"), "--baseline-env", bad, "--repeat", "5"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "--baseline-env takes NAME=VALUE" in proc.stderr and repr(bad) in proc.stderr
