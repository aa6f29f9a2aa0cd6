"""Whether two runs can be compared at all: the findings the verdict opens with.

:func:`comparability` judges the pair under the dtype-aware default rule, whatever rule the user chose, and
returns :class:`Finding` s, the blocking ones first (:mod:`nbprec.compare.verdict` puts them in words before it
blames any op):

- ``input_overflow``: the target's inputs hold inf or NaN where the benchmark's values pass the target dtype's
  range (an input cast to float16 beyond 65504);
- ``different_inputs``: the model's inputs (the first op's input tensors) differ;
- ``different_weights``: parameters differ beyond the dtype's rounding (a checkpoint not loaded?);
- ``not_deterministic``: random ops (dropout, rand*, randperm, ...) whose inputs match but whose outputs differ;
- ``different_models``: a quarter or more of the paired tensors differ in shape (two models paired by position);
- ``missing_rank`` / ``missing_step``: a rank or step (or a rank at some steps) that one side holds and the
  other does not: said once, at the top, instead of as rows without a counterpart (see
  :mod:`nbprec.compare.presence`);
- ``unaligned``: ops whose calls found no counterpart (in the steps and ranks both sides hold);
- ``checksums_across_dtypes``: pairs of different dtypes asked to be compared by checksum (bytes: never equal);
- ``carried_noise``: ops whose inputs are the rounding noise a cancellation left (a gradient that is zero), judged
  at their pass's scale (:mod:`nbprec.compare.carried_noise`). An aside (:attr:`Finding.aside`): it tells how rows
  were judged, and the verdict says it after its headline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, cell_texts, distinct, text_in
from nbprec.compare.fusion import FROM_DUMP_RECORDS
from nbprec.compare.presence import BOTH, missing_by_kind, presence
from nbprec.compare.rules import STATUS_FAIL, bench_magnitude, column, get_rule
from nbprec.dtypes import FINITE_MAX

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

#: Roles of parameter tensors, and the input slots that carry weights in functional calls.
_PARAMETER_ROLES = ("parameter",)
_WEIGHT_SLOTS = ("weight", "bias")
_DATA_SLOTS = ("0", "input", "x")
#: Finding codes that tell how some rows were judged (not whether the runs compare): said after the headline.
ASIDES = ("carried_noise",)
#: Share of target tensors without a counterpart from which the runs are said not to align.
UNMATCHED_SHARE = 0.1
#: Share of paired tensors with different shapes from which the runs are said to be different models.
DIFFERENT_SHAPES_SHARE = 0.25


class Finding(Record):
    """Why two runs are not (fully) comparable: a code, a sentence, the fix, and the ops concerned."""

    code: str
    message: str
    fix: str
    ops: tuple[str, ...] = ()

    @property
    def aside(self) -> bool:
        """Whether it tells how some rows were judged rather than whether the runs compare: the verdict says it after
        its headline, not before."""
        return self.code in ASIDES

    @property
    def blocking(self) -> bool:
        """Whether blaming an op makes no sense until it is fixed (unaligned runs can still be compared)."""
        return self.code in ("input_overflow", "different_inputs", "different_weights", "different_models")


def _default_status(comp: Comparison) -> np.ndarray:
    """Tensor statuses under the dtype-aware default rule (comparability does not depend on the user's rule)."""
    if comp.rule.name == "default":
        return comp.status
    return get_rule("default").evaluate(comp._cols, precision=comp._precision)


def text_values(table: Columns, name: str) -> np.ndarray:
    """A text column with every value as ``str`` (missing values as ''): the column itself when it is one (the
    callers only read it)."""
    values = table[name]
    plain = isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1
    if plain and list(map(type, values.tolist())).count(str) == len(values):
        return values
    return np.array(cell_texts(values), dtype=object)


def _distinct(values: np.ndarray) -> tuple[str, ...]:
    """The distinct values, in order of first appearance."""
    return tuple(dict.fromkeys(str(v) for v in values.tolist()))


def _differs(table: Columns, status: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` differ: integer/bool tensors unless exactly equal, others when they fail."""
    dtypes = text_values(table, "target_dtype").tolist()
    is_float = {d: d.startswith(("float", "bfloat")) for d in set(dtypes)}  # (a handful of distinct dtypes)
    integer = ~np.fromiter(map(is_float.__getitem__, dtypes), bool, len(dtypes))
    exact_diff = np.zeros(len(table), dtype=bool)
    for name in ("max_abs_err", "max_diff", "min_diff", "mean_diff", "norm_diff"):
        if name in table:
            exact_diff |= np.nan_to_num(np.abs(column(table, name, np.float64)), nan=0.0) > 0
    if "checksum_match" in table:
        exact_diff |= np.array([v is False or v is np.False_ for v in table["checksum_match"].tolist()], bool)
    return rows & np.where(integer, exact_diff, status == STATUS_FAIL)


def _overflowed(table: Columns, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` hold inf or NaN in the target where the benchmark's finite values pass the target dtype's
    largest finite value (an input cast to float16 beyond 65504)."""
    out = np.zeros(len(table), dtype=bool)
    if not rows.any() or "target_max" not in table or "bench_max" not in table:
        return out
    at = np.flatnonzero(rows)  # (the first op's inputs: a handful of rows)
    limit = np.array([FINITE_MAX.get(d, np.inf) for d in text_values(table, "target_dtype")[at].tolist()])
    low, high = column(table, "target_min", np.float64)[at], column(table, "target_max", np.float64)[at]
    bench = bench_magnitude(table)[at]
    nonfinite = ~(np.isfinite(low) & np.isfinite(high))  # (msprobe's extremes; nbprec's count them apart)
    if "target_nonfinite" in table:
        nonfinite |= np.nan_to_num(column(table, "target_nonfinite", np.float64)[at], nan=0.0) > 0
    out[at] = nonfinite & np.isfinite(bench) & (bench > limit)
    return out


def _first_op_inputs(table: Columns) -> np.ndarray:
    """Rows that are the model's inputs: the first argument of the first forward op, per step and rank (the
    token ids of an embedding, the images of a first convolution; its other arguments are weights)."""
    rows = np.zeros(len(table), dtype=bool)
    forward = text_values(table, "direction") != "backward"
    inputs = (text_values(table, "role") == "input") & forward & text_in(text_values(table, "slot"), _DATA_SLOTS)
    candidates = np.flatnonzero(inputs & (text_values(table, "match") != "unmatched"))
    if not candidates.size:
        return rows
    step, rank, order = table["step"][candidates], table["rank"][candidates], table["order"][candidates]
    first: dict[tuple[int, int], int] = {}
    for key in zip(step.tolist(), rank.tolist(), order.tolist(), strict=True):
        first[key[:2]] = min(first.get(key[:2], key[2]), key[2])
    earliest = np.array(
        [first[(s, r)] == o for s, r, o in zip(step.tolist(), rank.tolist(), order.tolist(), strict=True)]
    )
    rows[candidates[earliest]] = True
    return rows


def comparability(comp: Comparison) -> list[Finding]:
    """Findings that say the two runs are not (fully) comparable, the blocking ones first."""
    table = comp._cols
    if table.empty:
        return []
    status = _default_status(comp)
    findings: list[Finding] = []
    inputs = _differs(table, status, _first_op_inputs(table))
    names, ops = text_values(table, "target_name"), text_values(table, "op")
    overflowed = _overflowed(table, inputs)
    if overflowed.any():
        r = int(np.flatnonzero(overflowed)[0])
        dtype = str(table["target_dtype"][r])
        findings.append(
            Finding(
                "input_overflow",
                f"Inputs overflow: the model's first input ({names[r]}) holds inf or NaN in the target, where the "
                f"benchmark's values reach {bench_magnitude(table)[r]:.4g}, beyond {dtype}'s largest finite value "
                f"({FINITE_MAX[dtype]:g}): the input overflowed when it was cast to {dtype}.",
                f"bring the inputs into {dtype}'s range before the cast (normalise or rescale them), or keep the "
                "first ops in float32, then compare again.",
                _distinct(ops[overflowed]),
            )
        )
    elif inputs.any():
        findings.append(
            Finding(
                "different_inputs",
                f"Different inputs: the model's first input tensors differ ({', '.join(names[inputs].tolist()[:3])}).",
                "feed both runs the same batch (same data order, same preprocessing), then compare again.",
                _distinct(ops[inputs]),
            )
        )
    role, slot = text_values(table, "role"), text_values(table, "slot")
    params = (text_values(table, "direction") != "backward") & (
        text_in(role, _PARAMETER_ROLES) | ((role == "input") & text_in(slot, _WEIGHT_SLOTS))
    )
    weights = _differs(table, status, params)
    if weights.any():
        findings.append(
            Finding(
                "different_weights",
                f"Different weights: {int(weights.sum())} of {int(params.sum())} parameters differ beyond the "
                f"dtype's rounding (e.g. {', '.join(names[weights].tolist()[:2])}); was the checkpoint loaded in "
                "both runs?",
                "load the same checkpoint (or seed weight initialisation identically) in both runs.",
                _distinct(ops[weights]),
            )
        )
    op_table = comp._ops_columns
    random_ops = [
        str(op) for op in op_table["op"][(op_table["origin"] == "random") & (op_table["status"] == STATUS_FAIL)]
    ]
    if random_ops:
        findings.append(
            Finding(
                "not_deterministic",
                f"Not deterministic: {len(random_ops)} random op(s) get matching inputs but give different "
                f"outputs (first: {random_ops[0]}); what follows them differs by design.",
                "seed every random source identically in both runs (e.g. nbprec.seed_all(0)), or switch dropout "
                "off (model.eval(), or dropout=0) for the comparison.",
                tuple(random_ops),
            )
        )
    findings.extend(_different_models(table))
    findings.extend(_unreadable(comp))
    findings.extend(_checksums_across_dtypes(table))
    findings.extend(_carried_noise(table))
    findings.extend(_alignment(comp))
    return sorted(findings, key=lambda f: not f.blocking)


def _checksums_across_dtypes(table: Columns) -> list[Finding]:
    """Pairs asked to be compared by checksum whose dtypes differ: bytes of bfloat16 never match bytes of
    float32, so those pairs were not judged (:func:`~nbprec.compare.pair_table.checksum_pairs`)."""
    if "compare_mode" not in table:
        return []
    checksum = text_values(table, "compare_mode") == "checksum"
    rows = np.flatnonzero(checksum & (text_values(table, "target_dtype") != text_values(table, "bench_dtype")))
    if not rows.size:
        return []
    example = table["target_name"][rows[0]]
    return [Finding("checksums_across_dtypes",
                    f"{rows.size} tensor pair(s) of different dtypes were to be compared by checksum, which compares "
                    f"bytes: they cannot match, so they are not judged (e.g. {example}).",
                    "compare by statistics: nbprec compare T B (mode auto, or --mode statistics).",
                    _distinct(text_values(table, "op")[rows])[:20])]  # fmt: skip


def _carried_noise(table: Columns) -> list[Finding]:
    """Ops judged at their pass's scale, their inputs a cancellation's noise (:mod:`nbprec.compare.carried_noise`)."""
    carried = column(table, "noise_from", object) if "noise_from" in table else np.empty(0, object)  # (texts, '')
    rows = np.flatnonzero(carried.astype(bool))
    if not rows.size:
        return []
    sources, ops = (tuple(dict.fromkeys(v[rows].tolist())) for v in (carried, column(table, "op", object)))
    others = f" (and {len(sources) - 1} other place(s))" if len(sources) > 1 else ""
    if (runs := len(distinct(table["step"][rows] * (int(table["rank"].max()) + 1) + table["rank"][rows]))) > 1:
        others += f" in each of {runs} (step, rank)s"
    bench, scale = (float(np.nanmax(v[rows], initial=0.0)) for v in (bench_magnitude(table), table["op_input_scale"]))
    return [Finding("carried_noise",
                    f"Rounding noise carried: values cancelled to rounding noise at {sources[0]}{others}, "
                    f"mathematically zero there, and the {len(ops)} op(s) from there on that take that noise "
                    f"({rows.size} tensors: the benchmark's at most {bench:.3g}, where the pass's values reach "
                    f"{scale:.3g}) were judged at the pass's scale: their metrics compare noise with noise.",
                    "nothing to fix in the target's precision there. If the values should not vanish, check what "
                    "made them: a loss that does not depend on a tensor (such as the scale of a normalisation's "
                    "output) gives it a zero gradient.", ops[:20])]  # fmt: skip


def _unreadable(comp: Comparison) -> list[Finding]:
    """What could not be read: files the readers reported, tensors whose payload could not be loaded."""
    out = []
    for side, label in (("target", "target"), ("bench", "benchmark")):
        summary = (comp.meta.get("problems") or {}).get(side) or {}
        if summary.get("count"):
            first = summary["examples"][0]
            record = f" [{first['record']}]" if first["record"] else ""
            out.append(
                Finding(
                    "unreadable",
                    f"The {label} dump has {summary['count']} problem(s) its reader recorded (e.g. "
                    f"{first['file']}{record}: {first['problem']}); what they concern is missing from the comparison.",
                    f"see `nbprec info {comp.meta.get(side, label)}` for the list, and dump or copy those files again.",
                )
            )
    table = comp._cols
    if "reason" not in table:
        return out
    reasons = text_values(table, "reason")
    texts = reasons.tolist()
    unreadable = {r: r.startswith(("could not read", "target tensor unreadable")) for r in set(texts)}
    unread = np.fromiter(map(unreadable.__getitem__, texts), bool, len(texts))
    if unread.any():
        i = int(np.flatnonzero(unread)[0])
        out.append(
            Finding(
                "unreadable",
                f"{int(unread.sum())} tensor pair(s) could not be read and are not judged (e.g. "
                f"{table['target_name'][i]}: {reasons[i]}).",
                "dump or copy those files again; `nbprec info` lists what its reader found wrong.",
                _distinct(text_values(table, "op")[unread])[:20],
            )
        )
    return out


def _different_models(table: Columns) -> list[Finding]:
    """Paired tensors whose shapes disagree, in numbers no single mismatch explains: two different models."""
    paired = text_values(table, "bench_name") != ""
    if paired.sum() < 2:
        return []
    t_shape, b_shape = table["target_shape"].tolist(), table["bench_shape"].tolist()
    differ = np.array(
        [p and tuple(a or ()) != tuple(b or ()) for p, a, b in zip(paired, t_shape, b_shape, strict=True)], dtype=bool
    )
    if differ.sum() < max(2, DIFFERENT_SHAPES_SHARE * paired.sum()):
        return []
    i = int(np.flatnonzero(differ)[0])
    example = f"{table['target_name'][i]} {tuple(t_shape[i] or ())} vs {table['bench_name'][i]} " + str(
        tuple(b_shape[i] or ())
    )
    return [
        Finding(
            "different_models",
            f"The runs look like two different models: {int(differ.sum())} of {int(paired.sum())} paired tensors "
            f"differ in shape (e.g. {example}).",
            "compare dumps of the same model; if only the names differ, give a --mapping file of target,bench pairs.",
            _distinct(text_values(table, "op")[differ])[:20],
        )
    ]


def _alignment(comp: Comparison) -> list[Finding]:
    """Ranks or steps on one side only, and target tensors whose calls found no counterpart."""
    table, out = comp._cols, []
    for missing in missing_by_kind(comp):
        if missing.code == "missing_rank":
            how = 'msprobe: "rank": [] in config.json; nbprec: a capture in every process'
        else:
            how = 'msprobe: "step": [] in config.json; nbprec: capture(..., steps=None)'
        what = "rank" if missing.code == "missing_rank" else "step"
        fix = f"dump every {what} in both runs ({how}), or compare the {what}s both hold with --{what} N."
        out.append(Finding(missing.code, missing.message(), fix))
    p = presence(comp)
    one_sided = p["presence"] != BOTH
    rows = np.ones(len(table), dtype=bool)
    if one_sided.any():  # tensors of a (step, rank) the benchmark lacks are said above, not counted again
        keys = set(zip(p["step"][one_sided].tolist(), p["rank"][one_sided].tolist(), strict=True))
        rows = np.array([k not in keys for k in zip(table["step"].tolist(), table["rank"].tolist(), strict=True)], bool)
    unmatched = (text_values(table, "match") == "unmatched") & rows
    if rows.sum() and unmatched.sum() >= UNMATCHED_SHARE * rows.sum():
        ops = list(_distinct(text_values(table, "op")[unmatched]))
        fix = "check that both runs execute the same code path and dump the same scope, or give a --mapping file."
        if comp.meta.get("fusion", {}).get("graph") == FROM_DUMP_RECORDS:  # (an NPU dump without its GE graph)
            fix = ("give the NPU run's GE graph (--graph ge_proto_*_Build.txt): without it only outputs match, "
                   "through the dump's original_op records, and fused ops' inputs find no counterpart.")  # fmt: skip
        out.append(Finding("unaligned", f"{int(unmatched.sum())} of {int(rows.sum())} target tensors ({len(ops)} ops, "
                           f"e.g. {ops[0]}) found no benchmark counterpart: the two runs did not make the same calls.",
                           fix, tuple(ops[:20])))  # fmt: skip
    return out


__all__ = ["DIFFERENT_SHAPES_SHARE", "UNMATCHED_SHARE", "Finding", "comparability", "text_values"]
