"""The graphs Model Explorer shows, read the way Model Explorer reads them: node ids, labels and namespaces.

Node data only lands on a node when its key is the node id Model Explorer gave that node, so each reader here
assigns ids, labels and namespaces by the rules of the Model Explorer adapter that opens that kind of model
(format facts from google-ai-edge/model-explorer and justinchuby/model-explorer-onnx, re-implemented):

- **PyTorch exported program** (Model Explorer's built-in adapter, a ``.pt2`` file): one graph, id ``"graph"``;
  node id = the fx node's name; label = the aten overload packet (``aten.linear``), ``getitem`` for getitem
  nodes, else the target; namespace = one ``{module class}_{last part of the module path}`` component per
  ``nn_module_stack`` entry (the root has no ``_`` suffix), ``inputs`` for placeholders.
- **ONNX** (the ``model-explorer-onnx`` adapter): graph id = the main graph's name (``<main>`` when it has
  none); node id = the node's name (``<node_{i}>`` when unnamed); namespace = the graph id followed by the
  node's ``namespace`` metadata when present (the torch.export-based exporter writes it), else by the ``/``
  scopes of its exporter-style name without the last part (``/layers.0/attn/MatMul`` -> ``layers.0/attn``).
- **GE graphs** and **nbprec's own operator graph** have no Model Explorer adapter: nbprec writes their graph
  JSON itself; node id = the op name (as the dumps name ops); namespace = the ``/`` scopes of a GE op name,
  the module-call hierarchy of a captured op.

Each reader also records, per node, what matching nbprec's ops needs: the module path the node ran in, its op
kind, and its *unit* (the nodes one framework call became: a decomposed ``linear`` is view, permute, addmm,
view; the unit's last node holds the call's output).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.graph.model import GraphError

#: ONNX op types that only shuffle constants and shapes: never the node of a framework call.
ONNX_HELPER_TYPES = frozenset({"Constant", "ConstantOfShape", "Identity", "Shape", "Size"})
_FX_TARGET = re.compile(r"target=(?:torch\.ops\.)?(?:aten|prims)\.(\w+)")


@dataclass
class TargetNode:
    """One node of a graph Model Explorer shows.

    Attributes
    ----------
    id, label, namespace : str
        As Model Explorer has them (see the module doc).
    graph : str
        The id of the graph the node belongs to.
    module : str
        Dotted module path the node ran in (``layers.0.attn``), ``""`` at the top or when unknown.
    kind : str
        The framework op kind for matching: the torch function (``linear``), the aten op, or the ONNX op type.
    unit : str
        Nodes sharing a unit came from one framework call; ``""`` when each node is its own unit.
    order : int
        Position in the graph (topological for fx and ONNX).
    matchable : bool
        False for inputs, parameters, constants and outputs: no op of a dump can be them.
    inputs : list of (source id, source output id, input id)
        Incoming edges, as Model Explorer's ``incomingEdges``.
    attrs : dict
        Attributes shown in Model Explorer's side panel (graph JSON only).
    outputs : list of dict
        Per output ``{"id", "attrs"}``, as ``outputsMetadata`` (graph JSON only).
    """

    id: str
    label: str
    namespace: str
    graph: str
    module: str = ""
    kind: str = ""
    unit: str = ""
    order: int = 0
    matchable: bool = True
    inputs: list[tuple[str, str, str]] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    outputs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TargetGraph:
    """The nodes of the graph(s) of one model as Model Explorer shows them.

    Attributes
    ----------
    source : str
        ``"exported_program"``, ``"onnx"``, ``"ge"`` or ``"nbprec"``.
    nodes : list of TargetNode
    by_name : bool
        True when node ids are the op names of the dump (GE, nbprec): ops match by name, not by module and order.
    kinds : str
        The kind vocabulary of :attr:`TargetNode.kind`: ``"torch"``, ``"onnx"`` or ``""`` (matched by name).
    namespace_modules : dict
        Namespace -> module path or module call it stands for (for module roll-ups).
    model_file : str
        A file Model Explorer opens with its own adapter (``.pt2``, ``.onnx``), ``""`` when there is none.
    notes : list of str
    """

    source: str
    nodes: list[TargetNode]
    by_name: bool = False
    kinds: str = ""
    namespace_modules: dict[str, str] = field(default_factory=dict)
    model_file: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def graph_ids(self) -> list[str]:
        """The graph ids, in order of first appearance."""
        return list(dict.fromkeys(n.graph for n in self.nodes))


# -- PyTorch exported programs ----------------------------------------------------------------------------
def _class_name(layer: Any) -> str:
    if isinstance(layer, str):
        return layer
    module = getattr(layer, "__module__", "")
    name = getattr(layer, "__qualname__", str(layer))
    return name if module in ("", "builtins") else f"{module}.{name}"


def _fx_label(node: Any) -> str:
    target = node.target
    if hasattr(target, "overloadpacket"):
        return str(target.overloadpacket)
    if type(target).__name__ == "builtin_function_or_method":  # operator.getitem
        return "getitem"
    return str(target)


def _fx_kind(node: Any) -> str:
    torch_fn = node.meta.get("torch_fn")
    if isinstance(torch_fn, (tuple, list)) and len(torch_fn) == 2:
        return str(torch_fn[1]).rsplit(".", 1)[-1]
    target = node.target
    if hasattr(target, "overloadpacket"):
        return str(target.overloadpacket).rsplit(".", 1)[-1]
    return getattr(target, "__name__", str(target))


def load_exported_program(source: Any, inputs: Any = None) -> Any:
    """An ``ExportedProgram`` from a program, a saved ``.pt2`` file, or an ``nn.Module`` and its inputs.

    ``inputs`` is the positional arguments (a tuple, or one tensor) or the keyword arguments (a dict) to
    export the module with; the program is ``torch.export.export(module, args, kwargs=kwargs)``.
    """
    torch = require("torch", "exporting a PyTorch model for Model Explorer", extra="torch")
    if isinstance(source, torch.export.ExportedProgram):
        return source
    if isinstance(source, (str, Path)):
        try:
            return torch.export.load(str(source))
        except Exception as exc:  # torch raises many kinds for a file that is not a saved program
            raise GraphError(f"{source}: cannot load the exported program: {type(exc).__name__}: {exc}") from exc
    if isinstance(source, torch.nn.Module):
        if inputs is None:
            raise GraphError("exporting a module needs its example inputs (inputs=(args...) or inputs={kwargs})")
        args, kwargs = ((), dict(inputs)) if isinstance(inputs, dict) else (inputs, {})
        if not isinstance(args, tuple):
            args = tuple(args) if isinstance(args, list) else (args,)
        try:
            return torch.export.export(source, args, kwargs=kwargs)
        except Exception as exc:  # export failures come in many types; name the model
            raise GraphError(
                f"torch.export.export({type(source).__name__}) failed: {type(exc).__name__}: {exc}"
            ) from exc
    raise GraphError(
        f"target 'exported_program' needs a torch.export.ExportedProgram, a .pt2 path or an nn.Module with inputs, "
        f"not {type(source).__name__}"
    )


def from_exported_program(program: Any) -> TargetGraph:
    """The graph Model Explorer's PyTorch adapter shows for ``program`` (graph id ``"graph"``)."""
    nodes: list[TargetNode] = []
    namespace_modules: dict[str, str] = {}
    for order, fx in enumerate(program.graph.nodes):
        stack = fx.meta.get("nn_module_stack") or {}
        if fx.op == "placeholder":
            namespace, module = "inputs", ""
        else:
            parts, prefix = [], []
            for path, layer in stack.values():
                suffix = "_" + path.split(".")[-1] if path else ""
                parts.append(_class_name(layer) + suffix)
                prefix.append(parts[-1])
                namespace_modules.setdefault("/".join(prefix), path)
            namespace = "/".join(parts)
            module = list(stack.values())[-1][0] if stack else ""
        torch_fn = fx.meta.get("torch_fn")
        unit = "|".join(map(str, torch_fn)) if isinstance(torch_fn, (tuple, list)) else ""
        inputs = []
        for slot, src in enumerate(fx.all_input_nodes):
            out = next((str(i) for i, user in enumerate(src.users) if user is fx), "0")
            inputs.append((src.name, out, str(slot)))
        outputs = []
        val = fx.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        for i, v in enumerate(vals):
            if hasattr(v, "dtype") and hasattr(v, "shape"):
                shape = [int(d) if str(d).isdigit() else str(d) for d in v.shape]
                outputs.append({"id": str(i), "attrs": {"tensor_shape": f"{v.dtype}{shape}"}})
        nodes.append(
            TargetNode(
                id=fx.name,
                label=_fx_label(fx),
                namespace=namespace,
                graph="graph",
                module=module,
                kind=_fx_kind(fx),
                unit=unit,
                order=order,
                matchable=fx.op == "call_function",
                inputs=inputs,
                attrs={"target": str(fx.target)},
                outputs=outputs,
            )
        )
    return TargetGraph("exported_program", nodes, kinds="torch", namespace_modules=namespace_modules)


# -- ONNX --------------------------------------------------------------------------------------------------
def _name_scopes(name: str) -> list[str]:
    return [p for p in name.strip("/").split("/") if p]


def _onnx_node_module(name: str, meta: dict[str, str]) -> tuple[str, str, str]:
    """(module path, unit, fx kind) of an ONNX node, from the torch exporter's metadata or its name."""
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            parts = [str(p) for p in ast.literal_eval(scopes)]
        except (ValueError, SyntaxError):
            parts = []
        if parts:
            found = _FX_TARGET.search(meta.get("pkg.torch.onnx.fx_node", ""))
            return (parts[-2] if len(parts) > 1 else ""), parts[-1], found.group(1) if found else ""
    scopes_of_name = _name_scopes(name) if name.startswith("/") else []
    return ".".join(scopes_of_name[:-1]), "", ""


def from_onnx(source: Any) -> TargetGraph:
    """The main graph of an ONNX model (a path or a ``ModelProto``) as the model-explorer-onnx adapter shows it.

    Module paths come from the torch exporter's ``pkg.torch.onnx.name_scopes`` metadata (whose last entry, the
    fx node, is the unit), else from exporter-style names (``/layers.0/attn/query/MatMul``).
    """
    onnx = require("onnx", "reading ONNX models", extra="onnx")
    path = ""
    if isinstance(source, (str, Path)):
        path = str(source)
        try:
            source = onnx.load(path, load_external_data=False)
        except Exception as exc:  # DecodeError, OSError, ... depending on the damage
            raise GraphError(f"{path}: cannot read the ONNX model: {type(exc).__name__}: {exc}") from exc
    graph = source.graph
    graph_id = graph.name or "<main>"
    notes = [] if graph.name else ["the ONNX main graph has no name: Model Explorer's ONNX adapter calls it <main>"]
    producer: dict[str, tuple[str, str]] = {}
    ids = [node.name or f"<node_{i}>" for i, node in enumerate(graph.node)]
    for node_id, node in zip(ids, graph.node, strict=True):
        for k, out in enumerate(node.output):
            if out:
                producer[out] = (node_id, str(k))
    nodes, namespace_modules = [], {}
    for order, (node_id, node) in enumerate(zip(ids, graph.node, strict=True)):
        meta = {p.key: p.value for p in node.metadata_props}
        module, unit, fx_kind = _onnx_node_module(node.name, meta)
        if "namespace" in meta:
            scopes = _name_scopes(meta["namespace"])
        else:
            scopes = _name_scopes(node.name)[:-1] if node.name else []
        namespace = "/".join([graph_id, *scopes])
        if not unit:  # exporter-style names: each scope prefix is one module path
            for i in range(1, len(scopes) + 1):
                namespace_modules.setdefault("/".join([graph_id, *scopes[:i]]), ".".join(scopes[:i]))
        inputs = [(*producer[v], str(slot)) for slot, v in enumerate(node.input) if v in producer]
        label = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        outputs = [{"id": str(k), "attrs": {"__tensor_tag": out}} for k, out in enumerate(node.output) if out]
        nodes.append(
            TargetNode(
                id=node_id,
                label=label,
                namespace=namespace,
                graph=graph_id,
                module=module,
                kind=fx_kind or node.op_type,
                unit=unit,
                order=order,
                matchable=node.op_type not in ONNX_HELPER_TYPES,
                inputs=inputs,
                attrs={"op_type": node.op_type, **({"domain": node.domain} if node.domain else {})},
                outputs=outputs,
            )
        )
    kinds = "torch" if any(n.unit for n in nodes) else "onnx"
    return TargetGraph("onnx", nodes, kinds=kinds, namespace_modules=namespace_modules, model_file=path, notes=notes)


# -- GE graphs and nbprec's own graph ----------------------------------------------------------------------
def from_ge(source: Any) -> TargetGraph:
    """Every graph of a GE graph dump (a path or a ``GeModel``): graph id = the GE graph's name, node id = op name."""
    from nbprec.graph.ge import GeModel, read_ge_model

    model = source if isinstance(source, GeModel) else read_ge_model(source)
    nodes, namespace_modules = [], {}
    for graph in model.graphs:
        names = {op.name for op in graph.ops}
        for order, op in enumerate(graph.ops):
            scopes = [p for p in op.name.split("/")[:-1] if p]
            for i in range(1, len(scopes) + 1):
                namespace_modules.setdefault("/".join(scopes[:i]), "/".join(scopes[:i]))
            inputs = [(i.op, str(i.index), str(slot)) for slot, i in op.data_inputs if i.op in names]
            attrs = {"type": op.type}
            if op.pass_name:
                attrs["fusion pass"] = op.pass_name
                attrs["original ops"] = ", ".join(op.original_op_names)
            outputs = [
                {"id": str(k), "attrs": {"tensor_shape": f"{d.dtype}{list(d.shape)}", "format": d.layout}}
                for k, d in enumerate(op.output_descs)
            ]
            nodes.append(
                TargetNode(
                    id=op.name,
                    label=op.type or op.name,
                    namespace="/".join(scopes),
                    graph=graph.name or model.name or "graph",
                    module="/".join(scopes),
                    kind=op.type,
                    order=order,
                    inputs=inputs,
                    attrs=attrs,
                    outputs=outputs,
                )
            )
    notes = [f"GE graph: {p}" for p in model.problems[:20]]
    return TargetGraph("ge", nodes, by_name=True, namespace_modules=namespace_modules, notes=notes)


def _call_component(call: str, parent_path: str) -> str:
    """A readable namespace component for a module call: ``attn (SelfAttention)``, ``#n`` for later calls."""
    from nbprec.graph.hierarchy import describe_module_call

    info = describe_module_call(call)
    path = info["path"]
    leaf = path[len(parent_path) + 1 :] if parent_path and path.startswith(parent_path + ".") else path
    text = f"{leaf} ({info['class']})" if leaf and info["class"] else leaf or info["class"] or call
    if info["direction"] == "backward":
        text += " backward"
    n = call.rsplit(".", 1)[-1]
    if n.isdigit() and n != "0":
        text += f" #{n}"
    return text.replace("/", "\\/")  # Model Explorer splits namespaces at unescaped slashes


def _op_label(name: str) -> str:
    parts = name.split(".")
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        label = ".".join(parts[1:-1])
        return label + (" backward" if parts[-1] == "backward" else "")
    return name


def from_op_graph(graph: Any, graph_id: str = "nbprec") -> TargetGraph:
    """nbprec's operator graph (:class:`~nbprec.graph.OpGraph` of a dump): node id = op name, namespaces from
    the module-call hierarchy (``TinyEncoder/layers.0 (EncoderLayer)/attn (SelfAttention)``)."""
    from nbprec.graph.hierarchy import describe_module_call, module_chains

    chains = module_chains(graph)
    component_cache: dict[tuple[str, str], str] = {}
    namespace_modules: dict[str, str] = {}
    nodes = []
    for name, data in graph.nx.nodes(data=True):
        parts, parent_path = [], ""
        for call in chains.get(name, []):
            key = (call, parent_path)
            if key not in component_cache:
                component_cache[key] = _call_component(call, parent_path)
            parts.append(component_cache[key])
            namespace_modules.setdefault("/".join(parts), call)
            parent_path = describe_module_call(call)["path"]
        inputs = []
        for src, _, edge in graph.nx.in_edges(name, data=True):
            if edge.get("kind") == "control":
                continue
            tensor = edge.get("tensor", "")
            out = tensor.rsplit(".", 1)[-1] if ".output." in tensor else "0"
            inputs.append((src, out, str(edge.get("slot", "0"))))
        inputs.sort(key=lambda e: (len(e[2]), e[2]))
        attrs = {"type": str(data.get("type", "")), "module": str(data.get("module", ""))}
        if data.get("direction"):
            attrs["direction"] = str(data["direction"])
        nodes.append(
            TargetNode(
                id=name,
                label=_op_label(name) if graph.source != "ge" else str(data.get("type") or name),
                namespace="/".join(parts),
                graph=graph_id,
                module=str(data.get("module", "")),
                kind=str(data.get("type", "")),
                order=int(data.get("order", -1)),
                inputs=inputs,
                attrs=attrs,
            )
        )
    nodes.sort(key=lambda n: (n.order, n.id))
    return TargetGraph("nbprec", nodes, by_name=True, namespace_modules=namespace_modules, notes=list(graph.notes))
