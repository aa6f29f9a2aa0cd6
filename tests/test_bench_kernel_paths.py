"""bench/kernel_paths.py: the KL path it puts each pair in is the kernel's, and it runs end to end on real msprobe
dumps (no timing is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from bench_support import BENCH, bench_module

from nbprec.compare.metrics import KERNEL

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "fixtures" / "msprobe" / "scenarios"


def test_the_bench_uses_the_kernels_own_thresholds():
    source = (ROOT / "nbprec" / "compare" / "_fused_kernel.h").read_text()
    defined = {name: float(value) for name, value in re.findall(r"#define (NEAR|FAR_SHARE) ([0-9.]+)", source)}
    bench = bench_module("kernel_paths")
    assert defined == {"NEAR": bench.NEAR, "FAR_SHARE": bench.FAR_SHARE}


def test_far_share_counts_the_terms_the_kernel_corrects():
    bench = bench_module("kernel_paths")
    # x: minimum 0, span 3; y: minimum 0, span 6. KL values: x [3 eps, 1, 2, 3], y [6 eps, 1, 2, 6] (eps: float32's).
    # |kx - ky| / (kx + ky): 1/3, 0, 0, 1/3: two of four beyond 1/32.
    x = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    y = np.array([0.0, 1.0, 2.0, 6.0], np.float32)
    assert bench.far_share(x, y) == 0.5
    assert bench.far_share(x, x) == 0.0


def test_rounding_noise_takes_the_series_and_a_diverged_pair_the_logarithm():
    bench = bench_module("kernel_paths")
    rng = np.random.default_rng(3)
    y = rng.standard_normal(100_000).astype(np.float32)
    rounded = y.astype(ml_dtypes.bfloat16)  # a bfloat16 run of the same values
    diverged = (y + rng.standard_normal(y.size)).astype(ml_dtypes.bfloat16)  # a gradient that went its own way
    swap = np.arange(y.size) % 10 == 0
    swap[[y.argmin(), y.argmax()]] = False  # the extremes, and so the KL offsets, stay
    partly = rounded.copy()
    partly[swap] = rounded[swap][::-1]  # a tenth of the values exchanged among themselves: far, in every block
    assert bench.path_class(bench.far_share(rounded, y)) == "near"
    assert bench.path_class(bench.far_share(diverged, y)) == "far"
    assert bench.path_class(bench.far_share(partly, y)) == "far"


@pytest.mark.skipif(not KERNEL.startswith("c ("), reason="needs the compiled metric kernel (make install)")
def test_the_bench_runs_on_a_faulty_run_against_its_benchmark():
    done = subprocess.run(
        [sys.executable, str(BENCH / "kernel_paths.py"), str(SCENARIOS / "fault_tensor"),
         str(SCENARIOS / "fp32_tensor"), "--top", "4"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    timed = int(re.search(r"^(\d+) finite float pairs timed", out, re.M).group(1))
    counts = {name: int(n) for name, n in re.findall(r"^  (near|far) +(\d+) pairs", out, re.M)}
    assert set(counts) == {"near", "far"} and sum(counts.values()) == timed > 0, out
    # the planted fault sends the tensors after it far from the benchmark: both ways through KL are taken
    assert counts["far"] > 0 and counts["near"] > 0, out
    assert re.search(r"^  far / near, ns per element pair: [0-9.]+$", out, re.M), out
    listed = out.split("pairs (name, element pairs, share of far KL terms, ns per element pair):\n")[1].splitlines()
    assert len(listed) == 4, out


def test_pairs_come_in_batches_of_bounded_payload():
    bench = bench_module("kernel_paths")
    args = (str(SCENARIOS / "fault_tensor"), str(SCENARIOS / "fp32_tensor"))
    whole = list(bench.pair_batches(*args, 1 << 40, bench.Skipped()))
    assert len(whole) == 1  # everything fits: one batch
    limit = 20_000  # bytes of payload: a few pairs a batch, and larger pairs alone
    batches = list(bench.pair_batches(*args, limit, bench.Skipped()))
    assert len(batches) > 10
    for batch in batches:
        held = sum(p.x.nbytes + p.y.nbytes for p in batch)
        assert held <= limit or len(batch) == 1, (len(batch), held)
    assert [p.name for b in batches for p in b] == [p.name for p in whole[0]]  # none lost, in order
    assert all(p.far_share == bench.far_share(p.x, p.y) for p in whole[0])  # the share of the pair's own extremes
