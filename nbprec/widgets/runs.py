"""Steps and ranks: a rank x step heatmap of one value per (step, rank), which drives the other views.

Each cell is a (step, rank) of the comparison (core ``Comparison.runs()``, under the dashboard's current rule):
its failing-op count, worst output cosine or worst output relative error; a (step, rank) on one side only is
grey and says which side holds it. Clicking a cell sets the shared :class:`~nbprec.widgets.model.Selection`'s
run: the operator table, the trend and the inspector show that (step, rank) only, and its first failing op is
selected. The static fallback is an HTML grid with the same colours, and the per-(step, rank) table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.presence import BOTH
from nbprec.compare.runs import RunSummary
from nbprec.widgets.base import View, caption
from nbprec.widgets.model import OpsModel, Run, Selection
from nbprec.widgets.static import esc, html_table

#: Values a cell can show: per-(step, rank) column -> (label, higher is worse).
HEATMAP_VALUES = {
    "failing_ops": ("failing ops", True),
    "out_cosine": ("worst output cosine", False),
    "out_error": ("worst output relative error", True),
}
MISSING_COLOUR = "#bdbdbd"
SELECTED_BORDER = "#1565c0"


@dataclass(frozen=True)
class HeatmapData:
    """What the heatmap draws: ``values[i, j]`` for rank ``ranks[i]`` at step ``steps[j]`` (NaN: nothing to
    show), ``badness`` the same scaled to [0, 1] (1 worst), ``labels`` the text of each cell."""

    steps: np.ndarray
    ranks: np.ndarray
    values: np.ndarray
    badness: np.ndarray
    labels: np.ndarray
    present: np.ndarray
    value: str
    selected: Run | None


def heatmap_data(summary: RunSummary, value: str, selected: Run | None = None) -> HeatmapData:
    """The rank x step grid of ``value`` (a key of :data:`HEATMAP_VALUES`) from a per-(step, rank) summary."""
    if value not in HEATMAP_VALUES:
        raise ValueError(f"value {value!r} is not one of {', '.join(HEATMAP_VALUES)}")
    table = summary.table
    steps = np.array(sorted(int(s) for s in table["step"].unique()), dtype=np.int64)
    ranks = np.array(sorted(int(r) for r in table["rank"].unique()), dtype=np.int64)
    values = np.full((len(ranks), len(steps)), np.nan)
    labels = np.full((len(ranks), len(steps)), "", dtype=object)
    present = np.zeros((len(ranks), len(steps)), dtype=bool)
    step_at = {int(s): j for j, s in enumerate(steps)}
    rank_at = {int(r): i for i, r in enumerate(ranks)}
    for row in table.itertuples(index=False):
        i, j = rank_at[int(row.rank)], step_at[int(row.step)]
        if row.presence != BOTH:
            labels[i, j] = row.presence
            continue
        present[i, j] = True
        v = float(getattr(row, value))
        values[i, j] = v
        text = f"{int(v)} failing" if value == "failing_ops" else ("" if np.isnan(v) else f"{v:.4g}")
        labels[i, j] = text + "".join(f" ({m})" for m in str(row.first).split(", ") if m)
    worse_high = HEATMAP_VALUES[value][1]
    finite = values[np.isfinite(values)]
    badness = np.full(values.shape, np.nan)
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        if value == "failing_ops":
            lo = 0.0
        span = hi - lo
        scaled = (values - lo) / span if span > 0 else np.where(np.isfinite(values), 0.0, np.nan)
        badness = scaled if worse_high else 1.0 - scaled
        if value == "failing_ops":  # no failing op is good, whatever the others do
            badness = np.where(values == 0, 0.0, np.maximum(badness, 0.25))
        badness = np.where(np.isinf(values), 1.0, badness)
    return HeatmapData(steps, ranks, values, badness, labels, present, value, selected)


#: The colour scale, fine to worst (the widget's ColorScale and the static grid use the same stops).
SCALE = ("#c8e6c9", "#fff59d", "#e53935")


def cell_colour(badness: float, present: bool) -> str:
    """A cell's colour: grey when one side lacks it, from green (fine) through yellow to red (worst) otherwise."""
    if not present:
        return MISSING_COLOUR
    if not np.isfinite(badness):
        return "#ffffff"
    stops = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in SCALE], dtype=np.float64)
    x = float(np.clip(badness, 0.0, 1.0)) * (len(stops) - 1)
    k = min(int(x), len(stops) - 2)
    rgb = stops[k] + (stops[k + 1] - stops[k]) * (x - k)
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


class RunsView(View):
    """A rank x step heatmap of the comparison's (step, rank)s, linked to the shared selection.

    Parameters
    ----------
    model
        The operator-table model (its rule decides the statuses; its run filter follows the selection).
    selection
        The dashboard's shared selection; :meth:`click_cell` sets its run.
    value
        What the cells show (a key of :data:`HEATMAP_VALUES`); by default the worst output cosine when the
        comparison has cosines (tensor mode), else the failing-op count.
    """

    title = "steps and ranks"

    def __init__(self, model: OpsModel, selection: Selection, value: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.selection = selection
        if value is None:
            cosines = model.runs().table["out_cosine"].to_numpy(np.float64)
            value = "out_cosine" if np.isfinite(cosines).any() else "failing_ops"
        self.value = value
        self.data = heatmap_data(model.runs(), value, selection.run)
        selection.observe_run(lambda _run: self.refresh())

    # -- state changes (callable without widgets, as the tests do) ----------------------------------------
    def click_cell(self, step: int, rank: int) -> None:
        """Look at one (step, rank) in every view, and select its first failing op (else its first op)."""
        row = self.model.runs().row(step, rank)
        if row is None:
            raise ValueError(f"the comparison has no step {step}, rank {rank}")
        op = row["first_failing_op"] or None
        if op is None:
            ops = self.model.ops
            hit = ops[(ops["step"] == step) & (ops["rank"] == rank)]
            op = str(hit.iloc[0]["op"]) if len(hit) else None
        self.selection.select_run((int(step), int(rank)), op)

    def show_all(self) -> None:
        """Back to every (step, rank) in the other views."""
        self.selection.select_run(None)

    def set_value(self, value: str) -> None:
        """Show ``value`` (a key of :data:`HEATMAP_VALUES`) in the cells."""
        self.value = value
        self.refresh()

    # -- text ------------------------------------------------------------------------------------------------
    def summary_html(self) -> str:
        """What one side lacks, where divergence and NaN/inf appear first, and the chosen run."""
        summary = self.model.runs()
        items = "".join(f"<li>{esc(line)}</li>" for line in summary.lines())
        run = self.selection.run
        shown = "all steps and ranks" if run is None else f"step {run[0]}, rank {run[1]}"
        return (
            f"<ul class='nbprec-runs-lines' style='margin:2px 0'>{items}</ul>"
            f"<p style='margin:2px 0'>Showing <b>{esc(shown)}</b> in the views below; click a cell to look at one "
            "(step, rank).</p>"
        )

    def grid_html(self) -> str:
        """The heatmap as an HTML table (ranks down, steps across), coloured as the widget is."""
        d = self.data
        label = HEATMAP_VALUES[d.value][0]
        head = "".join(f"<th style='padding:2px 8px'>step {int(s)}</th>" for s in d.steps)
        body = []
        for i, rank in enumerate(d.ranks):
            cells = []
            for j, step in enumerate(d.steps):
                chosen = d.selected == (int(step), int(rank))
                border = f"3px solid {SELECTED_BORDER}" if chosen else "1px solid #fff"
                cells.append(
                    f"<td class='nbprec-run-cell' data-step='{int(step)}' data-rank='{int(rank)}' "
                    f"style='background:{cell_colour(d.badness[i, j], d.present[i, j])};border:{border};"
                    f"padding:4px 10px;text-align:center'>{esc(d.labels[i, j])}</td>"
                )
            body.append(f"<tr><th style='padding:2px 8px;text-align:right'>rank {int(rank)}</th>{''.join(cells)}</tr>")
        return (
            f"<table class='nbprec-runs-grid' style='border-collapse:collapse;font-size:12px'>"
            f"<caption style='text-align:left'><b>{esc(label)} per (step, rank)</b> (grey: one side only)</caption>"
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        )

    def table_frame(self) -> pd.DataFrame:
        """The per-(step, rank) table as shown."""
        return self.model.runs().display_table()

    # -- widget ------------------------------------------------------------------------------------------
    def _build(self) -> Any:
        import bqplot as bq
        import ipywidgets as w

        self._updating = False
        sx, sy = bq.OrdinalScale(), bq.OrdinalScale(reverse=True)
        self._colours = bq.ColorScale(min=0.0, max=1.0, colors=list(SCALE))
        rows, columns, colours = self._grid_arrays(self.data)
        self._map = bq.GridHeatMap(
            color=colours,
            row=rows,
            column=columns,
            scales={"row": sy, "column": sx, "color": self._colours},
            interactions={"click": "select"},
            selected_style={"stroke": SELECTED_BORDER, "stroke-width": 4},
            null_color=MISSING_COLOUR,
            stroke="white",
        )
        self._map.observe(self._on_cell, names="selected")
        axes = [bq.Axis(scale=sx), bq.Axis(scale=sy, side="left")]
        self._figure = bq.Figure(
            marks=[self._map],
            axes=axes,
            fig_margin={"top": 10, "bottom": 40, "left": 60, "right": 10},
            layout=w.Layout(width="min(100%, 520px)", height="220px"),
        )
        self._value = w.Dropdown(
            options=[(label, key) for key, (label, _) in HEATMAP_VALUES.items()], value=self.value, tooltip="cells"
        )
        self._value.observe(lambda ch: self.set_value(ch["new"]), names="value")
        self._all = w.Button(description="all steps and ranks")
        self._all.on_click(lambda _: self.show_all())
        self._summary = w.HTML()
        self._grid = w.HTML()
        return w.VBox(
            [
                w.HTML("<h3 style='margin:4px 0'>Steps and ranks</h3>"),
                self._summary,
                w.HBox([caption("cells"), self._value, self._all], layout=w.Layout(align_items="center")),
                self._figure,
                self._grid,
            ]
        )

    def _on_cell(self, change: dict[str, Any]) -> None:
        cells = np.asarray(change["new"] if change["new"] is not None else [], dtype=np.int64).reshape(-1, 2)
        if self._updating or not len(cells):
            return
        i, j = (int(v) for v in cells[0])
        d = self.data
        if 0 <= i < len(d.ranks) and 0 <= j < len(d.steps):
            self.click_cell(int(d.steps[j]), int(d.ranks[i]))

    def refresh(self) -> None:
        """Recompute the grid (always) and push it into the widgets (once built)."""
        self.data = heatmap_data(self.model.runs(), self.value, self.selection.run)
        if not self.built:
            return
        data = self.data
        self._updating = True
        try:
            rows, columns, colours = self._grid_arrays(data)
            with self._map.hold_sync():
                self._map.row, self._map.column, self._map.color = rows, columns, colours
                self._map.selected = None if data.selected is None else self._cell_of(data)
            self._value.value = self.value
            self._summary.value = self.summary_html()
            self._grid.value = self.grid_html()
        finally:
            self._updating = False

    @staticmethod
    def _grid_arrays(data: HeatmapData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row labels, column labels and badness per cell (NaN, grey, where one side lacks the (step, rank)).

        bqplot squeezes a colour grid with a single row or column to one dimension and then rejects it, so such
        a grid gets an empty last row (or column), labelled blank and never selectable.
        """
        grid = np.where(data.present, np.nan_to_num(data.badness, nan=0.0), np.nan)
        rows = np.array([f"rank {int(r)}" for r in data.ranks], dtype=object)
        columns = np.array([f"step {int(s)}" for s in data.steps], dtype=object)
        if grid.shape[0] == 1:
            grid, rows = np.vstack([grid, np.full((1, grid.shape[1]), np.nan)]), np.append(rows, " ")
        if grid.shape[1] == 1:
            grid, columns = np.hstack([grid, np.full((grid.shape[0], 1), np.nan)]), np.append(columns, " ")
        return rows, columns, grid

    @staticmethod
    def _cell_of(data: HeatmapData) -> list[list[int]] | None:
        step, rank = data.selected
        i, j = np.flatnonzero(data.ranks == rank), np.flatnonzero(data.steps == step)
        return [[int(i[0]), int(j[0])]] if i.size and j.size else None

    def to_html(self) -> str:
        table = html_table(self.table_frame(), max_rows=200, caption="per (step, rank)")
        return f"<div class='nbprec-runs'>{self.summary_html()}{self.grid_html()}{table}</div>"
