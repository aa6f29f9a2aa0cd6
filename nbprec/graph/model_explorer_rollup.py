"""Module-level roll-ups for Model Explorer, and the graph JSON that carries them.

Model Explorer rolls node data up to layers itself, but only in ways that suit some metrics: a collapsed layer
shows a bar of its ops' colours (and, for text values such as the status, how many ops have each value), and
the side panel gives min/max/avg of a selected layer's ops. What it cannot show is nbprec's verdict per module
(how many ops fail, whether one introduced the error, which fails first) on the layer itself: node-data
results keyed by a layer's id are not drawn (only op nodes are coloured). So the roll-ups go where Model
Explorer does draw them, in the graph JSON nbprec writes: each layer's ``groupNodeAttributes`` (shown when the
layer is selected) and a ``groupNodeConfigs`` border colour for failing layers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbprec.graph.exports import MISSING_COLOR
from nbprec.graph.model_explorer_match import OpMatch
from nbprec.graph.model_explorer_targets import TargetGraph

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from nbprec.compare import Comparison

_NS_SPLIT = re.compile(r"(?<!\\)/")
_REGEX_SPECIAL = re.compile(r"([.*+?^${}()|\[\]\\])")
_RANK = {"introduced": 4, "fail": 3, "explained": 2, "pass": 1, "n/a": 0}
#: Status values and their colours (nbprec's scale: red for failing, green for passing, grey for no verdict).
STATUS_COLORS = {
    "introduced": "#a50026",
    "fail": "#f46d43",
    "explained": "#fee08b",
    "pass": "#1a9850",
    "n/a": MISSING_COLOR,
}


def op_status(row: Any) -> str:
    """The status value of one ``Comparison.ops`` row: ``introduced`` (it fails and introduced the error),
    ``fail`` (it fails otherwise), ``explained`` (a failure explained by randomness or a discontinuous op),
    ``pass``, or ``n/a`` (not judged: no benchmark counterpart, no metric)."""
    if row["status"] == "fail":
        if bool(row.get("explained", False)):
            return "explained"
        return "introduced" if row.get("origin") == "introduced" else "fail"
    return "pass" if row["status"] == "pass" else "n/a"


def _prefixes(namespace: str) -> list[str]:
    parts = [p for p in _NS_SPLIT.split(namespace) if p] if namespace else []
    return ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def module_rollups(ops: pd.DataFrame, match: OpMatch, graph: TargetGraph) -> list[dict[str, Any]]:
    """One row per layer (namespace) holding matched ops, outermost first; ``""`` is the whole graph.

    Each row: ``namespace``, ``graph``, ``module`` (the module path or module call the layer stands for),
    ``ops``, ``introduced``, ``failing`` (unexplained failures, introduced included), ``explained``,
    ``passing``, ``worst_cosine``, ``max_rel_euclidean``, ``max_abs_err``, ``first_failing_op``, ``status``
    (the worst op status inside), ``order`` (of its first op), ``summary`` (one line of text), and the
    comparison of the module call itself where the dump recorded one (``module_call``,
    ``module_output_cosine``, ``module_output_status``).
    """
    from nbprec.graph.build import is_module_call

    records = ops.to_dict("records")
    calls: dict[str, dict[str, Any]] = {}  # module path and module call name -> the module call's own row
    for row in records:
        if is_module_call(str(row["op"])) and row.get("direction") != "backward":
            calls.setdefault(str(row["module"]), row)
            calls.setdefault(str(row["op"]), row)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in records:
        node = match.nodes.get(row["op"])
        if node is None:
            continue
        status = op_status(row)
        cosine, red, err = (_finite(row.get(c)) for c in ("out_cosine", "out_rel_euclidean", "out_max_abs_err"))
        for ns in _prefixes(node.namespace):
            r = rows.get((node.graph, ns))
            if r is None:
                r = rows[(node.graph, ns)] = {
                    "namespace": ns,
                    "graph": node.graph,
                    "module": graph.namespace_modules.get(ns, ""),
                    "ops": 0,
                    "introduced": 0,
                    "failing": 0,
                    "explained": 0,
                    "passing": 0,
                    "worst_cosine": None,
                    "max_rel_euclidean": None,
                    "max_abs_err": None,
                    "first_failing_op": None,
                    "status": "n/a",
                    "order": int(row["order"]),
                }
            r["ops"] += 1
            r["introduced"] += status == "introduced"
            r["failing"] += status in ("introduced", "fail")
            r["explained"] += status == "explained"
            r["passing"] += status == "pass"
            if status in ("introduced", "fail") and r["first_failing_op"] is None:
                r["first_failing_op"] = row["op"]  # ops come in execution order
            if _RANK[status] > _RANK[r["status"]]:
                r["status"] = status
            if cosine is not None and (r["worst_cosine"] is None or cosine < r["worst_cosine"]):
                r["worst_cosine"] = cosine
            for key, value in (("max_rel_euclidean", red), ("max_abs_err", err)):
                if value is not None and (r[key] is None or value > r[key]):
                    r[key] = value
    out = sorted(
        rows.values(), key=lambda r: (r["graph"], r["namespace"].count("/") if r["namespace"] else -1, r["order"])
    )
    for r in out:
        call = calls.get(r["module"]) if r["namespace"] else None
        r["module_call"] = None if call is None else str(call["op"])
        r["module_output_cosine"] = None if call is None else _finite(call.get("out_cosine"))
        r["module_output_status"] = None if call is None else op_status(call)
        text = f"{r['failing']} of {r['ops']} ops fail"
        if r["introduced"]:
            text += f" ({r['introduced']} introduced)"
        if r["explained"]:
            text += f", {r['explained']} explained"
        r["summary"] = text
    return out


def _js_regex_literal(text: str) -> str:
    """``^text$`` with every character that is special in a JavaScript regular expression escaped."""
    return "^" + _REGEX_SPECIAL.sub(r"\\\1", text) + "$"


def _layer_attrs(row: dict[str, Any]) -> dict[str, str]:
    attrs = {
        "nbprec status": row["status"],
        "nbprec ops": row["summary"],
        "nbprec worst cosine": _fmt(row["worst_cosine"]),
        "nbprec max RED": _fmt(row["max_rel_euclidean"]),
        "nbprec max abs err": _fmt(row["max_abs_err"]),
    }
    if row["first_failing_op"]:
        attrs["nbprec first failing op"] = row["first_failing_op"]
    if row["module"]:
        attrs["nbprec module"] = row["module"]
    if row["module_call"]:
        if row["module_call"] != row["module"]:
            attrs["nbprec module call"] = row["module_call"]
        attrs["nbprec module output"] = f"{row['module_output_status']}, cosine {_fmt(row['module_output_cosine'])}"
    return attrs


def _node_attrs(node: Any, row: dict[str, Any] | None) -> list[dict[str, str]]:
    attrs = dict(node.attrs)
    if row is not None:
        attrs["nbprec op"] = row["op"]
        attrs["nbprec status"] = op_status(row)
        if row.get("origin"):
            attrs["nbprec origin"] = str(row["origin"])
        for key, column in (("cosine", "out_cosine"), ("RED", "out_rel_euclidean"), ("max abs err", "out_max_abs_err")):
            attrs[f"nbprec {key}"] = _fmt(_finite(row.get(column)))
        if row.get("bench_op"):
            attrs["nbprec bench op"] = str(row["bench_op"])
    return [{"key": k, "value": str(v)} for k, v in attrs.items()]


def write_graph_json(
    path: Path,
    graph: TargetGraph,
    ops: pd.DataFrame,
    match: OpMatch,
    modules: list[dict[str, Any]],
    comparison: Comparison,
    *,
    label: str = "nbprec",
) -> None:
    """Write ``graph`` as a Model Explorer graph collection (``{"label", "graphs": [...]}``) with the roll-ups."""
    by_node = {(n.graph, n.id): row for row in ops.to_dict("records") if (n := match.nodes.get(row["op"]))}
    graphs: dict[str, dict[str, Any]] = {}
    ids: dict[str, set[str]] = {}
    for node in graph.nodes:
        ids.setdefault(node.graph, set()).add(node.id)
    for node in graph.nodes:
        g = graphs.setdefault(node.graph, {"id": node.graph, "nodes": []})
        known = ids[node.graph]
        entry: dict[str, Any] = {
            "id": node.id,
            "label": node.label,
            "namespace": node.namespace,
            "incomingEdges": [
                {"sourceNodeId": s, "sourceNodeOutputId": o, "targetNodeInputId": t}
                for s, o, t in node.inputs
                if s in known
            ],
            "attrs": _node_attrs(node, by_node.get((node.graph, node.id))),
        }
        if node.outputs:
            entry["outputsMetadata"] = [
                {"id": o["id"], "attrs": [{"key": k, "value": str(v)} for k, v in o["attrs"].items()]}
                for o in node.outputs
            ]
        g["nodes"].append(entry)
    verdict = comparison.verdict().text
    for graph_id, g in graphs.items():
        layer_rows = [m for m in modules if m["graph"] == graph_id]
        attrs = {m["namespace"]: _layer_attrs(m) for m in layer_rows}
        attrs.setdefault("", {})
        attrs[""] = {
            "nbprec verdict": verdict,
            "nbprec rule": comparison.rule.describe(),
            "nbprec target": str(comparison.meta.get("target", "")),
            "nbprec bench": str(comparison.meta.get("bench", "")),
            **attrs[""],
        }
        g["groupNodeAttributes"] = attrs
        configs = [
            {"namespaceRegex": _js_regex_literal(m["namespace"]), "borderColor": STATUS_COLORS[m["status"]]}
            for m in layer_rows
            if m["namespace"] and m["status"] in ("introduced", "fail")
        ]
        if configs:
            g["groupNodeConfigs"] = configs
    collection = {"label": label, "graphs": list(graphs.values())}
    path.write_text(json.dumps(collection, separators=(",", ":"), allow_nan=False), encoding="utf-8")
