"""Error trend: the chosen per-op metric against execution order, on a log scale of the error (``1 - cosine`` for
cosine-like metrics), with threshold, first failing op, introduced op, onset and selection marks, and a zoom."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.rules import HIGHER_IS_BETTER, STATUS_FAIL
from nbprec.compare.runs import op_at
from nbprec.inspect import sample_indices
from nbprec.widgets.base import View, caption
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.static import Series, esc, line_points, svg_plot

#: Errors below this are drawn at it (an exact match has no logarithm).
FLOOR = 1e-9
#: At most this many clickable dots in the window shown (failing ones first), drawn again when it changes: every
#: op has its dot once the window holds no more ops. Each dot is an SVG element: with 2,000 of them at 5,000 ops,
#: drawing the dashboard in JupyterLab took 0.3-0.5 s longer.
MAX_DOTS = 500
#: The line is reduced to the min and max of each bucket beyond this many points (the window when zoomed).
MAX_LINE_POINTS = 4_000
#: Colours of the story's marks, the same in every view.
FIRST_COLOUR, INTRODUCED_COLOUR, ONSET_COLOUR, SELECTED_COLOUR = "#d62728", "#9467bd", "#ff7f0e", "#2ca02c"


def error_values(metric: str, values: np.ndarray) -> np.ndarray:
    """What the trend plots for ``metric``: ``1 - value`` for higher-is-better metrics (cosine), else the value;
    clipped below at :data:`FLOOR` so that 0.9999 and 0.3 both show on a log axis (NaN stays NaN, inf stays inf)."""
    base = metric.removeprefix("out_").removeprefix("in_")
    err = 1.0 - values if base in HIGHER_IS_BETTER else np.abs(values)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(err), np.nan, np.maximum(err, FLOOR))


def error_label(metric: str) -> str:
    """The y axis title of :func:`error_values`."""
    base = metric.removeprefix("out_").removeprefix("in_")
    return f"1 - {metric} (log)" if base in HIGHER_IS_BETTER else f"{metric} (log)"


@dataclass(frozen=True)
class TrendData:
    """Arrays of the trend plot: ``x``/``y`` for the ops of the chosen (step, rank) (all ops when none is),
    ``rows`` their positions in ``model.ops``; ``fails`` (every failing op with a value), ``outliers`` and the marks
    index ``x`` (:func:`window_dots` picks the dots drawn).

    ``err`` is what is drawn (:func:`error_values` of ``y``), ``err_threshold`` the threshold on that scale;
    ``first``, ``introduced`` and ``onset`` are the verdict's ops (NaN when there is none), named by
    ``names`` as every other view names them.
    """

    x: np.ndarray
    y: np.ndarray
    fails: np.ndarray
    threshold: float
    onset: float
    selected: float
    metric: str
    rows: np.ndarray
    err: np.ndarray
    err_threshold: float
    outliers: np.ndarray
    first: float
    introduced: float
    names: dict[str, str]


def trend_data(model: OpsModel, selected: str | None) -> TrendData:
    """The trend's data from the table model: every op of the run on the line (:func:`window_dots` picks the
    dots)."""
    rows = model.run_positions()
    ops = model.ops.iloc[rows]
    column = model.metric_column
    y = ops[column].to_numpy(dtype=np.float64) if column in ops else np.full(len(ops), np.nan)
    x = np.arange(len(ops), dtype=np.float64)
    fails = np.flatnonzero((ops["status"] == STATUS_FAIL).to_numpy() & ~np.isnan(y))
    err = error_values(column, y)
    story = {"first": model.first_failing(), "introduced": model.first_introduced(), "onset": model.onset()}

    def x_of(op: pd.Series | None) -> float:
        if op is None:
            return np.nan
        hit = np.flatnonzero(rows == model.ops.index.get_loc(op.name))
        return float(hit[0]) if hit.size else np.nan

    return TrendData(
        x=x,
        y=y,
        fails=fails,
        threshold=model.threshold,
        onset=x_of(story["onset"]),
        selected=_selected_x(rows, model.position_of(selected)),
        metric=column,
        rows=rows,
        err=err,
        err_threshold=float(error_values(column, np.array([model.threshold]))[0]),
        outliers=np.flatnonzero(np.isinf(err)),
        first=x_of(story["first"]),
        introduced=x_of(story["introduced"]),
        names={k: op_at(v, model.several) for k, v in story.items()},
    )


def window_dots(data: TrendData, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The dots drawn for execution order ``lo`` to ``hi`` (positions in ``data.x``): the failing ones (at most
    half of :data:`MAX_DOTS`), then the others up to :data:`MAX_DOTS` in all; every op when they fit."""
    fails = data.fails[(data.fails >= lo) & (data.fails <= hi)]
    fails = fails[sample_indices(len(fails), MAX_DOTS // 2)]
    dots = lo + sample_indices(max(hi - lo + 1, 0), MAX_DOTS - len(fails))
    return dots, fails


def _selected_x(rows: np.ndarray, position: int | None) -> float:
    hit = np.flatnonzero(rows == position) if position is not None else np.array([], dtype=np.int64)
    return float(hit[0]) if hit.size else np.nan


class TrendView(View):
    """Error against execution order (bqplot, log y axis); clicking a dot selects its op; a zoom slider (and
    "around the selection") narrows the x range, the line then drawn at full resolution in that window."""

    title = "error trend"

    def __init__(self, model: OpsModel, selection: Selection) -> None:
        super().__init__()
        self.model = model
        self.selection = selection
        self.window: tuple[int, int] | None = None
        self.data = trend_data(model, selection.op)
        self._run = model.run
        selection.observe(self._on_selection)

    def click_point(self, position: int) -> None:
        """Select the op at row ``position`` of ``model.ops`` (what clicking a dot does); over several steps and
        ranks, in its own (step, rank)."""
        if 0 <= position < len(self.model.ops):
            row = self.model.ops.iloc[position]
            if self.model.several:
                self.selection.select_run((int(row["step"]), int(row["rank"])), str(row["op"]))
            else:
                self.selection.select(str(row["op"]))

    def set_window(self, lo: int | None, hi: int | None = None) -> None:
        """Show execution order ``lo`` to ``hi`` only (``None``: every op)."""
        n = len(self.data.x)
        self.window = None if lo is None or n == 0 else (max(0, int(lo)), min(n - 1, int(hi if hi is not None else n)))
        self._push_window()

    def zoom_to_selection(self, half_width: int = 50) -> None:
        """Zoom on the ``2 * half_width`` ops around the selected one (else around the first failing op)."""
        centre = self.data.selected if np.isfinite(self.data.selected) else self.data.first
        if np.isfinite(centre):
            self.set_window(int(centre) - half_width, int(centre) + half_width)

    def visible_line(self) -> tuple[np.ndarray, np.ndarray]:
        """The points of the line as drawn: the window (every op) or everything, reduced beyond
        :data:`MAX_LINE_POINTS`; infinities drawn at the top of the axis."""
        d = self.data
        lo, hi = self.window if self.window is not None else (0, len(d.x) - 1)
        x, err = d.x[lo : hi + 1], d.err[lo : hi + 1]
        return line_points(x, np.where(np.isinf(err), self._y_range()[1], err), MAX_LINE_POINTS)

    def _y_range(self) -> tuple[float, float]:
        d = self.data
        lo, hi = self.window if self.window is not None else (0, len(d.x) - 1)
        err = d.err[lo : hi + 1]
        finite = err[np.isfinite(err)]
        bottom = min(float(finite.min()) if finite.size else FLOOR, d.err_threshold) / 2
        top = max(float(finite.max()) if finite.size else 1.0, d.err_threshold) * 2
        return max(bottom, FLOOR / 2), top

    def _on_selection(self, _op: str | None) -> None:
        if self.model.run != self._run:
            self.refresh()
            return
        self.data = replace(self.data, selected=_selected_x(self.data.rows, self.model.position_of(self.selection.op)))
        if self.built:  # only the diamond and the caption move: the line and the dots are not resent
            self._push_selected()
            self._label.value = self._caption()

    def _build(self) -> Any:
        import bqplot as bq
        import ipywidgets as w

        sx, sy = bq.LinearScale(allow_padding=False), bq.LogScale(allow_padding=False)  # axes end at the data
        self._sx, self._sy = sx, sy
        scales = {"x": sx, "y": sy}
        self._line = bq.Lines(scales=scales, colors=["#1f77b4"], stroke_width=1)
        self._dots = bq.Scatter(scales=scales, colors=["#1f77b4"], default_size=14)
        self._fail_dots = bq.Scatter(scales=scales, colors=[FIRST_COLOUR], default_size=30)
        self._outliers = bq.Scatter(scales=scales, colors=["black"], marker="triangle-up", default_size=40)
        self._threshold = bq.Lines(scales=scales, colors=[FIRST_COLOUR], line_style="dashed")
        self._marks = bq.Lines(scales=scales, colors=[FIRST_COLOUR, INTRODUCED_COLOUR, ONSET_COLOUR], stroke_width=2,
                               line_style="solid")  # fmt: skip
        self._selected = bq.Scatter(scales=scales, colors=[SELECTED_COLOUR], marker="diamond", default_size=160,
                                    stroke="black")  # fmt: skip
        self._dots.on_element_click(lambda _m, ev: self._clicked(self._dot_positions, ev))
        self._fail_dots.on_element_click(lambda _m, ev: self._clicked(self._fail_positions, ev))
        self._dot_positions = np.array([], dtype=np.int64)
        self._fail_positions = np.array([], dtype=np.int64)
        self._label = w.HTML(layout=w.Layout(margin="0 4px"))
        ax = bq.Axis(scale=sx, label="execution order", num_ticks=6, tick_format="d")
        ay = bq.Axis(scale=sy, side="left", label="", tick_format=".0e", label_offset="50px")
        self._ay = ay
        marks = [self._line, self._threshold, self._marks, self._dots, self._fail_dots, self._outliers]
        self._figure = bq.Figure(
            marks=[*marks, self._selected],
            axes=[ax, ay],
            fig_margin={"top": 10, "bottom": 40, "left": 70, "right": 15},
            layout=w.Layout(width="100%", height=f"{FIGURE_HEIGHT}px"),
            title="",
        )
        self._zoom = w.IntRangeSlider(tooltip="zoom", continuous_update=False, layout=w.Layout(width="300px"))
        self._zoom.observe(self._zoomed, names="value")
        self._around = w.Button(description="around selection", layout=w.Layout(width="130px"))
        self._around.on_click(lambda _: self.zoom_to_selection())
        self._all = w.Button(description="all ops", layout=w.Layout(width="70px"))
        self._all.on_click(lambda _: self.set_window(None))
        tools = w.HBox([caption("zoom"), self._zoom, self._around, self._all],
                       layout=w.Layout(flex_flow="row wrap", align_items="center"))  # fmt: skip
        return w.VBox([self._label, self._figure, tools], layout=w.Layout(width="100%"))

    def _zoomed(self, change: dict[str, Any]) -> None:
        if not self._updating_zoom:
            lo, hi = change["new"]
            self.set_window(None if (lo, hi) == (0, max(len(self.data.x) - 1, 0)) else lo, hi)

    _updating_zoom = False

    def _clicked(self, positions: np.ndarray, event: dict[str, Any]) -> None:
        index = int(event.get("data", {}).get("index", -1))
        if 0 <= index < len(positions):
            self.click_point(int(self.data.rows[int(positions[index])]))

    def refresh(self) -> None:
        """Recompute the arrays (always) and push them into the marks (once built)."""
        self.data = trend_data(self.model, self.selection.op)
        self._run = self.model.run
        if self.window is not None and self.window[1] >= len(self.data.x):
            self.window = None
        if not self.built:
            return
        d = self.data
        top = self._y_range()[1]
        with self._figure.hold_sync():
            self._outliers.x, self._outliers.y = (
                d.x[d.outliers[:MAX_DOTS]],
                np.full(min(len(d.outliers), MAX_DOTS), top),
            )
            self._ay.label = error_label(d.metric)
        self._push_window()
        self._label.value = self._caption()

    def _push_window(self) -> None:
        """The x range, the y range of what is in it, the line and the dots in it, the lines spanning the y range."""
        if not self.built:
            return
        d = self.data
        n = len(d.x)
        lo, hi = self.window if self.window is not None else (0, max(n - 1, 1))
        bottom, top = self._y_range()
        story = [(d.first, FIRST_COLOUR), (d.introduced, INTRODUCED_COLOUR), (d.onset, ONSET_COLOUR)]
        with self._figure.hold_sync():
            self._sx.min, self._sx.max = float(lo), float(max(hi, lo + 1))
            self._sy.min, self._sy.max = bottom, top
            self._line.x, self._line.y = self.visible_line()
            dots, fails = window_dots(d, int(lo), int(hi) if self.window is not None else n - 1)
            self._dot_positions, self._fail_positions = dots, fails
            self._dots.x, self._dots.y = d.x[dots], np.where(np.isinf(d.err[dots]), top, d.err[dots])
            self._fail_dots.x, self._fail_dots.y = d.x[fails], np.where(np.isinf(d.err[fails]), top, d.err[fails])
            self._threshold.x, self._threshold.y = np.array([0.0, max(n - 1, 1)]), np.full(2, d.err_threshold)
            xs = np.array([[x if np.isfinite(x) else -1e9] * 2 for x, _ in story])
            self._marks.x, self._marks.y = xs, np.array([[bottom, top]] * len(story))
            shown = [np.isfinite(d.first), np.isfinite(d.introduced) and d.introduced != d.first, np.isfinite(d.onset)]
            self._marks.opacities = [1.0 if visible else 0.0 for visible in shown]  # introduced = first: one line
            self._push_selected()
        self._updating_zoom = True
        try:
            self._zoom.max = max(n - 1, 1)
            self._zoom.value = (int(lo), int(max(hi, lo + 1)))
        finally:
            self._updating_zoom = False

    def _push_selected(self) -> None:
        d = self.data
        sel = d.selected if np.isfinite(d.selected) else 0.0
        value = d.err[int(sel)] if np.isfinite(d.selected) and len(d.err) else FLOOR
        with self._selected.hold_sync():
            self._selected.x = np.array([sel])
            self._selected.y = np.array([self._y_range()[1] if not np.isfinite(value) else value])
            self._selected.visible = bool(np.isfinite(d.selected))

    def _caption(self) -> str:
        d = self.data
        run = self.model.run
        shown = f"step {run[0]}, rank {run[1]}: " if run is not None else ""
        names = d.names
        introduced = (f"; <span style='color:{INTRODUCED_COLOUR}'>&#9474; introduced at {esc(names['introduced'])}"
                      "</span>" if names["introduced"] not in ("-", names["first"]) else "")  # fmt: skip
        same = " (introduced it)" if names["introduced"] == names["first"] != "-" else ""
        outliers = f"; &#9650; {len(d.outliers)} inf/overflow" if len(d.outliers) else ""
        return (
            f"<div style='font-size:12px;line-height:1.3'>{esc(shown)}<b>Error trend</b>: "
            f"{esc(error_label(d.metric))}; <span style='color:{FIRST_COLOUR}'>&#9474; first failing op "
            f"{esc(names['first'])}{same}</span>{introduced}; <span style='color:{ONSET_COLOUR}'>&#9474; onset "
            f"{esc(names['onset'])}</span>; dashed: threshold {d.threshold:.6g}; red dots fail{outliers}; "
            f"<span style='color:{SELECTED_COLOUR}'>&#9670; selected</span>. Click a dot to select its op.</div>"
        )

    def to_svg(self) -> str:
        d = self.data
        log_err = np.log10(np.where(np.isinf(d.err), np.nan, d.err))
        series = [
            Series(d.x, log_err, "line", "#1f77b4", f"log10 {error_label(d.metric)}"),
            Series(d.x[d.fails], log_err[d.fails], "dots", FIRST_COLOUR, "failing"),
        ]
        marks = [(d.first, FIRST_COLOUR, "first failing"), (d.introduced, INTRODUCED_COLOUR, "introduced"),
                 (d.onset, ONSET_COLOUR, "onset"), (d.selected, SELECTED_COLOUR, "selected")]  # fmt: skip
        return svg_plot(
            series,
            title=f"log10 {error_label(d.metric)} by execution order",
            xlabel="execution order",
            ylabel=f"log10 {error_label(d.metric).removesuffix(' (log)')}",
            hlines=[(float(np.log10(d.err_threshold)), FIRST_COLOUR, f"threshold {d.threshold:.6g}")],
            vlines=[(x, colour, label) for x, colour, label in marks if np.isfinite(x)],
            width=720,
        )

    def to_html(self) -> str:
        return f"<div class='nbprec-trend'>{self.to_svg()}{self._caption()}</div>"


#: Height of the trend figure in pixels.
FIGURE_HEIGHT = 230
