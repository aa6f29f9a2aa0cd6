"""The operator graph: build it from any source, collapse it by module, query around an op, export it.

Everything here needs ``networkx`` (the ``nbprec[graph]`` extra), imported when a graph is first built.

Examples
--------
>>> from nbprec.graph import OpGraph                          # doctest: +SKIP
>>> g = OpGraph.from_dump(nbprec.open("runs/fp32"))            # doctest: +SKIP
>>> g.subgraph("Functional.linear.3.forward", up=2, down=2)   # doctest: +SKIP

The names below are imported on first use, so that a module of the package (:mod:`nbprec.graph.ge`, which
``nbprec compare --graph`` reads) loads without the others.
"""

from __future__ import annotations

from nbprec._lazy import lazy_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nbprec.graph.info import NodeInfo, TensorInfo, node_info
    from nbprec.graph.model import EDGE_FIELDS, NODE_FIELDS, GraphError, OpGraph, OpNotFoundError
    from nbprec.graph.model_explorer import ModelExplorerExport, export_model_explorer
    from nbprec.graph.subgraph import Subgraph

#: What this package offers, and the module each comes from (imported when first asked for).
_FROM = {
    **dict.fromkeys(("NodeInfo", "TensorInfo", "node_info"), "nbprec.graph.info"),
    **dict.fromkeys(("EDGE_FIELDS", "NODE_FIELDS", "GraphError", "OpGraph", "OpNotFoundError"), "nbprec.graph.model"),
    **dict.fromkeys(("ModelExplorerExport", "export_model_explorer"), "nbprec.graph.model_explorer"),
    "Subgraph": "nbprec.graph.subgraph",
}


__getattr__ = lazy_names(__name__, _FROM, globals())


__all__ = [
    "EDGE_FIELDS",
    "NODE_FIELDS",
    "GraphError",
    "ModelExplorerExport",
    "NodeInfo",
    "OpGraph",
    "OpNotFoundError",
    "Subgraph",
    "TensorInfo",
    "export_model_explorer",
    "node_info",
]
