"""A comparison on a Dask cluster: the speed-up of 2 workers over 1, and the overhead over the local engine.

Data: by default a synthetic pair in nbprec's format written into a temporary folder (``--size-mb`` over both
dumps, tensors of 4 k to 2 M elements, a float32 benchmark against a bfloat16 target, ``--ranks`` ranks of one
step), or any pair given with ``--target``/``--bench`` (and ``--graph`` for an NPU dump, as
``/tmp/nbprec-bench-npu-full-500mb-seed0``: ``--npu DIR`` fills in the three).

Configurations, all on the same pair:

- ``local``: ``nbprec.compare(t, b)`` as a user calls it (default workers: the usable cores, at most 2;
  forked processes or threads, as ``parallel="auto"`` chooses);
- ``local-1``: ``workers=1`` (this thread measures everything);
- ``dask-1``: ``client=`` a ``LocalCluster(n_workers=1, threads_per_worker=1, processes=True)``;
- ``dask-2``: ``client=`` a ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``.

How it times: the wall time (``time.perf_counter``) of one ``nbprec.compare(...)`` call in this process,
the whole call (opening both dumps, matching, measuring, building and judging the table). Both clusters are
started and connected before any timing (a session pays that once, about a second); every configuration runs
once untimed first (page cache, imports in the workers), then ``--runs`` rounds each run every configuration
once, in turn (interleaved, so that a noisy neighbour hits all alike), and the medians are printed with every
run. The results of all configurations are checked equal (every column, NaN-aware).

Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which makes glibc map every buffer of
128 KiB or more afresh (a payload read into a new buffer then pays its page faults every time);
``--tuned-malloc`` starts them with the thresholds docs/compare.md suggests instead. The environment used is
printed.

Prints the speed-up ``dask-1 / dask-2`` (at most the number of free cores; the client's own work, matching
and the table, is the same in both), and the overheads ``dask-2 / local`` and ``dask-1 / local-1`` (the cost of
shipping index rows and results through the scheduler, and of tasks instead of pipes).

Usage::

    .venv/bin/python bench/dask_scale.py [--size-mb 600] [--tensors 1500] [--ranks 2] [--runs 5]
    .venv/bin/python bench/dask_scale.py --npu /tmp/nbprec-bench-npu-full-500mb-seed0
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd


def write_pair(root: Path, size_mb: float, n_tensors: int, ranks: int, seed: int = 0) -> tuple[Path, Path]:
    """A bfloat16 target and a float32 benchmark in nbprec's format, ``ranks`` ranks of one step."""
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(seed)
    per_rank = max(1, n_tensors // ranks)
    sizes = np.exp2(rng.uniform(12, 21, per_rank)).astype(np.int64)
    sizes = np.maximum(64, (sizes * (size_mb * 1e6 / 6 / ranks / sizes.sum()))).astype(np.int64)  # 6 B an element
    base = rng.standard_normal(int(sizes.max()) * 2, dtype=np.float32)
    with (
        NativeDumpWriter(root / "target", run="target") as t_writer,
        NativeDumpWriter(root / "bench", run="bench") as b_writer,
    ):
        for rank in range(ranks):
            for i, size in enumerate(sizes.tolist()):
                start = int(rng.integers(0, base.size - size + 1))
                bench = base[start : start + size]
                target = bench.astype(ml_dtypes.bfloat16)
                if i % 97 == 13:  # a few planted faults
                    target = (bench * 1.25).astype(ml_dtypes.bfloat16)
                layer, slot = divmod(i, 3)
                role = ("input", "parameter", "output")[slot]
                record = {"name": f"layer{i}.{role}.0", "step": 0, "rank": rank, "order": i, "op": f"Op{layer}"}
                record.update(op_type="Linear", api="linear", call=layer, direction="forward", role=role, slot="0")
                b_writer.write_tensor(record, bench)
                t_writer.write_tensor(record, target)
    return root / "target", root / "bench"


def describe(target: Path | str, bench: Path | str, options: dict) -> float:
    """Print what the pair holds; return its payload MB (both sides)."""
    import nbprec

    t, b = nbprec.open(target, **options), nbprec.open(bench)
    print(f"target {target}: {len(t)} tensors, {t.nbytes() / 1e6:.0f} MB, steps {t.steps}, ranks {t.ranks}")
    print(f"bench  {bench}: {len(b)} tensors, {b.nbytes() / 1e6:.0f} MB")
    return (t.nbytes() + b.nbytes()) / 1e6


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    try:
        pd.testing.assert_frame_equal(a, b)
    except AssertionError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=600, help="payload MB over both synthetic dumps")
    parser.add_argument("--tensors", type=int, default=1500, help="tensors of each synthetic dump")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the synthetic dumps")
    parser.add_argument("--target", help="a target dump to use instead of the synthetic one")
    parser.add_argument("--bench", help="its benchmark dump")
    parser.add_argument("--graph", help="the target's GE graph (an NPU dump)")
    parser.add_argument("--npu", metavar="DIR", help="the NPU benchmark folder (npu/, tf/, ge_proto_*_Build.txt)")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument(
        "--tuned-malloc",
        action="store_true",
        help="Dask workers with MALLOC_MMAP_THRESHOLD_=4 MiB, MALLOC_TRIM_THRESHOLD_=8 MiB (docs/compare.md)",
    )
    args = parser.parse_args(argv)

    import dask
    from distributed import Client, LocalCluster

    import nbprec
    from nbprec.compare.metrics import KERNEL

    if args.npu:
        folder = Path(args.npu)
        args.target, args.bench = str(folder / "npu"), str(folder / "tf")
        args.graph = str(next(folder.glob("ge_proto_*_Build.txt")))
    with tempfile.TemporaryDirectory(prefix="nbprec-dask-scale-") as tmp:
        if args.target:
            target, bench = args.target, args.bench
        else:
            print(f"writing a synthetic pair ({args.size_mb:.0f} MB, {args.tensors} tensors, {args.ranks} ranks) ...")
            target, bench = write_pair(Path(tmp), args.size_mb, args.tensors, args.ranks)
        options = {"graph": args.graph} if args.graph else {}
        megabytes = describe(target, bench, options)
        print(f"cores usable: {len(os.sched_getaffinity(0))}; metric kernel {KERNEL}")
        quiet = {"dashboard_address": ":0", "silence_logs": logging.ERROR}
        environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        if args.tuned_malloc:
            environ.update(MALLOC_MMAP_THRESHOLD_=4 << 20, MALLOC_TRIM_THRESHOLD_=8 << 20)
        print(f"Dask workers' malloc environment: { ({k: v for k, v in environ.items() if 'MALLOC' in k}) }")
        with (
            dask.config.set({"distributed.nanny.pre-spawn-environ": environ}),
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, **quiet) as one,
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, **quiet) as two,
            Client(one) as client_1,
            Client(two) as client_2,
        ):
            configs = {
                "local": {},
                "local-1": {"workers": 1},
                "dask-1": {"client": client_1},
                "dask-2": {"client": client_2},
            }
            times: dict[str, list[float]] = {name: [] for name in configs}
            tables = {name: nbprec.compare(target, bench, **options, **kw).table for name, kw in configs.items()}
            agree = all(same(table, tables["local-1"]) for table in tables.values())
            for _ in range(args.runs):
                for name, kw in configs.items():
                    start = time.perf_counter()
                    nbprec.compare(target, bench, **options, **kw)
                    times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"\nwall time of nbprec.compare, medians of {args.runs} interleaved runs (after one warm-up each):")
    for name, values in times.items():
        rate = megabytes / median[name]
        print(f"  {name:8} {median[name]:7.3f} s  {rate:8,.0f} MB/s   runs: {' '.join(f'{v:.3f}' for v in values)}")
    print(f"\nspeed-up of 2 Dask workers over 1:        {median['dask-1'] / median['dask-2']:.2f}x")
    print(f"overhead of Dask (2 workers) over local:  {median['dask-2'] / median['local']:.2f}x the local time")
    print(f"overhead of Dask (1 worker) over 1 local: {median['dask-1'] / median['local-1']:.2f}x")
    print(f"results identical in all four: {agree}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
