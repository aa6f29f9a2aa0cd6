"""Every step and rank of a comparison: which (step, rank) each side holds, and what happened in each.

A dump of a distributed run holds one op stream per (step, rank) (msprobe's ``step{N}/rank{M}`` folders,
nbprec's ``step``/``rank`` columns). :func:`summarize_runs` (``Comparison.runs()``) gives one row per
(step, rank) found on either side: whether both sides hold it, its tensors and failing ops, its first failing,
first introduced and first NaN/inf op; and names the (step, rank) where the divergence, and the overflow,
appear first.

**Which comes first across ranks.** Within one (step, rank) ops are in execution order. Across ranks of one
step there is no shared clock in a dump, but data-parallel ranks (and every SPMD program) run the same op
sequence, so an op's position in its stream (``order``) is comparable between ranks. The first failing op of
a comparison is therefore the earliest by (step, order, rank): the earliest step with an unexplained failure,
in it the failure that happens earliest in the op sequence, and only on a tie the lowest rank. A fault on rank
1 in the forward comes before what it does to rank 0 through a gradient all-reduce in the backward, although
rank 0 sorts first. The first NaN/inf op is found the same way, and :func:`first_failing_across`,
:func:`onset_across` are what ``Comparison.first_failing_op()``, ``first_introduced_op()`` and ``onset()``
use. With pipeline stages (ranks running different ops) positions are not comparable; the per-(step, rank)
table still holds each stream's own first failure.

**Presence.** A (step, rank) with target tensors is in the target; one with matched or unmatched benchmark
tensors is in the benchmark. When each side holds a single step (or rank) under different labels, matching
pairs them anyway (see :mod:`nbprec.compare.matching`); :func:`presence` then counts them as one, unless the
benchmark tensors left unmatched under the other label are as many as half the matched ones (a whole stream
of its own). A (step, rank) on one side only is reported by the verdict as ``missing_rank`` or
``missing_step`` (:func:`missing_findings`), not as rows without a counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nbprec.compare.culprit import divergence_onset
from nbprec.compare.rules import STATUS_FAIL, STATUS_PASS

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

BOTH, TARGET_ONLY, BENCH_ONLY = "both", "target only", "benchmark only"
KEYS = ["step", "rank"]

#: Op types of collective communication: their output on one rank depends on every rank's input.
COLLECTIVE_OP_TYPES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "recv",
        "irecv",
        "batch_isend_irecv",
        "hcomallreduce",
        "hcomallgather",
        "hcomreducescatter",
        "hcombroadcast",
    }
)

#: What the summary says of a (step, rank) whose first failing op is a collective with agreeing inputs.
COLLECTIVE_NOTE = "collective: the error comes from another rank"

#: Columns of the per-(step, rank) table, in order.
RUN_COLUMNS = (
    "step",
    "rank",
    "presence",
    "status",
    "tensors",
    "bench_tensors",
    "unmatched",
    "ops",
    "failing_ops",
    "first_failing_op",
    "first_failing_order",
    "first_failing_origin",
    "first_introduced_op",
    "first_nonfinite_op",
    "first_nonfinite_order",
    "out_cosine",
    "out_error",
    "first",
    "note",
)


def is_collective(op_type: object) -> bool:
    """Whether an op type is a collective (all_reduce, all_gather, ...): its output mixes every rank's data."""
    return str(op_type).lower() in COLLECTIVE_OP_TYPES


def several_runs(comp: Comparison) -> bool:
    """Whether the comparison holds more than one (step, rank), on either side."""
    return len(presence(comp)) > 1


def where(row: pd.Series | dict[str, Any] | None) -> str:
    """``"step 1, rank 1"`` for an op or run row (``""`` for ``None``)."""
    return "" if row is None else f"step {int(row['step'])}, rank {int(row['rank'])}"


def op_at(row: pd.Series | None, several: bool) -> str:
    """An op's name, followed by ``(step S, rank R)`` when the comparison spans several; ``"-"`` for none.

    Every view names ops this way (the CLI, the dashboard, the report), so they all say the same.
    """
    if row is None:
        return "-"
    return f"{row['op']} ({where(row)})" if several else str(row["op"])


# -- presence ----------------------------------------------------------------------------------------
def _counts(frame: pd.DataFrame) -> pd.Series:
    if frame.empty or not set(KEYS) <= set(frame.columns):
        return pd.Series(dtype=np.int64, index=pd.MultiIndex.from_tuples([], names=KEYS))
    return frame.groupby(KEYS, sort=True).size()


def presence(comp: Comparison) -> pd.DataFrame:
    """Each (step, rank) either side holds: ``target`` and ``bench`` tensor counts and ``presence``.

    Rule-independent (kept by the comparison and its re-judged copies; do not modify it). Benchmark tensors
    count in the (step, rank) of their target counterpart when matched, in their own when unmatched (see the
    module docstring for single-step dumps under different labels).
    """
    cached = getattr(comp, "_presence", None)
    if cached is None:
        cached = comp._presence = _presence(comp)
    return cached


def _presence(comp: Comparison) -> pd.DataFrame:
    table = comp._data
    matched = table[table["bench_name"].astype(str) != ""] if "bench_name" in table else table.iloc[:0]
    unmatched_bench = _relabelled(table, matched, comp.unmatched_bench)
    target = _counts(table)
    bench = _counts(matched).add(_counts(unmatched_bench), fill_value=0)
    keys = target.index.union(bench.index)
    out = pd.DataFrame(index=keys)
    out["target"] = target.reindex(keys, fill_value=0).astype(np.int64)
    out["bench"] = bench.reindex(keys, fill_value=0).astype(np.int64)
    out = out.reset_index()
    if out.empty:
        return pd.DataFrame({"step": [], "rank": [], "target": [], "bench": [], "presence": []})
    out["presence"] = np.where(out["target"] == 0, BENCH_ONLY, np.where(out["bench"] == 0, TARGET_ONLY, BOTH))
    return out


def _relabelled(table: pd.DataFrame, matched: pd.DataFrame, unmatched: pd.DataFrame) -> pd.DataFrame:
    """Unmatched benchmark rows with a single step (rank) relabelled to the target's single one when matching
    did the same (each side has one value, and the leftovers are not a whole stream of their own)."""
    if unmatched.empty or not set(KEYS) <= set(unmatched.columns):
        return unmatched
    out = unmatched
    for column in KEYS:
        t_vals, b_vals = table[column].unique(), unmatched[column].unique()
        single = len(t_vals) == 1 and len(b_vals) == 1 and t_vals[0] != b_vals[0]
        if single and len(matched) and len(unmatched) < 0.5 * len(matched):
            out = out.assign(**{column: t_vals[0]})
    return out


def missing_runs(comp: Comparison) -> pd.DataFrame:
    """The (step, rank)s on one side only (rows of :func:`presence`)."""
    p = presence(comp)
    return p[p["presence"] != BOTH].reset_index(drop=True)


@dataclass(frozen=True)
class Missing:
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
    out: list[Missing] = []
    for side, count in ((TARGET_ONLY, "target"), (BENCH_ONLY, "bench")):
        other = "bench" if count == "target" else "target"
        lacking = p[p["presence"] == side]
        if lacking.empty:
            continue
        held = p[p[other] > 0]
        whole_ranks = sorted(set(lacking["rank"]) - set(held["rank"]))
        whole_steps = sorted(set(lacking["step"]) - set(held["step"]))
        rest = lacking[~lacking["rank"].isin(whole_ranks) & ~lacking["step"].isin(whole_steps)]
        if whole_ranks:
            rows = lacking[lacking["rank"].isin(whole_ranks)]
            out.append(Missing("missing_rank", side, tuple(whole_ranks), (), int(rows[count].sum())))
        if whole_steps:
            rows = lacking[lacking["step"].isin(whole_steps) & ~lacking["rank"].isin(whole_ranks)]
            out.append(Missing("missing_step", side, tuple(whole_steps), (), int(rows[count].sum())))
        for rank, rows in rest.groupby("rank", sort=True):
            steps = tuple(int(s) for s in sorted(rows["step"]))
            out.append(Missing("missing_rank", side, (int(rank),), steps, int(rows[count].sum())))
    return out


def _unlabelled(p: pd.DataFrame) -> bool:
    """A side without step/rank labels (-1 throughout) cannot lack one."""
    for side in ("target", "bench"):
        held = p[p[side] > 0]
        if len(held) and (held["step"] == -1).all() and (held["rank"] == -1).all():
            return True
    return False


# -- first failing op across (step, rank) streams -------------------------------------------------------
def _stream_ids(ops: pd.DataFrame) -> np.ndarray:
    """Per op, the number of its (step, rank) stream (ops are sorted by step, rank, order)."""
    step, rank = ops["step"].to_numpy(), ops["rank"].to_numpy()
    new = np.ones(len(ops), dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    return np.cumsum(new) - 1


def _failing_mask(ops: pd.DataFrame, origin: str | None, include_explained: bool) -> np.ndarray:
    """The ops :func:`nbprec.compare.culprit.first_failing` considers: failing, not merely enclosing one."""
    mask = (ops["status"] == STATUS_FAIL).to_numpy() & (ops["origin"] != "encloses").to_numpy()
    if not include_explained and "explained" in ops:
        mask &= ~ops["explained"].to_numpy(bool)
    if origin is not None:
        mask &= (ops["origin"] == origin).to_numpy()
    return mask


def _earliest(ops: pd.DataFrame, positions: np.ndarray) -> pd.Series | None:
    """The op among ``positions`` that comes first by (step, order, rank)."""
    if positions.size == 0:
        return None
    keys = np.lexsort(
        (ops["rank"].to_numpy()[positions], ops["order"].to_numpy()[positions], ops["step"].to_numpy()[positions])
    )
    return ops.iloc[int(positions[keys[0]])]


def first_per_stream(mask: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Positions of the first flagged op of each stream that has one."""
    hits = np.flatnonzero(mask)
    if hits.size == 0:
        return hits
    ids = streams[hits]
    return hits[np.r_[True, ids[1:] != ids[:-1]]]


def first_failing_across(
    ops: pd.DataFrame, *, origin: str | None = None, include_explained: bool = False
) -> pd.Series | None:
    """The first failing op of a comparison over every (step, rank): earliest by (step, order, rank).

    The same op as :func:`nbprec.compare.culprit.first_failing` when there is one (step, rank).
    """
    if len(ops) == 0:
        return None
    firsts = first_per_stream(_failing_mask(ops, origin, include_explained), _stream_ids(ops))
    return _earliest(ops, firsts)


def onset_across(ops: pd.DataFrame) -> pd.Series | None:
    """The divergence onset: :func:`~nbprec.compare.culprit.divergence_onset` in each (step, rank) stream (the
    window never spans two), the earliest by (step, order, rank).

    A stream's onset comes no earlier than its first failing op, so streams are tried in the order of their
    first failures and the search stops once that bound passes the best onset found.
    """
    if len(ops) == 0:
        return None
    streams = _stream_ids(ops)
    starts = np.flatnonzero(np.r_[True, streams[1:] != streams[:-1]])
    ends = np.r_[starts[1:], len(ops)]
    firsts = first_per_stream(_failing_mask(ops, None, False), streams)
    step, order, rank = (ops[c].to_numpy() for c in ("step", "order", "rank"))
    best: tuple | None = None
    for position in firsts[np.lexsort((rank[firsts], order[firsts], step[firsts]))]:
        if best is not None and best[0] <= (step[position], order[position], rank[position]):
            break
        stream = streams[position]
        onset = divergence_onset(ops.iloc[starts[stream] : ends[stream]])
        if onset is not None:
            at = ops.index.get_loc(onset.name)
            key = (step[at], order[at], rank[at])
            if best is None or key < best[0]:
                best = (key, at)
    return None if best is None else ops.iloc[best[1]]


# -- the per-(step, rank) summary ------------------------------------------------------------------------
def _nonfinite_rows(table: pd.DataFrame) -> np.ndarray:
    """Target tensors holding NaN/inf whose benchmark counterpart does not (or that have none)."""
    if "target_nonfinite" not in table:
        return np.zeros(len(table), dtype=bool)
    target = np.nan_to_num(table["target_nonfinite"].to_numpy(np.float64), nan=0.0) > 0
    bench = (
        np.nan_to_num(table["bench_nonfinite"].to_numpy(np.float64), nan=0.0) > 0 if "bench_nonfinite" in table else 0
    )
    return target & ~bench


@dataclass(frozen=True)
class RunSummary:
    """One row per (step, rank), and where divergence and overflow appear first.

    Attributes
    ----------
    table : pandas.DataFrame
        Columns :data:`RUN_COLUMNS`: ``presence`` (``both``, ``target only``, ``benchmark only``), ``status``
        (``fail``, ``pass``, ``n/a``, or the presence when one-sided), tensor and op counts, the first failing
        op (with its ``order`` and ``origin``), the first introduced op, the first op whose target tensors
        hold NaN/inf that the benchmark's do not, the worst output cosine and relative error, and ``first``
        (``divergence`` and/or ``overflow`` on the (step, rank) where each appears first) and ``note``
        (:data:`COLLECTIVE_NOTE` when the first failing op is a collective whose inputs on this rank agree).
    first_divergence, first_overflow : tuple of int or None
        (step, rank) of the comparison's first failing op and of its first NaN/inf op.
    missing : list of Missing
        What one side lacks, as whole ranks, whole steps or single (step, rank)s.
    """

    table: pd.DataFrame
    first_divergence: tuple[int, int] | None
    first_overflow: tuple[int, int] | None
    missing: list[Missing]

    @property
    def several(self) -> bool:
        """Whether there is more than one (step, rank)."""
        return len(self.table) > 1

    def row(self, step: int, rank: int) -> pd.Series | None:
        """The summary of one (step, rank), or ``None``."""
        hit = self.table[(self.table["step"] == step) & (self.table["rank"] == rank)]
        return None if hit.empty else hit.iloc[0]

    def lines(self) -> list[str]:
        """The summary in words: what one side lacks, then where divergence and overflow appear first."""
        out = [m.message() for m in self.missing]
        for label, key in (("divergence", self.first_divergence), ("NaN/inf", self.first_overflow)):
            if key is not None:
                row = self.row(*key)
                op = row["first_failing_op"] if label == "divergence" else row["first_nonfinite_op"]
                out.append(f"first {label} at step {key[0]}, rank {key[1]}: {op}")
        return out

    def display_table(self) -> pd.DataFrame:
        """The table with the columns a reader needs, in order (what the CLI and the report print)."""
        cols = ["step", "rank", "presence", "status", "tensors", "bench_tensors", "failing_ops", "first_failing_op",
                "first_introduced_op", "first_nonfinite_op", "out_cosine", "out_error", "first", "note"]  # fmt: skip
        shown = self.table[[c for c in cols if c in self.table]]
        empty = [c for c in ("out_cosine", "out_error") if c in shown and shown[c].isna().all()]
        return shown.drop(columns=empty)  # no cosine in statistics mode: no column of blanks

    def to_text(self) -> str:
        """Lines, then the table (plain text)."""
        shown = self.display_table().copy()
        for column in ("first_failing_op", "first_introduced_op", "first_nonfinite_op", "first", "note"):
            shown[column] = shown[column].replace("", "-")
        body = shown.to_string(index=False, float_format=lambda v: f"{v:.6g}", na_rep="")
        return "\n".join([*self.lines(), body])


def summarize_runs(comp: Comparison) -> RunSummary:
    """The per-(step, rank) summary of ``comp`` under its rule (see the module docstring)."""
    p = presence(comp)
    ops, table = comp.ops, comp._data
    streams = _stream_ids(ops) if len(ops) else np.empty(0, dtype=np.int64)
    rows = p.set_index(KEYS)
    summary = pd.DataFrame(index=rows.index)
    summary["presence"] = rows["presence"]
    summary["tensors"] = rows["target"]
    summary["bench_tensors"] = rows["bench"]
    unmatched = table[table["match"].astype(str) == "unmatched"] if len(table) else table
    summary["unmatched"] = _counts(unmatched).reindex(summary.index, fill_value=0).astype(np.int64)
    by_run = ops.groupby(KEYS, sort=True) if len(ops) else None
    summary["ops"] = by_run.size().reindex(summary.index, fill_value=0) if by_run is not None else 0
    failing = _failing_mask(ops, None, False) if len(ops) else np.zeros(0, dtype=bool)
    flagged = (ops["status"] == STATUS_FAIL).to_numpy() & ~ops["explained"].to_numpy(bool) if len(ops) else failing
    fails = ops.loc[flagged, KEYS].value_counts() if len(ops) else pd.Series(dtype=np.int64)
    summary["failing_ops"] = fails.reindex(summary.index, fill_value=0).astype(np.int64)
    for prefix, mask in (("first_failing", failing), ("first_introduced", _failing_mask(ops, "introduced", False))):
        firsts = ops.iloc[first_per_stream(mask, streams)] if len(ops) else ops
        firsts = firsts.set_index(KEYS)
        summary[f"{prefix}_op"] = firsts["op"].reindex(summary.index).fillna("").astype(str)
        if prefix == "first_failing":
            summary["first_failing_order"] = firsts["order"].reindex(summary.index).astype("Int64")
            summary["first_failing_origin"] = firsts["origin"].reindex(summary.index).fillna("").astype(str)
            collective = np.fromiter(map(is_collective, firsts["op_type"]), bool, len(firsts))
            collective &= (firsts["origin"] == "introduced").to_numpy(bool)
            notes = pd.Series(np.where(collective, COLLECTIVE_NOTE, ""), index=firsts.index, dtype=object)
            summary["note"] = notes.reindex(summary.index).fillna("").astype(str)
    nonfinite = table[_nonfinite_rows(table)] if len(table) else table
    first_nf = nonfinite.sort_values([*KEYS, "order"], kind="stable").drop_duplicates(KEYS).set_index(KEYS)
    summary["first_nonfinite_op"] = first_nf["op"].reindex(summary.index).fillna("").astype(str)
    summary["first_nonfinite_order"] = first_nf["order"].reindex(summary.index).astype("Int64")
    for column, how in (("out_cosine", "min"), ("out_error", "max")):
        values = by_run[column].agg(how) if by_run is not None and column in ops else pd.Series(dtype=np.float64)
        summary[column] = values.reindex(summary.index).astype(np.float64)
    judged = ops.loc[(ops["status"] == STATUS_PASS).to_numpy(), KEYS].value_counts() if len(ops) else fails
    status = np.where(summary["failing_ops"] > 0, "fail", np.where(judged.reindex(summary.index).fillna(0) > 0,
                                                                   "pass", "n/a"))  # fmt: skip
    summary["status"] = np.where(summary["presence"] == BOTH, status, summary["presence"])
    summary = summary.reset_index()
    first_div = first_failing_across(ops) if len(ops) else None
    divergence = None if first_div is None else (int(first_div["step"]), int(first_div["rank"]))
    overflow = _first_overflow(summary)
    marks = [[] for _ in range(len(summary))]
    for label, key in (("divergence", divergence), ("overflow", overflow)):
        if key is not None:
            hit = np.flatnonzero((summary["step"] == key[0]).to_numpy() & (summary["rank"] == key[1]).to_numpy())
            for i in hit:
                marks[i].append(label)
    summary["first"] = [", ".join(m) for m in marks]
    return RunSummary(summary[list(RUN_COLUMNS)], divergence, overflow, missing_by_kind(comp))


def _first_overflow(summary: pd.DataFrame) -> tuple[int, int] | None:
    """(step, rank) whose first NaN/inf op comes first by (step, order, rank)."""
    rows = summary[summary["first_nonfinite_op"] != ""]
    if rows.empty:
        return None
    best = rows.sort_values(["step", "first_nonfinite_order", "rank"], kind="stable").iloc[0]
    return int(best["step"]), int(best["rank"])


__all__ = [
    "BENCH_ONLY",
    "BOTH",
    "COLLECTIVE_NOTE",
    "COLLECTIVE_OP_TYPES",
    "RUN_COLUMNS",
    "TARGET_ONLY",
    "Missing",
    "RunSummary",
    "first_failing_across",
    "is_collective",
    "missing_by_kind",
    "missing_runs",
    "onset_across",
    "op_at",
    "presence",
    "several_runs",
    "summarize_runs",
    "where",
]
