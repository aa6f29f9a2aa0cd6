"""A layered (topological) layout computed in Python, so a browser view needs no layout engine.

Each node sits on the layer one below its deepest producer (longest-path layering; a cycle, which a data
flow graph should not have, is broken at the earliest op in execution order). Within a layer nodes are
ordered by the mean x of their producers (one barycentre sweep), then by execution order.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from nbprec.graph.model import OpGraph


def layers(graph: OpGraph) -> dict[str, int]:
    """Node -> layer (0 for nodes without producers).

    Examples
    --------
    >>> g = OpGraph.from_records([{"name": "a"}, {"name": "b"}], [{"src": "a", "dst": "b"}])
    >>> layers(g)
    {'a': 0, 'b': 1}
    """
    nxg = graph.nx
    order = {n: (d["order"], n) for n, d in nxg.nodes(data=True)}
    preds = {n: set(nxg.pred[n]) - {n} for n in nxg}
    indegree = {n: len(p) for n, p in preds.items()}
    heap = [order[n] + (n,) for n, k in indegree.items() if k == 0]
    heapq.heapify(heap)
    layer: dict[str, int] = {}
    remaining = sorted(nxg, key=order.__getitem__, reverse=True)  # cycle breaking: earliest op last
    while len(layer) < len(indegree):
        if not heap:
            while remaining and remaining[-1] in layer:
                remaining.pop()
            heap.append(order[remaining[-1]] + (remaining[-1],))
        node = heapq.heappop(heap)[-1]
        if node in layer:
            continue
        layer[node] = max((layer[p] + 1 for p in preds[node] if p in layer), default=0)
        for succ in nxg.succ[node]:
            if succ in layer or succ == node:
                continue
            indegree[succ] -= 1
            if indegree[succ] == 0:
                heapq.heappush(heap, order[succ] + (succ,))
    return layer


def layered_positions(graph: OpGraph, *, dx: float = 170.0, dy: float = 80.0) -> dict[str, tuple[float, float]]:
    """Node -> (x, y) in pixels, top to bottom along the data flow, centred on x = 0.

    Examples
    --------
    >>> nodes = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    >>> g = OpGraph.from_records(nodes, [{"src": "a", "dst": "b"}, {"src": "a", "dst": "c"}])
    >>> layered_positions(g)["a"], layered_positions(g)["b"][1]
    ((0.0, 0.0), 80.0)
    """
    nxg = graph.nx
    layer = layers(graph)
    by_layer: dict[int, list[str]] = defaultdict(list)
    for node, k in layer.items():
        by_layer[k].append(node)
    x: dict[str, float] = {}
    pos: dict[str, tuple[float, float]] = {}
    for k in sorted(by_layer):

        def key(node: str) -> tuple[float, int, str]:
            xs = [x[p] for p in nxg.pred[node] if p in x]
            return (sum(xs) / len(xs) if xs else 0.0, nxg.nodes[node]["order"], node)

        row = sorted(by_layer[k], key=key)
        for i, node in enumerate(row):
            x[node] = (i - (len(row) - 1) / 2) * dx
            pos[node] = (x[node], k * dy)
    return pos
