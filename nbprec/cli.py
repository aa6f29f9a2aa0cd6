"""The ``nbprec`` command line: a thin shell over the library.

Each subcommand parses its arguments, calls one library function and prints what it returns.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence

from nbprec.errors import NbprecError


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


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
        print(f"  bytes       {_human_bytes(summary['bytes'])} ({summary['bytes']})")
        meta = summary["meta"]
        if meta.get("opdebug"):
            print(f"  overflow    {len(meta['opdebug'])} NPU overflow debug files (nbprec overflow decodes them)")
        for graph in meta.get("ge_graphs", []):
            print(f"  GE graph    {graph}")
        print(f"  problems    {summary['problems']}")
        for row in dump.problems.head(args.max_problems).itertuples(index=False):
            record = f" [{row.record}]" if row.record else ""
            print(f"    - {row.file}{record}: {row.problem}")
        if len(dump.problems) > args.max_problems:
            print(f"    ... and {len(dump.problems) - args.max_problems} more (use --max-problems)")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbprec.compare import compare

    progress = None if args.no_progress else True
    comp = compare(
        args.target,
        args.bench,
        rule=_rule_arg(args),
        mode=args.mode,
        mapping=args.mapping,
        graph=args.graph,
        step=args.step,
        rank=args.rank,
        progress=progress,
    )
    s = comp.summary()
    print(comp.verdict().text)
    print()
    print(f"target     {s['target']}")
    print(f"benchmark  {s['bench']}")
    print(f"rule       {s['rule']}")
    print(f"tensors    {s['tensors']}  ({_counts_text(s['tensor_status'])})")
    print(f"matching   {_counts_text({k: v for k, v in s['coverage'].items() if v})}")
    print(f"ops        {s['ops']}, failing {s['failing_ops']}")
    fusion = comp.meta.get("fusion")
    if fusion:
        relations = comp.table.drop_duplicates("op")["relation"].value_counts()
        counts = _counts_text({k or "no counterpart": v for k, v in relations.items()})
        print(f"fusion     {fusion['graph']}; ops {counts}")
        for note in fusion["notes"]:
            print(f"  note: {note}")
        if fusion.get("fused_away"):
            away = fusion["fused_away"]
            example = next(iter(away.items()))
            print(
                f"  {len(away)} benchmark tensors belong to ops fused away on the NPU (e.g. {example[0]} inside "
                f"{example[1]}): not compared, as expected"
            )
    print(f"first failing op     {_with_origin(comp, s['first_failing_op'])}")
    print(f"first introduced op  {s['first_introduced_op'] or '-'}")
    print(f"divergence onset     {s['onset_op'] or '-'}")
    if s["explained_failing_ops"]:
        print(
            f"explained differences {s['explained_failing_ops']} failing ops follow from randomness or from "
            "discontinuous ops (relu, max, sort, ...) flipping elements on rounding noise; not counted above"
        )
    if s["discontinuous_ops_differing"]:
        print(f"discontinuous ops    {', '.join(s['discontinuous_ops_differing'][:5])}")
    if s["random_ops_differing"]:
        print(
            f"random ops differing {len(s['random_ops_differing'])} (e.g. {s['random_ops_differing'][0]}): "
            "un-fixed randomness (dropout in train mode?); use eval() or seed both runs"
        )
    if args.threshold is not None:  # as precision_tool's vcs -c: the ops beyond the threshold, in order
        flagged = comp.failing_ops(include_explained=True)
        column = f"out_{args.metric}" if f"out_{args.metric}" in flagged else "out_cosine"
        print(f"ops beyond {comp.rule.name} ({len(flagged)}):")
        if not flagged.empty:
            cols = [c for c in ("order", "op", "op_type", "origin", column) if c in flagged]
            print(flagged[cols].head(args.top * 5).to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    worst = comp.worst_ops(args.top)
    if not worst.empty:
        print(f"worst {len(worst)} ops by output {comp.rule.primary_metric}:")
        cols = ["order", "op", "status", "origin", "in_cosine", "out_cosine", "out_rel_euclidean"]
        print(worst[cols].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    counts = comp.rule_counts()
    print("failing ops under each preset rule:")
    for row in counts.itertuples(index=False):
        print(f"  {row.rule:<15} {row.failing_ops:>6}   first: {row.first_failing_op or '-'}")
    if args.output:
        out = Path(args.output)
        comp.save(out)
        comp.ops.to_csv(out / "ops.csv", index=False)
        comp.to_csv(out / "compare_msaccucmp.csv", layout="msaccucmp")
        comp.to_csv(out / "compare_msprobe.csv", layout="msprobe")
        print(f"wrote {out}/: comparison.json, tensors.csv, ops.csv, compare_msaccucmp.csv, compare_msprobe.csv")
    return 0


def _rule_arg(args: argparse.Namespace) -> str:
    """The rule from --rule, or from --threshold (and --metric) when given."""
    if getattr(args, "threshold", None) is not None:
        return f"{args.metric}={args.threshold}"
    return args.rule


def _with_origin(comp: object, op: str | None) -> str:
    """An op name, with the framework ops it stands for when fusion records say so (NPU dumps)."""
    if not op:
        return "-"
    table = comp.table
    if "ground_truth" not in table:
        return op
    truth = table.loc[table["op"] == op, "ground_truth"]
    return f"{op}  (ground truth: {truth.iloc[0]})" if len(truth) and truth.iloc[0] != "*" else op


def _cmd_demo(args: argparse.Namespace) -> int:
    from nbprec.demo import run_demo

    runs = run_demo(args.out, args.model, echo=print)
    for run in runs:
        print(f"wrote {run.path}  ({run.description})" + (f"\n  {run.note}" if run.note else ""))
    print()
    status = _cmd_info(argparse.Namespace(paths=[r.path for r in runs], format=None, json=False, max_problems=5))
    _demo_comparisons(runs)
    if getattr(args, "report", False):
        from nbprec.report.demo import write_demo_report

        report = write_demo_report(args.out, runs, echo=print)
        print(f"demo report: {report.html.resolve()}")
    return status


def _demo_comparisons(runs: list) -> None:
    """The main job on the demo runs: compare every target with its benchmark and isolate the culprit."""
    from nbprec.compare import compare
    from nbprec.demo import demo_pairs

    pairs = demo_pairs(runs)
    if not pairs:
        return
    print("\ncomparing each target with its float32 benchmark (default dtype-aware rule):")
    for target, bench in pairs:
        comp = compare(target.path, bench.path)
        s = comp.summary()
        first = s["first_failing_op"] or "none: differences are precision noise"
        print(f"  {target.name:<20} {s['failing_ops']:>4} failing ops of {s['ops']}; first failing op: {first}")
        culprit = comp.first_failing_op()
        if culprit is not None and target.path.joinpath("calls.jsonl").is_file():
            try:
                verdict = comp.isolate(str(culprit["op"])).verdict
            except NbprecError as exc:
                verdict = f"not re-run ({exc})"
            print(f"  {'':<20} {culprit['op']} re-run in float64 on its own inputs: {verdict}")


def _cmd_report(args: argparse.Namespace) -> int:
    """``nbprec report``: write the offline HTML report (and its executed notebook), or fetch its JavaScript."""
    from nbprec.report import fetch_assets, find_assets, missing_assets_message, write_report

    if args.fetch_assets:
        assets = fetch_assets(args.assets, force=args.force)
        versions = ", ".join(f"{k} {v}" for k, v in assets.versions.items())
        print(f"report assets in {assets.folder}" + (f" ({versions})" if versions else ""))
        if not (args.target and args.bench):
            return 0
    if not (args.target and args.bench and args.output):
        raise SystemExit("nbprec report: give TARGET BENCH -o REPORT.html (or --fetch-assets)")
    if find_assets(args.assets) is None:
        print(f"note: {missing_assets_message()}", file=sys.stderr)
    report = write_report(
        args.target, args.bench, args.output, rule=_rule_arg(args), title=args.title, depth=args.depth,
        notebook=args.notebook, assets=args.assets,
    )  # fmt: skip
    size = _human_bytes(report.export.bytes)
    live = "live widgets embedded" if report.offline_widgets else "static tables and plots only"
    print(f"wrote {report.notebook}")
    print(f"wrote {report.html}  ({size}, {live}; opens offline from disk)")
    for problem in report.export.missing:
        print(f"  note: {problem}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """``nbprec serve``: the explore dashboard as a Voila page on 127.0.0.1, until interrupted."""
    from nbprec.report import serve

    def stop_on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through `finally`: Voila is stopped, not left running

    # installed before Voila starts, so that a signal at any moment stops it (serve() stops it on errors)
    previous = {sig: signal.signal(sig, stop_on_signal) for sig in _STOP_SIGNALS}
    try:
        server = serve(args.target, args.bench, port=args.port, rule=_rule_arg(args))
        try:
            print(f"nbprec dashboard: {server.url}  (Voila; press Ctrl-C to stop)", flush=True)
            server.process.wait()
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


# kill, systemd and a closed terminal end `nbprec serve` with these; Ctrl-C raises KeyboardInterrupt
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _cmd_ni(args: argparse.Namespace) -> int:
    """``nbprec ni``: node info of one op, its neighbourhood, and optionally an SVG of it."""
    from nbprec.formats import open_dump
    from nbprec.graph import OpGraph, node_info

    if args.target is None and args.graph is None:
        raise NbprecError("nbprec ni needs --target DUMP, --graph GE_GRAPH, or both")
    if args.target is None:
        from nbprec.graph.ge_info import ge_node_info

        print(ge_node_info(args.name, args.graph, depth=args.depth))
        return 0
    target = open_dump(args.target, **({"graph": args.graph} if args.graph and _is_cann(args.target) else {}))
    bench = open_dump(args.bench) if args.bench else None
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


def _cmd_overflow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbprec.overflow import headroom, remedies, scan

    report = scan(args.path, bench=args.bench, dtype=args.dtype, payload=not args.no_payload, rule=args.rule)
    s = report.summary()
    print(f"dump       {s['path']} ({s['format']})")
    print(f"tensors    {s['tensors']}  ({', '.join(f'{k}: {v}' for k, v in s['tensor_status'].items())})")
    print(f"ops        {s['ops']}  ({', '.join(f'{k}: {v}' for k, v in s['levels'].items())})")
    first = report.first_critical()
    if first is None:
        print("first critical op: none (no op produced NaN/inf/saturated values from normal inputs)")
        abnormal = report.first_abnormal()
        if abnormal is not None:
            print(f"first abnormal op: {abnormal['op']} (order {abnormal['order']})")
            print(f"  {abnormal['note']}")
    else:
        print(f"first critical op: {first['op']} (order {first['order']})")
        print(f"  {first['reason']}")
    if report.impact is not None:
        print(f"impact     {report.impact.verdict}: {report.impact.message}")
    if report.npu is not None:
        files = report.meta.get("npu_overflow_files", 0)
        print(f"NPU overflow detection: {len(report.npu)} records in {files} debug files")
        for row in report.npu.head(args.top).itertuples(index=False):
            where = f"{row.op} ({row.op_type}, order {row.order})" if row.op else "no matching op"
            what = f"{row.unit}: {row.conditions} (status {row.status})" if row.unit else ""
            print(f"  {row.timestamp}  {where}  {what}{'  note: ' + row.note if row.note else ''}")
    ranked = report.ranked().head(args.top)
    if not ranked.empty:
        print(f"ranked ops (top {len(ranked)}):")
        cols = ["order", "op", "level", "out_status", "out_abs_max", "reason"]
        print(ranked[cols].to_string(index=False, max_colwidth=90, float_format=lambda v: f"{v:.6g}"))
    if report.origin() is not None or not report:
        print()
        print(remedies(report, device_type=args.device_type, recorded_scale=args.loss_scale).to_text())
    hr = None
    if args.headroom:
        hr = headroom(args.path, payload=not args.no_payload)
        print()
        print("headroom if cast down (bits = log2(max_finite / abs_max)):")
        for dt, v in hr.summary()["dtypes"].items():
            bits = "-" if v["min_headroom_bits"] is None else f"{v['min_headroom_bits']:.2f}"
            print(
                f"  {dt:<14} overflow {v['overflowing_ops']:>4} ops (first: {v['first_overflow_op'] or '-'}), "
                f"precision loss {v['precision_loss_ops']:>4} ops, min headroom {bits} bits"
            )
    if args.output:
        out = Path(args.output)
        report.save(out)
        if hr is not None:
            hr.save(out / "headroom")
        print(f"wrote {out}/")
    return 0


def _cmd_isolate(args: argparse.Namespace) -> int:
    from nbprec.compare.isolate import isolate

    for op in args.ops:
        print(isolate(args.target, op, dtype=args.dtype))
    return 0


def _meta_text(meta: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in meta.items() if isinstance(v, (str, int, float)))


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "-"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nbprec`` command."""
    from nbprec import __version__
    from nbprec.compare.metrics import KERNEL
    from nbprec.formats import READERS

    parser = argparse.ArgumentParser(prog="nbprec", description="Find where a neural network loses precision.")
    parser.add_argument("--version", action="version", version=f"nbprec {__version__} (metric kernel: {KERNEL})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = sub.add_parser("info", help="describe one or more dumps: format, steps, ranks, counts, problems")
    info.add_argument("paths", nargs="+", metavar="PATH", help="dump folder or file")
    info.add_argument("--format", choices=list(READERS), help="reader to use (guessed when omitted)")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.add_argument("--max-problems", type=int, default=20, help="problems to list (default 20)")
    info.set_defaults(func=_cmd_info)

    demo = sub.add_parser("demo", help="capture the demo runs (tiny encoder or MiniLM) and describe them")
    demo.add_argument("--out", required=True, metavar="DIR", help="folder to write the run folders into")
    demo.add_argument("--model", choices=["tiny", "minilm"], default="tiny", help="demo model (default tiny)")
    demo.add_argument("--report", action="store_true", help="end by writing the demo report (DIR/report.html)")
    demo.set_defaults(func=_cmd_demo)

    from nbprec.compare.engine import MODES
    from nbprec.compare.rules import preset_names

    cmp = sub.add_parser("compare", help="compare a target dump with a benchmark dump, name the first failing op")
    cmp.add_argument("target", metavar="TARGET", help="target dump (NPU / low precision)")
    cmp.add_argument("bench", metavar="BENCH", help="benchmark dump (CPU/GPU float32)")
    cmp.add_argument("-o", "--output", metavar="DIR", help="write the tables (nbprec, msaccucmp, msprobe CSV) here")
    cmp.add_argument("--rule", choices=preset_names(), default="default", help="pass/fail rule (default: dtype-aware)")
    cmp.add_argument("--threshold", type=float, metavar="VALUE", help="judge by one bound instead (vcs -c 0.98)")
    cmp.add_argument("--metric", default="cosine", help="the metric --threshold bounds (default cosine)")
    cmp.add_argument("--mode", choices=list(MODES), default="auto", help="compare payloads, statistics or checksums")
    cmp.add_argument("--mapping", metavar="FILE", help="CSV/YAML of target,bench name pairs that override matching")
    cmp.add_argument("--graph", metavar="GE_GRAPH", help="target's GE graph (ge_proto_*_Build.txt): fusion records")
    cmp.add_argument("--step", type=int, help="compare this step only")
    cmp.add_argument("--rank", type=int, help="compare this rank only")
    cmp.add_argument("--top", type=int, default=10, help="how many worst ops to list (default 10)")
    cmp.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmp.set_defaults(func=_cmd_compare)

    iso = sub.add_parser("isolate", help="re-run ops on the target's own inputs in float64: each op's own error")
    iso.add_argument("target", metavar="TARGET", help="target dump captured by nbprec (tensor mode)")
    iso.add_argument("ops", nargs="+", metavar="OP", help="forward API op(s), e.g. Functional.gelu.1.forward")
    iso.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="precision of the re-run")
    iso.set_defaults(func=_cmd_isolate)

    ovf = sub.add_parser("overflow", help="find the first overflowing op, judge its impact, predict headroom")
    ovf.add_argument("path", metavar="PATH", help="the dump to scan (target run)")
    ovf.add_argument("--bench", metavar="PATH", help="benchmark dump: say whether the overflow changed the results")
    ovf.add_argument("--headroom", action="store_true", help="also predict overflow/underflow if cast to fp16/bf16/fp8")
    ovf.add_argument("--dtype", help="judge every float tensor against this dtype's maximum (e.g. float16)")
    ovf.add_argument("--rule", choices=preset_names(), default=None, help="comparison rule for the impact verdict")
    ovf.add_argument("--device-type", default="cuda", help="torch.autocast device type in the snippet (default cuda)")
    ovf.add_argument("--loss-scale", type=float, help="loss scale the gradients were recorded with (default: run meta)")
    ovf.add_argument("--no-payload", action="store_true", help="use the index statistics only (faster)")
    ovf.add_argument("--top", type=int, default=15, help="how many ranked ops to list (default 15)")
    ovf.add_argument("-o", "--output", metavar="DIR", help="save the report (report.json, tensors.csv, ops.csv)")
    ovf.set_defaults(func=_cmd_overflow)

    rep = sub.add_parser("report", help="write an offline HTML report (and the executed notebook) of two runs")
    rep.add_argument("target", nargs="?", metavar="TARGET", help="target dump (NPU / low precision)")
    rep.add_argument("bench", nargs="?", metavar="BENCH", help="benchmark dump (CPU/GPU float32)")
    rep.add_argument("-o", "--output", metavar="HTML", help="the HTML file to write (the .ipynb goes next to it)")
    rep.add_argument("--notebook", metavar="IPYNB", help="where to write the executed notebook")
    rep.add_argument("--rule", choices=preset_names(), default="default", help="pass/fail rule (default: dtype-aware)")
    rep.add_argument("--threshold", type=float, metavar="VALUE", help="judge by one bound instead (vcs -c 0.98)")
    rep.add_argument("--metric", default="cosine", help="the metric --threshold bounds (default cosine)")
    rep.add_argument("--title", default="", help="report title")
    rep.add_argument("--depth", type=int, default=4, help="subgraph depth around the culprit (default 4)")
    rep.add_argument("--fetch-assets", action="store_true", help="fetch the widget JavaScript from npm (needs npm)")
    rep.add_argument("--assets", metavar="DIR", help="folder of the fetched JavaScript (default: found/created)")
    rep.add_argument("--force", action="store_true", help="with --fetch-assets: fetch again")
    rep.set_defaults(func=_cmd_report)

    srv = sub.add_parser("serve", help="serve the explore dashboard of two runs as a Voila page on 127.0.0.1")
    srv.add_argument("target", metavar="TARGET", help="target dump")
    srv.add_argument("bench", metavar="BENCH", help="benchmark dump")
    srv.add_argument("--port", type=int, help="TCP port (default: a free one)")
    srv.add_argument("--rule", choices=preset_names(), default="default", help="pass/fail rule (default: dtype-aware)")
    srv.add_argument("--threshold", type=float, metavar="VALUE", help="judge by one bound instead (vcs -c 0.98)")
    srv.add_argument("--metric", default="cosine", help="the metric --threshold bounds (default cosine)")
    srv.set_defaults(func=_cmd_serve)

    ni = sub.add_parser(
        "ni", help="node info: an op's type, module, inputs/outputs with statistics and metrics, neighbours"
    )
    ni.add_argument("name", metavar="NAME", help="op name, e.g. Functional.linear.0.forward")
    ni.add_argument("--target", metavar="PATH", help="target dump")
    ni.add_argument("--graph", metavar="GE_GRAPH", help="GE graph (ge_proto_*_Build.txt or JSON): type, pass, origin")
    ni.add_argument("--bench", metavar="PATH", help="benchmark dump: compare and show metrics")
    ni.add_argument("--depth", type=int, default=2, help="subgraph depth up and down (default 2)")
    ni.add_argument("--svg", metavar="FILE", help="draw the subgraph to this SVG file (needs Graphviz dot)")
    ni.set_defaults(func=_cmd_ni)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbprec`` command; returns the exit status (1 on a nbprec error, with the message on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NbprecError as exc:
        print(f"nbprec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nbprec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output was piped into a command that stopped reading (| head): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
