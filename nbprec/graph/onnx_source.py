"""Build an :class:`~nbprec.graph.model.OpGraph` from an ONNX model (needs the ``onnx`` package, extra ``onnx``).

Nodes are the ONNX nodes of the main graph (named by ``node.name``, or ``{op_type}_{i}`` when unnamed),
with their attributes as plain values. Edges join the node producing a value to each node consuming it
(slot = input position); graph inputs and initializers (weights) produce nothing and are not ops. The
module path comes from exporter-style names (``/enc/layers.0/self_attn/MatMul`` -> ``enc.layers.0.self_attn``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.graph.model import GraphError, OpGraph


def module_from_name(name: str) -> str:
    """The module path of an exporter-style ONNX node name.

    Examples
    --------
    >>> module_from_name("/enc/layers.0/self_attn/MatMul_1")
    'enc.layers.0.self_attn'
    >>> module_from_name("MatMul_1")
    ''
    """
    parts = [p for p in name.split("/") if p]
    return ".".join(parts[:-1]) if name.startswith("/") and len(parts) > 1 else ""


def _attribute(onnx: Any, attr: Any) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for v in value
            if isinstance(v, (int, float, str, bytes))
        ]
    if isinstance(value, (int, float, str)):
        return value
    return f"<{type(value).__name__}>"  # tensors and subgraphs: named, not embedded


def graph_from_onnx(path: str | Path) -> OpGraph:
    """The operator graph of the ONNX model at ``path`` (external weight data is not loaded).

    Examples
    --------
    >>> g = graph_from_onnx("model.onnx")  # doctest: +SKIP
    >>> g.consumers("/enc/layers.0/linear1/Gemm")  # doctest: +SKIP
    """
    onnx = require("onnx", "reading ONNX models", extra="onnx")
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, OSError, ... depending on the damage
        raise GraphError(f"{path}: cannot read the ONNX model: {type(exc).__name__}: {exc}") from exc
    nodes, producer, names = [], {}, set()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in names:
            name += f"#{i}"
        names.add(name)
        attrs = {a.name: _attribute(onnx, a) for a in node.attribute}
        if node.domain:
            attrs["domain"] = node.domain
        nodes.append({"name": name, "type": node.op_type, "module": module_from_name(name), "order": i, "attrs": attrs})
        for out in node.output:
            if out:
                producer[out] = name
    edges = []
    for i, node in enumerate(model.graph.node):
        dst = nodes[i]["name"]
        for slot, value in enumerate(node.input):
            src = producer.get(value)
            if src is not None and src != dst:
                edges.append({"src": src, "dst": dst, "tensor": value, "dst_tensor": value, "slot": str(slot)})
    meta = {"path": str(path), "producer": model.producer_name, "opset": [o.version for o in model.opset_import]}
    return OpGraph.from_records(nodes, edges, source="onnx", meta=meta)
