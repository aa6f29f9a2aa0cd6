"""Hook for GE graphs (Ascend ``ge_proto_*_Build.txt``, FORMATS.md section 4): to be filled by the Ascend issue.

A GE reader should parse the ``ModelDef`` (protobuf text or its JSON form) and call
:meth:`nbprec.graph.model.OpGraph.from_records` with:

- one node record per ``op``: ``name``, ``type``, ``attrs`` (the attribute map as plain values), ``order``
  (the op ``id``) and ``fusion`` = ``{"pass_name": ..., "original_ops": [...]}`` from the
  ``pass_name`` / ``_datadump_original_op_names`` attributes when present;
- one edge record per ``input: "src_op:idx"``: ``src``, ``dst``, ``slot`` (the input position),
  ``tensor`` (``"src_op:idx"``), ``kind="control"`` when ``idx`` is ``-1``, ``inferred=False``.

Every export, subgraph query and node info then works unchanged (fused ops are drawn as diamonds).
"""

from __future__ import annotations

from pathlib import Path

from nbprec.graph.model import GraphError, OpGraph


def graph_from_ge(path: str | Path) -> OpGraph:
    """Not implemented yet: GE graph dumps are read by the Ascend issue (see the module docstring)."""
    raise GraphError(
        f"{path}: reading GE graphs (ge_proto_*_Build.txt) is not implemented yet; it arrives with Ascend support. "
        "Build the graph from the dump (OpGraph.from_dump) or from an ONNX export (OpGraph.from_onnx) meanwhile"
    )
