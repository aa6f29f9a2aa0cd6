"""Shareable reports: a parameterised notebook, executed, written as ``.ipynb`` and as one offline ``.html``.

:func:`write_report` compares two runs in a report notebook (summary, first failing op, worst ops, overflow,
error trend, subgraph and tensor drill-down of the culprit), executes it with nbclient storing the widget
state, and exports a single HTML file that renders the widgets from disk with the network off.
:func:`fetch_assets` gets the two JavaScript bundles no Python package ships from the npm registry.
:func:`serve` opens the explore dashboard as a standalone Voila page.

This package imports nbformat/nbclient/nbconvert (the ``report`` extra) only inside the functions that need
them, and never a widget library: the widgets are built inside the report's kernel.

Examples
--------
>>> from nbprec.report import write_report                                       # doctest: +SKIP
>>> r = write_report("runs/bf16", "runs/fp32", "report.html")                     # doctest: +SKIP
>>> r.html, r.notebook                                                            # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from nbprec.report.assets import Assets, AssetsError, fetch_assets, find_assets, missing_assets_message
from nbprec.report.html import HtmlExport, export_html
from nbprec.report.notebook import ReportError, build_report_notebook, execute_notebook
from nbprec.report.serve import DashboardServer, serve, write_dashboard_notebook


@dataclass(frozen=True)
class Report:
    """The files :func:`write_report` wrote, and how.

    Attributes
    ----------
    html, notebook
        The self-contained HTML page and the executed notebook.
    export
        Details of the HTML export (live widgets embedded or static fallbacks only).
    seconds
        Time taken to execute and export.
    """

    html: Path
    notebook: Path
    export: HtmlExport
    seconds: float

    @property
    def offline_widgets(self) -> bool:
        """Whether the live widgets are embedded in the HTML."""
        return self.export.offline_widgets


def write_report(
    target: str | os.PathLike[str],
    bench: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    rule: str = "default",
    title: str = "",
    depth: int = 4,
    notebook: str | os.PathLike[str] | None = None,
    assets: Assets | str | os.PathLike[str] | None = None,
    timeout: int = 900,
) -> Report:
    """Compare ``target`` with ``bench`` in the report notebook; write the executed ``.ipynb`` and ``.html``.

    Parameters
    ----------
    target, bench
        The target (low precision / NPU) and benchmark (float32) dumps.
    out
        The HTML file to write.
    rule
        Comparison rule preset (see :func:`nbprec.compare.preset_names`).
    title
        Report title.
    depth
        Subgraph depth on each side of the culprit.
    notebook
        Where to write the executed notebook (default: ``out`` with the suffix ``.ipynb``).
    assets
        The fetched JavaScript bundles or their folder (found automatically by default). Without them the
        HTML shows static tables and plots and says how to fetch the bundles.
    timeout
        Seconds a notebook cell may run.

    Returns
    -------
    Report

    Raises
    ------
    ReportError
        A dump cannot be found, or a cell of the report notebook failed (the message names the error).
    """
    start = time.monotonic()
    for label, path in (("target", target), ("benchmark", bench)):
        if not Path(path).exists():
            raise ReportError(f"{path}: the {label} dump does not exist")
    out = Path(out)
    nb_path = Path(notebook) if notebook is not None else out.with_suffix(".ipynb")
    if nb_path.resolve() == out.resolve():
        raise ReportError(f"{out}: the notebook and the HTML page would be the same file")
    nb = build_report_notebook(target, bench, rule=rule, title=title, depth=depth)
    out.parent.mkdir(parents=True, exist_ok=True)
    execute_notebook(nb, timeout=timeout)  # in an empty temporary folder: nothing beside `out` is imported
    import nbformat

    nb_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(nb_path))
    export = export_html(nb, out, assets=assets)
    return Report(out, nb_path, export, time.monotonic() - start)


__all__ = [
    "Assets",
    "AssetsError",
    "DashboardServer",
    "HtmlExport",
    "Report",
    "ReportError",
    "build_report_notebook",
    "execute_notebook",
    "export_html",
    "fetch_assets",
    "find_assets",
    "missing_assets_message",
    "serve",
    "write_dashboard_notebook",
    "write_report",
]
