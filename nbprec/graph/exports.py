"""Exports of an operator graph: Cytoscape.js elements and style, Graphviz DOT and SVG, a JSON node-data file.

Nodes are coloured by one metric on a fixed colour scale (:func:`color_scale`, described by a legend);
fused ops are diamonds, ops without a benchmark counterpart have a dashed red border, module blocks a
double border, the centre of a subgraph a thick black border; inferred edges are dashed, control edges
dotted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.errors import MissingDependencyError
from nbprec.graph.hierarchy import describe_module_call
from nbprec.graph.layout import layered_positions
from nbprec.graph.model import GraphError, OpGraph

MISSING_COLOR = "#d9d9d9"
_GOOD_TO_BAD = ("#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027")
#: metric -> (bin edges from good to bad, True when higher is better)
_SCALES: dict[str, tuple[tuple[float, ...], bool]] = {
    "cosine": ((0.9999, 0.999, 0.99, 0.9), True),
    "in_cosine": ((0.9999, 0.999, 0.99, 0.9), True),
    "rel_euclidean": ((1e-4, 1e-3, 1e-2, 1e-1), False),
    "max_abs_err": ((1e-4, 1e-3, 1e-2, 1e-1), False),
}
_STATUS_COLORS = {"pass": _GOOD_TO_BAD[0], "fail": _GOOD_TO_BAD[-1]}
MARKS = {
    "fused": "diamond shape",
    "unmatched": "dashed red border (no benchmark counterpart)",
    "block": "double border (a collapsed module; label shows the op count)",
    "center": "thick black border (the op the subgraph is around)",
    "inferred edge": "dashed line (reconstructed from matching statistics)",
    "control edge": "dotted grey line",
}
DOT_BINARY_LIMIT = 5000


def color_scale(metric: str = "cosine") -> dict[str, Any]:
    """The colour scale for ``metric`` as a legend: bins from good to bad, and the colour of 'no value'.

    Examples
    --------
    >>> color_scale("cosine")["bins"][0]
    {'label': 'cosine >= 0.9999', 'color': '#1a9850'}
    """
    if metric == "status":
        bins = [{"label": f"status {s}", "color": c} for s, c in _STATUS_COLORS.items()]
        return {"metric": metric, "bins": bins, "missing": {"label": "n/a", "color": MISSING_COLOR}, "marks": MARKS}
    if metric not in _SCALES:
        raise GraphError(f"cannot colour by {metric!r}: choose one of {['status', *_SCALES]}")
    edges, higher_better = _SCALES[metric]
    op, last = (">=", "<") if higher_better else ("<=", ">")
    bins = [{"label": f"{metric} {op} {e:g}", "color": c} for e, c in zip(edges, _GOOD_TO_BAD, strict=False)]
    bins.append({"label": f"{metric} {last} {edges[-1]:g}", "color": _GOOD_TO_BAD[-1]})
    return {"metric": metric, "bins": bins, "missing": {"label": "no value", "color": MISSING_COLOR}, "marks": MARKS}


def metric_color(value: Any, metric: str = "cosine") -> str:
    """The colour of one metric value (``MISSING_COLOR`` for None/NaN)."""
    if metric == "status":
        return _STATUS_COLORS.get(value, MISSING_COLOR)
    if value is None or value != value:
        return MISSING_COLOR
    edges, higher_better = _SCALES[metric]
    for edge, color in zip(edges, _GOOD_TO_BAD, strict=False):
        if (value >= edge) if higher_better else (value <= edge):
            return color
    return _GOOD_TO_BAD[-1]


def node_label(name: str, data: dict[str, Any]) -> str:
    """A short label: the block label with its op count, or the op name without its prefix."""
    if data.get("kind") == "block":
        return f"{data['attrs'].get('label') or describe_module_call(name)['label']} [{data.get('members', 0)} ops]"
    parts = name.split(".")
    return (
        ".".join(parts[1:]) if len(parts) > 2 and parts[0] in ("Functional", "Tensor", "Torch", "NPU", "VF") else name
    )


def _classes(name: str, data: dict[str, Any], center: str) -> list[str]:
    classes = [data.get("kind", "op")]
    if data.get("fusion"):
        classes.append("fused")
    if data.get("matched") is False:
        classes.append("unmatched")
    if data.get("status") == "fail":
        classes.append("fail")
    if name == center:
        classes.append("center")
    return classes


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


@dataclass
class CytoscapeExport:
    """Cytoscape.js elements (positions included), a style sheet, and the legend of the colour scale."""

    elements: list[dict[str, Any]]
    style: list[dict[str, Any]]
    legend: dict[str, Any]
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        """All of it as strict JSON."""
        return json.dumps(
            {
                "elements": self.elements,
                "style": self.style,
                "legend": self.legend,
                "truncated": self.truncated,
                "notes": self.notes,
            },
            allow_nan=False,
        )


def cytoscape_style() -> list[dict[str, Any]]:
    """The Cytoscape.js style sheet used with :func:`to_cytoscape` (colours come from ``data(color)``)."""
    return [
        {
            "selector": "node",
            "style": {
                "label": "data(label)",
                "background-color": "data(color)",
                "shape": "round-rectangle",
                "width": 150,
                "height": 28,
                "font-size": 10,
                "text-valign": "center",
                "text-halign": "center",
                "text-wrap": "ellipsis",
                "text-max-width": 145,
                "border-width": 1,
                "border-color": "#555555",
            },
        },
        {"selector": "node.block", "style": {"border-width": 4, "border-style": "double", "font-weight": "bold"}},
        {"selector": "node.fused", "style": {"shape": "diamond", "height": 40}},
        {
            "selector": "node.unmatched",
            "style": {"border-style": "dashed", "border-color": "#d62728", "border-width": 3},
        },
        {"selector": "node.center", "style": {"border-width": 5, "border-color": "#000000"}},
        {
            "selector": "edge",
            "style": {
                "curve-style": "bezier",
                "target-arrow-shape": "triangle",
                "width": 1.5,
                "line-color": "data(color)",
                "target-arrow-color": "data(color)",
            },
        },
        {"selector": "edge.inferred", "style": {"line-style": "dashed"}},
        {
            "selector": "edge.control",
            "style": {"line-style": "dotted", "line-color": "#999999", "target-arrow-color": "#999999"},
        },
    ]


def _trim(graph: OpGraph, max_elements: int) -> tuple[list[str], bool]:
    """The nodes to draw: nearest first (subgraph distance, else execution order) within the element budget."""
    nxg = graph.nx
    ranked = sorted(nxg.nodes(data=True), key=lambda nd: (abs(nd[1].get("distance", 0)), nd[1]["order"], nd[0]))
    if nxg.number_of_nodes() + nxg.number_of_edges() <= max_elements:
        return [n for n, _ in ranked], False
    kept: set[str] = set()
    count = 0
    for node, _ in ranked:
        new_edges = sum(len(k) for v, k in nxg.succ[node].items() if v in kept) + sum(
            len(k) for u, k in nxg.pred[node].items() if u in kept
        )
        if count + 1 + new_edges > max_elements:
            break
        kept.add(node)
        count += 1 + new_edges
    return [n for n, _ in ranked if n in kept], True


def to_cytoscape(graph: OpGraph, metric: str = "cosine", *, max_elements: int = 300) -> CytoscapeExport:
    """Cytoscape.js elements with positions from :func:`~nbprec.graph.layout.layered_positions`.

    Parameters
    ----------
    graph
        An op graph, a collapsed graph or a subgraph.
    metric
        Node colour: ``"cosine"``, ``"in_cosine"``, ``"rel_euclidean"``, ``"max_abs_err"`` or ``"status"``.
    max_elements
        At most this many nodes plus edges (a browser view should stay near 300). When the graph is larger
        the nearest nodes are kept, ``truncated`` is set and ``notes`` says so.

    Examples
    --------
    >>> out = graph.subgraph("Functional.linear.0.forward").to_cytoscape("cosine")  # doctest: +SKIP
    >>> out.elements[0]["data"]["id"], out.legend["bins"][0]["label"]                # doctest: +SKIP
    """
    legend = color_scale(metric)
    nodes, truncated = _trim(graph, max_elements)
    view = graph.nx.subgraph(nodes)
    positions = layered_positions(OpGraph(view, hierarchy=graph.hierarchy))
    center = getattr(graph, "center", "")
    elements: list[dict[str, Any]] = []
    for name in nodes:
        data = graph.nx.nodes[name]
        value = data.get("status") if metric == "status" else data.get(metric)
        x, y = positions[name]
        item = {
            "id": name,
            "label": node_label(name, data),
            "color": metric_color(value, metric),
            "metric": _plain(value),
            **{k: _plain(v) for k, v in data.items() if k not in ("attrs", "id", "label", "color", "metric")},
        }
        elements.append({"data": item, "position": {"x": x, "y": y}, "classes": " ".join(_classes(name, data, center))})
    ids = set(nodes)
    for i, (u, v, key, data) in enumerate(view.edges(keys=True, data=True)):
        edge_id = f"edge:{i}"
        while edge_id in ids:
            edge_id += "'"
        ids.add(edge_id)
        value = data.get("status") if metric == "status" else data.get(metric)
        if metric == "in_cosine":
            value = data.get("cosine")
        item = {
            "id": edge_id,
            "source": u,
            "target": v,
            "key": str(key),
            "color": "#999999"
            if data["kind"] == "control"
            else metric_color(value, "cosine" if metric == "in_cosine" else metric),
            **{k: _plain(val) for k, val in data.items() if k not in ("id", "source", "target", "color", "key")},
        }
        classes = [data["kind"]] + (["inferred"] if data.get("inferred") else [])
        elements.append({"data": item, "classes": " ".join(classes)})
    notes = []
    if truncated:
        notes.append(
            f"graph of {graph.nx.number_of_nodes()} nodes and {graph.nx.number_of_edges()} edges cut to the "
            f"{len(nodes)} nearest nodes to stay within max_elements={max_elements}"
        )
    return CytoscapeExport(
        elements, cytoscape_style(), legend, truncated or bool(getattr(graph, "truncated", False)), notes
    )


def dot_quote(text: str) -> str:
    """A DOT double-quoted string holding ``text`` literally (quotes, backslashes, newlines escaped).

    Examples
    --------
    >>> dot_quote('a"b')
    '"a\\\\"b"'
    """
    cleaned = "".join(ch if ch >= " " or ch == "\n" else " " for ch in str(text))
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: OpGraph, metric: str = "cosine") -> str:
    """Graphviz DOT text of the graph, nodes coloured by ``metric``; every user string is quoted and escaped.

    Examples
    --------
    >>> g = OpGraph.from_records([{"name": "a"}, {"name": "b"}], [{"src": "a", "dst": "b", "slot": "0"}])
    >>> print(to_dot(g).splitlines()[0])
    digraph nbprec {
    """
    color_scale(metric)  # validates the metric
    center = getattr(graph, "center", "")
    lines = [
        "digraph nbprec {",
        '  graph [rankdir=TB, fontname="Helvetica"];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    for name, data in sorted(graph.nx.nodes(data=True), key=lambda nd: (nd[1]["order"], nd[0])):
        value = data.get("status") if metric == "status" else data.get(metric)
        shown = "" if value is None or isinstance(value, str) else f"\n{metric} {value:.6g}"
        attrs = [
            f"label={dot_quote(node_label(name, data) + shown)}",
            f"fillcolor={dot_quote(metric_color(value, metric))}",
        ]
        attrs.append(f"tooltip={dot_quote(name)}")
        classes = _classes(name, data, center)
        if "fused" in classes:
            attrs.append("shape=diamond")
        styles = ["filled", "rounded"]
        if "unmatched" in classes:
            styles.append("dashed")
            attrs.append('color="#d62728"')
        if "block" in classes:
            attrs.append("peripheries=2")
        if "center" in classes:
            styles.append("bold")
            attrs.append("penwidth=3")
        attrs.append(f"style={dot_quote(','.join(styles))}")
        lines.append(f"  {dot_quote(name)} [{', '.join(attrs)}];")
    for u, v, data in graph.nx.edges(data=True):
        attrs = [f"label={dot_quote(data.get('slot', ''))}"]
        if data["kind"] == "control":
            attrs.append('style=dotted, color="#999999"')
        elif data.get("inferred"):
            attrs.append("style=dashed")
        lines.append(f"  {dot_quote(u)} -> {dot_quote(v)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(graph: OpGraph, path: str | Path | None = None, metric: str = "cosine", *, timeout: float = 120.0) -> str:
    """SVG of the graph drawn by Graphviz's ``dot`` binary; written to ``path`` when given.

    Raises
    ------
    MissingDependencyError
        ``dot`` is not on PATH (install Graphviz: ``apt-get install graphviz`` or ``conda install graphviz``).
    GraphError
        The graph has more than :data:`DOT_BINARY_LIMIT` nodes (draw a subgraph or a collapsed graph), or
        ``dot`` failed.
    """
    binary = shutil.which("dot")
    if binary is None:
        raise MissingDependencyError(
            "drawing SVG needs Graphviz's 'dot' program, which is not on PATH. Install Graphviz "
            "(apt-get install graphviz, or conda install graphviz), or export DOT text with to_dot()"
        )
    if len(graph) > DOT_BINARY_LIMIT:
        raise GraphError(
            f"the graph has {len(graph)} nodes; dot draws at most {DOT_BINARY_LIMIT} in reasonable time: "
            "draw graph.subgraph(...) or graph.collapse(depth=...) instead"
        )
    try:
        done = subprocess.run(
            [binary, "-Tsvg"],
            input=to_dot(graph, metric).encode("utf-8"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GraphError(f"dot did not finish within {timeout:g} s on a graph of {len(graph)} nodes") from exc
    if done.returncode != 0:
        raise GraphError(f"dot failed (exit {done.returncode}): {done.stderr.decode('utf-8', 'replace').strip()[:500]}")
    svg = done.stdout.decode("utf-8")
    if path is not None:
        Path(path).write_text(svg, encoding="utf-8")
    return svg


def to_json(graph: OpGraph, path: str | Path | None = None) -> dict[str, Any]:
    """The node-data document: every node and edge with its attributes, as strict JSON (NaN -> null).

    Examples
    --------
    >>> g = OpGraph.from_records([{"name": "a"}], [])
    >>> to_json(g)["nodes"][0]["id"]
    'a'
    """
    doc = {
        "format": "nbprec-graph",
        "version": 1,
        "source": graph.source,
        "meta": _plain(graph.meta),
        "notes": list(graph.notes),
        "center": getattr(graph, "center", None),
        "truncated": bool(getattr(graph, "truncated", False)),
        "nodes": [{"id": n, **_plain(d)} for n, d in graph.nx.nodes(data=True)],
        "edges": [
            {"source": u, "target": v, "key": str(k), **_plain(d)}
            for u, v, k, d in graph.nx.edges(keys=True, data=True)
        ],
    }
    if path is not None:
        Path(path).write_text(json.dumps(doc, allow_nan=False, indent=1), encoding="utf-8")
    return doc
