"""The operator table: a virtualised grid of one page of ops, with threshold, rule, metric, filter and sort controls."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.rules import HIGHER_IS_BETTER, STATUS_FAIL, STATUS_NA, STATUS_PASS
from nbprec.compare.runs import op_at
from nbprec.widgets.base import View, caption
from nbprec.widgets.model import TEXT_SORT_COLUMNS, OpsModel, Selection
from nbprec.widgets.static import esc, html_table

FIRST_COLOUR = "#ffd54f"
FAIL_COLOUR = "#fde0dc"
SELECTED_COLOUR = "#bbdefb"
_ORIGINS = ("introduced", "inherited", "random", "")
#: Height of the grid, and how many rows it shows without scrolling (rows of 22 px under a 22 px header).
GRID_HEIGHT = 290
VISIBLE_ROWS = (GRID_HEIGHT - 22 - 12) // 22  # less the header and a horizontal scrollbar


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
        self._from_grid = False
        self.page_rows = model.view().rows
        self._shown_run = model.run
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
        self.model.set_page(page)
        self.refresh()

    def click_row(self, row: int) -> None:
        """Select the op shown in row ``row`` of the current page (what a click in the grid does)."""
        if 0 <= row < len(self.page_rows):
            self._from_grid = True
            try:
                self._select_op(self.page_rows.iloc[row])
            finally:
                self._from_grid = False

    def go_to_first_failing(self) -> None:
        """Select the first failing op (the verdict's) and bring its row to the top of the grid, clearing the
        filters when they hide it."""
        first = self.model.first_failing()
        if first is None:
            return
        if not self.model.show(str(first["op"])):
            self._clear_filters()
            self.model.show(str(first["op"]))
        self.refresh()
        self._select_op(first)

    def _clear_filters(self) -> None:
        self.model.set_filters(op_types=(), pattern="", statuses=(), origins=(), modules=())
        if self.built:
            self._updating = True
            try:
                self._types.value = self._status.value = self._origin.value = ()
                self._pattern.value = self._module.value = ""
            finally:
                self._updating = False

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
        """Follow the selection: when the op's row is not among the first rows the grid shows (or the run
        changed), move the rows so that it is; a click in the grid itself only recolours the rows."""
        run_changed = self.model.run != self._shown_run
        ops = self.page_rows["op"].tolist()
        visible = op in ops[:VISIBLE_ROWS] or (self._from_grid and op in ops)
        if op is not None and (run_changed or not visible):
            self.model.show(op)
            self.refresh()
        else:
            self._push_marks()

    # -- widget ------------------------------------------------------------------------------------------
    def summary_text(self) -> str:
        """The line above the grid: flagged count, rule, first failing op, rows shown."""
        m = self.model
        page = m.view()
        first = m.first_failing()
        first_txt = "none" if first is None else op_at(first, m.several)
        run = f"step {m.run[0]}, rank {m.run[1]}: " if m.run is not None else ""
        start = min(m.start, max(page.matching - 1, 0)) if m.start is not None else page.page * m.page_size
        return (
            f"{esc(run)}"
            f"<b>{page.flagged}</b> of {len(m.ops)} ops flagged by "
            f"<code title='{esc(m.rule.describe())}'>{esc(m.rule.name)}</code>; "
            f"first failing op: <b style='background:{FIRST_COLOUR}'>{esc(first_txt)}</b>; "
            f"rows {start + 1 if len(page.rows) else 0}-{start + len(page.rows)} of {page.matching} matching ops "
            f"(page {page.page + 1}/{page.pages})"
        )

    def _build(self) -> Any:
        import ipywidgets as w
        from ipydatagrid import DataGrid

        m = self.model

        def sized(width: str) -> Any:
            return w.Layout(width=width)

        # captions are widgets of their own, not the controls' descriptions (see ``caption``)
        self._cos_slider = w.FloatSlider(min=0.9, max=1.0, step=1e-4, readout_format=".4f", tooltip="threshold",
                                         continuous_update=False, layout=sized("240px"))  # fmt: skip
        self._err_slider: Any = None  # built when an error metric (lower is better) is first picked
        self._threshold_caption = caption("threshold")
        self._metric = w.Dropdown(options=m.metric_options(), value=m.metric, tooltip="metric", layout=sized("150px"))
        self._rule = w.Dropdown(options=m.rule_options(), value=_preset_or_none(m), tooltip="rule",
                                layout=sized("120px"))  # fmt: skip
        self._types = w.Dropdown(options=_any("type", m.op_type_options()), layout=sized("120px"))
        self._status = w.Dropdown(options=_any("status", [STATUS_FAIL, STATUS_PASS, STATUS_NA]), layout=sized("105px"))
        self._origin = w.Dropdown(options=_any("origin", [o for o in _ORIGINS if o]), layout=sized("110px"))
        self._pattern = w.Text(placeholder="op name contains", layout=sized("150px"))
        self._module = w.Text(placeholder="module (prefix)", layout=sized("150px"))
        self._sort = w.Dropdown(options=self._sort_options(), value="order", tooltip="sort", layout=sized("200px"))
        self._prev = w.Button(description="◀", tooltip="previous page", layout=sized("36px"))
        self._next = w.Button(description="▶", tooltip="next page", layout=sized("36px"))
        self._first = w.Button(description="go to first failing op", button_style="warning", layout=sized("170px"))
        self._summary = w.HTML(layout=w.Layout(margin="0 4px"))
        self._grid = DataGrid(
            self._grid_frame(),
            selection_mode="row",
            base_row_size=22,
            base_column_size=92,
            base_row_header_size=56,
            column_widths={
                "step": 44,
                "rank": 44,
                "op": 250,
                "status": 58,
                "origin": 80,
                "module": 150,
                "mark": 90,
                "op_type": 100,
            },
            default_renderer=_renderer(self.selection.op),
            layout=w.Layout(height=f"{GRID_HEIGHT}px", width="100%", flex="0 0 auto"),
        )
        self._grid.observe(self._on_grid_select, names="selections")
        self._cos_slider.observe(lambda ch: self._slider_moved(ch["new"]), names="value")
        self._metric.observe(lambda ch: self.set_metric(ch["new"]), names="value")
        self._rule.observe(lambda ch: ch["new"] and self.set_rule(ch["new"]), names="value")
        for control, key in ((self._types, "op_types"), (self._status, "statuses"), (self._origin, "origins")):
            control.observe(lambda ch, key=key: self._filter(**{key: ch["new"]}), names="value")
        self._pattern.observe(lambda ch: self._filter(pattern=ch["new"]), names="value")
        self._module.observe(lambda ch: self._filter(modules=[ch["new"]]), names="value")
        self._sort.observe(lambda ch: self.set_sort(ch["new"]), names="value")
        self._prev.on_click(lambda _: self.set_page(self.model.page - 1))
        self._next.on_click(lambda _: self.set_page(self.model.page + 1))
        self._first.on_click(lambda _: self.go_to_first_failing())
        self._slider_box = w.HBox(layout=w.Layout(align_items="center"))
        row = w.Layout(flex_flow="row wrap", align_items="center")
        controls = [
            w.HBox([caption("rule"), self._rule, caption("metric"), self._metric, self._slider_box], layout=row),
            w.HBox([self._pattern, self._module, self._types, self._status, self._origin], layout=row),
            w.HBox([self._first, caption("sort"), self._sort, self._prev, self._next], layout=row),
        ]
        return w.VBox([*controls, self._summary, self._grid], layout=w.Layout(width="100%"))

    def _filter(self, **filters: Any) -> None:
        if not self._updating:
            self.set_filters(**filters)

    def _sort_options(self) -> list[tuple[str, str]]:
        metric_cols = [c for c in self.model.ops.columns if c.startswith(("in_", "out_")) and c != "in_status"]
        text = [(f"{c} (A to Z)", c) for c in TEXT_SORT_COLUMNS if c in self.model.ops]
        metrics = [(f"{c} (worst first)", c) for c in [*metric_cols, "amplification"]]
        return [("execution order", "order"), *text, *metrics]

    def _error_slider(self) -> Any:
        """The threshold slider of error metrics (log scale), built on first use."""
        if self._err_slider is None:
            import ipywidgets as w

            self._err_slider = w.FloatLogSlider(min=-6, max=1, step=0.05, readout_format=".2e", tooltip="threshold",
                                                continuous_update=False, layout=w.Layout(width="240px"))  # fmt: skip
            self._err_slider.observe(lambda ch: self._slider_moved(ch["new"]), names="value")
        return self._err_slider

    def _slider_moved(self, value: float) -> None:
        if not self._updating:
            self.set_threshold(value)

    def _grid_frame(self) -> pd.DataFrame:
        """The page as the grid shows it: metrics as text to 6 significant digits, ``inf`` and ``-inf`` as such
        (JSON has no infinity), missing values blank (the model keeps the numbers)."""
        several = self.model.several  # order repeats across steps and ranks: no index then
        frame = self.page_rows.reset_index(drop=True) if several else self.page_rows.set_index("order")
        floats = frame.select_dtypes("float").columns
        return frame.assign(**{c: frame[c].map(_cell_text) for c in floats})

    def _on_grid_select(self, change: dict[str, Any]) -> None:
        if self._updating or not change["new"]:
            return
        visible = self._grid.get_visible_data()
        row = int(change["new"][0]["r1"])
        if 0 <= row < len(visible):
            self._from_grid = True
            try:
                self._select_op(visible.reset_index().iloc[row])
            finally:
                self._from_grid = False

    def _push_marks(self) -> None:
        """What a new selection changes when its row is already shown: the row colours (one expression string
        sent; the renderer widget and the rows stay)."""
        if self.built:
            self._grid.default_renderer.background_color.value = _colour_expression(self.selection.op)

    def refresh(self) -> None:
        """Recompute the page (always) and push it into the widgets (once built)."""
        self.page_rows = self.model.view().rows
        self._shown_run = self.model.run
        if not self.built:
            return
        self._updating = True
        try:
            m = self.model
            cosine_like = m.metric in HIGHER_IS_BETTER
            slider = self._cos_slider if cosine_like else self._error_slider()
            if cosine_like:
                slider.min = min(0.9, m.threshold)
            slider.value = m.threshold
            self._slider_box.children = (self._threshold_caption, slider)
            self._metric.value = m.metric
            self._sort.options = self._sort_options()
            self._sort.value = m.sort_by if m.sort_by in dict(self._sort_options()).values() else "order"
            self._summary.value = f"<span style='font-size:12px'>{self.summary_text()}</span>"
            with self._grid.hold_sync():
                self._grid.default_renderer.background_color.value = _colour_expression(self.selection.op)
                self._grid.data = self._grid_frame()
                self._grid.selections = []
        finally:
            self._updating = False

    def to_html(self) -> str:
        rows = self.page_rows.reset_index(drop=True)
        highlight = {int(i): FAIL_COLOUR for i in range(len(rows)) if rows.at[i, "status"] == STATUS_FAIL}
        highlight.update({int(i): FIRST_COLOUR for i in range(len(rows)) if rows.at[i, "mark"] == "first failing"})
        return f"<div class='nbprec-ops'><p>{self.summary_text()}</p>{html_table(rows, highlight=highlight)}</div>"


def _any(what: str, options: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Dropdown options of a filter: "any <what>" (no restriction), then one option per value."""
    return [(f"any {what}", ()), *[(o, (o,)) for o in options]]


def _cell_text(value: float) -> str:
    """A metric as the grid shows it: 6 significant digits, ``inf``/``-inf``/``nan`` spelt out, missing blank."""
    if np.isnan(value):
        return ""
    return f"{value:.6g}"


def _preset_or_none(model: OpsModel) -> str | None:
    name = model.rule.name
    return name if name in model.rule_options() else None


def _colour_expression(selected: str | None) -> str:
    """Row colours: first failing op, selected op, failing ops (a Vega expression evaluated in the browser)."""
    name = json.dumps(selected or "")  # a string literal with every quote, backslash and control char escaped
    return (
        f"cell.metadata.data['mark'] == 'first failing' ? '{FIRST_COLOUR}' : "
        f"(cell.metadata.data['op'] == {name} ? '{SELECTED_COLOUR}' : "
        f"(cell.metadata.data['status'] == 'fail' ? '{FAIL_COLOUR}' : 'white'))"
    )


def _renderer(selected: str | None) -> Any:
    """The grid's cell renderer, coloured by :func:`_colour_expression`."""
    from ipydatagrid import TextRenderer, VegaExpr

    return TextRenderer(background_color=VegaExpr(_colour_expression(selected)))
