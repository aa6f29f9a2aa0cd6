"""Time :func:`nbprec.compare.metrics.tensor_metrics` against a plain read pass over the same data.

Builds ``--gb`` GB of float32 target/benchmark pairs in memory (a mix of small and large tensors, the
target being the benchmark rounded through bfloat16), then measures in the same run:

- the in-memory read baseline: one ``np.add.reduce`` over every array of both sides (touches every byte
  once at memory speed);
- ``tensor_metrics`` over every pair;
- with ``--files``: the pairs saved as ``.npy`` files, timed as ``np.load`` of every file (a plain read
  pass, as the engine does) against ``np.load`` + ``tensor_metrics`` (the engine's work per pair);
- peak extra memory (tracemalloc) of ``tensor_metrics`` on the largest tensor.

Prints throughput in MB/s (of input data, both sides) and the ratio metrics time / read time.

Usage::

    .venv/bin/python bench/metrics_speed.py [--gb 1.0] [--chunk 65536] [--repeat 3] [--files]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc

import ml_dtypes
import numpy as np

from nbprec.compare.metrics import DEFAULT_CHUNK_SIZE, tensor_metrics


def make_pairs(total_bytes: float, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """float32 (target, bench) pairs totalling about ``total_bytes`` over both sides."""
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
        target = bench.astype(ml_dtypes.bfloat16).astype(np.float32)
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
    args = parser.parse_args()

    pairs = make_pairs(args.gb * 1e9)
    nbytes = sum(t.nbytes + b.nbytes for t, b in pairs)
    mb = nbytes / 1e6
    print(f"{len(pairs)} pairs, {mb:.0f} MB of float32 (both sides), largest {pairs[0][0].size:,} elements")

    def read_pass() -> None:
        for target, bench in pairs:
            np.add.reduce(target)
            np.add.reduce(bench)

    def metrics_pass() -> None:
        for target, bench in pairs:
            tensor_metrics(target, bench, chunk_size=args.chunk)

    t_read = time_best(read_pass, args.repeat)
    t_metrics = time_best(metrics_pass, args.repeat)
    print(f"read baseline (np.add.reduce): {t_read:8.3f} s  {mb / t_read:9.0f} MB/s")
    print(f"tensor_metrics (chunk {args.chunk}): {t_metrics:8.3f} s  {mb / t_metrics:9.0f} MB/s")
    print(f"ratio metrics / read: {t_metrics / t_read:.2f}")

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
