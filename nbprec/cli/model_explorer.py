"""``nbprec model-explorer``: write a comparison as Model Explorer node data (and graph JSON) for a model's graph."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nbprec.cli._choices import EXPLORER_DEFAULT_METRICS, EXPLORER_METRICS, RULE_PRESETS
from nbprec.cli._text import _rule_arg


def add_model_explorer_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``model-explorer`` to the ``nbprec`` command's subparsers (see :func:`nbprec.cli.build_parser`)."""
    parser = subparsers.add_parser(
        "model-explorer",
        help="export per-op verdicts and metrics as Model Explorer node data for the model's graph",
        description=(
            "Compare TARGET with BENCH (or load a comparison saved with Comparison.save when BENCH is omitted) "
            "and write Model Explorer node-data files (one per metric), keyed by the node ids Model Explorer gives "
            "the graph you open: an exported program (--program model.pt2), an ONNX model (--onnx), a GE graph "
            "(--ge), or by default nbprec's own operator graph of TARGET. Also writes a graph JSON with a roll-up "
            "per module, and a summary naming every op that found no node."
        ),
    )
    parser.add_argument("target", metavar="TARGET", help="target dump, or a saved comparison folder")
    parser.add_argument("bench", nargs="?", metavar="BENCH", help="benchmark dump (omit with a saved comparison)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the files into")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--program", metavar="PT2", help="a torch.export program saved with torch.export.save")
    where.add_argument("--onnx", metavar="ONNX", help="the ONNX model Model Explorer will show")
    where.add_argument("--ge", metavar="GE_GRAPH", help="GE graph (ge_proto_*_Build.txt): the graph and its fusion")
    parser.add_argument(
        "--metrics",
        default=",".join(EXPLORER_DEFAULT_METRICS),
        help=f"comma-separated, from {', '.join(EXPLORER_METRICS)} (default {','.join(EXPLORER_DEFAULT_METRICS)})",
    )
    parser.add_argument("--name", default="nbprec", help="file name stem (default nbprec)")
    parser.add_argument("--no-graph-json", action="store_true", help="do not write the graph JSON")
    parser.add_argument("--rule", choices=RULE_PRESETS, default="default", help="pass/fail rule (default: dtype-aware)")
    parser.add_argument("--threshold", type=float, metavar="VALUE", help="judge by one bound instead (vcs -c 0.98)")
    parser.add_argument("--metric", default="cosine", help="the metric --threshold bounds (default cosine)")
    parser.add_argument("--step", type=int, help="export this step (default: the first)")
    parser.add_argument("--rank", type=int, help="export this rank (default: the first)")
    parser.set_defaults(func=_cmd_model_explorer)
    return parser


def _cmd_model_explorer(args: argparse.Namespace) -> int:
    from nbprec.compare import Comparison, compare
    from nbprec.errors import NbprecError
    from nbprec.graph.model_explorer import export_model_explorer

    if args.bench is None:
        if not (Path(args.target) / "comparison.json").is_file():
            raise NbprecError(f"{args.target}: give BENCH too, or a folder written by Comparison.save")
        comp = Comparison.load(args.target)
        if args.rule != "default" or args.threshold is not None:
            comp = comp.with_rule(_rule_arg(args))
    else:
        comp = compare(args.target, args.bench, rule=_rule_arg(args), graph=args.ge, progress=None)
    if args.program:
        target, source = "exported_program", args.program
    elif args.onnx:
        target, source = "onnx", args.onnx
    elif args.ge:
        target, source = "ge", args.ge
    else:
        target, source = "nbprec", None
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    result = export_model_explorer(
        comp,
        args.output,
        target=target,
        source=source,
        metrics=metrics,
        name=args.name,
        graph_json=not args.no_graph_json,
        step=args.step,
        rank=args.rank,
    )
    print(comp.verdict().text)
    print()
    print(result)
    return 0
