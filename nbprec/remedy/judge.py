"""Judge a run against the benchmark: its final outputs in memory, and (check ``"ops"``) every op captured.

The final outputs are every tensor the forward callable returned and the parameter gradients (all of them
as one vector, unscaled), compared with nbprec's metrics (:func:`nbprec.compare.metrics.tensor_metrics`) and
judged by the comparison rule with the tolerance of the target's dtype (``precision``): the outputs of a
float16 run are held to float16's tolerance even when the last op computed in float32. A NaN or inf the
benchmark does not have always fails.

Two checks (:data:`CHECKS`) decide whether a run passes:

- ``"ops"`` (the default): the run's capture, compared with the benchmark's, has no unexplained failing op
  (:meth:`~nbprec.compare.Comparison.failing_ops`: failures that only follow a discontinuous op flipping on
  rounding noise, such as a ReLU, are explained), and the returned outputs pass and hold no NaN/inf; the
  gradients must be finite. Robust, and the same story the comparison tells; one capture per run.
- ``"outputs"``: the returned outputs and the gradients pass, judged in memory. Faster (no capture), but a
  gradient that differs because a ReLU flipped on rounding noise fails it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nbprec.remedy.setup import CHECKS, NotComparableError, RemedyError, RunResult

COLUMNS = (
    "name",
    "target_dtype",
    "bench_dtype",
    "shape",
    "cosine",
    "rel_euclidean",
    "max_abs_err",
    "max_rel_err",
    "target_nonfinite",
    "bench_nonfinite",
    "status",
    "reason",
)


@dataclass(frozen=True)
class Judgement:
    """The final outputs of one target run against the benchmark: a table and the answer.

    Attributes
    ----------
    table
        One row per output (``loss``, returned tensors, ``gradients``) with :data:`COLUMNS`.
    passed
        Whether every row passes.
    rule
        The rule, in words.
    check
        ``"ops"`` or ``"outputs"`` (see the module docstring).
    failing_ops
        Unexplained failing ops of the comparison (check ``"ops"``), else None.
    first_failing_op
        The comparison's first failing op (check ``"ops"``).
    """

    table: pd.DataFrame
    passed: bool
    rule: str
    check: str = "outputs"
    failing_ops: int | None = None
    first_failing_op: str | None = None

    def __bool__(self) -> bool:
        return self.passed

    def failing(self) -> list[str]:
        """What fails: output rows, and the first failing op (check ``"ops"``)."""
        rows = self.table.loc[self.table["status"] == "fail", "name"].astype(str).tolist()
        if self.check == "ops":
            rows = [r for r in rows if r != "gradients" or self.metric("gradients", "target_nonfinite") > 0]
            if self.failing_ops:
                rows.append(f"{self.failing_ops} op(s) from {self.first_failing_op}")
        return rows

    def metric(self, name: str, column: str) -> float:
        """One value of the table (NaN when absent)."""
        rows = self.table[self.table["name"] == name]
        return float(rows.iloc[0][column]) if not rows.empty else float("nan")


def judge(
    target: RunResult,
    bench: RunResult,
    *,
    rule: Any = None,
    precision: str = "float16",
    check: str = "outputs",
    comparison: Any = None,
) -> Judgement:
    """Compare ``target``'s outputs and gradients with ``bench``'s under ``rule`` at ``precision``'s tolerance.

    With ``check="ops"``, ``comparison`` (of the two runs' captures) must be given: the run passes when it
    has no unexplained failing op, its returned outputs pass, and its gradients are finite.

    Raises
    ------
    NotComparableError
        When the two runs returned different outputs (names or element counts).
    """
    from nbprec.compare.metrics import tensor_metrics
    from nbprec.compare.rules import get_rule

    the_rule = get_rule(rule)
    pairs: list[tuple[str, np.ndarray, np.ndarray, str, str]] = []
    if target.outputs.keys() != bench.outputs.keys():
        raise NotComparableError(
            f"the target returned {sorted(target.outputs)}, the benchmark {sorted(bench.outputs)}: the same "
            "forward callable should return the same outputs in both configurations"
        )
    for name, value in target.outputs.items():
        other = bench.outputs[name]
        if value.size != other.size:
            raise NotComparableError(
                f"output {name!r} has {value.size} elements in the target, {other.size} in the benchmark"
            )
        pairs.append((name, value, other, target.dtypes.get(name, ""), bench.dtypes.get(name, "")))
    if target.gradients is not None and bench.gradients is not None:
        if target.gradients.size != bench.gradients.size:
            raise NotComparableError(
                f"the target has {target.parameters} parameter gradients ({target.gradients.size} values), the "
                f"benchmark {bench.parameters} ({bench.gradients.size}): do both models have the same parameters?"
            )
        pairs.append(("gradients", target.gradients, bench.gradients, precision, "float32"))
    rows = []
    for name, x, y, t_dtype, b_dtype in pairs:
        result = tensor_metrics(x, y)
        n_x, n_y = result.nonfinite or (int(np.size(x) - np.isfinite(x).sum()), int(np.size(y) - np.isfinite(y).sum()))
        rows.append(
            {
                "name": name,
                "target_dtype": t_dtype,
                "bench_dtype": b_dtype,
                "shape": tuple(np.shape(x)),
                "cosine": result.values["cosine"],
                "rel_euclidean": result.values["rel_euclidean"],
                "max_abs_err": result.values["max_abs_err"],
                "max_rel_err": result.values["max_rel_err"],
                "target_nonfinite": n_x,
                "bench_nonfinite": n_y,
                "reason": result.reason,
            }
        )
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "status"])
    judged = table.assign(precision=precision, compare_mode="tensor")
    table.insert(len(table.columns) - 1, "status", the_rule.evaluate(judged) if len(table) else [])
    fails = table["status"] == "fail"
    if check == "outputs":
        return Judgement(table, bool(len(table)) and not fails.any(), the_rule.describe(), check)
    if check != "ops":
        raise RemedyError(f"check must be one of {CHECKS}, not {check!r}")
    if comparison is None:
        raise RemedyError("check 'ops' needs the comparison of the run's capture with the benchmark's")
    grads = table["name"] == "gradients"
    new_nonfinite = table["target_nonfinite"] > table["bench_nonfinite"]
    outputs_ok = not (fails & ~grads).any() and not (grads & new_nonfinite).any()
    failing = comparison.failing_ops()
    first_row = comparison.first_failing_op()
    first = None if first_row is None else str(first_row["op"])
    passed = bool(len(table)) and outputs_ok and failing.empty
    return Judgement(table, passed, comparison.rule.describe(), check, len(failing), first)


def at_precision(comparison: Any, dtype: str) -> Any:
    """``comparison`` re-judged with every float tensor held to at least ``dtype``'s tolerance.

    The dtype-aware rule judges a tensor by the lowest precision the run used *before* it in execution order;
    a module's output row comes at the module's start, so a float32 model output (an op kept in float32 at
    the end of a bfloat16 run) would be held to float32's tolerance while it carries bfloat16 rounding from
    the ops inside. Every tensor of a run in ``dtype`` is judged at ``dtype``'s tolerance or looser.
    """
    from nbprec.compare import Comparison
    from nbprec.compare.rules import lower_precision

    table = comparison.table
    if "precision" not in table:
        return comparison
    precision = [lower_precision(p, dtype) if p else "" for p in table["precision"].astype(str)]
    return Comparison(
        table.assign(precision=precision),
        unmatched_bench=comparison.unmatched_bench,
        rule=comparison.rule,
        meta=comparison.meta,
    )


def compare_runs(run: RunResult, bench: RunResult, *, rule: Any = None, precision: str = "float16") -> Any:
    """Compare two captured runs (:func:`nbprec.compare`), every tensor judged at ``precision`` or looser."""
    from nbprec.compare import compare

    if run.dump is None or bench.dump is None:
        raise RemedyError("comparing two runs needs both to be captured")
    return at_precision(compare(run.dump, bench.dump, rule=rule, progress=False), precision)
