"""Export a comparison to Google's Model Explorer: per-op verdicts and metrics as node data on the model's graph.

Model Explorer (``pip install ai-edge-model-explorer``) draws a model's graph with collapsible layers and
colours nodes by *node data*: JSON files of the form ``{graphId: {"results": {nodeId: {"value": v}},
"thresholds": [...]}}``. :func:`export_model_explorer` writes one such file per metric (status, cosine,
1 - cosine, max abs error, RED), keyed by the node ids Model Explorer gives the model you open: a PyTorch
exported program (``.pt2``), an ONNX model, a GE graph or nbprec's own operator graph (the readers are in
:mod:`nbprec.graph.model_explorer_targets`, the matching of op names to node ids in
:mod:`nbprec.graph.model_explorer_match`). It also writes a graph JSON Model Explorer opens directly, with a
roll-up per module on each layer (worst cosine, failing ops, the first failing op; failing layers get a red
border), and a summary of where every op went. Nothing here imports a widget library.

Examples
--------
>>> comp = nbprec.compare("runs/bf16", "runs/fp32")                                    # doctest: +SKIP
>>> out = export_model_explorer(comp, "me/", target="exported_program", source=model, inputs=(ids,))  # doctest: +SKIP
>>> print(out.command())                                                                # doctest: +SKIP
model-explorer me/model.pt2 --node_data_paths=me/nbprec.status.json,me/nbprec.cosine.json,...
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbprec.graph.exports import MISSING_COLOR, color_scale
from nbprec.graph.model import GraphError
from nbprec.graph.model_explorer_match import OpMatch, match_ops
from nbprec.graph.model_explorer_rollup import STATUS_COLORS, module_rollups, op_status, write_graph_json
from nbprec.graph.model_explorer_targets import (
    TargetGraph,
    from_exported_program,
    from_ge,
    from_onnx,
    from_op_graph,
    load_exported_program,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from nbprec.compare import Comparison

TARGETS = ("exported_program", "onnx", "ge", "nbprec")
FORMAT = "nbprec-model-explorer"
_BIG = sys.float_info.max  # the open upper end of the last threshold (JSON has no infinity)


@dataclass(frozen=True)
class MetricSpec:
    """One node-data file: which ``Comparison.ops`` column, transformed how, coloured on which scale."""

    name: str
    column: str
    scale: str  # a colour scale of nbprec.graph.exports ("cosine", "rel_euclidean", ...)
    one_minus: bool = False
    description: str = ""


#: The metrics :func:`export_model_explorer` can write (``status`` is the verdict, not a column).
METRICS: dict[str, MetricSpec] = {
    "status": MetricSpec("status", "status", "status", description="verdict: introduced / fail / explained / pass"),
    "cosine": MetricSpec("cosine", "out_cosine", "cosine", description="worst output cosine similarity"),
    "1-cosine": MetricSpec("1-cosine", "out_cosine", "rel_euclidean", True, "1 - worst output cosine"),
    "max_abs_err": MetricSpec("max_abs_err", "out_max_abs_err", "max_abs_err", description="worst output max |x-y|"),
    "rel_euclidean": MetricSpec("rel_euclidean", "out_rel_euclidean", "rel_euclidean", description="worst output RED"),
    "in_cosine": MetricSpec("in_cosine", "in_cosine", "cosine", description="worst input cosine similarity"),
}
DEFAULT_METRICS = ("status", "cosine", "1-cosine", "max_abs_err", "rel_euclidean")


def thresholds(metric: str) -> list[dict[str, Any]]:
    """Model Explorer thresholds (ascending upper bounds) giving nbprec's colour bins for ``metric``.

    Examples
    --------
    >>> [t["bgColor"] for t in thresholds("1-cosine")][:2]
    ['#1a9850', '#91cf60']
    """
    spec = METRICS[metric]
    scale = color_scale(spec.scale)
    colors = [b["color"] for b in scale["bins"]]
    edges = [float(b["label"].rsplit(" ", 1)[-1]) for b in scale["bins"][:-1]]
    if spec.scale.endswith("cosine"):  # higher is better: bin k is value >= edge k; reverse, just below each edge
        bounds = [math.nextafter(e, -math.inf) for e in reversed(edges)] + [_BIG]
        colors = colors[::-1]
    else:
        bounds = [*edges, _BIG]
    return [{"value": b, "bgColor": c} for b, c in zip(bounds, colors, strict=True)]


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v


def _result(value: float, metric: str, failing: bool) -> dict[str, Any]:
    """One node-data result; NaN and infinities become text with the colour of the worst bin (JSON has neither)."""
    if math.isfinite(value):
        return {"value": float(f"{value:.9g}")}
    worst = thresholds(metric)[-1 if not METRICS[metric].scale.endswith("cosine") else 0]["bgColor"]
    return {"value": str(value), "bgColor": worst if failing or value != value else MISSING_COLOR}


def node_data(ops: pd.DataFrame, match: OpMatch, metric: str) -> dict[str, dict[str, Any]]:
    """The node data of one metric: ``{graphId: GraphNodeData}`` (empty when no op has a value).

    ``ops`` are the ``Comparison.ops`` rows of one step and rank; ops without a node in ``match`` are left out.
    """
    spec = METRICS[metric]
    graphs: dict[str, dict[str, Any]] = {}
    for row in ops.to_dict("records"):
        node = match.nodes.get(row["op"])
        if node is None:
            continue
        status = op_status(row)
        if metric == "status":
            result: dict[str, Any] = {"value": status, "bgColor": STATUS_COLORS[status]}
        else:
            value = _number(row.get(spec.column))
            if value is None or (value != value and status in ("pass", "n/a")):  # no value to show
                continue
            result = _result(1.0 - value if spec.one_minus else value, metric, status in ("fail", "introduced"))
        graphs.setdefault(node.graph, {})[node.id] = result
    out = {}
    for graph_id, results in graphs.items():
        data: dict[str, Any] = {"results": results}
        if metric == "status":
            data["showExpandedSummaryOnGroupNode"] = True  # per layer: how many ops introduced, fail, pass
            data["showLabelCountColumnsInChildrenStatsTable"] = True
            data["hideInAggregatedStatsTable"] = True  # min/max/sum/avg of words: nothing to show
        else:
            data["thresholds"] = thresholds(metric)
            data["hideInChildrenStatsTable"] = True  # that table shows sums, meaningless for these metrics
            data["hideAggregatedStats"] = ["sum"]  # min/max/avg of a selected layer are its worst and mean
        out[graph_id] = data
    return out


@dataclass
class ModelExplorerExport:
    """What :func:`export_model_explorer` wrote and where every op went.

    Attributes
    ----------
    target : str
        ``"exported_program"``, ``"onnx"``, ``"ge"`` or ``"nbprec"``.
    graph_ids : list of str
        The Model Explorer graph ids the node data is keyed by.
    node_data_files : dict
        Metric -> node-data JSON file.
    graph_file, model_file, summary_file : Path or None
        The graph JSON (opens in Model Explorer as is), the model file Model Explorer opens with its own
        adapter (``.pt2`` written here, or the ``.onnx`` given), the summary of this export.
    matched : dict
        Op name -> node id it landed on.
    methods : dict
        How many ops were matched by each method (``name``, ``module+order``, ``order``).
    unmatched : list of str
        Ops that got no node (they are in no node-data file).
    skipped : dict
        Reason -> ops that have no node in this kind of graph by design.
    modules : list of dict
        Roll-up per namespace (layer): ops, failing, introduced, worst metrics, first failing op.
    notes : list of str
    """

    target: str
    graph_ids: list[str]
    node_data_files: dict[str, Path]
    graph_file: Path | None
    model_file: Path | None
    summary_file: Path
    matched: dict[str, str]
    methods: dict[str, int]
    unmatched: list[str]
    skipped: dict[str, list[str]]
    modules: list[dict[str, Any]]
    first_failing_op: str | None = None
    notes: list[str] = field(default_factory=list)

    def command(self) -> str:
        """The ``model-explorer`` command that opens the model with every node-data file.

        The status file comes last: Model Explorer shows the last node data it loads.
        """
        model = self.model_file or self.graph_file or "MODEL"
        files = sorted(self.node_data_files.items(), key=lambda item: item[0] == "status")
        paths = ",".join(str(p) for _, p in files)
        return f"model-explorer {model} --node_data_paths={paths}"

    def __str__(self) -> str:
        ops = len(self.matched) + len(self.unmatched)
        lines = [
            f"Model Explorer node data for the {self.target} graph ({', '.join(self.graph_ids)}): "
            f"{len(self.matched)} of {ops} ops matched ({', '.join(f'{k} {v}' for k, v in self.methods.items())})",
        ]
        if self.unmatched:
            more = f", ... ({len(self.unmatched) - 8} more)" if len(self.unmatched) > 8 else ""
            lines.append(f"unmatched ({len(self.unmatched)}): {', '.join(self.unmatched[:8])}{more}")
        for reason, names in self.skipped.items():
            lines.append(f"skipped {len(names)}: {reason}")
        if self.first_failing_op:
            node = self.matched.get(self.first_failing_op, "no node")
            lines.append(f"first failing op {self.first_failing_op} -> node {node}")
            layers = [m for m in self.modules if m["first_failing_op"] == self.first_failing_op and m["namespace"]]
            if layers:
                layer = layers[-1]  # outermost first: the last is the layer holding the op
                lines.append(f"  in layer {layer['namespace']}: {layer['summary']}")
        failing = sum(1 for m in self.modules if m["status"] in ("introduced", "fail") and m["namespace"])
        lines.append(f"layers: {sum(1 for m in self.modules if m['namespace'])}, {failing} holding failing ops")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("files: " + ", ".join(str(p) for p in self.node_data_files.values()))
        if self.graph_file:
            lines.append(f"graph: {self.graph_file}")
        lines.append(f"open: {self.command()}")
        return "\n".join(lines)


def _select_run(ops: pd.DataFrame, step: int | None, rank: int | None, notes: list[str]) -> pd.DataFrame:
    for key, asked in (("step", step), ("rank", rank)):
        if key not in ops or ops.empty:
            continue
        values = sorted(ops[key].dropna().unique().tolist())
        if asked is None and len(values) > 1:
            notes.append(f"the comparison holds {key}s {values}; exported {key} {values[0]} (pass {key}=...)")
            asked = values[0]
        if asked is not None:
            ops = ops[ops[key] == asked]
    return ops


def _target_graph(comparison: Comparison, target: str, source: Any, inputs: Any, step: Any, rank: Any) -> Any:
    if target == "exported_program":
        program = load_exported_program(source, inputs)
        return from_exported_program(program), program
    if target == "onnx":
        if source is None:
            raise GraphError("target 'onnx' needs source= the .onnx file (or an onnx.ModelProto)")
        return from_onnx(source), None
    if target == "ge":
        if source is None:
            raise GraphError("target 'ge' needs source= the GE graph (ge_proto_*_Build.txt or its JSON form)")
        return from_ge(source), None
    from nbprec.graph.model import OpGraph

    if isinstance(source, OpGraph):
        graph = source
    else:
        import nbprec

        dump = source if source is not None else comparison.meta.get("target")
        if dump is None:
            raise GraphError("target 'nbprec' needs source= the target dump (the comparison does not name it)")
        dump = nbprec.open(dump) if isinstance(dump, (str, Path)) else dump
        graph = OpGraph.from_dump(dump, step=step, rank=rank)
    graph_id = Path(str(graph.meta.get("path") or "nbprec")).name or "nbprec"
    return from_op_graph(graph, graph_id=graph_id), None


def export_model_explorer(
    comparison: Comparison,
    out: str | Path,
    *,
    target: str = "nbprec",
    source: Any = None,
    inputs: Any = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    name: str = "nbprec",
    graph_json: bool = True,
    step: int | None = None,
    rank: int | None = None,
) -> ModelExplorerExport:
    """Write a comparison's per-op verdicts and metrics as Model Explorer node data for a model's graph.

    Parameters
    ----------
    comparison
        The comparison (``nbprec.compare(target, bench)``).
    out
        Folder to write into (created).
    target
        The graph the node data is for: ``"exported_program"`` (``source`` = an ``ExportedProgram``, a saved
        ``.pt2``, or the ``nn.Module`` with ``inputs``), ``"onnx"`` (``source`` = the ``.onnx`` file), ``"ge"``
        (``source`` = the GE graph file) or ``"nbprec"`` (nbprec's operator graph of ``source``, default the
        comparison's target dump).
    inputs
        Example inputs to export a module with: a tuple of arguments, one tensor, or a dict of keyword arguments.
    metrics
        Which node-data files to write, from :data:`METRICS`.
    name
        File name stem: ``{name}.{metric}.json``, ``{name}.graph.json``, ``{name}.summary.json``.
    graph_json
        Also write the graph as Model Explorer graph JSON, with the module roll-ups on its layers.
    step, rank
        Which step and rank of the comparison (the first ones, noted, by default).

    Returns
    -------
    ModelExplorerExport
        The files, the op -> node mapping, unmatched and skipped ops, module roll-ups; ``str()`` summarises it.
    """
    if target not in TARGETS:
        raise GraphError(f"target must be one of {TARGETS}, not {target!r}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise GraphError(f"unknown metrics {unknown}: choose from {list(METRICS)}")
    notes: list[str] = []
    ops = _select_run(comparison.ops, step, rank, notes)
    if step is None and "step" in ops and len(ops):
        step = int(ops["step"].iloc[0])
    if rank is None and "rank" in ops and len(ops):
        rank = int(ops["rank"].iloc[0])
    graph, program = _target_graph(comparison, target, source, inputs, step, rank)
    match = match_ops(ops, graph)
    notes += graph.notes + match.notes
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for metric in metrics:
        data = node_data(ops, match, metric)
        if not data:
            notes.append(f"no op has a {metric} value: {name}.{metric}.json not written")
            continue
        files[metric] = folder / f"{name}.{metric}.json"
        files[metric].write_text(json.dumps(data, separators=(",", ":"), allow_nan=False), encoding="utf-8")
    modules = module_rollups(ops, match, graph)
    model_file = _write_model_file(graph, program, source, folder, name, notes)
    first = comparison.first_failing_op()
    first_op = None if first is None else str(first["op"])
    graph_file = None
    if graph_json:
        graph_file = folder / f"{name}.graph.json"
        write_graph_json(graph_file, graph, ops, match, modules, comparison, label=name)
    export = ModelExplorerExport(
        target=target,
        graph_ids=graph.graph_ids,
        node_data_files=files,
        graph_file=graph_file,
        model_file=model_file,
        summary_file=folder / f"{name}.summary.json",
        matched={op: node.id for op, node in match.nodes.items()},
        methods=_count_methods(match),
        unmatched=match.unmatched,
        skipped=match.skipped,
        modules=modules,
        first_failing_op=first_op,
        notes=notes,
    )
    _write_summary(export, comparison)
    return export


def _count_methods(match: OpMatch) -> dict[str, int]:
    counts: dict[str, int] = {}
    for method in match.method.values():
        counts[method] = counts.get(method, 0) + 1
    return counts


def _write_model_file(
    graph: TargetGraph, program: Any, source: Any, folder: Path, name: str, notes: list[str]
) -> Path | None:
    if isinstance(source, (str, Path)) and graph.source in ("exported_program", "onnx"):
        return Path(source)  # the file the user has: Model Explorer opens it with its own adapter
    if program is not None:
        import torch

        path = folder / f"{name}.pt2"
        try:
            torch.export.save(program, str(path))
        except Exception as exc:  # some programs cannot be serialised; the graph JSON still opens
            notes.append(f"the exported program could not be saved as .pt2 ({type(exc).__name__}: {exc})")
            return None
        return path
    return Path(graph.model_file) if graph.model_file else None


def _write_summary(export: ModelExplorerExport, comparison: Comparison) -> None:
    data = {
        "format": FORMAT,
        "version": 1,
        "target": export.target,
        "graph_ids": export.graph_ids,
        "comparison": {
            "target": str(comparison.meta.get("target", "")),
            "bench": str(comparison.meta.get("bench", "")),
            "rule": comparison.rule.describe(),
            "verdict": comparison.verdict().text,
            "first_failing_op": export.first_failing_op,
        },
        "files": {
            "node_data": {k: str(v) for k, v in export.node_data_files.items()},
            "graph": None if export.graph_file is None else str(export.graph_file),
            "model": None if export.model_file is None else str(export.model_file),
        },
        "status_colors": STATUS_COLORS,
        "matched": export.matched,
        "methods": export.methods,
        "unmatched": export.unmatched,
        "skipped": export.skipped,
        "modules": export.modules,
        "notes": export.notes,
        "command": export.command(),
    }
    export.summary_file.write_text(json.dumps(data, indent=1, allow_nan=False, default=str), encoding="utf-8")
