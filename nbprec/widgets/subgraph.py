"""Graph view (ipycytoscape): the whole model as collapsible module blocks (the default), or the selected op's
neighbourhood at a chosen depth. The blocks, roll-ups and element budget come from
:class:`nbprec.graph.navigator.ModelNavigator`; this view only draws them where
:mod:`nbprec.graph.nested_layout` put them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.compare.rules import STATUS_FAIL
from nbprec.errors import NbprecError
from nbprec.widgets.base import View, caption
from nbprec.widgets.graphdata import (
    MAX_ELEMENTS,
    NA_COLOUR,
    GraphElements,
    cytoscape_style,
    module_paths,
    navigator_elements,
    navigator_style,
    order_neighbourhood,
)
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.static import esc
from nbprec.widgets.tensor_source import TensorSource

_GRAPH_METRICS = ("cosine", "rel_euclidean", "max_abs_err")
MODES = ("model", "neighbourhood")
#: Cytoscape.js layouts of the two modes: both place nodes where Python put them, then fit the view.
_LAYOUTS = {
    "model": {"name": "preset", "fit": True, "padding": 16, "animate": False},  # nbprec.graph.nested_layout
    "neighbourhood": {"name": "preset", "fit": True, "padding": 30, "animate": False},
}  # fmt: skip
#: Smallest zoom fitting may pick: 13 px labels stay at least 9 px high; pan to see the rest.
MIN_ZOOM = 0.7


def _block_holding(graph: Any, op: str) -> str | None:
    """The block node of a collapsed graph that contains ``op``."""
    members = graph.meta.get("members", {})
    return next((block for block, names in members.items() if op in names), None)


def _update_element(widget: Any, element: dict[str, Any], prefix: str = "") -> None:
    """Send only what changed of a drawn node or edge."""
    classes = (prefix + element.get("classes", "")).strip()
    if widget.classes != classes:
        widget.classes = classes
    if widget.data != element["data"]:
        widget.data = dict(element["data"])
    if "position" in element and widget.position != element["position"]:
        widget.position = dict(element["position"])
    if "source" not in element["data"] and widget.grabbable != element.get("grabbable", True):  # a node
        widget.grabbable = element.get("grabbable", True)


class SubgraphView(View):
    """The whole model as module blocks opened by click (``mode="model"``), or the selected op's neighbourhood
    (``mode="neighbourhood"``); click an op node to select it, a block to open it, an open block to close it.

    Parameters
    ----------
    model
        The table model (statuses and metrics under the current rule).
    selection
        The shared selection.
    source
        The dumps (the operator graph is built from the target dump when :mod:`nbprec.graph` can).
    depth
        Ops on each side of the selected one (neighbourhood mode).
    mode
        ``"model"`` or ``"neighbourhood"``.
    """

    title = "subgraph view"

    def __init__(
        self,
        model: OpsModel,
        selection: Selection,
        source: TensorSource | None = None,
        depth: int = 6,
        mode: str = "model",
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self._navigator: Any = None
        self._verdicts: tuple[Any, ...] = ()
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
        if self.mode == "model" and self.navigator is not None:
            self.navigator.expand(block)
        else:
            self.expanded = self.expanded | {block}
        self.update()

    def expand_all(self) -> None:
        """Show every op again."""
        self.block_depth, self.expanded = 0, frozenset()
        self.update()

    def set_mode(self, mode: str) -> None:
        """``"model"`` (module blocks) or ``"neighbourhood"``."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.update()

    def collapse(self, block: str) -> None:
        """Close module block ``block`` (model mode)."""
        if self.navigator is not None:
            self.navigator.collapse(block)
        self.update()

    def up(self) -> None:
        """Close the innermost open block around the selected op (model mode)."""
        if self.navigator is not None:
            self.navigator.up()
        self.update()

    def collapse_all(self) -> None:
        """Back to the top blocks (model mode)."""
        if self.navigator is not None:
            self.navigator.collapse_all()
        self.update()

    def click_node(self, data: dict[str, Any]) -> None:
        """What clicking a node does: a block opens (closes when open), an op is selected."""
        if self.mode == "model" and data.get("kind") in ("block", "group"):
            block = str(data.get("block") or data.get("id"))
            if data.get("expanded"):
                self.collapse(block)
            elif self.navigator is not None:
                self.navigator.expand(block)
                self.update()
            return
        if data.get("kind") == "block" or data.get("block"):
            self.expand(str(data.get("block") or data.get("id")))
        elif data.get("op") or data.get("id"):
            self.selection.select(str(data.get("op") or data.get("id")))

    def update(self) -> None:
        """Recompute the elements for the current selection, depth and blocks."""
        self.elements = self._elements()
        self.refresh()

    @property
    def navigator(self) -> Any:
        """The :class:`~nbprec.graph.navigator.ModelNavigator` of the model view (built on first use): the
        operator graph's hierarchy and data flow when it can be built, else the ops' module paths."""
        if self._navigator is None:
            from nbprec.graph.navigator import ModelNavigator

            graph = self._op_graph()
            if graph is not None:
                self._navigator = ModelNavigator.from_graph(graph)
            else:
                self._navigator = ModelNavigator.from_ops(self.model.ops)
            self._verdicts = ()
        key = (self.model.rule, self.model.metric, self.model.threshold, self.model.flagged)
        if key != self._verdicts:  # statuses follow the table's rule and threshold
            self._navigator.set_metrics(self.model.ops)
            self._verdicts = key
        return self._navigator

    def _model_elements(self, op: str | None) -> GraphElements | None:
        nav = self.navigator
        if op is not None and op not in nav:
            return None  # a record the graph has no op for (a module-level call, a parameter gradient)
        if op is not None and op != nav.selected:
            nav.reveal(op)
        metric = self.model.metric if self.model.metric in _GRAPH_METRICS else "cosine"
        return navigator_elements(nav.view(metric), metric)

    def _elements(self) -> GraphElements:
        op = self.selection.op
        if self.mode == "model":
            elements = self._model_elements(op)
            if elements is not None:
                return elements
            self.graph_note = f"{op} is not an op of the model graph: its neighbours in execution order"
        if op is None:
            return GraphElements([], [], self.model.metric_column)
        elements = self._from_op_graph(op) if self.mode != "model" else None
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

        self._cy = CytoscapeWidget(
            layout=w.Layout(width="100%", height="460px"), min_zoom=MIN_ZOOM, max_zoom=3.0, wheel_sensitivity=0.3
        )
        self._cy.on("node", "click", lambda node: self.click_node(node.get("data", {})))
        self._drawn_nodes: list[tuple[str, Any]] = []
        self._drawn_edges: list[tuple[str, Any]] = []
        self._retired: list[Any] = []
        self._mode = w.ToggleButtons(options=list(MODES), value=self.mode, style={"button_width": "110px"})
        self._mode.observe(lambda ch: self.set_mode(ch["new"]), names="value")
        up = w.Button(description="up", tooltip="close the innermost open block around the selected op")
        up.on_click(lambda _: self.up())
        top = w.Button(description="collapse all", tooltip="back to the top-level blocks")
        top.on_click(lambda _: self.collapse_all())
        self._model_bar = w.HBox([up, top])
        self._neighbourhood_bar = w.HBox()  # its controls are built when the neighbourhood mode is first shown
        self._legend = w.HTML()
        return w.VBox(
            [
                w.HBox([w.HTML("<h3 style='margin:4px 8px 4px 0'>Graph</h3>"), self._mode]),
                self._model_bar,
                self._neighbourhood_bar,
                self._legend,
                self._cy,
            ]
        )

    def _neighbourhood_controls(self) -> tuple[Any, ...]:
        """The neighbourhood mode's depth and block sliders and its "expand all" button."""
        import ipywidgets as w

        depth = w.IntSlider(value=self.depth, min=1, max=40, tooltip="depth", continuous_update=False)
        depth.observe(lambda ch: self.set_depth(ch["new"]), names="value")
        blocks = w.IntSlider(value=self.block_depth, min=0, max=4, continuous_update=False,
                             tooltip="collapse modules this many levels down (0: every op)")  # fmt: skip
        blocks.observe(lambda ch: self.set_block_depth(ch["new"]), names="value")
        expand_all = w.Button(description="expand all")
        expand_all.on_click(lambda _: self.expand_all())
        return caption("depth"), depth, caption("blocks"), blocks, expand_all

    def refresh(self) -> None:
        """Send the elements to the cytoscape widget (once built), reusing the node and edge widgets that stay.

        ipycytoscape syncs ``graph.nodes`` and ``graph.edges`` through a ``ViewList``: it keeps the longest
        common prefix of the old and new lists, then adds the new tail (at once) and removes the old tail
        (a tick later). An element re-added under an id still drawn is refused by Cytoscape.js, then removed
        with the old one. So every redraw keeps a prefix of what is drawn, first sends that prefix alone (the
        browser removes the rest), then appends the new elements: two messages, no id drawn twice."""
        if not self.built:
            return
        e = self.elements
        model = e.source == "model"
        self._model_bar.layout.display = None if model else "none"
        self._neighbourhood_bar.layout.display = "none" if model else None
        if not model and not self._neighbourhood_bar.children:
            self._neighbourhood_bar.children = self._neighbourhood_controls()
        layout = _LAYOUTS["model" if model else "neighbourhood"]
        if self._cy.cytoscape_layout != layout:
            self._cy.cytoscape_layout = dict(layout)
        style = navigator_style() if model else cytoscape_style()
        if self._cy.cytoscape_style != style:
            self._cy.set_style(style)
        self._redraw(e.nodes, e.edges, reuse=model)
        self._legend.value = self.legend_html()

    def _redraw(self, nodes: list[dict[str, Any]], edges: list[dict[str, Any]], reuse: bool) -> None:
        """Draw ``nodes`` and ``edges`` (Cytoscape.js JSON), keeping the drawn prefix that is unchanged."""
        from ipycytoscape import Edge, Node

        new_nodes = {n["data"]["id"]: n for n in nodes}
        new_edges = {x["data"]["id"]: x for x in edges}
        kept_nodes: list[tuple[str, Any]] = []
        for key, widget in self._drawn_nodes if reuse else []:
            if key not in new_nodes:
                break
            kept_nodes.append((key, widget))
        kept = {key for key, _ in kept_nodes}
        kept_edges: list[tuple[str, Any]] = []
        for key, widget in self._drawn_edges if reuse else []:
            x = new_edges.get(key)
            if x is None or x["data"]["source"] not in kept or x["data"]["target"] not in kept:
                break
            if (x["data"]["source"], x["data"]["target"]) != (widget.data["source"], widget.data["target"]):
                break
            kept_edges.append((key, widget))
        graph = self._cy.graph
        gone = [w for _, w in self._drawn_nodes[len(kept_nodes) :] + self._drawn_edges[len(kept_edges) :]]
        if gone:  # first message: the kept prefix alone (the browser removes the rest)
            with graph.hold_sync():
                graph.nodes = [w for _, w in kept_nodes]
                graph.edges = [w for _, w in kept_edges]
        # update what stays, in place
        for key, widget in kept_nodes:
            _update_element(widget, new_nodes[key])
        for key, widget in kept_edges:
            _update_element(widget, new_edges[key], "directed ")
        added_nodes = []
        for n in nodes:
            if n["data"]["id"] in kept:
                continue
            place = {"position": dict(n["position"])} if "position" in n else {}  # sent with the node, not after it
            widget = Node(
                data=dict(n["data"]), classes=n.get("classes", ""), grabbable=n.get("grabbable", True), **place
            )
            added_nodes.append((n["data"]["id"], widget))
        kept_edge_ids = {key for key, _ in kept_edges}
        added_edges = [
            (x["data"]["id"], Edge(data=dict(x["data"]), classes=("directed " + x.get("classes", "")).strip()))
            for x in edges
            if x["data"]["id"] not in kept_edge_ids
        ]
        self._drawn_nodes = kept_nodes + added_nodes
        self._drawn_edges = kept_edges + added_edges
        if added_nodes or added_edges or gone:  # second message: the prefix and the new elements, laid out once
            with graph.hold_sync():
                graph._adj = {key: {} for key, _ in self._drawn_nodes}
                graph.nodes = [w for _, w in self._drawn_nodes]
                graph.edges = [w for _, w in self._drawn_edges]
        for widget in self._retired:  # closed one redraw later, once the browser has said they are removed
            widget.close()
        self._retired = gone

    def legend_html(self) -> str:
        """Colour ramp of the metric, node marks, and where the neighbourhood comes from."""
        e = self.elements
        if self.mode == "model" and e.source == "model":
            return self._model_legend_html()
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

    def _model_legend_html(self) -> str:
        e, nav = self.elements, self.navigator
        swatches = "".join(
            f"<span style='display:inline-block;padding:1px 6px;margin-right:3px;background:{c}'>{esc(label)}</span>"
            for (_, _, c), label in zip(e.bins, e.labels, strict=False)
        )
        where = ", ".join(f"{esc(nav.label(block))} <b>{count}</b>" for block, count in nav.failing_blocks()[:8])
        total = nav.rollup("")["failing"]
        overview = f"<b>{total}</b> of {len(nav)} ops fail" + (f": {where}" if where else "")
        cut = f" {esc(' '.join(e.notes))}" if e.truncated else ""
        return (
            f"<div class='nbprec-graph-legend' style='font-size:12px;line-height:1.5'>{overview}<br>"
            f"worst {esc(e.metric)} in each block (best → worst): {swatches}"
            f"<span style='background:{NA_COLOUR};padding:1px 6px'>no metric</span><br>"
            "bold box: module block (click to open; click an open block to close it); dashed: a run of its children; "
            "red border: holds failing ops; thick blue border: selected op, blue: its inputs and outputs. "
            f"Edges: {esc(nav.edge_source)}; {len(e)} of at most {nav.max_elements} elements drawn.{cut}</div>"
        )

    def to_svg(self) -> str | None:
        e = self.elements
        if not e.nodes:
            return None
        if e.source == "model":  # the blocks and ops (an open block is the box around them in the browser)
            e = replace(e, nodes=[n for n in e.nodes if "position" in n])
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
