"""Where the wall time of ``nbprec compare T B -o OUT`` goes: its phases, in milliseconds from launch.

The command runs in its own process (``NBPREC_DAEMON=off``), all its files written, ``--runs`` times. Each run
starts it through a few lines of Python that register an audit hook (``sys.addaudithook``) and then call the
console script's function (``nbprec.cli.run``), so the command itself is unchanged. The hook notes, in the
command's own process only (not its helpers), the wall clock of:

- ``interpreter ready``: the interpreter and ``site`` have started (what ``python -c pass`` pays);
- every ``fork``: the early worker (before the dumps are opened), then the measuring process and the child
  writing the interoperable CSVs;
- ``numpy import starts``, and ``numpy imported``: the first import of an nbprec module after it (numpy imports
  none, so this is when its import returned, or a little later);
- ``target dump opened``, ``benchmark dump opened``: the first file or folder of each side opened or listed once
  numpy is imported (by the readers: the look the command takes at the folders before, to choose its heap,
  ``nbprec.cli.compare_heap``, is not counted);
- ``first output file``: the first file opened under OUT;
- ``exit``: the command's ``os._exit``.

The times are those of the parent's clock at launch against the command's own clock (both ``time.time``), so
``interpreter ready`` includes starting the process. Each mark's median over the runs is printed with its range,
then the phases between consecutive marks, and the command's whole-process seconds as the parent timed them (the
hook's own cost included: a few microseconds an event).

Usage::

    .venv/bin/python bench/timeline.py TARGET BENCH [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import timing  # bench/timing.py

NBPREC_PYTHON = Path(sys.executable)
USER_ENV = dict(os.environ)
MARKER = "nbprec-timeline:"

#: What the command's process runs: the hook, then the console script. It writes its marks to stderr as one JSON
#: line after MARKER, just before the process ends.
WRAPPER = r"""
import os, sys, time, json
T0 = float(os.environ["NBPREC_TIMELINE_T0"])
OUT = os.path.abspath(os.environ["NBPREC_TIMELINE_OUT"])
SIDES = [("target dump opened", os.path.abspath(sys.argv[2])), ("benchmark dump opened", os.path.abspath(sys.argv[3]))]
MAIN = os.getpid()
marks = [["interpreter ready", time.time() - T0]]
state = {"numpy": False, "after": False, "out": False}

def inside(path, folder):
    return path == folder or path.startswith(folder + os.sep)

def hook(event, args):
    if os.getpid() != MAIN:
        return
    if event == "os.fork":
        marks.append(["fork", time.time() - T0])
    elif event == "import":
        name = args[0]
        if name == "numpy" and not state["numpy"]:
            state["numpy"] = True
            marks.append(["numpy import starts", time.time() - T0])
        elif state["numpy"] and not state["after"] and name.startswith("nbprec"):
            state["after"] = True
            marks.append(["numpy imported", time.time() - T0])
    elif event in ("open", "os.scandir", "os.listdir") and args and isinstance(args[0], str):
        path = os.path.abspath(args[0])
        if inside(path, OUT):
            if event == "open" and not state["out"]:
                state["out"] = True
                marks.append(["first output file", time.time() - T0])
            return
        for side in list(SIDES) if state["after"] else ():
            if inside(path, side[1]):
                SIDES.remove(side)
                marks.append([side[0], time.time() - T0])

sys.addaudithook(hook)
real_exit = os._exit

def exit_with_marks(status):
    if os.getpid() == MAIN:
        marks.append(["exit", time.time() - T0])
        sys.stderr.write("\n" + MARKER + json.dumps(marks) + "\n")
        sys.stderr.flush()
    real_exit(status)

os._exit = exit_with_marks
sys.argv = ["nbprec"] + sys.argv[1:]
from nbprec.cli import run
run()
""".replace("MARKER", repr(MARKER))


def one_run(target: str, bench: str, out: Path) -> tuple[float, list[tuple[str, float]]]:
    """Whole-process seconds of one command and its marks (name, seconds from launch), forks numbered."""
    env = {**USER_ENV, "NBPREC_DAEMON": "off", "NBPREC_TIMELINE_OUT": str(out)}
    cmd = [str(NBPREC_PYTHON), "-c", WRAPPER, "compare", target, bench, "-o", str(out), "--no-progress"]
    env["NBPREC_TIMELINE_T0"] = repr(time.time())
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    failed = done.returncode == 1 and "nbprec: error:" in done.stderr  # (1 alone: failing ops found)
    if failed or done.returncode not in (0, 1):
        raise SystemExit(f"nbprec compare failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    lines = [line for line in done.stderr.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise SystemExit(f"the command printed no timeline:\n{done.stderr[-2000:]}")
    marks, forks = [], 0
    for name, at in json.loads(lines[-1][len(MARKER) :]):
        if name == "fork":
            forks += 1
            name = f"fork {forks}"
        marks.append((name, at))
    return seconds, marks


def summary(runs: list[tuple[float, list[tuple[str, float]]]]) -> str:
    """Each mark's median and range over the runs (marks in the order of their medians), then the phases."""
    order: list[str] = []
    times: dict[str, list[float]] = {}
    for _, marks in runs:
        for name, at in marks:
            if name not in times:
                order.append(name)
                times[name] = []
            times[name].append(at)
    order.sort(key=lambda name: timing.median(times[name]))
    lines = [f"marks, ms from launch (medians of {len(runs)} runs; range):"]
    for name in order:
        values = [1e3 * v for v in times[name]]
        seen = "" if len(values) == len(runs) else f"  (in {len(values)} of {len(runs)} runs)"
        lines.append(f"  {name:<24} {timing.median(values):7.1f}   ({min(values):.1f} - {max(values):.1f}){seen}")
    lines.append("phases, ms (between the medians of consecutive marks):")
    previous, at_previous = "launch", 0.0
    for name in order:
        at = 1e3 * timing.median(times[name])
        lines.append(f"  {previous} -> {name}: {at - at_previous:.1f}")
        previous, at_previous = name, at
    walls = [1e3 * seconds for seconds, _ in runs]
    lines.append(
        f"whole process, the parent's clock: {timing.median(walls):.1f} ms (runs {' '.join(f'{w:.0f}' for w in walls)})"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="target dump")
    parser.add_argument("bench", help="benchmark dump")
    parser.add_argument("--runs", type=int, default=7, help="runs of the command (default 7); medians printed")
    args = parser.parse_args()
    timing.compile_tree()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(timing.machine())
    runs = []
    with tempfile.TemporaryDirectory(prefix="nbprec-timeline-") as tmp:
        out = Path(tmp) / "out"
        one_run(args.target, args.bench, out)  # warm-up: the page cache, the files' first creation
        for number in range(args.runs):
            seconds, marks = one_run(args.target, args.bench, out)
            runs.append((seconds, marks))
            print(f"run {number + 1}: {seconds * 1e3:.0f} ms; " + ", ".join(f"{n} {1e3 * t:.1f}" for n, t in marks))
    print(summary(runs))


if __name__ == "__main__":  # (the command sets OPENBLAS_NUM_THREADS itself: nbprec.cli.run)
    main()
