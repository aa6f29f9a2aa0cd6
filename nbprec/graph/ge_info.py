"""Node info of an op of a GE graph alone (no dump at hand): type, fusion pass, original ops, tensors, neighbours.

What ``nbprec ni OP --graph ge_proto_*_Build.txt`` prints when no ``--target`` dump is given: everything the
graph itself records. With a dump, :func:`nbprec.graph.node_info` adds statistics and metrics.

Examples
--------
>>> info = node_info_from_ge("fc1/MatMul", read_ge_model("ge_proto_00000001_Build.txt"))   # doctest: +SKIP
>>> info.fusion_pass, info.original_ops                                                  # doctest: +SKIP
('MatMulBiasAddFusionPass', ['fc1/MatMul', 'fc1/BiasAdd'])
"""

from __future__ import annotations

from pathlib import Path

from nbprec.graph.ge import GeModel, graph_from_ge, read_ge_model
from nbprec.graph.info import NodeInfo, TensorInfo


def _desc_layout(desc: object, role: str) -> str:
    """``stored NC1HWC0 (1, 1, 8, 8, 16), origin NHWC; equals conv1/Relu:0`` for a GE tensor descriptor."""
    text = f"stored {desc.layout or '?'} ({', '.join(str(d) for d in desc.shape)})"
    if desc.origin_format and desc.origin_format != desc.layout:
        text += f", origin {desc.origin_format}"
    if role == "output" and desc.origin_name:
        index = desc.origin_output_index
        text += f"; equals {desc.origin_name}:{0 if index is None else index}"
    return text


def node_info_from_ge(name: str, model: GeModel) -> NodeInfo:
    """A :class:`~nbprec.graph.info.NodeInfo` of op ``name`` from what the GE graph records (no statistics)."""
    op = model.op(name)  # OpNotFoundError naming similar ops when absent
    consumers: dict[int, list[str]] = {}
    for other in model.ops:
        for src in other.inputs:
            if src.op == name and src.is_data:
                consumers.setdefault(int(src.index), []).append(other.name)
    data_inputs = [i for i in op.inputs if i.is_data]
    info = NodeInfo(
        name=op.name,
        type=op.type,
        module=op.name.rsplit("/", 1)[0] if "/" in op.name else "",
        direction="",
        order=-1 if op.id is None else int(op.id),
        fusion_pass=op.pass_name,
        original_ops=list(op.original_op_names),
    )
    for role, descs, tensors in (("input", op.input_descs, info.inputs), ("output", op.output_descs, info.outputs)):
        for k, desc in enumerate(descs):
            if role == "input":
                links = [str(data_inputs[k])] if k < len(data_inputs) else []
            else:
                links = sorted(consumers.get(k, []))
            shape = desc.origin_shape if desc.origin_shape is not None else desc.shape
            tensors.append(
                TensorInfo(
                    name=f"{name}:{role}:{k}",
                    role=role,
                    slot=str(k),
                    dtype=desc.dtype,
                    shape=tuple(shape),
                    stats={},
                    links=links,
                    layout=_desc_layout(desc, role),
                )
            )
    controls = op.control_inputs
    if controls:
        info.notes.append(f"control inputs: {', '.join(controls)}")
    info.notes.append("statistics need the dump: add --target NPU_DUMP (and --bench for metrics)")
    return info


def ge_node_info(name: str, graph: str | Path | GeModel, *, depth: int = 2) -> str:
    """The text ``nbprec ni NAME --graph GRAPH`` prints: node info and the subgraph to ``depth``."""
    model = graph if isinstance(graph, GeModel) else read_ge_model(graph)
    lines = [node_info_from_ge(name, model).to_text()]
    sub = graph_from_ge(model).subgraph(name, up=depth, down=depth)
    lines.append(f"  subgraph (depth {depth}): {len(sub)} ops, {sub.nx.number_of_edges()} edges")
    for node, dist in sorted(sub.nx.nodes(data="distance"), key=lambda nd: (nd[1], nd[0])):
        data = sub.nx.nodes[node]
        fused = f", fused: {data['fusion'].get('pass_name') or '-'}" if data.get("fusion") else ""
        lines.append(f"    {dist:+d}  {node}  ({data['type']}{fused})")
    return "\n".join(lines)


__all__ = ["ge_node_info", "node_info_from_ge"]
