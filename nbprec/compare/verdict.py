"""The verdict of a comparison in words: are the runs comparable, what failed first, why, and what to do next.

Computed once in the core; the CLI summary, the dashboard header and the report all show the same
:class:`Verdict` (its :attr:`~Verdict.text`). Before any op is blamed, :func:`~nbprec.compare.findings.comparability`
checks that the two runs can be compared at all (:mod:`nbprec.compare.findings`).

Examples
--------
>>> comp = nbprec.compare("runs/bf16", "runs/fp32")   # doctest: +SKIP
>>> print(comp.verdict().text)                        # doctest: +SKIP
Functional.gelu.1.forward (gelu) is the first op that fails: its inputs matched at cosine 1.000000, its output
fell to 0.8956 (RED 0.27). It introduced the error; 78 ops after it inherit it.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, text_in
from nbprec.compare.culprit import INHERIT_FACTOR, failing_mask
from nbprec.compare.findings import DIFFERENT_SHAPES_SHARE, UNMATCHED_SHARE, Finding, comparability, text_values
from nbprec.compare.presence import BOTH, missing_by_kind, presence
from nbprec.compare.rules import STATUS_FAIL, STATUS_PASS, column
from nbprec.compare.runs import collective_changed_data, first_failing_position, is_collective, op_at, where

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

#: What a collective whose inputs agree on every rank did (:func:`~nbprec.compare.runs.collective_changed_data`).
_CHANGED = ("the collective itself changed the data (a faulty collective, a reduction in a lower precision than "
            "the benchmark's, or another reduction than the benchmark's)")  # fmt: skip
_CHECK_COLLECTIVE = ("check the collective: its reduction op and dtype, and the communication library's settings, "
                     "HCCL's on an NPU, against the sum of the ranks' inputs")  # fmt: skip

#: Finding code -> the few words the headline gives it.
_SHORT = {
    "input_overflow": "the target's inputs overflow their dtype",
    "different_inputs": "their inputs differ",
    "different_weights": "their weights differ",
    "different_models": "they look like two different models",
}


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
        """The verdict as plain text: the findings on whether the runs compare, the headline and the next step, then
        the asides (how some rows were judged: :attr:`Finding.aside`)."""
        lines = [f"! {f.message} Fix: {f.fix}" for f in self.findings if not f.aside]
        lines.append(self.headline)
        if self.next_step:
            lines.append(f"Next: {self.next_step}")
        lines += [f"! {f.message} Fix: {f.fix}" for f in self.findings if f.aside]
        return "\n".join(lines)

    def to_html(self) -> str:
        """The verdict as an HTML fragment (every name escaped), in the order of :attr:`text`."""
        import html

        e = html.escape

        def listed(findings: list[Finding]) -> str:
            items = "".join(f"<li class='nbprec-finding'><b>{e(f.message)}</b> Fix: {e(f.fix)}</li>" for f in findings)
            return f"<ul class='nbprec-findings'>{items}</ul>" if items else ""

        step = f"<br><i>Next:</i> {e(self.next_step)}" if self.next_step else ""
        before, after = listed([f for f in self.findings if not f.aside]), listed([f for f in self.findings if f.aside])
        return f"<div class='nbprec-verdict'>{before}<p><b>{e(self.headline)}</b>{step}</p>{after}</div>"

    def __str__(self) -> str:
        return self.text


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
    role = text_values(table, "role")[rows]
    outputs, in_rows = rows[text_in(role, ("output", "gradient"))], rows[role == "input"]

    def one_value(rows: np.ndarray) -> str:  # a scalar's cosine is 1 whatever its value: its values instead
        if len(rows) != 1 or not all(c in table for c in ("numel", "target_mean", "bench_mean")):
            return ""
        if column(table, "numel", np.float64)[rows[0]] != 1:
            return ""
        return f"(one value) is {table['target_mean'][rows[0]]:.4g} against {table['bench_mean'][rows[0]]:.4g}"

    if np.isfinite(out_cos):
        red = op.get("out_rel_euclidean", np.nan)
        said = f"its inputs matched at cosine {_number(in_cos)}" if np.isfinite(in_cos) else "its inputs pass"
        said = said if len(in_rows) else "it takes no tensor (it makes one from other data)"
        said = f"its input {one_value(in_rows)}" if one_value(in_rows) else said
        if one_value(outputs):
            return f"{said}, its output {one_value(outputs)}"
        if np.isfinite(in_cos) and round(out_cos, 4) >= round(in_cos, 4):  # the direction held: a change of scale
            return f"{said}, its output kept cosine {_number(out_cos, 4)} but is off in scale (RED {red:.3g})"
        return f"{said}, its output fell to cosine {_number(out_cos, 4)} (RED {red:.3g})"
    if "reason" in table and any(r.startswith("target has non-finite") for r in text_values(table, "reason")[outputs]):
        return "its inputs are finite, its output holds NaN/inf"
    in_err, out_err = op.get("in_error", np.nan), op.get("out_error", np.nan)
    inputs = "its inputs' statistics agree exactly" if in_err == 0 else f"its inputs' statistics differ by {in_err:.3g}"
    if not len(in_rows):  # (a tensor made from other data: a list, a NumPy array, a factory's arguments)
        inputs = "it takes no tensor (it makes one from other data)"
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


def _earlier(ops: Columns, op: dict[str, Any]) -> np.ndarray:
    """Which ops ran before ``op`` (a row of ``ops``) in its step and rank, as a boolean mask over ``ops``."""
    return (ops["step"] == op["step"]) & (ops["rank"] == op["rank"]) & (ops["order"] < op["order"])


def _named(op: dict[str, Any], several: bool) -> str:
    """``OP (TYPE)``, or ``OP (TYPE, step S, rank R)`` when the comparison spans several steps or ranks."""
    return f"{op['op']} ({op.get('op_type', '') or '?'}{', ' + where(op) if several else ''})"


def _ni(comp: Comparison, op: str) -> str:
    """The ``nbprec ni`` command that shows ``op`` of this comparison's two runs (names quoted for a shell)."""
    target, bench = (shlex.quote(str(comp.meta.get(side, side.upper()))) for side in ("target", "bench"))
    return f"nbprec ni {shlex.quote(op)} --target {target} --bench {bench}"


def _op_rows(table: Columns, op: dict[str, Any]) -> np.ndarray:
    """The rows of ``op`` (a row of the ops table) in ``table``."""
    return np.flatnonzero((table["op"] == op["op"]) & (table["step"] == op["step"]) & (table["rank"] == op["rank"]))


#: How many candidates :func:`_later_fault` examines at most (each collective among them scans the ops once).
_LATER_CANDIDATES = 32


def _saved_inputs_pass(ops: Columns, positions: list[int]) -> dict[int, bool]:
    """For each backward op among ``positions``: whether the inputs of its forward call (the same call's
    ``.forward`` record, at its step and rank) pass, or are not recorded. Its gradient is made from the tensors that
    call saved, which are not among its compared inputs: a loss's gradient, given the same 1.0 in both runs, from
    logits that differ, looks introduced."""
    from nbprec.formats.msprobe_keys import forward_name  # (here: a native pair's command has no other use for it)

    names = ops["op"]
    wanted = {p: forward_name(str(names[p])) for p in positions if ops["direction"][p] == "backward"}
    wanted = {p: name for p, name in wanted.items() if name != names[p]}  # (a name without its forward call's)
    if not wanted:
        return {}
    looked = set(wanted.values())
    rows = [i for i, name in enumerate(names.tolist()) if name in looked]
    in_status, step, rank = column(ops, "in_status", object), ops["step"], ops["rank"]
    passes: dict[tuple, bool] = {}
    for i in rows:
        key = (names[i], step[i], rank[i])
        passes[key] = passes.get(key, True) and in_status[i] == STATUS_PASS
    return {p: passes.get((name, step[p], rank[p]), True) for p, name in wanted.items()}


def _later_fault(comp: Comparison, table: Columns, first: dict[str, Any]) -> tuple[str, str]:
    """The next op after ``first`` (by step, order and rank) that fails and made its error on its own: a kernel's
    fault behind a build-up, or a second fault that fixing the first would leave. Not ``first``'s own call on other
    ranks, a collective that passes on another rank's error, or a backward op whose forward call's inputs already
    differ (:func:`_saved_inputs_pass`); the first :data:`_LATER_CANDIDATES` candidates are examined. Returns its
    name and why it is blamed, and the command to look at it; ('', '') when there is none."""
    ops = comp._ops_columns
    step, order, rank = ops["step"], ops["order"], ops["rank"]
    later = (order > first["order"]) | ((order == first["order"]) & (rank > first["rank"]))
    later = (step > first["step"]) | ((step == first["step"]) & later)
    found = np.flatnonzero(failing_mask(ops, origin="introduced") & later
                           & ~((ops["op"] == first["op"]) & (step == first["step"])))  # fmt: skip
    found = found[np.lexsort((rank[found], order[found], step[found]))][:_LATER_CANDIDATES].tolist()
    saved = _saved_inputs_pass(ops, found)
    for position in found:
        collective = is_collective(ops["op_type"][position])
        if not saved.get(position, True) or (collective and not collective_changed_data(table, ops, position)):
            continue
        op = comp.op(position)  # (a dict: no pandas)
        said = f"{_named(op, comp.several_runs)}: {_why(op, table, _op_rows(table, op))}"
        if collective:  # (its inputs agree on every rank)
            return (f"{said}; its inputs agree on every rank that ran it: {_CHANGED}.",
                    f"{_ni(comp, op['op'])} (the error it introduced; {_CHECK_COLLECTIVE})")  # fmt: skip
        return f"{said}.", f"{_ni(comp, op['op'])} (the error it introduced)"
    return "", ""


def _grew_at(comp: Comparison, first: dict[str, Any]) -> tuple[str, str]:
    """For a first failing op whose passing inputs carried most of its error: the op before it (in its step and
    rank) where that error jumped most while it passed the rule (its output's error above its inputs' by more
    than an op passes on, and at least half the error that reaches the failing op), in a sentence, and the command
    to look at it; ('', '') when the error built up over many ops."""
    ops, index = comp._ops_columns, comp.op_index
    arriving = float(first.get("in_error", np.nan))
    in_error, out_error = column(ops, "in_error", np.float64), column(ops, "out_error", np.float64)
    before = _earlier(ops, first) & (ops["status"] == STATUS_PASS) & ~index.container & ~index.gradient_only
    with np.errstate(invalid="ignore"):
        grew = before & (out_error >= 0.5 * arriving) & (out_error > INHERIT_FACTOR * index.condition * in_error)
    if not np.isfinite(arriving) or not grew.any():
        return "", ""
    op = comp.op(int(np.flatnonzero(grew)[np.argmax(out_error[grew])]))
    came = "inputs that agree exactly" if op["in_error"] == 0 else f"its inputs' {op['in_error']:.3g}"
    sentence = (f" The largest jump before it is at {_named(op, comp.several_runs)}, "
                f"which passes the rule: its output's error is {op['out_error']:.3g}, from {came}.")  # fmt: skip
    return (
        sentence,
        f"{_ni(comp, op['op'])} (where the error jumped: its kernel, its dtype, or a sum inside it whose terms cancel)",
    )


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
        precisions = sorted({p for p in text_values(table, "precision").tolist() if p}) if "precision" in table else []
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
    rows = _op_rows(table, first)
    later = (ops["step"] > first["step"]) | ((ops["step"] == first["step"]) & (ops["order"] > first["order"]))
    after = int(((ops["status"] == STATUS_FAIL) & later & ~ops["explained"]).sum())
    kind = (str(first.get("op_type", "")) or "?") + (f", {where(first)}" if several else "")
    if first["origin"] == "introduced" and is_collective(first.get("op_type", "")):
        if collective_changed_data(table, ops, position):
            headline = (f"{first['op']} ({kind}) is the first op that fails: {_why(first, table, rows)}. It is a "
                        f"collective, and its inputs agree on every rank that ran it: {_CHANGED}; {after} failing "
                        f"op(s) after it inherit it.{note}")  # fmt: skip
            return Verdict("failure", headline, f"{_ni(comp, first['op'])}; then {_CHECK_COLLECTIVE}", findings)
        headline = (f"{first['op']} ({kind}) is the first op that fails: {_why(first, table, rows)}. It is a "
                    "collective: its output mixes every rank's data, so the error comes from another rank's "
                    f"contribution, not from this rank; {after} failing op(s) after it inherit it.{note}")  # fmt: skip
        if note:
            step = "dump every rank of both runs and compare again: the rank that diverges before it is where it arose"
        else:
            step = "look at what the other ranks send into it: their ops before it, and ops the dumps do not record"
        return Verdict("failure", headline, step, findings)
    if first["origin"] == "introduced":
        second, look = _later_fault(comp, table, first)
        if second:
            second, look = f" Another op introduces an error of its own later: {second}", f"; then {look}"
        headline = (f"{first['op']} ({kind}) is the first op that fails: {_why(first, table, rows)}. It introduced "
                    f"the error; {after} failing op(s) after it inherit it.{second}{note}")  # fmt: skip
        made = not text_in(text_values(table, "role")[rows], ("input",)).any()  # (from data, not tensors)
        if made:
            step = f"{_ni(comp, first['op'])}; then check the data it was made from"
        elif comp.meta.get("target_format") == "nbprec" and "tensor" in text_values(table, "compare_mode").tolist():
            target = shlex.quote(str(comp.meta.get("target", "TARGET")))
            step = f"nbprec isolate {target} {first['op']} (re-run on its own inputs in float64: kernel or rounding?)"
        else:
            step = f"{_ni(comp, first['op'])}; then keep it in float32 or check its kernel"
        return Verdict("failure", headline, step + look, findings)
    if first["origin"] == "unknown":
        headline = (f"{first['op']} ({kind}) is the first op that fails; some of its inputs could not be compared "
                    "(no counterpart, or unreadable), so whether it introduced the error or inherited it from them "
                    f"is unknown.{note}")  # fmt: skip
        return Verdict("failure", headline, f"{_ni(comp, first['op'])} (see which inputs)",
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
        return Verdict("failure", headline, f"{_ni(comp, module + '.backward.0')} (and its forward "
                       "call): which gradient or input differs first", findings)  # fmt: skip
    in_cosine = _number(first.get("in_cosine", np.nan))
    later, look = _later_fault(comp, table, first)
    if later:
        later, look = f" The first op to introduce an error of its own comes later: {later}", f"{look}; "
    if first.get("in_status") == STATUS_PASS:  # its inputs were compared and passed, carrying most of its error
        if np.isfinite(first.get("in_rel_euclidean", np.nan)):
            carried = (f"input cosine {in_cosine}, RED {_number(first['in_rel_euclidean'], 3)}; output RED "
                       f"{_number(first.get('out_rel_euclidean', np.nan), 3)}")  # fmt: skip
        else:  # statistics only
            carried = (f"its inputs' statistics differ by {first.get('in_error', np.nan):.3g}, its output's by "
                       f"{first.get('out_error', np.nan):.3g}")  # fmt: skip
        condition = float(comp.op_index.condition[position])
        if first.get("out_error", np.nan) > INHERIT_FACTOR * first.get("in_error", np.nan):  # (allowed: a sum)
            headline = (f"{first['op']} ({kind}) is the first op that fails, but it did not introduce the error: "
                        f"it is a sum whose terms cancel (its inputs are up to {condition:,.0f} times its result, by "
                        f"their RMS), and even an exact sum makes its inputs' small error a large one ({carried}). "
                        "The ops before it all pass: a value made by cancellation (a loss averaging terms of both "
                        f"signs, a residual that cancels) magnifies any difference.{later}{note}")  # fmt: skip
            return Verdict("failure", headline, f"{look}nothing to fix in it: compare what feeds it (its inputs "
                           "pass), or compute the value without the cancellation", findings)  # fmt: skip
        grew, step = _grew_at(comp, first)
        headline = (f"{first['op']} ({kind}) is the first op that fails, but it did not introduce the error: its "
                    f"inputs, which pass, already carried most of it ({carried}, less than {INHERIT_FACTOR:g} times "
                    "as much), and it took them over the rule's bounds.")  # fmt: skip
        if grew:
            return Verdict("failure", f"{headline}{grew}{later}{note}", f"{look}{step}", findings)
        headline += (" The difference built up over the ops before it, which all pass: no one op is to blame under "
                     f"this rule.{later}{note}")  # fmt: skip
        return Verdict("failure", headline, f"{look}see where the error grows op by op: in_error and out_error in "
                       "the ops table (ops.csv of nbprec compare -o OUT), or a stricter rule", findings)  # fmt: skip
    differ = f"input cosine {in_cosine}" if in_cosine != "n/a" else f"by {first.get('in_error', np.nan):.3g}, relative"
    if in_cosine != "n/a" and np.isfinite(first.get("in_rel_euclidean", np.nan)):
        differ += f", RED {first['in_rel_euclidean']:.3g}"
    unmatched = _unmatched_before(comp, position)
    if unmatched is not None:  # the target made calls the benchmark did not: what they computed is not compared
        headline = (f"{first['op']} ({kind}) is the first op that fails, but its inputs already differ ({differ}) "
                    f"and no op compared before it fails: the error arose before it in what could not be compared, "
                    f"most likely the target's calls that have no counterpart in the benchmark (the last of them: "
                    f"{op_at(unmatched, several)}), or what the dumps do not record.{later}{note}")  # fmt: skip
        step = (f"{look}{_ni(comp, unmatched['op'])} (a call of the target's only); make both runs take the same "
                "code path, or pair the calls with --mapping")  # fmt: skip
        return Verdict("failure", headline, step, findings)
    apis = any(not str(name).startswith("Module.") for name in comp._ops_columns["op"].tolist())  # (not L0 alone)
    headline = (f"{first['op']} ({kind}) is the first op that fails, but its inputs already differ ({differ}) "
                "and no op recorded before it fails: the error arose in what the dumps do not record"
                f"{_where_unrecorded(comp, position)} (ops the dump leaves out: inside module calls when only modules "
                "are dumped, as at msprobe's level L0, or outside its list or scope; a cast; autograd summing "
                f"gradients; code outside torch, such as NumPy or a custom kernel).{later}{note}")  # fmt: skip
    if apis:  # (the dumps hold API calls already: what ran between the recorded calls is not torch's)
        step = (f"{look}{_ni(comp, first['op'])} (its inputs, the line that called it); look at the code between "
                "it and the recorded op before it (APIs a list or scope left out, NumPy, custom kernels, in-place "
                "changes)")  # fmt: skip
    else:
        step = (f"{look}{_ni(comp, first['op'])} (its inputs, the line that called it); dump the ops "
                "inside modules (msprobe level mix or L1, nbprec capture level 'both')")  # fmt: skip
    return Verdict("failure", headline, step, findings)


def _unmatched_before(comp: Comparison, position: int) -> dict[str, Any] | None:
    """The last op before the op at ``position`` (in its step and rank) with no counterpart in the benchmark (none
    of its tensors paired), when it ran after every op compared before it (right before it: what it computed may
    be the input that differs); else ``None``."""
    ops = comp._ops_columns
    op = comp.op(position)
    before = _earlier(ops, op) & ~comp.op_index.container
    alone = column(ops, "bench_op", object) == ""
    if not (before & alone).any():
        return None
    last = int(np.flatnonzero(before & alone)[np.argmax(ops["order"][before & alone])])
    compared = ops["order"][before & ~alone]
    return comp.op(last) if not len(compared) or ops["order"][last] > compared.max() else None


def _where_unrecorded(comp: Comparison, position: int) -> str:
    """Where the unrecorded ops behind the op at ``position`` ran: ``, inside PARENT before it`` when a recorded op
    of its enclosing module call ran before it, ``, before PARENT`` when it is that call's first, '' at top level."""
    parent = int(comp.op_index.parent[position])
    if parent < 0:
        return ""
    ops, up = comp._ops_columns, comp.op_index.parent
    earlier = np.flatnonzero(_earlier(ops, comp.op(position)))
    chain, inside = up[earlier], np.zeros(len(earlier), dtype=bool)
    while (chain >= 0).any():  # (module calls nest a few levels deep)
        inside |= chain == parent
        chain = np.where(chain >= 0, up[np.maximum(chain, 0)], -1)
    name = comp.op(parent)["op"]
    return f", inside {name} before it" if inside.any() else f", before {name}"


__all__ = ["DIFFERENT_SHAPES_SHARE", "UNMATCHED_SHARE", "Finding", "Verdict", "comparability", "verdict"]
