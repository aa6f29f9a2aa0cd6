"""The dashboard's state, with no widget import: the shared selection and the operator-table model.

Views read these objects and call their methods; the objects call the core (rules, roll-up, first failing
op). A threshold change re-judges the tensor table with :meth:`nbprec.compare.Rule.evaluate` and rolls the
statuses up to ops with index arrays prepared once, so that a slider move on 100,000 ops stays well under
100 ms; ``tests/widgets/test_model.py`` checks that it gives exactly what ``comparison.with_threshold(...).ops`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nbprec.compare.comparison import Comparison
from nbprec.compare.rules import STATUS_FAIL, STATUS_NA, STATUS_PASS, Rule, get_rule, preset_names
from nbprec.compare.runs import RunSummary, first_failing_across, onset_across

#: Metrics the threshold slider and the trend offer (tensor metric -> per-op column ``out_<metric>``).
SLIDER_METRICS = ("cosine", "rel_euclidean", "max_abs_err", "max_rel_err")
_STATUS_CODES = {STATUS_NA: 0, STATUS_PASS: 1, STATUS_FAIL: 2}
_CODE_STATUS = np.array([STATUS_NA, STATUS_PASS, STATUS_FAIL], dtype=object)
_RULE_INPUT_COLUMNS = ("target_dtype", "bench_dtype", "target_nonfinite", "bench_nonfinite")
_RULE_CHECKSUM_COLUMNS = ("checksum_match", "compare_mode")
#: Identity columns of the grid, after the op, its status, its origin and the metric columns (which come first).
TABLE_COLUMNS = ("mark", "op_type", "module", "order")
#: Text columns the table sorts by (through integer ranks prepared once: 10^5 rows sort in milliseconds).
TEXT_SORT_COLUMNS = ("op", "op_type", "module", "status")
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
        self.modules: frozenset[str] = frozenset()
        self.start: int | None = None
        self.sort_by = "order"
        self.ascending = True
        self.run: Run | None = None
        self._judged = comparison
        self._prepare()
        self.ops = comparison.ops.copy()
        self.threshold = self._rule_value(self.rule, self.metric)

    # -- preparation (once) ------------------------------------------------------------------------
    def _prepare(self) -> None:
        self._text_ranks: dict[str, np.ndarray] = {}  # op, op_type, module: integer ranks, made on first sort
        self._modules: tuple[np.ndarray, pd.Index] | None = None  # codes and names, made on first module filter

    @property
    def _names_lower(self) -> np.ndarray:
        names = self.__dict__.get("_names_lower_cache")
        if names is None:
            names = self.__dict__["_names_lower_cache"] = self.comparison.ops["op"].str.lower().to_numpy(dtype=object)
        return names

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
        self.page, self.start = 0, None

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
        modules: Iterable[str] | None = None,
    ) -> None:
        """Restrict the table; an empty set means no restriction. ``pattern`` is a case-insensitive substring of
        the op name; a module keeps the ops of that module and of the modules inside it (``enc.layers.1`` keeps
        ``enc.layers.1.attn`` but not ``enc.layers.10``)."""
        if op_types is not None:
            self.op_types = frozenset(op_types)
        if pattern is not None:
            self.pattern = pattern
        if statuses is not None:
            self.statuses = frozenset(statuses)
        if origins is not None:
            self.origins = frozenset(origins)
        if modules is not None:
            self.modules = frozenset(m.strip() for m in modules if m.strip())
        self.page, self.start = 0, None

    def set_sort(self, column: str, ascending: bool | None = None) -> None:
        """Sort by ``order``, a text column (op, op_type, module, status: A to Z) or a metric column (worst
        first by default)."""
        if column not in self.ops:
            raise ValueError(f"cannot sort by {column!r}: not a column of the op table")
        self.sort_by = column
        ascending_first = column == "order" or column.endswith("cosine") or column in TEXT_SORT_COLUMNS
        self.ascending = ascending if ascending is not None else ascending_first
        self.page, self.start = 0, None

    def set_page(self, page: int) -> None:
        """Show page ``page`` (clamped when the page is built)."""
        self.page, self.start = int(page), None

    def show(self, op: str, context: int = 2) -> bool:
        """Start the shown rows ``context`` rows above ``op``, so that a grid showing the first rows of the page
        shows it without scrolling; ``False`` when ``op`` is filtered out."""
        positions = self._positions()
        hit = np.flatnonzero(self.ops["op"].to_numpy()[positions] == op)
        if hit.size == 0:
            return False
        self.start = max(0, int(hit[0]) - context)
        self.page = self.start // self.page_size
        return True

    def _pattern_mask(self, needle: str) -> np.ndarray:
        """Ops whose name contains ``needle`` (kept for the next page, sort or selection under the same text)."""
        cached = self.__dict__.get("_pattern_cache")
        if cached is None or cached[0] != needle:
            names = self._names_lower
            cached = (needle, np.fromiter((needle in n for n in names), dtype=bool, count=len(names)))
            self._pattern_cache = cached
        return cached[1]

    def _module_mask(self) -> np.ndarray:
        if self._modules is None:
            self._modules = pd.factorize(self.comparison.ops["module"].astype(str))
        codes, names = self._modules
        keep = np.array([any(n == m or n.startswith(m + ".") for m in self.modules) for n in names], dtype=bool)
        return keep[codes] if len(names) else np.zeros(len(self.ops), dtype=bool)

    def _sort_values(self, positions: np.ndarray) -> np.ndarray:
        if self.sort_by in ("op", "op_type", "module"):
            if self.sort_by not in self._text_ranks:
                column = self.comparison.ops[self.sort_by].astype(str)
                self._text_ranks[self.sort_by] = pd.factorize(column, sort=True)[0]
            return self._text_ranks[self.sort_by][positions]
        values = self.ops[self.sort_by].to_numpy()[positions]
        if values.dtype.kind == "O":
            return pd.factorize(values.astype(str), sort=True)[0]
        return values

    def _mask(self) -> np.ndarray:
        ops = self.ops
        mask = np.ones(len(ops), dtype=bool)
        if self.op_types:
            mask &= ops["op_type"].isin(self.op_types).to_numpy()
        if self.statuses:
            mask &= ops["status"].isin(self.statuses).to_numpy()
        if self.origins:
            mask &= ops["origin"].isin(self.origins).to_numpy()
        if self.modules:
            mask &= self._module_mask()
        if self.pattern:
            mask &= self._pattern_mask(self.pattern.lower())
        if self.run is not None:
            mask &= (ops["step"].to_numpy() == self.run[0]) & (ops["rank"].to_numpy() == self.run[1])
        return mask

    def _positions(self) -> np.ndarray:
        """Row positions in ``self.ops`` that pass the filters, in display order."""
        positions = np.flatnonzero(self._mask())
        if self.sort_by != "order" or not self.ascending:
            values = self._sort_values(positions)
            if values.dtype.kind == "f":
                values = np.where(np.isnan(values), np.inf if self.ascending else -np.inf, values)
            order = np.argsort(values, kind="stable")
            positions = positions[order if self.ascending else order[::-1]]
        return positions

    def metric_columns(self) -> list[str]:
        """The metric columns, key ones first: the chosen metric on outputs and inputs, then the rule's others."""
        rule_metrics = [t.metric for t in self.rule.thresholds if t.metric != self.metric]
        wanted = [f"out_{self.metric}", f"in_{self.metric}", *[f"out_{m}" for m in rule_metrics], "amplification"]
        return [c for c in dict.fromkeys(wanted) if c in self.ops]

    def columns(self) -> list[str]:
        """Columns the grid shows: the op (after its step and rank over several), its status and origin and the
        metric columns first (no key metric behind a horizontal scrollbar), then the mark, the op type, the module
        and the execution order."""
        where = ["step", "rank"] if self.several else []
        return [*where, "op", "status", "origin", *self.metric_columns(), *TABLE_COLUMNS]

    def view(self) -> TablePage:
        """The current page of the filtered, sorted table (only these rows go to the browser)."""
        positions = self._positions()
        pages = max(1, -(-len(positions) // self.page_size))
        self.page = min(max(self.page, 0), pages - 1)
        start = self.page * self.page_size if self.start is None else min(self.start, max(len(positions) - 1, 0))
        chosen = positions[start : start + self.page_size]
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
