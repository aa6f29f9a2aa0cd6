"""From tensor statuses to ops: roll-up, first failing op, introduced vs inherited error, onset.

An op *introduced* an error when its inputs compare well and its outputs do not; it *inherited* the error
when some input already failed. Ops that draw random numbers (dropout and friends) whose inputs match but
whose outputs do not are labelled ``random``: un-fixed randomness, not a kernel defect.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nbprec.compare.rules import STATUS_FAIL, STATUS_NA, STATUS_PASS

#: Op types whose outputs depend on a random generator (compared across runs they differ by design).
RANDOM_OP_TYPES = frozenset(
    {
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "native_dropout",
        "rrelu",
        "rand",
        "randn",
        "rand_like",
        "randn_like",
        "randint",
        "randint_like",
        "randperm",
        "bernoulli",
        "bernoulli_",
        "multinomial",
        "normal",
        "normal_",
        "uniform_",
        "gumbel_softmax",
        "dropoutdomask",
        "dropoutgenmask",
    }
)

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


def is_random_op(op_type: str) -> bool:
    """Whether an op type draws random numbers (``Dropout`` module or ``dropout`` API alike)."""
    return str(op_type).lower() in RANDOM_OP_TYPES


def relative_error(table: pd.DataFrame) -> np.ndarray:
    """Per row, the relative error used to follow errors through ops: RED, or the norms' relative difference.

    With payloads this is the relative Euclidean distance; with statistics only, the relative difference of
    the L2 norms, a lower bound of it.
    """
    red = table["rel_euclidean"].to_numpy(np.float64) if "rel_euclidean" in table else np.full(len(table), np.nan)
    if "norm_rel_diff" in table:
        red = np.where(np.isnan(red), table["norm_rel_diff"].to_numpy(np.float64), red)
    return red


def _worst_status(statuses: pd.Series) -> str:
    values = set(statuses)
    if STATUS_FAIL in values:
        return STATUS_FAIL
    if STATUS_PASS in values:
        return STATUS_PASS
    return STATUS_NA


def rollup_ops(table: pd.DataFrame, status: pd.Series) -> pd.DataFrame:
    """One row per target op, in execution order, with worst input/output metrics and a status.

    Columns: step, rank, order, op, op_type, module, direction, bench_op, tensors, the ``in_*``/``out_*``
    metric columns, ``in_status``, ``status`` (from outputs and gradients), ``origin`` (``introduced``,
    ``inherited``, ``random`` or ``''``) and ``amplification`` (output RED over input RED).
    """
    keys = ["step", "rank", "op"]
    frame = table.assign(
        _status=status.to_numpy(),
        _is_in=table["role"].isin(INPUT_ROLES).to_numpy(),
        _error=relative_error(table),
    )
    grouped = frame.groupby(keys, sort=False)
    ops = grouped.agg(
        order=("order", "first"),
        op_type=("op_type", "first"),
        module=("module", "first"),
        direction=("direction", "first"),
        bench_op=("bench_op", lambda s: next((v for v in s if v), "")),
        tensors=("role", "size"),
    )
    for column, metric, roles, how in _ROLLUP:
        if metric not in frame:
            ops[column] = np.nan
            continue
        sub = frame[frame["role"].isin(roles)].groupby(keys, sort=False)[metric]
        ops[column] = sub.min() if how == "min" else sub.max()
    ins = frame[frame["_is_in"]].groupby(keys, sort=False)["_status"].agg(_worst_status)
    outs = frame[~frame["_is_in"]].groupby(keys, sort=False)["_status"].agg(_worst_status)
    ops["in_status"] = ins.reindex(ops.index).fillna(STATUS_NA)
    ops["status"] = outs.reindex(ops.index).fillna(STATUS_NA)
    ops = ops.reset_index().sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)

    failed = ops["status"] == STATUS_FAIL
    with np.errstate(invalid="ignore"):
        passed_on = ops["out_error"].to_numpy() <= INHERIT_FACTOR * ops["in_error"].to_numpy()
    inputs_ok = (ops["in_status"] != STATUS_FAIL).to_numpy() & ~passed_on
    random = ops["op_type"].map(is_random_op)
    origin = np.where(failed & inputs_ok, "introduced", np.where(failed, "inherited", ""))
    origin = np.where((origin == "introduced") & random, "random", origin)
    discontinuous = ops["op_type"].map(is_discontinuous_op) & (
        ops["out_cosine"].fillna(1.0) >= DISCONTINUITY_MIN_COSINE
    )
    origin = np.where((origin == "introduced") & discontinuous, "discontinuous", origin)
    ops["origin"] = origin
    ops["explained"] = _explained(ops)
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["amplification"] = ops["out_rel_euclidean"] / ops["in_rel_euclidean"]
    return ops


def _explained(ops: pd.DataFrame) -> np.ndarray:
    """Failures explained by randomness or discontinuity: such ops, and the inherited failures after them.

    Walking in execution order (per step and rank): a ``random``/``discontinuous`` failure is explained, and
    so is every ``inherited`` failure that follows while no genuinely ``introduced`` failure has occurred.
    """
    explained = np.zeros(len(ops), dtype=bool)
    state: dict[tuple, bool] = {}
    for i, (step, rank, status, origin) in enumerate(
        zip(ops["step"], ops["rank"], ops["status"], ops["origin"], strict=True)
    ):
        if status != STATUS_FAIL:
            continue
        key = (step, rank)
        if origin in ("random", "discontinuous"):
            explained[i] = True
            state.setdefault(key, True)
        elif origin == "introduced":
            state[key] = False
        elif origin == "inherited" and state.get(key, False):
            explained[i] = True
        else:
            state.setdefault(key, False)
    return explained


def first_failing(ops: pd.DataFrame, *, origin: str | None = None, include_explained: bool = False) -> pd.Series | None:
    """The first op in execution order that fails, or ``None``.

    Failures explained by un-fixed randomness or by discontinuous ops flipping elements (and what they pass
    on) are skipped unless ``include_explained``; ``origin`` restricts the search to one origin.
    """
    mask = ops["status"] == STATUS_FAIL
    if not include_explained and "explained" in ops:
        mask &= ~ops["explained"]
    if origin is not None:
        mask &= ops["origin"] == origin
    hits = ops[mask]
    return None if hits.empty else hits.iloc[0]


def divergence_onset(ops: pd.DataFrame, window: int = 20, share: float = 0.5) -> pd.Series | None:
    """Where the divergence sets in: the first failing op after which failing ops stay common.

    The onset is the first failing op such that at least ``share`` of the next ``window`` ops with a status
    also fail; a lone failure that the run recovers from is not an onset.
    """
    judged = ops[ops["status"] != STATUS_NA].reset_index()
    fails = (judged["status"] == STATUS_FAIL).to_numpy().copy()
    if "explained" in judged:
        fails &= ~judged["explained"].to_numpy(bool)
    if not fails.any():
        return None
    counts = np.concatenate([[0], np.cumsum(fails)])
    for i in np.flatnonzero(fails):
        end = min(len(fails), i + 1 + window)
        ahead = end - (i + 1)
        if ahead == 0 or (counts[end] - counts[i + 1]) / ahead >= share:
            return ops.loc[judged.at[i, "index"]]
    return None
