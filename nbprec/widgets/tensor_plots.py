"""Tensor plots: histograms, scatter and error profiles of the tensor pair the inspector shows (bqplot).

They have a tab of their own beside the tensor inspector, built when the tab is first opened and sent data only
while it is open. In the inspector they sat below its tables, out of sight in the dashboard's 330 px cell, yet
the browser drew all four (a few hundred SVG elements, each of whose style bqplot reads back) before the
dashboard was complete, and drew them again on every selection: about a fifth of a second of the browser's
work on the 100-op msprobe comparison, more with the full 1,500-dot scatter of a large tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbprec.inspect import sample_indices
from nbprec.widgets.base import View
from nbprec.widgets.static import esc

#: Points of the target-vs-benchmark scatter sent to the browser on each selection (SVG: a few thousand at most).
MAX_SCATTER_DRAWN = 1_500


class TensorPlotsView(View):
    """The histogram, scatter and error-profile figures of ``inspector``'s tensor pair.

    Nothing is drawn until :meth:`show` opens the view; while it is closed, selections only change the
    inspector, and opening it draws the pair shown then.
    """

    title = "tensor plots"

    def __init__(self, inspector: Any) -> None:
        super().__init__()
        self.inspector = inspector
        self.shown = False
        self._pinned = False  # displayed on its own (or below the inspector): always seen
        self._figures: list[Any] = []

    def show(self, shown: bool = True) -> None:
        """Open (``True``) or close the view; opening draws the inspector's current pair. Once displayed on its
        own (:meth:`pin`) it stays open, whichever dashboard tab is chosen."""
        opening = shown and not self.shown
        self.shown = bool(shown) or self._pinned
        if opening:
            self.refresh()

    def pin(self) -> None:
        """Keep the view open: it is displayed outside the dashboard's tabs."""
        self._pinned = True
        self.show()

    def _displayed_widget(self) -> Any:
        """Displayed on its own, the view is seen: it draws from now on."""
        widget = self.widget
        self.pin()
        return widget

    def note_html(self) -> str:
        """Which tensor is drawn, or why nothing is."""
        ins = self.inspector
        if ins.tensor is None:
            return "<p>Select an op in the table, the trend or the graph.</p>"
        if ins.inspection is None or ins.inspection.histogram.empty:
            why = esc(ins.problem) if ins.problem else "no tensor payloads to draw (a comparison of statistics only)"
            return f"<p>Tensor <code>{esc(ins.tensor)}</code>: {why}</p>"
        return f"<p class='nbprec-plotted'>Tensor <code>{esc(ins.tensor)}</code>, target against benchmark</p>"

    def _build(self) -> Any:
        import ipywidgets as w

        self._note = w.HTML()
        self._box = w.HBox([], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))
        return w.VBox([self._note, self._box])

    def _build_figures(self) -> None:
        import bqplot as bq
        import ipywidgets as w

        def figure(title: str, xlabel: str, ylabel: str, marks: list[Any], scales: tuple[Any, Any]) -> Any:
            axes = [
                bq.Axis(scale=scales[0], label=xlabel, num_ticks=5, tick_format=".3g"),
                bq.Axis(scale=scales[1], side="left", label=ylabel, num_ticks=5, tick_format=".3g"),
            ]
            return bq.Figure(
                marks=marks,
                axes=axes,
                title=title,
                fig_margin={"top": 30, "bottom": 40, "left": 60, "right": 10},
                layout=w.Layout(width="330px", height="230px", flex="0 0 auto"),
                title_style={"font-size": "12px"},
            )

        s = (bq.LinearScale(), bq.LinearScale(min=0))  # counts: the axis starts at 0, never below
        # Two overlaid 1-D marks: bqplot 0.13 draws 2-D "grouped" bars from binary arrays with zero height.
        self._hist_target = bq.Bars(scales={"x": s[0], "y": s[1]}, colors=["#d62728"], opacities=[0.55],
                                    labels=["target"], display_legend=True)  # fmt: skip
        self._hist_bench = bq.Bars(scales={"x": s[0], "y": s[1]}, colors=["#1f77b4"], opacities=[0.55],
                                   labels=["benchmark"], display_legend=True)  # fmt: skip
        hist_fig = figure(
            "histogram: target (red), benchmark (blue)", "value", "count", [self._hist_bench, self._hist_target], s
        )
        s2 = (bq.LinearScale(), bq.LinearScale())
        self._diag = bq.Lines(scales={"x": s2[0], "y": s2[1]}, colors=["#999"], line_style="dashed")
        self._scatter = bq.Scatter(scales={"x": s2[0], "y": s2[1]}, colors=["#1f77b4"], default_size=8)
        scatter_fig = figure("target vs benchmark", "benchmark", "target", [self._diag, self._scatter], s2)
        s3 = (bq.LogScale(), bq.LinearScale())
        self._by_mag = bq.Lines(scales={"x": s3[0], "y": s3[1]}, colors=["#d62728", "#1f77b4"], marker="circle",
                                labels=["max", "mean"], display_legend=True)  # fmt: skip
        mag_fig = figure("abs error vs |benchmark|", "|benchmark| (log)", "abs error", [self._by_mag], s3)
        s4 = (bq.LinearScale(), bq.LinearScale())
        self._by_pos = bq.Lines(scales={"x": s4[0], "y": s4[1]}, colors=["#d62728", "#1f77b4"],
                                labels=["max", "mean"], display_legend=True)  # fmt: skip
        pos_fig = figure("abs error vs position", "flat element index", "abs error", [self._by_pos], s4)
        self._figures = [hist_fig, scatter_fig, mag_fig, pos_fig]
        self._box.children = tuple(self._figures)

    def refresh(self) -> None:
        """Draw the inspector's pair (once built, and only while shown); the figures are made with the first pair
        that has payloads, so a comparison of statistics only never sends an empty figure."""
        if not self.built or not self.shown:
            return
        self._note.value = self.note_html()
        ins = self.inspector.inspection
        if ins is None or ins.histogram.empty:
            if self._figures:
                self._clear()
            return
        if not self._figures:
            self._build_figures()
        h = ins.histogram
        centres = ((h["left"] + h["right"]) / 2).to_numpy(np.float64)
        for bars, side in ((self._hist_target, "target"), (self._hist_bench, "bench")):
            with bars.hold_sync():  # x and y change together: never a half-updated mark in the browser
                bars.x, bars.y = centres, h[side].to_numpy(np.float64)
        sc = ins.scatter.iloc[sample_indices(len(ins.scatter), MAX_SCATTER_DRAWN)]
        lo, hi = float(np.nanmin(sc["bench"])), float(np.nanmax(sc["bench"]))
        self._diag.x = self._diag.y = np.array([lo, hi])
        self._scatter.x, self._scatter.y = sc["bench"].to_numpy(), sc["target"].to_numpy()
        bm = ins.by_magnitude
        self._by_mag.x = np.sqrt(bm["lo"].to_numpy() * bm["hi"].to_numpy())
        self._by_mag.y = np.vstack([bm["max_abs_err"].to_numpy(), bm["mean_abs_err"].to_numpy()])
        bp = ins.by_position
        self._by_pos.x = bp["start"].to_numpy(dtype=np.float64)
        self._by_pos.y = np.vstack([bp["max_abs_err"].to_numpy(), bp["mean_abs_err"].to_numpy()])

    def _clear(self) -> None:
        empty = np.array([], dtype=np.float64)
        for bars in (self._hist_target, self._hist_bench):
            with bars.hold_sync():
                bars.x, bars.y = empty, empty
        self._scatter.x = self._scatter.y = self._diag.x = self._diag.y = empty
        self._by_mag.x = self._by_mag.y = self._by_pos.x = self._by_pos.y = empty

    def to_svg(self) -> str | None:
        return self.inspector.to_svg()

    def to_html(self) -> str:
        svg = self.to_svg()
        return f"<div class='nbprec-tensor-plots'>{self.note_html()}{svg or ''}</div>"
