"""Where the metric kernel's time goes on a real pair of dumps, by the way KL goes through each tensor.

KL's logarithm is most of the kernel's cost, and the kernel takes it two ways (``nbprec/compare/_fused.c``):
a short series for terms whose ratio is near 1 (``|kx - ky| / (kx + ky) <= 1/32``), with the few far terms
corrected afterwards, and ``log_ratio`` for every term of a block once more than 1/16 of the last block's terms
were far. Tensors that agree take the first way; tensors that diverged (a float16 or bfloat16 run's gradients,
say) take the second. This script says how much of the kernel's time each kind takes on a given pair:

- the matched pairs of float tensors of both dumps with the same element count are read into memory a batch at
  a time (``nbprec.open``, :meth:`nbprec.Dump.tensor`; ``--batch-mb`` of payload, 1 GB by default, so that a
  large dump is timed in bounded memory); pairs holding NaN or inf are counted apart (they take other loops)
  and not timed;
- each pair is put in a class by the share of its KL terms that are far from 1, worked out in numpy as the
  kernel forms them: ``near`` (at most 1/16 of them: the short series), ``far`` (more);
- :func:`nbprec.compare.metrics.tensor_metrics` (the compiled kernel, the pair's own extremes given, as the
  engine gives it the dumps' recorded ones) is timed on every pair, in-process, ``--runs`` rounds (each round
  every pair of the batch once, in a rotating order), median per pair.

Prints per class: pairs, element pairs, the kernel's seconds and share of the total, nanoseconds per element
pair, and the far class's nanoseconds per element pair over the near class's (both measured in the same run).
Then the ``--top`` pairs that take longest.

Usage::

    .venv/bin/python bench/kernel_paths.py TARGET BENCH [--runs 5] [--top 10] [--batch-mb 1024]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from timing import machine, median

import nbprec
from nbprec.compare._sums import kl_offset_floor
from nbprec.compare.metrics import KERNEL, tensor_metrics

#: The kernel's NEAR (``_fused_kernel.h``): KL terms with ``|kx - ky| / (kx + ky)`` at most this take the short series.
NEAR = 1 / 32
#: The kernel's FAR_SHARE: a block with more far terms than this share sends the next one to ``log_ratio``.
FAR_SHARE = 1 / 16
FLOAT_KINDS = ("float64", "float32", "float16", "bfloat16")


def far_share(x: np.ndarray, y: np.ndarray, extremes: tuple[float, float, float, float] | None = None) -> float:
    """The share of the pair's KL terms whose ratio is far from 1, as the kernel forms them: each side less its
    minimum, floored at float32's epsilon times its span (:func:`nbprec.compare._sums.kl_offset_floor`); finite
    sides only. ``extremes`` (target min, max, benchmark min, max), when the caller has them."""
    xs, ys = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if xs.size == 0:
        return 0.0
    lo_x, hi_x, lo_y, hi_y = extremes if extremes is not None else _extremes(xs, ys)
    kx, ky = _kl_values(xs, lo_x, hi_x), _kl_values(ys, lo_y, hi_y)
    return float(np.count_nonzero(np.abs(kx - ky) > NEAR * (kx + ky)) / xs.size)


def _kl_values(v: np.ndarray, low: float, high: float) -> np.ndarray:
    offset, floor = kl_offset_floor(low, high - low)
    return np.maximum(v - offset, floor)


def path_class(share: float) -> str:
    """``near`` or ``far``: the way most of a pair's blocks take through KL."""
    return "far" if share > FAR_SHARE else "near"


class Skipped:
    """Pairs left out: holding NaN or inf (they take other loops), or not readable."""

    def __init__(self) -> None:
        self.nonfinite = 0
        self.unread = 0


class Pair(NamedTuple):
    """A pair read for timing: its name, both arrays, their extremes and the share of its far KL terms."""

    name: str
    x: np.ndarray
    y: np.ndarray
    extremes: tuple[float, float, float, float]
    far_share: float


def pair_batches(target: str, bench: str, batch_bytes: int, skipped: Skipped) -> Iterator[list[Pair]]:
    """The finite float pairs of both dumps (same step, rank and name, same element count), read into memory a
    batch at a time: as many pairs as fit in ``batch_bytes`` of payload (a larger pair alone), so that a dump of
    tens of GB is timed in as little memory. Pairs left out are counted in ``skipped``."""
    t_dump, b_dump = nbprec.open(target), nbprec.open(bench)
    keys = ("step", "rank", "name")
    b_rows = b_dump.index
    b_at = {key: k for k, key in enumerate(zip(*(b_rows[c].tolist() for c in keys), strict=True))}
    t_rows = t_dump.index
    batch: list[Pair] = []
    held = 0
    for k, (*key, dtype) in enumerate(zip(*(t_rows[c].tolist() for c in (*keys, "dtype")), strict=True)):
        b_pos = b_at.get(tuple(key))
        if b_pos is None or dtype not in FLOAT_KINDS:
            continue
        try:
            x = np.ascontiguousarray(t_dump.tensor(k)).ravel()
            y = np.ascontiguousarray(b_dump.tensor(b_pos)).ravel()
        except Exception:  # (a missing or unreadable payload: the comparison records why; here it is counted)
            skipped.unread += 1
            continue
        if x.size != y.size or x.size == 0 or y.dtype.name not in FLOAT_KINDS:
            continue
        xs, ys = x.astype(np.float64), y.astype(np.float64)  # once: the finite check, extremes and share
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            skipped.nonfinite += 1
            continue
        extremes = _extremes(xs, ys)
        size = x.nbytes + y.nbytes
        if batch and held + size > batch_bytes:
            yield batch
            batch, held = [], 0
        batch.append(Pair(key[2], x, y, extremes, far_share(xs, ys, extremes)))
        held += size
    if batch:
        yield batch


def time_pairs(pairs: list[Pair], runs: int) -> list[float]:
    """The median seconds of ``tensor_metrics`` on each pair (its own extremes given), over ``runs`` rounds."""
    times: list[list[float]] = [[] for _ in pairs]
    for r in range(runs):
        order = list(range(len(pairs)))
        shift = (r * len(order)) // runs if order else 0
        for k in order[shift:] + order[:shift]:
            pair = pairs[k]
            start = time.perf_counter()
            tensor_metrics(pair.x, pair.y, kernel="c", extremes=pair.extremes)
            times[k].append(time.perf_counter() - start)
    return [median(t) for t in times]


def _extremes(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float, float]:
    return float(xs.min()), float(xs.max()), float(ys.min()), float(ys.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("bench")
    parser.add_argument("--runs", type=int, default=5, help="rounds (at least 5)")
    parser.add_argument("--top", type=int, default=10, help="pairs listed, longest first")
    parser.add_argument("--batch-mb", type=float, default=1024, help="payload held in memory at a time (MB)")
    args = parser.parse_args()
    if not KERNEL.startswith("c ("):
        raise SystemExit("nbprec.compare._fused is not built: nothing to time (make install)")
    runs = max(5, args.runs)
    skipped = Skipped()
    timed: list[tuple[str, int, float, float]] = []  # (name, element pairs, share of far terms, seconds)
    for batch in pair_batches(args.target, args.bench, int(args.batch_mb * 1e6), skipped):
        seconds = time_pairs(batch, runs)
        timed += [(p.name, p.x.size, p.far_share, t) for p, t in zip(batch, seconds, strict=True)]
    if not timed:
        raise SystemExit(f"no finite float pairs of the same element count in {args.target} and {args.bench}")
    print(f"machine: {machine()}; metric kernel {KERNEL}; medians of {runs} rounds, in-process")
    print(
        f"{len(timed)} finite float pairs timed; left out: {skipped.nonfinite} holding NaN or inf, "
        f"{skipped.unread} unreadable"
    )
    total = sum(t for *_, t in timed)
    per_class: dict[str, list[float]] = {"near": [0, 0, 0.0], "far": [0, 0, 0.0]}
    for _, size, share, t in timed:
        entry = per_class[path_class(share)]
        entry[0] += 1
        entry[1] += size
        entry[2] += t
    ns = {}
    for name, (count, elements, s) in per_class.items():
        ns[name] = s / elements * 1e9 if elements else float("nan")
        print(
            f"  {name:<5} {count:5d} pairs {elements / 1e6:9.2f} M element pairs  kernel {s:7.3f} s "
            f"({s / total:6.1%} of {total:.3f} s)  {ns[name]:6.2f} ns per element pair"
        )
    if per_class["near"][1] and per_class["far"][1]:
        print(f"  far / near, ns per element pair: {ns['far'] / ns['near']:.2f}")
    print(
        f"longest {min(args.top, len(timed))} pairs (name, element pairs, share of far KL terms, ns per element pair):"
    )
    for name, size, share, t in sorted(timed, key=lambda item: -item[3])[: args.top]:
        print(f"  {name}  {size}  {share:.3f}  {t / size * 1e9:.2f}")


if __name__ == "__main__":
    main()
