"""bench/kernel_builds.py and bench/writing.py run end to end on small inputs and print their figures (no timing
is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "msprobe"


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_kernel_builds_times_every_build_the_cpu_runs():
    out = _run(str(BENCH / "kernel_builds.py"), "--elements", "200000", "--runs", "5", "--dumps",
               str(FIXTURES / "bf16_tensor_mix"), str(FIXTURES / "fp32_tensor_mix"))  # fmt: skip
    builds = re.search(r"builds this CPU runs: ([^(]+) \(picked: ([^)]+)\)", out)
    assert builds, out
    names = [b.strip() for b in builds[1].split(",")]
    assert "baseline" in names and builds[2] == names[0]
    summary = out.split("medians of 5 interleaved rounds")[1].splitlines()
    for what in ("kernel, bfloat16/float32", "kernel, float32/float32", "nbprec.compare"):
        line = next(line for line in summary if line.strip().startswith(what))
        assert all(re.search(rf"{re.escape(b)} [0-9.e+-]+ \([0-9.]+x\)", line) for b in names), line
        assert f"{names[0]} " in line and "(1.00x)" in line


def test_writing_times_the_formatter_and_each_file_both_ways():
    out = _run(str(BENCH / "writing.py"), "--values", "20000", "--runs", "5", "--dumps",
               str(FIXTURES / "bf16_tensor_mix"), str(FIXTURES / "fp32_tensor_mix"))  # fmt: skip
    assert re.search(r"20000 values: float_texts \d+ ns, repr \d+ ns a value \([0-9.]+x\)", out), out
    assert re.search(r"comparison of \d+ tensors", out), out
    for what in ("save (comparison.json, tensors.csv)", "ops.csv", "compare_msaccucmp.csv", "compare_msprobe.csv"):
        pattern = rf"{re.escape(what)}: C [0-9.]+ s, numbers made texts first [0-9.]+ s \([0-9.]+x\), repr [0-9.]+ s"
        assert re.search(pattern, out), (what, out)
