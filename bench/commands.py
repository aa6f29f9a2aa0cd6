"""How long the commands make a user wait: ``nbprec report``, ``nbprec serve`` and ``nbprec compare``, whole
processes.

- ``nbprec report T B -o OUT.html``: the wall clock of the command (the report notebook built, executed in a
  kernel and exported);
- ``nbprec serve T B``: from the command's start to its URL line (Voila accepts connections), and to its
  ``dashboard ready`` line (the dashboard built in Voila's preheated kernel, so that the page opens at once).

- ``nbprec compare T B -o OUT`` (with ``--compare T B``): the comparison command in its own process
  (``NBPREC_DAEMON=off``: no command daemon), all its files written: into a new folder each run, or with
  ``--same-output`` into the same folder each run, over the files of the run before (as a user re-running the
  command, and as ``bench/compare.py`` runs it).

- with ``--served`` too: the same command as a user's next one runs it, the client of a command daemon
  (``nbprec.cli.daemon``) each side's first run starts (in a socket folder of its own; stopped at the end): the
  client's wall clock, which ends when the process forked from the daemon has written every file.

- with ``--in-process`` too: ``nbprec.compare(T, B)`` called in a fresh process of each side, which imports the
  modules the call uses and waits 0.5 s (as ``bench/timing.py`` describes) before it times its own call; a
  ``--baseline-env`` variable is set in the baseline's process (``NBPREC_EARLY=off``: the call without the early
  worker it starts).

- with ``--quick DUMP``: the commands a user expects at once, each in its own process (no command daemon):
  ``nbprec --version``, ``nbprec --help``, ``nbprec info DUMP`` and ``nbprec overflow DUMP``, and beside them the
  interpreter's own start (``python -c pass``, the floor every command pays), all interleaved in the same rounds.

- with ``--overflow DUMP``: ``nbprec overflow DUMP`` in its own process (no daemon; every payload read and
  scanned), beside a plain read of the dump's files in a process of its own (``timing.plain_read``: what ``cat``
  does), interleaved; with ``--headroom`` too, ``nbprec overflow DUMP --headroom`` (every payload read twice: the
  scan, then the headroom of every dtype) in the same rounds.

For report and serve, T and B are the demo's tiny encoder runs (bfloat16 with the planted faulty GELU, float32;
``nbprec demo``'s, made here with torch). ``--baseline DIR`` (another nbprec tree: a checkout with its
extensions built) runs the same commands from there (``PYTHONPATH=DIR``), interleaved round by round with this
tree (``timing.interleave``: the comparisons first, then the reports, then the servers); medians of
``--repeat`` rounds and the median of the paired ratios are printed. ``--baseline-env NAME=VALUE`` sets a
variable for the baseline's commands only; without ``--baseline`` the baseline is this tree, so that one setting
is timed against the default (``--baseline-env NBPREC_EARLY=off``: the command without its early worker).

Usage::

    .venv/bin/python bench/commands.py [--repeat 6] [--baseline DIR] [--baseline-env NAME=VALUE] [--compare T B]
        [--compare-only] [--same-output] [--served] [--in-process] [--quick DUMP] [--quick-only]
        [--overflow DUMP [--headroom]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import timing  # bench/timing.py

ROOT = Path(__file__).resolve().parents[1]


class Side(NamedTuple):
    """One side of the comparison: an nbprec tree, and variables set for its commands only."""

    tree: Path
    env: dict[str, str]


def _env(side: Side) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(side.tree), **side.env}


#: Where the commands run: ``python -m`` puts its working folder first on ``sys.path``, so a run in a checkout
#: would import that checkout's nbprec whatever ``PYTHONPATH`` says.
NEUTRAL = "/"


#: The command as the benchmark runs it (from NEUTRAL): a command daemon serves that interpreter and ``sys.path``.
NBPREC = [sys.executable, "-m", "nbprec"]


def report_seconds(tree: Side, target: Path, bench: Path, out: Path) -> float:
    """Wall seconds of ``nbprec report`` run from ``tree``."""
    cmd = [*NBPREC, "report", str(target), str(bench), "-o", str(out)]
    return timing.whole_process(cmd, env=_env(tree), cwd=NEUTRAL)


def compare_seconds(env: dict[str, str], target: Path, bench: Path, out: Path) -> float:
    """Wall seconds of ``nbprec compare T B -o OUT`` with ``env``: :func:`own_process_env`'s (no command daemon),
    or a daemon's (:class:`Daemons`: the client's wall clock, which ends when the served process has written
    every file)."""
    cmd = [*NBPREC, "compare", str(target), str(bench), "-o", str(out), "--no-progress"]
    return timing.whole_process(cmd, ok=(0, 1), env=env, cwd=NEUTRAL)  # 1: failing ops found


def own_process_env(tree: Side) -> dict[str, str]:
    """``tree``'s variables for a command in its own process (no command daemon)."""
    return {**_env(tree), "NBPREC_DAEMON": "off"}


class Daemons:
    """A command daemon per side for ``--served``, each in a socket folder of its own (``timing.daemon_env``),
    started by a first run of the command and stopped (its folder removed) by :meth:`close`."""

    def __init__(self) -> None:
        self.envs: dict[str, dict[str, str]] = {}

    def start(self, name: str, side: Side, target: Path, bench: Path, out: Path) -> None:
        env = self.envs[name] = timing.daemon_env(_env(side), prefix="nbd-cmd-")
        compare_seconds(env, target, bench, out)
        timing.wait_for_daemon(NBPREC, env, name)

    def close(self) -> None:
        for env in self.envs.values():
            timing.stop_daemon(NBPREC, env)
        self.envs.clear()


#: ``--in-process``: a child that imports what ``nbprec.compare`` uses, lets the imports' background work end, and
#: times its own call.
_CALL = """
import json, sys, time
import nbprec
import nbprec.compare.engine  # (nbprec.compare's modules load on first use: before the clock)
time.sleep(0.5)
start = time.perf_counter()
nbprec.compare(sys.argv[1], sys.argv[2])
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start}))
"""


def call_seconds(side: Side, target: Path, bench: Path) -> float:
    """Seconds of ``nbprec.compare(T, B)`` in a fresh process of ``side``, after its imports (run from NEUTRAL)."""
    return timing.child(_CALL, str(target), str(bench), env=_env(side), cwd=NEUTRAL)["seconds"]


#: The quick commands of ``--quick`` (DUMP stands for the dump given), each run as ``python -m nbprec ...``.
QUICK = {
    "--version": ["--version"],
    "--help": ["--help"],
    "info": ["info", "DUMP"],
    "overflow": ["overflow", "DUMP", "--no-payload"],
}


def quick_seconds(tree: Side | None, arguments: list[str], dump: Path) -> float:
    """Wall seconds of ``nbprec ARGUMENTS`` run from ``tree`` in its own process (no command daemon); with
    ``tree`` None, of ``python -c pass``."""
    if tree is None:
        return timing.whole_process([sys.executable, "-c", "pass"], cwd=NEUTRAL)
    cmd = [*NBPREC, *(str(dump) if a == "DUMP" else a for a in arguments)]
    return timing.whole_process(cmd, env={**_env(tree), "NBPREC_DAEMON": "off"}, cwd=NEUTRAL)


def serve_seconds(tree: Side, target: Path, bench: Path) -> tuple[float, float]:
    """Seconds from ``nbprec serve``'s start (run from ``tree``) to its URL line and to ``dashboard ready``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*NBPREC, "serve", str(target), str(bench)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(tree), cwd=NEUTRAL,
    )  # fmt: skip
    try:
        lines = [proc.stdout.readline()]
        url = time.perf_counter() - start
        while "dashboard ready" not in lines[-1]:
            lines.append(proc.stdout.readline())
            if not lines[-1]:
                raise SystemExit("nbprec serve ended before the dashboard was ready:\n" + "".join(lines))
        return url, time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=6, help="interleaved rounds (medians; at least 5)")
    parser.add_argument("--baseline", type=Path, help="another nbprec tree, timed interleaved with this one")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("T", "B"), help="also time nbprec compare T B")
    parser.add_argument("--compare-only", action="store_true", help="with --compare: time nothing else")
    parser.add_argument(
        "--same-output", action="store_true", help="with --compare: each tree writes into one folder, run after run"
    )
    parser.add_argument(
        "--served", action="store_true", help="with --compare: also as the client of a command daemon per side"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="with --compare: also nbprec.compare(T, B) in a fresh process"
    )
    parser.add_argument("--quick", type=Path, metavar="DUMP", help="also time --version, --help, info and overflow")
    parser.add_argument("--quick-only", action="store_true", help="with --quick: nothing else but --overflow")
    parser.add_argument("--overflow", type=Path, metavar="DUMP", help="also time nbprec overflow DUMP")
    parser.add_argument("--headroom", action="store_true", help="with --overflow: also nbprec overflow DUMP --headroom")
    parser.add_argument(
        "--baseline-env", action="append", default=[], metavar="NAME=VALUE", help="a variable for the baseline only"
    )
    args = parser.parse_args()
    if args.headroom and not args.overflow:
        parser.error("--headroom times nbprec overflow D --headroom: give the dump with --overflow D")
    bad = [item for item in args.baseline_env if "=" not in item or item.startswith("=")]
    if bad:
        parser.error(f"--baseline-env takes NAME=VALUE (NBPREC_EARLY=off, say), not {bad[0]!r}")
    trees = {"this tree": Side(ROOT, {})}
    if args.baseline is not None or args.baseline_env:
        path = args.baseline.resolve() if args.baseline is not None else ROOT
        trees["baseline"] = Side(path, dict(item.split("=", 1) for item in args.baseline_env))
    for side in trees.values():
        timing.compile_tree(side.tree)
    rounds = max(args.repeat, 5)
    times: dict[str, dict[str, list[float]]] = {n: {} for n in trees}
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            args.quick = args.quick.resolve()  # (the commands run in NEUTRAL)
            runners: dict[str, Callable[[], float]] = {"python -c pass": lambda: quick_seconds(None, [], args.quick)}
            for n, t in trees.items():
                for key, arguments in QUICK.items():
                    runners[f"{key} ({n})"] = lambda t=t, a=arguments: quick_seconds(t, a, args.quick)
            quick = timing.interleave(runners, rounds, "quick commands, ")
            for n in trees:
                times[n].update({f"quick {key}": quick[f"{key} ({n})"] for key in QUICK})
            print(f"\n  python -c pass (the interpreter's start) {timing.median(quick['python -c pass']):.3f} s")
        if args.overflow:
            _overflow_command(trees, args.overflow.resolve(), rounds, times, args.headroom)
        if args.compare and not args.quick_only:
            outs = iter(range(1 << 30))

            def folder(name: str) -> Path:  # a new one each run, or the tree's own
                return Path(tmp) / (f"compare {name}" if args.same_output else f"compare{next(outs)}")

            compared = timing.interleave(
                {n: lambda n=n, t=t: compare_seconds(own_process_env(t), *args.compare, folder(n))
                 for n, t in trees.items()},
                rounds, "nbprec compare, ")  # fmt: skip
            for n in trees:
                times[n]["compare"] = compared[n]
            if args.in_process:
                called = timing.interleave(
                    {n: lambda t=t: call_seconds(t, *args.compare) for n, t in trees.items()},
                    rounds, "nbprec.compare, ")  # fmt: skip
                for n in trees:
                    times[n]["call"] = called[n]
            if args.served:
                daemons = Daemons()
                try:
                    for n, t in trees.items():
                        daemons.start(n, t, *args.compare, folder(n))
                    served = timing.interleave(
                        {n: lambda n=n: compare_seconds(daemons.envs[n], *args.compare, folder(n)) for n in trees},
                        rounds, "nbprec compare, served, ")  # fmt: skip
                finally:
                    daemons.close()
                for n in trees:
                    times[n]["served"] = served[n]
        if not (args.compare_only or args.quick_only):
            _notebook_commands(trees, rounds, Path(tmp), times)
    names = list(trees)
    print(f"\nmachine: {timing.machine()}")
    labels = {"compare": "nbprec compare -o OUT (own process)", "served": "nbprec compare -o OUT (daemon client)",
              "call": "nbprec.compare(T, B) (in-process)",
              "report": "nbprec report (whole command)",
              "url": "nbprec serve to its URL", "ready": "nbprec serve to dashboard ready",
              "overflow": "nbprec overflow D (payloads read)", "headroom": "nbprec overflow D --headroom",
              **{f"quick {k}": f"nbprec {' '.join(a).replace('DUMP', 'D')}" for k, a in QUICK.items()}}  # fmt: skip
    for key, label in labels.items():
        if key not in times[names[0]]:
            continue
        line = "; ".join(f"{n} {timing.median(times[n][key]):.3f} s" for n in names)
        if len(names) == 2:
            pairs = [a / b for a, b in zip(times[names[0]][key], times[names[1]][key], strict=True)]
            line += f" (paired ratio {statistics.median(pairs):.3f})"
        print(f"  {label:36s} {line}   runs: " + " | ".join(timing.runs_text(times[n][key]) for n in names))


def _overflow_command(
    trees: dict[str, Side], dump: Path, rounds: int, times: dict[str, dict[str, list[float]]], headroom: bool
) -> None:
    """Time ``nbprec overflow DUMP`` (and with ``headroom``, ``nbprec overflow DUMP --headroom``) from each tree
    and a plain read of the dump's files, interleaved, into ``times``; print the plain read's median and each
    tree's ratio to it."""
    files = [f for f in sorted(dump.rglob("*")) if f.is_file()]
    timing.plain_read(files)  # warm-up: the page cache holds the dump from here on
    runners: dict[str, Callable[[], float]] = {"plain read": lambda: timing.plain_read(files)["process_seconds"]}
    for n, t in trees.items():
        runners[f"overflow ({n})"] = lambda t=t: quick_seconds(t, ["overflow", "DUMP"], dump)
        if headroom:
            runners[f"headroom ({n})"] = lambda t=t: quick_seconds(t, ["overflow", "DUMP", "--headroom"], dump)
    got = timing.interleave(runners, rounds, "nbprec overflow DUMP, ")
    read = timing.median(got["plain read"])
    ratios = ", ".join(f"{n} {timing.median(got[f'overflow ({n})']) / read:.2f}x" for n in trees)
    size = sum(f.stat().st_size for f in files) / 1e6
    print(f"\n  a plain read of the dump's {len(files)} files ({size:.0f} MB, own process) {read:.3f} s; "
          f"nbprec overflow against it: {ratios}")  # fmt: skip
    for n in trees:
        times[n]["overflow"] = got[f"overflow ({n})"]
        if headroom:
            times[n]["headroom"] = got[f"headroom ({n})"]


def _notebook_commands(
    trees: dict[str, Side], rounds: int, tmp: Path, times: dict[str, dict[str, list[float]]]
) -> None:
    """Time ``nbprec report`` and ``nbprec serve`` from each tree on the demo's tiny runs, into ``times``."""
    from nbprec.demo import tiny_runs

    runs = {r.name: r.path for r in tiny_runs(tmp / "runs")}
    target, bench = runs["tiny_bf16_faulty"], runs["tiny_fp32"]
    reports = iter(range(1 << 30))
    report = timing.interleave(
        {n: lambda t=t: report_seconds(t, target, bench, tmp / f"{next(reports)}.html")
         for n, t in trees.items()}, rounds, "nbprec report, ")  # fmt: skip
    urls: dict[str, list[float]] = {n: [] for n in trees}

    def serve_runner(name: str) -> Callable[[], float]:
        def run() -> float:  # returns the seconds to "dashboard ready", keeps those to the URL
            url, ready = serve_seconds(trees[name], target, bench)
            urls[name].append(url)
            return ready

        return run

    ready = timing.interleave({n: serve_runner(n) for n in trees}, rounds, "nbprec serve to ready, ")
    for n in trees:
        times[n].update(report=report[n], url=urls[n], ready=ready[n])


if __name__ == "__main__":
    main()
