"""Cytoscape.js elements for the subgraph view, with positions computed in Python (no widget import).

When :mod:`nbprec.graph` can build the operator graph of the target dump, the neighbourhood and its layout
come from it. Otherwise the neighbourhood is the ops around the selected one in execution order, joined in
that order (said so in the view's caption). Either way at most :data:`MAX_ELEMENTS` elements are produced,
module blocks can be collapsed to one node, and node colours come from the chosen metric.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.rules import HIGHER_IS_BETTER, STATUS_FAIL

#: Most nodes plus edges a graph view sends to the browser (ipycytoscape makes one widget per element).
MAX_ELEMENTS = 300
#: Colour ramp from best to worst metric value.
RAMP = ("#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027")
NA_COLOUR = "#bdbdbd"
_PER_ROW = 6
_DX, _DY = 210, 100


@dataclass
class GraphElements:
    """Nodes and edges in Cytoscape.js JSON, with the facts the legend needs."""

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    metric: str
    bins: list[tuple[float, float, str]] = field(default_factory=list)
    source: str = "execution order"
    truncated: bool = False
    labels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.nodes) + len(self.edges)


def colour_bins(values: np.ndarray, metric: str) -> list[tuple[float, float, str]]:
    """Five value ranges of ``values`` from best to worst, each with its colour (for nodes and the legend)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return []
    lo, hi = float(finite.min()), float(finite.max())
    edges = np.linspace(lo, hi, len(RAMP) + 1)
    ranges = list(itertools.pairwise(edges))
    if metric in HIGHER_IS_BETTER:  # best = highest
        ranges = ranges[::-1]
    return [(float(a), float(b), c) for (a, b), c in zip(ranges, RAMP, strict=True)]


def colour_of(value: float, bins: list[tuple[float, float, str]]) -> str:
    """The colour of ``value`` under ``bins`` (grey when NaN)."""
    if not np.isfinite(value) or not bins:
        return NA_COLOUR
    for lo, hi, colour in bins:
        if lo <= value <= hi:
            return colour
    return bins[-1][2]


def _block_of(module: str, collapsed: frozenset[str]) -> str | None:
    """The collapsed module block an op of ``module`` falls into (the outermost collapsed ancestor)."""
    parts = module.split(".") if module else []
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in collapsed:
            return prefix
    return None


def order_neighbourhood(
    ops: pd.DataFrame,
    op: str,
    depth: int,
    metric_column: str,
    *,
    collapsed: frozenset[str] = frozenset(),
    fused: frozenset[str] = frozenset(),
    max_elements: int = MAX_ELEMENTS,
) -> GraphElements:
    """The ops within ``depth`` positions of ``op`` in execution order, as a chain laid out in rows.

    Parameters
    ----------
    ops
        ``OpsModel.ops`` (per-op statuses and metrics).
    op
        The selected op.
    depth
        How many ops before and after to include.
    metric_column
        Per-op column that colours the nodes.
    collapsed
        Module paths shown as one block node each.
    fused
        Ops matched through fusion records (marked with a double border).
    max_elements
        Cap on nodes plus edges; the window shrinks to fit.
    """
    hits = np.flatnonzero(ops["op"].to_numpy() == op)
    if hits.size == 0:
        return GraphElements([], [], metric_column)
    centre = int(hits[0])
    depth = max(0, min(int(depth), (max_elements - 1) // 4))
    lo, hi = max(0, centre - depth), min(len(ops), centre + depth + 1)
    window = ops.iloc[lo:hi]
    values = (
        window[metric_column].to_numpy(dtype=np.float64) if metric_column in window else np.full(len(window), np.nan)
    )
    bins = colour_bins(values, metric_column.removeprefix("out_"))
    groups: list[dict[str, Any]] = []
    for (_, row), value in zip(window.iterrows(), values, strict=True):
        block = _block_of(str(row["module"]), collapsed)
        if block is not None and groups and groups[-1]["block"] == block:
            g = groups[-1]
            g["members"] += 1
            g["fail"] |= row["status"] == STATUS_FAIL
            g["selected"] |= row["op"] == op
            g["value"] = _worse(g["value"], value, metric_column)
            continue
        groups.append(
            {
                "block": block,
                "op": str(row["op"]),
                "type": str(row["op_type"]),
                "members": 1,
                "fail": row["status"] == STATUS_FAIL,
                "selected": row["op"] == op,
                "value": value,
                "unmatched": not row.get("bench_op", "x"),
                "fused": str(row["op"]) in fused,
                "origin": str(row.get("origin", "")),
            }
        )
    nodes, edges = [], []
    for i, g in enumerate(groups):
        r, c = divmod(i, _PER_ROW)
        col = c if r % 2 == 0 else _PER_ROW - 1 - c
        node_id = f"block:{g['block']}:{i}" if g["block"] is not None else g["op"]
        label = f"{g['block']} ({g['members']} ops)" if g["block"] is not None else _short(g["op"])
        classes = ["block" if g["block"] is not None else "op"]
        classes += [name for name in ("fail", "selected", "unmatched", "fused") if g[name]]
        nodes.append(
            {
                "data": {
                    "id": node_id,
                    "label": label,
                    "op": g["op"],
                    "block": g["block"] or "",
                    "type": g["type"],
                    "value": None if not np.isfinite(g["value"]) else float(g["value"]),
                    "colour": colour_of(g["value"], bins),
                    "origin": g["origin"],
                },
                "position": {"x": float(col * _DX), "y": float(r * _DY)},
                "classes": " ".join(classes),
            }
        )
        if i:
            edges.append({"data": {"id": f"e{i}", "source": nodes[i - 1]["data"]["id"], "target": node_id}})
    labels = [f"{lo:.6g} – {hi:.6g}" for lo, hi, _ in bins]
    return GraphElements(
        nodes, edges, metric_column, bins, "execution order (edges join consecutive ops)", labels=labels
    )


def _worse(a: float, b: float, metric_column: str) -> float:
    if not np.isfinite(a):
        return b
    if not np.isfinite(b):
        return a
    return min(a, b) if metric_column.removeprefix("out_") in HIGHER_IS_BETTER else max(a, b)


def _short(op: str, width: int = 30) -> str:
    return op if len(op) <= width else "…" + op[-(width - 1) :]


def module_paths(ops: pd.DataFrame) -> list[str]:
    """Every module path and its ancestors present in the ops (the blocks one can collapse), sorted."""
    paths: set[str] = set()
    for module in ops["module"].dropna().unique():
        parts = str(module).split(".") if module else []
        paths.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(paths)


def cytoscape_style() -> list[dict[str, Any]]:
    """The Cytoscape.js style of the subgraph view (colours come from each node's ``colour`` datum)."""
    return [
        {
            "selector": "node",
            "style": {
                "label": "data(label)",
                "background-color": "data(colour)",
                "font-size": "11px",
                "text-valign": "bottom",
                "text-margin-y": "4px",
                "width": 26,
                "height": 26,
                "border-width": 1,
                "border-color": "#555",
            },
        },
        {"selector": "node.block", "style": {"shape": "round-rectangle", "width": 60, "height": 30}},
        {"selector": "node.fail", "style": {"border-width": 3, "border-color": "#b71c1c"}},
        {"selector": "node.unmatched", "style": {"border-style": "dashed", "border-width": 3}},
        {"selector": "node.fused", "style": {"border-style": "double", "border-width": 5}},
        {
            "selector": "node.selected",
            "style": {"border-width": 5, "border-color": "#1565c0", "width": 36, "height": 36},
        },
        {
            "selector": "edge",
            "style": {
                "width": 1.5,
                "line-color": "#888",
                "target-arrow-color": "#888",
                "target-arrow-shape": "triangle",
                "curve-style": "bezier",
            },
        },
    ]


def navigator_elements(view: Any, metric: str) -> GraphElements:
    """Cytoscape.js elements of a :class:`nbprec.graph.navigator.NavigatorView`: ops first, then blocks and
    groups, then the expanded containers (their children name them as ``parent``; the widget adds them first).
    """
    from nbprec.graph.exports import color_scale

    positions = navigator_positions(view)
    parents = {n["id"]: n["parent"] for n in view.nodes}
    nodes = []
    for n in sorted(view.nodes, key=lambda n: (n["expanded"], n["kind"] != "op")):
        op = n["kind"] == "op"
        counts = f"{n['members']} ops" + (f" · {n['failing']} fail" if n["failing"] else "")
        # an open block's label is one line above its box (click it to close the block)
        label = n["label"] if op else f"{n['label']} · {counts}" if n["expanded"] else f"{n['label']}\n{counts}"
        data = {
            "id": n["id"],
            "label": label,
            "kind": n["kind"],
            "op": n["id"] if op else "",
            "block": "" if op else n["id"],
            "expanded": n["expanded"],
            "members": n["members"],
            "failing": n["failing"],
            "status": "fail" if n["status"] in ("introduced", "fail", "explained") else n["status"],
            "verdict": n["status"],
            "value": n["value"],
            "first_failing": n["first_failing"],
            "colour": n["color"],
        }
        if n["parent"]:  # not Cytoscape's "parent": compound nodes cost (see navigator_style)
            data["within"] = n["parent"]
        classes = ["op" if op else "block", n["kind"]]
        classes += [c for c, on in (("expanded", n["expanded"]), ("selected", n["selected"]),
                                    ("neighbour", n["neighbour"]), ("fail", n["failing"] > 0),
                                    ("introduced", n["status"] == "introduced")) if on]  # fmt: skip
        # no class twice: Cytoscape.js compares class lists by length and would miss a change
        node = {"data": data, "classes": " ".join(dict.fromkeys(classes))}
        place = positions.get(n["id"])
        if place is not None:
            node["position"] = {"x": place["x"], "y": place["y"]}
            if "w" in place:  # an open block: a box drawn under what it holds (dragged, it would leave it)
                data.update(w=place["w"], h=place["h"], z=_nesting(n["id"], parents))
                node["grabbable"] = False
        nodes.append(node)
    edges = [
        {
            "data": {
                "id": e["id"],
                "source": e["source"],
                "target": e["target"],
                "count": e["count"],
                "label": str(e["count"]) if e["count"] > 1 else "",
            },
            "classes": "near" if e["near"] else "",
        }
        for e in view.edges
    ]
    scale = color_scale(metric)
    bins = [(np.nan, np.nan, b["color"]) for b in scale["bins"]]
    labels = [b["label"] for b in scale["bins"]]
    return GraphElements(nodes, edges, metric, bins, "model", view.truncated, labels, list(view.notes))


#: Z-indexes of the whole-model view: an open block's is how many open blocks hold it (below these, at most
#: ``EDGE_Z - 1`` however deep the module tree), then the edges, then the ops and closed blocks on top.
EDGE_Z, NODE_Z = 10_000, 10_001


def _nesting(node: str, parents: dict[str, str]) -> int:
    """How many open blocks hold ``node`` (its box's z-index: below the edges, whatever the depth)."""
    depth = 0
    while parents.get(node):
        node, depth = parents[node], depth + 1
    return min(depth, EDGE_Z - 1)


#: Boxes of :func:`navigator_style` in pixels, their borders included: an op, a block (two lines), and the
#: width of a character of an open block's title (12 px bold).
OP_BOX, BLOCK_BOX, TITLE_CHAR = (176.0, 36.0), (176.0, 48.0), 7.5


def navigator_positions(view: Any) -> dict[str, dict[str, float]]:
    """Where each block and op of a :class:`~nbprec.graph.navigator.NavigatorView` goes, and each open block's
    box (``x``, ``y``, ``w``, ``h``: its title line above it, outside): :func:`nbprec.graph.nested_layout.
    nested_positions` with the sizes of :func:`navigator_style`, for Cytoscape's ``preset`` layout."""
    from nbprec.graph.nested_layout import BoxSpacing, nested_positions

    leaves = [n for n in view.nodes if not n["expanded"]]
    containers = [n for n in view.nodes if n["expanded"]]
    sizes = {n["id"]: OP_BOX if n["kind"] == "op" else BLOCK_BOX for n in leaves}
    titles = {n["id"]: TITLE_CHAR * (len(n["label"]) + 16) for n in containers}  # + " · 1234 ops · 56 fail"
    boxes: dict[str, tuple[float, float, float, float]] = {}
    title = BoxSpacing().title
    pos = nested_positions(
        [(n["id"], n["parent"]) for n in [*containers, *leaves]],
        [(e["source"], e["target"]) for e in view.edges],
        sizes,
        title_widths=titles,
        boxes=boxes,
    )
    out: dict[str, dict[str, float]] = {k: {"x": round(x, 1), "y": round(y, 1)} for k, (x, y) in pos.items()}
    for k, (x, y, w, h) in boxes.items():  # the drawn box: below the title line
        out[k] = {"x": round(x, 1), "y": round(y + title / 2, 1), "w": round(w, 1), "h": round(h - title, 1)}
    return out


def navigator_style() -> list[dict[str, Any]]:
    """The Cytoscape.js style of the whole-model view: labelled boxes, an open block a box under what it holds.

    An open block is a plain node sized and placed in Python (:func:`navigator_positions`), drawn under its
    contents and the edges by z-index, not a Cytoscape.js compound node: in a graph with compound nodes, every
    style property applied to an element marks the styles of all its ancestors, descendants and their edges as
    stale, and the 5,000-op model view's first draw (52 nodes, six open blocks deep) spent most of its time there.
    """
    return [
        {
            "selector": "node",
            "style": {
                "z-index-compare": "manual",
                "z-index": NODE_Z,
                "label": "data(label)",
                "background-color": "data(colour)",
                "shape": "round-rectangle",
                "width": 170,
                "height": 30,
                "font-size": 13,
                "font-family": "sans-serif",
                "text-valign": "center",
                "text-halign": "center",
                "text-wrap": "ellipsis",
                "text-max-width": 164,
                "border-width": 1,
                "border-color": "#555555",
            },
        },
        {
            "selector": "node.block",
            "style": {"height": 42, "text-wrap": "wrap", "font-weight": "bold", "border-width": 2},
        },
        {"selector": "node.group", "style": {"border-style": "dashed", "font-weight": "normal"}},
        {
            "selector": "node.expanded",
            "style": {
                "width": "data(w)",
                "height": "data(h)",
                "z-index": "data(z)",
                "background-color": "#f4f6fa",
                "background-opacity": 1,
                "border-color": "#8a94a6",
                "border-width": 1,
                "text-valign": "top",
                "text-halign": "center",
                "text-wrap": "none",
                "font-size": 12,
                "font-weight": "bold",
                "text-events": "yes",
            },
        },
        {"selector": "node.fail", "style": {"border-color": "#b71c1c", "border-width": 3}},
        {"selector": "node.expanded.fail", "style": {"border-width": 2}},
        {"selector": "node.neighbour", "style": {"border-color": "#1565c0", "border-width": 3}},
        {"selector": "node.selected", "style": {"border-color": "#0d47a1", "border-width": 6, "font-weight": "bold"}},
        {
            "selector": "edge",
            "style": {
                "z-index-compare": "manual",
                "z-index": EDGE_Z,
                "width": 1.5,
                "line-color": "#9e9e9e",
                "target-arrow-color": "#9e9e9e",
                "target-arrow-shape": "triangle",
                "curve-style": "bezier",
                "label": "data(label)",
                "font-size": 10,
                "color": "#616161",
            },
        },
        {"selector": "edge.near", "style": {"width": 3.5, "line-color": "#1565c0", "target-arrow-color": "#1565c0"}},
    ]
