"""bench/notebook.py runs end to end on a small pair: ``nbprec.compare`` timed in a real Jupyter kernel (where
other threads run, so the pairs are measured on threads) and in a plain interpreter, against a baseline tree (no
timing is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "msprobe"


def test_notebook_bench_times_the_call_in_a_kernel_and_a_plain_interpreter():
    target, bench = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
    cmd = [sys.executable, str(ROOT / "bench" / "notebook.py"), "--dumps", str(target), str(bench), "--runs", "5"]
    cmd += ["--baseline", str(ROOT)]  # (this tree against itself: both sides run and are compared)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    threads = dict(re.findall(r"  (kernel, this tree|plain interpreter, this tree): (\d+) threads", out))
    assert int(threads["kernel, this tree"]) > 1 and threads["plain interpreter, this tree"] == "1", out
    sides = ("kernel, this tree", "plain interpreter, this tree", "kernel, baseline", "plain interpreter, baseline")
    for side in sides:
        assert re.search(rf"  {side} +[0-9.]+ s  \(runs( [0-9.]+){{5}}\)", out), (side, out)
    assert re.search(r"kernel / plain interpreter, this tree: [0-9.]+ \(paired\)", out), out
    assert re.search(r"kernel: this tree / baseline [0-9.]+ \(paired\)", out), out
