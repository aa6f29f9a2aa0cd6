"""Positions for a graph drawn as nested boxes (open module blocks around blocks and ops), computed in Python.

The whole-model graph view draws an open block as a box around what it holds: the leaves' centres and each
container's box come from here (``boxes``). Each container lays out its own children in
layers along the data flow (every edge counted between the two children of the innermost container holding
both of its ends), top to bottom in execution order, then is laid out as one box (what it holds, its padding
and its title line) by the container around it. For the chains of blocks a model is made of this is the
arrangement Cytoscape's dagre layout gave, with no layout engine run in the browser: on a 5,000-op model that
was 0.1-0.3 s of the browser's work on every redraw.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ROOT = ""


@dataclass(frozen=True)
class BoxSpacing:
    """Pixels between and around boxes (dagre's ``nodeSep``/``rankSep``, Cytoscape's compound ``padding``),
    and the height of a container's title line above its box."""

    node_sep: float = 18.0
    rank_sep: float = 28.0
    padding: float = 12.0
    title: float = 20.0


def nested_positions(
    nodes: Sequence[tuple[str, str]],
    edges: Sequence[tuple[str, str]],
    sizes: Mapping[str, tuple[float, float]],
    *,
    title_widths: Mapping[str, float] | None = None,
    spacing: BoxSpacing | None = None,
    boxes: dict[str, tuple[float, float, float, float]] | None = None,
) -> dict[str, tuple[float, float]]:
    """Centre of every leaf, in pixels (y downwards, the outermost content centred on x = 0).

    Parameters
    ----------
    nodes
        ``(id, parent)`` of every node (``parent`` ``""`` at the top level), the leaves in execution order; a
        node that is the parent of another is a container (its place in the list does not matter), the others
        are leaves.
    edges
        ``(source, target)`` between leaves; an edge against execution order does not move anything down.
    sizes
        Leaf id -> ``(width, height)``.
    title_widths
        Container id -> width of its title (a container is at least that wide).
    spacing
        Gaps and padding (:class:`BoxSpacing` by default).
    boxes
        When given, filled with container id -> ``(x, y, width, height)`` of its box: its centre and size, the
        title line included (at the top of the box); the width is that of what it holds and its padding (a
        longer title overhangs it, as Cytoscape.js draws a compound node's).

    Examples
    --------
    >>> nodes = [("blk", ""), ("a", "blk"), ("b", "blk"), ("c", "")]
    >>> pos = nested_positions(nodes, [("a", "b"), ("b", "c")], {k: (100, 30) for k in "abc"})
    >>> pos["a"][1] < pos["b"][1] < pos["c"][1], pos["a"][0] == pos["b"][0] == pos["c"][0]
    (True, True)
    """
    spacing = spacing or BoxSpacing()
    title_widths = title_widths or {}
    parent = dict(nodes)
    children: dict[str, list[str]] = defaultdict(list)
    for node, up in nodes:
        children[up if up in parent else ROOT].append(node)
    rank = {node: i if node not in children else len(nodes) for i, (node, _) in enumerate(nodes)}
    chain = {node: _chain(node, parent) for node in parent}
    for node in sorted(parent, key=lambda n: -len(chain[n])):  # a container runs from its earliest leaf
        for kid in children.get(node, ()):
            rank[node] = min(rank[node], rank[kid])
    lifted: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for src, dst in edges:
        if src in parent and dst in parent and src != dst:
            a, b = chain[src], chain[dst]
            depth = next(i for i in range(min(len(a), len(b)) + 1) if i == len(a) or i == len(b) or a[i] != b[i])
            if depth < len(a) and depth < len(b):
                lifted[a[depth - 1] if depth else ROOT].add((a[depth], b[depth]))
    offsets: dict[str, dict[str, tuple[float, float]]] = {}
    box: dict[str, tuple[float, float]] = {node: sizes.get(node, (0.0, 0.0)) for node in parent}
    drawn: dict[str, float] = {}  # a container's width around what it holds (its title may be wider)
    for container in [*sorted(children.keys() - {ROOT}, key=lambda n: -len(chain[n])), ROOT]:
        kids = sorted(children[container], key=rank.__getitem__)
        offsets[container], (width, height) = _layers(kids, lifted[container], rank, box, spacing)
        if container != ROOT:
            drawn[container] = width + 2 * spacing.padding
            width = max(drawn[container], title_widths.get(container, 0.0))
            box[container] = (width, height + 2 * spacing.padding + spacing.title)
    positions: dict[str, tuple[float, float]] = {}
    stack = [(ROOT, 0.0, 0.0)]  # container, centre of what it holds
    while stack:
        container, cx, cy = stack.pop()
        for kid, (dx, dy) in offsets[container].items():
            if kid in offsets:  # a container: what it holds sits below its title
                stack.append((kid, cx + dx, cy + dy + spacing.title / 2))
                if boxes is not None:
                    boxes[kid] = (cx + dx, cy + dy, drawn[kid], box[kid][1])
            else:
                positions[kid] = (cx + dx, cy + dy)
    return positions


def _chain(node: str, parent: Mapping[str, str]) -> list[str]:
    """``node``'s containers, outermost first, then ``node``."""
    out = [node]
    while parent.get(out[-1], ROOT) in parent and len(out) <= len(parent):
        out.append(parent[out[-1]])
    return out[::-1]


def _layers(
    kids: list[str],
    edges: set[tuple[str, str]],
    rank: Mapping[str, int],
    box: Mapping[str, tuple[float, float]],
    spacing: BoxSpacing,
) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Centres of ``kids`` relative to the centre of their bounding box, and its size: each kid one layer
    below its deepest producer (a kid without one stays beside the kid before it), ordered in its layer by
    its producers' mean x, then execution order."""
    producers: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if rank[a] < rank[b]:
            producers[b].append(a)
    layer: dict[str, int] = {}
    for i, kid in enumerate(kids):
        found = [layer[p] + 1 for p in producers[kid] if p in layer]
        layer[kid] = max(found) if found else (layer[kids[i - 1]] if i else 0)
    rows: dict[int, list[str]] = defaultdict(list)
    for kid in kids:
        rows[layer[kid]].append(kid)
    x: dict[str, float] = {}
    placed: dict[str, tuple[float, float]] = {}
    top, width = 0.0, 0.0
    for k in sorted(rows):

        def key(kid: str) -> tuple[float, int]:
            xs = [x[p] for p in producers[kid] if p in x]
            return (sum(xs) / len(xs) if xs else 0.0, rank[kid])

        row = sorted(rows[k], key=key)
        row_width = sum(box[kid][0] for kid in row) + spacing.node_sep * (len(row) - 1)
        row_height = max(box[kid][1] for kid in row)
        left = -row_width / 2
        for kid in row:
            x[kid] = left + box[kid][0] / 2
            placed[kid] = (x[kid], top + row_height / 2)
            left += box[kid][0] + spacing.node_sep
        top += row_height + spacing.rank_sep
        width = max(width, row_width)
    height = max(top - spacing.rank_sep, 0.0)
    return {kid: (px, py - height / 2) for kid, (px, py) in placed.items()}, (width, height)
