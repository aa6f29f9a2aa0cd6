"""The parameterised report notebook: build it for two runs, execute it with nbclient (widget state stored).

The notebook's first code cell (tagged ``parameters``) holds the inputs as Python literals; every other cell
is fixed code. Paths and names reach the notebook only through :func:`repr`, never pasted into code or
markdown, so no user string can change what the notebook runs or how its markdown renders.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.errors import NbprecError

#: Kernel the notebooks run on (the interpreter running nbprec, via ipykernel's native kernel).
KERNEL = "python3"


class ReportError(NbprecError):
    """A report could not be built: a notebook cell failed, or a path is unusable."""


def _nbformat() -> Any:
    return require("nbformat", "nbprec reports", extra="report")


def parameters_source(params: dict[str, Any]) -> str:
    """The ``parameters`` cell: one ``NAME = <repr>`` line per parameter (plain literals only)."""
    lines = ["# Parameters (nbprec report): edit and re-run to report on other runs"]
    for name, value in params.items():
        if not name.isidentifier() or not isinstance(value, (str, int, float, bool, type(None))):
            raise ReportError(f"report parameter {name!r}: must be an identifier bound to a plain literal")
        lines.append(f"{name.upper()} = {value!r}")
    return "\n".join(lines)


_SETUP = """\
import nbprec
from nbprec.graph import OpGraph, node_info
from nbprec.overflow import scan
from nbprec.report import sections

target, bench = nbprec.open(TARGET), nbprec.open(BENCH)
comp = nbprec.compare(target, bench, rule=RULE, progress=None)
overflow_report = scan(target, bench=bench, rule=RULE)
culprit = sections.culprit(comp)
dash = nbprec.explore(comp, target=target, bench=bench, overflow_report=overflow_report, depth=DEPTH)
sections.header(comp, TITLE)"""

# (markdown heading, code) per section; the code displays one thing.
_SECTIONS = (
    ("## Summary", "sections.summary(comp)"),
    ("## First failing op\nThe first op whose outputs fail the rule, and the first whose inputs pass while its "
     "outputs fail (where the error was introduced).", "sections.first_failing(comp)"),
    ("## Worst ops\nThe ops with the worst output metric; below, the whole operator table (failing rows "
     "highlighted, the culprit selected).", "sections.worst_ops(comp)"),
    ("", "dash.table"),
    ("## Overflow\nNaN, inf and saturated values in the target run, and whether they changed the results.",
     "sections.overflow(overflow_report)"),
    ("## Error trend\nThe per-op metric along execution order: where the error appears and whether it grows.",
     "dash.trend"),
    ("## Subgraph of the culprit\nThe culprit's neighbourhood in the operator graph, coloured by metric.",
     "dash.subgraph"),
    ("## Tensor drill-down of the culprit\nThe culprit's node info, then its worst output tensor: statistics, "
     "histograms, target against benchmark, worst elements.",
     "if culprit is None:\n    display(sections.note('No failing op: nothing to drill into.'))\nelse:\n"
     "    graph = OpGraph.from_dump(target)\n    graph.attach_metrics(comp)\n"
     "    display(sections.node_text(node_info(culprit, target, bench, comp, graph=graph)))\ndash.inspector"),
)  # fmt: skip


def build_report_notebook(
    target: str | os.PathLike[str],
    bench: str | os.PathLike[str],
    *,
    rule: str = "default",
    title: str = "",
    depth: int = 4,
) -> Any:
    """The report notebook (an ``nbformat`` node) for ``target`` against ``bench``, not executed.

    Parameters
    ----------
    target, bench
        The two dumps (paths; made absolute).
    rule
        Comparison rule preset.
    title
        Report title (default: "nbprec precision report").
    depth
        Subgraph depth on each side of the culprit.
    """
    nbf = _nbformat()
    v4 = nbf.v4
    params = {
        "target": str(Path(target).resolve()),
        "bench": str(Path(bench).resolve()),
        "rule": rule,
        "title": title,
        "depth": int(depth),
    }
    param_cell = v4.new_code_cell(parameters_source(params))
    param_cell.metadata["tags"] = ["parameters"]
    cells = [
        param_cell,
        v4.new_code_cell(_SETUP),
    ]
    for heading, code in _SECTIONS:
        if heading:
            cells.append(v4.new_markdown_cell(heading))
        cells.append(v4.new_code_cell(code))
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["title"] = title or "nbprec precision report"
    return nb


def execute_notebook(nb: Any, *, cwd: str | os.PathLike[str] | None = None, timeout: int = 900) -> Any:
    """Run every cell of ``nb`` in a fresh kernel, storing the widget state in its metadata.

    Raises
    ------
    ReportError
        A cell raised; the message names the cell and the error.
    """
    nbclient = require("nbclient", "nbprec reports", extra="report")
    require("ipykernel", "nbprec reports", extra="report")
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=KERNEL,
        store_widget_state=True,
        resources={"metadata": {"path": str(cwd or Path.cwd())}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        raise ReportError(f"the report notebook failed: {_short_error(exc)}") from exc
    return nb


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    tail = [line for line in text if line.strip()][-3:]
    return " | ".join(tail) if tail else type(exc).__name__
