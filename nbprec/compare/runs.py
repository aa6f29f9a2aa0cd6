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

Which (step, rank)s each side holds, and what one side lacks, is :mod:`nbprec.compare.presence`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, text_table
from nbprec.compare.culprit import INHERIT_FACTOR, failing_mask, onset_position
from nbprec.compare.presence import BOTH, Missing, missing_by_kind, presence
from nbprec.compare.rules import STATUS_FAIL, STATUS_PASS, Table, column

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison


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
#: ... when the same call's inputs agree on every rank that ran it (:func:`collective_changed_data`).
COLLECTIVE_SELF_NOTE = "collective: its inputs agree on every rank; it changed the data itself"
#: The collectives that sum the ranks' data (lower case).
_REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "hcomallreduce",
                       "hcomreducescatter"})  # fmt: skip

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


def collective_changed_data(table: Table, ops: Table, position: int) -> bool:
    """Whether the collective at ``position`` (in ``ops``; its inputs agree on its rank and its output does not)
    changed the data itself, rather than passing on another rank's error: the same call (its name, at its step)
    was compared on two ranks or more, its inputs pass on every one of them, and its output's error is more than
    :data:`~nbprec.compare.culprit.INHERIT_FACTOR` times the largest of theirs, times, for a collective that sums
    the ranks' data, the sum's condition: the ranks' input norms added up over the output's (the benchmark's), by
    which contributions that cancel may magnify their small errors (see :mod:`nbprec.compare.conditioning`). A
    collective seen on one rank only cannot be told apart from its other ranks' contributions: ``False``."""
    name, step, rank = ops["op"][position], ops["step"][position], ops["rank"][position]
    same = np.flatnonzero((ops["op"] == name) & (ops["step"] == step))
    if len(same) < 2 or not (column(ops, "in_status", object)[same] == STATUS_PASS).all():
        return False
    in_error = np.nanmax(column(ops, "in_error", np.float64)[same], initial=0.0)
    out_error = float(column(ops, "out_error", np.float64)[position])
    condition = 1.0
    if str(ops["op_type"][position]).lower() in _REDUCING and "bench_norm" in table:
        rows = np.flatnonzero((table["op"] == name) & (table["step"] == step))
        role, norm = column(table, "role", object)[rows], np.abs(column(table, "bench_norm", np.float64)[rows])
        out_norm = norm[(role == "output") & (table["rank"][rows] == rank)]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.nansum(norm[role == "input"]) / out_norm[0] if len(out_norm) else np.nan
        condition = float(ratio) if np.isfinite(ratio) and ratio > 1.0 else 1.0
    return bool(np.isfinite(out_error) and out_error > INHERIT_FACTOR * condition * in_error)


def where(row: Any) -> str:
    """``"step 1, rank 1"`` for an op or run row (``""`` for ``None``)."""
    return "" if row is None else f"step {int(row['step'])}, rank {int(row['rank'])}"


def op_at(row: Any, several: bool) -> str:
    """An op's name, followed by ``(step S, rank R)`` when the comparison spans several; ``"-"`` for none.

    Every view names ops this way (the CLI, the dashboard, the report), so they all say the same.
    """
    if row is None:
        return "-"
    return f"{row['op']} ({where(row)})" if several else str(row["op"])


# -- first failing op across (step, rank) streams -------------------------------------------------------
def stream_ids(ops: Table) -> np.ndarray:
    """Per op, the number of its (step, rank) stream (ops are sorted by step, rank, order)."""
    step, rank = column(ops, "step"), column(ops, "rank")
    new = np.ones(len(step), dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    return np.cumsum(new) - 1


def _earliest(ops: Table, positions: np.ndarray) -> int:
    """The position among ``positions`` of the op that comes first by (step, order, rank); -1 for none."""
    if positions.size == 0:
        return -1
    keys = np.lexsort((column(ops, "rank")[positions], column(ops, "order")[positions], column(ops, "step")[positions]))
    return int(positions[keys[0]])


def first_per_stream(mask: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Positions of the first flagged op of each stream that has one."""
    hits = np.flatnonzero(mask)
    if hits.size == 0:
        return hits
    ids = streams[hits]
    return hits[np.r_[True, ids[1:] != ids[:-1]]]


def first_failing_position(ops: Table, *, origin: str | None = None, include_explained: bool = False) -> int:
    """The position (in ``ops``) of the first failing op over every (step, rank), earliest by (step, order,
    rank); -1 when none fails."""
    if len(ops) == 0:
        return -1
    mask = failing_mask(ops, origin=origin, include_explained=include_explained)
    return _earliest(ops, first_per_stream(mask, stream_ids(ops)))


def first_failing_across(ops: Any, *, origin: str | None = None, include_explained: bool = False) -> Any:
    """The first failing op of a comparison over every (step, rank): earliest by (step, order, rank) (a row of
    the ``ops`` DataFrame), or ``None``.

    The same op as :func:`nbprec.compare.culprit.first_failing` when there is one (step, rank).
    """
    position = first_failing_position(ops, origin=origin, include_explained=include_explained)
    return None if position < 0 else ops.iloc[position]


def onset_position_across(ops: Table) -> int:
    """The position of :func:`onset_across` in ``ops``, or -1."""
    if len(ops) == 0:
        return -1
    streams = stream_ids(ops)
    starts = np.flatnonzero(np.r_[True, streams[1:] != streams[:-1]])
    ends = np.r_[starts[1:], len(streams)]
    firsts = first_per_stream(failing_mask(ops), streams)
    step, order, rank = (column(ops, c) for c in ("step", "order", "rank"))
    best: tuple | None = None
    for position in firsts[np.lexsort((rank[firsts], order[firsts], step[firsts]))]:
        if best is not None and best[0] <= (step[position], order[position], rank[position]):
            break
        stream = streams[position]
        at = onset_position(ops, int(starts[stream]), int(ends[stream]))
        if at >= 0:
            key = (step[at], order[at], rank[at])
            if best is None or key < best[0]:
                best = (key, at)
    return -1 if best is None else int(best[1])


def onset_across(ops: Any) -> Any:
    """The divergence onset: :func:`~nbprec.compare.culprit.divergence_onset` in each (step, rank) stream (the
    window never spans two), the earliest by (step, order, rank) (a row of the ``ops`` DataFrame), or ``None``.

    A stream's onset comes no earlier than its first failing op, so streams are tried in the order of their
    first failures and the search stops once that bound passes the best onset found.
    """
    position = onset_position_across(ops)
    return None if position < 0 else ops.iloc[position]


# -- the per-(step, rank) summary ------------------------------------------------------------------------
def nonfinite_rows(table: Table) -> np.ndarray:
    """Target tensors holding NaN/inf whose benchmark counterpart does not (or that have none)."""
    if "target_nonfinite" not in table:
        return np.zeros(len(table), dtype=bool)
    target = np.nan_to_num(column(table, "target_nonfinite", np.float64), nan=0.0) > 0
    if "bench_nonfinite" not in table:
        return target
    return target & ~(np.nan_to_num(column(table, "bench_nonfinite", np.float64), nan=0.0) > 0)


#: columns of the per-(step, rank) table that a DataFrame gives pandas' string dtype
_RUN_TEXT = ("presence", "status", "first_failing_op", "first_failing_origin", "first_introduced_op",
             "first_nonfinite_op", "first", "note")  # fmt: skip
#: integer columns that may be missing (pandas' nullable Int64 in the DataFrame)
_RUN_OPTIONAL_INTS = ("first_failing_order", "first_nonfinite_order")
#: what :meth:`RunSummary.display_table` shows, in order
_DISPLAY = ("step", "rank", "presence", "status", "tensors", "bench_tensors", "failing_ops", "first_failing_op",
            "first_introduced_op", "first_nonfinite_op", "out_cosine", "out_error", "first", "note")  # fmt: skip


class RunSummary(Record):
    """One row per (step, rank), and where divergence and overflow appear first.

    Attributes
    ----------
    columns : nbprec.columns.Columns
        Columns :data:`RUN_COLUMNS`: ``presence`` (``both``, ``target only``, ``benchmark only``), ``status``
        (``fail``, ``pass``, ``n/a``, or the presence when one-sided), tensor and op counts, the first failing
        op (with its ``order`` and ``origin``), the first introduced op, the first op whose target tensors
        hold NaN/inf that the benchmark's do not, the worst output cosine and relative error, and ``first``
        (``divergence`` and/or ``overflow`` on the (step, rank) where each appears first) and ``note``
        (:data:`COLLECTIVE_NOTE` when the first failing op is a collective whose inputs on this rank agree).
        Orders are ints, or None where there is no such op.
    first_divergence, first_overflow : tuple of int or None
        (step, rank) of the comparison's first failing op and of its first NaN/inf op.
    missing : list of Missing
        What one side lacks, as whole ranks, whole steps or single (step, rank)s.
    """

    columns: Columns
    first_divergence: tuple[int, int] | None
    first_overflow: tuple[int, int] | None
    missing: list[Missing]

    @functools.cached_property
    def table(self) -> Any:
        """The summary as a pandas DataFrame (missing orders are ``<NA>``)."""
        import pandas as pd

        frame = self.columns.to_frame(text=_RUN_TEXT)
        for name in _RUN_OPTIONAL_INTS:
            frame[name] = pd.array(self.columns[name].tolist(), dtype="Int64")
        return frame

    @property
    def several(self) -> bool:
        """Whether there is more than one (step, rank)."""
        return len(self.columns) > 1

    def _position(self, step: int, rank: int) -> int:
        hit = np.flatnonzero((self.columns["step"] == step) & (self.columns["rank"] == rank))
        return int(hit[0]) if hit.size else -1

    def row(self, step: int, rank: int) -> Any:
        """The summary of one (step, rank) (a row of :attr:`table`), or ``None``."""
        position = self._position(step, rank)
        return None if position < 0 else self.table.iloc[position]

    def lines(self) -> list[str]:
        """The summary in words: what one side lacks, then where divergence and overflow appear first."""
        out = [m.message() for m in self.missing]
        for label, key in (("divergence", self.first_divergence), ("NaN/inf", self.first_overflow)):
            if key is not None:
                position = self._position(*key)
                op = self.columns["first_failing_op" if label == "divergence" else "first_nonfinite_op"][position]
                out.append(f"first {label} at step {key[0]}, rank {key[1]}: {op}")
        return out

    def display_columns(self) -> Columns:
        """The columns a reader needs, in order (what the CLI and the report print); no cosine and error columns
        where every value is missing (statistics mode)."""
        shown = self.columns.select(_DISPLAY)
        for name in ("out_cosine", "out_error"):
            if name in shown and np.isnan(shown[name]).all():
                shown.pop(name)
        return shown

    def display_table(self) -> Any:
        """:meth:`display_columns` as a pandas DataFrame."""
        return self.table[self.display_columns().columns]

    def to_text(self) -> str:
        """Lines, then the table (plain text)."""
        shown = self.display_columns()
        for name in ("first_failing_op", "first_introduced_op", "first_nonfinite_op", "first", "note"):
            values = shown[name]
            shown[name] = np.where(values == "", "-", values).astype(object)
        return "\n".join([*self.lines(), text_table(shown)])


def summarize_runs(comp: Comparison) -> RunSummary:
    """The per-(step, rank) summary of ``comp`` under its rule (see the module docstring)."""
    p = presence(comp)
    ops, table = comp._ops_columns, comp._cols
    n_runs = len(p)
    run_of = {(int(s), int(r)): i for i, (s, r) in enumerate(zip(p["step"].tolist(), p["rank"].tolist(), strict=True))}

    def per_run(steps: np.ndarray, ranks: np.ndarray) -> np.ndarray:  # the summary row of each (step, rank)
        keys = zip(steps.tolist(), ranks.tolist(), strict=True)
        return np.array([run_of.get((int(s), int(r)), -1) for s, r in keys], np.int64)

    out = Columns(n=n_runs)
    out["step"], out["rank"], out["presence"] = p["step"], p["rank"], p["presence"]
    out["tensors"], out["bench_tensors"] = p["target"], p["bench"]
    unmatched = column(table, "match", object) == "unmatched" if len(table) else np.zeros(0, bool)
    out["unmatched"] = np.bincount(per_run(table["step"][unmatched], table["rank"][unmatched]), minlength=n_runs)
    op_run = per_run(ops["step"], ops["rank"]) if len(ops) else np.zeros(0, np.int64)
    out["ops"] = np.bincount(op_run, minlength=n_runs)
    streams = stream_ids(ops) if len(ops) else np.empty(0, dtype=np.int64)
    failing = failing_mask(ops) if len(ops) else np.zeros(0, dtype=bool)
    flagged = (ops["status"] == STATUS_FAIL) & ~ops["explained"].astype(bool) if len(ops) else failing
    out["failing_ops"] = np.bincount(op_run[flagged], minlength=n_runs)
    introduced = failing_mask(ops, origin="introduced") if len(ops) else failing
    first_failing_order, first_failing_origin = np.full(n_runs, None, object), np.full(n_runs, "", object)
    note = np.full(n_runs, "", dtype=object)
    for name, mask in (("first_failing_op", failing), ("first_introduced_op", introduced)):
        names = np.full(n_runs, "", dtype=object)
        for position in first_per_stream(mask, streams).tolist():
            run = op_run[position]
            names[run] = str(ops["op"][position])
            if name == "first_failing_op":
                first_failing_order[run] = int(ops["order"][position])
                first_failing_origin[run] = str(ops["origin"][position])
                if ops["origin"][position] == "introduced" and is_collective(ops["op_type"][position]):
                    itself = collective_changed_data(table, ops, position)
                    note[run] = COLLECTIVE_SELF_NOTE if itself else COLLECTIVE_NOTE
        out[name] = names
        if name == "first_failing_op":
            out["first_failing_order"], out["first_failing_origin"] = first_failing_order, first_failing_origin
    first_nonfinite, first_nonfinite_order = np.full(n_runs, "", dtype=object), np.full(n_runs, None, object)
    rows = np.flatnonzero(nonfinite_rows(table)) if len(table) else np.zeros(0, np.int64)
    if rows.size:
        rows = rows[np.lexsort((table["order"][rows], table["rank"][rows], table["step"][rows]))]
        for position in rows[::-1].tolist():  # the earliest row of each (step, rank) is written last
            run = run_of[(int(table["step"][position]), int(table["rank"][position]))]
            first_nonfinite[run] = str(table["op"][position])
            first_nonfinite_order[run] = int(table["order"][position])
    out["first_nonfinite_op"], out["first_nonfinite_order"] = first_nonfinite, first_nonfinite_order
    for name, how in (("out_cosine", np.fmin), ("out_error", np.fmax)):
        values = np.full(n_runs, np.nan)  # fmin/fmax skip NaN: a run without a value stays NaN
        if len(ops) and name in ops:
            how.at(values, op_run, ops[name])
        out[name] = values
    judged = np.bincount(op_run[ops["status"] == STATUS_PASS], minlength=n_runs) if len(ops) else np.zeros(n_runs)
    status = np.where(out["failing_ops"] > 0, "fail", np.where(judged > 0, "pass", "n/a"))
    out["status"] = np.where(out["presence"] == BOTH, status, out["presence"]).astype(object)
    position = first_failing_position(ops) if len(ops) else -1
    divergence = None if position < 0 else (int(ops["step"][position]), int(ops["rank"][position]))
    overflow = _first_overflow(out)
    marks: list[list[str]] = [[] for _ in range(n_runs)]
    for label, key in (("divergence", divergence), ("overflow", overflow)):
        if key is not None:
            for i in np.flatnonzero((out["step"] == key[0]) & (out["rank"] == key[1])).tolist():
                marks[i].append(label)
    out["first"] = np.array([", ".join(m) for m in marks], dtype=object)
    out["note"] = note
    return RunSummary(out.select(RUN_COLUMNS), divergence, overflow, missing_by_kind(comp))


def _first_overflow(summary: Columns) -> tuple[int, int] | None:
    """(step, rank) whose first NaN/inf op comes first by (step, order, rank)."""
    rows = np.flatnonzero(summary["first_nonfinite_op"] != "")
    if not rows.size:
        return None
    order = summary["first_nonfinite_order"][rows].astype(np.int64)
    best = rows[np.lexsort((summary["rank"][rows], order, summary["step"][rows]))[0]]
    return int(summary["step"][best]), int(summary["rank"][best])


__all__ = [
    "COLLECTIVE_NOTE",
    "COLLECTIVE_OP_TYPES",
    "COLLECTIVE_SELF_NOTE",
    "RUN_COLUMNS",
    "RunSummary",
    "collective_changed_data",
    "first_failing_across",
    "first_failing_position",
    "is_collective",
    "onset_across",
    "onset_position_across",
    "op_at",
    "summarize_runs",
    "where",
]
