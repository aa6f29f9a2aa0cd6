"""Rounding noise carried through a pass: the scale the ops after a cancellation are judged at.

A result that is mathematically zero (the gradient a normalisation passes back when the loss does not depend on its
output's scale; a value minus itself) comes out of a run as rounding noise: values of both signs, a few epsilons of
its dtype times the values it was computed from. :func:`~nbprec.compare.culprit.rounding_noise` tells it next to its
op's inputs. The ops after it in the pass take that noise as their inputs, and next to itself it is not small: each
of them would fail at a cosine near 0, the first one "from inputs that already differ", and so would every gradient
of the backward pass below it. :func:`carried_noise_scale` follows the noise from where it arose and judges the ops
that take it at the scale it came from.
"""

from __future__ import annotations

import numpy as np

from nbprec.columns import Columns, text_in
from nbprec.compare.culprit import INPUT_ROLES, NOISE_CEILING, OUTPUT_ROLES
from nbprec.compare.rules import bench_magnitude, column, noise_floor
from nbprec.dtypes import FLOAT_DTYPES


class _PerOp:
    """The largest of some per-row values over each op's float input rows and over its result rows, ops in
    execution order (-inf where an op has no such row)."""

    def __init__(self, table: Columns, floats: np.ndarray, grouping: tuple[np.ndarray, int]) -> None:
        n = len(table)
        role = table["role"]
        self.inputs, self.results = text_in(role, INPUT_ROLES), text_in(role, OUTPUT_ROLES) & floats
        self.codes, self.n = grouping
        runs = np.flatnonzero(np.r_[True, self.codes[1:] != self.codes[:-1]])
        # each op's rows in one run (as dumps list them): codes are the runs' numbers, and maxima reduce the runs
        self.runs = runs if len(runs) == self.n else None
        if self.runs is not None:
            first = runs
        else:
            first = np.full(self.n, n, dtype=np.int64)
            np.minimum.at(first, self.codes, np.arange(n))
        # a pass is one direction: forward calls made during a backward pass (activation checkpointing's
        # recomputation, a custom autograd function's ops) belong to the forward ops, not between gradients
        backward = text_in(column(table, "direction", object)[first], ("backward",))
        order = np.lexsort((first, column(table, "order")[first], backward, table["rank"][first], table["step"][first]))
        self.first, self.order = first[order], order
        self.float_inputs = self.inputs & floats

    def largest(self, rows: np.ndarray, values: np.ndarray, nan: float) -> np.ndarray:
        taken = np.where(rows, np.nan_to_num(values, nan=nan, posinf=np.inf), -np.inf)
        if self.runs is not None:
            return np.maximum.reduceat(taken, self.runs)[self.order]
        out = np.full(self.n, -np.inf)
        np.maximum.at(out, self.codes, taken)
        return out[self.order]


def carried_noise_scale(
    table: Columns, scale: np.ndarray, grouping: tuple[np.ndarray, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``scale`` (per row, its op's input scale: :func:`~nbprec.compare.pair_table.op_input_scale`) raised for the
    ops that take rounding noise as their inputs after a pass's values cancelled, and per row the name of the op the
    noise was first seen at ('' where nothing was raised).

    A pass (step, rank and direction, in execution order) cancels where an op's results are noise next to its own
    input scale, or where an op's inputs are noise next to the results of the op before it (autograd sums the
    gradients of two branches without a record: the cancelling sum is first seen as the next op's input). From
    there on, the pass's scale is the largest result it had made before (the benchmark's magnitudes): an op whose
    float inputs (a record of parameter gradients alone: its gradients) are all noise at that scale (values of both
    signs or zeros, the benchmark below 2^12 epsilons of its dtype times it, the target within
    :data:`~nbprec.compare.culprit.NOISE_CEILING` of it) is judged at it. Ops that take signal are judged at their
    own inputs' scale as before. ``grouping``: :func:`~nbprec.compare.pair_table.op_codes` of the table, if made."""
    n = len(table)
    carried_from = np.full(n, "", dtype=object)
    if not n or "bench_min" not in table or "target_max" not in table:
        return scale, carried_from
    if grouping is None:
        from nbprec.compare.pair_table import op_codes

        grouping = op_codes(table)
    ops = _PerOp(table, text_in(column(table, "bench_dtype", object), FLOAT_DTYPES), grouping)
    bench = bench_magnitude(table)
    target = np.fmax(np.abs(column(table, "target_max", np.float64)), np.abs(column(table, "target_min", np.float64)))
    bench_need = noise_floor(table, NOISE_CEILING)  # (the least scale each row is noise at: rules.noise_floor)
    has_input = ops.largest(ops.inputs, np.ones(n), np.inf) > 0
    has_float_input = ops.largest(ops.float_inputs, np.ones(n), np.inf) > 0
    # per op, the least scale its inputs (and its results) are noise at, and the target's largest magnitude there
    in_need, in_target = (
        ops.largest(ops.float_inputs, bench_need, np.inf),
        ops.largest(ops.float_inputs, target, np.inf),
    )
    out_need, out_target = ops.largest(ops.results, bench_need, np.inf), ops.largest(ops.results, target, np.inf)
    in_need = np.where(has_float_input, np.fmax(in_need, in_target / NOISE_CEILING), np.inf)
    out_need = np.where(out_need > -np.inf, np.fmax(out_need, out_target / NOISE_CEILING), np.inf)
    base = scale[ops.first]
    keys = [column(table, c)[ops.first] for c in ("step", "rank", "direction")]
    new_pass = np.ones(ops.n, dtype=bool)
    new_pass[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in keys])
    made = ops.largest(ops.results, bench, -np.inf)  # the benchmark's largest result of each op
    # an op recorded without results (msprobe's data_mode "input"): its inputs, the results of the ops before it
    # (but not the first op's of a pass: its input is the pass's seed, such as the loss's gradient, 1)
    given = ops.largest(ops.float_inputs & text_in(table["role"], ("input",)), bench, -np.inf)
    made = np.where(made > -np.inf, made, np.where(new_pass, -np.inf, given))
    made = np.where(np.isfinite(made), made, 0.0)
    # the results of the op before (records of parameter gradients aside), in the same pass (0.0: none)
    last = np.r_[-1, np.maximum.accumulate(np.where(has_input, np.arange(ops.n), -1))[:-1]]
    pass_start = np.maximum.accumulate(np.where(new_pass, np.arange(ops.n), 0))
    before = np.where(last >= pass_start, made[np.maximum(last, 0)], 0.0)
    own = has_float_input & (out_need < base)  # its results: noise next to its own scale
    seam = has_float_input & (in_need < before) & (before > base)  # its inputs: noise next to the results before
    cancels = np.flatnonzero(own | seam)
    if not len(cancels):
        return scale, carried_from
    lifted, source = base.astype(np.float64), np.full(ops.n, -1)
    need = np.where(has_input, in_need, out_need)  # (a record of parameter gradients: its gradients)
    pass_ends = np.r_[np.flatnonzero(new_pass)[1:], ops.n]
    done = -1
    for first in cancels.tolist():
        if first < done:  # (a later cancellation in a pass already walked)
            continue
        begin, done = int(pass_start[first]), int(pass_ends[np.searchsorted(pass_ends, first, side="right")])
        at = float(np.max(made[begin:first], initial=0.0))  # the largest result the pass had made
        at = max(at, float(base[first]))
        span = np.arange(first if seam[first] else first + 1, done)
        raise_ = span[(need[span] < at) & ~(base[span] >= at)]
        lifted[raise_], source[raise_] = at, first
    position = np.empty(ops.n, dtype=np.int64)
    position[ops.order] = np.arange(ops.n)
    row_op = position[ops.codes]
    raised = source[row_op] >= 0
    carried_from[raised] = column(table, "op", object)[ops.first][source[row_op[raised]]]
    return np.where(raised, lifted[row_op], scale), carried_from


__all__ = ["carried_noise_scale"]
