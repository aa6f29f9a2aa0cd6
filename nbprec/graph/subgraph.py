"""The neighbourhood of one op: what feeds it and what it feeds, a few steps each way.

The search is breadth-first, one distance at a time in both directions, so it touches only the nodes it
returns (plus one frontier) however large the graph is. When the neighbourhood is larger than
``max_nodes`` the nearest nodes are kept, :attr:`Subgraph.truncated` is set and :attr:`Subgraph.notes`
says what was cut.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbprec.graph.model import GraphError, OpGraph, OpNotFoundError


class Subgraph(OpGraph):
    """An :class:`OpGraph` around a centre op.

    Attributes
    ----------
    center : str
        The op the neighbourhood is around.
    truncated : bool
        True when nodes within the asked depths were left out to respect ``max_nodes``.
    up, down : int
        The asked depths. Every node has a ``distance`` attribute: negative upstream, positive downstream.
    """

    center: str = ""
    truncated: bool = False
    up: int = 0
    down: int = 0


def _neighbours(adjacency: Any, node: str, control_edges: bool) -> Iterable[str]:
    for nbr, keyed in adjacency[node].items():
        if control_edges or any(d["kind"] != "control" for d in keyed.values()):
            yield nbr


def neighbourhood(
    graph: OpGraph,
    op: str,
    *,
    up: int = 2,
    down: int = 2,
    stop_types: Iterable[str] = (),
    control_edges: bool = True,
    max_nodes: int = 300,
) -> Subgraph:
    """Ops within ``up`` steps upstream and ``down`` steps downstream of ``op``, with the edges between them.

    Parameters
    ----------
    graph
        The op graph (attach metrics first to carry them along: nodes and edges keep every attribute).
    op
        The centre op.
    up, down
        How many edges to follow against / along the data flow.
    stop_types
        Op types (case-insensitive) where the search stops: such an op is included but not gone past.
    control_edges
        Follow and include control edges (False keeps data edges only).
    max_nodes
        At most this many nodes; the nearest are kept and ``truncated`` is set when more were found.

    Examples
    --------
    >>> sub = graph.subgraph("Functional.linear.1.forward", up=2, down=1, stop_types=("layer_norm",))  # doctest: +SKIP
    >>> sub.truncated, len(sub)                                                                        # doctest: +SKIP
    (False, 4)
    """
    nxg = graph.nx
    if op not in nxg:
        hint = graph.find(op.split(".")[1] if op.count(".") > 1 else op)[:5]
        raise OpNotFoundError(
            f"no op named {op!r} in the graph ({len(graph)} ops)" + (f"; similar: {hint}" if hint else "")
        )
    if up < 0 or down < 0 or max_nodes < 1:
        raise GraphError(
            f"up and down must be >= 0 and max_nodes >= 1 (got up={up}, down={down}, max_nodes={max_nodes})"
        )
    stops = {t.lower() for t in stop_types}
    distance: dict[str, int] = {op: 0}
    frontiers = {-1: [op], 1: [op]}
    limits = {-1: up, 1: down}
    adjacency = {-1: nxg.pred, 1: nxg.succ}
    truncated = False
    level = 0
    while any(frontiers.values()) and not truncated:
        level += 1
        for sign in (-1, 1):
            if level > limits[sign]:
                frontiers[sign] = []
                continue
            nxt = []
            for node in frontiers[sign]:
                if node != op and str(nxg.nodes[node]["type"]).lower() in stops:
                    continue
                for nbr in _neighbours(adjacency[sign], node, control_edges):
                    if nbr in distance:
                        continue
                    if len(distance) >= max_nodes:
                        truncated = True
                        break
                    distance[nbr] = sign * level
                    nxt.append(nbr)
                if truncated:
                    break
            frontiers[sign] = nxt
            if truncated:
                break
    sub = Subgraph(hierarchy=graph.hierarchy, source=graph.source, meta=dict(graph.meta))
    sub.center, sub.truncated, sub.up, sub.down = op, truncated, up, down
    sub.nx.add_nodes_from((n, {**nxg.nodes[n], "distance": d}) for n, d in distance.items())
    for node in distance:
        for nbr, keyed in nxg.succ[node].items():
            if nbr not in distance:
                continue
            for key, data in keyed.items():
                if control_edges or data["kind"] != "control":
                    sub.nx.add_edge(node, nbr, key=key, **data)
    if truncated:
        sub.notes.append(
            f"neighbourhood truncated to max_nodes={max_nodes}: complete up to distance {level - 1}, "
            f"partial at distance {level}; ask for smaller up/down, stop types, or a larger max_nodes"
        )
    return sub
