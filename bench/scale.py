"""Large-model scale (issue 19): a million-tensor index, a tensor pair larger than memory, a 10 GB dump pair.

Every figure is whole process against whole process (``bench/timing.py``): each measurement runs in a fresh
Python child that imports nbprec, does one thing and reports its peak resident memory (``ru_maxrss``), timed
by the parent's clock around the process; its baseline is a child that reads the same files plainly (8 MiB
``readinto`` calls, what ``cat`` does), timed the same way.
Measured and baseline runs are interleaved and the medians of ``--repeat`` are printed with their ratio.
The data is generated in ``--tmp`` (default: the system's temporary folder) and removed afterwards.

Parts (``--parts``, default all):

``index``
    An msprobe statistics ``dump.json`` of ``--index-tensors`` tensor records (default 10^6: about 330,000
    ops of two inputs and one output): ``nbprec.open(...).index``. Target: under 5 s and 1 GB.
``pair``
    One pair of ``--pair-gb`` GB float32 tensors (default 4) in nbprec dumps, compared by ``nbprec.compare``
    in one worker. Target: peak RSS under 1 GB, whatever the tensor size (pages are read by windows and
    handed back). Prints throughput against the plain read of both files.
``dump``
    A dump pair of ``--dump-gb`` GB in all (default 10: two runs of 5 GB, 40 float32 tensors of 128 MiB
    each), compared with the default parallel engine. Prints throughput against the plain read.
``interactions``
    The dashboard's table model at ``--ops`` ops (default 10^6): threshold, sort, filter, select, in
    process (``bench/widgets.py``). Target: each under 100 ms.

Usage::

    .venv/bin/python bench/scale.py [--parts index,pair,dump,interactions] [--repeat 5] [--tmp DIR]
    .venv/bin/python bench/scale.py --quick      # small sizes, a minute: checks that the script runs
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from timing import PLAIN_READ as _PLAIN_READ  # bench/timing.py: the plain-read child
from timing import child

GB = 1 << 30
BLOCK = 1 << 23  # elements written at a time: 32 MiB of float32

# A child opening a dump's index. argv: the dump path.
_OPEN_INDEX = """
import json, resource, sys, time
start = time.perf_counter()
import nbprec
dump = nbprec.open(sys.argv[1])
n = len(dump.index)
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "tensors": n,
      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

# A child comparing two dumps. argv: target, bench, JSON options for nbprec.compare.
_COMPARE = """
import json, resource, sys, time
start = time.perf_counter()
import nbprec
comp = nbprec.compare(sys.argv[1], sys.argv[2], **json.loads(sys.argv[3]))
table = comp.table
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "tensors": len(table),
      "cosine_min": float(table["cosine"].min()), "reasons": sorted(set(table["reason"].astype(str)) - {""}),
      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def interleaved(measured: tuple[str, ...], baseline: tuple[str, ...], repeat: int) -> tuple[list[dict], list[dict]]:
    """``repeat`` runs of each child, alternating, so that both see the same machine state."""
    ours, base = [], []
    for _ in range(repeat):
        ours.append(child(*measured))
        base.append(child(*baseline))
    return ours, base


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.rglob("*") if p.is_file())


# -- index ---------------------------------------------------------------------------------------------


def write_msprobe_statistics(folder: Path, tensors: int) -> Path:
    """An msprobe statistics dump (``step0/rank0/dump.json``) of about ``tensors`` tensor records, streamed."""
    rank = folder / "step0" / "rank0"
    rank.mkdir(parents=True)
    kinds = ("linear", "gelu", "layer_norm", "softmax", "matmul", "add")
    rng = np.random.default_rng(0)
    with (rank / "dump.json").open("w") as out:
        out.write('{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {')
        for i in range(-(-tensors // 3)):
            lo, hi, mean, norm = (float(v) for v in rng.standard_normal(4).round(6))
            stats = {"Max": abs(hi), "Min": -abs(lo), "Mean": mean, "Norm": abs(norm), "requires_grad": True}

            def tensor(shape: list[int], stats: dict = stats) -> str:
                return json.dumps({"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": shape, **stats})

            kind = kinds[i % len(kinds)]
            record = f'{{"input_args": [{tensor([4, 64])}, {tensor([64, 64])}], "input_kwargs": {{}}, '
            record += f'"output": [{tensor([4, 64])}]}}'
            out.write(("," if i else "") + f'"Functional.{kind}.{i}.forward": {record}')
        out.write("}}")
    return folder


def bench_index(tmp: Path, tensors: int, repeat: int) -> None:
    dump = write_msprobe_statistics(tmp / "index", tensors)
    json_file = str(dump / "step0" / "rank0" / "dump.json")
    size = Path(json_file).stat().st_size
    ours, base = interleaved((_OPEN_INDEX, str(dump)), (_PLAIN_READ, json.dumps([json_file])), repeat)
    seconds, peak = median(ours, "process_seconds"), max(r["peak_mb"] for r in ours)
    read = median(base, "process_seconds")
    print(f"index: msprobe dump.json of {ours[0]['tensors']:,} tensors ({size / 1e6:.0f} MB)")
    print(f"  nbprec.open (whole process):  {seconds:6.2f} s   peak RSS {peak:6.0f} MB   (target < 5 s, < 1024 MB)")
    print(f"  plain read of dump.json:      {read:6.2f} s   ratio {seconds / read:.1f}x")
    shutil.rmtree(tmp / "index")


# -- tensors larger than memory, and a large dump pair -----------------------------------------------


def blocks(elements: int, seed: int, noisy: bool) -> Iterator[np.ndarray]:
    """A seeded float32 tensor of ``elements`` values, block by block; ``noisy`` adds 1e-3 noise."""
    for i, start in enumerate(range(0, elements, BLOCK)):
        y = np.random.default_rng([seed, i]).standard_normal(min(BLOCK, elements - start), dtype=np.float32)
        if noisy:
            y += np.random.default_rng([seed + 1, i]).standard_normal(y.size, dtype=np.float32) * np.float32(1e-3)
        yield y


def write_pair(folder: Path, tensors: int, elements: int) -> tuple[Path, Path]:
    """A target and a benchmark nbprec dump of ``tensors`` float32 tensors of ``elements`` values each."""
    from nbprec.formats.native import NativeDumpWriter

    paths = []
    for run, noisy in (("target", True), ("bench", False)):
        with NativeDumpWriter(folder / run, run=run) as writer:
            for t in range(tensors):
                record = {"name": f"layer{t}.forward.output.0", "op": f"layer{t}.forward", "role": "output"}
                writer.write_tensor_blocks(record, blocks(elements, 100 + t, noisy), dtype="float32", shape=(elements,))
        paths.append(folder / run)
    return paths[0], paths[1]


def bench_pair(tmp: Path, label: str, tensors: int, total_bytes: int, options: dict, repeat: int) -> None:
    elements = int(total_bytes // 2 // tensors // 4)
    target, bench = write_pair(tmp / label, tensors, elements)
    files = files_under(target / "tensors") + files_under(bench / "tensors")
    size = sum(Path(f).stat().st_size for f in files)
    compare = (_COMPARE, str(target), str(bench), json.dumps(options))
    ours, base = interleaved(compare, (_PLAIN_READ, json.dumps(files)), repeat)
    seconds, peak = median(ours, "process_seconds"), max(r["peak_mb"] for r in ours)
    read = median(base, "process_seconds")
    print(f"{label}: {tensors} tensor pair(s) of {elements * 4 / GB:.2f} GB a side, {size / GB:.1f} GB read in all")
    print(f"  nbprec.compare {options}: {seconds:6.2f} s  {size / seconds / 1e6:7.0f} MB/s  peak RSS {peak:6.0f} MB")
    print(f"  plain read of the payloads:  {read:6.2f} s  {size / read / 1e6:7.0f} MB/s   ratio {seconds / read:.2f}x")
    print(f"  worst cosine {ours[0]['cosine_min']:.6f}, reasons {ours[0]['reasons'] or 'none'}")
    shutil.rmtree(tmp / label)


# -- the dashboard at a million ops ------------------------------------------------------------------


def bench_interactions(ops: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from widgets import interaction_figures  # bench/widgets.py

    interaction_figures(ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="index,pair,dump,interactions")
    parser.add_argument("--index-tensors", type=int, default=1_000_000)
    parser.add_argument("--pair-gb", type=float, default=4.0, help="size of each tensor of the pair")
    parser.add_argument("--dump-gb", type=float, default=10.0, help="size of the dump pair, both sides")
    parser.add_argument("--ops", type=int, default=1_000_000, help="ops of the dashboard benchmark")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tmp", default=None, help="parent folder for the generated data")
    parser.add_argument("--quick", action="store_true", help="small sizes: check that the script runs")
    args = parser.parse_args()
    if args.quick:
        args.index_tensors, args.pair_gb, args.dump_gb, args.ops, args.repeat = 30_000, 0.125, 0.5, 20_000, 3
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="nbprec-scale-") as tmp:
        need = (2 * args.pair_gb if "pair" in parts else 0) + (args.dump_gb if "dump" in parts else 0)
        if shutil.disk_usage(tmp).free < need * GB * 1.1:
            raise SystemExit(f"{tmp}: needs {need:.0f} GB of free disk (use --tmp, or smaller --pair-gb/--dump-gb)")
        if "index" in parts:
            bench_index(Path(tmp), args.index_tensors, args.repeat)
        if "pair" in parts:
            one = {"workers": 1, "parallel": "threads"}
            bench_pair(Path(tmp), "pair", 1, int(2 * args.pair_gb * GB), one, args.repeat)
        if "dump" in parts:
            bench_pair(Path(tmp), "dump", 40, int(args.dump_gb * GB), {}, args.repeat)
        if "interactions" in parts:
            bench_interactions(args.ops)


if __name__ == "__main__":
    main()
