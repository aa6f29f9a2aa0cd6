"""The operator table: a virtualised grid of one page of ops, with threshold, rule, metric, filter and sort controls."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.rules import HIGHER_IS_BETTER, STATUS_FAIL, STATUS_NA, STATUS_PASS
from nbprec.compare.runs import op_at
from nbprec.widgets.base import View
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.static import esc, html_table

FIRST_COLOUR = "#ffd54f"
FAIL_COLOUR = "#fde0dc"
SELECTED_COLOUR = "#bbdefb"
_ORIGINS = ("introduced", "inherited", "random", "")


class OpsTableView(View):
    """Operator table linked to a :class:`~nbprec.widgets.model.Selection`.

    Clicking a row selects its op; selecting an op elsewhere pages the table to it. The threshold slider calls
    :meth:`OpsModel.set_threshold` (a core re-judging); the grid only ever holds one page of rows.

    Parameters
    ----------
    model
        The table model (shared with the trend view).
    selection
        The dashboard's shared selection.
    on_change
        Called after the rule, threshold or metric changed (the dashboard refreshes the other views).
    """

    title = "operator table"

    def __init__(self, model: OpsModel, selection: Selection, on_change: Any = None) -> None:
        super().__init__()
        self.model = model
        self.selection = selection
        self._on_change = on_change
        self._updating = False
        self.page_rows = model.view().rows
        selection.observe(self._on_selection)

    # -- state changes (callable without widgets, as the tests do) ----------------------------------------
    def set_threshold(self, value: float) -> None:
        """Move the threshold slider: re-judge and refresh."""
        self.model.set_threshold(value)
        self._changed()

    def set_rule(self, name: str) -> None:
        """Pick another rule preset."""
        self.model.set_rule(name)
        self._changed()

    def set_metric(self, metric: str) -> None:
        """Pick the metric of the slider, the metric columns and the trend."""
        self.model.set_metric(metric)
        self._changed()

    def set_filters(self, **filters: Any) -> None:
        """See :meth:`OpsModel.set_filters`."""
        self.model.set_filters(**filters)
        self.refresh()

    def set_sort(self, column: str, ascending: bool | None = None) -> None:
        """See :meth:`OpsModel.set_sort`."""
        self.model.set_sort(column, ascending)
        self.refresh()

    def set_page(self, page: int) -> None:
        """Show page ``page`` (clamped)."""
        self.model.page = page
        self.refresh()

    def click_row(self, row: int) -> None:
        """Select the op shown in row ``row`` of the current page (what a click in the grid does)."""
        if 0 <= row < len(self.page_rows):
            self._select_op(self.page_rows.iloc[row])

    def _select_op(self, row: pd.Series) -> None:
        """Select the op of a table row; over several steps and ranks, in its own (step, rank)."""
        if self.model.several and "step" in row:
            self.selection.select_run((int(row["step"]), int(row["rank"])), str(row["op"]))
        else:
            self.selection.select(str(row["op"]))

    def _changed(self) -> None:
        self.refresh()
        if self._on_change is not None:
            self._on_change()

    def _on_selection(self, op: str | None) -> None:
        self.page_rows = self.model.view().rows  # the run may have changed with the op
        if op is not None and not (self.page_rows["op"] == op).any():
            page = self.model.page_of(op)
            if page is not None:
                self.model.page = page
        self.refresh()

    # -- widget ------------------------------------------------------------------------------------------
    def summary_text(self) -> str:
        """The line above the grid: flagged count, rule, first failing op, page."""
        m = self.model
        page = m.view()
        first = m.first_failing()
        first_txt = "none" if first is None else op_at(first, m.several)
        run = f"step {m.run[0]}, rank {m.run[1]}: " if m.run is not None else ""
        return (
            f"{esc(run)}"
            f"<b>{page.flagged}</b> of {len(m.ops)} ops flagged by <code>{esc(m.rule.describe())}</code>; "
            f"first failing op: <b style='background:{FIRST_COLOUR}'>{esc(first_txt)}</b>; "
            f"showing {len(page.rows)} of {page.matching} matching ops, page {page.page + 1}/{page.pages}"
        )

    def _build(self) -> Any:
        import ipywidgets as w
        from ipydatagrid import DataGrid

        m = self.model
        self._summary = w.HTML()
        self._cos_slider = w.FloatSlider(
            min=0.9, max=1.0, step=1e-4, readout_format=".4f", description="threshold", continuous_update=False
        )
        self._err_slider = w.FloatLogSlider(
            min=-6, max=1, step=0.05, readout_format=".2e", description="threshold", continuous_update=False
        )
        self._metric = w.Dropdown(options=m.metric_options(), value=m.metric, description="metric")
        self._rule = w.Dropdown(options=m.rule_options(), value=_preset_or_none(m), description="rule")
        self._types = w.SelectMultiple(options=m.op_type_options(), rows=4, description="op type")
        self._pattern = w.Text(placeholder="substring of the op name", description="name")
        self._status = w.SelectMultiple(options=[STATUS_FAIL, STATUS_PASS, STATUS_NA], rows=3, description="status")
        self._origin = w.SelectMultiple(options=list(_ORIGINS), rows=4, description="origin")
        self._sort = w.Dropdown(options=self._sort_options(), value="order", description="sort by")
        self._prev = w.Button(description="◀ page", layout=w.Layout(width="80px"))
        self._next = w.Button(description="page ▶", layout=w.Layout(width="80px"))
        self._first = w.Button(description="go to first failing op", button_style="warning")
        self._grid = DataGrid(
            self._grid_frame(),
            selection_mode="row",
            base_row_size=22,
            base_column_size=110,
            column_widths={"op": 330, "module": 170, "mark": 90, "op_type": 110},
            default_renderer=_renderer(self.selection.op),
            layout=w.Layout(height="380px"),
        )
        self._grid.observe(self._on_grid_select, names="selections")
        self._cos_slider.observe(lambda ch: self._slider_moved(ch["new"]), names="value")
        self._err_slider.observe(lambda ch: self._slider_moved(ch["new"]), names="value")
        self._metric.observe(lambda ch: self.set_metric(ch["new"]), names="value")
        self._rule.observe(lambda ch: ch["new"] and self.set_rule(ch["new"]), names="value")
        self._types.observe(lambda ch: self.set_filters(op_types=ch["new"]), names="value")
        self._pattern.observe(lambda ch: self.set_filters(pattern=ch["new"]), names="value")
        self._status.observe(lambda ch: self.set_filters(statuses=ch["new"]), names="value")
        self._origin.observe(lambda ch: self.set_filters(origins=ch["new"]), names="value")
        self._sort.observe(lambda ch: self.set_sort(ch["new"]), names="value")
        self._prev.on_click(lambda _: self.set_page(self.model.page - 1))
        self._next.on_click(lambda _: self.set_page(self.model.page + 1))
        self._first.on_click(lambda _: self._select_first())
        self._slider_box = w.HBox()
        controls = w.VBox(
            [
                w.HBox([self._rule, self._metric, self._slider_box]),
                w.HBox([self._types, self._status, self._origin]),
                w.HBox([self._pattern, self._sort, self._prev, self._next, self._first]),
            ]
        )
        return w.VBox([w.HTML("<h3 style='margin:4px 0'>Operators</h3>"), controls, self._summary, self._grid])

    def _sort_options(self) -> list[tuple[str, str]]:
        metric_cols = [c for c in self.model.ops.columns if c.startswith(("in_", "out_")) and c != "in_status"]
        return [("execution order", "order"), *[(f"{c} (worst first)", c) for c in [*metric_cols, "amplification"]]]

    def _slider_moved(self, value: float) -> None:
        if not self._updating:
            self.set_threshold(value)

    def _select_first(self) -> None:
        first = self.model.first_introduced()
        first = first if first is not None else self.model.first_failing()
        if first is not None:
            self._select_op(first)

    def _grid_frame(self) -> pd.DataFrame:
        """The page as the grid shows it: metrics to 6 significant digits (readable cells; the model keeps all)."""
        several = self.model.several  # order repeats across steps and ranks: no index then
        frame = self.page_rows.reset_index(drop=True) if several else self.page_rows.set_index("order")
        floats = frame.select_dtypes("float").columns
        return frame.assign(**{c: frame[c].map(_six_digits) for c in floats})

    def _on_grid_select(self, change: dict[str, Any]) -> None:
        if self._updating or not change["new"]:
            return
        visible = self._grid.get_visible_data()
        row = int(change["new"][0]["r1"])
        if 0 <= row < len(visible):
            self._select_op(visible.reset_index().iloc[row])

    def refresh(self) -> None:
        """Recompute the page (always) and push it into the widgets (once built)."""
        self.page_rows = self.model.view().rows
        if not self.built:
            return
        self._updating = True
        try:
            m = self.model
            cosine_like = m.metric in HIGHER_IS_BETTER
            slider = self._cos_slider if cosine_like else self._err_slider
            if cosine_like:
                slider.min = min(0.9, m.threshold)
            slider.value = m.threshold
            self._slider_box.children = (slider,)
            self._metric.value = m.metric
            self._sort.options = self._sort_options()
            self._summary.value = self.summary_text()
            self._grid.default_renderer = _renderer(self.selection.op)
            self._grid.data = self._grid_frame()
            self._grid.selections = []
        finally:
            self._updating = False

    def to_html(self) -> str:
        rows = self.page_rows.reset_index(drop=True)
        highlight = {int(i): FAIL_COLOUR for i in range(len(rows)) if rows.at[i, "status"] == STATUS_FAIL}
        highlight.update({int(i): FIRST_COLOUR for i in range(len(rows)) if rows.at[i, "mark"] == "first failing"})
        return f"<div class='nbprec-ops'><p>{self.summary_text()}</p>{html_table(rows, highlight=highlight)}</div>"


def _six_digits(value: float) -> float:
    return float(f"{value:.6g}") if np.isfinite(value) else value


def _preset_or_none(model: OpsModel) -> str | None:
    name = model.rule.name
    return name if name in model.rule_options() else None


def _renderer(selected: str | None) -> Any:
    """Row colours: first failing op, selected op, failing ops (a Vega expression evaluated in the browser)."""
    from ipydatagrid import TextRenderer, VegaExpr

    name = json.dumps(selected or "")  # a string literal with every quote, backslash and control char escaped
    return TextRenderer(
        background_color=VegaExpr(
            f"cell.metadata.data['mark'] == 'first failing' ? '{FIRST_COLOUR}' : "
            f"(cell.metadata.data['op'] == {name} ? '{SELECTED_COLOUR}' : "
            f"(cell.metadata.data['status'] == 'fail' ? '{FAIL_COLOUR}' : 'white'))"
        )
    )
