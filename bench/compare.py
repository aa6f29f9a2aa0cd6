"""Speed and memory of :func:`nbprec.compare`, against baselines measured in the same run.

(a) **Synthetic pair** (nbprec native format, written with ``NativeDumpWriter`` into a temp dir): at least
    ``--size-gb`` GB over both dumps and ``--tensors`` tensors, sizes from 64 elements to 16 M elements, a
    float32 benchmark against a target rounded to float16 or bfloat16 (stored as such) with some planted
    errors (noise, a scaled tensor, float16 overflow to inf). Timed in the same run:

    1. one plain read pass over both dumps: ``np.load(mmap_mode="r")`` of every payload and
       ``np.add.reduce(..., dtype=float64)`` over it (touches every byte once);
    2. ``nbprec.compare`` on the pair (default workers), in a child process whose ``ru_maxrss`` gives the
       peak resident memory (tracemalloc does not see numpy memory maps).

    Prints throughput (MB of payload over both sides per second), the ratio compare time / read time
    (target <= 2.5) and the compare's peak memory next to the largest tensor and the dump size.

(b) **msprobe dumps** written by msprobe itself (PyPI ``mindstudio-probe``, in its own virtualenv
    ``bench/.venv-msprobe``, created here when missing): a seeded MLP/attention model run under
    ``PrecisionDebugger`` (task ``tensor``, level ``L1``) in float32 and in bfloat16 with the same weights
    (``bench/msprobe_dump.py``), hidden size ``--msprobe-hidden`` (several sizes may be given). Times, on the
    same pair:

    - ``msprobe compare -tp ... -gp ...`` (its CLI, the whole process: how msprobe is used), ``--msprobe-runs``
      times;
    - ``nbprec.compare`` in a fresh interpreter (the call alone, as in a notebook), ``--runs`` times; torch is
      not imported (nbprec reads the ``.pt`` files without it);
    - ``nbprec compare`` (its CLI, the whole process: start-up, imports, writing the CSV tables), ``--runs``
      times.

    Prints both throughputs and the ratio msprobe time / nbprec time on medians (target >= 40), the same
    ratio CLI against CLI, and an agreement check (compared tensor counts, cosine differences on matched
    names). The machine is shared and noisy: every run's time is printed. nbprec's modules are byte-compiled
    first, as a regular install compiles them and as msprobe's are (see :func:`compile_bytecode`).

Usage::

    .venv/bin/python bench/compare.py [--size-gb 2] [--tensors 10000] [--skip-msprobe] [--skip-synthetic]
        [--msprobe-hidden 512,1024] [--runs 5] [--msprobe-runs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Single-threaded BLAS for this process (data generation: the writer's statistics use BLAS dot, and a
# threaded dot on a busy machine is very slow); the compare child runs with the caller's environment.
USER_ENV = dict(os.environ)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
MSPROBE_VENV = HERE / ".venv-msprobe"
MSPROBE_PIP = ("torch==2.13.0", "mindstudio-probe")
MB = 1e6
LARGEST = 1 << 24  # elements of the largest synthetic tensors (64 MB in float32)


# -- (a) synthetic pair --------------------------------------------------------------------------------


def synthetic_sizes(total_bytes: float, n_tensors: int, rng: np.random.Generator) -> list[int]:
    """Element counts: log-uniform small/medium tensors, then large ones until ``total_bytes`` (6 B/element)."""
    per_element = 4 + 2  # float32 benchmark + float16/bfloat16 target
    want = int(total_bytes / per_element)
    n_small = max(1, n_tensors - 8)
    small = np.exp2(rng.uniform(6, 17, n_small)).astype(np.int64)  # 64 .. 128 k elements
    if small.sum() > want:
        small = np.maximum(1, (small * (want / small.sum()) * 0.5).astype(np.int64))
    sizes = [int(s) for s in small]
    remaining = want - sum(sizes)
    large = []
    while remaining > 0 or len(sizes) + len(large) < n_tensors:
        size = int(min(LARGEST, max(remaining, 64), 2 ** rng.uniform(20, 24)))
        large.append(size)
        remaining -= size
    # put the large tensors at spread positions
    for size in large:
        sizes.insert(int(rng.integers(0, len(sizes) + 1)), size)
    return sizes


def write_synthetic(root: Path, total_bytes: float, n_tensors: int, seed: int = 0) -> dict:
    """Write the target and benchmark dumps under ``root``; return facts about them."""
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(seed)
    sizes = synthetic_sizes(total_bytes, n_tensors, rng)
    base_n = LARGEST * 2
    base = rng.standard_normal(base_n, dtype=np.float32)  # views of this are the benchmark payloads
    rounded = {"float16": base.astype(np.float16), "bfloat16": base.astype(ml_dtypes.bfloat16)}
    planted: dict[str, str] = {}
    t_writer = NativeDumpWriter(root / "target", run="target", meta={"bench": "synthetic"})
    b_writer = NativeDumpWriter(root / "bench", run="bench", meta={"bench": "synthetic"})
    largest = 0
    with t_writer, b_writer:
        for i, size in enumerate(sizes):
            start = int(rng.integers(0, base_n - size + 1))
            bench = base[start : start + size]
            dtype = "bfloat16" if i % 2 else "float16"
            target = rounded[dtype][start : start + size]
            kind = ""
            if i % 97 == 13:  # planted faults: about 1 % of the tensors
                kind = ("noise", "scale", "overflow")[(i // 97) % 3]
                target = target.copy()
                if kind == "noise":
                    target[: max(1, size // 10)] += target.dtype.type(0.5)
                elif kind == "scale":
                    target *= target.dtype.type(1.25)
                else:
                    target = (bench * 7e4).astype(np.float16) if size > 1 else target
                planted[f"layer{i}.output.0"] = kind
            layer, slot = divmod(i, 3)
            role = ("input", "parameters", "output")[slot]
            record = {
                "name": f"layer{i}.{role}.0",
                "step": 0,
                "rank": 0,
                "order": i,
                "op": f"Op{layer}",
                "op_type": "Linear",
                "api": "linear",
                "call": layer,
                "direction": "forward",
                "role": role,
                "slot": "0",
            }
            b_writer.write_tensor(record, bench)
            t_writer.write_tensor(record, target)
            largest = max(largest, size)
    t_bytes = sum(int(s) * 2 for s in sizes)
    b_bytes = sum(int(s) * 4 for s in sizes)
    return {"tensors": len(sizes), "bytes": t_bytes + b_bytes, "largest_elements": largest, "planted": len(planted)}


def payload_files(dump_dir: Path) -> list[Path]:
    """Every ``.npy`` payload of a native dump, in index order."""
    return sorted((dump_dir / "tensors").glob("*.npy"))


def plain_read_pass(dirs: list[Path]) -> tuple[float, float]:
    """(wall, CPU) seconds of one mmap read pass over every payload (each value summed once in float64)."""
    start, cpu = time.perf_counter(), time.process_time()
    total = 0.0
    for folder in dirs:
        for file in payload_files(folder):
            array = np.load(file, mmap_mode="r", allow_pickle=False)
            with np.errstate(all="ignore"):
                total += float(np.add.reduce(array.reshape(-1), dtype=np.float64))
            del array
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if total == 1.2345:  # keep the sums alive
        print(total)
    return elapsed, cpu


def run_child(target: Path, bench: Path, out: Path, workers: int | None) -> dict:
    """Run ``nbprec.compare`` in a fresh interpreter; return its timing and memory report."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(target), str(bench), str(out)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=USER_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"compare child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.with_suffix(".json").read_text())


def _proc_status_kib(key: str) -> int:
    """A ``/proc/self/status`` memory figure in KiB (0 where /proc is unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) so it measures from now on (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _proc_status_kib("VmHWM") > 0


def _op_label(row) -> str:
    """A short label of a roll-up row (or whatever ``first_failing_op`` returned)."""
    if row is None:
        return "none"
    try:
        return f"{row['op']} (order {row['order']}, {row.get('origin', '?')})"
    except (KeyError, TypeError, IndexError):
        return str(row)


def child_main(target: str, bench: str, out: str, workers: int | None) -> None:
    """The child process: one ``nbprec.compare``, its wall and CPU time and its peak RSS."""
    import nbprec
    from nbprec.compare.metrics import KERNEL

    rss_before = _proc_status_kib("VmRSS")
    reset = _reset_peak_rss()

    def cpu_now() -> float:  # this process and its worker processes (nbprec.compare may fork them)
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    cpu = cpu_now()
    start = time.perf_counter()
    comp = nbprec.compare(target, bench, workers=workers)
    seconds = time.perf_counter() - start
    cpu_seconds = cpu_now() - cpu
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM after the reset is the peak of the compare itself; ru_maxrss (KiB on Linux) if no reset. Worker
    # processes (forked) count separately: their largest peak is added (an upper bound of the total).
    rss_after = _proc_status_kib("VmHWM") if reset else cpu_after.ru_maxrss
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    table = comp.table
    columns = ["target_name", "bench_name", "match", "compare_mode", "cosine", "max_abs_err", "max_rel_err"]
    table[columns].to_csv(out, index=False)
    report = {
        "seconds": seconds,
        "kernel": KERNEL,
        "cpu_seconds": cpu_seconds,
        "rss_before_kib": rss_before,
        "rss_peak_kib": rss_after,
        "rss_children_kib": rss_children,
        "rows": len(table),
        "compared": int((table["compare_mode"] == "tensor").sum()),
        "failing_ops": len(comp.failing_ops()) if hasattr(comp, "failing_ops") else -1,
        "first_failing_op": _op_label(comp.first_failing_op()),
    }
    Path(out).with_suffix(".json").write_text(json.dumps(report))


def part_synthetic(args: argparse.Namespace, tmp: Path) -> dict:
    """Part (a): write the synthetic pair, time the plain read pass and the compare."""
    print(f"== (a) synthetic pair: {args.size_gb} GB, >= {args.tensors} tensors ==", flush=True)
    start = time.perf_counter()
    with np.errstate(over="ignore"):
        facts = write_synthetic(tmp, args.size_gb * 1e9, args.tensors)
    mb = facts["bytes"] / MB
    print(
        f"wrote {facts['tensors']} tensor pairs, {mb:.0f} MB of payload (both dumps), "
        f"largest {facts['largest_elements']:,} elements, {facts['planted']} planted faults "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    dirs = [tmp / "target", tmp / "bench"]
    reads = [plain_read_pass(dirs)]
    print(
        f"plain read pass (mmap, np.add.reduce float64): {reads[0][0]:7.2f} s  {mb / reads[0][0]:7.0f} MB/s", flush=True
    )
    child = run_child(dirs[0], dirs[1], tmp / "synthetic_table.csv", args.workers)
    t_cmp = child["seconds"]
    print(f"nbprec.compare:                                {t_cmp:7.2f} s  {mb / t_cmp:7.0f} MB/s", flush=True)
    reads.append(plain_read_pass(dirs))
    print(
        f"plain read pass again:                         {reads[1][0]:7.2f} s  {mb / reads[1][0]:7.0f} MB/s", flush=True
    )
    t_read, cpu_read = min(reads)
    largest_mb = facts["largest_elements"] * (4 + 2) / MB
    peak_mb = child["rss_peak_kib"] * 1024 / MB
    worker_mb = child.get("rss_children_kib", 0) * 1024 / MB
    base_mb = child["rss_before_kib"] * 1024 / MB
    print(
        f"compare: peak RSS {peak_mb:.0f} MB, largest worker process {worker_mb:.0f} MB (shares the parent's pages; "
        f"RSS before the call {base_mb:.0f} MB); largest tensor pair "
        f"{largest_mb:.0f} MB; dump {mb:.0f} MB; {child['compared']} of {child['rows']} rows compared as tensors",
        flush=True,
    )
    return {
        "a_tensors": facts["tensors"],
        "a_mb": mb,
        "a_largest_pair_mb": largest_mb,
        "a_read_s": t_read,
        "a_read_cpu": cpu_read,
        "a_compare_s": t_cmp,
        "a_compare_cpu": child["cpu_seconds"],
        "a_ratio": t_cmp / t_read,
        "a_ratio_cpu": child["cpu_seconds"] / cpu_read,
        "a_peak_rss_mb": peak_mb,
        "a_worker_rss_mb": worker_mb,
        "a_base_rss_mb": base_mb,
        "a_compared": child["compared"],
        "a_rows": child["rows"],
        "a_first_failing": child["first_failing_op"],
    }


# -- (b) msprobe ---------------------------------------------------------------------------------------


def ensure_msprobe_venv() -> Path:
    """The msprobe virtualenv's python, creating the venv and installing msprobe when missing."""
    python = MSPROBE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import msprobe, torch; assert torch.__version__.startswith('2.13.0')"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    print(f"creating {MSPROBE_VENV} and installing {' '.join(MSPROBE_PIP)} (about 80 s) ...", flush=True)
    subprocess.run(["python3", "-m", "venv", str(MSPROBE_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *MSPROBE_PIP],
        check=True,
    )
    subprocess.run(probe, check=True)
    return python


def dump_bytes(folder: Path) -> int:
    """Bytes of the tensor payload files under a msprobe dump folder."""
    return sum(f.stat().st_size for f in folder.rglob("*.pt"))


def read_msprobe_csv(out_dir: Path):
    """msprobe's compare CSV written under ``out_dir``, as a DataFrame."""
    import pandas as pd

    files = sorted(out_dir.glob("compare_result*.csv"))
    if not files:
        files = sorted(out_dir.rglob("*.csv"))
    if not files:
        raise RuntimeError(f"msprobe compare wrote no CSV under {out_dir}")
    return pd.read_csv(files[-1])


def _tail(proc: subprocess.CompletedProcess) -> str:
    return f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _times(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def msprobe_one_size(args: argparse.Namespace, python: Path, tmp: Path, hidden: int) -> dict:
    """Part (b) at one hidden size: msprobe writes both dumps; msprobe and nbprec compare them."""
    import pandas as pd

    root = tmp / f"msprobe_h{hidden}"
    start = time.perf_counter()
    cmd = [str(python), str(HERE / "msprobe_dump.py"), "--out", str(root), "--layers", str(args.msprobe_layers)]
    cmd += ["--hidden", str(hidden)]
    subprocess.run(cmd, check=True, capture_output=not args.verbose)
    target = root / "bf16" / "step0"
    bench = root / "fp32" / "step0"
    t_json, b_json = target / "rank0" / "dump.json", bench / "rank0" / "dump.json"
    mb = (dump_bytes(target) + dump_bytes(bench)) / MB
    n_api = len(json.loads(t_json.read_text())["data"])
    print(
        f"-- hidden {hidden}: msprobe dumped {n_api} API calls per run (L1, forward), {mb:.0f} MB of .pt payloads "
        f"over both runs in {time.perf_counter() - start:.1f} s",
        flush=True,
    )

    msprobe_bin = python.parent / "msprobe"
    start = time.perf_counter()
    subprocess.run([str(msprobe_bin), "-h"], capture_output=True, check=False)
    t_startup = time.perf_counter() - start
    t_msprobe = []
    for run in range(args.msprobe_runs):
        out = tmp / f"msprobe_compare_h{hidden}_{run}"
        out.mkdir()
        start = time.perf_counter()
        proc = subprocess.run(
            [str(msprobe_bin), "compare", "-tp", str(t_json), "-gp", str(b_json), "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        t_msprobe.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"msprobe compare failed ({proc.returncode}):\n{_tail(proc)}")
    ms_median = _median(t_msprobe)
    print(f"msprobe compare (CLI, whole process): {_times(t_msprobe)} s  median {mb / ms_median:7.1f} MB/s", flush=True)
    print(f"msprobe start-up alone (msprobe -h):  {t_startup:.2f} s", flush=True)

    children = [run_child(target, bench, tmp / f"msprobe_table_h{hidden}.csv", args.workers) for _ in range(args.runs)]
    t_nb = [c["seconds"] for c in children]
    nb_median = _median(t_nb)
    print(f"nbprec.compare (the call):            {_times(t_nb)} s  median {mb / nb_median:7.1f} MB/s", flush=True)
    t_cli = []
    for _ in range(args.runs):
        out = tmp / f"nbprec_cli_h{hidden}"
        start = time.perf_counter()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "nbprec"), "compare", str(target), str(bench), "-o", str(out),
             "--no-progress"],
            capture_output=True, text=True, check=False, env=USER_ENV,
        )  # fmt: skip
        t_cli.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):  # 1: failing ops found
            raise RuntimeError(f"nbprec compare failed ({proc.returncode}):\n{_tail(proc)}")
    cli_median = _median(t_cli)
    print(f"nbprec compare (CLI, whole process):  {_times(t_cli)} s  median {mb / cli_median:7.1f} MB/s", flush=True)

    ms = read_msprobe_csv(tmp / f"msprobe_compare_h{hidden}_0")
    nb = pd.read_csv(tmp / f"msprobe_table_h{hidden}.csv")
    ms_cos = pd.to_numeric(ms["Cosine"], errors="coerce")
    ms_compared = int(ms_cos.notna().sum())
    ms_cols = ms.assign(ms_cosine=ms_cos)[["NPU Name", "ms_cosine"]]
    merged = nb.merge(ms_cols, left_on="target_name", right_on="NPU Name")
    both = merged[merged["ms_cosine"].notna() & merged["cosine"].notna()]
    diff = (both["cosine"] - both["ms_cosine"]).abs()
    child = children[-1]
    print(
        f"agreement: msprobe {len(ms)} rows ({ms_compared} with a cosine), nbprec {child['rows']} rows "
        f"({child['compared']} compared as tensors); {len(both)} names with both cosines, "
        f"|cosine difference| median {diff.median():.2e}, max {diff.max():.2e}",
        flush=True,
    )
    return {
        "hidden": hidden,
        "apis": n_api,
        "mb": mb,
        "msprobe_s": ms_median,
        "msprobe_all": t_msprobe,
        "msprobe_startup_s": t_startup,
        "nbprec_s": nb_median,
        "nbprec_all": t_nb,
        "nbprec_best": min(t_nb),
        "nbprec_cpu": _median([c["cpu_seconds"] for c in children]),
        "cli_s": cli_median,
        "ratio": ms_median / nb_median,
        "ratio_cli": ms_median / cli_median,
        "ratio_no_startup": (ms_median - t_startup) / nb_median,
        "ms_rows": len(ms),
        "ms_compared": ms_compared,
        "nb_rows": child["rows"],
        "nb_compared": child["compared"],
        "matched": len(both),
        "cos_median": float(diff.median()) if len(diff) else math.nan,
        "cos_max": float(diff.max()) if len(diff) else math.nan,
    }


def part_msprobe(args: argparse.Namespace, tmp: Path) -> dict:
    """Part (b) at every ``--msprobe-hidden`` size."""
    print("== (b) msprobe dumps written by msprobe (mindstudio-probe) ==", flush=True)
    python = ensure_msprobe_venv()
    sizes = [int(h) for h in str(args.msprobe_hidden).split(",") if h.strip()]
    return {"b": [msprobe_one_size(args, python, tmp, hidden) for hidden in sizes]}


def summary(res: dict) -> None:
    """The final block: every figure of the run."""
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines = ["", "=================== bench/compare.py summary ===================="]
    from nbprec.compare.metrics import KERNEL

    lines.append(f"{os.cpu_count()} cores, load average {load}; numpy {np.__version__}; nbprec metric kernel {KERNEL}")
    if "a_ratio" in res:
        ok = "met" if res["a_ratio"] <= 2.5 else "MISSED"
        lines += [
            f"(a) synthetic nbprec-format pair: {res['a_tensors']} tensor pairs, {res['a_mb']:.0f} MB over both dumps",
            f"    plain read pass       {res['a_read_s']:7.2f} s  {res['a_mb'] / res['a_read_s']:7.0f} MB/s"
            f"  (CPU {res['a_read_cpu']:.2f} s)",
            f"    nbprec.compare        {res['a_compare_s']:7.2f} s  {res['a_mb'] / res['a_compare_s']:7.0f} MB/s"
            f"  (CPU {res['a_compare_cpu']:.2f} s, all threads and worker processes)",
            f"    compare / read        {res['a_ratio']:7.2f}   target <= 2.5: {ok}"
            f"  (CPU-time ratio {res['a_ratio_cpu']:.2f})",
            f"    peak RSS of compare   {res['a_peak_rss_mb']:7.0f} MB, largest worker {res['a_worker_rss_mb']:.0f} MB"
            f"  (before the call {res['a_base_rss_mb']:.0f} MB; "
            f"largest tensor pair {res['a_largest_pair_mb']:.0f} MB; dump {res['a_mb']:.0f} MB)",
            f"    {res['a_compared']}/{res['a_rows']} rows compared; first failing op: {res['a_first_failing']}",
        ]
    for b in res.get("b", []):
        ok = "met" if b["ratio"] >= 40 else "MISSED"
        lines += [
            f"(b) msprobe-written dumps (L1 tensor, bf16 vs fp32), hidden {b['hidden']}: {b['apis']} API calls per "
            f"run, {b['mb']:.0f} MB over both",
            f"    msprobe compare       {b['msprobe_s']:7.2f} s  {b['mb'] / b['msprobe_s']:7.1f} MB/s"
            f"  (median of {len(b['msprobe_all'])}; CLI process, its start-up alone {b['msprobe_startup_s']:.1f} s)",
            f"    nbprec.compare        {b['nbprec_s']:7.3f} s  {b['mb'] / b['nbprec_s']:7.1f} MB/s"
            f"  (median of {len(b['nbprec_all'])}, best {b['nbprec_best']:.3f} s; CPU {b['nbprec_cpu']:.2f} s)",
            f"    nbprec compare (CLI)  {b['cli_s']:7.2f} s  {b['mb'] / b['cli_s']:7.1f} MB/s"
            "  (whole process, tables written)",
            f"    msprobe / nbprec      {b['ratio']:7.1f}   target >= 40: {ok}",
            f"      CLI against CLI: {b['ratio_cli']:.1f}; msprobe without its start-up: {b['ratio_no_startup']:.1f}",
            f"    agreement: msprobe {b['ms_compared']}/{b['ms_rows']} rows with a cosine, nbprec "
            f"{b['nb_compared']}/{b['nb_rows']} compared; {b['matched']} names in both, "
            f"|cosine diff| median {b['cos_median']:.1e}, max {b['cos_max']:.1e}",
        ]
    lines.append("=================================================================")
    print("\n".join(lines), flush=True)


def compile_bytecode() -> None:
    """Byte-compile nbprec's modules, as a regular (not editable) pip install does at install time. msprobe's
    virtualenv has its bytecode; without this, an editable install run with PYTHONDONTWRITEBYTECODE set (as on
    CI machines) would recompile nbprec's lazily imported modules inside every timed call."""
    import compileall

    import nbprec

    compileall.compile_dir(Path(nbprec.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="synthetic payload over both dumps, GB")
    parser.add_argument("--tensors", type=int, default=10000, help="synthetic tensor pairs (at least)")
    parser.add_argument("--workers", type=int, default=None, help="nbprec.compare workers (default: its own)")
    parser.add_argument("--msprobe-layers", type=int, default=8, help="blocks of the msprobe model")
    parser.add_argument("--msprobe-hidden", default="512,1024", help="hidden sizes of the msprobe model, e.g. 1024")
    parser.add_argument("--runs", type=int, default=5, help="nbprec runs per msprobe pair (medians are compared)")
    parser.add_argument("--msprobe-runs", type=int, default=2, help="msprobe compare runs per pair")
    parser.add_argument("--skip-msprobe", action="store_true", help="skip part (b)")
    parser.add_argument("--skip-synthetic", action="store_true", help="skip part (a)")
    parser.add_argument("--keep", metavar="DIR", help="write the data under DIR and keep it")
    parser.add_argument("--verbose", action="store_true", help="show msprobe's own output")
    parser.add_argument("--child", nargs=3, metavar=("TARGET", "BENCH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(*args.child, args.workers)
        return

    compile_bytecode()
    results: dict = {}
    if args.keep:
        tmp = Path(args.keep)
        tmp.mkdir(parents=True, exist_ok=False)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="nbprec-bench-compare-"))
    try:
        if not args.skip_synthetic:
            a_dir = tmp / "synthetic"
            a_dir.mkdir()
            results.update(part_synthetic(args, a_dir))
            if not args.keep:
                shutil.rmtree(a_dir)
        if not args.skip_msprobe:
            b_dir = tmp / "msprobe_run"
            b_dir.mkdir()
            results.update(part_msprobe(args, b_dir))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        summary(results)


if __name__ == "__main__":
    main()
