"""Error trend: the chosen per-op metric against execution order, with threshold, onset and selection marks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nbprec.compare.rules import STATUS_FAIL
from nbprec.inspect import MAX_SCATTER_POINTS, sample_indices
from nbprec.widgets.base import View
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.static import Series, esc, svg_plot


@dataclass(frozen=True)
class TrendData:
    """Arrays of the trend plot: ``x``/``y`` for the ops of the chosen (step, rank) (all ops when none is),
    ``rows`` their positions in ``model.ops``; ``dots``, ``fails``, ``onset`` and ``selected`` index ``x``."""

    x: np.ndarray
    y: np.ndarray
    dots: np.ndarray
    fails: np.ndarray
    threshold: float
    onset: float
    selected: float
    metric: str
    rows: np.ndarray


def trend_data(model: OpsModel, selected: str | None) -> TrendData:
    """The trend's data from the table model: every op of the run on the line, at most 1e4 dots (failing ones
    kept)."""
    rows = model.run_positions()
    ops = model.ops.iloc[rows]
    column = model.metric_column
    y = ops[column].to_numpy(dtype=np.float64) if column in ops else np.full(len(ops), np.nan)
    x = np.arange(len(ops), dtype=np.float64)
    fails = np.flatnonzero((ops["status"] == STATUS_FAIL).to_numpy() & np.isfinite(y))
    fails = fails[sample_indices(len(fails), MAX_SCATTER_POINTS // 2)]
    dots = sample_indices(len(ops), MAX_SCATTER_POINTS - len(fails))
    onset = model.onset()
    position = model.position_of(selected)

    def x_of(label: int | None) -> float:
        hit = np.flatnonzero(rows == label) if label is not None else np.array([], dtype=np.int64)
        return float(hit[0]) if hit.size else np.nan

    return TrendData(
        x=x,
        y=y,
        dots=dots,
        fails=fails,
        threshold=model.threshold,
        onset=x_of(None if onset is None else model.ops.index.get_loc(onset.name)),
        selected=x_of(position),
        metric=column,
        rows=rows,
    )


class TrendView(View):
    """Metric against execution order (bqplot Lines + Scatter); clicking a dot selects its op."""

    title = "error trend"

    def __init__(self, model: OpsModel, selection: Selection) -> None:
        super().__init__()
        self.model = model
        self.selection = selection
        self.data = trend_data(model, selection.op)
        selection.observe(lambda _op: self.refresh())

    def click_point(self, position: int) -> None:
        """Select the op at row ``position`` of ``model.ops`` (what clicking a dot does); over several steps and
        ranks, in its own (step, rank)."""
        if 0 <= position < len(self.model.ops):
            row = self.model.ops.iloc[position]
            if self.model.several:
                self.selection.select_run((int(row["step"]), int(row["rank"])), str(row["op"]))
            else:
                self.selection.select(str(row["op"]))

    def _build(self) -> Any:
        import bqplot as bq
        import ipywidgets as w

        sx, sy = bq.LinearScale(), bq.LinearScale()
        self._line = bq.Lines(scales={"x": sx, "y": sy}, colors=["#1f77b4"], stroke_width=1)
        self._dots = bq.Scatter(scales={"x": sx, "y": sy}, colors=["#1f77b4"], default_size=14)
        self._fail_dots = bq.Scatter(scales={"x": sx, "y": sy}, colors=["#d62728"], default_size=30)
        self._threshold = bq.Lines(scales={"x": sx, "y": sy}, colors=["#d62728"], line_style="dashed")
        self._onset = bq.Lines(scales={"x": sx, "y": sy}, colors=["#ff7f0e"], stroke_width=2)
        self._selected = bq.Scatter(
            scales={"x": sx, "y": sy}, colors=["#2ca02c"], marker="diamond", default_size=160, stroke="black"
        )
        self._dots.on_element_click(lambda _m, ev: self._clicked(self._dot_positions, ev))
        self._fail_dots.on_element_click(lambda _m, ev: self._clicked(self._fail_positions, ev))
        self._dot_positions = np.array([], dtype=np.int64)
        self._fail_positions = np.array([], dtype=np.int64)
        self._label = w.HTML()
        ax = bq.Axis(scale=sx, label="execution order", num_ticks=8)
        ay = bq.Axis(scale=sy, side="left", label="", tick_format=".4g", num_ticks=6, label_offset="60px")
        self._ay = ay
        self._figure = bq.Figure(
            marks=[self._line, self._threshold, self._onset, self._dots, self._fail_dots, self._selected],
            axes=[ax, ay],
            fig_margin={"top": 20, "bottom": 45, "left": 85, "right": 20},
            layout=w.Layout(width="100%", height="300px"),
            title="",
        )
        return w.VBox([w.HTML("<h3 style='margin:4px 0'>Error trend</h3>"), self._label, self._figure])

    def _clicked(self, positions: np.ndarray, event: dict[str, Any]) -> None:
        index = int(event.get("data", {}).get("index", -1))
        if 0 <= index < len(positions):
            self.click_point(int(self.data.rows[int(positions[index])]))

    def refresh(self) -> None:
        """Recompute the arrays (always) and push them into the marks (once built)."""
        self.data = trend_data(self.model, self.selection.op)
        if not self.built:
            return
        d = self.data
        finite = d.y[np.isfinite(d.y)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        lo, hi = min(lo, d.threshold), max(hi, d.threshold)
        with self._figure.hold_sync():
            self._line.x, self._line.y = d.x, d.y
            self._dot_positions, self._fail_positions = d.dots, d.fails
            self._dots.x, self._dots.y = d.x[d.dots], d.y[d.dots]
            self._fail_dots.x, self._fail_dots.y = d.x[d.fails], d.y[d.fails]
            self._threshold.x, self._threshold.y = np.array([0.0, max(len(d.x) - 1, 1)]), np.full(2, d.threshold)
            onset = d.onset if np.isfinite(d.onset) else 0.0
            self._onset.x, self._onset.y = np.full(2, onset), np.array([lo, hi])
            self._onset.visible = bool(np.isfinite(d.onset))
            sel = d.selected if np.isfinite(d.selected) else 0.0
            self._selected.x = np.array([sel])
            self._selected.y = np.array([d.y[int(sel)] if np.isfinite(d.selected) and len(d.y) else lo])
            self._selected.visible = bool(np.isfinite(d.selected))
            self._ay.label = d.metric
        self._label.value = self._caption()

    def _caption(self) -> str:
        d = self.data
        onset = "none" if not np.isfinite(d.onset) else esc(self.model.ops.iloc[int(d.rows[int(d.onset)])]["op"])
        run = self.model.run
        shown = f"step {run[0]}, rank {run[1]}: " if run is not None else ""
        return (
            f"{esc(shown)}"
            f"<span style='color:#d62728'>red dots: failing ops</span>; dashed line: threshold {d.threshold:.6g}; "
            f"<span style='color:#ff7f0e'>orange line: onset ({onset})</span>; "
            f"<span style='color:#2ca02c'>green diamond: selected op</span>. Click a dot to select its op."
        )

    def to_svg(self) -> str:
        d = self.data
        series = [
            Series(d.x, d.y, "line", "#1f77b4", d.metric),
            Series(d.x[d.fails], d.y[d.fails], "dots", "#d62728", "failing"),
        ]
        vlines = [(d.onset, "#ff7f0e", "onset")] if np.isfinite(d.onset) else []
        if np.isfinite(d.selected):
            vlines.append((d.selected, "#2ca02c", "selected"))
        return svg_plot(
            series,
            title=f"{d.metric} by execution order",
            xlabel="execution order",
            ylabel=d.metric,
            hlines=[(d.threshold, "#d62728", f"threshold {d.threshold:.6g}")],
            vlines=vlines,
            width=720,
        )

    def to_html(self) -> str:
        return f"<div class='nbprec-trend'>{self.to_svg()}<p>{self._caption()}</p></div>"
