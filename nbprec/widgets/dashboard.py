"""The dashboard: linked views over one comparison, sharing one :class:`~nbprec.widgets.model.Selection`."""

from __future__ import annotations

import os
from typing import Any

from nbprec.compare.comparison import Comparison
from nbprec.dump import Dump
from nbprec.widgets.base import View
from nbprec.widgets.inspector import InspectorView
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.overflow import OverflowView
from nbprec.widgets.runs import RunsView
from nbprec.widgets.static import esc
from nbprec.widgets.subgraph import SubgraphView
from nbprec.widgets.table import OpsTableView
from nbprec.widgets.tensor_source import TensorSource
from nbprec.widgets.trend import TrendView

#: The one-screen layout: verdict on top, operators and graph side by side, the trend and the tabs (inspector,
#: overflow, ranks x steps) below; 1440 x 900 without page scrolling. In a narrow notebook cell (a container
#: query on the dashboard's own width) the cells stack in one column.
DASHBOARD_CSS = """<style>
.nbprec-dash { container: nbprec-dash / inline-size; width: 100%; }
.nbprec-dash, .nbprec-dash .widget-html, .nbprec-dash .widget-label, .nbprec-dash input, .nbprec-dash select,
.nbprec-dash button, .nbprec-dash .lm-TabBar-tabLabel {
  font-family: var(--jp-ui-font-family, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif); font-size: 13px; }
.nbprec-dash .nbprec-app { display: grid; gap: 6px; width: 100%; box-sizing: border-box;
  grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); grid-template-rows: auto 460px 330px;
  grid-template-areas: "head head" "table graph" "trend side"; }
.nbprec-dash .nbprec-head { max-height: 64px; overflow: auto; margin: 0; }
.nbprec-dash .nbprec-head p, .nbprec-dash .nbprec-head ul { margin: 0; font-size: 12.5px; line-height: 1.35; }
.nbprec-dash .nbprec-cell { overflow: auto; border: 1px solid #ddd; border-radius: 4px; min-width: 0; margin: 0;
  padding: 2px; box-sizing: border-box; }
.nbprec-dash .nbprec-cell-title { font-weight: 600; font-size: 13px; margin: 0 4px; }
.nbprec-dash .nbprec-cell .widget-tab { height: 100%; }
.nbprec-dash .nbprec-cell-graph .widget-box > * { flex-shrink: 0; }
.nbprec-dash .nbprec-mono select { font-family: var(--jp-code-font-family, monospace); font-size: 12px; }
.nbprec-dash .nbprec-table, .nbprec-dash table { font-size: 12px; }
@container nbprec-dash (max-width: 1000px) {
  .nbprec-dash .nbprec-app { grid-template-columns: minmax(0, 1fr); grid-template-rows: auto 460px 330px 460px 360px;
    grid-template-areas: "head" "table" "trend" "graph" "side"; }
}
</style>"""


class Dashboard(View):
    """Operator table, error trend, tensor inspector, subgraph and overflow views over one comparison.

    Selecting an op in any view (a grid row, a trend dot, a graph node, an overflow row) sets
    :attr:`selection`, and every view follows. The first op that introduced an error (else the first failing
    op) is selected when the dashboard opens. A comparison over several steps and ranks adds :attr:`runs`, a
    rank x step heatmap on top: clicking a cell sets ``selection.run`` and the table, the trend and the
    inspector show that (step, rank); the dashboard opens on the (step, rank) of the op it selects.

    Attributes
    ----------
    comparison : Comparison
    selection : Selection
    model : OpsModel
    runs : RunsView or None
        The steps and ranks overview (``None`` for a single (step, rank)).
    table, trend, inspector, subgraph, overflow : View
    """

    title = "dashboard"

    def __init__(
        self,
        comparison: Comparison,
        *,
        target: Dump | str | os.PathLike[str] | None = None,
        bench: Dump | str | os.PathLike[str] | None = None,
        metric: str | None = None,
        page_size: int = 200,
        depth: int = 6,
        overflow: bool = True,
        overflow_report: Any = None,
    ) -> None:
        super().__init__()
        self.comparison = comparison
        self.selection = Selection()
        self.model = OpsModel(comparison, metric=metric, page_size=page_size)
        self.source = TensorSource(comparison, target, bench)
        self.selection.observe_run(self.model.set_run)  # before any view: they read the model's run
        self.runs = RunsView(self.model, self.selection) if comparison.several_runs else None
        self.table = OpsTableView(self.model, self.selection, on_change=self._rule_changed)
        self.trend = TrendView(self.model, self.selection)
        self.inspector = InspectorView(comparison.table, self.selection, self.source)
        self.subgraph = SubgraphView(self.model, self.selection, self.source, depth=depth)
        self.overflow = OverflowView(self.selection, self.source, overflow_report) if overflow else None
        first = self.model.first_introduced()
        first = first if first is not None else self.model.first_failing()
        start = first if first is not None else (self.model.ops.iloc[0] if len(self.model.ops) else None)
        if start is not None and self.runs is not None:
            self.selection.select_run((int(start["step"]), int(start["rank"])), str(start["op"]))
        elif start is not None:
            self.selection.select(str(start["op"]))

    @property
    def views(self) -> list[View]:
        """The views, top to bottom."""
        views: list[View] = [self.table, self.trend, self.inspector, self.subgraph]
        if self.runs is not None:
            views.insert(0, self.runs)
        return [*views, self.overflow] if self.overflow is not None else views

    def select(self, op: str | None) -> None:
        """Select ``op`` in every view."""
        self.selection.select(op)

    def select_run(self, step: int | None, rank: int | None = None) -> None:
        """Look at one (step, rank) in every view (``None``: all of them)."""
        if step is None or rank is None:
            self.selection.select_run(None)
        elif self.runs is not None:
            self.runs.click_cell(step, rank)

    def _rule_changed(self) -> None:
        self.trend.refresh()
        self.subgraph.update()
        if self.runs is not None:
            self.runs.refresh()

    def header_html(self) -> str:
        """Title line (the two runs), then the verdict in words (the same sentences as the CLI and the report)."""
        meta = self.comparison.meta
        return (
            f"<h2 style='margin:2px 0;font-size:15px'>nbprec: {esc(meta.get('target', 'target'))} vs "
            f"{esc(meta.get('bench', 'benchmark'))}</h2>" + self.comparison.verdict().to_html()
        )

    @property
    def side_views(self) -> list[tuple[str, View]]:
        """The tabs beside the trend: the inspector, its plots, then the overflow view and the rank x step
        heatmap."""
        tabs: list[tuple[str, View]] = [("Tensor inspector", self.inspector), ("Tensor plots", self.inspector.plots)]
        if self.overflow is not None:
            tabs.append(("Overflow", self.overflow))
        if self.runs is not None:
            tabs.append(("Ranks x steps", self.runs))
        return tabs

    def _build(self) -> Any:
        import ipywidgets as w

        # CSS classes and tab titles go with each widget's first message (add_class and set_title would each
        # send one more)
        def cell(area: str, title: str, body: Any) -> Any:
            heading = w.HTML(f"<div class='nbprec-cell-title'>{esc(title)}</div>") if title else None
            return w.VBox([heading, body] if heading else [body], layout=w.Layout(grid_area=area),
                          _dom_classes=("nbprec-cell", f"nbprec-cell-{area}"))  # fmt: skip

        tabs = w.Tab(
            children=[view.widget for _, view in self.side_views], titles=[title for title, _ in self.side_views]
        )
        tabs.observe(self._tab_opened, names="selected_index")
        self._tabs = tabs
        head = w.HTML(self.header_html(), layout=w.Layout(grid_area="head"), _dom_classes=("nbprec-head",))
        grid = w.GridBox(
            [
                head,
                cell("table", "Operators", self.table.widget),
                cell("graph", "", self.subgraph.widget),  # the graph view has its own title
                cell("trend", "", self.trend.widget),
                cell("side", "", tabs),
            ],
            _dom_classes=("nbprec-app",),
        )
        return w.VBox([w.HTML(DASHBOARD_CSS), grid], layout=w.Layout(width="100%"), _dom_classes=("nbprec-dash",))

    def _tab_opened(self, change: dict[str, Any]) -> None:
        """Expensive views work only when seen: the tensor plots draw while their tab is open, and the overflow
        scan runs when its tab is first opened."""
        index = change["new"]
        view = self.side_views[index][1] if index is not None else None
        self.inspector.plots.show(view is self.inspector.plots)
        if view is not None and view is self.overflow:
            self.overflow.load()

    def to_html(self) -> str:
        parts = [self.header_html()] + [f"<section>{v.to_html()}</section>" for v in self.views]
        return "<div class='nbprec-dashboard'>" + "".join(parts) + "</div>"


def explore(
    comparison_or_target: Comparison | Dump | str | os.PathLike[str],
    bench: Dump | str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Dashboard:
    """Open the linked dashboard on a comparison, or compare ``target`` with ``bench`` first.

    Parameters
    ----------
    comparison_or_target
        A :class:`~nbprec.compare.Comparison`, or the target dump (a Dump or a path).
    bench
        The benchmark dump, when the first argument is a target.
    **kwargs
        ``rule``/``mode``/``mapping`` go to :func:`nbprec.compare`; ``metric``, ``page_size``, ``depth``,
        ``overflow``, ``overflow_report``, ``target`` and ``bench`` go to :class:`Dashboard`.

    Returns
    -------
    Dashboard
        Display it (last expression of a cell) to get the widgets.

    Examples
    --------
    >>> dash = nbprec.explore("runs/bf16", "runs/fp32")   # doctest: +SKIP
    >>> dash                                               # doctest: +SKIP
    """
    compare_keys = {"rule", "mode", "mapping", "fusion", "by_order", "step", "rank", "workers"}
    compare_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in compare_keys}
    if isinstance(comparison_or_target, Comparison):
        if compare_kw.get("rule") is not None:
            comparison_or_target = comparison_or_target.with_rule(compare_kw["rule"])
        if bench is not None:
            kwargs.setdefault("bench", bench)
        return Dashboard(comparison_or_target, **kwargs)
    if bench is None:
        raise TypeError("explore(target, bench): give a Comparison, or both a target and a benchmark dump")
    from nbprec.compare import compare

    comparison = compare(comparison_or_target, bench, **compare_kw)
    kwargs.setdefault("target", comparison_or_target)
    kwargs.setdefault("bench", bench)
    return Dashboard(comparison, **kwargs)
