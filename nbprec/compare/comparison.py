"""The result of a comparison: a table of matched tensor pairs with metrics, and the views built on it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.columns import Columns, as_columns, missing_mask, value_counts
from nbprec.compare.culprit import OpIndex, judge_ops, ops_frame
from nbprec.compare.rules import (
    STATUS_FAIL,
    PrecisionCodes,
    Rule,
    Threshold,
    get_rule,
    precision_codes,
    preset_names,
)
from nbprec.compare.runs import (
    RunSummary,
    first_failing_position,
    onset_position_across,
    op_at,
    summarize_runs,
)
from nbprec.compare.saved import read_saved, write_saved
from nbprec.compare.verdict import Verdict, verdict
from nbprec.safe_text import visible_text

#: Text columns of few distinct values, kept as pandas categoricals.
CATEGORY_COLUMNS = ("compare_mode", "precision", "match", "role")
#: Text columns a DataFrame gives pandas' string dtype (as the comparison table has always had them).
TEXT_COLUMNS = (
    "target_name", "bench_name", "parent", "reason", "ground_truth", "relation", "fusion_pass", "noise_from"
)  # fmt: skip


def as_category(column: Any) -> Any:
    """A text column (a pandas Series) as a categorical ('' for missing values)."""
    return column.fillna("").astype(str).astype("category")


def _text(values: np.ndarray) -> np.ndarray:
    """A text column with '' for missing values (as :func:`as_category` fills them)."""
    values = np.asarray(values, dtype=object)
    missing = missing_mask(values)
    if missing.any():
        values = values.copy()
        values[missing] = ""
    return values


def table_frame(table: Columns) -> Any:
    """A comparison table as the pandas DataFrame ``Comparison.table`` is (categoricals, string dtypes)."""
    return table.to_frame(categories=CATEGORY_COLUMNS, text=TEXT_COLUMNS)


class Comparison:
    """Matched tensor pairs of a target and a benchmark dump, with every metric and a pass/fail status.

    Made by :func:`nbprec.compare`; holds plain data, so it saves, reloads, and re-judges under another rule
    without re-reading any tensor. It is truthy when no op fails. The data is held as numpy columns (what the
    command line reads, without pandas); the pandas views below are built on first use.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per target tensor: names on both sides, ``match`` (how it was matched), dtypes, shapes,
        statistics, every metric, ``compare_mode``, ``reason`` (why a metric is missing) and ``status``.
    unmatched_bench : pandas.DataFrame
        Benchmark index rows that no target tensor matched.
    rule : Rule
        The rule behind ``status``.
    meta : dict
        Paths, formats, mode and matching coverage.
    """

    def __init__(
        self,
        table: Columns | Any,
        *,
        unmatched_bench: Columns | Any = None,
        rule: Rule | str | None = None,
        meta: dict[str, Any] | None = None,
        _op_index: OpIndex | None = None,
        _precision: PrecisionCodes | None = None,
    ) -> None:
        self.rule = get_rule(rule)
        frame = None if isinstance(table, Columns) else table
        if _op_index is None:  # a new table: normalise it once (re-judged copies share it unchanged)
            table = as_columns(table).copy()
            if "status" in table:
                table.pop("status")
            for name in CATEGORY_COLUMNS:  # few distinct values: fast to judge
                if name in table:
                    table[name] = _text(table[name])
            if "checksum_match" in table:  # True/False where checksums were compared, None elsewhere
                flags = np.asarray(table["checksum_match"], dtype=object).copy()
                flags[missing_mask(flags)] = None  # (NaN becomes None)
                table["checksum_match"] = flags
            frame = None  # built again from the normalised columns when asked for
        self._cols: Columns = table
        self._frame: Any = frame
        # each row's lower-precision dtype: rule-independent, found once for every rule this comparison is judged by
        self._precision: PrecisionCodes = _precision or precision_codes(table)
        self._status = self.rule.evaluate(table, precision=self._precision)
        self._op_index = _op_index
        self._unmatched = Columns() if unmatched_bench is None else as_columns(unmatched_bench)
        self._unmatched_frame: Any = None if isinstance(unmatched_bench, Columns) else unmatched_bench
        self.meta = dict(meta or {})
        self._verdict: Verdict | None = None
        self._runs: RunSummary | None = None
        self._presence: Columns | None = None  # rule-independent (see nbprec.compare.presence.presence)

    @property
    def _data(self) -> Any:
        """The table without ``status``, as a pandas DataFrame (built once, shared by re-judged copies)."""
        if self._frame is None:
            self._frame = table_frame(self._cols)
        return self._frame

    @functools.cached_property
    def table(self) -> Any:
        """One row per target tensor with every metric and the ``status`` under :attr:`rule` (a DataFrame)."""
        return self._data.assign(status=self._status)

    @property
    def columns(self) -> Columns:
        """The table as numpy columns, without ``status`` (see :attr:`status`)."""
        return self._cols

    @property
    def unmatched_bench(self) -> Any:
        """Benchmark index rows that no target tensor matched (a DataFrame)."""
        if self._unmatched_frame is None:
            from nbprec.dump_index import index_frame

            self._unmatched_frame = index_frame(self._unmatched) if len(self._unmatched.columns) else _empty_frame()
        return self._unmatched_frame

    @property
    def status(self) -> np.ndarray:
        """The status of each table row (``"pass"``, ``"fail"``, ``"n/a"``), without building :attr:`table`."""
        return self._status

    # -- judging -----------------------------------------------------------------------------------
    def with_rule(self, rule: Rule | str) -> Comparison:
        """The same comparison judged by another rule (no tensor is read again; the data is shared)."""
        judged = Comparison(
            self._cols,
            unmatched_bench=self._unmatched,
            rule=rule,
            meta=self.meta,
            _op_index=self.op_index,
            _precision=self._precision,
        )
        judged._frame, judged._unmatched_frame = self._frame, self._unmatched_frame
        judged._presence = self._presence
        return judged

    def with_threshold(self, metric: str, value: float) -> Comparison:
        """The same comparison with one bound of the rule changed (what a threshold slider does)."""
        return self.with_rule(self.rule.with_threshold(metric, value))

    @property
    def op_index(self) -> OpIndex:
        """The rule-independent per-op roll-up, shared by every re-judged copy."""
        if self._op_index is None:
            self._op_index = OpIndex(self._cols)
        return self._op_index

    @functools.cached_property
    def _ops_columns(self) -> Columns:
        """The per-op roll-up as numpy columns (see :attr:`ops`)."""
        return judge_ops(self.op_index, self._status)

    @functools.cached_property
    def ops(self) -> Any:
        """Per-op roll-up in execution order (see :func:`nbprec.compare.culprit.rollup_ops`; a DataFrame)."""
        return ops_frame(self._ops_columns)

    def _failing(self, include_explained: bool = False) -> np.ndarray:
        """Which ops fail under the rule (a mask over :attr:`ops`)."""
        ops = self._ops_columns
        mask = ops["status"] == STATUS_FAIL
        return mask if include_explained else mask & ~ops["explained"]

    def failing_ops(self, include_explained: bool = False) -> Any:
        """Ops whose outputs fail under the rule, in execution order (a DataFrame).

        Failures explained by randomness or discontinuous ops (see :func:`first_failing`) are left out unless
        ``include_explained``.
        """
        return self.ops[self._failing(include_explained)]

    def _op_row(self, position: int) -> Any:
        return None if position < 0 else self.ops.iloc[position]

    def first_failing_op(self) -> Any:
        """The first failing op (a row of :attr:`ops`: the first suspect), or ``None`` when all pass.

        In execution order; over several steps and ranks, the earliest by (step, order, rank) (see
        :mod:`nbprec.compare.runs`), with its ``step`` and ``rank``.
        """
        return self._op_row(first_failing_position(self._ops_columns))

    def first_introduced_op(self) -> Any:
        """The first op whose inputs pass and whose outputs fail: where the error was introduced."""
        return self._op_row(first_failing_position(self._ops_columns, origin="introduced"))

    def onset(self) -> Any:
        """The op where the divergence sets in and persists (see :func:`~nbprec.compare.culprit.divergence_onset`),
        per (step, rank) stream, the earliest by (step, order, rank)."""
        return self._op_row(onset_position_across(self._ops_columns))

    def op(self, position: int) -> dict[str, Any] | None:
        """Row ``position`` of :attr:`ops` as a dict (``None`` for -1), without pandas."""
        return None if position < 0 else self._ops_columns.row(position)

    def runs(self) -> RunSummary:
        """One row per (step, rank) on either side: presence, counts, first failing / introduced / NaN-inf
        op; and the (step, rank) where divergence and overflow appear first (see :mod:`nbprec.compare.runs`)."""
        if self._runs is None:
            self._runs = summarize_runs(self)
        return self._runs

    @property
    def several_runs(self) -> bool:
        """Whether the comparison spans more than one (step, rank) (then every view names each op's)."""
        return self.runs().several

    def worst_positions(self, n: int = 10, metric: str | None = None) -> tuple[np.ndarray, str]:
        """Positions in :attr:`ops` of the ``n`` failing-most ops by an output metric (default: the rule's
        primary metric), and the ``out_*`` column they were ranked by."""
        metric = metric or self.rule.primary_metric
        ops = self._ops_columns
        column = f"out_{metric}" if f"out_{metric}" in ops else "out_cosine"
        values = ops[column]
        rows = np.flatnonzero(~np.isnan(values))
        order = np.argsort(values[rows] if column.endswith("cosine") else -values[rows], kind="stable")
        return rows[order][:n], column

    def worst_ops(self, n: int = 10, metric: str | None = None) -> Any:
        """The ``n`` failing-most ops by an output metric (default: the rule's primary metric; a DataFrame)."""
        return self.ops.iloc[self.worst_positions(n, metric)[0]]

    def __bool__(self) -> bool:
        return not self._failing().any()

    # -- how many ops each threshold flags ----------------------------------------------------------
    def threshold_counts(self, metric: str = "cosine", values: list[float] | None = None) -> Any:
        """How many ops fail when the rule's bound on ``metric`` is set to each of ``values`` (a DataFrame)."""
        import pandas as pd

        if values is None:
            values = [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999] if metric == "cosine" else [1e-3, 1e-2, 0.05, 0.1]
        rows = []
        for value in values:
            probe = Rule(f"{metric}-{value:g}", (Threshold(metric, value),))
            ops = judge_ops(self.op_index, probe.evaluate(self._cols, precision=self._precision))
            rows.append(
                {
                    "metric": metric,
                    "threshold": value,
                    "failing_ops": int(((ops["status"] == STATUS_FAIL) & ~ops["explained"]).sum()),
                }
            )
        return pd.DataFrame(rows)

    def rule_rows(self) -> list[dict[str, Any]]:
        """For every preset rule, how many ops fail and which fails first (plain dicts; see :meth:`rule_counts`)."""
        rows = []
        for name in preset_names():
            comp = self if get_rule(name) == self.rule else self.with_rule(name)  # (its own rule: judged already)
            first = comp.op(first_failing_position(comp._ops_columns))
            rows.append(
                {
                    "rule": name,
                    "description": comp.rule.describe(),
                    "failing_ops": int(comp._failing().sum()),
                    "first_failing_op": "" if first is None else first["op"],
                    "step": None if first is None else int(first["step"]),
                    "rank": None if first is None else int(first["rank"]),
                }
            )
        return rows

    def rule_counts(self) -> Any:
        """For every preset rule, how many ops fail and which fails first (a DataFrame)."""
        import pandas as pd

        return pd.DataFrame(self.rule_rows())

    # -- summary -----------------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        """The verdict in words: whether the runs are comparable, what failed first and why, what to do next
        (see :mod:`nbprec.compare.verdict`). The CLI, the dashboard and the report open with it."""
        if self._verdict is None:
            self._verdict = verdict(self)
        return self._verdict

    def coverage(self) -> dict[str, int]:
        """How target tensors were matched, and how many benchmark tensors were left unmatched."""
        counts = _value_counts(self._cols["match"]) if "match" in self._cols else {}
        counts["unmatched_bench"] = len(self._unmatched)
        return counts

    def summary(self) -> dict[str, Any]:
        """Counts, the rule, the first failing and first introduced ops, as plain values."""
        ops = self._ops_columns
        first = self.op(first_failing_position(ops))
        introduced = self.op(first_failing_position(ops, origin="introduced"))
        onset = self.op(onset_position_across(ops))
        runs = self.runs()
        return {
            "target": self.meta.get("target", ""),
            "bench": self.meta.get("bench", ""),
            "rule": self.rule.describe(),
            "tensors": len(self._cols),
            "tensor_status": _value_counts(self._status),
            "ops": len(ops),
            "failing_ops": int(self._failing().sum()),
            "coverage": self.coverage(),
            "first_failing_op": None if first is None else str(first["op"]),
            "first_introduced_op": None if introduced is None else str(introduced["op"]),
            "onset_op": None if onset is None else str(onset["op"]),
            "first_failing_at": _at(first),
            "first_introduced_at": _at(introduced),
            "onset_at": _at(onset),
            "steps_ranks": len(runs.columns),
            "first_divergence_at": None if runs.first_divergence is None else list(runs.first_divergence),
            "first_overflow_at": None if runs.first_overflow is None else list(runs.first_overflow),
            "one_sided": [
                {"code": m.code, "side": m.side, "values": list(m.values), "steps": list(m.steps)} for m in runs.missing
            ],
            "random_ops_differing": ops["op"][ops["origin"] == "random"].tolist(),
            "discontinuous_ops_differing": ops["op"][ops["origin"] == "discontinuous"].tolist(),
            "explained_failing_ops": int(ops["explained"].sum()),
            "verdict": self.verdict().kind,
            "verdict_text": self.verdict().text,
            "findings": [f.code for f in self.verdict().findings],
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<nbprec.Comparison {s['tensors']} tensors, {s['ops']} ops, {s['failing_ops']} failing "
            f"({s['rule']}); first failing op: {op_at(self.first_failing_op(), self.several_runs)}>"
        )

    def _repr_html_(self) -> str:
        s = self.summary()
        import html

        esc = html.escape
        several = self.several_runs
        first, introduced = op_at(self.first_failing_op(), several), op_at(self.first_introduced_op(), several)
        head = self.verdict().to_html() + (
            f"<p><b>nbprec comparison</b>: {esc(s['target'])} (target) vs {esc(s['bench'])} (benchmark)<br>"
            f"rule {esc(s['rule'])}<br>{s['ops']} ops, <b>{s['failing_ops']} failing</b>; first failing op: "
            f"<code>{esc(first)}</code>; first introduced: <code>{esc(introduced)}</code></p>"
        )
        cols = ["order", "op", "op_type", "status", "origin", "in_cosine", "out_cosine", "out_rel_euclidean"]
        if several:
            cols = ["step", "rank", *cols]
        worst = self.worst_ops(10)[cols]
        return visible_text(head + worst.to_html(index=False, float_format=lambda v: f"{v:.6g}", escape=True))

    # -- persistence (the folder format: nbprec.compare.saved) -----------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save to a folder (``comparison.json`` + CSV tables) that :meth:`load` reads back."""
        return write_saved(Path(path), self._cols, self._unmatched, self.meta, self.rule)

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        """Read a comparison written by :meth:`save`."""
        table, unmatched, rule, meta = read_saved(Path(path))
        return cls(table, unmatched_bench=unmatched, rule=rule, meta=meta)

    # -- exports -----------------------------------------------------------------------------------
    def to_csv(self, path: str | Path, layout: str = "nbprec") -> Path:
        """Write the table as CSV in ``layout`` ``"nbprec"`` (everything), ``"msaccucmp"`` or ``"msprobe"``."""
        from nbprec.compare.exports import write_csv

        return write_csv(self, Path(path), layout)

    def isolate(self, op: str, dtype: str = "float64") -> Any:
        """Re-run ``op`` on the target's own inputs in high precision (see :func:`nbprec.compare.isolate.isolate`).

        Needs a target captured by nbprec from PyTorch in tensor mode.
        """
        from nbprec.compare.isolate import isolate

        return isolate(self.meta["target"], op, dtype=dtype)

    def explore(self, **kwargs: Any) -> Any:
        """Open the linked notebook dashboard on this comparison (needs ``nbprec[widgets]``)."""
        from nbprec._optional import require

        require("ipywidgets", "the nbprec dashboard")
        from nbprec.widgets import explore

        return explore(self, **kwargs)


def _value_counts(values: np.ndarray) -> dict[str, int]:
    """:func:`~nbprec.columns.value_counts` with the values as text."""
    return {str(value): count for value, count in value_counts(values).items()}


def _empty_frame() -> Any:
    import pandas as pd

    return pd.DataFrame()


def _at(row: Any) -> list[int] | None:
    """[step, rank] of an op row, or None."""
    return None if row is None else [int(row["step"]), int(row["rank"])]
