"""What each ``%nbprec`` line magic does once the command line's parser has read its arguments.

Each ``run_*`` function takes the :class:`argparse.Namespace` that :func:`nbprec.cli.build_parser` made (so the
magic accepts exactly the command's options), calls the same library functions as the command, displays the
notebook view of the result (the dashboard, a report's HTML) instead of printing text, and returns the result
object the magic binds to ``_nbprec``. Errors are the library's :class:`~nbprec.errors.NbprecError`; the magic
turns them into one line.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import time
from typing import Any

from nbprec.errors import NbprecError


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


class NotebookProgress:
    """A progress line for the notebook, updated in place at most four times a second.

    Shown only once the work has taken a second, so that quick comparisons print nothing.

    Parameters
    ----------
    label
        What is being counted (``"comparing tensor pairs"``).
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._start = time.monotonic()
        self._last = 0.0
        self._handle: Any = None

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._start < 1.0 or (done < total and now - self._last < 0.25):
            return
        self._last = now
        from IPython.display import display

        text = {"text/plain": f"{self.label}: {done}/{total}  ({now - self._start:.0f} s)"}
        if self._handle is None:
            self._handle = display(text, raw=True, display_id=True)
        else:
            self._handle.update(text, raw=True)


def widgets_available() -> bool:
    """Whether the widget libraries of the ``[widgets]`` extra are importable (the dashboard needs them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("ipywidgets", "bqplot", "ipycytoscape"))


def show_dashboard(comparison: Any) -> None:
    """Display the linked dashboard of ``comparison``, or its static summary when the widgets are missing."""
    if widgets_available():
        from nbprec.widgets import explore

        _display(explore(comparison))
    else:
        _display(comparison)
        print('nbprec: the live dashboard needs the widget libraries: pip install "nbprec[widgets]"')


def run_compare(args: argparse.Namespace) -> Any:
    """``%nbprec compare TARGET BENCH [...]``: compare, save the tables with ``--output``, show the dashboard."""
    from nbprec.cli.comparing import compare_options
    from nbprec.compare import compare

    progress = None if args.no_progress else NotebookProgress("comparing tensor pairs")
    comparison = compare(args.target, args.bench, **compare_options(args), progress=progress)
    if args.output:
        from pathlib import Path

        from nbprec.safe_text import write_table_csv

        out = Path(args.output)
        comparison.save(out)
        write_table_csv(comparison.ops, out / "ops.csv")
        comparison.to_csv(out / "compare_msaccucmp.csv", layout="msaccucmp")
        comparison.to_csv(out / "compare_msprobe.csv", layout="msprobe")
        print(f"wrote {out}/: comparison.json, tensors.csv, ops.csv, compare_msaccucmp.csv, compare_msprobe.csv")
    show_dashboard(comparison)
    return comparison


def run_info(args: argparse.Namespace) -> Any:
    """``%nbprec info PATH [...]``: each dump's summary and its first problems; one Dump, or a list of them."""
    from nbprec.formats import open_dump

    dumps = []
    for path in args.paths:
        dump = open_dump(path, format=args.format)
        dumps.append(dump)
        if args.json:
            print(json.dumps(dump.summary(), indent=1, default=str))
            continue
        _display(dump)
        if len(dump.problems):
            _display(dump.problems.head(args.max_problems))
            if len(dump.problems) > args.max_problems:
                print(f"... and {len(dump.problems) - args.max_problems} more problems (use --max-problems)")
    return dumps[0] if len(dumps) == 1 else dumps


def run_overflow(args: argparse.Namespace) -> Any:
    """``%nbprec overflow PATH [--bench B] [...]``: the overflow report, remedies and (``--headroom``) headroom."""
    from nbprec.overflow import headroom, remedies, scan

    report = scan(args.path, bench=args.bench, dtype=args.dtype, payload=not args.no_payload, rule=args.rule)
    _display(report)
    if report.origin() is not None or not report:
        print(remedies(report, device_type=args.device_type, recorded_scale=args.loss_scale).to_text())
    room = headroom(args.path, payload=not args.no_payload) if args.headroom else None
    if room is not None:
        _display(room)
    if args.output:
        from pathlib import Path

        out = Path(args.output)
        report.save(out)
        if room is not None:
            room.save(out / "headroom")
        print(f"wrote {out}/")
    return report


def run_ni(args: argparse.Namespace) -> Any:
    """``%nbprec ni NAME --target T [--bench B] [--graph G]``: node info of one op and its neighbourhood."""
    from nbprec.cli.dumps import ni_parts
    from nbprec.graph import node_info

    if args.target is None and args.graph is None:
        raise NbprecError("nbprec ni needs --target DUMP, --graph GE_GRAPH, or both")
    if args.target is None:
        from nbprec.graph.ge_info import ge_node_info

        text = ge_node_info(args.name, args.graph, depth=args.depth)
        print(text)
        return text
    target, bench, comparison, graph, _, _ = ni_parts(args)
    info = node_info(args.name, target, bench, comparison, graph=graph)
    _display(info)
    sub = graph.subgraph(args.name, up=args.depth, down=args.depth)
    lines = [f"subgraph (depth {args.depth}): {len(sub)} ops, {sub.nx.number_of_edges()} edges"]
    for node, dist in sorted(sub.nx.nodes(data="distance"), key=lambda nd: (nd[1], nd[0])):
        lines.append(f"  {dist:+d}  {node}  ({sub.nx.nodes[node]['type']}, {sub.nx.nodes[node].get('status', 'n/a')})")
    print("\n".join(lines))
    if args.svg:
        sub.to_svg(args.svg, metric="cosine" if comparison is not None else "status")
        print(f"wrote {args.svg}")
    return info


def run_isolate(args: argparse.Namespace) -> Any:
    """``%nbprec isolate TARGET OP [...]``: each op re-run on its own inputs; one result, or a list."""
    from nbprec.compare.isolate import isolate

    results = [isolate(args.target, op, dtype=args.dtype) for op in args.ops]
    for result in results:
        _display(result)
    return results[0] if len(results) == 1 else results


def diagnose_module() -> Any:
    """:mod:`nbprec.diagnose`, imported now; a :class:`NbprecError` in one line when this nbprec lacks it."""
    try:
        return importlib.import_module("nbprec.diagnose")
    except ImportError as exc:
        raise NbprecError(f"nbprec diagnose is not available in this nbprec installation ({exc})") from None


def run_diagnose(args: argparse.Namespace, text: str | None = None) -> Any:
    """``%nbprec diagnose FILE [...]`` (or ``%%nbprec diagnose`` on the log pasted in the cell): the findings."""
    module = diagnose_module()
    sources = [s for s in args.sources if s != "-"]
    if "-" in args.sources and text is None:
        raise NbprecError("a notebook has no standard input: give a file, or paste the log under %%nbprec diagnose")
    if text is not None:
        sources.append(text)
    result = module.diagnose(*sources)
    if args.json:
        print(result.to_json())
    else:
        _display(result)
    return result


#: command name -> the function that runs it in a notebook; other commands print what the command line prints.
HANDLERS = {
    "compare": run_compare,
    "info": run_info,
    "overflow": run_overflow,
    "ni": run_ni,
    "isolate": run_isolate,
    "diagnose": run_diagnose,
}

#: commands a notebook cannot run usefully, and what to do instead.
REFUSED = {
    "serve": "nbprec serve runs until stopped and would block this kernel: the dashboard is right here with "
    "%nbprec compare TARGET BENCH (or run nbprec serve in a terminal)",
}
