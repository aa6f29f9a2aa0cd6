"""Timing helpers shared by the scripts in ``bench/``: the plain-read baseline, children that time themselves,
interleaved runs and the machine description.

How the scripts time the two sides of a ratio (issue 21):

- **whole process**: the parent's wall clock around a child process, start-up and imports included (a command
  line against a command line, or a command line against a plain read in a fresh process);
- **in-process**: a child times its own call after its imports (an API call against an API call, or against
  the same child's plain read loop);
- the **plain read** baseline reads every file of both dumps from the page cache with 8 MiB ``readinto`` calls
  (what ``cat FILES > /dev/null`` does), in a child of the running interpreter (:data:`PLAIN_READ`).

Runs are interleaved (each round runs every side once, in a rotating order) and medians are compared. Before
timing, the scripts byte-compile the nbprec trees they time (:func:`compile_tree`), as ``make install`` and a
regular pip install do.

The scripts run as ``python bench/NAME.py``, so this module is imported as ``timing`` (``bench/`` is on
``sys.path``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# A child reading files plainly: the baseline. argv[1]: a JSON list of paths, or ``@FILE`` naming a file that
# lists one path a line (for thousands of files: one argv string is limited to 128 KiB). Prints ``RESULT`` and
# the JSON of its own read-loop time, the bytes read and its peak RSS.
PLAIN_READ = """
import json, resource, sys, time
arg = sys.argv[1]
names = open(arg[1:]).read().splitlines() if arg.startswith("@") else json.loads(arg)
start = time.perf_counter()
buf = bytearray(8 << 20)
total = 0
for name in names:
    with open(name, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "bytes": total,
      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def read_files(files: Sequence[str | Path], buf: bytearray | None = None) -> int:
    """The plain read in this process (for in-process ratios): every byte of ``files`` read with 8 MiB
    ``readinto`` calls, as :data:`PLAIN_READ` does; returns the bytes read."""
    view = memoryview(buf if buf is not None else bytearray(8 << 20))
    total = 0
    for name in files:
        with open(name, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


def child(code: str, *args: str, python: str | None = None, env: dict | None = None, cwd: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (``python``, default this one; in folder ``cwd``, default this one);
    return the JSON it printed after ``RESULT``, plus ``process_seconds``: the parent's wall time around the whole
    process."""
    cmd = [python or sys.executable, "-c", textwrap.dedent(code), *args]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    process_seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"a benchmark child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(lines[-1][len("RESULT ") :]), "process_seconds": process_seconds}


IMPORT_COSTS = """
import importlib, json, sys, time
out = {}
for name in sys.argv[1:]:
    start = time.perf_counter()
    module = importlib.import_module(name)
    out[name] = [time.perf_counter() - start, getattr(module, "__version__", "?")]
print("RESULT " + json.dumps(out))
"""


def import_costs(modules: Sequence[str], runs: int = 5) -> str:
    """What importing ``modules`` (in this order, each after the ones before) costs a fresh interpreter: the median
    of ``runs`` processes, as text ("numpy 2.4.6 62 ms, ..."). Start-up is most of a short command's time, and a
    dependency's new release can move it (ml_dtypes 0.7.0 took 0.7 s: bench/README.md)."""
    found = [child(IMPORT_COSTS, *modules) for _ in range(runs)]
    texts = []
    for name in modules:
        version = found[0][name][1]
        label = name if version == "?" else f"{name} {version}"
        texts.append(f"{label} {median([f[name][0] for f in found]) * 1e3:.0f} ms")
    return ", ".join(texts)


def plain_read(files: Sequence[str | Path]) -> dict:
    """Read ``files`` in a :data:`PLAIN_READ` child: ``seconds`` (its read loop) and ``process_seconds``
    (the whole child process, as ``cat``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("\n".join(str(f) for f in files))
    try:
        return child(PLAIN_READ, "@" + listing.name)
    finally:
        os.unlink(listing.name)


def whole_process(
    cmd: Sequence[str], ok: Sequence[int] = (0,), env: dict | None = None, cwd: str | Path | None = None
) -> float:
    """Wall seconds of the process ``cmd`` (output captured), run in ``cwd``; fails unless it exits with a status
    in ``ok``."""
    start = time.perf_counter()
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False, env=env, cwd=cwd)
    seconds = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"{cmd[0]} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds


def daemon_env(env: dict[str, str], prefix: str = "nbd-bench-") -> dict[str, str]:
    """``env`` for commands served by a command daemon of their own: ``NBPREC_DAEMON=on`` and a new socket folder
    under /tmp (short: a socket path holds 107 bytes at most). :func:`stop_daemon` removes it."""
    return {**env, "NBPREC_DAEMON": "on", "NBPREC_DAEMON_DIR": tempfile.mkdtemp(prefix=prefix, dir="/tmp")}


def wait_for_daemon(nbprec: list[str], env: dict[str, str], what: str, seconds: float = 60.0) -> None:
    """Wait until the daemon of ``env`` (started by a first command) answers ``nbprec daemon status``, run as the
    commands were (``nbprec``: the console script, or ``python -m nbprec``: the daemon serves one interpreter and
    ``sys.path``, which differ between the two)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = [*nbprec, "daemon", "status"]
        if subprocess.run(status, env=env, cwd="/", capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise SystemExit(f"the command daemon of {what} did not start")


def stop_daemon(nbprec: list[str], env: dict[str, str]) -> None:
    """Stop the daemon of ``env`` (``nbprec`` as for :func:`wait_for_daemon`) and remove its socket folder."""
    subprocess.run([*nbprec, "daemon", "stop"], env=env, cwd="/", capture_output=True, check=False)
    shutil.rmtree(env["NBPREC_DAEMON_DIR"], ignore_errors=True)


def interleave(runners: dict[str, Callable[[], float]], runs: int, label: str = "") -> dict[str, list[float]]:
    """``runs`` rounds; each round calls every runner once (the order rotates from round to round) and prints
    every time. Each runner returns its seconds."""
    names = list(runners)
    times: dict[str, list[float]] = {name: [] for name in names}
    for run in range(runs):
        shift = run % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(runners[name]())
        print(f"  {label}round {run + 1}: " + ", ".join(f"{n} {times[n][-1]:.3f} s" for n in names), flush=True)
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def compile_tree(root: str | Path | None = None) -> None:
    """Byte-compile the nbprec package under ``root`` (default: the one this interpreter imports), as ``make
    install`` and a regular pip install do. Without it, where ``PYTHONDONTWRITEBYTECODE`` is set (CI and the
    benchmark machines) and modules were edited since the last install, every timed process of an editable install
    would compile those modules from source as it starts: ``nbprec compare`` took 0.33 s on the 413 MB ``L1``
    pair of ``bench/README.md`` with none compiled, against 0.23 s."""
    import compileall

    if root is None:
        import nbprec

        package = Path(nbprec.__file__).parent
    else:
        package = Path(root) / "nbprec"
    compileall.compile_dir(package, quiet=1)


def runs_text(values: Sequence[float]) -> str:
    """Every run's seconds, for the summary lines."""
    return " ".join(f"{v:.3f}" for v in values)


def cpu_text(cpuinfo: str) -> str:
    """The CPU as /proc/cpuinfo's text ``cpuinfo`` names it: its model name, then, where the file gives them, its
    family and model numbers and its widest vector instructions, e.g. ``AMD EPYC (family 25 model 17, AVX-512)``.
    A model name alone does not tell machines apart: ``AMD EPYC`` is a Zen 3 without AVX-512 (family 25 model 1)
    or a Zen 4 with it (model 17), and ``Intel(R) Xeon(R) Processor`` an Ice Lake (family 6 model 106) or a later
    one (model 207); the figures of bench/README.md differ between them by up to 2x."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or "?"
    details = []
    if fields.get("cpu family") and fields.get("model"):
        details.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = set((fields.get("flags") or fields.get("Features") or "").split())  # (Features: on Arm)
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "NEON" if "asimd" in flags else ""
    if vector:
        details.append(vector)
    return f"{name} ({', '.join(details)})" if details else name


def machine() -> str:
    """nproc, the CPU (:func:`cpu_text`), RAM and the load average now: the machine a figure was measured on."""
    model = platform.processor() or "?"
    ram = "?"
    try:
        model = cpu_text(Path("/proc/cpuinfo").read_text())
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.0f} GiB"
                break
    except OSError:
        pass
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return f"{os.cpu_count()} cores, {model}, {ram} RAM, load average {load}"
