"""Node info (precision_tool's ``ni``): everything known about one op, as text or HTML.

Type, module and enclosing module calls, fusion pass and original ops (when the source records them), each
input and output with dtype, shape, target and benchmark statistics and metrics, the op feeding each input
and the ops reading each output, and the call stack.
"""

from __future__ import annotations

import contextlib
import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.errors import NbprecError
from nbprec.graph.hierarchy import describe_module_call
from nbprec.graph.model import OpGraph, OpNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from nbprec.compare import Comparison
    from nbprec.dump import Dump

STATS = ("max", "min", "mean", "norm")
METRICS = ("cosine", "rel_euclidean", "max_abs_err", "max_rel_err")


@dataclass
class TensorInfo:
    """One input or output of an op, on both sides."""

    name: str
    role: str
    slot: str
    dtype: str
    shape: tuple[int, ...]
    stats: dict[str, float | None]
    bench_name: str = ""
    bench_dtype: str = ""
    bench_shape: tuple[int, ...] | None = None
    bench_stats: dict[str, float | None] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    status: str = ""
    reason: str = ""
    links: list[str] = field(default_factory=list)
    layout: str = ""  # how an NPU stores it, and the framework tensor it equals ("stored NC1HWC0 ...")


@dataclass
class NodeInfo:
    """What :func:`node_info` found about one op. ``str()`` gives the text, ``_repr_html_`` the HTML."""

    name: str
    type: str
    module: str
    direction: str
    order: int
    module_chain: list[str] = field(default_factory=list)
    fusion_pass: str = ""
    original_ops: list[str] = field(default_factory=list)
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    status: str = ""
    origin: str = ""
    bench_op: str = ""
    notes: list[str] = field(default_factory=list)

    def to_text(self) -> str:
        """A plain-text report (what ``nbprec ni`` prints)."""
        lines = [f"{self.name}  ({self.type or '?'}, {self.direction or 'direction unknown'}, order {self.order})"]
        chain = " > ".join(describe_module_call(c)["label"] for c in self.module_chain)
        lines.append(f"  module      {self.module or '-'}" + (f"   [{chain}]" if chain else ""))
        lines.append(
            f"  fusion      pass {self.fusion_pass or '-'}; original ops {', '.join(self.original_ops) or '-'}"
        )
        if self.status:
            origin = f" ({self.origin})" if self.origin else ""
            lines.append(f"  status      {self.status}{origin}; benchmark op {self.bench_op or '- (unmatched)'}")
        for title, tensors, arrow in (("inputs", self.inputs, "from"), ("outputs", self.outputs, "to")):
            lines.append(f"  {title}")
            for t in tensors:
                link = f"  {arrow} {', '.join(t.links)}" if t.links else ""
                lines.append(f"    [{t.slot}] {t.name}  {t.dtype} {_shape(t.shape)}{link}")
                if t.layout:
                    lines.append(f"        {t.layout}")
                if t.stats:
                    lines.append(f"        target  {_stats_text(t.stats)}")
                if t.bench_name or t.bench_stats:
                    lines.append(f"        bench   {_stats_text(t.bench_stats)}  ({t.bench_name}, {t.bench_dtype})")
                if t.metrics or t.status:
                    shown = "  ".join(f"{k} {_num(v)}" for k, v in t.metrics.items())
                    lines.append(f"        metrics {shown}  {t.status}" + (f"  ({t.reason})" if t.reason else ""))
            if not tensors:
                lines.append("    -")
        if self.stack:
            lines.append("  stack")
            lines.extend(f"    {line.strip()}" for frame in self.stack for line in frame.splitlines() if line.strip())
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def to_html(self) -> str:
        """An HTML fragment; every string from the dump is escaped."""
        e = html.escape
        chain = " &gt; ".join(e(describe_module_call(c)["label"]) for c in self.module_chain)
        head = (
            f"<div class='nbprec-node-info'><b>{e(self.name)}</b> ({e(self.type or '?')}, {e(self.direction or '?')}, "
            f"order {int(self.order)})<br>module <code>{e(self.module or '-')}</code> {chain}<br>"
            f"fusion pass {e(self.fusion_pass or '-')}; original ops {e(', '.join(self.original_ops) or '-')}"
        )
        if self.status:
            bench_op = self.bench_op or "- (unmatched)"
            head += f"<br>status <b>{e(self.status)}</b> {e(self.origin)}; benchmark op {e(bench_op)}"
        cols = [
            "role",
            "slot",
            "name",
            "dtype",
            "shape",
            *(f"target {s}" for s in STATS),
            *(f"bench {s}" for s in STATS),
        ]
        cols += [*METRICS, "status", "linked ops"]
        rows = []
        for t in [*self.inputs, *self.outputs]:
            cells = [t.role, t.slot, t.name, t.dtype, _shape(t.shape) + (f" [{t.layout}]" if t.layout else "")]
            cells += [_num(t.stats.get(s)) for s in STATS] + [_num(t.bench_stats.get(s)) for s in STATS]
            cells += [_num(t.metrics.get(m)) for m in METRICS] + [t.status, ", ".join(t.links)]
            rows.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
        table = "<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>" + "".join(rows) + "</table>"
        stack = "".join(f"<div><code>{e(frame)}</code></div>" for frame in self.stack)
        notes = "".join(f"<div><i>{e(n)}</i></div>" for n in self.notes)
        return (
            head
            + table
            + (f"<details><summary>call stack</summary>{stack}</details>" if stack else "")
            + notes
            + "</div>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()


def _shape(shape: tuple[int, ...] | None) -> str:
    return "-" if shape is None else "(" + ", ".join(str(int(d)) for d in shape) + ")"


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)


def _stats_text(stats: dict[str, float | None]) -> str:
    return "  ".join(f"{k} {_num(stats.get(k))}" for k in STATS)


def _float(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def _bench_from_dump(t: TensorInfo, t_row: pd.Series, target: Dump, bench: Dump) -> None:
    from nbprec.compare.metrics import statistics_metrics, tensor_metrics

    try:
        b_row = bench.row(t.name)
    except NbprecError:
        t.reason = "no benchmark tensor of the same name"
        return
    t.bench_name, t.bench_dtype, t.bench_shape = t.name, str(b_row["dtype"]), tuple(b_row["shape"])
    t.bench_stats = {s: _float(b_row[s]) for s in STATS}
    try:
        if t_row["has_data"] and b_row["has_data"]:
            result = tensor_metrics(np.asarray(target.tensor(t_row)), np.asarray(bench.tensor(b_row)))
        else:
            result = statistics_metrics({s: t_row[s] for s in STATS}, {s: b_row[s] for s in STATS})
    except (NbprecError, ValueError) as exc:
        t.reason = f"not compared: {exc}"
        return
    t.metrics = {m: _float(result.values[m]) for m in METRICS if m in result.values}
    t.reason = result.reason


def _layout_text(row: pd.Series) -> str:
    """For a tensor of an NPU dump: its storage format and shape, and the framework tensor it stands for."""
    stored = row.get("storage_format", "")
    if not isinstance(stored, str) or not stored:
        return ""
    text = f"stored {stored} {_shape(tuple(row['storage_shape']))}"
    if row.get("origin_format") and row["origin_format"] != stored:
        text += f", shown as {row['origin_format']}"
    if row.get("origin_name"):
        text += f"; equals {row['origin_name']}:{int(row['origin_index'])}"
    return text


def _row_stats(dump: Dump, row: pd.Series) -> dict[str, float | None]:
    """A tensor's statistics from the index, or computed from its payload when the format records none
    (CANN NPU dumps hold payloads only)."""
    stats = {s: _float(row[s]) for s in STATS}
    if all(v is None for v in stats.values()) and bool(row["has_data"]):
        from nbprec.stats import tensor_stats

        with contextlib.suppress(NbprecError, MemoryError, ValueError, TypeError):
            computed = tensor_stats(dump.tensor(row))
            stats = {s: _float(computed.get(s)) for s in STATS}
    return stats


def node_info(
    name: str,
    target_dump: Dump,
    bench_dump: Dump | None = None,
    comparison: Comparison | None = None,
    *,
    graph: OpGraph | None = None,
    step: int | None = None,
    rank: int | None = None,
) -> NodeInfo:
    """Everything known about op ``name`` of ``target_dump``.

    Parameters
    ----------
    name
        The op (``Functional.linear.0.forward``).
    target_dump, bench_dump
        The dumps; without a comparison, benchmark tensors are found by name in ``bench_dump`` and compared.
    comparison
        A comparison of the two runs: its matching and metrics are used (preferred over ``bench_dump``).
    graph
        The op graph for producers and consumers and fusion records (built from ``target_dump`` if omitted).
    step, rank
        Which call when the dump holds several steps or ranks (the first holding the op by default).

    Examples
    --------
    >>> target, bench = nbprec.open("runs/fp16"), nbprec.open("runs/fp32")  # doctest: +SKIP
    >>> print(node_info("Functional.linear.0.forward", target, bench))     # doctest: +SKIP
    """
    index = target_dump.index
    rows = index[index["op"] == name]
    if rows.empty:
        short = name.split(".")[1] if name.count(".") > 1 else name
        similar = sorted({o for o in index["op"].unique() if short.lower() in o.lower()})[:5]
        raise OpNotFoundError(
            f"{target_dump.path}: no op named {name!r}" + (f"; similar ops: {similar}" if similar else "")
        )
    step = int(rows["step"].iloc[0]) if step is None else step
    rank = int(rows["rank"].iloc[0]) if rank is None else rank
    rows = rows[(rows["step"] == step) & (rows["rank"] == rank)]
    if rows.empty:
        raise OpNotFoundError(f"{target_dump.path}: op {name!r} has no tensors in step {step}, rank {rank}")
    if graph is None:
        graph = OpGraph.from_dump(target_dump, step=step, rank=rank)
        if name not in graph:  # a module-level call: the graph of module calls
            graph = OpGraph.from_dump(target_dump, step=step, rank=rank, level="module")
    first = rows.iloc[0]
    node = graph.nx.nodes[name] if name in graph else {}
    fusion = node.get("fusion") or {}
    info = NodeInfo(
        name=name,
        type=str(first["op_type"]),
        module=str(first["module"]),
        direction=str(first["direction"]),
        order=int(first["order"]),
        module_chain=graph.module_chain(name) if name in graph.hierarchy else [],
        fusion_pass=str(fusion.get("pass_name", "")),
        original_ops=[str(o) for o in fusion.get("original_ops", [])],
        stack=list(target_dump.stacks.get(name, [])),
    )
    if name not in graph:
        info.notes.append("the op is not in the graph (a module-level call?): producers and consumers unknown")
    producers: dict[str, list[str]] = {}  # input slot -> producing ops
    out_readers: dict[str, list[str]] = {}  # output tensor -> consuming ops
    consumers: list[str] = []
    if name in graph:
        for u, _, d in graph.nx.in_edges(name, data=True):
            if d["kind"] == "data":
                producers.setdefault(str(d["slot"]), []).append(u)
        for _, v, d in graph.nx.out_edges(name, data=True):
            if d["kind"] == "data":
                out_readers.setdefault(d["tensor"], []).append(v)
        consumers = graph.consumers(name)
    compared: dict[str, pd.Series] = {}
    if comparison is not None:
        table = comparison.table
        sel = table[(table["target_op"] == name) & (table["step"] == step) & (table["rank"] == rank)]
        compared = {r["target_name"]: r for _, r in sel.iterrows()}
        ops = comparison.ops
        op_row = ops[(ops["op"] == name) & (ops["step"] == step) & (ops["rank"] == rank)]
        if not op_row.empty:
            info.status, info.origin = str(op_row["status"].iloc[0]), str(op_row["origin"].iloc[0])
            info.bench_op = str(op_row["bench_op"].iloc[0])
            if "ground_truth" in table:  # an NPU op: the framework ops it stands for (fusion records)
                truth = table.loc[table["op"] == name, "ground_truth"]
                info.bench_op = str(truth.iloc[0]) if len(truth) and truth.iloc[0] != "*" else ""
    for _, row in rows.iterrows():
        t = TensorInfo(
            name=str(row["name"]),
            role=str(row["role"]),
            slot=str(row["slot"]),
            dtype=str(row["dtype"]),
            shape=tuple(row["shape"]),
            stats=_row_stats(target_dump, row),
            layout=_layout_text(row),
        )
        if t.role in ("input", "parameter"):
            t.links = sorted(set(producers.get(t.slot, []))) if t.role == "input" else []
            info.inputs.append(t)
        else:
            # edges name the tensor as the dump does, or as a GE graph does ("op:index")
            t.links = sorted(set(out_readers.get(t.name, []) or out_readers.get(f"{name}:{t.slot}", [])))
            info.outputs.append(t)
        if t.name in compared:
            c = compared[t.name]
            t.bench_name, t.bench_dtype = str(c["bench_name"]), str(c["bench_dtype"])
            t.bench_shape = tuple(c["bench_shape"]) if c["bench_shape"] is not None else None
            t.bench_stats = {s: _float(c.get(f"bench_{s}")) for s in STATS}
            if bench_dump is not None and t.bench_name:  # prefer the benchmark dump's own recorded statistics
                with contextlib.suppress(NbprecError):
                    b_row = bench_dump.row(t.bench_name)
                    t.bench_stats = _row_stats(bench_dump, b_row)
            t.metrics = {m: _float(c.get(m)) for m in METRICS if m in c}
            t.status, t.reason = str(c["status"]), str(c.get("reason", "") or "")
        elif bench_dump is not None and comparison is None:
            _bench_from_dump(t, row, target_dump, bench_dump)
    if name in graph and not consumers and info.outputs:
        info.notes.append("no op in the graph reads this op's outputs")
    return info
