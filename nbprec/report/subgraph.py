"""The culprit's subgraph in the offline report: a pannable, zoomable graph with no control that needs a kernel.

The dashboard's graph view re-queries the operator graph in Python when its sliders move or a block is
opened; in a page with no kernel that would do nothing. The report instead draws the culprit's neighbourhood
as the core exports it (:meth:`nbprec.graph.OpGraph.to_cytoscape`: elements placed top to bottom along the
data flow, coloured by the metric) in a bare cytoscape widget, where pan, zoom and node selection happen in
the browser. A node click selects that op in the report's operator explorer (``explorer.js`` finds the graph).
"""

from __future__ import annotations

from typing import Any

from nbprec._optional import require
from nbprec.report.sections import esc

#: Most nodes of the culprit's neighbourhood drawn (cytoscape stays fast and readable well below this).
MAX_NODES = 120
#: The op selected in the explorer (explorer.js selects its node).
_SELECTED_STYLE = {"selector": "node:selected", "style": {"border-width": 5, "border-color": "#1565c0"}}


class SubgraphOutput:
    """The neighbourhood of ``op`` in ``graph`` (an :class:`~nbprec.graph.OpGraph` with metrics attached),
    displayed as a bare cytoscape widget with a static list of its ops as fallback.

    Parameters
    ----------
    graph
        The operator graph, metrics attached (``OpGraph.from_dump(target).attach_metrics(comparison)``).
    op
        The centre (the culprit).
    depth
        Hops upstream and downstream.
    metric
        Metric the nodes are coloured by.
    height
        CSS height of the widget (default: from the number of layers, so labels stay readable).
    """

    def __init__(self, graph: Any, op: str, *, depth: int = 4, metric: str = "cosine", height: str = "") -> None:
        sub = graph.subgraph(op, up=depth, down=depth, max_nodes=MAX_NODES)
        self.op = op
        self.export = sub.to_cytoscape(metric, max_elements=3 * MAX_NODES)
        self.metric = metric
        self.height = height

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return [e for e in self.export.elements if "source" not in e["data"]]

    def legend_html(self) -> str:
        """The colour scale (best to worst), what the marks mean and how to move around."""
        bins = self.export.legend.get("bins", [])
        swatches = "".join(
            f"<span style='display:inline-block;padding:1px 6px;margin-right:3px;background:{esc(b['color'])}'>"
            f"{esc(b['label'])}</span>"
            for b in bins
        )
        cut = " Cut to stay readable." if self.export.truncated else ""
        return (
            f"<div class='nbprec-subgraph-legend' style='font-size:12px'>{esc(self.metric)} (best → worst): "
            f"{swatches} black border: the culprit; dashed red border: unmatched. {len(self.nodes)} ops around "
            f"<code>{esc(self.op)}</code>.{cut}</div>"
        )

    def fallback_html(self) -> str:
        """The ops of the neighbourhood as a list (shown where the widget JavaScript is missing)."""
        items = "".join(f"<li>{esc(n['data'].get('id', ''))}</li>" for n in self.nodes)
        return f"<div class='nbprec-subgraph'><p>Ops around the culprit:</p><ul>{items}</ul></div>"

    def widget(self) -> Any:
        """The cytoscape widget holding the nodes and edges at their computed positions."""
        w = require("ipywidgets", "nbprec reports", extra="widgets")
        cytoscape = require("ipycytoscape", "nbprec reports", extra="widgets")
        nodes = self.nodes
        layers = len({round(n.get("position", {}).get("y", 0.0)) for n in nodes})
        height = self.height or f"{min(900, max(320, 64 * layers + 60))}px"  # labels readable at the fitted zoom
        cy = cytoscape.CytoscapeWidget(layout=w.Layout(width="100%", height=height))
        cy.set_style([*self.export.style, _SELECTED_STYLE])
        edges = [e for e in self.export.elements if "source" in e["data"]]
        if nodes:
            cy.graph.add_graph_from_json({"nodes": nodes, "edges": edges}, directed=True)
        cy.set_layout(name="preset", fit=True, padding=30, animate=False)
        return cy

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        bundle = self.widget()._repr_mimebundle_(include=include, exclude=exclude)
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["text/plain"] = f"subgraph of {self.op}: {len(self.nodes)} ops"
        data["text/html"] = self.fallback_html()
        return data
