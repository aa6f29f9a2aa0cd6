"""Attach comparison results to an operator graph: op metrics on nodes, tensor metrics on edges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.graph.model import OP_METRICS, TENSOR_METRICS, OpGraph

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from nbprec.compare import Comparison


def _plain(value: Any) -> Any:
    """numpy scalars -> Python values, NaN -> None (so exports stay strict JSON)."""
    if isinstance(value, (np.floating, float)):
        return None if value != value else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _same_step_rank(frame: pd.DataFrame, graph: OpGraph) -> pd.DataFrame:
    for key in ("step", "rank"):
        value = graph.meta.get(key)
        if value is not None and key in frame:
            frame = frame[frame[key] == value]
    return frame


def attach_metrics(graph: OpGraph, comparison: Comparison) -> None:
    """Copy ``comparison.ops`` metrics onto the graph's nodes and ``comparison.table`` metrics onto its edges.

    Nodes not in the comparison keep ``status="n/a"`` and ``matched=None``; a node in it gets ``matched``
    (it has a benchmark op). An edge gets the metrics of its tensor (the producer's output), or of the
    consumer's input tensor when the producer's output was not compared.

    Examples
    --------
    >>> attach_metrics(graph, nbprec.compare(target, bench))  # doctest: +SKIP
    """
    nodes = graph.nx.nodes
    ops = _same_step_rank(comparison.ops, graph)
    columns = {attr: ops[col].tolist() for attr, col in OP_METRICS.items() if col in ops}
    bench_ops = ops["bench_op"].tolist() if "bench_op" in ops else [""] * len(ops)
    for i, op in enumerate(ops["op"].tolist()):
        if op not in nodes:
            continue
        data = nodes[op]
        for attr, values in columns.items():
            data[attr] = _plain(values[i])
        data["matched"] = bool(bench_ops[i])
        data["bench_op"] = bench_ops[i] or ""
    table = _same_step_rank(comparison.table, graph)
    metrics = [m for m in TENSOR_METRICS if m in table]
    per_tensor = dict(zip(table["target_name"], zip(*(table[m].tolist() for m in metrics), strict=True), strict=True))
    for _, _, data in graph.nx.edges(data=True):
        values = per_tensor.get(data["tensor"]) or per_tensor.get(data["dst_tensor"])
        if values is None:
            continue
        for metric, value in zip(metrics, values, strict=True):
            data[metric] = _plain(value)
    graph.meta["metrics_from"] = {
        "target": comparison.meta.get("target", ""),
        "bench": comparison.meta.get("bench", ""),
        "rule": comparison.rule.describe(),
    }
