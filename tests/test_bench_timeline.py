"""bench/timeline.py times the comparison command's phases in its own process, from real runs on a real pair
(no figure is asserted: only that every phase is seen, in the order the command goes through them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "msprobe"


def test_the_timeline_names_each_phase_of_the_command_in_order(tmp_path):
    target, bench = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
    cmd = [sys.executable, str(ROOT / "bench" / "timeline.py"), str(target), str(bench), "--runs", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    marks = dict(re.findall(r"^  (\S.*?)\s+(\d+\.\d)\s+\(", proc.stdout, re.MULTILINE))
    phases = [
        "interpreter ready",
        "fork 1",  # the early worker, before numpy
        "numpy import starts",
        "numpy imported",
        "target dump opened",
        "benchmark dump opened",
        "first output file",
        "exit",
    ]
    assert set(phases) <= set(marks), proc.stdout
    times = [float(marks[name]) for name in phases]
    assert times == sorted(times), proc.stdout
    whole = float(re.search(r"the parent's clock: (\d+\.\d) ms", proc.stdout).group(1))
    assert 0 < times[-1] <= whole, proc.stdout
    assert proc.stdout.count("\nrun ") == 2


def test_a_command_that_fails_is_reported_with_its_error(tmp_path):
    missing = tmp_path / "no-such-dump"
    cmd = [sys.executable, str(ROOT / "bench" / "timeline.py"), str(missing), str(missing), "--runs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "nbprec compare failed" in proc.stderr and "no-such-dump" in proc.stderr
