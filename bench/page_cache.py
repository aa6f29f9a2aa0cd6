"""How long ``nbprec.compare`` takes when part of the dumps is not in the page cache.

A dump read a minute ago is rarely all in the page cache: memory pressure, or a kernel that pages idle cache out
(this machine class runs DAMON's ``pageout`` scheme), leaves pages of many payload files on the disk only. This
benchmark makes such holes itself, the same ones for every side of a round: before each timed call it reads every
payload file of both dumps (all in the page cache), then drops a seeded choice of them with
``posix_fadvise(DONTNEED)``: whole files (``--pages 0``) or ``--pages`` single pages of each chosen file
(``--drop``: the share of files chosen). ``--drop 0`` times the fully cached dumps.

Each side is a fresh interpreter that imports nbprec (this tree, or ``--baseline DIR``: another tree, its
extensions built), waits 0.5 s, and times its own ``nbprec.compare(T, B)`` (in-process against in-process); it
also reports the blocks its call read from the disk. ``--parallel threads`` times the call on threads (as in a
notebook) instead of forked processes. Sides are interleaved round by round (``timing.interleave``), medians of
``--runs`` rounds and the median of the paired ratios are printed.

Usage::

    .venv/bin/python bench/page_cache.py --dumps T B [--baseline DIR] [--drop 0.1] [--pages 0] [--runs 9]
        [--parallel processes|threads]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path

import timing  # bench/timing.py

ROOT = Path(__file__).resolve().parents[1]
SETTLE_SECONDS = 0.5

#: A side: nbprec imported (from the tree on PYTHONPATH), its call timed, the disk blocks it read reported.
_CALL = """
import json, resource, sys, time
import nbprec, nbprec.compare.engine, nbprec.formats.msprobe, nbprec.formats.native_read
time.sleep(float(sys.argv[4]))
def blocks():
    return sum(resource.getrusage(who).ru_inblock for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
before = blocks()
start = time.perf_counter()
nbprec.compare(sys.argv[1], sys.argv[2], parallel=sys.argv[3])
seconds = time.perf_counter() - start
print("RESULT " + json.dumps({"seconds": seconds, "blocks": blocks() - before, "file": nbprec.__file__}))
"""


def payload_files(*dumps: str) -> list[str]:
    """Every payload file of the dumps (msprobe's ``.pt``, nbprec's ``.npy``), in a fixed order."""
    return sorted(
        os.path.join(folder, name)
        for dump in dumps
        for folder, _, names in os.walk(dump)
        for name in names
        if name.endswith((".pt", ".npy"))
    )


def make_holes(files: list[str], share: float, pages: int, seed: int) -> None:
    """Read every file (all in the page cache), then drop ``share`` of them (whole, or ``pages`` single pages
    of each), chosen by ``seed``."""
    timing.read_files(files)
    rng = random.Random(seed)
    for path in files:
        if rng.random() >= share:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if pages <= 0:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                count = max(os.fstat(fd).st_size // 4096, 1)
                for _ in range(pages):
                    os.posix_fadvise(fd, rng.randrange(count) * 4096, 4096, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs=2, required=True, metavar=("TARGET", "BENCH"))
    parser.add_argument("--baseline", type=Path, help="another nbprec tree (its extensions built)")
    parser.add_argument("--drop", type=float, default=0.1, help="share of the payload files dropped (0: none)")
    parser.add_argument("--pages", type=int, default=0, help="pages dropped per chosen file (0: the whole file)")
    parser.add_argument("--runs", type=int, default=9, help="interleaved rounds (medians; at least 5)")
    parser.add_argument("--parallel", choices=("processes", "threads"), default="processes")
    args = parser.parse_args()
    timing.compile_tree()
    args.runs = max(5, args.runs)
    target, bench = args.dumps
    files = payload_files(target, bench)
    if not files:
        raise SystemExit(f"no .pt or .npy payload files under {target} or {bench}")
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    blocks: dict[str, list[int]] = {name: [] for name in trees}
    calls = [0]  # sides timed so far: the round is calls // len(trees)

    def side(name: str, tree: Path):
        def run() -> float:
            make_holes(files, args.drop, args.pages, seed=calls[0] // len(trees))  # the same for a round's sides
            calls[0] += 1
            env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}  # (not the working folder first)
            found = timing.child(_CALL, target, bench, args.parallel, str(SETTLE_SECONDS), env=env)
            if not found["file"].startswith(str(tree)):
                raise SystemExit(f"{name}: imported {found['file']}, not the tree {tree}")
            blocks[name].append(found["blocks"])
            return found["seconds"]

        return run

    holes = f"{args.drop:.0%} of the files dropped" + (f", {args.pages} pages each" if args.pages > 0 else " whole")
    print(f"{len(files)} payload files; {holes if args.drop > 0 else 'all in the page cache'}; {args.parallel}")
    times = timing.interleave({name: side(name, tree) for name, tree in trees.items()}, args.runs)
    print(f"\nmachine: {timing.machine()}")
    print(f"nbprec.compare, {args.parallel}, {holes if args.drop > 0 else 'all cached'}: medians of {args.runs}")
    for name, values in times.items():
        read = statistics.median(blocks[name]) * 512 / 1e6
        print(f"  {name:<10} {timing.median(values):.3f} s  (runs {timing.runs_text(values)}; {read:.1f} MB from disk)")
    if "baseline" in times:
        paired = statistics.median(a / b for a, b in zip(times["this tree"], times["baseline"], strict=True))
        print(f"  this tree / baseline {paired:.3f} (paired)")


if __name__ == "__main__":
    sys.exit(main())
