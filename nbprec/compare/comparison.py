"""The result of a comparison: a table of matched tensor pairs with metrics, and the views built on it."""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec._version import __version__
from nbprec.compare.culprit import OpIndex, judge_ops
from nbprec.compare.rules import STATUS_FAIL, Rule, Threshold, get_rule, preset_names
from nbprec.compare.runs import RunSummary, first_failing_across, onset_across, op_at, summarize_runs
from nbprec.compare.verdict import Verdict, verdict
from nbprec.errors import ComparisonError
from nbprec.safe_text import restore_frame, visible_text, write_table_csv

_SAVE_FORMAT = "nbprec-comparison"
_SHAPE_COLUMNS = ("target_shape", "bench_shape")


#: Text columns of few distinct values, kept as pandas categoricals.
CATEGORY_COLUMNS = ("compare_mode", "precision", "match", "role")


def as_category(column: pd.Series) -> pd.Series:
    """A text column as a categorical ('' for missing values)."""
    return column.fillna("").astype(str).astype("category")


class Comparison:
    """Matched tensor pairs of a target and a benchmark dump, with every metric and a pass/fail status.

    Made by :func:`nbprec.compare`; holds plain data, so it saves, reloads, and re-judges under another rule
    without re-reading any tensor. It is truthy when no op fails.

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
        table: pd.DataFrame,
        *,
        unmatched_bench: pd.DataFrame | None = None,
        rule: Rule | str | None = None,
        meta: dict[str, Any] | None = None,
        _op_index: OpIndex | None = None,
    ) -> None:
        self.rule = get_rule(rule)
        if _op_index is None:  # a new table: normalise it once (re-judged copies share it unchanged)
            table = (table.drop(columns=["status"]) if "status" in table else table).copy()  # drop() reindexes
            for column in CATEGORY_COLUMNS:  # few distinct values: fast to judge
                if column in table and not isinstance(table[column].dtype, pd.CategoricalDtype):
                    table[column] = as_category(table[column])
            if "checksum_match" in table:  # True/False where checksums were compared, None elsewhere
                flags = table["checksum_match"].astype(object)
                table["checksum_match"] = flags.where(flags.notna(), None)
        self._data = table
        self._status = self.rule.evaluate(table).to_numpy(dtype=object)
        self._op_index = _op_index
        self.unmatched_bench = unmatched_bench if unmatched_bench is not None else pd.DataFrame()
        self.meta = dict(meta or {})
        self._verdict: Verdict | None = None
        self._runs: RunSummary | None = None
        self._presence: pd.DataFrame | None = None  # rule-independent (see nbprec.compare.runs.presence)

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per target tensor with every metric and the ``status`` under :attr:`rule`."""
        return self._data.assign(status=self._status)

    @property
    def status(self) -> np.ndarray:
        """The status of each table row (``"pass"``, ``"fail"``, ``"n/a"``), without building :attr:`table`."""
        return self._status

    # -- judging -----------------------------------------------------------------------------------
    def with_rule(self, rule: Rule | str) -> Comparison:
        """The same comparison judged by another rule (no tensor is read again; the data is shared)."""
        judged = Comparison(
            self._data, unmatched_bench=self.unmatched_bench, rule=rule, meta=self.meta, _op_index=self.op_index
        )
        judged._presence = self._presence
        return judged

    def with_threshold(self, metric: str, value: float) -> Comparison:
        """The same comparison with one bound of the rule changed (what a threshold slider does)."""
        return self.with_rule(self.rule.with_threshold(metric, value))

    @property
    def op_index(self) -> OpIndex:
        """The rule-independent per-op roll-up, shared by every re-judged copy."""
        if self._op_index is None:
            self._op_index = OpIndex(self._data)
        return self._op_index

    @cached_property
    def ops(self) -> pd.DataFrame:
        """Per-op roll-up in execution order (see :func:`nbprec.compare.culprit.rollup_ops`)."""
        return judge_ops(self.op_index, self._status)

    def failing_ops(self, include_explained: bool = False) -> pd.DataFrame:
        """Ops whose outputs fail under the rule, in execution order.

        Failures explained by randomness or discontinuous ops (see :func:`first_failing`) are left out unless
        ``include_explained``.
        """
        mask = self.ops["status"] == STATUS_FAIL
        if not include_explained:
            mask &= ~self.ops["explained"]
        return self.ops[mask]

    def first_failing_op(self) -> pd.Series | None:
        """The first failing op (the first suspect), or ``None`` when all pass.

        In execution order; over several steps and ranks, the earliest by (step, order, rank) (see
        :mod:`nbprec.compare.runs`), with its ``step`` and ``rank``.
        """
        return first_failing_across(self.ops)

    def first_introduced_op(self) -> pd.Series | None:
        """The first op whose inputs pass and whose outputs fail: where the error was introduced."""
        return first_failing_across(self.ops, origin="introduced")

    def onset(self) -> pd.Series | None:
        """The op where the divergence sets in and persists (see :func:`~nbprec.compare.culprit.divergence_onset`),
        per (step, rank) stream, the earliest by (step, order, rank)."""
        return onset_across(self.ops)

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

    def worst_ops(self, n: int = 10, metric: str | None = None) -> pd.DataFrame:
        """The ``n`` failing-most ops by an output metric (default: the rule's primary metric)."""
        metric = metric or self.rule.primary_metric
        column = f"out_{metric}" if f"out_{metric}" in self.ops else "out_cosine"
        ascending = column.endswith("cosine")
        return self.ops.dropna(subset=[column]).sort_values(column, ascending=ascending, kind="stable").head(n)

    def __bool__(self) -> bool:
        return self.failing_ops().empty

    # -- how many ops each threshold flags ----------------------------------------------------------
    def threshold_counts(self, metric: str = "cosine", values: list[float] | None = None) -> pd.DataFrame:
        """How many ops fail when the rule's bound on ``metric`` is set to each of ``values``."""
        if values is None:
            values = [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999] if metric == "cosine" else [1e-3, 1e-2, 0.05, 0.1]
        rows = []
        for value in values:
            probe = Rule(f"{metric}-{value:g}", (Threshold(metric, value),))
            ops = judge_ops(self.op_index, probe.evaluate(self._data).to_numpy(dtype=object))
            rows.append(
                {
                    "metric": metric,
                    "threshold": value,
                    "failing_ops": int(((ops["status"] == STATUS_FAIL) & ~ops["explained"]).sum()),
                }
            )
        return pd.DataFrame(rows)

    def rule_counts(self) -> pd.DataFrame:
        """For every preset rule, how many ops fail and which fails first."""
        rows = []
        for name in preset_names():
            comp = self.with_rule(name)
            first = comp.first_failing_op()
            rows.append(
                {
                    "rule": name,
                    "description": comp.rule.describe(),
                    "failing_ops": len(comp.failing_ops()),
                    "first_failing_op": "" if first is None else first["op"],
                    "step": None if first is None else int(first["step"]),
                    "rank": None if first is None else int(first["rank"]),
                }
            )
        return pd.DataFrame(rows)

    # -- summary -----------------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        """The verdict in words: whether the runs are comparable, what failed first and why, what to do next
        (see :mod:`nbprec.compare.verdict`). The CLI, the dashboard and the report open with it."""
        if self._verdict is None:
            self._verdict = verdict(self)
        return self._verdict

    def coverage(self) -> dict[str, int]:
        """How target tensors were matched, and how many benchmark tensors were left unmatched."""
        counts = {str(k): int(v) for k, v in self.table["match"].value_counts().items()}
        counts["unmatched_bench"] = len(self.unmatched_bench)
        return counts

    def summary(self) -> dict[str, Any]:
        """Counts, the rule, the first failing and first introduced ops, as plain values."""
        status = self.table["status"].value_counts()
        first, introduced, onset = self.first_failing_op(), self.first_introduced_op(), self.onset()
        runs = self.runs()
        return {
            "target": self.meta.get("target", ""),
            "bench": self.meta.get("bench", ""),
            "rule": self.rule.describe(),
            "tensors": len(self.table),
            "tensor_status": {str(k): int(v) for k, v in status.items()},
            "ops": len(self.ops),
            "failing_ops": len(self.failing_ops()),
            "coverage": self.coverage(),
            "first_failing_op": None if first is None else str(first["op"]),
            "first_introduced_op": None if introduced is None else str(introduced["op"]),
            "onset_op": None if onset is None else str(onset["op"]),
            "first_failing_at": _at(first),
            "first_introduced_at": _at(introduced),
            "onset_at": _at(onset),
            "steps_ranks": len(runs.table),
            "first_divergence_at": None if runs.first_divergence is None else list(runs.first_divergence),
            "first_overflow_at": None if runs.first_overflow is None else list(runs.first_overflow),
            "one_sided": [
                {"code": m.code, "side": m.side, "values": list(m.values), "steps": list(m.steps)} for m in runs.missing
            ],
            "random_ops_differing": self.ops.loc[self.ops["origin"] == "random", "op"].tolist(),
            "discontinuous_ops_differing": self.ops.loc[self.ops["origin"] == "discontinuous", "op"].tolist(),
            "explained_failing_ops": int(self.ops["explained"].sum()),
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

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save to a folder (``comparison.json`` + CSV tables) that :meth:`load` reads back."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        table = self._data.copy()
        for column in _SHAPE_COLUMNS:
            table[column] = [json.dumps(list(s)) if s is not None else "" for s in table[column]]
        write_table_csv(table, folder / "tensors.csv", exact=True)  # names kept byte for byte, spreadsheet-safe
        unmatched = self.unmatched_bench.copy()
        if "shape" in unmatched:
            unmatched["shape"] = [json.dumps(list(s)) for s in unmatched["shape"]]
        write_table_csv(unmatched, folder / "unmatched_bench.csv", exact=True)
        header = {
            "format": _SAVE_FORMAT,
            "nbprec_version": __version__,
            "meta": self.meta,
            "rule": _rule_to_dict(self.rule),
        }
        (folder / "comparison.json").write_text(json.dumps(header, indent=1, default=str), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        """Read a comparison written by :meth:`save`."""
        folder = Path(path)
        try:
            header = json.loads((folder / "comparison.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ComparisonError(f"{folder / 'comparison.json'}: not a saved nbprec comparison ({exc})") from exc
        if header.get("format") != _SAVE_FORMAT:
            raise ComparisonError(
                f"{folder / 'comparison.json'}: format is {header.get('format')!r}, not {_SAVE_FORMAT}"
            )
        text_cols = {"target_name", "bench_name", "target_op", "bench_op", "op", "module", "slot", "reason"}
        text_cols |= {"ground_truth", "relation", "fusion_pass", "parent", "target_checksum", "bench_checksum"}
        table = pd.read_csv(
            folder / "tensors.csv",
            dtype=dict.fromkeys(text_cols, str),
            keep_default_na=False,
            na_values=[""],
            encoding_errors="surrogateescape",
        )
        table = restore_frame(table)
        for column in text_cols & set(table.columns):
            values = table[column]  # an all-empty text column comes back from CSV as float64 NaN
            table[column] = (values.astype(object) if values.dtype.kind == "f" else values).fillna("")
        for column in ("target_dtype", "bench_dtype", "op_type", "api", "direction", "role", "match", "compare_mode"):
            if column in table:
                table[column] = table[column].astype(object).fillna("").astype(str)
        for column in _SHAPE_COLUMNS:
            table[column] = [tuple(json.loads(s)) if isinstance(s, str) and s else None for s in table[column]]
        if "checksum_match" in table:
            table["checksum_match"] = table["checksum_match"].map(
                {True: True, False: False, "True": True, "False": False}
            )
        unmatched_path = folder / "unmatched_bench.csv"
        unmatched = pd.DataFrame()
        if unmatched_path.stat().st_size > 1:
            unmatched = restore_frame(pd.read_csv(unmatched_path, encoding_errors="surrogateescape"))
        return cls(table, unmatched_bench=unmatched, rule=_rule_from_dict(header["rule"]), meta=header.get("meta"))

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


def _at(row: pd.Series | None) -> list[int] | None:
    """[step, rank] of an op row, or None."""
    return None if row is None else [int(row["step"]), int(row["rank"])]


def _rule_to_dict(rule: Rule) -> dict[str, Any]:
    data = asdict(rule)
    data["thresholds"] = [asdict(t) for t in rule.thresholds]
    return data


def _rule_from_dict(data: dict[str, Any]) -> Rule:
    thresholds = tuple(Threshold(**t) for t in data.get("thresholds", []))
    return Rule(
        name=data["name"],
        thresholds=thresholds,
        combine=data.get("combine", "all"),
        dtype_aware=bool(data.get("dtype_aware", False)),
        description=data.get("description", ""),
    )
