"""Which (step, rank)s each side of a comparison holds, and what one side lacks.

A dump of a distributed run holds one op stream per (step, rank) (msprobe's ``step{N}/rank{M}`` folders,
nbprec's ``step``/``rank`` columns); :mod:`nbprec.compare.runs` says what happened in each.

**Presence.** A (step, rank) with target tensors is in the target; one with matched or unmatched benchmark
tensors is in the benchmark. When each side holds a single step (or rank) under different labels, matching
pairs them anyway (see :mod:`nbprec.compare.matching`); :func:`presence` then counts them as one, unless the
benchmark tensors left unmatched under the other label are as many as half the matched ones (a whole stream
of its own). A (step, rank) on one side only is reported by the verdict as ``missing_rank`` or
``missing_step`` (from :func:`missing_by_kind`), not as rows without a counterpart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, distinct
from nbprec.compare.rules import column

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

BOTH, TARGET_ONLY, BENCH_ONLY = "both", "target only", "benchmark only"
KEYS = ["step", "rank"]


def _keys(steps: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(step, rank) pairs as rows of an int64 array."""
    return np.stack([np.asarray(steps, np.int64), np.asarray(ranks, np.int64)], axis=1).reshape(-1, 2)


def _counts(steps: np.ndarray, ranks: np.ndarray) -> dict[tuple[int, int], int]:
    """How many rows each (step, rank) holds."""
    if not len(steps):
        return {}
    keys = _keys(steps, ranks)
    low, high = keys.min(axis=0), keys.max(axis=0)
    span = [int(h) - int(lo) + 1 for lo, h in zip(low.tolist(), high.tolist(), strict=True)]
    if span[0] * span[1] >= 1 << 62:  # (steps and ranks far apart: rows as keys, a slower sort)
        found, counts = np.unique(keys, axis=0, return_counts=True)
        return {(int(k[0]), int(k[1])): int(c) for k, c in zip(found, counts, strict=True)}
    # each (step, rank) as one integer, in the same order (np.unique's axis=0 sorts rows as records: 5 ms for
    # ten thousand rows, this a tenth of it)
    packed = (keys[:, 0] - low[0]) * span[1] + (keys[:, 1] - low[1])
    codes, counts = np.unique(packed, return_counts=True)
    steps_of, ranks_of = (codes // span[1] + low[0]).tolist(), (codes % span[1] + low[1]).tolist()
    return {(s, r): int(c) for s, r, c in zip(steps_of, ranks_of, counts.tolist(), strict=True)}


def presence(comp: Comparison) -> Columns:
    """Each (step, rank) either side holds, sorted: ``step``, ``rank``, ``target`` and ``bench`` tensor counts and
    ``presence`` (:class:`~nbprec.columns.Columns`).

    Rule-independent (kept by the comparison and its re-judged copies; do not modify it). Benchmark tensors
    count in the (step, rank) of their target counterpart when matched, in their own when unmatched (see the
    module docstring for single-step dumps under different labels).
    """
    cached = getattr(comp, "_presence", None)
    if cached is None:
        cached = comp._presence = _presence(comp)
    return cached


def _presence(comp: Comparison) -> Columns:
    table = comp._cols
    step, rank = column(table, "step"), column(table, "rank")
    matched = column(table, "bench_name", object) != "" if "bench_name" in table else np.zeros(len(table), bool)
    u_step, u_rank = _relabelled(table, int(matched.sum()), comp._unmatched)
    target = _counts(step, rank)
    bench = _counts(step[matched], rank[matched])
    for key, count in _counts(u_step, u_rank).items():
        bench[key] = bench.get(key, 0) + count
    keys = sorted(set(target) | set(bench))
    t_count = np.array([target.get(k, 0) for k in keys], dtype=np.int64)
    b_count = np.array([bench.get(k, 0) for k in keys], dtype=np.int64)
    return Columns(
        {
            "step": np.array([k[0] for k in keys], dtype=np.int64),
            "rank": np.array([k[1] for k in keys], dtype=np.int64),
            "target": t_count,
            "bench": b_count,
            "presence": np.where(t_count == 0, BENCH_ONLY, np.where(b_count == 0, TARGET_ONLY, BOTH)).astype(object),
        },
        len(keys),
    )


def _relabelled(table: Columns, n_matched: int, unmatched: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Steps and ranks of the unmatched benchmark rows, a single step (rank) relabelled to the target's single one
    when matching did the same (each side has one value, and the leftovers are not a whole stream of their
    own), or when the benchmark labels none (-1: a TensorFlow dump has no steps or ranks)."""
    if unmatched.empty or "step" not in unmatched or "rank" not in unmatched:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    out = []
    for name in KEYS:
        values = column(unmatched, name, np.int64)
        t_vals, b_vals = distinct(column(table, name)), distinct(values)
        single = len(t_vals) == 1 and len(b_vals) == 1 and t_vals[0] != b_vals[0]
        if single and ((n_matched and len(unmatched) < 0.5 * n_matched) or b_vals[0] == -1):
            values = np.full(len(values), t_vals[0], dtype=np.int64)
        out.append(values)
    return out[0], out[1]


class Missing(Record):
    """What one side lacks: ``code`` ``missing_rank`` or ``missing_step``, the side that holds it, the values."""

    code: str
    side: str
    values: tuple[int, ...]
    steps: tuple[int, ...]
    tensors: int

    def message(self) -> str:
        what = "rank" if self.code == "missing_rank" else "step"
        names = ", ".join(str(v) for v in self.values)
        label = f"{what}s {names}" if len(self.values) > 1 else f"{what} {names}"
        at = ""
        if self.code == "missing_rank" and self.steps:
            at = " at step" + ("s " if len(self.steps) > 1 else " ") + ", ".join(str(s) for s in self.steps)
        other = "benchmark" if self.side == TARGET_ONLY else "target"
        verb = "is" if len(self.values) == 1 else "are"
        return (
            f"{label.capitalize()}{at} {verb} in the {self.side.replace(' only', '')} only ({self.tensors} tensors): "
            f"the {other} has no {what} {names}{at}, so nothing there was compared."
        )


def missing_by_kind(comp: Comparison) -> list[Missing]:
    """The one-sided (step, rank)s grouped as whole ranks, whole steps, then single (step, rank)s.

    A rank is *missing* when a side has none of its steps while holding other ranks; a step likewise; what is
    left (a rank absent at some steps only) is reported per rank with its steps.
    """
    p = presence(comp)
    if p.empty or _unlabelled(p):
        return []
    labelled = (p["step"] != -1) & (p["rank"] != -1)  # (-1: a dump that labels none cannot lack one)
    p = p.take(np.flatnonzero(labelled)) if not labelled.all() else p
    out: list[Missing] = []
    step, rank, kind = p["step"], p["rank"], p["presence"]
    for side, count in ((TARGET_ONLY, "target"), (BENCH_ONLY, "bench")):
        other = "bench" if count == "target" else "target"
        lacking = kind == side
        if not lacking.any():
            continue
        held = p[other] > 0
        whole_ranks = sorted(set(rank[lacking].tolist()) - set(rank[held].tolist()))
        whole_steps = sorted(set(step[lacking].tolist()) - set(step[held].tolist()))
        in_ranks, in_steps = np.isin(rank, whole_ranks), np.isin(step, whole_steps)
        if whole_ranks:
            rows = lacking & in_ranks
            out.append(Missing("missing_rank", side, tuple(whole_ranks), (), int(p[count][rows].sum())))
        if whole_steps:
            rows = lacking & in_steps & ~in_ranks
            out.append(Missing("missing_step", side, tuple(whole_steps), (), int(p[count][rows].sum())))
        rest = lacking & ~in_ranks & ~in_steps
        for one in sorted(set(rank[rest].tolist())):
            rows = rest & (rank == one)
            steps = tuple(int(s) for s in sorted(step[rows].tolist()))
            out.append(Missing("missing_rank", side, (int(one),), steps, int(p[count][rows].sum())))
    return out


def _unlabelled(p: Columns) -> bool:
    """A side without step/rank labels (-1 throughout) cannot lack one."""
    for side in ("target", "bench"):
        held = p[side] > 0
        if held.any() and (p["step"][held] == -1).all() and (p["rank"][held] == -1).all():
            return True
    return False


__all__ = [
    "BENCH_ONLY",
    "BOTH",
    "KEYS",
    "TARGET_ONLY",
    "Missing",
    "missing_by_kind",
    "presence",
]
