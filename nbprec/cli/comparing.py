"""``nbprec compare`` and ``nbprec isolate``: compare two runs, re-run one op on its own inputs."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from nbprec.cli._text import _count, _counts_text, _rule_arg


def compare_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`nbprec.compare` that ``nbprec compare``'s options give (and
    ``%nbprec compare``'s, which parses the same options)."""
    return {
        "rule": _rule_arg(args),
        "mode": args.mode,
        "mapping": args.mapping,
        "graph": args.graph,
        "step": args.step,
        "rank": args.rank,
    }


def _cmd_compare(args: argparse.Namespace) -> int:
    """``nbprec compare``, with Python's cyclic garbage collector paused: the command's imports and its
    comparison make no garbage cycles to speak of (about a thousand unreachable objects in all, whether 1,550 or
    10,015 pairs are compared), and the collector's scans of everything they allocate cost 5 ms of start-up and
    2-26 ms of the comparison."""
    from nbprec._gc import paused_gc

    with paused_gc():
        return _compare_and_write(args)


def _compare_and_write(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbprec._beside import beside
    from nbprec.compare import compare
    from nbprec.floattext import prepare as prepare_float_texts
    from nbprec.safe_text import write_table_csv

    progress = None if args.no_progress else True
    with _dask_client(args.scheduler) as client:
        comp = compare(args.target, args.bench, **compare_options(args), progress=progress, client=client)
    if not args.output:
        _print_comparison(comp, args)
        return 0
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)

    # the interop layouts are the slowest files to write (msprobe's, its cells and checks, the slowest of all): a
    # forked child writes msprobe's while this process prints and writes the rest, and msaccucmp's is written by
    # whichever of the two is done first
    def msprobe_layout() -> None:
        comp.to_csv(out / "compare_msprobe.csv", layout="msprobe")

    def msaccucmp_layout() -> None:
        comp.to_csv(out / "compare_msaccucmp.csv", layout="msaccucmp")

    prepare_float_texts()  # (both sides write numbers: the formatter's tables made once, before the fork)
    what = f"writing compare_msaccucmp.csv and compare_msprobe.csv in {out}"
    with beside(msprobe_layout, what, either=msaccucmp_layout):
        several = _print_comparison(comp, args)
        comp.save(out)
        write_table_csv(comp._ops_columns, out / "ops.csv")  # spreadsheet-safe, as the other exports
        if several:
            write_table_csv(comp.runs().columns, out / "runs.csv")
    runs = ", runs.csv" if several else ""
    print(f"wrote {out}/: comparison.json, tensors.csv, ops.csv, compare_msaccucmp.csv, compare_msprobe.csv{runs}")
    return 0


def _op_lines(comp: Any, positions: Any, names: list[str]) -> str:
    """The ops at ``positions`` of the roll-up, the ``names`` columns it has, as a text table."""
    from nbprec.columns import text_table

    ops = comp._ops_columns
    return text_table(ops.select([n for n in names if n in ops]).take(positions), na_rep="NaN")


def _print_comparison(comp: Any, args: argparse.Namespace) -> bool:
    """Print what ``nbprec compare`` says of ``comp``; returns whether it spans several (step, rank)s."""
    import numpy as np

    from nbprec.compare.runs import first_failing_position, onset_position_across, op_at

    s = comp.summary()
    several = comp.several_runs  # then every op named below carries its step and rank
    at = ["step", "rank"] if several else []
    ops = comp._ops_columns
    print(comp.verdict().text)
    print()
    print(f"target     {s['target']}")
    print(f"benchmark  {s['bench']}")
    print(f"rule       {s['rule']}")
    print(f"tensors    {s['tensors']}  ({_counts_text(s['tensor_status'])})")
    print(f"matching   {_counts_text({k: v for k, v in s['coverage'].items() if v})}")
    print(f"ops        {s['ops']}, failing {s['failing_ops']}")
    if several:
        runs = comp.runs().columns
        steps, ranks = len(set(runs["step"].tolist())), len(set(runs["rank"].tolist()))
        print(f"steps      {steps}, ranks {ranks}: {s['steps_ranks']} (step, rank)s, below")
    fusion = comp.meta.get("fusion")
    if fusion:
        table = comp.columns
        by_op: dict[str, str] = {}  # each op's first row says its relation
        for op, relation in zip(table["op"].tolist(), table["relation"].tolist(), strict=True):
            by_op.setdefault(op, relation)
        relations: dict[str, int] = {}
        for relation in by_op.values():
            relations[relation or "no counterpart"] = relations.get(relation or "no counterpart", 0) + 1
        counts = _counts_text(dict(sorted(relations.items(), key=lambda kv: -kv[1])))
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
    first = comp.op(first_failing_position(ops))
    print(f"first failing op     {_with_origin(comp, first, several)}")
    print(f"first introduced op  {op_at(comp.op(first_failing_position(ops, origin='introduced')), several)}")
    print(f"divergence onset     {op_at(comp.op(onset_position_across(ops)), several)}")
    if s["explained_failing_ops"]:
        print(
            f"explained differences {_count(s['explained_failing_ops'], 'failing op')} "
            f"{'follows' if s['explained_failing_ops'] == 1 else 'follow'} from randomness or from "
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
        flagged = np.flatnonzero(comp._failing(include_explained=True))
        column = f"out_{args.metric}" if f"out_{args.metric}" in ops else "out_cosine"
        print(f"ops beyond {comp.rule.name} ({len(flagged)}):")
        if len(flagged):
            print(_op_lines(comp, flagged[: args.top * 5], [*at, "order", "op", "op_type", "origin", column]))
    worst, _ = comp.worst_positions(args.top)
    if len(worst):
        print(f"worst {_count(len(worst), 'op')} by output {comp.rule.primary_metric}:")
        cols = [*at, "order", "op", "status", "origin", "in_cosine", "out_cosine", "out_rel_euclidean"]
        print(_op_lines(comp, worst, cols))
    if several:
        print("steps and ranks:")
        print(comp.runs().to_text())
    print("failing ops under each preset rule:")
    for row in comp.rule_rows():
        first_op = row["first_failing_op"] or "-"
        if several and row["first_failing_op"]:
            first_op += f" (step {row['step']}, rank {row['rank']})"
        print(f"  {row['rule']:<15} {row['failing_ops']:>6}   first: {first_op}")
    return several


@contextlib.contextmanager
def _dask_client(address: str | None) -> Iterator[Any]:
    """A ``distributed.Client`` of the scheduler at ``address`` for the command's duration, or ``None``."""
    if not address:
        yield None
        return
    from nbprec._optional import require
    from nbprec.errors import ComparisonError

    distributed = require("distributed", "comparing on a Dask cluster (--scheduler)", extra="dask")
    try:
        client = distributed.Client(address, timeout="20s")
    except (OSError, ValueError) as exc:  # unreachable (a timeout is an OSError), or not an address
        raise ComparisonError(f"cannot connect to the Dask scheduler at {address}: {exc}") from exc
    with client:
        yield client


def _with_origin(comp: Any, row: Any, several: bool) -> str:
    """An op's name (with its step and rank when ``several``), and the framework ops it stands for when fusion
    records say so (NPU dumps)."""
    from nbprec.compare.runs import op_at

    name = op_at(row, several)
    if row is None:
        return name
    table = comp.columns
    if "ground_truth" not in table:
        return name
    truth = table["ground_truth"][table["op"] == row["op"]]
    return f"{name}  (ground truth: {truth[0]})" if len(truth) and truth[0] != "*" else name


def _cmd_isolate(args: argparse.Namespace) -> int:
    from nbprec.compare.isolate import isolate

    for op in args.ops:
        print(isolate(args.target, op, dtype=args.dtype))
    return 0
