"""From tensor statuses to ops: roll-up, first failing op, introduced vs inherited error, onset.

An op *introduced* an error when its inputs compare well and its outputs do not; it *inherited* the error
when some input already failed. Ops that draw random numbers (dropout and friends) whose inputs match but
whose outputs do not are labelled ``random``: un-fixed randomness, not a kernel defect. A discontinuous op
(relu, max, sort, ...) whose output differs because rounding noise in its inputs flipped elements is
``discontinuous``; one whose inputs agree exactly cannot have flipped anything: it introduced the error.
A module call that encloses a failing op *encloses* it (the op inside, not the module, is where the error
arose), and a parameter-gradient record inherits from the backward op that produced it. A failing op with an
input that could not be judged (no counterpart, unreadable) and none failing is ``unknown``: that input may be
where the error came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from nbprec.columns import Columns, as_columns, distinct, group_codes, text_in
from nbprec.compare.conditioning import sum_condition
from nbprec.compare.rules import (
    STATUS_FAIL,
    STATUS_NA,
    STATUS_PASS,
    Table,
    abs_error,
    below_noise,
    bench_magnitude,
    column,
)

#: Op types whose outputs depend on a random generator (compared across runs they differ by design).
RANDOM_OP_TYPES = frozenset(
    {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "native_dropout",
     "rrelu", "rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
     "bernoulli_", "multinomial", "normal", "normal_", "uniform_", "gumbel_softmax", "dropoutdomask",
     "dropoutgenmask"}
)  # fmt: skip

#: Op types whose output jumps when an input crosses a threshold or changes order (relu's kink, max, sort,
#: comparisons). Rounding noise in their inputs flips some elements, so their outputs (and their backward
#: gradients) can differ a lot without any kernel defect.
DISCONTINUOUS_OP_TYPES = frozenset(
    {
        "relu",
        "relu_",
        "relu6",
        "threshold",
        "hardtanh",
        "hardswish",
        "hardsigmoid",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "max",
        "min",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "sort",
        "argsort",
        "topk",
        "where",
        "gt",
        "lt",
        "ge",
        "le",
        "eq",
        "ne",
        "__gt__",
        "__lt__",
        "__ge__",
        "__le__",
        "round",
        "floor",
        "ceil",
        "sign",
        "clamp",
        "clip",
    }
)

#: A discontinuous op whose output cosine falls below this is treated as a real defect, not flipped elements.
DISCONTINUITY_MIN_COSINE = 0.9

INPUT_ROLES = ("input", "parameter")
OUTPUT_ROLES = ("output", "gradient")

#: per-op columns built from tensor metrics: (column, metric, roles, reducer)
_ROLLUP = (
    ("in_cosine", "cosine", INPUT_ROLES, "min"),
    ("out_cosine", "cosine", OUTPUT_ROLES, "min"),
    ("in_rel_euclidean", "rel_euclidean", INPUT_ROLES, "max"),
    ("out_rel_euclidean", "rel_euclidean", OUTPUT_ROLES, "max"),
    ("out_max_abs_err", "max_abs_err", OUTPUT_ROLES, "max"),
    ("out_max_rel_err", "max_rel_err", OUTPUT_ROLES, "max"),
    ("in_error", "_error", INPUT_ROLES, "max"),
    ("out_error", "_error", OUTPUT_ROLES, "max"),
)

#: An op whose worst output error is within this factor of its worst input error passed the error on
#: rather than introducing it (well-conditioned ops roughly preserve relative error).
INHERIT_FACTOR = 4.0


def is_discontinuous_op(op_type: str) -> bool:
    """Whether small input differences can flip an op's output elements (relu, max, sort, comparisons)."""
    return str(op_type).lower() in DISCONTINUOUS_OP_TYPES


#: APIs that draw random numbers only when called so: op type -> (positional index, keyword) of the dropout
#: probability, and of the training flag ("" when the API has none). msprobe records both among the call's
#: non-tensor arguments; nbprec's capture records the whole call.
RANDOM_WHEN_CALLED = {
    "multi_head_attention_forward": (("10", "dropout_p"), ("", "training")),
    "scaled_dot_product_attention": (("4", "dropout_p"), ("", "")),
    "dropout": (("1", "p"), ("2", "training")),
    "dropout1d": (("1", "p"), ("2", "training")),
    "dropout2d": (("1", "p"), ("2", "training")),
    "dropout3d": (("1", "p"), ("2", "training")),
    "alpha_dropout": (("1", "p"), ("2", "training")),
    "feature_alpha_dropout": (("1", "p"), ("2", "training")),
}


def call_arguments(call: dict | None) -> dict[str, object]:
    """A recorded call's scalar arguments by position (``"1"``) and keyword (``"p"``), from either form a dump
    records (msprobe's ``{"input.1": 0.1, "input.training": True}`` or nbprec's ``{"args": [...], "kwargs":
    {...}}``)."""
    if not call:
        return {}
    if "args" in call or "kwargs" in call:
        out = {str(i): v for i, v in enumerate(call.get("args") or []) if isinstance(v, (bool, int, float))}
        out.update({str(k): v for k, v in (call.get("kwargs") or {}).items() if isinstance(v, (bool, int, float))})
        return out
    return {k.split(".", 1)[-1]: v for k, v in call.items()}


def random_by_call(op_type: str, call: dict | None) -> bool | None:
    """Whether an op drew random numbers, from how it was called: True when its dropout probability is above 0
    (and it was not told it is not training), False when the call says it did not, ``None`` when unknown."""
    spec = RANDOM_WHEN_CALLED.get(str(op_type).lower())
    if spec is None:
        return None
    args = call_arguments(call)
    if not args:
        return None
    (p_pos, p_kw), (t_pos, t_kw) = spec
    p = args.get(p_kw, args.get(p_pos))
    training = args.get(t_kw, args.get(t_pos)) if (t_kw or t_pos) else True
    if p is None:
        return None
    return bool(float(p) > 0 and training is not False)


def random_calls(ops: list[str], op_types: list, calls: Mapping[str, dict]) -> np.ndarray:
    """Per row (its op and op type), :func:`random_by_call` of the op's recorded call in ``calls``; None in the
    rows of op types that never draw random numbers by their arguments (most rows: they are not looked at)."""
    out = np.full(len(ops), None, dtype=object)
    random_types = {kind for kind in set(op_types) if str(kind).lower() in RANDOM_WHEN_CALLED}
    if random_types:
        by_op: dict[str, bool | None] = {}
        for row, (op, kind) in enumerate(zip(ops, op_types, strict=True)):
            if kind in random_types:
                if op not in by_op:
                    by_op[op] = random_by_call(kind, calls.get(op))
                out[row] = by_op[op]
    return out


def is_random_op(op_type: str) -> bool:
    """Whether an op type draws random numbers (``Dropout`` module or ``dropout`` API alike)."""
    return str(op_type).lower() in RANDOM_OP_TYPES


#: The largest share of its op's input scale :func:`rounding_noise` takes for noise, whatever the benchmark's dtype
#: (the default rule's RED tolerance: a float16 or bfloat16 benchmark's 2^12 epsilons would be several times it).
NOISE_CEILING = 0.05


def rounding_noise(table: Table) -> np.ndarray:
    """Per row, whether an op's result is rounding noise on both sides: an output or gradient whose benchmark is
    nonzero and :func:`~nbprec.compare.rules.below_noise` (at most :data:`NOISE_CEILING` of the op's input scale),
    with a target within that of it (a zero gradient): the op's roll-up leaves it out, and the reason says so. So
    is an input that carries an earlier op's noise (:mod:`nbprec.compare.carried_noise`): judged as its maker's."""
    if "op_input_scale" not in table or not len(table):
        return np.zeros(len(table), dtype=bool)
    with np.errstate(invalid="ignore"):
        err_ok = abs_error(table) <= NOISE_CEILING * column(table, "op_input_scale", np.float64)
        carried = column(table, "noise_from", object).astype(bool) if "noise_from" in table else False
        judged = text_in(column(table, "role", object), OUTPUT_ROLES) | (carried & text_in(table["role"], ("input",)))
        return judged & below_noise(table, NOISE_CEILING) & (bench_magnitude(table) > 0) & err_ok


def relative_error(table: Table) -> np.ndarray:
    """Per row, the relative error used to follow errors through ops: with payloads the relative Euclidean
    distance; with statistics only, what the rules judge them by: the larger of the L2 norms' relative difference
    (a lower bound of RED) and the max, min and mean differences relative to the benchmark's largest magnitude."""
    red = column(table, "rel_euclidean", np.float64) if "rel_euclidean" in table else np.full(len(table), np.nan)
    if "norm_rel_diff" in table:
        stats = column(table, "norm_rel_diff", np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):  # (NaN where a statistic is missing: fmax skips it)
            for name in [name for name in ("max_diff", "min_diff", "mean_diff") if name in table]:
                stats = np.fmax(stats, np.abs(column(table, name, np.float64)) / bench_magnitude(table))
        red = np.where(np.isnan(red), stats, red)
    return red


#: columns of the per-op roll-up that a DataFrame gives pandas' string dtype (as they have always had)
OPS_TEXT = ("bench_op", "in_status", "status", "origin")
_OPS_KEYS = ("step", "rank", "op", "order", "op_type", "module", "direction")


def ops_frame(ops: Columns) -> Any:
    """The per-op roll-up as the pandas DataFrame ``Comparison.ops`` is."""
    return ops.to_frame(text=OPS_TEXT)


class OpIndex:
    """The rule-independent half of the per-op roll-up, computed once per comparison.

    ``codes`` maps every table row to its op (a row of :attr:`ops`, which is in execution order);
    :attr:`ops` (:class:`~nbprec.columns.Columns`) holds the op's identity and its worst input/output metrics.
    :func:`judge_ops` adds the rule-dependent statuses in a few vectorised passes, which is what a threshold
    slider runs.
    """

    def __init__(self, table: Table) -> None:
        table = as_columns(table)
        n = len(table)
        role = column(table, "role", object)
        self.is_input = text_in(role, INPUT_ROLES)
        if n == 0:
            self.codes = np.empty(0, dtype=np.int64)
            empty = {c: np.empty(0, dtype=np.int64 if c in ("step", "rank", "order") else object) for c in _OPS_KEYS}
            self.ops = Columns({**empty, "bench_op": np.empty(0, dtype=object), "tensors": np.empty(0, np.int64)})
            for name, *_ in _ROLLUP:
                self.ops[name] = np.empty(0, dtype=np.float64)
            self.starts = np.empty(0, dtype=np.int64)
            return
        step, rank, order = column(table, "step"), column(table, "rank"), column(table, "order")
        seen, n_ops = group_codes(step, rank, column(table, "op", object))
        first_row = np.full(n_ops, n, dtype=np.int64)
        np.minimum.at(first_row, seen, np.arange(n))  # each op's first row, by first appearance
        by_order = np.lexsort((order[first_row], rank[first_row], step[first_row]))  # stable: ties keep appearance
        first_row = first_row[by_order]
        position = np.empty(n_ops, dtype=np.int64)
        position[by_order] = np.arange(n_ops)
        self.codes = position[seen]
        ops = Columns({c: column(table, c)[first_row] for c in _OPS_KEYS})
        bench_op = column(table, "bench_op", object)
        has_bench = bench_op != ""
        first_bench = np.full(n_ops, "", dtype=object)
        # the first non-empty benchmark op of each target op (rows are in index order within an op)
        rows = np.flatnonzero(has_bench)[::-1]
        first_bench[self.codes[rows]] = bench_op[rows]
        ops["bench_op"] = first_bench
        ops["tensors"] = np.bincount(self.codes, minlength=n_ops)
        error = relative_error(table)
        noise = rounding_noise(table)  # (relative metrics of noise against noise: no measure of the op)
        for name, metric, roles, how in _ROLLUP:
            values = error if metric == "_error" else (column(table, metric, np.float64) if metric in table else None)
            if values is None:
                ops[name] = np.full(n_ops, np.nan)
                continue
            mask = text_in(role, roles) & ~np.isnan(values) & (~noise if metric != "max_abs_err" else True)
            out = np.full(n_ops, np.inf if how == "min" else -np.inf)
            (np.minimum if how == "min" else np.maximum).at(out, self.codes[mask], values[mask])
            ops[name] = np.where(np.isinf(out) & (out > 0 if how == "min" else out < 0), np.nan, out)
        self.ops = ops
        self.starts = _group_starts(ops)
        op_types = ops["op_type"].tolist()
        self._random = _per_type(op_types, is_random_op)
        if "random_call" in table:  # how each op was called says it drew random numbers (or did not)
            by_call = column(table, "random_call", object)[first_row]
            known = np.array([v is not None and v == v for v in by_call], dtype=bool)
            self._random = np.where(known, [bool(v) if k else False for v, k in zip(by_call, known, strict=True)],
                                    self._random)  # fmt: skip
        discontinuous = _per_type(op_types, is_discontinuous_op)
        # flipped elements need inputs that differ: with inputs that agree exactly, the op itself is wrong
        inputs_equal = ops["in_error"] == 0
        self._flips = (
            discontinuous & ~inputs_equal & (np.nan_to_num(ops["out_cosine"], nan=1.0) >= DISCONTINUITY_MIN_COSINE)
        )
        # parameter-gradient records (msprobe's parameters_grad): copies of what a backward op produced
        gradient = role == "gradient"
        self.gradient_only = np.bincount(self.codes, weights=~gradient, minlength=n_ops) == 0
        self.parent = _parent_positions(table, first_row, ops)
        self.container = np.zeros(n_ops, dtype=bool)
        self.container[self.parent[self.parent >= 0]] = True
        self.condition = sum_condition(table, self.codes, ops)  # (a sum that cancels amplifies its inputs' error)


def _per_type(op_types: list, flag: Callable[[str], bool]) -> np.ndarray:
    """``flag`` of each op's type, found once per distinct type (a model has a few dozen)."""
    flags = {kind: flag(kind) for kind in set(op_types)}
    return np.fromiter(map(flags.__getitem__, op_types), bool, len(op_types))


_STATUS_NAMES = np.array([STATUS_NA, STATUS_PASS, STATUS_FAIL], dtype=object)
_ORIGIN_NAMES = np.array(
    ["", "inherited", "introduced", "random", "discontinuous", "encloses", "unknown"], dtype=object
)


def _op_status(codes: np.ndarray, status: np.ndarray, n_ops: int) -> np.ndarray:
    """Worst status per op as codes 0 (n/a), 1 (pass), 2 (fail)."""
    fail = np.bincount(codes, weights=(status == STATUS_FAIL), minlength=n_ops) > 0
    ok = np.bincount(codes, weights=(status == STATUS_PASS), minlength=n_ops) > 0
    return np.where(fail, 2, np.where(ok, 1, 0))


def judge_ops(index: OpIndex, status: np.ndarray) -> Columns:
    """The per-op roll-up under one rule: :attr:`OpIndex.ops` plus ``in_status``, ``status``, ``origin``,
    ``explained`` and ``amplification`` (:class:`~nbprec.columns.Columns`; :func:`ops_frame` makes it a
    DataFrame)."""
    status = np.asarray(status, dtype=object)
    ops = index.ops.copy()  # the shared index is never modified
    n_ops = len(ops)
    if n_ops == 0:
        for name in ("in_status", "status", "origin"):
            ops[name] = np.empty(0, dtype=object)
        ops["explained"] = np.empty(0, dtype=bool)
        ops["amplification"] = np.empty(0, dtype=np.float64)
        return ops
    ins, outs = index.is_input, ~index.is_input
    in_code = _op_status(index.codes[ins], status[ins], n_ops)
    out_code = _op_status(index.codes[outs], status[outs], n_ops)
    ops["in_status"] = _STATUS_NAMES[in_code]
    ops["status"] = _STATUS_NAMES[out_code]
    failed = out_code == 2
    with np.errstate(invalid="ignore"):
        passed_on = ops["out_error"] <= INHERIT_FACTOR * index.condition * ops["in_error"]
    # a parameter-gradient record has no inputs of its own: it inherits from the backward op that made it
    introduced = failed & (in_code != 2) & ~passed_on & ~index.gradient_only
    # an input that could not be judged (no counterpart, unreadable) may be where the error came from
    unjudged = np.bincount(index.codes[ins], weights=(status[ins] == STATUS_NA), minlength=n_ops) > 0
    unknown = introduced & unjudged
    introduced &= ~unjudged
    origin = np.where(introduced, 2, np.where(unknown, 6, np.where(failed, 1, 0)))
    origin[introduced & index._random] = 3
    origin[introduced & ~index._random & index._flips] = 4
    # a module call enclosing a failing op is not where the error arose: the op inside is
    encloses = failed & index.container & _ancestors(index.parent, failed & ~index.container)
    origin[encloses] = 5
    ops["origin"] = _ORIGIN_NAMES[origin]
    explained = _explained(ops, index.starts)
    if encloses.any():  # a module call is explained when every failure inside it is
        unexplained = _ancestors(index.parent, failed & ~index.container & ~explained)
        explained[encloses] = ~unexplained[encloses]
    ops["explained"] = explained
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["amplification"] = ops["out_rel_euclidean"] / ops["in_rel_euclidean"]
    return ops


def rollup_ops(table: Table, status: np.ndarray) -> Any:
    """One row per target op, in execution order, with worst input/output metrics and a status (a DataFrame).

    Columns: step, rank, op, order, op_type, module, direction, bench_op, tensors, the ``in_*``/``out_*``
    metric columns, ``in_error``/``out_error`` (RED, or the norms' relative difference without payloads),
    ``in_status``, ``status`` (from outputs and gradients), ``origin`` (``introduced``, ``inherited``,
    ``random``, ``discontinuous`` or ``''``), ``explained`` and ``amplification`` (output RED over input RED).
    """
    return ops_frame(judge_ops(OpIndex(table), np.asarray(status, dtype=object)))


def _parent_positions(table: Columns, first_row: np.ndarray, ops: Columns) -> np.ndarray:
    """Per op, the position (in ``ops``) of the module call enclosing it in the same step and rank, or -1.

    From the table's ``parent`` column (the target dump's hierarchy); -1 throughout when it has none.
    """
    if "parent" not in table:
        return np.full(len(ops), -1, dtype=np.int64)
    parents = [p if isinstance(p, str) else "" for p in column(table, "parent", object)[first_row].tolist()]
    steps, ranks = ops["step"].tolist(), ops["rank"].tolist()
    where = {key: i for i, key in enumerate(zip(steps, ranks, ops["op"].tolist(), strict=True))}
    keys = zip(steps, ranks, parents, strict=True)
    return np.array([where.get(key, -1) if key[2] else -1 for key in keys], dtype=np.int64)


def _ancestors(parent: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """Which ops enclose (directly or not) a flagged op, following ``parent`` positions up (-1: none)."""
    out = np.zeros(len(parent), dtype=bool)
    up = parent[flagged]
    for _ in range(len(parent)):  # each round climbs one level; a cycle cannot loop past the op count
        up = up[up >= 0]
        up = up[~out[up]]
        if not len(up):
            break
        out[up] = True
        up = parent[distinct(up)]
    return out


def _group_starts(ops: Table) -> np.ndarray:
    """Per op, the position of the first op of its (step, rank) stream (ops are sorted by step, rank, order)."""
    step, rank = column(ops, "step"), column(ops, "rank")
    new_group = np.ones(len(step), dtype=bool)
    new_group[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    return np.maximum.accumulate(np.where(new_group, np.arange(len(step)), 0))


def _explained(ops: Table, starts: np.ndarray | None = None) -> np.ndarray:
    """Failures explained by randomness or discontinuity: such ops, and the inherited failures after them.

    Per step and rank, in execution order: a ``random``/``discontinuous`` failure is explained, and so is an
    ``inherited`` failure that comes after one of those while no ``introduced`` failure has occurred yet.
    """
    origin = column(ops, "origin", object)
    if len(origin) == 0:
        return np.zeros(0, dtype=bool)
    starts = _group_starts(ops) if starts is None else starts
    noise = (origin == "random") | (origin == "discontinuous")
    introduced = origin == "introduced"

    def before(flags: np.ndarray) -> np.ndarray:  # count of flags earlier in the same stream
        total = np.concatenate([[0], np.cumsum(flags)])
        return total[:-1] - total[starts]

    return noise | ((origin == "inherited") & (before(noise) > 0) & (before(introduced) == 0))


def failing_mask(ops: Table, *, origin: str | None = None, include_explained: bool = False) -> np.ndarray:
    """The ops that fail in the sense of :func:`first_failing`: failing, not merely enclosing a failing op, not
    explained (unless ``include_explained``), of ``origin`` when given."""
    op_origin = column(ops, "origin", object)
    mask = (column(ops, "status", object) == STATUS_FAIL) & (op_origin != "encloses")
    if not include_explained and "explained" in ops:
        mask &= ~column(ops, "explained", bool)
    if origin is not None:
        mask &= op_origin == origin
    return mask


def first_failing(ops: Any, *, origin: str | None = None, include_explained: bool = False) -> Any:
    """The first op in execution order that fails (a row of the ``ops`` DataFrame), or ``None``.

    Failures explained by un-fixed randomness or by discontinuous ops flipping elements (and what they pass
    on) are skipped unless ``include_explained``; so are module calls that merely enclose a failing op
    (origin ``encloses``). ``origin`` restricts the search to one origin.
    """
    hits = np.flatnonzero(failing_mask(ops, origin=origin, include_explained=include_explained))
    return None if not hits.size else ops.iloc[int(hits[0])]


def onset_position(ops: Table, start: int = 0, end: int | None = None, window: int = 20, share: float = 0.5) -> int:
    """:func:`divergence_onset` among the ops ``start:end`` (one stream): its position in ``ops``, or -1."""
    end = len(ops) if end is None else end
    status = column(ops, "status", object)[start:end]
    origin = column(ops, "origin", object)[start:end]
    judged = np.flatnonzero((status != STATUS_NA) & (origin != "encloses"))
    fails = status[judged] == STATUS_FAIL
    if "explained" in ops:
        fails &= ~column(ops, "explained", bool)[start:end][judged]
    if not fails.any():
        return -1
    counts = np.concatenate([[0], np.cumsum(fails)])
    for i in np.flatnonzero(fails):
        stop = min(len(fails), i + 1 + window)
        ahead = stop - (i + 1)
        if ahead == 0 or (counts[stop] - counts[i + 1]) / ahead >= share:
            return start + int(judged[i])
    return -1


def divergence_onset(ops: Any, window: int = 20, share: float = 0.5) -> Any:
    """Where the divergence sets in: the first failing op after which failing ops stay common (a row of the
    ``ops`` DataFrame), or ``None``.

    The onset is the first failing op such that at least ``share`` of the next ``window`` ops with a status
    also fail; a lone failure that the run recovers from is not an onset.
    """
    position = onset_position(ops, window=window, share=share)
    return None if position < 0 else ops.iloc[position]
