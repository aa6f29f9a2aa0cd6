"""How long does opening a big dump take? ``nbprec.open`` on 100,000 tensors, against merely listing them.

Builds, in a temporary folder that is removed afterwards:

- an nbprec-format dump of ``--tensors`` tensors written with :class:`NativeDumpWriter` (mode "tensor"),
  once with small payloads (``--small-elems`` float32 each) and once with large ones (``--large-elems``),
  to show that the index time does not grow with payload size;
- a TensorFlow ``{op}.{idx}.{timestamp}.npy`` folder of as many files (for the tf_npy reader);
- a CANN NPU dump tree of ``--tensors / 3`` dump files (two inputs and one output each, NC1HWC0 and ND, with
  original-op records), for the cann reader, which reads every file's header (a small protobuf message);
- an msprobe statistics dump of as many tensors: one ``dump.json`` (API and module calls, forward and backward,
  float32 statistics written as msprobe writes them) and its ``construct.json``.

For each it times, in the same process (in-process against in-process, ``bench/timing.py``), the baseline
(listing the files with ``os.scandir``; for the msprobe dump, whose index is one file, parsing its ``dump.json``
with the json module, the least any reader of it does) and ``nbprec.open``, interleaved (the order rotates every
round); for the nbprec dump also the fallback path that parses ``index.jsonl`` when the column cache is absent (as
after a crash). Prints every run, the medians of ``--repeat`` runs (at least 5) and their ratio.
Target: ``nbprec.open`` of the nbprec dump under 2 s.

Usage::

    .venv/bin/python bench/open_index.py [--tensors 100000] [--small-elems 32] [--large-elems 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import timing  # bench/timing.py

import nbprec
from nbprec.formats.native import COLUMNS_FILE, NativeDumpWriter
from nbprec.stats import tensor_stats

TARGET_SECONDS = 2.0


def build_native(folder: Path, tensors: int, elems: int) -> None:
    """A synthetic run: ``tensors`` records of an MLP-like op sequence (input and output of each call)."""
    array = np.linspace(-1, 1, elems, dtype=np.float32)
    stats = tensor_stats(array)  # the same payload everywhere: skip recomputing identical statistics
    with NativeDumpWriter(folder, run=folder.name, meta={"synthetic": True}) as writer:
        for i in range(tensors):
            call, role = divmod(i, 2)
            api = ("Functional.linear", "Functional.gelu", "Tensor.add")[call % 3]
            op = f"{api}.{call // 3}.forward"
            name = f"{op}.{'input' if role == 0 else 'output'}.0"
            record = {
                "name": name,
                "step": 0,
                "rank": 0,
                "order": call,
                "op": op,
                "op_type": api.split(".")[1],
                "api": api,
                "call": call // 3,
                "module": f"encoder.layers.{call % 12}.mlp",
                "direction": "forward",
                "role": "input" if role == 0 else "output",
                "slot": "0",
            }
            writer.write_tensor(record, array, stats=stats)
            if role == 0 and call:
                writer.write_edge(f"{api}.{(call - 1) // 3}.forward.output.0", op, "0")


def build_tf(folder: Path, tensors: int, elems: int) -> None:
    """A TensorFlow dump folder: the same .npy bytes under ``tensors`` valid names."""
    folder.mkdir()
    np.save(folder / "template.npy", np.linspace(-1, 1, elems, dtype=np.float32))
    data = (folder / "template.npy").read_bytes()
    (folder / "template.npy").unlink()
    for i in range(tensors):
        (folder / f"scope_layer{i % 12}_op{i}.0.{1675157077176648 + 13 * i}.npy").write_bytes(data)


def build_cann(folder: Path, tensors: int) -> int:
    """A CANN dump tree of ``tensors // 3`` files; returns the number of files."""
    from nbprec.formats.cann_write import CannTensor, dump_folder, write_dump_file

    step = dump_folder(folder)
    x = np.linspace(-1, 1, 4 * 8 * 8, dtype=np.float32).reshape(1, 4, 8, 8).astype(np.float16)
    first = write_dump_file(
        step,
        "template",
        "Conv2D",
        inputs=[CannTensor(x, "NC1HWC0", "NCHW"), x.reshape(-1)],
        outputs=[CannTensor(x, "NC1HWC0", "NCHW", original_op=("tf/template", 0))],
        record_op_name=False,
    )
    data = first.read_bytes()
    first.unlink()
    files = tensors // 3
    for i in range(files):  # the same bytes under many names (no op_name in the header: the file name gives it)
        (step / f"Conv2D.layer{i % 12}_conv{i}.{i}.0.{1700000000000000 + 13 * i}").write_bytes(data)
    return files


def build_msprobe(folder: Path, tensors: int) -> Path:
    """An msprobe statistics dump of about ``tensors`` tensors (``step0/rank0/dump.json`` and ``construct.json``):
    blocks of a linear layer's module call around its ``Functional.linear`` call, forward and backward, the
    statistics float32 values as msprobe writes them (``repr`` of the float). Returns the rank folder."""
    rng = np.random.default_rng(0)
    rank = folder / "step0" / "rank0"
    rank.mkdir(parents=True)
    values = iter(rng.standard_normal(4 * tensors + 64).astype(np.float32).tolist())

    def tensor(shape: list[int]) -> dict:
        low, high, mean, norm = sorted(next(values) for _ in range(4))
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": high, "Min": low,
                "Mean": mean, "Norm": abs(norm), "requires_grad": True}  # fmt: skip

    data: dict[str, dict] = {}
    construct: dict[str, str | None] = {}
    for call in range(max(1, tensors // 10)):  # 10 tensors a block; every module called once, as in one step
        module = f"Module.encoder.layers.{call}.Linear.forward.0"
        api = f"Functional.linear.{call}.forward"
        shape = [8, 64, 256]
        data[module] = {"input_args": [tensor(shape)], "input_kwargs": {}, "output": [tensor(shape)]}
        data[api] = {"input_args": [tensor(shape), tensor([256, 256]), tensor([256])], "input_kwargs": {},
                     "output": [tensor(shape)]}  # fmt: skip
        data[api.replace("forward", "backward")] = {"input": [tensor(shape)], "output": [tensor(shape)]}
        data[module.replace("forward", "backward")] = {"input": [tensor(shape)], "output": [tensor(shape)]}
        construct[module] = None
        construct[api] = module
    dump = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(dump, indent=1))
    (rank / "construct.json").write_text(json.dumps(construct, indent=1))
    return rank


def list_files(folder: Path) -> int:
    """Baseline: count every file of the dump with os.scandir (recursing into subfolders)."""
    count, stack = 0, [str(folder)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    count += 1
    return count


def timed(func: Callable[[], object]) -> tuple[float, float, object]:
    """Wall and CPU seconds (this process: the machine may be shared, CPU time stays close to the true cost)
    of one call, and its result."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = func()
    return time.perf_counter() - start, time.process_time() - start_cpu, result


def medians(repeat: int, listing: Callable[[], object], opening: Callable[[], object], baseline: str = "list") -> tuple:
    """``repeat`` interleaved runs of the baseline (``listing``, called ``baseline`` in the runs' lines) and of the
    opening: (median baseline seconds, its result, median opening seconds, median opening CPU seconds, the last
    opened dump)."""
    lists, opens, cpus, files, dump = [], [], [], 0, None
    for run in range(max(5, repeat)):
        pair = (("list", listing), ("open", opening))
        for kind, func in pair if run % 2 == 0 else pair[::-1]:
            wall, cpu, result = timed(func)
            if kind == "list":
                lists.append(wall)
                files = result
            else:
                opens.append(wall)
                cpus.append(cpu)
                dump = result
        print(f"    run {run + 1}: {baseline} {lists[-1]:.3f} s, open {opens[-1]:.3f} s", flush=True)
    return statistics.median(lists), files, statistics.median(opens), statistics.median(cpus), dump


def report(
    label: str, listing: float, files: int, opening: float, cpu: float, tensors: int, target: bool = False
) -> None:
    """One format's line; ``target``: the line of a nbprec dump, which :data:`TARGET_SECONDS` is for (the other
    formats have no target: their lines say none)."""
    verdict = ("ok" if opening < TARGET_SECONDS else "OVER TARGET") if target else "no target"
    print(
        f"{label:<36} list {files:>6} files {listing:6.3f} s | open {tensors:>6} tensors {opening:6.3f} s "
        f"(cpu {cpu:6.3f} s) | ratio {opening / listing:5.1f}x | {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--small-elems", type=int, default=32)
    parser.add_argument("--large-elems", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs (at least 5)")
    parser.add_argument("--tmp", default=None, help="parent folder for the generated data (default: system temp)")
    args = parser.parse_args()
    timing.compile_tree()
    root = Path(tempfile.mkdtemp(prefix="nbprec-bench-open-", dir=args.tmp))
    runs = max(5, args.repeat)
    print(
        f"nbprec.open benchmark: {args.tensors} tensors, in-process medians of {runs} interleaved runs, data in {root}"
    )
    print(f"  machine: {timing.machine()}")
    try:
        for label, elems in (("small", args.small_elems), ("large", args.large_elems)):
            folder = root / f"native-{label}"
            start = time.perf_counter()
            build_native(folder, args.tensors, elems)
            size = sum(p.stat().st_size for p in (folder / "tensors").iterdir()) / 2**20
            took = time.perf_counter() - start
            print(f"  built nbprec dump ({elems} float32 per tensor, {size:.0f} MiB of payload) in {took:.1f} s")
            listing, files, opening, cpu, dump = medians(
                args.repeat, lambda f=folder: list_files(f), lambda f=folder: nbprec.open(f)
            )
            assert len(dump) == args.tensors and dump.problems.empty, dump.problems  # type: ignore[arg-type]
            report(f"nbprec, {label} payloads ({elems} el.)", listing, files, opening, cpu, len(dump), True)  # type: ignore[arg-type]
            cache = folder / COLUMNS_FILE
            cache.rename(folder / "cache.off")
            listing, files, fallback, cpu, dump = medians(
                args.repeat, lambda f=folder: list_files(f), lambda f=folder: nbprec.open(f)
            )
            (folder / "cache.off").rename(cache)
            report(f"nbprec, {label}, index.jsonl only", listing, files, fallback, cpu, len(dump), True)  # type: ignore[arg-type]
            shutil.rmtree(folder)
        folder = root / "tf"
        start = time.perf_counter()
        build_tf(folder, args.tensors, args.small_elems)
        print(f"  built TensorFlow npy folder in {time.perf_counter() - start:.1f} s")
        listing, files, opening, cpu, dump = medians(
            args.repeat, lambda: list_files(folder), lambda: nbprec.open(folder, format="tf_npy")
        )
        report("tf_npy (format given)", listing, files, opening, cpu, len(dump))  # type: ignore[arg-type]
        guessed, cpu, dump = timed(lambda: nbprec.open(folder))  # once: every probe runs
        report("tf_npy (format guessed, all probes)", listing, files, guessed, cpu, len(dump))  # type: ignore[arg-type]
        folder = root / "cann"
        start = time.perf_counter()
        n_files = build_cann(folder, args.tensors)
        print(f"  built CANN dump tree of {n_files} files in {time.perf_counter() - start:.1f} s")
        listing, files, opening, cpu, dump = medians(
            args.repeat, lambda: list_files(folder), lambda: nbprec.open(folder, format="cann")
        )
        assert dump.problems.empty, dump.problems  # type: ignore[union-attr]
        report("cann (format given)", listing, files, opening, cpu, len(dump))  # type: ignore[arg-type]
        folder = root / "msprobe"
        start = time.perf_counter()
        rank = build_msprobe(folder, args.tensors)
        size = (rank / "dump.json").stat().st_size / 2**20
        print(f"  built msprobe statistics dump ({size:.0f} MiB dump.json) in {time.perf_counter() - start:.1f} s")
        parsing, _, opening, cpu, dump = medians(
            args.repeat,
            lambda: len(json.loads((rank / "dump.json").read_bytes())["data"]),
            lambda: nbprec.open(folder, format="msprobe"),
            baseline="json.loads",
        )
        assert dump.problems.empty, dump.problems  # type: ignore[union-attr]
        print(
            f"{'msprobe (format given)':<36} json.loads of dump.json {parsing:6.3f} s | open {len(dump):>6} tensors "  # type: ignore[arg-type]
            f"{opening:6.3f} s (cpu {cpu:6.3f} s) | ratio {opening / parsing:5.2f}x"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cores = os.cpu_count()
    print(f"target: nbprec.open of the nbprec dump under {TARGET_SECONDS:.0f} s on this machine ({cores} cores)")


if __name__ == "__main__":
    main()
