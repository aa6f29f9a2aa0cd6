"""Subgraph view (ipycytoscape): the selected op's neighbourhood, coloured by metric, preset positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nbprec.compare.rules import STATUS_FAIL
from nbprec.errors import NbprecError
from nbprec.widgets.base import View
from nbprec.widgets.graphdata import (
    MAX_ELEMENTS,
    NA_COLOUR,
    GraphElements,
    cytoscape_style,
    module_paths,
    order_neighbourhood,
)
from nbprec.widgets.model import OpsModel, Selection, TensorSource
from nbprec.widgets.static import esc

_GRAPH_METRICS = ("cosine", "rel_euclidean", "max_abs_err")


def _block_holding(graph: Any, op: str) -> str | None:
    """The block node of a collapsed graph that contains ``op``."""
    members = graph.meta.get("members", {})
    return next((block for block, names in members.items() if op in names), None)


class SubgraphView(View):
    """Neighbourhood of the selected op at a chosen depth; click an op node to select it, a block to expand it.

    Parameters
    ----------
    model
        The table model (statuses and metrics under the current rule).
    selection
        The shared selection.
    source
        The dumps (the operator graph is built from the target dump when :mod:`nbprec.graph` can).
    depth
        Ops on each side of the selected one.
    """

    title = "subgraph view"

    def __init__(
        self, model: OpsModel, selection: Selection, source: TensorSource | None = None, depth: int = 6
    ) -> None:
        super().__init__()
        self.model = model
        self.selection = selection
        self.source = source
        self.depth = depth
        self.block_depth = 0
        self.expanded: frozenset[str] = frozenset()
        self.graph_note = ""
        self._graph: Any = None
        fused = model.comparison.table.loc[model.comparison.table["match"] == "fusion", "op"]
        self._fused = frozenset(str(o) for o in fused)
        self.elements = self._elements()
        selection.observe(lambda _op: self.update())

    # -- state -------------------------------------------------------------------------------------------
    def set_depth(self, depth: int) -> None:
        """Show ``depth`` ops (graph steps) on each side."""
        self.depth = int(depth)
        self.update()

    def set_block_depth(self, block_depth: int) -> None:
        """Collapse modules ``block_depth`` levels down into block nodes (0 shows every op)."""
        self.block_depth = max(0, int(block_depth))
        self.expanded = frozenset()
        self.update()

    def expand(self, block: str) -> None:
        """Open module block ``block`` (a block node's id)."""
        self.expanded = self.expanded | {block}
        self.update()

    def expand_all(self) -> None:
        """Show every op again."""
        self.block_depth, self.expanded = 0, frozenset()
        self.update()

    def click_node(self, data: dict[str, Any]) -> None:
        """What clicking a node does: a block expands, an op is selected."""
        if data.get("kind") == "block" or data.get("block"):
            self.expand(str(data.get("block") or data.get("id")))
        elif data.get("op") or data.get("id"):
            self.selection.select(str(data.get("op") or data.get("id")))

    def update(self) -> None:
        """Recompute the elements for the current selection, depth and blocks."""
        self.elements = self._elements()
        self.refresh()

    def _elements(self) -> GraphElements:
        op = self.selection.op
        if op is None:
            return GraphElements([], [], self.model.metric_column)
        elements = self._from_op_graph(op)
        if elements is None:
            ops = self.model.ops.iloc[self.model.run_positions()] if self.model.run is not None else self.model.ops
            paths = module_paths(ops)
            collapsed = (
                frozenset(p for p in paths if self.block_depth and p.count(".") + 1 == self.block_depth) - self.expanded
            )
            elements = order_neighbourhood(
                ops,
                op,
                self.depth,
                self.model.metric_column,
                collapsed=collapsed,
                fused=self._fused,
                max_elements=MAX_ELEMENTS,
            )
        return elements

    def _op_graph(self) -> Any:
        """The target's operator graph with metrics (built once), or ``None`` with :attr:`graph_note` saying why."""
        if self._graph is None and not self.graph_note and self.source is not None:
            try:
                from nbprec.graph import OpGraph

                ge_graph = (self.model.comparison.meta.get("fusion") or {}).get("graph", "")
                if ge_graph and Path(ge_graph).is_file():  # an NPU comparison: the executed GE graph
                    self._graph = OpGraph.from_ge(ge_graph).attach_metrics(self.model.comparison)
                    return self._graph
                dump = self.source.dump("target")
                if dump is None:
                    self.graph_note = "no target dump: neighbourhood in execution order"
                    return None
                self._graph = OpGraph.from_dump(dump).attach_metrics(self.model.comparison)
            except (ImportError, AttributeError, NbprecError, KeyError, TypeError, ValueError) as exc:
                self.graph_note = f"operator graph unavailable ({type(exc).__name__}: {exc}); execution order shown"
        return self._graph

    def _from_op_graph(self, op: str) -> GraphElements | None:
        """Elements from :mod:`nbprec.graph` (subgraph, module blocks, layered positions) when available."""
        graph = self._op_graph()
        if graph is None:
            return None
        metric = self.model.metric if self.model.metric in _GRAPH_METRICS else "cosine"
        try:
            shown = graph.collapse(self.block_depth, expand=self.expanded) if self.block_depth else graph
            centre = op if op in shown else _block_holding(shown, op)
            if centre is None:
                return None
            sub = shown.subgraph(centre, up=self.depth, down=self.depth, max_nodes=MAX_ELEMENTS // 2)
            export = sub.to_cytoscape(metric, max_elements=MAX_ELEMENTS)
        except (NbprecError, KeyError, ValueError) as exc:
            self.graph_note = f"operator graph view failed ({exc}); execution order shown"
            return None
        failing = set(self.model.ops.loc[self.model.ops["status"] == STATUS_FAIL, "op"])
        nodes = [e for e in export.elements if "source" not in e["data"]]
        edges = [e for e in export.elements if "source" in e["data"]]
        if not edges:
            self.graph_note = f"{op} has no recorded or inferred data-flow edge; neighbours in execution order"
            return None
        self.graph_note = ""
        for node in nodes:
            data = node["data"]
            data["colour"] = data.get("color", NA_COLOUR)
            classes = [c for c in node.get("classes", "").split() if c != "fail"]
            classes += ["fail"] if data["id"] in failing else []
            classes += ["selected"] if data["id"] in (op, centre) else []
            node["classes"] = " ".join(classes)
        bins = [(np.nan, np.nan, b["color"]) for b in export.legend.get("bins", [])]
        labels = [b["label"] for b in export.legend.get("bins", [])]
        return GraphElements(nodes, edges, metric, bins, "operator graph", truncated=export.truncated, labels=labels)

    # -- widget ------------------------------------------------------------------------------------------
    def _build(self) -> Any:
        import ipywidgets as w
        from ipycytoscape import CytoscapeWidget

        self._cy = CytoscapeWidget(layout=w.Layout(width="100%", height="420px"))
        self._cy.set_style(cytoscape_style())
        self._cy.on("node", "click", lambda node: self.click_node(node.get("data", {})))
        self._depth = w.IntSlider(value=self.depth, min=1, max=40, description="depth", continuous_update=False)
        self._depth.observe(lambda ch: self.set_depth(ch["new"]), names="value")
        self._blocks = w.IntSlider(value=0, min=0, max=4, description="blocks", continuous_update=False,
                                   tooltip="collapse modules this many levels down (0: every op)")  # fmt: skip
        self._blocks.observe(lambda ch: self.set_block_depth(ch["new"]), names="value")
        expand_all = w.Button(description="expand all")
        expand_all.on_click(lambda _: self.expand_all())
        self._legend = w.HTML()
        return w.VBox(
            [
                w.HTML("<h3 style='margin:4px 0'>Subgraph</h3>"),
                w.HBox([self._depth, self._blocks, expand_all]),
                self._legend,
                self._cy,
            ]
        )

    def refresh(self) -> None:
        """Send the elements to the cytoscape widget (once built): never more than ~300 of them."""
        if not self.built:
            return
        self._cy.graph.clear()
        e = self.elements
        if e.nodes:
            self._cy.graph.add_graph_from_json({"nodes": e.nodes, "edges": e.edges}, directed=True)
        self._cy.set_layout(name="preset", fit=True, padding=30, animate=False)
        self._legend.value = self.legend_html()

    def legend_html(self) -> str:
        """Colour ramp of the metric, node marks, and where the neighbourhood comes from."""
        e = self.elements
        swatches = "".join(
            f"<span style='display:inline-block;padding:1px 6px;margin-right:3px;background:{c}'>{esc(label)}</span>"
            for (_, _, c), label in zip(e.bins, e.labels, strict=False)
        )
        note = esc(self.graph_note) if e.source != "operator graph" and self.graph_note else ""
        cut = " Cut to stay within 300 elements." if e.truncated else ""
        return (
            f"<div style='font-size:12px'>{esc(e.metric)} (best → worst): {swatches}"
            f"<span style='background:{NA_COLOUR};padding:1px 6px'>no metric</span><br>"
            "thick red border: failing; dashed border: unmatched (no benchmark op); double border: fused; "
            "blue ring: selected; rounded box: module block (click to expand). "
            f"Edges: {esc(e.source)}; {len(e)} elements.{cut} {note}</div>"
        )

    def to_svg(self) -> str | None:
        e = self.elements
        if not e.nodes:
            return None
        xs = np.array([n["position"]["x"] for n in e.nodes if "position" in n] or [0.0])
        ys = np.array([n["position"]["y"] for n in e.nodes if "position" in n] or [0.0])
        w, h = float(xs.max() - xs.min() + 260), float(ys.max() - ys.min() + 80)
        pos = {}
        for n in e.nodes:
            p = n.get("position", {})
            pos[n["data"]["id"]] = (p.get("x", 0) - xs.min() + 60, p.get("y", 0) - ys.min() + 30)
        parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w:.0f}' height='{h:.0f}' style='background:white'>"]
        for edge in e.edges:
            a, b = pos.get(edge["data"]["source"]), pos.get(edge["data"]["target"])
            if a and b:
                parts.append(f"<line x1='{a[0]:.0f}' y1='{a[1]:.0f}' x2='{b[0]:.0f}' y2='{b[1]:.0f}' stroke='#888'/>")
        for n in e.nodes:
            x, y = pos[n["data"]["id"]]
            stroke = "#1565c0" if "selected" in n.get("classes", "") else "#555"
            parts.append(
                f"<circle cx='{x:.0f}' cy='{y:.0f}' r='12' fill='{esc(n['data'].get('colour', NA_COLOUR))}' "
                f"stroke='{stroke}' stroke-width='2'/><text x='{x:.0f}' y='{y + 26:.0f}' font-size='10' "
                f"font-family='sans-serif' text-anchor='middle'>{esc(n['data'].get('label', ''))}</text>"
            )
        parts.append("</svg>")
        return "".join(parts)

    def to_html(self) -> str:
        return f"<div class='nbprec-subgraph'>{self.legend_html()}{self.to_svg() or ''}</div>"
