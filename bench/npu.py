"""Speed of :func:`nbprec.compare` on a realistic Ascend NPU dump, against msaccucmp's pipeline and a plain read.

The data, written once with nbprec's writers and cached (``--data``): one inference step of a hybrid
ResNet-50 + ViT-S network (the "R50+ViT" of Dosovitskiy et al.: ResNet-50 stages 1-3, a 1x1 patch embedding,
12 transformer layers of width 384 with 6 heads, a pooled classifier) as an Ascend NPU runs it (float16,
graph-engine fusions, feature maps in NC1HWC0 then FRACTAL_NZ, convolution weights in FRACTAL_Z, matrices in
FRACTAL_NZ, Cast / TransData / Reshape ops inserted) and as TensorFlow runs it in float32:

- the NPU dump: one CANN dump file per op, inputs and outputs (:mod:`nbprec.formats.cann_write`);
- the GE graph of the NPU run with its fusion records and origin formats (:mod:`nbprec.graph.ge_write`);
- the TensorFlow dump: one ``.npy`` per op output, weights and the ops the NPU fused away included.

Values: linear layers (convolutions, matrix products) give seeded Gaussian outputs; what follows them is
computed (batch-norm affine, ReLU, max pooling, residual adds, layer norm, attention scores, softmax, GELU);
the NPU holds the TensorFlow value with a relative error growing with depth, rounded to float16, and one
GELU is planted faulty. Shapes, dtypes, formats, padding, file counts and the graph are those of the
network. ``--size-mb`` (both dumps) sets the batch; the weights alone are about 180 MB.

All three are in-process figures, timed the same way: each call in this process (its imports done before
the clock starts), interleaved (the order rotates every round), medians of ``--runs`` (at least 5), after an
untimed warm-up of each (so the page cache is warm for all three); see ``bench/timing.py``:

(a) ``nbprec.compare(npu, tf, graph=graph)``, the whole call: open both dumps, read the graph, match through
    the fusion records, read, convert the storage formats, measure.
(b) msaccucmp's pipeline on the same files (PyPI ``mindstudio-probe``, its Python files loaded by path): per
    NPU dump file, the file read whole and its header parsed; per matched tensor, the payload taken with
    ``np.frombuffer`` (as its ``_deserialize_dump_data_to_array``), converted from its storage format with
    msaccucmp's converter and sliced to the benchmark shape, the TensorFlow ``.npy`` loaded, both flattened
    and cast to float32 (its ``AlgorithmManager.compare``), and every built-in algorithm run (cosine, max
    abs, accumulated relative, RED, KL, std, MAE, RMSE, max relative, mean relative error). Stand-ins and
    omissions, each of which shortens msaccucmp's time: its header parser needs a CANN native library, so
    **protobuf parsing of the header (nbprec's schema) stands in for it**; its matching (the fusion-rule
    parser wants the graph converted by CANN's ``atc``) is not timed: it gets the pairs nbprec matched; its
    CSV writing and logging are left out. Like msaccucmp it spreads the ops over ``(cores + 1) // 2`` forked
    processes (one process on two cores). Rank-4 FRACTAL_NZ results, which its converter returns with the
    batch dims merged, are reshaped to the benchmark shape so that every pair is measured.
(c) A plain read pass: every byte of every file of both dumps read with 8 MiB ``readinto`` calls (what
    ``cat`` does; :func:`timing.read_files`).

(d) The command line as a user runs it, whole process against whole process: ``nbprec compare NPU TF --graph G
    -o OUT`` (start-up, imports and every output file included) against a fresh process doing the plain read of
    (c), interleaved, medians (``--skip-cli`` skips it).

Prints the throughput (MB/s of dump bytes: the files of both dumps), the ratios msaccucmp / nbprec (target
>= 20) and nbprec / plain read (target <= 3), the command line against the read process, the machine and the
sizes. nbprec is byte-compiled first.

Usage::

    .venv/bin/python bench/npu.py [--size-mb 500] [--runs 5] [--seed 0] [--data DIR] [--quick]
        [--skip-msaccucmp] [--skip-cli]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import timing  # bench/timing.py
from npu_case import MB, NpuOp, Tensor, build, choose_batch, dump_files, write_case

GENERATOR = 4  # bump when the data written changes: cached data of another version is rewritten
NETS = {  # the network at full size, and the --quick toy
    "full": {"image": 128, "blocks": (3, 4, 6), "width": 64, "layers": 12, "dim": 384, "heads": 6, "classes": 1000},
    "quick": {"image": 32, "blocks": (1, 1, 1), "width": 8, "layers": 2, "dim": 32, "heads": 2, "classes": 10},
}
ALGORITHMS = ("CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
              "KullbackLeiblerDivergence", "StandardDeviation", "MeanAbsoluteError", "RootMeanSquareError",
              "MaxRelativeError", "MeanRelativeError")  # fmt: skip  # msaccucmp's ConstManager.BUILT_IN_ALGORITHM
CONVERTERS = ("NC1HWC0_to_NHWC", "FRACTAL_Z_to_HWCN", "FRACTAL_NZ_to_ND")
_FORKED: dict = {}  # msaccucmp's modules and work, for forked worker processes (set before forking)


def prepare(args: argparse.Namespace, cfg: dict) -> tuple[Path, dict]:
    """The case folder, written now or reused when its manifest matches (seed, size, generator, file sizes)."""
    name = f"nbprec-bench-npu-{'quick' if args.quick else 'full'}-{args.size_mb:g}mb-seed{args.seed}"
    root = Path(args.data) if args.data else Path(tempfile.gettempdir()) / name
    manifest = root / "bench-npu.json"
    want = {"generator": GENERATOR, "net": cfg, "size_mb": args.size_mb, "seed": args.seed}
    if manifest.is_file():
        facts = json.loads(manifest.read_text())
        files = dump_files(root)
        if (
            {k: facts.get(k) for k in want} == json.loads(json.dumps(want))
            and facts.get("files") == len(files)
            and (facts.get("bytes") == sum(f.stat().st_size for f in files))
        ):
            return root, facts | {"cached": True}
        shutil.rmtree(root)
    elif root.exists() and any(root.iterdir()):
        sys.exit(f"{root} exists and holds no bench-npu.json: not overwriting it (give an empty or new --data)")
    batch = choose_batch(cfg, args.size_mb)
    net = build(cfg, batch)
    start = time.perf_counter()
    print(f"writing the case (batch {batch}) into {root} ...", flush=True)
    write_case(net, root, args.seed)
    files = dump_files(root)
    ops = [e for e in net.events if isinstance(e, NpuOp) and e.dumped]
    facts = want | {
        "batch": batch,
        "npu_ops": len(ops),
        "fused_ops": sum(1 for e in ops if len(e.originals) > 1),
        "tf_tensors": sum(1 for e in net.events if isinstance(e, Tensor)),
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "npu_bytes": sum(f.stat().st_size for f in files if f.suffix != ".npy"),
        "write_s": time.perf_counter() - start,
    }
    manifest.write_text(json.dumps(facts, indent=1))
    return root, facts | {"cached": False}


# -- (b) msaccucmp's pipeline ---------------------------------------------------------------------------


def load_msaccucmp() -> tuple[dict[str, ModuleType] | None, str]:
    """msaccucmp's converter and algorithm modules, loaded by path without importing msprobe (whose
    ``__init__`` replaces ``sys.modules["tensorflow"]``); None and the reason when it is not installed."""
    spec = importlib.util.find_spec("msprobe")
    if spec is None or not spec.submodule_search_locations:
        return None, 'mindstudio-probe is not installed (pip install --no-deps "mindstudio-probe==26.2.0")'
    root = Path(next(iter(spec.submodule_search_locations))) / "msaccucmp"
    files = [root / "format_manager" / "builtin_format_convert" / f"convert_{n}.py" for n in CONVERTERS]
    files += [root / "algorithm_manager" / "builtin_algorithm" / f"alg_{n}.py" for n in ALGORITHMS]
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(root))  # they import cmp_utils / algorithm_manager as top-level packages
    modules = {}
    try:
        for path in files:
            module_spec = importlib.util.spec_from_file_location(f"_msaccucmp_{path.stem}", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            modules[path.stem.split("_", 1)[1]] = module
    except (ImportError, OSError) as exc:
        return None, f"msaccucmp cannot be loaded from {root}: {exc}"
    finally:
        sys.path[:] = saved_path
        for added in set(sys.modules) - saved_modules:
            if str(getattr(sys.modules[added], "__file__", "") or "").startswith(str(root)):
                del sys.modules[added]
    return modules, ""


def msaccucmp_work(comp, npu_dump, tf_dump) -> list[tuple[str, list[tuple]]]:
    """Per NPU dump file (in execution order), its matched tensors: (role, slot, .npy file, benchmark format,
    NPU tensor name)."""
    t_idx, b_idx = npu_dump.index.set_index("name"), tf_dump.index.set_index("name")
    work: dict[str, list[tuple]] = {}
    table = comp.table[comp.table["compare_mode"] == "tensor"]
    for target, bench in zip(table["target_name"], table["bench_name"], strict=True):
        t = t_idx.loc[target]
        item = (t["role"], int(t["slot"]), b_idx.loc[bench, "file"], t["origin_format"], target)
        work.setdefault(t["file"], []).append(item)
    return list(work.items())


def msaccucmp_file(m: dict[str, ModuleType], file: str, tensors: list[tuple], header_class) -> list[str]:
    """msaccucmp's work on one NPU dump file: read, parse, then convert and compare each matched tensor."""
    alg = m["CosineSimilarity"]
    common, const = alg.utils.common, alg.ConstManager
    with open(file, "rb") as fh:
        data = fh.read()
    header_len = int.from_bytes(data[:8], "little")
    header = header_class.FromString(data[8 : 8 + header_len])  # stand-in for msaccucmp's native parser
    offsets, at = {}, 8 + header_len
    for role, group in (("input", header.input), ("output", header.output)):
        for slot, tensor in enumerate(group):
            offsets[role, slot] = (tensor, at)
            at += tensor.size
    cosines = []
    for role, slot, npy, gt_format, _ in tensors:
        tensor, at = offsets[role, slot]
        payload = data[at : at + tensor.size]  # the tensor's own bytes, as its parser hands them over
        shape = list(tensor.shape.dim)
        dtype = common.get_dtype_by_data_type(tensor.data_type)
        npu = np.frombuffer(payload[: np.dtype(dtype).itemsize * math.prod(shape)], dtype=dtype)
        if tensor.data_type in const.CAST_FP32_DTYPE:
            npu = npu.astype("float32")
        bench = np.load(npy)
        src = common.get_format_string(tensor.format)
        if src in ("ND", gt_format):
            npu = npu.reshape(shape)
        else:
            npu = m[f"{src}_to_{gt_format}"].convert(shape, list(bench.shape), npu)
            if npu.ndim == bench.ndim and npu.shape != bench.shape:  # its slice_data: cut the padding
                npu = npu[tuple(slice(0, d) for d in bench.shape)]
            elif npu.ndim != bench.ndim:  # rank-4 FRACTAL_NZ: batch dims merged (see the module docstring)
                npu = npu.reshape(bench.shape)
        x, y = npu.flatten(), bench.flatten()
        x, y = np.array(x).astype("float32"), np.array(y).astype("float32")  # AlgorithmManager.compare
        args = alg.AlgorithmParameter()
        args.__dict__ = {
            "my_output_dump_file": file,
            "ground_truth_dump_file": npy,
            "shape_type": alg.utils.get_shape_type(list(npu.shape)),
        }
        with np.errstate(divide="ignore", invalid="ignore"):
            results = [m[name].compare(x, y, args) for name in ALGORITHMS]
        cosines.append(results[0][0])
    return cosines


def _msaccucmp_chunk(chunk: list[int]) -> list[tuple[int, list[str]]]:
    m, work, header_class = _FORKED["m"], _FORKED["work"], _FORKED["header_class"]
    return [(i, msaccucmp_file(m, *work[i], header_class)) for i in chunk]


def run_msaccucmp(m: dict[str, ModuleType], work: list) -> list[str]:
    """Every file's work, in msaccucmp's ``(cores + 1) // 2`` processes (inline when that is one); the cosine
    strings in the order of ``work``."""
    from nbprec.formats._dumpdata import dump_data_class

    processes = ((os.cpu_count() or 1) + 1) // 2
    if processes <= 1:
        return [c for file, tensors in work for c in msaccucmp_file(m, file, tensors, dump_data_class())]
    _FORKED.update(m=m, work=work, header_class=dump_data_class())
    chunks = [list(range(k, len(work), processes)) for k in range(processes)]  # ops dealt round-robin, as it does
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        done = dict(item for part in pool.map(_msaccucmp_chunk, chunks) for item in part)
    return [c for i in range(len(work)) for c in done[i]]


# -- timing -----------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    cpu, start = cpu_seconds(), time.perf_counter()
    out = fn()
    return time.perf_counter() - start, cpu_seconds() - cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=None, help="both dumps together, MB (default 500)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each, interleaved (at least 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="folder for the case (default: a cached folder in the temp dir)")
    parser.add_argument("--quick", action="store_true", help="a toy network and a few MB (checks the script)")
    parser.add_argument("--skip-msaccucmp", action="store_true", help="skip part (b)")
    parser.add_argument("--skip-cli", action="store_true", help="skip part (d), the command line")
    args = parser.parse_args()
    args.size_mb = args.size_mb or (3.0 if args.quick else 500.0)
    args.runs = max(5, args.runs)
    cfg = NETS["quick" if args.quick else "full"]
    timing.compile_tree()
    import nbprec
    from nbprec.compare.metrics import KERNEL

    root, facts = prepare(args, cfg)
    npu_dir, tf_dir, graph = root / "npu", root / "tf", root / "ge_proto_00000001_Build.txt"
    files = dump_files(root)
    mb = sum(f.stat().st_size for f in files) / MB
    buf = bytearray(8 << 20)  # the plain read: 8 MiB readinto calls, as cat
    m, why = (None, "--skip-msaccucmp") if args.skip_msaccucmp else load_msaccucmp()

    timing.read_files(files, buf)  # warm-up: the page cache holds both dumps from here on
    comp = nbprec.compare(npu_dir, tf_dir, graph=graph)
    npu_dump, tf_dump = nbprec.open(npu_dir, format="cann", graph=graph), nbprec.open(tf_dir)
    work = msaccucmp_work(comp, npu_dump, tf_dump)
    pairs = sum(len(t) for _, t in work)
    formats = npu_dump.index["storage_format"].value_counts().to_dict()
    runners: dict[str, Callable[[], object]] = {
        "plain read": lambda: timing.read_files(files, buf),
        "nbprec.compare": lambda: nbprec.compare(npu_dir, tf_dir, graph=graph),
    }
    if m is not None:
        runners["msaccucmp pipeline"] = lambda: run_msaccucmp(m, work)
        runners["msaccucmp pipeline"]()  # warm-up
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    outputs: dict[str, object] = {}
    names = list(runners)
    for run in range(args.runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            wall, cpu, outputs[name] = timed(runners[name])
            times[name].append((wall, cpu))
        print(f"run {run + 1}: " + ", ".join(f"{n} {times[n][-1][0]:.3f} s" for n in names), flush=True)

    med = {n: statistics.median(w for w, _ in t) for n, t in times.items()}
    cpu = {n: statistics.median(c for _, c in t) for n, t in times.items()}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        "",
        "==================== bench/npu.py summary ====================",
        f"machine: {timing.machine()} ({cores} cores usable); numpy {np.__version__}; nbprec kernel {KERNEL}",
        f"case: R50+ViT-S hybrid ({'quick toy' if args.quick else 'full'}: image {cfg['image']}, batch "
        f"{facts['batch']}, {cfg['layers']} encoder layers), {facts['npu_ops']} NPU dump files "
        f"({facts['fused_ops']} fused ops), {facts['tf_tensors']} TensorFlow .npy files; NPU dump "
        f"{facts['npu_bytes'] / MB:.0f} MB + TF dump {(facts['bytes'] - facts['npu_bytes']) / MB:.0f} MB = "
        f"{mb:.0f} MB; {'cached at' if facts['cached'] else 'written to'} {root}"
        + ("" if facts["cached"] else f" in {facts['write_s']:.0f} s"),
        f"NPU tensors by storage format: {formats}; {pairs} matched pairs compared ({len(comp.table)} NPU tensors)",
        f"timings: in-process, medians of {args.runs} interleaved runs in this process, warm page cache",
    ]
    for name in names:
        lines.append(
            f"  {name:<20} {med[name]:8.3f} s  {mb / med[name]:8.0f} MB/s   (CPU {cpu[name]:.2f} s; runs "
            + " ".join(f"{w:.3f}" for w, _ in times[name])
            + ")"
        )
    ratio_read = med["nbprec.compare"] / med["plain read"]
    lines.append(f"  nbprec / plain read  = {ratio_read:6.2f}   target <= 3: {'met' if ratio_read <= 3 else 'MISSED'}")
    if m is not None:
        ratio = med["msaccucmp pipeline"] / med["nbprec.compare"]
        lines.append(f"  msaccucmp / nbprec   = {ratio:6.1f}   target >= 20: {'met' if ratio >= 20 else 'MISSED'}")
        lines.append(
            "  (msaccucmp: its converters and algorithms; protobuf header parsing stands in for its native "
            "parser; matching and CSV writing not timed)"
        )
        ours = comp.table.set_index("target_name")["cosine"]
        names_in_order = [t[-1] for _, tensors in work for t in tensors]
        diff = [abs(float(c) - ours[n]) for c, n in zip(outputs["msaccucmp pipeline"], names_in_order, strict=True)]
        lines.append(f"  agreement: {len(diff)} cosines, |msaccucmp - nbprec| max {np.nanmax(diff):.1e}")
    else:
        lines.append(f"  msaccucmp / nbprec   = skipped: {why}")
    if not args.skip_cli:
        lines += command_line(npu_dir, tf_dir, graph, files, mb, args.runs)
    lines.append("===============================================================")
    print("\n".join(lines), flush=True)


def command_line(npu_dir: Path, tf_dir: Path, graph: Path, files: list[Path], mb: float, runs: int) -> list[str]:
    """Part (d): ``nbprec compare`` as a whole process against a plain-read process, interleaved; the summary
    lines."""
    nbprec_bin = str(Path(sys.executable).parent / "nbprec")
    with tempfile.TemporaryDirectory(prefix="nbprec-bench-npu-cli-") as out:
        cmd = [nbprec_bin, "compare", str(npu_dir), str(tf_dir), "--graph", str(graph), "-o", out, "--no-progress"]
        runners = {
            "nbprec command": lambda: timing.whole_process(cmd, ok=(0, 1)),  # 1: failing ops found
            "plain read process": lambda: timing.plain_read(files)["process_seconds"],
        }
        for runner in runners.values():  # warm-up
            runner()
        print("(d) the command line, whole processes:", flush=True)
        times = timing.interleave(runners, runs)
    med = {name: timing.median(t) for name, t in times.items()}
    ratio = med["nbprec command"] / med["plain read process"]
    return [
        f"whole process (the parent's clock around each process; the command writes all its files), medians of {runs}:",
        *(
            f"  {name:<20} {med[name]:8.3f} s  {mb / med[name]:8.0f} MB/s   (runs {timing.runs_text(times[name])})"
            for name in runners
        ),
        f"  command / read process = {ratio:6.2f}",
    ]


if __name__ == "__main__":
    main()
