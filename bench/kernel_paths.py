"""Where the metric kernel's time goes on a real pair of dumps, by the way KL goes through each tensor.

KL's logarithm is most of the kernel's cost, and the kernel takes it two ways (``nbprec/compare/_fused.c``):
a short series for terms whose ratio is near 1 (``|kx - ky| / (kx + ky) <= 1/32``), with the few far terms
corrected afterwards, and ``log_ratio`` for every term of a block once more than 1/16 of the last block's terms
were far. Tensors that agree take the first way; tensors that diverged (a float16 or bfloat16 run's gradients,
say) take the second. This script says how much of the kernel's time each kind takes on a given pair:

- every matched pair of float tensors of both dumps with the same element count is read into memory first
  (``nbprec.open``, :meth:`nbprec.Dump.tensor`); pairs holding NaN or inf are counted apart (they take other
  loops) and not timed;
- each pair is put in a class by the share of its KL terms that are far from 1, worked out in numpy as the
  kernel forms them: ``near`` (at most 1/16 of them: the short series), ``far`` (more);
- :func:`nbprec.compare.metrics.tensor_metrics` (the compiled kernel, the pair's own extremes given, as the
  engine gives it the dumps' recorded ones) is timed on every pair, in-process, ``--runs`` rounds (each round
  every pair once, in a rotating order), median per pair.

Prints per class: pairs, element pairs, the kernel's seconds and share of the total, nanoseconds per element
pair, and the far class's nanoseconds per element pair over the near class's (both measured in the same run).
Then the ``--top`` pairs that take longest.

Usage::

    .venv/bin/python bench/kernel_paths.py TARGET BENCH [--runs 5] [--top 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import machine, median

import nbprec
from nbprec.compare.metrics import KERNEL, tensor_metrics

#: The kernel's NEAR (``_fused.c``): KL terms with ``|kx - ky| / (kx + ky)`` at most this take the short series.
NEAR = 1 / 32
#: The kernel's FAR_SHARE: a block with more far terms than this share sends the next one to ``log_ratio``.
FAR_SHARE = 1 / 16
FLOAT32_EPS = 2.0**-23
FLOAT_KINDS = ("float64", "float32", "float16", "bfloat16")


def far_share(x: np.ndarray, y: np.ndarray) -> float:
    """The share of the pair's KL terms whose ratio is far from 1, as the kernel forms them: each side less its
    minimum, floored at float32's epsilon times its span (finite sides only)."""
    xs, ys = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if xs.size == 0:
        return 0.0
    kx, ky = (_kl_values(v) for v in (xs, ys))
    return float(np.count_nonzero(np.abs(kx - ky) > NEAR * (kx + ky)) / xs.size)


def _kl_values(v: np.ndarray) -> np.ndarray:
    low, span = float(v.min()), float(v.max() - v.min())
    return np.maximum(v - low, FLOAT32_EPS * span) if span > 0 else np.maximum(v, FLOAT32_EPS)


def path_class(share: float) -> str:
    """``near`` or ``far``: the way most of a pair's blocks take through KL."""
    return "far" if share > FAR_SHARE else "near"


def load_pairs(target: str, bench: str) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], int, int]:
    """The float pairs of both dumps (same name, same element count), read into memory; and how many pairs hold
    NaN or inf and how many could not be read (both left out)."""
    t_dump, b_dump = nbprec.open(target), nbprec.open(bench)
    keys = ("step", "rank", "name")
    b_rows = b_dump.index
    b_at = {key: k for k, key in enumerate(zip(*(b_rows[c].tolist() for c in keys), strict=True))}
    t_rows = t_dump.index
    pairs, nonfinite, unread = [], 0, 0
    for k, (*key, dtype) in enumerate(zip(*(t_rows[c].tolist() for c in (*keys, "dtype")), strict=True)):
        b_pos = b_at.get(tuple(key))
        if b_pos is None or dtype not in FLOAT_KINDS:
            continue
        try:
            x = np.ascontiguousarray(t_dump.tensor(k)).ravel()
            y = np.ascontiguousarray(b_dump.tensor(b_pos)).ravel()
        except Exception:  # (a missing or unreadable payload: the comparison records why; here it is counted)
            unread += 1
            continue
        name = key[2]
        if x.size != y.size or x.size == 0 or y.dtype.name not in FLOAT_KINDS:
            continue
        if not (np.isfinite(x.astype(np.float64)).all() and np.isfinite(y.astype(np.float64)).all()):
            nonfinite += 1
            continue
        pairs.append((name, x, y))
    return pairs, nonfinite, unread


def time_pairs(pairs: list[tuple[str, np.ndarray, np.ndarray]], runs: int) -> list[float]:
    """The median seconds of ``tensor_metrics`` on each pair (its own extremes given), over ``runs`` rounds."""
    extremes = [_extremes(x, y) for _, x, y in pairs]
    times: list[list[float]] = [[] for _ in pairs]
    for r in range(runs):
        order = list(range(len(pairs)))
        shift = (r * len(order)) // runs if order else 0
        for k in order[shift:] + order[:shift]:
            _, x, y = pairs[k]
            start = time.perf_counter()
            tensor_metrics(x, y, kernel="c", extremes=extremes[k])
            times[k].append(time.perf_counter() - start)
    return [median(t) for t in times]


def _extremes(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(xs.min()), float(xs.max()), float(ys.min()), float(ys.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("bench")
    parser.add_argument("--runs", type=int, default=5, help="rounds (at least 5)")
    parser.add_argument("--top", type=int, default=10, help="pairs listed, longest first")
    args = parser.parse_args()
    if not KERNEL.startswith("c ("):
        raise SystemExit("nbprec.compare._fused is not built: nothing to time (make install)")
    runs = max(5, args.runs)
    pairs, nonfinite, unread = load_pairs(args.target, args.bench)
    if not pairs:
        raise SystemExit(f"no finite float pairs of the same element count in {args.target} and {args.bench}")
    shares = [far_share(x, y) for _, x, y in pairs]
    seconds = time_pairs(pairs, runs)
    print(f"machine: {machine()}; metric kernel {KERNEL}; medians of {runs} rounds, in-process")
    print(f"{len(pairs)} finite float pairs timed; left out: {nonfinite} holding NaN or inf, {unread} unreadable")
    total = sum(seconds)
    per_class: dict[str, list[float]] = {"near": [0, 0, 0.0], "far": [0, 0, 0.0]}
    for (_, x, _), share, s in zip(pairs, shares, seconds, strict=True):
        entry = per_class[path_class(share)]
        entry[0] += 1
        entry[1] += x.size
        entry[2] += s
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
        f"longest {min(args.top, len(pairs))} pairs (name, element pairs, share of far KL terms, ns per element pair):"
    )
    ranked = sorted(zip(pairs, shares, seconds, strict=True), key=lambda item: -item[2])
    for (name, x, _), share, s in ranked[: args.top]:
        print(f"  {name}  {x.size}  {share:.3f}  {s / x.size * 1e9:.2f}")


if __name__ == "__main__":
    main()
