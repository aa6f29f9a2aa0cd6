"""Did the overflow matter? Compare what follows the overflowing op with a benchmark run.

The *final outputs* are, unless the caller names them, the last forward op and the last backward op (in
execution order) of the step and rank where the overflow happened: the model output or loss, and the last
gradients of the step. The verdict:

- ``harmful``: a final output fails the comparison rule against the benchmark, or (without a benchmark)
  holds NaN/inf/saturated values; the report names the first op at or after the overflow whose results
  fail (where the results diverge).
- ``transient, harmless``: the final outputs pass (a later ``where``/``masked_fill``/``clamp`` or a softmax
  over ``-inf`` absorbed it).
- ``unknown``: no benchmark and the final outputs are finite, or the final ops could not be compared.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from nbprec.dump import Dump
from nbprec.overflow.report import (
    VERDICT_HARMFUL,
    VERDICT_HARMLESS,
    VERDICT_NONE,
    VERDICT_UNKNOWN,
    Impact,
    OverflowReport,
)


def final_ops(ops: pd.DataFrame, step: int, rank: int, after_order: int = -1) -> list[str]:
    """The ops taken as a step's final outputs: its last forward op and its last backward op.

    Ops with no direction count as forward. Only ops at or after ``after_order`` are considered.
    """
    here = ops[(ops["step"] == step) & (ops["rank"] == rank) & (ops["order"] >= after_order)]
    chosen = []
    backward = here["direction"] == "backward"
    for part in (here[~backward], here[backward]):
        if not part.empty:
            chosen.append(str(part.sort_values("order", kind="stable").iloc[-1]["op"]))
    return chosen


def assess_impact(
    report: OverflowReport,
    target: Dump,
    bench: Dump | str | os.PathLike[str] | None = None,
    *,
    rule: Any = None,
    outputs: list[str] | None = None,
) -> Impact:
    """Judge whether the first critical overflow of ``report`` changed the results.

    Parameters
    ----------
    report
        A scan of ``target``.
    target
        The scanned dump.
    bench
        The benchmark run; without it only a non-finite final output can be called harmful.
    rule
        Comparison rule (name or :class:`~nbprec.compare.Rule`); default nbprec's dtype-aware rule.
    outputs
        Op names that count as the final outputs (default :func:`final_ops`).

    Returns
    -------
    Impact

    Examples
    --------
    >>> impact = assess_impact(nbprec.overflow.scan(fp16), fp16, fp32)  # doctest: +SKIP
    >>> impact.verdict                                                   # doctest: +SKIP
    'transient, harmless'
    """
    first = report.origin()
    if first is None:
        return Impact(VERDICT_NONE, message="no op produced an overflow")
    op, step, rank, order = str(first["op"]), int(first["step"]), int(first["rank"]), int(first["order"])
    finals = list(outputs) if outputs else final_ops(report.ops, step, rank, order)
    here = report.ops[(report.ops["step"] == step) & (report.ops["rank"] == rank)]
    if not outputs and here["out_abnormal"].all():
        return Impact(
            VERDICT_UNKNOWN,
            op,
            message=f"every op in this dump overflows (an overflow-check dump?): nothing after {op} to judge",
        )
    ops = report.ops
    after = ops[(ops["step"] == step) & (ops["rank"] == rank) & (ops["order"] >= order)]
    abnormal = dict(zip(ops["op"], ops["out_abnormal"], strict=False))
    if bench is None:
        rows = [{"op": f, "status": "", "out_cosine": None, "abnormal": bool(abnormal.get(f, False))} for f in finals]
        bad_after = after[after["out_abnormal"]]
        bad_final = [r["op"] for r in rows if r["abnormal"]]
        if bad_final:
            return Impact(
                VERDICT_HARMFUL,
                op,
                str(bad_after.iloc[0]["op"]) if not bad_after.empty else op,
                rows,
                len(bad_after),
                f"the overflow at {op} reached the final output(s) {', '.join(bad_final)} as NaN/inf/saturated values",
            )
        return Impact(
            VERDICT_UNKNOWN,
            op,
            "",
            rows,
            len(bad_after),
            f"the final outputs are finite after the overflow at {op}; give a benchmark run to tell whether "
            "the values changed",
        )

    from nbprec.compare import compare

    comp = compare(target, bench, rule=rule, step=step, rank=rank)
    c_ops = comp.ops
    c_after = c_ops[c_ops["order"] >= order]
    failing = c_after[c_after["status"] == "fail"]
    status = dict(zip(c_ops["op"], c_ops["status"], strict=False))
    cosine = dict(zip(c_ops["op"], c_ops["out_cosine"], strict=False))
    rows = []
    for f in finals:
        cos = cosine.get(f)
        rows.append(
            {
                "op": f,
                "status": str(status.get(f, "n/a")),
                "out_cosine": None if cos is None or np.isnan(cos) else float(cos),
                "abnormal": bool(abnormal.get(f, False)),
            }
        )
    rule_text = comp.rule.describe()
    first_fail = str(failing.iloc[0]["op"]) if not failing.empty else ""
    bad = [r["op"] for r in rows if r["status"] == "fail" or r["abnormal"]]
    judged = [r for r in rows if r["status"] in ("pass", "fail")]
    if bad:
        return Impact(
            VERDICT_HARMFUL,
            op,
            first_fail or op,
            rows,
            len(failing),
            f"the overflow at {op} changed the results: final output(s) {', '.join(bad)} fail {rule_text}; "
            f"results diverge from {first_fail or op}",
            rule_text,
        )
    if not judged:
        return Impact(
            VERDICT_UNKNOWN,
            op,
            first_fail,
            rows,
            len(failing),
            f"the final output(s) {', '.join(finals) or '-'} could not be compared with the benchmark",
            rule_text,
        )
    absorbed = f"; {len(failing)} op(s) in between differ" if len(failing) else ""
    return Impact(
        VERDICT_HARMLESS,
        op,
        first_fail,
        rows,
        len(failing),
        f"the overflow at {op} did not change the final output(s) {', '.join(finals)} ({rule_text}){absorbed}",
        rule_text,
    )
