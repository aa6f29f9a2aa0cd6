"""The dashboard's state, with no widget import: the shared selection and the operator-table model.

Views read these objects and call their methods; the objects call the core (rules, roll-up, first failing
op). A threshold change re-judges the tensor table with :meth:`nbprec.compare.Rule.evaluate` and rolls the
statuses up to ops with index arrays prepared once, so that a slider move on 100,000 ops stays well under
100 ms; ``tests/widgets/test_model.py`` checks that it gives exactly what ``comparison.with_threshold(...).ops`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.comparison import Comparison
from nbprec.compare.rules import STATUS_FAIL, STATUS_NA, STATUS_PASS, Rule, get_rule, preset_names
from nbprec.compare.runs import RunSummary, first_failing_across, onset_across
from nbprec.dump import Dump

#: Metrics the threshold slider and the trend offer (tensor metric -> per-op column ``out_<metric>``).
SLIDER_METRICS = ("cosine", "rel_euclidean", "max_abs_err", "max_rel_err")
_STATUS_CODES = {STATUS_NA: 0, STATUS_PASS: 1, STATUS_FAIL: 2}
_CODE_STATUS = np.array([STATUS_NA, STATUS_PASS, STATUS_FAIL], dtype=object)
_RULE_INPUT_COLUMNS = ("target_dtype", "bench_dtype", "target_nonfinite", "bench_nonfinite")
_RULE_CHECKSUM_COLUMNS = ("checksum_match", "compare_mode")
TABLE_COLUMNS = ("order", "op", "op_type", "module", "status", "origin", "mark")
#: A (step, rank) of a comparison that spans several.
Run = tuple[int, int]


class Selection:
    """The op selected in a dashboard, and the (step, rank) it is looked at in, shared by every view.

    Views call :meth:`select`; every callback registered with :meth:`observe` then receives the new op name.
    A comparison over several steps and ranks holds the same op name in each: :meth:`select_run` sets
    :attr:`run`, the (step, rank) the views are filtered to (``None``: all of them, op names resolved in the
    first (step, rank) that holds them), and calls the callbacks registered with :meth:`observe_run` before it
    selects an op in that run.

    Examples
    --------
    >>> sel = Selection()
    >>> seen = []
    >>> sel.observe(seen.append)
    >>> sel.select("Functional.linear.0.forward")
    >>> sel.op, seen
    ('Functional.linear.0.forward', ['Functional.linear.0.forward'])
    >>> sel.select_run((1, 1), "Torch.relu.0.forward")
    >>> sel.run, sel.op
    ((1, 1), 'Torch.relu.0.forward')
    """

    def __init__(self, op: str | None = None) -> None:
        self.op = op
        self.run: Run | None = None
        self._callbacks: list[Callable[[str | None], None]] = []
        self._run_callbacks: list[Callable[[Run | None], None]] = []

    def observe(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(op)`` after every change of the selection."""
        self._callbacks.append(callback)

    def observe_run(self, callback: Callable[[Run | None], None]) -> None:
        """Call ``callback(run)`` after every change of :attr:`run`."""
        self._run_callbacks.append(callback)

    def select(self, op: str | None) -> None:
        """Select ``op`` (a name from ``comparison.ops['op']``) and notify the views; no-op when unchanged."""
        if op == self.op:
            return
        self.op = op
        self._notify()

    def select_run(self, run: Run | None, op: str | None = None) -> None:
        """Look at one (step, rank) (``None``: all), then select ``op`` in it (when given).

        The op views are notified once the run is set, so they resolve the name in the new run.
        """
        run = None if run is None else (int(run[0]), int(run[1]))
        if run != self.run:
            self.run = run
            for callback in list(self._run_callbacks):
                callback(run)
            if op is None or op == self.op:
                self._notify()  # the same name now means the op of the new run
        if op is not None:
            self.select(op)

    def _notify(self) -> None:
        for callback in list(self._callbacks):
            callback(self.op)


@dataclass(frozen=True)
class TablePage:
    """What the operator grid shows: one page of rows and the counts around it."""

    rows: pd.DataFrame
    page: int
    pages: int
    matching: int
    flagged: int


class OpsModel:
    """The operator table's model: rule, threshold, filters, sorting and paging over ``comparison.ops``.

    Parameters
    ----------
    comparison
        The comparison to explore.
    metric
        Metric of the threshold slider and the trend (default: the rule's primary metric).
    page_size
        Rows per page sent to the grid.
    """

    def __init__(self, comparison: Comparison, *, metric: str | None = None, page_size: int = 200) -> None:
        self.comparison = comparison
        self.base_rule = comparison.rule
        self.rule = comparison.rule
        self.metric = metric or _default_metric(comparison.rule)
        self.page_size = int(page_size)
        self.page = 0
        self.op_types: frozenset[str] = frozenset()
        self.pattern = ""
        self.statuses: frozenset[str] = frozenset()
        self.origins: frozenset[str] = frozenset()
        self.sort_by = "order"
        self.ascending = True
        self.run: Run | None = None
        self._judged = comparison
        self._prepare()
        self.ops = comparison.ops.copy()
        self.threshold = self._rule_value(self.rule, self.metric)

    # -- preparation (once) ------------------------------------------------------------------------
    def _prepare(self) -> None:
        self._names_lower = self.comparison.ops["op"].str.lower().to_numpy(dtype=object)

    # -- judging (every slider move) ---------------------------------------------------------------
    def judge(self, rule: Rule) -> pd.DataFrame:
        """``comparison.ops`` under ``rule``, re-judged by the core (which shares its per-op index)."""
        self._facts: dict[str, pd.Series | None] = {}
        self._judged = self.comparison.with_rule(rule)
        return self._judged.ops

    def set_threshold(self, value: float, metric: str | None = None) -> None:
        """Set the bound on ``metric`` (default: the current metric) and re-judge every op."""
        if metric is not None:
            self.metric = metric
        self.threshold = float(value)
        self.rule = self.base_rule.with_threshold(self.metric, self.threshold)
        self.ops = self.judge(self.rule)

    def set_rule(self, rule: Rule | str) -> None:
        """Judge with another rule (a preset name or a Rule); the slider starts from its bound."""
        self.base_rule = self.rule = get_rule(rule)
        self.threshold = self._rule_value(self.rule, self.metric)
        self.ops = self.judge(self.rule)

    def set_metric(self, metric: str) -> None:
        """Show ``metric`` in the trend and put the slider on it (the rule is unchanged until the slider moves)."""
        if metric not in SLIDER_METRICS:
            raise ValueError(f"metric {metric!r} is not one of {', '.join(SLIDER_METRICS)}")
        self.metric = metric
        self.threshold = self._rule_value(self.rule, metric)

    @staticmethod
    def _rule_value(rule: Rule, metric: str) -> float:
        for t in rule.thresholds:
            if t.metric == metric:
                return float(t.value)
        return 0.99 if metric == "cosine" else 0.05

    # -- facts ---------------------------------------------------------------------------------------
    @property
    def flagged(self) -> int:
        """How many ops fail under the current rule, leaving out failures explained by randomness or
        discontinuous ops (as ``Comparison.failing_ops()`` does)."""
        mask = self.ops["status"] == STATUS_FAIL
        if "explained" in self.ops:
            mask &= ~self.ops["explained"].astype(bool)
        return int(mask.sum())

    def _fact(self, name: str) -> pd.Series | None:
        facts = self.__dict__.setdefault("_facts", {})
        key = f"{name}@{self.run}"
        if key not in facts:
            ops = self.ops if self.run is None else self.ops.iloc[self.run_positions()]
            if name == "onset":
                facts[key] = onset_across(ops)
            else:
                facts[key] = first_failing_across(ops, origin="introduced" if name == "introduced" else None)
        return facts[key]

    def first_failing(self) -> pd.Series | None:
        """The first failing op (core :func:`~nbprec.compare.runs.first_failing_across`), in :attr:`run` when
        one is chosen; computed once per rule and run."""
        return self._fact("first")

    def first_introduced(self) -> pd.Series | None:
        """The first op that introduced an error (inputs pass, outputs fail)."""
        return self._fact("introduced")

    def onset(self) -> pd.Series | None:
        """Where the divergence sets in and persists (core :func:`~nbprec.compare.runs.onset_across`)."""
        return self._fact("onset")

    # -- steps and ranks -------------------------------------------------------------------------------
    @property
    def several(self) -> bool:
        """Whether the comparison spans several (step, rank)s (the table then shows step and rank)."""
        return self.comparison.several_runs

    def runs(self) -> RunSummary:
        """The per-(step, rank) summary under the current rule (core ``Comparison.runs()``)."""
        return self._judged.runs()

    def set_run(self, run: Run | None) -> None:
        """Restrict the table, the trend and the named ops to one (step, rank) (``None``: all)."""
        self.run = None if run is None else (int(run[0]), int(run[1]))
        self.page = 0

    def run_positions(self) -> np.ndarray:
        """Row positions in :attr:`ops` of the current run (every row when none is chosen)."""
        if self.run is None:
            return np.arange(len(self.ops))
        step, rank = self.run
        return np.flatnonzero((self.ops["step"].to_numpy() == step) & (self.ops["rank"].to_numpy() == rank))

    def position_of(self, op: str | None) -> int | None:
        """Row position in :attr:`ops` of ``op`` in the current run (the first (step, rank) holding it when
        none is chosen), or ``None``."""
        if op is None:
            return None
        positions = self.run_positions()
        hit = np.flatnonzero(self.ops["op"].to_numpy()[positions] == op)
        return None if hit.size == 0 else int(positions[hit[0]])

    @property
    def metric_column(self) -> str:
        """The per-op column of the chosen metric (``out_<metric>``)."""
        return f"out_{self.metric}"

    def metric_options(self) -> list[str]:
        """Metrics the slider offers for this comparison."""
        return [m for m in SLIDER_METRICS if m in self.comparison.table and f"out_{m}" in self.ops]

    @staticmethod
    def rule_options() -> list[str]:
        """Preset rule names."""
        return preset_names()

    def op_type_options(self) -> list[str]:
        """Op types present, sorted."""
        return sorted(str(t) for t in self.ops["op_type"].unique())

    # -- filtering, sorting, paging -------------------------------------------------------------------
    def set_filters(
        self,
        *,
        op_types: Iterable[str] | None = None,
        pattern: str | None = None,
        statuses: Iterable[str] | None = None,
        origins: Iterable[str] | None = None,
    ) -> None:
        """Restrict the table; an empty set means no restriction. ``pattern`` is a case-insensitive substring."""
        if op_types is not None:
            self.op_types = frozenset(op_types)
        if pattern is not None:
            self.pattern = pattern
        if statuses is not None:
            self.statuses = frozenset(statuses)
        if origins is not None:
            self.origins = frozenset(origins)
        self.page = 0

    def set_sort(self, column: str, ascending: bool | None = None) -> None:
        """Sort by ``order`` or any metric column; metrics default to worst first."""
        if column not in self.ops:
            raise ValueError(f"cannot sort by {column!r}: not a column of the op table")
        self.sort_by = column
        self.ascending = ascending if ascending is not None else (column == "order" or column.endswith("cosine"))
        self.page = 0

    def _mask(self) -> np.ndarray:
        ops = self.ops
        mask = np.ones(len(ops), dtype=bool)
        if self.op_types:
            mask &= ops["op_type"].isin(self.op_types).to_numpy()
        if self.statuses:
            mask &= ops["status"].isin(self.statuses).to_numpy()
        if self.origins:
            mask &= ops["origin"].isin(self.origins).to_numpy()
        if self.pattern:
            needle = self.pattern.lower()
            mask &= np.fromiter((needle in n for n in self._names_lower), dtype=bool, count=len(ops))
        if self.run is not None:
            mask &= (ops["step"].to_numpy() == self.run[0]) & (ops["rank"].to_numpy() == self.run[1])
        return mask

    def _positions(self) -> np.ndarray:
        """Row positions in ``self.ops`` that pass the filters, in display order."""
        positions = np.flatnonzero(self._mask())
        if self.sort_by != "order" or not self.ascending:
            values = self.ops[self.sort_by].to_numpy()[positions]
            if values.dtype.kind == "f":
                values = np.where(np.isnan(values), np.inf if self.ascending else -np.inf, values)
            order = np.argsort(values, kind="stable")
            positions = positions[order if self.ascending else order[::-1]]
        return positions

    def columns(self) -> list[str]:
        """Columns the grid shows: identity, status, and the chosen metric on inputs and outputs."""
        metric_cols = [c for c in (f"in_{self.metric}", f"out_{self.metric}") if c in self.ops]
        where = ["step", "rank"] if self.several else []
        return [*where, *TABLE_COLUMNS, *metric_cols, "amplification"]

    def view(self) -> TablePage:
        """The current page of the filtered, sorted table (only these rows go to the browser)."""
        positions = self._positions()
        pages = max(1, -(-len(positions) // self.page_size))
        self.page = min(max(self.page, 0), pages - 1)
        chosen = positions[self.page * self.page_size : (self.page + 1) * self.page_size]
        rows = self.ops.iloc[chosen]
        first, onset = self.first_failing(), self.onset()
        marks = np.full(len(rows), "", dtype=object)
        if onset is not None:
            marks[_same_op(rows, onset)] = "onset"
        if first is not None:
            marks[_same_op(rows, first)] = "first failing"
        rows = rows.assign(mark=marks)[self.columns()]
        return TablePage(rows, self.page, pages, len(positions), self.flagged)

    def page_of(self, op: str) -> int | None:
        """The page showing ``op`` under the current filters and sort, or ``None`` when filtered out."""
        positions = self._positions()
        hit = np.flatnonzero(self.ops["op"].to_numpy()[positions] == op)
        return None if hit.size == 0 else int(hit[0] // self.page_size)


def _tensor(dump: Dump, name: str, row: pd.Series) -> np.ndarray:
    """The payload of ``name``; in the row's step and rank when the dump holds the name in several
    (a dump with more than one step or rank was matched under its own labels)."""
    from nbprec.errors import TensorNotFoundError

    try:
        return dump.tensor(name)
    except TensorNotFoundError:
        index = dump.index
        hit = np.flatnonzero(
            (index["name"] == name).to_numpy()
            & (index["step"] == row.get("step")).to_numpy()
            & (index["rank"] == row.get("rank")).to_numpy()
        )
        if hit.size == 0:
            raise
        return dump.tensor(int(hit[0]))


def _same_op(rows: pd.DataFrame, op: pd.Series) -> np.ndarray:
    """Which of ``rows`` are the op ``op`` (same name, step and rank)."""
    return (
        (rows["op"] == op["op"]).to_numpy()
        & (rows["step"] == op["step"]).to_numpy()
        & (rows["rank"] == op["rank"]).to_numpy()
    )


def _default_metric(rule: Rule) -> str:
    metric = rule.primary_metric
    return metric if metric in SLIDER_METRICS else "cosine"


class TensorSource:
    """Lazy access to the payloads of a comparison's two dumps, for the tensor inspector.

    Parameters
    ----------
    comparison
        Its ``meta`` names the dump paths when ``target``/``bench`` are not given.
    target, bench
        Already opened dumps (or paths), optional.
    """

    def __init__(
        self, comparison: Comparison, target: Dump | str | Path | None = None, bench: Dump | str | Path | None = None
    ) -> None:
        self._sources: dict[str, Any] = {
            "target": target if target is not None else comparison.meta.get("target"),
            "bench": bench if bench is not None else comparison.meta.get("bench"),
        }
        self._dumps: dict[str, Dump | None] = {}
        self.problem = ""

    def dump(self, side: str) -> Dump | None:
        """The opened dump of ``side`` (``"target"`` or ``"bench"``), or ``None`` when it cannot be opened."""
        if side not in self._dumps:
            source = self._sources.get(side)
            if isinstance(source, Dump) or source is None:
                self._dumps[side] = source
            else:
                from nbprec.errors import NbprecError
                from nbprec.formats import open_dump

                try:
                    self._dumps[side] = open_dump(source)
                except (NbprecError, OSError) as exc:
                    self.problem = f"cannot open the {side} dump {source}: {exc}"
                    self._dumps[side] = None
        return self._dumps[side]

    def pair(self, row: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Target and benchmark payloads of one comparison row (raises the core's errors when missing)."""
        from nbprec.errors import TensorDataUnavailableError

        arrays = []
        for side in ("target", "bench"):
            dump = self.dump(side)
            name = row.get(f"{side}_name", "")
            if dump is None or not name:
                why = self.problem or f"no {side} dump or no matched {side} tensor"
                raise TensorDataUnavailableError(f"{row.get('target_name', '')}: {why}")
            arrays.append(_tensor(dump, str(name), row))
        return arrays[0], arrays[1]
