"""The verdict of a comparison in words: are the runs comparable, what failed first, why, and what to do next.

Computed once in the core; the CLI summary, the dashboard header and the report all show the same
:class:`Verdict` (its :attr:`~Verdict.text`). Before any op is blamed, :func:`comparability` checks that the two
runs can be compared at all, judged under the dtype-aware default rule whatever rule the user chose:

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
  at their pass's scale (:mod:`nbprec.compare.carried_noise`).

Examples
--------
>>> comp = nbprec.compare("runs/bf16", "runs/fp32")   # doctest: +SKIP
>>> print(comp.verdict().text)                        # doctest: +SKIP
Functional.gelu.1.forward (gelu) is the first op that fails: its inputs matched at cosine 1.000000, its output
fell to 0.8956 (RED 0.27). It introduced the error; 78 ops after it inherit it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, cell_texts, distinct, text_in
from nbprec.compare.culprit import INHERIT_FACTOR
from nbprec.compare.fusion import FROM_DUMP_RECORDS
from nbprec.compare.presence import BOTH, missing_by_kind, presence
from nbprec.compare.rules import STATUS_FAIL, STATUS_PASS, bench_magnitude, column, get_rule
from nbprec.compare.runs import first_failing_position, is_collective, op_at, where

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

#: Roles of parameter tensors, and the input slots that carry weights in functional calls.
_PARAMETER_ROLES = ("parameter",)
_WEIGHT_SLOTS = ("weight", "bias")
_DATA_SLOTS = ("0", "input", "x")
#: Finding code -> the few words the headline gives it.
_SHORT = {
    "different_inputs": "their inputs differ",
    "different_weights": "their weights differ",
    "different_models": "they look like two different models",
}
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
    def blocking(self) -> bool:
        """Whether blaming an op makes no sense until it is fixed (unaligned runs can still be compared)."""
        return self.code in ("different_inputs", "different_weights", "different_models")


class Verdict(Record):
    """What the comparison says, in words.

    Attributes
    ----------
    kind
        ``"not comparable"``, ``"failure"``, ``"explained"`` (only randomness or flipped elements differ),
        ``"noise"`` (nothing fails: precision noise) or ``"no data"`` (nothing could be compared).
    headline
        One or two sentences: what failed first and why, or why nothing is to blame.
    next_step
        What to do next (a command or a change to make).
    findings
        Comparability findings, the blocking ones first.
    """

    kind: str
    headline: str
    next_step: str = ""
    findings: tuple[Finding, ...] = ()

    @property
    def text(self) -> str:
        """The verdict as plain text: findings first, then the headline and the next step."""
        lines = [f"! {f.message} Fix: {f.fix}" for f in self.findings]
        lines.append(self.headline)
        if self.next_step:
            lines.append(f"Next: {self.next_step}")
        return "\n".join(lines)

    def to_html(self) -> str:
        """The verdict as an HTML fragment (every name escaped)."""
        import html

        e = html.escape
        items = "".join(f"<li class='nbprec-finding'><b>{e(f.message)}</b> Fix: {e(f.fix)}</li>" for f in self.findings)
        findings = f"<ul class='nbprec-findings'>{items}</ul>" if items else ""
        step = f"<br><i>Next:</i> {e(self.next_step)}" if self.next_step else ""
        return f"<div class='nbprec-verdict'>{findings}<p><b>{e(self.headline)}</b>{step}</p></div>"

    def __str__(self) -> str:
        return self.text


def _default_status(comp: Comparison) -> np.ndarray:
    """Tensor statuses under the dtype-aware default rule (comparability does not depend on the user's rule)."""
    if comp.rule.name == "default":
        return comp.status
    return get_rule("default").evaluate(comp._cols, precision=comp._precision)


def _texts(table: Columns, name: str) -> np.ndarray:
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
    dtypes = _texts(table, "target_dtype").tolist()
    is_float = {d: d.startswith(("float", "bfloat")) for d in set(dtypes)}  # (a handful of distinct dtypes)
    integer = ~np.fromiter(map(is_float.__getitem__, dtypes), bool, len(dtypes))
    exact_diff = np.zeros(len(table), dtype=bool)
    for name in ("max_abs_err", "max_diff", "min_diff", "mean_diff", "norm_diff"):
        if name in table:
            exact_diff |= np.nan_to_num(np.abs(column(table, name, np.float64)), nan=0.0) > 0
    if "checksum_match" in table:
        exact_diff |= np.array([v is False or v is np.False_ for v in table["checksum_match"].tolist()], bool)
    return rows & np.where(integer, exact_diff, status == STATUS_FAIL)


def _first_op_inputs(table: Columns) -> np.ndarray:
    """Rows that are the model's inputs: the first argument of the first forward op, per step and rank (the
    token ids of an embedding, the images of a first convolution; its other arguments are weights)."""
    rows = np.zeros(len(table), dtype=bool)
    forward = _texts(table, "direction") != "backward"
    inputs = (_texts(table, "role") == "input") & forward & text_in(_texts(table, "slot"), _DATA_SLOTS)
    candidates = np.flatnonzero(inputs & (_texts(table, "match") != "unmatched"))
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
    names, ops = _texts(table, "target_name"), _texts(table, "op")
    if inputs.any():
        findings.append(
            Finding(
                "different_inputs",
                f"Different inputs: the model's first input tensors differ ({', '.join(names[inputs].tolist()[:3])}).",
                "feed both runs the same batch (same data order, same preprocessing), then compare again.",
                _distinct(ops[inputs]),
            )
        )
    role, slot = _texts(table, "role"), _texts(table, "slot")
    params = (_texts(table, "direction") != "backward") & (
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
    checksum = _texts(table, "compare_mode") == "checksum"
    rows = np.flatnonzero(checksum & (_texts(table, "target_dtype") != _texts(table, "bench_dtype")))
    if not rows.size:
        return []
    example = table["target_name"][rows[0]]
    return [Finding("checksums_across_dtypes",
                    f"{rows.size} tensor pair(s) of different dtypes were to be compared by checksum, which compares "
                    f"bytes: they cannot match, so they are not judged (e.g. {example}).",
                    "compare by statistics: nbprec compare T B (mode auto, or --mode statistics).",
                    _distinct(_texts(table, "op")[rows])[:20])]  # fmt: skip


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
    reasons = _texts(table, "reason")
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
                _distinct(_texts(table, "op")[unread])[:20],
            )
        )
    return out


def _different_models(table: Columns) -> list[Finding]:
    """Paired tensors whose shapes disagree, in numbers no single mismatch explains: two different models."""
    paired = _texts(table, "bench_name") != ""
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
            _distinct(_texts(table, "op")[differ])[:20],
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
    unmatched = (_texts(table, "match") == "unmatched") & rows
    if rows.sum() and unmatched.sum() >= UNMATCHED_SHARE * rows.sum():
        ops = list(_distinct(_texts(table, "op")[unmatched]))
        fix = "check that both runs execute the same code path and dump the same scope, or give a --mapping file."
        if comp.meta.get("fusion", {}).get("graph") == FROM_DUMP_RECORDS:  # (an NPU dump without its GE graph)
            fix = ("give the NPU run's GE graph (--graph ge_proto_*_Build.txt): without it only outputs match, "
                   "through the dump's original_op records, and fused ops' inputs find no counterpart.")  # fmt: skip
        out.append(Finding("unaligned", f"{int(unmatched.sum())} of {int(rows.sum())} target tensors ({len(ops)} ops, "
                           f"e.g. {ops[0]}) found no benchmark counterpart: the two runs did not make the same calls.",
                           fix, tuple(ops[:20])))  # fmt: skip
    return out


def _one_sided_note(comp: Comparison) -> str:
    """A sentence for the headline when some (step, rank)s were on one side only ('' otherwise)."""
    p = presence(comp)
    if not (p["presence"] != BOTH).any() or not len(missing_by_kind(comp)):
        return ""
    return (f" Only the {int((p['presence'] == BOTH).sum())} of {len(p)} (step, rank)s both runs hold were "
            "compared (see above).")  # fmt: skip


def _number(value: float, digits: int = 6) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _why(op: dict[str, Any], table: Columns, rows: np.ndarray) -> str:
    """Why ``op`` is blamed: its inputs' and outputs' agreement, in the mode it was compared (``rows``: its
    tensors in ``table``)."""
    in_cos, out_cos = op.get("in_cosine", np.nan), op.get("out_cosine", np.nan)
    if np.isfinite(out_cos):
        red = op.get("out_rel_euclidean", np.nan)
        inputs = f"its inputs matched at cosine {_number(in_cos)}" if np.isfinite(in_cos) else "its inputs pass"
        return f"{inputs}, its output fell to cosine {_number(out_cos, 4)} (RED {red:.3g})"
    outputs = rows[text_in(_texts(table, "role")[rows], ("output", "gradient"))]
    if "reason" in table and any(r.startswith("target has non-finite") for r in _texts(table, "reason")[outputs]):
        return "its inputs are finite, its output holds NaN/inf"
    in_err, out_err = op.get("in_error", np.nan), op.get("out_error", np.nan)
    inputs = "its inputs' statistics agree exactly" if in_err == 0 else f"its inputs' statistics differ by {in_err:.3g}"
    detail = ""
    for stat in ("min", "max", "mean"):
        name = f"{stat}_diff"
        if name in table and len(outputs):
            diffs = np.abs(column(table, name, np.float64)[outputs])
            if np.nanmax(diffs, initial=0.0) > 0:
                r = outputs[int(np.nanargmax(diffs))]
                detail = f"; output {stat} {table[f'target_{stat}'][r]:.4g} vs {table[f'bench_{stat}'][r]:.4g}"
                break
    return f"{inputs}, its output's statistics differ by {out_err:.3g} (relative){detail}"


def verdict(comp: Comparison) -> Verdict:
    """The comparison's verdict in words (see the module docstring)."""
    findings = tuple(comparability(comp))
    blocking = [f for f in findings if f.blocking]
    ops = comp._ops_columns
    position = first_failing_position(ops)
    first = comp.op(position)
    several = comp.several_runs
    note = _one_sided_note(comp)
    if blocking:
        why = " and ".join(_SHORT[f.code] for f in blocking)
        tail = f"; the first failing op, {op_at(first, several)}, may only reflect that" if first is not None else ""
        return Verdict("not comparable", f"The runs are not comparable: {why}{tail}.", blocking[0].fix, findings)
    if not ((comp.status == STATUS_PASS) | (comp.status == STATUS_FAIL)).any():
        return Verdict("no data", "Nothing could be compared: no tensor pair has metrics." + note,
                       "check the matching (nbprec compare ... -o OUT, then unmatched_bench.csv) and the dump modes.",
                       findings)  # fmt: skip
    table = comp._cols
    if first is None:
        explained = int(ops["explained"].sum())
        precisions = sorted({p for p in _texts(table, "precision").tolist() if p}) if "precision" in table else []
        if explained:
            headline = (f"No unexplained failure: the {explained} op(s) that differ follow from randomness or from "
                        "discontinuous ops flipping elements on rounding noise.")  # fmt: skip
            return Verdict("explained", headline + note, "", findings)
        worst, _ = comp.worst_positions(1)
        at = ""
        if worst.size and np.isfinite(ops["out_cosine"][worst[0]]):
            row = comp.op(int(worst[0]))
            at = f" (worst output cosine {_number(row['out_cosine'])} at {op_at(row, several)})"
        dtypes = ", ".join(precisions) or "these dtypes"
        return Verdict("noise", f"No op fails under {comp.rule.name}: the differences are precision noise for "
                       f"{dtypes}{at}.{note}", "", findings)  # fmt: skip
    rows = np.flatnonzero(
        (table["op"] == first["op"]) & (table["step"] == first["step"]) & (table["rank"] == first["rank"])
    )
    later = (ops["step"] > first["step"]) | ((ops["step"] == first["step"]) & (ops["order"] > first["order"]))
    after = int(((ops["status"] == STATUS_FAIL) & later & ~ops["explained"]).sum())
    kind = (str(first.get("op_type", "")) or "?") + (f", {where(first)}" if several else "")
    if first["origin"] == "introduced" and is_collective(first.get("op_type", "")):
        headline = (f"{first['op']} ({kind}) is the first op that fails: {_why(first, table, rows)}. It is a "
                    "collective: its output mixes every rank's data, so the error comes from another rank's "
                    f"contribution, not from this rank; {after} failing op(s) after it inherit it.{note}")  # fmt: skip
        if note:
            step = "dump every rank of both runs and compare again: the rank that diverges before it is where it arose"
        else:
            step = "look at what the other ranks send into it: their ops before it, and ops the dumps do not record"
        return Verdict("failure", headline, step, findings)
    if first["origin"] == "introduced":
        headline = (f"{first['op']} ({kind}) is the first op that fails: {_why(first, table, rows)}. It introduced "
                    f"the error; {after} failing op(s) after it inherit it.{note}")  # fmt: skip
        target = comp.meta.get("target", "TARGET")
        if comp.meta.get("target_format") == "nbprec" and "tensor" in set(_texts(table, "compare_mode").tolist()):
            step = f"nbprec isolate {target} {first['op']} (re-run on its own inputs in float64: kernel or rounding?)"
        else:
            step = (f"nbprec ni {first['op']} --target {target} --bench {comp.meta.get('bench', 'BENCH')}; then keep "
                    f"it in float32 or check its kernel")  # fmt: skip
        return Verdict("failure", headline, step, findings)
    if first["origin"] == "unknown":
        headline = (f"{first['op']} ({kind}) is the first op that fails; some of its inputs could not be compared "
                    "(no counterpart, or unreadable), so whether it introduced the error or inherited it from them "
                    f"is unknown.{note}")  # fmt: skip
        return Verdict("failure", headline, f"nbprec ni {first['op']} --target T --bench B (see which inputs)",
                       findings)  # fmt: skip
    if comp.op_index.gradient_only[position]:  # msprobe's parameters_grad: no inputs of its own
        module = str(first["op"]).rsplit(".parameters_grad", 1)[0]
        cos, red = first.get("out_cosine", np.nan), first.get("out_rel_euclidean", np.nan)
        fell = (f"its gradients fell to cosine {_number(cos, 4)} (RED {red:.3g})" if np.isfinite(cos) else
                f"its gradients' statistics differ by {first.get('out_error', np.nan):.3g} (relative)")  # fmt: skip
        headline = (f"{first['op']} ({kind}) is the first op that fails: {fell}. It records the "
                    "gradients of its module's parameters, which have no inputs of their own: the module's backward "
                    "pass made them from the gradient flowing back into it and the inputs of its forward call, so "
                    f"the error arose there; {after} failing op(s) after it inherit it.{note}")  # fmt: skip
        return Verdict("failure", headline, f"nbprec ni {module}.backward.0 --target T --bench B (and its forward "
                       "call): which gradient or input differs first", findings)  # fmt: skip
    in_cosine = _number(first.get("in_cosine", np.nan))
    if first.get("in_status") == STATUS_PASS:  # its inputs were compared and passed, carrying most of its error
        if np.isfinite(first.get("in_rel_euclidean", np.nan)):
            carried = (f"input cosine {in_cosine}, RED {_number(first['in_rel_euclidean'], 3)}; output RED "
                       f"{_number(first.get('out_rel_euclidean', np.nan), 3)}")  # fmt: skip
        else:  # statistics only
            carried = (f"its inputs' statistics differ by {first.get('in_error', np.nan):.3g}, its output's by "
                       f"{first.get('out_error', np.nan):.3g}")  # fmt: skip
        headline = (f"{first['op']} ({kind}) is the first op that fails, but it did not introduce the error: its "
                    f"inputs, which pass, already carried most of it ({carried}, less than {INHERIT_FACTOR:g} times "
                    "as much), and it took them over the rule's bounds. The difference built up over the ops "
                    f"before it, which all pass: no one op is to blame under this rule.{note}")  # fmt: skip
        return Verdict("failure", headline, "see where the error grows op by op: in_error and out_error in the "
                       "ops table (ops.csv of nbprec compare -o OUT), or a stricter rule", findings)  # fmt: skip
    inside = f", inside {table['parent'][rows[0]]} before it" if "parent" in table and table["parent"][rows[0]] else ""
    differ = f"input cosine {in_cosine}" if in_cosine != "n/a" else f"by {first.get('in_error', np.nan):.3g}, relative"
    headline = (f"{first['op']} ({kind}) is the first op that fails, but its inputs already differ ({differ}) "
                "and no op recorded before it fails: the error arose in what the dumps do not record"
                f"{inside} (ops inside module calls when only modules are dumped, as at msprobe's level L0; a cast; "
                f"autograd summing gradients).{note}")  # fmt: skip
    step = (f"nbprec ni {first['op']} --target T --bench B (its inputs, the line that called it); dump the ops "
            "inside modules (msprobe level mix or L1, nbprec capture level 'both')")  # fmt: skip
    return Verdict("failure", headline, step, findings)


__all__ = ["DIFFERENT_SHAPES_SHARE", "UNMATCHED_SHARE", "Finding", "Verdict", "comparability", "verdict"]
