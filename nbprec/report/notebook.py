"""The parameterised report notebook: build it for two runs, execute it with nbclient (widget state stored).

The notebook's first code cell (tagged ``parameters``) holds the inputs as Python literals; every other cell
is fixed code. Paths and names reach the notebook only through :func:`repr`, never pasted into code or
markdown, so no user string can change what the notebook runs or how its markdown renders.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.errors import NbprecError
from nbprec.safe_text import visible_text

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
from nbprec.report import explorer, sections
from nbprec.report.subgraph import SubgraphOutput

target, bench = nbprec.open(TARGET), nbprec.open(BENCH)
comp = nbprec.compare(target, bench, rule=RULE, progress=None)
overflow_report = scan(target, bench=bench, rule=RULE)
culprit = sections.culprit(comp)
dash = nbprec.explore(comp, target=target, bench=bench, overflow_report=overflow_report, depth=DEPTH)
inspections = explorer.precompute_inspections(dash, explorer.inspected_ops(comp, culprit))
sections.header(comp, TITLE)"""

# (markdown heading, code) per section; the code displays one thing. Nothing here needs a kernel once the
# notebook has run: the explorer works in the page, the subgraph is a bare cytoscape widget (pan and zoom).
_SECTIONS = (
    ("## Summary", "sections.summary(comp)"),
    ("", "sections.view_html(dash.runs)  # the rank x step heatmap; None (nothing shown) for one step and rank"),
    ("## First failing op\nThe first op whose outputs fail the rule, and the first whose inputs pass while its "
     "outputs fail (where the error was introduced).", "sections.first_failing(comp)"),
    ("## Worst ops\nThe ops with the worst output metric.", "sections.worst_ops(comp)"),
    ("## Operator explorer\nMove the threshold, filter, sort and page the operator table; click a row or a point "
     "of the error trend to inspect the op. Everything works in this page, with no kernel: the statuses at each "
     "threshold were computed when the report was written; tensor details are included for the culprit, the "
     "named ops and the worst ops.",
     "explorer.explorer(comp, culprit=culprit, inspections=inspections)"),
    ("## Overflow\nNaN, inf and saturated values in the target run, and whether they changed the results.",
     "sections.overflow(overflow_report)"),
    ("## Subgraph of the culprit\nThe culprit's neighbourhood in the operator graph, coloured by metric: drag to "
     "pan, scroll to zoom, click a node to select its op in the explorer above.",
     "op_graph = OpGraph.from_dump(target).attach_metrics(comp)\n"
     "if culprit is None:\n    display(sections.note('No failing op: no subgraph to draw.'))\nelse:\n"
     "    graph = SubgraphOutput(op_graph, culprit, depth=DEPTH, metric=explorer.slider_metric(comp))\n"
     "    display(sections.Html(graph.legend_html()))\n    display(graph)"),
    ("## Tensor drill-down of the culprit\nThe culprit's node info, then its worst output tensor: statistics, "
     "histograms, target against benchmark, worst elements.",
     "if culprit is None:\n    display(sections.note('No failing op: nothing to drill into.'))\nelse:\n"
     "    display(sections.node_text(node_info(culprit, target, bench, comp, graph=op_graph)))\n"
     "    display(sections.Html(inspections[culprit]))"),
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
    nb.metadata["title"] = visible_text(title or "nbprec precision report")
    return nb


def execute_notebook(nb: Any, *, cwd: str | os.PathLike[str] | None = None, timeout: int = 900) -> Any:
    """Run every cell of ``nb`` in a fresh kernel, storing the widget state in its metadata.

    Parameters
    ----------
    nb
        The notebook (changed in place: outputs and widget state).
    cwd
        The kernel's working directory. By default a new empty temporary folder, never the folder a report is
        written to: a kernel imports from its working directory first, so a folder named ``nbprec`` there (a
        clone, ``~/nbprec``) would shadow the installed package. The kernel also runs with
        ``PYTHONSAFEPATH=1``, so that neither Python nor IPython puts the working directory on ``sys.path``.
    timeout
        Seconds a cell may run.

    The kernel process's own standard error (its log: what the cells write there is in their outputs too) goes
    to a file, shown on this process's standard error only when the run fails: a kernel shutting down can log a
    traceback of its own (ipykernel 7.4, now and then: ``ZMQError: Socket operation on non-socket`` from a
    control reply sent as its sockets close) that says nothing about the notebook.

    Raises
    ------
    ReportError
        A cell raised; the message names the cell and the error (plain text, no terminal colour codes).
    """
    nbclient = require("nbclient", "nbprec reports", extra="report")
    require("ipykernel", "nbprec reports", extra="report")
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="nbprec-kernel-") as tmp:
        config = Config()
        if os.name == "posix":  # local socket files instead of TCP ports: nothing to eavesdrop on, no warning
            config.KernelManager.transport = "ipc"
            config.KernelManager.ip = os.path.join(tmp, "kernel")
        client = nbclient.NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=KERNEL,
            store_widget_state=True,
            config=config,
            resources={"metadata": {"path": str(cwd or tmp)}},
        )
        log_path = os.path.join(tmp, "kernel.log")
        with open(log_path, "wb") as log:
            try:
                client.execute(env={**os.environ, "PYTHONSAFEPATH": "1"}, stderr=log)
            except Exception as exc:
                _show_kernel_log(log_path)
                if isinstance(exc, nbclient.exceptions.CellExecutionError):
                    raise ReportError(f"the report notebook failed{_failed_cell(nb)}: {cell_error_text(exc)}") from exc
                raise
    return nb


#: the most of the kernel's log shown after a failed run (its end: a cell that wrote much to stderr fills it)
KERNEL_LOG_SHOWN = 20_000


def _show_kernel_log(path: str) -> None:
    """The end of the kernel's log (its process's standard error) on this process's standard error, after a failed
    run (at most :data:`KERNEL_LOG_SHOWN` bytes)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - KERNEL_LOG_SHOWN))
            text = handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return
    if text:
        cut = f" (its last {KERNEL_LOG_SHOWN:,} bytes of {size:,})" if size > KERNEL_LOG_SHOWN else ""
        sys.stderr.write(f"the report kernel's log{cut}:\n{text}\n")
        sys.stderr.flush()


#: ANSI terminal escape sequences (colours, cursor moves), as IPython's tracebacks carry them
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes."""
    return _ANSI.sub("", text)


def _failed_cell(nb: Any) -> str:
    """`` in cell N (`its first line`)`` for the first cell holding an error output, else ``""``."""
    for number, cell in enumerate(nb.cells, 1):
        if any(out.get("output_type") == "error" for out in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            return f" in cell {number} (`{first[:60]}`)"
    return ""


def cell_error_text(exc: BaseException) -> str:
    """A failed cell's error in one line of plain text: ``Name: value``, else the last lines of the message."""
    ename, evalue = getattr(exc, "ename", ""), getattr(exc, "evalue", "")
    if ename:
        return strip_ansi(f"{ename}: {evalue}" if evalue else ename).strip()
    lines = [line for line in strip_ansi(str(exc)).splitlines() if line.strip()]
    return " | ".join(lines[-3:]) if lines else type(exc).__name__
