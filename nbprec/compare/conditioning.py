"""How much an op may amplify its inputs' relative error: the condition of sums.

An op *passes on* its inputs' error when its output's relative error is within a few times theirs
(:data:`~nbprec.compare.culprit.INHERIT_FACTOR`): well-conditioned ops roughly preserve relative error. A sum
whose terms cancel does not. Exactly computed, its output's error is its inputs' absolute error over a result
much smaller than they are: the mean of 16,384 values of both signs near 1 is 1e-4, and a 4% error in the values
becomes an error of 500% in the mean (a scalar loss made that way, or a residual connection that cancels). The op
did nothing wrong: the error is its inputs'.

For a sum the amplification has a bound that the dumps' norms give. With inputs ``x_k`` (``n_k`` elements) and an
output of ``N`` elements, by Cauchy-Schwarz::

    mean over m = n / N elements:      RED(out) <= RED(x) * rms(x) / rms(out)
    sum over m elements:               RED(out) <= RED(x) * m * rms(x) / rms(out)
    add / sub (broadcasting):          RED(out) <= max_k RED(x_k) * sum_k rms(x_k) / rms(out)

:func:`sum_condition` computes that factor for each forward op of those kinds (1 for every other op), from the
benchmark's norms and element counts. An op whose output error stays within it, times the inherit factor, passed
its inputs' error on: a faulty kernel in a sum that does not cancel (factor near 1) is still the op to blame.
"""

from __future__ import annotations

import numpy as np

from nbprec.columns import Columns
from nbprec.compare.rules import column

#: Op types (lower case) that add their inputs' elements: elementwise sums and differences (broadcasting), and
#: reductions (PyTorch, msprobe, TensorFlow and CANN names).
SUM_OP_TYPES = frozenset(
    {"add", "add_", "__add__", "__radd__", "__iadd__", "addv2", "sub", "sub_", "__sub__", "__rsub__", "__isub__",
     "rsub", "mean", "nanmean", "reducemean", "sum", "nansum", "reducesum"}
)  # fmt: skip
#: The reductions that sum rather than average (their bound grows with the number of terms).
_SUMMING = frozenset({"sum", "nansum", "reducesum"})


def sum_condition(table: Columns, codes: np.ndarray, ops: Columns) -> np.ndarray:
    """Per op (rows of ``ops``, which ``codes`` maps ``table``'s rows to), the factor by which it may amplify its
    inputs' relative error as an exact sum (see the module docstring): at least 1, and 1 where it is not a
    forward sum or the norms are not known."""
    n_ops = len(ops)
    factor = np.ones(n_ops)
    if not n_ops or "bench_norm" not in table or "numel" not in table:
        return factor
    types = ops["op_type"].tolist()
    kind = {t: str(t).lower() for t in set(types)}  # (a model has a few dozen op types)
    sums = np.fromiter((kind[t] in SUM_OP_TYPES for t in types), bool, n_ops)
    sums &= column(ops, "direction", object) == "forward"
    if not sums.any():
        return factor
    rows = np.flatnonzero(sums[codes])
    role = column(table, "role", object)[rows]
    norm = np.abs(column(table, "bench_norm", np.float64)[rows])
    numel = column(table, "numel", np.float64)[rows]
    op = codes[rows]
    # each op's output: its first output row (norm and element count)
    outputs = role == "output"
    out_norm, out_numel = np.full(n_ops, np.nan), np.full(n_ops, np.nan)
    first = np.flatnonzero(outputs)[::-1]  # (written last to first: the first output row stays)
    out_norm[op[first]], out_numel[op[first]] = norm[first], numel[first]
    inputs = role == "input"
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = out_numel[op] / numel  # N / n_k: a broadcast input repeats, a reduced one is summed
        summing = np.fromiter((kind[types[i]] in _SUMMING for i in op.tolist()), bool, len(op))
        weight = np.where(summing, np.sqrt(1.0 / ratio), np.sqrt(ratio))
        terms = np.where(inputs & (numel > 0), norm * weight, 0.0)
        total = np.bincount(op, weights=np.nan_to_num(terms, nan=0.0, posinf=0.0), minlength=n_ops)
        bound = total / out_norm
    return np.where(sums & np.isfinite(bound) & (bound > 1.0), bound, 1.0)


__all__ = ["SUM_OP_TYPES", "sum_condition"]
