"""The operator graph: build it from any source, collapse it by module, query around an op, export it.

Everything here needs ``networkx`` (the ``nbprec[graph]`` extra), imported when a graph is first built.

Examples
--------
>>> from nbprec.graph import OpGraph                          # doctest: +SKIP
>>> g = OpGraph.from_dump(nbprec.open("runs/fp32"))            # doctest: +SKIP
>>> g.subgraph("Functional.linear.3.forward", up=2, down=2)   # doctest: +SKIP
"""

from __future__ import annotations

from nbprec.graph.info import NodeInfo, TensorInfo, node_info
from nbprec.graph.model import EDGE_FIELDS, NODE_FIELDS, GraphError, OpGraph, OpNotFoundError
from nbprec.graph.model_explorer import ModelExplorerExport, export_model_explorer
from nbprec.graph.subgraph import Subgraph

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
