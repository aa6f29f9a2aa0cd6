"""Collapse an operator graph into module blocks, and roll comparison results up to them.

A node's *block at depth d* is the module call ``d`` levels below the top that encloses it (from the graph's
hierarchy; from its module path when the source has no hierarchy). A node less deep than ``d`` stands for
itself. A block's metrics are the worst inside it: lowest cosine, highest RED and max error, status ``fail``
if any member fails.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from nbprec.graph.model import OpGraph

_MODULE_PREFIXES = ("Module", "Cell")
_DIRECTIONS = ("forward", "backward")
PSEUDO_PREFIX = "module:"


def describe_module_call(call: str) -> dict[str, str]:
    """Path, class, direction and a short label of a module call name.

    Examples
    --------
    >>> describe_module_call("Module.enc.layers.0.TransformerEncoderLayer.forward.0")["label"]
    'enc.layers.0 (TransformerEncoderLayer)'
    >>> describe_module_call("module:enc.layers.0")["label"]
    'enc.layers.0'
    """
    if call.startswith(PSEUDO_PREFIX):
        path = call[len(PSEUDO_PREFIX) :]
        return {"path": path, "class": "", "direction": "", "label": path}
    parts = call.split(".")
    if parts[0] in _MODULE_PREFIXES and len(parts) >= 4 and parts[-2] in _DIRECTIONS and parts[-1].isdigit():
        path, cls, direction = ".".join(parts[1:-3]), parts[-3], parts[-2]
        label = f"{path} ({cls})" if path else cls
        if direction == "backward":
            label += " backward"
        return {"path": path, "class": cls, "direction": direction, "label": label}
    return {"path": call, "class": "", "direction": "", "label": call}


def path_chain(module: str) -> list[str]:
    """Pseudo module calls for a dotted module path (a numeric part stays with its parent).

    Examples
    --------
    >>> path_chain("enc.layers.0.linear1")
    ['module:enc', 'module:enc.layers.0', 'module:enc.layers.0.linear1']
    """
    parts: list[str] = []
    for part in module.split(".") if module else []:
        if part.isdigit() and parts:
            parts[-1] += f".{part}"
        else:
            parts.append(part)
    return [PSEUDO_PREFIX + ".".join(parts[: i + 1]) for i in range(len(parts))]


def module_chains(graph: OpGraph) -> dict[str, list[str]]:
    """Every node's enclosing module calls, outermost first (hierarchy, else its module path)."""
    cache: dict[str | None, list[str]] = {None: []}

    def chain_of(call: str | None, seen: frozenset[str] = frozenset()) -> list[str]:
        if call in cache:
            return cache[call]
        assert call is not None
        parent = graph.hierarchy.get(call)
        head = [] if parent is None or parent in seen else chain_of(parent, seen | {call})
        cache[call] = [*head, call]
        return cache[call]

    chains = {}
    for node, module in graph.nx.nodes(data="module"):
        parent = graph.hierarchy.get(node)
        chains[node] = chain_of(parent) if parent is not None else path_chain(module or "")
    return chains


def block_of(graph: OpGraph, depth: int = 1, expand: Iterable[str] = ()) -> dict[str, str]:
    """Node -> the block standing for it at ``depth`` (itself when it is less deep).

    Blocks named in ``expand`` are opened one more level (repeatedly).
    """
    if depth < 1:
        return {n: n for n in graph.nx}
    opened = set(expand)
    result = {}
    for node, chain in module_chains(graph).items():
        level = depth
        while level <= len(chain) and chain[level - 1] in opened:
            level += 1
        result[node] = chain[level - 1] if level <= len(chain) else node
    return result


def _worst(values: list[Any], how: str) -> Any:
    known = [v for v in values if v is not None and v == v]
    if not known:
        return None
    return min(known) if how == "min" else max(known)


def _rollup(members: list[dict[str, Any]]) -> dict[str, Any]:
    statuses = {m.get("status", "n/a") for m in members}
    status = "fail" if "fail" in statuses else "pass" if "pass" in statuses else "n/a"
    origins = [m.get("origin", "") for m in members]
    origin = next((o for o in ("introduced", "random", "inherited") if o in origins), "")
    matched_flags = [m.get("matched") for m in members if m.get("matched") is not None]
    return {
        "status": status,
        "cosine": _worst([m.get("cosine") for m in members], "min"),
        "in_cosine": _worst([m.get("in_cosine") for m in members], "min"),
        "rel_euclidean": _worst([m.get("rel_euclidean") for m in members], "max"),
        "max_abs_err": _worst([m.get("max_abs_err") for m in members], "max"),
        "origin": origin,
        "matched": all(matched_flags) if matched_flags else None,
        "failing_members": sum(1 for m in members if m.get("status") == "fail"),
        "unmatched_members": sum(1 for f in matched_flags if not f),
        "fused_members": sum(1 for m in members if m.get("fusion")),
    }


def collapse(graph: OpGraph, depth: int = 1, expand: Iterable[str] = ()) -> OpGraph:
    """The graph of module blocks ``depth`` levels down, with metrics rolled up.

    Parameters
    ----------
    graph
        The op graph (attach metrics first to have them rolled up).
    depth
        1 shows the top-level modules, 2 their children, ...; 0 returns every op.
    expand
        Block names to open one level deeper than ``depth``.

    Returns
    -------
    OpGraph
        Nodes are blocks (``kind="block"``, ``members`` = op count, rolled-up metrics, ``attrs["label"]``)
        and ops shallower than ``depth``; edges join blocks (``attrs`` ``count`` = edges merged). The
        members of each block are in ``meta["members"]``.

    Examples
    --------
    >>> blocks = graph.collapse(depth=2)                    # doctest: +SKIP
    >>> blocks.op("Module.enc.layers.0.TransformerEncoderLayer.forward.0")["status"]  # doctest: +SKIP
    'fail'
    """
    nxg = graph.nx
    owner = block_of(graph, depth, expand)
    members: dict[str, list[str]] = defaultdict(list)
    for node, block in owner.items():
        members[block].append(node)
    out = OpGraph(hierarchy=graph.hierarchy, source=graph.source, notes=graph.notes, meta=dict(graph.meta))
    for block, names in members.items():
        if len(names) == 1 and names[0] == block:
            out.nx.add_node(block, **nxg.nodes[block])
            continue
        datas = [nxg.nodes[n] for n in names]
        info = describe_module_call(block)
        types = sorted({d["type"] for d in datas})
        out.nx.add_node(
            block,
            kind="block",
            type=info["class"] or "module",
            module=info["path"],
            direction=info["direction"] or datas[0]["direction"],
            order=min(d["order"] for d in datas),
            attrs={"label": info["label"], "op_types": types[:20]},
            fusion=None,
            members=len(names),
            **_rollup(datas),
        )
    merged: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for u, v, d in nxg.edges(data=True):
        bu, bv = owner[u], owner[v]
        if bu != bv:
            merged[(bu, bv, d["kind"])].append(d)
    for (bu, bv, kind), datas in merged.items():
        first = datas[0]
        edge = {
            "kind": kind,
            "tensor": first["tensor"],
            "dst_tensor": first["dst_tensor"],
            "slot": first["slot"] if len(datas) == 1 else "",
            "inferred": all(d["inferred"] for d in datas),
            "match": first["match"],
            "count": len(datas),
        }
        if any("status" in d for d in datas):
            edge.update(
                {k: v for k, v in _rollup(datas).items() if k in ("status", "cosine", "rel_euclidean", "max_abs_err")}
            )
        out.nx.add_edge(bu, bv, key=kind, **edge)
    out.meta.update({"collapsed_depth": depth, "members": dict(members), "expanded": sorted(set(expand))})
    return out
