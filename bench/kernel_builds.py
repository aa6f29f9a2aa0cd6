"""Time the builds of the compiled metric kernel (``nbprec.compare._fused``) against each other, same run.

The kernel is compiled for AVX-512, AVX2+FMA and the baseline, and the fastest build the CPU runs is picked at
import (docs/compare.md). This script times every build the CPU runs, interleaved (each round runs every build
once, in a rotating order), medians of ``--runs``:

- the kernel alone, ns per element pair, on in-memory bfloat16/float32 and float32/float32 pairs of
  ``--elements`` elements (nearly equal tensors, as a precision comparison sees them);
- with ``--dumps T B``: ``nbprec.compare(T, B)`` in this process, the dumps opened again by every call
  (forked workers inherit the build in use).

Prints each build's figure and its ratio to the build picked at import.

Usage::

    .venv/bin/python bench/kernel_builds.py [--elements 8000000] [--runs 9] [--dumps TARGET BENCH]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import interleave, machine, median, runs_text

import nbprec
from nbprec.compare._kernels import FUSED
from nbprec.compare.metrics import tensor_metrics


def kernel_pairs(n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Nearly equal pairs: a float32 benchmark and a target 0.4% off, as bfloat16 and as float32."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    bench = rng.standard_normal(n, dtype=np.float32)
    target = (bench * (1 + rng.standard_normal(n, dtype=np.float32) * 4e-3)).astype(np.float32)
    return {"bfloat16/float32": (target.astype(ml_dtypes.bfloat16), bench), "float32/float32": (target, bench)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=8_000_000, help="elements of each in-memory pair")
    parser.add_argument("--runs", type=int, default=9, help="interleaved rounds (at least 5)")
    parser.add_argument("--dumps", nargs=2, metavar=("TARGET", "BENCH"), help="also time nbprec.compare on a pair")
    args = parser.parse_args()
    runs = max(5, args.runs)
    if FUSED is None:
        raise SystemExit("nbprec.compare._fused is not built: nothing to time (make install)")
    builds = FUSED.available_isas()
    chosen = FUSED.ISA
    print(f"machine: {machine()}; builds this CPU runs: {', '.join(builds)} (picked: {chosen})")
    results: dict[str, dict[str, float]] = {}
    try:
        for label, (x, y) in kernel_pairs(args.elements).items():
            lo_hi = (float(x.min()), float(x.max()), float(y.min()), float(y.max()))

            def once(build: str, x: np.ndarray = x, y: np.ndarray = y, lo_hi: tuple = lo_hi) -> float:
                FUSED.use_isa(build)
                start = time.perf_counter()
                tensor_metrics(x, y, kernel="c", extremes=lo_hi)
                return (time.perf_counter() - start) / x.size * 1e9

            times = interleave({b: (lambda b=b: once(b)) for b in builds}, runs, f"kernel {label} ns/pair ")
            results[f"kernel, {label} (ns per element pair)"] = {b: median(v) for b, v in times.items()}
            for b, v in times.items():
                print(f"    {b}: {runs_text(v)}")
        if args.dumps:
            target, bench = args.dumps
            nbprec.compare(target, bench)  # warm: page cache, lazy imports

            def call(build: str) -> float:
                FUSED.use_isa(build)
                start = time.perf_counter()
                nbprec.compare(target, bench)
                return time.perf_counter() - start

            times = interleave({b: (lambda b=b: call(b)) for b in builds}, runs, "nbprec.compare s ")
            results["nbprec.compare (s)"] = {b: median(v) for b, v in times.items()}
    finally:
        FUSED.use_isa(chosen)
    print(f"\nmedians of {runs} interleaved rounds; ratio: the build / the picked build ({chosen})")
    for what, by_build in results.items():
        base = by_build[chosen]
        cells = ", ".join(f"{b} {v:.4g} ({v / base:.2f}x)" for b, v in by_build.items())
        print(f"  {what}: {cells}")


if __name__ == "__main__":
    main()
