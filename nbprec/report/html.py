"""Executed notebook -> one self-contained HTML file that renders its widgets offline (no CDN, no server).

nbprec's own nbconvert template (``templates/nbprec_offline``) inlines require.js, the
``@jupyter-widgets/html-manager`` embed bundle and the AMD bundle of every widget module the notebook's
widget state names; the state itself is embedded by nbconvert. Each widget output also carries its static
HTML/SVG fallback, which shows when the JavaScript is missing and is hidden once the live widget renders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.report.assets import (
    Assets,
    find_assets,
    missing_assets_message,
    named_amd,
    script_safe,
    widget_bundles,
    widget_modules,
)
from nbprec.safe_text import visible_text

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "nbprec_offline"
_STATE_MIME = "application/vnd.jupyter.widget-state+json"


@dataclass(frozen=True)
class HtmlExport:
    """What :func:`export_html` wrote.

    Attributes
    ----------
    path
        The HTML file.
    offline_widgets
        Whether the live widgets are embedded (False: static fallbacks only).
    modules
        Widget modules whose bundles were inlined.
    missing
        Why widgets are not live, or which modules had no installed bundle (empty when all is well).
    bytes
        Size of the file.
    """

    path: Path
    offline_widgets: bool
    modules: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    bytes: int = 0


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def export_html(
    nb: Any,
    out: str | os.PathLike[str],
    *,
    show_code: bool = False,
    assets: Assets | str | os.PathLike[str] | None = None,
    title: str | None = None,
) -> HtmlExport:
    """Write the executed notebook ``nb`` (a node or a path) as one self-contained HTML file.

    Parameters
    ----------
    nb
        An ``nbformat`` notebook node, or the path of an ``.ipynb``.
    out
        The HTML file to write.
    show_code
        Include the code cells (a report shows outputs only; a tutorial shows both).
    assets
        The fetched JavaScript (:func:`~nbprec.report.assets.find_assets` by default), or its folder.
    title
        Page title (default: the notebook's ``title`` metadata or its file name).

    Returns
    -------
    HtmlExport
        ``offline_widgets`` is False when the bundles are missing: the page then shows the static
        fallbacks with a notice saying how to fetch them.
    """
    nbformat = require("nbformat", "nbprec reports", extra="report")
    nbconvert = require("nbconvert", "nbprec reports", extra="report")
    name = "report"
    if not hasattr(nb, "cells"):
        name = Path(nb).stem
        nb = nbformat.read(str(nb), as_version=4)
    if not isinstance(assets, Assets):
        assets = find_assets(assets)
    state = nb.metadata.get("widgets", {}).get(_STATE_MIME, {})
    modules = widget_modules(state)
    bundles, missing_modules = widget_bundles(modules)
    missing: list[str] = []
    scripts: list[dict[str, str]] = []
    require_js = ""
    if assets is None and state:
        missing.append(missing_assets_message())
    elif assets is not None and state:
        require_js = script_safe(_read(assets.require_js))
        scripts.append({"name": "@jupyter-widgets/html-manager", "code": script_safe(_read(assets.embed_amd))})
        for module, path in bundles.items():
            scripts.append({"name": module, "code": script_safe(named_amd(_read(path), module))})
        missing += [f"no installed JavaScript bundle for widget module {m!r}" for m in missing_modules]
    offline = bool(scripts)
    notice = ""
    if state and not offline:
        notice = "Interactive widgets are not embedded in this page; static tables and plots are shown. " + " ".join(
            missing
        )
    exporter = nbconvert.HTMLExporter(
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        template_name=TEMPLATE_NAME,
        exclude_input=not show_code,
        exclude_input_prompt=not show_code,
        exclude_output_prompt=True,
    )
    if title is not None:
        nb.metadata["title"] = visible_text(title)
    resources = {
        "metadata": {"name": name},
        "nbprec": {"offline": offline, "scripts": scripts, "require_js": require_js, "notice": notice},
    }
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(visible_text(body), encoding="utf-8")  # bytes of names that were not UTF-8: \xNN
    return HtmlExport(path, offline, list(bundles), missing, path.stat().st_size)
