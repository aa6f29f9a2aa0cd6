"""``nbprec info`` and ``nbprec ni``: describe dumps, and one op of a dump or a GE graph."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nbprec.cli._text import _count, _counts_text, _human_bytes, _meta_text
from nbprec.errors import NbprecError


def _cmd_info(args: argparse.Namespace) -> int:
    from nbprec.formats import open_dump

    for path in args.paths:
        dump = open_dump(path, format=args.format)
        summary = dump.summary()
        if args.json:
            print(json.dumps(summary, indent=1, default=str))
            continue
        print(f"{summary['path']}")
        print(f"  format      {summary['format']}" + (f"  ({_meta_text(summary['meta'])})" if summary["meta"] else ""))
        print(f"  steps       {summary['steps']}")
        print(f"  ranks       {summary['ranks']}")
        print(f"  ops         {summary['ops']}")
        print(f"  tensors     {summary['tensors']} ({summary['with_payload']} with payload)")
        print(f"  by dtype    {_counts_text(summary['by_dtype'])}")
        print(f"  by role     {_counts_text(summary['by_role'])}")
        print(f"  direction   {_counts_text(summary['by_direction'])}")
        print(
            f"  tensor data {_human_bytes(summary['bytes'])} ({summary['bytes']} bytes: element counts x item sizes "
            "in the index, not file sizes)"
        )
        meta = summary["meta"]
        if meta.get("opdebug"):
            files = _count(len(meta["opdebug"]), "NPU overflow debug file")
            print(f"  overflow    {files} (nbprec overflow decodes them)")
        for graph in meta.get("ge_graphs", []):
            print(f"  GE graph    {graph}")
        print(f"  problems    {summary['problems']}")
        problems = dump.problem_list
        for row in problems[: args.max_problems]:
            record = f" [{row.record}]" if row.record else ""
            print(f"    - {row.file}{record}: {row.problem}")
        if len(problems) > args.max_problems:
            print(f"    ... and {len(problems) - args.max_problems} more (use --max-problems)")
    return 0


_NONE = {"step": None, "rank": None}


def _where_text(where: dict[str, int | None]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items() if v is not None)


def ni_parts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, Any, dict[str, int | None]]:
    """What ``nbprec ni`` (and ``%nbprec ni``) shows, from its arguments, for a ``--target``.

    Returns ``(target, bench, comparison, graph, rows, where)``: the dumps (narrowed to ``--step``/``--rank``),
    their comparison (None without ``--bench``), the operator graph holding the op (with metrics when
    compared), the op's index rows, and the step and rank asked for.
    """
    from nbprec.formats import open_dump
    from nbprec.graph import OpGraph

    target = open_dump(args.target, **({"graph": args.graph} if args.graph and _is_cann(args.target) else {}))
    bench = open_dump(args.bench) if args.bench else None
    where = {"step": getattr(args, "step", None), "rank": getattr(args, "rank", None)}
    if any(v is not None for v in where.values()):  # one (step, rank): its op, its graph, its metrics
        target = target.select(**where)
        if not len(target.index):
            raise NbprecError(f"{args.target}: no tensor at {_where_text(where)}")
        bench = bench.select(**where) if bench is not None else None
    comparison = None
    if bench is not None:
        from nbprec.compare import compare

        comparison = compare(target, bench, graph=args.graph, progress=None)
    rows = target.index[target.index["op"] == args.name]
    step = int(rows["step"].iloc[0]) if len(rows) else None
    rank = int(rows["rank"].iloc[0]) if len(rows) else None
    if args.graph:
        graph = OpGraph.from_ge(args.graph)
    else:
        graph = OpGraph.from_dump(target, step=step, rank=rank)
        if args.name not in graph and len(rows):
            graph = OpGraph.from_dump(target, step=step, rank=rank, level="module")
    if comparison is not None:
        graph.attach_metrics(comparison)
    return target, bench, comparison, graph, rows, where


def _cmd_ni(args: argparse.Namespace) -> int:
    """``nbprec ni``: node info of one op, its neighbourhood, and optionally an SVG of it."""
    from nbprec.graph import node_info

    if args.target is None and args.graph is None:
        raise NbprecError("nbprec ni needs --target DUMP, --graph GE_GRAPH, or both")
    if args.target is None:
        from nbprec.graph.ge_info import ge_node_info

        print(ge_node_info(args.name, args.graph, depth=args.depth))
        return 0
    target, bench, comparison, graph, rows, where = ni_parts(args)
    step = int(rows["step"].iloc[0]) if len(rows) else None
    rank = int(rows["rank"].iloc[0]) if len(rows) else None
    if len(rows) and (target.index["step"].nunique() > 1 or target.index["rank"].nunique() > 1 or where != _NONE):
        print(f"{args.name} at step {step}, rank {rank}")
    print(node_info(args.name, target, bench, comparison, graph=graph).to_text())
    sub = graph.subgraph(args.name, up=args.depth, down=args.depth)
    print(f"  subgraph (depth {args.depth}): {len(sub)} ops, {sub.nx.number_of_edges()} edges")
    for node, dist in sorted(sub.nx.nodes(data="distance"), key=lambda nd: (nd[1], nd[0])):
        status = sub.nx.nodes[node].get("status", "n/a")
        print(f"    {dist:+d}  {node}  ({sub.nx.nodes[node]['type']}, {status})")
    for note in sub.notes[-1:] if sub.truncated else []:
        print(f"  note: {note}")
    if args.svg:
        sub.to_svg(args.svg, metric="cosine" if comparison is not None else "status")
        print(f"wrote {args.svg}")
    return 0


def _is_cann(path: str) -> bool:
    from nbprec.formats import guess_format

    return guess_format(path) == "cann"
