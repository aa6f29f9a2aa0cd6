"""Time :func:`nbprec.compare.metrics.tensor_metrics` against a plain read pass over the same data.

Builds ``--gb`` GB of float32 target/benchmark pairs in memory (a mix of small and large tensors, the
target being the benchmark rounded through bfloat16), then measures in the same run:

- the in-memory read baseline: one ``np.add.reduce`` over every array of both sides (touches every byte
  once at memory speed);
- ``tensor_metrics`` over every pair, with the numpy kernel and with the compiled one (without and with the
  tensors' extremes given, as the engine gives them from the dumps' statistics), in ns per element pair;
- with ``--files``: the pairs saved as ``.npy`` files, timed as ``np.load`` of every file (a plain read
  pass, as the engine does) against ``np.load`` + ``tensor_metrics`` (the engine's work per pair);
- peak extra memory (tracemalloc) of ``tensor_metrics`` on the largest tensor.

Prints throughput in MB/s (of input data, both sides) and the ratio metrics time / read time.

Usage::

    .venv/bin/python bench/metrics_speed.py [--gb 1.0] [--chunk 65536] [--repeat 3] [--files]
        [--target-dtype float32|bfloat16|float16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc

import ml_dtypes
import numpy as np

from nbprec.compare.metrics import DEFAULT_CHUNK_SIZE, KERNEL, tensor_metrics
from nbprec.dtypes import NUMPY_DTYPES


def make_pairs(total_bytes: float, seed: int = 0, target_dtype: str = "float32") -> list[tuple[np.ndarray, np.ndarray]]:
    """(target, float32 bench) pairs totalling about ``total_bytes`` over both sides (counted as float32); the
    target is the bench rounded through bfloat16, stored as ``target_dtype``."""
    rng = np.random.default_rng(seed)
    per_side = int(total_bytes / 2 / 4)  # float32 elements per side
    sizes = [per_side // 4]  # one large tensor (a quarter of the data)
    remaining = per_side - sizes[0]
    while remaining > 0:  # then tensors of 1 k .. 4 M elements
        size = min(remaining, int(2 ** rng.uniform(10, 22)))
        sizes.append(size)
        remaining -= size
    pairs = []
    for size in sizes:
        bench = rng.standard_normal(size, dtype=np.float32)
        target = bench.astype(ml_dtypes.bfloat16).astype(NUMPY_DTYPES[target_dtype])
        pairs.append((target, bench))
    return pairs


def time_best(func, repeat: int) -> float:
    """Best wall time of ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="input size over both sides, GB")
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK_SIZE, help="tensor_metrics chunk_size")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", action="store_true", help="also time reading the pairs from .npy files")
    parser.add_argument("--target-dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()

    pairs = make_pairs(args.gb * 1e9, target_dtype=args.target_dtype)
    nbytes = sum(t.nbytes + b.nbytes for t, b in pairs)
    mb = nbytes / 1e6
    elements = sum(b.size for _, b in pairs)
    print(
        f"{len(pairs)} pairs, {mb:.0f} MB ({args.target_dtype} target, float32 bench), largest "
        f"{pairs[0][0].size:,} elements; kernel {KERNEL}"
    )

    def read_pass() -> None:
        for target, bench in pairs:
            np.add.reduce(target)
            np.add.reduce(bench)

    extremes = [(float(t.min()), float(t.max()), float(b.min()), float(b.max())) for t, b in pairs]

    def metrics_pass(kernel: str = "auto", given: bool = False) -> None:
        for (target, bench), ext in zip(pairs, extremes, strict=True):
            tensor_metrics(target, bench, chunk_size=args.chunk, kernel=kernel, extremes=ext if given else None)

    t_read = time_best(read_pass, args.repeat)
    print(f"read baseline (np.add.reduce): {t_read:8.3f} s  {mb / t_read:9.0f} MB/s")
    runs = [("numpy kernel", "numpy", False)]
    if KERNEL != "numpy":
        runs += [("compiled kernel", "c", False), ("compiled kernel, extremes given", "c", True)]
    for label, kernel, given in runs:
        t = time_best(lambda kernel=kernel, given=given: metrics_pass(kernel, given), args.repeat)
        print(
            f"tensor_metrics, {label:32s} {t:8.3f} s  {mb / t:9.0f} MB/s  {t / elements * 1e9:6.2f} ns per pair"
            f"  (metrics / read {t / t_read:.2f})"
        )

    if args.files:
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, (target, bench) in enumerate(pairs):
                paths.append((f"{tmp}/t{i}.npy", f"{tmp}/b{i}.npy"))
                np.save(paths[-1][0], target)
                np.save(paths[-1][1], bench)

            def file_read() -> None:
                for t_path, b_path in paths:
                    np.add.reduce(np.load(t_path))
                    np.add.reduce(np.load(b_path))

            def file_metrics() -> None:
                for t_path, b_path in paths:
                    tensor_metrics(np.load(t_path), np.load(b_path), chunk_size=args.chunk)

            t_file = time_best(file_read, args.repeat)
            t_file_metrics = time_best(file_metrics, args.repeat)
        print(f"read from .npy files (page cache): {t_file:8.3f} s  {mb / t_file:9.0f} MB/s")
        print(f"read + tensor_metrics:             {t_file_metrics:8.3f} s  {mb / t_file_metrics:9.0f} MB/s")
        print(f"ratio (read + metrics) / read: {t_file_metrics / t_file:.2f}")

    target, bench = pairs[0]
    tracemalloc.start()
    tensor_metrics(target, bench, chunk_size=args.chunk)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"peak extra memory on the largest pair ({(target.nbytes + bench.nbytes) / 1e6:.0f} MB): {peak / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
